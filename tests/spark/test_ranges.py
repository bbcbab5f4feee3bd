"""The binlog input's read limits count rows, and its ``ranges`` output hands whole ranges to the next stage.

A server packs many rows into one ROWS event (up to binlog_row_event_max_size, 8 KiB by default),
so limits in events would make a batch or a partition hundreds of times larger than asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from changefeed.capture.binlog import BinlogPosition
from changefeed.errors import ConfigError
from changefeed.model import Resolved, RowChange
from changefeed.model.rowblock import expand_blocks
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import BinlogInput, SourceOptions
from changefeed.spark.datasource.binlog import RANGES_ARROW, RangeDecoder
from changefeed.spark.datasource.options import parse_size
from changefeed.testing import MariaDBServer

from .helpers import changelog_tuples

ROWS_PER_STATEMENT = 500  # one INSERT: a handful of ROWS events of ~100 rows each
STATEMENTS = 6  # each its own transaction


def _position(server: MariaDBServer) -> dict[str, Any]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return BinlogPosition(str(file), int(pos)).to_dict()


@pytest.fixture
def backlog(mariadb: MariaDBServer, fresh_db: str) -> tuple[dict[str, Any], str]:
    """``STATEMENTS`` transactions of ``ROWS_PER_STATEMENT`` rows; returns the start position and the schema."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, note VARCHAR(40), amount DECIMAL(10,2))")
        start = _position(mariadb)
        for s in range(STATEMENTS):
            values = ",".join(
                f"({s * ROWS_PER_STATEMENT + i}, 'row {i} of {s}', {i}.25)" for i in range(ROWS_PER_STATEMENT)
            )
            cur.execute(f"INSERT INTO `{fresh_db}`.t VALUES {values}")
            conn.commit()
    return start, fresh_db


def _input(server: MariaDBServer, schema: str, **options: str) -> BinlogInput:
    opts = {"input": "binlog", "path": str(server.binlog_dir), "filter": f"{schema}.*", **options}
    return BinlogInput(SourceOptions.parse(opts))


def _rows(source: BinlogInput, start: dict[str, Any], end: dict[str, Any]) -> list[list[tuple[Any, ...]]]:
    """The changelog rows of each partition of [start, end)."""
    partitions = source.partitions(start, end, source.opts.changelog(None))
    return [[r for r in changelog_tuples(p.rows()) if r[0] == "row"] for p in partitions]


def test_read_limit_and_partition_size_count_rows_not_events(
    mariadb: MariaDBServer, backlog: tuple[dict[str, Any], str]
) -> None:
    start, schema = backlog
    source = _input(mariadb, schema, eventsPerPartition=str(ROWS_PER_STATEMENT))
    # A limit of 1.5 transactions ends at the first boundary at or past it: two transactions.
    end = source.latest_offset(start, ROWS_PER_STATEMENT * 3 // 2, None)
    parts = _rows(source, start, end)
    assert [len(p) for p in parts] == [ROWS_PER_STATEMENT, ROWS_PER_STATEMENT]  # one transaction each
    # Without a limit: everything, one partition per transaction (the split size is one transaction).
    everything = source.latest_offset(start, None, None)
    assert [len(p) for p in _rows(source, start, everything)] == [ROWS_PER_STATEMENT] * STATEMENTS
    ids = [orjson.loads(r[5])["id"] for p in _rows(source, start, everything) for r in p]
    assert ids == sorted(ids) and len(set(ids)) == ROWS_PER_STATEMENT * STATEMENTS


def test_ranges_output_decodes_in_the_next_stage_to_the_same_events(
    mariadb: MariaDBServer, backlog: tuple[dict[str, Any], str]
) -> None:
    start, schema = backlog
    options = {
        "input": "binlog",
        "path": str(mariadb.binlog_dir),
        "filter": f"{schema}.*",
        "eventsPerPartition": str(2 * ROWS_PER_STATEMENT),
    }
    source = BinlogInput(SourceOptions.parse({**options, "output": "ranges"}))
    end = source.latest_offset(start, None, None)
    partitions = source.partitions(start, end, ChangelogRows())
    assert len(partitions) == STATEMENTS // 2
    batches = [b for p in partitions for b in p.rows()]
    assert all(isinstance(b, pa.RecordBatch) and b.schema == RANGES_ARROW and b.num_rows == 1 for b in batches)
    assert orjson.loads(batches[0].column("start")[0].as_py()) == start  # positions only: no rows, no credentials

    decoded = list(expand_blocks(RangeDecoder.from_options(options).events(iter(batches))))
    rows = [e for e in decoded if isinstance(e, RowChange)]
    assert len(rows) == ROWS_PER_STATEMENT * STATEMENTS
    assert {e.table_schema.schema for e in rows} == {schema}  # the filter applies in the decoding stage
    assert sum(isinstance(e, Resolved) for e in decoded) == len(partitions)  # one per range, ending it
    reference = BinlogInput(SourceOptions.parse(options))
    changelog = reference.opts.changelog(None)
    want = [r for p in reference.partitions(start, end, changelog) for r in changelog_tuples(p.rows()) if r[0] == "row"]
    assert [changelog.row(e) for e in rows] == want


def test_unknown_output_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="output of input binlog must be one of changelog, ranges"):
        SourceOptions.parse({"input": "binlog", "path": str(tmp_path), "output": "tuples"})


