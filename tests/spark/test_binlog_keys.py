"""The Spark binlog input gives the key flags the non-Spark capture gives: unique keys from the DDL in the stream.

Binlog TABLE_MAPs carry the primary key only. Each range is decoded in a task of its own, so the
planner hands every range the DDL catalog as of its start (files: the DDL since the stream's
start; live: an information_schema snapshot plus the DDL since). A table with a PRIMARY and
UNIQUE keys, one with only a UNIQUE NOT NULL key (the server reports it as the primary key), and
one that gains a UNIQUE key by ALTER TABLE in a later range than its CREATE are written; every
row's Open Protocol column flags and Simple index list must equal the non-Spark capture's, also
when the job fails in the middle and resumes from its checkpoint (a fresh planner).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture, live_capture
from changefeed.model import RowChange
from changefeed.model.rowblock import expand_blocks
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import BinlogInput, SourceOptions
from changefeed.spark.datasource.binlog import RangeDecoder, range_events
from changefeed.testing import MariaDBServer
from tests.capture.test_ddl_keys import _open_flags, _position, _simple_indexes

from .helpers import capture

pytestmark = pytest.mark.mariadb

WORKLOAD = (
    "CREATE TABLE DB.users (id INT PRIMARY KEY, email VARCHAR(40) NOT NULL, code INT,"
    " UNIQUE KEY uk_email (email), UNIQUE KEY uk_code (code))",
    "CREATE TABLE DB.nopk (a INT NOT NULL, b INT, UNIQUE KEY ua (a))",
    "CREATE TABLE DB.later (id INT PRIMARY KEY, v INT)",
    "INSERT INTO DB.users VALUES (1, 'a@x', 1)",
    "INSERT INTO DB.nopk VALUES (1, 10)",
    "INSERT INTO DB.later VALUES (1, 10)",
    "ALTER TABLE DB.later ADD UNIQUE KEY uv (v)",
    "INSERT INTO DB.later VALUES (2, 20)",
    "UPDATE DB.users SET code = 2 WHERE id = 1",
    "INSERT INTO DB.nopk VALUES (2, 20)",
)
ALTER = WORKLOAD.index("ALTER TABLE DB.later ADD UNIQUE KEY uv (v)")
# TiCDC's flags: Binary 1, HandleKey 2, PrimaryKey 8, UniqueKey 16, MultipleKey 32, Nullable 64.
WANT = [
    ("users", {"id": 1 | 2 | 8, "email": 16, "code": 1 | 16 | 64}),
    ("nopk", {"a": 1 | 2 | 16, "b": 1 | 64}),  # the server calls ua the primary key; TiCDC a unique key
    ("later", {"id": 1 | 2 | 8, "v": 1 | 64}),  # before the ALTER
    ("later", {"id": 1 | 2 | 8, "v": 1 | 16 | 64}),
    ("users", {"id": 1 | 2 | 8, "email": 16, "code": 1 | 16 | 64}),
    ("nopk", {"a": 1 | 2 | 16, "b": 1 | 64}),
]


def _write(server: MariaDBServer, db: str, statements: Iterable[str]) -> list[BinlogPosition]:
    """Run each statement as its own transaction (one micro-batch each below); the position after each."""
    after = []
    with server.connect() as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql.replace("DB.", f"`{db}`."))
            conn.commit()
            after.append(_position(server))
    return after


def _keys(rows: Iterable[Any]) -> list[tuple[str, dict[str, int], list[Any], tuple[int, ...]]]:
    """(table, Open Protocol flags, Simple indexes, handle key) of every row change."""
    return [
        (r.table, _open_flags(r), _simple_indexes(r.table_schema), r.table_schema.handle_key)
        for r in expand_blocks(rows)
        if isinstance(r, RowChange)
    ]


class _Recorder:
    """A sink that keeps the flushed events (what a failed batch wrote before its flush is dropped)."""

    kind = "parquet"

    def __init__(self, out: list[Any]) -> None:
        self.out = out
        self.pending: list[Any] = []

    def open(self) -> int:
        return 0

    def write(self, batch: Iterable[Any]) -> None:
        self.pending.extend(expand_blocks(batch))

    def flush(self) -> int:
        self.out.extend(self.pending)
        self.pending = []
        return 0

    def close(self) -> None:
        self.pending = []


Workload = tuple[BinlogPosition, list[BinlogPosition], str]


@pytest.fixture
def workload(mariadb: MariaDBServer, fresh_db: str) -> Workload:
    """The start position, the position after each statement of `WORKLOAD`, and the database."""
    start = _position(mariadb)
    return start, _write(mariadb, fresh_db, WORKLOAD), fresh_db


def _reference(mariadb: MariaDBServer, start: BinlogPosition, end: BinlogPosition, db: str, live: bool) -> list[Any]:
    only = BlockAllowList.build(do_dbs=[db])
    until = (end.file, end.pos)
    if live:
        cap = live_capture(mariadb.url, start, blocking=False, table_filter=only, until=until, track_schema=False)
    else:
        cap = file_capture(mariadb.binlog_dir, start, table_filter=only, until=until)
    return _keys(cap.events())


def _options(mariadb: MariaDBServer, start: BinlogPosition, db: str, live: bool) -> dict[str, str]:
    where = {"url": mariadb.url} if live else {"path": str(mariadb.binlog_dir)}
    return {"input": "binlog", **where, "startPosition": str(start), "filter": f"{db}.*", "eventsPerPartition": "1"}


@pytest.mark.parametrize("live", [False, True], ids=["files", "live"])
def test_every_range_gets_the_keys_as_of_its_start(mariadb: MariaDBServer, workload: Workload, live: bool) -> None:
    """No JVM: the planner's ranges, decoded as executors decode them, and again by a planner that resumed."""
    start, after, db = workload
    end = after[-1]
    want = _reference(mariadb, start, end, db, live)
    assert [(t, f) for t, f, _, _ in want] == WANT
    assert want[2][2] == want[3][2][:-1] and want[3][2][-1]["name"] == "uv"
    assert want[1][3] == (0,)  # nopk: the unique NOT NULL key is the handle key

    options = _options(mariadb, start, db, live)
    source = BinlogInput(SourceOptions.parse(options))
    first = source.initial_offset()
    offset = source.latest_offset(first, None, None)
    parts = source.partitions(first, offset, ChangelogRows())
    assert len(parts) == len(WORKLOAD)  # one range per transaction: the ALTER's range is not the CREATE's
    keep = BlockAllowList.build(do_dbs=[db])
    by_range = [
        ev
        for p in parts
        for ev in range_events(p.source, p.start, p.end, p.time_zone, keys=p.keys)  # type: ignore[attr-defined]
        if not isinstance(ev, RowChange) or keep.allows(ev.schema, ev.table)
    ]
    assert _keys(by_range) == want
    # A range without DDL carries only its tables that have keys besides the primary key.
    assert [t[1] for t in orjson.loads(parts[3].keys)] == ["users"]  # type: ignore[attr-defined]
    assert orjson.loads(parts[ALTER - 1].keys) == []  # type: ignore[attr-defined]
    assert [t[1] for t in orjson.loads(parts[ALTER + 1].keys)] == ["later"]  # type: ignore[attr-defined]

    # The capture job's hand-over (output=ranges), decoded where the encode stage decodes it.
    ranges = BinlogInput(SourceOptions.parse({**options, "output": "ranges"}))
    batches = [b for p in ranges.partitions(first, offset, ChangelogRows()) for b in p.rows()]
    decoder = RangeDecoder.from_options({**options, "output": "ranges"})
    assert _keys(decoder.events(pa.Table.from_batches(batches).to_batches())) == want

    # A planner that resumed from the offset after the third CREATE, before any row (a restart):
    # it rebuilds the catalog there (files: the DDL from the start; live: information_schema).
    mid = {k: v for k, v in offset["splits"][2].items()}
    assert (mid["file"], mid["pos"]) == (after[2].file, after[2].pos)
    resumed = BinlogInput(SourceOptions.parse(options))
    later = resumed.latest_offset(mid, None, None)
    again = resumed.partitions(mid, later, ChangelogRows())
    rows = [ev for p in again for ev in range_events(p.source, p.start, p.end, p.time_zone, keys=p.keys)]  # type: ignore[attr-defined]
    got = _keys(rows)
    if live:  # as live_capture resumed there: information_schema now, which has the ALTER's key already
        assert got == _reference(mariadb, after[2], end, db, live)
        assert got[2][1] == {"id": 1 | 2 | 8, "v": 1 | 16 | 64}
    else:  # the DDL before the resumed position is read again: as if the capture had never stopped
        assert got == want


