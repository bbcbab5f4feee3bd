"""TiCDC Open Protocol: seed event stream, exact bytes per spec §1, batching, large messages, hostile input."""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import unicodedata
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec import CodecOptions, Message, make_decoder, make_encoder
from changefeed.codec.gojson import _unquote_tokens, go_quote, go_quote_json, go_unquote, quote_jsoniter, quote_std
from changefeed.codec.open_protocol import OpenProtocolDecoder, OpenProtocolEncoder
from changefeed.codec.values import json_float32, json_float64
from changefeed.errors import CodecError, ConfigError, MessageTooLargeError
from changefeed.model import (
    ABSENT,
    Column,
    ColumnFlag,
    DDLEvent,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
)
from changefeed.model.gofloat import format_json, to_float32
from changefeed.model.values import check_value
from tests.codec.helpers import BIN, UTF8
from tests.strategies import row_changes, tables

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "open_protocol"
WHERE = "open-topic/0/42"


def opts(**kw: Any) -> CodecOptions:
    return CodecOptions(protocol="open-protocol", **kw)


def frame(*events: tuple[bytes | str, bytes | str]) -> Message:
    """A message built by hand from event key/value JSON texts (independent of the encoder)."""
    key, value = struct.pack(">Q", 1), b""
    for k, v in events:
        kb = k.encode() if isinstance(k, str) else k
        vb = v.encode() if isinstance(v, str) else v
        key += struct.pack(">Q", len(kb)) + kb
        value += struct.pack(">Q", len(vb)) + vb
    return Message(key, value)


def unframe(msg: Message) -> list[tuple[bytes, bytes]]:
    """Event (key, value) JSON texts of a message."""
    out = []
    assert msg.key[:8] == b"\0" * 7 + b"\1"
    kp, vp = 8, 0
    while kp < len(msg.key):
        (kl,) = struct.unpack_from(">Q", msg.key, kp)
        (vl,) = struct.unpack_from(">Q", msg.value, vp)
        out.append((msg.key[kp + 8 : kp + 8 + kl], msg.value[vp + 8 : vp + 8 + vl]))
        kp += 8 + kl
        vp += 8 + vl
    assert vp == len(msg.value)
    return out


def t1() -> TableSchema:
    """The seed's `CREATE TABLE test.t1(id int primary key, val varchar(16))`."""
    return TableSchema(
        "test",
        "t1",
        (Column("id", TypeCode.INT, nullable=False), Column("val", TypeCode.VARCHAR, length=16, **UTF8)),
        indexes=(Index("PRIMARY", ("id",), primary=True),),
    )


def one_column_value(column: Column, value: Any, compat: str = "ticdc") -> bytes:
    """The JSON text of ``column``'s object in an INSERT of a one-column table."""
    ts = TableSchema("s", "t", (column,))
    msg = make_encoder(opts(compat=compat)).encode([RowChange(Op.INSERT, ts, 1, new=(value,))])[0]
    ((_, v),) = unframe(msg)
    prefix = b'{"u":{' + orjson.dumps(column.name) + b":"
    assert v.startswith(prefix) and v.endswith(b"}}")
    return v[len(prefix) : -2]


# ---------------------------------------------------------------- the seed's event stream (logs 1-14)

_LOG_LINE = re.compile(r'^(\d+)\. \[partition=(\d+)\] \[key="(.*)"\] \[value=(?:"(.*)")?\]$')


def seed_logs() -> list[tuple[int, int, str, str]]:
    logs = []
    for line in (FIXTURES / "seed_event_stream.log").read_text("utf-8").splitlines():
        m = _LOG_LINE.match(line)
        assert m, line
        n, partition, key, value = m.groups()
        # The log prints Go-quoted strings; their only escapes here are \" (valid JSON escapes).
        logs.append((int(n), int(partition), json.loads(f'"{key}"'), json.loads(f'"{value or ""}"')))
    return logs


DDL_TS, ROW_TS_1, ROW_TS_2, RESOLVED_TS = 415508856908021766, 415508878783938562, 415508881418485761, 415508881038376963
CREATE_T1 = "CREATE TABLE test.t1(id int primary key, val varchar(16))"
# What each log decodes to: ("ddl"), ("resolved", ts) or (op, commit ts, new, old) by column name.
SEED_EXPECTED: dict[int, tuple[Any, ...]] = {
    1: ("ddl",),
    2: ("resolved", DDL_TS),
    3: ("ddl",),
    4: ("resolved", DDL_TS),
    5: (Op.INSERT, ROW_TS_1, {"id": 1, "val": "aa"}, None),
    6: (Op.INSERT, ROW_TS_1, {"id": 2, "val": "bb"}, None),  # 'aa' then 'bb' in one txn: one event
    7: (Op.INSERT, ROW_TS_1, {"id": 3, "val": "cc"}, None),
    8: (Op.INSERT, ROW_TS_1, {"id": 3, "val": "cc"}, None),  # duplicate of log 7
    9: (Op.DELETE, ROW_TS_2, None, {"id": 1}),  # handle-key-only delete of that era
    10: (Op.DELETE, ROW_TS_2, None, {"id": 2}),  # the PK update id 2 -> 4, split as delete + insert
    11: (Op.INSERT, ROW_TS_2, {"id": 3, "val": "dd"}, None),  # an UPDATE without old value: "u" only
    12: (Op.INSERT, ROW_TS_2, {"id": 4, "val": "ee"}, None),
    13: ("resolved", RESOLVED_TS),
    14: ("resolved", RESOLVED_TS),
}


def test_seed_stream_fixture_is_complete() -> None:
    logs = seed_logs()
    assert [n for n, *_ in logs] == list(range(1, 15))
    assert logs[7][2:] == logs[6][2:]  # log 8 repeats log 7 byte for byte


@pytest.mark.parametrize("n", range(1, 15))
def test_seed_log_decodes_to_the_described_event(n: int) -> None:
    # One decoder per partition, fed in log order, as a consumer would.
    decoders = {0: OpenProtocolDecoder(opts()), 1: OpenProtocolDecoder(opts())}
    for num, partition, key, value in seed_logs():
        events = decoders[partition].decode(frame((key, value)), where=f"seed log {num}")
        if num == n:
            break
    assert len(events) == 1
    (event,) = events
    expected = SEED_EXPECTED[n]
    if expected[0] == "ddl":
        assert event == DDLEvent("test", "t1", CREATE_T1, 3, DDL_TS)
        assert event.action.name == "CREATE_TABLE"
        return
    if expected[0] == "resolved":
        assert event == Resolved(expected[1])
        return
    op, ts, new, old = expected
    assert isinstance(event, RowChange)
    assert (event.op, event.schema, event.table, event.commit_ts) == (op, "test", "t1", ts)
    assert event.as_dict() == (new or {})
    assert event.as_dict(old=True) == (old or {})
    # v4.0 output: "h" but no "f". The id column is the handle; val's charset is taken as text.
    id_col, val_col = event.table_schema.columns
    assert (id_col.name, id_col.type_code, id_col.key_flags) == ("id", TypeCode.INT, ColumnFlag.HANDLE_KEY)
    assert (val_col.name, val_col.type_code, val_col.charset) == ("val", TypeCode.VARCHAR, "utf8mb4")
    assert event.table_schema.handle_key == (0,)
    if op is Op.DELETE:
        assert event.old[1] is ABSENT  # the table's known column that the delete does not carry


