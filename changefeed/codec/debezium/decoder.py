"""Tolerant Debezium decoder (debezium.md §11): TiCDC's output and a genuine Debezium MySQL connector's.

Tables are rebuilt from the value's ``schema`` (``after`` struct fields, ``tidb_type`` when
present, else Debezium's logical names) and the key's members (the handle key); a schema-less
message (``debezium-disable-schema``) needs the table given with `set_table_schema`. What a
genuine connector does not write is filled in: commit ts = ``source.ts_ms`` as a TSO (logical 0),
start ts = commit ts; ``op:"r"`` (snapshot read) is an INSERT; a tombstone (null value) is no event.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import orjson

from ...errors import CodecError, clip
from ...model import ABSENT, Column, DDLEvent, Event, Index, Op, Resolved, TableSchema, TypeCode, classify_ddl
from ...model.events import trusted_row
from ...model.gofloat import to_float32
from ...model.types import STRING_TYPES, parse_type_name
from ...model.values import b64decode, format_date, format_datetime, format_time
from ...timezones import zone
from ..base import Decoder, Message, checked_tso
from ..compression import inflater
from ..decimaltext import MAX_DECIMAL_DIGITS, is_decimal_text
from ..options import CodecOptions
from ..plancache import SlowPathError, compile_object_reader
from ..textvalues import INT_BITS, int_range

Parser = Callable[[Any], Any]

_U64 = 1 << 64
_MAX_TSO = _U64 - 1
_EPOCH = datetime(1970, 1, 1)
_ZONED_FLOOR = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_DT, _MAX_DT = datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)
_MAX_TIME_US = ((838 * 60 + 59) * 60 + 59) * 1_000_000 + 999_999
_ZONED = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})", re.ASCII)
_UNESCAPED_COMMA = re.compile(r"(?<!\\),")
_OPS = {"c": Op.INSERT, "r": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE}
_CACHE_LIMIT = 1024
_DEC_CONTEXT = Context(prec=100)
_TEXT = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
_SCHEMA_MEMBER = b',"schema":'


class _BadValueError(ValueError):
    """A value that does not fit its column (becomes a CodecError naming where)."""


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"


# ------------------------------------------------------------------ value parsers (inverse of §6)


def _int_parser(lo: int, hi: int, wrap: bool) -> Parser:
    def parse(v: Any) -> int:
        if type(v) is str and wrap and v.isascii() and v.isdigit() and len(v) <= 20:
            v = int(v)  # bigint.unsigned.handling.mode=string
        if type(v) is not int:
            raise _BadValueError(f"{_kind(v)}, expected an integer")
        if wrap and -(1 << 63) <= v < 0:
            v += _U64  # BIGINT UNSIGNED written as its two's-complement int64
        if not lo <= v <= hi:
            raise _BadValueError(f"{clip(v)} is out of range [{lo}, {hi}]")
        out: int = v
        return out

    return parse


def _parse_year(v: Any) -> int:
    if type(v) is not int or not (v == 0 or 1901 <= v <= 2155):
        raise _BadValueError(f"{clip(v)} is not a YEAR (0 or 1901..2155)")
    return v


def _number(v: Any) -> float:
    if type(v) is not int and type(v) is not float:
        raise _BadValueError(f"{_kind(v)}, expected a number")
    try:
        return float(v)
    except OverflowError:
        raise _BadValueError(f"{clip(v)} overflows a double") from None


def _parse_float32(v: Any) -> float:
    try:
        return to_float32(_number(v))
    except OverflowError:
        raise _BadValueError(f"{clip(v)} overflows a FLOAT") from None


def _decimal_parser(scale: int | None, connect_scale: int | None) -> Parser:
    quantum = None if scale is None else Decimal(1).scaleb(-scale)

    def parse(v: Any) -> Decimal:
        if connect_scale is not None:  # decimal.handling.mode=precise: base64 big-endian unscaled value
            raw = _base64(v)
            d = Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-connect_scale, _DEC_CONTEXT)
        elif type(v) is str:
            if not is_decimal_text(v):
                raise _BadValueError(f"{clip(v)} is not DECIMAL text")
            d = Decimal(v)
        elif type(v) is int:
            d = Decimal(v)
        elif type(v) is float:
            d = Decimal(repr(v))  # JSON mode: the double TiCDC wrote (lossy above ~15 digits)
        else:
            raise _BadValueError(f"{_kind(v)}, expected a number")
        if d.is_finite() and d and d.adjusted() >= MAX_DECIMAL_DIGITS:
            # A double as large as 1e308 is no DECIMAL (65 digits at most): refused, not carried on.
            raise _BadValueError(f"{clip(v)} has more integer digits than DECIMAL({MAX_DECIMAL_DIGITS}) holds")
        if quantum is not None:
            try:
                d = d.quantize(quantum, context=_DEC_CONTEXT)
            except InvalidOperation:
                raise _BadValueError(f"{clip(v)} does not fit DECIMAL scale {scale}") from None
        return d

    return parse


def _base64(v: Any) -> bytes:
    if type(v) is not str:
        raise _BadValueError(f"{_kind(v)}, expected base64 text")
    try:
        return b64decode(v)
    except ValueError:
        raise _BadValueError(f"{clip(v)} is not base64") from None


def _date(v: Any) -> str:
    if type(v) is not int:
        raise _BadValueError(f"{_kind(v)}, expected days since 1970-01-01")
    try:
        d = _EPOCH + timedelta(days=v)
    except OverflowError:
        raise _BadValueError(f"{clip(v)} days is out of range") from None
    return format_date(d.year, d.month, d.day)


def _fraction_check(us: int, fsp: int, v: Any) -> None:
    if us % 10 ** (6 - fsp):
        raise _BadValueError(f"{clip(v)} has more fraction digits than the column's {fsp}")


def _datetime_parser(unit_us: int, fsp: int) -> Parser:
    def parse(v: Any) -> str:
        if type(v) is not int:
            raise _BadValueError(f"{_kind(v)}, expected an epoch timestamp")
        try:
            dt = _EPOCH + timedelta(microseconds=v * unit_us)
        except OverflowError:
            raise _BadValueError(f"{clip(v)} is out of range") from None
        _fraction_check(dt.microsecond, fsp, v)
        return format_datetime(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.microsecond, fsp)

    return parse


def _timestamp_parser(tz: tzinfo, fsp: int) -> Parser:
    def parse(v: Any) -> str:
        m = _ZONED.fullmatch(v) if type(v) is str else None
        if m is None:
            raise _BadValueError(f"{clip(v)} is not an ISO-8601 UTC timestamp")
        y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
        frac = (m.group(7) or "")[:6].ljust(6, "0")
        offset = m.group(8)
        try:
            dt = datetime(y, mo, d, h, mi, s, int(frac), tzinfo=UTC)
            if offset != "Z":
                sign = -1 if offset[0] == "-" else 1
                dt -= sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
            if dt == _ZONED_FLOOR:
                # TiCDC (and Debezium) write the zero TIMESTAMP, and anything below MySQL's minimum
                # 1970-01-01 00:00:01 UTC, as this instant, which no valid TIMESTAMP is: the zero value.
                return format_datetime(0, 0, 0, 0, 0, 0, 0, fsp)
            local = dt.astimezone(tz)
        except (ValueError, OverflowError):
            raise _BadValueError(f"{clip(v)} is not a valid timestamp") from None
        _fraction_check(local.microsecond, fsp, v)
        return format_datetime(
            local.year, local.month, local.day, local.hour, local.minute, local.second, local.microsecond, fsp
        )

    return parse


def _time_parser(unit_us: int, fsp: int) -> Parser:
    def parse(v: Any) -> str:
        if type(v) is not int:
            raise _BadValueError(f"{_kind(v)}, expected microseconds")
        us = v * unit_us
        if abs(us) > _MAX_TIME_US:
            raise _BadValueError(f"{clip(v)} is beyond TIME's ±838:59:59.999999")
        neg, us = us < 0, abs(us)
        _fraction_check(us % 1_000_000, fsp, v)
        secs, micro = divmod(us, 1_000_000)
        return format_time(neg, secs // 3600, secs // 60 % 60, secs % 60, micro, fsp)

    return parse


def _bit_parser(n: int) -> Parser:
    def parse(v: Any) -> int:
        if type(v) is bool:
            return int(v)  # BIT(1) as boolean
        raw = _base64(v)
        if len(raw) > 8:
            raise _BadValueError(f"{len(raw)} bytes is more than BIT(64) holds")
        bits = int.from_bytes(raw, "little")  # little-endian, any length up to 8 (padded, as tiflow does)
        if bits >> n:
            raise _BadValueError(f"{bits} does not fit BIT({n})")
        return bits

    return parse


def _enum_parser(elements: tuple[str, ...]) -> Parser:
    index = {e: i + 1 for i, e in enumerate(elements)}

    def parse(v: Any) -> int:
        if type(v) is not str:
            raise _BadValueError(f"{_kind(v)}, expected an ENUM member")
        if v == "":
            return 0
        try:
            return index[v]
        except KeyError:
            raise _BadValueError(f"{clip(v)} is not one of the allowed members") from None

    return parse


def _set_parser(elements: tuple[str, ...]) -> Parser:
    bit = {e: 1 << i for i, e in enumerate(elements)}

    def parse(v: Any) -> int:
        if type(v) is not str:
            raise _BadValueError(f"{_kind(v)}, expected SET members")
        mask = 0
        for name in v.split(",") if v else ():
            try:
                mask |= bit[name]
            except KeyError:
                raise _BadValueError(f"{clip(name)} is not one of the allowed members") from None
        return mask

    return parse


def _string(v: Any) -> str:
    if type(v) is not str:
        raise _BadValueError(f"{_kind(v)}, expected a string")
    return v


def _json_text(v: Any) -> str:
    text = _string(v)
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _BadValueError(f"{clip(text)} is not JSON text") from None
    return text


def _geometry(v: Any) -> bytes:
    """Debezium's Geometry struct back to MySQL's value: the 4-byte little-endian SRID, then the WKB."""
    if not isinstance(v, dict):
        raise _BadValueError(f"{_kind(v)}, expected a Geometry object (wkb, srid)")
    srid = v.get("srid") or 0
    if type(srid) is not int or not 0 <= srid < 1 << 32:
        raise _BadValueError(f"srid {clip(srid)} is not a 32-bit unsigned integer")
    return srid.to_bytes(4, "little") + _base64(v.get("wkb"))


def _parser(col: Column, tz: tzinfo, hint: _Hint | None) -> Parser:
    tc = col.type_code
    if tc in INT_BITS:
        return _int_parser(*int_range(col), tc is TypeCode.BIGINT and col.unsigned)
    if tc is TypeCode.YEAR:
        return _parse_year
    if tc is TypeCode.FLOAT:
        return _parse_float32
    if tc is TypeCode.DOUBLE:
        return _number
    if tc is TypeCode.DECIMAL:
        return _decimal_parser(col.decimal, hint.connect_scale if hint else None)
    fsp = max(0, min(6, col.decimal or 0))
    if tc in (TypeCode.DATE, TypeCode.NEWDATE):
        return _date
    if tc is TypeCode.DATETIME:
        micro = hint.micro if hint and hint.micro is not None else fsp > 3
        return _datetime_parser(1 if micro else 1000, fsp)
    if tc is TypeCode.TIMESTAMP:
        return _timestamp_parser(tz, fsp)
    if tc is TypeCode.TIME:
        micro = hint.micro if hint and hint.micro is not None else True
        return _time_parser(1 if micro else 1000, fsp)
    if tc is TypeCode.BIT:
        return _bit_parser(col.length or 64)
    if tc is TypeCode.ENUM:
        return _enum_parser(col.elements)
    if tc is TypeCode.SET:
        return _set_parser(col.elements)
    if tc is TypeCode.JSON:
        return _json_text
    if tc is TypeCode.GEOMETRY:
        return _geometry
    if col.is_bytes:
        return _base64
    if tc in STRING_TYPES or tc is TypeCode.VECTOR:
        return _string
    raise ValueError(f"column {col.name!r}: no Debezium reading for {tc.name}")


# ------------------------------------------------------------------ schema fields -> columns (§11.4)


class _Hint:
    """What a schema field says beyond the column: the time unit and a precise DECIMAL's scale."""

    __slots__ = ("connect_scale", "micro")

    def __init__(self, micro: bool | None = None, connect_scale: int | None = None) -> None:
        self.micro = micro
        self.connect_scale = connect_scale


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


