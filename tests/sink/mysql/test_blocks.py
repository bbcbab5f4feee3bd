"""Row blocks through the MySQL sink: the same SQL and the same tables as their `RowChange`s.

Pure tests compare `TableSQL.insert_columns` with `TableSQL.insert` over the same rows' images
(every column type, both string-literal modes, tight statement cuts) and a plan over buffered
block segments with the plan over their expanded rows; the MariaDB tests write one stream as
blocks and as rows into two servers and compare what the servers hold.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import struct
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from changefeed.errors import SinkError
from changefeed.model import ABSENT, Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.arrow import arrow_type
from changefeed.model.gofloat import to_float32
from changefeed.model.rowblock import RowBlock, Segment, TableRows, expand_blocks
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.mysql.columns import BlockRows, expand
from changefeed.sink.mysql.plan import plan_rows, render_ops
from changefeed.sink.mysql.sql import TableSQL, make_literal, quote_table
from changefeed.testing import MariaDBServer

from .helpers import KV_DDL, diff, execute, kv_table, read_model
from .test_types import SPECS, all_types_table, create_all_types

SinkFactory = Callable[..., MySQLSink]
U8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
LITERALS = {"backslash": make_literal(False), "no_backslash_escapes": make_literal(True)}

# ----------------------------------------------------------------------------------- building blocks


def _arrow_value(column: Column, value: Any) -> Any:
    if value is None or value is ABSENT:
        return None
    if column.type_code is TypeCode.DECIMAL and column.length is None and isinstance(value, Decimal):
        return format(value, "f")  # DECIMAL of unknown precision travels as text
    return value


def _runs(bitmaps: list[int]) -> list[tuple[int, int]] | None:
    """Per-row present bitmaps as (bitmap, rows) runs; None when every image is whole."""
    runs: list[tuple[int, int]] = []
    for b in bitmaps:
        if runs and runs[-1][0] == b:
            runs[-1] = (b, runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return runs


def _present(image: tuple[Any, ...] | None, width: int) -> int:
    if image is None:
        return -1
    return sum(1 << i for i, v in enumerate(image) if v is not ABSENT) if ABSENT in image else (1 << width) - 1


def table_rows(
    table: TableSchema,
    rows: list[tuple[Op, tuple[Any, ...] | None, tuple[Any, ...] | None]],
    commit_ts: int = 0,
    types: list[pa.DataType] | None = None,
) -> TableRows:
    """(op, new, old) rows as one `TableRows` in rowblock.py's layout (ABSENT values as runs)."""
    w = len(table.columns)
    types = types or [arrow_type(c) for c in table.columns]
    main = [old if op is Op.DELETE else new for op, new, old in rows]
    before = [old if op is Op.UPDATE else None for op, _, old in rows]
    arrays = [
        pa.array([_arrow_value(c, m[i]) for m in main], t)
        for i, (c, t) in enumerate(zip(table.columns, types, strict=True))
    ]
    arrays.append(pa.array([op.value for op, _, _ in rows], pa.string()))
    arrays.append(pa.array([commit_ts] * len(rows), pa.int64()))
    arrays += [
        pa.array([None if b is None else _arrow_value(c, b[i]) for b in before], t)
        for i, (c, t) in enumerate(zip(table.columns, types, strict=True))
    ]
    names = [c.name for c in table.columns]
    batch = pa.RecordBatch.from_arrays(arrays, [*names, "op", "commit_ts", *(f"before_{n}" for n in names)])
    main_bits = [_present(m, w) for m in main]
    before_bits = [_present(b, w) for b in before]
    every = (1 << w) - 1
    main_runs = None if all(b == every for b in main_bits) else _runs(main_bits)
    before_runs = None if all(b in (-1, every) for b in before_bits) else _runs(before_bits)
    return TableRows(table, batch, main_runs, before_runs)


def entries_of(blocks: list[RowBlock]) -> list[BlockRows]:
    """The buffer entries the sink makes of blocks (no downstream keys to add)."""
    return [BlockRows(b.tables[seg.table], start, seg) for b in blocks for seg, start in b.walk()]


def statements(gen: Iterator[tuple[str, int]]) -> tuple[list[tuple[str, int]], BaseException | None]:
    """What a statement generator yields, and what it raised after that (if anything)."""
    out = []
    try:
        for item in gen:
            out.append(item)
    except Exception as exc:  # the same error must come at the same statement
        return out, exc
    return out, None


# ------------------------------------------------------------------------------------- random values

TEXT_ALPHABET = [
    "a",
    "Z",
    " ",
    "'",
    "''",
    "\\",
    '"',
    "\0",
    "\n",
    "\r",
    "\x1a",
    "\t",
    "%",
    "_",
    "é",
    "日本",
    "😀",
    "\u2028",
]

