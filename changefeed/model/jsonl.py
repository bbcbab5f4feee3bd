"""The JSONL interchange form of the model: one event per line, lossless (docs/events.md).

Used by ``changefeed capture``/``encode``/``decode`` and by people piping events. Row lines carry
each column's definition beside its value, so a line stands alone; readers share one
`TableSchema` among lines with the same definitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import IO, Any, cast

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import EventFormatError, clip
from .arrow import arrow_type
from .events import DDLEvent, Event, Op, Position, Resolved, RowChange
from .gofloat import format_json
from .rowblock import RowBlock, Segment, TableRows
from .schema import Column, Index, TableSchema
from .types import (
    CHARSET_TYPES,
    FLOAT_TYPES,
    INTEGER_BITS,
    INTEGER_TYPES,
    TEXT_VALUE_TYPES,
    UINT_VALUE_TYPES,
    ColumnFlag,
    TypeCode,
    parse_type_name,
)
from .values import ABSENT, b64decode, b64encode, check_value

# ---------------------------------------------------------------- writing


def _value_to_json(column: Column, value: Any) -> Any:
    if value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return orjson.Fragment(format_json(value, float32=column.type_code is TypeCode.FLOAT))
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes | bytearray | memoryview):
        return b64encode(bytes(value))
    raise TypeError(f"column {column.name!r}: cannot write {value!r} as JSON")


def column_definition(column: Column) -> dict[str, Any]:
    """A column's definition as a JSON object (no value); defaults are left out."""
    out: dict[str, Any] = {"name": column.name, "type": column.type_name, "flags": int(column.flags)}
    if column.type_code in CHARSET_TYPES:
        out["charset"] = column.charset
        out["collation"] = column.collation
    if column.length is not None:
        out["length"] = column.length
    if column.decimal is not None:
        out["decimal"] = column.decimal
    if column.elements:
        out["elements"] = list(column.elements)
    if column.zerofill and column.type_code is not TypeCode.YEAR:
        out["zerofill"] = True
    if column.default is not None:
        out["default"] = column.default
    if column.column_id is not None:
        out["column_id"] = column.column_id
    return out


def table_schema_to_json(ts: TableSchema) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": ts.schema,
        "table": ts.table,
        "table_id": ts.table_id,
        "version": ts.version,
        "columns": [column_definition(c) for c in ts.columns],
        "indexes": [_index_to_json(i) for i in ts.indexes],
    }
    if ts.partitioned:
        out["partitioned"] = True
    return out


def _index_to_json(idx: Index) -> dict[str, Any]:
    return {"name": idx.name, "columns": list(idx.columns), "primary": idx.primary, "unique": idx.unique}


def event_to_json(event: Event) -> dict[str, Any]:
    """The JSON object of one event (see docs/events.md)."""
    if isinstance(event, RowChange):
        ts = event.table_schema
        out: dict[str, Any] = {
            "kind": "row",
            "op": event.op.value,
            "schema": ts.schema,
            "table": ts.table,
            "table_id": ts.table_id,
            "schema_version": ts.version,
            "commit_ts": event.commit_ts,
        }
        for key in ("start_ts", "partition_id", "row_id"):
            val = getattr(event, key)
            if val:
                out[key] = val
        if ts.partitioned:
            out["partitioned"] = True
        columns = []
        for i, col in enumerate(ts.columns):
            obj = column_definition(col)
            if event.new is not None and event.new[i] is not ABSENT:
                obj["value"] = _value_to_json(col, event.new[i])
            columns.append(obj)
        out["columns"] = columns
        if ts.indexes:
            out["indexes"] = [_index_to_json(i) for i in ts.indexes]
        if event.old is not None:
            out["old"] = [
                {"name": col.name, "value": _value_to_json(col, v)}
                for col, v in zip(ts.columns, event.old, strict=True)
                if v is not ABSENT
            ]
    elif isinstance(event, DDLEvent):
        out = {
            "kind": "ddl",
            "schema": event.schema,
            "table": event.table,
            "query": event.query,
            "ddl_type": int(event.ddl_type),
            "commit_ts": event.commit_ts,
        }
        if event.start_ts:
            out["start_ts"] = event.start_ts
        if event.table_schema is not None:
            out["table_schema"] = table_schema_to_json(event.table_schema)
        if event.pre_table_schema is not None:
            out["pre_table_schema"] = table_schema_to_json(event.pre_table_schema)
    elif isinstance(event, Resolved):
        out = {"kind": "resolved", "commit_ts": event.commit_ts}
    else:
        raise TypeError(f"not an event: {event!r}")
    if event.position is not None:
        out["position"] = dict(event.position)
    return out


