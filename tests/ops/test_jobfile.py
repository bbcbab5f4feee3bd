"""The job status file: counts once per batch id across restarts, rows/s over a minute, a dead writer detected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from changefeed.cli import main
from changefeed.errors import ChangefeedError
from changefeed.ops.jobfile import STATUS_FILE, JobStatusWriter, read_job_document
from changefeed.ops.status import find_job_checkpoints, job_status

ORDERS = {"shop.orders": {"insert": 5, "update": 2}}


def test_counts_carry_over_restarts_and_replays_count_once(tmp_path: Path) -> None:
    first = JobStatusWriter(tmp_path, "cf", "capture", "binlog-files", "storage")
    first.batch(0, ORDERS, position={"file": "binlog.000001", "pos": 120}, checkpoint_ts=1 << 18, resolved_ts=1 << 18)
    first.error("batch 1: SinkError: mysql://u:hunter2@db:3306 refused", 1, {"shop.items": {"delete": 1}})
    first.stop("failed")
    doc = read_job_document(tmp_path)
    assert doc is not None and doc.state == "failed" and doc.counted_through == 1
    assert doc.last_error is not None and "hunter2" not in doc.last_error["text"] and doc.last_error["batch"] == 1

    second = JobStatusWriter(tmp_path, "cf", "capture", "binlog-files", "storage")  # the restart
    assert second.doc.state == "running" and second.doc.tables == {**ORDERS, "shop.items": {"delete": 1}}
    second.batch(1, {"shop.items": {"delete": 1}}, checkpoint_ts=2 << 18)  # the replay of batch 1: not again
    second.batch(2, ORDERS, position={"file": "binlog.000001", "pos": 900}, checkpoint_ts=3 << 18)
    second.stop("stopped")
    doc = read_job_document(tmp_path)
    assert doc is not None and doc.rows == 15 and doc.tables["shop.orders"] == {"insert": 10, "update": 4}
    assert doc.position == {"file": "binlog.000001", "pos": 900} and doc.checkpoint_ts == 3 << 18
    assert doc.last_error is not None  # kept until a newer one
    assert [p.name for p in tmp_path.iterdir()] == [STATUS_FILE]  # no temporary file left behind

    status = job_status(tmp_path)
    assert status is not None and (status.state, status.running, status.rows_per_second) == ("stopped", False, 0.0)
    assert [(t.table, t.total) for t in status.tables] == [("shop.items", 1), ("shop.orders", 14)]


def test_rows_per_second_covers_the_last_minute(tmp_path: Path) -> None:
    writer = JobStatusWriter(tmp_path, "cf", "apply")
    now = time.time()
    writer.doc.started_at = now - 600
    writer.doc.window = [[now - 90, 6000.0], [now - 30, 600.0], [now - 5, 600.0]]  # the first is too old
    writer.batch(9, {"t.x": {"insert": 1200}})
    status = job_status(tmp_path, now=now + 1)
    assert status is not None and status.running is True and status.state == "running"
    assert status.rows_last_minute == 2400 and status.rows_per_second == 40.0


_CHILD = """
import sys, time
from changefeed.ops.jobfile import JobStatusWriter
w = JobStatusWriter(sys.argv[1], "cf-child", "capture", "binlog-files", "kafka")
w.batch(0, {"shop.orders": {"insert": 3}}, position={"file": "binlog.000001", "pos": 4}, checkpoint_ts=1 << 18)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_killed_writer_is_reported_not_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / ".changefeed" / "run-cf-child"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(checkpoint)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        status = job_status(checkpoint)
        assert status is not None and (status.state, status.running, status.pid) == ("running", True, child.pid)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    status = job_status(checkpoint)
    assert status is not None and (status.state, status.running) == ("dead", False)
    monkeypatch.chdir(tmp_path)
    assert find_job_checkpoints("cf-child", tmp_path) == [checkpoint]
    (checkpoint / "offsets").mkdir()  # what Spark would have left: `status` reads both
    assert main(["status", "--changefeed", "cf-child", "--json"]) == 0
    (entry,) = orjson.loads(capsys.readouterr().out)["jobs"]
    assert entry["job"]["state"] == "dead" and entry["spark"]["last_batch_id"] is None
    assert main(["status", "--changefeed", "cf-child"]) == 0
    assert "NOT running: its process is gone" in capsys.readouterr().out
    assert main(["status", "--changefeed", "nope"]) == 1


def test_an_unreadable_previous_file_starts_afresh(tmp_path: Path) -> None:
    (tmp_path / STATUS_FILE).write_text("{not json")
    with pytest.raises(ChangefeedError, match="unreadable job status file"):
        job_status(tmp_path)
    writer = JobStatusWriter(tmp_path, "cf", "capture")  # a job does not fail on it: it counts afresh
    writer.batch(0, ORDERS)
    doc = read_job_document(tmp_path)
    assert doc is not None and doc.rows == 7


def test_shard_ddl_decisions_are_kept_once_newest_last_across_restarts(tmp_path: Path) -> None:
    def decision(shard: str, ts: int, outcome: str = "applied") -> dict[str, object]:
        ddl = "ALTER TABLE t ADD COLUMN c INT"
        return {"table": "m.t", "shard": shard, "ddl": ddl, "outcome": outcome, "commit_ts": ts, "time": ts / 10}

    first = JobStatusWriter(tmp_path, "cf", "capture", "binlog-files", "mysql")
    first.batch(0, ORDERS, shard_ddl=[decision("s.a", 1), decision("s.b", 2, "skipped: done by another shard")])
    first.error("ShardDDLConflictError: ...", 1, None, [decision("s.c", 3, "conflict: c of another type")])
    second = JobStatusWriter(tmp_path, "cf", "capture", "binlog-files", "mysql")  # the restart
    second.batch(1, {}, shard_ddl=[decision("s.b", 2, "skipped: done by another shard")])  # a replay's: kept once
    doc = read_job_document(tmp_path)
    assert doc is not None and [(d["shard"], d["outcome"][:8]) for d in doc.shard_ddl] == [
        ("s.a", "applied"),
        ("s.b", "skipped:"),
        ("s.c", "conflict"),
    ]
    second.batch(2, {}, shard_ddl=[decision("s.d", ts) for ts in range(10, 40)])
    doc = read_job_document(tmp_path)
    assert doc is not None and len(doc.shard_ddl) == 20  # the newest 20
    assert [d["commit_ts"] for d in doc.shard_ddl] == list(range(20, 40))
    second.stop("stopped")
    status = job_status(tmp_path)
    assert status is not None and status.shard_ddl[-1]["shard"] == "s.d"
    assert isinstance(status.shard_ddl[-1]["time"], str)  # ISO time for people