PURE_COLUMNS = [
    Column("ti", TypeCode.TINYINT),
    Column("tiu", TypeCode.TINYINT, unsigned=True),
    Column("si", TypeCode.SMALLINT),
    Column("siu", TypeCode.SMALLINT, unsigned=True),
    Column("mi", TypeCode.MEDIUMINT),
    Column("miu", TypeCode.MEDIUMINT, unsigned=True),
    Column("i", TypeCode.INT),
    Column("iu", TypeCode.INT, unsigned=True),
    Column("bi", TypeCode.BIGINT),
    Column("biu", TypeCode.BIGINT, unsigned=True),
    Column("f", TypeCode.FLOAT),
    Column("d", TypeCode.DOUBLE),
    Column("dm", TypeCode.DECIMAL, length=65, decimal=30),
    Column("dm2", TypeCode.DECIMAL, length=10, decimal=2),
    Column("dm0", TypeCode.DECIMAL, length=20, decimal=0),
    Column("dmt", TypeCode.DECIMAL),  # precision unknown: Arrow text
    Column("ch", TypeCode.CHAR, length=10, **U8),
    Column("vc", TypeCode.VARCHAR, length=100, **U8),
    Column("tx", TypeCode.BLOB, **U8),
    Column("ltx", TypeCode.LONGBLOB, charset="latin1", collation="latin1_swedish_ci"),
    Column("bn", TypeCode.CHAR, length=4),
    Column("vb", TypeCode.VARCHAR, length=300),
    Column("bl", TypeCode.BLOB),
    Column("dt", TypeCode.DATE),
    Column("dtm", TypeCode.DATETIME, decimal=6),
    Column("ts", TypeCode.TIMESTAMP),
    Column("tm", TypeCode.TIME),
    Column("y", TypeCode.YEAR),
    Column("e", TypeCode.ENUM, elements=("a", "b", "c'd", "e\\f", "日"), **U8),
    Column("e0", TypeCode.ENUM, **U8),  # members unknown: the index as a number
    Column("st", TypeCode.SET, elements=("x", "y", "z"), **U8),
    Column("b1", TypeCode.BIT, length=1),
    Column("b64", TypeCode.BIT, length=64),
    Column("j", TypeCode.JSON),
    Column("g", TypeCode.GEOMETRY),
    Column("vec", TypeCode.VECTOR),
]

_INT_BITS = {TypeCode.TINYINT: 8, TypeCode.SMALLINT: 16, TypeCode.MEDIUMINT: 24, TypeCode.INT: 32, TypeCode.BIGINT: 64}


def _text(rng: random.Random, most: int = 12) -> str:
    return "".join(rng.choice(TEXT_ALPHABET) for _ in range(rng.randint(0, most)))


