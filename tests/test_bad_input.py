"""Bad input ends in a `ChangefeedError` with a clear, bounded message, never a traceback (issue 14.7)."""

from __future__ import annotations

import io
import json
import random
import sys
import time
import tracemalloc
from pathlib import Path

import orjson
import pytest

from changefeed.capture.binlog import file_capture
from changefeed.cli import main
from changefeed.codec import CodecOptions, Message, make_decoder, make_encoder
from changefeed.errors import CaptureError, ChangefeedError, ascii_digits, clip
from changefeed.model import Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.jsonl import EventReader

BINLOGS = Path(__file__).parent / "fixtures" / "binlog"
HUGE = "9" * 100_000 + "x"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes = b"") -> tuple[int, str]:
    """Run ``changefeed ARGV`` in-process; the exit code and stderr."""
    old = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        code = main(argv)
    finally:
        sys.stdin = old
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


# -- shared helpers ----------------------------------------------------------------------------


def test_clip_keeps_the_start_and_says_how_long() -> None:
    assert clip("abc") == "'abc'"
    clipped = clip(HUGE)
    assert clipped.startswith("'999") and clipped.endswith(f"... ({len(HUGE) + 2} chars)")
    assert len(clipped) < 250
    assert len(clip(10**100_000)) < 100  # repr would be refused (int max str digits)


@pytest.mark.parametrize(("text", "ok"), [("12", True), ("²", False), ("١٢", False), ("", False), ("1a", False)])
def test_ascii_digits_refuses_unicode_digits(text: str, ok: bool) -> None:
    assert ascii_digits(text) is ok


# -- 1. CSV --schema-file ----------------------------------------------------------------------

GOOD_COLUMNS = [
    {"ColumnName": "id", "ColumnType": "INT", "ColumnPrecision": "11", "ColumnIsPk": "true"},
    {"ColumnName": "d", "ColumnType": "DECIMAL", "ColumnPrecision": "10", "ColumnScale": "2"},
]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ColumnType": "NOTATYPE"}, "column 'd': unknown ColumnType 'NOTATYPE'"),
        ({"ColumnType": 7}, "column 'd': ColumnType must be a string"),
        ({"ColumnPrecision": "abc"}, "column 'd': ColumnPrecision must be a non-negative integer, got 'abc'"),
        ({"ColumnPrecision": -5}, "ColumnPrecision must be a non-negative integer, got -5"),
        ({"ColumnScale": "²"}, "ColumnScale must be a non-negative integer"),
        ({"ColumnName": "id"}, "column 'id' appears twice"),
        ({"ColumnElems": "a,b"}, "ColumnElems must be a list of strings"),
        ("not a list", "TableColumns must be a list, got 'not a list'"),
        ([5], "TableColumns[0] must be an object, got 5"),
    ],
)
def test_csv_schema_file_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: object, message: str
) -> None:
    columns: object = change if not isinstance(change, dict) else [GOOD_COLUMNS[0], {**GOOD_COLUMNS[1], **change}]
    path = tmp_path / "schema_1_0.json"
    path.write_text(json.dumps({"Schema": "s", "Table": "t", "TableVersion": 1, "TableColumns": columns}))
    code, err = run_cli(["decode", "--protocol", "csv", "--schema-file", str(path)], capsys)
    assert code == 1
    assert message in err and str(path) in err
    assert err.count("\n") == 1


def test_csv_schema_file_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["decode", "--protocol", "csv", "--schema-file", str(tmp_path / "nope.json")], capsys)
    assert code == 1 and "cannot read --schema-file" in err


# -- 2. and 7. JSONL values --------------------------------------------------------------------


