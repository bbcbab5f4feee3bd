"""PartitionMerger fed `RowBlock`s: the same rules, stats, checkpoints and output as feeding their rows.

The reference everywhere is a second merger fed each block's `RowBlock.rows` one by one (what a
row decoder would give); the merger under test gets the blocks, and what it releases is compared
after `expand_blocks`. Rows carry ``raw`` bytes as a columnar Open Protocol decoder would (a
function of op and images, so equal bytes are equal `row_identity`s), some tables none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.consume.merge import PartitionMerger
from changefeed.model import DDLEvent, Event, Op, Resolved, RowChange
from changefeed.model.jsonl import EventReader, dumps_event
from changefeed.model.rowblock import RowBlock, Segment, TableRows, expand_blocks
from changefeed.spark.merge import MergeStage
from tests.consume.test_merge import TABLES

TOPIC = "cf"


def change(table: int, ts: int, ident: int, op: Op = Op.INSERT) -> RowChange:
    """A row version of ``TABLES[table]`` (id, v); an update's old image has v = ts - 1."""
    if op is Op.INSERT:
        return RowChange(op, TABLES[table], ts, new=(ident, ts))
    if op is Op.DELETE:
        return RowChange(op, TABLES[table], ts, old=(ident, ts))
    return RowChange(op, TABLES[table], ts, new=(ident, ts), old=(ident, ts - 1))


def raw_of(row: RowChange) -> bytes:
    return orjson.dumps([row.op.value, row.new, row.old])


def table_rows(rows: list[RowChange], raw: bool = True) -> TableRows:
    """One table's rows in the block layout (new image or deleted one, op, commit ts, old image of updates)."""
    ts = rows[0].table_schema
    w = len(ts.columns)
    main = [r.old if r.op is Op.DELETE else r.new for r in rows]
    before = [r.old if r.op is Op.UPDATE else (None,) * w for r in rows]
    arrays = [pa.array([m[i] for m in main], pa.int64()) for i in range(w)]
    arrays += [pa.array([r.op.value for r in rows]), pa.array([r.commit_ts for r in rows], pa.int64())]
    arrays += [pa.array([b[i] for b in before], pa.int64()) for i in range(w)]
    names = [c.name for c in ts.columns]
    batch = pa.RecordBatch.from_arrays(arrays, [*names, "op", "commit_ts", *(f"before_{n}" for n in names)])
    return TableRows(ts, batch, raw=[raw_of(r) for r in rows] if raw else None)


def block(
    rows: list[RowChange],
    position: dict[str, Any] | None,
    *,
    raw: bool | set[str] = True,
    cuts: list[bool] | None = None,
    skip: int | None = None,
) -> RowBlock:
    """``rows`` (of one message) as a block: a segment per run of one table and commit ts, cut
    further before row i where ``cuts[i]``; ``raw``: bytes for every table, none, or these tables."""
    order: list[str] = []
    by_table: dict[str, list[RowChange]] = {}
    segments: list[Segment] = []
    for i, r in enumerate(rows):
        name = r.table
        if name not in by_table:
            by_table[name] = []
            order.append(name)
        by_table[name].append(r)
        index = order.index(name)
        last = segments[-1] if segments else None
        if last is not None and last.table == index and last.commit_ts == r.commit_ts and not (cuts and cuts[i]):
            last.rows += 1
        else:
            segments.append(Segment(index, 1, r.commit_ts, position, skip))
    tables = [table_rows(by_table[n], raw if isinstance(raw, bool) else n in raw) for n in order]
    return RowBlock(tables, segments)


def as_rows(events: list[Any]) -> list[Event]:
    """The events a row decoder gives for the same message."""
    return list(expand_blocks(events))


def through_data(merger: PartitionMerger) -> PartitionMerger:
    state, events = merger.snapshot()
    reader = EventReader()
    lines = [dumps_event(e) for e in events]
    return PartitionMerger.restore(orjson.loads(orjson.dumps(state)), [reader.parse(line) for line in lines])


