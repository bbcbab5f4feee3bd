"""The ``binlog`` input's snapshot phase driven as Spark drives it (offsets, partitions, commits), without Spark.

Against a private MariaDB whose binlog was reset after the rows were written: every micro-batch's
chunks come from the spill, a "restart" (a new input object over the same spill directory)
re-plans a logged batch to the same rows, and the events applied strictly (an insert must not
find its key, an update or delete must find its row) give the table.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from changefeed.capture.snapshot.progress import key_from_json, key_to_json
from changefeed.errors import ConfigError
from changefeed.model.events import DDLEvent, Event, Op, Resolved, RowChange
from changefeed.model.rowblock import expand_blocks
from changefeed.spark.datasource import SourceOptions
from changefeed.spark.datasource.binlog import BinlogInput, RangeDecoder
from changefeed.spark.datasource.snapshot import DEFAULT_ON_DEMAND_CHUNK_SIZE, SnapshotOptions, is_snapshot
from changefeed.testing import MariaDBServer

from .workload import keyed_table

pytestmark = pytest.mark.mariadb


@given(
    st.lists(
        st.one_of(
            st.integers(min_value=-(2**63), max_value=2**64 - 1),
            st.text(),
            st.binary(),
            st.decimals(allow_nan=False, allow_infinity=False),
            st.floats(allow_nan=False),
        ),
        max_size=4,
    )
)
def test_key_values_round_trip_through_json(key: list[Any]) -> None:
    back = key_from_json(orjson.loads(orjson.dumps(key_to_json(tuple(key)))))
    assert back == tuple(key)
    assert [type(v) for v in back] == [type(v) for v in key]


def _options(server: MariaDBServer, schema: str, spill: Path, **extra: str) -> dict[str, str]:
    return {
        "input": "binlog",
        "url": server.url,
        "filter": f"{schema}.*",
        "snapshot": "initial",
        "snapshotChunkSize": "7",
        "snapshotParallelism": "3",
        "snapshotDir": str(spill),
        "output": "ranges",
        **extra,
    }


def _input(options: dict[str, str]) -> BinlogInput:
    return BinlogInput(SourceOptions.parse(options))


def _apply(tables: dict[str, dict[Any, tuple[Any, ...]]], events: list[Event], keys: dict[str, list[int]]) -> None:
    """Apply strictly: an insert must not find its key, an update or delete must find exactly its old row."""
    for ev in events:
        if isinstance(ev, DDLEvent) and ev.table:
            tables.setdefault(ev.table, {})
        if not isinstance(ev, RowChange):
            continue
        rows = tables.setdefault(ev.table, {})
        idx = keys[ev.table]
        if not idx:  # keyless: a multiset (image -> (image, count)); a delete must find its row
            if ev.old is not None:
                image, n = rows.get(ev.old, (ev.old, 0))
                assert n > 0, (ev.table, ev.op, ev.old)
                rows[ev.old] = (image, n - 1)
            if ev.op is not Op.DELETE:
                assert ev.new is not None
                image, n = rows.get(ev.new, (ev.new, 0))
                rows[ev.new] = (image, n + 1)
            continue

        def key(image: tuple[Any, ...], idx: list[int] = idx) -> Any:
            return tuple(image[i] for i in idx) if idx else image

        if ev.old is not None:
            old = key(ev.old)
            assert rows.get(old) == ev.old, (ev.table, ev.op, ev.old, rows.get(old))
            del rows[old]
        if ev.op is not Op.DELETE:
            assert ev.new is not None
            new = key(ev.new)
            assert new not in rows, (ev.table, ev.op, ev.new)
            rows[new] = ev.new


HANDED_OVER = [0]  # binlog ranges decoded through the hand-over


def _events(source: BinlogInput, decoder: RangeDecoder, start: dict[str, Any], end: dict[str, Any]) -> list[Event]:
    out: list[Event] = []
    for part in source.partitions(start, end, source.opts.changelog(None)):
        HANDED_OVER[0] += part.handover is not None  # type: ignore[attr-defined]
        out += expand_blocks(decoder.events(part.rows()))  # type: ignore[attr-defined]
    return out


def _run_again(
    source: BinlogInput,
    decoder: RangeDecoder,
    offset: dict[str, Any],
    tables: dict[str, dict[Any, tuple[Any, ...]]],
    keys: dict[str, list[int]],
) -> dict[str, Any]:
    """A second availableNow run from ``offset``: the last chunks were read ahead of the writes made
    just before their batch, and those writes lie past where the first run may stop."""
    target = source.available_now_target()
    while (end := source.latest_offset(offset, 20, target)) != offset:
        _apply(tables, _events(source, decoder, offset, end), keys)
        source.commit(end)
        offset = end
    return offset


def test_snapshot_offsets_partitions_and_restart(mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path) -> None:
    server = mariadb_factory()
    schema = "snapoff"
    rng = random.Random(5)
    with server.connect() as conn, conn.cursor() as cur:
        keyed_table(cur, schema, 60)
        cur.execute(f"CREATE TABLE {schema}.t (s VARCHAR(8) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, n INT)")
        cur.execute(f"CREATE TABLE {schema}.nokey (a INT, b INT)")
        cur.executemany(f"INSERT INTO {schema}.t VALUES (%s, %s)", [(f"s{i:03d}", i) for i in range(25)])
        cur.executemany(f"INSERT INTO {schema}.nokey VALUES (%s, %s)", [(i % 3, i) for i in range(9)])
        conn.commit()
        cur.execute("RESET MASTER")

    def write(n: int) -> None:
        with server.connect(database=schema) as conn, conn.cursor() as cur:
            for _ in range(n):
                i = rng.randrange(80)
                op = rng.random()
                if op < 0.3:
                    cur.execute("INSERT IGNORE INTO k VALUES (%s, 'w')", (i + 1000,))
                elif op < 0.5:
                    cur.execute("UPDATE IGNORE k SET id = id + 500 WHERE id = %s", (i,))
                elif op < 0.65:
                    cur.execute("DELETE FROM k WHERE id = %s", (i,))
                elif op < 0.8:
                    cur.execute("UPDATE t SET n = n + 1 WHERE s = %s", (f"S{i % 25:03d}",))
                elif op < 0.9:
                    cur.execute("INSERT INTO nokey VALUES (%s, %s)", (i % 3, -i))
                else:
                    cur.execute("DELETE FROM nokey WHERE a = %s LIMIT 1", (i % 3,))
                conn.commit()

    spill = tmp_path / "spill"
    options = _options(server, schema, spill)
    decoder = RangeDecoder.from_options(options)
    source = _input(options)
    offset = source.initial_offset()
    target = source.available_now_target()  # as availableNow asks: the run must still pass the snapshot
    assert offset == {"snapshot": {"pending": True}}
    keys = {"k": [0], "t": [0], "nokey": []}
    tables: dict[str, dict[Any, tuple[Any, ...]]] = {}
    batches = 0
    while True:
        if is_snapshot(offset) and (offset["snapshot"].get("pending") or offset["snapshot"]["next"][0] < 3):
            write(4)  # changes while the snapshot runs, between and during chunk reads: all before the last high
        end = source.latest_offset(offset, 20, target)
        if end == offset:
            break
        if batches == 2:  # a restart before the batch commits: a new input re-plans it from the spill
            source = _input(options)
        events = _events(source, decoder, offset, end)
        if is_snapshot(end):
            assert events and isinstance(events[-1], Resolved)
            assert sum(isinstance(e, RowChange) for e in events) >= 20 or end["snapshot"]["next"][0] == 3
        _apply(tables, events, keys)
        source.commit(end)
        offset = end
        batches += 1
        assert batches < 60
    assert batches >= 5
    offset = _run_again(source, decoder, offset, tables, keys)
    assert HANDED_OVER[0] >= 1, "the binlog after the snapshot went through the hand-over"
    assert not list(spill.iterdir()), "committed chunks are dropped"
    assert "handover" not in offset
    with server.connect(database=schema) as conn, conn.cursor() as cur:
        for table, idx in keys.items():
            cur.execute(f"SELECT * FROM {table}")
            upstream = cur.fetchall()
            got = sorted(tables[table].values(), key=repr)
            if not idx:
                got = sorted((image for image, n in tables[table].values() for _ in range(n)), key=repr)
            want = sorted((tuple(Decimal(v) if isinstance(v, Decimal) else v for v in r) for r in upstream), key=repr)
            assert got == want, (table, set(got) - set(want), set(want) - set(got), offset)


def test_snapshot_options_are_checked(mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="snapshot must be one of"):
        _input({"input": "binlog", "path": str(tmp_path), "snapshot": "sometimes"})
    tmp_path.joinpath("binlog.000001").write_bytes(b"\xfebin")
    with pytest.raises(ConfigError, match="needs a live source"):
        _input({"input": "binlog", "path": str(tmp_path), "snapshot": "initial"})


def test_snapshots_on_demand_read_chunks_of_their_own_size() -> None:
    """2048 rows unless said (the live stream waits for each chunk), never more than snapshotChunkSize."""
    assert SnapshotOptions.parse({}).on_demand_chunk_size == DEFAULT_ON_DEMAND_CHUNK_SIZE == 2048
    assert SnapshotOptions.parse({}).chunk_size == 8192
    assert SnapshotOptions.parse({"snapshotchunksize": "50"}).on_demand_chunk_size == 50
    assert SnapshotOptions.parse({"snapshotondemandchunksize": "9000"}).on_demand_chunk_size == 9000
    with pytest.raises(ConfigError, match="snapshotOnDemandChunkSize"):
        SnapshotOptions.parse({"snapshotondemandchunksize": "-1"})


def test_config_snapshot_keys_and_defaults() -> None:
    from changefeed.config import parse_config  # noqa: PLC0415

    base = 'sink-uri = "file:///x"\n[source]\ntype = "mysql"\nurl = "mysql://cdc:pw@db:3306"\n'
    opts = parse_config(base).source.data_source_options()
    assert opts["snapshot"] == "initial"  # Debezium's default: a newcomer gets a copy
    assert "snapshotChunkSize" not in opts
    started = parse_config(base + 'start-position = "binlog.000002:4"\n').source
    assert started.snapshot_mode == "never" and "snapshot" not in started.data_source_options()
    tuned = parse_config(base + 'snapshot = "when-needed"\nsnapshot-chunk-size = 100\nsnapshot-parallelism = 2\n')
    assert tuned.source.data_source_options() | {"password": ""} == {
        "input": "binlog",
        "url": "mysql://cdc@db:3306",
        "password": "",
        "snapshot": "when-needed",
        "snapshotChunkSize": "100",
        "snapshotParallelism": "2",
    }
    assert parse_config(base + 'snapshot = "never"\n').source.data_source_options().get("snapshot") is None
    # A snapshot on demand (`changefeed snapshot`) in a changefeed that took none at start reads the
    # configured chunks too (they used to be dropped with the initial mode "never": 8192-row chunks).
    later = parse_config(base + 'start-position = "binlog.000002:4"\nsnapshot-chunk-size = 50\n').source
    assert later.snapshot_mode == "never" and later.data_source_options()["snapshotChunkSize"] == "50"
    on_demand = parse_config(base + "snapshot-on-demand-chunk-size = 512\n").source.data_source_options()
    assert on_demand["snapshotOnDemandChunkSize"] == "512" and "snapshotChunkSize" not in on_demand
    with pytest.raises(ConfigError, match="positive"):
        parse_config(base + "snapshot-on-demand-chunk-size = 0\n")
    with pytest.raises(ConfigError, match="drop start-position"):
        parse_config(base + 'snapshot = "initial"\nstart-position = "latest"\n')
    with pytest.raises(ConfigError, match="snapshot must be one of"):
        parse_config(base + 'snapshot = "always"\n')
    with pytest.raises(ConfigError, match="positive"):
        parse_config(base + "snapshot-chunk-size = 0\n")
    with pytest.raises(ConfigError, match=r"unknown|snapshot"):
        parse_config('sink-uri = "file:///x"\n[source]\npath = "/b"\nsnapshot = "initial"\n')


@pytest.mark.parametrize("shared", [False, True], ids=["chunks-in-partitions", "chunk-files"])
def test_snapshot_batches_are_bounded_in_bytes(
    mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path, shared: bool
) -> None:
    """Wide rows: a batch stops at maxBytesPerTrigger bytes of chunk data (rounds of snapshotParallelism chunks),
    not at maxEventsPerTrigger rows alone; the batches still add up to the table. With snapshotDirShared
    (local mode) a partition names its chunk's spill file instead of carrying the chunk."""
    server = mariadb_factory()
    schema = "snapbytes"
    wide = "x" * 2000
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(f"CREATE TABLE {schema}.w (id INT PRIMARY KEY, pad TEXT)")
        cur.executemany(f"INSERT INTO {schema}.w VALUES (%s, %s)", [(i, f"{i}{wide}") for i in range(100)])
        conn.commit()
        cur.execute("RESET MASTER")
    spill = tmp_path / "spill"
    options = _options(server, schema, spill, snapshotChunkSize="10", snapshotParallelism="2", maxBytesPerTrigger="30k")
    options["snapshotDirShared"] = str(shared).lower()
    decoder = RangeDecoder.from_options(options)
    source = _input(options)
    offset = source.initial_offset()
    tables: dict[str, dict[Any, tuple[Any, ...]]] = {}
    sizes: list[int] = []
    while is_snapshot(offset) and not offset["snapshot"].get("done"):
        end = source.latest_offset(offset, 10_000, None)  # the row limit alone would take the table at once
        if end == offset:
            break
        sizes.append(sum(p.stat().st_size for p in spill.iterdir()))
        parts = list(source.partitions(offset, end, source.opts.changelog(None)))
        carried = [(p.chunk is not None, bool(p.chunk_files)) for p in parts]  # type: ignore[attr-defined]
        # shared: the files' names, all of a batch's in one partition (output=ranges); else each chunk in its own
        assert carried == ([(False, True)] if shared else [(True, False)] * 2)
        _apply(tables, _events(source, decoder, offset, end), {"w": [0]})
        source.commit(end)
        offset = end
    # 100 rows of ~2.4 KB of JSONL, 10 to a chunk, 2 chunks a round: one round passes 30 KB, so a
    # batch holds 2 chunks (20 rows) and the table takes 5 batches.
    assert len(sizes) == 5, sizes
    assert max(sizes) < 2 * 10 * 2600, sizes
    assert sorted(tables["w"]) == [(i,) for i in range(100)]
    assert all(row[1] == f"{row[0]}{wide}" for row in tables["w"].values())


