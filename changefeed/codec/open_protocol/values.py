"""Open Protocol's per-type rules (spec §1.7, §1.10): a value's JSON text, and JSON back to a value.

One decision per type code, in three forms that must agree: `renderer` (one value's JSON text, the
encoder's per-row path), `column_kind` (which text a whole Arrow column takes, `columns.py`) and
`converter` (a decoded JSON value -> the model value). Shared rules (integer ranges, float and
DECIMAL text) are in `codec/values.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from enum import Enum
from typing import Any

from ...errors import clip
from ...model import Column, TypeCode
from ...model.gofloat import to_float32
from ...model.types import BLOB_TYPES, CHAR_TYPES, INTEGER_TYPES, TEMPORAL_TYPES, UINT_VALUE_TYPES
from ...model.values import b64decode, b64encode
from ..gojson import go_unquote
from ..values import decimal_renderer, int_range, is_decimal_text, json_float32, json_float64

# Written as JSON string text (dates and times in TiDB's text, JSON documents, vectors).
TEXT_TYPES = TEMPORAL_TYPES | {TypeCode.JSON, TypeCode.VECTOR}


# ---------------------------------------------------------------- encoding (spec §1.7)

Render = Callable[[Any], str]


def _float64_json(v: float) -> str:
    if 1e-4 <= abs(v) < 1e16:  # json_float64's fast case inline (never NaN/±Inf): one call less
        r = repr(v)
        return r[:-2] if r.endswith(".0") else r
    # The mounter turns NaN/±Inf into 0 before any encoder sees them (spec §0.4).
    return "0" if v - v != 0 else json_float64(v)


def _float32_json(v: float) -> str:
    # The mounter turns NaN/±Inf into 0 before any encoder sees them (spec §0.4).
    return "0" if v - v != 0 else json_float32(v)


def _b64_json(v: bytes | str) -> str:
    return '"' + b64encode(v.encode("utf-8") if isinstance(v, str) else v) + '"'


def renderer(column: Column, quote: Render, binary_quote: Render) -> Render:
    """The JSON text of a non-NULL value of ``column`` (spec §1.7)."""
    tc = column.type_code
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        return str  # JSON numbers, uint64 written in full
    if tc is TypeCode.FLOAT or tc is TypeCode.DOUBLE:
        # float32 columns use float32 shortest digits
        return _float32_json if tc is TypeCode.FLOAT else _float64_json
    if tc is TypeCode.DECIMAL:
        text = decimal_renderer(column.decimal)
        # DECIMAL is a JSON string of MyDecimal.String(): exactly `scale` fraction digits.
        return lambda v: '"' + text(v) + '"'
    if tc in BLOB_TYPES or tc is TypeCode.GEOMETRY:
        return _b64_json  # TEXT and BLOB alike: base64 of the bytes, any charset
    if tc in CHAR_TYPES and column.binary:
        return binary_quote  # Go strconv.Quote without the quotes, then JSON-escaped
    if tc is TypeCode.NULL:
        return lambda v: "null"
    return quote  # non-binary CHAR/VARCHAR, temporal text, JSON text, VECTOR text


class Kind(Enum):
    INT = "int"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    DECIMAL = "decimal"
    BASE64 = "base64"
    GO_QUOTE = "go-quote"
    QUOTE = "quote"
    NULL = "null"


def column_kind(column: Column) -> Kind:
    """Which text a column's values take; the same decisions as `encoder.renderer` (spec §1.7)."""
    tc = column.type_code
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        return Kind.INT
    if tc is TypeCode.FLOAT:
        return Kind.FLOAT32
    if tc is TypeCode.DOUBLE:
        return Kind.FLOAT64
    if tc is TypeCode.DECIMAL:
        return Kind.DECIMAL
    if tc in BLOB_TYPES or tc is TypeCode.GEOMETRY:
        return Kind.BASE64
    if tc in CHAR_TYPES and column.binary:
        return Kind.GO_QUOTE
    if tc is TypeCode.NULL:
        return Kind.NULL
    return Kind.QUOTE


# ---------------------------------------------------------------- decoding (spec §1.10)


class _NegZero(int):
    """The JSON number ``-0`` as read by the slow parser: int 0 for int columns, -0.0 for floats."""

    __slots__ = ()