class Pair:
    """A merger fed blocks next to one fed the same rows; every call compares the two."""

    def __init__(self, partitions: list[int]) -> None:
        self.blocks, self.rows = PartitionMerger(partitions), PartitionMerger(partitions)

    def feed(self, partition: int, events: list[Any], offset: int) -> None:
        self.blocks.feed(partition, events, offset)
        self.rows.feed(partition, as_rows(events), offset)
        self.check()

    def ready(self) -> list[Any]:
        got, want = self.blocks.ready(), self.rows.ready()
        assert not any(isinstance(e, RowBlock) for e in want)
        assert list(expand_blocks(got)) == want
        self.check()
        return got

    def restore(self) -> None:
        self.blocks = through_data(self.blocks)
        self.check()

    def check(self) -> None:
        b, r = self.blocks, self.rows
        assert b.stats == r.stats
        assert b.checkpoint() == r.checkpoint()
        assert b.buffered() == r.buffered()
        assert b.resolved() == r.resolved()
        assert b.snapshot() == r.snapshot()  # blocks are saved as the rows they hold


def position(p: int, offset: int) -> dict[str, Any]:
    return {"topic": TOPIC, "partition": p, "offset": offset}


# ---------------------------------------------------------------- random streams


@dataclass
class Delivery:
    partition: int
    entries: list[RowChange | DDLEvent | Resolved]
    form: str  # "block" (every table raw), "mixed" (some tables raw), "noraw", "rows"
    cuts: list[bool]
    raw_tables: set[str]
    skip: int | None
    restore: bool  # snapshot/restore the block merger after it
    ready: bool  # call ready() after it


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[Delivery], set[tuple[Any, ...]], bool]:
    """What TiCDC puts on each partition, batched into messages, with resends; partitions interleaved.

    Returns (partitions, deliveries in arrival order, keys of every row, whether a message was lost).
    """
    n_parts = draw(st.integers(1, 3))
    n_txns = draw(st.integers(1, 8))
    ident = 0
    epochs: list[list[dict[Any, list[Any]]]] = [[{}] for _ in range(n_parts)]
    firsts: set[tuple[Any, ...]] = set()
    for i in range(n_txns):
        ts = 10 * (i + 1)
        if i and draw(st.integers(0, 6)) == 0:
            ddl = DDLEvent("db", "t0", f"ALTER TABLE t0 COMMENT '{ts}'", 17, ts)
            for p in range(n_parts):
                epochs[p][-1]["ddl"] = [ddl]
                epochs[p].append({})
            continue
        for table in draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)):
            for _ in range(draw(st.integers(1, 16))):  # a transaction may span messages
                ident += 1
                r = change(table, ts, ident, draw(st.sampled_from([Op.INSERT, Op.INSERT, Op.UPDATE, Op.DELETE])))
                firsts.add((r.table, r.commit_ts, r.op, r.new, r.old))
                epochs[draw(st.integers(0, n_parts - 1))][-1].setdefault(table, []).append(r)
    deliveries: list[list[Delivery]] = []
    lost_any = False
    for p in range(n_parts):
        stream: list[Any] = []
        for epoch in epochs[p]:
            closing = epoch.pop("ddl", [])
            tables = [list(s) for s in epoch.values() if s]
            while tables:  # tables interleaved in runs, each in commit order
                k = draw(st.integers(0, len(tables) - 1))
                n = draw(st.integers(1, 10))
                stream.extend(tables[k][:n])
                del tables[k][:n]
                if not tables[k]:
                    tables.pop(k)
            stream.extend(closing)
        stream = _with_resolved(draw, stream)
        messages, lost = _messages(draw, p, stream)
        deliveries.append(messages)
        lost_any |= lost
    order: list[Delivery] = []
    while any(deliveries):
        live = [d for d in deliveries if d]
        order.append(draw(st.sampled_from(live)).pop(0))
    return n_parts, order, firsts, lost_any