def dumps_event(event: Event) -> bytes:
    """One JSONL line (with the trailing newline)."""
    return orjson.dumps(event_to_json(event), option=orjson.OPT_APPEND_NEWLINE)


def dumps_inserts(
    table: TableSchema,
    commit_ts: int,
    images: Sequence[tuple[Any, ...]],
    positions: Sequence[Position | None] | None = None,
) -> bytes:
    """Many INSERTs of one table at one commit ts as ONE line (kind ``inserts``): the schema once, then
    each row's values in column order.

    Why: a snapshot chunk's rows share both, and a row line repeats the table's definition (~1 KB
    and ~30 µs a 10-column row to write, as much to read: bench/RESULTS.md). Values are written as
    in a row line, except FLOAT/DOUBLE: orjson's own shortest round-trip digits instead of Go's
    formatting (~4 µs a value less; the value read back is the same). `EventReader.read` gives
    back the same `RowChange`s a row line each would. ``positions``: each row's, written as one
    ``position`` where all are the same, else as ``positions`` (one per row).
    """
    cols = table.columns
    as_is = [c.type_code in FLOAT_TYPES for c in cols]
    rows = [
        [
            v if plain and (v is None or v - v == 0) else _value_to_json(c, v)  # v - v: NaN and inf are not 0
            for c, plain, v in zip(cols, as_is, image, strict=True)
        ]
        for image in images
    ]
    return dumps_insert_values(table, commit_ts, rows, positions)


def dumps_insert_values(
    table: TableSchema,
    commit_ts: int,
    rows: Sequence[Sequence[Any]] | orjson.Fragment,
    positions: Sequence[Position | None] | None = None,
) -> bytes:
    """`dumps_inserts` of rows whose values are in their JSON form already (what `_value_to_json`
    makes of them: DECIMAL as fixed-point text, binary as base64; finite floats as they are), or
    of their JSON array made already (a `orjson.Fragment`; no ``positions`` then)."""
    obj = {"kind": "inserts", "commit_ts": commit_ts, "table_schema": table_schema_to_json(table), "rows": rows}
    if positions:
        if isinstance(rows, orjson.Fragment):
            raise ValueError("positions need the rows as values, not as their JSON")
        if len(positions) != len(rows):
            raise ValueError(f"{len(positions)} positions for {len(rows)} rows")
        first = positions[0]
        if any(q != first for q in positions):
            obj["positions"] = [None if q is None else dict(q) for q in positions]
        elif first is not None:
            obj["position"] = dict(first)
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def dumps_events(events: Iterable[Event]) -> bytes:
    """``events`` as JSONL, in order: each run of two or more INSERTs of one table at one commit ts
    that an ``inserts`` line carries as they are (`dumps_inserts`, positions kept) as one such
    line, anything else a line each (`dumps_event`). Read back by `EventReader.read` as the same events.

    Why: a row line repeats its table's definition; a snapshot chunk's rows, and the rows the apply
    job's merge state keeps between batches, are mostly such runs.
    """
    parts: list[bytes] = []
    run: list[RowChange] = []

    def close() -> None:
        if len(run) == 1:
            parts.append(dumps_event(run[0]))
        elif run:
            images = [cast("tuple[Any, ...]", row.new) for row in run]
            parts.append(dumps_inserts(run[0].table_schema, run[0].commit_ts, images, [r.position for r in run]))
        run.clear()

    for event in events:
        if _plain_insert(event):
            row = cast("RowChange", event)
            if run and (row.table_schema is not run[0].table_schema or row.commit_ts != run[0].commit_ts):
                close()
            run.append(row)
            continue
        close()
        parts.append(dumps_event(event))
    close()
    return b"".join(parts)


def _plain_insert(event: Event) -> bool:
    """An INSERT an ``inserts`` line carries as it is: a whole new image, nothing else a row line has."""
    return (
        isinstance(event, RowChange)
        and event.op is Op.INSERT
        and event.old is None
        and event.new is not None
        and not (event.start_ts or event.partition_id or event.row_id)
        and ABSENT not in event.new
    )


def write_events(events: Iterable[Event], out: IO[bytes]) -> int:
    n = 0
    for event in events:
        out.write(dumps_event(event))
        n += 1
    return n


# ---------------------------------------------------------------- reading