def row_line(value: object, type_name: str = "decimal") -> bytes:
    column = {"name": "d", "type": type_name, "flags": 0, "length": 10, "decimal": 2, "value": value}
    event = {"kind": "row", "op": "insert", "schema": "s", "table": "t", "commit_ts": 1, "columns": [column]}
    return orjson.dumps(event) + b"\n"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "column 'd' (decimal) needs a decimal number string, got 'abc'"),
        ("NaN", "got 'NaN'"),
        ("Infinity", "got 'Infinity'"),
        (5, "d must be a string, got 5"),
    ],
)
def test_jsonl_bad_decimal_is_an_event_format_error(
    capsys: pytest.CaptureFixture[str], value: object, message: str
) -> None:
    code, err = run_cli(["encode", "--protocol", "canal-json"], capsys, stdin=row_line(value))
    assert code == 1
    assert message in err and "<stdin>:1" in err


@pytest.mark.parametrize(("value", "type_name"), [(HUGE, "decimal"), (HUGE, "int"), (HUGE, "varbinary")])
def test_jsonl_error_clips_huge_values(capsys: pytest.CaptureFixture[str], value: object, type_name: str) -> None:
    code, err = run_cli(["encode", "--protocol", "canal-json"], capsys, stdin=row_line(value, type_name))
    assert code == 1 and "<stdin>:1" in err
    assert len(err) < 600


def test_jsonl_unknown_op_is_clipped() -> None:
    line = row_line("1.00").replace(b'"insert"', orjson.dumps(HUGE))
    with pytest.raises(ChangefeedError, match="unknown op") as info:
        EventReader().parse(line, where="x:1")
    assert len(str(info.value)) < 400


T = TableSchema(
    "s",
    "t",
    (Column("id", TypeCode.INT, nullable=False, length=11), Column("v", TypeCode.VARCHAR, length=16)),
    (Index("PRIMARY", ("id",), primary=True),),
)


def canal_message() -> Message:
    options = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    encoder = make_encoder(options)
    encoder.append_row(RowChange(Op.INSERT, T, 415508878783938562, new=(1, b"a")))
    (msg,) = encoder.build()
    return msg


def test_codec_value_error_clips_huge_values() -> None:
    msg = canal_message()
    assert msg.value is not None
    doc = orjson.loads(msg.value)
    doc["data"][0]["id"] = HUGE
    decoder = make_decoder(CodecOptions(protocol="canal-json", enable_tidb_extension=True))
    with pytest.raises(ChangefeedError) as info:
        list(decoder.decode(Message(key=msg.key, value=orjson.dumps(doc)), "in:1"))
    assert "chars)" in str(info.value) and len(str(info.value)) < 600


