"""PartitionMerger without a broker: TiCDC's consumer rules on random partition interleavings.

The generator builds what TiCDC would put on each partition (rows of each table in commit-ts
order, tables interleaved, DDL broadcast with everything earlier before it, resolved events that
keep their promise), adds resends (whole transactions repeated right away, as seed 000 log 8, or
later, after newer rows or after a resolved event), then interleaves the partitions at random.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.consume.merge import PartitionMerger
from changefeed.model import Column, DDLEvent, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.jsonl import EventReader, dumps_event

TABLES = [
    TableSchema("db", f"t{i}", (Column("id", TypeCode.INT, nullable=False), Column("v", TypeCode.INT)),
                (Index("PRIMARY", ("id",), primary=True),), table_id=100 + i)
    for i in range(3)
]  # fmt: skip


@dataclass
class Entry:
    event: RowChange | DDLEvent | Resolved
    first: bool  # first delivery (not a resend)


def row(table: int, ts: int, ident: int) -> RowChange:
    return RowChange(Op.INSERT, TABLES[table], ts, new=(ident, ts))


@st.composite
def scenario(draw: st.DrawFn) -> tuple[int, list[list[Entry]], list[tuple[int, Entry]]]:
    n_parts = draw(st.integers(1, 3))
    n_txns = draw(st.integers(1, 10))
    ident = 0
    # Per partition: a list of epochs (separated by DDLs); per epoch, per table, its row stream.
    epochs: list[list[dict[int, list[Entry]]]] = [[{}] for _ in range(n_parts)]
    ddls: list[DDLEvent] = []
    history: dict[tuple[int, int], list[list[RowChange]]] = {}  # (partition, table) -> groups sent
    for i in range(n_txns):
        ts = 10 * (i + 1)
        if i and draw(st.integers(0, 5)) == 0:
            ddl = DDLEvent("db", "t0", f"ALTER TABLE t0 COMMENT '{ts}'", 17, ts)
            ddls.append(ddl)
            for p in range(n_parts):
                epochs[p][-1][-1] = [Entry(ddl, True)]  # marker stream: the DDL closes the epoch
                epochs[p].append({})
            continue
        for table in draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)):
            groups: dict[int, list[RowChange]] = {}
            for _ in range(draw(st.integers(1, 3))):
                ident += 1
                groups.setdefault(draw(st.integers(0, n_parts - 1)), []).append(row(table, ts, ident))
            for p, rows in groups.items():
                stream = epochs[p][-1].setdefault(table, [])
                stream.extend(Entry(r, True) for r in rows)
                sent = history.setdefault((p, table), [])
                sent.append(rows)
                resend = draw(st.integers(0, 4))
                if resend == 0:  # seed 000 log 8: the same rows again at once
                    stream.extend(Entry(r, False) for r in rows)
                elif resend == 1:  # an older transaction of this table again
                    stream.extend(Entry(r, False) for r in draw(st.sampled_from(sent)))
                elif resend == 2:  # one message retried (a row of this transaction)
                    stream.append(Entry(draw(st.sampled_from(rows)), False))
    partitions = [_with_resolved(draw, _interleaved(draw, epochs[p])) for p in range(n_parts)]
    order = []
    cursors = [0] * n_parts
    while any(cursors[p] < len(partitions[p]) for p in range(n_parts)):
        live = [p for p in range(n_parts) if cursors[p] < len(partitions[p])]
        p = draw(st.sampled_from(live))
        order.append((p, partitions[p][cursors[p]]))
        cursors[p] += 1
    return n_parts, partitions, order


def _interleaved(draw: st.DrawFn, epochs: list[dict[int, list[Entry]]]) -> list[Entry]:
    """One partition's stream: per epoch, its tables' streams interleaved at random, then the DDL closing it."""
    out: list[Entry] = []
    for epoch in epochs:
        closing = epoch.pop(-1, None)
        streams = [list(s) for s in epoch.values() if s]
        while streams:
            k = draw(st.integers(0, len(streams) - 1))
            out.append(streams[k].pop(0))
            if not streams[k]:
                streams.pop(k)
        if closing:
            out.extend(closing)
    return out


def _with_resolved(draw: st.DrawFn, stream: list[Entry]) -> list[Entry]:
    """Insert resolved events that keep their promise, plus resends of what they cover."""
    out: list[Entry] = []
    for i, entry in enumerate(stream):
        if draw(st.integers(0, 3)) == 0:
            later = [e.event.commit_ts for e in stream[i:] if e.first]
            promise = min(later) - 1 if later else 10_000
            resolved = draw(st.integers(0, promise))
            out.append(Entry(Resolved(resolved), True))
            covered = [e for e in out if e.first and isinstance(e.event, RowChange) and e.event.commit_ts <= resolved]
            if covered and draw(st.booleans()):
                out.append(Entry(draw(st.sampled_from(covered)).event, False))  # a resend behind resolved
        out.append(entry)
    out.append(Entry(Resolved(10_000), True))
    return out


def key(event: RowChange | DDLEvent) -> tuple:
    if isinstance(event, DDLEvent):
        return ("ddl", event.commit_ts, event.query)
    return ("row", event.table, event.commit_ts, event.new)


@settings(max_examples=120, deadline=None)
@given(scenario())
def test_merge_emits_deduplicated_stream_in_commit_order_only_when_resolved(data) -> None:
    n_parts, partitions, order = data
    merger = PartitionMerger(range(n_parts))
    offsets = [0] * n_parts
    resolved = [-1] * n_parts
    emitted: list[RowChange | DDLEvent] = []
    unemitted: dict[int, dict[tuple, int]] = {p: {} for p in range(n_parts)}  # first deliveries fed
    for p, entry in order:
        merger.feed(p, [entry.event], offsets[p])
        if isinstance(entry.event, Resolved):
            resolved[p] = max(resolved[p], entry.event.commit_ts)
        elif entry.first:
            unemitted[p].setdefault(key(entry.event), offsets[p])
        offsets[p] += 1
        for event in merger.ready():
            if isinstance(event, Resolved):
                assert event.commit_ts == min(resolved)
                # The checkpoint never skips a message not yet handed out; a DDL needs only one of
                # its broadcast copies kept.
                for k in {k for pending in unemitted.values() for k in pending}:
                    holders = [(q, pending[k]) for q, pending in unemitted.items() if k in pending]
                    if k[0] == "ddl":
                        assert any(event.position[q] <= off for q, off in holders)
                    else:
                        assert all(event.position[q] <= off for q, off in holders)
                continue
            assert event.commit_ts <= min(resolved), "released before the global resolved ts covered it"
            emitted.append(event)
            for pending in unemitted.values():
                pending.pop(key(event), None)

    expected: list[tuple[int, int, int, tuple]] = []
    seen: set[tuple] = set()
    arrival = {id(e): n for n, (_, e) in enumerate(order)}
    for p, stream in enumerate(partitions):
        for entry in stream:
            if entry.first and not isinstance(entry.event, Resolved):
                k = key(entry.event)
                if k in seen:
                    continue  # a DDL's broadcast copy
                seen.add(k)
                is_ddl = isinstance(entry.event, DDLEvent)
                expected.append((entry.event.commit_ts, int(is_ddl), 0 if is_ddl else p, arrival[id(entry)], k))
    expected.sort()
    assert [key(e) for e in emitted] == [x[-1] for x in expected]
    assert merger.checkpoint() == {p: offsets[p] for p in range(n_parts)}
    assert merger.buffered() == 0


def test_seed_000_log_8_duplicate_dropped() -> None:
    """Logs 5-8 of seed 000: log 8 repeats log 7 on partition 0 before any resolved event."""
    merger = PartitionMerger([0, 1])
    ts = 415508878783938562
    r1, r2, r3 = row(0, ts, 1), row(0, ts, 2), row(0, ts, 3)
    merger.feed(0, [r1], 0)
    merger.feed(1, [r2], 0)
    merger.feed(0, [r3], 1)
    merger.feed(0, [row(0, ts, 3)], 2)
    merger.feed(0, [Resolved(ts)], 3)
    assert merger.ready() == []  # partition 1 has promised nothing yet
    merger.feed(1, [Resolved(ts)], 1)
    out = merger.ready()
    assert [e.new[0] for e in out if isinstance(e, RowChange)] == [1, 3, 2]
    assert out[-1].position == {0: 4, 1: 2}
    assert merger.stats.replayed == 1


def test_broadcast_ddl_released_once_after_every_partition_passed_it() -> None:
    merger = PartitionMerger(["a", "b"])
    ddl = DDLEvent("db", "t0", "CREATE TABLE t0 (id int primary key)", 3, 100)
    before, after = row(0, 90, 1), row(0, 110, 2)
    merger.feed("a", [before, ddl, Resolved(100)], 0)
    merger.feed("b", [ddl], 0)
    assert merger.ready() == []
    merger.feed("b", [after, Resolved(110)], 1)
    assert merger.ready()[:-1] == [before, ddl]
    merger.feed("a", [ddl, Resolved(120)], 1)  # a resend behind resolved
    assert merger.ready()[:-1] == [after]
    assert merger.stats.ddl_copies == 1 and merger.stats.behind_resolved == 1


def test_fallback_and_behind_resolved_resends_dropped() -> None:
    merger = PartitionMerger([0])
    merger.feed(0, [row(0, 10, 1), row(0, 20, 2), row(0, 10, 1)], 0)  # a txn of t0 below its newest
    merger.feed(0, [Resolved(20), row(1, 15, 3)], 1)  # behind the partition's resolved ts
    assert [e.new[0] for e in merger.ready()[:-1]] == [1, 2]
    assert (merger.stats.fallback, merger.stats.behind_resolved) == (1, 1)


def _through_data(merger: PartitionMerger) -> PartitionMerger:
    """``merger`` saved as plain data and read back: JSON for the numbers, JSONL lines for the events."""
    state, events = merger.snapshot()
    reader = EventReader()
    lines = [dumps_event(e) for e in events]
    return PartitionMerger.restore(orjson.loads(orjson.dumps(state)), [reader.parse(line) for line in lines])


@settings(max_examples=150, deadline=None)
@given(scenario(), st.data())
def test_state_saved_as_data_at_any_point_releases_the_same(data, draw) -> None:
    n_parts, _, order = data
    kept, restored = PartitionMerger(range(n_parts)), PartitionMerger(range(n_parts))
    offsets = [0] * n_parts
    for p, entry in order:
        for merger in (kept, restored):
            merger.feed(p, [entry.event], offsets[p])
        offsets[p] += 1
        if draw.draw(st.booleans()):
            restored = _through_data(restored)
        assert restored.ready() == kept.ready()
        assert restored.checkpoint() == kept.checkpoint()
        assert restored.buffered() == kept.buffered()
        assert restored.resolved() == kept.resolved()
    assert restored.stats == kept.stats


def test_state_keeps_the_duplicate_rules() -> None:
    """After a restore, resends of pending rows and of a pending broadcast DDL are still dropped."""
    merger = PartitionMerger(["a", "b"])
    ddl = DDLEvent("db", "t0", "ALTER TABLE t0 COMMENT 'x'", 17, 30)
    merger.feed("a", [row(0, 20, 1), row(0, 20, 2), Resolved(10)], 0)
    merger.feed("b", [ddl], 0)
    merger = _through_data(merger)
    merger.feed("a", [row(0, 20, 2), row(0, 15, 9), ddl], 1)  # a resend, a fallback, the DDL's copy
    merger.feed("b", [Resolved(40)], 1)
    merger.feed("a", [Resolved(40)], 2)
    out = merger.ready()
    assert [e.new[0] if isinstance(e, RowChange) else e for e in out[:-1]] == [1, 2, ddl]
    assert (merger.stats.replayed, merger.stats.fallback, merger.stats.ddl_copies) == (1, 1, 1)


def test_restore_refuses_inconsistent_state() -> None:
    merger = PartitionMerger([0])
    merger.feed(0, [row(0, 20, 1)], 0)
    state, events = merger.snapshot()
    bad_items = {**state, "items": [[1, 0, 7]]}  # an event of a partition the state does not have
    bad_pending = {**state, "partitions": [{**state["partitions"][0], "pending": [[0, 2]]}]}
    bad_seq = {**state, "items": [[99, 0, 0]]}
    for bad in (bad_items, bad_pending, bad_seq, {**state, "seq": -1}, {**state, "partitions": "x"}):
        with pytest.raises((ValueError, TypeError, KeyError)):
            PartitionMerger.restore(bad, events)
    with pytest.raises(ValueError, match="events for"):
        PartitionMerger.restore(state, [])
