"""Snapshot reads against a real MariaDB: values equal the binlog decoder's, and chunks read while a
writer inserts, updates (keys too) and deletes, plus the binlog after the hand-over, give the table."""

from __future__ import annotations

import random
import string
import threading
from collections.abc import Callable
from typing import Any

import pytest

from changefeed.capture.binlog import BinlogPosition, live_capture
from changefeed.capture.binlog.replica import ServerAddress
from changefeed.capture.snapshot.handover import Handover, TableCut
from changefeed.capture.snapshot.progress import BatchReader, begin
from changefeed.capture.snapshot.reader import ChunkResult, DatabaseOrder, SnapshotReader, position_key, replica_window
from changefeed.clients.mysql import MySQLError
from changefeed.model.events import Op, RowChange
from changefeed.testing import MariaDBServer

from .workload import STEPS, master_position, run_workload

pytestmark = pytest.mark.mariadb


def _keyed_tables(cur: Any, schema: str) -> None:
    """``schema`` with a composite text+int key table under a case-insensitive collation, and an int key one."""
    cur.execute(f"CREATE DATABASE {schema}")
    cur.execute(
        f"CREATE TABLE {schema}.c (a VARCHAR(8) COLLATE utf8mb4_unicode_ci NOT NULL, b INT NOT NULL, v INT,"
        " PRIMARY KEY (a, b))"
    )
    cur.execute(f"CREATE TABLE {schema}.i (id INT PRIMARY KEY, v VARCHAR(10))")


def reader_for(server: MariaDBServer, chunk_size: int = 8192) -> SnapshotReader:
    address = ServerAddress.from_url(server.url)
    return SnapshotReader(server.connect, replica_window(address), chunk_size=chunk_size)


def snapshot(reader: SnapshotReader, schema: str, table: str) -> tuple[Any, list[ChunkResult]]:
    plan = reader.plan(schema, table)
    return plan, [reader.read_chunk(plan, i) for i in range(len(plan.ranges))]


# ----------------------------------------------------------------------------- every type


_EXTRA = [
    # A composite key over text in a case-insensitive collation, virtual and stored generated columns.
    "CREATE TABLE cf.gen (a VARCHAR(10) COLLATE utf8mb4_unicode_ci NOT NULL, b INT NOT NULL, v INT,"
    " gv INT AS (v * 2) VIRTUAL, gs VARCHAR(20) AS (CONCAT(a, '-', v)) PERSISTENT, PRIMARY KEY (a, b))",
    "INSERT INTO cf.gen (a, b, v) VALUES ('b', 1, 1), ('A', 2, 2), ('a', 1, 3), ('B ', 0, NULL), ('_x', 5, 5)",
    # No primary key, a NULL-able unique key: one consistent read.
    "CREATE TABLE cf.nokey (u INT, v VARCHAR(5), UNIQUE KEY (u))",
    "INSERT INTO cf.nokey VALUES (NULL, 'n1'), (NULL, 'n2'), (1, 'one')",
    # A NOT NULL unique key (no primary key), TIMESTAMP and TIME in it.
    "CREATE TABLE cf.uk (t TIME(2) NOT NULL, ts TIMESTAMP(3) NOT NULL DEFAULT '2000-01-01', v INT, UNIQUE KEY (t, ts))",
    "INSERT INTO cf.uk VALUES ('-10:00:00.5', '2001-02-03 04:05:06.789', 1), ('09:00:00', '1999-01-01', 2),"
    " ('-00:00:01', '2030-01-01 00:00:00.001', 3)",
]


