"""DECIMAL value text as every decoder accepts it: one rule for Canal-JSON, Simple and Open Protocol.

TiDB writes DECIMAL values with ``MyDecimal.String()`` (spec §0.4): digits with an optional
``-`` and a point between digits, never an exponent, at most 65 digits (MySQL's maximum
precision; with scale at most 30 a leading ``0.`` stays within it). Canal's BigDecimal
``toPlainString()`` writes the same shape. Anything else is refused, which also keeps hostile
text cheap: ``Decimal("1e999999999")`` is small, but printing it (JSON, SQL, Parquet) writes a
billion digits. The shape is exactly what is printed, so a columnar decoder may keep the text.
"""

from __future__ import annotations

import re
from decimal import Decimal

MAX_DECIMAL_DIGITS = 65
DECIMAL_PATTERN = r"-?[0-9]+(?:\.[0-9]+)?"
"""The shape (no length bound); Python's re and Arrow's RE2 read it the same (blocks.py uses RE2)."""
_MATCH = re.compile(DECIMAL_PATTERN).fullmatch
_MAX_TEXT = MAX_DECIMAL_DIGITS + 2  # a sign and a point besides the digits
RULE = f"digits with an optional '-' and '.', no exponent, at most {MAX_DECIMAL_DIGITS} digits"


def is_decimal_text(text: str) -> bool:
    """Whether ``text`` is DECIMAL text by the shared rule (length checked before the pattern)."""
    if len(text) > _MAX_TEXT or not _MATCH(text):
        return False
    return len(text) - text.startswith("-") - ("." in text) <= MAX_DECIMAL_DIGITS


def parse_decimal_text(text: str) -> Decimal:
    """``text`` as a Decimal; ValueError (quoting at most 80 characters of it) when it breaks the rule."""
    if not is_decimal_text(text):
        raise ValueError(f"{text[:80]!r} is not DECIMAL text ({RULE})")
    return Decimal(text)
