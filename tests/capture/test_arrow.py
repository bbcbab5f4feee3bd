"""The Arrow batch path agrees with the RowChange path on every value, op, commit ts and range."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture
from changefeed.capture.binlog.arrow import ArrowCapture, read_range_arrow
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.errors import ConfigError
from changefeed.model.arrow import arrow_type
from changefeed.model.events import Event, Resolved, RowChange
from changefeed.model.rowblock import expand_blocks
from changefeed.model.values import ABSENT, decimal_text
from changefeed.testing import MariaDBServer
from tests.capture.test_blocks import assert_same_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"
FULL = FIXTURES / "full"
START = BinlogPosition("binlog.000001", 4)


def _table_key(batch: pa.RecordBatch) -> tuple[str, str, int]:
    meta = batch.schema.metadata
    return meta[b"changefeed.schema"].decode(), meta[b"changefeed.table"].decode(), int(meta[b"changefeed.version"])


def assert_same(events: list[Event], batches: list[pa.RecordBatch], decimal: str = "arrow") -> int:
    """Every row of ``events`` equals the batches' row (per table, in order): values, types, op, ts."""
    want: dict[tuple[str, str, int], list[RowChange]] = defaultdict(list)
    for e in events:
        if isinstance(e, RowChange):
            want[(e.schema, e.table, e.table_schema.version)].append(e)
    got: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for b in batches:
        got[_table_key(b)].extend(b.to_pylist())
    assert got.keys() == want.keys()
    problems = []
    for key, changes in want.items():
        assert len(got[key]) == len(changes), key
        for i, (change, row) in enumerate(zip(changes, got[key], strict=True)):
            assert (row["op"], row["commit_ts"]) == (change.op.value, change.commit_ts), (key, i)
            images = [("", change.image)]
            images.append(("before_", change.old if change.op.value == "update" else (None,) * len(change.image)))
            for prefix, image in images:
                for column, value in zip(change.table_schema.columns, image, strict=True):
                    expected = None if value is ABSENT else value
                    if decimal == "string" and isinstance(value, Decimal):
                        expected = decimal_text(value, column.decimal)
                    actual = row[prefix + column.name]
                    if actual != expected or type(actual) is not type(expected):
                        problems.append(
                            f"{key} row {i} {prefix}{column.name}: arrow {actual!r}, rowchange {expected!r}"
                        )
    assert not problems, "\n".join(problems[:30])
    return sum(len(v) for v in want.values())


@pytest.mark.parametrize("variant", ["full", "nocrc"])
def test_fixture_values_agree_with_rowchange_path(variant: str) -> None:
    events = list(file_capture(FIXTURES / variant).events())
    batches = list(read_range_arrow(FIXTURES / variant, START))
    assert assert_same(events, batches) == 23
    strs = next(b for b in batches if _table_key(b)[1] == "strs")
    types = {f.name: f.type for f in strs.schema}
    assert types["vb"] == pa.binary() and types["vc"] == pa.string() and types["g"] == pa.binary()
    assert types["op"] == pa.string() and types["commit_ts"] == pa.int64() and types["before_e"] == pa.uint64()
    nums = next(b for b in batches if _table_key(b)[1] == "nums")
    assert nums.schema.field("d65").type == pa.decimal256(65, 30)
    assert nums.schema.field("d10").type == pa.decimal128(10, 0) and nums.schema.field("f").type == pa.float32()
    ints = next(b for b in batches if _table_key(b)[1] == "ints")
    # The model's types (model/arrow.py), the one mapping every columnar stage speaks.
    want = {"ti": pa.int8(), "tu": pa.uint8(), "si": pa.int16(), "su": pa.uint16(), "mi": pa.int32()}
    want |= {"mu": pa.uint32(), "i": pa.int32(), "iu": pa.uint32(), "bi": pa.int64(), "bu": pa.uint64()}
    want |= {"b1": pa.uint64(), "b64": pa.uint64(), "y": pa.int16(), "bo": pa.int8()}
    assert {name: ints.schema.field(name).type for name in want} == want
    for table in ("ints", "strs", "nums"):
        batch = next(b for b in batches if _table_key(b)[1] == table)
        schema = next(e.table_schema for e in events if isinstance(e, RowChange) and e.table == table)
        assert [batch.schema.field(c.name).type for c in schema.columns] == [arrow_type(c) for c in schema.columns]


