"""canal-json column renderers: render_rows + append_rendered + build give append_row + build's bytes."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import math
import random
import struct
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from changefeed.capture.binlog import BinlogPosition
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.codec.base import Message
from changefeed.codec.canal_json import CanalJSONEncoder
from changefeed.codec.canal_json.columns import escape, value_texts
from changefeed.codec.canal_json.values import value_renderer
from changefeed.codec.claimcheck import ClaimCheckStore
from changefeed.codec.gojson import easyjson_fix
from changefeed.codec.options import CodecOptions
from changefeed.errors import MessageTooLargeError
from changefeed.model import Column, Op, RowChange, TypeCode
from changefeed.model.events import trusted_row
from changefeed.model.rowblock import RowBlock, TableRows
from changefeed.testing import MariaDBServer
from tests.codec.helpers import pk_table, utf8

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"
CLOCK = 1639633142960
_OPS = (Op.INSERT, Op.UPDATE, Op.DELETE)


def opts(**kw: Any) -> CodecOptions:
    kw.setdefault("clock", lambda: CLOCK)
    return CodecOptions(protocol="canal-json", **kw)


def blocks_of(path: Path, start: BinlogPosition, end: BinlogPosition | None = None, **kw: Any) -> list[RowBlock]:
    until = (end.file, end.pos) if end is not None else None
    capture = BlockCapture(lambda at: BinlogFileReader(path, at.file or None, at.pos), start, until=until, **kw)
    return [b for b in capture.blocks() if isinstance(b, RowBlock)]


def fields(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [(m.key, m.value, m.partition, m.topic, m.rows, m.commit_ts) for m in messages]


def per_row(blocks: list[RowBlock], options: CodecOptions) -> list[Message]:
    enc = CanalJSONEncoder(options)
    for block in blocks:
        for row in block.rows():
            enc.append_row(row)
    return enc.build()


def columnar(blocks: list[RowBlock], options: CodecOptions) -> tuple[list[Message], int]:
    """As the Kafka sink does it: render_rows per table, append_rendered per row in commit order.

    Rows not rendered go through append_row. Returns the messages and how many rows were rendered.
    """
    renderer, enc = CanalJSONEncoder(options), CanalJSONEncoder(options)  # the sink renders with its own
    rendered_rows = 0
    for block in blocks:
        rendered = [renderer.render_rows(t) for t in block.tables]
        rows = list(block.rows())
        located = [(seg, start + j) for seg, start in block.walk() for j in range(seg.rows)]
        for k, (seg, i) in enumerate(located):
            r = rendered[seg.table]
            if r is None or r[1][i] is None:
                assert r is None or r[0][i] is None
                enc.append_row(rows[k])
                continue
            key, value = r[0][i], r[1][i]
            assert key is not None and value is not None
            rendered_rows += 1
            enc.append_rendered(key, value, seg.commit_ts, lambda row=rows[k]: row)
    return enc.build(), rendered_rows


def assert_same(blocks: list[RowBlock], options: CodecOptions, *, every_row: bool = True) -> list[Message]:
    want = per_row(blocks, options)
    got, rendered = columnar(blocks, options)
    assert fields(got) == fields(want)
    if every_row:
        assert rendered == sum(b.num_rows for b in blocks)
    return want


def table_reference(rows: TableRows, options: CodecOptions) -> list[bytes]:
    """The per-row values of one table's rows, uncompressed (encode_row without large-message rules)."""
    enc = CanalJSONEncoder(options)
    out = []
    for (new, old), op, ts in zip(rows.images(), rows.ops.tolist(), rows.commit_ts.tolist(), strict=True):
        msg = enc.encode_row(trusted_row(_OPS[op], rows.table_schema, ts, new, old))
        assert msg.value is not None
        out.append(msg.value)
    return out


# ------------------------------------------------------------------ fixtures: every MySQL type

OPTION_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "tidb-extension": {"enable_tidb_extension": True},
    "tiflow": {"compat": "tiflow", "enable_tidb_extension": True},
    "delete-handle-only": {"delete_only_output_handle_key_columns": True, "enable_tidb_extension": True},
    "only-updated": {"only_output_updated_columns": True},
    "only-updated-tiflow": {"only_output_updated_columns": True, "compat": "tiflow"},
    "content-compatible": {"content_compatible": True, "enable_tidb_extension": True},
    "row-key": {"output_row_key": True, "enable_tidb_extension": True},
    "lz4": {"large_message_handle_compression": "lz4"},
    "snappy": {"large_message_handle_compression": "snappy", "enable_tidb_extension": True},
}