def _with_resolved(draw: st.DrawFn, stream: list[Any]) -> list[Any]:
    """Resolved events that keep their promise (nothing at or below them follows on first delivery)."""
    out: list[Any] = []
    for i, event in enumerate(stream):
        if draw(st.integers(0, 11)) == 0:
            later = [e.commit_ts for e in stream[i:]]
            out.append(Resolved(draw(st.integers(0, min(later) - 1))))
        out.append(event)
    out.append(Resolved(10_000))
    return out


def _messages(draw: st.DrawFn, p: int, stream: list[Any]) -> tuple[list[Delivery], bool]:
    """``stream`` batched into messages, with resends: a message retried, a restart from an earlier
    point (re-batched: messages straddle old boundaries and go on with new rows), a message lost
    and re-sent only by a later restart (new rows between resent ones). Also: was any lost?"""
    out: list[Delivery] = []
    at, lost_from, restarts, lost_any, big = 0, None, 0, False, False
    while at < len(stream) or lost_from is not None:
        if lost_from is not None and (at >= len(stream) or (out and out[-1].entries and draw(st.booleans()))):
            at, lost_from = draw(st.integers(max(0, lost_from - 6), lost_from)), None  # a restart re-sends it
            big = True
            continue
        n = draw(st.integers(1, 16 if big else 10))
        big = False
        mode = draw(st.integers(0, 9))
        if mode <= 1 and restarts < 4 and lost_from is None:  # never arrived (until a restart)
            n = min(n, 3)
            lost_from, at, restarts, lost_any = at, at + n, restarts + 1, True
            out.append(_delivery(draw, p, []))  # marks the loss (not fed): restart after the next message
            continue
        out.append(_delivery(draw, p, stream[at : at + n]))
        at += n
        if mode == 2:  # the producer retried the message (maybe decoded the other way)
            out.append(_delivery(draw, p, out[-1].entries))
        elif mode == 3 and restarts < 4:  # a restart from an earlier point
            at, restarts, big = draw(st.integers(max(0, at - 12), at - 1)), restarts + 1, True
            if lost_from is not None:
                at, lost_from = min(at, lost_from), None
    return out, lost_any


def _delivery(draw: st.DrawFn, p: int, entries: list[Any]) -> Delivery:
    return Delivery(
        p,
        entries,
        draw(st.sampled_from(["block", "block", "block", "mixed", "noraw", "rows"])),
        draw(st.lists(st.integers(0, 7).map(lambda x: x == 0), min_size=len(entries), max_size=len(entries))),
        set(draw(st.lists(st.sampled_from(["t0", "t1", "t2"]), max_size=3))),
        draw(st.sampled_from([None, None, None, 0, 7])),
        draw(st.integers(0, 5)) == 0,
        draw(st.integers(0, 2)) == 0,
    )


def message(d: Delivery, offset: int) -> list[Any]:
    """The events a decoder gives for delivery ``d`` at ``offset``: blocks between DDL/Resolved events."""
    pos = position(d.partition, offset)
    out: list[Any] = []
    rows: list[RowChange] = []
    cuts: list[bool] = []

    def flush() -> None:
        if rows:
            if d.form == "rows":
                out.extend(replace(r, position=pos) for r in rows)
            else:
                raw = {"block": True, "noraw": False}.get(d.form, d.raw_tables)
                out.append(block(rows, pos, raw=raw, cuts=cuts, skip=d.skip))
            rows.clear()
            cuts.clear()

    for entry, cut in zip(d.entries, d.cuts, strict=True):
        if isinstance(entry, RowChange):
            rows.append(entry)
            cuts.append(cut)
        else:
            flush()
            out.append(entry)
    flush()
    return out


