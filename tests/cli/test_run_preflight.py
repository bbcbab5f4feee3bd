"""``changefeed run`` checks its source and sinks before Spark starts (no JVM in these tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from changefeed.cli import main
from changefeed.cli.run import resume_position
from changefeed.errors import ConfigError
from changefeed.spark.datasource import BinlogInput, SourceOptions
from changefeed.testing import MariaDBServer, free_port


def _config(tmp_path: Path, url: str, sink_uri: str, **source: str) -> Path:
    extra = "".join(f'{key} = "{value}"\n' for key, value in source.items())
    path = tmp_path / "cf.toml"
    path.write_text(f'changefeed-id = "pre"\nsink-uri = "{sink_uri}"\n[source]\ntype = "mysql"\nurl = "{url}"\n{extra}')
    return path


def test_run_refuses_a_statement_binlog(
    mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = mariadb_factory(extra_config={"binlog_format": "STATEMENT"})
    config = _config(tmp_path, server.url, f"file://{tmp_path}/out")
    assert main(["run", str(config), "--available-now"]) == 1
    err = capsys.readouterr().err
    assert "preflight error" in err and "binlog-format" in err and "binlog_format=STATEMENT" in err
    assert "SET GLOBAL binlog_format=ROW" in err  # the same fix `changefeed check` prints
    assert not (tmp_path / "out").exists()  # refused before anything started
    # --skip-preflight does not get past the data source: it cannot decode such a binlog either.
    with pytest.raises(ConfigError, match="binlog_format=STATEMENT"):
        BinlogInput(SourceOptions.parse({"input": "binlog", "url": server.url}))


def test_run_refuses_unreachable_sinks(
    mariadb: MariaDBServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port("127.0.0.1")
    kafka = _config(tmp_path, mariadb.url, f"kafka://127.0.0.1:{port}/t?protocol=canal-json&partition-num=3")
    assert main(["run", str(kafka), "--checkpoint", str(tmp_path / "ck")]) == 1
    err = capsys.readouterr().err
    assert "broker-unreachable" in err and "advertised.listeners" in err and "binlog" not in err
    mysql = _config(tmp_path, mariadb.url, f"mysql://app:Sink-Pw@127.0.0.1:{port}/?worker-count=2")
    assert main(["run", str(mysql), "--checkpoint", str(tmp_path / "ck")]) == 1
    err = capsys.readouterr().err
    assert "sink-unreachable" in err and str(port) in err and "Sink-Pw" not in err


def test_run_checks_the_position_it_resumes_from(
    mariadb: MariaDBServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port("127.0.0.1")
    sink = f"mysql://root@127.0.0.1:{port}/"  # unreachable too: every error is listed, not just the first
    config = _config(tmp_path, mariadb.url, sink, **{"start-position": "binlog.999999:4"})
    assert main(["run", str(config), "--checkpoint", str(tmp_path / "ck")]) == 1
    err = capsys.readouterr().err
    assert "2 preflight error(s)" in err and "binlog.999999 does not exist" in err and "sink-unreachable" in err

    # A checkpoint's last committed offset wins over the configured start (Spark resumes from it).
    checkpoint = tmp_path / "ck"
    offset = {"file": "binlog.000000", "pos": 4, "gtid": "", "clock": 0, "splits": []}
    for batch, pos in ((0, 4), (1, 99)):
        (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
        (checkpoint / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{orjson.dumps({**offset, "pos": pos}).decode()}'
        )
    (checkpoint / "commits").mkdir()
    (checkpoint / "commits" / "0").write_text("v1\n{}")  # batch 1 was planned but never committed
    assert resume_position(checkpoint) == offset
    assert main(["run", str(config), "--checkpoint", str(checkpoint)]) == 1
    err = capsys.readouterr().err
    assert "binlog.000000 was purged" in err and "binlog.999999" not in err
    assert resume_position(tmp_path / "none") is None


def test_password_comes_from_the_environment(
    mariadb: MariaDBServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, mariadb.url, f"file://{tmp_path}/out", **{"password-env": "CF_TEST_SOURCE_PW"})
    monkeypatch.delenv("CF_TEST_SOURCE_PW", raising=False)
    assert main(["run", str(config)]) == 1
    assert "CF_TEST_SOURCE_PW" in capsys.readouterr().err
    monkeypatch.setenv("CF_TEST_SOURCE_PW", "Wrong-Pw-1")  # root has no password: the server refuses it
    assert main(["run", str(config)]) == 1
    err = capsys.readouterr().err
    assert "source-auth" in err and "Wrong-Pw-1" not in err


def test_check_command_checks_a_mysql_sink(mariadb: MariaDBServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--to", f"{mariadb.url}/?worker-count=4&safe-mode=true"]) == 0
    port = free_port("127.0.0.1")
    assert main(["check", "--from", mariadb.url, "--to", f"tidb://u:Tidb-Pw@127.0.0.1:{port}/"]) == 1
    out = capsys.readouterr().out
    assert "ERROR sink-unreachable" in out and out.count("ERROR") == 1 and "Tidb-Pw" not in out