# -- 3. corrupted binlogs without CRC ----------------------------------------------------------


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One bit flipped, a few bytes overwritten, or the file cut short (the magic kept)."""
    out = bytearray(data)
    mode = rng.randrange(3)
    if mode == 0:
        out[rng.randrange(4, len(out))] ^= 1 << rng.randrange(8)
    elif mode == 1:
        for _ in range(5):
            out[rng.randrange(4, len(out))] = rng.randrange(256)
    else:
        del out[rng.randrange(4, len(out)) :]
    return bytes(out)


@pytest.mark.parametrize(("fixture", "rounds"), [("nocrc", 900), ("full", 150)])
def test_mutated_binlogs_give_capture_errors(tmp_path: Path, fixture: str, rounds: int) -> None:
    rng = random.Random(20240514)
    originals = {p.name: p.read_bytes() for p in sorted((BINLOGS / fixture).glob("binlog.0*"))}
    target = tmp_path / "binlog.000001"
    deadline = time.monotonic() + 8
    failures = 0
    for _ in range(rounds):
        if time.monotonic() > deadline:
            break
        name = rng.choice(sorted(originals))
        target.write_bytes(mutate(originals[name], rng))
        try:
            for _event in file_capture(target).events():
                pass
        except CaptureError as exc:
            failures += 1
            assert exc.where and exc.where.startswith("binlog.000001:"), exc
    assert failures > 0  # the mutations do reach the error path


def test_truncated_binlog_via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = (BINLOGS / "nocrc" / "binlog.000001").read_bytes()
    (tmp_path / "binlog.000001").write_bytes(data[: len(data) // 2])
    code, err = run_cli(["capture", "--no-progress", "--from", f"file://{tmp_path}"], capsys)
    assert code == 1 and "binlog.000001:" in err


@pytest.mark.parametrize("size", [0xFFFFFFFF, 2741699202, 10_000_000])
def test_a_huge_event_size_is_refused_before_reading(tmp_path: Path, size: int) -> None:
    """Found by bench/fuzz.py: a mutated size field made the file reader allocate the header's size
    (up to 4 GiB) before finding the file shorter. It is checked against the bytes left first."""
    data = bytearray((BINLOGS / "nocrc" / "binlog.000001").read_bytes())
    fde_size = int.from_bytes(data[4 + 9 : 4 + 13], "little")
    second = 4 + fde_size  # the event after the FORMAT_DESCRIPTION
    data[second + 9 : second + 13] = size.to_bytes(4, "little")
    (tmp_path / "binlog.000001").write_bytes(bytes(data))
    tracemalloc.start()
    try:
        with pytest.raises(CaptureError, match=f"header says {size} bytes, the file has") as info:
            list(file_capture(tmp_path / "binlog.000001").events())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.where == f"binlog.000001:{second}"
    assert peak < 8 << 20, peak  # nothing near the claimed size was allocated


def test_a_rows_event_without_columns_is_refused(tmp_path: Path) -> None:
    """Found by bench/fuzz.py: a ROWS event whose columns-present bitmap is all zero has rows of zero
    bytes, and the row decoder looped forever appending empty rows. Refused as the columnar reader does."""
    data = bytearray((BINLOGS / "nocrc" / "binlog.000001").read_bytes())
    pos, patched = 4, None
    while pos + 19 <= len(data):
        kind, size = data[pos + 4], int.from_bytes(data[pos + 9 : pos + 13], "little")
        if kind in (23, 24, 25, 30, 31, 32):  # WRITE/UPDATE/DELETE_ROWS v1, v2
            body = pos + 19 + 8  # table id, flags
            if kind >= 30:
                body += int.from_bytes(data[body : body + 2], "little")  # v2 extra data (its length counts itself)
            count = data[body]
            assert count < 251  # one-byte length-encoded column count
            mlen = (count + 7) // 8
            data[body + 1 : body + 1 + mlen] = bytes(mlen)
            patched = pos
            break
        pos += size
    assert patched is not None
    (tmp_path / "binlog.000001").write_bytes(bytes(data))
    started = time.monotonic()
    with pytest.raises(CaptureError, match="a row image without columns") as info:
        list(file_capture(tmp_path / "binlog.000001").events())
    assert info.value.where == f"binlog.000001:{patched}" and time.monotonic() - started < 10


def test_a_bit_column_wider_than_64_bits_is_refused(tmp_path: Path) -> None:
    """Found by bench/fuzz.py: a TABLE_MAP whose BIT metadata claimed 242 bits decoded a 242-bit integer,
    which then failed to serialise (orjson: "Integer exceeds 64-bit range"). MySQL's BIT holds 1 to 64."""
    from changefeed.capture.binlog.tablemap import ColumnType  # noqa: PLC0415

    data = bytearray((BINLOGS / "nocrc" / "binlog.000001").read_bytes())
    patched = _patch_column_meta(data, ColumnType.BIT, bytes([242, 0]))  # "242 bits, 0 bytes": the fuzzer's input
    (tmp_path / "binlog.000001").write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="BIT column of 242 bits") as info:
        list(file_capture(tmp_path / "binlog.000001").events())
    assert info.value.where == f"binlog.000001:{patched}"


