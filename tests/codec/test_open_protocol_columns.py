"""Open Protocol column renderers: `render_rows` + `append_rendered` give exactly `append_row`'s bytes.

The reference is the per-row encoder on the `RowChange`s of the same rows. Rows come from the
binlog fixtures (every MySQL type), from a real MariaDB (edge values) and from generated columns
(random bytes, code points, float bit patterns and decimals against the per-value renderers).
"""

from __future__ import annotations

import dataclasses
import math
import random
import struct
from collections import defaultdict
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture
from changefeed.capture.binlog.arrow import read_range_arrow
from changefeed.codec import CodecOptions, Message
from changefeed.codec.base import Encoder
from changefeed.codec.open_protocol import OpenProtocolEncoder
from changefeed.model import Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.rowblock import TableRows
from changefeed.testing import MariaDBServer
from tests.codec.helpers import BIN, UTF8

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"
START = BinlogPosition("binlog.000001", 4)
Pair = tuple[TableRows, list[RowChange]]


def opts(**kw: Any) -> CodecOptions:
    return CodecOptions(protocol="open-protocol", **kw)


def paired(
    binlog_dir: Path,
    start: BinlogPosition = START,
    stop: BinlogPosition | None = None,
    table_filter: BlockAllowList | None = None,
    batch_rows: int = 65536,
    decimal: str = "arrow",
) -> list[Pair]:
    """Each Arrow batch of the range as `TableRows`, with the `RowChange`s of the same rows."""
    until = (stop.file, stop.pos) if stop is not None else None
    changes: dict[tuple[str, str, int], list[RowChange]] = defaultdict(list)
    for e in file_capture(binlog_dir, start, table_filter=table_filter, until=until).events():
        if isinstance(e, RowChange):
            changes[(e.schema, e.table, e.table_schema.version)].append(e)
    taken: dict[tuple[str, str, int], int] = defaultdict(int)
    out = []
    batches = read_range_arrow(
        binlog_dir, start, stop, table_filter=table_filter, batch_rows=batch_rows, decimal=decimal
    )
    for batch in batches:
        meta = batch.schema.metadata
        key = meta[b"changefeed.schema"].decode(), meta[b"changefeed.table"].decode(), int(meta[b"changefeed.version"])
        rows = changes[key][taken[key] : taken[key] + batch.num_rows]
        taken[key] += batch.num_rows
        out.append((TableRows(rows[0].table_schema, batch), rows))
    assert all(taken[k] == len(v) for k, v in changes.items())
    return out


def encode_both(
    options: CodecOptions, pairs: Sequence[Pair], prepare: Callable[[OpenProtocolEncoder], None] = lambda e: None
) -> tuple[list[Message], list[Message], int]:
    """(per-row messages, columnar messages, rows the columnar path rendered) for the same rows."""
    reference, columnar = OpenProtocolEncoder(options), OpenProtocolEncoder(options)
    prepare(reference)
    prepare(columnar)
    rendered_rows = 0
    for rows, changes in pairs:
        for change in changes:
            reference.append_row(change)
        rendered = columnar.render_rows(rows)
        assert rendered is not None
        keys, values = rendered
        for key, value, change in zip(keys, values, changes, strict=True):
            if key is None or value is None:
                columnar.append_row(change)
            else:
                columnar.append_rendered(key, value, change.commit_ts, lambda c=change: c)
                rendered_rows += 1
    return reference.build(), columnar.build(), rendered_rows


def events(messages: list[Message]) -> list[tuple[bytes, bytes]]:
    """Every event's (key, value) in the messages (spec §1.1 framing)."""
    out = []
    for m in messages:
        assert m.key is not None and m.value is not None and m.key[:8] == struct.pack(">Q", 1)
        kp, vp = 8, 0
        while kp < len(m.key):
            (kl,), (vl,) = struct.unpack_from(">Q", m.key, kp), struct.unpack_from(">Q", m.value, vp)
            out.append((m.key[kp + 8 : kp + 8 + kl], m.value[vp + 8 : vp + 8 + vl]))
            kp, vp = kp + 8 + kl, vp + 8 + vl
        assert vp == len(m.value)
    return out


def assert_identical(want: list[Message], got: list[Message]) -> None:
    want_events, got_events = events(want), events(got)
    assert len(got_events) == len(want_events)
    for i, (w, g) in enumerate(zip(want_events, got_events, strict=True)):
        assert g == w, f"event {i}:\n want {w!r}\n got  {g!r}"
    assert [(m.key, m.value, m.rows, m.commit_ts) for m in got] == [(m.key, m.value, m.rows, m.commit_ts) for m in want]


