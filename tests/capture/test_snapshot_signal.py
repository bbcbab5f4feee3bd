"""Snapshots on demand: a signal row asks a running binlog stream to snapshot tables (DBLog, Debezium's signal table).

The ``binlog`` input is driven as Spark drives it (offsets, partitions, commits) against a private
MariaDB while a writer inserts, updates (keys too) and deletes; the stream began after the tables
were filled, so its consumer lacks their old rows until the snapshot brings them. The events,
applied as a sink would (chunk rows as upserts), must give the asked tables exactly, and every
change after the snapshot must find its row.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from changefeed.capture.snapshot.signal import EXECUTE_SNAPSHOT, SIGNAL_COLUMNS, read_signal, signal_row
from changefeed.errors import CaptureError, ConfigError
from changefeed.model import Column, TableSchema, TypeCode
from changefeed.model.events import Event, Op, RowChange
from changefeed.model.rowblock import expand_blocks
from changefeed.spark.datasource import SourceOptions
from changefeed.spark.datasource.binlog import INCREMENTAL, BinlogInput, RangeDecoder
from changefeed.testing import MariaDBServer

from .workload import keyed_table

SIGNALS = TableSchema(
    "changefeed",
    "changefeed_signal",
    [Column("id", TypeCode.VARCHAR), Column("type", TypeCode.VARCHAR), Column("data", TypeCode.VARCHAR)],
)


def _row(sid: str, kind: str, data: Any) -> RowChange:
    text = data if isinstance(data, str) or data is None else orjson.dumps(data).decode()
    return RowChange(Op.INSERT, SIGNALS, 1, new=(sid, kind, text))


def test_signal_rows_are_read_as_debezium_writes_them() -> None:
    sid, kind, data = signal_row("cf1", ["shop.*", "crm.users"])
    signal = read_signal(_row(sid, kind, data), "cf1", "here")
    assert signal is not None and signal.id == sid and signal.tables == ("shop.*", "crm.users")
    debezium = {"data-collections": ["shop.orders"], "type": "incremental"}  # no changefeed: every one
    assert read_signal(_row("x", EXECUTE_SNAPSHOT, debezium), "any", "here").tables == ("shop.orders",)  # type: ignore[union-attr]
    assert read_signal(_row("x", EXECUTE_SNAPSHOT, {**debezium, "changefeed": "cf2"}), "cf1", "here") is None
    assert read_signal(_row("x", "log", {"message": "hi"}), "cf1", "here") is None  # Debezium's other signals
    update = RowChange(Op.UPDATE, SIGNALS, 1, new=("x", EXECUTE_SNAPSHOT, orjson.dumps(debezium).decode()))
    assert read_signal(update, "cf1", "here") is None  # only a new row is a signal
    for bad, match in [
        ("{not json", "not JSON"),
        ([1, 2], "JSON object"),
        ({"data-collections": []}, "data-collections"),
        ({"data-collections": ["a.b", 3]}, "data-collections"),
        ({"data-collections": ["a.b"], "type": "blocking"}, "incremental"),
    ]:
        with pytest.raises(CaptureError, match=match) as info:
            read_signal(_row("s-1", EXECUTE_SNAPSHOT, bad), "cf1", "binlog.000001:4")
        assert "s-1" in str(info.value) and "binlog.000001:4" in str(info.value)
    narrow = TableSchema(
        "changefeed", "changefeed_signal", [Column("id", TypeCode.VARCHAR), Column("x", TypeCode.VARCHAR)]
    )
    with pytest.raises(CaptureError, match="needs columns id, type, data"):
        read_signal(RowChange(Op.INSERT, narrow, 1, new=("a", "b")), "cf1", "here")


def _apply(tables: dict[str, dict[Any, tuple[Any, ...]]], events: list[Event], strict: set[str]) -> None:
    """Apply as a sink in safe mode would (a chunk row over an existing key replaces it); a table in ``strict``
    must hold the old row of every update and delete (after its snapshot, the stream is all there is)."""
    for ev in events:
        if not isinstance(ev, RowChange):
            continue
        rows = tables.setdefault(ev.table, {})
        if ev.old is not None:
            old = rows.pop(ev.old[0], None)
            if ev.table in strict:
                assert old == ev.old, (ev.table, ev.op, ev.old, old)
        if ev.op is not Op.DELETE:
            assert ev.new is not None
            rows[ev.new[0]] = ev.new


def _options(server: MariaDBServer, schema: str, start: str, tmp_path: Path) -> dict[str, str]:
    """The ``binlog`` input from ``start``, watching the signal table as changefeed ``cf1``, 7-row chunks
    on demand (the initial snapshot's size, unused here, is another: on-demand chunks have their own)."""
    return {
        "input": "binlog",
        "url": server.url,
        "filter": f"{schema}.*",
        "startPosition": start,
        "signalTable": "changefeed.changefeed_signal",
        "changefeedId": "cf1",
        "snapshotChunkSize": "1000",
        "snapshotOnDemandChunkSize": "7",
        "snapshotDir": str(tmp_path / "spill"),
        "output": "ranges",
    }


def _random_writes(server: MariaDBServer, schema: str, rng: random.Random, n: int) -> None:
    """``n`` random changes to the tables k, c and other, one transaction each."""
    with server.connect(database=schema) as conn, conn.cursor() as cur:
        for _ in range(n):
            i = rng.randrange(80)
            op = rng.random()
            if op < 0.25:
                cur.execute("INSERT IGNORE INTO k VALUES (%s, 'w')", (i + 1000,))
            elif op < 0.45:
                cur.execute("UPDATE IGNORE k SET id = id + 500, v = 'moved' WHERE id = %s", (i,))
            elif op < 0.6:
                cur.execute("DELETE FROM k WHERE id = %s", (i,))
            elif op < 0.75:
                cur.execute("UPDATE c SET n = n + 1 WHERE s = %s", (f"S{i % 25:03d}",))
            elif op < 0.85:
                cur.execute("UPDATE other SET v = v + 1 WHERE id = %s", (i % 30,))
            else:
                cur.execute("UPDATE k SET v = 'upd' WHERE id = %s", (i,))
            conn.commit()


@pytest.mark.mariadb
def test_a_signal_snapshots_tables_into_the_running_stream(
    mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path
) -> None:
    server = mariadb_factory()
    schema = "sig"
    rng = random.Random(11)
    with server.connect() as conn, conn.cursor() as cur:
        keyed_table(cur, schema, 60)
        cur.execute(f"CREATE TABLE {schema}.c (s VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, n INT)")
        cur.execute(f"CREATE TABLE {schema}.other (id INT PRIMARY KEY, v INT)")
        cur.executemany(f"INSERT INTO {schema}.c VALUES (%s, %s)", [(f"s{i:03d}", i) for i in range(25)])
        cur.executemany(f"INSERT INTO {schema}.other VALUES (%s, %s)", [(i, i) for i in range(30)])
        cur.execute("CREATE DATABASE changefeed")
        cur.execute(f"CREATE TABLE changefeed.changefeed_signal ({SIGNAL_COLUMNS})")
        conn.commit()
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]

    def signal(changefeed: str, tables: list[str]) -> None:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO changefeed.changefeed_signal VALUES (%s, %s, %s)", signal_row(changefeed, tables))
            conn.commit()

    options = _options(server, schema, f"{file}:{pos}", tmp_path)
    decoder = RangeDecoder.from_options(options)
    source = BinlogInput(SourceOptions.parse(options))
    offset = source.initial_offset()
    tables: dict[str, dict[Any, tuple[Any, ...]]] = {}
    strict: set[str] = set()
    chunk_parts = batches = 0
    for step in range(200):
        if step < 40:
            _random_writes(server, schema, rng, 3)
        if step == 2:
            signal("cf2", [f"{schema}.other"])  # another changefeed's: ignored
            with server.connect() as conn, conn.cursor() as cur:  # malformed: logged and ignored
                cur.execute("INSERT INTO changefeed.changefeed_signal VALUES ('bad', %s, '{')", (EXECUTE_SNAPSHOT,))
                conn.commit()
            signal("cf1", [f"{schema}.k", f"{schema}.c"])
        end = source.latest_offset(offset, 20, None)
        if end == offset:
            if step >= 40:
                break
            continue
        if batches == 6:  # a restart before the batch commits: a new input re-plans it (the chunk from the spill)
            source = BinlogInput(SourceOptions.parse(options))
        parts = list(source.partitions(offset, end, source.opts.changelog(None)))
        chunk_parts += sum(  # chunks, whether carried, or named alone or with a batch's others
            (p.chunk_file is not None or p.chunk is not None) + len(p.chunk_files)  # type: ignore[attr-defined]
            for p in parts
        )
        events: list[Event] = []
        for part in parts:
            events += expand_blocks(decoder.events(part.rows()))  # type: ignore[attr-defined]
        _apply(tables, events, strict)
        source.commit(end)
        progress = end.get(INCREMENTAL)
        if progress is not None and progress["next"][0] >= len(progress["tables"]):
            strict = {"k", "c"}  # the snapshot is done: every later change finds its row
        offset = end
        batches += 1
    else:
        raise AssertionError("the stream did not come to an end")
    assert chunk_parts == 9 + 4, chunk_parts  # ~60 keys of k and 25 of c, 7 a chunk (the writer moves some)
    assert strict, "the snapshot finished"
    assert not [p for p in (tmp_path / "spill").rglob("*") if p.is_file()], "committed chunks are dropped"
    assert (tmp_path / "spill" / "on-demand").is_dir(), "on-demand chunks spill apart from the initial snapshot's"
    with server.connect(database=schema) as conn, conn.cursor() as cur:
        for table in ("k", "c"):
            cur.execute(f"SELECT * FROM {table}")
            want = sorted(cur.fetchall())
            assert sorted(tables[table].values()) == want, table
        cur.execute("SELECT COUNT(*) FROM other")
        assert len(tables.get("other", {})) < cur.fetchone()[0], "other was not asked for: only its changes"


