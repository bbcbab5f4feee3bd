"""The binlog input reading a live MariaDB through the replica protocol (option ``url``)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from pyspark.sql import DataFrame, SparkSession

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture
from changefeed.cli.run import resume_position
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import BinlogInput, SourceOptions, register
from changefeed.testing import MariaDBServer
from tests.capture.workload import run_workload

from .helpers import changelog_tuples

if TYPE_CHECKING:
    from tests.conftest import ReplicaUser


@pytest.fixture(scope="module")
def cf(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def _position(server: MariaDBServer) -> BinlogPosition:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return BinlogPosition(str(file), int(pos))


def _write(server: MariaDBServer, schema: str, *statements: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql.replace("DB.", f"`{schema}`."))


def _expected(server: MariaDBServer, start: BinlogPosition, schema: str) -> list[tuple[Any, ...]]:
    """(op, schema, table, commit_ts, key, after, before) of every row file mode reads from ``start``."""
    only = BlockAllowList.build(do_dbs=[schema])
    events = file_capture(server.binlog_dir, start, table_filter=only).events()
    return [r[1:8] for r in ChangelogRows().rows(events) if r[0] == "row"]


def _planned_read(source: BinlogInput, start: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """One micro-batch as Spark plans and reads it (driver scan, then each partition's own connection)."""
    end = source.latest_offset(start, None, None)
    return end, [row for p in source.partitions(start, end, ChangelogRows()) for row in changelog_tuples(p.rows())]


def test_live_offsets_start_at_latest_or_after_a_gtid(mariadb: MariaDBServer) -> None:
    """No JVM: the input's offsets and ranges driven directly, as the streaming reader does."""
    schema = f"live_{uuid.uuid4().hex[:8]}"
    _write(mariadb, schema, f"CREATE DATABASE `{schema}`", "CREATE TABLE DB.t (id INT PRIMARY KEY)")
    _write(mariadb, schema, "INSERT INTO DB.t VALUES (1)")  # before `latest`: never read
    try:
        options = {"input": "binlog", "url": mariadb.url, "filter": f"{schema}.*", "eventsperpartition": "1"}
        latest = BinlogInput(SourceOptions.parse({**options, "startposition": "latest"}))
        first = latest.initial_offset()
        assert (first["file"], first["pos"]) == (_position(mariadb).file, _position(mariadb).pos)
        assert latest.latest_offset(first, None, None) == first  # nothing new yet
        _write(mariadb, schema, *(f"INSERT INTO DB.t VALUES ({i})" for i in (2, 3, 4)))
        end, rows = _planned_read(latest, first)
        assert len(end["splits"]) == 2  # one partition per transaction here
        assert [r[5] for r in rows if r[0] == "row"] == ['{"id":2}', '{"id":3}', '{"id":4}']
        target = latest.available_now_target()  # SHOW MASTER STATUS: the last transaction's end
        assert (end["file"], end["pos"]) == (target["file"], target["pos"])

        after_two = next(r for r in rows if r[0] == "resolved")  # the first partition's end
        gtid = orjson.loads(after_two[9])["gtid"]
        assert gtid.startswith("0-1-")
        by_gtid = BinlogInput(SourceOptions.parse({**options, "startposition": f"gtid:{gtid}"}))
        start = by_gtid.initial_offset()
        assert (start["file"], start["gtid"]) == ("", gtid)
        _, resumed = _planned_read(by_gtid, start)
        assert [r[5] for r in resumed if r[0] == "row"] == ['{"id":3}', '{"id":4}']
    finally:
        _write(mariadb, schema, f"DROP DATABASE IF EXISTS `{schema}`")


def test_live_batch_read_equals_file_mode(cf: SparkSession, mariadb: MariaDBServer) -> None:
    schema = f"live_{uuid.uuid4().hex[:8]}"
    start = _position(mariadb)
    _write(mariadb, schema, f"CREATE DATABASE `{schema}`")
    try:
        with mariadb.connect() as conn:
            run_workload(conn, schema)  # every type family, DDL mid-stream, a binlog rotation

        def read(**location: str) -> DataFrame:
            reader = cf.read.format("changefeed").option("input", "binlog").option("startPosition", str(start))
            reader = reader.option("filter", f"{schema}.*").option("eventsPerPartition", "5")
            for key, value in location.items():
                reader = reader.option(key, value)
            return reader.load()

        live = read(url=mariadb.url)
        assert live.rdd.getNumPartitions() > 1
        live_rows = live.collect()
        file_rows = read(path=str(mariadb.binlog_dir)).collect()
        assert [tuple(r) for r in live_rows] == [tuple(r) for r in file_rows]
        changes = [tuple(r)[1:8] for r in live_rows if r.kind == "row"]
        assert changes == _expected(mariadb, start, schema) and len(changes) > 20
        assert {r.ddl.split()[0].upper() for r in live_rows if r.kind == "ddl"} >= {"CREATE", "ALTER", "RENAME"}
    finally:
        _write(mariadb, schema, f"DROP DATABASE IF EXISTS `{schema}`")


def test_streaming_from_a_live_server_resumes_exactly_once(
    cf: SparkSession,
    mariadb: MariaDBServer,
    replica_user: ReplicaUser,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Writes land between micro-batches and while the query is down; the resumed query loses and repeats nothing."""
    schema = f"live_{uuid.uuid4().hex[:8]}"
    start = _position(mariadb)
    _write(mariadb, schema, f"CREATE DATABASE `{schema}`", "CREATE TABLE DB.t (id INT PRIMARY KEY, v VARCHAR(20))")
    _write(mariadb, schema, *(f"INSERT INTO DB.t VALUES ({i}, 'first')" for i in range(6)))
    checkpoint = tmp_path / "checkpoint"
    batches: dict[int, list[tuple[Any, ...]]] = {}
    lock = threading.Lock()

    def collect(df: DataFrame, batch_id: int) -> None:
        rows = [tuple(r) for r in df.collect()]
        with lock:
            batches[batch_id] = rows  # a replayed batch id replaces its rows: idempotent by batch id
        if batch_id == 1:  # the query is running: these land between micro-batches
            _write(mariadb, schema, "UPDATE DB.t SET v = 'between' WHERE id < 3", "DELETE FROM DB.t WHERE id = 5")

    def stream() -> Any:
        reader = cf.readStream.format("changefeed").option("input", "binlog").option("url", replica_user.url)
        reader = reader.option("password", replica_user.password).option("startPosition", str(start))
        reader = reader.option("filter", f"{schema}.*").option("maxEventsPerTrigger", "2")
        writer = reader.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
        return writer

    try:
        query = stream().trigger(processingTime="200 milliseconds").start()
        try:
            query.processAllAvailable()  # until the writes made by batch 1 are read too
        finally:
            query.stop()
        first_run = len(batches)
        assert first_run >= 4  # at most two ROWS events per micro-batch
        _write(mariadb, schema, "INSERT INTO DB.t VALUES (10, 'while down')", "UPDATE DB.t SET v = 'x' WHERE id = 10")
        resumed = resume_position(checkpoint)
        assert resumed is not None and set(resumed) >= {"file", "pos"}
        stream().trigger(availableNow=True).start().awaitTermination()
        assert min(b for b in batches if b >= first_run) == first_run  # resumed after the last committed batch
        got = [r[1:8] for b in sorted(batches) for r in batches[b] if r[0] == "row"]
        expected = _expected(mariadb, start, schema)
        assert got == expected  # nothing lost, nothing twice, in binlog order
        assert [r[0] for r in got[-2:]] == ["insert", "update"] and len(got) == 6 + 3 + 1 + 2
        files = [p for p in checkpoint.rglob("*") if p.is_file()]
        assert files and not any(replica_user.password.encode() in p.read_bytes() for p in files)
        assert replica_user.password not in caplog.text
    finally:
        _write(mariadb, schema, f"DROP DATABASE IF EXISTS `{schema}`")
