"""Shard merge end to end: three MariaDB shard tables -> `changefeed run` (mysql://) -> one merged table.

``shop_01.orders_00``, ``shop_01.orders_01`` and ``shop_02.orders_00`` share primary keys; DM-style
``[[routes]]`` merge them into ``route_shop.orders`` with ``c_table``/``c_schema``/``c_source``
columns that join the key, so nothing collides. An ADD COLUMN arrives shard by shard while writes
go on (applied once, skipped for the others), then a widening MODIFY; a second run resumes from the
checkpoint and stops on an incompatible ADD COLUMN with an error naming the shards and the DDL.
The downstream is read with MariaDB's own client.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer
from tests.mariadb_client import client_rows

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(420)]

SHARDS = [("shop_01", "orders_00"), ("shop_01", "orders_01"), ("shop_02", "orders_00")]
TARGET = "route_shop"


def _upstream(server: MariaDBServer, statements: list[str]) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def _config(path: Path, upstream: MariaDBServer, downstream: MariaDBServer) -> Path:
    path.write_text(
        f"""changefeed-id = "shards-a"
sink-uri = "{downstream.url}/"

[source]
type = "binlog-files"
path = "{upstream.binlog_dir}"

[[routes]]
schema-pattern = "shop_*"
table-pattern = "orders_*"
target-schema = "{TARGET}"
target-table = "orders"
extract-table = {{ table-regexp = "orders_(.*)", target-column = "c_table" }}
extract-schema = {{ schema-regexp = "shop_(.*)", target-column = "c_schema" }}
extract-source = {{ source-regexp = "(.*)", target-column = "c_source" }}

