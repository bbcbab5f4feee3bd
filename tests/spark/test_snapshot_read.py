"""A snapshot as a batch DataFrame (``input=snapshot``, and ``input=binlog`` with ``snapshot=initial-only``):
every row of every table once, chunks read in Spark's tasks, values as the server's own client reads them."""

from __future__ import annotations

import threading
from collections import Counter
from decimal import Decimal
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from changefeed.errors import ConfigError
from changefeed.spark.datasource import BinlogInput, SnapshotInput, SourceOptions, register, snapshot
from changefeed.spark.datasource.snapshot import SnapshotChunks
from changefeed.testing import MariaDBServer

pytestmark = pytest.mark.mariadb


@pytest.fixture(scope="module")
def cf(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def _fill(server: MariaDBServer, schema: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE `{schema}`.t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(10,2),"
            " data VARBINARY(8), n INT NULL)"
        )
        cur.executemany(
            f"INSERT INTO `{schema}`.t VALUES (%s, %s, %s, %s, %s)",
            [(i, f"name-{i}", Decimal(i) / 4, bytes([i, 0, 255]), None if i % 3 else i) for i in range(50)],
        )
        # A composite key over text in a case-insensitive collation, and a table without a key.
        cur.execute(
            f"CREATE TABLE `{schema}`.c (a VARCHAR(8) COLLATE utf8mb4_unicode_ci NOT NULL, b INT NOT NULL, v INT,"
            " PRIMARY KEY (a, b))"
        )
        cur.executemany(
            f"INSERT INTO `{schema}`.c VALUES (%s, %s, %s)", [(("a", "B", "c")[i % 3], i, i * 10) for i in range(20)]
        )
        cur.execute(f"CREATE TABLE `{schema}`.nokey (x INT, y VARCHAR(4))")
        cur.executemany(f"INSERT INTO `{schema}`.nokey VALUES (%s, %s)", [(i % 2, "y") for i in range(5)])
        conn.commit()


def _select(server: MariaDBServer, schema: str, table: str) -> list[tuple[Any, ...]]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{schema}`.`{table}`")
        return [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in cur.fetchall()]


def test_snapshot_batch_read_has_every_row_once_chunked_in_tasks(
    cf: SparkSession, mariadb: MariaDBServer, fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(mariadb, fresh_db)
    options = {"input": "snapshot", "url": mariadb.url, "filter": f"{fresh_db}.*", "snapshotChunkSize": "7"}
    source = SnapshotInput(SourceOptions.parse(options))
    parts = source.batch_partitions(source.opts.changelog(None))
    assert all(isinstance(p, SnapshotChunks) for p in parts)
    chunks: Counter[str] = Counter()
    for p in parts:
        assert isinstance(p, SnapshotChunks)
        chunks[orjson.loads(p.table)["name"][1]] += len(p.indexes)
    assert chunks["t"] == 8 and chunks["c"] == 3 and chunks["nokey"] == 1  # 50 and 20 keys by 7; one consistent read
    assert len(parts) == 3  # a table's chunks in one task: up to ROWS_PER_TASK rows
    monkeypatch.setattr(snapshot, "ROWS_PER_TASK", 21)  # 3 chunks of 7 a task
    grouped = [p.indexes for p in source.batch_partitions(source.opts.changelog(None))]  # type: ignore[attr-defined]
    assert sorted(grouped) == [(0,), (0, 1, 2), (0, 1, 2), (3, 4, 5), (6, 7)]  # t's 8 chunks, c's 3, nokey's 1

    reader = cf.read.format("changefeed")
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().collect()
    ddl = [(r["table"], r["ddl"].split(" (")[0]) for r in rows if r["kind"] == "ddl"]
    assert ("", f"CREATE DATABASE IF NOT EXISTS `{fresh_db}`") in ddl
    assert {t for t, _ in ddl if t} == {"t", "c", "nokey"}
    assert sum(r["kind"] == "resolved" for r in rows) == 12  # one per chunk
    images: dict[str, list[tuple[Any, ...]]] = {}
    for r in rows:
        if r["kind"] == "row":
            assert r["op"] == "insert" and r["before"] is None
            images.setdefault(r["table"], []).append(tuple(orjson.loads(r["after"]).values()))
    assert sorted(images["c"]) == sorted(_select(mariadb, fresh_db, "c"))
    assert sorted(images["nokey"]) == sorted(_select(mariadb, fresh_db, "nokey"))

    # table=: the images typed as the table's columns.
    typed = cf.read.format("changefeed").options(**options, table=f"{fresh_db}.t").load()
    got = [tuple(r) for r in typed.where("kind = 'row'").select("after.*").collect()]
    want = _select(mariadb, fresh_db, "t")
    assert sorted((i, s, a, bytes(d), n) for i, s, a, d, n in got) == sorted(want)


def test_snapshot_batch_read_under_writes_holds_each_key_once(
    cf: SparkSession, mariadb: MariaDBServer, fresh_db: str
) -> None:
    """Updates (also of the key) and inserts while the tasks read: no key lost or doubled, each row
    as of its chunk's high watermark (a later value than the one the table was filled with, or it)."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.k (id INT PRIMARY KEY, v INT)")
        cur.executemany(f"INSERT INTO `{fresh_db}`.k VALUES (%s, 0)", [(i,) for i in range(0, 600, 2)])
        conn.commit()
    stop = threading.Event()

    def write() -> None:
        n = 0
        with mariadb.connect() as conn, conn.cursor() as cur:
            while not stop.is_set():
                n += 1
                cur.execute(f"UPDATE `{fresh_db}`.k SET v = v + 1 WHERE id % 7 = {n % 7}")
                cur.execute(f"UPDATE `{fresh_db}`.k SET id = id + 1 WHERE id = {(n * 2) % 600}")  # odd: never hit again
                conn.commit()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        options = {"input": "snapshot", "url": mariadb.url, "table": f"{fresh_db}.k", "snapshotChunkSize": "20"}
        rows = cf.read.format("changefeed").options(**options).load().where("kind = 'row'").collect()
    finally:
        stop.set()
        writer.join()
    ids = Counter(r["after"]["id"] for r in rows)
    assert max(ids.values()) == 1, [k for k, n in ids.items() if n > 1]
    # Each original row is there once, under its even key or the odd one an update moved it to.
    assert {i - (i % 2) for i in ids} == set(range(0, 600, 2)) and len(ids) == 300
    assert all(r["after"]["v"] >= 0 for r in rows)


def test_initial_only_batch_read_is_the_whole_snapshot_and_streams_are_refused(
    cf: SparkSession, mariadb: MariaDBServer, fresh_db: str
) -> None:
    """``input=binlog`` with ``snapshot=initial-only`` reads every chunk as a batch (it stopped at the first
    micro-batch's maxBytesPerTrigger before); ``initial`` there, and ``input=snapshot`` as a stream, are refused."""
    wide = "x" * 2000
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.w (id INT PRIMARY KEY, pad TEXT)")
        cur.executemany(f"INSERT INTO `{fresh_db}`.w VALUES (%s, %s)", [(i, f"{i}{wide}") for i in range(100)])
        conn.commit()
    options = {
        "input": "binlog",
        "url": mariadb.url,
        "filter": f"{fresh_db}.*",
        "snapshot": "initial-only",
        "snapshotChunkSize": "10",
        "maxBytesPerTrigger": "30k",
    }
    df = cf.read.format("changefeed").options(**options).load().where("kind = 'row'")
    got = sorted(orjson.loads(r["after"])["id"] for r in df.select("after").collect())
    assert got == list(range(100))

    with pytest.raises(ConfigError, match="a batch read takes snapshot initial-only"):
        source = BinlogInput(SourceOptions.parse({**options, "snapshot": "initial"}))
        source.batch_partitions(source.opts.changelog(None))
    stream = cf.readStream.format("changefeed").options(input="snapshot", url=mariadb.url).load()
    with pytest.raises(Exception, match="input snapshot is a batch read"):
        query = stream.writeStream.format("noop").start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    with pytest.raises(ConfigError, match="give option url"):
        SnapshotInput(SourceOptions.parse({"input": "snapshot"}))