@pytest.mark.mariadb
def test_a_chunk_read_while_nothing_changed_comes_before_the_next_change(
    mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path
) -> None:
    """A chunk whose high watermark is the batch's start (nothing written since): the batch holds no
    binlog, so a change committed between the chunk's read and the batch's planning comes after the
    chunk's rows (a scan from that start read one transaction past it, and the stale row won)."""
    server = mariadb_factory()
    schema = "quiet"
    with server.connect() as conn, conn.cursor() as cur:
        keyed_table(cur, schema, 28)
        cur.execute("CREATE DATABASE changefeed")
        cur.execute(f"CREATE TABLE changefeed.changefeed_signal ({SIGNAL_COLUMNS})")
        conn.commit()
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("INSERT INTO changefeed.changefeed_signal VALUES (%s, %s, %s)", signal_row("cf1", [f"{schema}.k"]))
        conn.commit()
    options = _options(server, schema, f"{file}:{pos}", tmp_path)
    decoder = RangeDecoder.from_options(options)
    source = BinlogInput(SourceOptions.parse(options))
    reader = source._on_demand_reader().reader
    read_chunk = reader.read_chunk

    def read_then_delete(plan: Any, index: int) -> Any:
        result = read_chunk(plan, index)
        if index % 2:  # the chunk before wrote nothing after its read: this one's high is the batch's start
            with server.connect(database=schema) as conn, conn.cursor() as cur:
                cur.execute("DELETE FROM k WHERE id = %s", (result.rows[0][0],))
                conn.commit()
        return result

    reader.read_chunk = read_then_delete  # type: ignore[method-assign]
    offset = source.initial_offset()
    tables: dict[str, dict[Any, tuple[Any, ...]]] = {}
    for _ in range(40):
        end = source.latest_offset(offset, 20, None)
        if end == offset:
            break
        events: list[Event] = []
        for part in source.partitions(offset, end, source.opts.changelog(None)):
            events += expand_blocks(decoder.events(part.rows()))  # type: ignore[attr-defined]
        _apply(tables, events, set())
        source.commit(end)
        offset = end
    with server.connect(database=schema) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM k")
        want = sorted(cur.fetchall())
    assert len(want) == 26  # chunks #1 and #3 of four lost their first row after being read
    assert sorted(tables["k"].values()) == want


