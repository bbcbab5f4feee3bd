"""The diff tool: equal tables exit 0; changed, missing and extra rows are found and fixed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer

from .helpers import execute

TABLES = [
    "CREATE TABLE {db}.kv (id INT NOT NULL PRIMARY KEY, u VARCHAR(20) NULL, f FLOAT, b VARBINARY(8), UNIQUE KEY(u))",
    "CREATE TABLE {db}.comp (a INT NOT NULL, b VARCHAR(10) NOT NULL, v TEXT, PRIMARY KEY (a, b))",
    "CREATE TABLE {db}.uniq (k VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (k))",  # no PK: NOT NULL unique key
    "CREATE TABLE {db}.bag (x INT, y VARCHAR(10))",  # no key at all: whole-row comparison
]


def fill(server: MariaDBServer, db: str) -> None:
    execute(
        server,
        f"USE `{db}`",  # the seq_1_to_N tables live in every database
        *(sql.format(db=f"`{db}`") for sql in TABLES),
        f"INSERT INTO `{db}`.kv SELECT seq, IF(seq % 3 = 0, NULL, CONCAT('u', seq)), seq / 7, UNHEX(HEX(seq))"
        " FROM seq_1_to_1000",
        f"INSERT INTO `{db}`.comp SELECT seq % 10, CONCAT('k', seq), REPEAT('v', seq % 5) FROM seq_1_to_300",
        f"INSERT INTO `{db}`.uniq SELECT CONCAT('k', seq), seq FROM seq_1_to_50",
        f"INSERT INTO `{db}`.bag VALUES (1, 'a'), (1, 'a'), (2, NULL), (NULL, '')",
    )


def run_diff(source: MariaDBServer, target: MariaDBServer, db: str, *extra: str) -> int:
    return main(["diff", "--source", source.url, "--target", target.url, "--tables", f"{db}.*",
                 "--chunk-size", "64", *extra])  # fmt: skip


def test_diff_finds_and_fixes_differences(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    fill(mariadb, db)
    fill(mariadb_downstream, db)
    assert run_diff(mariadb, mariadb_downstream, db) == 0
    out = capsys.readouterr().out
    assert f"{db}.kv: equal (1000 rows, 16 chunks)" in out and "4 tables compared, 0 different" in out

    execute(
        mariadb_downstream,
        f"UPDATE `{db}`.kv SET f = f + 0.00001 WHERE id = 500",  # beyond the 6 digits FLOAT prints
        f"UPDATE `{db}`.kv SET u = '' WHERE id = 3",  # NULL -> ''
        f"UPDATE `{db}`.kv SET b = NULL WHERE id = 4",
        f"DELETE FROM `{db}`.kv WHERE id = 999",
        f"INSERT INTO `{db}`.kv VALUES (5000, 'extra', 1, NULL)",
        f"UPDATE `{db}`.comp SET v = 'changed' WHERE a = 3 AND b = 'k13'",
        f"DELETE FROM `{db}`.uniq WHERE k = 'k7'",
        f"DELETE FROM `{db}`.bag WHERE x = 1 LIMIT 1",
        f"INSERT INTO `{db}`.bag VALUES (3, 'c')",
        f"CREATE TABLE `{db}`.only_target (id INT PRIMARY KEY)",
    )
    execute(mariadb, f"CREATE TABLE `{db}`.only_source (id INT PRIMARY KEY, v BLOB)",
            f"INSERT INTO `{db}`.only_source VALUES (1, X'00ff'), (2, NULL)")  # fmt: skip
    fix = tmp_path / "fix.sql"
    assert run_diff(mariadb, mariadb_downstream, db, "--fix-sql", str(fix)) == 1
    out = capsys.readouterr().out
    assert f"{db}.kv: DIFFERENT (3 changed, 1 extra, 1 missing;" in out, out
    assert "changed key=(500)" in out and "extra key=(5000) (5000, 'extra'" in out and "missing key=(999)" in out
    assert f"{db}.comp: DIFFERENT (1 changed;" in out
    assert f"{db}.uniq: DIFFERENT (1 missing;" in out
    assert f"{db}.bag: DIFFERENT (1 extra, 1 missing;" in out and "no key: whole-row comparison" in out
    assert f"{db}.only_source: missing in target" in out and f"{db}.only_target: missing in source" in out
    assert "6 tables compared, 6 different" in out

    # The emitted SQL, run by the stock client, makes the target equal (but for the extra table,
    # which it only mentions).
    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "the mariadb client is part of the test environment"
    with fix.open("rb") as sql:
        subprocess.run(
            [client, "--no-defaults", "--protocol=tcp", "-h", mariadb_downstream.host, "-P",
             str(mariadb_downstream.port), "-uroot", "--binary-mode"],
            stdin=sql, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    assert "DROP TABLE" in fix.read_text()
    execute(mariadb_downstream, f"DROP TABLE `{db}`.only_target")
    assert run_diff(mariadb, mariadb_downstream, db) == 0, capsys.readouterr().out


def test_diff_errors_exit_2_without_the_password(mariadb: MariaDBServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diff", "--source", mariadb.url, "--target", "mysql://root:hunter2@127.0.0.1:1/"])
    err = capsys.readouterr().err
    assert code == 2
    assert "hunter2" not in err and "root:***@127.0.0.1:1" in err