@pytest.mark.parametrize("live", [False, True], ids=["files", "live"])
def test_capture_job_keys_equal_the_non_spark_capture_across_a_restart(
    spark: SparkSession,
    mariadb: MariaDBServer,
    workload: Workload,
    live: bool,
    tmp_path: Path,
) -> None:
    start, after, db = workload
    end = after[-1]
    options = _options(mariadb, start, db, live)
    # Files: fail on the batch of the first row (after every CREATE, before the ALTER): the resumed
    # planner must rebuild the catalog from the DDL before its start. Live: after the ALTER (the
    # snapshot a restart takes is the server's today, which has the ALTER's key already).
    fail_at = ALTER + 1 if live else 3
    if live:  # what live_capture gives when it restarts at the same position
        want = _reference(mariadb, start, after[fail_at - 1], db, live)
        want += _reference(mariadb, after[fail_at - 1], end, db, live)
    else:
        want = _reference(mariadb, start, end, db, live)
    failed: list[int] = []

    def fail_once(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (fail_at, "written") and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure between write and flush")

    out: list[Any] = []
    checkpoint = tmp_path / "ck"
    with pytest.raises(StreamingQueryException, match="injected failure"):
        capture(spark, _Recorder(out), checkpoint, source=options, max_events=1, available_now=True, hook=fail_once)
    resumed = capture(spark, _Recorder(out), checkpoint, source=options, max_events=1, available_now=True)
    assert failed == [fail_at] and resumed.batch_ids[0] == fail_at
    assert _keys(out) == want
