"""TiCDC storage-sink CSV: TiCDC's own test lines, value rendering, quoting/escaping, decoding,
old-value split/rejoin, round trips and hostile input (docs/protocols/csv.md)."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from changefeed.codec import make_decoder, make_encoder
from changefeed.codec.base import Message
from changefeed.codec.csv import CSVDecoder, CSVEncoder, CSVFormat, format_csv_line, format_csv_value
from changefeed.codec.options import CodecOptions
from changefeed.errors import CodecError, ConfigError
from changefeed.model import ABSENT, Column, DDLEvent, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32
from tests.codec import helpers
from tests.codec.helpers import UTF8, same_image
from tests.strategies import row_changes, tables

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "csv"
CASES = json.loads((FIXTURES / "csv.json").read_text(encoding="utf-8"))["cases"]
LINE_CASES = [c for c in CASES if "line" in c["expected"]]
TS = 435661838416609281


def opts(**kw: Any) -> CodecOptions:
    return CodecOptions(protocol="csv", **kw)


def case_options(case: dict[str, Any]) -> CodecOptions:
    cfg = case["config"]
    return opts(
        delimiter=cfg["delimiter"],
        quote=cfg["quote"],
        terminator=cfg["terminator"],
        null=cfg["null"],
        include_commit_ts=cfg["include_commit_ts"],
        csv_output_old_value=cfg.get("output_old_value", False),
    )


def utf8(name: str, **kw: Any) -> Column:
    return helpers.utf8(name, length=255, **kw)


def table(*cols: Column, name: str = "t", schema: str = "test") -> TableSchema:
    return TableSchema(schema, name, cols)


# ---------------------------------------------------------------------------------------------
# TiCDC's TestCSVMessageEncode lines (tests/fixtures/csv/csv.json)


@pytest.mark.parametrize("case", LINE_CASES, ids=[c["id"] for c in LINE_CASES])
def test_vector_line_formatter(case: dict[str, Any]) -> None:
    inp = case["input"]
    fmt = CSVFormat(case_options(case))
    line = format_csv_line(fmt, inp["op"], inp["table"], inp["schema"], inp["csv_values"], inp["commit_ts"])
    assert line == case["expected"]["line"]
    assert line.encode("utf-8").hex() == case["expected"]["line_hex"]


def _vector_row(case: dict[str, Any]) -> RowChange:
    """The model row whose CSV conversion gives the case's csv_values."""
    inp = case["input"]
    cols = []
    for i, v in enumerate(inp["csv_values"]):
        if isinstance(v, bool) or v is None or isinstance(v, str):
            cols.append(utf8(f"c{i}"))
        elif isinstance(v, int):
            cols.append(Column(f"c{i}", TypeCode.BIGINT))
        else:
            cols.append(Column(f"c{i}", TypeCode.DOUBLE))
    ts = table(*cols, name=inp["table"], schema=inp["schema"])
    values = tuple(inp["csv_values"])
    op = {"I": Op.INSERT, "U": Op.UPDATE, "D": Op.DELETE}[inp["op"]]
    return RowChange(
        op,
        ts,
        inp["commit_ts"],
        new=None if op is Op.DELETE else values,
        old=values if op is Op.DELETE else None,
    )


@pytest.mark.parametrize("case", LINE_CASES, ids=[c["id"] for c in LINE_CASES])
def test_vector_full_encoder_and_back(case: dict[str, Any]) -> None:
    o = case_options(case)
    row = _vector_row(case)
    enc = CSVEncoder(o)
    enc.append_row(row)
    (msg,) = enc.build()
    assert msg.key is None
    assert msg.value == case["expected"]["line"].encode("utf-8")
    assert (msg.rows, msg.commit_ts) == (1, row.commit_ts)

    (back,) = CSVDecoder(o, row.table_schema, commit_ts=row.commit_ts).decode(msg, where="f.csv")
    assert isinstance(back, RowChange)
    assert (back.op, back.commit_ts, back.new, back.old) == (row.op, row.commit_ts, row.new, row.old)


def test_vector_value_conversions() -> None:
    """csvTestColumnsGroup: the converted value per type, written with the default dialect."""
    (case,) = [c for c in CASES if c["id"] == "csv-value-conversions"]
    want = {r["type"]: r["csv_value"] for r in case["expected"]["rows"]}
    blob = Column("b", TypeCode.BLOB, charset="binary")
    text = Column("t", TypeCode.BLOB, **UTF8)
    checks: list[tuple[str, Column, Any, CodecOptions]] = [
        ("tinyint/smallint/mediumint/int/bigint", Column("i", TypeCode.TINYINT), 1, opts()),
        ("... unsigned", Column("u", TypeCode.BIGINT, unsigned=True), 1, opts()),
        ("float", Column("f", TypeCode.FLOAT), to_float32(3.14), opts()),
        ("double", Column("d", TypeCode.DOUBLE), 3.14, opts()),
        ("bit", Column("b", TypeCode.BIT, length=24), 683, opts()),
        ("decimal", Column("m", TypeCode.DECIMAL, length=20, decimal=7), Decimal("129012.1230000"), opts()),
        ("tinytext/mediumtext/text/longtext/varchar/varstring/char", text, "hello world", opts()),
        ("json", Column("j", TypeCode.JSON), '{"key": "value"}', opts()),
        (
            "tinyblob/mediumblob/blob/longblob/varbinary/binary (binary-encoding-method=base64)",
            blob,
            b"hello world",
            opts(),
        ),
        ("... (binary-encoding-method=hex)", blob, b"hello world", opts(binary_encoding_method="hex")),
    ]
    assert {c[0] for c in checks} == set(want)
    for kind, col, value, o in checks:
        expected = want[kind]
        if isinstance(expected, str) and "-> " in expected:  # "float32(3.14) printed with %v -> 3.14"
            expected_field = expected.rsplit("-> ", 1)[1]
        else:
            expected_field = format_csv_value(expected, CSVFormat(o))
        assert field_of(col, value, o) == expected_field, kind