def _column(field: Any, label: str) -> tuple[Column, _Hint]:
    if not isinstance(field, dict):
        raise ValueError(f"{label} is {_kind(field)}, expected an object")
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
            raise ValueError(f"{where}: tidb_type is {_kind(tidb)}")
        try:
            code, binary, unsigned = parse_type_name(tidb)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        tc = code  # the time unit and fsp still come from the logical name
    attrs: dict[str, Any] = {}
    connect_scale = None
    if tc in (TypeCode.ENUM, TypeCode.SET):
        allowed = params.get("allowed", "")
        if type(allowed) is not str:
            raise ValueError(f"{where}: parameters.allowed is {_kind(allowed)}")
        # Split on unescaped commas only (TiCDC's own decoder does not handle `\,`).
        members = _UNESCAPED_COMMA.split(allowed) if allowed else []
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
    elif tc in (TypeCode.DATETIME, TypeCode.TIME, TypeCode.TIMESTAMP):
        attrs["decimal"] = fsp if fsp is not None else (6 if tc is not TypeCode.DATETIME else 0)
    if tc in STRING_TYPES or tc in (TypeCode.ENUM, TypeCode.SET):
        attrs.update({"charset": "binary", "collation": "binary"} if binary else _TEXT)
    col = Column(name, tc, unsigned=unsigned, nullable=optional, **attrs)
    return col, _Hint(micro, connect_scale)