def value_of(column: str, event_value: bytes, image: str = "u") -> Any:
    """The "v" of one column in an event value (parsed JSON)."""
    return orjson.loads(event_value)[image][column]["v"]


# ------------------------------------------------------------------ binlog fixtures: every MySQL type


@pytest.mark.parametrize("variant", ["full", "nocrc"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"output_old_value": False},
        {"delete_only_output_handle_key_columns": True},
        {"max_batch_size": 1},
        {"large_message_handle_compression": "snappy"},
        {"large_message_handle_compression": "lz4"},
    ],
    ids=["default", "no-old-value", "delete-handle-only", "batch-1", "snappy", "lz4"],
)
def test_fixture_rows_match_the_per_row_encoder(variant: str, options: dict[str, Any]) -> None:
    pairs = paired(FIXTURES / variant)
    want, got, rendered = encode_both(opts(**options), pairs)
    assert rendered == sum(len(c) for _, c in pairs) == 23
    assert_identical(want, got)


def test_decimals_read_as_text() -> None:
    """read_range_arrow(decimal="string") carries TiDB's decimal text: quoted as it is."""
    pairs = paired(FIXTURES / "full", decimal="string")
    want, got, rendered = encode_both(opts(), pairs)
    assert rendered == 23
    assert_identical(want, got)


def test_fixture_values_are_the_open_protocol_texts() -> None:
    """A few real bytes of the columnar output (the per-row path agrees, see above)."""
    by_table = {}
    for rows, _ in paired(FIXTURES / "full"):
        rendered = OpenProtocolEncoder(opts()).render_rows(rows)
        assert rendered is not None
        by_table.setdefault(rows.table_schema.table, rendered)
    keys, values = by_table["nums"]
    assert keys[0] == b'{"ts":470634073423872004,"scm":"cf","tbl":"nums","t":1}'
    assert values[0].startswith(b'{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"f":{"t":4,"f":65,"v":1.5},')
    assert b'"d":{"t":5,"f":65,"v":1.7976931348623157e+308}' in values[0]  # float exponent: per-value path
    assert b'"d65":{"t":246,"f":65,"v":"0.000000000000000000000000000000"}' in values[2]
    assert b'"d18":{"t":246,"f":65,"v":"-0.000000001"}' in values[0]  # Arrow writes -1E-9 here
    keys, values = by_table["strs"]
    vb = value_of("vb", values[0])
    assert vb.startswith("\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\a\\b\\t\\n\\v\\f\\r\\x0e") and vb.endswith("\\xfe\\xff")
    assert value_of("emoji", values[0]) == "😀🎉" and value_of("t", values[0]) == "dGV4dA=="
    assert value_of("g", values[0]) == "AAAAAAEBAAAAAAAAAAAA8D8AAAAAAAAAQA=="
    keys, values = by_table["times"]
    assert value_of("dt6", values[0]) == "0000-00-00 00:00:00.000000" and value_of("dt0", values[2]) is None


def test_large_messages_fall_back_to_the_per_row_path() -> None:
    pairs = paired(FIXTURES / "full")
    o = opts(max_message_bytes=1200, large_message_handle_option="handle-key-only")
    want, got, _ = encode_both(o, pairs)
    assert_identical(want, got)
    handle_only = [k for k, _ in events(got) if b'"ohk":true' in k]
    assert handle_only, "some rows should be over the limit"
    assert len(handle_only) < 23


def test_claim_check_references_match(tmp_path: Path) -> None:
    def pin_names(enc: OpenProtocolEncoder) -> None:
        count = iter(range(1000))
        enc.new_claim_check_name = lambda: f"claim-{next(count)}.json"

    store = tmp_path / "claims"
    o = opts(max_message_bytes=1200, large_message_handle_option="claim-check", claim_check_storage_uri=str(store))
    want, got, _ = encode_both(o, paired(FIXTURES / "full"), pin_names)
    assert_identical(want, got)
    refs = [k for k, _ in events(got) if b'"ccl":' in k]
    assert refs and len(list(store.iterdir())) == len(refs)