def test_seed_rows_share_one_schema_and_a_lone_delete_has_only_its_columns() -> None:
    dec = OpenProtocolDecoder(opts())
    rows = [
        ev
        for num, partition, key, value in seed_logs()
        if partition == 0
        for ev in dec.decode(frame((key, value)))
        if isinstance(ev, RowChange)
    ]
    assert len({id(r.table_schema) for r in rows}) == 1
    # Without an earlier full row, a handle-only delete rebuilds a table of just that column.
    logs = {n: (k, v) for n, _, k, v in seed_logs()}
    (lone,) = OpenProtocolDecoder(opts()).decode(frame(logs[9]))
    assert [c.name for c in lone.table_schema.columns] == ["id"]
    assert lone.old == (1,)


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 13, 14])
def test_seed_ddl_and_resolved_encode_back_to_the_same_bytes(compat: str, n: int) -> None:
    _, _, key, value = seed_logs()[n - 1]
    enc = OpenProtocolEncoder(opts(compat=compat))
    kind = SEED_EXPECTED[n]
    msg = (
        enc.encode_ddl(DDLEvent("test", "t1", CREATE_T1, 3, DDL_TS))
        if kind[0] == "ddl"
        else enc.encode_resolved(Resolved(kind[1]))
    )
    expected = frame((key, value))
    assert (msg.key, msg.value) == (expected.key, expected.value)
    if kind[0] == "resolved":
        assert msg.value == b"\0" * 8
    assert msg.rows == 0


CURRENT_T1 = {
    # Today's form of the seed's rows: VARCHAR as a plain string (not base64) and an "f" member.
    5: (
        Op.INSERT,
        ROW_TS_1,
        (1, "aa"),
        None,
        '{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"val":{"t":15,"f":64,"v":"aa"}}}',
    ),
    6: (
        Op.INSERT,
        ROW_TS_1,
        (2, "bb"),
        None,
        '{"u":{"id":{"t":3,"h":true,"f":11,"v":2},"val":{"t":15,"f":64,"v":"bb"}}}',
    ),
    7: (
        Op.INSERT,
        ROW_TS_1,
        (3, "cc"),
        None,
        '{"u":{"id":{"t":3,"h":true,"f":11,"v":3},"val":{"t":15,"f":64,"v":"cc"}}}',
    ),
    # Deletes carry the whole row today; delete-only-output-handle-key-columns gives the old shape.
    9: (Op.DELETE, ROW_TS_2, None, (1, "aa"), '{"d":{"id":{"t":3,"h":true,"f":11,"v":1}}}'),
    10: (Op.DELETE, ROW_TS_2, None, (2, "bb"), '{"d":{"id":{"t":3,"h":true,"f":11,"v":2}}}'),
    # With output-old-value=false an UPDATE is "u" only, as in the seed.
    11: (
        Op.UPDATE,
        ROW_TS_2,
        (3, "dd"),
        (3, "cc"),
        '{"u":{"id":{"t":3,"h":true,"f":11,"v":3},"val":{"t":15,"f":64,"v":"dd"}}}',
    ),
    12: (
        Op.INSERT,
        ROW_TS_2,
        (4, "ee"),
        None,
        '{"u":{"id":{"t":3,"h":true,"f":11,"v":4},"val":{"t":15,"f":64,"v":"ee"}}}',
    ),
}


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
@pytest.mark.parametrize("n", sorted(CURRENT_T1))
def test_seed_rows_in_todays_form(compat: str, n: int) -> None:
    """Keys match the seed ([tiflow] adds rid); values differ only where TiCDC changed (see CURRENT_T1)."""
    _, _, seed_key, seed_value = seed_logs()[n - 1]
    op, ts, new, old, value = CURRENT_T1[n]
    row = RowChange(op, t1(), ts, new=new, old=old)
    o = opts(compat=compat, output_old_value=False, delete_only_output_handle_key_columns=True)
    ((key, val),) = unframe(OpenProtocolEncoder(o).encode([row])[0])
    rid = (new or old)[0]
    assert key.decode() == (seed_key if compat == "ticdc" else seed_key.replace(',"t":1', f',"rid":{rid},"t":1'))
    assert val.decode() == value
    # The seed's v4.0 value and today's value decode to the same row.
    (a,) = OpenProtocolDecoder(opts()).decode(frame((seed_key, seed_value)))
    (b,) = OpenProtocolDecoder(opts()).decode(frame((key, val)))
    assert (a.op, a.commit_ts, a.as_dict(), a.as_dict(old=True)) == (
        b.op,
        b.commit_ts,
        b.as_dict(),
        b.as_dict(old=True),
    )


def test_todays_delete_carries_the_whole_row() -> None:
    row = RowChange(Op.DELETE, t1(), ROW_TS_2, old=(1, "aa"))
    ((_, val),) = unframe(OpenProtocolEncoder(opts()).encode([row])[0])
    assert val == b'{"d":{"id":{"t":3,"h":true,"f":11,"v":1},"val":{"t":15,"f":64,"v":"aa"}}}'


# ---------------------------------------------------------------- the seed's column type table


def seed_type_examples() -> dict[str, list[str]]:
    out = {}
    for line in (FIXTURES / "seed_column_types.txt").read_text("utf-8").splitlines()[1:]:
        name, _code, example, *_ = (part.strip() for part in line.split(" | "))
        out[name] = [e.strip() for e in example.split(" / ")] if example.startswith("{") else []
    return out


SEED_TYPE_CASES: list[tuple[str, int, Column, Any]] = [
    ("TINYINT/BOOL", 0, Column("c", TypeCode.TINYINT), 1),
    ("SMALLINT", 0, Column("c", TypeCode.SMALLINT), 1),
    ("INT", 0, Column("c", TypeCode.INT), 123),
    ("FLOAT", 0, Column("c", TypeCode.FLOAT), to_float32(153.123)),
    ("DOUBLE", 0, Column("c", TypeCode.DOUBLE), 153.123),
    ("NULL", 0, Column("c", TypeCode.NULL), None),
    ("TIMESTAMP", 0, Column("c", TypeCode.TIMESTAMP), "1973-12-30 15:30:00"),
    ("BIGINT", 0, Column("c", TypeCode.BIGINT), 123),
    ("MEDIUMINT", 0, Column("c", TypeCode.MEDIUMINT), 123),
    ("DATE", 0, Column("c", TypeCode.DATE), "2000-01-01"),
    ("TIME", 0, Column("c", TypeCode.TIME), "23:59:59"),
    ("DATETIME", 0, Column("c", TypeCode.DATETIME), "2015-12-20 23:58:58"),
    ("YEAR", 0, Column("c", TypeCode.YEAR), 1970),
    ("VARCHAR/VARBINARY", 0, Column("c", TypeCode.VARCHAR, **UTF8), "测试"),
    ("VARCHAR/VARBINARY", 1, Column("c", TypeCode.VARCHAR, **BIN), b"\x89PNG\r\n\x1a\n"),
    ("BIT", 0, Column("c", TypeCode.BIT, length=8), 81),
    ("JSON", 0, Column("c", TypeCode.JSON), '{"key1": "value1"}'),
    ("DECIMAL", 0, Column("c", TypeCode.DECIMAL, length=13, decimal=7), Decimal("129012.1230000")),
    ("ENUM", 0, Column("c", TypeCode.ENUM, elements=("a", "b"), **UTF8), 1),
    ("SET", 0, Column("c", TypeCode.SET, elements=("a", "b"), **UTF8), 3),
    ("TINYTEXT/TINYBLOB", 0, Column("c", TypeCode.TINYBLOB, **UTF8), "测试text"),
    ("MEDIUMTEXT/MEDIUMBLOB", 0, Column("c", TypeCode.MEDIUMBLOB, **BIN), "测试text".encode()),
    ("LONGTEXT/LONGBLOB", 0, Column("c", TypeCode.LONGBLOB, **UTF8), "测试text"),
    ("TEXT/BLOB", 0, Column("c", TypeCode.BLOB, **BIN), "测试text".encode()),
    ("CHAR/BINARY", 0, Column("c", TypeCode.CHAR, **UTF8), "测试"),
    ("CHAR/BINARY", 1, Column("c", TypeCode.CHAR, **BIN), b"\x89PNG\r\n\x1a\n"),
]