def _patch_column_meta(data: bytearray, column_type: int, meta: bytes) -> int:
    """Overwrite the metadata of the first ``column_type`` column of the first TABLE_MAP holding one (no CRC)."""
    from changefeed.capture.binlog.tablemap import _ONE_BYTE_META, _TWO_BYTE_META  # noqa: PLC0415

    pos = 4
    while pos + 19 <= len(data):
        kind, size = data[pos + 4], int.from_bytes(data[pos + 9 : pos + 13], "little")
        if kind == 19:  # TABLE_MAP: table id (6), flags (2), schema, table, column count, types, metadata
            at = pos + 19 + 8
            at += data[at] + 2
            at += data[at] + 2
            count = data[at]
            types = data[at + 1 : at + 1 + count]
            at += 1 + count + 1  # the types, then a one-byte metadata length
            for tp in types:
                if tp == column_type:
                    data[at : at + len(meta)] = meta
                    return pos
                at += 1 if tp in _ONE_BYTE_META else 2 if tp in _TWO_BYTE_META else 0
        pos += size
    raise AssertionError(f"the fixture has no column of type {column_type}")


@pytest.mark.parametrize(
    ("column_type", "meta", "message"),
    [
        ("DATETIME2", bytes([7]), r"cf\.times column \d+: DATETIME2 of fractional seconds precision 7"),
        ("TIME2", bytes([255]), r"TIME2 of fractional seconds precision 255"),
        ("TIMESTAMP2", bytes([9]), r"TIMESTAMP2 of fractional seconds precision 9"),
        ("NEWDECIMAL", bytes([66, 0]), r"cf\.nums column \d+: DECIMAL\(66, 0\)"),
        ("NEWDECIMAL", bytes([255, 30]), r"DECIMAL\(255, 30\)"),
        ("NEWDECIMAL", bytes([65, 39]), r"DECIMAL\(65, 39\); MariaDB's DECIMAL\(M, D\) has 1 <= M <= 65, D <= 38"),
        ("NEWDECIMAL", bytes([10, 11]), r"DECIMAL\(10, 11\).*D <= M"),
        ("NEWDECIMAL", bytes([0, 0]), r"DECIMAL\(0, 0\)"),
    ],
)
@pytest.mark.parametrize("decoder", ["rows", "arrow", "blocks"])
def test_table_map_metadata_out_of_range_is_refused(
    tmp_path: Path, column_type: str, meta: bytes, message: str, decoder: str
) -> None:
    """A TABLE_MAP declaring fsp > 6, DECIMAL precision > 65, scale > 38 (MariaDB; MySQL 30) or scale >
    precision: a CaptureError at the TABLE_MAP, in the row-by-row and the Arrow/block decoders alike,
    never an IndexError (fsp indexes the fraction tables), a wrong value or a misread row image."""
    from changefeed.capture.binlog import BinlogPosition  # noqa: PLC0415
    from changefeed.capture.binlog.arrow import read_range_arrow  # noqa: PLC0415
    from changefeed.capture.binlog.blocks import BlockCapture  # noqa: PLC0415
    from changefeed.capture.binlog.files import BinlogFileReader  # noqa: PLC0415
    from changefeed.capture.binlog.tablemap import ColumnType  # noqa: PLC0415

    data = bytearray((BINLOGS / "nocrc" / "binlog.000001").read_bytes())  # MariaDB 10.11
    patched = _patch_column_meta(data, ColumnType[column_type], meta)
    (tmp_path / "binlog.000001").write_bytes(bytes(data))
    start = BinlogPosition("binlog.000001", 4)
    with pytest.raises(CaptureError, match=message) as info:
        if decoder == "rows":
            list(file_capture(tmp_path / "binlog.000001").events())
        elif decoder == "arrow":
            list(read_range_arrow(tmp_path, start))
        else:
            list(BlockCapture(lambda at: BinlogFileReader(tmp_path, at.file or None, at.pos), start).blocks())
    assert info.value.where == f"binlog.000001:{patched}"


