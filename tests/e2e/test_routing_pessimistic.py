"""DM's pessimistic shard DDL mode end to end: a live MariaDB source, three shards, `changefeed run` (mysql://).

``pm_01.orders_00``, ``pm_01.orders_01`` and ``pm_02.orders_00`` share primary keys and merge into
``<target>.orders`` with ``c_table``/``c_schema`` columns. A type change across families (DECIMAL ->
VARCHAR, which the optimistic mode refuses) runs shard by shard with writes in between, one run of
the job per step: the merged table keeps the old type and the changed shards' rows wait in the held
table (``changefeed status`` shows the lock) until the last shard's DDL; then the DDL runs once and
the merged table equals the routed upstream (`changefeed diff`'s routed comparison). A shard that
then runs a different DDL than the pending one stops the job with both DDLs named.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.clients.mysql import parse_mysql_url
from changefeed.config import parse_config
from changefeed.diff.routed import RoutedDiffer, RoutedSource
from changefeed.dispatch.route import Router
from changefeed.testing import MariaDBServer
from tests.e2e.shards import merged_shards_config, run_sql
from tests.mariadb_client import client_rows

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(420)]

SHARDS = [("pm_01", "orders_00"), ("pm_01", "orders_01"), ("pm_02", "orders_00")]


def test_pessimistic_shard_ddl_holds_rows_until_the_last_shard(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = f"pess_{uuid.uuid4().hex[:8]}"
    cid = f"pm-{uuid.uuid4().hex[:6]}"
    upstream = mariadb_factory()
    load = ["CREATE DATABASE pm_01", "CREATE DATABASE pm_02"]
    for schema, table in SHARDS:
        load += [
            f"CREATE TABLE {schema}.{table} (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20))",
            f"INSERT INTO {schema}.{table} VALUES (1, 1.50, 'a'), (2, 2.50, NULL), (3, 3.25, 'c')",
        ]
    run_sql(upstream, load)
    config = merged_shards_config(tmp_path / "pm.toml", cid, upstream, mariadb_downstream, target, "pm")
    checkpoint = tmp_path / "ck"
    run = ["run", str(config), "--available-now", "--master", "local[2]", "--checkpoint", str(checkpoint)]
    held = f"SELECT shard_schema, shard_table FROM changefeed.changefeed_shard_held WHERE target_schema = '{target}'"
    amount_type = (
        "SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
        f"'{target}' AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'amount'"
    )
    modify = "ALTER TABLE {} MODIFY amount VARCHAR(20)"
    try:
        assert main(run) == 0, capsys.readouterr().err  # the snapshot
        members = client_rows(
            mariadb_downstream,
            "SELECT shard_schema, shard_table FROM changefeed.changefeed_shard_member "
            f"WHERE target_schema = '{target}' ORDER BY 1, 2",
        )
        assert members == [list(s) for s in SHARDS]  # the shard list, read from the source at start

        # Two shards change the type, with writes on every side: their rows are held.
        run_sql(
            upstream,
            [
                modify.format("pm_01.orders_00"),
                "INSERT INTO pm_01.orders_00 VALUES (4, 'n/a', 'new shape')",
                "INSERT INTO pm_02.orders_00 VALUES (4, 4.75, 'old shape')",
                "UPDATE pm_01.orders_00 SET amount = 'free' WHERE id = 1",
                modify.format("pm_01.orders_01"),
                "DELETE FROM pm_01.orders_01 WHERE id = 2",
                "INSERT INTO pm_01.orders_01 VALUES (5, 'TBD', NULL)",
                "UPDATE pm_02.orders_00 SET note = 'still old' WHERE id = 3",
            ],
        )
        capsys.readouterr()
        assert main(run) == 0, capsys.readouterr().err
        assert client_rows(mariadb_downstream, amount_type) == [["decimal(10,2)"]]  # not run yet
        assert (
            sorted(client_rows(mariadb_downstream, held)) == [["pm_01", "orders_00"]] * 2 + [["pm_01", "orders_01"]] * 2
        )
        old_shape = f"SELECT note FROM `{target}`.orders WHERE c_schema = '02' AND id IN (3, 4) ORDER BY id"
        assert client_rows(mariadb_downstream, old_shape) == [["still old"], ["old shape"]]  # applied meanwhile
        assert main(["status", "--checkpoint", str(checkpoint)]) == 0
        shown = capsys.readouterr().out
        assert "pending shard DDL locks" in shown, shown
        pending = shown.split("pending shard DDL locks")[1]
        assert f"{target}.orders: done: pm_01.orders_00 (source {cid}), pm_01.orders_01 (source {cid}); " in pending
        assert f"waiting: pm_02.orders_00 (source {cid})" in pending, shown
        assert "MODIFY amount VARCHAR(20)" in pending, shown

        # The last shard: the DDL runs once, the held rows are applied, the lock is gone.
        run_sql(
            upstream,
            [
                "INSERT INTO pm_01.orders_00 VALUES (6, 'six', NULL)",
                modify.format("pm_02.orders_00"),
                "INSERT INTO pm_02.orders_00 VALUES (7, 'seven', NULL)",
            ],
        )
        assert main(run) == 0, capsys.readouterr().err
        assert client_rows(mariadb_downstream, amount_type) == [["varchar(20)"]]
        assert client_rows(mariadb_downstream, held) == []
        lock = f"SELECT COUNT(*) FROM changefeed.changefeed_shard_lock WHERE target_schema = '{target}'"
        assert client_rows(mariadb_downstream, lock) == [["0"]]
        up, down = parse_mysql_url(upstream.url), parse_mysql_url(mariadb_downstream.url)
        routes = parse_config(config.read_text()).routes
        merged = RoutedDiffer([RoutedSource(up, Router(routes, cid))], down).run([f"{target}.*"])
        assert merged.equal and [t.table for t in merged.tables] == ["orders"], merged.tables
        assert merged.tables[0].rows_source == 3 * 3 + 5 - 1  # 3 rows per shard, 5 inserts, 1 delete
        assert client_rows(mariadb_downstream, f"SELECT amount FROM `{target}`.orders WHERE id = 1 AND "
                           "c_schema = '01' AND c_table = '00'") == [["free"]]  # fmt: skip
        capsys.readouterr()
        assert main(["status", "--checkpoint", str(checkpoint)]) == 0
        shown = capsys.readouterr().out
        assert f"{target}.orders <- pm_02.orders_00: released: the DDL ran once every shard had run it" in shown
        assert "pending shard DDL locks" not in shown, shown

        # A different DDL while a lock is pending stops the job, naming the table, shards and both DDLs.
        run_sql(
            upstream,
            [
                "ALTER TABLE pm_02.orders_00 ADD COLUMN extra INT NULL",
                "ALTER TABLE pm_01.orders_01 ADD COLUMN extra BIGINT NULL",
            ],
        )
        capsys.readouterr()
        assert main(run) != 0
        err = capsys.readouterr().err
        assert f"shard DDL conflict (pessimistic mode) on merged table {target}.orders" in err, err
        assert "shard pm_01.orders_01" in err and "ADD COLUMN extra BIGINT" in err, err
        assert "ADD COLUMN extra INT" in err and f"shards done: pm_02.orders_00 (source {cid})" in err, err
    finally:
        run_sql(
            mariadb_downstream,
            [
                f"DROP DATABASE IF EXISTS `{target}`",
                f"DELETE FROM changefeed.changefeed_shard_member WHERE source = '{cid}'",
                f"DELETE FROM changefeed.changefeed_shard_lock WHERE target_schema = '{target}'",
                f"DELETE FROM changefeed.changefeed_shard_done WHERE source = '{cid}'",
                f"DELETE FROM changefeed.changefeed_shard_held WHERE source = '{cid}'",
            ],
        )
