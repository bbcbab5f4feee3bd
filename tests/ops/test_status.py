"""`changefeed status` on directories and tables written by the project's own writers and jobs."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from changefeed.capture.binlog import file_capture
from changefeed.cli import main
from changefeed.codec import CodecOptions
from changefeed.model import DDLEvent, Event, Resolved, RowChange
from changefeed.model.tso import compose_tso
from changefeed.ops.status import StatusError, mysql_status, spark_status, storage_status, ts_wall_time
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.storage.writer import StorageWriter
from changefeed.testing import MariaDBServer

BINLOG = Path(__file__).resolve().parents[1] / "fixtures/binlog/full"
CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)


def _events() -> list[Event]:
    return list(file_capture(BINLOG).events())


def test_storage_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = _events()
    writer = StorageWriter(tmp_path, CODEC)
    writer.write(events)
    checkpoint = writer.flush()
    now = time.time()
    status = storage_status(tmp_path, now=now)
    assert status.checkpoint_ts == checkpoint == events[-1].commit_ts
    assert status.checkpoint_time == ts_wall_time(checkpoint) and status.checkpoint_time.endswith("+00:00")
    assert status.lag_seconds == pytest.approx(now - (checkpoint >> 18) / 1000, abs=0.01)
    newest: dict[str, int] = {}
    for e in events:
        if isinstance(e, DDLEvent) and e.table:
            newest[f"{e.schema}.{e.table}"] = max(newest.get(f"{e.schema}.{e.table}", 0), e.commit_ts)
    tables = {t.table: t for t in status.tables}
    assert set(tables) == {f"{e.schema}.{e.table}" for e in events if isinstance(e, RowChange)}
    assert {name: t.newest_version for name, t in tables.items()} == {name: newest[name] for name in tables}
    assert sum(t.files for t in tables.values()) == len(list(tmp_path.rglob("CDC0*.json")))

    assert main(["status", "--storage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint ts    {checkpoint}" in out and "cf.ints" in out
    assert main(["status", "--storage", str(tmp_path), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["storage"]["checkpoint_ts"] == checkpoint
    assert {t["table"] for t in report["storage"]["tables"]} == set(tables)


def test_storage_status_of_an_empty_and_a_missing_directory(tmp_path: Path) -> None:
    status = storage_status(tmp_path)
    assert (status.checkpoint_ts, status.checkpoint_time, status.lag_seconds, status.tables) == (0, None, None, [])
    with pytest.raises(StatusError, match="no storage directory"):
        storage_status(tmp_path / "absent")
    assert main(["status", "--storage", str(tmp_path / "absent")]) == 1


def test_mysql_checkpoint_status(mariadb: MariaDBServer, capsys: pytest.CaptureFixture[str]) -> None:
    schema = f"cp_{uuid.uuid4().hex[:10]}"
    ts = compose_tso(int(time.time() * 1000) - 30_000)  # 30 s behind
    position = {"file": "binlog.000007", "pos": 4242, "gtid": "0-1-77"}
    try:
        with MySQLSink(mariadb.url, changefeed_id="orders", checkpoint_schema=schema, safe_mode_duration=0) as sink:
            sink.write([Resolved(ts, position=position)])
        with MySQLSink(mariadb.url, changefeed_id="audit", checkpoint_schema=schema, safe_mode_duration=0) as sink:
            sink.write([Resolved(ts - 5, position={"file": "binlog.000006", "pos": 4})])
        (row,) = mysql_status(mariadb.url, "orders", schema=schema)
        assert (row.changefeed_id, row.commit_ts, row.position) == ("orders", ts, position)
        assert row.checkpoint_time == ts_wall_time(ts)
        assert row.lag_seconds is not None and 29 < row.lag_seconds < 90
        assert [r.changefeed_id for r in mysql_status(mariadb.url, schema=schema)] == ["audit", "orders"]
        with pytest.raises(StatusError, match="'nope' has no checkpoint"):
            mysql_status(mariadb.url, "nope", schema=schema)
        with pytest.raises(StatusError, match="no checkpoint table"):
            mysql_status(mariadb.url, schema=f"{schema}_absent")

        argv = ["status", "--mysql", mariadb.url, "--checkpoint-schema", schema, "--changefeed", "orders"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "mysql changefeed orders" in out and "binlog.000007" in out and f"commit ts        {ts}" in out
        assert main([*argv, "--json"]) == 0
        assert orjson.loads(capsys.readouterr().out)["mysql"][0]["position"] == position
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")


def test_status_needs_a_source() -> None:
    assert main(["status"]) == 1
    assert main(["status", "--output", "."]) == 1  # --output only names where to look for --changefeed


def test_spark_checkpoint_status(spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415 - only this test needs pyspark

    from changefeed.spark.jobs import run_job, source_options  # noqa: PLC0415

    storage, checkpoint = tmp_path / "storage", tmp_path / "ck"

    def fail(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "written"):
            raise RuntimeError("injected failure")

    def capture(**kw: Any) -> Any:
        sink = StorageWriter(storage, CODEC)
        return run_job(spark, source_options(BINLOG, max_events=8), sink, checkpoint, job="capture", **kw)  # type: ignore[arg-type]

    with pytest.raises(StreamingQueryException, match="injected failure"):
        capture(available_now=True, hook=fail)
    status = spark_status(checkpoint)
    assert (status.last_batch_id, status.last_committed_batch_id, status.last_batch_committed) == (1, 0, False)
    assert status.query_id and status.batch_time
    assert len(status.offsets) == 1 and isinstance(status.offsets[0], dict)
    assert status.committed_offsets and status.committed_offsets != status.offsets
    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    assert "NOT committed" in capsys.readouterr().out

    stats = capture(available_now=True)
    status = spark_status(checkpoint)
    assert status.last_batch_id == stats.batch_ids[-1] == status.last_committed_batch_id
    assert status.last_batch_committed and status.committed_offsets == status.offsets
    assert main(["status", "--checkpoint", str(checkpoint), "--storage", str(storage), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["spark"]["last_batch_committed"] is True
    assert report["storage"]["checkpoint_ts"] == stats.checkpoint_ts
    with pytest.raises(StatusError, match="not a Spark streaming checkpoint"):
        spark_status(storage)