[[routes]]
schema-pattern = "shop_*"
target-schema = "{TARGET}"
"""
    )
    return path


def test_three_shards_merge_into_one_table_with_shard_ddl(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = mariadb_factory()  # private: its binlog holds only this test's statements
    _upstream(mariadb_downstream, [f"DROP DATABASE IF EXISTS `{TARGET}`"])
    load = ["CREATE DATABASE shop_01", "CREATE DATABASE shop_02"]
    for schema, table in SHARDS:
        load += [
            f"CREATE TABLE {schema}.{table} (id INT NOT NULL, amount INT, PRIMARY KEY (id)) ENGINE=InnoDB",
            f"INSERT INTO {schema}.{table} VALUES (1, 10), (2, 20), (3, 30)",  # the same keys in every shard
        ]
    load += [
        "UPDATE shop_01.orders_01 SET amount = 21 WHERE id = 2",
        "DELETE FROM shop_02.orders_00 WHERE id = 3",
        # ADD COLUMN shard by shard, writes going on in between: applied once, skipped for the others.
        "ALTER TABLE shop_01.orders_00 ADD COLUMN note VARCHAR(20) NULL",
        "INSERT INTO shop_01.orders_00 VALUES (4, 40, 'first')",
        "INSERT INTO shop_02.orders_00 VALUES (4, 41)",  # a shard that has not changed yet
        "ALTER TABLE shop_01.orders_01 ADD COLUMN note VARCHAR(20) NULL",
        "UPDATE shop_01.orders_01 SET note = 'second' WHERE id = 1",
        "ALTER TABLE shop_02.orders_00 ADD COLUMN note VARCHAR(20) NULL",
        "ALTER TABLE shop_02.orders_00 MODIFY amount BIGINT",  # widening: applied at once
        "INSERT INTO shop_02.orders_00 VALUES (5, 5000000000, 'wide')",
        "ALTER TABLE shop_01.orders_00 MODIFY amount BIGINT",  # the same widening: skipped
        "TRUNCATE TABLE shop_01.orders_01",  # a shard's TRUNCATE never empties the merged table (DM)
        "INSERT INTO shop_01.orders_01 VALUES (9, 90, 'after')",
    ]
    _upstream(upstream, load)
    config = _config(tmp_path / "cf.toml", upstream, mariadb_downstream)
    monkeypatch.chdir(tmp_path)
    args = ["run", str(config), "--available-now", "--master", "local[2]", "--skip-preflight"]
    assert main(args) == 0, capsys.readouterr().err

    rows = client_rows(
        mariadb_downstream,
        f"SELECT c_schema, c_table, c_source, id, amount, IFNULL(note, '-') FROM `{TARGET}`.orders "
        "ORDER BY c_schema, c_table, id",
    )
    assert rows == [
        ["01", "00", "shards-a", "1", "10", "-"],
        ["01", "00", "shards-a", "2", "20", "-"],
        ["01", "00", "shards-a", "3", "30", "-"],
        ["01", "00", "shards-a", "4", "40", "first"],
        ["01", "01", "shards-a", "1", "10", "second"],  # rows from before the TRUNCATE stay (DM's shard rule)
        ["01", "01", "shards-a", "2", "21", "-"],
        ["01", "01", "shards-a", "3", "30", "-"],
        ["01", "01", "shards-a", "9", "90", "after"],
        ["02", "00", "shards-a", "1", "10", "-"],
        ["02", "00", "shards-a", "2", "20", "-"],
        ["02", "00", "shards-a", "4", "41", "-"],
        ["02", "00", "shards-a", "5", "5000000000", "wide"],
    ]
    columns = client_rows(
        mariadb_downstream,
        "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{TARGET}' AND TABLE_NAME = 'orders' ORDER BY ORDINAL_POSITION",
    )
    assert [c[0] for c in columns] == ["id", "amount", "c_table", "c_schema", "c_source", "note"]
    assert {c[0] for c in columns if c[2] == "PRI"} == {"id", "c_table", "c_schema", "c_source"}
    assert dict((c[0], c[1]) for c in columns)["amount"] == "bigint(20)"
    tables = client_rows(mariadb_downstream, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                     "WHERE TABLE_SCHEMA LIKE 'shop%' OR TABLE_SCHEMA = 'route_shop'")  # fmt: skip
    assert tables == [[TARGET, "orders"]]  # no upstream-named schema or table downstream

    # `changefeed status` shows each shard's DDL decision on the merged table.
    checkpoint = tmp_path / ".changefeed" / "run-shards-a"
    capsys.readouterr()
    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    shown = capsys.readouterr().out
    assert "shard DDL on merged tables" in shown, shown
    target = f"{TARGET}.orders"
    assert f"{target} <- shop_01.orders_00: applied" in shown, shown  # the first ADD COLUMN
    assert f"{target} <- shop_01.orders_01: skipped: done by another shard" in shown, shown
    assert f"{target} <- shop_02.orders_00: applied" in shown, shown  # the widening MODIFY, at once

    # Resumed from the checkpoint: an incompatible shard DDL stops the run, naming shards and DDL.
    _upstream(
        upstream,
        [
            "ALTER TABLE shop_02.orders_00 ADD COLUMN extra INT NULL",
            "INSERT INTO shop_02.orders_00 VALUES (6, 60, 'x', 6)",
            "ALTER TABLE shop_01.orders_00 ADD COLUMN extra VARCHAR(5) NULL",
        ],
    )
    capsys.readouterr()
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "shard DDL conflict" in err, err
    assert "shop_01.orders_00" in err and "ADD COLUMN extra VARCHAR(5)" in err, err
    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    shown = capsys.readouterr().out
    assert f"{target} <- shop_01.orders_00: conflict:" in shown, shown  # what stopped the job, with its DDL
    assert "ADD COLUMN extra VARCHAR(5)" in shown.split("conflict:")[-1], shown
    shard_02 = f"SELECT id, extra FROM `{TARGET}`.orders WHERE c_schema = '02' AND id = 6"
    assert client_rows(mariadb_downstream, shard_02) == [["6", "6"]]
