"""Debezium's per-type rules (debezium.md §5.3, §5.4, §6): the schema element, the value renderer,
and the rendered DEFAULT that TiCDC substitutes for a NULL, one column at a time; then the value
parsers, their inverse (`value_parser`, with the `Hint` a schema field gives).

Model values are those of `changefeed.model.values`; each renderer turns one non-NULL value into
the JSON bytes TiCDC writes for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import orjson

from ...errors import clip
from ...model import Column, TypeCode
from ...model.gofloat import to_float32
from ...model.types import (
    BLOB_TYPES,
    CHAR_TYPES,
    DATE_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    JSON_VECTOR_TYPES,
    NUMBER_TYPES,
    STRING_TYPES,
    type_name,
)
from ...model.values import b64decode, b64encode, format_date, format_datetime, format_time
from ..gojson import jfloat32, jfloat64, jstr
from ..values import MAX_DECIMAL_DIGITS, int_range, is_decimal_text

Render = Callable[[Any], bytes]

EPOCH = datetime(1970, 1, 1)
_EPOCH_ORDINAL = EPOCH.toordinal()
_U64 = 1 << 64
_I64_MIN = 1 << 63
# MySQL's NOT_FIXED_DEC: a FLOAT/DOUBLE decimal of 31 or more means "(M,D) not given".
_NOT_FIXED_DEC = 31
_DATE_RE = re.compile(r"(-?\d{1,4})-(\d{1,2})-(\d{1,2})")
_DATETIME_RE = re.compile(r"(\d{1,4})-(\d{1,2})-(\d{1,2})[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?")
_TIME_RE = re.compile(r"(-?)(\d{1,3}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?")
_CURRENT_TS = re.compile(r"(?i)current_timestamp(?:\(\d?\))?|now\(\d?\)")
_BIT_LITERAL = re.compile(r"[bB]'([01]*)'")
_ZONED_MIN = b'"1970-01-01T00:00:00Z"'
# Below this instant TiCDC writes the ZonedTimestamp minimum (debezium.md §6 TIMESTAMP).
_TS_FLOOR = datetime(1970, 1, 1, 0, 0, 1)

INTEGER_SCHEMA: dict[TypeCode, tuple[str, str]] = {  # (signed, unsigned) connect types
    TypeCode.TINYINT: ("int16", "int16"),
    TypeCode.SMALLINT: ("int16", "int32"),
    TypeCode.MEDIUMINT: ("int32", "int32"),
    TypeCode.INT: ("int32", "int64"),
    TypeCode.BIGINT: ("int64", "int64"),
}
# TiCDC's Debezium type texts leave UNSIGNED off these types: the schema's lower-case TiDB type
# (`tidb_type`, by name) and the DDL table changes' column type (`ddl.column_object`, by type).
_NO_UNSIGNED_SUFFIX = frozenset({"year", "bit", "varchar", "char", "decimal"})
NO_UNSIGNED_TYPES = frozenset({TypeCode.YEAR, TypeCode.BIT, TypeCode.VARCHAR, TypeCode.CHAR, TypeCode.DECIMAL})


class BadDefaultError(ValueError):
    """A DEFAULT TiCDC cannot render: the member (or the substitution) is left out."""


# ------------------------------------------------------------------ names (§5.1)


def sanitize_name(name: str) -> str:
    """TiCDC SanitizeName: ``[A-Za-z0-9_]`` kept, anything else ``_``; a leading digit gets ``_`` before it."""
    out = []
    for i, ch in enumerate(name):
        ok = ch.isascii() and (ch.isalnum() or ch == "_")
        if i == 0 and not (ch.isascii() and (ch.isalpha() or ch == "_")):
            out.append("_" + ch if ch.isascii() and ch.isdigit() else "_")
            continue
        out.append(ch if ok else "_")
    return "".join(out)


def sanitize_topic_name(name: str) -> str:
    """TiCDC SanitizeTopicName: like `sanitize_name` but ``.`` is kept and the first character is not special."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_.") else "_" for ch in name)


# ------------------------------------------------------------------ temporal helpers


