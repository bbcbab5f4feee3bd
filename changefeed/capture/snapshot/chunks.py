"""Splitting a table into key ranges (chunks), and the reconciliation of one chunk with its binlog window.

Flink CDC's MySQL source (after Netflix's DBLog) reads a table without locks in chunks: for each
chunk it records a *low watermark* (a binlog position), SELECTs the rows of the chunk's key range,
records a *high watermark*, then replays the binlog events between the two whose key falls in the
range over the selected rows. What comes out is the chunk as the table held it at the high
watermark, whatever was written while it was read. The binlog stream after the snapshot drops an
event of a snapshotted table whose position is before the high watermark of its key's chunk
(`handover.Handover`): that change is already in the chunk's rows.

Boundaries come from the database (`split`: ``SELECT key ... ORDER BY key LIMIT 1 OFFSET n``
seeks), so a range is always the database's notion of "between", whatever the collation. The
ranges cover the whole key space, ``(-inf, b1), [b1, b2), ..., [bk, +inf)``, so a row inserted after
the split still lands in exactly one chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...model.events import Op, RowChange
from .order import Key, KeyOrder, contains

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class KeyRange:
    """``[lo, hi)`` of key values; None is unbounded."""

    lo: Key | None = None
    hi: Key | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "lo": list(self.lo) if self.lo is not None else None,
            "hi": list(self.hi) if self.hi is not None else None,
        }


def split(seek: Callable[[Key | None], Key | None], max_chunks: int = 1_000_000) -> list[KeyRange]:
    """The chunks of a table from successive seeks.

    ``seek(None)`` is the key ``chunk_size`` rows from the start (``ORDER BY key LIMIT 1 OFFSET
    chunk_size``) and ``seek(b)`` the key ``chunk_size`` rows after ``b`` among keys ``>= b``; None
    when fewer rows remain. Each boundary must be strictly after the previous one (the database's
    order, checked by the caller's SQL: ``>= b`` with ``OFFSET chunk_size >= 1`` never returns ``b``
    itself for a unique key).
    """
    bounds: list[Key] = []
    at: Key | None = None
    while len(bounds) < max_chunks:
        nxt = seek(at)
        if nxt is None:
            break
        bounds.append(nxt)
        at = nxt
    return ranges(bounds)


def ranges(bounds: Sequence[Key]) -> list[KeyRange]:
    """The ranges between ascending boundaries, open at both ends."""
    edges: list[Key | None] = [None, *bounds, None]
    return [KeyRange(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def reconcile(
    selected: Iterable[Row],
    window: Iterable[RowChange],
    key_of: Callable[[Row], Key],
    in_range: Callable[[Sequence[Key]], list[bool]],
) -> list[Row]:
    """The chunk at the high watermark: ``selected`` (read between the watermarks) with the window's
    events of keys in range replayed over it in binlog order.

    Replaying an event the SELECT already saw changes nothing (a delete of a missing key, an upsert
    of the same image), so it does not matter when during the window the SELECT ran. Keys are
    matched by their stored values: the SELECT and the binlog carry the same bytes for the same
    row version, and a key changed to a collation-equal value (``'a'`` -> ``'A'``) is an UPDATE whose
    old image removes the old spelling. Whether a key *not* selected lies in the range is asked of
    ``in_range`` (the database's order, `order.contains`); selected keys are in range by the SQL.
    """
    rows: dict[Key, Row] = {key_of(r): r for r in selected}
    events = list(window)
    unknown: dict[Key, None] = {}
    for ev in events:
        if ev.new is not None:
            k = key_of(ev.new)
            if k not in rows:
                unknown[k] = None
    inside = dict(zip(unknown, in_range(list(unknown)), strict=True)) if unknown else {}
    selected_keys = set(rows)
    for ev in events:
        if ev.old is not None:
            rows.pop(key_of(ev.old), None)
        if ev.op is not Op.DELETE and ev.new is not None:
            k = key_of(ev.new)
            if k in selected_keys or inside.get(k, False):
                rows[k] = ev.new
    return list(rows.values())


def chunk_filter(order: KeyOrder, rng: KeyRange) -> Callable[[Sequence[Key]], list[bool]]:
    """`reconcile`'s ``in_range`` for one chunk."""
    return lambda keys: contains(order, rng.lo, rng.hi, keys)


def key_getter(positions: Sequence[int]) -> Callable[[Row], Key]:
    pos = tuple(positions)
    return lambda row: tuple(row[i] for i in pos)
