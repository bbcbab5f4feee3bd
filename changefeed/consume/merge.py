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
  first delivery, TiCDC's consumer calls them "fallback"). Within one transaction (a table's rows
  at one commit ts on one partition, a "group") see below.
- **Checkpoint** (TiCDC's consumer commits only what it flushed): per partition, the offset of the
  first message not yet fully handed out (Kafka's "next offset to read" convention).

Resends inside a transaction. TiDB writes each key once per transaction, so TiCDC emits at most
one event per row per transaction and its consumers never have to tell a resend from a repeat. A
MySQL transaction can change a row A->B->A->B: the binlog, and so our stream, carries the
event A->B twice, and a rule "identical content is a resend" loses the last step. Capture could
fold the changes per key as TiDB does, but that only fixes our own capture, and even TiCDC's
stream repeats an event legitimately (a table without a key inserting the same values twice).
Nor can a position alone tell: a resend lands at new offsets (a producer retry, or a capture that
restarted from its checkpoint and re-sends whole transactions, re-batched). What a resend keeps is
its content *and its place in the sequence*: it repeats what was received before, in order. So:

1. Rows of one message never resend each other (a producer sends a message once; it is the
   retry that may come twice). A repeat of a row first received in the same message is kept.
2. **Key rule.** A repeated row event none of whose keys (handle key of each image; the whole
   image without one) was touched by any row received after its previous copy is a resend: a
   row cannot legitimately go through the same change again without changing in between. This
   drops TiCDC's resends in any order (seed 000 log 8; a retried message after newer ones).
3. **Replay rule.** Any other repeat (its row did change in between: A->B, B->A, then A->B
   again) may be a legitimate step or a replay of the transaction's tail. It opens a *replay*:
   the rows that follow are held back while they go on repeating, in order, the rows received
   before, from some earlier copy of the first one (``seq[k:]``; several starts are followed at
   once). A replay that reaches the last row received before it is a resend: its rows are
   dropped. A row that breaks the sequence (new content, or a repeat that does not fit) or the
   end of the transaction (its partition's Resolved, a newer commit ts of the table) means it was
   not: the held rows are kept, in arrival order. A repeat of a row before the one the replay
   expects restarts it (a second restart cut the first replay short). A replay is not
   opened by a row whose message already brought the transaction new rows (a resent message
   starts with what it resends).

Known limits (the stream alone cannot tell): a transaction whose rows, from some message on,
legitimately repeat everything received in the transaction from some point to the end (A->B,
B->A, A->B, B->A in separate messages) loses that repeat; two equal events of a keyless table in
separate messages are one; a message retried after newer messages of its transaction (a
non-idempotent producer with several requests in flight; ours is idempotent) is a resend only by
the key rule, so one that changes a row twice is kept. Keeping a resend of whole transactions
is harmless to an idempotent apply (safe mode), losing a step is not: the rules lean that way.

Row blocks (`RowBlock`, a columnar decoder's output) are merged segment by segment: a segment is
rows of one table at one commit ts, so the first two duplicate rules drop or keep it whole; a
segment whose rows are all new to their transaction waits in the heap as one item, the others go
row by row. A group's identities are the rows' bytes as received (`TableRows.raw`) while every
member carries them (one encoder's bytes include op and images, so bytes-equal is
`row_identity`-equal); a member without them (a `RowChange`, a block without ``raw``, a restored
state) switches the group to `row_identity`. Accepted rows of a segment wait as runs; rows a
replay held and kept wait as runs of their own. `ready` hands released segments out as
`RowBlock`s (consecutive ones in one block), and feeding a block gives exactly what feeding its
`RowBlock.rows` gives: the same rows, positions and order after `expand_blocks`, the same stats
(rows counted one by one), checkpoints and state.

`snapshot`/`restore` turn the state into plain data (JSON-ready numbers and strings plus the
unreleased events, a replay's held rows too) so a job can save it between batches without pickle
(changefeed/spark/merge.py).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from ..errors import CaptureError
from ..model import DDLEvent, Event, Resolved, RowChange
from ..model.rowblock import RowBlock, Segment, TableRows

PartitionKey = Hashable
"""Names one partition, e.g. ``(topic, partition)``; only equality and hashing are used."""

_ROW, _DDL = 0, 1
_ACCEPT, _HOLD, _DROP = 0, 1, 2  # what the duplicate rules make of a row


class MergeBufferFullError(CaptureError):
    """More message bytes wait for the global resolved ts than the merger may hold."""


def row_identity(row: RowChange) -> tuple[Any, ...]:
    """What makes two row events "the same row version" (seed 000 log 8 repeats log 7)."""
    return (row.schema, row.table, row.op, row.new, row.old)


@dataclass(slots=True)
class _Piece:
    """Consecutive rows ``[start, start + rows)`` of ``table`` waiting as one heap item: a block's
    segment, or a run of the rows of one that survived the identity rule."""

    table: TableRows
    start: int
    rows: int
    position: Mapping[str, Any] | None
    skip: int | None  # the first row's (`Segment.skip` semantics)

    def expand(self, commit_ts: int) -> list[RowChange]:
        """The rows as `RowChange`s with their positions (as `RowBlock.segment_rows` gives them)."""
        seg = Segment(0, self.rows, commit_ts, self.position, self.skip)
        out = []
        for j in range(self.rows):
            row = self.table.row(self.start + j, commit_ts)
            row.position = seg.row_position(j)
            out.append(row)
        return out


# Heap entries are tuples (compared in C): (commit_ts, rank, partition order, arrival seq, offset,
# partition, event). ``rank`` puts rows before a DDL of the same commit ts; ``seq`` is unique, so
# the comparison never reaches the last three members. A `_Piece` of n rows holds the n arrival
# numbers ``seq .. seq + n - 1`` (the ones its rows have when fed one by one) and counts n in its
# message's pending count.
_Item = tuple[int, int, int, int, int, PartitionKey, "RowChange | DDLEvent | _Piece"]
# Final: literal indexes, so a type checker knows each member's type.
_TS: Final = 0
_OFFSET: Final = 4
_PARTITION: Final = 5
_EVENT: Final = 6


# ------------------------------------------------------------------ duplicate rules per (table, commit ts)

# What a held row (`_Replay.held`) is: a repeat that matched the replay (dropped if the replay is a
# resend, kept if not), or one that is a resend by the key rule anyway (dropped whichever way).
_MATCH, _DUP = 0, 1
_KINDS = ("match", "dup")
_MAX_CURSORS = 64  # replay starts followed at once (a run of identical rows could make thousands)


def _row_keys(row: RowChange) -> list[Any]:
    """The keys a row event touches: the handle key of each image (the whole image without one)."""
    handle = row.table_schema.handle_key
    return [tuple(image[i] for i in handle) if handle else image for image in (row.old, row.new) if image is not None]


class _Index:
    """Where identities and keys were last seen in a group's history (accepted rows, then held ones)."""

    __slots__ = ("keys", "last", "size", "where")

    def __init__(self) -> None:
        self.where: dict[Any, list[int]] = {}  # identity -> indexes in the group's ``seq``
        self.last: dict[Any, int] = {}  # identity -> its last position in the history
        self.keys: dict[Any, int] = {}  # key -> the last position of a row touching it
        self.size = 0

    def add(self, identity: Any, row: RowChange, seq_index: int | None) -> None:
        at = self.size
        self.size += 1
        if seq_index is not None:
            self.where.setdefault(identity, []).append(seq_index)
        self.last[identity] = at
        for key in _row_keys(row):
            self.keys[key] = at

    def resent(self, identity: Any, row: RowChange) -> bool:
        """The key rule: no row touching this row's keys arrived since its last copy."""
        last = self.last[identity]
        return all(self.keys.get(key, -1) <= last for key in _row_keys(row))


@dataclass(slots=True)
class _Replay:
    """Repeats that may be a resend of the group's tail (``seq[k:]``), waiting to be decided.

    While it is open the group's ``seq`` does not change: every row of the group is held here.
    """

    cursors: set[int]  # per possible start k, the index in ``seq`` of the next row it expects
    held: list[tuple[RowChange | _Piece, Any, int, int, int]] = field(default_factory=list)
    # (row, identity, kind, arrival number, offset) of each row it holds back


class _Group:
    """A table's newest transaction on a partition: its accepted rows' identities in arrival order.

    Identities are raw bytes (``raw``) while every row came with them, else `row_identity` tuples.
    ``members`` are the accepted rows themselves (pieces and RowChanges, in ``seq`` order). The
    index for the key rule is built only once a repeat arrives, and dropped when the history
    changes other than by growing (a replay decided, identities converted).
    """

    __slots__ = ("index", "members", "offs", "raw", "replay", "seen", "seq", "ts")

    def __init__(self, ts: int, raw: bool = False) -> None:
        self.ts = ts
        self.raw = raw
        self.seq: list[Any] = []
        self.offs: list[int] = []  # the offset each of ``seq`` came in (non-decreasing)
        self.seen: set[Any] = set()
        self.members: list[RowChange | _Piece] = []
        self.index: _Index | None = None
        self.replay: _Replay | None = None

    def rows(self) -> Iterator[RowChange]:
        """The accepted rows, in ``seq`` order."""
        for m in self.members:
            if isinstance(m, _Piece):
                yield from m.expand(self.ts)
            else:
                yield m

    def held_row(self, unit: RowChange | _Piece) -> RowChange:
        return unit.expand(self.ts)[0] if isinstance(unit, _Piece) else unit

    def values(self) -> None:
        """Switch to `row_identity` identities (a member without raw bytes arrived)."""
        if not self.raw:
            return
        self.seq = [row_identity(r) for r in self.rows()]
        self.seen = set(self.seq)
        if self.replay is not None:
            self.replay.held = [
                (u, row_identity(self.held_row(u)), kind, n, o) for u, _, kind, n, o in self.replay.held
            ]
        self.raw, self.index = False, None

    def indexed(self) -> _Index:
        if self.index is None:
            index = _Index()
            for n, (identity, row) in enumerate(zip(self.seq, self.rows(), strict=True)):
                index.add(identity, row, n)
            if self.replay is not None:
                for unit, identity, _, _, _ in self.replay.held:
                    index.add(identity, self.held_row(unit), None)
            self.index = index
        return self.index

    def accept(self, identity: Any, offset: int, row: RowChange | None) -> None:
        """One accepted row's identity (its piece goes to ``members`` by the caller)."""
        self.seq.append(identity)
        self.offs.append(offset)
        self.seen.add(identity)
        if self.index is not None:
            assert row is not None
            self.index.add(identity, row, len(self.seq) - 1)


@dataclass(slots=True)
class _Partition:
    order: int
    resolved: int = -1  # -1: no resolved event seen yet
    next_offset: int | None = None
    heap: list[_Item] = field(default_factory=list)
    groups: dict[tuple[str, str], _Group] = field(default_factory=dict)  # table -> its newest transaction
    pending: dict[int, int] = field(default_factory=dict)  # offset -> rows and DDLs not yet handed out
    sizes: dict[int, int] = field(default_factory=dict)  # offset -> bytes of that message, while it is pending


@dataclass(slots=True)
class MergeStats:
    """Counters for logs and tests: events dropped by each duplicate rule."""

    behind_resolved: int = 0
    fallback: int = 0
    replayed: int = 0
    ddl_copies: int = 0
    emitted: int = 0  # rows (a released block counts its rows) and DDLs


class PartitionMerger:
    """Per-partition resolved ts, duplicate rules and commit-ts-ordered release (see module doc)."""

    def __init__(self, partitions: Iterable[PartitionKey] = (), max_pending_bytes: int | None = None) -> None:
        self.max_pending_bytes = max_pending_bytes  # None: unbounded
        self._held = 0  # bytes of the messages whose events wait here (as `feed` was told them)
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
        gone = self._parts.pop(partition, None)
        if gone is not None:
            self._held -= sum(gone.sizes.values())
        kept = [d for d in self._ddls if d[_PARTITION] != partition]
        if len(kept) != len(self._ddls):
            self._ddls = kept
            heapq.heapify(self._ddls)
            self._ddl_keys = {(d[_TS], d[_EVENT].query) for d in kept}  # type: ignore[union-attr]

    # ------------------------------------------------------------------ input

    def feed(self, partition: PartitionKey, events: Sequence[Event | RowBlock], offset: int, size: int = 0) -> None:
        """Take the events decoded from the message at ``offset`` of ``partition`` (in order).

        Rows may come as `RowChange`s or in `RowBlock`s, both on one partition (see the module doc).
        A block's segment of a Kafka message (``skip`` None, a position with an ``offset``) counts at
        that message: a columnar decoder hands a run of messages' rows over as one block, in the
        run's first message's events (`DebeziumBlockDecoder.decode`); the later messages are fed
        after it, with their own sizes.
        ``size``: the message's bytes, counted against ``max_pending_bytes`` while any of its
        events wait (`MergeBufferFullError` past it: one partition's resolved ts holds back a
        growing backlog of the others, and memory must not grow without bound).
        """
        part = self._parts.get(partition)
        if part is None:
            raise KeyError(f"partition {partition!r} is not tracked by this merger")
        if part.next_offset is None or offset >= part.next_offset:
            part.next_offset = offset + 1
        for event in events:
            if isinstance(event, RowChange):
                self._row(part, partition, event, offset)
            elif isinstance(event, RowBlock):
                for seg, start in event.walk():
                    if seg.rows:
                        self._segment(part, partition, event.tables[seg.table], seg, start, _offset(seg, offset))
            elif isinstance(event, DDLEvent):
                self._ddl(part, partition, event, offset)
            elif isinstance(event, Resolved):
                # A resolved ts never goes back; an older one is a resend (§1.11).
                if event.commit_ts > part.resolved:
                    part.resolved = event.commit_ts
                    for group in part.groups.values():  # the transactions it covers are complete
                        if group.replay is not None and group.ts <= event.commit_ts:
                            self._settle(part, partition, group, resend=False)
            else:  # pragma: no cover - the model has no other kinds
                raise TypeError(f"unexpected event {type(event).__name__}")
        if size and offset in part.pending and offset not in part.sizes:
            part.sizes[offset] = size
            self._held += size
            if self.max_pending_bytes is not None and self._held > self.max_pending_bytes:
                raise self._full(partition, offset)

    @property
    def held_bytes(self) -> int:
        """Bytes of the messages whose events wait for the global resolved ts."""
        return self._held

    def _full(self, partition: PartitionKey, offset: int) -> MergeBufferFullError:
        slow_key, slow = min(self._parts.items(), key=lambda kv: kv[1].resolved)
        held = sum(len(p.sizes) for p in self._parts.values())
        return MergeBufferFullError(
            f"kafka merge buffer: {self._held} bytes of {held} messages wait for the global resolved ts "
            f"{self.global_resolved}; partition {slow_key} is at resolved ts {slow.resolved} (next offset "
            f"{slow.next_offset}): more than max-pending-bytes {self.max_pending_bytes}",
            where=f"partition {partition} offset {offset}",
        )

    def _group(
        self, part: _Partition, partition: PartitionKey, table: tuple[str, str], ts: int, raw: bool
    ) -> _Group | None:
        """The group a row of ``table`` at ``ts`` joins; None: a fallback resend (below the table's newest ts)."""
        group = part.groups.get(table)
        if group is not None and ts < group.ts:
            return None
        if group is None or ts > group.ts:
            if group is not None and group.replay is not None:
                self._settle(part, partition, group, resend=False)  # the transaction ended: not a resend
            group = part.groups[table] = _Group(ts, raw)
        return group

    def _row(self, part: _Partition, partition: PartitionKey, row: RowChange, offset: int) -> None:
        ts = row.commit_ts
        if ts <= part.resolved:
            self.stats.behind_resolved += 1
            return
        group = self._group(part, partition, (row.schema, row.table), ts, raw=False)
        if group is None:
            # TiCDC's consumer: "fallback" rows below the table's high watermark are resends.
            self.stats.fallback += 1
            return
        group.values()
        identity = row_identity(row)
        if group.replay is None and group.index is None and identity not in group.seen:
            group.accept(identity, offset, None)
        elif self._place(part, partition, group, identity, offset, lambda: row, lambda: row) != _ACCEPT:
            return
        self._seq += 1
        part.pending[offset] = part.pending.get(offset, 0) + 1
        group.members.append(row)
        heapq.heappush(part.heap, (ts, _ROW, part.order, self._seq, offset, partition, row))

    def _segment(
        self, part: _Partition, partition: PartitionKey, rows: TableRows, seg: Segment, start: int, offset: int
    ) -> None:
        """One segment of a block: the rules of `_row` for each of its rows, applied at once where they agree."""
        ts, k = seg.commit_ts, seg.rows
        if ts <= part.resolved:
            self.stats.behind_resolved += k
            return
        table = (rows.table_schema.schema, rows.table_schema.table)
        group = self._group(part, partition, table, ts, raw=rows.raw is not None)
        if group is None:
            self.stats.fallback += k
            return
        if rows.raw is None:
            group.values()
        expanded: list[RowChange] = []
        if group.raw:
            identities = rows.raw[start : start + k]  # type: ignore[index]
        else:
            expanded = _Piece(rows, start, k, seg.position, seg.skip).expand(ts)
            identities = [row_identity(r) for r in expanded]
        if group.replay is None and group.index is None and group.seen.isdisjoint(identities):
            # Every row is new to the transaction (repeats inside one message are never resends).
            group.seq.extend(identities)
            group.offs.extend([offset] * k)
            group.seen.update(identities)
            piece = _Piece(rows, start, k, seg.position, seg.skip)
            group.members.append(piece)
            heapq.heappush(part.heap, (ts, _ROW, part.order, self._seq + 1, offset, partition, piece))
            self._seq += k
            part.pending[offset] = part.pending.get(offset, 0) + k
            return
        run: _Piece | None = None  # the piece the accepted rows just before this one grow
        for j in range(k):
            row_of = _lazy_row(rows, start + j, ts, expanded[j] if expanded else None)
            skip = None if seg.skip is None else seg.skip + j

            def unit(j: int = j, skip: int | None = skip) -> _Piece:
                return _Piece(rows, start + j, 1, seg.position, skip)

            if self._place(part, partition, group, identities[j], offset, row_of, unit) != _ACCEPT:
                run = None
                continue
            self._seq += 1
            if run is None:
                run = unit()
                group.members.append(run)
                heapq.heappush(part.heap, (ts, _ROW, part.order, self._seq, offset, partition, run))
            else:
                run.rows += 1
            part.pending[offset] = part.pending.get(offset, 0) + 1

    def _place(
        self,
        part: _Partition,
        partition: PartitionKey,
        group: _Group,
        identity: Any,
        offset: int,
        row_of: Callable[[], RowChange],
        unit: Callable[[], RowChange | _Piece],
    ) -> int:
        """The duplicate rules for one row of ``group`` (see the module doc): _ACCEPT (the caller
        files it, ``group`` has its identity), _HOLD (a replay holds it) or _DROP (a resend)."""
        rep = group.replay
        starts: list[int] = []
        if identity in group.seen:
            # Where a replay of this row could start: its copies that came in earlier messages.
            bound = bisect_left(group.offs, offset)
            starts = [n for n in group.indexed().where.get(identity, ()) if n < bound]
        if not starts:  # new to the transaction, or a repeat inside one message: never a resend
            if rep is not None:  # and a resend would have gone on with the rows it resends
                self._settle(part, partition, group, resend=False)
            group.accept(identity, offset, row_of() if group.index is not None else None)
            return _ACCEPT
        index = group.indexed()
        row = row_of()
        resent = index.resent(identity, row)
        seq = group.seq
        if rep is None:
            if resent:
                self.stats.replayed += 1
                return _DROP
            if group.offs[-1] == offset:
                # This message brought the transaction new rows before this one: a message that
                # resends rows starts with them, so this is the row changing back, no resend.
                group.accept(identity, offset, row)
                return _ACCEPT
            rep = group.replay = _Replay(_cap({n + 1 for n in starts}))
            kind = _MATCH
        else:
            moved = {c + 1 for c in rep.cursors if c < len(seq) and seq[c] == identity}
            if moved:
                kind = _DUP if resent else _MATCH
            elif resent:
                self.stats.replayed += 1
                return _DROP
            elif starts[0] < max(rep.cursors):
                # Back behind where the replay got to: another restart cut it short.
                moved, kind = {n + 1 for n in starts}, _MATCH
            else:
                # Not the row the replay needs next, and a legitimate change of its row: what the
                # replay holds was no resend either. This row is judged afresh.
                self._settle(part, partition, group, resend=False)
                return self._place(part, partition, group, identity, offset, row_of, unit)
            rep.cursors = _cap(moved)
        self._seq += 1
        part.pending[offset] = part.pending.get(offset, 0) + 1
        rep.held.append((unit(), identity, kind, self._seq, offset))
        index.add(identity, row, None)
        if len(seq) in rep.cursors:
            self._settle(part, partition, group, resend=True)
        return _HOLD

    def _settle(self, part: _Partition, partition: PartitionKey, group: _Group, *, resend: bool) -> None:
        """Decide ``group``'s replay: a resend (every row it holds dropped) or not (kept, but for
        the key rule's resends)."""
        rep = group.replay
        assert rep is not None
        group.replay, group.index = None, None
        last: tuple[_Piece, int, int] | None = None  # the piece filed last, its first arrival number, offset
        for held, identity, kind, n, offset in rep.held:
            if kind == _DUP or resend:
                self.stats.replayed += 1
                self._unpend(part, offset)
                continue
            group.accept(identity, offset, None)
            if isinstance(held, _Piece) and last is not None and _continues(*last, held, n, offset):
                last[0].rows += 1
                continue
            group.members.append(held)
            heapq.heappush(part.heap, (group.ts, _ROW, part.order, n, offset, partition, held))
            last = (held, n, offset) if isinstance(held, _Piece) else None

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

    def _unpend(self, part: _Partition, offset: int, n: int = 1) -> None:
        left = part.pending[offset] - n
        if left:
            part.pending[offset] = left
        else:
            del part.pending[offset]
            self._held -= part.sizes.pop(offset, 0)

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

    def ready(self) -> list[Event | RowBlock]:
        """Events the global resolved ts now covers, in commit-ts order, then ``Resolved``.

        Rows fed in blocks come out in blocks (consecutive released segments share one); rows fed
        as `RowChange`s come out as they went in. The trailing ``Resolved(global)`` has ``position``
        = `checkpoint` (partition -> next offset) and is handed out each time the global resolved
        ts advances.
        """
        g = self.global_resolved
        if g < 0 or g <= self._emitted_resolved:
            return []
        items: list[_Item] = []
        for key, part in self._parts.items():
            for table, group in list(part.groups.items()):
                if group.ts <= g:
                    if group.replay is not None:  # pragma: no cover - the partition's resolved ts settled it
                        self._settle(part, key, group, resend=False)
                    del part.groups[table]  # later copies are behind resolved
            heap = part.heap
            while heap and heap[0][_TS] <= g:
                items.append(heapq.heappop(heap))
        while self._ddls and self._ddls[0][_TS] <= g:
            ddl = heapq.heappop(self._ddls)
            self._ddl_keys.discard((ddl[_TS], ddl[_EVENT].query))  # type: ignore[union-attr]
            items.append(ddl)
        items.sort()
        out: list[Event | RowBlock] = []
        parts = self._parts
        run: list[tuple[int, _Piece]] = []  # consecutive released pieces, for one block
        emitted = 0
        for item in items:
            event = item[_EVENT]
            if type(event) is _Piece:
                run.append((item[_TS], event))
                n = event.rows
            else:
                if run:
                    out.append(_block(run))
                    run = []
                out.append(event)  # type: ignore[arg-type]
                n = 1
            self._unpend(parts[item[_PARTITION]], item[_OFFSET], n)
            emitted += n
        if run:
            out.append(_block(run))
        self.stats.emitted += emitted
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
        """Rows and DDLs waiting for the global resolved ts (for back-pressure and logs)."""
        return sum(sum(p.pending.values()) for p in self._parts.values())

    # ------------------------------------------------------------------ state as data

    def snapshot(self) -> tuple[dict[str, Any], list[RowChange | DDLEvent]]:
        """The whole state as JSON-ready data plus the unreleased events (``state["items"]`` is aligned
        with them: ``[seq, offset, partition]``); `restore` rebuilds an equal merger.

        Partition keys must be ints or strings. The identities are not stored: a table's group
        holds exactly its partition's unreleased rows at the group's commit ts, in arrival order
        (`ready` drops a group in the call that releases its rows, and rows at or below a released
        ts are dropped as behind resolved), so `restore` recomputes them from the events. A replay
        still undecided is stored as ``replays`` (where it began, its cursors, and the arrival
        number and kind of each row it holds; those rows are among the events). Rows waiting in
        blocks are saved as their `RowChange`s (the state is what feeding the blocks' rows one by
        one would have left); a restored merger holds them as such.
        """
        parts: list[dict[str, Any]] = []
        items: list[list[Any]] = []
        events: list[RowChange | DDLEvent] = []
        for key, part in self._parts.items():
            if not isinstance(key, int | str) or isinstance(key, bool):
                raise TypeError(f"partition key {key!r} cannot be saved: only ints and strings")
            at_group: dict[tuple[str, str], int] = {}
            for item in sorted(part.heap):
                event = item[_EVENT]
                rows = event.expand(item[_TS]) if isinstance(event, _Piece) else [event]
                for n, row in enumerate(rows):
                    assert isinstance(row, RowChange)
                    group = part.groups.get((row.schema, row.table))
                    if group is not None and group.ts == item[_TS]:
                        at_group[row.schema, row.table] = at_group.get((row.schema, row.table), 0) + 1
                    items.append([item[3] + n, item[_OFFSET], key])
                    events.append(row)
            replays: list[dict[str, Any]] = []
            for (schema, table), group in part.groups.items():
                if len(group.seq) != at_group.get((schema, table), 0):  # pragma: no cover - the invariant above
                    raise RuntimeError(f"merge state of {table} on partition {key!r} at {group.ts} is inconsistent")
                rep = group.replay
                if rep is None:
                    continue
                held: list[list[Any]] = []
                for unit, _, kind, n, offset in rep.held:
                    items.append([n, offset, key])
                    events.append(group.held_row(unit))
                    held.append([n, _KINDS[kind]])
                replays.append(
                    {
                        "schema": schema,
                        "table": table,
                        "cursors": sorted(rep.cursors),
                        "held": held,
                    }
                )
            parts.append(
                {
                    "key": key,
                    "order": part.order,
                    "resolved": part.resolved,
                    "next_offset": part.next_offset,
                    "pending": sorted([o, n] for o, n in part.pending.items()),
                    "sizes": sorted([o, n] for o, n in part.sizes.items()),
                    "groups": [[schema, table, group.ts] for (schema, table), group in part.groups.items()],
                    "replays": replays,
                }
            )
        for item in sorted(self._ddls):
            ddl = item[_EVENT]
            assert isinstance(ddl, DDLEvent)
            items.append([item[3], item[_OFFSET], item[_PARTITION]])
            events.append(ddl)
        state = {
            "seq": self._seq,
            "next_order": self._next_order,
            "emitted_resolved": self._emitted_resolved,
            "stats": asdict(self.stats),
            "partitions": parts,
            "items": items,
        }
        return state, events

    @classmethod
    def restore(cls, state: Mapping[str, Any], events: Sequence[Event]) -> PartitionMerger:
        """The merger `snapshot` described. The data may be hostile: ValueError/TypeError on anything off.

        A state without ``replays`` (saved before they existed) has none undecided.
        """
        merger = cls()
        merger._seq = _int(state["seq"], "seq")
        merger._next_order = _int(state["next_order"], "next_order")
        merger._emitted_resolved = _int(state["emitted_resolved"], "emitted_resolved", -1)
        stats = state.get("stats") or {}
        if not isinstance(stats, Mapping):
            raise TypeError("stats must be an object")
        merger.stats = MergeStats(**{f.name: _int(stats.get(f.name, 0), f.name) for f in fields(MergeStats)})
        parts = state["partitions"]
        if not isinstance(parts, list):
            raise TypeError("partitions must be a list")
        # (partition, arrival number) -> the group whose replay holds that row, its kind, its place there
        held_at: dict[tuple[Any, int], tuple[_Group, int, int]] = {}
        held_rows: dict[int, list[Any]] = {}  # id(group) -> its replay's held entries, in order
        for obj in parts:
            key, part = _restore_partition(obj, merger._parts, held_at, held_rows)
            merger._held += sum(part.sizes.values())
            merger._parts[key] = part
        items = state["items"]
        if not isinstance(items, list) or len(items) != len(events):
            raise ValueError(f"{len(events)} events for {len(items) if isinstance(items, list) else '?'} items")
        merger._restore_events(items, events, held_at, held_rows)
        merger._check_restored(held_rows)
        return merger

    def _restore_events(
        self,
        items: list[Any],
        events: Sequence[Event],
        held_at: dict[tuple[Any, int], tuple[_Group, int, int]],
        held_rows: dict[int, list[Any]],
    ) -> None:
        """Put the saved events back: rows into their partition's heap or their replay, DDLs in order."""
        seqs: set[int] = set()
        accepted: list[tuple[int, int, _Group, RowChange]] = []
        for (seq, offset, key), event in zip(items, events, strict=True):
            owner = self._parts.get(key) if isinstance(key, int | str) else None
            if owner is None:
                raise ValueError(f"an event of unknown partition {key!r}")
            entry_seq, entry_offset = _int(seq, "seq"), _int(offset, "offset")
            if entry_seq in seqs or entry_seq > self._seq:
                raise ValueError(f"arrival number {entry_seq} repeated or beyond seq {self._seq}")
            seqs.add(entry_seq)  # unique, so heap comparisons never reach the events
            if isinstance(event, RowChange):
                group = owner.groups.get((event.schema, event.table))
                holder = held_at.pop((key, entry_seq), None)
                if holder is not None:
                    if holder[0] is not group or group.ts != event.commit_ts:
                        raise ValueError(f"held row {entry_seq} of partition {key!r} is not of its replay's group")
                    identity = row_identity(event)
                    held_rows[id(group)][holder[2]] = (event, identity, holder[1], entry_seq, entry_offset)
                    continue
                heapq.heappush(owner.heap, (event.commit_ts, _ROW, owner.order, entry_seq, entry_offset, key, event))
                if group is not None and group.ts == event.commit_ts:
                    accepted.append((entry_seq, entry_offset, group, event))
            elif isinstance(event, DDLEvent):
                self._ddl_keys.add((event.commit_ts, event.query))
                item = (event.commit_ts, _DDL, owner.order, entry_seq, entry_offset, key, event)
                heapq.heappush(self._ddls, item)
            else:
                raise ValueError(f"a saved event must be a row or a DDL, not {type(event).__name__}")
        if held_at:
            raise ValueError(f"held rows {sorted(n for _, n in held_at)} are not among the events")
        accepted.sort(key=lambda entry: entry[0])
        for _, offset, group, row in accepted:
            group.accept(row_identity(row), offset, None)
            group.members.append(row)

    def _check_restored(self, held_rows: dict[int, list[Any]]) -> None:
        """Every group has rows, every replay its held rows, every partition as many events as it counts."""
        for key, part in self._parts.items():
            held = 0
            for group in part.groups.values():
                if not group.seq:
                    raise ValueError(f"partition {key!r}: a table group without rows")
                rep = group.replay
                if rep is None:
                    continue
                rep.held = held_rows[id(group)]
                if max(rep.cursors) > len(group.seq):
                    raise ValueError(f"partition {key!r}: a replay cursor past the rows it replays")
                held += len(rep.held)
            ddls = sum(1 for d in self._ddls if d[_PARTITION] == key)
            if sum(part.pending.values()) != len(part.heap) + ddls + held:
                raise ValueError(f"partition {key!r}: pending counts do not match its events")


def _restore_partition(
    obj: Any,
    known: Mapping[Any, _Partition],
    held_at: dict[tuple[Any, int], tuple[_Group, int, int]],
    held_rows: dict[int, list[Any]],
) -> tuple[Any, _Partition]:
    """(key, partition) of one saved partition; its replays' held rows are noted in ``held_at``."""
    key = obj["key"]
    if not isinstance(key, int | str) or isinstance(key, bool) or key in known:
        raise ValueError(f"bad or repeated partition key {key!r}")
    next_offset = obj["next_offset"]
    part = _Partition(
        order=_int(obj["order"], "order"),
        resolved=_int(obj["resolved"], "resolved", -1),
        next_offset=None if next_offset is None else _int(next_offset, "next_offset"),
        pending={_int(o, "offset"): _int(n, "pending count", 1) for o, n in obj["pending"]},
        sizes={_int(o, "offset"): _int(n, "message size", 1) for o, n in obj.get("sizes", ())},
    )
    if not part.sizes.keys() <= part.pending.keys():
        raise ValueError(f"partition {key!r}: sizes of messages that have nothing pending")
    for schema, table, ts in obj["groups"]:
        if not isinstance(schema, str) or not isinstance(table, str):
            raise TypeError("a group's schema and table must be strings")
        part.groups[schema, table] = _Group(_int(ts, "group commit ts"))
    for rep_obj in obj.get("replays", ()):
        group = part.groups.get((rep_obj["schema"], rep_obj["table"]))
        if not isinstance(group, _Group) or group.replay is not None:
            raise ValueError(f"partition {key!r}: a replay of an unknown table or a second one")
        cursors = {_int(c, "replay cursor", 1) for c in rep_obj["cursors"]}
        if not cursors or len(cursors) > _MAX_CURSORS or not rep_obj["held"]:
            raise ValueError(f"partition {key!r}: a replay without cursors or rows")
        group.replay = _Replay(cursors)
        held_rows[id(group)] = [None] * len(rep_obj["held"])
        for place, (n, kind) in enumerate(rep_obj["held"]):
            if kind not in _KINDS or (key, n) in held_at:
                raise ValueError(f"partition {key!r}: bad or repeated held row {n!r} ({kind!r})")
            held_at[key, n] = (group, _KINDS.index(kind), place)
    return key, part


def _cap(cursors: set[int]) -> set[int]:
    """At most `_MAX_CURSORS` replay starts: the earliest (a whole transaction re-sent) and the latest
    (the last messages retried)."""
    if len(cursors) <= _MAX_CURSORS:
        return cursors
    ordered = sorted(cursors)
    half = _MAX_CURSORS // 2
    return set(ordered[:half] + ordered[-half:])


def _continues(last: _Piece, first: int, offset: int, piece: _Piece, n: int, at: int) -> bool:
    """Does ``piece`` (arrival number ``n``, message ``at``) go on where ``last`` (arrival numbers
    from ``first``, message ``offset``) ends, so the two can wait as one heap item?"""
    return (
        piece.table is last.table
        and piece.start == last.start + last.rows
        and n == first + last.rows
        and at == offset
        and piece.position is last.position
        and (piece.skip is None) == (last.skip is None)
        and (piece.skip is None or piece.skip == last.skip + last.rows)  # type: ignore[operator]
    )


def _lazy_row(rows: TableRows, i: int, ts: int, row: RowChange | None) -> Callable[[], RowChange]:
    """Row ``i`` of ``rows`` as a RowChange (for the key rule), built once and only if asked for."""
    box = [row]

    def get() -> RowChange:
        got = box[0]
        if got is None:
            got = box[0] = rows.row(i, ts)
        return got

    return get


def _offset(seg: Segment, offset: int) -> int:
    """The offset of the message a block's segment holds rows of: its position's for a Kafka
    message's rows (`Segment`: ``skip`` None), else the message the block was fed with."""
    position = seg.position
    if seg.skip is None and position is not None:
        at = position.get("offset")
        if type(at) is int:
            return at
    return offset


def _block(run: list[tuple[int, _Piece]]) -> RowBlock:
    """Released pieces (commit ts, piece), in release order, as one block.

    Pieces that continue each other in one `TableRows` share one table of the block (the source's
    own object when they cover all of it, else a zero-copy slice), so a released block carries
    exactly its rows.
    """
    spans: list[list[Any]] = []  # [TableRows, start, rows]
    open_: dict[int, int] = {}  # id(TableRows) -> index of its last span
    segments: list[Segment] = []
    for ts, piece in run:
        i = open_.get(id(piece.table))
        if i is None or spans[i][1] + spans[i][2] != piece.start:
            i = open_[id(piece.table)] = len(spans)
            spans.append([piece.table, piece.start, 0])
        spans[i][2] += piece.rows
        segments.append(Segment(i, piece.rows, ts, piece.position, piece.skip))
    tables = [t if start == 0 and n == t.num_rows else t.slice(start, n) for t, start, n in spans]
    return RowBlock(tables, segments)


def _int(value: Any, name: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value