def random_value(rng: random.Random, c: Column) -> Any:  # noqa: C901  (per-type switch: edge values per MySQL type)
    """A model value of ``c``: edge values often, NULL sometimes."""
    if rng.random() < 0.1:
        return None
    tc = c.type_code
    if tc in _INT_BITS:
        bits = _INT_BITS[tc]
        if c.unsigned:
            return rng.choice([0, 1, 2**bits - 1, rng.randrange(2**bits)])
        return rng.choice(
            [-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, -1, 0, rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))]
        )
    if tc is TypeCode.FLOAT:
        v = rng.choice([-0.0, 0.0, 1.401298464324817e-45, 3.4028234663852886e38, -1.17549435e-38, 16777216.0, 0.1,
                        rng.uniform(-1e6, 1e6), rng.random() * 1e-5,
                        math.ldexp(rng.random(), rng.randint(-140, 127))])  # fmt: skip
        return to_float32(v)
    if tc is TypeCode.DOUBLE:
        return rng.choice([-0.0, 0.0, 5e-324, -1.7976931348623157e308, 1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5,
                           0.1, 123.0, rng.uniform(-1e20, 1e20),
                           math.ldexp(rng.random(), rng.randint(-1070, 1023))])  # fmt: skip
    if tc is TypeCode.DECIMAL and c.length is None and rng.random() < 0.2:
        return rng.choice(["007.50", "1E+3", "-0", ".5", "+1", "0.000", "-0.0", "1e-7"])  # text not in `f` form
    if tc is TypeCode.DECIMAL:
        precision, scale = (c.length, c.decimal or 0) if c.length is not None else (40, rng.randint(0, 12))
        digits = rng.choice([0, 1, rng.randrange(10**precision), 10**precision - 1])
        if rng.random() < 0.2:
            digits = rng.randrange(10 ** rng.randint(1, 3))  # tiny values: Arrow writes them with an exponent
        return Decimal(f"{rng.choice([1, -1]) * digits}E-{scale}")  # exact: scaleb would round
    if tc in (TypeCode.DATE, TypeCode.NEWDATE):
        return rng.choice(["0000-00-00", "9999-12-31", f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-01"])
    if tc in (TypeCode.DATETIME, TypeCode.TIMESTAMP):
        return rng.choice(["0000-00-00 00:00:00", "2038-01-19 03:14:07.999999", "2024-02-29 23:59:59"])
    if tc is TypeCode.TIME:
        return rng.choice(["-838:59:59", "838:59:59.000000", "00:00:00", "-00:00:01.5"])
    if tc is TypeCode.YEAR:
        return rng.choice([0, 1901, 2155, rng.randint(1901, 2155)])
    if tc is TypeCode.ENUM:
        return rng.randint(0, len(c.elements) + 2)  # 0 is '', past the members: the number
    if tc is TypeCode.SET:
        return rng.randrange(2 ** len(c.elements))
    if tc is TypeCode.BIT:
        return rng.randrange(2 ** (c.length or 1))
    if tc is TypeCode.JSON:
        return json.dumps({"k": [rng.randint(-5, 5), 2.5, _text(rng, 4), None, True]}, ensure_ascii=rng.random() < 0.5)
    if tc is TypeCode.GEOMETRY:
        return b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" + struct.pack("<dd", rng.random(), -rng.random())
    if c.is_bytes:
        return rng.choice([b"", b"\x00'\\\"\n\x1a", rng.randbytes(rng.randint(0, 40))])
    if c.charset == "latin1":
        return "".join(rng.choice(["a", "'", "\\", "ñ", "ß", "\0"]) for _ in range(rng.randint(0, 8)))
    return _text(rng)


def random_table(rng: random.Random, name: str = "t") -> TableSchema:
    """``id`` plus every pure-test column in a random order, sometimes a generated column too."""
    columns = list(PURE_COLUMNS)
    rng.shuffle(columns)
    if rng.random() < 0.5:
        columns.insert(rng.randrange(len(columns)), Column("gen", TypeCode.INT, generated=True))
    cols = (Column("id", TypeCode.BIGINT, nullable=False), *columns)
    return TableSchema("db", name, cols, (Index("PRIMARY", ("id",), primary=True),))


def random_image(rng: random.Random, table: TableSchema, key: int) -> tuple[Any, ...]:
    return (key, *(random_value(rng, c) for c in table.columns[1:]))


# ---------------------------------------------------------------------------- insert_columns == insert


def columnar(table: TableSchema) -> TableSQL:
    """A `TableSQL` whose `insert_columns` may not fall back to the row renderer."""
    tsql = TableSQL(table)

    def no_row_path(*args: Any, **kw: Any) -> Any:
        raise AssertionError("insert_columns fell back to insert")

    tsql.insert = no_row_path  # type: ignore[method-assign]
    return tsql


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", sorted(LITERALS))
def test_insert_columns_is_insert_over_the_images(seed: int, mode: str) -> None:
    rng = random.Random(seed)
    literal = LITERALS[mode]
    table = random_table(rng)
    tsql, col = TableSQL(table), columnar(table)
    n = rng.randint(1, 60)
    rows = table_rows(table, [(Op.INSERT, random_image(rng, table, k), None) for k in range(n)])
    # The rows as several pieces (a sliced batch has Arrow offsets not at 0), as a flush holds them.
    cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 3))))
    bounds = [0, *cuts, n]
    pieces = [rows.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    images = [new for p in pieces for new, _ in p.images()]
    for max_rows, max_bytes in ((1000, 1 << 21), (1, 1 << 21), (3, 1 << 21), (1000, 1), (7, 300), (1000, 900)):
        for replace in (False, True):
            for positions in (tsql.writable, tuple(rng.sample(tsql.writable, 3))):
                want = list(tsql.insert(images, positions, replace, literal, max_rows, max_bytes))
                got = list(col.insert_columns(pieces, positions, replace, literal, max_rows, max_bytes))
                assert got == want, (max_rows, max_bytes, replace, positions)
                assert sum(k for _, k in got) == n


def test_insert_columns_edge_values() -> None:
    """Values whose text is easy to get wrong, each against the row path's literal."""
    table = TableSchema(
        "db",
        "edge",
        (
            Column("id", TypeCode.BIGINT, nullable=False),
            Column("d", TypeCode.DOUBLE),
            Column("f", TypeCode.FLOAT),
            Column("dm", TypeCode.DECIMAL, length=65, decimal=30),
            Column("dmt", TypeCode.DECIMAL),
            Column("s", TypeCode.VARCHAR, **U8),
            Column("b", TypeCode.VARCHAR),
            Column("biu", TypeCode.BIGINT, unsigned=True),
            Column("e", TypeCode.ENUM, elements=("it's", "a\\b"), **U8),
        ),
        (Index("PRIMARY", ("id",), primary=True),),
    )
    values = [
        (1, -0.0, to_float32(-0.0), Decimal("1E-30"), "-0.00", "", b"", 2**64 - 1, 0),
        (2, 1e300, to_float32(1.401298464324817e-45), Decimal("-1E-29"), "007.50", "\0\n\r\x1a'\"\\", b"\x00", 0, 1),
        (3, 5e-324, to_float32(3.4e38), Decimal("0"), "1E+3", "日本😀", b"'\\", 2**63, 2),
        (4, 1e16, None, Decimal("-0.000001"), "123456789012345678901234567890.123", "''", bytes(range(256)), None, 3),
        (5, 0.1, 16777216.0, None, None, None, None, 1, None),
    ]
    rows = table_rows(table, [(Op.INSERT, v, None) for v in values])
    tsql = TableSQL(table)
    for literal in LITERALS.values():
        want = list(tsql.insert([im for im, _ in rows.images()], tsql.writable, False, literal))
        assert list(columnar(table).insert_columns([rows], tsql.writable, False, literal)) == want
    assert "-0.0e0" in want[0][0] and "1e+300" in want[0][0] and "X''" in want[0][0]


def test_insert_columns_odd_arrow_types() -> None:
    """Arrow types other than `arrow_type`'s (bool TINYINT, large_string DECIMAL, int64 in one piece
    only) render as their values do on the row path; a type with no literal raises as there."""
    table = TableSchema(
        "db",
        "odd",
        (
            Column("id", TypeCode.INT, nullable=False),
            Column("flag", TypeCode.TINYINT),
            Column("dm", TypeCode.DECIMAL),
            Column("e", TypeCode.ENUM, elements=("a", "b"), **U8),
        ),
        (Index("PRIMARY", ("id",), primary=True),),
    )
    vals = [(1, True, "1.50", -1), (2, False, "x'", 2), (3, None, None, None)]
    types = [pa.int64(), pa.bool_(), pa.large_string(), pa.int8()]
    odd = table_rows(table, [(Op.INSERT, v, None) for v in vals], types=types)
    plain = table_rows(table, [(Op.INSERT, (4, 1, "2", 1), None)])
    tsql = TableSQL(table)
    for literal in LITERALS.values():
        images = [im for t in (odd, plain) for im, _ in t.images()]
        want = list(tsql.insert(images, tsql.writable, True, literal, 2))
        assert list(columnar(table).insert_columns([odd, plain], tsql.writable, True, literal, 2)) == want
    dates = TableSchema("db", "dates", (Column("id", TypeCode.INT), Column("dt", TypeCode.DATE)))
    rows = pa.RecordBatch.from_arrays(
        [pa.array([1]), pa.array([0], pa.date32()), pa.array(["insert"]), pa.array([5], pa.int64()),
         pa.array([None], pa.int64()), pa.array([None], pa.date32())],
        ["id", "dt", "op", "commit_ts", "b_id", "b_dt"],
    )  # fmt: skip
    tsql = TableSQL(dates)
    want = statements(
        tsql.insert([im for im, _ in TableRows(dates, rows).images()], (0, 1), False, LITERALS["backslash"])
    )
    got = statements(tsql.insert_columns([TableRows(dates, rows)], (0, 1), False, LITERALS["backslash"]))
    assert isinstance(want[1], TypeError) and (got[0], repr(got[1])) == (want[0], repr(want[1]))


def test_value_without_literal_raises_where_the_row_path_does() -> None:
    table = TableSchema(
        "db", "nan", (Column("id", TypeCode.INT, nullable=False), Column("d", TypeCode.DOUBLE)),
        (Index("PRIMARY", ("id",), primary=True),),
    )  # fmt: skip
    rows = table_rows(table, [(Op.INSERT, (k, float("nan") if k == 3 else k / 2), None) for k in range(6)])
    tsql = TableSQL(table)
    want = statements(tsql.insert([im for im, _ in rows.images()], tsql.writable, False, LITERALS["backslash"], 2))
    got = statements(tsql.insert_columns([rows], tsql.writable, False, LITERALS["backslash"], 2))
    assert len(want[0]) == 1 and isinstance(want[1], ValueError)
    assert got[0] == want[0] and str(got[1]) == str(want[1]) == "`db`.`nan`: nan has no MySQL literal (columns [])"


# ------------------------------------------------------------------------------ plans over block rows

SMALL_COLUMNS = (
    Column("id", TypeCode.INT, nullable=False),
    Column("v", TypeCode.VARCHAR, **U8),
    Column("n", TypeCode.BIGINT),
    Column("d", TypeCode.DECIMAL),
)
KEYED = TableSchema("db", "k", SMALL_COLUMNS, (Index("PRIMARY", ("id",), primary=True),))
UNIQUE = TableSchema(
    "db", "u", SMALL_COLUMNS, (Index("PRIMARY", ("id",), primary=True), Index("uv", ("v",), unique=True))
)
KEYLESS = TableSchema("db", "bag", SMALL_COLUMNS)


def random_changes(
    rng: random.Random, table: TableSchema, n: int, state: dict[int, tuple[Any, ...]], mixed: bool, next_id: list[int]
) -> list[tuple[Op, tuple[Any, ...] | None, tuple[Any, ...] | None]]:
    """Valid changes against ``state`` (updated): inserts only, or with updates (some partial,
    as MINIMAL images give them, some changing the key) and deletes."""
    out: list[tuple[Op, tuple[Any, ...] | None, tuple[Any, ...] | None]] = []
    for _ in range(n):
        roll = rng.random()
        if not mixed or not state or roll < 0.4:
            k = next_id[0]
            next_id[0] += 1
            new = (k, f"v{k}'\\" if rng.random() < 0.5 else None, rng.randint(-(2**63), 2**63 - 1), Decimal(k) / 4)
            state[k] = new
            out.append((Op.INSERT, new, None))
            continue
        k = rng.choice(sorted(state))
        old = state[k]
        if roll < 0.6:
            del state[k]
            out.append((Op.DELETE, None, old))
        elif roll < 0.8:  # partial images: the key and what changed
            new = (k, ABSENT, old[2] + 1 if old[2] < 2**62 else 0, ABSENT)
            state[k] = (k, old[1], new[2], old[3])
            out.append((Op.UPDATE, new, (k, ABSENT, ABSENT, ABSENT)))
        else:
            nk = next_id[0] if rng.random() < 0.3 else k
            next_id[0] += 1
            new = (nk, None if old[1] is None else f"w{nk}", old[2], Decimal("-0.5"))
            del state[k]
            state[nk] = new
            out.append((Op.UPDATE, new, old))
    return out


def random_blocks(
    rng: random.Random, tables: list[TableSchema], nblocks: int, mixed: bool, ts: int = 100, offset: int = 0
) -> list[RowBlock]:
    """Blocks of interleaved segments over ``tables``, commit ts rising (some shared by two tables),
    Kafka positions (one offset per segment, ``skip`` None)."""
    states: dict[str, dict[int, tuple[Any, ...]]] = {t.table: {} for t in tables}
    next_ids = {t.table: [1] for t in tables}
    blocks = []
    for _ in range(nblocks):
        per_table: list[list[Any]] = [[] for _ in tables]
        segments = []
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(tables))
            if rng.random() < 0.7:
                ts += rng.randint(1, 3)
            offset += 1
            changes = random_changes(
                rng, tables[i], rng.randint(1, 5), states[tables[i].table], mixed, next_ids[tables[i].table]
            )
            per_table[i] += changes
            segments.append(Segment(i, len(changes), ts, {"topic": "cdc", "partition": 0, "offset": offset}, None))
        blocks.append(RowBlock([table_rows(t, rows, 0) for t, rows in zip(tables, per_table, strict=True)], segments))
    return blocks