def test_seed_type_table_is_fully_covered() -> None:
    examples = seed_type_examples()
    covered = {(name, i) for name, i, _, _ in SEED_TYPE_CASES}
    wanted = {(name, i) for name, exs in examples.items() for i in range(len(exs))}
    assert covered == wanted
    assert examples["GEOMETRY"] == []  # "not supported yet"


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
@pytest.mark.parametrize(("name", "i", "column", "value"), SEED_TYPE_CASES, ids=lambda x: str(x)[:20])
def test_seed_type_table_examples(compat: str, name: str, i: int, column: Column, value: Any) -> None:
    example = seed_type_examples()[name][i]
    obj = one_column_value(column, value, compat).decode()
    # Today's objects add "f" (absent from the seed's examples); everything else is identical.
    assert re.sub(r',"f":\d+', "", obj) == example
    assert f',"f":{int(column.flags)},' in obj
    (row,) = OpenProtocolDecoder(opts()).decode(
        frame(('{"ts":1,"scm":"s","tbl":"t","t":1}', '{"u":{"c":' + obj + "}}"))
    )
    assert row.new == (value,)
    assert type(row.new[0]) is type(value)


# ---------------------------------------------------------------- exact bytes of spec §1.5-§1.7


@pytest.mark.parametrize(
    ("column", "flag"),
    [
        (Column("id", TypeCode.INT, nullable=False), 11),  # int PK handle: Binary|HandleKey|PrimaryKey
        (Column("c", TypeCode.INT), 65),
        (Column("c", TypeCode.VARCHAR, **UTF8), 64),
        (Column("c", TypeCode.VARCHAR, **BIN), 65),
        (Column("c", TypeCode.BIGINT, unsigned=True), 193),
        (Column("c", TypeCode.BIT, length=3), 193),
        (Column("c", TypeCode.YEAR), 193),
        (Column("c", TypeCode.ENUM, elements=("a",), **UTF8), 64),
        (Column("c", TypeCode.SET, elements=("a",), **UTF8), 64),
    ],
)
def test_spec_flag_examples(column: Column, flag: int) -> None:
    cols = (column,) if column.name == "id" else (Column("id", TypeCode.INT, nullable=False), column)
    ts = TableSchema("s", "t", cols, indexes=(Index("PRIMARY", ("id",), primary=True),))
    value = {TypeCode.VARCHAR: b"x" if column.binary else "x"}.get(column.type_code, 1)
    row = RowChange(Op.INSERT, ts, 1, new=(1,) if len(cols) == 1 else (1, value))
    ((_, val),) = unframe(OpenProtocolEncoder(opts()).encode([row])[0])
    h = ',"h":true' if column.name == "id" else ""
    v = '"x"' if column.type_code is TypeCode.VARCHAR else "1"
    assert f'"{column.name}":{{"t":{int(column.type_code)}{h},"f":{flag},"v":{v}}}' in val.decode()


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        # Seed: 85 = Nullable | UniqueKey | Generated | Binary; 46 = MultipleKey | PrimaryKey | Generated | HandleKey.
        (85, {"nullable": True, "generated": True, "binary": True, "keys": ColumnFlag.UNIQUE_KEY}),
        (
            46,
            {
                "nullable": False,
                "generated": True,
                "binary": False,
                "keys": ColumnFlag.MULTIPLE_KEY | ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY,
            },
        ),
    ],
)
def test_seed_flag_examples_decode(flag: int, expected: dict[str, Any]) -> None:
    value = '{"u":{"c":{"t":15,"f":FLAG,"v":"x"}}}'.replace("FLAG", str(flag))
    (row,) = OpenProtocolDecoder(opts()).decode(frame(('{"ts":1,"scm":"s","tbl":"t","t":1}', value)))
    col = row.table_schema.columns[0]
    assert (col.nullable, col.generated, col.binary, col.key_flags) == tuple(expected.values())
    assert int(col.flags) == flag
    assert row.new == ((b"x",) if col.binary else ("x",))


@pytest.mark.parametrize(
    ("column", "value", "json_text"),
    [
        (Column("c", TypeCode.VARCHAR, **BIN), bytes.fromhex("89504E470D0A1A0A"), r'"\\x89PNG\\r\\n\\x1a\\n"'),
        (Column("c", TypeCode.CHAR, **BIN), b'q"\\\x00\x07\x7f\xff', r'"q\\\"\\\\\\x00\\a\\x7f\\xff"'),
        (Column("c", TypeCode.VARCHAR, **BIN), "é\u00a0😀".encode(), r'"é\\u00a0😀"'),
        (Column("c", TypeCode.FLOAT), to_float32(3.14), "3.14"),
        (Column("c", TypeCode.FLOAT), to_float32(1e-7), "1e-7"),
        (Column("c", TypeCode.FLOAT), to_float32(1e-6), "0.000001"),
        (Column("c", TypeCode.DOUBLE), 2.0, "2"),
        (Column("c", TypeCode.DOUBLE), 1e21, "1e+21"),
        (Column("c", TypeCode.DOUBLE), -0.0, "-0"),
        (Column("c", TypeCode.DOUBLE), math.nan, "0"),  # the mounter turns NaN/Inf into 0
        (Column("c", TypeCode.BIGINT, unsigned=True), 18446744073709551615, "18446744073709551615"),
        (Column("c", TypeCode.BIGINT), -9223372036854775808, "-9223372036854775808"),
        (Column("c", TypeCode.DECIMAL, length=10, decimal=2), Decimal(1), '"1.00"'),
        (Column("c", TypeCode.DECIMAL, length=10, decimal=0), Decimal("-0"), '"0"'),
        (Column("c", TypeCode.BLOB, **UTF8), "", '""'),
        (Column("c", TypeCode.GEOMETRY), b"\x01\x02", '"AQI="'),
        (Column("c", TypeCode.VECTOR), "[1,2.5]", '"[1,2.5]"'),
        (Column("c", TypeCode.BIT, length=64), 2**64 - 1, "18446744073709551615"),
        (Column("c", TypeCode.JSON), '{"a": "<\\n>"}', r'"{\"a\": \"<\\n>\"}"'),
    ],
)
def test_value_rendering(column: Column, value: Any, json_text: str) -> None:
    obj = one_column_value(column, value).decode()
    assert obj.endswith(f',"v":{json_text}}}')


@pytest.mark.parametrize(
    ("text", "ticdc", "tiflow"),
    [
        ("a<b>&c", '"a<b>&c"', r'"a\u003cb\u003e\u0026c"'),
        ("\u2028\u2029", '"\u2028\u2029"', r'"\u2028\u2029"'),
        ("\b\f\n\r\t\x01\x7f", r'"\u0008\u000c\n\r\t\u0001' + '\x7f"', r'"\b\f\n\r\t\u0001' + '\x7f"'),
        ('"\\', r'"\"\\"', r'"\"\\"'),
        ("ü😀", '"ü😀"', '"ü😀"'),
    ],
)
def test_string_escaping_per_line(text: str, ticdc: str, tiflow: str) -> None:
    col = Column("c", TypeCode.VARCHAR, **UTF8)
    assert one_column_value(col, text, "ticdc").decode().endswith(f',"v":{ticdc}}}')
    assert one_column_value(col, text, "tiflow").decode().endswith(f',"v":{tiflow}}}')
    # The decoder reads both back.
    for obj in (one_column_value(col, text, "ticdc"), one_column_value(col, text, "tiflow")):
        (row,) = OpenProtocolDecoder(opts()).decode(
            frame(('{"ts":1,"scm":"s","tbl":"t","t":1}', b'{"u":{"c":' + obj + b"}}"))
        )
        assert row.new == (text,)


