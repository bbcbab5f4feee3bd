"""Online-DDL tools end to end: gh-ost's and pt-osc's statements on a real MariaDB -> `changefeed run` (mysql://).

The test runs upstream what each tool runs (DM's docs list them): gh-ost creates ``_t_ghc`` and
``_t_gho LIKE t``, ALTERs the ghost, copies rows with INSERT ... SELECT, applies the application's
writes to it, and swaps it in with ``RENAME TABLE t TO _t_del, _t_gho TO t``; pt-osc creates
``_t_new``, ALTERs it, copies rows through triggers and INSERT ... SELECT and swaps with ``RENAME
TABLE t TO _t_old, _t_new TO t``. With ``online-ddl = true`` the downstream gets the real tables
ALTERed, the right rows and no shadow table. The changefeed stops between gh-ost's ALTER and its
cut-over, so the remembered ALTER must come back from the checkpoint directory. The downstream is
read with MariaDB's own client. The same changefeed carries TiCDC event filters on another table
(``logs``): each kind (ignore-event for DML and DDL, ignore-sql, the value expressions) drops what it
names and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer
from tests.mariadb_client import client_rows

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(420)]

DB = "osc_shop"


def _upstream(server: MariaDBServer, statements: list[str]) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


GH_OST_BEFORE_CUT_OVER = [
    f"create /* gh-ost */ table `{DB}`.`_orders_ghc` (id bigint auto_increment, "
    "last_update timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, "
    "hint varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, "
    "primary key(id), unique key hint_uidx(hint)) auto_increment=256",
    f"insert /* gh-ost */ into `{DB}`.`_orders_ghc` (id, hint, value) values (2, 'state', 'GhostTableMigrated')",
    f"create /* gh-ost */ table `{DB}`.`_orders_gho` like `{DB}`.`orders`",
    f"alter /* gh-ost */ table `{DB}`.`_orders_gho` add column `n` int not null default 7",
    f"insert /* gh-ost */ ignore into `{DB}`.`_orders_gho` (`id`, `v`) "
    f"(select `id`, `v` from `{DB}`.`orders` force index (`PRIMARY`))",
    f"insert into `{DB}`.`orders` values (4, 'd')",  # the application goes on writing...
    f"replace /* gh-ost */ into `{DB}`.`_orders_gho` (`id`, `v`) values (4, 'd')",  # ...gh-ost follows it
]
GH_OST_CUT_OVER = [
    f"rename /* gh-ost */ table `{DB}`.`orders` to `{DB}`.`_orders_del`, `{DB}`.`_orders_gho` to `{DB}`.`orders`",
    f"drop /* gh-ost */ table if exists `{DB}`.`_orders_ghc`",
    f"drop /* gh-ost */ table if exists `{DB}`.`_orders_del`",
    f"insert into `{DB}`.`orders` values (5, 'e', 8)",
]
PT_OSC = [
    f"USE `{DB}`",  # pt-osc connects to the table's database (triggers need a current one)
    f"CREATE TABLE `{DB}`.`_items_new` (`id` int NOT NULL, `name` varchar(20) DEFAULT NULL, PRIMARY KEY (`id`))",
    f"ALTER TABLE `{DB}`.`_items_new` ADD COLUMN price DECIMAL(10,2) NULL",
    f"ALTER TABLE `{DB}`.`_items_new` ADD INDEX name_idx (name)",
    f"CREATE TRIGGER `pt_osc_{DB}_items_ins` AFTER INSERT ON `{DB}`.`items` FOR EACH ROW "
    f"REPLACE INTO `{DB}`.`_items_new` (`id`, `name`) VALUES (NEW.`id`, NEW.`name`)",
    f"CREATE TRIGGER `pt_osc_{DB}_items_upd` AFTER UPDATE ON `{DB}`.`items` FOR EACH ROW "
    f"REPLACE INTO `{DB}`.`_items_new` (`id`, `name`) VALUES (NEW.`id`, NEW.`name`)",
    f"CREATE TRIGGER `pt_osc_{DB}_items_del` AFTER DELETE ON `{DB}`.`items` FOR EACH ROW "
    f"DELETE IGNORE FROM `{DB}`.`_items_new` WHERE `id` = OLD.`id`",
    f"INSERT LOW_PRIORITY IGNORE INTO `{DB}`.`_items_new` (`id`, `name`) "
    f"SELECT `id`, `name` FROM `{DB}`.`items` LOCK IN SHARE MODE",
    f"INSERT INTO `{DB}`.`items` VALUES (3, 'pear')",  # copied by the insert trigger
    f"UPDATE `{DB}`.`items` SET name = 'APPLE' WHERE id = 1",  # and the update trigger
    f"DELETE FROM `{DB}`.`items` WHERE id = 2",
    f"RENAME TABLE `{DB}`.`items` TO `{DB}`.`_items_old`, `{DB}`.`_items_new` TO `{DB}`.`items`",
    f"DROP TABLE IF EXISTS `{DB}`.`_items_old`",
    f"DROP TRIGGER IF EXISTS `{DB}`.`pt_osc_{DB}_items_del`",
    f"DROP TRIGGER IF EXISTS `{DB}`.`pt_osc_{DB}_items_upd`",
    f"DROP TRIGGER IF EXISTS `{DB}`.`pt_osc_{DB}_items_ins`",
    f"UPDATE `{DB}`.`items` SET price = 2.50 WHERE id = 3",
]


def test_gh_ost_and_pt_osc_migrations_reach_the_downstream_as_alters(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = mariadb_factory()
    _upstream(mariadb_downstream, [f"DROP DATABASE IF EXISTS `{DB}`"])
    _upstream(
        upstream,
        [
            f"CREATE DATABASE {DB}",
            f"CREATE TABLE {DB}.orders (id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id))",
            f"CREATE TABLE {DB}.items (id INT NOT NULL, name VARCHAR(20), PRIMARY KEY (id))",
            f"INSERT INTO {DB}.orders VALUES (1, 'a'), (2, 'b'), (3, 'c')",
            f"INSERT INTO {DB}.items VALUES (1, 'apple'), (2, 'fig')",
            f"CREATE TABLE {DB}.logs (id INT NOT NULL, level VARCHAR(10), PRIMARY KEY (id))",
            f"INSERT INTO {DB}.logs VALUES (1, 'info'), (2, 'debug'), (3, 'warn'), (4, 'info')",  # 2: ignored
            f"UPDATE {DB}.logs SET level = 'secret' WHERE id = 3",  # new value ignored
            f"UPDATE {DB}.logs SET level = 'error' WHERE id = 4",
            f"DELETE FROM {DB}.logs WHERE id = 1",  # deletes ignored
            f"ALTER TABLE {DB}.logs ADD COLUMN extra INT NULL",  # ignore-sql
            f"ALTER TABLE {DB}.logs ADD INDEX level_idx (level)",  # applied
            *GH_OST_BEFORE_CUT_OVER,
        ],
    )
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "osc"\nsink-uri = "{mariadb_downstream.url}/"\nonline-ddl = true\n\n'
        f'[source]\ntype = "binlog-files"\npath = "{upstream.binlog_dir}"\n\n'
        f'[[filter.event-filters]]\nmatcher = ["{DB}.logs"]\nignore-event = ["delete", "truncate table"]\n'
        'ignore-sql = ["add column extra"]\nignore-insert-value-expr = "level = \'debug\'"\n'
        "ignore-update-new-value-expr = \"level = 'secret'\"\n"
    )
    monkeypatch.chdir(tmp_path)
    args = ["run", str(config), "--available-now", "--master", "local[2]", "--skip-preflight"]
    assert main(args) == 0, capsys.readouterr().err
    # Stopped between gh-ost's ALTER and its cut-over: the ALTER waits in the checkpoint directory.
    (state,) = tmp_path.rglob("changefeed-pipeline.json")
    assert "add column `n` int not null default 7" in state.read_text()
    capsys.readouterr()
    assert main(["status", "--checkpoint", str(state.parent)]) == 0
    assert "online DDL of osc_shop.orders waiting for its cut-over" in capsys.readouterr().out
    assert client_rows(mariadb_downstream, f"SELECT id, v FROM {DB}.orders ORDER BY id") == [
        ["1", "a"], ["2", "b"], ["3", "c"], ["4", "d"]
    ]  # fmt: skip

    assert client_rows(mariadb_downstream, f"SELECT id, level FROM {DB}.logs ORDER BY id") == [
        ["1", "info"], ["3", "warn"], ["4", "error"]
    ]  # fmt: skip
    logs = f"TABLE_SCHEMA = '{DB}' AND TABLE_NAME = 'logs'"
    columns = client_rows(mariadb_downstream, f"SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE {logs}")
    assert sorted(columns) == [["id"], ["level"]]  # the ignored ADD COLUMN never ran downstream
    index_sql = f"SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE {logs}"
    indexes = client_rows(mariadb_downstream, index_sql)
    assert sorted(indexes) == [["PRIMARY"], ["level_idx"]]

    _upstream(upstream, [*GH_OST_CUT_OVER, *PT_OSC, f"TRUNCATE TABLE {DB}.logs"])
    assert main(args) == 0, capsys.readouterr().err

    assert client_rows(mariadb_downstream, f"SELECT id, v, n FROM {DB}.orders ORDER BY id") == [
        ["1", "a", "7"], ["2", "b", "7"], ["3", "c", "7"], ["4", "d", "7"], ["5", "e", "8"]
    ]  # fmt: skip
    assert client_rows(mariadb_downstream, f"SELECT id, name, IFNULL(price, '-') FROM {DB}.items ORDER BY id") == [
        ["1", "APPLE", "-"], ["3", "pear", "2.50"]
    ]  # fmt: skip
    columns = client_rows(
        mariadb_downstream,
        "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{DB}' AND TABLE_NAME <> 'logs' ORDER BY TABLE_NAME, ORDINAL_POSITION",
    )
    assert columns == [
        ["items", "id", "int(11)"], ["items", "name", "varchar(20)"], ["items", "price", "decimal(10,2)"],
        ["orders", "id", "int(11)"], ["orders", "v", "varchar(10)"], ["orders", "n", "int(11)"],
    ]  # fmt: skip
    assert client_rows(
        mariadb_downstream, f"SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '{DB}' "
        "AND TABLE_NAME = 'items' AND INDEX_NAME = 'name_idx'"
    ) == [["name_idx"]]  # fmt: skip
    tables = client_rows(
        mariadb_downstream, f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{DB}' ORDER BY 1"
    )
    assert tables == [["items"], ["logs"], ["orders"]]  # no ghost, changelog or trash table downstream
    assert client_rows(mariadb_downstream, f"SELECT COUNT(*) FROM {DB}.logs") == [["3"]]  # the TRUNCATE was ignored
