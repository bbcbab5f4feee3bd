"""The apply job into MariaDB: binlog fixtures -> capture job -> storage -> apply job -> mariadb_downstream."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.jobs import storage_source
from changefeed.testing import MariaDBServer

from .conftest import direct_dump, dump
from .helpers import apply, capture, captured

CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)


def test_capture_then_apply_to_mysql_equals_direct_application(
    spark: SparkSession, downstream: tuple[MariaDBServer, str], tmp_path: Path
) -> None:
    server, ck_schema = downstream
    expected = direct_dump(server, ck_schema)
    assert set(expected) == {"ints2", "nums", "strs", "times"} and all(rows for _, rows in expected.values())
    storage = tmp_path / "storage"
    capture(spark, StorageWriter(storage, CODEC), tmp_path / "ck-capture", max_events=8, available_now=True)

    failed: list[int] = []

    def fail_once(batch_id: int, stage: str) -> None:
        if stage == "written" and not failed:
            failed.append(batch_id)
            raise RuntimeError(f"injected failure at batch {batch_id}")

    config = MySQLSinkConfig(changefeed_id="spark-apply", checkpoint_schema=ck_schema)
    source = storage_source(storage, CODEC)
    ck = tmp_path / "ck-apply"
    # DDL inside the batch already flushed part of it downstream when the failure hits.
    with pytest.raises(StreamingQueryException, match="injected failure"):
        apply(spark, source, MySQLSink(server.url, config), ck, available_now=True, hook=fail_once)
    stats = apply(spark, source, MySQLSink(server.url, config), ck, available_now=True)
    assert stats.batch_ids[0] == 0  # the failed batch re-ran with its offsets
    assert dump(server) == expected
    assert stats.checkpoint_ts == captured()[-1].commit_ts
    again = apply(spark, source, MySQLSink(server.url, config), ck, available_now=True)
    assert again.batches == 0
    assert dump(server) == expected


def test_cli_apply_to_mysql(spark: SparkSession, downstream: tuple[MariaDBServer, str], tmp_path: Path) -> None:
    from changefeed.cli import main  # noqa: PLC0415

    server, ck_schema = downstream
    expected = direct_dump(server, ck_schema)
    storage = tmp_path / "storage"
    capture(spark, StorageWriter(storage, CODEC), tmp_path / "ck-capture", available_now=True)
    source = f"file://{storage}?protocol=canal-json&enable-tidb-extension=true&date-separator=day"
    argv = ["apply", "--from", source, "--to", f"{server.url}/?worker-count=2&safe-mode=true"]
    argv += ["--changefeed-id", "cli", "--checkpoint", str(tmp_path / "ck"), "--available-now"]
    assert main(argv) == 0
    assert dump(server) == expected
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT commit_ts FROM changefeed.changefeed_checkpoint WHERE changefeed_id = 'cli'")
        assert cur.fetchone()[0] == captured()[-1].commit_ts
        cur.execute("DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = 'cli'")
        conn.commit()


def test_mysql_target_parameters() -> None:
    from changefeed.errors import ConfigError  # noqa: PLC0415
    from changefeed.sink.mysql import MySQLSinkConfig  # noqa: PLC0415

    uri = "mysql://u:p@h:3307/?worker-count=4&safe-mode=true&max-txn-row=100&read-timeout=5"
    target, config = MySQLSinkConfig.from_uri(uri, "x")  # parsed once: the connection and the sink's settings
    assert (target.user, target.password, target.host, target.port) == ("u", "p", "h", 3307)
    assert target.options == {"read_timeout": 5}
    assert (config.workers, config.safe_mode, config.batch_rows, config.changefeed_id) == (4, True, 100, "x")
    with pytest.raises(ConfigError, match="worker-count"):
        MySQLSinkConfig.from_uri("mysql://h/?worker-count=0", "x")
    with pytest.raises(ConfigError, match="unknown MySQL URL option"):
        MySQLSinkConfig.from_uri("mysql://h/?bogus=1", "x")
