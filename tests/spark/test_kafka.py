"""Kafka end to end on the tansu broker: binlog fixtures -> capture job -> topic -> apply job -> Parquet / MariaDB."""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.cli import main
from changefeed.codec import CodecOptions
from changefeed.consume.storage import StorageReader
from changefeed.errors import ConfigError
from changefeed.model import RowChange
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.datasource import KafkaInput, SourceOptions, register
from changefeed.spark.jobs import DECODE_CONF, decode_in_tasks
from changefeed.testing import Broker, MariaDBServer

from .conftest import SCHEMA, direct_dump, drop, dump
from .helpers import BINLOG, apply, capture, captured, read_snapshot, reference_snapshot

CODEC = CodecOptions(protocol="open-protocol")


def _source(broker: Broker, topic: str) -> dict[str, str]:
    return {
        "input": "kafka",
        "bootstrap.servers": broker.bootstrap_servers,
        "topic": topic,
        "protocol": "open-protocol",
    }


def test_capture_to_kafka_then_apply_equals_direct_application(
    spark: SparkSession, broker: Broker, downstream: tuple[MariaDBServer, str], tmp_path: Path
) -> None:
    topic = f"cf-{uuid.uuid4().hex[:8]}"
    sink = KafkaSinkConfig(broker.bootstrap_servers, topic, CODEC, partition_num=3)
    failed: list[int] = []

    def fail_once(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "flushed") and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure after the batch was acknowledged")

    # The failed capture batch was acknowledged, so its messages are sent twice: the merge drops the copies.
    with pytest.raises(StreamingQueryException, match="injected failure"):
        capture(spark, KafkaSink(sink), tmp_path / "ck-capture", max_events=8, available_now=True, hook=fail_once)
    stats = capture(spark, KafkaSink(sink), tmp_path / "ck-capture", max_events=8, available_now=True)
    assert stats.batch_ids[0] == 1

    # The batch read: every partition's messages, unmerged (copies included), resolved rows per partition.
    register(spark)
    raw = spark.read.format("changefeed").options(**_source(broker, topic)).load()
    kinds = {r["kind"]: r["count"] for r in raw.groupBy("kind").count().collect()}
    assert kinds["row"] > sum(isinstance(e, RowChange) for e in captured())  # the resent batch
    assert kinds["resolved"] >= 3

    # The fixture's one key-changing UPDATE travels as DELETE + INSERT (TiCDC's default): one row more.
    rows = sum(isinstance(e, RowChange) for e in captured()) + 1
    # Open Protocol (like canal-json) carries no DECIMAL precision, so the Parquet snapshot of cf.nums
    # cannot be typed as the direct one is: that table goes to MariaDB only (its DDL types the columns).
    out, source = tmp_path / "parquet", {**_source(broker, topic), "filter": "*.*,!cf.nums"}
    applied = apply(spark, source, ParquetSnapshotSink(out), tmp_path / "ck-apply", available_now=True)
    expected = reference_snapshot(tmp_path / "reference")
    del expected["cf.nums"]
    assert read_snapshot(out) == expected
    assert applied.rows == rows - sum(isinstance(e, RowChange) and e.table == "nums" for e in captured())
    assert applied.checkpoint_ts == captured()[-1].commit_ts
    again = apply(spark, source, ParquetSnapshotSink(out), tmp_path / "ck-apply", available_now=True)
    assert again.batches == 0

    # The topic merged into a storage directory (any source into any sink): each row once, in commit order.
    copy = tmp_path / "storage"
    canal = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    ck = tmp_path / "ck-storage"
    stored = apply(spark, _source(broker, topic), StorageWriter(copy, canal), ck, available_now=True)
    assert stored.checkpoint_ts == captured()[-1].commit_ts
    read_back = [e for e in StorageReader(copy, canal).poll() if isinstance(e, RowChange)]
    assert len(read_back) == rows
    assert [e.commit_ts for e in read_back] == sorted(e.commit_ts for e in read_back)

    # `changefeed run` with a kafka:// sink-uri into a second topic, applied to MariaDB.
    cli_topic = f"{topic}-cli"
    uri = f"kafka://{broker.bootstrap_servers}/{cli_topic}?protocol=open-protocol&partition-num=2"
    config_file = tmp_path / "changefeed.toml"
    config_file.write_text(f'changefeed-id = "kafka-cli"\nsink-uri = "{uri}"\n[source]\npath = "{BINLOG}"\n')
    argv = ["run", str(config_file), "--checkpoint", str(tmp_path / "ck-cli"), "--available-now", "--max-events", "8"]
    assert main(argv) == 0

    server, ck_schema = downstream
    direct = direct_dump(server, ck_schema)
    config = MySQLSinkConfig(changefeed_id="kafka", checkpoint_schema=ck_schema)
    # Small micro-batches (3 messages per partition): rows wait in the saved merge state for the
    # other partition's watermarks, across batches.
    source = {**_source(broker, cli_topic), "maxEventsPerTrigger": "6"}
    applied = apply(spark, source, MySQLSink(server.url, config), tmp_path / "ck-mysql", available_now=True)
    assert applied.batches > 3
    assert applied.rows == rows
    assert dump(server) == direct

    # The same with the messages decoded in the range tasks (the default with cores to spare).
    assert not decode_in_tasks(spark)  # local[2]: the driver decodes
    drop(server, SCHEMA)
    spark.conf.set(DECODE_CONF, "tasks")
    try:
        assert decode_in_tasks(spark)
        config = MySQLSinkConfig(changefeed_id="kafka-tasks", checkpoint_schema=ck_schema)
        applied = apply(spark, source, MySQLSink(server.url, config), tmp_path / "ck-tasks", available_now=True)
        spark.conf.set(DECODE_CONF, "sometimes")
        with pytest.raises(ConfigError, match="auto, tasks or driver"):
            decode_in_tasks(spark)
    finally:
        spark.conf.unset(DECODE_CONF)
    assert applied.batches > 3
    assert applied.rows == rows
    assert dump(server) == direct