def test_decimal_as_string_and_time_zone() -> None:
    tz = ZoneInfo("Asia/Shanghai")
    events = list(file_capture(FULL, tz=tz).events())
    batches = list(read_range_arrow(FULL, START, tz=tz, decimal="string"))
    assert_same(events, batches, decimal="string")
    nums = next(b for b in batches if _table_key(b)[1] == "nums")
    assert nums.column("d18").to_pylist()[:2] == ["-0.000000001", "123456789.123456789"]


def test_ranges_split_at_savepoints_give_the_same_rows() -> None:
    events = list(file_capture(FULL).events())
    resolved = [e for e in events if isinstance(e, Resolved)]
    cuts = [BinlogPosition.from_dict(r.position) for r in resolved[3::4]]
    bounds = [START, *cuts, None]
    batches = []
    for lo, hi in itertools.pairwise(bounds):
        assert lo is not None
        batches += list(read_range_arrow(FULL, lo, hi, batch_rows=2))
    assert assert_same(events, batches) == 23
    assert max(b.num_rows for b in batches) <= 2 + 1  # flushed once full (a batch may end one event later)
    assert list(read_range_arrow(FULL, cuts[1], cuts[1])) == []  # an empty range


def test_ddl_events_come_between_batches_and_mid_group_starts_are_refused() -> None:
    capture = ArrowCapture(lambda at: BinlogFileReader(FULL, at.file, at.pos), START)
    items = list(capture.read())
    kinds = ["ddl" if getattr(i, "kind", "") == "ddl" else "batch" for i in items]
    assert kinds.count("ddl") >= 8 and kinds.count("batch") >= 7
    # the ints table changes shape three times: its batches split there
    assert [i.num_rows for i in items if isinstance(i, pa.RecordBatch) and _table_key(i)[1] == "ints"] == [6, 1, 1, 1]
    some_row = next(e for e in file_capture(FULL).events() if isinstance(e, RowChange))
    with pytest.raises(ConfigError, match="transaction boundary"):
        list(read_range_arrow(FULL, BinlogPosition.from_dict(some_row.position)))


def _random_rows(rng: random.Random, first: int, n: int) -> str:
    def maybe(text: str, p: float = 0.3) -> str:
        return "NULL" if rng.random() < p else text

    rows = []
    for i in range(first, first + n):
        wide = f"{rng.randrange(-(10**12), 10**12)}.{rng.randrange(10**5):05d}"
        small = f"{rng.randrange(-(10**8), 10**8)}.{rng.randrange(100):02d}"
        dt = f"'{rng.randrange(1000, 9999)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} 01:02:03.4567'"
        ts = f"'{rng.randrange(1980, 2037)}-01-{rng.randrange(1, 29):02d} 04:05:06.789'"
        values = [
            str(i),
            maybe(str(rng.randrange(-(2**63), 2**63))),
            maybe(str(rng.randrange(2**64))),
            maybe(repr(rng.random() * 1e6)),
            maybe(wide),
            maybe(small),
            maybe(repr("v" * rng.randrange(0, 300))),
            maybe(repr("é" * rng.randrange(0, 5))),
            maybe(f"X'{rng.randbytes(rng.randrange(0, 2000)).hex()}'"),
            maybe(dt),
            maybe(ts),
            maybe(f"'-{rng.randrange(838)}:01:02.5'"),
            maybe(repr(rng.choice("abc"))),
            maybe(str(rng.randrange(1901, 2155))),
            maybe(str(rng.randrange(-(2**23), 2**23))),
        ]
        rows.append("(" + ", ".join(values) + ")")
    return ",".join(rows)


