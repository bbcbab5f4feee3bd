"""Shard merge, shard DDL, online DDL and event filters through kill -9 (issue #20's "pass through kills").

One streaming `changefeed run` (live MariaDB binlog -> MariaDB, exactly once) with DM-style routes
merging four shards (``mk_01``/``mk_02`` x ``orders_00``/``orders_01``, equal keys) into
``mk_target.orders``, ``online-ddl = true`` and a TiCDC event filter, SIGKILLed at random points
(`tests.e2e.exactly_once`'s chaos: mid-batch, mid-recovery) and restarted from its checkpoint while
a writer goes on: rows into every shard, an ``ADD COLUMN`` shard by shard (DM's optimistic mode: the
first applies it, the others are "done by another shard"), gh-ost's whole sequence on
``mk_osc.items`` (shadow tables, the ALTER on the ghost, the cut-over RENAME) and rows in
``mk_osc.logs`` whose DELETEs the filter drops. At the end the merged table equals the union of the
shards (`changefeed diff`'s routed comparison), ``items`` has the ALTER and the rows, no shadow table
exists downstream, and ``logs`` holds every row ever inserted.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from changefeed.cli import main
from changefeed.clients.mysql import parse_mysql_url
from changefeed.config import parse_config
from changefeed.diff.compare import Differ
from changefeed.diff.routed import RoutedDiffer, RoutedSource
from changefeed.dispatch.route import Router
from changefeed.testing import MariaDBServer
from tests.e2e.exactly_once import JVM, Job, ScenarioError, _Chaos
from tests.mariadb_client import client_rows

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(420)]

KILLS = 3
SHARDS = [(s, t) for s in ("mk_01", "mk_02") for t in ("orders_00", "orders_01")]
OSC = "mk_osc"
CONFIG = """changefeed-id = "{cid}"
sink-uri = "{sink}/"
online-ddl = true

[source]
type = "binlog-files"
path = "{binlogs}"

[filter]
rules = ["mk_0*.*", "mk_osc.*"]

[[filter.event-filters]]
matcher = ["mk_osc.logs"]
ignore-event = ["delete"]

[[routes]]
schema-pattern = "mk_0*"
table-pattern = "orders_*"
target-schema = "mk_target"
target-table = "orders"
extract-table = {{ table-regexp = "orders_(.*)", target-column = "c_table" }}
extract-schema = {{ schema-regexp = "mk_(.*)", target-column = "c_schema" }}

[[routes]]
schema-pattern = "mk_0*"
target-schema = "mk_target"
"""


def _gh_ost(cur: object) -> None:
    """gh-ost's statements for ``ALTER TABLE items ADD COLUMN n INT NOT NULL DEFAULT 7`` (DM lists them)."""
    db = OSC
    for sql in (
        f"create /* gh-ost */ table `{db}`.`_items_ghc` (id bigint auto_increment, hint varchar(64) not null, "
        "value varchar(4096) not null, primary key(id), unique key hint_uidx(hint))",
        f"insert /* gh-ost */ into `{db}`.`_items_ghc` (id, hint, value) values (2, 'state', 'GhostTableMigrated')",
        f"create /* gh-ost */ table `{db}`.`_items_gho` like `{db}`.`items`",
        f"alter /* gh-ost */ table `{db}`.`_items_gho` add column `n` int not null default 7",
        f"insert /* gh-ost */ ignore into `{db}`.`_items_gho` (`id`, `v`) (select `id`, `v` from `{db}`.`items`)",
        f"insert into `{db}`.`items` values (1000, 'app')",  # the application goes on writing...
        f"replace /* gh-ost */ into `{db}`.`_items_gho` (`id`, `v`) values (1000, 'app')",  # ...gh-ost follows
        f"rename /* gh-ost */ table `{db}`.`items` to `{db}`.`_items_del`, `{db}`.`_items_gho` to `{db}`.`items`",
        f"drop /* gh-ost */ table if exists `{db}`.`_items_ghc`",
        f"drop /* gh-ost */ table if exists `{db}`.`_items_del`",
    ):
        cur.execute(sql)  # type: ignore[attr-defined]


class _WriterThread:
    """A writer thread: `_one` statement at a time until stopped and its pending ``phases`` (DDLs the kill
    loop asks for) are done; a failure is kept for the test to raise."""

    pause = (0.05, 0.25)  # seconds between statements

    def __init__(self, server: MariaDBServer, seed: int) -> None:
        self.server, self.rng = server, random.Random(seed)
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.step = 0
        self.phases: list[Any] = []

    def run(self) -> None:
        try:
            with self.server.connect() as conn, conn.cursor() as cur:
                while not self.stop.is_set() or self.phases:
                    self._one(cur)
                    time.sleep(self.rng.uniform(*self.pause))
        except BaseException as exc:
            self.failure = exc

    def _one(self, cur: object) -> None:
        raise NotImplementedError


