"""The kafka input's ``output=decoded``: messages decoded in range tasks, rebuilt on the driver.

What the driver rebuilds must be exactly what decoding there gave (the changelog path's events,
positions and message sizes), the row blocks must stay row blocks (the MySQL sink renders them
from columns), and a decoding error in a task must end the batch with that error and position.
"""

from __future__ import annotations

import uuid
from hashlib import blake2b

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.errors import CodecError
from changefeed.model import Column, RowChange, TableSchema, TypeCode
from changefeed.model.rowblock import RowBlock, Segment, TableRows
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import KafkaInput, SourceOptions, register
from changefeed.spark.datasource import kafka as kafka_input
from changefeed.spark.datasource.decoded import (
    DECODED,
    DECODED_SCHEMA,
    DecodedReader,
    columnar,
    pack,
    unpack,
)
from changefeed.spark.datasource.kafka import RANGES, KafkaRange, MessageDecoder
from changefeed.spark.merge import MergeStage
from changefeed.testing import Broker

from .helpers import captured
from .test_kafka_messages import _ends, _lines, _old_path, _raw, _source

CODEC = CodecOptions(protocol="open-protocol")


def _topic(broker: Broker, partitions: int = 2, codec: CodecOptions = CODEC, start_ts_lag: int = 0) -> str:
    """A topic with the captured fixture's events; ``start_ts_lag``: each row's start ts that far before its commit."""
    topic = f"cf-dec-{uuid.uuid4().hex[:8]}"
    events = list(captured())
    for ev in events:
        if isinstance(ev, RowChange) and start_ts_lag:
            ev.start_ts = ev.commit_ts - start_ts_lag
    sink = KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, codec, partition_num=partitions))
    try:
        sink.write(events)
        sink.flush()
    finally:
        sink.close()
    return topic


def test_only_columnar_protocols_are_decoded_in_tasks() -> None:
    assert columnar(CODEC) and columnar(DEBEZIUM)
    assert not columnar(CodecOptions(protocol="open-protocol", large_message_handle_compression="lz4"))
    assert not columnar(CodecOptions(protocol="canal-json", enable_tidb_extension=True))
    assert not columnar(CodecOptions(protocol="simple"))


#: Debezium with its watermarks and each row's start ts (carried in the hand-over as a column of its own).
DEBEZIUM = CodecOptions(protocol="debezium", enable_tidb_extension=True, debezium_include_start_ts=True)


def test_decoded_debezium_rows_keep_their_start_ts(broker: Broker) -> None:
    topic = _topic(broker, codec=DEBEZIUM, start_ts_lag=5)
    for partition, end in _ends(broker, topic).items():
        rng = KafkaRange(broker.bootstrap_servers, topic, partition, 0, end, DEBEZIUM, ChangelogRows(), DECODED)
        decoded = unpack(pa.Table.from_batches(list(rng.rows()), DECODED_SCHEMA), topic)
        raw = _raw(broker, topic, partition, 0, end, DEBEZIUM)
        driver = MessageDecoder(broker.bootstrap_servers, topic, DEBEZIUM, ChangelogRows()).decode(raw)
        assert [(p, o, size) for p, o, _, size in decoded] == [(p, o, size) for p, o, _, size in driver]
        assert [_lines(e) for *_, e, _ in decoded] == [_lines(e) for *_, e, _ in driver]
        blocks = [e for _, _, events, _ in decoded for e in events if isinstance(e, RowBlock)]
        assert blocks, "the rows came as row blocks"
        starts = {row.start_ts for block in blocks for t in block.tables for row in map(t.row, range(t.num_rows))}
        commits = {s.commit_ts for block in blocks for s in block.segments}
        assert starts and starts == {ts - 5 for ts in commits}  # each row's own start ts, not its commit ts