# ---------------------------------------------------------------------------------------------
# Value rendering, type by type


def field_of(col: Column, value: Any, o: CodecOptions | None = None) -> str:
    """The single value field of an INSERT of ``value`` into a one-column table."""
    o = o or opts(terminator="\n")
    line = CSVEncoder(o).encode_row(RowChange(Op.INSERT, table(col), 1, new=(value,))).decode()
    prefix = format_csv_line(CSVFormat(o), "I", "t", "test", [], 1)[: -len(o.terminator)] + o.delimiter
    assert line.startswith(prefix) and line.endswith(o.terminator)
    return line[len(prefix) : -len(o.terminator)]


RENDERING = [
    # integers and BIT: bare numbers
    (Column("c", TypeCode.TINYINT), -128, "-128"),
    (Column("c", TypeCode.BIGINT), -(2**63), "-9223372036854775808"),
    (Column("c", TypeCode.BIGINT, unsigned=True), 2**64 - 1, "18446744073709551615"),
    (Column("c", TypeCode.YEAR), 0, "0"),
    (Column("c", TypeCode.YEAR), 2020, "2020"),
    (Column("c", TypeCode.BIT, length=64), 2**64 - 1, "18446744073709551615"),
    (Column("c", TypeCode.BIT, length=10), 683, "683"),
    # FLOAT/DOUBLE: Go %v (spec §0.5)
    (Column("c", TypeCode.DOUBLE), 1000000.0, "1e+06"),
    (Column("c", TypeCode.DOUBLE), 123456.0, "123456"),
    (Column("c", TypeCode.DOUBLE), 1234567.0, "1.234567e+06"),
    (Column("c", TypeCode.DOUBLE), 0.0001, "0.0001"),
    (Column("c", TypeCode.DOUBLE), 0.00001, "1e-05"),
    (Column("c", TypeCode.DOUBLE), 12345.678, "12345.678"),
    (Column("c", TypeCode.DOUBLE), -0.0, "-0"),
    (Column("c", TypeCode.DOUBLE), 1e21, "1e+21"),
    (Column("c", TypeCode.DOUBLE), 2.0, "2"),
    (Column("c", TypeCode.DOUBLE), math.nan, "0"),
    (Column("c", TypeCode.FLOAT), to_float32(3.14), "3.14"),
    (Column("c", TypeCode.FLOAT), to_float32(16777217.0), "1.6777216e+07"),
    (Column("c", TypeCode.FLOAT), to_float32(0.1), "0.1"),
    # DECIMAL and temporal: quoted strings
    (Column("c", TypeCode.DECIMAL, length=10, decimal=2), Decimal("1"), '"1.00"'),
    (Column("c", TypeCode.DECIMAL, length=10, decimal=2), Decimal("-0.5"), '"-0.50"'),
    (Column("c", TypeCode.DECIMAL, length=65, decimal=0), Decimal("-" + "9" * 65), '"-' + "9" * 65 + '"'),
    (Column("c", TypeCode.DATE), "0000-00-00", '"0000-00-00"'),
    (Column("c", TypeCode.DATETIME, decimal=3), "0000-00-00 00:00:00.000", '"0000-00-00 00:00:00.000"'),
    (Column("c", TypeCode.TIMESTAMP), "2020-02-20 02:20:20", '"2020-02-20 02:20:20"'),
    (Column("c", TypeCode.TIME, decimal=6), "-838:59:59.000000", '"-838:59:59.000000"'),
    (Column("c", TypeCode.TIME, decimal=1), "-00:00:01.5", '"-00:00:01.5"'),
    (Column("c", TypeCode.JSON), '{"k": "v", "a": [1, 2]}', '"{""k"": ""v"", ""a"": [1, 2]}"'),
    (Column("c", TypeCode.VECTOR), "[1,2,3]", '"[1,2,3]"'),
    # ENUM/SET: quoted member names
    (Column("c", TypeCode.ENUM, charset="utf8mb4", elements=("a,", "b")), 1, '"a,"'),
    (Column("c", TypeCode.ENUM, charset="utf8mb4", elements=("a", "b")), 0, '""'),
    (Column("c", TypeCode.SET, charset="utf8mb4", elements=("a", "b", "c")), 5, '"a,c"'),
    (Column("c", TypeCode.SET, charset="utf8mb4", elements=("a", "b", "c", "d")), 9, '"a,d"'),
    (Column("c", TypeCode.SET, charset="utf8mb4", elements=("a", "b")), 0, '""'),
    # strings
    (utf8("c"), 'say "hi", ok', '"say ""hi"", ok"'),
    (utf8("c"), "", '""'),
    (utf8("c"), "\\N", '"\\N"'),
    (Column("c", TypeCode.VARCHAR, charset="binary"), b"\x00\xff", '"AP8="'),
    (Column("c", TypeCode.CHAR, charset="binary"), b"", '""'),
]


