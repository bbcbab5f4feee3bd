"""The merge's buffer is bounded in message bytes: a partition that holds back the global resolved ts
cannot make the others' backlog grow without bound (hardening: memory from hostile or stuck streams)."""

from __future__ import annotations

import pytest

from changefeed.consume.merge import MergeBufferFullError, PartitionMerger
from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode

TABLE = TableSchema(
    "db", "t", (Column("id", TypeCode.INT, nullable=False),), (Index("PRIMARY", ("id",), primary=True),), table_id=1
)


def _row(ts: int, ident: int) -> RowChange:
    return RowChange(Op.INSERT, TABLE, ts, new=(ident,))


def test_bytes_are_held_while_a_message_has_pending_events_and_released_with_them() -> None:
    merger = PartitionMerger([0, 1], max_pending_bytes=1000)
    merger.feed(0, [_row(10, 1), _row(10, 2)], offset=0, size=300)
    merger.feed(0, [Resolved(10)], offset=1, size=50)  # nothing pending: not held
    merger.feed(0, [_row(20, 3)], offset=2, size=300)
    assert merger.held_bytes == 600
    merger.feed(1, [Resolved(15)], offset=0, size=50)
    assert [e.new for e in merger.ready() if isinstance(e, RowChange)] == [(1,), (2,)]
    assert merger.held_bytes == 300  # offset 2 still waits for ts 20

    state, events = merger.snapshot()
    again = PartitionMerger.restore(state, events)
    assert again.held_bytes == 300  # carried across a restart


def test_past_the_bound_an_error_names_the_partition_holding_things_back() -> None:
    merger = PartitionMerger([0, 1], max_pending_bytes=1000)
    merger.feed(1, [Resolved(5)], offset=7, size=50)  # partition 1 is slow: resolved 5
    for offset in range(3):
        merger.feed(0, [_row(10 + offset, offset)], offset=offset, size=300)
    merger.feed(0, [Resolved(30)], offset=3, size=50)
    with pytest.raises(MergeBufferFullError) as err:
        merger.feed(0, [_row(40, 99)], offset=4, size=300)
    text = str(err.value)
    assert "1200 bytes of 4 messages" in text and "partition 1 is at resolved ts 5 (next offset 8)" in text
    assert "max-pending-bytes 1000" in text and "partition 0 offset 4" in text


def test_unbounded_by_default_and_restore_checks_sizes() -> None:
    merger = PartitionMerger([0])
    merger.feed(0, [_row(10, 1)], offset=0, size=10**12)
    assert merger.held_bytes == 10**12
    state, events = merger.snapshot()
    state["partitions"][0]["sizes"].append([5, 100])  # a size for an offset with nothing pending
    with pytest.raises(ValueError, match="sizes of messages that have nothing pending"):
        PartitionMerger.restore(state, events)
    del state["partitions"][0]["sizes"]  # a state saved before sizes existed
    assert PartitionMerger.restore(state, events).held_bytes == 0


def test_removing_a_partition_releases_its_bytes() -> None:
    merger = PartitionMerger([0, 1], max_pending_bytes=10_000)
    merger.feed(0, [_row(10, 1)], offset=0, size=400)
    merger.feed(1, [_row(10, 2)], offset=0, size=100)
    merger.remove_partition(0)
    assert merger.held_bytes == 100
