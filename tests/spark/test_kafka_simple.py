"""The Simple protocol through the ``kafka`` input on the tansu broker: ranges that start mid-partition.

Simple DMLs name only (table, schemaVersion); the schema travels in BOOTSTRAP and DDL messages. A
range read begins with an empty schema cache, so it looks back in its partition for them.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.errors import UnknownSchemaError
from changefeed.model import RowChange
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import KafkaInput, SourceOptions, register
from changefeed.spark.datasource import kafka as kafka_input
from changefeed.spark.datasource.kafka import KafkaRange
from changefeed.testing import Broker

from .helpers import apply, capture, captured, changelog_tuples, read_snapshot, reference_snapshot

SIMPLE = CodecOptions(protocol="simple")


def _source(broker: Broker, topic: str, **extra: str) -> dict[str, str]:
    return {"input": "kafka", "bootstrap.servers": broker.bootstrap_servers, "topic": topic, **extra}


def _range_rows(broker: Broker, topic: str, start: int, end: int, codec: CodecOptions = SIMPLE) -> list[tuple]:
    """Partition 0's [start, end) decoded in this process, as an executor would."""
    return changelog_tuples(KafkaRange(broker.bootstrap_servers, topic, 0, start, end, codec, ChangelogRows()).rows())


def _offset(row: tuple) -> int:
    return int(orjson.loads(row[-1])["offset"])


def _end(broker: Broker, topic: str) -> int:
    kafka = KafkaInput(SourceOptions.parse(_source(broker, topic, protocol="simple")))
    try:
        return kafka.watermarks()[0][1]
    finally:
        kafka.close()


def test_simple_capture_in_two_runs_then_apply_in_small_batches_equals_the_source(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    topic = f"cf-simple-{uuid.uuid4().hex[:8]}"
    sink = KafkaSinkConfig(broker.bootstrap_servers, topic, SIMPLE, partition_num=2)

    def stop_after_first(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "flushed"):
            raise RuntimeError("end of the first capture run")

    # Two capture runs: the second one's sink starts afresh (a second BOOTSTRAP per table mid-partition).
    with pytest.raises(StreamingQueryException, match="end of the first capture run"):
        capture(
            spark, KafkaSink(sink), tmp_path / "ck-capture", max_events=8, available_now=True, hook=stop_after_first
        )
    capture(spark, KafkaSink(sink), tmp_path / "ck-capture", max_events=8, available_now=True)

    # Micro-batches of ~10 messages per partition: most ranges start after their tables' BOOTSTRAP/DDL.
    out = tmp_path / "parquet"
    source = _source(broker, topic, protocol="simple", maxEventsPerTrigger="20")
    applied = apply(spark, source, ParquetSnapshotSink(out), tmp_path / "ck-apply", available_now=True)
    assert applied.batches > 3
    # Simple carries full column types (DECIMAL precision included): every table matches, cf.nums too.
    assert read_snapshot(out) == reference_snapshot(tmp_path / "reference")
    assert applied.checkpoint_ts == captured()[-1].commit_ts


@pytest.mark.parametrize(("encoding", "chunk"), [("json", 2000), ("avro", 2000), ("json", 3)])
def test_range_starting_mid_partition_looks_back_for_its_schema(
    broker: Broker, encoding: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_input, "_LOOKBACK_CHUNK", chunk)  # 3: a look-back over many chunks
    topic = f"cf-simple-{uuid.uuid4().hex[:8]}"
    codec = replace(SIMPLE, encoding_format=encoding)
    sink = KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, codec, partition_num=1))
    try:
        sink.write(captured())
        sink.flush()
    finally:
        sink.close()
    end = _end(broker, topic)
    whole = _range_rows(broker, topic, 0, end, codec)
    starts = sorted({_offset(r) for r in whole if r[0] == "row"})
    assert len(starts) > 20
    # A range starting at any DML (the schema in a BOOTSTRAP, a CREATE, an ALTER or a RENAME before
    # it) decodes exactly what the whole partition's read decodes from there on.
    for start in starts:
        assert _range_rows(broker, topic, start, end, codec) == [r for r in whole if _offset(r) >= start], start


def test_dml_without_any_schema_message_is_a_clear_error(spark: SparkSession, broker: Broker) -> None:
    topic = f"cf-simple-{uuid.uuid4().hex[:8]}"
    no_bootstrap = replace(SIMPLE, send_bootstrap_interval_in_sec=0, send_bootstrap_in_msg_count=0)
    sink = KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, no_bootstrap, partition_num=1))
    rows = [e for e in captured() if isinstance(e, RowChange)]
    try:
        sink.write(rows)  # no DDL and BOOTSTRAP disabled: nothing in the topic carries a schema
        sink.flush()
    finally:
        sink.close()
    first = rows[0].table_schema
    with pytest.raises(UnknownSchemaError) as caught:
        _range_rows(broker, topic, 2, _end(broker, topic))
    text = str(caught.value)
    assert f"no schema for {first.schema}.{first.table} schemaVersion {first.version}" in text
    assert f"partition 0 of topic {topic!r}" in text
    assert "send-bootstrap-interval-in-sec" in text
    assert caught.value.where == f"{topic}[0]@2"

    # Through Spark the same error stops the read: no row is silently dropped.
    register(spark)
    with pytest.raises(Exception, match="send-bootstrap-to-all-partition=true"):
        spark.read.format("changefeed").options(**_source(broker, topic, protocol="simple")).load().collect()