@pytest.mark.parametrize(("col", "value", "field"), RENDERING, ids=[f"{c.type_name}-{f}" for c, _, f in RENDERING])
def test_value_rendering(col: Column, value: Any, field: str) -> None:
    assert field_of(col, value) == field


def test_hex_and_escape_mode_rendering() -> None:
    blob = Column("c", TypeCode.LONGBLOB, charset="binary")
    assert field_of(blob, b"hello world", opts(binary_encoding_method="hex")) == '"68656c6c6f20776f726c64"'
    assert field_of(blob, b"hello world") == '"aGVsbG8gd29ybGQ="'
    esc = opts(quote="", terminator="\n")
    assert field_of(blob, b"\xfb\xff", esc) == "+/8="
    assert field_of(Column("c", TypeCode.SET, charset="utf8mb4", elements=("a", "b", "c")), 5, esc) == "a\\,c"
    assert field_of(Column("c", TypeCode.DECIMAL, decimal=3), Decimal("1.5"), esc) == "1.500"
    assert field_of(utf8("c"), None, esc) == "\\N"


# ---------------------------------------------------------------------------------------------
# Quoting and escaping


@pytest.mark.parametrize(
    ("delimiter", "value", "escaped"),
    [
        (",", "abcdef", "abcdef"),
        (",", "abc\r\ndef", "abc\\r\\ndef"),
        (",", "abc\\def", "abc\\\\def"),
        (",", "abc,def", "abc\\,def"),
        ("***", "abc***def", "abc\\*\\*\\*def"),
        ("?", "abc\\def?ghi\\r\\n", "abc\\\\def\\?ghi\\\\r\\\\n"),  # TiCDC TestFormatWithEscape
        ("[*]", "a[*]b[*", "a\\[\\*\\]b[*"),
        ("[*]", "[*][*]", "\\[\\*\\]\\[\\*\\]"),
        ("\t", "a\tb", "a\\\tb"),
        ("|", "", ""),
    ],
)
def test_escape_mode(delimiter: str, value: str, escaped: str) -> None:
    fmt = CSVFormat(opts(delimiter=delimiter, quote=""))
    assert fmt.text(value) == escaped
    assert fmt.content(escaped) == value


@pytest.mark.parametrize(
    ("quote", "value", "quoted"),
    [('"', "a,b,c", '"a,b,c"'), ('"', '"a,b,c', '"""a,b,c"'), ('"', "", '""'), ("'", "it's", "'it''s'")],
)
def test_quote_mode(quote: str, value: str, quoted: str) -> None:
    fmt = CSVFormat(opts(quote=quote))
    assert fmt.text(value) == quoted
    assert fmt.content(quoted) == value


STRINGS = ["", '"', '""', "a,b", "x\r\ny", "\n", "\r", "\\", "\\N", "[*]", "a[*", "*]", "'", "\t", "你好", "😀"]


@pytest.mark.parametrize(
    "o",
    [
        opts(),
        opts(terminator="\n"),
        opts(quote="'", delimiter="[*]", terminator="\n"),
        opts(quote="", terminator="\n"),
        opts(quote="", delimiter="[*]"),
        opts(quote="", delimiter="\t", null="NULL"),
    ],
    ids=["default", "lf", "single-quote-multi-delim", "escape", "escape-multi-delim", "escape-tab"],
)
def test_tricky_strings_round_trip(o: CodecOptions) -> None:
    cols = tuple(utf8(f"c{i}") for i in range(len(STRINGS)))
    ts = table(*cols)
    rows = [RowChange(Op.INSERT, ts, 7, new=tuple(STRINGS)), RowChange(Op.DELETE, ts, 8, old=tuple(reversed(STRINGS)))]
    data = b"".join(m.value or b"" for m in CSVEncoder(o).encode(rows))
    back = CSVDecoder(o, ts, commit_ts=9).decode_file(data)
    assert [(r.op, r.new, r.old) for r in back] == [(r.op, r.new, r.old) for r in rows]