@pytest.mark.parametrize("variant", ["full", "nocrc"])
@pytest.mark.parametrize("option_set", list(OPTION_SETS))
def test_fixture_bytes_equal_the_per_row_path(variant: str, option_set: str) -> None:
    blocks = blocks_of(FIXTURES / variant, BinlogPosition("binlog.000001", 4))
    assert sum(b.num_rows for b in blocks) == 23
    assert_same(blocks, opts(**OPTION_SETS[option_set]))


@pytest.mark.parametrize("block_rows", [1, 5, 65536])
def test_fixture_blocks_of_any_size(block_rows: int) -> None:
    blocks = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4), block_rows=block_rows)
    assert_same(blocks, opts(enable_tidb_extension=True))


def test_decimals_as_text_are_left_to_the_per_row_path() -> None:
    """BlockCapture(decimal="string") holds DECIMAL as text, a value the per-row path refuses: not rendered."""
    blocks = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4), decimal="string")
    enc = CanalJSONEncoder(opts())
    for t in (t for b in blocks for t in b.tables):
        decimal = any(c.type_code is TypeCode.DECIMAL for c in t.table_schema.columns)
        assert (enc.render_rows(t) is None) == decimal


def test_fixture_exact_bytes_of_a_few_values() -> None:
    """Real bytes, not only equality: unsigned maxima, BIT, YEAR, float digits, wide decimals."""
    (blocks,) = [blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4), block_rows=65536)]
    enc = CanalJSONEncoder(opts())
    values = [v for b in blocks for t in b.tables if (r := enc.render_rows(t)) for v in r[1]]
    text = b"\n".join(v for v in values if v is not None)
    for fragment in (
        # unsigned maxima; sqlType promoted per value (TINYINT/SMALLINT/INT/BIGINT UNSIGNED)
        b'"sqlType":{"id":4,"ti":-6,"tu":5,"si":5,"su":4,"mi":4,"mu":4,"i":4,"iu":-5,"bi":-5,"bu":3,',
        b'"bu":"18446744073709551615","b1":"1","b64":"18446744073709551615","y":"2155","bo":"1"}]',
        b'"y":"0"',  # the zero YEAR
        # Go 'f' digits: never an exponent
        b'"f":"1.5","d":"17976931348623157' + b"0" * 292 + b'"',
        b'"d":"-0.' + b"0" * 307 + b'22250738585072014"',
        # decimals at the column's scale, also where Arrow's text has an exponent (0E-30, -1E-9)
        b'"d65":"12345678901234567890123456789012345.123456789012345678901234567890"',
        b'"d65":"0.000000000000000000000000000000","d10":"1","d52":"0.50","d18":"-1.000000000"',
        b'"d18":"-0.000000001"',
        # binary as ISO-8859-1, JSON and zero dates as text
        b'"b":"\\u0000\xc3\xbf"',
        b'"j":"{\\"k\\": \\"v\\", \\"a\\": [1, 2]}"',
        b'"dt6":"0000-00-00 00:00:00.000000"',
        b'"e":"3","s":"5"',
    ):
        assert fragment in text, fragment


