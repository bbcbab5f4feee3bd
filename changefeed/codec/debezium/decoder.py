"""Tolerant Debezium decoder (debezium.md §11): TiCDC's output and a genuine Debezium MySQL connector's.

Tables are rebuilt from the value's ``schema`` (``after`` struct fields, ``tidb_type`` when
present, else Debezium's logical names) and the key's members (the handle key); a schema-less
message (``debezium-disable-schema``) needs the table given with `set_table_schema`. What a
genuine connector does not write is filled in: commit ts = ``source.ts_ms`` as a TSO (logical 0),
start ts = commit ts; ``op:"r"`` (snapshot read) is an INSERT; a tombstone (null value) is no event.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import CodecError, clip
from ...model import ABSENT, Column, DDLEvent, Event, Index, Op, Resolved, TableSchema, TypeCode, classify_ddl
from ...model.events import trusted_row
from ...model.types import ENUM_SET_TYPES, FSP_TYPES, STRING_TYPES, parse_type_name
from ...timezones import zone
from ..base import Decoder, Message, checked_tso
from ..codegen import SlowPathError, compile_object_reader
from ..compression import inflater
from ..options import CodecOptions
from .values import UNESCAPED_COMMA, Hint, Parser, kind_of, value_parser

_MAX_TSO = (1 << 64) - 1
_OPS = {"c": Op.INSERT, "r": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE}
_CACHE_LIMIT = 1024
_TEXT = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
_SCHEMA_MEMBER = b',"schema":'


# ------------------------------------------------------------------ schema fields -> columns (§11.4)

_LOGICAL: dict[str, tuple[TypeCode, int | None, bool | None]] = {  # name -> (type, fsp, µs unit)
    "io.debezium.time.Date": (TypeCode.DATE, None, None),
    "io.debezium.time.Timestamp": (TypeCode.DATETIME, 3, False),
    "io.debezium.time.MicroTimestamp": (TypeCode.DATETIME, 6, True),
    "io.debezium.time.ZonedTimestamp": (TypeCode.TIMESTAMP, 6, None),
    "io.debezium.time.MicroTime": (TypeCode.TIME, 6, True),
    "io.debezium.time.Time": (TypeCode.TIME, 3, False),
    "io.debezium.time.Year": (TypeCode.YEAR, None, None),
    "io.debezium.data.Enum": (TypeCode.ENUM, None, None),
    "io.debezium.data.EnumSet": (TypeCode.SET, None, None),
    "io.debezium.data.Json": (TypeCode.JSON, None, None),
    "io.debezium.data.Bits": (TypeCode.BIT, None, None),
    "io.debezium.data.TiDBVectorFloat32": (TypeCode.VECTOR, None, None),
    "org.apache.kafka.connect.data.Decimal": (TypeCode.DECIMAL, None, None),
    "io.debezium.data.geometry.Geometry": (TypeCode.GEOMETRY, None, None),
}
_CONNECT: dict[str, tuple[TypeCode, bool]] = {  # plain connect type -> (type, binary)
    "boolean": (TypeCode.BIT, False),
    "int8": (TypeCode.TINYINT, False),
    "int16": (TypeCode.SMALLINT, False),
    "int32": (TypeCode.INT, False),
    "int64": (TypeCode.BIGINT, False),
    "float": (TypeCode.FLOAT, False),
    "float32": (TypeCode.FLOAT, False),
    "double": (TypeCode.DOUBLE, False),
    "float64": (TypeCode.DOUBLE, False),
    "string": (TypeCode.VARCHAR, False),
    "bytes": (TypeCode.VARCHAR, True),
}


def _column(field: Any, label: str) -> tuple[Column, Hint]:  # noqa: C901  (per-type switch: Debezium Connect schema field -> column type)
    if not isinstance(field, dict):
        raise ValueError(f"{label} is {kind_of(field)}, expected an object")
    name, ctype = field.get("field"), field.get("type")
    if type(name) is not str or type(ctype) is not str:
        raise ValueError(f"{label} needs string members field and type")
    where = f"{label} ({name!r})"
    logical = field.get("name")
    params = field.get("parameters") or {}
    tidb = field.get("tidb_type")
    optional = field.get("optional", True)
    if type(optional) is not bool or not isinstance(params, dict) or (logical is not None and type(logical) is not str):
        raise ValueError(f"{where}: optional, name or parameters has the wrong JSON type")
    fsp: int | None = None
    micro: bool | None = None
    unsigned = False
    if logical in _LOGICAL:
        tc, fsp, micro = _LOGICAL[logical]
        binary = False
    elif ctype in _CONNECT:
        tc, binary = _CONNECT[ctype]
    else:
        raise ValueError(f"{where}: unknown Debezium type {clip(ctype)}")
    if tidb is not None:
        # TiCDC's own decoder types columns by tidb_type (` unsigned`, blob/binary = binary charset).
        if type(tidb) is not str:
            raise ValueError(f"{where}: tidb_type is {kind_of(tidb)}")
        try:
            code, binary, unsigned = parse_type_name(tidb)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        tc = code  # the time unit and fsp still come from the logical name
    attrs: dict[str, Any] = {}
    connect_scale = None
    if tc in ENUM_SET_TYPES:
        allowed = params.get("allowed", "")
        if type(allowed) is not str:
            raise ValueError(f"{where}: parameters.allowed is {kind_of(allowed)}")
        # Split on unescaped commas only (TiCDC's own decoder does not handle `\,`).
        members = UNESCAPED_COMMA.split(allowed) if allowed else []
        attrs["elements"] = tuple(m.replace("\\,", ",") for m in members)
    elif tc is TypeCode.BIT:
        length = params.get("length")
        if length is None:
            attrs["length"] = 1 if ctype == "boolean" else 64
        elif type(length) is str and length.isascii() and length.isdigit() and 1 <= int(length) <= 64:
            attrs["length"] = int(length)
        else:
            raise ValueError(f"{where}: parameters.length {clip(length)} is not 1..64")
    elif tc is TypeCode.DECIMAL and logical == "org.apache.kafka.connect.data.Decimal":
        scale = params.get("scale")
        if not (type(scale) is str and scale.isascii() and scale.isdigit() and int(scale) <= 30):
            raise ValueError(f"{where}: parameters.scale {clip(scale)} is not 0..30")
        connect_scale = int(scale)
        attrs["decimal"] = connect_scale
    elif tc in FSP_TYPES:
        attrs["decimal"] = fsp if fsp is not None else (6 if tc is not TypeCode.DATETIME else 0)
    if tc in STRING_TYPES or tc in ENUM_SET_TYPES:
        attrs.update({"charset": "binary", "collation": "binary"} if binary else _TEXT)
    col = Column(name, tc, unsigned=unsigned, nullable=optional, **attrs)
    return col, Hint(micro, connect_scale)


# ------------------------------------------------------------------ per-table readers


class _Table:
    """A table version as messages describe it, with its compiled image reader."""

    __slots__ = ("hints", "names", "parsers", "read", "schema")

    def __init__(
        self, schema: TableSchema, parsers: tuple[Parser, ...], hints: tuple[Hint | None, ...] | None = None
    ) -> None:
        self.schema = schema
        self.names = tuple(c.name for c in schema.columns)
        self.parsers = parsers
        # What each parser was built with beyond the column (the block decoder reads values by it).
        self.hints = hints if hints is not None else (None,) * len(parsers)
        self.read = compile_object_reader(self.names, parsers, strings_only=False)

    def image(self, obj: Any, member: str, where: str) -> tuple[Any, ...]:
        try:
            return self.read(obj)
        except (SlowPathError, KeyError, TypeError, ValueError, ArithmeticError, OverflowError):
            pass
        if not isinstance(obj, dict):
            raise CodecError(f"payload.{member} is {kind_of(obj)}, expected an object", where=where)
        unknown = [k for k in obj if k not in self.schema.column_index]
        if unknown:
            raise CodecError(
                f"payload.{member} has column {clip(unknown[0])}, which {self.schema.qualified_name} does not have",
                where=where,
            )
        out = []
        for col, parse in zip(self.schema.columns, self.parsers, strict=True):
            if col.name not in obj:
                out.append(ABSENT)  # not carried (e.g. a column list narrower than the schema)
                continue
            v = obj[col.name]
            try:
                out.append(None if v is None else parse(v))
            except (ValueError, TypeError, ArithmeticError, OverflowError) as exc:
                raise CodecError(f"payload.{member}.{col.name} ({col.type_name}): {exc}", where=where) from None
        return tuple(out)


def _members(obj: Any, name: str, where: str) -> dict[str, Any]:
    v = obj.get(name)
    if not isinstance(v, dict):
        raise CodecError(f"{name} is {kind_of(v)}, expected an object", where=where)
    return v


# ------------------------------------------------------------------ the decoder


class DebeziumDecoder(Decoder):
    """``protocol=debezium`` messages -> events (debezium.md §11)."""

    protocol = "debezium"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        opts = self.options
        self._zone = zone(opts.time_zone)
        self._inflate = inflater(opts.large_message_handle_compression, opts.max_message_bytes)
        self._given: dict[tuple[str, str], _Table] = {}
        self._suffixes: dict[bytes, Any] = {}  # verified `,"schema":{...}}` tails -> their parsed schema
        self._last: tuple[bytes, Any] = (b"", None)  # the tail (and schema) of the last message that had one
        self._tables: dict[tuple[int, str, str, tuple[str, ...]], tuple[Any, _Table]] = {}

    def set_table_schema(self, ts: TableSchema) -> None:
        """Type the rows of ``ts``'s table by it (schema-less messages need this; it also wins over
        a message's own schema, which carries no DECIMAL scale or TIME/TIMESTAMP fsp)."""
        try:
            parsers = tuple(value_parser(c, self._zone, None) for c in ts.columns)
        except ValueError as exc:
            raise CodecError(str(exc)) from None
        self._given[(ts.schema, ts.table)] = _Table(ts, parsers)

    # -------------------------------------------------------------- parsing

    def _inflated(self, data: bytes, what: str, where: str) -> bytes:
        if self._inflate is None:
            return data
        try:
            return self._inflate(data)
        except ValueError as exc:
            raise CodecError(f"{what}: {exc}", where=where) from None

    def _load(self, value: bytes, where: str) -> dict[str, Any]:
        """The value object. A schema tail seen before is not parsed again (TiCDC repeats it in
        every message); it is cached only after checking that the tail is the top-level member."""
        last, schema = self._last
        if last and value.endswith(last):
            # A table's messages repeat one tail: found in place, without a search, slice or hash
            # (a verified tail holds `,"schema":` only at its start, so this is rfind's cut too).
            cut = len(value) - len(last)
        else:
            schema = None
            cut = value.rfind(_SCHEMA_MEMBER)
            if cut > 0 and value.endswith(b"}"):
                tail = value[cut:]
                schema = self._suffixes.get(tail)
                if schema is not None:
                    self._last = (tail, schema)
        if schema is not None and cut > 0:
            try:
                head = orjson.loads(value[:cut] + b"}")
            except orjson.JSONDecodeError:
                head = None
            if isinstance(head, dict) and "schema" not in head:
                head["schema"] = schema
                return head
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise CodecError(f"value is not a JSON document: {exc}", where=where) from None
        if not isinstance(obj, dict):
            raise CodecError(f"value is {kind_of(obj)}, expected an object", where=where)
        if cut > 0 and isinstance(obj.get("schema"), dict):
            self._remember(value, cut, obj)
        return obj

    def _remember(self, value: bytes, cut: int, obj: dict[str, Any]) -> None:
        try:
            head = orjson.loads(value[:cut] + b"}")
            schema = orjson.loads(value[cut + len(_SCHEMA_MEMBER) : -1])
        except orjson.JSONDecodeError:
            return
        if (
            isinstance(head, dict)
            and "schema" not in head
            and schema == obj["schema"]
            and {**head, "schema": schema} == obj
        ):
            if len(self._suffixes) >= _CACHE_LIMIT:
                self._suffixes.clear()
            tail = value[cut:]
            self._suffixes[tail] = obj["schema"]
            self._last = (tail, obj["schema"])

    def decode(self, message: Message, where: str = "") -> list[Event]:
        value = message.value
        if not value:
            return []  # a tombstone (genuine Debezium sends one after each delete; TiCDC none)
        if self._inflate is not None:
            self._inflate.new_message()
        if type(value) is not bytes:
            value = bytes(value)
        value = self._inflated(value, "value", where)
        obj = self._load(value, where)
        payload = _members(obj, "payload", where)
        op = payload.get("op")
        source = payload.get("source")
        if source is not None and not isinstance(source, dict):
            raise CodecError(f"payload.source is {kind_of(source)}, expected an object", where=where)
        if op is None:
            return [self._ddl(payload, source or {}, where)]
        if op == "m":
            if source is None or "commit_ts" not in source:
                raise CodecError("watermark without payload.source.commit_ts", where=where)
            return [Resolved(commit_ts=checked_tso(source["commit_ts"], "payload.source.commit_ts", where))]
        kind = _OPS.get(op) if type(op) is str else None
        if kind is None:
            raise CodecError(f"payload.op is {clip(op)}, expected c, r, u, d or m", where=where)
        if source is None:
            raise CodecError("payload.source is missing", where=where)
        key = self._key_names(message.key, where)
        return [self._row(obj, payload, source, kind, key, where)]

    def _key_names(self, key: bytes | None, where: str) -> tuple[str, ...] | None:
        if not key:
            return None
        if type(key) is not bytes:
            key = bytes(key)
        key = self._inflated(key, "key", where)
        try:
            obj = orjson.loads(key)
        except orjson.JSONDecodeError as exc:
            raise CodecError(f"key is not a JSON document: {exc}", where=where) from None
        if type(obj) is dict:
            payload = obj.get("payload")
            if type(payload) is dict:
                return tuple(payload)
        if not isinstance(obj, dict):
            raise CodecError(f"key is {kind_of(obj)}, expected an object", where=where)
        return tuple(_members(obj, "payload", f"{where} (key)" if where else "key"))

    def _commit_ts(self, source: dict[str, Any], where: str) -> int:
        if "commit_ts" in source:
            return checked_tso(source["commit_ts"], "payload.source.commit_ts", where)
        # A genuine connector has no commit_ts: the event's ms as a TSO with logical 0.
        ms = source.get("ts_ms")
        if type(ms) is not int or not 0 <= ms <= _MAX_TSO >> 18:
            raise CodecError(f"payload.source has no commit_ts and ts_ms is {clip(ms)}", where=where)
        return ms << 18

    def _ddl(self, payload: dict[str, Any], source: dict[str, Any], where: str) -> DDLEvent:
        query = payload.get("ddl")
        if type(query) is not str:
            raise CodecError(f"payload has no op and ddl is {kind_of(query)}: neither a row nor a DDL", where=where)
        db = source.get("db") or payload.get("databaseName") or ""
        table = source.get("table") or ""
        if type(db) is not str or type(table) is not str:
            raise CodecError("payload.source.db/table must be strings", where=where)
        try:
            action = int(classify_ddl(query))
        except Exception:  # classify_ddl reads keywords best-effort; an unknown statement is NONE
            action = 0
        return DDLEvent(db, table, query, action, self._commit_ts(source, where))

    def _table(self, obj: dict[str, Any], db: str, table: str, key: tuple[str, ...] | None, where: str) -> _Table:
        given = self._given.get((db, table))
        if given is not None:
            return given
        schema = obj.get("schema")
        if schema is None:
            raise CodecError(
                f"message for {db}.{table} has no schema (debezium-disable-schema) and no table schema was given",
                where=where,
            )
        if not isinstance(schema, dict):
            raise CodecError(f"schema is {kind_of(schema)}, expected an object", where=where)
        cache_key = (id(schema), db, table, key or ())
        hit = self._tables.get(cache_key)
        if hit is not None and hit[0] is schema:
            return hit[1]
        built = self._build(schema, db, table, key, where)
        if len(self._tables) >= _CACHE_LIMIT:
            self._tables.clear()
        self._tables[cache_key] = (schema, built)
        return built

    def _build(self, schema: dict[str, Any], db: str, table: str, key: tuple[str, ...] | None, where: str) -> _Table:
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise CodecError(f"schema.fields is {kind_of(fields)}, expected an array", where=where)
        structs = {
            f.get("field"): f["fields"] for f in fields if isinstance(f, dict) and isinstance(f.get("fields"), list)
        }
        row_fields = structs.get("after", structs.get("before"))  # TiCDC's decoder reads the after struct
        if row_fields is None:
            raise CodecError("schema.fields has no before/after struct describing the columns", where=where)
        columns: list[Column] = []
        hints: list[Hint] = []
        seen: set[str] = set()
        for i, f in enumerate(row_fields):
            try:
                col, hint = _column(f, f"schema after field {i}")
            except ValueError as exc:
                raise CodecError(str(exc), where=where) from None
            if col.name in seen:
                continue  # [ticdc] may list a virtual column twice; its values are never written
            seen.add(col.name)
            columns.append(col)
            hints.append(hint)
        names = {c.name for c in columns}
        indexes: tuple[Index, ...] = ()
        if key:
            missing = [k for k in key if k not in names]
            if missing:
                raise CodecError(f"key column {clip(missing[0])} is not among the schema's columns", where=where)
            ordered = tuple(c.name for c in columns if c.name in key)
            indexes = (Index("PRIMARY", ordered, primary=True),)
        try:
            ts = TableSchema(db, table, tuple(columns), indexes)
            parsers = tuple(value_parser(c, self._zone, h) for c, h in zip(columns, hints, strict=True))
        except ValueError as exc:
            raise CodecError(f"{db}.{table}: {exc}", where=where) from None
        return _Table(ts, parsers, tuple(hints))

    def _row(
        self,
        obj: dict[str, Any],
        payload: dict[str, Any],
        source: dict[str, Any],
        op: Op,
        key: tuple[str, ...] | None,
        where: str,
    ) -> Event:
        db, table = source.get("db"), source.get("table")
        if type(db) is not str or type(table) is not str:
            raise CodecError(
                f"payload.source.db/table are {kind_of(db)}/{kind_of(table)}, expected strings", where=where
            )
        commit_ts = self._commit_ts(source, where)
        start = source.get("start_ts")
        start_ts = start if type(start) is int and 0 < start <= _MAX_TSO else commit_ts
        t = self._table(obj, db, table, key, where)
        before, after = payload.get("before"), payload.get("after")
        # `op` is the authority: an UPDATE without old values looks like an insert otherwise.
        if op is Op.DELETE:
            if after is not None:
                raise CodecError("a delete (op d) with a non-null payload.after", where=where)
            row = trusted_row(op, t.schema, commit_ts, old=t.image(before, "before", where))
        else:
            if op is Op.INSERT and before is not None:
                raise CodecError(f"an insert (op {payload['op']}) with a non-null payload.before", where=where)
            new = t.image(after, "after", where)
            old = t.image(before, "before", where) if before is not None else None
            row = trusted_row(op, t.schema, commit_ts, new=new, old=old)
        row.start_ts = start_ts
        return row
