"""The changelog rows every `changefeed` data source input produces (docs/spark.md).

One schema for all inputs, so a notebook or job does not care where changes came from: ``kind``,
``op``, ``schema``, ``table``, ``commit_ts``, ``key`` (JSON of the handle-key columns), ``after`` /
``before`` (JSON objects in the JSONL value encoding of docs/events.md), ``ddl`` and
``source_position`` (JSON). With a single table selected, ``after``/``before`` become typed
structs built from the table's columns (`TypedImages`). Pure Python apart from the Spark type
objects, so the conversion runs in executors and is unit-testable without a JVM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError
from ..model import ABSENT, Column, DDLEvent, Event, Op, Resolved, RowChange, TableSchema
from ..model.arrow import arrow_type
from ..model.jsonl import _value_to_json, dumps_event
from ..model.rowblock import RowBlock
from ..model.schemacache import PlanCache
from ..model.tablefilter import TableFilter

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

#: Column names of the changelog, in order (``event`` is appended when the ``events`` option is on).
COLUMNS = ("kind", "op", "schema", "table", "commit_ts", "key", "after", "before", "ddl", "source_position")
#: Rows per record batch a changelog output hands to Spark (`ChangelogRows.batches`).
BATCH_ROWS = 4096
#: The largest commit ts a Spark ``long`` holds: physical ms < 2**45, i.e. commit times before 3084.
MAX_SIGNED_TS = (1 << 63) - 1


def changelog_schema(images: StructType | None = None, with_event: bool = False) -> StructType:
    """The changelog's Spark schema; ``images`` replaces the JSON ``after``/``before`` with a struct."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: PLC0415

    image_type: DataType = images if images is not None else StringType()
    fields = [
        StructField("kind", StringType(), False),
        StructField("op", StringType(), True),
        StructField("schema", StringType(), True),
        StructField("table", StringType(), True),
        StructField("commit_ts", LongType(), False),
        StructField("key", StringType(), True),
        StructField("after", image_type, True),
        StructField("before", image_type, True),
        StructField("ddl", StringType(), True),
        StructField("source_position", StringType(), True),
    ]
    if with_event:
        fields.append(StructField("event", StringType(), True))
    return StructType(fields)


def spark_type(arrow: pa.DataType) -> DataType:
    """Spark type of a model Arrow type: unsigned -> next wider signed (uint64 -> decimal(20,0)),
    decimal(p,s) up to 38 digits, wider decimals as their text."""
    from pyspark.sql import types as T  # noqa: N812, PLC0415

    simple = {
        pa.int8(): T.ByteType(),
        pa.int16(): T.ShortType(),
        pa.int32(): T.IntegerType(),
        pa.int64(): T.LongType(),
        pa.uint8(): T.ShortType(),
        pa.uint16(): T.IntegerType(),
        pa.uint32(): T.LongType(),
        pa.uint64(): T.DecimalType(20, 0),
        pa.float32(): T.FloatType(),
        pa.float64(): T.DoubleType(),
        pa.string(): T.StringType(),
        pa.binary(): T.BinaryType(),
    }
    if arrow in simple:
        return simple[arrow]
    if pa.types.is_decimal128(arrow):
        return T.DecimalType(arrow.precision, arrow.scale)
    return T.StringType()  # decimal256 (more than 38 digits) and anything else: text


def spark_arrow_array(array: pa.Array, target: pa.DataType) -> pa.Array:
    """A column in its model Arrow type (`model.arrow.arrow_type`) as Arrow of its Spark type
    (`spark_type`): what `TypedImages` makes of the values, a column at a time."""
    if array.type == target:
        return array
    if pa.types.is_string(target) and pa.types.is_decimal(array.type):  # decimal256: its exact text
        return pa.array([None if v is None else format(v, "f") for v in array.to_pylist()], type=target)
    return array.cast(target)  # unsigned -> the next wider signed type, uint64 -> decimal(20, 0): exact


def image_struct(table: TableSchema) -> StructType:
    from pyspark.sql.types import StructField, StructType  # noqa: PLC0415

    return StructType([StructField(c.name, spark_type(arrow_type(c)), True) for c in table.columns])


def check_ts(ts: int) -> int:
    if ts > MAX_SIGNED_TS:
        raise ConfigError(f"commit ts {ts} does not fit Spark's signed 64-bit long (commit time after year 3084?)")
    return ts


def _json_image(table: TableSchema, image: tuple[Any, ...] | None) -> str | None:
    if image is None:
        return None
    obj = {c.name: _value_to_json(c, v) for c, v in zip(table.columns, image, strict=True) if v is not ABSENT}
    return orjson.dumps(obj).decode()


def _key_json(row: RowChange) -> str | None:
    ts = row.table_schema
    if not ts.handle_key:
        return None
    image = row.image
    return _key_text([ts.columns[i] for i in ts.handle_key], [image[i] for i in ts.handle_key])