@pytest.mark.parametrize(
    ("data", "ticdc", "tiflow"),
    [
        # Go quoting first (invalid UTF-8 -> \xHH, printable kept), then each line's JSON escaping.
        (b"<a&b>", '"<a&b>"', r'"\u003ca\u0026b\u003e"'),
        (b"\xff\xfe<", r'"\\xff\\xfe<"', r'"\\xff\\xfe\u003c"'),
        ("\u2028é".encode(), r'"\\u2028é"', r'"\\u2028é"'),
        (b'"\\\b', r'"\\\"\\\\\\b"', r'"\\\"\\\\\\b"'),
    ],
)
def test_binary_escaping_per_line(data: bytes, ticdc: str, tiflow: str) -> None:
    col = Column("c", TypeCode.VARCHAR, **BIN)
    assert one_column_value(col, data, "ticdc").decode().endswith(f',"v":{ticdc}}}')
    assert one_column_value(col, data, "tiflow").decode().endswith(f',"v":{tiflow}}}')
    for compat in ("ticdc", "tiflow"):
        obj = one_column_value(col, data, compat)
        (row,) = OpenProtocolDecoder(opts()).decode(frame((GOOD_KEY, b'{"u":{"c":' + obj + b"}}")))
        assert row.new == (data,)


def _wide_table(partitioned: bool = False) -> TableSchema:
    return TableSchema(
        "db<1>",
        "tbl",
        (
            Column("id", TypeCode.BIGINT, nullable=False),
            Column("c_a", TypeCode.INT),
            Column("ID", TypeCode.INT),
            Column("a", TypeCode.INT),
            Column("é", TypeCode.INT),
        ),
        indexes=(Index("PRIMARY", ("id",), primary=True),),
        partitioned=partitioned,
    )


def test_key_and_column_order_ticdc_vs_tiflow() -> None:
    row = RowChange(Op.INSERT, _wide_table(True), 7, new=(5, 1, 2, 3, 4), partition_id=99)
    ((k1, v1),) = unframe(OpenProtocolEncoder(opts()).encode([row])[0])
    ((k2, v2),) = unframe(OpenProtocolEncoder(opts(compat="tiflow")).encode([row])[0])
    # [ticdc]: ts,scm,tbl,t then ptn; no rid; jsoniter leaves "<" alone. Table column order.
    assert k1 == b'{"ts":7,"scm":"db<1>","tbl":"tbl","t":1,"ptn":99}'
    assert list(orjson.loads(v1)["u"]) == ["id", "c_a", "ID", "a", "é"]
    # [tiflow]: ts,scm,tbl,rid,ptn,t; std escaping. Columns sorted bytewise ("ID" < "a" < "c_a" < "id" < "é").
    assert k2 == b'{"ts":7,"scm":"db\\u003c1\\u003e","tbl":"tbl","rid":5,"ptn":99,"t":1}'
    assert list(orjson.loads(v2)["u"]) == ["ID", "a", "c_a", "id", "é"]
    for k, v in ((k1, v1), (k2, v2)):
        (back,) = OpenProtocolDecoder(opts()).decode(frame((k, v)))
        assert back.as_dict() == {"id": 5, "c_a": 1, "ID": 2, "a": 3, "é": 4}
        assert back.partition_id == 99 and back.table_schema.partitioned
        assert back.schema == "db<1>"
    assert OpenProtocolDecoder(opts()).decode(frame((k2, v2)))[0].row_id == 5


def test_tiflow_rid_rules() -> None:
    ts = _wide_table()
    enc = OpenProtocolEncoder(opts(compat="tiflow"))
    keys = [
        unframe(enc.encode([row])[0])[0][0]
        for row in (
            RowChange(Op.INSERT, ts, 1, new=(0, 1, 2, 3, 4)),  # rid 0 is omitted (omitempty)
            RowChange(Op.INSERT, ts, 1, new=(5, 1, 2, 3, 4), row_id=77),  # an explicit _tidb_rowid wins
            RowChange(Op.DELETE, ts, 1, old=(6, 1, 2, 3, 4)),
        )
    ]
    assert keys == [
        b'{"ts":1,"scm":"db\\u003c1\\u003e","tbl":"tbl","t":1}',
        b'{"ts":1,"scm":"db\\u003c1\\u003e","tbl":"tbl","rid":77,"t":1}',
        b'{"ts":1,"scm":"db\\u003c1\\u003e","tbl":"tbl","rid":6,"t":1}',
    ]
    unsigned = TableSchema(
        "s",
        "t",
        (Column("id", TypeCode.BIGINT, unsigned=True, nullable=False),),
        (Index("PRIMARY", ("id",), primary=True),),
    )
    key = unframe(enc.encode([RowChange(Op.INSERT, unsigned, 1, new=(2**64 - 1,))])[0])[0][0]
    assert key == b'{"ts":1,"scm":"s","tbl":"t","rid":-1,"t":1}'  # the int64 handle


@pytest.mark.parametrize(
    ("compat", "ddl", "key"),
    [
        ("ticdc", DDLEvent("db", "", "DROP DATABASE db", 2, 9), '{"ts":9,"scm":"db","tbl":"","t":2}'),
        ("tiflow", DDLEvent("db", "", "DROP DATABASE db", 2, 9), '{"ts":9,"scm":"db","t":2}'),
        (
            "ticdc",
            DDLEvent("s", "t", "ALTER TABLE t ADD c INT COMMENT '<'", 5, 9),
            '{"ts":9,"scm":"s","tbl":"t","t":2}',
        ),
    ],
)
def test_ddl_messages(compat: str, ddl: DDLEvent, key: str) -> None:
    msg = OpenProtocolEncoder(opts(compat=compat)).encode_ddl(ddl)
    ((k, v),) = unframe(msg)
    assert k.decode() == key
    q = ddl.query.replace("<", "\\u003c") if compat == "tiflow" else ddl.query
    assert v.decode() == f'{{"q":"{q}","t":{ddl.ddl_type}}}'
    assert (msg.rows, msg.commit_ts) == (0, 9)
    (back,) = OpenProtocolDecoder(opts()).decode(msg)
    assert back == ddl


# ---------------------------------------------------------------- value options (spec §1.4)


def _mixed() -> TableSchema:
    return TableSchema(
        "s",
        "t",
        (
            Column("id", TypeCode.INT, nullable=False),
            Column("a", TypeCode.INT),
            Column("b", TypeCode.VARCHAR, **UTF8),
            Column("c", TypeCode.VARCHAR, **BIN),
            Column("d", TypeCode.DOUBLE),
        ),
        indexes=(Index("PRIMARY", ("id",), primary=True),),
    )


def _value(row: RowChange, **kw: Any) -> dict[str, Any]:
    ((_, v),) = unframe(OpenProtocolEncoder(opts(**kw)).encode([row])[0])
    return orjson.loads(v)


def test_update_old_value_and_only_updated_columns() -> None:
    row = RowChange(Op.UPDATE, _mixed(), 5, new=(1, None, "x", b"y", 1.5), old=(1, None, None, b"z", 1.5))
    full = _value(row)
    assert list(full) == ["u", "p"] and list(full["p"]) == ["id", "a", "b", "c", "d"]
    assert list(_value(row, output_old_value=False)) == ["u"]
    for compat in ("ticdc", "tiflow"):
        only = _value(row, only_output_updated_columns=True, compat=compat)
        # both NULL (a) and equal (id, d) are dropped; old NULL -> "v":null (b); changed bytes kept (c).
        assert only["p"] == {"b": {"t": 15, "f": 64, "v": None}, "c": {"t": 15, "f": 65, "v": "z"}}
        assert len(only["u"]) == 5
    row2 = RowChange(Op.UPDATE, _mixed(), 5, new=(1, None, None, b"y", 1.5), old=(1, 7, "o", b"y", 1.5))
    assert _value(row2, only_output_updated_columns=True)["p"] == {
        "a": {"t": 3, "f": 65, "v": 7},
        "b": {"t": 15, "f": 64, "v": "o"},
    }
    (back,) = OpenProtocolDecoder(opts()).decode(
        OpenProtocolEncoder(opts(only_output_updated_columns=True)).encode([row2])[0]
    )
    assert back.op is Op.UPDATE and back.old == (ABSENT, 7, "o", ABSENT, ABSENT)