def test_decoded_output_gives_the_events_of_the_changelog_path(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = _topic(broker)
    monkeypatch.setattr(kafka_input, "_MESSAGES_PER_BATCH", 7)  # several runs per range
    rules = ["*.*", "!cf.nums"]
    for partition, end in _ends(broker, topic).items():
        old = _old_path(broker, topic, partition, end, CODEC, rules)
        assert len(old) > 10
        rng = KafkaRange(broker.bootstrap_servers, topic, partition, 0, end, CODEC, ChangelogRows(rules), DECODED)
        batches = list(rng.rows())
        assert len(batches) == -(-end // 7) and all(b.schema == DECODED_SCHEMA for b in batches)
        shuffled = pa.Table.from_batches(batches[::-1], DECODED_SCHEMA)  # Spark hands rows over in any order
        decoded = unpack(shuffled, topic)
        assert [offset for _, offset, _, _ in decoded] == list(range(end))
        assert [line for _, _, events, _ in decoded for line in _lines(events)] == old
        assert any(isinstance(e, RowBlock) for _, _, events, _ in decoded for e in events)

        # The same sizes and events as decoding the raw messages on the driver.
        raw = _raw(broker, topic, partition, 0, end, CODEC)
        driver = MessageDecoder(broker.bootstrap_servers, topic, CODEC, ChangelogRows(rules)).decode(raw)
        assert [(p, o, size) for p, o, _, size in decoded] == [(p, o, size) for p, o, _, size in driver]
        assert [_lines(e) for *_, e, _ in decoded] == [_lines(e) for *_, e, _ in driver]


def test_decoded_output_through_spark_and_the_merge(spark: SparkSession, broker: Broker, tmp_path) -> None:
    topic = _topic(broker)
    kafka = KafkaInput(SourceOptions.parse(_source(broker, topic)))
    reader = kafka.message_decoder()
    assert isinstance(reader, DecodedReader) and reader.output == DECODED
    stage = MergeStage(tmp_path, topic, kafka.partition_ids(), reader)
    assert stage.output == DECODED

    register(spark)
    df = spark.read.format("changefeed").options(**_source(broker, topic, output=DECODED)).load()
    assert df.schema.simpleString() == "struct<part:int,offset:bigint,meta:binary,tables:array<binary>>"
    released = stage.run(df.toArrow(), 0)

    raw = pa.concat_tables(_raw(broker, topic, p, 0, end, CODEC) for p, end in _ends(broker, topic).items())
    expected = MergeStage(tmp_path / "driver", topic, [0, 1], MessageDecoder("unused:1", topic, CODEC, ChangelogRows()))
    assert expected.output == RANGES  # the driver reads its ranges itself; here it is handed their messages
    assert _lines(released) == _lines(expected.run(raw, 0))
    assert any(isinstance(e, RowBlock) for e in released)


def test_a_task_decoding_error_is_raised_on_the_driver_with_its_position(broker: Broker) -> None:
    from confluent_kafka import Producer  # noqa: PLC0415

    topic = f"cf-dec-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for value in (b"\x00" * 8, b"not open protocol"):
        producer.produce(topic, key=b"\x00" * 8, value=value, partition=0)
    assert producer.flush(15) == 0
    rng = KafkaRange(broker.bootstrap_servers, topic, 0, 0, 2, CODEC, ChangelogRows(), DECODED)
    rows = pa.Table.from_batches(list(rng.rows()), DECODED_SCHEMA)
    with pytest.raises(CodecError) as caught:
        unpack(rows, topic)
    assert caught.value.where is not None and caught.value.where.startswith(f"{topic}[0]@")


def test_partial_images_wide_tables_and_raw_bytes_survive_the_hand_over() -> None:
    # 70 columns (image bitmaps wider than 64 bits), rows carrying only some of them, raw bytes kept.
    width = 70
    schema = TableSchema("db", "wide", tuple(Column(f"c{i}", TypeCode.BIGINT) for i in range(width)))
    main = [pa.array([1, 2, 3], pa.int64()) for _ in range(width)]
    before = [pa.array([None, None, 9], pa.int64()) for _ in range(width)]
    ops, ts = pa.array(["insert", "insert", "update"]), pa.array([5, 5, 6], pa.int64())
    batch = pa.RecordBatch.from_arrays([*main, ops, ts, *before], names=["same"] * (2 * width + 2))
    every = (1 << width) - 1
    table = TableRows(
        schema,
        batch,
        main_runs=[(every, 1), ((1 << 69) | 1, 2)],
        before_runs=[(-1, 2), (every, 1)],
        raw=[b"a", b"b", b"c"],
    )
    block = RowBlock([table.slice(1, 2)], [Segment(0, 1, 5, None, skip=None), Segment(0, 1, 6, None, skip=None)])

    got = unpack(pa.Table.from_batches([pack(3, [41], [100], [[block]])]), "t")
    assert [(p, o, size) for p, o, _, size in got] == [(3, 41, 100)]
    (rebuilt,) = got[0][2]
    assert isinstance(rebuilt, RowBlock)
    # The merge only compares rows' bytes: a digest of them travels.
    assert rebuilt.tables[0].raw == [blake2b(v, digest_size=16).digest() for v in (b"b", b"c")]
    assert rebuilt.tables[0].main_runs == [((1 << 69) | 1, 2)]
    want = [(r.op, r.commit_ts, r.new, r.old) for r in block.rows()]
    assert [(r.op, r.commit_ts, r.new, r.old) for r in rebuilt.rows()] == want
    assert [r.position for r in rebuilt.rows()] == [{"topic": "t", "partition": 3, "offset": 41}] * 2


def test_a_block_of_a_run_of_messages_keeps_each_rows_message() -> None:
    """A block holding a row of each of a run of messages (the Debezium block decoder's), in the
    first message's events: each row comes back at its own message's position."""
    schema = TableSchema("db", "t", (Column("id", TypeCode.BIGINT),))
    ops, ts = pa.array(["insert"] * 3), pa.array([5, 6, 6], pa.int64())
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2, 3]), ops, ts, pa.nulls(3, pa.int64())], ["id", "op", "ts", "b"])
    table = TableRows(schema, batch)
    at = [{"topic": "t", "partition": 3, "offset": offset} for offset in (41, 42, 43)]
    block = RowBlock([table], [Segment(0, 1, c, p, None) for c, p in zip((5, 6, 6), at, strict=True)])

    got = unpack(pa.Table.from_batches([pack(3, [41, 42, 43], [10, 11, 12], [[block], [], []])]), "t")
    assert [(p, o, len(events), size) for p, o, events, size in got] == [(3, 41, 1, 10), (3, 42, 0, 11), (3, 43, 0, 12)]
    (rebuilt,) = got[0][2]
    assert isinstance(rebuilt, RowBlock)
    assert [(r.new, r.commit_ts, r.position) for r in rebuilt.rows()] == [
        (r.new, r.commit_ts, r.position) for r in block.rows()
    ]