def test_every_type_snapshot_equals_the_binlog_insert(mariadb: MariaDBServer, fresh_db: str) -> None:
    first_list = next(i for i, s in enumerate(STEPS) if not isinstance(s, str))
    start = master_position(mariadb)
    original = STEPS[:]
    try:
        STEPS[:] = [*original[:first_list], *_EXTRA]
        with mariadb.connect() as conn:
            run_workload(conn, fresh_db)
    finally:
        STEPS[:] = original
    end = master_position(mariadb)
    inserted: dict[str, list[RowChange]] = {}
    for ev in live_capture(mariadb.url, start, blocking=False, until=(end.file, end.pos), track_schema=False).events():
        if isinstance(ev, RowChange) and ev.schema == fresh_db:
            assert ev.op is Op.INSERT
            inserted.setdefault(ev.table, []).append(ev)
    reader = reader_for(mariadb, chunk_size=2)
    assert set(inserted) == {"ints", "nums", "times", "strs", "gen", "nokey", "uk"}
    for table, binlog_rows in inserted.items():
        plan, chunks = snapshot(reader, fresh_db, table)
        rows = [r for c in chunks for r in c.rows]
        names = [c.name for c in plan.schema.columns]
        assert names == [c.name for c in binlog_rows[0].table_schema.columns], table
        got = sorted((dict(zip(names, r, strict=True)) for r in rows), key=repr)
        want = sorted((ev.as_dict() for ev in binlog_rows), key=repr)
        assert got == want, table
        # the types too (a float is not a Decimal, str is not bytes)
        assert sorted(map(repr, got)) == sorted(map(repr, want)), table
        assert all(c.high == c.low or position_key(c.high) >= position_key(c.low) for c in chunks)
    plans = {t: reader.plan(fresh_db, t) for t in ("gen", "nokey", "uk", "strs")}
    assert plans["gen"].key == ("a", "b") and len(plans["gen"].ranges) == 3
    assert plans["nokey"].key == () and len(plans["nokey"].ranges) == 1
    assert plans["uk"].key == ("t", "ts") and len(plans["uk"].ranges) == 2
    # The collation's order: ('_x',5) < ('a',1) < ('A',2) < ('B ',0) < ('b',1) ('A' = 'a', 'B ' = 'b'); Python's
    # would start with ('A',2), ('B ',0).
    assert [r.lo for r in plans["gen"].ranges] == [None, ("A", 2), ("b", 1)]
    assert [r.lo for r in plans["uk"].ranges] == [None, ("09:00:00.00", "1999-01-01 00:00:00.000")]


def test_database_order_follows_the_collation(mariadb: MariaDBServer, fresh_db: str) -> None:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.o (k VARCHAR(10) COLLATE utf8mb4_unicode_ci PRIMARY KEY)")
    reader = reader_for(mariadb)
    ts = reader.table_schema(fresh_db, "o")
    order = reader.order(ts, ("k",))
    assert isinstance(order, DatabaseOrder)
    keys = [("b",), ("A",), ("a ",), ("B",), ("_",), ("é",), ("e",), ("Z",)]
    assert order.rank(keys) == [3, 2, 2, 3, 1, 4, 4, 5]


# ----------------------------------------------------------------------------- under writes


def _writer(server: MariaDBServer, schema: str, stop: threading.Event, seed: int, counts: dict[str, int]) -> None:
    rnd = random.Random(seed)

    def word() -> str:
        return "".join(rnd.choice(string.ascii_letters) for _ in range(rnd.randint(1, 4)))

    with server.connect() as conn, conn.cursor() as cur:
        while not stop.is_set():
            op = rnd.choice(["ins", "ins", "upd", "move", "del", "ins_int", "move_int", "del_int"])
            try:
                if op == "ins":
                    cur.execute(
                        f"INSERT INTO `{schema}`.c (a, b, v) VALUES (%s, %s, %s)",
                        (word(), rnd.randint(0, 3), rnd.randint(0, 99)),
                    )
                elif op == "upd":
                    cur.execute(f"UPDATE `{schema}`.c SET v = v + 1 ORDER BY RAND() LIMIT 1")
                elif op == "move":
                    cur.execute(f"UPDATE `{schema}`.c SET a = %s ORDER BY RAND() LIMIT 1", (word(),))
                elif op == "del":
                    cur.execute(f"DELETE FROM `{schema}`.c ORDER BY RAND() LIMIT 1")
                elif op == "ins_int":
                    cur.execute(f"INSERT INTO `{schema}`.i (id, v) VALUES (%s, %s)", (rnd.randint(0, 5000), "w"))
                elif op == "move_int":
                    cur.execute(f"UPDATE `{schema}`.i SET id = %s ORDER BY RAND() LIMIT 1", (rnd.randint(0, 5000),))
                else:
                    cur.execute(f"DELETE FROM `{schema}`.i WHERE id = %s", (rnd.randint(0, 5000),))
                counts[op] = counts.get(op, 0) + 1
            except MySQLError as exc:
                if exc.args[0] != 1062:  # duplicate key: the random key was taken
                    raise


