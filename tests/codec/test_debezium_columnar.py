"""Debezium column renderers: `render_rows` + `append_rendered` give exactly `append_row`'s bytes.

The reference is the per-row encoder on the `RowChange`s of the same rows: over the every-type
binlog fixture (whose per-row bytes are golden, tests/codec/test_debezium.py), over generated
tables of every column type (hypothesis), and over hand-picked edge values of each renderer.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import random
import re
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.capture.binlog import BinlogPosition
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.codec import CodecOptions, Message
from changefeed.codec.debezium import DebeziumDecoder, DebeziumEncoder
from changefeed.codec.debezium.columns import quoted_base64, quoted_strings
from changefeed.codec.debezium.values import date_days, datetime_micros
from changefeed.codec.gojson import jstr
from changefeed.errors import CodecError, MessageTooLargeError
from changefeed.model import Column, Op, TableSchema, TypeCode
from changefeed.model.arrow import arrow_type
from changefeed.model.events import trusted_row
from changefeed.model.gofloat import to_float32
from changefeed.model.rowblock import RowBlock, TableRows
from tests.codec.helpers import BIN, UTF8, pk_table
from tests.strategies import tables, values

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"
CLOCK = 1701326309000
_OPS = (Op.INSERT, Op.UPDATE, Op.DELETE)
_OP_NAMES = {Op.INSERT: "insert", Op.UPDATE: "update", Op.DELETE: "delete"}


def opts(**kw: Any) -> CodecOptions:
    kw.setdefault("clock", lambda: CLOCK)
    kw.setdefault("cluster_id", "default")
    return CodecOptions(protocol="debezium", **kw)


def blocks_of(variant: str = "full", block_rows: int = 65536) -> list[RowBlock]:
    path = FIXTURES / variant
    capture = BlockCapture(
        lambda at: BinlogFileReader(path, at.file or None, at.pos),
        BinlogPosition("binlog.000001", 4),
        block_rows=block_rows,
    )
    return [b for b in capture.blocks() if isinstance(b, RowBlock)]


def fields(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [(m.key, m.value, m.partition, m.topic, m.rows, m.commit_ts) for m in messages]


def per_row(blocks: list[RowBlock], options: CodecOptions) -> list[Message]:
    enc = DebeziumEncoder(options)
    for block in blocks:
        for row in block.rows():
            enc.append_row(row)
    return enc.build()


def columnar(blocks: list[RowBlock], options: CodecOptions) -> tuple[list[Message], int]:
    """As the Kafka sink does it: render_rows per table, append_rendered per row in commit order
    (rows not rendered through append_row); also how many rows were rendered."""
    renderer, enc = DebeziumEncoder(options), DebeziumEncoder(options)
    rendered_rows = 0
    for block in blocks:
        rendered = [renderer.render_rows(t) for t in block.tables]
        rows = list(block.rows())
        located = [(seg, start + j) for seg, start in block.walk() for j in range(seg.rows)]
        for k, (seg, i) in enumerate(located):
            r = rendered[seg.table]
            if r is None or r[1][i] is None:
                enc.append_row(rows[k])
                continue
            key, value = r[0][i], r[1][i]
            assert key is not None and value is not None
            rendered_rows += 1
            enc.append_rendered(key, value, seg.commit_ts, lambda row=rows[k]: row)
    return enc.build(), rendered_rows


def assert_same(blocks: list[RowBlock], options: CodecOptions) -> list[Message]:
    want = per_row(blocks, options)
    got, rendered = columnar(blocks, options)
    assert fields(got) == fields(want)
    assert rendered == sum(b.num_rows for b in blocks)
    return want


OPTION_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tidb-extension": {"enable_tidb_extension": True},
    "no-schema": {"debezium_disable_schema": True},
    "no-old-value": {"output_old_value": False, "enable_tidb_extension": True},
    "tiflow": {"compat": "tiflow", "enable_tidb_extension": True},
    "lz4": {"large_message_handle_compression": "lz4"},
    "zone": {"time_zone": "Asia/Shanghai", "enable_tidb_extension": True},
}


@pytest.mark.parametrize("variant", ["full", "nocrc"])
@pytest.mark.parametrize("option_set", list(OPTION_SETS))
def test_fixture_bytes_equal_the_per_row_path(variant: str, option_set: str) -> None:
    blocks = blocks_of(variant)
    assert sum(b.num_rows for b in blocks) == 23
    assert_same(blocks, opts(**OPTION_SETS[option_set]))


@pytest.mark.parametrize("block_rows", [1, 3, 65536])
def test_fixture_blocks_of_any_size(block_rows: int) -> None:
    assert_same(blocks_of(block_rows=block_rows), opts(enable_tidb_extension=True))


def test_include_start_ts_is_left_to_the_per_row_path() -> None:
    """A block does not carry a row's start ts: not rendered."""
    enc = DebeziumEncoder(opts(debezium_include_start_ts=True))
    assert all(enc.render_rows(t) is None for b in blocks_of() for t in b.tables)


