"""`changefeed run` from a live MariaDB ([source] type = "mysql") straight into a downstream MariaDB (mysql:// sink)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import SparkSession

from changefeed.cli import main
from changefeed.testing import MariaDBServer

if TYPE_CHECKING:
    from tests.conftest import ReplicaUser


def _execute(server: MariaDBServer, *statements: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def test_run_live_mysql_into_mysql_then_diff_is_equal(
    spark: SparkSession,
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    replica_user: ReplicaUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema, cid = f"run_{uuid.uuid4().hex[:8]}", f"live-{uuid.uuid4().hex[:6]}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    _execute(
        mariadb,
        f"CREATE DATABASE `{schema}`",
        f"CREATE TABLE `{schema}`.acct (id INT PRIMARY KEY, name VARCHAR(20), bal DECIMAL(10,2), ts TIMESTAMP(3) NULL)",
        f"INSERT INTO `{schema}`.acct VALUES (1, 'a', 1.50, '2024-01-02 03:04:05.678'), (2, 'b', -2, NULL)",
        f"INSERT INTO `{schema}`.acct VALUES (3, 'c', 3, NOW()), (4, 'd', 4, NULL)",
        f"UPDATE `{schema}`.acct SET bal = bal * 10 WHERE id <= 2",
    )
    config = tmp_path / "live.toml"
    config.write_text(
        f'changefeed-id = "{cid}"\n'
        f'sink-uri = "{mariadb_downstream.url}/?worker-count=2&safe-mode=false"\n'
        '[source]\ntype = "mysql"\n'
        f'url = "{replica_user.url}"\npassword-env = "CF_TEST_LIVE_PW"\nstart-position = "{file}:{pos}"\n'
        f'[filter]\nrules = ["{schema}.*"]\n'
    )
    monkeypatch.setenv("CF_TEST_LIVE_PW", replica_user.password)
    argv = ["run", str(config), "--available-now", "--master", "local[2]", "--checkpoint", str(tmp_path / "ck")]
    try:
        assert main([*argv, "--max-events", "2"]) == 0
        first = capsys.readouterr().out
        assert f"changefeed {cid}: 6 rows" in first and "mysql://root@" in first
        _execute(
            mariadb,
            f"ALTER TABLE `{schema}`.acct ADD COLUMN note VARCHAR(10) DEFAULT 'n'",
            f"DELETE FROM `{schema}`.acct WHERE id = 3",
            f"INSERT INTO `{schema}`.acct VALUES (5, 'e', 5, NULL, 'new')",
        )
        assert main(argv) == 0  # resumes from its checkpoint: only the new changes
        second = capsys.readouterr()
        assert f"changefeed {cid}: 2 rows" in second.out
        diff = ["diff", "--source", mariadb.url, "--target", mariadb_downstream.url, "--tables", f"{schema}.*"]
        assert main(diff) == 0, capsys.readouterr().out
        with mariadb_downstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, note FROM `{schema}`.acct ORDER BY id")
            assert cur.fetchall() == ((1, "n"), (2, "n"), (4, "n"), (5, "new"))
        logs = first + second.out + second.err + capsys.readouterr().err
        assert replica_user.password not in logs
        files = [p for p in (tmp_path / "ck").rglob("*") if p.is_file()]
        assert files and not any(replica_user.password.encode() in p.read_bytes() for p in files)
    finally:
        _execute(mariadb, f"DROP DATABASE IF EXISTS `{schema}`")
        _execute(
            mariadb_downstream,
            f"DROP DATABASE IF EXISTS `{schema}`",
            f"DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = '{cid}'",
        )