@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_plan_over_block_rows_renders_like_their_row_changes(safe: bool, mixed: bool, seed: int) -> None:
    rng = random.Random(seed)
    blocks = random_blocks(rng, [KEYED, UNIQUE, KEYLESS], 4, mixed)
    entries = entries_of(blocks)
    rows = list(expand_blocks(blocks))
    assert [(r.op, r.new, r.old, r.commit_ts, r.position) for r in expand(entries)] == [
        (r.op, r.new, r.old, r.commit_ts, r.position) for r in rows
    ]
    ops = plan_rows(entries, safe)
    kinds: dict[str, set[str]] = {}
    for op in ops:
        kinds.setdefault(op.tsql.table.table, set()).add(op.kind)
    for name, kind in kinds.items():
        inserts = all(r.op is Op.INSERT and ABSENT not in r.new for r in rows if r.table == name)
        if not inserts:
            assert not any(k.endswith("_columns") for k in kind)
        elif safe or name == "k":  # whole-row inserts: the columnar statement where the row path has one
            assert kind == {"replace_columns" if safe else "insert_columns"}
        else:  # normal mode, no key or another unique key: in order, row by row
            assert kind == {"insert"}
    if not mixed:
        assert kinds == {"k": {"replace_columns" if safe else "insert_columns"}, **{
            n: {"replace_columns" if safe else "insert"} for n in ("u", "bag")}}  # fmt: skip
    for literal in LITERALS.values():
        for kw in ({}, {"max_rows": 2, "max_bytes": 120}):
            assert list(render_ops(ops, literal, **kw)) == list(render_ops(plan_rows(rows, safe), literal, **kw))