def test_quoted_terminator_inside_value_and_line_numbers() -> None:
    o = opts(include_commit_ts=True)
    ts = table(Column("id", TypeCode.INT), utf8("s"))
    data = (
        b'"I","t","test",5,1,"two\r\nlines, with ""quotes"""\r\n'
        b'"I","t","test",6,2,"plain"\r\n'
        b'"I","t","test",7,x,"bad"\r\n'
    )
    with pytest.raises(CodecError) as err:
        CSVDecoder(o, ts).decode_file(data, where="d/CDC1.csv")
    assert err.value.where == "d/CDC1.csv:4"  # the record after the two-line one starts on line 4
    assert "'id'" in err.value.message
    rows = CSVDecoder(o, ts).decode_file(data.rsplit(b'"I"', 1)[0])
    assert [r.new for r in rows] == [(1, 'two\r\nlines, with "quotes"'), (2, "plain")]
    assert [r.commit_ts for r in rows] == [5, 6]


def test_null_versus_quoted_null_string() -> None:
    ts = table(utf8("a"), utf8("b"), Column("n", TypeCode.INT))
    quoted = CSVDecoder(opts(), ts).decode_file(b'"I","t","test",\\N,"\\N",\\N\r\n')
    assert quoted[0].new == (None, "\\N", None)
    # Escape mode: a text \N is written \\N, so only a bare \N is NULL.
    esc = opts(quote="")
    line = CSVEncoder(esc).encode_row(RowChange(Op.INSERT, ts, 1, new=(None, "\\N", None)))
    assert line == b"I,t,test,\\N,\\\\N,\\N\r\n"
    assert CSVDecoder(esc, ts).decode_file(line)[0].new == (None, "\\N", None)


def test_escape_mode_null_string_without_backslash_is_lossy() -> None:
    """Documented loss: with quote "" and null "NULL", the text NULL is written like NULL itself."""
    o = opts(quote="", null="NULL")
    ts = table(utf8("a"))
    line = CSVEncoder(o).encode_row(RowChange(Op.INSERT, ts, 1, new=("NULL",)))
    assert line == b"I,t,test,NULL\r\n"
    assert CSVDecoder(o, ts).decode_file(line)[0].new == (None,)
    # Quote mode keeps them apart.
    q = opts(null="NULL")
    line = CSVEncoder(q).encode_row(RowChange(Op.INSERT, ts, 1, new=("NULL",)))
    assert CSVDecoder(q, ts).decode_file(line)[0].new == ("NULL",)


def test_decoder_accepts_lightning_escapes_and_unquoted_text() -> None:
    ts = table(utf8("a"), utf8("b"), Column("n", TypeCode.INT))
    esc = CSVDecoder(opts(quote="", terminator="\n"), ts).decode_file(b"I,t,test,a\\tb\\0\\Z,\\x\\,,+7\n")
    assert esc[0].new == ("a\tb\x00\x1a", "x,", 7)
    # Quote mode: bare text and quoted numbers are read too (hand-written files).
    q = CSVDecoder(opts(terminator="\n"), ts).decode_file(b'I,t,test,plain,"","-3"\n')
    assert q[0].new == ("plain", "", -3)


# ---------------------------------------------------------------------------------------------
# Header, old value, DDL/resolved


def test_header_line() -> None:
    ts = table(Column("col1", TypeCode.INT), utf8("Col2"))
    base = {"output_field_header": True, "terminator": "\n"}
    assert CSVEncoder(opts(**base)).header(ts) == (
        b"ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,col1,Col2\n"
    )
    full = opts(**base, include_commit_ts=True, csv_output_old_value=True, delimiter=" ")
    assert CSVEncoder(full).header(ts) == (
        b"ticdc-meta$operation ticdc-meta$table ticdc-meta$schema ticdc-meta$commit-ts ticdc-meta$is-update col1 Col2\n"
    )
    assert CSVEncoder(opts()).header(ts) == b""


def test_decoder_checks_and_skips_header() -> None:
    o = opts(output_field_header=True, include_commit_ts=True)
    ts = table(Column("col1", TypeCode.INT), utf8("Col2"))
    enc = CSVEncoder(o)
    data = enc.header(ts) + enc.encode_row(RowChange(Op.INSERT, ts, 3, new=(1, "x")))
    assert [r.new for r in CSVDecoder(o, ts).decode_file(data)] == [(1, "x")]
    other = table(Column("col1", TypeCode.INT), utf8("col3"))
    with pytest.raises(CodecError, match="header names") as err:
        CSVDecoder(o, other.renamed("test", "t")).decode_file(data, where="h.csv")
    assert err.value.where == "h.csv:1"


OLD_TS = table(Column("id", TypeCode.INT, nullable=False), utf8("v"))