@pytest.mark.mariadb
def test_changefeed_snapshot_writes_the_signal_row(mariadb: MariaDBServer, tmp_path: Path) -> None:
    """The command creates the signal table where missing and writes one row the run reads as this changefeed's."""
    from changefeed.cli import main  # noqa: PLC0415
    from changefeed.config import parse_config  # noqa: PLC0415

    schema = f"sigcli_{uuid.uuid4().hex[:8]}"
    config = tmp_path / "cf.toml"
    base = f'changefeed-id = "orders"\nsink-uri = "file:///tmp/x"\n[source]\ntype = "mysql"\nurl = "{mariadb.url}"\n'
    config.write_text(base + f'signal-table = "{schema}.signals"\n')
    try:
        assert main(["snapshot", str(config), "--tables", "shop.orders, crm.*"]) == 0
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, type, data FROM `{schema}`.signals")
            rows = cur.fetchall()
        assert len(rows) == 1
        signal = read_signal(_row(*rows[0]), "orders", "here")
        assert signal is not None and signal.tables == ("shop.orders", "crm.*")
        assert read_signal(_row(*rows[0]), "another", "here") is None
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
    assert parse_config(base).source.signal_table is None  # the default table
    assert parse_config(base + 'signal-table = ""\n').source.signal_table == ""
    with pytest.raises(ConfigError, match=r"signal-table must be schema\.table"):
        parse_config(base + 'signal-table = "nodot"\n')
    config.write_text(base + 'signal-table = ""\n')
    assert main(["snapshot", str(config), "--tables", "a.b"]) == 1  # signals off: refused with a message
    config.write_text(base)
    assert main(["snapshot", str(config), "--tables", "nodot"]) == 1  # not a table pattern
    assert main(["snapshot", str(config), "--tables", " , "]) == 1
