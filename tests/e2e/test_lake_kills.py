"""Exactly once into the lake under SIGKILL: live MariaDB -> ``changefeed run`` -> storage -> ``changefeed apply
--to delta://|iceberg://`` (docs/lakehouse.md, "Exactly once").

One capture job (not killed) follows a private upstream into a storage directory for the whole module,
while a writer inserts, updates (keys too) and deletes rows of three tables (one with a composite key;
DECIMAL, DATETIME(3), DATE, VARCHAR, TEXT, NULLs). Per variant an apply job streams that directory into
a fresh lake and is SIGKILLed (its whole process group: no Spark JVM survives) at each point of its
plan, in random order, every run restarted on the same Spark checkpoint. The points are counted in the
job's micro-batches and sink log lines, not seconds, so a fast machine cannot outrun them:

* ``startup``: 0-2 s after the sink opened (read the tables' checkpoints): Spark starts the query and
  plans the recovery batch, or runs it;
* ``batch``: 0-0.5 s after the run's first or second micro-batch: between batches or in the next one;
* ``table``: as soon as the sink logged a table commit of a micro-batch that has not finished (the
  run's first, the recovery batch, or the next): the batch is replayed on restart, some of its tables
  hold it, others do not (or do not exist yet), and each table must skip exactly its own share. Such
  a kill that lands after its batch finished anyway is redone until one lands mid-batch.

Then the writer stops, a marker row goes last, the last run streams until the marker is in the lake
and stops with Ctrl-C. The lake is read by independent readers (deltalake's own reader, pyiceberg's
scan: the sink only writes through them) and must equal the upstream read with the MariaDB client.
``mode=changelog`` appends one row per change, so a batch applied twice would show: there the rows
must be exactly the writer's changes (counted per table and op), unique per (commit ts, op, key), and
replaying them in commit ts order must give the upstream rows (strictly: an insert onto a present key,
an update or delete of an absent or different row fails). In upsert mode the table history shows a
double application: each Delta commit, and each Iceberg snapshot per operation, records a greater
checkpoint ts than the one before.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from pymysql.cursors import Cursor

from changefeed.testing import MariaDBServer
from tests.e2e.exactly_once import JVM, Job, Kill
from tests.services import service_unavailable

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(540)]

#: The writer's and the kill plans' seed; another one with ``CHANGEFEED_LAKE_SEED=<n>``.
SEED = int(os.environ.get("CHANGEFEED_LAKE_SEED", "20261207"))
#: The lake sink logs this per table commit (changefeed/sink/lake/common.py, `_flush_chunk`) ...
TABLE_COMMIT = "changes committed at checkpoint ts"
#: ... and this once it read the tables' checkpoints, before Spark starts the query.
SINK_OPENED = "sink opened at"
#: The longest wait for a job to get somewhere (a start-up on a loaded 2-core machine included).
PATIENCE = 120.0
Row = tuple[Any, ...]

#: Per table: its columns (name, type) and its key.
TABLES: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "accounts": (
        (
            ("id", "INT"),
            ("name", "VARCHAR(32) NOT NULL"),
            ("balance", "DECIMAL(14,3)"),
            ("seen", "DATETIME(3)"),
            ("born", "DATE"),
            ("note", "VARCHAR(64)"),
            ("rev", "INT NOT NULL"),
        ),
        ("id",),
    ),
    "stock": (
        (
            ("region", "VARCHAR(8) NOT NULL"),
            ("item", "INT NOT NULL"),
            ("qty", "SMALLINT NOT NULL"),
            ("price", "DECIMAL(10,2)"),
            ("updated", "DATETIME(3)"),
            ("rev", "INT NOT NULL"),
        ),
        ("region", "item"),
    ),
    "events": (
        (
            ("id", "BIGINT"),
            ("kind", "VARCHAR(16) NOT NULL"),
            ("amount", "DECIMAL(20,6)"),
            ("at", "DATETIME(3) NOT NULL"),
            ("payload", "TEXT"),
            ("rev", "INT NOT NULL"),
        ),
        ("id",),
    ),
}
REGIONS = ("eu", "us", "apac", "latam")
NAMES = ("ana", "bob", "çelik", "dörte", "eve", "名前", "o'neil", "zoë")


def _columns(table: str) -> list[str]:
    return [name for name, _ in TABLES[table][0]]


def _key(table: str) -> list[str]:
    return list(TABLES[table][1])


def _create(table: str) -> str:
    columns, key = TABLES[table]
    return ", ".join(f"{n} {t}" for n, t in columns) + f", PRIMARY KEY ({', '.join(key)})"


def _where(table: str) -> str:
    return " AND ".join(f"{n} = %s" for n in _key(table))


def _norm(value: Any) -> Any:
    """One form for both readers: a decimal by its value (not its scale), a datetime naive in UTC."""
    if isinstance(value, Decimal):
        return value.normalize()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _row(values: Any) -> Row:
    return tuple(_norm(v) for v in values)


def _sort_key(row: Row) -> tuple[Any, ...]:
    return tuple((v is None, str(v)) for v in row)


class Writer:
    """Random transactions over the three tables, counting each table's changes per op.

    Every statement changes exactly one row (an UPDATE always bumps ``rev``), so the binlog holds
    exactly the changes counted; a transaction touches a key (old or new) at most once, so a
    changelog replayed in commit ts order has one meaning.
    """

    def __init__(self, server: MariaDBServer, schema: str, seed: int) -> None:
        self.server, self.schema = server, schema
        self.rng = random.Random(seed)
        self.live: dict[str, set[Row]] = {t: set() for t in TABLES}
        self.changes: Counter[tuple[str, str]] = Counter()  # (table, insert|update|delete) -> rows
        self.transactions = 0
        self.next_id = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def _new_key(self, table: str) -> Row:
        """A key no row ever had."""
        self.next_id += 1
        if table == "stock":
            return (self.rng.choice(REGIONS), self.next_id)
        return (self.next_id * 1_000_003,) if table == "events" else (self.next_id,)  # events: a BIGINT

    def _decimal(self, digits: int, scale: int) -> Decimal | None:
        if self.rng.random() < 0.15:
            return None
        return Decimal(self.rng.randint(-(10**digits) + 1, 10**digits - 1)).scaleb(-scale)

    def _stamp(self) -> dt.datetime:
        stamp = dt.datetime(2025, 1, 1) + dt.timedelta(seconds=self.rng.randint(0, 10**8))
        return stamp.replace(microsecond=self.rng.randrange(1000) * 1000)  # DATETIME(3)

    def _maybe(self, value: Any, p: float = 0.2) -> Any:
        return None if self.rng.random() < p else value

    def _insert(self, cur: Cursor, table: str, touched: set[tuple[str, Row]]) -> None:
        rng, key = self.rng, self._new_key(table)
        if table == "accounts":
            born = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(25000))
            note = self._maybe(f"n{rng.random():.6f}", 0.5)
            row = (*key, rng.choice(NAMES), self._decimal(8, 3), self._maybe(self._stamp()), self._maybe(born), note, 0)
        elif table == "stock":
            row = (*key, rng.randint(-100, 3000), self._decimal(7, 2), self._maybe(self._stamp()), 0)
        else:
            payload = self._maybe("x" * rng.randint(0, 300) + rng.choice(NAMES))
            row = (*key, rng.choice(("buy", "sell", "hold")), self._decimal(13, 6), self._stamp(), payload, 0)
        cur.execute(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(row))})", row)
        self._done(table, "insert", key, touched)

    def _pick(self, table: str, touched: set[tuple[str, Row]]) -> Row | None:
        free = sorted(k for k in self.live[table] if (table, k) not in touched)
        return self.rng.choice(free) if free else None

    def _update(self, cur: Cursor, table: str, touched: set[tuple[str, Row]], move: bool) -> None:
        old = self._pick(table, touched)
        if old is None:
            return
        new = old
        if move:  # a key update
            new = self._new_key(table)
            sets = ", ".join(f"{n} = %s" for n in _key(table))
            cur.execute(f"UPDATE {table} SET {sets}, rev = rev + 1 WHERE {_where(table)}", (*new, *old))
        elif table == "accounts":
            note = self._maybe(f"u{self.rng.random():.6f}", 0.4)
            cur.execute(
                f"UPDATE {table} SET balance = %s, note = %s, seen = %s, rev = rev + 1 WHERE {_where(table)}",
                (self._decimal(8, 3), note, self._maybe(self._stamp()), *old),
            )
        elif table == "stock":
            cur.execute(
                f"UPDATE {table} SET qty = qty + 1, price = %s, updated = %s, rev = rev + 1 WHERE {_where(table)}",
                (self._decimal(7, 2), self._maybe(self._stamp()), *old),
            )
        else:
            cur.execute(
                f"UPDATE {table} SET amount = %s, payload = NULL, rev = rev + 1 WHERE {_where(table)}",
                (self._decimal(13, 6), *old),
            )
        assert cur.rowcount == 1, (table, old)
        self.live[table].discard(old)
        touched.add((table, old))
        self._done(table, "update", new, touched)

    def _delete(self, cur: Cursor, table: str, touched: set[tuple[str, Row]]) -> None:
        key = self._pick(table, touched)
        if key is None:
            return
        cur.execute(f"DELETE FROM {table} WHERE {_where(table)}", key)
        assert cur.rowcount == 1, (table, key)
        self.live[table].discard(key)
        touched.add((table, key))
        self.changes[(table, "delete")] += 1

    def _done(self, table: str, op: str, key: Row, touched: set[tuple[str, Row]]) -> None:
        """An insert or update left a row at ``key``."""
        self.changes[(table, op)] += 1
        self.live[table].add(key)
        touched.add((table, key))

    def transaction(self, cur: Cursor, statements: int) -> None:
        touched: set[tuple[str, Row]] = set()
        for _ in range(statements):
            table = self.rng.choice(tuple(TABLES))
            op = self.rng.random()
            if op < 0.4 or len(self.live[table]) < 10:
                self._insert(cur, table, touched)
            elif op < 0.82:
                self._update(cur, table, touched, move=op >= 0.7)
            else:
                self._delete(cur, table, touched)
        cur.connection.commit()
        self.transactions += 1

    def seed(self, transactions: int) -> None:
        with self.server.connect(database=self.schema, autocommit=False) as conn, conn.cursor() as cur:
            for _ in range(transactions):
                self.transaction(cur, 5)

    def start(self) -> None:
        """Transactions in the background (~6 a second) until `stop`."""
        assert self._thread is None
        self._stop.clear()

        def run() -> None:
            try:
                with self.server.connect(database=self.schema, autocommit=False) as conn, conn.cursor() as cur:
                    while not self._stop.is_set():
                        self.transaction(cur, self.rng.randint(1, 5))
                        time.sleep(self.rng.uniform(0.05, 0.3))
            except BaseException as exc:  # re-raised by stop()
                self._failure = exc

        self._thread = threading.Thread(target=run, name="lake-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the writer did not stop"
        self._thread = None
        if self._failure is not None:
            raise AssertionError(f"the writer failed: {self._failure!r}") from self._failure

    def marker(self, marker_id: int) -> None:
        """The last transaction upstream: an ``accounts`` row with a negative id (the writer never picks it)."""
        with self.server.connect(database=self.schema) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO accounts VALUES (%s, 'marker', NULL, NULL, NULL, NULL, 0)", (marker_id,))
        self.changes[("accounts", "insert")] += 1


@dataclass
class Feed:
    """The module's upstream, its writer and the capture job writing the storage directory."""

    upstream: MariaDBServer
    schema: str
    uri: str  # the storage directory as ``--from`` (the capture's sink-uri)
    capture: Job
    writer: Writer
    markers: list[int] = field(default_factory=list)

    def upstream_rows(self, table: str) -> list[Row]:
        """The table's rows read with the MariaDB client, normalised and sorted."""
        with self.upstream.connect(database=self.schema) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(_columns(table))} FROM {table}")
            return sorted((_row(r) for r in cur.fetchall()), key=_sort_key)


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    """A private upstream (its binlog directory holds only this module's changes) and the capture into storage.

    Shared by the variants: each apply job reads the directory from its start (a JVM start saved per variant).
    """
    workdir = tmp_path_factory.mktemp("lake-feed")
    try:
        upstream = MariaDBServer(server_id=171, name="lake-kills-upstream").start()
    except Exception as exc:
        service_unavailable(f"MariaDB (private) could not start: {type(exc).__name__}: {exc}")
    schema = f"lk_{uuid.uuid4().hex[:8]}"
    storage = workdir / "storage"
    storage.mkdir()
    uri = f"file://{storage}?protocol=canal-json&enable-tidb-extension=true"
    config = workdir / "changefeed.toml"
    config.write_text(
        f'changefeed-id = "{schema.replace("_", "-")}"\nsink-uri = "{uri}"\n'
        f'[source]\npath = "{upstream.binlog_dir}"\n[filter]\nrules = ["{schema}.*"]\n'
    )
    spark = ["--master", "local[2]", "--trigger-interval", "1s", "--spark-conf", JVM]  # 1 s: fewer, bigger files
    capture = Job("capture", ["run", str(config), "--checkpoint", str(workdir / "ck"), *spark], workdir)
    writer = Writer(upstream, schema, SEED)
    try:
        with upstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{schema}`")
            for table in TABLES:
                cur.execute(f"CREATE TABLE `{schema}`.{table} ({_create(table)})")
        writer.seed(20)
        capture.start()
        yield Feed(upstream, schema, uri, capture, writer)
    finally:
        writer.stop()
        capture.stop()
        upstream.stop()


# ---------------------------------------------------------------- the lake, read independently


def _delta_table(root: Path, schema: str, table: str) -> pa.Table | None:
    from deltalake import DeltaTable  # noqa: PLC0415

    path = root / schema / table
    if not DeltaTable.is_deltatable(str(path)):
        return None
    # pyarrow's local file system: with deltalake's default one a process that read a table aborted at
    # exit now and then (docs/lakehouse.md, "Library notes").
    return DeltaTable(str(path)).to_pyarrow_table(filesystem=pafs.SubTreeFileSystem(str(path), pafs.LocalFileSystem()))


def _iceberg_catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415

    # The sink's SQL catalog is named "changefeed" in its rows: another client must use that name.
    return SqlCatalog(
        "changefeed", uri=f"sqlite:///{root.resolve() / '_catalog.db'}", warehouse=root.resolve().as_uri()
    )


def _iceberg_table(root: Path, schema: str, table: str) -> pa.Table | None:
    if not (root / "_catalog.db").exists():
        return None
    catalog = _iceberg_catalog(root)
    if not catalog.table_exists((schema, table)):
        return None
    return catalog.load_table((schema, table)).scan().to_arrow()


def _lake(fmt: str, root: Path, schema: str, table: str) -> pa.Table | None:
    return (_delta_table if fmt == "delta" else _iceberg_table)(root, schema, table)


def _has_marker(fmt: str, root: Path, schema: str, marker: int) -> bool:
    data = _lake(fmt, root, schema, "accounts")
    return data is not None and marker in data.column("id").to_pylist()


# ---------------------------------------------------------------- checks


def _check_upsert(feed: Feed, fmt: str, root: Path) -> dict[str, int]:
    """Each lake table equals its upstream table, row for row."""
    sizes = {}
    for table in TABLES:
        data = _lake(fmt, root, feed.schema, table)
        assert data is not None, f"no lake table {table}"
        columns = _columns(table)
        assert data.column_names == columns
        lake = sorted((_row(r[c] for c in columns) for r in data.to_pylist()), key=_sort_key)
        want = feed.upstream_rows(table)
        at = [columns.index(k) for k in _key(table)]
        keys = Counter(tuple(r[i] for i in at) for r in lake)
        assert max(keys.values(), default=1) == 1, (
            f"{table}: keys twice in the lake: {[k for k, n in keys.items() if n > 1][:5]}"
        )
        missing, extra = set(want) - set(lake), set(lake) - set(want)
        assert not missing and not extra, (
            f"{table}: lake != upstream\nmissing {sorted(missing, key=_sort_key)[:5]}\n"
            f"extra {sorted(extra, key=_sort_key)[:5]}"
        )
        assert lake == want
        sizes[table] = len(lake)
    return sizes


def _check_changelog(feed: Feed, fmt: str, root: Path) -> dict[str, int]:
    """Each change once: the writer's count per op, unique (commit ts, op, keys), replayed = upstream."""
    sizes = {}
    for table in TABLES:
        data = _lake(fmt, root, feed.schema, table)
        assert data is not None, f"no lake table {table}"
        columns, key = _columns(table), _key(table)
        rows = sorted(data.to_pylist(), key=lambda r: r["_cf_commit_ts"])
        ops = Counter(r["_cf_op"] for r in rows)
        want = Counter({op: feed.writer.changes[(table, op)] for op in ("insert", "update", "delete")})
        assert ops == want, f"{table}: changes per op in the lake {dict(ops)}, upstream {dict(want)}"
        ids = Counter(
            (r["_cf_commit_ts"], r["_cf_op"], *(r[k] for k in key), *(r["_cf_before_" + k] for k in key)) for r in rows
        )
        assert max(ids.values()) == 1, f"{table}: changes twice: {[i for i, n in ids.items() if n > 1][:5]}"
        state: dict[Row, Row] = {}
        for r in rows:  # commit ts order; a transaction touches a key once, so the order within one is free
            op, at = r["_cf_op"], r["_cf_commit_ts"]
            after, before = _row(r[c] for c in columns), _row(r["_cf_before_" + c] for c in columns)
            old, new = tuple(r["_cf_before_" + k] for k in key), tuple(r[k] for k in key)
            if op in ("update", "delete"):
                assert state.get(old) == before, f"{table}: {op} at {at} of {before}, held {state.get(old)}"
                del state[old]
            if op in ("insert", "update"):
                assert new not in state, f"{table}: {op} at {at} onto the present key {new}"
                state[new] = after
        assert sorted(state.values(), key=_sort_key) == feed.upstream_rows(table), f"{table}: replayed != upstream"
        sizes[table] = len(rows)
    return sizes


#: Commits that rewrite files, not rows (the sinks' opt-in maintenance), carry the checkpoint ts they follow.
MAINTENANCE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "replace"})


def _check_history(fmt: str, root: Path, schema: str) -> int:
    """No batch committed twice: the checkpoint ts recorded grows from commit to commit (Iceberg: a
    table's upsert is a delete and an append snapshot in one transaction, so per operation)."""
    commits = 0
    for table in TABLES:
        if fmt == "delta":
            from deltalake import DeltaTable  # noqa: PLC0415

            history = sorted(DeltaTable(str(root / schema / table)).history(), key=lambda e: e["version"])
            recorded = [int(e["changefeed.checkpoint_ts"]) for e in history if e["operation"] not in MAINTENANCE]
            assert recorded == sorted(set(recorded)), f"{table}: a checkpoint ts committed twice or going back"
            commits += len(recorded)
        else:
            snapshots = _iceberg_catalog(root).load_table((schema, table)).snapshots()
            marks = [
                (int(s.summary.additional_properties["changefeed.checkpoint-ts"]), s.summary.operation.value)
                for s in sorted(snapshots, key=lambda s: s.sequence_number)
                if s.summary is not None and s.summary.operation.value not in MAINTENANCE
            ]
            assert len(set(marks)) == len(marks), f"{table}: a checkpoint ts committed twice: {marks}"
            assert [ts for ts, _ in marks] == sorted(ts for ts, _ in marks), f"{table}: checkpoint ts going back"
            commits += len(marks)
    return commits


# ---------------------------------------------------------------- the kills


@dataclass
class Landed:
    kill: Kill
    kind: str
    mid_batch: bool  # the sink committed a table of the run's current batch, which did not finish


def _wait(job: Job, done: Callable[[], bool], what: str, pause: float = 0.01) -> None:
    deadline = time.monotonic() + PATIENCE
    while not done():
        job.check_alive()
        assert time.monotonic() < deadline, f"{job.name}: no {what} in {PATIENCE:.0f} s:\n{job.tail()}"
        time.sleep(pause)


def _since_last_batch(job: Job) -> str:
    """What the run logged after its last finished micro-batch (all of it before the first)."""
    text = job.log.read_text(errors="replace")
    return text[text.rfind(" batch=") :] if " batch=" in text else text


def _kill(job: Job, kind: str, rng: random.Random) -> Landed:
    """Start a run and SIGKILL it at a point of ``kind`` (module docstring)."""
    job.start()
    if kind == "startup":
        _wait(job, lambda: SINK_OPENED in job.log.read_text(errors="replace"), "sink open")
        time.sleep(rng.uniform(0.0, 2.0))
    elif kind == "batch":
        after = rng.randint(1, 2)
        _wait(job, lambda: job.batches() >= after, f"micro-batch {after}")
        time.sleep(rng.uniform(0.0, 0.5))
    else:
        after = rng.randint(0, 1)
        _wait(job, lambda: job.batches() >= after and TABLE_COMMIT in _since_last_batch(job), "table commit")
    kill = job.kill()  # checks that the run is alive: a kill that hits nothing proves nothing
    return Landed(kill, kind, TABLE_COMMIT in _since_last_batch(job))


def _chaos(job: Job, rng: random.Random, kinds: tuple[str, ...]) -> list[Landed]:
    """A SIGKILL of each kind (shuffled), each run restarted on the same checkpoint, and ``table`` ones more
    while none landed mid-batch; then the last run, until it has streamed again."""
    plan = rng.sample(kinds, len(kinds))
    landed: list[Landed] = []
    while plan or (not any(x.mid_batch for x in landed) and len(landed) < len(kinds) + 3):
        kind = plan.pop(0) if plan else "table"  # the batches finished before the kills landed: once more
        hit = _kill(job, kind, rng)
        landed.append(hit)
        print(
            f"kill {len(landed)} ({kind}) after {hit.kill.uptime:.1f} s, {hit.kill.batches} batches, "
            f"mid-batch {hit.mid_batch}"
        )
    job.start()
    _wait(job, lambda: job.batches() >= 1, "micro-batch after the last restart")
    return landed


#: Format, mode, the kill points. Each kill costs a run's start-up (~15 s to the first batch on 2 cores:
#: JVM, Spark session, query, Python workers), so the upsert variants take one kill of each kind (more
#: ``table`` ones follow while none landed mid-batch) and the changelog variants, there to make a double
#: application visible in the data, are killed once, mid-batch.
KILLS = ("startup", "batch", "table")
VARIANTS = [
    ("delta", "upsert", KILLS),
    ("iceberg", "upsert", KILLS),
    ("delta", "changelog", ("table",)),
    ("iceberg", "changelog", ("table",)),
]


@pytest.mark.parametrize(("fmt", "mode", "kills"), VARIANTS, ids=[f"{f}-{m}" for f, m, _ in VARIANTS])
def test_apply_into_lake_survives_kill_9(
    feed: Feed, fmt: str, mode: str, kills: tuple[str, ...], tmp_path: Path
) -> None:
    feed.capture.check_alive()
    rng = random.Random(f"{SEED}-{fmt}-{mode}")
    lake = tmp_path / "lake"
    argv = ["--log-level", "WARNING,changefeed.sink.lake=INFO"]  # the sink's open and table commits
    argv += ["apply", "--from", feed.uri, "--to", f"{fmt}://{lake}?mode={mode}", "--checkpoint", str(tmp_path / "ck")]
    argv += ["--master", "local[2]", "--trigger-interval", "500ms", "--spark-conf", JVM]
    job = Job("apply", argv, tmp_path)
    t0 = time.monotonic()
    try:
        feed.writer.start()
        try:
            landed = _chaos(job, rng, kills)
        finally:
            feed.writer.stop()
        marker = -1 - len(feed.markers)  # the last transaction upstream
        feed.markers.append(marker)
        feed.writer.marker(marker)
        t1 = time.monotonic()

        def arrived() -> bool:
            feed.capture.check_alive()
            return _has_marker(fmt, lake, feed.schema, marker)

        _wait(job, arrived, "marker in the lake", pause=0.3)
        job.interrupt()
        job.finish()
    finally:
        job.stop()
    t2 = time.monotonic()
    sizes = (_check_upsert if mode == "upsert" else _check_changelog)(feed, fmt, lake)
    commits = _check_history(fmt, lake, feed.schema)
    print(
        f"{fmt} {mode}: {len(landed)} kills, chaos {t1 - t0:.0f} s, catch-up {t2 - t1:.0f} s; rows {sizes}; "
        f"{commits} commits; {feed.writer.transactions} transactions upstream so far; seed {SEED}"
    )
    # The premises: every kill hit a running job (Job.kill), one after a micro-batch, one mid-batch.
    assert len(landed) >= len(kills)
    if "batch" in kills:
        assert any(x.kill.batches > 0 for x in landed), "no kill after a micro-batch"
    assert any(x.mid_batch for x in landed), "no kill between a batch's table commits"
    assert sum(sizes.values()) > 100
