"""The capture job's executor-side encoding (mapInArrow) writes exactly the bytes the driver-side path wrote.

The reference is the old path run on the same micro-batches: `_BatchRunner` collecting the events on
the driver and handing them to the sink's event-taking ``write`` (which encodes there).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.consume import KafkaSource, KafkaSourceConfig
from changefeed.dispatch import DispatchRule
from changefeed.model import DDLEvent, RowChange
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.storage.writer import StorageOptions, StorageWriter
from changefeed.spark.jobs import _BatchRunner, _run_query, changelog_plan, source_options
from changefeed.testing import Broker
from tests.sink.kafka.workload import read_raw, row_key

from .helpers import BINLOG, capture, captured

# ``clock=int``: canal-json's "ts" and Simple's buildTs are 0 on both paths (and a builtin pickles to executors).
CANAL = CodecOptions(protocol="canal-json", enable_tidb_extension=True, clock=int)
# Small files: rolling happens inside a flush, so its split points are compared too.
LAYOUT = StorageOptions(date_separator="none", file_size=700)
BATCHING = {"max_events": 12, "events_per_partition": 3}  # several micro-batches of several partitions


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _driver_path(spark: SparkSession, sink: Any, checkpoint: Path, source: Any = BINLOG) -> None:
    """The pre-mapInArrow capture: the changelog's JSONL events parsed and encoded on the driver, same batches."""
    options = source_options(source, **BATCHING) if source == BINLOG else dict(source)
    plan = changelog_plan(spark, {**options, "timeZone": "UTC"}, sink)  # never sees ranges
    runner = _BatchRunner("capture-reference", sink, plan, None)
    _run_query(spark, plan.stream, runner, checkpoint, None, True, f"reference-{uuid.uuid4().hex[:6]}")


def _kafka_reference(spark: SparkSession, config: KafkaSinkConfig, checkpoint: Path) -> None:
    """The driver-side path into a Kafka topic: every batch acknowledged before it ends."""
    with KafkaSink(config) as sink:
        _driver_path(spark, sink, checkpoint)


def test_storage_files_are_byte_identical_even_after_a_failed_batch(spark: SparkSession, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    writer = StorageWriter(reference, CANAL, LAYOUT)
    _driver_path(spark, writer, tmp_path / "ck-reference")

    out, checkpoint = tmp_path / "out", tmp_path / "ck-out"
    failed: list[int] = []

    def fail_before_flush(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "written") and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure between write and flush")

    with pytest.raises(StreamingQueryException, match="injected failure"):
        capture(
            spark, StorageWriter(out, CANAL, LAYOUT), checkpoint, available_now=True, hook=fail_before_flush, **BATCHING
        )
    resumed = capture(spark, StorageWriter(out, CANAL, LAYOUT), checkpoint, available_now=True, **BATCHING)
    assert failed == [1] and resumed.batch_ids[0] == 1  # the failed batch re-ran with its offsets

    got, want = _tree(out), _tree(reference)
    assert len([name for name in want if name.endswith(".json") and "/CDC" in name]) > 3  # rolled, several flushes
    assert got == want


def test_csv_with_header_is_byte_identical(spark: SparkSession, tmp_path: Path) -> None:
    codec = CodecOptions(protocol="csv", include_commit_ts=True, output_field_header=True, csv_output_old_value=True)
    reference = StorageWriter(tmp_path / "reference", codec, LAYOUT)
    reference.write(captured())  # one batch: the whole binlog
    reference.flush()
    stats = capture(
        spark,
        StorageWriter(tmp_path / "out", codec, LAYOUT),
        tmp_path / "ck",
        events_per_partition=3,
        available_now=True,
    )
    assert stats.batches == 1
    assert _tree(tmp_path / "out") == _tree(tmp_path / "reference")


def test_a_storage_directory_copied_to_another_is_byte_identical(spark: SparkSession, tmp_path: Path) -> None:
    """A storage directory read back (ranges decoded on the driver) and written again: the same files."""
    upstream = StorageWriter(tmp_path / "upstream", CANAL, LAYOUT)
    upstream.write(captured())
    upstream.flush()
    source = {"input": "storage", **CANAL.to_mapping(), "path": str(tmp_path / "upstream")}
    reference = StorageWriter(tmp_path / "reference", CANAL, LAYOUT)
    _driver_path(spark, reference, tmp_path / "ck-reference", source)
    stats = capture(
        spark, StorageWriter(tmp_path / "out", CANAL, LAYOUT), tmp_path / "ck", source=source, available_now=True
    )
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
    stats = capture(spark, KafkaSink(config(topic)), tmp_path / "ck", available_now=True, **BATCHING)
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
        capture(
            spark, KafkaSink(config(replayed_topic)), checkpoint, available_now=True, hook=fail_before_flush, **BATCHING
        )
    resumed = capture(spark, KafkaSink(config(replayed_topic)), checkpoint, available_now=True, **BATCHING)
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
    capture(spark, KafkaSink(config(topic)), tmp_path / "ck", available_now=True, **BATCHING)
    want = read_raw(broker.bootstrap_servers, reference_topic, 2)
    got = read_raw(broker.bootstrap_servers, topic, 2)
    assert sum(b'"type":"BOOTSTRAP"' in v for m in want.values() for _, _, v in m) > 2
    assert {p: [(k, v) for _, k, v in m] for p, m in got.items()} == {
        p: [(k, v) for _, k, v in m] for p, m in want.items()
    }
