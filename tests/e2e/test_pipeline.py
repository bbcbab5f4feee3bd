"""`changefeed pipeline`: capture (live MariaDB -> Kafka) and apply (Kafka -> MariaDB) in one process.

Streaming, as a subprocess: both queries run in one SparkSession, a marker row written upstream
reaches the downstream through the broker, and Ctrl-C stops both (exit 130). Then
``--available-now`` in-process resumes both from their checkpoints: capture to the end, then
apply; the downstream equals the upstream by `changefeed diff`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.errors import ConfigError
from changefeed.testing import Broker, MariaDBServer
from tests.e2e.exactly_once import Job
from tests.e2e.shards import run_sql

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.broker, pytest.mark.timeout(400)]


def _count(server: MariaDBServer, sql: str) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        try:
            cur.execute(sql)
        except Exception:  # the table is not there yet
            return 0
        return int(cur.fetchone()[0])


def test_pipeline_runs_capture_and_apply_in_one_process(
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    broker: Broker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = mariadb_factory()
    schema, topic = f"pipe_{uuid.uuid4().hex[:8]}", f"pipe-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "{schema}"\n'
        f'sink-uri = "kafka://{broker.bootstrap_servers}/{topic}?protocol=open-protocol&partition-num=2"\n'
        f'[source]\ntype = "mysql"\nurl = "{upstream.url}"\n[filter]\nrules = ["{schema}.*"]\n'
        f'[apply]\nto = "{mariadb_downstream.url}/"\ncheckpoint = "apply-ck"\n'
    )
    run_sql(
        upstream,
        [
            f"CREATE DATABASE `{schema}`",
            f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(8,2))",
            f"INSERT INTO `{schema}`.t VALUES (1, 'a', 1.50), (2, 'b', NULL)",
        ],
    )
    spark = ["--master", "local[2]", "--trigger-interval", "300ms", "--checkpoint", str(tmp_path / "run-ck")]
    job = Job("pipeline", ["pipeline", str(config), *spark], tmp_path)
    marker = f"SELECT COUNT(*) FROM `{schema}`.t WHERE id = 100"
    try:
        job.start()
        run_sql(upstream, [f"INSERT INTO `{schema}`.t VALUES (100, 'marker', 0)", f"UPDATE `{schema}`.t SET v = 'u'"])
        deadline = time.monotonic() + 150
        while _count(mariadb_downstream, marker) == 0:
            job.check_alive()
            assert time.monotonic() < deadline, job.tail()
            time.sleep(0.3)
        log = job.log.read_text(errors="replace")
        assert "capture batch=" in log and "apply batch=" in log, job.tail()  # both queries, one process
        job.interrupt()
        job.finish()
        assert (tmp_path / "apply-ck" / "commits").is_dir() and (tmp_path / "run-ck" / "commits").is_dir()

        run_sql(upstream, [f"DELETE FROM `{schema}`.t WHERE id = 1", f"INSERT INTO `{schema}`.t VALUES (3, 'c', 3.25)"])
        argv = ["pipeline", str(config), "--available-now", *spark]
        assert main(argv) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert f"pipeline {schema}: captured" in out and "applied" in out, out
        diff = ["diff", "--source", upstream.url, "--target", mariadb_downstream.url, "--tables", f"{schema}.*"]
        assert main([*diff, "--no-progress"]) == 0, capsys.readouterr().out
    finally:
        job.stop()
        run_sql(mariadb_downstream, [f"DROP DATABASE IF EXISTS `{schema}`"])


def test_pipeline_needs_an_apply_table_and_a_readable_sink(tmp_path: Path) -> None:
    config = tmp_path / "cf.toml"
    config.write_text('sink-uri = "file:///tmp/x"\n[source]\npath = "/p"\n')
    with pytest.raises(ConfigError, match=r"no \[apply\] table"):
        from changefeed.cli import pipeline  # noqa: PLC0415

        pipeline.run(
            __import__("argparse").Namespace(config=config, remote=None, metrics_port=None)  # minimal
        )
    config.write_text('sink-uri = "mysql://root@127.0.0.1:1/"\n[source]\npath = "/p"\n[apply]\nto = "parquet://x"\n')
    with pytest.raises(ConfigError, match="sink-uri must be kafka:// or file://"):
        from changefeed.config import load_config  # noqa: PLC0415

        load_config(config)