def test_options_and_tables_left_to_the_per_row_path() -> None:
    rows, _ = paired(FIXTURES / "full")[0]
    assert OpenProtocolEncoder(opts(compat="tiflow")).render_rows(rows) is None
    assert OpenProtocolEncoder(opts(only_output_updated_columns=True)).render_rows(rows) is None
    partitioned = TableRows(dataclasses.replace(rows.table_schema, partitioned=True), rows.batch)
    assert OpenProtocolEncoder(opts()).render_rows(partitioned) is None
    assert OpenProtocolEncoder(opts()).render_rows(rows) is not None


def test_rows_with_partial_images_are_not_rendered() -> None:
    """MINIMAL/NOBLOB images leave columns out: those rows (and only those) come back as None."""
    rows, changes = next(p for p in paired(FIXTURES / "full") if p[0].table_schema.table == "ints")
    every = (1 << rows.width) - 1
    minimal = TableRows(rows.table_schema, rows.batch, main_runs=[(every, 2), (0b1, 2), (every, 2)])
    assert minimal.full().tolist() == [True, True, False, False, True, True]
    rendered = OpenProtocolEncoder(opts()).render_rows(minimal)
    assert rendered is not None
    keys, values = rendered
    assert [k is None for k in keys] == [v is None for v in values] == [False, False, True, True, False, False]
    full = OpenProtocolEncoder(opts()).render_rows(rows)
    assert full is not None
    assert [v for i, v in enumerate(values) if i not in (2, 3)] == [v for i, v in enumerate(full[1]) if i not in (2, 3)]
    updates = TableRows(rows.table_schema, rows.batch, before_runs=[(-1, 4), (every >> 1, 2)])
    rendered = OpenProtocolEncoder(opts()).render_rows(updates)
    assert rendered is not None and [k is None for k in rendered[0]] == [False] * 4 + [True] * 2
    assert len(changes) == 6


def test_encoder_interface_defaults_are_not_columnar() -> None:
    class RowsOnly(Encoder):
        protocol = "open-protocol"

        def append_row(self, row: RowChange) -> None: ...

        def build(self) -> list[Message]:
            return []

        def encode_ddl(self, ddl: Any) -> Message:
            raise NotImplementedError

        def encode_resolved(self, resolved: Any) -> Message | None:
            return None

    rows, changes = paired(FIXTURES / "full")[0]
    enc = RowsOnly()
    assert enc.render_rows(rows) is None
    with pytest.raises(NotImplementedError):
        enc.append_rendered(b"k", b"v", 1, lambda: changes[0])


# ------------------------------------------------------------------ generated columns against the per-value renderers


def _table(*columns: Column) -> TableSchema:
    return TableSchema(
        "gen",
        "t",
        (Column("id", TypeCode.BIGINT, nullable=False), *columns),
        (Index("PRIMARY", ("id",), primary=True),),
    )


def _rows(ts: TableSchema, types: list[pa.DataType], news: list[tuple[Any, ...]], ops: list[Op]) -> Pair:
    """`TableRows` and `RowChange`s of the same images; an update's old image is the next row's image."""
    olds = [(new[0], *news[(i + 1) % len(news)][1:]) for i, new in enumerate(news)]
    changes, main, before = [], [], []
    for i, (op, new, old) in enumerate(zip(ops, news, olds, strict=True)):
        ts_ = 1000 + i // 3
        if op is Op.INSERT:
            changes.append(RowChange(op, ts, ts_, new=new))
        elif op is Op.DELETE:
            changes.append(RowChange(op, ts, ts_, old=new))
        else:
            changes.append(RowChange(op, ts, ts_, new=new, old=old))
        main.append(new)
        before.append(old if op is Op.UPDATE else (None,) * len(new))
    arrays = [pa.array([m[i] for m in main], t) for i, t in enumerate(types)]
    arrays += [pa.array([o.value for o in ops]), pa.array([c.commit_ts for c in changes], pa.int64())]
    arrays += [pa.array([b[i] for b in before], t) for i, t in enumerate(types)]
    names = [c.name for c in ts.columns]
    batch = pa.RecordBatch.from_arrays(arrays, [*names, "op", "commit_ts", *(f"before_{n}" for n in names)])
    return TableRows(ts, batch), changes