def _key_text(columns: Sequence[Column], values: Sequence[Any]) -> str:
    """The handle key's JSON object: its ``columns`` with their ``values``."""
    return orjson.dumps({c.name: _value_to_json(c, v) for c, v in zip(columns, values, strict=True)}).decode()


def _key_texts(table: TableSchema, arrays: Sequence[pa.Array], n: int) -> pa.Array:
    """`_key_json` of each row, from its columns."""
    if not table.handle_key:
        return pa.nulls(n, pa.string())
    if all(pa.types.is_integer(arrays[i].type) for i in table.handle_key):
        # The JSON of integers is their digits: the texts made a column at a time.
        parts: list[Any] = []
        for k, i in enumerate(table.handle_key):
            name = orjson.dumps(table.columns[i].name).decode()
            parts += [("{" if k == 0 else ",") + name + ":", pc.fill_null(arrays[i].cast(pa.string()), "null")]
        return pc.binary_join_element_wise(*parts, "}", "")
    columns = [table.columns[i] for i in table.handle_key]
    values = [arrays[i].to_pylist() for i in table.handle_key]
    return pa.array([_key_text(columns, key) for key in zip(*values, strict=True)], type=pa.string())


def _position(pos: Any) -> str | None:
    return orjson.dumps(dict(pos)).decode() if pos is not None else None