def _apply_strictly(down: dict[Any, tuple[Any, ...]], key: Callable[[tuple[Any, ...]], Any], ch: RowChange) -> None:
    if ch.old is not None:
        assert down.get(key(ch.old)) == ch.old, f"{ch.op}: old row {ch.old} is {down.get(key(ch.old))} downstream"
        del down[key(ch.old)]
    if ch.new is not None:
        assert key(ch.new) not in down, f"{ch.op}: {ch.new} finds its key taken by {down[key(ch.new)]}"
        down[key(ch.new)] = ch.new


def test_snapshot_under_writes_then_binlog_after_handover_is_the_table(
    mariadb_factory: Callable[..., MariaDBServer],
) -> None:
    server = mariadb_factory()
    schema = "w"
    with server.connect() as conn, conn.cursor() as cur:
        _keyed_tables(cur, schema)
        rnd = random.Random(7)
        rows = {(("".join(rnd.choice(string.ascii_letters) for _ in range(3))), rnd.randint(0, 3)) for _ in range(1500)}
        unique = {}
        for a, b in rows:
            unique.setdefault((a.lower(), b), (a, b))
        cur.executemany(f"INSERT INTO {schema}.c (a, b, v) VALUES (%s, %s, 0)", list(unique.values()))
        cur.executemany(f"INSERT INTO {schema}.i VALUES (%s, 'x')", [(i,) for i in range(0, 5000, 3)])
        cur.execute("RESET MASTER")  # the binlog no longer covers the rows already there
    reader = reader_for(server, chunk_size=150)
    stop = threading.Event()
    counts: dict[str, int] = {}
    errors: list[BaseException] = []

    def write() -> None:
        try:
            _writer(server, schema, stop, 11, counts)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        results = {t: snapshot(reader, schema, t) for t in ("c", "i")}
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert sum(counts.values()) > 50, counts
    assert sum(c.window_events for _, chunks in results.values() for c in chunks) > 0  # writes hit the windows
    end = master_position(server)
    cuts = {
        (schema, t): TableCut(
            plan.key, plan.boundaries, [position_key(c.high) for c in chunks], reader.order(plan.schema, plan.key)
        )
        for t, (plan, chunks) in results.items()
    }
    start = min((c.low for _, chunks in results.values() for c in chunks), key=position_key)
    stream = [
        ev
        for ev in replica_window(ServerAddress.from_url(server.url))(start, end)
        if isinstance(ev, RowChange) and ev.schema == schema
    ]
    kept = Handover(cuts).apply(stream, lambda ev: position_key(ev.position or {}))
    assert len(kept) < len(stream)  # the hand-over dropped what the chunks already held
    keys = {"c": lambda r: (r[0].lower(), r[1]), "i": lambda r: r[0]}
    for table, (plan, chunks) in results.items():
        down: dict[Any, tuple[Any, ...]] = {}
        for c in chunks:
            for row in c.rows:
                _apply_strictly(down, keys[table], RowChange(Op.INSERT, plan.schema, c.commit_ts, new=row))
        for ev in kept:
            if ev.table == table:
                _apply_strictly(down, keys[table], ev)
        with server.connect() as conn, conn.cursor() as cur:  # the upstream table, by the database's client
            cur.execute(f"SELECT * FROM {schema}.{table}")
            upstream = {keys[table](r): tuple(r) for r in cur.fetchall()}
        assert down == upstream, table


# ----------------------------------------------------------------------------- the whole hand-over