def test_large_messages_go_through_the_per_row_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4))
    sizes = sorted(len(v) for v in table_values(blocks, opts(enable_tidb_extension=True)))
    limit = sizes[len(sizes) // 2] + 36  # about half of the rows are too large
    small = {"enable_tidb_extension": True, "max_message_bytes": limit}
    out = assert_same(blocks, opts(**small, large_message_handle_option="handle-key-only"))
    assert 0 < sum(b'"onlyHandleKey":true' in (m.value or b"") for m in out) < len(out)

    names = itertools.count()
    monkeypatch.setattr(ClaimCheckStore, "new_name", staticmethod(lambda: f"{next(names)}.json"))
    cc = {**small, "large_message_handle_option": "claim-check", "claim_check_storage_uri": f"file://{tmp_path}/cc"}
    want = per_row(blocks, opts(**cc))
    names = itertools.count()
    got, rendered = columnar(blocks, opts(**cc))
    assert fields(got) == fields(want) and rendered > 0
    assert sum(b"claimCheckLocation" in (m.value or b"") for m in got) == len(list((tmp_path / "cc").iterdir()))

    for kind in ("none",):
        with pytest.raises(MessageTooLargeError) as per:
            per_row(blocks, opts(**small, large_message_handle_option=kind))
        with pytest.raises(MessageTooLargeError) as col:
            columnar(blocks, opts(**small, large_message_handle_option=kind))
        assert str(col.value) == str(per.value)


def table_values(blocks: list[RowBlock], options: CodecOptions) -> list[bytes]:
    enc = CanalJSONEncoder(options)
    out = []
    for b in blocks:
        for t in b.tables:
            r = enc.render_rows(t)
            assert r is not None
            out += [v for v in r[1] if v is not None]
    return out


def test_row_key_of_int_handles() -> None:
    blocks = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4))
    options = opts(enable_tidb_extension=True, output_row_key=True)
    seen = 0
    for t in (t for b in blocks for t in b.tables):
        for table_id in (104, (1 << 63) + 5, 1 << 40):
            rows = TableRows(dataclasses.replace(t.table_schema, table_id=table_id), t.batch)
            rendered = CanalJSONEncoder(options).render_rows(rows)
            assert rendered is not None
            assert rendered[1] == table_reference(rows, options)
            seen += b'"rowkey":"' in (rendered[1][0] or b"")
    assert seen
    # The exact key: "t" + EncodeInt(104) + "_r" + EncodeInt(handle), base64 (tiflow has none).
    t = blocks[0].tables[0]
    rows = TableRows(dataclasses.replace(t.table_schema, table_id=104), t.batch)
    first = CanalJSONEncoder(options).render_rows(rows)
    assert first is not None and first[1][0] is not None
    handle = rows.column(0)[0].as_py()
    key = struct.pack(">cQ2sQ", b"t", 104 ^ (1 << 63), b"_r", (handle & ((1 << 64) - 1)) ^ (1 << 63))
    assert b'"rowkey":"' + base64.b64encode(key) + b'"}}' in first[1][0]
    tiflow = CanalJSONEncoder(opts(enable_tidb_extension=True, output_row_key=True, compat="tiflow")).render_rows(rows)
    assert tiflow is not None and b"rowkey" not in (tiflow[1][0] or b"")


def test_an_empty_table() -> None:
    t = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4))[0].tables[0]
    enc = CanalJSONEncoder(opts())
    assert enc.render_rows(TableRows(t.table_schema, t.batch.slice(0, 0))) == ([], [])


def test_the_clock_is_read_as_the_build_time() -> None:
    blocks = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4))
    ticks = itertools.count(1000)
    enc = CanalJSONEncoder(opts(clock=lambda: next(ticks)))
    t = blocks[0].tables[0]
    rendered = enc.render_rows(t)
    assert rendered is not None
    assert all(b',"ts":1000,' in (v or b"") for v in rendered[1])  # one reading per table


# ------------------------------------------------------------------ value renderers, exhaustively


def _easy(text: str) -> str:
    return easyjson_fix(orjson.dumps(text)).decode()[1:-1]


def test_escape_matches_orjson_and_easyjson_fix() -> None:
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x80)] + ["\u2028", "\u2029", "\u2027", "\u0085", "é", "€", "😀", "\ufeff"]
    texts: list[str | None] = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(5000)]
    texts += [None, "", "\u2028\u2029", "\\b\\f", "\\\\u003c", '<a href="x">&amp;</a>', "\x00\x1f\x7f"]
    arr = pa.array(texts, pa.string())
    for sliced, want in ((arr, texts), (arr.slice(11, 999), texts[11:1010])):
        assert escape(sliced).to_pylist() == [None if t is None else _easy(t) for t in want]
    # Exact bytes of the interesting characters.
    assert escape(pa.array(['\b\f\n\r\t\x01"\\<>&\u2028\u2029\x7fé'])).to_pylist() == [
        '\\u0008\\u000c\\n\\r\\t\\u0001\\"\\\\\\u003c\\u003e\\u0026\\u2028\\u2029\x7fé'
    ]


def test_binary_is_iso_8859_1_text() -> None:
    rng = random.Random(8)
    blobs: list[bytes | None] = [bytes(rng.randrange(256) for _ in range(rng.randrange(12))) for _ in range(5000)]
    blobs += [None, b"", bytes(range(256))]
    arr = pa.array(blobs, pa.binary())
    for sliced, want in ((arr, blobs), (arr.slice(3, 700), blobs[3:703])):
        got = escape(sliced, latin1=True).to_pylist()
        assert got == [None if b is None else _easy(str(b, "latin-1")) for b in want]
    assert escape(pa.array([b"\x00<\xff\x80&"]), latin1=True).to_pylist() == ["\\u0000\\u003c\u00ff\u0080\\u0026"]


