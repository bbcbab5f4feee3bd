"""Two MariaDB sources x two schemas x four tables, merged into one downstream table by two changefeeds, and
`changefeed diff --routes` comparing the sixteen shards with the merged table (DM's sync-diff with route rules).

Every shard holds the same primary keys; DM's ``extract-*`` columns (``c_table``, ``c_schema``, and
``c_source`` = each changefeed's id) join the key downstream. After both runs the routed diff is
equal; a changed, a deleted and an extra downstream row are then reported by key, and the fix-up
SQL it writes makes the diff equal again. The changefeeds run DM's pessimistic shard mode: a type
change (DECIMAL -> VARCHAR, which the optimistic mode refuses) run on the sixteen shards of one
source waits, their rows held, for the sixteen of the other; the source whose shard is last runs
the DDL once, the other applies its held rows on its next batch, and the routed diff is equal.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer
from tests.e2e.shards import merged_shards_config, run_sql
from tests.mariadb_client import client_rows

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(420)]

SCHEMAS, TABLES = ("shop_01", "shop_02"), ("orders_00", "orders_01", "orders_02", "orders_03")


def test_two_sources_sixteen_shards_one_table_and_the_routed_diff(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = f"merged_{uuid.uuid4().hex[:8]}"
    sources = {"src-a": mariadb_factory(), "src-b": mariadb_factory()}
    configs = {}
    for n, (cid, server) in enumerate(sources.items()):
        load = [f"CREATE DATABASE {s}" for s in SCHEMAS]
        for s in SCHEMAS:
            for t in TABLES:
                load += [
                    f"CREATE TABLE {s}.{t} (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20))",
                    f"INSERT INTO {s}.{t} VALUES (1, 1.50, 'a'), (2, 2.50, NULL), (3, {n}.25, '{cid}')",
                ]
        configs[cid] = merged_shards_config(
            tmp_path / f"{cid}.toml", cid, server, mariadb_downstream, target, "shop", extract_source=True
        )
        run_sql(server, load)
    try:

        def run_of(cid: str) -> list[str]:
            return ["run", str(configs[cid]), "--available-now", "--master", "local[2]"]

        for cid, server in sources.items():  # the snapshot, then changes through the binlog
            run = run_of(cid)
            assert main([*run, "--checkpoint", str(tmp_path / f"ck-{cid}")]) == 0, capsys.readouterr().err
            run_sql(server, ["UPDATE shop_02.orders_03 SET note = 'moved', id = 30 WHERE id = 3",
                          "DELETE FROM shop_01.orders_00 WHERE id = 2",
                          "INSERT INTO shop_01.orders_02 VALUES (4, 4.00, 'new')"])  # fmt: skip
            assert main([*run, "--checkpoint", str(tmp_path / f"ck-{cid}")]) == 0, capsys.readouterr().err
        capsys.readouterr()
        rows = client_rows(mariadb_downstream, f"SELECT COUNT(*), COUNT(DISTINCT c_source) FROM `{target}`.orders")
        assert rows == [[str(2 * 2 * 4 * 3), "2"]]  # 16 shards x 3 rows; per source one delete, one insert

        diff = ["diff", "--target", mariadb_downstream.url, "--tables", f"{target}.*", "--no-progress"]
        for cid, server in sources.items():
            diff += ["--source", server.url, "--routes", str(configs[cid])]
        assert main(diff) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert f"{target}.orders: equal (48 rows, 16 chunks)" in out, out

        run_sql(
            mariadb_downstream,
            [
                f"UPDATE `{target}`.orders SET amount = 9 WHERE c_source = 'src-b' AND c_schema = '02' "
                "AND c_table = '01' AND id = 1",
                f"DELETE FROM `{target}`.orders WHERE c_source = 'src-a' AND c_schema = '01' AND c_table = '03' "
                "AND id = 3",
                f"INSERT INTO `{target}`.orders VALUES (7, 0, NULL, '00', '01', 'src-a')",
            ],
        )
        fix = tmp_path / "fix.sql"
        assert main([*diff, "--fix-sql", str(fix)]) == 1
        out = capsys.readouterr().out
        assert f"{target}.orders: DIFFERENT (1 changed, 1 extra, 1 missing" in out, out
        assert "changed key=(1, '01', '02', 'src-b')" in out, out
        assert "missing key=(3, '03', '01', 'src-a')" in out and "extra key=(7, '00', '01', 'src-a')" in out, out
        with mariadb_downstream.connect() as conn, conn.cursor() as cur:  # the fix-up SQL as a client would run it
            for statement in fix.read_text().split(";\n"):
                if statement.strip() and not statement.lstrip().startswith("--"):
                    cur.execute(statement)
            conn.commit()
        assert main(diff) == 0, capsys.readouterr().out
        assert main([*diff[:-2], "--source", sources["src-a"].url]) == 2  # three sources, one routes file
        assert "one --routes per --source" in capsys.readouterr().err

        # DM's pessimistic mode across sources: the lock waits for all 32 shards.
        amount_type = (
            "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
            f"'{target}' AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'amount'"
        )
        held = (
            f"SELECT source, COUNT(*) FROM changefeed.changefeed_shard_held WHERE target_schema = '{target}' GROUP BY 1"
        )
        alter = [f"ALTER TABLE {s}.{t} MODIFY amount VARCHAR(20)" for s in SCHEMAS for t in TABLES]
        runs = {cid: [*run_of(cid), "--checkpoint", str(tmp_path / f"ck-{cid}")] for cid in sources}
        run_sql(sources["src-a"], [*alter, "INSERT INTO shop_01.orders_00 VALUES (8, 'eight', 'a, new shape')"])
        assert main(runs["src-a"]) == 0, capsys.readouterr().err
        assert client_rows(mariadb_downstream, amount_type) == [["decimal"]]  # src-b's shards have not run it
        assert client_rows(mariadb_downstream, held) == [["src-a", "1"]]
        run_sql(sources["src-b"], [*alter, "INSERT INTO shop_02.orders_01 VALUES (8, 'acht', 'b, new shape')"])
        assert main(runs["src-b"]) == 0, capsys.readouterr().err  # src-b's last shard: the DDL, once
        assert client_rows(mariadb_downstream, amount_type) == [["varchar"]]
        assert client_rows(mariadb_downstream, held) == [["src-a", "1"]]  # src-a's: on its next batch
        run_sql(sources["src-a"], ["UPDATE shop_02.orders_02 SET amount = 'n/a' WHERE id = 1"])
        assert main(runs["src-a"]) == 0, capsys.readouterr().err
        assert client_rows(mariadb_downstream, held) == []
        capsys.readouterr()
        assert main(diff) == 0, capsys.readouterr().out
        assert f"{target}.orders: equal (50 rows, 16 chunks)" in capsys.readouterr().out
    finally:
        run_sql(
            mariadb_downstream,
            [
                f"DROP DATABASE IF EXISTS `{target}`",
                *(f"DELETE FROM changefeed.changefeed_shard_{t} WHERE target_schema = '{target}'"
                  for t in ("member", "lock", "done", "held")),
            ],
        )  # fmt: skip