@settings(max_examples=100, deadline=None)
@given(streams())
def test_blocks_merge_exactly_like_their_rows(data) -> None:
    n_parts, deliveries, firsts, lost = data
    pair = Pair(list(range(n_parts)))
    offsets = [0] * n_parts
    released: list[RowChange] = []
    for d in deliveries:
        if not d.entries:
            continue  # a lost message's place: it never arrived
        pair.feed(d.partition, message(d, offsets[d.partition]), offsets[d.partition])
        offsets[d.partition] += 1
        if d.restore:
            pair.restore()
        if d.ready:
            released.extend(e for e in expand_blocks(pair.ready()) if isinstance(e, RowChange))
    released.extend(e for e in expand_blocks(pair.ready()) if isinstance(e, RowChange))
    # and the rules did their job: every row exactly once (a row lost and sent again only after
    # newer rows of its table, or after a resolved ts above it, is dropped), in commit order
    keys = [(r.table, r.commit_ts, r.op, r.new, r.old) for r in released]
    assert len(keys) == len(set(keys)) and set(keys) <= firsts
    assert lost or set(keys) == firsts
    assert [r.commit_ts for r in released] == sorted(r.commit_ts for r in released)
    assert pair.blocks.checkpoint() == dict(enumerate(offsets))
    assert pair.blocks.buffered() == 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_resend_over_lost_messages_keeps_the_runs_between_resent_rows(data) -> None:
    """Messages lost among delivered ones, then all re-sent re-batched: segments of resent rows with
    new runs between them (what the random streams above reach only now and then)."""
    draw = data.draw
    rows: list[RowChange] = []
    for table, length in draw(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 16)), min_size=1, max_size=4)):
        for _ in range(length):
            op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]))
            rows.append(change(table, 10 * (1 + len(rows) // 24), len(rows), op))
    pair = Pair([0])
    offset = 0

    def send(batch: list[RowChange]) -> None:
        nonlocal offset
        form = draw(st.sampled_from(["block", "block", "noraw", "mixed", "rows"]))
        if form == "rows":
            events: list[Any] = [replace(r, position=position(0, offset)) for r in batch]
        else:
            raw = {"block": True, "noraw": False}.get(form, {"t0"})
            cuts = draw(st.lists(st.integers(0, 15).map(lambda x: x == 0), min_size=len(batch), max_size=len(batch)))
            events = [block(batch, position(0, offset), raw=raw, cuts=cuts, skip=draw(st.sampled_from([None, 3])))]
        pair.feed(0, events, offset)
        offset += 1
        if draw(st.integers(0, 5)) == 0:
            pair.restore()

    for passes in range(2):
        at = 0
        while at < len(rows):
            n = draw(st.integers(1, 24 if passes else 4))
            if passes or draw(st.integers(0, 2)):  # the first pass loses about a third of the messages
                send(rows[at : at + n])
            at += n
    pair.feed(0, [Resolved(1000)], offset)
    out = list(expand_blocks(pair.ready()[:-1]))
    assert len(out) == len({(r.table, r.commit_ts, r.op, r.new, r.old) for r in out})


# ---------------------------------------------------------------- each rule with blocks


def rows_of(table: int, ts: int, idents: range | list[int]) -> list[RowChange]:
    return [change(table, ts, i) for i in idents]


def test_new_segments_wait_as_one_item_each_and_come_out_as_one_block() -> None:
    pair = Pair([0])
    first = block(rows_of(0, 10, range(16)) + rows_of(1, 10, range(16)), position(0, 0))
    second = block(rows_of(0, 10, range(16, 32)), position(0, 1))
    pair.feed(0, [first], 0)
    pair.feed(0, [second], 1)
    heap = pair.blocks._parts[0].heap
    assert len(heap) == 3 and pair.blocks.buffered() == 48
    pair.feed(0, [Resolved(10)], 2)
    out = pair.ready()
    assert len(out) == 2 and isinstance(out[0], RowBlock)
    blk = out[0]
    assert [(s.rows, s.commit_ts) for s in blk.segments] == [(16, 10), (16, 10), (16, 10)]
    assert blk.tables[0] is first.tables[0] and blk.tables[1] is first.tables[1]  # whole: not copied
    assert pair.blocks.stats.emitted == 48


def test_segment_behind_resolved_dropped_whole() -> None:
    pair = Pair([0])
    pair.feed(0, [Resolved(20)], 0)
    pair.feed(0, [block(rows_of(0, 20, range(5)) + rows_of(1, 30, range(3)), position(0, 1))], 1)
    assert pair.blocks.stats.behind_resolved == 5 and pair.blocks.buffered() == 3


def test_segment_below_the_tables_newest_commit_ts_dropped_whole() -> None:
    pair = Pair([0])
    pair.feed(0, [block(rows_of(0, 10, range(4)) + rows_of(0, 20, range(4, 8)), position(0, 0))], 0)
    pair.feed(0, [block(rows_of(0, 10, range(4)), position(0, 1))], 1)  # a resend of the older txn
    assert pair.blocks.stats.fallback == 4
    pair.feed(0, [Resolved(30)], 2)
    assert [r.new[0] for r in expand_blocks(pair.ready()[:-1])] == list(range(8))
    assert pair.blocks.checkpoint() == {0: 3}


def test_resent_message_dropped_by_its_bytes() -> None:
    pair = Pair([0, 1])
    rows = rows_of(0, 10, range(6))
    pair.feed(0, [block(rows, position(0, 0))], 0)
    pair.feed(0, [block(rows, position(0, 1))], 1)
    assert pair.blocks.stats.replayed == 6 and pair.blocks.buffered() == 6
    assert pair.blocks.checkpoint() == {0: 0}  # nothing from offset 1 waits
    pair.feed(0, [Resolved(10)], 2)
    pair.feed(1, [Resolved(10)], 0)
    out = pair.ready()
    assert [r.position["offset"] for r in expand_blocks(out[:-1])] == [0] * 6
    assert out[-1].position == {0: 3, 1: 1}


@pytest.mark.parametrize("skip", [None, 0, 100])
def test_partial_overlap_keeps_the_runs_of_new_rows(skip: int | None) -> None:
    """A resend re-batched across message boundaries: rows 2-3 and 6-7 are new, the others resent."""
    pair = Pair([0])
    rows = rows_of(0, 10, range(10))
    pair.feed(0, [block(rows[:2], position(0, 0), skip=skip)], 0)
    pair.feed(0, [block(rows[4:6], position(0, 1), skip=skip)], 1)
    pair.feed(0, [block(rows[8:], position(0, 2), skip=skip)], 2)
    pair.feed(0, [block(rows, position(0, 3), skip=skip)], 3)
    assert pair.blocks.stats.replayed == 6
    assert [item[-1].rows for item in sorted(pair.blocks._parts[0].heap)] == [2, 2, 2, 2, 2]
    pair.feed(0, [Resolved(10)], 4)
    out = pair.ready()
    assert [r.new[0] for r in expand_blocks(out[:-1])] == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7]
    blk = out[0]
    assert isinstance(blk, RowBlock) and sum(t.num_rows for t in blk.tables) == 10  # exactly its rows


def test_row_twice_in_one_message_is_kept_and_the_message_resent_dropped() -> None:
    """One message never carries a resend of its own rows (a keyless table may insert equal rows)."""
    pair = Pair([0])
    rows = rows_of(0, 10, [1, 2, 2, 3])
    pair.feed(0, [block(rows, position(0, 0))], 0)
    pair.feed(0, [block(rows_of(0, 10, [4, 4]), position(0, 1))], 1)  # in a group already under way
    assert pair.blocks.stats.replayed == 0 and pair.blocks.buffered() == 6
    pair.feed(0, [block(rows_of(0, 10, [4, 4]), position(0, 2))], 2)  # the producer retried it
    pair.feed(0, [block(rows, position(0, 3))], 3)  # and a replay re-sent the first one
    assert pair.blocks.stats.replayed == 6 and pair.blocks.buffered() == 6
    pair.feed(0, [Resolved(10)], 4)
    assert [r.new[0] for r in expand_blocks(pair.ready()[:-1])] == [1, 2, 2, 3, 4, 4]


def test_same_row_once_per_op_is_not_a_resend() -> None:
    pair = Pair([0])
    ops = [change(0, 10, 1, Op.INSERT), change(0, 10, 1, Op.UPDATE), change(0, 10, 1, Op.DELETE)]
    pair.feed(0, [block(ops, position(0, 0))], 0)
    pair.feed(0, [block(ops, position(0, 1))], 1)
    assert pair.blocks.stats.replayed == 3 and pair.blocks.buffered() == 3


def test_blocks_without_raw_use_row_identity() -> None:
    pair = Pair([0])
    rows = rows_of(0, 10, range(5))
    pair.feed(0, [block(rows[:3], position(0, 0), raw=False)], 0)
    pair.feed(0, [block(rows, position(0, 1), raw=False)], 1)
    pair.feed(0, [block(rows[3:], position(0, 2))], 2)  # raw bytes in a group without them
    assert pair.blocks.stats.replayed == 5 and pair.blocks.buffered() == 5


def test_rows_before_a_ddl_of_their_commit_ts_and_blocks_split_around_it() -> None:
    pair = Pair([0, 1])
    ddl = DDLEvent("db", "t0", "ALTER TABLE t0 COMMENT 'x'", 17, 20)
    pair.feed(0, [block(rows_of(0, 20, range(3)), position(0, 0)), ddl], 0)
    pair.feed(1, [ddl, block(rows_of(1, 20, range(3)), position(1, 0))], 0)
    pair.feed(0, [block(rows_of(1, 30, range(2)), position(0, 1)), Resolved(40)], 1)
    pair.feed(1, [Resolved(40)], 1)
    out = pair.ready()
    assert [type(e).__name__ for e in out] == ["RowBlock", "DDLEvent", "RowBlock", "Resolved"]
    assert [s.commit_ts for s in out[0].segments] == [20, 20] and pair.blocks.stats.ddl_copies == 1


# ---------------------------------------------------------------- blocks and rows in one group


def test_a_block_resend_of_rows_received_as_row_changes() -> None:
    pair = Pair([0])
    rows = rows_of(0, 10, range(6))
    pair.feed(0, [replace(r, position=position(0, 0)) for r in rows[:4]], 0)
    pair.feed(0, [block(rows, position(0, 1))], 1)
    assert pair.blocks.stats.replayed == 4 and pair.blocks.buffered() == 6


def test_row_change_resend_of_rows_received_in_a_block_converts_the_group() -> None:
    pair = Pair([0])
    rows = rows_of(0, 10, range(6))
    pair.feed(0, [block(rows[:2], position(0, 0)), block(rows[2:4], position(0, 0))], 0)
    pair.feed(0, [replace(r, position=position(0, 1)) for r in rows[1:5]], 1)  # 1-3 resent, 4 new
    pair.feed(0, [block(rows, position(0, 2))], 2)  # 0-4 resent, 5 new: now by row identity
    group = pair.blocks._parts[0].groups["db", "t0"]
    assert not group.raw and len(group.seq) == 6
    assert pair.blocks.stats.replayed == 3 + 5
    pair.feed(0, [Resolved(10)], 3)
    out = pair.ready()
    assert [type(e).__name__ for e in out] == ["RowBlock", "RowChange", "RowBlock", "Resolved"]


def test_blocks_after_a_restore_meet_the_restored_rows() -> None:
    """The saved state holds the blocks' rows as RowChanges; resent blocks still find them."""
    pair = Pair([0, 1])
    rows = rows_of(0, 10, range(6))
    pair.feed(0, [block(rows[:4], position(0, 0))], 0)
    pair.feed(0, [block(rows_of(1, 10, range(3)), position(0, 1))], 1)
    pair.restore()
    assert all(isinstance(item[-1], RowChange) for item in pair.blocks._parts[0].heap)
    pair.feed(0, [block(rows, position(0, 2))], 2)  # 0-3 resent, 4-5 new
    pair.feed(0, [block(rows_of(1, 10, range(3)), position(0, 3))], 3)
    assert pair.blocks.stats.replayed == 4 + 3
    pair.feed(0, [Resolved(10)], 4)
    pair.feed(1, [Resolved(10)], 0)
    pair.ready()


def test_merge_stage_saves_pending_blocks_between_batches(tmp_path: Path) -> None:
    """The apply job's state file holds a block's pending rows; the next batch's resend is dropped."""
    rows = rows_of(0, 10, range(4))
    ref = PartitionMerger([0, 1])
    stage = MergeStage(tmp_path / "merge", TOPIC, [0, 1])
    batches = [
        [(0, 0, [block(rows, position(0, 0)), Resolved(10)])],
        [(0, 1, [block(rows, position(0, 1))]), (1, 0, [Resolved(10)])],
    ]
    for batch_id, batch in enumerate(batches):
        got = stage.merge(batch, batch_id)
        stage.commit(batch_id)
        stage._last = None  # read the file back, as a restarted job does
        for p, offset, events in batch:
            ref.feed(p, as_rows(events), offset)
        want = ref.ready()
        assert [e for e in expand_blocks(got) if isinstance(e, RowChange)] == want[:-1]
    assert not stage._unsaved  # every batch committed


# ---------------------------------------------------------------- a block of a run of messages


def _run_block(rows: list[RowChange], first: int) -> RowBlock:
    """One row per message from offset ``first`` on, as one block (`DebeziumBlockDecoder.decode`'s
    layout): a table per table, a one-row segment per message at that message's position."""
    order = list(dict.fromkeys(r.table for r in rows))
    tables = [table_rows([r for r in rows if r.table == name]) for name in order]
    segments = [Segment(order.index(r.table), 1, r.commit_ts, position(0, first + k), None) for k, r in enumerate(rows)]
    return RowBlock(tables, segments)


@pytest.mark.parametrize(
    "idents",
    [
        [(0, i) for i in range(6)],  # new rows only: each waits as a piece of its own message
        [(0, 0), (1, 0), (0, 1), (0, 0), (1, 0), (0, 1)],  # the first three resent: a replay, a resend
        [(0, 0), (0, 1), (0, 2), (0, 1), (0, 2), (0, 3)],  # a replay that goes on past what it repeats
    ],
)
def test_a_block_of_a_run_of_messages_counts_each_row_at_its_message(idents: list[tuple[int, int]]) -> None:
    """A block holding one row of each of a run of messages, in the run's first message's events
    (the later messages fed with none), leaves the merger as feeding each message its own block:
    the same stats, checkpoints, held bytes, state and released rows, each at its message."""
    rows = [change(table, 10, ident) for table, ident in idents]
    run, each = PartitionMerger([0]), PartitionMerger([0])
    run.feed(0, [Resolved(5)], 0, 7)
    each.feed(0, [Resolved(5)], 0, 7)
    for k in range(len(rows)):
        run.feed(0, [_run_block(rows, 1)] if k == 0 else [], 1 + k, 100 + k)
        each.feed(0, [_run_block(rows[k : k + 1], 1 + k)], 1 + k, 100 + k)
    for merger in (run, each):
        merger.max_pending_bytes = None
    assert run.stats == each.stats
    assert run.checkpoint() == each.checkpoint() == {0: 1}
    assert run.held_bytes == each.held_bytes and run._parts[0].sizes == each._parts[0].sizes
    assert run.buffered() == each.buffered() and run.snapshot() == each.snapshot()
    end = 1 + len(rows)
    run.feed(0, [Resolved(10)], end)
    each.feed(0, [Resolved(10)], end)
    got, want = run.ready(), each.ready()
    assert list(expand_blocks(got)) == list(expand_blocks(want))
    assert [r.position for r in expand_blocks(got) if isinstance(r, RowChange)] == [
        r.position for r in expand_blocks(want) if isinstance(r, RowChange)
    ]
    assert run.checkpoint() == each.checkpoint() == {0: end + 1}
    assert run.held_bytes == each.held_bytes == 0