def test_delete_only_handle_key_columns_and_absent_columns() -> None:
    row = RowChange(Op.DELETE, _mixed(), 5, old=(1, 2, "x", b"y", 1.5))
    assert _value(row, delete_only_output_handle_key_columns=True) == {
        "d": {"id": {"t": 3, "h": True, "f": 11, "v": 1}}
    }
    partial = RowChange(Op.INSERT, _mixed(), 5, new=(1, ABSENT, "x", ABSENT, None))
    assert _value(partial) == {
        "u": {
            "id": {"t": 3, "h": True, "f": 11, "v": 1},
            "b": {"t": 15, "f": 64, "v": "x"},
            "d": {"t": 5, "f": 65, "v": None},
        }
    }


# ---------------------------------------------------------------- batching (spec §1.2)


def _five_rows() -> list[RowChange]:
    return [RowChange(Op.INSERT, t1(), 100 + i, new=(i, "v")) for i in range(1, 6)]


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
def test_max_batch_size_splits_five_rows_into_three_messages(compat: str) -> None:
    enc = OpenProtocolEncoder(opts(compat=compat, max_batch_size=2))
    for row in _five_rows():
        enc.append_row(row)
    msgs = enc.build()
    assert [m.rows for m in msgs] == [2, 2, 1]
    assert [m.commit_ts for m in msgs] == [102, 104, 105]
    singles = [unframe(OpenProtocolEncoder(opts(compat=compat)).encode([r])[0])[0] for r in _five_rows()]
    assert msgs[0] == Message(frame(*singles[:2]).key, frame(*singles[:2]).value, rows=2, commit_ts=102)
    assert enc.build() == []
    decoded = [e for m in msgs for e in OpenProtocolDecoder(opts()).decode(m)]
    assert [e.as_dict() for e in decoded] == [{"id": i, "val": "v"} for i in range(1, 6)]


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
def test_max_message_bytes_splits_by_size(compat: str) -> None:
    k, v = unframe(OpenProtocolEncoder(opts(compat=compat)).encode(_five_rows()[:1])[0])[0]
    kv = len(k) + len(v)  # the same for every row here
    # Append while Length() + len(k) + len(v) + 16 <= limit, Length() = key + value + 36.
    two = 8 + 2 * (16 + kv) + 36
    for limit, sizes in ((two, [2, 2, 1]), (two - 1, [1, 1, 1, 1, 1]), (two + 16 + kv, [3, 2])):
        enc = OpenProtocolEncoder(opts(compat=compat, max_message_bytes=limit))
        msgs = enc.encode(_five_rows())
        assert [m.rows for m in msgs] == sizes
        assert all(m.size <= limit for m in msgs)
    # Both limits at once: whichever trips first opens the next message (same result on both lines).
    msgs = OpenProtocolEncoder(opts(compat=compat, max_message_bytes=two + 16 + kv, max_batch_size=2)).encode(
        _five_rows()
    )
    assert [m.rows for m in msgs] == [2, 2, 1]
    # Single-event check: len(k) + len(v) + 36 + 16 + 8 must fit.
    OpenProtocolEncoder(opts(compat=compat, max_message_bytes=kv + 60)).encode(_five_rows())
    with pytest.raises(MessageTooLargeError):
        OpenProtocolEncoder(opts(compat=compat, max_message_bytes=kv + 59)).encode(_five_rows())


def test_ddl_and_resolved_close_the_batch_and_stand_alone() -> None:
    rows = _five_rows()
    events = [rows[0], rows[1], Resolved(200), rows[2], DDLEvent("test", "t1", "TRUNCATE TABLE t1", 11, 300), rows[3]]
    msgs = OpenProtocolEncoder(opts()).encode(events)
    assert [(m.rows, m.commit_ts) for m in msgs] == [(2, 102), (0, 200), (1, 103), (0, 300), (1, 104)]
    kinds = [[e.kind for e in OpenProtocolDecoder(opts()).decode(m)] for m in msgs]
    assert kinds == [["row", "row"], ["resolved"], ["row"], ["ddl"], ["row"]]


# ---------------------------------------------------------------- large messages (spec §1.9)


def _big_row(ts: int = 415508878783938562) -> RowChange:
    return RowChange(Op.UPDATE, t1(), ts, new=(7, "x" * 500), old=(7, "y" * 500))


def test_too_large_fails_naming_the_row() -> None:
    with pytest.raises(MessageTooLargeError) as err:
        OpenProtocolEncoder(opts(max_message_bytes=400)).append_row(_big_row())
    assert "test.t1" in str(err.value) and "415508878783938562" in str(err.value) and "id=7" in str(err.value)


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
def test_handle_key_only(compat: str) -> None:
    enc = OpenProtocolEncoder(opts(compat=compat, max_message_bytes=400, large_message_handle_option="handle-key-only"))
    ((k, v),) = unframe(enc.encode([_big_row()])[0])
    rid = ',"rid":7' if compat == "tiflow" else ""
    assert k.decode() == f'{{"ts":415508878783938562,"scm":"test","tbl":"t1"{rid},"t":1,"ohk":true}}'
    assert v == b'{"u":{"id":{"t":3,"h":true,"f":11,"v":7}},"p":{"id":{"t":3,"h":true,"f":11,"v":7}}}'
    # A decoder that knows the table reports the other columns ABSENT; a fresh one knows only id.
    dec = OpenProtocolDecoder(opts())
    dec.decode(OpenProtocolEncoder(opts()).encode([RowChange(Op.INSERT, t1(), 1, new=(1, "a"))])[0])
    (row,) = dec.decode(frame((k, v)))
    assert (row.op, row.new, row.old) == (Op.UPDATE, (7, ABSENT), (7, ABSENT))
    (row,) = OpenProtocolDecoder(opts()).decode(frame((k, v)))
    assert (row.new, row.old) == ((7,), (7,))
    with pytest.raises(MessageTooLargeError):
        OpenProtocolEncoder(opts(max_message_bytes=100, large_message_handle_option="handle-key-only")).append_row(
            _big_row()
        )


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
@pytest.mark.parametrize("uri_form", ["file", "path", "file-slash"])
def test_claim_check(tmp_path: Path, compat: str, uri_form: str) -> None:
    store = tmp_path / "claims"
    uri = {"file": f"file://{store}", "path": str(store), "file-slash": f"file://{store}/"}[uri_form]
    o = opts(
        compat=compat, max_message_bytes=400, large_message_handle_option="claim-check", claim_check_storage_uri=uri
    )
    enc = OpenProtocolEncoder(o)
    enc.new_claim_check_name = lambda: "0f3e-uuid.json"
    msg = enc.encode([_big_row()])[0]
    ((k, v),) = unframe(msg)
    ccl = uri.removesuffix("/") + "/0f3e-uuid.json"
    if compat == "ticdc":
        assert k.decode() == f'{{"ts":415508878783938562,"scm":"test","tbl":"t1","t":1,"ohk":false,"ccl":"{ccl}"}}'
    else:
        assert k.decode() == f'{{"ts":415508878783938562,"scm":"test","tbl":"t1","rid":7,"t":1,"ccl":"{ccl}"}}'
    assert v == b'{"u":{"id":{"t":3,"h":true,"f":11,"v":7}},"p":{"id":{"t":3,"h":true,"f":11,"v":7}}}'
    # The file: {"key":base64(framed key),"value":base64(framed value)} of the full one-event message.
    full = OpenProtocolEncoder(opts(compat=compat)).encode([_big_row()])[0]
    stored = orjson.loads((store / "0f3e-uuid.json").read_bytes())
    assert list(stored) == ["key", "value"]
    assert base64.b64decode(stored["key"]) == full.key and base64.b64decode(stored["value"]) == full.value
    want = _big_row()
    (row,) = OpenProtocolDecoder(opts(claim_check_storage_uri=uri)).decode(msg)
    assert (row.op, row.commit_ts, row.new, row.old) == (want.op, want.commit_ts, want.new, want.old)
    with pytest.raises(CodecError, match="no claim-check-storage-uri"):  # ccl is never followed by itself
        OpenProtocolDecoder(opts()).decode(msg, where=WHERE)
    (store / "0f3e-uuid.json").unlink()
    with pytest.raises(CodecError, match="claim-check"):
        OpenProtocolDecoder(opts(claim_check_storage_uri=uri)).decode(msg, where=WHERE)


