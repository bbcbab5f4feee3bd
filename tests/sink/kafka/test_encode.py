"""`KafkaEncoder` alone: the message groups and transaction marks the producing side relies on (no broker)."""

from __future__ import annotations

import pickle

import pytest

from changefeed.codec import CodecOptions
from changefeed.dispatch import DispatchRule
from changefeed.model import DDLEvent, Event, Resolved
from changefeed.sink.kafka.encode import KafkaEncoder, MessageGroup, UnknownTopicError
from changefeed.sink.kafka.progress import FlushedPosition

from .workload import workload

BY_KEY = [DispatchRule(matcher=["*.*"], partition="index-value")]


def _encoder(protocol: str = "open-protocol", **kw: object) -> KafkaEncoder:
    codec = CodecOptions(protocol=protocol, max_batch_size=4, clock=int, **kw)  # type: ignore[arg-type]
    return KafkaEncoder(codec, "cdc", BY_KEY, batch_rows=10)


def _three(topic: str) -> int:
    return 3


def test_groups_close_at_ddl_resolved_and_batch_rows() -> None:
    events = workload(n_txns=20)
    items = list(_encoder().encode(events, _three))
    passed = [i for i in items if not isinstance(i, MessageGroup)]
    assert passed == [e for e in events if isinstance(e, DDLEvent | Resolved)]  # in place, unchanged
    groups = [i for i in items if isinstance(i, MessageGroup)]
    assert all(g.rows <= 10 for g in groups)
    assert sum(g.rows for g in groups) == sum(e.kind == "row" for e in events)
    for i, item in enumerate(items):
        if isinstance(item, DDLEvent) and i > 0:
            assert not isinstance(items[i - 1], MessageGroup) or items[i - 1].last.commit_ts < item.commit_ts
    for g in groups:
        assert all(p in range(3) and m.value for _, p, m in g.messages)
        assert g.complete is None or g.first_ts <= g.complete.commit_ts < g.last.commit_ts


def test_marks_name_the_last_transaction_completed_inside_a_group() -> None:
    rows = [e for e in workload(n_txns=6) if e.kind == "row"]
    txns = sorted({r.commit_ts for r in rows})
    (group,) = list(KafkaEncoder(CodecOptions(protocol="canal-json"), "cdc").encode(rows, _three))
    assert group.first_ts == txns[0]
    assert group.last.commit_ts == txns[-1]
    last_complete = [r for r in rows if r.commit_ts == txns[-2]][-1]
    assert group.complete == FlushedPosition(txns[-2], last_complete.position)


def test_pickled_encoder_encodes_the_same_bytes() -> None:
    events: list[Event] = workload(n_txns=10)
    encoder = _encoder("simple")
    copy = pickle.loads(pickle.dumps(encoder))
    want = [
        (t, p, m.key, m.value)
        for g in encoder.encode(events, _three)
        if isinstance(g, MessageGroup)
        for t, p, m in g.messages
    ]
    got = [
        (t, p, m.key, m.value)
        for g in copy.encode(events, _three)
        if isinstance(g, MessageGroup)
        for t, p, m in g.messages
    ]
    assert got == want
    for g in copy.encode(events, _three):
        if isinstance(g, MessageGroup):  # BOOTSTRAP is decided by the sink: it gets each dispatched row's table
            assert len(g.bootstrap) >= g.rows and {t.table for t in g.bootstrap} == {
                k[1].split(".")[1] for k in g.counts
            }


def test_an_unknown_topic_is_reported_for_the_caller_to_resolve() -> None:
    events = workload(n_txns=3)
    rules = [DispatchRule(matcher=["*.*"], topic="cdc_{schema}_{table}")]
    encoder = KafkaEncoder(CodecOptions(protocol="canal-json"), "cdc", rules)

    def known(topic: str) -> int:
        if topic == "cdc":
            return 1
        raise UnknownTopicError(topic)

    with pytest.raises(UnknownTopicError) as info:
        list(encoder.encode(events, known))
    assert info.value.topic in encoder.topics(events)
    assert all(t.startswith("cdc_") for t in encoder.topics(events))