def _bytes_between(start: dict[str, Any], end: dict[str, Any]) -> int:
    assert start["file"] == end["file"]  # the backlog is small: one binlog file
    return int(end["pos"]) - int(start["pos"])


def test_bytes_limit_ends_a_batch_at_the_first_boundary_past_it(
    mariadb: MariaDBServer, backlog: tuple[dict[str, Any], str]
) -> None:
    start, schema = backlog
    everything = _input(mariadb, schema).latest_offset(start, None, None)
    per_txn = _bytes_between(start, everything) // STATEMENTS  # transactions of the same size
    # 1.5 transactions of bytes: the batch holds two whole transactions.
    source = _input(mariadb, schema, maxBytesPerTrigger=str(per_txn * 3 // 2), eventsPerPartition="100000")
    end = source.latest_offset(start, None, None)
    assert [len(p) for p in _rows(source, start, end)] == [2 * ROWS_PER_STATEMENT]
    # One byte: still one whole transaction, never an empty batch.
    one = _input(mariadb, schema, maxBytesPerTrigger="1").latest_offset(start, None, None)
    assert sum(len(p) for p in _rows(source, start, one)) == ROWS_PER_STATEMENT
    # With a row limit too, whichever is reached first ends the batch.
    both = source.latest_offset(start, ROWS_PER_STATEMENT // 2, None)
    assert sum(len(p) for p in _rows(source, start, both)) == ROWS_PER_STATEMENT
    # Successive batches cover everything exactly once.
    seen, at, batches = 0, start, 0
    while (at["file"], at["pos"]) != (everything["file"], everything["pos"]) and batches < 2 * STATEMENTS:
        nxt = source.latest_offset(at, None, None)
        seen += sum(len(p) for p in _rows(source, at, nxt))
        at, batches = {k: v for k, v in nxt.items() if k != "splits"}, batches + 1
    assert (seen, batches) == (ROWS_PER_STATEMENT * STATEMENTS, STATEMENTS // 2)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1048576", 1 << 20), ("64m", 64 << 20), ("64MiB", 64 << 20), ("2 GB", 2 << 30), ("512k", 512 << 10)],
)
def test_byte_sizes(text: str, value: int) -> None:
    assert parse_size("maxBytesPerTrigger", text) == value


@pytest.mark.parametrize("text", ["0", "-5", "1.5m", "64 parsecs", "m"])
def test_bad_byte_sizes(text: str) -> None:
    with pytest.raises(ConfigError, match="maxBytesPerTrigger"):
        parse_size("maxBytesPerTrigger", text)


@pytest.mark.parametrize(
    ("kind", "why"), [("kafka", "offsets before any message is read"), ("storage", "whole checkpoint advance")]
)
def test_bytes_limit_is_refused_where_a_batch_cannot_be_bounded_in_bytes(kind: str, why: str, tmp_path: Path) -> None:
    options = {"input": kind, "path": str(tmp_path), "maxBytesPerTrigger": "64m"}
    if kind == "kafka":
        options.update({"bootstrap.servers": "127.0.0.1:9", "topic": "t", "protocol": "open-protocol"})
    with pytest.raises(ConfigError, match=f"maxBytesPerTrigger: input {kind} .*{why}"):
        SourceOptions.parse(options)
