"""Key order: how snapshot code compares primary/unique-key values without trusting Python's ``<``.

A chunk is a key range the database computed (`chunks.split`); deciding whether a key from a
binlog event falls into a chunk needs the database's own order. Python's order agrees with
MySQL's only for some types: integers (and ENUM/SET/BIT/YEAR as their numbers), DECIMAL,
FLOAT/DOUBLE, DATE/DATETIME text (fixed width), and binary strings (memcmp, NO PAD). Text
columns compare by their collation (case- and accent-insensitive, PAD SPACE: ``'a' = 'A ' ``),
TIME text has a sign, TIMESTAMP text is in the changefeed's time zone: for keys with such a
column the order is asked of the database (`reader.DatabaseOrder`), never computed here.

An order gives *dense ranks*: keys equal by the collation get the same rank, so both equality
and order come from one answer.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ...model.schema import Column
from ...model.types import DATE_TYPES, NUMBER_TYPES, UINT_VALUE_TYPES, TypeCode

Key = tuple[Any, ...]
"""A key's values in key-column order, as model values (`changefeed.model.values`)."""

# MySQL orders ENUM by member index and SET by its bitmask, our model values (UINT_VALUE_TYPES);
# DATETIME is 'YYYY-MM-DD HH:MM:SS[.f]' with the column's fixed fsp: text order is time order.
_PYTHON_ORDERED = NUMBER_TYPES | UINT_VALUE_TYPES | DATE_TYPES | {TypeCode.DATETIME}


class KeyOrder(Protocol):
    """Dense ranks of keys in the database's order (equal keys share a rank)."""

    def rank(self, keys: Sequence[Key]) -> list[int]: ...


def python_orderable(columns: Sequence[Column]) -> bool:
    """Whether Python's order of the model values is the database's order for every key column."""
    return all(c.type_code in _PYTHON_ORDERED or c.is_bytes for c in columns)


class PythonOrder:
    """Dense ranks by Python's order of a (collation-free) sort key; the identity by default."""

    def __init__(self, sort_key: Callable[[Key], Any] | None = None) -> None:
        self.sort_key = sort_key or (lambda k: k)

    def rank(self, keys: Sequence[Key]) -> list[int]:
        weights = [self.sort_key(k) for k in keys]
        distinct = sorted(set(weights))
        where = {w: i for i, w in enumerate(distinct)}
        return [where[w] for w in weights]


def contains(order: KeyOrder, lo: Key | None, hi: Key | None, keys: Sequence[Key]) -> list[bool]:
    """Which ``keys`` lie in ``[lo, hi)`` (None: unbounded), by ``order``; one rank call."""
    if not keys:
        return []
    bounds = [b for b in (lo, hi) if b is not None]
    ranks = order.rank([*bounds, *keys])
    lo_rank = ranks[0] if lo is not None else None
    hi_rank = ranks[len(bounds) - 1] if hi is not None else None
    out = []
    for r in ranks[len(bounds) :]:
        out.append((lo_rank is None or r >= lo_rank) and (hi_rank is None or r < hi_rank))
    return out


def locate(order: KeyOrder, boundaries: Sequence[Key], keys: Sequence[Key]) -> list[int]:
    """The chunk index of each key: chunk i is ``[boundaries[i-1], boundaries[i])`` (open at both ends).

    ``boundaries`` are ascending (as the database returned them); one rank call for all keys.
    """
    if not keys:
        return []
    if not boundaries:
        return [0] * len(keys)
    ranks = order.rank([*boundaries, *keys])
    bounds = ranks[: len(boundaries)]
    return [bisect.bisect_right(bounds, r) for r in ranks[len(boundaries) :]]