def _same_as_renderer(column: Column, arr: pa.Array) -> None:
    got = value_texts(column, arr)
    assert got is not None
    render = value_renderer(column)
    assert render is not None
    assert got.to_pylist() == [None if v is None else render(v) for v in arr.to_pylist()]


def _random_float(rng: random.Random) -> float:
    k = rng.random()
    if k < 0.3:
        return struct.unpack("<d", rng.randbytes(8))[0]
    if k < 0.6:
        return rng.uniform(-1, 1) * 10 ** rng.randrange(-30, 30)
    if k < 0.8:
        return round(rng.uniform(-1e6, 1e6), rng.randrange(8))
    return float(rng.randrange(-(10**17), 10**17))


def test_floats_are_go_f_shortest() -> None:
    rng = random.Random(9)
    values: list[float | None] = [_random_float(rng) for _ in range(20000)]
    values += [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308, 3.4028235e38, None]
    values += [1e15, 1e16, 1e21, 1e22, 123456789.0, 0.1, 1e-5, 1e-6, 1e-7, 1.5e-45]
    _same_as_renderer(Column("d", TypeCode.DOUBLE), pa.array(values, pa.float64()))
    _same_as_renderer(Column("f", TypeCode.FLOAT), pa.array(values, pa.float32()))


@pytest.mark.parametrize(("precision", "scale"), [(65, 30), (65, 0), (38, 10), (39, 38), (10, 2), (18, 18), (40, 7)])
def test_decimals_are_tidb_text(precision: int, scale: int) -> None:
    rng = random.Random(precision * 100 + scale)
    units = [rng.randrange(10 ** rng.randrange(1, precision + 1)) * rng.choice((1, -1)) for _ in range(3000)]
    units += [rng.randrange(-(10**7), 10**7) for _ in range(1000)]
    units += [0, 1, -1, 10**precision - 1, 1 - 10**precision]
    values: list[Decimal | None] = [Decimal(f"{u}E-{scale}") for u in units] + [None]
    typ = pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    _same_as_renderer(Column("d", TypeCode.DECIMAL, decimal=scale), pa.array(values, typ))


def test_unsupported_arrow_types_return_none() -> None:
    enc = CanalJSONEncoder(opts())
    t = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4))[0].tables[0]
    # A column whose Arrow type does not hold the model's value type: the per-row path decides.
    batch = t.batch.set_column(1, t.batch.schema.field(1).with_type(pa.float64()), t.batch.column(1).cast(pa.float64()))
    assert enc.render_rows(TableRows(t.table_schema, batch)) is None
    assert (
        value_texts(Column("d", TypeCode.DECIMAL, decimal=3), pa.array([Decimal("1.50")], pa.decimal128(5, 2))) is None
    )
    assert value_texts(Column("b", TypeCode.BLOB), pa.array(["x"])) is None


# ------------------------------------------------------------------ a real server: edge values

EDGE_DDL = (
    "CREATE TABLE `{db}`.e (id INT PRIMARY KEY, s VARCHAR(200), t TEXT, b VARBINARY(300), bl BLOB,"
    " bu BIGINT UNSIGNED, bi BIGINT, ti TINYINT, tu TINYINT UNSIGNED, su SMALLINT UNSIGNED, iu INT UNSIGNED,"
    " d65 DECIMAL(65,30), d0 DECIMAL(20,0), f FLOAT, dbl DOUBLE, dt DATETIME(6), dd DATE, ts TIMESTAMP(3) NULL,"
    " tm TIME(2), j JSON, bit BIT(64), bit3 BIT(3), st SET('a','b','c'), en ENUM('x','y','z'), y YEAR,"
    ' `we<ird"name` INT) DEFAULT CHARSET=utf8mb4'
)
EDGE_ROWS = [
    # quotes, backslashes, control characters, line separators, HTML characters, non-ASCII, emoji
    "(1, 'q\"uo\\\\te\\nline\\ttab\\rcr', CONCAT('bell', CHAR(8 USING utf8mb4), 'ff', CHAR(12 USING utf8mb4),"
    " 'nul', CHAR(0 USING utf8mb4), 'end'), X'00223C3E265C7F80FF', X'E280A8',"
    " 18446744073709551615, -9223372036854775808, -128, 255, 65535, 4294967295,"
    " 0.000000000000000000000000000001, 99999999999999999999, 3.40282e38, 1.7976931348623157e308,"
    " '2024-02-29 23:59:59.999999', '2024-01-01', '2038-01-19 03:14:07.999', '-838:59:59.00',"
    ' \'{"k": "<v>&\\\\u2028", "n": [1, 2.5, null]}\','
    f" b'{'1' * 64}', b'101', 'a,c', 'z', 2155, -1)",
    # empty strings, U+2028/9 in text, HTML, negative and huge decimals, float extremes
    "(2, '', '\u2028\u2029<>&é€😀', X'', X'', 0, 9223372036854775807, 127, 128, 32768, 2147483648,"
    " -99999999999999999999999999999999999.999999999999999999999999999999, -1, -1.17549e-38, -2.2250738585072014e-308,"
    " '0000-00-00 00:00:00', '0000-00-00', '0000-00-00 00:00:00', '00:00:00.01', '[]', b'0', b'0', '', 'x', 0, 0)",
    # NULLs everywhere but the key
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    # small values: scale-0 decimal, tiny floats, a value that is its own text
    "(4, 'null', '\"\"', X'5C', X'0A0D09', 1, -1, 0, 0, 0, 0, 12345.678900000000000000000000000001, 0, 1e-10,"
    " 1e22, '1000-01-01 00:00:00', '9999-12-31', NULL, '838:59:59.99', 'null', b'10000000', b'111', 'a,b,c', 'y',"
    " 1901, 2147483647)",
]


