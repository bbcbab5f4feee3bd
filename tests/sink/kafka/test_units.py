"""Kafka sink helpers that need no broker: BOOTSTRAP timing and acknowledged positions."""

from __future__ import annotations

from changefeed.model import Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.sink.kafka import AckTracker, BootstrapPolicy, FlushedPosition

T = TableSchema("db", "t", (Column("id", TypeCode.INT, nullable=False),), (Index("PRIMARY", ("id",), primary=True),))
U = TableSchema("db", "u", (Column("id", TypeCode.INT, nullable=False),), (Index("PRIMARY", ("id",), primary=True),))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def insert(table: TableSchema, i: int) -> RowChange:
    return RowChange(Op.INSERT, table, 100 + i, new=(i,))


def test_bootstrap_before_first_dml_then_every_n_messages() -> None:
    policy = BootstrapPolicy(interval_s=0, msg_count=3, clock=Clock())
    sent = [policy.before_row(insert(T, i)) is not None for i in range(7)]
    assert sent == [True, False, False, True, False, False, True]
    assert policy.before_row(insert(U, 0)) is U  # each table has its own schedule


def test_bootstrap_by_interval_and_idle_tables_dropped() -> None:
    clock = Clock()
    policy = BootstrapPolicy(interval_s=120, msg_count=0, clock=clock)
    assert policy.before_row(insert(T, 0)) is T
    clock.now = 119
    assert policy.due() == []
    clock.now = 120
    assert policy.due() == [T]  # periodic, even without new DML
    clock.now = 120 + 30 * 60 + 1  # idle for more than 30 minutes: inactive, no more BOOTSTRAP
    assert policy.due() == []
    assert policy.before_row(insert(T, 1)) is T  # its next DML counts as a first one


def test_bootstrap_disabled_when_both_settings_are_zero() -> None:
    policy = BootstrapPolicy(interval_s=0, msg_count=0, clock=Clock())
    assert not policy.enabled
    assert policy.before_row(insert(T, 0)) is None
    assert policy.due() == []


def test_flushed_position_needs_every_earlier_ack() -> None:
    acks = AckTracker()
    a, b = acks.sent(), acks.sent()
    acks.mark(FlushedPosition(10, {"i": 1}))
    c = acks.sent()
    acks.mark(FlushedPosition(20, {"i": 2}))
    acks.acked(b)  # another partition acknowledged first
    acks.acked(c)
    assert acks.flushed() is None
    acks.acked(a)
    assert acks.flushed() == FlushedPosition(20, {"i": 2})
    assert acks.in_flight == 0
