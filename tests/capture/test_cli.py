"""``changefeed capture`` end to end: JSONL on stdout, resume from a printed position, no passwords."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from changefeed.cli import main
from changefeed.model.events import RowChange
from changefeed.model.jsonl import EventReader
from changefeed.testing import MariaDBServer

from .workload import compare

FULL = Path(__file__).resolve().parent.parent / "fixtures" / "binlog" / "full"


def run_cli(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> list:
    assert main(["capture", *args]) == 0
    out = capsysbinary.readouterr().out
    return list(EventReader().read(out.splitlines()))


def test_file_capture_to_jsonl_and_resume(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    events = run_cli(capsysbinary, "--from", f"file://{FULL}", "--do-db", "cf")
    compare(events)
    middle = events[len(events) // 2]
    resumed = run_cli(capsysbinary, "--from", f"file://{FULL}", "--resume", orjson.dumps(middle.position).decode())
    assert [e.position for e in resumed] == [e.position for e in events[len(events) // 2 + 1 :]]
    only = run_cli(capsysbinary, "--from", f"file://{FULL}", "--do-table", "cf.times", "--time-zone", "Asia/Tokyo")
    rows = [e for e in only if isinstance(e, RowChange)]
    assert {e.table for e in rows} == {"times"} and rows[1].as_dict()["ts0"] == "1970-01-01 09:00:01"


def test_schema_tracker_flag_is_accepted(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    events = run_cli(capsysbinary, "--from", f"file://{FULL}", "--do-db", "cf", "--no-schema-tracker")
    compare(events)  # file mode has no tracker: the flag changes nothing there


def test_bad_arguments_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "--from", "ftp://x"]) == 1
    assert "--from must be" in capsys.readouterr().err
    assert main(["capture", "--from", f"file://{FULL}", "--time-zone", "Mars/Olympus"]) == 1
    assert "unknown time zone" in capsys.readouterr().err


@pytest.mark.mariadb
def test_live_cli_until_and_no_password_in_errors(mariadb: MariaDBServer, fresh_db: str) -> None:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO `{fresh_db}`.t VALUES (1), (2)")
        cur.execute("SHOW MASTER STATUS")
        end_file, end_pos = cur.fetchone()[:2]
    cmd = [sys.executable, "-m", "changefeed", "capture", "--from", mariadb.url, "--start", f"{file}:{pos}"]
    cmd += ["--until", f"{end_file}:{end_pos}", "--do-db", fresh_db, "--server-id", "4343"]
    done = subprocess.run(cmd, capture_output=True, timeout=60, check=True)
    events = list(EventReader().read(done.stdout.splitlines()))
    assert [e.new for e in events if isinstance(e, RowChange)] == [(1,), (2,)]
    secret = "s3cr3t-Pa55"
    url = mariadb.url.replace("root@", f"root:{secret}@")
    bad = subprocess.run([*cmd[:5], url], capture_output=True, timeout=60, check=False)
    assert bad.returncode == 1 and b"Access denied" in bad.stderr
    assert secret.encode() not in bad.stderr + bad.stdout
