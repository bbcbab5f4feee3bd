"""Go's float formatting, reproduced digit for digit (TiCDC spec §0.5).

TiCDC prints floats with Go's shortest round-trip digits in three layouts; byte-compatible output
needs all three. FLOAT columns use the shortest digits *for float32*.
"""

from __future__ import annotations

import math
import struct
from functools import lru_cache

import numpy as np

_F32 = struct.Struct("<f")


def to_float32(value: float) -> float:
    """Round a Python float to the nearest float32, as stored by a FLOAT column."""
    rounded: float = _F32.unpack(_F32.pack(value))[0]
    return rounded


def shortest_digits(value: float, float32: bool = False) -> tuple[bool, str, int]:
    """(negative, digits, dp): value = 0.<digits> x 10**dp with the fewest round-trip digits.

    ``digits`` has no leading or trailing zeros; zero is ``(neg, "", 0)``. Python's repr gives the
    float64 digits; numpy's Dragon4 (``unique=True``) gives the float32 ones.
    """
    if value == 0:  # before the cache: 0.0 and -0.0 are equal keys there
        return math.copysign(1.0, value) < 0, "", 0
    return _nonzero_digits(value, float32)


@lru_cache(maxsize=65536)
def _nonzero_digits(value: float, float32: bool) -> tuple[bool, str, int]:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value!r} has no decimal form (TiCDC maps NaN/Inf to 0 before encoding)")
    neg = value < 0
    text = np.format_float_scientific(np.float32(value), unique=True) if float32 else repr(abs(value))
    text = text.lstrip("-")
    mantissa, _, exp_text = text.partition("e")
    exp = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    dp = len(whole) + exp
    stripped = digits.lstrip("0")
    dp -= len(digits) - len(stripped)
    return neg, stripped.rstrip("0"), dp


def _fixed(digits: str, dp: int) -> str:
    if not digits:
        return "0"
    if dp <= 0:
        return "0." + "0" * (-dp) + digits
    if dp >= len(digits):
        return digits + "0" * (dp - len(digits))
    return digits[:dp] + "." + digits[dp:]


def _exponent(digits: str, dp: int, min_exp_digits: int) -> str:
    if not digits:
        digits, dp = "0", 1
    exp = dp - 1
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if exp < 0 else "+"
    return f"{mantissa}e{sign}{abs(exp):0{min_exp_digits}d}"


def format_f(value: float, float32: bool = False) -> str:
    """Go ``strconv.FormatFloat(v, 'f', -1, bits)``: fixed notation, shortest digits."""
    neg, digits, dp = shortest_digits(value, float32)
    return ("-" if neg else "") + _fixed(digits, dp)


def format_g(value: float, float32: bool = False) -> str:
    """Go ``%v`` / ``FormatFloat(v, 'g', -1, bits)``: exponent form when exp < -4 or exp >= 6.

    For shortest output strconv fixes the %e cutoff at precision 6 (``1e+06``, ``123456``).
    """
    neg, digits, dp = shortest_digits(value, float32)
    exp = dp - 1 if digits else 0
    body = _exponent(digits, dp, 2) if exp < -4 or exp >= 6 else _fixed(digits, dp)
    return ("-" if neg else "") + body


_F32_1E_6 = to_float32(1e-6)


def format_json(value: float, float32: bool = False) -> str:
    """Go ``encoding/json`` number: fixed, or ``1e-7``/``1e+21`` when abs < 1e-6 or >= 1e21."""
    neg, digits, dp = shortest_digits(value, float32)
    magnitude = abs(to_float32(value) if float32 else value)
    # Go compares a float32 with float32(1e-6), which is just below 1e-6 (spec §0.5).
    if magnitude != 0 and (magnitude < (_F32_1E_6 if float32 else 1e-6) or magnitude >= 1e21):
        body = _exponent(digits, dp, 1)
    else:
        body = _fixed(digits, dp)
    return ("-" if neg else "") + body
