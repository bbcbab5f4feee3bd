"""One Python value per MySQL type, and the canonical text TiCDC prints for it (spec §0.4).

The representation (documented in docs/values.md):

=========================================  =====================================================
TINYINT..BIGINT (signed or unsigned), YEAR  ``int`` (unsigned BIGINT up to 2**64-1; zero year 0)
FLOAT                                       ``float`` holding an exact float32 value
DOUBLE                                      ``float``
DECIMAL                                     ``decimal.Decimal`` with exactly the column's scale
DATE                                        ``str`` ``YYYY-MM-DD`` (zero date ``0000-00-00``)
DATETIME, TIMESTAMP                         ``str`` ``YYYY-MM-DD HH:MM:SS[.f*fsp]``; TIMESTAMP in
                                            the changefeed time zone
TIME                                        ``str`` ``[-]HH:MM:SS[.f*fsp]``, hours up to 838
JSON                                        ``str``: MySQL-style JSON text
ENUM / SET                                  ``int``: 1-based member index / member bitmask
BIT(n)                                      ``int``: the bytes read big-endian
CHAR/VARCHAR/TEXT (non-binary charset)      ``str``
BINARY/VARBINARY/BLOB, GEOMETRY             ``bytes``
VECTOR                                      ``str`` like ``[1,2,3]``
NULL                                        ``None``
=========================================  =====================================================

Temporal values stay text because MySQL allows dates Python cannot hold (zero dates, day 0).
"""

from __future__ import annotations

import base64
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from ..errors import clip
from .gofloat import format_f, to_float32
from .schema import Column
from .types import FLOAT_TYPES, INTEGER_BITS, INTEGER_TYPES, TEXT_VALUE_TYPES, UINT_VALUE_TYPES, TypeCode


class _Absent:
    """A column that is not in a row image (MINIMAL binlog images, handle-key-only deletes)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def format_date(year: int, month: int, day: int) -> str:
    return f"{year:04d}-{month:02d}-{day:02d}"


def format_datetime(year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int, fsp: int) -> str:
    """TiDB ``Time.String()``: exactly ``fsp`` fraction digits (truncated from microseconds)."""
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
    if fsp > 0:
        text += "." + f"{micro:06d}"[:fsp]
    return text


def format_time(negative: bool, hour: int, minute: int, second: int, micro: int, fsp: int) -> str:
    """TiDB ``Duration.String()``: ``[-]HH:MM:SS[.f]``, at least two hour digits."""
    text = f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}"
    if fsp > 0:
        text += "." + f"{micro:06d}"[:fsp]
    return text


# MySQL DECIMAL has up to 65 digits; Python's default context rounds at 28.
_DECIMAL_CONTEXT = Context(prec=100)


def decimal_text(value: Decimal, scale: int | None = None) -> str:
    """TiDB ``MyDecimal.String()``: plain digits, exactly ``scale`` fraction digits, no exponent."""
    if scale is not None and value.as_tuple().exponent != -scale:
        value = value.quantize(Decimal(1).scaleb(-scale, _DECIMAL_CONTEXT), context=_DECIMAL_CONTEXT)
    text = format(value, "f")
    return text[1:] if not value and text.startswith("-") else text  # MyDecimal has no -0


def enum_name(column: Column, index: int) -> str:
    """Member name of a 1-based ENUM index; 0 is MySQL's empty "error" value."""
    if index == 0:
        return ""
    try:
        return column.elements[index - 1]
    except IndexError:
        raise ValueError(f"ENUM index {index} out of range for column {column.name!r}") from None


def set_names(column: Column, bits: int) -> str:
    """Comma-joined member names of a SET bitmask (member i is bit i-1)."""
    if bits >> len(column.elements):
        raise ValueError(f"SET bitmask {bits:#x} has bits beyond the members of column {column.name!r}")
    return ",".join(name for i, name in enumerate(column.elements) if bits >> i & 1)


def canonical_text(column: Column, value: Any) -> str:
    """TiCDC's text form of a non-NULL value (canal-json and simple values, dispatcher hashing).

    ``bytes`` are returned decoded as ISO-8859-1 so every byte survives; codecs that need base64
    or raw bytes handle binary columns themselves.
    """
    tc = column.type_code
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_f(value, float32=tc is TypeCode.FLOAT)
    if isinstance(value, Decimal):
        return decimal_text(value, column.decimal if tc is TypeCode.DECIMAL else None)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    raise TypeError(f"column {column.name!r}: unsupported value {value!r}")


def check_value(column: Column, value: Any) -> Any:  # noqa: C901  (per-type switch: one model value representation per MySQL type)
    """Validate (and lightly normalise) a value against the column's representation.

    Raises ``ValueError``/``TypeError`` naming the column; returns the value to store (FLOAT
    rounded to float32, ints for ENUM/SET/BIT, DECIMAL as Decimal).
    """
    if value is None or value is ABSENT:
        return value
    tc = column.type_code
    name = column.name
    if tc in INTEGER_TYPES:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"column {name!r} ({column.type_name}) needs an int, got {clip(value)}")
        bits = INTEGER_BITS[tc]
        lo, hi = (0, (1 << bits) - 1) if column.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if not lo <= value <= hi:
            raise ValueError(f"column {name!r} ({column.type_name}) value {clip(value)} out of range")
        return value
    if tc in UINT_VALUE_TYPES:
        if not isinstance(value, int) or value < 0 or value >= 1 << 64:
            raise ValueError(f"column {name!r} ({column.type_name}) needs a non-negative int, got {clip(value)}")
        return value
    if tc in FLOAT_TYPES:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"column {name!r} ({column.type_name}) needs a float, got {clip(value)}")
        return to_float32(float(value)) if tc is TypeCode.FLOAT else float(value)
    if tc is TypeCode.DECIMAL:
        try:
            return value if isinstance(value, Decimal) else Decimal(str(value))
        except InvalidOperation:
            raise ValueError(f"column {name!r} (decimal) got {clip(value)}") from None
    if column.is_bytes:
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        if not isinstance(value, bytes):
            raise TypeError(f"column {name!r} ({column.type_name}) needs bytes, got {type(value).__name__}")
        return value
    if tc in TEXT_VALUE_TYPES:
        if not isinstance(value, str):
            raise TypeError(f"column {name!r} ({column.type_name}) needs str, got {type(value).__name__}")
        return value
    raise TypeError(f"column {name!r}: no value representation for type {tc.name}")


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, as every TiCDC protocol writes it."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str | bytes) -> bytes:
    return base64.b64decode(text, validate=True)


def parse_text(column: Column, text: str) -> Any:
    """Inverse of `canonical_text`: the model value of a text-rendered non-NULL value.

    Used by the JSON protocol decoders (canal-json, simple) whose values are strings. Binary
    columns receive the text as decoded by the codec (ISO-8859-1 for canal, base64 for simple)
    and must be turned into bytes by it; here they are taken as ISO-8859-1.
    """
    tc = column.type_code
    try:
        if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
            return check_value(column, int(text, 10))
        if tc in FLOAT_TYPES:
            return check_value(column, float(text))
        if tc is TypeCode.DECIMAL:
            return Decimal(text)
    except (ValueError, InvalidOperation):
        raise ValueError(f"column {column.name!r} ({column.type_name}): cannot read {text!r}") from None
    if column.is_bytes:
        return text.encode("latin-1")
    return text
