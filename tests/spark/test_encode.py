"""The capture job's executor-side encoding (mapInArrow) writes exactly the bytes the driver-side path wrote.

The reference is the old path run on the same micro-batches: `_BatchRunner` collecting the events on
the driver and handing them to the sink's event-taking ``write`` (which encodes there).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.consume import KafkaSource, KafkaSourceConfig
from changefeed.dispatch import DispatchRule
from changefeed.model import DDLEvent, RowChange
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.storage.writer import StorageOptions, StorageWriter
from changefeed.spark.datasource import register
from changefeed.spark.jobs import (
    CaptureSource,
    _BatchRunner,
    _codec_options,
    _run_query,
    run_capture,
    run_capture_kafka,
)
from changefeed.testing import Broker
from tests.sink.kafka.workload import read_raw, row_key

from .helpers import BINLOG, captured

# ``clock=int``: canal-json's "ts" and Simple's buildTs are 0 on both paths (and a builtin pickles to executors).
CANAL = CodecOptions(protocol="canal-json", enable_tidb_extension=True, clock=int)
# Small files: rolling happens inside a flush, so its split points are compared too.
LAYOUT = StorageOptions(date_separator="none", file_size=700)
BATCHING = {"max_events": 12, "events_per_partition": 3}  # several micro-batches of several partitions


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _driver_path(
    spark: SparkSession, write: Callable, flush: Callable[[], int], checkpoint: Path, source: CaptureSource = BINLOG
) -> None:
    """The pre-mapInArrow capture: events collected and encoded on the driver, same micro-batches."""
    runner = _BatchRunner("capture-reference", write, flush, None)
    options = {"input": "binlog", "path": str(source)} if isinstance(source, Path) else dict(source)
    if source == BINLOG:
        options.update(
            maxEventsPerTrigger=str(BATCHING["max_events"]), eventsPerPartition=str(BATCHING["events_per_partition"])
        )
    register(spark)
    reader = spark.readStream.format("changefeed").option("events", "true").option("timeZone", "UTC")
    for key, value in options.items():
        reader = reader.option(key, value)
    stream = reader.load()  # the changelog with JSONL events: the reference path never sees ranges
    _run_query(spark, stream, runner, checkpoint, None, True, f"reference-{uuid.uuid4().hex[:6]}")


def _kafka_reference(spark: SparkSession, config: KafkaSinkConfig, checkpoint: Path) -> None:
    """The driver-side path into a Kafka topic: every batch acknowledged before it ends."""
    with KafkaSink(config) as sink:

        def flush() -> int:
            flushed = sink.flush()
            return flushed.commit_ts if flushed else 0

        _driver_path(spark, sink.write, flush, checkpoint)


def test_storage_files_are_byte_identical_even_after_a_failed_batch(spark: SparkSession, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    writer = StorageWriter(reference, CANAL, LAYOUT)
    _driver_path(spark, writer.write_all, writer.flush, tmp_path / "ck-reference")

    out, checkpoint = tmp_path / "out", tmp_path / "ck-out"
    failed: list[int] = []

    def fail_before_flush(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "written") and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure between write and flush")

    args = (spark, BINLOG, out, CANAL, checkpoint)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        run_capture(*args, storage=LAYOUT, available_now=True, hook=fail_before_flush, **BATCHING)  # type: ignore[arg-type]
    resumed = run_capture(*args, storage=LAYOUT, available_now=True, **BATCHING)  # type: ignore[arg-type]
    assert failed == [1] and resumed.batch_ids[0] == 1  # the failed batch re-ran with its offsets

    got, want = _tree(out), _tree(reference)
    assert len([name for name in want if name.endswith(".json") and "/CDC" in name]) > 3  # rolled, several flushes
    assert got == want


def test_csv_with_header_is_byte_identical(spark: SparkSession, tmp_path: Path) -> None:
    codec = CodecOptions(protocol="csv", include_commit_ts=True, output_field_header=True, csv_output_old_value=True)
    reference = StorageWriter(tmp_path / "reference", codec, LAYOUT)
    reference.write_all(captured())  # one batch: the whole binlog
    reference.flush()
    stats = run_capture(
        spark,
        BINLOG,
        tmp_path / "out",
        codec,
        tmp_path / "ck",
        storage=LAYOUT,
        events_per_partition=3,
        available_now=True,
    )
    assert stats.batches == 1
    assert _tree(tmp_path / "out") == _tree(tmp_path / "reference")


def test_a_source_without_ordered_partitions_is_range_partitioned_first(spark: SparkSession, tmp_path: Path) -> None:
    """A storage directory read back: its partitions are per data directory, not commit-ts ranges."""
    upstream = StorageWriter(tmp_path / "upstream", CANAL, LAYOUT)
    upstream.write_all(captured())
    upstream.flush()
    source = {"input": "storage", **_codec_options(CANAL), "path": str(tmp_path / "upstream")}
    reference = StorageWriter(tmp_path / "reference", CANAL, LAYOUT)
    _driver_path(spark, reference.write_all, reference.flush, tmp_path / "ck-reference", source)
    stats = run_capture(spark, source, tmp_path / "out", CANAL, tmp_path / "ck", storage=LAYOUT, available_now=True)
    assert stats.rows == sum(e.kind == "row" for e in captured())
    assert _tree(tmp_path / "out") == _tree(tmp_path / "reference")


def test_kafka_messages_per_partition_are_byte_identical(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    # Open Protocol batches rows per partition (max-batch-size), keys hash over the partitions.
    codec = CodecOptions(protocol="open-protocol", max_batch_size=3)
    rules = [DispatchRule(matcher=["*.*"], partition="index-value")]

    def config(topic: str) -> KafkaSinkConfig:
        return KafkaSinkConfig(broker.bootstrap_servers, topic, codec, rules=rules, partition_num=3)

    reference_topic, topic = f"ref-{uuid.uuid4().hex[:8]}", f"enc-{uuid.uuid4().hex[:8]}"
    _kafka_reference(spark, config(reference_topic), tmp_path / "ck-reference")
    stats = run_capture_kafka(spark, BINLOG, config(topic), tmp_path / "ck", available_now=True, **BATCHING)  # type: ignore[arg-type]
    assert stats.checkpoint_ts == captured()[-1].commit_ts

    want = read_raw(broker.bootstrap_servers, reference_topic, 3)
    got = read_raw(broker.bootstrap_servers, topic, 3)
    assert sorted(want) == [0, 1, 2]
    assert {p: [(k, v) for _, k, v in m] for p, m in got.items()} == {
        p: [(k, v) for _, k, v in m] for p, m in want.items()
    }

    # A failure after the batch's messages were produced, before its flush: the batch is replayed
    # (its messages sent again) and a consumer still gets every row once, as from the reference.
    failed: list[int] = []

    def fail_before_flush(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "written") and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure between write and flush")

    replayed_topic, checkpoint = f"rep-{uuid.uuid4().hex[:8]}", tmp_path / "ck-replayed"
    with pytest.raises(StreamingQueryException, match="injected failure"):
        run_capture_kafka(
            spark, BINLOG, config(replayed_topic), checkpoint, available_now=True, hook=fail_before_flush, **BATCHING
        )  # type: ignore[arg-type]
    resumed = run_capture_kafka(spark, BINLOG, config(replayed_topic), checkpoint, available_now=True, **BATCHING)  # type: ignore[arg-type]
    assert resumed.batch_ids[0] == 1
    last = captured()[-1].commit_ts
    consumed = {}
    for name in (reference_topic, replayed_topic):
        with KafkaSource(KafkaSourceConfig(broker.bootstrap_servers, name, codec)) as source:
            events = source.read_until(last)
        consumed[name] = (
            Counter(row_key(e) for e in events if isinstance(e, RowChange)),
            [(e.commit_ts, e.query) for e in events if isinstance(e, DDLEvent)],
        )
    assert consumed[replayed_topic] == consumed[reference_topic]
    assert sum(consumed[reference_topic][0].values()) == sum(e.kind == "row" for e in captured()) + 1  # a split UPDATE


def test_simple_bootstrap_messages_are_byte_identical(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    """Simple's BOOTSTRAP decisions travel from the executors as JSON group state (schemas once each)."""
    codec = CodecOptions(
        protocol="simple", send_bootstrap_interval_in_sec=3600, send_bootstrap_in_msg_count=4, clock=int
    )

    def config(topic: str) -> KafkaSinkConfig:
        return KafkaSinkConfig(broker.bootstrap_servers, topic, codec, partition_num=2)

    reference_topic, topic = f"ref-{uuid.uuid4().hex[:8]}", f"enc-{uuid.uuid4().hex[:8]}"
    _kafka_reference(spark, config(reference_topic), tmp_path / "ck-reference")
    run_capture_kafka(spark, BINLOG, config(topic), tmp_path / "ck", available_now=True, **BATCHING)  # type: ignore[arg-type]
    want = read_raw(broker.bootstrap_servers, reference_topic, 2)
    got = read_raw(broker.bootstrap_servers, topic, 2)
    assert sum(b'"type":"BOOTSTRAP"' in v for m in want.values() for _, _, v in m) > 2
    assert {p: [(k, v) for _, k, v in m] for p, m in got.items()} == {
        p: [(k, v) for _, k, v in m] for p, m in want.items()
    }
