"""Per-type value rules every codec shares (spec §0.4/§0.5): ranges, fast float/decimal text, patterns.

`changefeed.model.values` and `changefeed.model.gofloat` are the reference implementations; the
renderers here give the same text on the hot path several times faster, deferring to the
reference wherever the fast form could differ. Decoders share the integer ranges, the temporal
patterns and the DECIMAL text rule so that every protocol accepts the same value texts; the
columnar encoders (``*/columns.py``) share the Arrow helpers at the end. A protocol's own
differences live in its ``values.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import clip
from ..model import Column, TypeCode
from ..model.gofloat import format_f, format_g, format_json
from ..model.types import INTEGER_BITS
from ..model.values import decimal_text

U64_MAX = (1 << 64) - 1

# TiDB's text of temporal values (DATETIME/TIMESTAMP with 0-6 fraction digits, TIME up to 838 h).
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_DATETIME = _DATE + r" [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
TEMPORAL_PATTERNS: dict[TypeCode, re.Pattern[str]] = {
    TypeCode.DATE: re.compile(_DATE),
    TypeCode.NEWDATE: re.compile(_DATE),
    TypeCode.DATETIME: re.compile(_DATETIME),
    TypeCode.TIMESTAMP: re.compile(_DATETIME),
    TypeCode.TIME: re.compile(r"-?[0-9]{2,3}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"),
}


def int_range(col: Column) -> tuple[int, int]:
    """The value range of an integer-like column; YEAR/ENUM/SET/BIT (and any other type): uint64."""
    bits = INTEGER_BITS.get(col.type_code)
    if bits is None:
        return 0, U64_MAX
    if col.unsigned:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


# ------------------------------------------------------------------ strconv 'f', -1 (spec §0.5)

_np_float32 = np.float32


def float64_text(v: float) -> str:
    """Go ``strconv.FormatFloat(v, 'f', -1, 64)``; NaN/±Inf print ``0`` (the mounter's mapping).

    Python's repr has Go's shortest digits; without an exponent it is Go's 'f' form except
    that Go prints integral values without ``.0``.
    """
    text = repr(v)
    if "e" in text or "n" in text:  # exponent, inf, nan
        return format_f(v) if math.isfinite(v) else "0"
    return text[:-2] if text.endswith(".0") else text


def float32_text(v: float) -> str:
    """Go ``strconv.FormatFloat(float64(f), 'f', -1, 32)`` of an exact float32 value; NaN/±Inf: ``0``.

    numpy's ``str`` of a float32 has the shortest float32 digits (Dragon4); when it is positional
    it is Go's 'f' text except for a trailing ``.0``. Exponent forms go to the reference. Column
    values repeat (prices, weights), and numpy costs ~1 µs, so texts are cached; zero skips the
    cache (0.0 and -0.0 are one key there).
    """
    return _float32_text(v) if v else ("-0" if math.copysign(1.0, v) < 0 else "0")


@lru_cache(maxsize=65536)
def _float32_text(v: float) -> str:
    text = str(_np_float32(v))
    if "e" in text or "n" in text:  # exponent, inf, nan
        return format_f(v, float32=True) if math.isfinite(v) else "0"
    return text[:-2] if text.endswith(".0") else text


def float_g_text(v: float, float32: bool = False) -> str:
    """Go ``%v`` (``FormatFloat(v, 'g', -1, bits)``, CSV values); NaN/±Inf print ``0``.

    On [1e-4, 1e6) Go's layout is fixed, and repr (float64) or numpy's str (float32) have the
    same shortest digits in the same layout except for a trailing ``.0``; elsewhere the reference.
    """
    if 1e-4 <= abs(v) < 1e6:
        text = str(_np_float32(v)) if float32 else repr(v)
        return text[:-2] if text.endswith(".0") else text
    return format_g(v, float32) if math.isfinite(v) else "0"


def decimal_renderer(scale: int | None) -> Callable[[Decimal], str]:
    """TiDB ``MyDecimal.String()`` for a column of ``scale``: `decimal_text`, with a fast path.

    ``str`` of a Decimal is already that text unless it has an exponent, a negative zero or
    another number of fraction digits; only those go to `decimal_text`. Anything but a Decimal
    is a TypeError (the model holds DECIMAL values as Decimal).
    """
    want = scale or 0

    def render(v: Decimal) -> str:
        if type(v) is not Decimal:
            raise TypeError(f"DECIMAL needs a Decimal, got {clip(v)}")
        text = str(v)
        if "E" not in text and not (text[0] == "-" and not v):
            if scale is None:
                return text
            dot = text.find(".")
            if (len(text) - dot - 1 if dot >= 0 else 0) == want:
                return text
        return decimal_text(v, scale)

    return render


# ------------------------------------------------------------------ Go JSON float numbers (spec §0.5)
# `changefeed.model.gofloat.format_json` is the reference; these give the same text for the common
# magnitudes ([1e-4, 1e16)) several times faster, and defer to it for everything else.


def json_float64(v: float) -> str:
    """Go JSON text of a float64: Python's repr has the same shortest digits and, on [1e-4, 1e16),
    the same fixed layout except for a trailing ``.0``."""
    if 1e-4 <= abs(v) < 1e16:
        r = repr(v)
        return r[:-2] if r.endswith(".0") else r
    return format_json(v)


def json_float32(v: float) -> str:
    """Go JSON text of a float32 (``v`` already holds an exact float32 value).

    numpy's ``str`` of a float32 prints the shortest round-trip digits (Dragon4, as the reference
    does); where it chooses positional notation it matches Go's fixed layout except for a
    trailing ``.0``. Exponent forms and other magnitudes go to the reference implementation.
    """
    if 1e-4 <= abs(v) < 1e16:
        s = str(_np_float32(v))
        if "e" not in s:
            return s[:-2] if s.endswith(".0") else s
    return format_json(v, True)


# ------------------------------------------------------------------ DECIMAL text
# DECIMAL value text as every decoder accepts it: one rule for Canal-JSON, Simple and Open Protocol.
#
# TiDB writes DECIMAL values with ``MyDecimal.String()`` (spec §0.4): digits with an optional
# ``-`` and a point between digits, never an exponent, at most 65 digits (MySQL's maximum
# precision; with scale at most 30 a leading ``0.`` stays within it). Canal's BigDecimal
# ``toPlainString()`` writes the same shape. Anything else is refused, which also keeps hostile
# text cheap: ``Decimal("1e999999999")`` is small, but printing it (JSON, SQL, Parquet) writes a
# billion digits. The shape is exactly what is printed, so a columnar decoder may keep the text.

MAX_DECIMAL_DIGITS = 65
DECIMAL_PATTERN = r"-?[0-9]+(?:\.[0-9]+)?"
"""The shape (no length bound); Python's re and Arrow's RE2 read it the same (blocks.py uses RE2)."""
_DECIMAL_MATCH = re.compile(DECIMAL_PATTERN).fullmatch
_MAX_DECIMAL_TEXT = MAX_DECIMAL_DIGITS + 2  # a sign and a point besides the digits
DECIMAL_RULE = f"digits with an optional '-' and '.', no exponent, at most {MAX_DECIMAL_DIGITS} digits"


def is_decimal_text(text: str) -> bool:
    """Whether ``text`` is DECIMAL text by the shared rule (length checked before the pattern)."""
    if len(text) > _MAX_DECIMAL_TEXT or not _DECIMAL_MATCH(text):
        return False
    return len(text) - text.startswith("-") - ("." in text) <= MAX_DECIMAL_DIGITS


def parse_decimal_text(text: str) -> Decimal:
    """``text`` as a Decimal; ValueError (quoting at most 80 characters of it) when it breaks the rule."""
    if not is_decimal_text(text):
        raise ValueError(f"{text[:80]!r} is not DECIMAL text ({DECIMAL_RULE})")
    return Decimal(text)


# ------------------------------------------------------------------ Arrow columns
# Vectorised helpers shared by the codecs' column renderers (``*/columns.py``).
#
# Why one place: the rules below are TiDB's or Arrow's, not a protocol's, and every columnar
# encoder needs them the same way.

# Arrow's decimal text in exponent form: sign, the first digit, the other digits, "E-n".
# The standard base64 alphabet as bytes, indexed by sextet (the columnar base64 encoders).
B64_ALPHABET = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)
_EXPONENT = r"^(?P<sign>-?)(?P<head>[0-9])\.?(?P<tail>[0-9]*)E"


def value_bytes(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0 as int64, the bytes they span) of a (large) string or binary array, honouring its slice."""
    n = len(values)
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    dtype = np.int64 if wide else np.int32
    _, offsets_buf, data_buf = values.buffers()[:3]
    offsets = np.frombuffer(offsets_buf, dtype, n + 1, dtype().itemsize * values.offset).astype(np.int64)
    start, end = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
    if end == start or data_buf is None:
        return offsets - start, np.zeros(0, np.uint8)
    return offsets - start, np.frombuffer(data_buf, np.uint8, end - start, start)


def decimal_texts(values: pa.Array) -> pa.Array:
    """TiDB's ``MyDecimal.String()`` of a decimal array: plain digits, exactly its scale's fraction digits.

    Arrow's text, except where Arrow writes an exponent (an adjusted exponent below -6, so the
    value is below 1e-6 and its integer part 0): there the digits are the unscaled value, padded
    to the scale.
    """
    texts = pc.cast(values, pa.string())
    if not bool((value_bytes(texts)[1] == ord("E")).any()):
        return texts
    sci = pc.match_substring(texts, "E").fill_null(False)
    parts = pc.extract_regex(texts.filter(sci), _EXPONENT)
    digits = pc.binary_join_element_wise(parts.field("head"), parts.field("tail"), "")
    padded = pc.utf8_lpad(digits, width=values.type.scale, padding="0")
    plain = pc.binary_join_element_wise(parts.field("sign"), "0.", padded, "")
    return pc.replace_with_mask(texts, sci, plain)