class EventReader:
    """Parses JSONL lines into events, sharing TableSchema objects between lines."""

    def __init__(self, source: str = "<stdin>") -> None:
        self.source = source
        self._schemas: dict[Any, TableSchema] = {}

    def read(self, stream: IO[bytes] | Iterable[bytes]) -> Iterator[Event]:
        """Every event of every line (an ``inserts`` line holds many, `dumps_inserts`)."""
        for lineno, line in enumerate(stream, 1):
            if line.strip():
                yield from self.parse_all(line, where=f"{self.source}:{lineno}")

    def parse(self, line: bytes | str, where: str | None = None) -> Event:
        """The event of one line (an ``inserts`` line, which holds many, is read by `read` / `parse_all`)."""
        events = self.parse_all(line, where)
        if len(events) != 1:
            raise EventFormatError(f"the line holds {len(events)} events, not one", where=where)
        return events[0]

    def read_blocks(self, stream: IO[bytes] | Iterable[bytes]) -> Iterator[Event | RowBlock]:
        """`read`, but an ``inserts`` line comes as one `RowBlock` of its rows (the columnar
        consumers' form: what `expand_blocks` makes of it are `read`'s events)."""
        for lineno, line in enumerate(stream, 1):
            if line.strip():
                yield from self._parse(line, f"{self.source}:{lineno}", blocks=True)

    def parse_all(self, line: bytes | str, where: str | None = None) -> list[Event]:
        """The events of one line."""
        return cast("list[Event]", self._parse(line, where, blocks=False))

    def _parse(self, line: bytes | str, where: str | None, blocks: bool) -> list[Event | RowBlock]:
        """The events of one line; ``blocks``: an ``inserts`` line's rows as one `RowBlock`."""
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise EventFormatError(f"invalid JSON: {exc}", where=where) from None
        if not isinstance(obj, dict):
            raise EventFormatError("an event line must be a JSON object", where=where)
        try:
            if obj.get("kind") == "inserts":
                block = self._inserts_block(obj) if blocks else None
                return [block] if block is not None else list(self._inserts(obj))
            return [self._event(obj)]
        except EventFormatError as exc:
            raise EventFormatError(exc.message, where=where) from None
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            detail = f"missing member {clip(exc.args[0])}" if isinstance(exc, KeyError) else str(exc)
            raise EventFormatError(f"bad {obj.get('kind', 'event')} line: {detail}", where=where) from None

    def _inserts(self, obj: dict[str, Any]) -> list[Event]:
        table = self._table_schema(obj["table_schema"])
        commit_ts = _uint(obj["commit_ts"], "commit_ts")
        rows = obj["rows"]
        cols = table.columns
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == len(cols) for r in rows):
            raise EventFormatError(f"an inserts line needs 'rows': lists of {len(cols)} values")
        positions = obj.get("positions")
        if positions is None:
            positions = [obj.get("position")] * len(rows)
        elif not (
            isinstance(positions, list)
            and len(positions) == len(rows)
            and all(q is None or isinstance(q, dict) for q in positions)
        ):
            raise EventFormatError(f"an inserts line's 'positions' must be {len(rows)} objects or nulls")
        return [
            RowChange(
                Op.INSERT,
                table,
                commit_ts,
                new=tuple(_value_from_json(c, v) for c, v in zip(cols, r, strict=True)),
                position=position,
            )
            for r, position in zip(rows, positions, strict=True)
        ]

    def _inserts_block(self, obj: dict[str, Any]) -> RowBlock | None:
        """An ``inserts`` line's rows as one `RowBlock`, a column at a time; None where a value is
        not what `_inserts` would take as it is (`_inserts` then reads the line, or says why not)."""
        table = self._table_schema(obj["table_schema"])
        commit_ts = _uint(obj["commit_ts"], "commit_ts")
        rows = obj["rows"]
        cols = table.columns
        if not isinstance(rows, list) or not rows or not all(type(r) is list and len(r) == len(cols) for r in rows):
            return None
        if commit_ts > _I64_MAX or ("position" in obj and not isinstance(obj["position"], dict | None)):
            return None
        if "positions" in obj:  # a position per row: read row by row
            return None
        arrays: list[pa.Array] = []
        for column, values in zip(cols, zip(*rows, strict=True), strict=True):
            array = _column_array(column, values)
            if array is None:
                return None
            arrays.append(array)
        n = len(rows)
        arrays += [pa.array(["insert"] * n), pa.array([commit_ts] * n, pa.int64())]
        arrays += [pa.nulls(n, arrow_type(c)) for c in cols]
        batch = pa.RecordBatch.from_arrays(arrays, names=[str(i) for i in range(len(arrays))])
        rows = TableRows(table, batch, _ops=np.zeros(n, np.int8))  # every row an insert (`OP_CODES`)
        return RowBlock([rows], [Segment(0, n, commit_ts, obj.get("position"), None)])

    def _event(self, obj: dict[str, Any]) -> Event:
        kind = obj.get("kind")
        position = obj.get("position")
        if kind == "resolved":
            return Resolved(_uint(obj["commit_ts"], "commit_ts"), position=position)
        if kind == "ddl":
            return DDLEvent(
                schema=_str(obj["schema"], "schema"),
                table=_str(obj.get("table", ""), "table"),
                query=_str(obj["query"], "query"),
                ddl_type=_uint(obj.get("ddl_type", 0), "ddl_type"),
                commit_ts=_uint(obj["commit_ts"], "commit_ts"),
                table_schema=self._table_schema(obj["table_schema"]) if obj.get("table_schema") else None,
                pre_table_schema=(self._table_schema(obj["pre_table_schema"]) if obj.get("pre_table_schema") else None),
                start_ts=_uint(obj.get("start_ts", 0), "start_ts"),
                position=position,
            )
        if kind == "row":
            return self._row(obj, position)
        raise EventFormatError(f"unknown event kind {clip(kind)} (expected row, ddl or resolved)")

    def _row(self, obj: dict[str, Any], position: Any) -> RowChange:
        try:
            op = Op(obj["op"])
        except ValueError:
            raise EventFormatError(f"unknown op {clip(obj['op'])} (expected insert, update or delete)") from None
        cols = obj["columns"]
        if not isinstance(cols, list) or not cols:
            raise EventFormatError("a row line needs a non-empty 'columns' list")
        ts = self._table_schema(
            {
                "schema": obj["schema"],
                "table": obj["table"],
                "table_id": obj.get("table_id", 0),
                "version": obj.get("schema_version", 0),
                "columns": cols,
                "indexes": obj.get("indexes", []),
                "partitioned": obj.get("partitioned", False),
            }
        )
        new = None
        if op is not Op.DELETE:
            new = tuple(
                _value_from_json(c, d["value"]) if "value" in d else ABSENT
                for c, d in zip(ts.columns, cols, strict=True)
            )
        elif any("value" in d for d in cols):
            raise EventFormatError("a delete carries its row in 'old', not in column values")
        old = None
        if "old" in obj and obj["old"] is not None:
            given = {d["name"]: d["value"] for d in obj["old"]}
            unknown = set(given) - set(ts.column_index)
            if unknown:
                raise EventFormatError(f"'old' names unknown columns {sorted(unknown)}")
            old = tuple(_value_from_json(c, given[c.name]) if c.name in given else ABSENT for c in ts.columns)
        return RowChange(
            op=op,
            table_schema=ts,
            commit_ts=_uint(obj["commit_ts"], "commit_ts"),
            new=new,
            old=old,
            start_ts=_uint(obj.get("start_ts", 0), "start_ts"),
            partition_id=obj.get("partition_id"),
            row_id=obj.get("row_id"),
            position=position,
        )

    def _table_schema(self, obj: dict[str, Any]) -> TableSchema:
        defs = obj["columns"]
        key = (
            obj["schema"],
            obj["table"],
            obj.get("table_id", 0),
            obj.get("version", 0),
            bool(obj.get("partitioned", False)),
            tuple(tuple(sorted((k, _hashable(v)) for k, v in d.items() if k != "value")) for d in defs),
            tuple(
                (i["name"], tuple(i["columns"]), bool(i.get("primary")), bool(i.get("unique")))
                for i in obj.get("indexes") or ()
            ),
        )
        cached = self._schemas.get(key)
        if cached is None:
            cached = table_schema_from_json(obj)
            if len(self._schemas) > 10_000:
                self._schemas.clear()
            self._schemas[key] = cached
        return cached