class TypedImages:
    """Row images -> tuples for the selected table's struct, matched by column name.

    Rows of other schema versions map by name (a dropped column is NULL); values are converted to
    what the Spark type takes (uint64 -> Decimal, wide DECIMAL -> text).
    """

    def __init__(self, table: TableSchema) -> None:
        self.table = table
        self.names = [c.name for c in table.columns]
        self.convert: list[Callable[[Any], Any]] = [_converter(arrow_type(c)) for c in table.columns]
        self._plans: PlanCache[list[int | None]] = PlanCache(self._plan)  # per source shape: its position of each name

    def __call__(self, source: TableSchema, image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        if image is None:
            return None
        plan = self.positions(source)
        out = []
        for at, conv in zip(plan, self.convert, strict=True):
            v = None if at is None else image[at]
            out.append(None if v is None or v is ABSENT else conv(v))
        return tuple(out)

    def positions(self, source: TableSchema) -> list[int | None]:
        """Where each of the struct's columns is in ``source``'s images (None: not there)."""
        return self._plans.get(source)

    def _plan(self, source: TableSchema) -> list[int | None]:
        index = source.column_index
        return [index.get(n) for n in self.names]


def _converter(arrow: pa.DataType) -> Callable[[Any], Any]:
    if arrow == pa.uint64():
        return lambda v: Decimal(int(v))
    if pa.types.is_integer(arrow):
        return int
    if pa.types.is_floating(arrow):
        return float
    if pa.types.is_decimal128(arrow):
        return lambda v: v if isinstance(v, Decimal) else Decimal(str(v))
    if pa.types.is_decimal(arrow):
        return lambda v: format(v, "f") if isinstance(v, Decimal) else str(v)
    if pa.types.is_binary(arrow):
        return lambda v: bytes(v) if not isinstance(v, str) else v.encode()
    return lambda v: v if isinstance(v, str) else format(v, "f") if isinstance(v, Decimal) else str(v)


class ChangelogRows:
    """Model events -> changelog tuples, with the ``filter`` rules and single-table selection applied."""

    def __init__(
        self,
        rules: Iterable[str] = (),
        table: tuple[str, str] | None = None,
        typed: TableSchema | None = None,
        with_event: bool = False,
    ) -> None:
        rules = list(rules)
        self.filter = TableFilter(rules) if rules else None
        self.table = table
        self.typed = TypedImages(typed) if typed is not None else None
        self.with_event = with_event

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema PySpark takes `RecordBatch`es of from a data source's ``read``: its own
        mapping of the changelog's Spark schema (it checks the batches against it, nullability too)."""
        from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

        images = image_struct(self.typed.table) if self.typed is not None else None
        return to_arrow_schema(changelog_schema(images, self.with_event), timezone="UTC")

    def batch(self, rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
        """Changelog tuples (`row`) as one record batch of `arrow_schema`."""
        schema = self.arrow_schema
        columns = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def inserts_batch(self, table: TableSchema, commit_ts: int, arrays: Sequence[pa.Array]) -> pa.RecordBatch | None:
        """INSERTs of ``table``'s rows at ``commit_ts``, given as columns in their model Arrow types
        (`model.arrow.arrow_type`), as the record batch their `row` tuples make; None when the
        table is filtered out or the ``event`` column is on (its JSON is made per event).

        The typed images are cast a column at a time; the JSON texts (key, untyped images) are made
        per row by `row`'s own functions, from the columns' values.
        """
        if self.with_event or not self.keeps(table.schema, table.table):
            return None
        n = len(arrays[0]) if arrays else 0
        schema = self.arrow_schema
        after = schema.field("after").type
        if self.typed is not None:
            plan = self.typed.positions(table)
            children = [
                pa.nulls(n, f.type) if at is None else spark_arrow_array(arrays[at], f.type)
                for at, f in zip(plan, after, strict=True)
            ]
            images: pa.Array = pa.StructArray.from_arrays(children, fields=list(after))
        else:
            values = [a.to_pylist() for a in arrays]
            images = pa.array([_json_image(table, image) for image in zip(*values, strict=True)], type=pa.string())
        columns = {
            "kind": pa.repeat("row", n),
            "op": pa.repeat(Op.INSERT.value, n),
            "schema": pa.repeat(table.schema, n),
            "table": pa.repeat(table.table, n),
            "commit_ts": pa.repeat(check_ts(commit_ts), n),
            "key": _key_texts(table, arrays, n),
            "after": images,
            "before": pa.nulls(n, after),
            "ddl": pa.nulls(n, pa.string()),
            "source_position": pa.nulls(n, pa.string()),
        }
        return pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)

    def keeps(self, schema: str, table: str) -> bool:
        if self.table is not None and (schema, table) != self.table:
            return False
        if self.filter is None:
            return True
        return self.filter.match(schema, table) if table else self.filter.match_schema(schema)

    def rows(self, events: Iterable[Event]) -> Iterator[tuple[Any, ...]]:
        for ev in events:
            row = self.row(ev)
            if row is not None:
                yield row

    def batches(self, rows: Iterable[tuple[Any, ...]], size: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Changelog tuples as record batches of up to ``size`` rows (`batch`): what a data source's
        ``read`` yields, since PySpark converts tuples value by value in Python and passes batches
        on after a schema check (~1-3 µs a row less, bench/RESULTS.md)."""
        chunk: list[tuple[Any, ...]] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= size:
                yield self.batch(chunk)
                chunk = []
        if chunk:
            yield self.batch(chunk)

    def row(self, ev: Event, position: Any = None) -> tuple[Any, ...] | None:
        """The changelog tuple of one event, or None when the event is filtered out."""
        pos = ev.position if position is None else position
        out: tuple[Any, ...]
        if isinstance(ev, RowChange):
            ts = ev.table_schema
            if not self.keeps(ts.schema, ts.table):
                return None
            if self.typed is not None:
                after: Any = self.typed(ts, ev.new)
                before: Any = self.typed(ts, ev.old)
            else:
                after, before = _json_image(ts, ev.new), _json_image(ts, ev.old)
            out = (
                "row",
                ev.op.value,
                ts.schema,
                ts.table,
                check_ts(ev.commit_ts),
                _key_json(ev),
                after,
                before,
                None,
                _position(pos),
            )
        elif isinstance(ev, DDLEvent):
            if not self.keeps(ev.schema, ev.table):
                return None
            out = ("ddl", None, ev.schema, ev.table, check_ts(ev.commit_ts), None, None, None, ev.query, _position(pos))
        elif isinstance(ev, Resolved):
            out = ("resolved", None, None, None, check_ts(ev.commit_ts), None, None, None, None, _position(pos))
        else:  # pragma: no cover - the model has no other events
            raise TypeError(f"not an event: {ev!r}")
        if self.with_event:
            return (*out, dumps_event(ev).decode().rstrip("\n"))
        return out


class EventFilter:
    """The ``filter``/``table`` options as a per-event test, decided once per table."""

    def __init__(self, changelog: ChangelogRows) -> None:
        self.changelog = changelog
        self._tables: dict[tuple[str, str], bool] = {}

    @classmethod
    def of(cls, changelog: ChangelogRows) -> EventFilter | None:
        """The filter of ``changelog``'s rules, None when it has none (every event is kept)."""
        return cls(changelog) if changelog.filter is not None or changelog.table is not None else None

    def __call__(self, ev: Event) -> bool:
        if isinstance(ev, RowChange):
            return self.keeps(ev.table_schema.schema, ev.table_schema.table)
        if isinstance(ev, DDLEvent):
            return self.keeps(ev.schema, ev.table)
        return True

    def events(self, events: Iterable[Event | RowBlock]) -> list[Event | RowBlock]:
        """``events`` without those of filtered tables (rows of a `RowBlock` included)."""
        out: list[Event | RowBlock] = []
        for ev in events:
            if isinstance(ev, RowBlock):
                block = ev.only(lambda t: self.keeps(t.schema, t.table))
                if block is not None:
                    out.append(block)
            elif self(ev):
                out.append(ev)
        return out

    def keeps(self, schema: str, table: str) -> bool:
        key = (schema, table)
        kept = self._tables.get(key)
        if kept is None:
            kept = self._tables[key] = self.changelog.keeps(schema, table)
        return kept


def parse_rules(text: str | None) -> list[str]:
    """The ``filter`` option: TiDB table-filter rules separated by commas (``db.*,!db.tmp*``)."""
    return [r.strip() for r in (text or "").split(",") if r.strip()]


def parse_table(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    schema, sep, table = text.partition(".")
    if not sep or not schema or not table:
        raise ConfigError(f"option table must be schema.table, got {text!r}")
    return schema, table
