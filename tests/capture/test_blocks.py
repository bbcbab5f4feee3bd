"""Row blocks give exactly the RowChange path's events: order across tables, DDL, positions, ABSENT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changefeed.capture.binlog import BinlogPosition, file_capture
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.errors import ConfigError
from changefeed.model import DDLEvent, Resolved, RowChange
from changefeed.model.rowblock import RowBlock, expand_blocks
from changefeed.testing import MariaDBServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"


def _blocks(path: Path, start: BinlogPosition, end: BinlogPosition | None = None, **kw: Any) -> list[Any]:
    until = (end.file, end.pos) if end is not None else None
    capture = BlockCapture(lambda at: BinlogFileReader(path, at.file or None, at.pos), start, until=until, **kw)
    return list(capture.blocks())


def _reference(path: Path, start: BinlogPosition, end: BinlogPosition | None = None, keep: Any = None) -> list[Any]:
    """What `range_events` gives: every event but the Resolveds, then the last Resolved."""
    until = (end.file, end.pos) if end is not None else None
    out, last = [], None
    for ev in file_capture(path, start, until=until).events():
        if isinstance(ev, Resolved):
            last = ev
        elif keep is None or keep(ev.schema, ev.table):
            out.append(ev)
    return [*out, last] if last is not None else out


def assert_same_events(want: list[Any], got: list[Any]) -> int:
    """Same events in the same order: ops, commit ts, images (values and their types), positions."""
    rows = list(expand_blocks(got))
    assert [type(e) for e in rows] == [type(e) for e in want]
    for i, (a, b) in enumerate(zip(want, rows, strict=True)):
        if not isinstance(a, RowChange):
            assert a == b, i
            continue
        assert (b.op, b.commit_ts, b.position) == (a.op, a.commit_ts, a.position), i
        assert b.table_schema == a.table_schema, i
        for image_a, image_b in ((a.new, b.new), (a.old, b.old)):
            assert image_b == image_a, i
            assert [type(v) for v in image_b or ()] == [type(v) for v in image_a or ()], i
    return sum(isinstance(e, RowChange) for e in want)


@pytest.mark.parametrize("variant", ["full", "nocrc"])
@pytest.mark.parametrize("block_rows", [1, 3, 65536])
def test_fixture_blocks_expand_to_the_rowchange_events(variant: str, block_rows: int) -> None:
    start = BinlogPosition("binlog.000001", 4)
    got = _blocks(FIXTURES / variant, start, block_rows=block_rows)
    assert assert_same_events(_reference(FIXTURES / variant, start), got) == 23
    blocks = [e for e in got if isinstance(e, RowBlock)]
    assert all(b.num_rows <= max(block_rows, 1) or len(b.segments) == 1 for b in blocks)
    assert isinstance(got[-1], Resolved) and sum(isinstance(e, Resolved) for e in got) == 1


def test_a_range_must_start_at_a_transaction_boundary() -> None:
    with pytest.raises(ConfigError, match="transaction boundary"):
        _blocks(FIXTURES / "full", BinlogPosition("binlog.000001", 4, skip=2))


@pytest.mark.mariadb
def test_interleaved_tables_ddl_and_filtered_tables_real_server(mariadb: MariaDBServer, fresh_db: str) -> None:
    """Two tables written in one transaction alternate; a DDL splits blocks; filtered rows keep numbering."""
    db = fresh_db
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(10,2))")
        cur.execute(f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, n BIGINT UNSIGNED)")
        cur.execute(f"CREATE TABLE `{db}`.skipped (id INT PRIMARY KEY)")
        cur.execute("BEGIN")
        for k in range(6):
            cur.execute(f"INSERT INTO `{db}`.a VALUES ({k}, 'a{k}', {k}.5), ({k + 100}, NULL, NULL)")
            cur.execute(f"INSERT INTO `{db}`.skipped VALUES ({k}), ({k + 100}), ({k + 200})")
            cur.execute(f"INSERT INTO `{db}`.b VALUES ({k}, {2**64 - 1 - k})")
        cur.execute("COMMIT")
        cur.execute(f"UPDATE `{db}`.a SET id = id + 1000 WHERE id = 3")  # a key-changing update
        cur.execute(f"ALTER TABLE `{db}`.a ADD COLUMN extra INT DEFAULT 7")
        cur.execute(f"INSERT INTO `{db}`.a VALUES (50, 'after', 1.25, 8)")
        cur.execute(f"DELETE FROM `{db}`.b WHERE id < 3")
        cur.execute("SHOW MASTER STATUS")
        end = BinlogPosition(*cur.fetchone()[:2])

    def keep(schema: str, table: str) -> bool:
        return schema == db and table != "skipped"

    want = _reference(mariadb.binlog_dir, start, end, keep)
    for block_rows in (2, 65536):
        got = _blocks(mariadb.binlog_dir, start, end, keep=keep, block_rows=block_rows)
        assert assert_same_events(want, got) == 6 * 3 + 1 + 1 + 3
        kinds = [type(e) for e in got]
        assert DDLEvent in kinds and kinds.index(DDLEvent) < len(kinds) - 1
    (block,) = [e for e in _blocks(mariadb.binlog_dir, start, end, keep=keep) if isinstance(e, RowBlock)][:1]
    assert [t.table_schema.table for t in block.tables] == ["a", "b"]
    assert [s.table for s in block.segments[:4]] == [0, 1, 0, 1]  # commit order across tables
    # Rows of the filtered table still count in their transaction's numbering, as in the RowChange path.
    positions = [r.position["skip"] for r in block.rows() if r.position is not None][:4]
    assert positions == [1, 2, 6, 7]