def test_update_with_old_value_is_one_message_of_two_lines() -> None:
    o = opts(csv_output_old_value=True, include_commit_ts=True, terminator="\n")
    enc = CSVEncoder(o)
    enc.append_row(RowChange(Op.UPDATE, OLD_TS, 42, new=(1, "new"), old=(1, "old")))
    enc.append_row(RowChange(Op.INSERT, OLD_TS, 43, new=(2, "x")))
    enc.append_row(RowChange(Op.DELETE, OLD_TS, 44, old=(2, "x")))
    enc.append_row(RowChange(Op.UPDATE, OLD_TS, 45, new=(3, "y")))  # no old image: a U line
    msgs = enc.build()
    assert [m.value for m in msgs] == [
        b'"D","t","test",42,true,1,"old"\n"I","t","test",42,true,1,"new"\n',
        b'"I","t","test",43,false,2,"x"\n',
        b'"D","t","test",44,false,2,"x"\n',
        b'"U","t","test",45,true,3,"y"\n',
    ]
    assert [m.rows for m in msgs] == [1, 1, 1, 1]
    assert enc.build() == []
    back = CSVDecoder(o, OLD_TS).decode_file(b"".join(m.value or b"" for m in msgs))
    assert [(r.op, r.commit_ts, r.old, r.new) for r in back] == [
        (Op.UPDATE, 42, (1, "old"), (1, "new")),
        (Op.INSERT, 43, None, (2, "x")),
        (Op.DELETE, 44, (2, "x"), None),
        (Op.UPDATE, 45, None, (3, "y")),
    ]


def test_without_old_value_update_is_a_u_line() -> None:
    o = opts(terminator="\n")
    line = CSVEncoder(o).encode_row(RowChange(Op.UPDATE, OLD_TS, 42, new=(1, "new"), old=(1, "old")))
    assert line == b'"U","t","test",1,"new"\n'
    (back,) = CSVDecoder(o, OLD_TS, commit_ts=99).decode_file(line)
    assert (back.op, back.commit_ts, back.new, back.old) == (Op.UPDATE, 99, (1, "new"), None)


def test_rejoin_only_matching_pairs() -> None:
    o = opts(csv_output_old_value=True, include_commit_ts=True, quote="", terminator="\n")
    dec = CSVDecoder(o, OLD_TS)
    # D(true) then I(true) at another commit ts: not one update.
    rows = dec.decode_file(b"D,t,test,1,true,1,a\nI,t,test,2,true,1,b\n")
    assert [(r.op, r.commit_ts) for r in rows] == [(Op.DELETE, 1), (Op.INSERT, 2)]
    # A lone D(true) at the end and an I(false) after a D(true) stay what they say.
    rows = dec.decode_file(b"D,t,test,1,true,1,a\nI,t,test,1,false,1,b\nD,t,test,3,true,1,c\n")
    assert [(r.op, r.commit_ts) for r in rows] == [(Op.DELETE, 1), (Op.INSERT, 1), (Op.DELETE, 3)]
    # Go ParseBool spellings.
    rows = dec.decode_file(b"D,t,test,1,T,1,a\nI,t,test,1,TRUE,1,b\n")
    assert [(r.op, r.old, r.new) for r in rows] == [(Op.UPDATE, (1, "a"), (1, "b"))]


def test_ddl_and_resolved() -> None:
    enc = CSVEncoder(opts())
    ddl = DDLEvent("test", "t", "CREATE TABLE t (id INT)", 3, 77)
    msg = enc.encode_ddl(ddl)
    assert (msg.key, msg.value, msg.rows, msg.commit_ts) == (None, b"", 0, 77)
    assert enc.encode_resolved(Resolved(80)) is None
    out = enc.encode([RowChange(Op.INSERT, OLD_TS, 1, new=(1, "a")), ddl, Resolved(90)])
    assert [m.value for m in out] == [b'"I","t","test",1,"a"\r\n', b""]


def test_registry_and_message_api() -> None:
    o = opts()
    assert isinstance(make_encoder(o), CSVEncoder)
    dec = make_decoder(o)
    assert isinstance(dec, CSVDecoder)
    with pytest.raises(CodecError, match="no table schema"):
        dec.decode(Message(None, b'"I","t","test",1,"a"\r\n'))
    dec.set_table_schema(OLD_TS, commit_ts=5)
    (row,) = dec.decode(Message(None, b'"I","t","test",1,"a"\r\n'))
    assert row.commit_ts == 5
    (row,) = dec.decode(Message(None, b'"I","t","test",1,"a"\r\n', commit_ts=6))
    assert row.commit_ts == 6
    assert dec.decode(Message(None, b"")) == []
    with pytest.raises(CodecError, match="no value"):
        dec.decode(Message(None, None), where="x")


# ---------------------------------------------------------------------------------------------
# Round trips


ROUND_TRIP_OPTIONS = [
    opts(),
    opts(include_commit_ts=True, csv_output_old_value=True, terminator="\n"),
    opts(quote="'", delimiter="[*]", binary_encoding_method="hex", include_commit_ts=True),
    opts(quote="", include_commit_ts=True),
    opts(quote="", delimiter="[*]", csv_output_old_value=True, terminator="\n"),
    opts(quote="", delimiter="\t", binary_encoding_method="hex"),
    opts(quote="", delimiter="|", null="NULL", include_commit_ts=True),  # lossy for the text "NULL"
]