def test_row_changes_and_block_rows_of_one_table_take_the_row_path() -> None:
    blocks = random_blocks(random.Random(7), [KEYED], 2, mixed=False)
    rows = list(expand_blocks(blocks))
    extra = RowChange(Op.INSERT, KEYED, rows[-1].commit_ts + 1, new=(10**6, "x", 1, Decimal(1)))
    entries = [*entries_of(blocks), extra]
    lit = LITERALS["backslash"]
    ops = plan_rows(entries, True)
    assert [op.kind for op in ops] == ["replace"]
    assert list(render_ops(ops, lit)) == list(render_ops(plan_rows([*rows, extra], True), lit))
    # Whole-image inserts again, but one piece is of another shape version: row path too.
    other = TableSchema(KEYED.schema, KEYED.table, KEYED.columns, KEYED.indexes, version=2)
    second = table_rows(other, [(Op.INSERT, (10**6 + 1, None, 2, None), None)])
    entries = [*entries_of(blocks), BlockRows(second, 0, Segment(0, 1, rows[-1].commit_ts + 1))]
    ops = plan_rows(entries, True)
    assert ops and not any(op.kind.endswith("_columns") for op in ops)
    assert list(render_ops(ops, lit)) == list(render_ops(plan_rows(expand(entries), True), lit))