def _check_generated(ts: TableSchema, types: list[pa.DataType], values: list[list[Any]], seed: int = 1) -> None:
    rng = random.Random(seed)
    n = len(values[0])
    news = [(i, *(col[i] for col in values)) for i in range(n)]
    ops = [rng.choice([Op.INSERT, Op.INSERT, Op.UPDATE, Op.DELETE]) for _ in range(n)]
    pair = _rows(ts, [pa.int64(), *types], news, ops)
    for options in ({}, {"output_old_value": False}, {"delete_only_output_handle_key_columns": True}):
        want, got, rendered = encode_both(opts(**options), [pair])
        assert rendered == n
        assert_identical(want, got)
    # and in a sliced batch (Arrow offsets not at 0)
    rows, changes = pair
    half = TableRows(ts, rows.batch.slice(n // 3, n // 2))
    want, got, _ = encode_both(opts(), [(half, changes[n // 3 : n // 3 + n // 2])])
    assert_identical(want, got)


_SPECIAL_RUNES = [
    0x80, 0x9F, 0xA0, 0xAD, 0xE9, 0x378, 0x2028, 0x2029, 0x200B, 0xFEFF, 0xE000, 0xF8FF, 0xFFFD, 0xFFFE,
    0x1F600, 0xE0001, 0xF0000, 0x10FFFF, 0x10000, 0x4E2D,
]  # fmt: skip
_BAD_SEQUENCES = [
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80",
    b"\xf5\x80", b"\xff", b"\x80", b"\xe2\x82", b"\xf0\x9f\x98",
]  # fmt: skip


def _random_bytes(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randrange(0, 8)):
        kind = rng.randrange(5)
        if kind == 0:
            parts.append(rng.randbytes(rng.randrange(1, 6)))
        elif kind == 1:
            parts.append(chr(rng.choice(_SPECIAL_RUNES)).encode())
        elif kind == 2:
            parts.append(rng.choice(_BAD_SEQUENCES))
        elif kind == 3:
            parts.append(chr(rng.randrange(0x80, 0x110000)).encode("utf-8", "surrogatepass"))
        else:
            parts.append(bytes([rng.randrange(0, 0x80) for _ in range(rng.randrange(1, 4))]))
    return b"".join(parts)


def _random_text(rng: random.Random) -> str:
    chars = []
    for _ in range(rng.randrange(0, 10)):
        kind = rng.randrange(4)
        if kind == 0:
            chars.append(chr(rng.randrange(0, 0x80)))
        elif kind == 1:
            chars.append(rng.choice('"\\\b\f\n\r\t\x00\x1f\x7f<>&\u2028\u2029'))
        elif kind == 2:
            chars.append(chr(rng.choice(_SPECIAL_RUNES)))
        else:
            code = rng.randrange(0x80, 0x110000)
            chars.append(chr(code) if not 0xD800 <= code <= 0xDFFF else "x")
    return "".join(chars)


def _nulls(rng: random.Random, values: list[Any], p: float = 0.15) -> list[Any]:
    return [None if rng.random() < p else v for v in values]


def test_generated_strings_bytes_and_base64() -> None:
    rng = random.Random(11)
    n = 600
    ts = _table(
        Column("vb", TypeCode.VARCHAR, **BIN),
        Column("bin", TypeCode.CHAR, **BIN),
        Column("vc", TypeCode.VARCHAR, **UTF8),
        Column("tx", TypeCode.BLOB, **UTF8),
        Column("bl", TypeCode.MEDIUMBLOB, **BIN),
        Column("g", TypeCode.GEOMETRY),
        Column("j", TypeCode.JSON),
        Column("dt", TypeCode.DATETIME),
        Column("ascii", TypeCode.VARCHAR, **UTF8),
    )
    texts = [_random_text(rng) for _ in range(n)]
    values = [
        _nulls(rng, [_random_bytes(rng) for _ in range(n)]),
        [_random_bytes(rng) for _ in range(n)],  # no NULL: the quotes stay constant pieces
        _nulls(rng, texts),
        _nulls(rng, texts[::-1]),  # TEXT: base64 of the UTF-8 bytes
        _nulls(rng, [rng.randbytes(rng.randrange(0, 70)) for _ in range(n)]),
        [rng.randbytes(rng.randrange(0, 9)) for _ in range(n)],
        _nulls(rng, [orjson.dumps({"k": t}).decode() for t in texts]),
        _nulls(rng, ["0000-00-00 00:00:00", "2024-02-29 12:34:56.789"] * (n // 2)),
        ["plain ascii text"] * n,
    ]
    types = [pa.binary(), pa.binary(), pa.string(), pa.string(), pa.binary(), pa.binary(), pa.string(), pa.string()]
    _check_generated(ts, [*types, pa.string()], values)


def _float32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def test_generated_floats_every_magnitude() -> None:
    rng = random.Random(5)
    special = [0.0, -0.0, 1.0, -1.5, 0.1, 1e-6, 9.99e-7, 1e-7, 1e15, 1e16, 1e20, 1e21, 1.7976931348623157e308]
    special += [5e-324, 2.2250738585072014e-308, 123456789012345678.0, float("nan"), float("inf"), -float("inf")]
    doubles = special + [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(300)]
    doubles += [rng.uniform(-1e6, 1e6) for _ in range(300)] + [10.0 ** rng.randrange(-12, 25) for _ in range(100)]
    n = len(doubles)
    singles = [_float32(v) if not math.isfinite(v) or abs(v) < 3.4e38 else 3.4028234663852886e38 for v in doubles]
    singles[: n // 3] = [struct.unpack("<f", rng.randbytes(4))[0] for _ in range(n // 3)]
    ts = _table(Column("f", TypeCode.FLOAT), Column("d", TypeCode.DOUBLE), Column("dn", TypeCode.DOUBLE))
    _check_generated(ts, [pa.float32(), pa.float64(), pa.float64()], [singles, doubles, _nulls(rng, doubles[::-1])])


def test_generated_integers_and_decimals() -> None:
    rng = random.Random(9)
    n = 500
    scales = {"d65": (65, 30), "d38": (38, 10), "d10": (10, 0), "d52": (5, 2), "d18": (18, 9)}
    columns = [Column(name, TypeCode.DECIMAL, length=p, decimal=s) for name, (p, s) in scales.items()]

    def decimal(p: int, s: int) -> Decimal:
        digits = rng.choice([1, 2, rng.randrange(1, p + 1), p, s + 1])
        unscaled = rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)
        return Decimal(f"{rng.choice([1, -1]) * unscaled}E-{s}")  # exact: no context rounding

    values: list[list[Any]] = [[decimal(p, s) for _ in range(n)] for p, s in scales.values()]
    values[0][:4] = [Decimal("1E-30"), Decimal("-1.23E-28"), Decimal("0E-30"), Decimal("-" + "9" * 35 + "." + "9" * 30)]
    values = [_nulls(rng, v, 0.1) for v in values]
    types = [
        pa.decimal256(65, 30),
        pa.decimal128(38, 10),
        pa.decimal128(10, 0),
        pa.decimal128(5, 2),
        pa.decimal128(18, 9),
    ]
    columns += [
        Column("bu", TypeCode.BIGINT, unsigned=True),
        Column("bi", TypeCode.BIGINT),
        Column("b64", TypeCode.BIT, length=64),
        Column("y", TypeCode.YEAR),
        Column("s", TypeCode.SET, elements=tuple("abcdefgh")),
        Column("nul", TypeCode.NULL),
    ]
    values += [
        _nulls(rng, [rng.choice([0, (1 << 64) - 1, rng.randrange(1 << 64)]) for _ in range(n)]),
        [rng.choice([-(1 << 63), (1 << 63) - 1, 0, rng.randrange(-(1 << 63), 1 << 63)]) for _ in range(n)],
        [rng.randrange(1 << 64) for _ in range(n)],
        _nulls(rng, [rng.choice([0, 1901, 2155]) for _ in range(n)]),
        [rng.randrange(256) for _ in range(n)],
        [None] * n,
    ]
    types += [pa.uint64(), pa.int64(), pa.uint64(), pa.int64(), pa.int64(), pa.null()]
    _check_generated(_table(*columns), types, values)


def test_columns_of_a_type_arrow_does_not_carry_as_expected_leave_the_table() -> None:
    ts = _table(Column("f", TypeCode.FLOAT))
    rows, _ = _rows(ts, [pa.int64(), pa.float64()], [(1, 1.5)], [Op.INSERT])  # float32 values as float64
    assert OpenProtocolEncoder(opts()).render_rows(rows) is None
    rows, changes = _rows(ts, [pa.int64(), pa.float32()], [(1, 1.5)], [Op.INSERT])
    rendered = OpenProtocolEncoder(opts()).render_rows(rows)
    assert rendered == (
        [b'{"ts":1000,"scm":"gen","tbl":"t","t":1}'],
        [b'{"u":{"id":{"t":8,"h":true,"f":11,"v":1},"f":{"t":4,"f":65,"v":1.5}}}'],
    )
    assert len(changes) == 1


def test_empty_table_rows() -> None:
    ts = _table(Column("s", TypeCode.VARCHAR, **UTF8))
    rows, _ = _rows(ts, [pa.int64(), pa.string()], [], [])
    assert OpenProtocolEncoder(opts()).render_rows(rows) == ([], [])


# ------------------------------------------------------------------ a real MariaDB: edge values


_EDGE_TABLE = """CREATE TABLE `{db}`.edge (
  id INT PRIMARY KEY, vc VARCHAR(64), c CHAR(8), tx TEXT, vb VARBINARY(64), bn BINARY(4), bl BLOB,
  bi BIGINT, bu BIGINT UNSIGNED, ti TINYINT, mu MEDIUMINT UNSIGNED,
  d65 DECIMAL(65,30), dn DECIMAL(12,4), d0 DECIMAL(20,0), f FLOAT, d DOUBLE,
  dt DATETIME(6), da DATE, ts TIMESTAMP(3) NULL, tm TIME(2), y YEAR, j JSON, b BIT(64), b3 BIT(3),
  s SET('a','b','c'), e ENUM('x','y','z')
)"""
_EDGE_ROWS = [
    # id, vc, c, tx, vb, bn, bl, bi, bu, ti, mu, d65, dn, d0, f, d, dt, da, ts, tm, y, j, b, b3, s, e
    "(1, 'say \"hi\" \\\\ back', 'a\\tb', 'line1\\nline2\\r\\0', X'00FF80C280E280A8F09F9880', X'FF', X'', "
    "-9223372036854775808, 18446744073709551615, -128, 16777215, 0.000000000000000000000000000001, -0.0001, "
    "-99999999999999999999, 3.4e38, 1.7976931348623157e308, '0000-00-00 00:00:00', '0000-00-00', NULL, "
    "'-838:59:59', 1901, '{\"k\": \"v\\\\u2028<>&\"}', b'" + "1" * 64 + "', b'101', 'a,c', 'z')",
    "(2, 'U+2028:\u2028 U+2029:\u2029 <>& 😀 中文 é', '', '', X'', X'00000000', X'0102', 0, 0, 0, 0, "
    "-99999999999999999999999999999999999.999999999999999999999999999999, 12345678.9999, 0, -1.17549435e-38, "
    "5e-324, '9999-12-31 23:59:59.999999', '9999-12-31', '2038-01-19 03:14:07.999', '838:59:59.99', 2155, "
    "'[]', b'0', b'0', '', 'x')",
    "(3, CONCAT('ctl:', CHAR(1), CHAR(8), CHAR(12), CHAR(31), CHAR(127)), NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(4, '', 'x', 'é', X'C2A0C2ADEE8080', X'41424344', X'F09F9880', 1, 1, 1, 1, "
    "-0.000000000000000000000000000123, 0.0000, 1, 1e-7, 1e20, '1000-01-01 00:00:00.000001', '2024-02-29', "
    "'1970-01-01 00:00:01', '00:00:00.01', 0, '{\"a\": [1, 2.5, null, true]}', b'1', b'111', 'b', 'y')",
    "(5, 'tab\\there', 'z', 'x', X'5C22', X'7F', X'00', 123456789012, 9223372036854775808, 127, 8388608, "
    "12345.678900000000000000000000000001, -12345678.1234, 12345678901234567890, 0.1, 123456789012345678, "
    "'2020-02-29 12:34:56.5', '2000-01-01', '2000-01-01 00:00:00.5', '-00:00:00.01', 2000, 'null', "
    "b'1" + "0" * 63 + "', b'100', 'a,b,c', NULL)",
]


@pytest.mark.mariadb
def test_edge_values_from_a_real_server(mariadb: MariaDBServer, fresh_db: str) -> None:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00', SESSION sql_mode = ''")
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute(_EDGE_TABLE.format(db=fresh_db))
        cur.execute(f"INSERT INTO `{fresh_db}`.edge VALUES {', '.join(_EDGE_ROWS)}")
        cur.execute(f"UPDATE `{fresh_db}`.edge SET vc = CONCAT(vc, '\u2029'), d65 = -d65, f = -f WHERE id IN (1, 2, 4)")
        cur.execute(f"UPDATE `{fresh_db}`.edge SET vb = NULL, tx = 'now text', j = NULL WHERE id = 3 OR id = 5")
        cur.execute(f"DELETE FROM `{fresh_db}`.edge WHERE id IN (2, 5)")
        cur.execute("SHOW MASTER STATUS")
        stop = BinlogPosition(*cur.fetchone()[:2])
    only = BlockAllowList.build(do_dbs=[fresh_db])
    pairs = paired(mariadb.binlog_dir, start, stop, only, batch_rows=4)
    total = sum(len(c) for _, c in pairs)
    assert total == 5 + 3 + 2 + 2 and len(pairs) > 1
    for options in (
        {},
        {"output_old_value": False},
        {"delete_only_output_handle_key_columns": True},
        {"large_message_handle_compression": "lz4"},
        {"max_message_bytes": 1500, "large_message_handle_option": "handle-key-only"},
    ):
        want, got, rendered = encode_both(opts(**options), pairs)
        assert_identical(want, got)
        assert rendered == total
        if "max_message_bytes" in options:  # updates with both images are over the limit
            assert any(b'"ohk":true' in k for k, _ in events(got))
    keys, values = OpenProtocolEncoder(opts()).render_rows(pairs[0][0]) or ([], [])
    first, second = values[0], values[1]
    assert keys[0] is not None and keys[0].endswith(f',"scm":"{fresh_db}","tbl":"edge","t":1}}'.encode())
    assert first is not None and second is not None
    assert value_of("vc", first) == 'say "hi" \\ back'
    assert b'"v":"say \\"hi\\" \\\\ back"' in first  # json-iterator escapes
    assert value_of("vb", first) == "\\x00\\xff\\x80\\u0080\\u2028😀"  # Go Quote: not IsPrint -> \\u
    assert b'"bu":{"t":8,"f":193,"v":18446744073709551615}' in first
    assert value_of("d65", first) == "0.000000000000000000000000000001" and value_of("dn", first) == "-0.0001"
    assert value_of("d0", first) == "-99999999999999999999" and value_of("f", first) == 3.4e38
    assert value_of("dt", first) == "0000-00-00 00:00:00.000000" and value_of("da", first) == "0000-00-00"
    assert value_of("b", first) == (1 << 64) - 1 and value_of("s", first) == 5 and value_of("e", first) == 3
    assert value_of("tx", first) == "bGluZTEKbGluZTINAA=="  # base64 of the TEXT bytes
    assert "\u2028 U+2029:\u2029 <>& 😀" in value_of("vc", second)
    assert "\u2028".encode() in second and b"<>&" in second  # ticdc: no HTML or U+2028 escaping
    assert value_of("d", second) == 5e-324 and value_of("vb", second) == ""
    third = values[2]
    assert third is not None and b'"vc":{"t":15,"f":64,"v":"ctl:\\u0001\\u0008\\u000c\\u001f\x7f"}' in third
    assert all(value_of(c, third) is None for c in ("c", "tx", "vb", "d65", "j", "b"))


def test_render_is_whole_columns_not_python_per_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a table's byte tables are learnt, ordinary values never reach the per-value quoter."""
    from changefeed.codec.open_protocol import encoder as encoder_module  # noqa: PLC0415

    calls: list[str] = []
    real = encoder_module.quote_jsoniter

    def counting(text: str) -> str:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(encoder_module, "quote_jsoniter", counting)
    enc = OpenProtocolEncoder(opts())
    ts = _table(Column("s", TypeCode.VARCHAR, **UTF8), Column("b", TypeCode.VARCHAR, **BIN))
    types = [pa.int64(), pa.string(), pa.binary()]
    assert enc.render_rows(_rows(ts, types, [(0, "warm\n", b"\xff")], [Op.INSERT])[0]) is not None
    calls.clear()
    images = [(i, f'v{i}\n\u00e9"', b"\xff\x00" + bytes([i])) for i in range(50)]
    rendered = enc.render_rows(_rows(ts, types, images, [Op.INSERT] * 50)[0])
    assert calls == []
    assert rendered is not None
    assert rendered[1][7] == (
        b'{"u":{"id":{"t":8,"h":true,"f":11,"v":7},"s":{"t":15,"f":64,"v":"v7\\n\xc3\xa9\\""},'
        b'"b":{"t":15,"f":65,"v":"\\\\xff\\\\x00\\\\a"}}}'
    )