@pytest.mark.parametrize("o", ROUND_TRIP_OPTIONS, ids=lambda o: f"q{o.quote!r}-d{o.delimiter!r}-n{o.null!r}")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(o: CodecOptions, data: st.DataObject) -> None:
    ts = data.draw(tables())
    rows = data.draw(st.lists(row_changes(ts), min_size=1, max_size=4))
    if not o.quote and o.null == "NULL":
        # The one documented escape-mode loss: a text value whose escaped form is the null string.
        assume(not any(v == "NULL" for r in rows for img in (r.new, r.old) if img for v in img))
    enc = CSVEncoder(o)
    data_bytes = b"".join(m.value or b"" for m in enc.encode(rows))
    back = CSVDecoder(o, ts, commit_ts=12345).decode_file(data_bytes, where="rt.csv")
    assert len(back) == len(rows)
    for got, want in zip(back, rows, strict=True):
        assert got.op is want.op
        assert got.commit_ts == (want.commit_ts if o.include_commit_ts else 12345)
        if want.op is Op.DELETE:
            assert same_image(got.old, want.old) and got.new is None
        else:
            assert same_image(got.new, want.new)
            old = want.old if (want.op is Op.UPDATE and o.csv_output_old_value) else None
            assert same_image(got.old, old)


TEXT_OPTIONS = [
    opts(),
    opts(quote="'", delimiter="[*]", terminator="\n"),
    opts(quote="", terminator="\n"),
    opts(quote="", delimiter="[*]"),
    opts(quote="", delimiter="\t"),
    opts(quote="", delimiter="|", null=""),  # lossy for the empty string, excluded below
]
# Every character the dialects treat specially, plus a little ordinary text.
TRICKY = st.text(alphabet=st.sampled_from(list("\"'[*]|,\t\\\r\nNn rtZ0b€😀")), max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(TEXT_OPTIONS), st.lists(st.one_of(st.none(), TRICKY), min_size=1, max_size=5))
def test_text_round_trip(o: CodecOptions, values: list[str | None]) -> None:
    if not o.quote and o.null == "":
        assume("" not in values)
    ts = table(*(utf8(f"c{i}") for i in range(len(values))), name="t|[*]", schema="s\"'")
    rows = [RowChange(Op.INSERT, ts, 1, new=tuple(values)), RowChange(Op.DELETE, ts, 2, old=tuple(values))]
    data = b"".join(m.value or b"" for m in CSVEncoder(o).encode(rows))
    back = CSVDecoder(o, ts).decode_file(data)
    assert [(r.op, r.new, r.old) for r in back] == [(r.op, r.new, r.old) for r in rows]


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_round_trip(x: float) -> None:
    ts = table(Column("f", TypeCode.FLOAT, nullable=False))
    o = opts()
    line = CSVEncoder(o).encode_row(RowChange(Op.INSERT, ts, 1, new=(to_float32(x),)))
    (back,) = CSVDecoder(o, ts).decode_file(line)
    assert same_image(back.new, (to_float32(x),))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([opts(), opts(quote="", include_commit_ts=True), opts(quote="'", delimiter="[*]")]),
    st.text(alphabet=st.sampled_from(list("IUDt,test\"'[*]\\N\r\n0123456789.e-+truefalse ")), max_size=60)
    | st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)
def test_hostile_input_only_raises_codec_error(o: CodecOptions, text: str) -> None:
    ts = table(Column("id", TypeCode.INT), Column("f", TypeCode.FLOAT), utf8("s"))
    try:
        rows = CSVDecoder(o, ts).decode_file(text.encode("utf-8", "surrogatepass"))
    except CodecError:
        return
    for r in rows:
        assert r.table_schema is ts


# ---------------------------------------------------------------------------------------------
# Errors