def test_large_records_go_through_the_per_row_path() -> None:
    blocks = blocks_of()
    sizes = sorted(len(m.key or b"") + len(m.value or b"") for m in per_row(blocks, opts()))
    limit = sizes[len(sizes) // 2] + 36
    with pytest.raises(MessageTooLargeError) as per:
        per_row(blocks, opts(max_message_bytes=limit))
    with pytest.raises(MessageTooLargeError) as col:
        columnar(blocks, opts(max_message_bytes=limit))
    assert str(col.value) == str(per.value)


def test_a_refused_value_leaves_the_table_to_the_per_row_path() -> None:
    """A DECIMAL column holding floats (not the model's Decimal): the row path's error decides."""
    ts = pk_table(Column("id", TypeCode.INT, nullable=False), Column("d", TypeCode.DECIMAL, length=10, decimal=2))
    rows = table_rows(ts, [(Op.INSERT, (1, 1.5), None)], types=[pa.int32(), pa.float64()])
    assert DebeziumEncoder(opts()).render_rows(rows) is None


def test_an_empty_table() -> None:
    t = blocks_of()[0].tables[0]
    assert DebeziumEncoder(opts()).render_rows(TableRows(t.table_schema, t.batch.slice(0, 0))) == ([], [])


def test_kafka_blocks_take_the_columnar_path() -> None:
    """The Kafka encoder renders debezium tables a column at a time (not row by row)."""
    from changefeed.sink.kafka.encode import KafkaEncoder  # noqa: PLC0415

    kafka = KafkaEncoder(opts(), "cdc")
    for block in blocks_of():
        plans = [kafka._plan(t, lambda topic: 3) for t in block.tables]
        assert all(p.rendered is not None for p in plans)


# ------------------------------------------------------------------ generated tables and rows


def table_rows(
    ts: TableSchema,
    changes: list[tuple[Op, tuple[Any, ...], tuple[Any, ...] | None]],
    types: list[pa.DataType] | None = None,
    commit_ts: int = 7 << 18,
) -> TableRows:
    """Rows in the block layout: (op, new image or the deleted one, old image of an update)."""
    w = len(ts.columns)
    types = types or [arrow_type(c) for c in ts.columns]
    arrays = [pa.array([main[i] for _, main, _ in changes], types[i]) for i in range(w)]
    arrays += [pa.array([_OP_NAMES[op] for op, _, _ in changes]), pa.array([commit_ts] * len(changes), pa.int64())]
    arrays += [pa.array([(old or (None,) * w)[i] for _, _, old in changes], types[i]) for i in range(w)]
    names = [c.name for c in ts.columns]
    return TableRows(ts, pa.RecordBatch.from_arrays(arrays, [*names, "op", "commit_ts", *(f"o_{n}" for n in names)]))


def reference(rows: TableRows, options: CodecOptions) -> list[tuple[bytes | None, bytes | None]]:
    """`encode_row`'s key and value of each row, uncompressed (as `render_rows` gives them)."""
    enc = DebeziumEncoder(dataclasses.replace(options, large_message_handle_compression="none"))
    out = []
    for (new, old), op, ts in zip(rows.images(), rows.ops.tolist(), rows.commit_ts.tolist(), strict=True):
        msg = enc.encode_row(trusted_row(_OPS[op], rows.table_schema, ts, new, old))
        out.append((msg.key, msg.value))
    return out


def assert_rows_same(rows: TableRows, options: CodecOptions) -> None:
    rendered = DebeziumEncoder(options).render_rows(rows)
    assert rendered is not None
    assert list(zip(*rendered, strict=True)) == reference(rows, options)
    for sliced in (rows.slice(1, rows.num_rows - 2),) if rows.num_rows > 2 else ():
        again = DebeziumEncoder(options).render_rows(sliced)
        assert again is not None
        assert list(zip(*again, strict=True)) == reference(sliced, options)


@st.composite
def table_changes(draw: st.DrawFn) -> tuple[TableSchema, list[tuple[Op, tuple[Any, ...], tuple[Any, ...] | None]]]:
    ts = draw(tables(max_columns=10))

    def image() -> tuple[Any, ...]:
        return tuple(draw(values(c)) for c in ts.columns)

    changes = []
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(_OPS))
        changes.append((op, image(), image() if op is Op.UPDATE else None))
    return ts, changes


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    table_changes(),
    st.sampled_from(list(OPTION_SETS.values())),
)
def test_generated_rows_of_every_type(data: Any, kw: dict[str, Any]) -> None:
    ts, changes = data
    assert_rows_same(table_rows(ts, changes), opts(**kw))