def _edge_blocks(mariadb: MariaDBServer, db: str, statements: list[str]) -> list[RowBlock]:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(EDGE_DDL.format(db=db))
        for statement in statements:
            cur.execute(statement.replace("{db}", db))
        cur.execute("SHOW MASTER STATUS")
        end = BinlogPosition(*cur.fetchone()[:2])

    blocks = blocks_of(mariadb.binlog_dir, start, end, keep=lambda schema, table: schema == db)
    assert blocks
    return blocks


EDGE_STATEMENTS = [
    "INSERT INTO `{db}`.e VALUES " + ", ".join(EDGE_ROWS),
    "UPDATE `{db}`.e SET s = CONCAT(IFNULL(s, ''), '<u>'), bu = 9223372036854775808, f = -0.0 WHERE id IN (1, 3, 4)",
    "UPDATE `{db}`.e SET t = t WHERE id = 2",  # no change: an update whose old equals new
    "UPDATE `{db}`.e SET s = NULL, b = X'FF' WHERE id = 2",
    "DELETE FROM `{db}`.e WHERE id IN (2, 4)",
]


@pytest.mark.mariadb
def test_edge_values_against_a_real_server(mariadb: MariaDBServer, fresh_db: str) -> None:
    blocks = _edge_blocks(mariadb, fresh_db, EDGE_STATEMENTS)
    assert sum(b.num_rows for b in blocks) >= 4 + 3 + 1 + 2
    for kw in OPTION_SETS.values():
        assert_same(blocks, opts(**kw))
    # Real bytes of the interesting values (the first row's insert).
    enc = CanalJSONEncoder(opts())
    first = next(v for b in blocks for t in b.tables if (r := enc.render_rows(t)) for v in r[1][:1])
    assert first is not None
    for fragment in (
        b'"s":"q\\"uo\\\\te\\nline\\ttab\\rcr"',
        b'"t":"bell\\u0008ff\\u000cnul\\u0000end"',
        b'"b":"\\u0000\\"\\u003c\\u003e\\u0026\\\\\x7f\xc2\x80\xc3\xbf"',
        b'"bl":"\xc3\xa2\xc2\x80\xc2\xa8"',
        b'"bu":"18446744073709551615"',
        b'"bi":"-9223372036854775808"',
        b'"d65":"0.000000000000000000000000000001"',
        b'"d0":"99999999999999999999"',
        b'"f":"340282' + b"0" * 33 + b'"',  # Go 'f' never writes an exponent
        b'"dbl":"17976931348623157' + b"0" * 292 + b'"',
        b'"tm":"-838:59:59.00"',
        b'"bit":"18446744073709551615"',
        b'"bit3":"5"',
        b'"st":"5"',
        b'"en":"3"',
        b'"y":"2155"',
        b'"we\\u003cird\\"name":"-1"',
        b'"sqlType":{"id":4,',
        b'"tu":5,',  # unsigned values over the signed range: sqlType promoted per value
        b'"su":4,',
        b'"iu":-5,',
        b'"bu":3,',
    ):
        assert fragment in first, fragment
    assert b'"j":"{\\"k\\": \\"\\u003cv\\u003e\\u0026\\\\u2028\\", \\"n\\": [1, 2.5, null]}"' in first


