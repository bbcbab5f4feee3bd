"""From the snapshot to the binlog stream: no gap, no double effect (Flink CDC's hand-over rule).

The stream restarts at the earliest low watermark of the snapshot. Until it passes a table's last
high watermark, each of that table's row changes is checked against the chunk its key falls in:
a change at a binlog position before that chunk's high watermark is already in the chunk's rows
(`chunks.reconcile`) and is dropped; one at or after it is emitted. An UPDATE that moves a row
between chunks is split: its delete half belongs to the old key's chunk, its insert half to the
new key's chunk, and each half is kept or dropped by its own chunk's watermark.

A keyless table has one chunk (its consistent read): everything before the read's position is
dropped, everything after kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...model.events import Op, RowChange
from .order import Key, KeyOrder, locate

PositionKey = Any
"""A sortable binlog position (`binlog.position.file_key` of the file, offset); opaque here."""


@dataclass
class TableCut:
    """One snapshotted table: key columns (names; empty for a keyless table), chunk boundaries, and
    each chunk's high watermark (``len(boundaries) + 1`` of them)."""

    key_columns: tuple[str, ...]
    boundaries: Sequence[Key]
    highs: Sequence[PositionKey]
    order: KeyOrder

    def __post_init__(self) -> None:
        if len(self.highs) != len(self.boundaries) + 1:
            raise ValueError(f"{len(self.boundaries)} boundaries need {len(self.boundaries) + 1} watermarks")
        self.last = max(self.highs)


class Handover:
    """Filters the binlog stream's row changes while it overlaps the snapshot (module docstring)."""

    def __init__(self, tables: Mapping[tuple[str, str], TableCut]) -> None:
        self.tables = dict(tables)
        self.until: PositionKey | None = max((t.last for t in self.tables.values()), default=None)

    def passed(self, position: PositionKey) -> bool:
        """Whether nothing at or after ``position`` needs a check any more."""
        return self.until is None or position >= self.until

    def apply(self, changes: Sequence[RowChange], position_of: Callable[[RowChange], PositionKey]) -> list[RowChange]:
        """``changes`` (binlog order) with the ones a chunk already holds dropped or halved."""
        return [ch for ch in self.outcomes(changes, position_of) if ch is not None]

    def outcomes(
        self, changes: Sequence[RowChange], position_of: Callable[[RowChange], PositionKey]
    ) -> list[RowChange | None]:
        """What becomes of each change, aligned with ``changes``: itself, its kept half, or None (dropped)."""
        todo: dict[tuple[str, str], list[tuple[int, str, Key]]] = {}  # table -> (change index, half, key)
        positions: list[PositionKey] = []
        for i, ch in enumerate(changes):
            pos = position_of(ch)
            positions.append(pos)
            cut = self.tables.get((ch.schema, ch.table))
            if cut is None or pos >= cut.last:
                continue
            if not cut.key_columns:
                continue
            index = ch.table_schema.column_index
            idx = [index[n] for n in cut.key_columns]
            jobs = todo.setdefault((ch.schema, ch.table), [])
            if ch.old is not None:
                jobs.append((i, "old", tuple(ch.old[j] for j in idx)))
            if ch.new is not None:
                jobs.append((i, "new", tuple(ch.new[j] for j in idx)))
        chunk_of: dict[tuple[int, str], int] = {}
        for table, jobs in todo.items():
            cut = self.tables[table]
            for (i, half, _), c in zip(jobs, locate(cut.order, cut.boundaries, [k for _, _, k in jobs]), strict=True):
                chunk_of[(i, half)] = c
        out: list[RowChange | None] = []
        for i, ch in enumerate(changes):
            cut = self.tables.get((ch.schema, ch.table))
            pos = positions[i]
            if cut is None or pos >= cut.last:
                out.append(ch)
            elif not cut.key_columns:
                out.append(ch if pos >= cut.highs[0] else None)
            else:
                keep_old = ch.old is None or pos >= cut.highs[chunk_of[(i, "old")]]
                keep_new = ch.new is None or pos >= cut.highs[chunk_of[(i, "new")]]
                out.append(_half(ch, keep_old, keep_new))
        return out


def _half(ch: RowChange, keep_old: bool, keep_new: bool) -> RowChange | None:
    if keep_old and keep_new:
        return ch
    if ch.op is Op.UPDATE and keep_old:  # the new key's chunk already holds the new row
        return RowChange(Op.DELETE, ch.table_schema, ch.commit_ts, old=ch.old, position=ch.position)
    if ch.op is Op.UPDATE and keep_new:  # the old key's chunk already went without the old row
        return RowChange(Op.INSERT, ch.table_schema, ch.commit_ts, new=ch.new, position=ch.position)
    return None