def test_a_batch_failing_after_its_foreachbatch_returned_is_read_again(
    spark: SparkSession,
    broker: Broker,
    downstream: tuple[MariaDBServer, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over ranges the driver reads, the apply job hands batch N to the MySQL sink and returns before
    it is durable; its merge state is saved while N+1 runs. Here a batch's statements fail only once
    the next batch was written: Spark has committed the failed batch's offsets, its state was never
    saved, and the restart reads its messages again from where the newest saved state ends."""
    server, ck_schema = downstream
    direct = direct_dump(server, ck_schema)
    topic = f"cf-late-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, CODEC, partition_num=2))
    capture(spark, sink, tmp_path / "ck", available_now=True)
    kafka = KafkaInput(SourceOptions.parse(_source(broker, topic)))
    messages = sum(high for _, high in kafka.watermarks().values())
    kafka.close()
    source = {**_source(broker, topic), "maxEventsPerTrigger": str(max(2, messages // 4))}

    current = {"batch": -1}
    written: dict[int, threading.Event] = {}
    crashed: list[int] = []

    def note(batch_id: int, stage: str) -> None:
        if stage == "written":
            current["batch"] = batch_id
            written.setdefault(batch_id, threading.Event()).set()

    def fail_late(point: str, info: object) -> None:
        # The first transaction committing once batch 1 or a later one was written holds until the
        # next batch was written (so the batch's foreachBatch has returned), then fails. A DDL's
        # flush in that next batch waits for it: then it fails sooner, in that batch.
        batch = current["batch"]
        if point == "commit" and batch >= 1 and not crashed:
            crashed.append(batch)
            written.setdefault(batch + 1, threading.Event()).wait(20)
            raise RuntimeError("injected: a batch failed after its foreachBatch returned")

    config = MySQLSinkConfig(changefeed_id="late", checkpoint_schema=ck_schema, fault_hook=fail_late)
    ck = tmp_path / "ck-mysql"
    with pytest.raises(StreamingQueryException, match="injected"):
        apply(spark, source, MySQLSink(server.url, config), ck, available_now=True, hook=note)
    config = MySQLSinkConfig(changefeed_id="late", checkpoint_schema=ck_schema)
    with caplog.at_level(logging.INFO, logger="changefeed.spark.merge"):
        stats = apply(spark, source, MySQLSink(server.url, config), ck, available_now=True)
    first = stats.batch_ids[0]
    assert crashed == [first - 1]  # Spark had committed the batch that failed
    assert f"kafka merge: batch {first} reads partition" in caplog.text  # from the saved state's ends
    assert dump(server) == direct
