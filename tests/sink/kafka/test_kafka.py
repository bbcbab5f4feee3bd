"""Kafka sink -> tansu broker -> Kafka source, for every protocol.

Each test uses its own topic. The restart test here uses memory storage and checks that both sides
notice the loss; restarts with persistent storage (tansu on s3rver) are in test_restart.py.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict

import orjson
import pytest

from changefeed.codec import CodecOptions
from changefeed.consume import KafkaSource, KafkaSourceConfig, KafkaSourceError
from changefeed.dispatch import DispatchRule
from changefeed.errors import SinkError
from changefeed.model import DDLEvent, Resolved, RowChange
from changefeed.sink.kafka import FlushedPosition, KafkaSink, KafkaSinkConfig
from changefeed.testing import Broker

from .workload import decode_partition, read_raw, row_key, sent_rows, workload

PARTITIONS = 3
# Hash rows by primary key so every table spreads over all partitions.
BY_KEY = [DispatchRule(matcher=["*.*"], partition="index-value")]

PROTOCOLS = {
    "open-protocol": {"protocol": "open-protocol"},
    "canal-json": {"protocol": "canal-json", "enable_tidb_extension": True},
    "simple-json": {"protocol": "simple"},
    "simple-avro": {"protocol": "simple", "encoding_format": "avro", "send_bootstrap_to_all_partition": False},
}


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_sink(broker: Broker, topic: str, codec: CodecOptions, **kw) -> KafkaSink:
    kw.setdefault("partition_num", PARTITIONS)
    kw.setdefault("rules", BY_KEY)
    kw.setdefault("metadata_check_interval_s", 0.0)
    return KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, codec, **kw))


def make_source(broker: Broker, topic: str, codec: CodecOptions, **kw) -> KafkaSource:
    kw.setdefault("metadata_check_interval_s", 0.5)
    return KafkaSource(KafkaSourceConfig(broker.bootstrap_servers, topic, codec, **kw))


def simple_type(codec: CodecOptions, value: bytes) -> str:
    if codec.encoding_format == "avro":
        # Avro: union branch 11 (Message), then the MessageType enum index (spec §3.5).
        return ["WATERMARK", "BOOTSTRAP", "DDL", "DML"][value[1] >> 1]
    kind = orjson.loads(value)["type"]
    if kind in ("INSERT", "UPDATE", "DELETE"):
        return "DML"
    return kind if kind in ("WATERMARK", "BOOTSTRAP") else "DDL"


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_sink_to_source_roundtrip(broker: Broker, name: str) -> None:
    codec = CodecOptions(**PROTOCOLS[name])
    topic = topic_name(name)
    events = workload()
    resolved = [e for e in events if isinstance(e, Resolved)]
    with make_sink(broker, topic, codec) as sink:
        sink.write(events)
        assert sink.flush() == resolved[-1].commit_ts
        flushed = sink.flushed
    assert flushed == FlushedPosition(resolved[-1].commit_ts, resolved[-1].position)

    with make_source(broker, topic, codec) as source:
        out = source.read_until(resolved[-1].commit_ts)
        checkpoint = source.checkpoint()

    rows = [e for e in out if isinstance(e, RowChange)]
    expected = sent_rows(events)
    # Every row exactly once ...
    assert Counter(map(row_key, rows)) == Counter(map(row_key, expected))
    # ... in commit-ts order, each row key's history in its original order.
    assert [r.commit_ts for r in rows] == sorted(r.commit_ts for r in rows)
    history: dict[tuple, list] = defaultdict(list)
    for r in expected:
        history[(r.table, r.image[0])].append(row_key(r))
    got: dict[tuple, list] = defaultdict(list)
    for r in rows:
        got[(r.table, r.as_dict(old=r.new is None)["id"])].append(row_key(r))
    assert got == history
    # DDL applied once although it was broadcast.
    ddls = [(e.commit_ts, e.query) for e in out if isinstance(e, DDLEvent)]
    assert ddls == [(e.commit_ts, e.query) for e in events if isinstance(e, DDLEvent)]
    assert source.stats.ddl_copies == (0 if name == "canal-json" else 2 * len(ddls))

    # Broadcast rules, partition by partition.
    raw = read_raw(broker.bootstrap_servers, topic, PARTITIONS)
    assert sorted(raw) == list(range(PARTITIONS))
    assert checkpoint == {p: len(msgs) for p, msgs in raw.items()}
    distinct_resolved = sorted({e.commit_ts for e in resolved})
    for p, msgs in raw.items():
        assert all(v for _, _, v in msgs), "no message may have an empty value"
        decoded = [e for _, e in decode_partition(codec, msgs)]
        got_ddls = [e.commit_ts for e in decoded if isinstance(e, DDLEvent)]
        # canal-json sends DDL to partition 0 only; every other protocol broadcasts (spec §1.8).
        assert got_ddls == ([] if name == "canal-json" and p else [e.commit_ts for e in events if e.kind == "ddl"])
        assert [e.commit_ts for e in decoded if isinstance(e, Resolved)] == distinct_resolved
        if codec.protocol == "simple":
            kinds = Counter(simple_type(codec, v) for _, _, v in msgs)
            if codec.send_bootstrap_to_all_partition or p == 0:
                assert kinds["BOOTSTRAP"] >= 3, kinds  # one per table before its first DML, at least
            else:
                assert kinds["BOOTSTRAP"] == 0, kinds


def test_open_protocol_batches_per_partition_and_resend_is_deduplicated(broker: Broker) -> None:
    """A sink restarted from an older position re-sends rows; the source emits each once."""
    codec = CodecOptions(protocol="open-protocol", max_batch_size=4)
    topic = topic_name("resend")
    events = workload(n_txns=30)
    cut = [i for i, e in enumerate(events) if isinstance(e, Resolved)][2]
    with make_sink(broker, topic, codec) as sink:
        sink.write(events[: cut + 5])  # stops mid-way after a resolved event
        sink.flush()
        assert sink.messages_sent < len(sent_rows(events[: cut + 5])) + 6 * PARTITIONS  # rows were batched
    with make_sink(broker, topic, codec) as sink:  # resumes from an older position: a resend
        sink.write(events[cut - 6 :])
    last = events[-1].commit_ts
    with make_source(broker, topic, codec) as source:
        out = source.read_until(last)
        stats = source.stats
    rows = [e for e in out if isinstance(e, RowChange)]
    assert Counter(map(row_key, rows)) == Counter(map(row_key, sent_rows(events)))
    assert stats.behind_resolved + stats.fallback + stats.replayed > 0


def test_simple_consumer_joining_midway_gets_schemas_from_bootstrap(broker: Broker) -> None:
    codec = CodecOptions(protocol="simple", send_bootstrap_in_msg_count=5, send_bootstrap_interval_in_sec=0)
    topic = topic_name("midway")
    events = workload(n_txns=60)
    with make_sink(broker, topic, codec) as sink:
        sink.write(events)
    raw = read_raw(broker.bootstrap_servers, topic, PARTITIONS)
    # Start each partition half-way, past the CREATE TABLE DDLs and the first BOOTSTRAPs.
    start = {p: len(msgs) // 2 for p, msgs in raw.items()}
    # Some partition must carry DML before its next BOOTSTRAP: those rows wait for their schema.
    first_kinds = [simple_type(codec, msgs[start[p]][2]) for p, msgs in raw.items()]
    assert "DML" in first_kinds, first_kinds
    dml_after_start = sum(
        1 for p, msgs in raw.items() for off, _, v in msgs if off >= start[p] and simple_type(codec, v) == "DML"
    )
    with make_source(broker, topic, codec, start_offsets=start) as source:
        out = source.read_until(events[-1].commit_ts)
    rows = [e for e in out if isinstance(e, RowChange)]
    assert len(rows) == dml_after_start > 0
    assert set(map(row_key, rows)) <= set(map(row_key, sent_rows(events)))


def test_topic_with_fewer_partitions_than_partition_num_is_refused(broker: Broker) -> None:
    topic = topic_name("small")
    broker.create_topic(topic, partitions=2)
    with pytest.raises(SinkError, match=r"has 2 partitions, fewer than partition-num=3.*--partitions 3"):
        make_sink(broker, topic, CodecOptions(protocol="open-protocol")).write(workload(n_txns=2))
    missing = topic_name("missing")
    sink = make_sink(broker, missing, CodecOptions(protocol="open-protocol"), auto_create_topic=False)
    with pytest.raises(SinkError, match="does not exist and auto-create-topic is off"):
        sink.write(workload(n_txns=2))


def test_broker_restart_with_memory_storage_is_noticed() -> None:
    """tansu memory storage loses the topic; a recreated topic has another partition count."""
    codec = CodecOptions(protocol="open-protocol")
    topic = topic_name("restart")
    events = workload(n_txns=20)
    half = len(events) // 2
    with Broker() as broker:
        sink = make_sink(broker, topic, codec, delivery_timeout_s=3.0, flush_timeout_s=10.0)
        sink.write(events[:half])
        sink.flush()
        source = make_source(broker, topic, codec, metadata_check_interval_s=0.0)
        source.poll(1.0)
        broker.restart()
        # What a producer's metadata request does on tansu: the topic comes back with 4 partitions.
        broker.create_topic(topic, partitions=4)
        with pytest.raises(SinkError, match=r"now has 4 partitions \(was 3\)") as err:
            sink.write(events[half:])
            sink.flush()
        assert err.value.where == topic
        with pytest.raises(SinkError):  # the sink stays failed
            sink.flush()
        with pytest.raises(KafkaSourceError, match=r"now has 4 partitions \(had 3"):
            source.poll(1.0)
        source.close()


def test_consumer_group_commits_only_when_told_and_resumes_there(broker: Broker) -> None:
    codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    topic = topic_name("group")
    events = workload(n_txns=30)
    cut = [i for i, e in enumerate(events) if isinstance(e, Resolved)][2] + 1
    first, second = events[:cut], events[cut:]
    group = f"g-{uuid.uuid4().hex[:8]}"
    fast_join = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}  # tansu's first join waits ~timeout/2
    with make_sink(broker, topic, codec) as sink:
        sink.write(first)
        with make_source(broker, topic, codec, group_id=group, subscribe=True, consumer_config=fast_join) as source:
            out = source.read_until(first[-1].commit_ts)
            position = out[-1].position
            assert isinstance(out[-1], Resolved) and position
            source.commit(position)  # the downstream write is durable up to here
        sink.write(second)
    with make_source(broker, topic, codec, group_id=group, subscribe=True, consumer_config=fast_join) as source:
        out = source.read_until(events[-1].commit_ts)
    rows = [e for e in out if isinstance(e, RowChange)]
    assert Counter(map(row_key, rows)) == Counter(map(row_key, sent_rows(second)))
