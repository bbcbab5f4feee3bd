"""Merging a topic's partitions into one commit-ts-ordered stream, as TiCDC's kafka-consumer does.

Pure (no broker, no clock): `PartitionMerger.feed` takes the events decoded from one message of one
partition, `ready` hands out what may be applied now. Rules, each named after the TiCDC behaviour
it follows:

- **Resolved gating** (spec §1.11, seed 000 "Resolved Event"): each partition's resolved ts is the
  highest resolved/watermark it carried; the global resolved ts is the minimum over all partitions.
  An event is handed out only once the global resolved ts is >= its commit ts, in commit-ts order,
  rows of one commit ts together (rows before a DDL of the same ts), followed by
  ``Resolved(global)`` carrying the checkpoint position.
- **DDL once** (§1.8: DDL is broadcast to every partition): copies are deduplicated by
  (commit ts, query); the DDL is handed out when every partition's resolved ts passed it.
- **Duplicates** (seed 000 log 8, §1.11 at-least-once): a row or DDL with commit ts <= the
  partition's resolved ts is a resend; a row with commit ts below the highest commit ts already
  seen for its table on that partition is a resend (rows of one table arrive in commit-ts order on
  first delivery); a row identical to one already received for the same (table, commit ts) on that
  partition is a resend (TiCDC sends one event per row per transaction).
- **Checkpoint** (TiCDC's consumer commits only what it flushed): per partition, the offset of the
  first message not yet fully handed out (Kafka's "next offset to read" convention).

Known limit: a transaction that legitimately carries the *same* row event twice (possible with a
MySQL source that changes a row back and forth inside one transaction, unless capture merges the
changes per row as TiCDC does) is indistinguishable from a resend and loses the repeat.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import DDLEvent, Event, Resolved, RowChange

PartitionKey = Hashable
"""Names one partition, e.g. ``(topic, partition)``; only equality and hashing are used."""

_ROW, _DDL = 0, 1


def row_identity(row: RowChange) -> tuple[Any, ...]:
    """What makes two row events "the same row version" (seed 000 log 8 repeats log 7)."""
    return (row.schema, row.table, row.op, row.new, row.old)


# Heap entries are tuples (compared in C): (commit_ts, rank, partition order, arrival seq, offset,
# partition, event). ``rank`` puts rows before a DDL of the same commit ts; ``seq`` is unique, so
# the comparison never reaches the last three members.
_Item = tuple[int, int, int, int, int, PartitionKey, "RowChange | DDLEvent"]
_TS, _OFFSET, _PARTITION, _EVENT = 0, 4, 5, 6


@dataclass(slots=True)
class _Partition:
    order: int
    resolved: int = -1  # -1: no resolved event seen yet
    next_offset: int | None = None
    heap: list[_Item] = field(default_factory=list)
    # table -> (commit ts of its newest transaction here, identities of its rows)
    groups: dict[tuple[str, str], tuple[int, set[tuple[Any, ...]]]] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=dict)  # offset -> events not yet handed out


@dataclass(slots=True)
class MergeStats:
    """Counters for logs and tests: events dropped by each duplicate rule."""

    behind_resolved: int = 0
    fallback: int = 0
    replayed: int = 0
    ddl_copies: int = 0
    emitted: int = 0


class PartitionMerger:
    """Per-partition resolved ts, duplicate rules and commit-ts-ordered release (see module doc)."""

    def __init__(self, partitions: Iterable[PartitionKey] = ()) -> None:
        self._parts: dict[PartitionKey, _Partition] = {}
        self._ddls: list[_Item] = []  # heap
        self._ddl_keys: set[tuple[int, str]] = set()
        self._seq = 0
        self._next_order = 0
        self._emitted_resolved = -1
        self.stats = MergeStats()
        for p in partitions:
            self.add_partition(p)

    # ------------------------------------------------------------------ partitions

    @property
    def partitions(self) -> list[PartitionKey]:
        return list(self._parts)

    def add_partition(self, partition: PartitionKey, next_offset: int | None = None) -> None:
        """Start tracking ``partition``; until it carries a resolved event nothing is released."""
        if partition not in self._parts:
            self._parts[partition] = _Partition(order=self._next_order, next_offset=next_offset)
            self._next_order += 1

    def remove_partition(self, partition: PartitionKey) -> None:
        """Forget a partition (revoked from a consumer group); its unreleased events are dropped,
        the new owner re-reads them from the committed offset."""
        self._parts.pop(partition, None)
        kept = [d for d in self._ddls if d[_PARTITION] != partition]
        if len(kept) != len(self._ddls):
            self._ddls = kept
            heapq.heapify(self._ddls)
            self._ddl_keys = {(d[_TS], d[_EVENT].query) for d in kept}  # type: ignore[union-attr]

    # ------------------------------------------------------------------ input

    def feed(self, partition: PartitionKey, events: Sequence[Event], offset: int) -> None:
        """Take the events decoded from the message at ``offset`` of ``partition`` (in order)."""
        part = self._parts.get(partition)
        if part is None:
            raise KeyError(f"partition {partition!r} is not tracked by this merger")
        if part.next_offset is None or offset >= part.next_offset:
            part.next_offset = offset + 1
        for event in events:
            if isinstance(event, RowChange):
                self._row(part, partition, event, offset)
            elif isinstance(event, DDLEvent):
                self._ddl(part, partition, event, offset)
            elif isinstance(event, Resolved):
                # A resolved ts never goes back; an older one is a resend (§1.11).
                part.resolved = max(part.resolved, event.commit_ts)
            else:  # pragma: no cover - the model has no other kinds
                raise TypeError(f"unexpected event {type(event).__name__}")

    def _row(self, part: _Partition, partition: PartitionKey, row: RowChange, offset: int) -> None:
        ts = row.commit_ts
        if ts <= part.resolved:
            self.stats.behind_resolved += 1
            return
        table = (row.schema, row.table)
        current = part.groups.get(table)
        if current is not None and ts < current[0]:
            # TiCDC's consumer: "fallback" rows below the table's high watermark are resends.
            self.stats.fallback += 1
            return
        if current is None or ts > current[0]:
            seen: set[tuple[Any, ...]] = set()
            part.groups[table] = (ts, seen)
        else:
            seen = current[1]
        key = row_identity(row)
        if key in seen:
            # TiCDC emits one event per row per transaction: the same version again is a resend.
            self.stats.replayed += 1
            return
        seen.add(key)
        self._seq += 1
        part.pending[offset] = part.pending.get(offset, 0) + 1
        heapq.heappush(part.heap, (ts, _ROW, part.order, self._seq, offset, partition, row))

    def _ddl(self, part: _Partition, partition: PartitionKey, ddl: DDLEvent, offset: int) -> None:
        if ddl.commit_ts <= part.resolved:
            self.stats.behind_resolved += 1
            return
        key = (ddl.commit_ts, ddl.query)
        if key in self._ddl_keys:
            self.stats.ddl_copies += 1  # the broadcast copy of another partition
            return
        self._ddl_keys.add(key)
        self._seq += 1
        part.pending[offset] = part.pending.get(offset, 0) + 1
        heapq.heappush(self._ddls, (ddl.commit_ts, _DDL, part.order, self._seq, offset, partition, ddl))

    @staticmethod
    def _unpend(part: _Partition, offset: int) -> None:
        left = part.pending[offset] - 1
        if left:
            part.pending[offset] = left
        else:
            del part.pending[offset]

    # ------------------------------------------------------------------ output

    @property
    def global_resolved(self) -> int:
        """Min of the partitions' resolved ts; -1 while any partition has none (or none tracked)."""
        if not self._parts:
            return -1
        return min(p.resolved for p in self._parts.values())

    def resolved(self) -> dict[PartitionKey, int]:
        """Each partition's resolved ts (-1: none yet)."""
        return {key: part.resolved for key, part in self._parts.items()}

    def ready(self) -> list[Event]:
        """Events the global resolved ts now covers, in commit-ts order, then ``Resolved``.

        The trailing ``Resolved(global)`` has ``position`` = `checkpoint` (partition -> next offset)
        and is handed out each time the global resolved ts advances.
        """
        g = self.global_resolved
        if g < 0 or g <= self._emitted_resolved:
            return []
        items: list[_Item] = []
        for part in self._parts.values():
            for table, (ts, _) in list(part.groups.items()):
                if ts <= g:
                    del part.groups[table]  # later copies are behind resolved
            heap = part.heap
            while heap and heap[0][_TS] <= g:
                items.append(heapq.heappop(heap))
        while self._ddls and self._ddls[0][_TS] <= g:
            ddl = heapq.heappop(self._ddls)
            self._ddl_keys.discard((ddl[_TS], ddl[_EVENT].query))  # type: ignore[union-attr]
            items.append(ddl)
        items.sort()
        out: list[Event] = []
        parts = self._parts
        for item in items:
            self._unpend(parts[item[_PARTITION]], item[_OFFSET])
            out.append(item[_EVENT])
        self.stats.emitted += len(out)
        self._emitted_resolved = g
        out.append(Resolved(commit_ts=g, position=self.checkpoint()))
        return out

    def checkpoint(self) -> dict[PartitionKey, int]:
        """Partition -> offset of the first message not fully handed out (resume/commit there).

        Partitions that have not been read yet are left out.
        """
        out: dict[PartitionKey, int] = {}
        for key, part in self._parts.items():
            if part.pending:
                out[key] = min(part.pending)
            elif part.next_offset is not None:
                out[key] = part.next_offset
        return out

    def buffered(self) -> int:
        """Events waiting for the global resolved ts (for back-pressure and logs)."""
        return len(self._ddls) + sum(len(p.heap) for p in self._parts.values())
