"""Progress bars: nothing on a pipe, updates on stderr when forced on, never anything on stdout."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import orjson
import pytest

from changefeed.cli import main
from changefeed.ops.progress import ENV, Progress, progress_enabled
from changefeed.testing import MariaDBServer
from tests.mounter.test_records import CATALOG as MOUNT_CATALOG
from tests.mounter.test_records import _records as mount_records

BINLOG = Path(__file__).resolve().parents[1] / "fixtures/binlog/full"
CAPTURE = [sys.executable, "-m", "changefeed", "capture", "--from", f"file://{BINLOG}"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_enabled_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert not progress_enabled(io.StringIO())
    assert progress_enabled(_Tty())
    assert not progress_enabled(_Tty(), disabled=True)  # --no-progress wins over a terminal
    monkeypatch.setenv(ENV, "1")
    assert progress_enabled(io.StringIO()) and not progress_enabled(io.StringIO(), disabled=True)
    monkeypatch.setenv(ENV, "0")
    assert not progress_enabled(_Tty())


def test_bar_draws_updates_when_on_and_nothing_when_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    quiet = io.StringIO()
    with Progress("work", total=10, stream=quiet) as bar:
        bar.update(4)
        bar.advance_to(10)
        bar.note("table t")
    assert quiet.getvalue() == "" and bar.value == 10
    shown = _Tty()
    with Progress("work", total=10, unit="rows", stream=shown) as bar:
        bar.update(4)
        bar.advance_to(3)  # never backwards
        bar.advance_to(10)
    text = shown.getvalue()
    assert "work" in text and "10/10" in text and "rows" in text


def test_capture_cli_keeps_stderr_clean_on_a_pipe_and_stdout_clean_on_a_tty() -> None:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    piped = subprocess.run(CAPTURE, capture_output=True, env=env, timeout=60, check=True)
    assert piped.stderr == b"" and piped.stdout.count(b"\n") > 20
    # stderr a real terminal (a pty, 100 columns): the bar appears there; stdout (a pipe) is the same JSONL.
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other side closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        shown = subprocess.run(CAPTURE, stdout=subprocess.PIPE, stderr=secondary, env=env, timeout=60, check=True)
    finally:
        os.close(secondary)
        reader.join(10)
        os.close(primary)
    drawn = b"".join(chunks)
    assert shown.stdout == piped.stdout
    assert b"capture" in drawn and b"100%" in drawn
    quiet = subprocess.run(
        [*CAPTURE, "--no-progress"], capture_output=True, env={**env, ENV: "1"}, timeout=60, check=True
    )
    assert quiet.stderr == b""
    forced = subprocess.run(CAPTURE, capture_output=True, env={**env, ENV: "1"}, timeout=60, check=True)
    assert b"100%" in forced.stderr and forced.stdout == piped.stdout


def test_mount_and_diff_draw_on_stderr_only(
    mariadb: MariaDBServer,
    fresh_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    records = tmp_path / "records.jsonl"
    records.write_bytes(b"\n".join(orjson.dumps(r) for r in mount_records()))
    monkeypatch.setenv(ENV, "1")
    assert main(["mount", "--catalog", str(MOUNT_CATALOG), str(records)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4 and "mount" in err and "4records" in err.replace(" ", "")
    with mariadb.connect() as conn, conn.cursor() as cur:
        for table in ("a", "b"):
            cur.execute(f"CREATE TABLE `{fresh_db}`.{table} (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO `{fresh_db}`.{table} SELECT seq FROM `{fresh_db}`.seq_1_to_200")
    argv = ["diff", "--source", mariadb.url, "--target", mariadb.url, "--tables", f"{fresh_db}.*", "--chunk-size", "50"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "2 tables compared, 0 different" in out and "%|" not in out
    assert "diff" in err and "2/2" in err
    assert main([*argv, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