def _adjust_year(year: int) -> int:
    # Debezium's time adjuster, which TiCDC applies too: 0-69 -> 20xx, 70-99 -> 19xx.
    if year < 70:
        return year + 2000
    if year < 100:
        return year + 1900
    return year


def date_days(text: str) -> int | None:
    """Days since 1970-01-01 of ``YYYY-MM-DD`` (2-digit years adjusted); None: zero or invalid date."""
    if len(text) == 10 and text.isascii() and text[4] == "-" and text[7] == "-":
        try:
            day = date.fromisoformat(text)  # the same digits, several times cheaper than the pattern
        except ValueError:
            pass
        else:
            if day.year >= 100:
                return day.toordinal() - _EPOCH_ORDINAL
    m = _DATE_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a DATE")
    y, mo, d = (int(g) for g in m.groups())
    if mo == 0 or d == 0:
        return None
    try:
        return datetime(_adjust_year(y), mo, d).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None


def _wall(text: str) -> datetime | None:
    """A DATETIME/TIMESTAMP text as a naive datetime (2-digit years adjusted); None: zero or invalid.

    The capture's shape (``YYYY-MM-DD HH:MM:SS[.f]``, a real date from year 100) is read by
    ``fromisoformat``, several times cheaper than the pattern; anything else by the pattern.
    """
    n = len(text)
    if (
        (n == 19 or (21 <= n <= 26 and text[19] == "."))
        and text.isascii()
        and text[4] == "-"
        and text[7] == "-"
        and (text[10] == " " or text[10] == "T")
        and text[13] == ":"
        and text[16] == ":"
    ):
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            # fromisoformat reads the same digits here; years below 100 are adjusted below, and a
            # zone or a rolled-over 24:00 (newer Pythons) is not a MySQL value.
            if dt.year >= 100 and dt.tzinfo is None and dt.hour == int(text[11:13]):
                return dt
    m = _DATETIME_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a DATETIME")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    if mo == 0 or d == 0:
        return None
    try:
        return datetime(_adjust_year(y), mo, d, h, mi, s, int(frac.ljust(6, "0")) if frac else 0)
    except ValueError:
        return None


def datetime_micros(text: str) -> int | None:
    """Epoch microseconds of a DATETIME read as UTC wall clock; None: zero or invalid."""
    dt = _wall(text)
    if dt is None:
        return None
    delta = dt - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def time_micros(text: str) -> int:
    """Signed microseconds of a TIME ``[-]HH:MM:SS[.f]``."""
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a TIME")
    sign, h, mi, s, frac = m.groups()
    us = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    return -us if sign else us


def zoned_text(text: str, zone: tzinfo, fsp: int) -> bytes | None:
    """The ZonedTimestamp JSON string of a TIMESTAMP in ``zone``; None: below 1970-01-01 00:00:01 UTC."""
    dt = _wall(text)
    if dt is None:
        return None
    if zone is not UTC:
        dt = dt.replace(tzinfo=zone).astimezone(UTC).replace(tzinfo=None)
    if dt < _TS_FLOOR:
        return None
    out = dt.strftime("%Y-%m-%dT%H:%M:%S") if dt.year >= 1000 else f"{dt.year:04d}" + dt.strftime("-%m-%dT%H:%M:%S")
    if fsp > 0:
        out += "." + f"{dt.microsecond:06d}"[:fsp]
    return b'"' + out.encode() + b'Z"'


def fsp_of(col: Column) -> int:
    return max(0, min(6, col.decimal or 0))


