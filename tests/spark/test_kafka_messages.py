"""The kafka input's ``output=messages`` and the apply job's driver-side decode, on the tansu broker.

The apply job reads raw messages (Arrow batches straight from the data source) and decodes each
once on the driver, with one long-lived decoder per partition; it must see exactly the events the
executor-side changelog path (``events=true``) gives.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.errors import CaptureError, ConfigError, UnknownSchemaError
from changefeed.model import Event, RowChange
from changefeed.model.jsonl import EventReader, dumps_event
from changefeed.model.rowblock import expand_blocks
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import KafkaInput, SourceOptions, register
from changefeed.spark.datasource import kafka as kafka_input
from changefeed.spark.datasource.kafka import (
    MESSAGE_SCHEMA,
    MESSAGES,
    KafkaRange,
    MessageDecoder,
    unwrap_messages,
)
from changefeed.spark.envelope import ENVELOPE_SCHEMA
from changefeed.spark.merge import MergeStage
from changefeed.testing import Broker

from .helpers import captured, changelog_tuples

PROTOCOLS = {
    "open-protocol": CodecOptions(protocol="open-protocol"),
    "canal-json": CodecOptions(protocol="canal-json", enable_tidb_extension=True),
    "simple": CodecOptions(protocol="simple"),
    "debezium": CodecOptions(protocol="debezium", enable_tidb_extension=True),
}


def _source(broker: Broker, topic: str, **extra: str) -> dict[str, str]:
    base = {"input": "kafka", "bootstrap.servers": broker.bootstrap_servers, "topic": topic}
    return {**base, "protocol": "open-protocol", **extra}


def _ends(broker: Broker, topic: str) -> dict[int, int]:
    kafka = KafkaInput(SourceOptions.parse(_source(broker, topic)))
    try:
        return {p: high for p, (_, high) in kafka.watermarks().items()}
    finally:
        kafka.close()


def _raw(broker: Broker, topic: str, partition: int, start: int, end: int, codec: CodecOptions) -> pa.Table:
    rng = KafkaRange(broker.bootstrap_servers, topic, partition, start, end, codec, ChangelogRows(), MESSAGES)
    batches = list(rng.rows())
    assert all(b.schema == ENVELOPE_SCHEMA for b in batches)
    return unwrap_messages(pa.Table.from_batches(batches, ENVELOPE_SCHEMA))


def _produce(broker: Broker, topic: str) -> dict[int, list[tuple[bytes | None, bytes]]]:
    from confluent_kafka import Producer  # noqa: PLC0415

    broker.create_topic(topic, partitions=2)
    sent: dict[int, list[tuple[bytes | None, bytes]]] = {0: [], 1: []}
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    errors: list[object] = []
    for i in range(60):
        partition = i % 2
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = bytes(range(256))[i:] + i.to_bytes(2, "big")  # binary-exact, never empty (tansu drops those)
        sent[partition].append((key, value))
        producer.produce(
            topic, value=value, key=key, partition=partition, on_delivery=lambda e, _m: e and errors.append(e)
        )
    assert producer.flush(15) == 0 and not errors
    return sent


def test_messages_output_yields_exactly_the_ranges_messages(
    spark: SparkSession, broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"cf-msg-{uuid.uuid4().hex[:8]}"
    sent = _produce(broker, topic)
    assert _ends(broker, topic) == {0: 30, 1: 30}

    monkeypatch.setattr(kafka_input, "_MESSAGES_PER_BATCH", 7)
    rng = KafkaRange(broker.bootstrap_servers, topic, 1, 3, 26, PROTOCOLS["open-protocol"], ChangelogRows(), MESSAGES)
    batches = list(rng.rows())
    assert [b.column("count").to_pylist() for b in batches] == [[7], [7], [7], [2]]
    assert all(b.schema == ENVELOPE_SCHEMA for b in batches)
    unwrapped = [unwrap_messages(pa.Table.from_batches([b])) for b in batches]
    assert [t.num_rows for t in unwrapped] == [7, 7, 7, 2] and all(t.schema == MESSAGE_SCHEMA for t in unwrapped)
    got = pa.concat_tables(unwrapped).to_pylist()
    assert got == [{"partition": 1, "offset": o, "key": sent[1][o][0], "value": sent[1][o][1]} for o in range(3, 26)]

    # Through Spark: PySpark checks the envelopes against the declared schema and passes them through.
    register(spark)
    df = spark.read.format("changefeed").options(**_source(broker, topic, output="messages")).load()
    assert df.schema.simpleString() == "struct<part:int,count:int,ipc:binary>"
    table = unwrap_messages(df.toArrow()).sort_by([("partition", "ascending"), ("offset", "ascending")])
    expected = [
        {"partition": p, "offset": o, "key": key, "value": value}
        for p in (0, 1)
        for o, (key, value) in enumerate(sent[p])
    ]
    assert table.to_pylist() == expected

    # Split into ranges of about 7 messages (eventsPerPartition): the same messages, on 10 Spark partitions.
    split = spark.read.format("changefeed").options(**_source(broker, topic, output="messages", eventsPerPartition="7"))
    df = split.load()
    assert df.rdd.getNumPartitions() == 10
    again = unwrap_messages(df.toArrow()).sort_by([("partition", "ascending"), ("offset", "ascending")])
    assert again.to_pylist() == expected


def _captured_topic(broker: Broker, codec: CodecOptions, name: str, partitions: int) -> str:
    """A new topic holding the test capture's events, written by our Kafka sink."""
    topic = f"cf-msg-{name}-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, codec, partition_num=partitions))
    try:
        sink.write(list(captured()))
        sink.flush()
    finally:
        sink.close()
    return topic


