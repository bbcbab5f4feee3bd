"""Broker restart mid-stream with persistent storage (tansu on s3rver): nothing lost, resends harmless.

The job pattern under test (docs/kafka.md, "Broker restarts"): checkpoint only ``sink.flushed``;
after a restart either keep writing with the same sink or, when it failed (or the job itself
restarted), build a new sink and re-send everything after the flushed position. The source must
then hand out every row once, in commit-ts order, and the applied final state must equal the
source stream's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from changefeed.codec import CodecOptions
from changefeed.errors import SinkError
from changefeed.model import DDLEvent, Event, Op, Resolved, RowChange
from changefeed.sink.kafka import KafkaSink
from changefeed.testing import Broker

from .test_kafka import PARTITIONS, PROTOCOLS, make_sink, make_source, topic_name
from .workload import row_key, sent_rows, workload

pytestmark = pytest.mark.broker

CASES = [
    # protocol, what the job does after the restart, how the broker goes down
    ("open-protocol", "continue", "restart"),
    ("canal-json", "rebuild", "kill"),
    ("simple-json", "rebuild", "restart"),
]


def apply(rows: list[RowChange]) -> dict[tuple[str, Any], dict[str, Any]]:
    """The downstream table contents after applying ``rows`` (key -> row), as a sink would."""
    state: dict[tuple[str, Any], dict[str, Any]] = {}
    for r in rows:
        if r.op is Op.DELETE:
            state.pop((r.table, r.as_dict(old=True)["id"]))
        else:
            if r.old is not None:
                state.pop((r.table, r.as_dict(old=True)["id"]), None)
            new = r.as_dict()
            state[(r.table, new["id"])] = new
    return state


def resume_index(events: list[Event], sink: KafkaSink) -> int:
    """Where a job restarts after ``sink.flushed``: the first event with a later commit ts."""
    flushed = sink.flushed
    if flushed is None:
        return 0
    return next(i for i, e in enumerate(events) if e.commit_ts > flushed.commit_ts)


def check_stream(out: list[Event], events: list[Event]) -> None:
    rows = [e for e in out if isinstance(e, RowChange)]
    expected = sent_rows(events)
    assert Counter(map(row_key, rows)) == Counter(map(row_key, expected)), "every row exactly once"
    assert [r.commit_ts for r in rows] == sorted(r.commit_ts for r in rows)
    history: dict[tuple, list] = defaultdict(list)
    for r in expected:
        history[(r.table, r.as_dict(old=r.new is None)["id"])].append(row_key(r))
    got: dict[tuple, list] = defaultdict(list)
    for r in rows:
        got[(r.table, r.as_dict(old=r.new is None)["id"])].append(row_key(r))
    assert got == history, "each key's versions in their original order"
    ddls = [(e.commit_ts, e.query) for e in out if isinstance(e, DDLEvent)]
    assert ddls == [(e.commit_ts, e.query) for e in events if isinstance(e, DDLEvent)]
    assert apply(rows) == apply(expected), "final state equals the source stream's"


@pytest.mark.parametrize(("name", "mode", "how"), CASES)
def test_broker_restart_mid_stream_loses_nothing(persistent_broker: Broker, name: str, mode: str, how: str) -> None:
    broker = persistent_broker
    codec = CodecOptions(**PROTOCOLS[name])
    topic = topic_name(f"s3-{name}")
    events = workload(n_txns=40)
    resolved_at = [i for i, e in enumerate(events) if isinstance(e, Resolved)]
    cut = resolved_at[3] + 4  # mid-stream: rows after a resolved event, the last transaction open

    # tansu 0.6 on s3 storage: a Produce to partitions no Fetch has touched yet can stall until it
    # times out (seen on fresh topics, not only after restarts): create the topic, then warm it up.
    broker.create_topic(topic, PARTITIONS)
    broker.warm_up()
    sink = make_sink(broker, topic, codec, delivery_timeout_s=30.0, flush_timeout_s=60.0)
    sink.write(events[:cut])
    sink.flush()  # nothing in flight while the broker is down (tansu s3 bug: see changefeed.testing.broker)
    assert sink.flushed is not None and sink.flushed.commit_ts >= events[resolved_at[3]].commit_ts
    source = make_source(broker, topic, codec)
    out = source.read_until(events[resolved_at[3]].commit_ts)

    if how == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()

    if mode == "continue":
        sink.write(events[cut:])
        sink.flush()
        sink.close()
    else:  # the job restarted too: a new sink re-sends everything after the flushed position
        resume = resume_index(events, sink)
        assert resume < cut, "the resend must overlap what was already delivered"
        sink.close()
        # A job whose sink fails (e.g. deliveries time out while the restarted broker settles) does
        # the same again: rebuild and re-send after the flushed position. Bounded attempts.
        for attempt in range(3):
            rebuilt = make_sink(broker, topic, codec, delivery_timeout_s=10.0, flush_timeout_s=20.0)
            try:
                rebuilt.write(events[resume:])
                rebuilt.flush()
                rebuilt.close()
                break
            except SinkError:
                if attempt == 2:
                    raise
                if rebuilt.flushed is not None:
                    resume = resume_index(events, rebuilt)
    out += source.read_until(events[-1].commit_ts)
    stats = source.stats
    source.close()
    check_stream(out, events)
    if mode == "rebuild":
        assert stats.behind_resolved + stats.fallback + stats.replayed > 0, "resent rows reached the source"

    # The broker kept what it acknowledged before the restart: a new reader from offset 0 sees it all.
    with make_source(broker, topic, codec) as fresh:
        check_stream(fresh.read_until(events[-1].commit_ts), events)