def table_schema_from_json(obj: dict[str, Any]) -> TableSchema:
    """The inverse of `table_schema_to_json` (no caching: `EventReader` caches per stream)."""
    return TableSchema(
        schema=_str(obj["schema"], "schema"),
        table=_str(obj["table"], "table"),
        columns=tuple(column_from_definition(d) for d in obj["columns"]),
        indexes=tuple(
            Index(i["name"], tuple(i["columns"]), bool(i.get("primary")), bool(i.get("unique")))
            for i in obj.get("indexes") or ()
        ),
        table_id=_uint(obj.get("table_id", 0), "table_id"),
        version=_uint(obj.get("version", 0), "version"),
        partitioned=bool(obj.get("partitioned", False)),
    )


def column_from_definition(d: dict[str, Any]) -> Column:
    code, binary, _ = parse_type_name(_str(d["type"], "type"))
    flags = ColumnFlag(_uint(d.get("flags", 0), "flags"))
    attrs: dict[str, Any] = {}
    if code in CHARSET_TYPES:
        if binary or (flags & ColumnFlag.BINARY and "charset" not in d):
            attrs["charset"], attrs["collation"] = "binary", "binary"
        else:
            attrs["charset"] = d.get("charset", "utf8mb4")
            attrs["collation"] = d.get("collation", f"{attrs['charset']}_bin")
    for key in ("length", "decimal", "column_id"):
        if d.get(key) is not None:
            attrs[key] = int(d[key])
    if d.get("elements"):
        attrs["elements"] = tuple(_str(e, "elements") for e in d["elements"])
    if d.get("zerofill"):
        attrs["zerofill"] = True
    if "default" in d:
        attrs["default"] = d["default"]
    return Column.from_flags(_str(d["name"], "name"), code, flags, **attrs)