# ------------------------------------------------------------------ edge values, type by type

_F32 = [to_float32(x) for x in (0.0, -0.0, 1.5, 3.4028235e38, 1.17549435e-38, 1e-6, 9.9e-7, 1e21, 123456.79, 1e10)]
_F64 = [0.0, -0.0, 1e-7, 1e-6, 9.99e-7, 1e21, 9.99e20, 1e20, 5e-324, 1.7976931348623157e308, 0.1, 1e10, 123456789.125]
EDGES: list[tuple[Column, list[Any]]] = [
    (Column("c", TypeCode.TINYINT), [-128, 127, 0]),
    (Column("c", TypeCode.TINYINT, unsigned=True), [0, 255]),
    (Column("c", TypeCode.SMALLINT, unsigned=True), [65535]),
    (Column("c", TypeCode.MEDIUMINT), [-(1 << 23), (1 << 23) - 1]),
    (Column("c", TypeCode.INT, unsigned=True), [0, (1 << 32) - 1]),
    (Column("c", TypeCode.BIGINT), [-(1 << 63), (1 << 63) - 1]),
    (Column("c", TypeCode.BIGINT, unsigned=True), [0, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]),
    (Column("c", TypeCode.YEAR), [0, 1901, 2155]),
    (Column("c", TypeCode.FLOAT), [*_F32, math.nan, math.inf, -math.inf]),
    (Column("c", TypeCode.FLOAT, length=5, decimal=2), [to_float32(5.61), to_float32(-1e30)]),
    (Column("c", TypeCode.DOUBLE), [*_F64, *(-x for x in _F64), math.nan, math.inf]),
    (
        Column("c", TypeCode.DECIMAL, length=65, decimal=30),
        [Decimal("0E-30"), Decimal("1E-30"), Decimal("-1.5E-29"), Decimal("9" * 35 + "." + "9" * 30), Decimal("0.1")],
    ),
    (Column("c", TypeCode.DECIMAL, length=20, decimal=0), [Decimal(10**20 - 1), Decimal(-(10**19)), Decimal(0)]),
    (Column("c", TypeCode.DECIMAL, length=10, decimal=2), [Decimal("1.50"), Decimal("-0.01"), Decimal("12345678.90")]),
    (
        Column("c", TypeCode.DATE),
        [
            "2023-02-01",
            "0069-01-01",
            "0070-01-01",
            "0099-12-31",
            "0100-03-01",
            "0000-00-00",
            "2023-02-30",
            "2024-02-29",
            "2023-02-29",
            "1969-12-31",
            "0001-01-01",
            "9999-12-31",
            "2023-13-01",
            "2023-00-10",
        ],
    ),
    (Column("c", TypeCode.DATE, nullable=False), ["0000-00-00", "2023-02-30", "2023-04-31", "2000-01-01"]),
    *[
        (
            Column("c", TypeCode.DATETIME, decimal=fsp),
            [
                "2023-02-01 12:34:56" + ("." + "123456"[:fsp] if fsp else ""),
                "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else ""),
                "1969-12-31 23:59:59" + ("." + "9" * fsp if fsp else ""),
                "0050-06-15 01:02:03" + ("." + "5" * fsp if fsp else ""),
                "2023-02-29 00:00:00" + ("." + "1" * fsp if fsp else ""),
                "9999-12-31 23:59:59" + ("." + "9" * fsp if fsp else ""),
                "1000-01-01T00:00:00" + ("." + "0" * fsp if fsp else ""),
            ],
        )
        for fsp in range(7)
    ],
    (Column("c", TypeCode.DATETIME, decimal=3, nullable=False), ["0000-00-00 00:00:00.000", "2023-02-30 00:00:00.000"]),
    (Column("c", TypeCode.DATETIME, decimal=2), ["2023-02-01 12:34:56.5", "2023-02-01 12:34:56.25"]),  # odd widths
    (
        Column("c", TypeCode.TIMESTAMP, decimal=3),
        ["2023-02-01 12:34:56.100", "0000-00-00 00:00:00.000", "1970-01-01 00:00:00.000"],
    ),
    (Column("c", TypeCode.TIME, decimal=6), ["-12:34:56.123456", "838:59:59.000000", "00:00:00.000000"]),
    (Column("c", TypeCode.BIT, length=1), [0, 1]),
    (Column("c", TypeCode.BIT, length=12), [0, 4095, 16]),
    (Column("c", TypeCode.ENUM, elements=("a", 'b"', "x,y"), **UTF8), [0, 1, 2, 3, 4, 1 << 40]),
    (Column("c", TypeCode.SET, elements=("a", "b", "c"), **UTF8), [0, 5, 7, 8]),
    (Column("c", TypeCode.JSON), ['{"a": [1, "\\u2028"]}', "null"]),
    (Column("c", TypeCode.VECTOR), ["[1,2.5]"]),
    (
        Column("c", TypeCode.VARCHAR, **UTF8),
        ["", "\x00\x01\x08\x09\x0a\x0c\x0d\x1f\x7f", '"\\', "<&>\u2028\u2029", "é日本😀", "\\b\\f", "plain"],
    ),
    (Column("c", TypeCode.BLOB, **UTF8), ["t" * 1000, "\x1b[0m"]),
    (Column("c", TypeCode.CHAR, **BIN, length=4), [b"ab\0\0", b"", b"\xff\xfe\xfd\xfc"]),
    (Column("c", TypeCode.MEDIUMBLOB, **BIN), [b"", b"a", b"ab", b"abc", b"abcd", bytes(range(256))]),
    (Column("c", TypeCode.GEOMETRY), [b"\xe6\x10\x00\x00" + base64.b64decode("AQEAAAAAAAAAAADwPwAAAAAAAABA")]),
]
DEFAULTS: list[tuple[Column, list[Any]]] = [
    (Column("c", TypeCode.INT, default="7"), [1]),
    (Column("c", TypeCode.VARCHAR, default='x"y', **UTF8), ["a"]),
    (Column("c", TypeCode.DATETIME, decimal=3, default="CURRENT_TIMESTAMP(3)"), ["2023-02-01 12:34:56.789"]),
    (Column("c", TypeCode.DATETIME, default="2020-01-02 03:04:05"), ["2023-02-01 12:34:56"]),
    (Column("c", TypeCode.TIMESTAMP, default="2020-01-02 03:04:05"), ["2023-02-01 12:34:56"]),
    (Column("c", TypeCode.DATE, default="2020-01-02"), ["2023-02-01"]),
    (Column("c", TypeCode.ENUM, elements=("a", "b"), default="b", **UTF8), [1]),
    (Column("c", TypeCode.BIT, length=3, default="b'101'"), [2]),
    (Column("c", TypeCode.DECIMAL, length=10, decimal=2, default="1.25"), [Decimal("2.50")]),
]


