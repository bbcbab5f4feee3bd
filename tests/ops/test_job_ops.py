"""A running Spark job is operable: metrics over HTTP, a status file `changefeed status` reads, context in every log.

Real jobs on the binlog fixture: one `changefeed run` in a subprocess (scraped, then killed with
SIGKILL), one capture in the test's Spark session that fails a batch and is resumed, and one
`changefeed apply` to MariaDB through a password-protected user whose password must not appear
in any log line.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from changefeed.capture.binlog import file_capture
from changefeed.cli import main
from changefeed.codec import CodecOptions
from changefeed.model import Event, Resolved, RowChange
from changefeed.ops import metrics
from changefeed.ops.jobfile import STATUS_FILE
from changefeed.ops.monitor import job_context
from changefeed.ops.status import job_status
from changefeed.sink.storage.writer import StorageWriter
from changefeed.testing import MariaDBServer, free_port

BINLOG = Path(__file__).resolve().parents[1] / "fixtures/binlog/full"
CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
SECRET = "s3cr3t-Pa55word"


def _events() -> list[Event]:
    return list(file_capture(BINLOG).events())


def _expected_tables() -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = {}
    for e in _events():
        if isinstance(e, RowChange):
            out.setdefault(f"{e.schema}.{e.table}", Counter())[str(e.op)] += 1
    return {t: dict(c) for t, c in out.items()}


def _table_counts(status: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {
        t["table"]: {k: t[k] for k in ("insert", "update", "delete") if t[k]} for t in status["tables"] if t["total"]
    }


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _wait(what: str, check: Callable[[], Any], timeout: float, proc: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if proc.poll() is not None:
            raise AssertionError(f"changefeed run exited ({proc.returncode}): {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {log.read_text()[-3000:]}")
        time.sleep(0.3)


def _rows(checkpoint: Path) -> int | None:
    status = job_status(checkpoint) if checkpoint.is_dir() else None
    return status.rows if status is not None else None


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


def test_running_job_is_scraped_then_killed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`changefeed run --metrics-port`: per-table counters and the lag gauge over HTTP; SIGKILL shows as not running."""
    out, port = tmp_path / "out", free_port("127.0.0.1")
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "ops-kill"\nsink-uri = "file://{out}?protocol=canal-json&enable-tidb-extension=true"\n'
        f'[source]\ntype = "binlog-files"\npath = "{BINLOG}"\n'
    )
    argv = [sys.executable, "-m", "changefeed", "--log-format", "json", "--log-level", "INFO", "run", str(config)]
    argv += ["--master", "local[1]", "--metrics-port", str(port), "--max-events", "8", "--trigger-interval", "300ms"]
    argv += ["--spark-conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1"]
    log = tmp_path / "run.log"
    expected = _expected_tables()
    rows = sum(sum(k.values()) for k in expected.values())
    with log.open("wb") as stderr:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        checkpoint = out / "_spark_checkpoint"
        # Every row went through: the status file and the endpoint both say so.
        _wait("all rows", lambda: _rows(checkpoint) == rows, 180, proc, log)

        def scraped() -> dict[Any, float] | None:
            text = _scrape(port)
            return _samples(text) if text else None

        samples = _wait("the metrics endpoint", scraped, 30, proc, log)
        for table, kinds in expected.items():
            for kind, n in kinds.items():
                assert samples[("changefeed_events_total", (("kind", kind), ("table", table)))] == n
        assert samples[("changefeed_checkpoint_lag_seconds", (("job", "capture"),))] > 0
        assert samples[("changefeed_batches_total", (("job", "capture"), ("outcome", "ok")))] >= 3
        info = [labels for name, labels in samples if name == "changefeed_info"]
        assert dict(info[0])["changefeed"] == "ops-kill" and dict(info[0])["sink"] == "storage"

        def committed() -> dict[str, Any] | None:
            # The status file is written at the end of foreachBatch; Spark's commit log right after it.
            assert main(["status", "--changefeed", "ops-kill", "--storage", str(out), "--json"]) == 0
            (found,) = orjson.loads(capsys.readouterr().out)["jobs"]
            return found if found["spark"]["last_batch_committed"] else None

        job = _wait("the last batch's commit", committed, 30, proc, log)
        assert job["job"]["state"] == "running" and job["job"]["running"] is True
        assert job["job"]["pid"] == proc.pid and job["spark"]["last_batch_committed"] is True
        assert _table_counts(job["job"]) == expected
        assert job["job"]["rows_last_minute"] == rows and job["job"]["rows_per_second"] > 0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # mid-run, no chance to write "stopped"
        proc.wait(30)
    status = job_status(checkpoint)
    assert status is not None and status.state == "dead" and status.running is False
    assert orjson.loads((checkpoint / STATUS_FILE).read_bytes())["state"] == "running"  # as the job left it
    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    assert "NOT running: its process is gone" in capsys.readouterr().out
    # Every progress record carries the changefeed id and the source position.
    records = [orjson.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    progress = [r for r in records if r["logger"] == "changefeed.progress" and "batch=" in r["message"]]
    assert len(progress) >= 3
    for r in progress:
        assert r["changefeed"] == "ops-kill" and r["job"] == "capture" and isinstance(r["batch"], int)
        assert r["position"]["file"].startswith("binlog.") and r["position"]["pos"] > 0
        assert "versions" not in r["position"]  # bookkeeping stays in Spark's offset log


def test_failed_batch_then_resumed(spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A failing batch: state failed with the error; the resumed run counts every row exactly once."""
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415 - only Spark tests need pyspark

    from changefeed.spark.jobs import run_job, source_options  # noqa: PLC0415

    storage, checkpoint = tmp_path / "storage", tmp_path / "ck"

    def fail(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "flushed"):
            raise RuntimeError("injected failure")

    failed_before = metrics.REGISTRY.get_sample_value(
        "changefeed_batches_total", {"job": "capture", "outcome": "failed"}
    )

    def capture(**kw: Any) -> Any:
        sink = StorageWriter(storage, CODEC)
        return run_job(spark, source_options(BINLOG, max_events=8), sink, checkpoint, job="capture", **kw)  # type: ignore[arg-type]

    with job_context(changefeed_id="ops-fail", source="binlog-files"):
        with pytest.raises(StreamingQueryException, match="injected failure"):
            capture(available_now=True, hook=fail)
        status = job_status(checkpoint)
        assert status is not None and (status.state, status.running, status.last_batch) == ("failed", False, 0)
        assert status.last_error is not None and status.last_error["batch"] == 1
        assert "injected failure" in status.last_error["text"] and status.last_error["time"]
        failed_after = metrics.REGISTRY.get_sample_value(
            "changefeed_batches_total", {"job": "capture", "outcome": "failed"}
        )
        assert failed_after == (failed_before or 0) + 1
        assert main(["status", "--checkpoint", str(checkpoint)]) == 0
        text = capsys.readouterr().out
        assert "FAILED" in text and "injected failure" in text and "NOT committed" in text

        stats = capture(available_now=True)
    status = job_status(checkpoint)
    assert status is not None and (status.state, status.changefeed_id, status.sink) == (
        "stopped",
        "ops-fail",
        "storage",
    )
    assert status.last_batch == stats.batch_ids[-1] and stats.batch_ids[0] == 1  # the failed batch re-ran
    expected = _expected_tables()
    assert _table_counts(status.to_json()) == expected  # batch 1 counted once, across both runs
    assert status.rows == sum(sum(k.values()) for k in expected.values())
    last = [e for e in _events() if isinstance(e, Resolved)][-1]
    assert status.checkpoint_ts == stats.checkpoint_ts == last.commit_ts and status.resolved_ts == last.commit_ts
    assert status.position == {k: v for k, v in last.position.items() if k != "versions"}
    assert status.checkpoint_time and status.lag_seconds
    assert main(["status", "--checkpoint", str(checkpoint), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["job"]["state"] == "stopped" and report["spark"]["last_batch_committed"] is True


@pytest.fixture
def json_stderr() -> Iterator[None]:
    """Undo what `main(["--log-format", "json", ...])` does to the root logger."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


def test_apply_logs_never_show_the_password(
    spark: object,
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    json_stderr: None,
) -> None:
    """`changefeed apply --to mysql://user:PASSWORD@...` with JSON DEBUG logs: context in records, no password."""
    storage = tmp_path / "storage"
    writer = StorageWriter(storage, CODEC)
    writer.write(_events())
    writer.flush()
    user, changefeed = f"ops_{uuid.uuid4().hex[:8]}", f"ops-apply-{uuid.uuid4().hex[:6]}"
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS cf")
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{SECRET}'")
        cur.execute(f"GRANT ALL ON *.* TO '{user}'@'%'")
    monkeypatch.chdir(tmp_path)  # the default checkpoint: ./.changefeed/apply-ID
    target = f"mysql://{user}:{SECRET}@{mariadb_downstream.host}:{mariadb_downstream.port}/"
    source = f"file://{storage}?protocol=canal-json&enable-tidb-extension=true"
    try:
        argv = ["--log-format", "json", "--log-level", "DEBUG", "apply", "--from", source, "--to", target]
        with job_context():  # the CLI sets the job context: keep it out of later tests
            assert main([*argv, "--changefeed-id", changefeed, "--available-now", "--master", "local[2]"]) == 0
        out, err = capsys.readouterr()
        assert SECRET not in out + err
        records = [orjson.loads(line) for line in err.splitlines() if line.startswith("{")]
        batches = [r for r in records if r["logger"] == "changefeed.progress" and "batch=" in r["message"]]
        assert batches and all(r["changefeed"] == changefeed and r["position"]["checkpoint"] for r in batches)
        ddl = [r for r in records if r["message"].startswith("DDL applied")]
        assert ddl and all(r["table"].split(".")[0] == "cf" and r["changefeed"] == changefeed for r in ddl)
        assert all(isinstance(r["batch"], int) and r["job"] == "apply" for r in ddl)
        assert any(r["table"] == "cf.ints" for r in ddl)
        assert any(r.get("batch") is not None and r["logger"].startswith("changefeed.sink.mysql") for r in records)

        assert main(["status", "--changefeed", changefeed, "--json"]) == 0
        (job,) = orjson.loads(capsys.readouterr().out)["jobs"]
        assert (job["job"]["state"], job["job"]["source"], job["job"]["sink"]) == ("stopped", "file", "mysql")
        assert job["job"]["directory"] == str(tmp_path / ".changefeed" / f"apply-{changefeed}")
        assert _table_counts(job["job"]) == _expected_tables()
    finally:
        with mariadb_downstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute("DROP DATABASE IF EXISTS cf")
            cur.execute("DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = %s", (changefeed,))