def test_claim_check_configuration() -> None:
    with pytest.raises(ConfigError):
        OpenProtocolEncoder(opts(large_message_handle_option="claim-check"))
    with pytest.raises(ConfigError):
        OpenProtocolEncoder(opts(large_message_handle_option="claim-check", claim_check_storage_uri="s3://b/p"))
    with pytest.raises(ConfigError):
        OpenProtocolEncoder(opts(claim_check_raw_value=True))


@pytest.mark.parametrize(("compression", "magic"), [("snappy", None), ("lz4", b"\x04\x22\x4d\x18")])
def test_compression(compression: str, magic: bytes | None) -> None:
    """Each event value (rows and DDL; not the empty resolved value) is compressed on its own."""
    o = opts(large_message_handle_compression=compression)
    ddl = DDLEvent("test", "t1", CREATE_T1, 3, DDL_TS)
    msgs = OpenProtocolEncoder(o).encode([*_five_rows(), ddl, Resolved(9)])
    plain = OpenProtocolEncoder(opts()).encode([*_five_rows(), ddl, Resolved(9)])
    for m, p in zip(msgs, plain, strict=True):
        assert m.key == p.key  # keys are never compressed
        for (_, v), (_, pv) in zip(unframe(m), unframe(p), strict=True):
            if not pv:
                assert v == b""
            elif magic:
                assert v.startswith(magic)  # LZ4 frame format
            else:
                n, shift, i = 0, 0, 0  # raw Snappy block: varint of the uncompressed length first
                while True:
                    n |= (v[i] & 0x7F) << shift
                    shift, i = shift + 7, i + 1
                    if v[i - 1] < 0x80:
                        break
                assert n == len(pv)
    dec = OpenProtocolDecoder(o)
    back = [e for m in msgs for e in dec.decode(m)]
    assert [e.as_dict() for e in back[:5]] == [r.as_dict() for r in _five_rows()]
    assert back[5:] == [ddl, Resolved(9)]
    with pytest.raises(CodecError, match="event 1 of 1: cannot decompress") as err:
        dec.decode(frame((GOOD_KEY, b"\x05garbage")), where=WHERE)
    assert err.value.where == WHERE
    with pytest.raises(CodecError):  # uncompressed input given to a compressing decoder
        dec.decode(plain[0], where=WHERE)


# ---------------------------------------------------------------- decoder leniency


def test_decoder_accepts_old_and_foreign_forms() -> None:
    dec = OpenProtocolDecoder(opts())
    # Early TiCDC / Java demo key order with ptn before t; rid; no "f"; "h" false; column without "v".
    key = '{"ts":4,"scm":"a","tbl":"c","rid":9,"ptn":6,"t":1}'
    value = '{"u":{"x":{"t":3,"h":false,"v":1},"y":{"t":252,"v":"5rWL6K+VdGV4dA=="},"z":{"t":1}}}'
    (row,) = dec.decode(frame((key, value)))
    assert (row.partition_id, row.row_id, row.new) == (6, 9, (1, "测试text", None))
    # Legacy VARCHAR that is not base64 is taken as plain text.
    (row,) = dec.decode(frame(('{"ts":4,"scm":"a","tbl":"d","t":1}', '{"u":{"v":{"t":15,"v":"not base64!"}}}')))
    assert row.new == ("not base64!",)
    # Negative zero survives for float columns; -0 in an int column is 0.
    value = '{"u":{"f":{"t":5,"f":65,"v":-0},"g":{"t":4,"f":65,"v":-0.0},"i":{"t":3,"f":65,"v":-0}}}'
    (row,) = dec.decode(frame(('{"ts":4,"scm":"a","tbl":"e","t":1}', value)))
    assert [math.copysign(1, x) for x in row.new[:2]] == [-1, -1] and row.new[2] == 0 and type(row.new[2]) is int


def test_decoder_caches_schema_and_follows_ddl() -> None:
    dec = OpenProtocolDecoder(opts())
    enc = OpenProtocolEncoder(opts())
    a, b = (dec.decode(enc.encode([r])[0])[0] for r in _five_rows()[:2])
    assert a.table_schema is b.table_schema
    dec.decode(enc.encode_ddl(DDLEvent("test", "t1", "ALTER TABLE t1 DROP COLUMN val", 6, 1)))
    narrow = TableSchema("test", "t1", (t1().columns[0],), indexes=(Index("PRIMARY", ("id",), primary=True),))
    (c,) = dec.decode(enc.encode([RowChange(Op.INSERT, narrow, 9, new=(3,))])[0])
    assert [col.name for col in c.table_schema.columns] == ["id"] and c.new == (3,)
    # Same names, other flags (type changed without a DDL seen): a new schema, not a wrong value.
    wide = TableSchema("test", "t1", (Column("id", TypeCode.BIGINT, unsigned=True, nullable=False),))
    (d,) = dec.decode(enc.encode([RowChange(Op.INSERT, wide, 9, new=(2**64 - 1,))])[0])
    assert d.new == (2**64 - 1,) and d.table_schema.columns[0].unsigned


# ---------------------------------------------------------------- hostile input


def _row_msg(value: str, key: str = '{"ts":1,"scm":"s","tbl":"t","t":1}') -> Message:
    return frame((key, value))


GOOD_KEY = b'{"ts":1,"scm":"s","tbl":"t","t":1}'
GOOD_VALUE = b'{"u":{"id":{"t":3,"h":true,"f":11,"v":1}}}'
V1 = struct.pack(">Q", 1)


def _u64(n: int) -> bytes:
    return struct.pack(">Q", n)