@pytest.mark.parametrize(("col", "edge"), EDGES + DEFAULTS, ids=lambda x: str(x)[:48])
@pytest.mark.parametrize("kw", [{"enable_tidb_extension": True}, {"time_zone": "America/New_York"}])
def test_edge_values(col: Column, edge: list[Any], kw: dict[str, Any]) -> None:
    ts = pk_table(Column("id", TypeCode.INT, nullable=False), col)
    rng = random.Random(len(edge))
    vals: list[Any] = [*edge, *([None] if col.nullable else [])]
    changes: list[tuple[Op, tuple[Any, ...], tuple[Any, ...] | None]] = []
    for i, v in enumerate(vals):
        other = vals[rng.randrange(len(vals))]
        changes += [(Op.INSERT, (i, v), None), (Op.UPDATE, (i, other), (i, v)), (Op.DELETE, (i, v), None)]
    assert_rows_same(table_rows(ts, changes), opts(**kw))


def test_strings_and_bytes_escape_as_the_per_value_renderers() -> None:
    rng = random.Random(11)
    alphabet = [chr(c) for c in range(0x80)] + ["\u2028", "é", "€", "😀", "\ufeff"]
    texts: list[str | None] = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(3000)]
    texts += [None, ""]
    arr = pa.array(texts, pa.string())
    for sliced, want in ((arr, texts), (arr.slice(7, 1500), texts[7:1507])):
        assert quoted_strings(sliced).to_pylist() == [None if t is None else jstr(t) for t in want]
    blobs: list[bytes | None] = [rng.randbytes(rng.randrange(10)) for _ in range(3000)] + [None, b""]
    barr = pa.array(blobs, pa.binary())
    for bsliced, bwant in ((barr, blobs), (barr.slice(5, 2000), blobs[5:2005])):
        got = quoted_base64(bsliced).to_pylist()
        assert got == [None if b is None else b'"' + base64.b64encode(b) + b'"' for b in bwant]