NEG_ZERO = _NegZero(0)


def parse_int_keep_neg_zero(text: str) -> int:
    return NEG_ZERO if text == "-0" else int(text)


def kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


Convert = Callable[[Any], Any]


def _int_converter(name: str, lo: int, hi: int) -> Convert:
    def convert(v: Any) -> int:
        if type(v) is int and lo <= v <= hi:
            return v
        if v is NEG_ZERO:
            return 0
        if type(v) is int:
            raise ValueError(f"column {name!r}: {clip(v)} is out of range [{lo}, {hi}]")
        raise ValueError(f"column {name!r}: expected an integer, got {kind_of(v)} {clip(v)}")

    return convert


def _float_converter(name: str, float32: bool) -> Convert:
    def convert(v: Any) -> float:
        if v is NEG_ZERO:
            return -0.0
        if type(v) is float or type(v) is int:
            return to_float32(float(v)) if float32 else float(v)
        raise ValueError(f"column {name!r}: expected a number, got {kind_of(v)} {clip(v)}")

    return convert


def _decimal_converter(name: str) -> Convert:
    def convert(v: Any) -> Decimal:
        # TiDB MyDecimal.String(): a JSON string of plain digits (accept a bare integer too).
        if type(v) is str and is_decimal_text(v):
            return Decimal(v)
        if type(v) is int:
            return Decimal(v)
        raise ValueError(f"column {name!r}: expected DECIMAL text, got {kind_of(v)} {clip(v)}")

    return convert


def _text_converter(name: str) -> Convert:
    def convert(v: Any) -> str:
        if type(v) is str:
            return v
        raise ValueError(f"column {name!r}: expected a string, got {kind_of(v)} {clip(v)}")

    return convert


def _b64_converter(name: str, binary: bool) -> Convert:
    def convert(v: Any) -> bytes | str:
        if type(v) is not str:
            raise ValueError(f"column {name!r}: expected a base64 string, got {kind_of(v)} {clip(v)}")
        try:
            data = b64decode(v)
        except ValueError:
            raise ValueError(f"column {name!r}: invalid base64 {v[:40]!r}") from None
        if binary:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"column {name!r}: base64 value is not UTF-8 text in a non-binary column") from None

    return convert


def _binary_char_converter(name: str) -> Convert:
    def convert(v: Any) -> bytes:
        if type(v) is not str:
            raise ValueError(f"column {name!r}: expected a Go-quoted string, got {kind_of(v)} {clip(v)}")
        try:
            return go_unquote(v)
        except ValueError as e:
            raise ValueError(f"column {name!r}: {e}") from None

    return convert


def _legacy_char_converter(name: str) -> Convert:
    """v4.0-era CHAR/VARCHAR (no "f" member): base64 of the bytes, as early TiCDC wrote []byte."""

    def convert(v: Any) -> str:
        if type(v) is not str:
            raise ValueError(f"column {name!r}: expected a string, got {kind_of(v)} {clip(v)}")
        try:
            return b64decode(v).decode("utf-8")
        except ValueError:
            return v  # not base64 (or not text): a plain string from a newer writer

    return convert


def _null_converter(name: str) -> Convert:
    def convert(v: Any) -> None:
        raise ValueError(f"column {name!r} has type NULL but value {clip(v)}")

    return convert


def converter(column: Column, legacy: bool) -> Convert:
    tc, name = column.type_code, column.name
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        return _int_converter(name, *int_range(column))  # unsigned (flag bit 128): the uint64 side
    if tc is TypeCode.FLOAT or tc is TypeCode.DOUBLE:
        return _float_converter(name, tc is TypeCode.FLOAT)
    if tc is TypeCode.DECIMAL:
        return _decimal_converter(name)
    if tc in BLOB_TYPES or tc is TypeCode.GEOMETRY:
        return _b64_converter(name, column.is_bytes)
    if tc in CHAR_TYPES:
        if column.binary:
            return _binary_char_converter(name)
        return _legacy_char_converter(name) if legacy else _text_converter(name)
    if tc is TypeCode.NULL:
        return _null_converter(name)
    if tc in TEXT_TYPES:
        return _text_converter(name)
    raise ValueError(f"column {name!r}: no decoding for type code {int(tc)}")