class _Writer(_WriterThread):
    """Transactions into the shards, ``items`` and ``logs``; the DDLs when the chaos asks (`phase`)."""

    def __init__(self, server: MariaDBServer, seed: int) -> None:
        super().__init__(server, seed)
        self.logs_inserted: list[int] = []
        self.phases: list[str] = []  # DDL to run next: "add <n>" (the n-th shard's ADD COLUMN) or "gh-ost"
        self.done: list[str] = []

    def setup(self) -> None:
        with self.server.connect() as conn, conn.cursor() as cur:
            for schema in ("mk_01", "mk_02"):
                cur.execute(f"CREATE DATABASE {schema}")
            for schema, table in SHARDS:
                cur.execute(f"CREATE TABLE {schema}.{table} (id INT PRIMARY KEY, amount INT) ENGINE=InnoDB")
            cur.execute(f"CREATE DATABASE {OSC}")
            cur.execute(f"CREATE TABLE {OSC}.items (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
            cur.execute(f"CREATE TABLE {OSC}.logs (id INT PRIMARY KEY, msg VARCHAR(20)) ENGINE=InnoDB")

    def _one(self, cur: object) -> None:
        rng, step = self.rng, self.step
        self.step += 1
        schema, table = rng.choice(SHARDS)
        key = rng.randint(1, 30)
        c = cur.execute  # type: ignore[attr-defined]
        if self.phases and step % 5 == 0:  # a DDL, with writes on every side of it
            phase = self.phases.pop(0)
            if phase == "gh-ost":
                _gh_ost(cur)
            else:  # ADD COLUMN shard by shard
                s, t = SHARDS[int(phase.split()[1])]
                c(f"ALTER TABLE {s}.{t} ADD COLUMN note VARCHAR(10) NULL")
            self.done.append(phase)
            return
        choice = rng.random()
        if choice < 0.5:
            c(f"REPLACE INTO {schema}.{table} (id, amount) VALUES (%s, %s)", (key, rng.randint(0, 999)))
        elif choice < 0.7:
            c(f"UPDATE {schema}.{table} SET amount = amount + 1 WHERE id = %s", (key,))
        elif choice < 0.8:
            c(f"DELETE FROM {schema}.{table} WHERE id = %s", (key,))
        elif choice < 0.9:
            c(f"REPLACE INTO {OSC}.items (id, v) VALUES (%s, %s)", (key, f"v{step}"))
        else:
            c(f"INSERT INTO {OSC}.logs VALUES (%s, %s)", (step, f"m{step}"))
            self.logs_inserted.append(step)
            c(f"DELETE FROM {OSC}.logs WHERE id = %s", (step,))  # dropped by the filter


def test_shard_merge_shard_ddl_online_ddl_and_filters_through_kills(
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every kill lands 0.3-2.5 s after a run's first micro-batch: mid-stream, while the DDL that
    # came in during the restart is being applied (start-up kills are the exactly-once tests' part).
    monkeypatch.setattr("tests.e2e.exactly_once.EARLY_KILLS", 0.0)
    upstream = mariadb_factory()  # private: its binlog holds only this test's statements
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        for schema in ("mk_target", OSC, "mk_01", "mk_02"):
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
    writer = _Writer(upstream, seed=2026)
    writer.setup()
    config = tmp_path / "mk.toml"
    cid = f"mk-{uuid.uuid4().hex[:8]}"  # a checkpoint row of its own downstream
    config.write_text(CONFIG.format(cid=cid, sink=mariadb_downstream.url, binlogs=upstream.binlog_dir))
    spark = ["--master", "local[2]", "--trigger-interval", "500ms", "--spark-conf", JVM, "--skip-preflight"]
    job = Job("capture", ["run", str(config), "--checkpoint", str(tmp_path / "ck"), *spark], tmp_path)
    thread = threading.Thread(target=writer.run, name="writer", daemon=True)
    thread.start()
    chaos = _Chaos([job], random.Random(7), print)
    # Each kill lets the next DDLs run, so the job meets them in the runs between the kills.
    plan = [["add 0"], ["add 1", "gh-ost"], ["add 2", "add 3"]]

    def on_kill(kill: object) -> str:
        writer.phases.extend(plan.pop(0) if plan else [])
        return f"writer at step {writer.step}, DDL done {writer.done}"

    try:
        chaos.run(KILLS, on_kill)
        writer.stop.set()
        thread.join(120)
        if writer.failure is not None:
            raise ScenarioError(f"the writer failed: {writer.failure!r}") from writer.failure
        with upstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {OSC}.logs VALUES (999999, 'marker')")  # the last transaction upstream
        deadline = time.monotonic() + 120
        while client_rows(mariadb_downstream, f"SELECT COUNT(*) FROM {OSC}.logs WHERE id = 999999") != [["1"]]:
            job.check_alive()
            if time.monotonic() > deadline:
                raise ScenarioError(f"not caught up:\n{job.tail()}")
            time.sleep(0.5)
        job.interrupt()
        job.finish()
    finally:
        job.stop()
        writer.stop.set()
    assert len(chaos.kills) == KILLS and all(k.batches > 0 for k in chaos.kills), chaos.kills

    up, down = parse_mysql_url(upstream.url), parse_mysql_url(mariadb_downstream.url)
    routes = parse_config(config.read_text()).routes
    assert writer.done == ["add 0", "add 1", "gh-ost", "add 2", "add 3"], writer.done
    merged = RoutedDiffer([RoutedSource(up, Router(routes, cid))], down).run(["mk_target.*"])
    assert merged.equal and [t.table for t in merged.tables] == ["orders"], merged.tables
    assert merged.tables[0].rows_source > 20
    columns = client_rows(
        mariadb_downstream,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'mk_target' "
        "AND TABLE_NAME = 'orders' ORDER BY ORDINAL_POSITION",
    )
    assert [c[0] for c in columns] == ["id", "amount", "c_table", "c_schema", "note"]  # ADD COLUMN once
    items = Differ(up, down).run([f"{OSC}.items"])
    assert items.equal, items.tables
    shadows = client_rows(
        mariadb_downstream,
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{OSC}' ORDER BY 1",
    )
    assert shadows == [["items"], ["logs"]]  # gh-ost's tables never reached downstream
    n_column = client_rows(mariadb_downstream, f"SELECT COUNT(*) FROM {OSC}.items WHERE n = 7")
    assert int(n_column[0][0]) >= 1  # the ALTER run on the ghost is on the real table
    logs = client_rows(mariadb_downstream, f"SELECT id FROM {OSC}.logs WHERE id < 999999 ORDER BY id")
    assert [int(r[0]) for r in logs] == sorted(writer.logs_inserted)  # every DELETE dropped by the filter


# ---------------------------------------------------------------------------------------------- pessimistic

PM_SHARDS = [("pk_01", "orders_00"), ("pk_01", "orders_01"), ("pk_02", "orders_00")]
PM_CONFIG = """changefeed-id = "{cid}"
sink-uri = "{sink}/"
shard-mode = "pessimistic"

[source]
type = "mysql"
url = "{url}"
start-position = "earliest"  # the binlog from its start: the shards' CREATE TABLE and first DDLs in run 1

[filter]
rules = ["pk_0*.*"]

[[routes]]
schema-pattern = "pk_0*"
table-pattern = "orders_*"
target-schema = "{target}"
target-table = "orders"
extract-table = {{ table-regexp = "orders_(.*)", target-column = "c_table" }}
extract-schema = {{ schema-regexp = "pk_(.*)", target-column = "c_schema" }}

[[routes]]
schema-pattern = "pk_0*"
target-schema = "{target}"
"""


class _ShardWriter(_WriterThread):
    """Rows into three shards; on demand (``phases``) a shard's type change, after which its rows carry text."""

    pause = (0.05, 0.2)

    def __init__(self, server: MariaDBServer, seed: int) -> None:
        super().__init__(server, seed)
        self.phases: list[int] = []  # shards whose DDL runs next
        self.changed: list[int] = []

    def setup(self) -> None:
        with self.server.connect() as conn, conn.cursor() as cur:
            for schema in ("pk_01", "pk_02"):
                cur.execute(f"CREATE DATABASE {schema}")
            for schema, table in PM_SHARDS:
                cur.execute(
                    f"CREATE TABLE {schema}.{table} (id INT PRIMARY KEY, amount INT, note VARCHAR(20)) ENGINE=InnoDB"
                )
                cur.executemany(f"INSERT INTO {schema}.{table} VALUES (%s, %s, NULL)", [(k, k) for k in range(1, 11)])

    def _one(self, cur: object) -> None:
        rng, step = self.rng, self.step
        self.step += 1
        c = cur.execute  # type: ignore[attr-defined]
        if self.phases and step % 4 == 0:  # DM's case: the shards run the DDL one by one, writes between
            n = self.phases.pop(0)
            c(f"ALTER TABLE {'.'.join(PM_SHARDS[n])} MODIFY amount VARCHAR(20)")
            self.changed.append(n)
            return
        n = rng.randrange(len(PM_SHARDS))
        table, key = ".".join(PM_SHARDS[n]), rng.randint(1, 20)
        amount: object = f"t{step}" if n in self.changed else rng.randint(0, 999)  # text only in the new shape
        choice = rng.random()
        if choice < 0.55:
            c(f"REPLACE INTO {table} (id, amount, note) VALUES (%s, %s, %s)", (key, amount, f"s{step}"))
        elif choice < 0.8:
            c(f"UPDATE {table} SET note = %s WHERE id = %s", (f"u{step}", key))
        else:
            c(f"DELETE FROM {table} WHERE id = %s", (key,))


def test_pessimistic_shard_ddl_through_kills(
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DM's pessimistic mode through kill -9 (a live source): kills land while the changed shards' rows are
    held downstream and around the release; each restart resumes from the checkpoint with the lock and
    the held rows as committed. At the end the merged table equals the routed shards, the type change
    is on it, no row is held and the lock is gone."""
    monkeypatch.setattr("tests.e2e.exactly_once.EARLY_KILLS", 0.0)
    upstream = mariadb_factory()
    target = f"pk_target_{uuid.uuid4().hex[:6]}"
    cid = f"pk-{uuid.uuid4().hex[:8]}"
    writer = _ShardWriter(upstream, seed=20)
    writer.setup()
    config = tmp_path / "pk.toml"
    config.write_text(PM_CONFIG.format(cid=cid, sink=mariadb_downstream.url, url=upstream.url, target=target))
    spark = ["--master", "local[2]", "--trigger-interval", "500ms", "--spark-conf", JVM, "--skip-preflight"]
    job = Job("capture", ["run", str(config), "--checkpoint", str(tmp_path / "ck"), *spark], tmp_path)
    writer.phases = [0, 1]  # two shards change at once: run 1 meets them and is killed while their rows are held
    thread = threading.Thread(target=writer.run, name="writer", daemon=True)
    thread.start()
    chaos = _Chaos([job], random.Random(11), print)
    plan = [[2]]  # the last shard after the kill: run 2 (a restart from the held state) releases

    def on_kill(kill: object) -> str:
        writer.phases.extend(plan.pop(0) if plan else [])
        return f"writer at step {writer.step}, shards changed {writer.changed}"

    try:
        chaos.run(1, on_kill)
        writer.stop.set()
        thread.join(60)
        if writer.failure is not None:
            raise ScenarioError(f"the writer failed: {writer.failure!r}") from writer.failure
        with upstream.connect() as conn, conn.cursor() as cur:  # the last transaction upstream
            cur.execute("INSERT INTO pk_02.orders_00 VALUES (999999, 'end', 'marker')")
        marker = f"SELECT COUNT(*) FROM `{target}`.orders WHERE id = 999999"
        deadline = time.monotonic() + 90
        while client_rows(mariadb_downstream, marker) != [["1"]]:
            job.check_alive()
            if time.monotonic() > deadline:
                raise ScenarioError(f"not caught up:\n{job.tail()}")
            time.sleep(0.5)
        job.interrupt()
        job.finish()
    finally:
        job.stop()
        writer.stop.set()
    assert writer.changed == [0, 1, 2] and len(chaos.kills) == 1, (writer.changed, chaos.kills)
    up, down = parse_mysql_url(upstream.url), parse_mysql_url(mariadb_downstream.url)
    routes = parse_config(config.read_text()).routes
    merged = RoutedDiffer([RoutedSource(up, Router(routes, cid))], down).run([f"{target}.*"])
    assert merged.equal and [t.table for t in merged.tables] == ["orders"], merged.tables
    kind = client_rows(
        mariadb_downstream,
        f"SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{target}' "
        "AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'amount'",
    )
    assert kind == [["varchar(20)"]]
    for table in ("changefeed_shard_held", "changefeed_shard_done"):
        assert client_rows(mariadb_downstream, f"SELECT COUNT(*) FROM changefeed.{table} WHERE source = '{cid}'") == [
            ["0"]
        ]
    lock = f"SELECT COUNT(*) FROM changefeed.changefeed_shard_lock WHERE target_schema = '{target}'"
    assert client_rows(mariadb_downstream, lock) == [["0"]]
    assert main(["status", "--checkpoint", str(tmp_path / "ck")]) == 0
    shown = capsys.readouterr().out
    decisions = [line.split(": ", 1)[1] for line in shown.splitlines() if f"{target}.orders <- " in line]
    outcomes = [d.split(":")[0] for d in decisions]  # after the shards' CREATE TABLE (one applied)
    assert outcomes[-3:] == ["held", "held", "released"] and outcomes.count("released") == 1, shown