def _drain(source: BinlogInput, decoder: RangeDecoder, offset: dict[str, Any]) -> tuple[dict[str, Any], list[Event]]:
    """Every micro-batch from ``offset`` until the input has nothing more, as Spark would run them."""
    events: list[Event] = []
    target = source.available_now_target()
    for _ in range(60):
        end = source.latest_offset(offset, 1000, target)
        if end == offset:
            return offset, events
        events += _events(source, decoder, offset, end)
        source.commit(end)
        offset = end
    raise AssertionError("the input did not come to an end")


def test_when_needed_snapshots_only_when_the_position_is_gone(
    mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path
) -> None:
    """``snapshot=when-needed`` (Debezium's word): a start position the server still has streams from there;
    one it purged (also a resumed checkpoint's) begins with a snapshot of the table, then the binlog."""
    server = mariadb_factory()
    schema = "snapneed"
    with server.connect() as conn, conn.cursor() as cur:
        keyed_table(cur, schema, 30)
        conn.commit()
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.executemany(f"INSERT INTO {schema}.k VALUES (%s, 'late')", [(i,) for i in range(30, 35)])
        conn.commit()
    options = _options(server, schema, tmp_path / "spill", snapshot="when-needed", startPosition=f"{file}:{pos}")
    decoder = RangeDecoder.from_options(options)
    present = _input(options)
    first = present.initial_offset()
    assert not is_snapshot(first) and first["file"] == file
    _, events = _drain(present, decoder, first)
    assert sorted(e.new[0] for e in events if isinstance(e, RowChange)) == list(range(30, 35))  # type: ignore[index]

    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        newest = cur.fetchone()[0]
        # MariaDB keeps a file until its binlog checkpoint is written (asynchronously after FLUSH): retry.
        deadline = time.monotonic() + 15
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if [r[0] for r in cur.fetchall()] == [newest]:
                break
            assert time.monotonic() < deadline, "the server kept the purged logs"
            time.sleep(0.1)
        cur.execute(f"INSERT INTO {schema}.k VALUES (99, 'after')")  # in the binlog after the snapshot's start
        conn.commit()
    for start in ("given", "resumed"):
        source = _input(options)
        offset = source.initial_offset() if start == "given" else first  # resumed: a checkpoint's binlog offset
        if start == "given":
            assert offset == {"snapshot": {"pending": True}}
        end, events = _drain(source, decoder, offset)
        assert "handover" not in end and (not is_snapshot(end) or end["snapshot"]["next"] == [1, 0])  # all read
        tables: dict[str, dict[Any, tuple[Any, ...]]] = {}
        _apply(tables, events, {"k": [0]})
        assert sorted(tables["k"]) == [(i,) for i in [*range(35), 99]], start
        assert any(isinstance(e, DDLEvent) and e.table == "k" for e in events), "the snapshot creates the table"