BAD_TS = table(
    Column("id", TypeCode.INT),
    Column("f", TypeCode.DOUBLE),
    Column("m", TypeCode.DECIMAL, length=10, decimal=2),
    Column("b", TypeCode.BLOB, charset="binary"),
    Column("e", TypeCode.ENUM, **UTF8, elements=("a", "b")),
    Column("s", TypeCode.SET, **UTF8, elements=("x", "y")),
    Column("d", TypeCode.DATE),
    Column("u", TypeCode.TINYINT, unsigned=True),
)
GOOD = '"I","t","test",1,1.5,"2.00","AA==","a","x,y","2020-01-01",255'


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('"I","t","test",1,1.5\r\n', r"5 fields, expected 11"),
        (GOOD + ",9\r\n", r"12 fields, expected 11"),
        (GOOD.replace(",1,1.5", ',1"2",1.5') + "\r\n", r"quote character '\"' inside an unquoted field"),
        (GOOD.replace('"AA=="', '"AA==') + "\r\n", r"unterminated quoted field"),
        ('"I","t","test",1,1.5,"2.00","AA==","a","x","2020-01-01",1,"open\r\n', r"unterminated quoted field"),
        ('"I","t","test",1,1.5,"2.00","AA=="x,"a","x","2020-01-01",1\r\n', r"unexpected 'x,"),
        (GOOD.replace(",1,1.5", ",one,1.5") + "\r\n", r"column 'id' \(int\): 'one' is not an integer"),
        (GOOD.replace(",1,1.5", ",1_0,1.5") + "\r\n", r"column 'id'.*not an integer"),
        (GOOD.replace(",1,1.5", ",2147483648,1.5") + "\r\n", r"column 'id'.*in range"),
        (GOOD.replace("255", "-1") + "\r\n", r"column 'u'.*not an integer"),
        (GOOD.replace("255", "256") + "\r\n", r"column 'u'.*in range"),
        (GOOD.replace("1.5", "nan") + "\r\n", r"column 'f'.*floating-point"),
        (GOOD.replace("1.5", "1e999") + "\r\n", r"column 'f'.*float64 range"),
        (GOOD.replace('"2.00"', '"2,00"') + "\r\n", r"column 'm'.*decimal number"),
        (GOOD.replace('"I"', '"X"') + "\r\n", r"unknown operation 'X'"),
        (GOOD.replace('"I"', "\\N") + "\r\n", r"operation is NULL"),
        (GOOD.replace('"AA=="', '"AA="') + "\r\n", r"column 'b'.*base64"),
        (GOOD.replace('"AA=="', '"A@=="') + "\r\n", r"column 'b'.*base64"),
        (GOOD.replace('"a"', '"c"') + "\r\n", r"column 'e'.*member of ENUM"),
        (GOOD.replace('"a"', '"A"') + "\r\n", r"column 'e'.*member of ENUM"),  # _bin collation
        (GOOD.replace('"x,y"', '"x,z"') + "\r\n", r"column 's'.*members of SET"),
        (GOOD.replace('"2020-01-01"', '"2020-1-1"') + "\r\n", r"column 'd'.*DATE"),
        (GOOD.replace('"t"', '"other"') + "\r\n", r"schema is test.t"),
    ],
)
def test_bad_lines(line: str, message: str) -> None:
    good = CSVDecoder(opts(), BAD_TS).decode_file(GOOD + "\r\n")
    assert good[0].new == (1, 1.5, Decimal("2.00"), b"\x00", 1, 3, "2020-01-01", 255)
    data = ('"I","t","test",1,1.5,"2.00","AA==","a","x","2020-01-01",1\r\n' + line).encode()
    with pytest.raises(CodecError, match=message) as err:
        CSVDecoder(opts(), BAD_TS).decode_file(data, where="db/t/1/CDC0001.csv")
    assert err.value.where == "db/t/1/CDC0001.csv:2"


@pytest.mark.parametrize(
    ("o", "data", "message"),
    [
        (opts(binary_encoding_method="hex"), b'"I","t","test","0g"\r\n', r"column 'b'.*hex"),
        (opts(binary_encoding_method="hex"), b'"I","t","test","abc"\r\n', r"column 'b'.*hex"),
        (opts(quote=""), b"I,t,test,AA==\\", r"backslash escape at the end"),
        (opts(include_commit_ts=True), b'"I","t","test",-1,"AA=="\r\n', r"commit ts '-1'"),
        (opts(include_commit_ts=True), b'"I","t","test",18446744073709551616,"AA=="\r\n', r"commit ts"),
        (opts(csv_output_old_value=True), b'"I","t","test",yes,"AA=="\r\n', r"is-updated 'yes'"),
        (opts(), b'"I","t","test","\xff"\r\n', r"not UTF-8"),
        (opts(), b"\r\n", r"1 fields, expected 4"),
    ],
)
def test_bad_input_other_modes(o: CodecOptions, data: bytes, message: str) -> None:
    ts = table(Column("b", TypeCode.VARCHAR, charset="binary"))
    with pytest.raises(CodecError, match=message) as err:
        CSVDecoder(o, ts).decode_file(data, where="f.csv")
    assert err.value.where == "f.csv:1"


@pytest.mark.parametrize(
    "text",
    ["+1.00", ".50", "1.", "-.5", "1e5", "1E+2", " 1.00", "1.00 ", "١.٠٠", "1" * 66, "0." + "0" * 65, "9" * 100_000],
)
def test_decimal_follows_the_shared_rule(text: str) -> None:
    """DECIMAL text is MyDecimal.String(): no '+', no bare point, no exponent, at most 65 digits."""
    ts = table(Column("id", TypeCode.INT), Column("m", TypeCode.DECIMAL, length=65, decimal=2))
    dec = CSVDecoder(opts(), ts)
    good = '"I","t","test",1,"-0.50"\r\n'
    with pytest.raises(CodecError, match=r"column 'm' \(decimal\): .* is not a decimal number .*65 digits") as err:
        dec.decode_file((good + f'"I","t","test",2,"{text}"\r\n').encode(), where="db/t/1/CDC0001.csv")
    assert err.value.where == "db/t/1/CDC0001.csv:2"
    assert len(str(err.value)) < 400  # a huge field is clipped, not echoed
    # escape mode (no quote) reads the same rule
    with pytest.raises(CodecError, match=r"not a decimal number") as err:
        CSVDecoder(opts(quote=""), ts).decode_file(f"I,t,test,2,{text}\n".encode(), where="f.csv")
    assert err.value.where == "f.csv:1"