def _value_from_json(column: Column, raw: Any) -> Any:
    if raw is None:
        return None
    if column.is_bytes:
        return b64decode(_str(raw, column.name))
    if column.type_code is TypeCode.DECIMAL:
        return _decimal(raw, column.name)
    return check_value(column, raw)


_I64_MAX = (1 << 63) - 1
_INTS = frozenset({int, type(None)})
_NUMBERS = frozenset({int, float, type(None)})
_TEXTS = frozenset({str, type(None)})
_DECIMAL_TEXT = r"^-?[0-9]+(\.[0-9]+)?$"  # format(Decimal, "f"), as `_value_to_json` writes it


def _column_array(column: Column, values: Sequence[Any]) -> pa.Array | None:
    """A column of an ``inserts`` line as the Arrow array `model.arrow.arrow_type` gives it, holding
    exactly what `_value_from_json` makes of each value; None where that is not sure (a value of
    another JSON type, out of range, not plain decimal text...): the row path decides."""
    kinds = set(map(type, values))  # exact types: a JSON true is no int here, as in check_value
    typ = arrow_type(column)
    tc = column.type_code
    try:
        if column.is_bytes:
            if not kinds <= _TEXTS:
                return None
            return pa.array([None if v is None else b64decode(v) for v in values], typ)
        if tc is TypeCode.DECIMAL:
            text = pa.array(values, pa.string()) if kinds <= _TEXTS else None
            # Only plain digits: Arrow 26's string -> decimal cast misreads exponent forms.
            if text is None or not pc.all(pc.match_substring_regex(text, _DECIMAL_TEXT), min_count=0).as_py():
                return None
            return text if pa.types.is_string(typ) else text.cast(typ)  # exact, or ArrowInvalid
        if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
            if not kinds <= _INTS:
                return None
            array = pa.array(values, typ)  # beyond the Arrow type: OverflowError / ArrowInvalid
            bits = INTEGER_BITS.get(tc)
            if bits is not None and bits < typ.bit_width and array.null_count < len(array):
                lo, hi = (0, (1 << bits) - 1) if column.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
                bounds = pc.min_max(array).as_py()
                if bounds["min"] < lo or bounds["max"] > hi:
                    return None  # MEDIUMINT: narrower than its Arrow type
            return array
        if tc in FLOAT_TYPES:
            if not kinds <= _NUMBERS:
                return None
            array = pa.array(values, pa.float64()).cast(typ)  # FLOAT: the nearest float32, as to_float32
            return None if pc.any(pc.is_inf(array)).as_py() else array  # beyond float32: the row path's error
        if tc in TEXT_VALUE_TYPES:
            return pa.array(values, typ) if kinds <= _TEXTS else None
    except (pa.ArrowException, ValueError, OverflowError):
        return None
    return None


def _decimal(raw: Any, name: str) -> Decimal:
    """A DECIMAL value: a finite number written as a string (MySQL has no NaN or infinity)."""
    try:
        value = Decimal(_str(raw, name))
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        raise EventFormatError(f"column {clip(name, 80)} (decimal) needs a decimal number string, got {clip(raw)}")
    return value


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def _uint(v: Any, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise EventFormatError(f"{name} must be a non-negative integer, got {clip(v)}")
    return v


def _str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise EventFormatError(f"{name} must be a string, got {clip(v)}")
    return v