# ------------------------------------------------------------------ the decoder's repeated-tail path


@pytest.mark.parametrize("option_set", ["default", "tidb-extension", "no-old-value", "zone"])
def test_a_long_lived_decoder_reads_like_fresh_ones(option_set: str) -> None:
    """The schema tail a decoder remembers (in place, for the last table) changes no event:
    a stream of several tables' messages decodes as each message alone does, also when a
    message's head is hostile next to a remembered tail."""
    options = opts(**OPTION_SETS[option_set])
    messages = per_row(blocks_of(), options)
    messages += messages[::-1]
    first = messages[0]
    assert first.value is not None
    cut = first.value.rfind(b',"schema":')
    messages.append(Message(first.key, first.value[:cut] + b',"schema":[]' + first.value[cut:]))
    dec = DebeziumDecoder(options)
    for i, msg in enumerate(messages):
        assert dec.decode(msg) == DebeziumDecoder(options).decode(msg), i
    with pytest.raises(CodecError):
        dec.decode(Message(first.key, b'{"payload":{"op":"c"' + first.value[cut:]), "w")
    with pytest.raises(CodecError):
        dec.decode(Message(first.key, first.value[cut:]), "w")


# ------------------------------------------------------------------ the per-row temporal fast paths

_DT = re.compile(r"(\d{1,4})-(\d{1,2})-(\d{1,2})[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?")
_D = re.compile(r"(-?\d{1,4})-(\d{1,2})-(\d{1,2})")


def _year(y: int) -> int:
    return y + 2000 if y < 70 else y + 1900 if y < 100 else y


def _pattern_micros(text: str) -> int | type[ValueError] | None:
    """The rule by the pattern alone (debezium.md §6 DATETIME): the reference of the fast path."""
    m = _DT.fullmatch(text)
    if m is None:
        return ValueError
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac = int((m.group(7) or "").ljust(6, "0"))
    if mo == 0 or d == 0:
        return None
    try:
        dt = datetime(_year(y), mo, d, h, mi, s, frac)
    except ValueError:
        return None
    return (dt - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def _pattern_days(text: str) -> int | type[ValueError] | None:
    m = _D.fullmatch(text)
    if m is None:
        return ValueError
    y, mo, d = (int(g) for g in m.groups())
    if mo == 0 or d == 0:
        return None
    try:
        return (date(_year(y), mo, d) - date(1970, 1, 1)).days
    except ValueError:
        return None


def _outcome(fn: Any, text: str) -> Any:
    try:
        return fn(text)
    except ValueError:
        return ValueError


_PIECES = st.sampled_from(["0", "1", "2", "9", "00", "02", "12", "13", "24", "29", "30", "31", "60", "69", "99"])


@settings(max_examples=2000, deadline=None)
@given(
    st.one_of(
        st.builds(
            lambda y, mo, d, sep, h, mi, s, frac: f"{y}-{mo}-{d}{sep}{h}:{mi}:{s}{frac}",
            st.sampled_from(["0000", "0001", "0069", "0070", "0099", "0100", "1969", "2000", "2023", "2024", "9999"]),
            _PIECES,
            _PIECES,
            st.sampled_from([" ", "T", "X", "  "]),
            _PIECES,
            _PIECES,
            _PIECES,
            st.sampled_from(["", ".", ".5", ".25", ".123", ".1234", ".123456", ".1234567", "Z", "+05:00", ".1Z"]),
        ),
        st.text(alphabet="0123456789-: .T+Z", max_size=27),
    )
)
def test_datetime_and_date_fast_paths_read_as_the_pattern(text: str) -> None:
    assert _outcome(datetime_micros, text) == _pattern_micros(text)
    assert _outcome(date_days, text[:10]) == _pattern_days(text[:10])