# ------------------------------------------------------------------------------------- on MariaDB


def _all_types_blocks(rng: random.Random, db: str, nblocks: int, ts: int = 100) -> list[RowBlock]:
    """Inserts into all_types (values from test_types' SPECS) and kv, interleaved, in blocks."""
    at, kv = all_types_table(db), kv_table(db)
    # The source does not know kv's UNIQUE KEY (a binlog TABLE_MAP does not carry it): the sink
    # adds it from the downstream, so kv does not batch in normal mode.
    kv = TableSchema(db, "kv", kv.columns, kv.indexes[:1])
    ids = {"all_types": 0, "kv": 0}
    blocks = []
    offset = 0
    for _ in range(nblocks):
        rows: list[list[Any]] = [[], []]
        segments = []
        for j in range(rng.randint(1, 6)):
            i = rng.randrange(2)
            if not j or rng.random() < 0.6:  # blocks end on transaction boundaries
                ts += 1
            offset += 1
            n = rng.randint(1, 4)
            for _ in range(n):
                name = ("all_types", "kv")[i]
                ids[name] += 1
                k = ids[name]
                if i == 0:
                    new = (k, *(rng.choice([s[2], s[3], s[4], None]) for s in SPECS))
                else:
                    new = (
                        k,
                        f"u{k}" if rng.random() < 0.5 else None,
                        rng.randint(-9, 9),
                        rng.choice(["it's", "a\\b", "日本", None]),
                    )
                rows[i].append((Op.INSERT, new, None))
            segments.append(Segment(i, n, ts, {"topic": "cdc", "partition": 1, "offset": offset}, None))
        blocks.append(RowBlock([table_rows(at, rows[0]), table_rows(kv, rows[1])], segments))
    return blocks


def _stats(sink: MySQLSink) -> dict[str, int]:
    """The sink's counters but ``columnar_rows`` (which path rendered the rows is what differs)."""
    return {k: v for k, v in sink.stats.items() if k != "columnar_rows"}


def _setup(servers: tuple[MariaDBServer, ...], db: str) -> None:
    for server in servers:
        create_all_types(server, db)
        execute(server, KV_DDL.format(name=quote_table(db, "kv")))


def _same_tables(a: MariaDBServer, b: MariaDBServer, db: str, *tables: TableSchema) -> None:
    for table in tables:
        got, want = read_model(a, table), read_model(b, table)
        assert got == want and got, table.table
    report = diff(a, b, f"{db}.*")
    assert report.equal, report