def bit_bytes(value: int, n: int) -> bytes:
    """BIT(n) value as ceil(n/8) little-endian bytes (TiCDC getBitFromUint64)."""
    return value.to_bytes(max(1, (n + 7) // 8), "little")


def bit_length(col: Column) -> int:
    return col.length or 1


def float_is_double(col: Column) -> bool:
    """FLOAT with an explicit (M,D) is written as a Debezium ``double`` (§6)."""
    return col.decimal is not None and 0 <= col.decimal < _NOT_FIXED_DEC


# ------------------------------------------------------------------ values (§6)


def _int(v: Any) -> bytes:
    if type(v) is not int:
        raise TypeError(f"needs an int, got {type(v).__name__}")
    return str(v).encode()


def _uint64(v: Any) -> bytes:
    # BIGINT UNSIGNED >= 2^63 is written as its two's-complement int64 (Debezium's "long" mode).
    if type(v) is not int:
        raise TypeError(f"needs an int, got {type(v).__name__}")
    return str(v - _U64 if v >= _I64_MIN else v).encode()


def _float(v: Any) -> bytes:
    if type(v) is not float and type(v) is not int:
        raise TypeError(f"needs a float, got {type(v).__name__}")
    return jfloat64(float(v))


def _float32(v: Any) -> bytes:
    if type(v) is not float and type(v) is not int:
        raise TypeError(f"needs a float, got {type(v).__name__}")
    return jfloat32(to_f32(float(v)))


def to_f32(v: float) -> float:
    try:
        return to_float32(v)
    except OverflowError:
        return v


def _decimal(v: Any) -> bytes:
    # JSON mode: DECIMAL is converted to float64 (Debezium decimal.handling.mode=double).
    if type(v) is not Decimal:
        raise TypeError(f"needs a Decimal, got {type(v).__name__}")
    return jfloat64(float(v))


def _string(v: Any) -> bytes:
    if type(v) is not str:
        raise TypeError(f"needs a str, got {type(v).__name__}")
    return jstr(v)


def _binary(v: Any) -> bytes:
    # binary.handling.mode=base64: standard base64 with padding.
    if not isinstance(v, bytes | bytearray | memoryview):
        raise TypeError(f"needs bytes, got {type(v).__name__}")
    return b'"' + b64encode(bytes(v)).encode() + b'"'


def value_renderer(col: Column, zone: tzinfo) -> Render:  # noqa: C901  (per-type switch: TiCDC Debezium value encoding)
    """``model value -> JSON bytes`` for a non-NULL value of ``col``; NOT NULL zero dates give 0."""
    tc = col.type_code
    if tc in INTEGER_SCHEMA:
        return _uint64 if tc is TypeCode.BIGINT and col.unsigned else _int
    if tc is TypeCode.YEAR:
        return _int
    if tc is TypeCode.FLOAT:
        return _float32
    if tc is TypeCode.DOUBLE:
        return _float
    if tc is TypeCode.DECIMAL:
        return _decimal
    zero = b"null" if col.nullable else b"0"  # zero/invalid dates: null, or 0 when NOT NULL
    if tc in DATE_TYPES:

        def date(v: Any) -> bytes:
            days = date_days(v)
            return zero if days is None else str(days).encode()

        return date
    if tc is TypeCode.DATETIME:
        # fsp <= 3: io.debezium.time.Timestamp (ms); 4-6: MicroTimestamp (µs).
        micro = fsp_of(col) > 3

        def dt(v: Any) -> bytes:
            us = datetime_micros(v)
            if us is None:
                return zero
            return str(us if micro else us // 1000).encode()

        return dt
    if tc is TypeCode.TIMESTAMP:
        fsp = fsp_of(col)

        def ts(v: Any) -> bytes:
            if type(v) is not str:
                raise TypeError(f"needs a str, got {type(v).__name__}")
            return zoned_text(v, zone, fsp) or _ZONED_MIN

        return ts
    if tc is TypeCode.TIME:
        return lambda v: str(time_micros(v)).encode()
    if tc is TypeCode.BIT:
        n = bit_length(col)
        if n == 1:
            return lambda v: b"true" if _nonneg(v) else b"false"
        return lambda v: b'"' + b64encode(bit_bytes(_nonneg(v), n)).encode() + b'"'
    if tc is TypeCode.ENUM:
        elements = col.elements

        def enum(v: Any) -> bytes:
            # index 0 (MySQL's error value) or out of range: "".
            i = _nonneg(v)
            return jstr(elements[i - 1]) if 0 < i <= len(elements) else b'""'

        return enum
    if tc is TypeCode.SET:
        elements = col.elements

        def set_(v: Any) -> bytes:
            bits = _nonneg(v)
            if bits >> len(elements):
                return b'""'  # invalid bits: ""
            return jstr(",".join(e for i, e in enumerate(elements) if bits >> i & 1))

        return set_
    if tc in JSON_VECTOR_TYPES:
        return _string
    if tc is TypeCode.GEOMETRY:
        return _geometry
    if col.is_bytes:
        return _binary
    if tc in CHAR_TYPES or tc in BLOB_TYPES:
        return _string
    raise ValueError(f"column {col.name!r}: Debezium has no rendering for {tc.name}")


def _geometry(v: Any) -> bytes:
    # TiDB has no spatial types, so TiCDC never writes one; this is Debezium's MySQL connector:
    # io.debezium.data.geometry.Geometry {wkb, srid}. MySQL stores a 4-byte little-endian SRID
    # before the WKB.
    if not isinstance(v, bytes | bytearray | memoryview) or len(v) < 5:
        raise TypeError("needs the SRID-prefixed WKB bytes of a GEOMETRY")
    raw = bytes(v)
    srid = str(int.from_bytes(raw[:4], "little")).encode()
    return b'{"wkb":"' + b64encode(raw[4:]).encode() + b'","srid":' + srid + b"}"


#: The schema of a GEOMETRY column's struct (Debezium's Geometry, as Kafka's JsonConverter writes it).
GEOMETRY_FIELDS = (
    b'"fields":[{"type":"bytes","optional":false,"field":"wkb"},{"type":"int32","optional":true,"field":"srid"}]'
)
GEOMETRY_NAME = "io.debezium.data.geometry.Geometry"


def _nonneg(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise TypeError(f"needs a non-negative int, got {v!r}")
    return v


# ------------------------------------------------------------------ schema element (§5.3)


def tidb_type(col: Column) -> str:
    """TiDB's lower-case type name, `` unsigned`` appended except for year/bit/varchar/char/decimal."""
    name = type_name(col.type_code, col.binary)
    if col.unsigned and name not in _NO_UNSIGNED_SUFFIX:
        name += " unsigned"
    return name


ConnectType = tuple[str, str | None, bool, bytes | None]
# The types whose connect type does not depend on the column (the others: `connect_type`).
_CONNECT_TYPES: dict[TypeCode, ConnectType] = {
    TypeCode.DOUBLE: ("double", None, False, None),
    TypeCode.DECIMAL: ("double", None, False, None),
    TypeCode.DATE: ("int32", "io.debezium.time.Date", True, None),
    TypeCode.NEWDATE: ("int32", "io.debezium.time.Date", True, None),
    TypeCode.TIMESTAMP: ("string", "io.debezium.time.ZonedTimestamp", True, None),
    TypeCode.TIME: ("int64", "io.debezium.time.MicroTime", True, None),
    TypeCode.YEAR: ("int32", "io.debezium.time.Year", True, None),
    TypeCode.JSON: ("string", "io.debezium.data.Json", True, None),
    TypeCode.VECTOR: ("string", "io.debezium.data.TiDBVectorFloat32", False, None),
    # binary ones too: base64 text in JSON mode
    **dict.fromkeys(CHAR_TYPES | BLOB_TYPES, ("string", None, False, None)),
    TypeCode.GEOMETRY: ("struct", GEOMETRY_NAME, True, None),  # Debezium's MySQL connector (TiDB has none)
}


def connect_type(col: Column) -> ConnectType:
    """(connect type, schema name, has version 1, parameters JSON) of ``col`` in JSON mode."""
    tc = col.type_code
    if tc in INTEGER_SCHEMA:
        return INTEGER_SCHEMA[tc][1 if col.unsigned else 0], None, False, None
    fixed = _CONNECT_TYPES.get(tc)
    if fixed is not None:
        return fixed
    if tc is TypeCode.FLOAT:
        return ("double" if float_is_double(col) else "float"), None, False, None
    if tc is TypeCode.DATETIME:
        name = "io.debezium.time.MicroTimestamp" if fsp_of(col) > 3 else "io.debezium.time.Timestamp"
        return "int64", name, True, None
    if tc is TypeCode.BIT:
        n = bit_length(col)
        if n == 1:
            return "boolean", None, False, None
        return "bytes", "io.debezium.data.Bits", True, b'{"length":' + jstr(str(n)) + b"}"
    if tc is TypeCode.ENUM:
        allowed = ",".join(escape_enum(e) for e in col.elements)
        return "string", "io.debezium.data.Enum", True, b'{"allowed":' + jstr(allowed) + b"}"
    if tc is TypeCode.SET:
        # SET members are joined without escaping (TiCDC's behaviour, unlike ENUM).
        return "string", "io.debezium.data.EnumSet", True, b'{"allowed":' + jstr(",".join(col.elements)) + b"}"
    raise ValueError(f"column {col.name!r}: Debezium has no schema for {tc.name}")


def escape_enum(member: str) -> str:
    """TiCDC EscapeEnumAndSetOptions for ENUM: ``,`` -> ``\\,``, ``\\'`` -> ``'``, ``''`` -> ``'``."""
    return member.replace(",", "\\,").replace("\\'", "'").replace("''", "'")


def schema_element(col: Column, extension: bool) -> bytes:
    """The column's ``fields`` element, members in TiCDC's order (tidb_type first, default last)."""
    ctype, name, version, params = connect_type(col)
    out = b"{"
    if extension:
        out += b'"tidb_type":' + jstr(tidb_type(col)) + b","
    out += b'"type":"' + ctype.encode() + b'"'
    if col.type_code is TypeCode.GEOMETRY:
        out += b"," + GEOMETRY_FIELDS
    out += b',"optional":' + (b"true" if col.nullable else b"false")
    if name is not None:
        out += b',"name":"' + name.encode() + b'"'
    if version:
        out += b',"version":1'
    if params is not None:
        out += b',"parameters":' + params
    out += b',"field":' + jstr(col.name)
    default = schema_default(col)
    if default is not None:
        out += b',"default":' + default
    return out + b"}"


# ------------------------------------------------------------------ defaults (§5.4, §6 NULL)


def _default_text(col: Column) -> str | None:
    d = col.default
    if d is None:
        return None
    if isinstance(d, bytes | bytearray):
        return bytes(d).decode("latin-1")
    if isinstance(d, bool):
        return "1" if d else "0"
    return str(d)


def _parse_number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BadDefaultError(text) from None


def bit_default(text: str) -> int:
    m = _BIT_LITERAL.fullmatch(text)
    if m:
        return int(m.group(1) or "0", 2)
    if text and set(text) <= {"0", "1"}:
        return int(text, 2)  # TiDB's raw bit string, read as bits
    if text.isascii() and text.isdigit():
        return int(text)
    return int.from_bytes(text.encode("latin-1", "replace"), "big") if text else 0


def schema_default(col: Column) -> bytes | None:  # noqa: C901  (per-type switch: TiCDC Debezium schema default)
    """The ``default`` member's JSON value, or None when TiCDC writes none (§5.4)."""
    text = _default_text(col)
    if text is None:
        return None
    tc = col.type_code
    try:
        if tc in NUMBER_TYPES:
            return jfloat64(_parse_number(text))
        if tc is TypeCode.YEAR:
            return str(_adjust_year(int(_parse_number(text)))).encode()
        if tc in DATE_TYPES:
            try:
                days = date_days(text)
            except ValueError:
                days = None
            if days is None:
                return None if col.nullable else b"0"
            return str(days).encode()
        if tc is TypeCode.DATETIME:
            # CURRENT_TIMESTAMP or anything unparsable: 0.
            try:
                us = datetime_micros(text)
            except ValueError:
                us = None
            if us is None:
                return b"0"
            return str(us if fsp_of(col) > 3 else us // 1000).encode()
        if tc is TypeCode.TIMESTAMP:
            if _CURRENT_TS.fullmatch(text.strip()):
                return None if col.nullable else _ZONED_MIN
            try:
                zoned = zoned_text(text, UTC, fsp_of(col))  # a TIMESTAMP default is read as UTC
            except ValueError:
                return b"0"  # unparsable: the number 0
            if zoned is None:
                return None if col.nullable else _ZONED_MIN
            return zoned
        if tc is TypeCode.TIME:
            return str(time_micros(text)).encode()
        if tc is TypeCode.BIT:
            bits = bit_default(text)
            if bit_length(col) == 1:
                return b"true" if bits else b"false"
            return b'"' + b64encode(bit_bytes(bits, bit_length(col))).encode() + b'"'
        if tc in BLOB_TYPES or tc is TypeCode.GEOMETRY:
            return None  # TiDB stores no TEXT/BLOB defaults (and has no GEOMETRY)
        return jstr(text)
    except (ValueError, OverflowError):
        return None


def default_model_value(col: Column) -> Any:
    """The model value TiCDC substitutes for a NULL of ``col`` (§6 NULL); None: no substitution."""
    text = _default_text(col)
    if text is None:
        return None
    tc = col.type_code
    try:
        if tc in INTEGER_SCHEMA or tc is TypeCode.YEAR:
            return int(Decimal(text))
        if tc in FLOAT_TYPES:
            return float(text)
        if tc is TypeCode.DECIMAL:
            return Decimal(text)
        if tc is TypeCode.BIT:
            return bit_default(text)
        if tc is TypeCode.ENUM:
            return col.elements.index(text) + 1 if text in col.elements else None
        if tc is TypeCode.SET:
            mask = 0
            for name in text.split(",") if text else ():
                mask |= 1 << col.elements.index(name)
            return mask
        if tc in BLOB_TYPES:
            return None
        if col.is_bytes:
            return text.encode("latin-1")
        return text
    except (ValueError, InvalidOperation, OverflowError):
        return None


def null_rendering(col: Column, render: Render, zone: tzinfo) -> bytes:
    """What a NULL of ``col`` is written as: ``null``, or its DEFAULT rendered as a value (TiCDC quirk)."""
    tc = col.type_code
    if tc is TypeCode.DATETIME and _default_text(col) is not None:
        text = _default_text(col) or ""
        try:
            us = datetime_micros(text)
        except ValueError:
            us = None
        if us is None:
            return b"0"  # CURRENT_TIMESTAMP and unparsable defaults render as 0
        return str(us if fsp_of(col) > 3 else us // 1000).encode()
    value = default_model_value(col)
    if value is None:
        return b"null"
    try:
        if tc is TypeCode.TIMESTAMP:
            # Substituted values are read in the server zone (the schema default as UTC, §14);
            # one below the minimum stays null, as the row value really is NULL.
            return zoned_text(value, zone, fsp_of(col)) or b"null"
        if tc in DATE_TYPES:
            days = date_days(value)
            return b"null" if days is None else str(days).encode()
        return render(value)
    except (ValueError, TypeError, OverflowError):
        return b"null"


# ------------------------------------------------------------------ value parsers (inverse of §6)

Parser = Callable[[Any], Any]

_ZONED_FLOOR = datetime(1970, 1, 1, tzinfo=UTC)
MIN_DT, MAX_DT = datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)
_MAX_TIME_US = ((838 * 60 + 59) * 60 + 59) * 1_000_000 + 999_999
_ZONED = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})", re.ASCII)
UNESCAPED_COMMA = re.compile(r"(?<!\\),")
_DEC_CONTEXT = Context(prec=100)


class _BadValueError(ValueError):
    """A value that does not fit its column (becomes a CodecError naming where)."""


def kind_of(v: Any) -> str:
    """How an error names a JSON value's kind."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"


def _int_parser(lo: int, hi: int, wrap: bool) -> Parser:
    def parse(v: Any) -> int:
        if type(v) is str and wrap and v.isascii() and v.isdigit() and len(v) <= 20:
            v = int(v)  # bigint.unsigned.handling.mode=string
        if type(v) is not int:
            raise _BadValueError(f"{kind_of(v)}, expected an integer")
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
        raise _BadValueError(f"{kind_of(v)}, expected a number")
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
            raise _BadValueError(f"{kind_of(v)}, expected a number")
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
        raise _BadValueError(f"{kind_of(v)}, expected base64 text")
    try:
        return b64decode(v)
    except ValueError:
        raise _BadValueError(f"{clip(v)} is not base64") from None


def _date(v: Any) -> str:
    if type(v) is not int:
        raise _BadValueError(f"{kind_of(v)}, expected days since 1970-01-01")
    try:
        d = EPOCH + timedelta(days=v)
    except OverflowError:
        raise _BadValueError(f"{clip(v)} days is out of range") from None
    return format_date(d.year, d.month, d.day)


def _fraction_check(us: int, fsp: int, v: Any) -> None:
    if us % 10 ** (6 - fsp):
        raise _BadValueError(f"{clip(v)} has more fraction digits than the column's {fsp}")


def _datetime_parser(unit_us: int, fsp: int) -> Parser:
    def parse(v: Any) -> str:
        if type(v) is not int:
            raise _BadValueError(f"{kind_of(v)}, expected an epoch timestamp")
        try:
            dt = EPOCH + timedelta(microseconds=v * unit_us)
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
            raise _BadValueError(f"{kind_of(v)}, expected microseconds")
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
            raise _BadValueError(f"{kind_of(v)}, expected an ENUM member")
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
            raise _BadValueError(f"{kind_of(v)}, expected SET members")
        mask = 0
        for name in v.split(",") if v else ():
            try:
                mask |= bit[name]
            except KeyError:
                raise _BadValueError(f"{clip(name)} is not one of the allowed members") from None
        return mask

    return parse


def _parse_string(v: Any) -> str:
    if type(v) is not str:
        raise _BadValueError(f"{kind_of(v)}, expected a string")
    return v


def _json_text(v: Any) -> str:
    text = _parse_string(v)
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _BadValueError(f"{clip(text)} is not JSON text") from None
    return text


def _parse_geometry(v: Any) -> bytes:
    """Debezium's Geometry struct back to MySQL's value: the 4-byte little-endian SRID, then the WKB."""
    if not isinstance(v, dict):
        raise _BadValueError(f"{kind_of(v)}, expected a Geometry object (wkb, srid)")
    srid = v.get("srid") or 0
    if type(srid) is not int or not 0 <= srid < 1 << 32:
        raise _BadValueError(f"srid {clip(srid)} is not a 32-bit unsigned integer")
    return srid.to_bytes(4, "little") + _base64(v.get("wkb"))


# The types whose parser does not depend on the column (the others: `_parser`).
_PARSERS: dict[TypeCode, Parser] = {
    TypeCode.YEAR: _parse_year,
    TypeCode.FLOAT: _parse_float32,
    TypeCode.DOUBLE: _number,
    TypeCode.DATE: _date,
    TypeCode.NEWDATE: _date,
    TypeCode.JSON: _json_text,
    TypeCode.GEOMETRY: _parse_geometry,
}


def value_parser(col: Column, tz: tzinfo, hint: Hint | None) -> Parser:
    tc = col.type_code
    if tc in INTEGER_TYPES:
        return _int_parser(*int_range(col), tc is TypeCode.BIGINT and col.unsigned)
    fixed = _PARSERS.get(tc)
    if fixed is not None:
        return fixed
    if tc is TypeCode.DECIMAL:
        return _decimal_parser(col.decimal, hint.connect_scale if hint else None)
    fsp = max(0, min(6, col.decimal or 0))
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
    if col.is_bytes:
        return _base64
    if tc in STRING_TYPES or tc is TypeCode.VECTOR:
        return _parse_string
    raise ValueError(f"column {col.name!r}: no Debezium reading for {tc.name}")


class Hint:
    """What a schema field says beyond the column: the time unit and a precise DECIMAL's scale."""

    __slots__ = ("connect_scale", "micro")

    def __init__(self, micro: bool | None = None, connect_scale: int | None = None) -> None:
        self.micro = micro
        self.connect_scale = connect_scale
