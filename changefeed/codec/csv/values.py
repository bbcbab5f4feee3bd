"""CSV's per-type rules (spec §5.5): a model value as field text, and field text back as a value.

The writers follow TiCDC's csvMessage.formatValue (Go ``%v``, BIT/ENUM/SET as numbers or names per
the options, binary as base64 or hex); the readers accept what TiCDC's CSV decoder (Lightning's
parser) accepts, and say why a field is refused.
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ...errors import clip
from ...model import ABSENT, Column, TypeCode
from ...model.gofloat import to_float32
from ...model.types import ALWAYS_UNSIGNED_TYPES, ENUM_SET_TYPES, FLOAT_TYPES, INTEGER_TYPES
from ...model.values import decimal_text, enum_name, set_names
from ..values import DECIMAL_RULE, TEMPORAL_PATTERNS, float_g_text, int_range, is_decimal_text
from .dialect import CSVFieldError, CSVFormat

_SIGNED_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")


def value_writer(col: Column, fmt: CSVFormat) -> Callable[[Any], str]:  # noqa: C901  (per-type switch: TiCDC csvMessage.formatValue)
    """model value -> field text for one column (NULL is handled by the caller)."""
    tc = col.type_code
    text = fmt.text

    def bad(v: Any, why: str = "") -> CSVFieldError:
        if v is ABSENT:
            return CSVFieldError(f"column {col.name!r} is absent from the image; CSV lines carry every column")
        return CSVFieldError(f"column {col.name!r} ({col.type_name}): cannot write {clip(v)}{why}")

    if tc in INTEGER_TYPES or tc in ALWAYS_UNSIGNED_TYPES:
        # Go %v of int64/uint64 (BIT is its uint64): bare digits.
        def write_int(v: Any) -> str:
            if type(v) is int:
                return str(v)
            raise bad(v)

        return write_int
    if tc in FLOAT_TYPES:
        f32 = tc is TypeCode.FLOAT

        def write_float(v: Any) -> str:
            if type(v) is not float:
                if type(v) is not int:
                    raise bad(v)
                v = float(v)
            return float_g_text(v, f32)  # Go %v of float32/float64; NaN/Inf print 0 (spec §0.4)

        return write_float
    if tc is TypeCode.DECIMAL:
        scale = col.decimal

        def write_decimal(v: Any) -> str:
            if type(v) is not Decimal:
                raise bad(v)
            try:
                return text(decimal_text(v, scale))  # tiflow mounter: a string, so quoted
            except ArithmeticError as e:  # NaN/Inf, or a rescale beyond the decimal context
                raise bad(v, f": {e!r}") from None

        return write_decimal
    if tc in ENUM_SET_TYPES:
        # Member names, quoted (ticdc ParseEnumValue / ParseSetValue: "a,c"); index 0 is "".
        names = enum_name if tc is TypeCode.ENUM else set_names
        cache: dict[int, str] = {}

        def write_member(v: Any) -> str:
            hit = cache.get(v) if type(v) is int else None
            if hit is not None:
                return hit
            if type(v) is not int:
                raise bad(v)
            try:
                field = text(names(col, v))
            except ValueError as e:
                raise bad(v, f": {e}") from None
            if len(cache) < 1024:
                cache[v] = field
            return field

        return write_member
    if col.is_bytes:
        # Binary-flag string/blob types: base64 or hex text, quoted (binary-encoding-method).
        def encode(b: bytes) -> str:
            return b.hex() if fmt.hex else binascii.b2a_base64(b, newline=False).decode("ascii")

        def write_bytes(v: Any) -> str:
            if type(v) is not bytes:
                if not isinstance(v, bytearray | memoryview):
                    raise bad(v)
                v = bytes(v)
            return text(encode(v))

        return write_bytes

    # Text and the types TiCDC hands over as strings: DATE/DATETIME/TIMESTAMP/TIME, JSON, VECTOR.
    if fmt.quote:
        q, qq = fmt.quote, fmt.quote * 2

        def write_quoted(v: Any) -> str:
            if type(v) is str:
                return q + v.replace(q, qq) + q
            raise bad(v)

        return write_quoted

    def write_text(v: Any) -> str:
        if type(v) is str:
            return text(v)
        raise bad(v)

    return write_text


class BadField(ValueError):  # noqa: N818 (internal, never escapes)
    """A field that does not read as its column's type; message is the reason."""