def test_decimal_what_ticdc_writes_is_read() -> None:
    """What the CSV writer produces (MyDecimal.String(), up to 65 digits) reads back unchanged."""
    ts = table(Column("m", TypeCode.DECIMAL, length=65, decimal=30))
    enc, dec = CSVEncoder(opts()), CSVDecoder(opts(), ts)
    for v in [Decimal("0"), Decimal("-0.5"), Decimal("9" * 35 + "." + "9" * 30), Decimal("-" + "9" * 35 + ".5")]:
        line = enc.encode_row(RowChange(Op.INSERT, ts, 1, new=(v,)))
        (back,) = dec.decode_file(line)
        assert back.new == (v,)
        assert format(back.new[0], "f") == line.decode().split(",")[-1].strip('"\r\n')
    assert dec.decode_file(b'"I","t","test","' + b"9" * 65 + b'"\r\n')[0].new == (Decimal("9" * 65),)
    assert dec.decode_file(b'"I","t","test",-0.000\r\n')[0].new == (Decimal("-0.000"),)  # bare is read too


def test_float32_overflow_and_enum_fallbacks() -> None:
    ts = table(
        Column("f", TypeCode.FLOAT),
        Column("e", TypeCode.ENUM, charset="utf8mb4", collation="utf8mb4_general_ci", elements=("Red", "b")),
        Column("s", TypeCode.SET, **UTF8, elements=("x", "y")),
    )
    dec = CSVDecoder(opts(), ts)
    # TiDB ParseEnum/ParseSet: case-insensitive collation match, then a number.
    assert dec.decode_file('"I","t","test",3.4028235e+38,"RED ","3"\r\n')[0].new == (to_float32(3.4028235e38), 1, 3)
    assert dec.decode_file('"I","t","test",1,"2",""\r\n')[0].new == (1.0, 2, 0)
    with pytest.raises(CodecError, match=r"column 'f'.*float32 range"):
        dec.decode_file('"I","t","test",3.5e38,"b",""\r\n')
    with pytest.raises(CodecError, match=r"column 'e'.*member of ENUM"):
        dec.decode_file('"I","t","test",1,"3",""\r\n')
    with pytest.raises(CodecError, match=r"column 's'.*members of SET"):
        dec.decode_file('"I","t","test",1,"b","4"\r\n')


def test_encoder_errors_name_the_column() -> None:
    enum = Column("e", TypeCode.ENUM, charset="utf8mb4", elements=("a",))
    s = Column("s", TypeCode.SET, charset="utf8mb4", elements=("a",))
    ts = table(Column("id", TypeCode.INT), enum, s)
    enc = CSVEncoder(opts())
    with pytest.raises(CodecError, match=r"column 'e'.*ENUM index 2"):
        enc.encode_row(RowChange(Op.INSERT, ts, 1, new=(1, 2, 0)))
    with pytest.raises(CodecError, match=r"column 's'.*SET bitmask"):
        enc.encode_row(RowChange(Op.INSERT, ts, 1, new=(1, 1, 2)))
    with pytest.raises(CodecError, match=r"column 'id' is absent"):
        enc.encode_row(RowChange(Op.DELETE, ts, 1, old=(ABSENT, 1, 0)))
    with pytest.raises(CodecError, match=r"column 'id' \(int\): cannot write '1'"):
        enc.encode_row(RowChange(Op.INSERT, ts, 1, new=("1", 1, 0)))
    big = table(Column("m", TypeCode.DECIMAL, length=65, decimal=0))
    assert enc.encode_row(RowChange(Op.INSERT, big, 1, new=(Decimal("9" * 40),))).endswith(b',"' + b"9" * 40 + b'"\r\n')
    # 65 digits rescale fine (decimal_text's context holds them); beyond its 100 digits is an error.
    assert enc.encode_row(RowChange(Op.INSERT, big, 1, new=(Decimal("1E+30"),))).endswith(b',"1' + b"0" * 30 + b'"\r\n')
    with pytest.raises(CodecError, match=r"column 'm' \(decimal\)"):  # needs a rescale past the context
        enc.encode_row(RowChange(Op.INSERT, big, 1, new=(Decimal("1E+200"),)))
    with pytest.raises(CodecError, match="UTF-8"):
        enc.encode_row(RowChange(Op.INSERT, table(utf8("c")), 1, new=("\ud800",)))


@pytest.mark.parametrize(
    "kw",
    [{"quote": "''"}, {"delimiter": ""}, {"terminator": ""}, {"quote": ",", "delimiter": ","}, {"quote": "|"}],
)
def test_bad_dialects(kw: dict[str, Any]) -> None:
    if kw == {"quote": "|"}:  # fine on its own: only clashes with a delimiter containing it
        CSVFormat(opts(**kw))
        with pytest.raises(ConfigError):
            CSVFormat(opts(quote="|", delimiter="||"))
        return
    with pytest.raises(ConfigError):
        CSVEncoder(opts(**kw))


def test_handle_index_table_is_unchanged() -> None:
    # Key flags play no part in CSV: a table with indexes renders like one without.
    ts = TableSchema(
        "test", "t", (Column("id", TypeCode.INT, nullable=False), utf8("v")), (Index("PRIMARY", ("id",), primary=True),)
    )
    assert CSVEncoder(opts()).encode_row(RowChange(Op.INSERT, ts, 1, new=(1, "a"))) == b'"I","t","test",1,"a"\r\n'