def _ranges(protocol: str = "open-protocol", **extra: str) -> list[tuple[int, int, int]]:
    opts = SourceOptions.parse(
        {"input": "kafka", "bootstrap.servers": "h:1", "topic": "t", "protocol": protocol, **extra}
    )
    ranges = KafkaInput(opts).partitions(
        {"offsets": {"0": 2, "1": 0}}, {"offsets": {"0": 12, "1": 5, "2": 7}}, ChangelogRows()
    )
    return [(r.partition, r.start, r.end) for r in ranges]  # type: ignore[attr-defined]


def test_a_partitions_range_is_split_into_spark_partitions_first_pieces_first() -> None:
    """Each partition's first piece, then each one's second...: the apply job merges partitions as
    their pieces arrive in this order; equal pieces of about ``eventsPerPartition`` messages."""
    first, second, third = [(0, 2, 5), (1, 0, 2), (2, 0, 3)], [(0, 5, 8), (1, 2, 5), (2, 3, 7)], [(0, 8, 12)]
    assert _ranges(eventsPerPartition="4") == first + second + third
    assert _ranges() == [(0, 2, 12), (1, 0, 5), (2, 0, 7)]  # default 2048
    # Simple's decoder may hold a DML for a schema a later message brings: a range ends only where a batch does.
    assert _ranges("simple", eventsPerPartition="4") == [(0, 2, 12), (1, 0, 5), (2, 0, 7)]
    for bad in ("0", "-3", "x"):
        with pytest.raises(ConfigError, match="eventsPerPartition"):
            _ranges(eventsPerPartition=bad)