# ------------------------------------------------------------------ per-table readers


class _Table:
    """A table version as messages describe it, with its compiled image reader."""

    __slots__ = ("hints", "names", "parsers", "read", "schema")

    def __init__(
        self, schema: TableSchema, parsers: tuple[Parser, ...], hints: tuple[_Hint | None, ...] | None = None
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
            raise CodecError(f"payload.{member} is {_kind(obj)}, expected an object", where=where)
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
        raise CodecError(f"{name} is {_kind(v)}, expected an object", where=where)
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
            parsers = tuple(_parser(c, self._zone, None) for c in ts.columns)
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
            raise CodecError(f"value is {_kind(obj)}, expected an object", where=where)
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
            raise CodecError(f"payload.source is {_kind(source)}, expected an object", where=where)
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
            raise CodecError(f"key is {_kind(obj)}, expected an object", where=where)
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
            raise CodecError(f"payload has no op and ddl is {_kind(query)}: neither a row nor a DDL", where=where)
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
            raise CodecError(f"schema is {_kind(schema)}, expected an object", where=where)
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
            raise CodecError(f"schema.fields is {_kind(fields)}, expected an array", where=where)
        structs = {
            f.get("field"): f["fields"] for f in fields if isinstance(f, dict) and isinstance(f.get("fields"), list)
        }
        row_fields = structs.get("after", structs.get("before"))  # TiCDC's decoder reads the after struct
        if row_fields is None:
            raise CodecError("schema.fields has no before/after struct describing the columns", where=where)
        columns: list[Column] = []
        hints: list[_Hint] = []
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
            parsers = tuple(_parser(c, self._zone, h) for c, h in zip(columns, hints, strict=True))
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
            raise CodecError(f"payload.source.db/table are {_kind(db)}/{_kind(table)}, expected strings", where=where)
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
