"""Value text pieces every codec needs (spec §0.4/§0.5): ranges, fast float/decimal text, patterns.

`changefeed.model.values` and `changefeed.model.gofloat` are the reference implementations; the
renderers here give the same text on the hot path several times faster, deferring to the
reference wherever the fast form could differ. Decoders share the integer ranges and temporal
patterns so that every protocol accepts the same value texts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache

import numpy as np

from ..errors import clip
from ..model import Column, TypeCode
from ..model.gofloat import format_f, format_g
from ..model.values import decimal_text

U64_MAX = (1 << 64) - 1
INT_BITS: dict[TypeCode, int] = {
    TypeCode.TINYINT: 8,
    TypeCode.SMALLINT: 16,
    TypeCode.MEDIUMINT: 24,
    TypeCode.INT: 32,
    TypeCode.BIGINT: 64,
}

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
    bits = INT_BITS.get(col.type_code)
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