def test_ranges_handed_over_as_they_end_merge_as_the_whole_batch(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    """`MergeStage.stream` (ranges of ``eventsPerPartition`` messages handed over as their tasks end)
    releases what `MergeStage.chunks` does over the batch collected whole."""
    codec = PROTOCOLS["open-protocol"]
    topic = _captured_topic(broker, codec, "stream", partitions=3)
    register(spark)
    source = _source(broker, topic, output="messages", eventsPerPartition="3")
    df = spark.read.format("changefeed").options(**source).load()
    assert df.rdd.getNumPartitions() > 6
    released = {}
    for how in ("whole", "stream"):
        kafka = KafkaInput(SourceOptions.parse(source))
        decoder = MessageDecoder(broker.bootstrap_servers, topic, codec, ChangelogRows())
        stage = MergeStage(tmp_path / how, topic, kafka.partition_ids(), decoder)
        pieces = stage.chunks(df.toArrow(), 0) if how == "whole" else stage.stream(df, 0)
        released[how] = _lines([e for piece in pieces for e in piece])
        stage.close()
        kafka.close()
    stream, whole = released["stream"], released["whole"]
    assert_same_release(stream, whole)
    marks = [orjson.loads(line)["commit_ts"] for line in stream if b'"kind":"resolved"' in line]
    assert len(marks) > 2 and marks == sorted(marks)


def assert_same_release(pieces: list[bytes], whole: list[bytes]) -> None:
    """The same events in the same order, released in more steps (a resolved event after each), and
    the same last watermark. A DDL is on every partition: the copy the merge meets first gives its
    position."""
    rows = [
        [{k: v for k, v in obj.items() if k != "position" or obj["kind"] != "ddl"} for obj in map(orjson.loads, lines)]
        for lines in (pieces, whole)
    ]
    rows = [[obj for obj in objs if obj["kind"] != "resolved"] for objs in rows]
    assert len(rows[0]) > 20 and rows[0] == rows[1]
    assert pieces[-1] == whole[-1]  # the same last watermark, with the same offsets


def test_the_offsets_consumer_answers_again_at_once_after_reading_the_last_messages(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`watermarks` (every initialOffset and latestOffset) fetches each partition's last message; the
    broker then holds the consumer's next fetch at the log's end for ``fetch.wait.max.ms``, and the
    next metadata request waited behind it (500 ms by default: a query's first latestOffset). The
    consumer is tuned as a range consumer, whose reads end the same way."""
    made: list[dict[str, object]] = []
    real = kafka_input.new_consumer

    def recording(servers: str, config: dict[str, object]) -> object:
        made.append(dict(config))
        return real(servers, config)

    monkeypatch.setattr(kafka_input, "new_consumer", recording)
    topic = f"cf-marks-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic)
    kafka = KafkaInput(SourceOptions.parse(_source(broker, topic)))
    try:
        assert kafka.watermarks() == kafka.watermarks() == {0: (0, 30), 1: (0, 30)}
        assert kafka.latest_offset({"offsets": {"0": 0, "1": 0}}, 40, None)["offsets"] == {"0": 20, "1": 20}
    finally:
        kafka.close()
    assert len(made) == 1 and made[0].items() >= kafka_input.RANGE_SETTINGS.items()


def test_messages_output_is_kafka_only() -> None:
    with pytest.raises(ConfigError, match="option output of input storage must be one of changelog"):
        SourceOptions.parse({"input": "storage", "path": "/x", "output": "messages"})


def _lines(events: list[Event]) -> list[bytes]:
    """JSONL of the events, row blocks (the columnar decoders' output) as their rows."""
    return [dumps_event(e) for e in expand_blocks(events)]


def _old_path(broker: Broker, topic: str, partition: int, end: int, codec: CodecOptions, rules: list[str]) -> list:
    """The executor-side path the apply job used before: changelog rows with the JSONL ``event`` column."""
    changelog = ChangelogRows(rules, with_event=True)
    rows = changelog_tuples(KafkaRange(broker.bootstrap_servers, topic, partition, 0, end, codec, changelog).rows())
    reader = EventReader()
    return [dumps_event(reader.parse(row[-1])) for row in rows]


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_driver_side_decode_gives_the_events_of_the_changelog_path(broker: Broker, protocol: str) -> None:
    codec = PROTOCOLS[protocol]
    topic = _captured_topic(broker, codec, protocol, partitions=2)
    ends = _ends(broker, topic)
    rules = ["*.*", "!cf.nums"]
    for partition, end in ends.items():
        raw = _raw(broker, topic, partition, 0, end, codec)
        assert raw.num_rows == end
        old = _old_path(broker, topic, partition, end, codec, rules)
        assert len(old) > 10

        # One long-lived decoder over the partition in three batches, handed over in shuffled order.
        decoder = MessageDecoder(broker.bootstrap_servers, topic, codec, ChangelogRows(rules))
        third = end // 3
        new: list[bytes] = []
        for chunk in (raw.slice(0, third), raw.slice(third, third), raw.slice(2 * third)):
            shuffled = chunk.take(pa.array(list(range(chunk.num_rows))[::-1]))
            decoded = decoder.decode(shuffled)
            assert [offset for _, offset, _, _ in decoded] == chunk.column("offset").to_pylist()
            new.extend(line for _, _, events, _ in decoded for line in _lines(events))
        decoder.close()
        assert new == old, (protocol, partition)

        if protocol == "simple":
            # A decoder that starts mid-partition (a restart) looks back for its schemas.
            start = end // 2
            fresh = MessageDecoder(broker.bootstrap_servers, topic, codec, ChangelogRows(rules))
            tail = [line for _, _, events, _ in fresh.decode(raw.slice(start)) for line in _lines(events)]
            fresh.close()
            tail_old = [line for line in old if int(EventReader().parse(line).position["offset"]) >= start]
            assert tail == tail_old


def test_driver_side_decode_error_names_the_message_and_resets(broker: Broker) -> None:
    codec = replace(PROTOCOLS["simple"], send_bootstrap_interval_in_sec=0, send_bootstrap_in_msg_count=0)
    topic = f"cf-msg-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, codec, partition_num=1))
    try:
        sink.write([e for e in captured() if isinstance(e, RowChange)])  # no schema anywhere in the topic
        sink.flush()
    finally:
        sink.close()
    raw = _raw(broker, topic, 0, 0, _ends(broker, topic)[0], codec)
    decoder = MessageDecoder(broker.bootstrap_servers, topic, codec, ChangelogRows())
    with pytest.raises(UnknownSchemaError, match="send-bootstrap-to-all-partition=true") as caught:
        decoder.decode(raw.slice(2))
    assert caught.value.where == f"{topic}[0]@2"
    assert decoder._decoders == {}  # dropped: a replay starts from fresh decoders


def test_a_damaged_envelope_is_an_error_naming_the_partition() -> None:
    good = KafkaRange("unused:1", "t", 4, 0, 0, PROTOCOLS["open-protocol"], ChangelogRows(), MESSAGES)._batch(
        [0, 1], [b"k0", None], [b"v0", b"v1"]
    )
    assert unwrap_messages(pa.Table.from_batches([good])).column("value").to_pylist() == [b"v0", b"v1"]
    blob = good.column("ipc")[0].as_py()
    for damaged, count in ((blob[: len(blob) // 2], 2), (b"not arrow", 2), (blob, 3)):
        batch = pa.RecordBatch.from_arrays(
            [pa.array([4], pa.int32()), pa.array([count], pa.int32()), pa.array([damaged], pa.binary())],
            schema=ENVELOPE_SCHEMA,
        )
        with pytest.raises(CaptureError, match="kafka messages hand-over") as err:
            unwrap_messages(pa.Table.from_batches([batch]))
        assert err.value.where == "partition 4"