BAD_FRAMES = {
    "no key": (Message(None, b""), "no key"),
    "short key": (Message(b"\0\0\0", b""), "shorter than the 8-byte version"),
    "wrong version": (
        Message(_u64(2) + _u64(len(GOOD_KEY)) + GOOD_KEY, _u64(len(GOOD_VALUE)) + GOOD_VALUE),
        "version 2",
    ),
    "key prefix truncated": (Message(V1 + b"\0\0\0", b""), "event 1: key length prefix truncated"),
    "key overrun": (Message(V1 + _u64(900) + GOOD_KEY, _u64(len(GOOD_VALUE)) + GOOD_VALUE), "key length 900 overruns"),
    "value overrun": (
        Message(V1 + _u64(len(GOOD_KEY)) + GOOD_KEY, _u64(900) + GOOD_VALUE),
        "value length 900 overruns",
    ),
    "value prefix truncated": (Message(V1 + _u64(len(GOOD_KEY)) + GOOD_KEY, b"\0\0"), "value length prefix truncated"),
    "more keys than values": (
        Message(V1 + (_u64(len(GOOD_KEY)) + GOOD_KEY) * 2, _u64(len(GOOD_VALUE)) + GOOD_VALUE),
        "event 2: the value has no entry",
    ),
    "more values than keys": (
        Message(V1 + _u64(len(GOOD_KEY)) + GOOD_KEY, (_u64(len(GOOD_VALUE)) + GOOD_VALUE) * 2),
        "more values than keys",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_bad_frames(case: str) -> None:
    msg, text = BAD_FRAMES[case]
    with pytest.raises(CodecError, match=re.escape(text)) as err:
        OpenProtocolDecoder(opts()).decode(msg, where=WHERE)
    assert err.value.where == WHERE


BAD_EVENTS = {
    "key not JSON": (('{"ts":1,', "{}"), "event 2 of 2"),
    "key not object": (("[1]", "{}"), "key must be a JSON object"),
    "ts string": (('{"ts":"1","t":3}', ""), '"ts" must be a uint64'),
    "ts negative": (('{"ts":-1,"t":3}', ""), '"ts" must be a uint64'),
    "unknown t": (('{"ts":1,"t":7}', "{}"), '"t" must be 1'),
    "t bool": (('{"ts":1,"scm":"s","tbl":"t","t":true}', GOOD_VALUE), '"t" must be 1'),
    "ccl not local": (
        ('{"ts":1,"scm":"s","tbl":"t","t":1,"ohk":false,"ccl":"s3://bucket/x.json"}', GOOD_VALUE),
        "configure claim-check-storage-uri",
    ),
    "ccl not string": (('{"ts":1,"scm":"s","tbl":"t","t":1,"ccl":5}', GOOD_VALUE), '"ccl" must be a string'),
    "scm not string": (('{"ts":1,"scm":5,"tbl":"t","t":1}', GOOD_VALUE), '"scm"/"tbl" must be strings'),
    "ptn string": (('{"ts":1,"scm":"s","tbl":"t","ptn":"6","t":1}', GOOD_VALUE), '"ptn" must be an integer'),
    "resolved with value": (('{"ts":1,"t":3}', "{}"), "resolved event"),
    "ddl missing q": (('{"ts":1,"scm":"s","tbl":"t","t":2}', '{"t":3}'), "DDL value"),
    "value not JSON": ((GOOD_KEY, '{"u":'), "event 2 of 2"),
    "value not object": ((GOOD_KEY, "[]"), "row value must be a JSON object"),
    "neither u nor d": ((GOOD_KEY, "{}"), 'neither "u" nor "d"'),
    "d with u": ((GOOD_KEY, '{"u":{},"d":{}}'), '"d" together with'),
    "u not object": ((GOOD_KEY, '{"u":[1]}'), '"u" must be an object'),
    "column not object": ((GOOD_KEY, '{"u":{"a":5}}'), "column 'a' must be an object"),
    "column without t": ((GOOD_KEY, '{"u":{"a":{"v":5}}}'), 'no type code "t"'),
    "unknown type code": ((GOOD_KEY, '{"u":{"a":{"t":99,"f":0,"v":5}}}'), "unknown type code 99"),
    "type code string": ((GOOD_KEY, '{"u":{"a":{"t":"3","f":0,"v":5}}}'), "unknown type code '3'"),
    "flag negative": ((GOOD_KEY, '{"u":{"a":{"t":3,"f":-1,"v":5}}}'), "flag must be a non-negative"),
    "h not bool": ((GOOD_KEY, '{"u":{"a":{"t":3,"h":"yes","v":5}}}'), '"h" must be a boolean'),
    "int as string": ((GOOD_KEY, '{"u":{"a":{"t":3,"f":65,"v":"5"}}}'), "expected an integer"),
    "int as bool": ((GOOD_KEY, '{"u":{"a":{"t":3,"f":65,"v":true}}}'), "expected an integer"),
    "int as float": ((GOOD_KEY, '{"u":{"a":{"t":3,"f":65,"v":1.5}}}'), "expected an integer"),
    "tinyint out of range": ((GOOD_KEY, '{"u":{"a":{"t":1,"f":65,"v":300}}}'), "out of range"),
    "signed bigint above int64": ((GOOD_KEY, '{"u":{"a":{"t":8,"f":65,"v":9223372036854775808}}}'), "out of range"),
    "unsigned negative": ((GOOD_KEY, '{"u":{"a":{"t":8,"f":193,"v":-1}}}'), "out of range"),
    "beyond uint64": ((GOOD_KEY, '{"u":{"a":{"t":8,"f":193,"v":18446744073709551616}}}'), "expected an integer"),
    "float as string": ((GOOD_KEY, '{"u":{"a":{"t":5,"f":65,"v":"1.5"}}}'), "expected a number"),
    "float32 overflow": ((GOOD_KEY, '{"u":{"a":{"t":4,"f":65,"v":1e300}}}'), "event 2 of 2"),
    "decimal garbage": ((GOOD_KEY, '{"u":{"a":{"t":246,"f":65,"v":"1e5"}}}'), "expected DECIMAL text"),
    "decimal nan": ((GOOD_KEY, '{"u":{"a":{"t":246,"f":65,"v":"NaN"}}}'), "expected DECIMAL text"),
    "date as number": ((GOOD_KEY, '{"u":{"a":{"t":10,"f":65,"v":20200101}}}'), "expected a string"),
    "varchar as number": ((GOOD_KEY, '{"u":{"a":{"t":15,"f":64,"v":5}}}'), "expected a string"),
    "text bad base64": ((GOOD_KEY, '{"u":{"a":{"t":252,"f":64,"v":"!!!"}}}'), "invalid base64"),
    "text bad padding": ((GOOD_KEY, '{"u":{"a":{"t":252,"f":64,"v":"YWE"}}}'), "invalid base64"),
    "text not utf8": ((GOOD_KEY, '{"u":{"a":{"t":252,"f":64,"v":"/w=="}}}'), "not UTF-8"),
    "blob as number": ((GOOD_KEY, '{"u":{"a":{"t":252,"f":65,"v":1}}}'), "expected a base64 string"),
    "binary bad escape": ((GOOD_KEY, r'{"u":{"a":{"t":15,"f":65,"v":"\\q"}}}'), "invalid Go quoted string"),
    "binary bare quote": ((GOOD_KEY, r'{"u":{"a":{"t":15,"f":65,"v":"a\"b"}}}'), "invalid Go quoted string"),
    "binary surrogate escape": ((GOOD_KEY, r'{"u":{"a":{"t":15,"f":65,"v":"\\ud800"}}}'), "not a valid rune"),
    "binary octal above 255": ((GOOD_KEY, r'{"u":{"a":{"t":15,"f":65,"v":"\\400"}}}'), "octal escape"),
    "null type with value": ((GOOD_KEY, '{"u":{"a":{"t":6,"v":1}}}'), "type NULL"),
    "images disagree": (
        (GOOD_KEY, '{"u":{"a":{"t":3,"f":65,"v":1}},"p":{"a":{"t":8,"f":65,"v":1}}}'),
        "different type",
    ),
    "set negative": ((GOOD_KEY, '{"u":{"a":{"t":248,"f":64,"v":-1}}}'), "out of range"),
}


@pytest.mark.parametrize("case", sorted(BAD_EVENTS))
@pytest.mark.parametrize("warm", [False, True])
def test_bad_events(case: str, warm: bool) -> None:
    """Event 2 of a message is bad: CodecError naming the event, whether or not the schema is cached."""
    (key, value), text = BAD_EVENTS[case]
    dec = OpenProtocolDecoder(opts())
    if warm:  # the same column names decoded fine before: the fast path must not let bad values through
        a_type = re.search(rb'"t":(\d+)', value.encode() if isinstance(value, str) else value)
        valid_types = {int(t) for t in TypeCode}
        if (
            a_type
            and int(a_type.group(1)) in valid_types
            and b'"a"' in (value.encode() if isinstance(value, str) else value)
        ):
            good = '{"u":{"a":{"t":TYPE,"f":65,"v":null}}}'.replace("TYPE", a_type.group(1).decode())
            dec.decode(frame((GOOD_KEY, good)))
    msg = frame((GOOD_KEY, GOOD_VALUE), (key, value))
    with pytest.raises(CodecError, match=re.escape(text)) as err:
        dec.decode(msg, where=WHERE)
    assert err.value.where == WHERE
    assert "event 2 of 2" in str(err.value)


def test_bad_claim_check_files(tmp_path: Path) -> None:
    key = f'{{"ts":1,"scm":"s","tbl":"t","t":1,"ohk":false,"ccl":"file://{tmp_path}/x.json"}}'
    msg = frame((key, GOOD_VALUE))
    stored = opts(claim_check_storage_uri=str(tmp_path))
    for body in (b"not json", b'{"key":"!!","value":""}', b'{"key":1}'):
        (tmp_path / "x.json").write_bytes(body)
        with pytest.raises(CodecError, match="claim-check") as err:
            OpenProtocolDecoder(stored).decode(msg, where=WHERE)
        assert err.value.where == WHERE
    # A claim-check file must hold one row event with the reference's commit ts.
    inner = frame(('{"ts":2,"scm":"s","tbl":"t","t":1}', GOOD_VALUE))
    body = {"key": base64.b64encode(inner.key).decode(), "value": base64.b64encode(inner.value).decode()}
    (tmp_path / "x.json").write_bytes(orjson.dumps(body))
    with pytest.raises(CodecError, match="commit ts 2"):
        OpenProtocolDecoder(stored).decode(msg, where=WHERE)


@given(st.binary(max_size=200))
@settings(max_examples=150, deadline=None)
def test_random_bytes_never_crash(data: bytes) -> None:
    dec = OpenProtocolDecoder(opts())
    for msg in (Message(data, data), Message(V1 + data, data), frame((GOOD_KEY, data)), frame((data, GOOD_VALUE))):
        try:
            dec.decode(msg, where=WHERE)
        except CodecError as e:
            assert e.where == WHERE


def _fuzz_base() -> Message:
    ts = TableSchema(
        "s",
        "t",
        tuple(
            Column(f"c{i}", tc, **(UTF8 if tc in (TypeCode.VARCHAR, TypeCode.BLOB) else {}))
            for i, tc in enumerate(
                [TypeCode.BIGINT, TypeCode.FLOAT, TypeCode.DECIMAL, TypeCode.VARCHAR, TypeCode.BLOB, TypeCode.CHAR]
            )
        ),
    )
    row = (1, to_float32(1.5), Decimal("2.50"), "x<y", "text", b"\x00\xff")
    return OpenProtocolEncoder(opts()).encode(
        [RowChange(Op.INSERT, ts, 5, new=row), RowChange(Op.UPDATE, ts, 6, new=row, old=row)]
    )[0]


_FUZZ_BASE = _fuzz_base()


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_mutated_messages_decode_or_raise_codec_error(data: st.DataObject) -> None:
    """One byte of a valid message changed: a (possibly different) valid decode, or CodecError."""
    dec = OpenProtocolDecoder(opts())
    dec.decode(_FUZZ_BASE)  # warm the fast path, so mutations hit the compiled readers
    which = data.draw(st.sampled_from(["key", "value"]))
    blob = bytearray(getattr(_FUZZ_BASE, which))
    blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    msg = Message(bytes(blob), _FUZZ_BASE.value) if which == "key" else Message(_FUZZ_BASE.key, bytes(blob))
    try:
        events = dec.decode(msg, where=WHERE)
    except CodecError as e:
        assert e.where == WHERE
        return
    for event in events:  # whatever decoded must be a well-typed model event
        if isinstance(event, RowChange):
            for image in (i for i in (event.new, event.old) if i is not None):
                for col, v in zip(event.table_schema.columns, image, strict=True):
                    if v is not None and v is not ABSENT:
                        assert check_value(col, v) == v or isinstance(v, float)


# ---------------------------------------------------------------- Go quoting and float formatting


def _go_quote_reference(data: bytes) -> str:
    """Go's strconv.Quote loop written out rune by rune (slow, obviously right)."""
    out, i = [], 0
    while i < len(data):
        for width in (1, 2, 3, 4):
            try:
                ch = data[i : i + width].decode("utf-8")
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append(f"\\x{data[i]:02x}")
            i += 1
            continue
        i += width
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= o < 0x7F or (o >= 0x80 and unicodedata.category(ch)[0] in "LMNPS"):
            out.append(ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return "".join(out)


_utf8_mix = st.lists(
    st.one_of(st.binary(max_size=4), st.text(max_size=4).map(lambda s: s.encode("utf-8", "surrogatepass"))), max_size=8
).map(b"".join)


@given(_utf8_mix)
@settings(max_examples=250, deadline=None)
def test_go_quote_matches_reference_and_unquotes(data: bytes) -> None:
    quoted = go_quote(data)
    assert quoted == _go_quote_reference(data)
    assert go_unquote(quoted) == data
    for json_quote in (quote_std, quote_jsoniter):  # the encoder's one-pass quote + JSON escape
        assert go_quote_json(json_quote)(data) == json_quote(quoted)


def _unquoted_or_error(text: str) -> bytes | type[ValueError]:
    try:
        return go_unquote(text)
    except ValueError:
        return ValueError


_go_texts = st.one_of(
    st.none(),
    _utf8_mix.map(go_quote),  # what TiCDC writes
    st.lists(
        st.sampled_from(
            [
                "a",
                "\\",
                "x",
                "4",
                "f",
                "0",
                "3",
                "7",
                "u",
                "U",
                "n",
                '"',
                "\n",
                "é",
                r"\u00e9",
                r"\ud800",
                r"\U0001f600",
            ]
        ),
        max_size=8,
    ).map("".join),  # anything near the escape syntax, valid or not
)


@given(_go_texts.filter(lambda t: t is not None))
@settings(max_examples=150, deadline=None)
def test_go_unquote_shortcuts_match_the_token_walk(text: str) -> None:
    """go_unquote's escape_decode shortcuts (byte escapes, runes rewritten as bytes) are the rule."""
    try:
        expected: bytes | type[ValueError] = _unquote_tokens(text)
    except ValueError:
        expected = ValueError
    assert _unquoted_or_error(text) == expected


def test_go_quote_examples() -> None:
    assert go_quote(bytes.fromhex("89504E470D0A1A0A")) == r"\x89PNG\r\n\x1a\n"
    assert go_quote("\u00ad\u2028\U000e0001\U0001f600".encode()) == r"\u00ad\u2028\U000e0001" + "\U0001f600"
    assert go_quote(b"\xed\xa0\x80") == r"\xed\xa0\x80"  # an encoded surrogate is invalid UTF-8 in Go
    assert go_unquote(r"\101\x41\u0041\U00000041\'".replace("\\'", "")) == b"AAAA"
    with pytest.raises(ValueError):
        go_unquote("a\nb")


@given(st.floats(allow_nan=False, allow_infinity=False))
@settings(max_examples=150, deadline=None)
def test_fast_float64_matches_reference(v: float) -> None:
    assert json_float64(v) == format_json(v)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
@settings(max_examples=150, deadline=None)
def test_fast_float32_matches_reference(v: float) -> None:
    assert json_float32(v) == format_json(v, True)


# ---------------------------------------------------------------- round trip model -> messages -> model


def _comparable(event: RowChange) -> tuple[Any, ...]:
    """What Open Protocol carries of a row: names, type codes, flags and values (floats bit-exact)."""

    def image(values: tuple[Any, ...] | None) -> dict[str, Any] | None:
        if values is None:
            return None
        out = {}
        for col, v in zip(event.table_schema.columns, values, strict=True):
            out[col.name] = ("float", struct.pack("<d", v)) if isinstance(v, float) else v
        return out

    cols = {c.name: (c.type_code, int(c.flags)) for c in event.table_schema.columns}
    return (event.op, event.schema, event.table, event.commit_ts, cols, image(event.new), image(event.old))


@st.composite
def _batches(draw: st.DrawFn) -> list[RowChange]:
    table = draw(tables())
    return draw(st.lists(row_changes(table), min_size=1, max_size=5))


@pytest.mark.parametrize("compat", ["ticdc", "tiflow"])
@given(rows=_batches())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_round_trip(compat: str, rows: list[RowChange]) -> None:
    o = opts(compat=compat, max_batch_size=3)
    msgs = make_encoder(o).encode(rows)
    assert sum(m.rows for m in msgs) == len(rows)
    dec = make_decoder(opts())
    back = [e for m in msgs for e in dec.decode(m, where=WHERE)]
    assert [_comparable(e) for e in back] == [_comparable(r) for r in rows]
    assert len({id(e.table_schema) for e in back}) == 1
    if compat == "ticdc":  # table column order is kept
        assert [c.name for c in back[0].table_schema.columns] == [c.name for c in rows[0].table_schema.columns]
    else:
        assert all(e.row_id == (e.as_dict(old=e.op is Op.DELETE)["id"] or None) for e in back)  # rid = PK handle
    # Re-encoding what was decoded gives the same bytes.
    again = make_encoder(o).encode(back)
    assert [(m.key, m.value) for m in again] == [(m.key, m.value) for m in msgs]