@pytest.mark.mariadb
def test_random_nulls_many_batches_against_a_real_server(mariadb: MariaDBServer, fresh_db: str) -> None:
    """Random NULL patterns, wide DECIMAL, latin1, TIME, TIMESTAMP, long blobs, updates and deletes."""
    rng = random.Random(7)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(
            f"CREATE TABLE `{fresh_db}`.r (id INT PRIMARY KEY, b BIGINT, bu BIGINT UNSIGNED, d DOUBLE,"
            " wide DECIMAL(30,5), small DECIMAL(10,2), vc VARCHAR(300), l1 VARCHAR(10) CHARACTER SET latin1,"
            " bl MEDIUMBLOB, dt DATETIME(6), ts TIMESTAMP(3) NULL, t TIME(1), e ENUM('a','b','c'), y YEAR,"
            " m MEDIUMINT)"
        )
        cur.execute("BEGIN")
        for first in range(0, 1500, 300):
            cur.execute(f"INSERT INTO `{fresh_db}`.r VALUES {_random_rows(rng, first, 300)}")
        cur.execute("COMMIT")
        cur.execute(f"UPDATE `{fresh_db}`.r SET vc = NULL, d = 1.5, bl = IF(bl IS NULL, 'x', NULL) WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM `{fresh_db}`.r WHERE id % 7 = 0")
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[:2]
    start, stop = BinlogPosition(str(file), int(pos)), BinlogPosition(str(end[0]), int(end[1]))
    only = BlockAllowList.build(do_dbs=[fresh_db])
    events = list(file_capture(mariadb.binlog_dir, start, table_filter=only, until=(stop.file, stop.pos)).events())
    batches = list(read_range_arrow(mariadb.binlog_dir, start, stop, table_filter=only, batch_rows=400))
    assert assert_same(events, batches) == 1500 + 500 + 215
    assert len(batches) > 5


@pytest.mark.mariadb
def test_minimal_row_images_put_rows_back_in_order(mariadb_factory: Any) -> None:
    """MINIMAL images: several present bitmaps in one batch; absent columns come out NULL."""
    server: MariaDBServer = mariadb_factory(extra_config={"binlog_row_image": "MINIMAL"})
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY, a INT, b VARCHAR(10), c TEXT)")
        cur.execute("INSERT INTO m.t VALUES (1, 10, 'x', NULL), (2, 20, NULL, 'c2'), (3, 30, 'z', 'c3')")
        cur.execute("UPDATE m.t SET a = a + 1 WHERE id < 3")
        cur.execute("DELETE FROM m.t WHERE id = 1")
        cur.execute("INSERT INTO m.t (id) VALUES (4)")
        cur.execute("UPDATE m.t SET b = 'q' WHERE id = 4")
    start = BinlogPosition(str(file), int(pos))
    events = list(file_capture(server.binlog_dir, start).events())
    batches = list(read_range_arrow(server.binlog_dir, start))
    assert assert_same(events, batches) == 8
    (batch,) = batches
    assert batch.column("id").to_pylist() == [1, 2, 3, None, None, 1, 4, None]
    assert batch.column("a").to_pylist() == [10, 20, 30, 11, 21, None, None, None]
    assert batch.column("before_id").to_pylist() == [None, None, None, 1, 2, None, None, 4]
    assert batch.column("b").to_pylist() == ["x", None, "z", None, None, None, None, "q"]
    # Row blocks keep what the batch cannot: the absent columns come back ABSENT, not NULL.
    opener = lambda at: BinlogFileReader(server.binlog_dir, at.file or None, at.pos)  # noqa: E731
    blocks = list(BlockCapture(opener, start).blocks())
    want = [e for e in events if not isinstance(e, Resolved)] + [events[-1]]
    assert assert_same_events(want, blocks) == 8
    rows = [e for e in expand_blocks(blocks) if isinstance(e, RowChange)]
    assert rows[3].new == (ABSENT, 11, ABSENT, ABSENT) and rows[3].old == (1, ABSENT, ABSENT, ABSENT)
    assert rows[5].old == (1, ABSENT, ABSENT, ABSENT)


@pytest.mark.mariadb
def test_wide_table_null_bitmaps_over_8_bytes(mariadb: MariaDBServer, fresh_db: str) -> None:
    """More than 64 columns: the NULL bitmap takes more than 8 bytes (a separate vectorised path)."""
    cols = ", ".join(f"c{i} INT" for i in range(70))
    rng = random.Random(3)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute(f"CREATE TABLE `{fresh_db}`.w (id INT PRIMARY KEY, {cols}, s VARCHAR(5))")
        rows = [
            "(" + ", ".join([str(i), *("NULL" if rng.random() < 0.4 else str(i * j) for j in range(70)), "'s'"]) + ")"
            for i in range(50)
        ]
        cur.execute(f"INSERT INTO `{fresh_db}`.w VALUES {', '.join(rows)}")
        cur.execute(f"UPDATE `{fresh_db}`.w SET c69 = NULL, s = NULL WHERE id % 2 = 0")
    only = BlockAllowList.build(do_dbs=[fresh_db])
    events = list(file_capture(mariadb.binlog_dir, start, table_filter=only).events())
    assert assert_same(events, list(read_range_arrow(mariadb.binlog_dir, start, table_filter=only))) == 75