@pytest.mark.mariadb
def test_minimal_images_come_back_as_none(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    server = mariadb_factory(extra_config={"binlog_row_image": "MINIMAL"})
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY, a INT, b VARCHAR(10), c TEXT)")
        cur.execute("INSERT INTO m.t VALUES (1, 10, 'x', NULL), (2, 20, NULL, 'c2'), (3, 30, 'z<', 'c3')")
        cur.execute("UPDATE m.t SET a = a + 1 WHERE id < 3")
        cur.execute("DELETE FROM m.t WHERE id = 1")
        cur.execute("INSERT INTO m.t (id) VALUES (4)")
    blocks = blocks_of(server.binlog_dir, start)
    enc = CanalJSONEncoder(opts())
    partial = rendered = 0
    for t in (t for b in blocks for t in b.tables):
        out = enc.render_rows(t)
        assert out is not None
        full = t.full().tolist()
        assert [v is not None for v in out[1]] == full and [k is not None for k in out[0]] == full
        partial += full.count(False)
        rendered += full.count(True)
    assert partial == 4 and rendered == 3  # the updates, the delete and the last insert carry some columns
    # The partial rows go through append_row and the stream stays identical.
    assert_same(blocks, opts(), every_row=False)


def test_rendered_rows_equal_row_changes_of_the_bench_shape() -> None:
    """A realistic mixed block (inserts, updates, deletes of one table) built in memory."""
    ts = pk_table(
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("qty", TypeCode.INT, unsigned=True),
        utf8("sku"),
        Column("amount", TypeCode.DECIMAL, decimal=2, length=12),
        Column("ratio", TypeCode.DOUBLE),
        Column("payload", TypeCode.VARCHAR),  # charset binary: VARBINARY
        schema="bench",
        table="orders",
    )
    rng = random.Random(3)
    n = 3000
    ops = [rng.choice(("insert", "insert", "update", "delete")) for _ in range(n)]

    def image() -> list[Any]:
        return [
            rng.randrange(1 << 40),
            rng.choice([None, rng.randrange(1 << 32)]),
            rng.choice([None, "", f"SKU-{rng.randrange(10**8)}", "é<\u2028>"]),
            rng.choice([None, Decimal(f"{rng.randrange(-(10**9), 10**9)}E-2")]),
            rng.choice([None, rng.random() * 10 ** rng.randrange(-8, 20)]),
            rng.choice([None, rng.randbytes(rng.randrange(20))]),
        ]

    main = [image() for _ in range(n)]
    before = [image() if op == "update" else [None] * 6 for op in ops]
    types = [pa.int64(), pa.int64(), pa.string(), pa.decimal128(12, 2), pa.float64(), pa.binary()]
    arrays = [pa.array([r[i] for r in main], types[i]) for i in range(6)]
    arrays += [pa.array(ops), pa.array([(i // 7 + 1) << 18 for i in range(n)], pa.int64())]
    arrays += [pa.array([r[i] for r in before], types[i]) for i in range(6)]
    names = [c.name for c in ts.columns] + ["op", "commit_ts"] + [f"before_{c.name}" for c in ts.columns]
    rows = TableRows(ts, pa.RecordBatch.from_arrays(arrays, names))
    for kw in OPTION_SETS.values():
        options = opts(**kw)
        rendered = CanalJSONEncoder(options).render_rows(rows)
        assert rendered is not None
        want = table_reference(rows, dataclasses.replace(options, large_message_handle_compression="none"))
        assert rendered[1] == want and rendered[0] == [b""] * n


def test_a_row_callable_is_only_called_for_large_messages() -> None:
    blocks = blocks_of(FIXTURES / "full", BinlogPosition("binlog.000001", 4))
    enc = CanalJSONEncoder(opts(enable_tidb_extension=True))
    t = blocks[0].tables[0]
    rendered = enc.render_rows(t)
    assert rendered is not None

    def never() -> RowChange:
        raise AssertionError("the per-row path was asked for a row that fits")

    for key, value, ts in zip(rendered[0], rendered[1], t.commit_ts.tolist(), strict=True):
        assert key is not None and value is not None
        enc.append_rendered(key, value, ts, never)
    out = enc.build()
    assert [(m.key, m.value, m.rows, m.commit_ts) for m in out] == [
        (None, v, 1, ts) for v, ts in zip(rendered[1], t.commit_ts.tolist(), strict=True)
    ]