def _table_map_body(types: bytes, meta: bytes) -> bytes:
    """A TABLE_MAP body (after table id and flags) of db.t with ``types`` and their ``meta``, all nullable."""
    return (
        b"\x02db\x00\x01t\x00"
        + bytes([len(types)])
        + types
        + bytes([len(meta)])
        + meta
        + b"\xff" * ((len(types) + 7) // 8)
    )


def test_decimal_scale_limit_is_the_servers() -> None:
    """MySQL's DECIMAL scale is at most 30, MariaDB's (10.2.1+) 38; precision at most 65 on both."""
    from changefeed.capture.binlog.tablemap import ColumnType, parse_table_map_body  # noqa: PLC0415

    dec = bytes([ColumnType.NEWDECIMAL])
    for p, s in [(65, 30), (1, 0), (1, 1), (30, 30)]:
        for mariadb in (False, True):
            (col,) = parse_table_map_body(_table_map_body(dec, bytes([p, s])), mariadb).columns
            assert (col.precision, col.scale) == (p, s)
    (col,) = parse_table_map_body(_table_map_body(dec, bytes([65, 38])), mariadb=True).columns
    assert (col.precision, col.scale) == (65, 38)
    with pytest.raises(ValueError, match=r"db\.t column 1: DECIMAL\(65, 31\); MySQL's DECIMAL\(M, D\) has .* D <= 30"):
        parse_table_map_body(_table_map_body(dec, bytes([65, 31])))
    with pytest.raises(ValueError, match=r"DECIMAL\(40, 39\); MariaDB's"):
        parse_table_map_body(_table_map_body(dec, bytes([40, 39])), mariadb=True)
    fsp = bytes([ColumnType.TINY, ColumnType.DATETIME2, ColumnType.TIME2, ColumnType.TIMESTAMP2])
    cols = parse_table_map_body(_table_map_body(fsp, bytes([6, 0, 3]))).columns
    assert [c.meta for c in cols] == [0, 6, 0, 3]
    with pytest.raises(ValueError, match=r"db\.t column 4: TIMESTAMP2 of fractional seconds precision 7"):
        parse_table_map_body(_table_map_body(fsp, bytes([6, 0, 7])))


# -- 4, 5, 6. config checks --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('sink-uri = "mysql://u@127.0.0.1:3306/?worker-count=²"', "worker-count must be a positive integer"),
        ('sink-uri = "file:///tmp/cf-out"\n[sink]\nfile-index-width = "²"', "file-index-width must be an integer"),
        (
            'sink-uri = "kafka://127.0.0.1:9092/t"\n[[sink.dispatchers]]\nmatcher = 5',
            "`matcher` list of strings",
        ),
        (
            'sink-uri = "kafka://127.0.0.1:9092/t"\n[[sink.dispatchers]]\nmatcher = "db.*"',
            "`matcher` list of strings",
        ),
        (
            'sink-uri = "kafka://127.0.0.1:9092/t"\n[[sink.dispatchers]]\nmatcher = ["db.*", 5]',
            "`matcher` list of strings",
        ),
        (
            'sink-uri = "kafka://127.0.0.1:9092/t"\n[[sink.dispatchers]]\nmatcher = ["db.*"]\npartition = "nope"',
            "unknown partition dispatcher",
        ),
        ('sink-uri = "file:///tmp/cf-out?protocol=csv"\n[sink.csv]\ndelimiter = ""', "delimiter must not be empty"),
        ('sink-uri = "file:///tmp/cf-out?protocol=csv"\n[sink.csv]\nquote = "ab"', "quote must be one character"),
        (
            'sink-uri = "file:///tmp/cf-out?protocol=csv"\n[sink.csv]\ndelimiter = \'"\'',
            "must not occur in the delimiter",
        ),
        ('sink-uri = "file:///tmp/cf-out"\ntime-zone = "Mars/Base"', "unknown time zone 'Mars/Base'"),
    ],
)
def test_bad_config_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, message: str
) -> None:
    path = tmp_path / "cf.toml"
    path.write_text(f'changefeed-id = "t"\n{config}\n[source]\npath = "{BINLOGS / "nocrc"}"\n')
    code, err = run_cli(["run", "--skip-preflight", str(path)], capsys)
    assert code == 1
    assert message in err and str(path) in err


def test_apply_worker_count_unicode_digit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = run_cli(
        ["apply", "--from", f"file://{tmp_path}", "--to", "mysql://u@127.0.0.1:3306/?worker-count=²"], capsys
    )
    assert code == 1 and "worker-count must be a positive integer, got '²'" in err