def _spy_columns(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(table, rows) of every `TableSQL.insert_columns` call."""
    seen: list[tuple[str, int]] = []
    real = TableSQL.insert_columns

    def spy(self: TableSQL, tables: Any, *args: Any, **kw: Any) -> Any:
        seen.append((self.table.table, tables.num_rows))
        return real(self, tables, *args, **kw)

    monkeypatch.setattr(TableSQL, "insert_columns", spy)
    return seen


@pytest.mark.parametrize("safe", [True, False])
def test_insert_blocks_apply_like_their_rows(
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    db: str,
    make_sink: SinkFactory,
    monkeypatch: pytest.MonkeyPatch,
    safe: bool,
) -> None:
    _setup((mariadb, mariadb_downstream), db)
    blocks = _all_types_blocks(random.Random(int(safe)), db, 12)
    events: list[Any] = [*blocks, Resolved(blocks[-1].commit_ts)]
    options = {"safe_mode": safe, "safe_mode_duration": 0, "batch_rows": 7, "statement_rows": 5}
    seen = _spy_columns(monkeypatch)
    with make_sink(mariadb_downstream, **options) as as_blocks:
        as_blocks.write(events)
    # all_types rendered from columns, kv too in safe mode (in normal mode its downstream UNIQUE KEY
    # keeps its rows in order, one statement per run of rows, as on the row path)
    assert {t for t, _ in seen} == ({"all_types", "kv"} if safe else {"all_types"})
    with make_sink(mariadb, **options) as as_rows:
        as_rows.write(expand_blocks(events))
    assert _stats(as_blocks) == _stats(as_rows)
    assert as_blocks.stats["columnar_rows"] > 0 and as_rows.stats["columnar_rows"] == 0
    assert as_blocks.checkpoint == as_rows.checkpoint
    last = blocks[-1].segments[-1].position
    assert as_blocks.checkpoint is not None and as_blocks.checkpoint.position == last
    _same_tables(mariadb, mariadb_downstream, db, all_types_table(db), kv_table(db))


@pytest.mark.parametrize("safe", [True, False])
def test_mixed_blocks_take_the_row_path(
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    db: str,
    make_sink: SinkFactory,
    monkeypatch: pytest.MonkeyPatch,
    safe: bool,
) -> None:
    """Updates (partial and key-changing), deletes and inserts in blocks, over a table with another
    unique key and one without keys: the same end state as the rows one by one."""
    tables = []
    for schema in (KEYED, UNIQUE, KEYLESS):
        table = TableSchema(db, schema.table, schema.columns, schema.indexes)
        tables.append(table)
        keys = "".join(
            f", {'PRIMARY KEY' if i.primary else 'UNIQUE KEY'} ({','.join(i.columns)})" for i in table.indexes
        )
        for server in (mariadb, mariadb_downstream):
            execute(server, f"CREATE TABLE {quote_table(db, table.table)} (id INT NOT NULL, v VARCHAR(40), "
                            f"n BIGINT, d DECIMAL(30,4){keys}) DEFAULT CHARSET=utf8mb4")  # fmt: skip
    blocks = random_blocks(random.Random(3 + safe), tables, 20, mixed=True)
    events: list[Any] = [*blocks, Resolved(blocks[-1].commit_ts)]
    options = {"safe_mode": safe, "safe_mode_duration": 0, "batch_rows": 9}
    seen = _spy_columns(monkeypatch)
    with make_sink(mariadb_downstream, **options) as as_blocks:
        as_blocks.write(events)
    with make_sink(mariadb, **options) as as_rows:
        as_rows.write(expand_blocks(events))
    assert _stats(as_blocks) == _stats(as_rows) and as_blocks.checkpoint == as_rows.checkpoint
    assert sum(n for _, n in seen) < as_blocks.stats["rows"]
    for table in tables:
        got = read_model(mariadb_downstream, table, order_by="id, v, n, d")
        assert got == read_model(mariadb, table, order_by="id, v, n, d") and got


def test_workers_take_block_rows_as_rows(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    _setup((mariadb, mariadb_downstream), db)
    blocks = _all_types_blocks(random.Random(5), db, 6)
    with make_sink(mariadb_downstream, workers=3, batch_rows=10) as as_blocks:
        as_blocks.write(blocks)
    with make_sink(mariadb, workers=3, batch_rows=10) as as_rows:
        as_rows.write(expand_blocks(blocks))
    assert _stats(as_blocks) == _stats(as_rows) and as_blocks.checkpoint == as_rows.checkpoint
    _same_tables(mariadb, mariadb_downstream, db, all_types_table(db), kv_table(db))


def test_replay_after_the_checkpoint_skips(mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory) -> None:
    _setup((mariadb_downstream,), db)
    blocks = _all_types_blocks(random.Random(11), db, 8)
    half = len(blocks) // 2
    with make_sink(mariadb_downstream, batch_rows=1000) as sink:
        sink.write(blocks[:half])
    first = sink.checkpoint
    assert first is not None and first.commit_ts == blocks[half - 1].commit_ts
    before = read_model(mariadb_downstream, all_types_table(db))
    # Everything again from the start (normal mode: a re-applied insert would fail on its key).
    with make_sink(mariadb_downstream, batch_rows=1000, safe_mode_duration=0) as sink:
        assert sink.load_checkpoint() == first
        sink.write(blocks[:half])
        assert sink.stats["skipped"] == sum(b.num_rows for b in blocks[:half]) and sink.stats["rows"] == 0
        sink.write(blocks[half:])
    assert sink.stats["rows"] == sum(b.num_rows for b in blocks[half:])
    after = read_model(mariadb_downstream, all_types_table(db))
    assert after[: len(before)] == before and len(after) > len(before)


def test_block_straddling_the_checkpoint_is_cut_like_its_rows(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    _setup((mariadb, mariadb_downstream), db)
    seed = 0
    block = _all_types_blocks(random.Random(seed), db, 1)[0]
    while len({s.commit_ts for s in block.segments}) < 3:
        seed += 1
        block = _all_types_blocks(random.Random(seed), db, 1)[0]
    cut = sorted({s.commit_ts for s in block.segments})[1]
    head = RowBlock(block.tables, [s for s in block.segments if s.commit_ts <= cut])
    rows = list(block.rows())
    sinks = []
    for server, first, events in (
        (mariadb_downstream, [head], [block]),
        (mariadb, [r for r in rows if r.commit_ts <= cut], rows),
    ):
        with make_sink(server, safe_mode_duration=0) as sink:
            sink.write(first)
        with make_sink(server, safe_mode_duration=0) as sink:
            sink.write(events)
        sinks.append(sink)
    assert _stats(sinks[0]) == _stats(sinks[1]) and sinks[0].stats["skipped"] > 0
    _same_tables(mariadb, mariadb_downstream, db, all_types_table(db), kv_table(db))


def _first_error(sink: MySQLSink, events: list[Any]) -> SinkError:
    with pytest.raises(SinkError) as exc:
        sink.write(events)
        sink.flush()
    return exc.value


def test_commit_ts_going_backwards_raises(mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory) -> None:
    _setup((mariadb_downstream,), db)
    kv = kv_table(db)
    rows = table_rows(kv, [(Op.INSERT, (k, None, k, None), None) for k in range(4)])
    pos = {"topic": "cdc", "partition": 0, "offset": 1}
    inside = RowBlock([rows], [Segment(0, 2, 20, pos, None), Segment(0, 2, 19, {**pos, "offset": 2}, None)])
    first = RowBlock([rows.slice(0, 2)], [Segment(0, 2, 20, pos, None)])
    second = RowBlock([rows.slice(2, 2)], [Segment(0, 2, 19, {**pos, "offset": 2}, None)])
    for n, events in enumerate(([inside], [first, second])):
        got, want = (
            _first_error(make_sink(mariadb_downstream, changefeed_id=f"back-{n}-{i}"), evs)
            for i, evs in enumerate((events, list(expand_blocks(events))))
        )
        assert str(got) == str(want) and got.where == want.where
        assert "went backwards (19 after 20)" in str(got) and "'offset': 2" in str(got.where)


def test_value_without_literal_fails_like_the_row(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    execute(mariadb_downstream, f"CREATE TABLE {quote_table(db, 'fl')} (id INT PRIMARY KEY, d DOUBLE)")
    table = TableSchema(
        db, "fl", (Column("id", TypeCode.INT, nullable=False), Column("d", TypeCode.DOUBLE)),
        (Index("PRIMARY", ("id",), primary=True),),
    )  # fmt: skip
    rows = table_rows(table, [(Op.INSERT, (1, 0.5), None), (Op.INSERT, (2, float("inf")), None)])
    block = RowBlock([rows], [Segment(0, 2, 30, {"topic": "cdc", "partition": 3, "offset": 9}, None)])
    errors = [
        _first_error(make_sink(mariadb_downstream, safe_mode=True, changefeed_id=f"inf-{i}"), events)
        for i, events in enumerate(([block], list(block.rows())))
    ]
    assert str(errors[0]) == str(errors[1])
    assert "inf has no MySQL literal" in str(errors[0]) and "`fl`" in str(errors[0])
    assert errors[0].where == "commit_ts 30..30, position {'topic': 'cdc', 'partition': 3, 'offset': 9}"