def test_snapshot_then_binlog_is_an_exact_copy_under_writes(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    """Pre-filled tables, RESET MASTER, a writer during the snapshot: snapshot rows + the handed-over binlog,
    applied strictly downstream, equal the upstream tables (a keyless one too); commit ts only grow."""
    from changefeed.capture.snapshot.stream import snapshot_then_binlog  # noqa: PLC0415

    server = mariadb_factory()
    schema = "h"
    with server.connect() as conn, conn.cursor() as cur:
        _keyed_tables(cur, schema)
        cur.execute(f"CREATE TABLE {schema}.n (x INT, y VARCHAR(5))")
        rnd = random.Random(3)
        unique = {}
        for _ in range(800):
            a, b = "".join(rnd.choice(string.ascii_letters) for _ in range(3)), rnd.randint(0, 3)
            unique.setdefault((a.lower(), b), (a, b))
        cur.executemany(f"INSERT INTO {schema}.c (a, b, v) VALUES (%s, %s, 0)", list(unique.values()))
        cur.executemany(f"INSERT INTO {schema}.i VALUES (%s, 'x')", [(i,) for i in range(0, 5000, 5)])
        cur.executemany(f"INSERT INTO {schema}.n VALUES (%s, 'n')", [(i % 7,) for i in range(300)])
        cur.execute("RESET MASTER")
    reader = reader_for(server, chunk_size=120)
    stop = threading.Event()
    counts: dict[str, int] = {}
    errors: list[BaseException] = []

    def write() -> None:
        try:
            _writer(server, schema, stop, 5, counts)
        except BaseException as exc:
            errors.append(exc)

    def keyless_writes() -> None:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {schema}.n VALUES (99, 'late')")
            cur.execute(f"DELETE FROM {schema}.n WHERE x = 3 LIMIT 1")

    def open_capture(start: BinlogPosition) -> Any:
        stop.set()  # the writer stops when the snapshot is done, so the non-blocking capture sees it all
        thread.join(30)
        keyless_writes()
        return live_capture(server.url, start, blocking=False, track_schema=False).events()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        events = list(
            snapshot_then_binlog(reader, [(schema, "c"), (schema, "i"), (schema, "n")], open_capture, parallelism=2)
        )
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert sum(counts.values()) > 50, counts
    rows = [e for e in events if isinstance(e, RowChange)]
    assert [e.commit_ts for e in rows] == sorted(e.commit_ts for e in rows)
    snapshot_ts = max(e.commit_ts for e in rows if e.position is None)
    assert all(e.commit_ts > snapshot_ts for e in rows if e.position is not None)
    keys = {"c": lambda r: (r[0].lower(), r[1]), "i": lambda r: r[0]}
    for table in ("c", "i"):
        down: dict[Any, tuple[Any, ...]] = {}
        for ev in rows:
            if ev.table == table:
                _apply_strictly(down, keys[table], ev)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {schema}.{table}")
            assert down == {keys[table](r): tuple(r) for r in cur.fetchall()}, table
    bag: dict[tuple[Any, ...], int] = {}
    for ev in rows:
        if ev.table == "n":
            if ev.old is not None:
                assert bag.get(ev.old, 0) > 0, ev
                bag[ev.old] -= 1
            if ev.new is not None:
                bag[ev.new] = bag.get(ev.new, 0) + 1
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT x, y, COUNT(*) FROM {schema}.n GROUP BY x, y")
        assert {k: v for k, v in bag.items() if v} == {(x, y): n for x, y, n in cur.fetchall()}


def test_batches_read_ahead_give_the_same_chunks_each_read_once(mariadb: MariaDBServer, fresh_db: str) -> None:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.r (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.executemany(f"INSERT INTO `{fresh_db}`.r VALUES (%s, %s)", [(i, f"v{i}") for i in range(53)])
        conn.commit()
    got: dict[bool, list[Any]] = {}
    reads: dict[bool, int] = {}
    for ahead in (False, True):
        reader = reader_for(mariadb, chunk_size=5)
        read_chunk = reader.read_chunk
        reads[ahead] = 0

        def counted(plan: Any, index: int, read_chunk: Any = read_chunk, ahead: bool = ahead) -> ChunkResult:
            reads[ahead] += 1
            return read_chunk(plan, index)

        reader.read_chunk = counted  # type: ignore[method-assign]
        batches = BatchReader(reader, 2, read_ahead=ahead)
        progress = begin(mariadb.connect, lambda s, t: s == fresh_db)
        got[ahead] = []
        try:
            while not progress.done:
                got[ahead] += [(c.table, c.index, c.events) for c in batches.read(progress, 10)]
        finally:
            batches.close()
    assert [(t, i) for t, i, _ in got[True]] == [((fresh_db, "r"), i) for i in range(11)]
    rows = {k: [[e.new for e in events if isinstance(e, RowChange)] for _, _, events in v] for k, v in got.items()}
    assert rows[True] == rows[False] and sum(map(len, rows[True])) == 53
    assert reads == {False: 11, True: 11}  # what was read ahead was taken, not read again