def value_reader(col: Column, fmt: CSVFormat) -> Callable[[str], Any]:  # noqa: C901  (per-type switch: TiCDC CSV decoder field parsing)
    """field content (already unquoted/unescaped) -> model value for one column."""
    tc = col.type_code
    name = col.name

    def bad(text: str, what: str) -> BadField:
        return BadField(f"column {name!r} ({col.type_name}): {clip(text)} is not {what}")

    if tc in INTEGER_TYPES or tc in ALWAYS_UNSIGNED_TYPES:
        if tc in INTEGER_TYPES:
            lo, hi = int_range(col)
            signed = not col.unsigned
        else:
            lo, hi = 0, (1 << ((col.length or 64) if tc is TypeCode.BIT else 64)) - 1
            signed = False

        def read_int(text: str) -> int:
            # Go ParseInt takes a sign, ParseUint does not; int() alone would take "1_0" and " 1".
            if not ((text.isascii() and text.isdigit()) or (signed and _SIGNED_RE.fullmatch(text))):
                raise bad(text, "an integer")
            v = int(text)
            if not lo <= v <= hi:
                raise bad(text, f"in range [{lo}, {hi}]")
            return v

        return read_int
    if tc in FLOAT_TYPES:
        f32 = tc is TypeCode.FLOAT

        def read_float(text: str) -> float:
            if not _FLOAT_RE.fullmatch(text):
                raise bad(text, "a decimal floating-point number")
            v = float(text)
            if f32 and not math.isinf(v):
                try:
                    v = to_float32(v)  # Go ParseFloat(s, 32)
                except OverflowError:
                    v = math.inf
            if math.isinf(v):
                raise bad(text, "in the float32 range" if f32 else "in the float64 range")
            return v

        return read_float
    if tc is TypeCode.DECIMAL:

        def read_decimal(text: str) -> Decimal:
            # TiCDC writes MyDecimal.String() text: the rule every decoder shares (codec/values.py).
            if not is_decimal_text(text):
                raise bad(text, f"a decimal number ({DECIMAL_RULE})")
            return Decimal(text)

        return read_decimal
    if tc in TEMPORAL_PATTERNS:
        pattern = TEMPORAL_PATTERNS[tc]

        def read_temporal(text: str) -> str:
            if not pattern.fullmatch(text):
                raise bad(text, f"a {col.type_name.upper()} value")
            return text

        return read_temporal
    if tc in ENUM_SET_TYPES:
        return _member_reader(col, bad)
    if col.is_bytes:
        if fmt.hex:

            def read_hex(text: str) -> bytes:
                if not _HEX_RE.fullmatch(text):
                    raise bad(text, "hex")
                return bytes.fromhex(text)

            return read_hex

        def read_b64(text: str) -> bytes:
            try:
                # Go base64.StdEncoding: alphabet +/, padding required.
                return binascii.a2b_base64(text, strict_mode=True)
            except (binascii.Error, ValueError):
                raise bad(text, "base64") from None

        return read_b64
    return str  # text, JSON, VECTOR: the string itself


def _member_reader(col: Column, bad: Callable[[str, str], BadField]) -> Callable[[str], int]:
    """ENUM/SET member names -> 1-based index / bitmask, as TiDB's ParseEnum/ParseSet read them.

    Exact name first; then, for case-insensitive collations, a case-folded match; then TiDB's
    numeric fallback (an index or bitmask written as digits).
    """
    elems = col.elements
    exact = {e: i for i, e in enumerate(elems)}
    ci = not (col.collation.endswith("_bin") or col.collation == "binary")
    folded: dict[str, int] = {}
    if ci:
        for i, e in enumerate(elems):
            folded.setdefault(e.rstrip(" ").casefold(), i)

    def lookup(name: str) -> int | None:
        i = exact.get(name)
        if i is None and ci:
            i = folded.get(name.rstrip(" ").casefold())
        return i

    if col.type_code is TypeCode.ENUM:

        def read_enum(text: str) -> int:
            i = lookup(text)
            if i is not None:
                return i + 1
            if text == "":
                return 0  # MySQL's empty "error" member
            if text.isascii() and text.isdigit() and 0 < int(text) <= len(elems):
                return int(text)
            raise bad(text, f"a member of ENUM{elems!r}")

        return read_enum

    def read_set(text: str) -> int:
        if text == "":
            return 0
        bits = 0
        for part in text.split(","):
            i = lookup(part)
            if i is None:
                if text.isascii() and text.isdigit() and int(text) >> len(elems) == 0:
                    return int(text)
                raise bad(text, f"made of members of SET{elems!r}")
            bits |= 1 << i
        return bits

    return read_set
