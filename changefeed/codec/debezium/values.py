"""Per-column pieces of TiCDC's Debezium JSON (debezium.md §5.3, §5.4, §6): the schema element,
the value renderer, and the rendered DEFAULT that TiCDC substitutes for a NULL.

Model values are those of `changefeed.model.values`; each renderer turns one non-NULL value into
the JSON bytes TiCDC writes for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any

from ...model import Column, TypeCode
from ...model.gofloat import to_float32
from ...model.types import BLOB_TYPES, CHAR_TYPES, type_name
from ...model.values import b64encode
from .jsontext import jfloat32, jfloat64, jstr

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
_NO_UNSIGNED_SUFFIX = frozenset({"year", "bit", "varchar", "char", "decimal"})


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


def value_renderer(col: Column, zone: tzinfo) -> Render:
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
    if tc in (TypeCode.DATE, TypeCode.NEWDATE):

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
    if tc in (TypeCode.JSON, TypeCode.VECTOR):
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


def connect_type(col: Column) -> tuple[str, str | None, bool, bytes | None]:
    """(connect type, schema name, has version 1, parameters JSON) of ``col`` in JSON mode."""
    tc = col.type_code
    if tc in INTEGER_SCHEMA:
        return INTEGER_SCHEMA[tc][1 if col.unsigned else 0], None, False, None
    if tc is TypeCode.FLOAT:
        return ("double" if float_is_double(col) else "float"), None, False, None
    if tc in (TypeCode.DOUBLE, TypeCode.DECIMAL):
        return "double", None, False, None
    if tc in (TypeCode.DATE, TypeCode.NEWDATE):
        return "int32", "io.debezium.time.Date", True, None
    if tc is TypeCode.DATETIME:
        name = "io.debezium.time.MicroTimestamp" if fsp_of(col) > 3 else "io.debezium.time.Timestamp"
        return "int64", name, True, None
    if tc is TypeCode.TIMESTAMP:
        return "string", "io.debezium.time.ZonedTimestamp", True, None
    if tc is TypeCode.TIME:
        return "int64", "io.debezium.time.MicroTime", True, None
    if tc is TypeCode.YEAR:
        return "int32", "io.debezium.time.Year", True, None
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
    if tc is TypeCode.JSON:
        return "string", "io.debezium.data.Json", True, None
    if tc is TypeCode.VECTOR:
        return "string", "io.debezium.data.TiDBVectorFloat32", False, None
    if tc in CHAR_TYPES or tc in BLOB_TYPES:
        return "string", None, False, None  # binary ones too: base64 text in JSON mode
    if tc is TypeCode.GEOMETRY:
        return "struct", GEOMETRY_NAME, True, None  # Debezium's MySQL connector (TiDB has none)
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


def schema_default(col: Column) -> bytes | None:
    """The ``default`` member's JSON value, or None when TiCDC writes none (§5.4)."""
    text = _default_text(col)
    if text is None:
        return None
    tc = col.type_code
    try:
        if tc in INTEGER_SCHEMA or tc in (TypeCode.FLOAT, TypeCode.DOUBLE, TypeCode.DECIMAL):
            return jfloat64(_parse_number(text))
        if tc is TypeCode.YEAR:
            return str(_adjust_year(int(_parse_number(text)))).encode()
        if tc in (TypeCode.DATE, TypeCode.NEWDATE):
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
        if tc in (TypeCode.FLOAT, TypeCode.DOUBLE):
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
        if tc in (TypeCode.DATE, TypeCode.NEWDATE):
            days = date_days(value)
            return b"null" if days is None else str(days).encode()
        return render(value)
    except (ValueError, TypeError, OverflowError):
        return b"null"
