"""The diff tool sets its own sql_mode: a server defaulting to NO_BACKSLASH_ESCAPES reads its literals right."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer

from .helpers import execute, fetch

# Keys and values a wrong escaping mode breaks: a quote ends the string early, a backslash doubles.
KEYS = ["a'b", "c\\d", "e\\'f", "g''h", "i\\\\", 'j"k', "l;m", "n"]


def _fill(server: MariaDBServer, db: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:  # PyMySQL escapes by the server's status flag
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (k VARCHAR(20) NOT NULL PRIMARY KEY, v VARCHAR(40))")
        cur.executemany(f"INSERT INTO `{db}`.t VALUES (%s, %s)", [(k, k + " \\ ' v") for k in KEYS])


def test_diff_on_a_no_backslash_escapes_server(
    mariadb: MariaDBServer,
    mariadb_factory: Callable[..., MariaDBServer],
    db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = mariadb_factory(extra_config={"sql_mode": "NO_BACKSLASH_ESCAPES"})
    with target.connect() as conn:
        assert "NO_BACKSLASH_ESCAPES" in fetch(conn, "SELECT @@GLOBAL.sql_mode")[0][0]
    _fill(mariadb, db)
    _fill(target, db)
    argv = ["diff", "--source", mariadb.url, "--target", target.url, "--tables", f"{db}.*", "--chunk-size", "2"]
    assert main(argv) == 0, capsys.readouterr()  # range queries over quoted keys: equal, no SQL error
    assert f"{db}.t: equal ({len(KEYS)} rows" in capsys.readouterr().out

    with target.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{db}`.t SET v = 'x' WHERE k = %s", ("e\\'f",))
        cur.execute(f"DELETE FROM `{db}`.t WHERE k = %s", ("c\\d",))
    fix = tmp_path / "fix.sql"
    assert main([*argv, "--fix-sql", str(fix)]) == 1
    out = capsys.readouterr().out
    assert f"{db}.t: DIFFERENT (1 changed, 1 missing;" in out, out

    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "the mariadb client is part of the test environment"
    with fix.open("rb") as sql:  # the file sets its own sql_mode: the server's default does not apply
        subprocess.run(
            [client, "--no-defaults", "--protocol=tcp", "-h", target.host, "-P", str(target.port), "-uroot",
             "--binary-mode"],
            stdin=sql, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().out
    execute(target, f"DROP DATABASE `{db}`")
