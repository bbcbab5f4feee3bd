"""TiCDC Canal-JSON: the seed document's examples, exact bytes pinned by the protocol notes,
large-message handling, decoder leniency, hostile input and model round trips
(docs/protocols/canal-json.md)."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec import make_decoder, make_encoder
from changefeed.codec.base import Message
from changefeed.codec.canal_json import (
    CanalJSONDecoder,
    CanalJSONEncoder,
    default_mysql_type,
    full_mysql_type,
    parse_mysql_type,
)
from changefeed.codec.options import CodecOptions
from changefeed.codec.rowkey import record_key
from changefeed.errors import CodecError, ConfigError, MessageTooLargeError
from changefeed.model import (
    ABSENT,
    ActionType,
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
from changefeed.model.gofloat import to_float32
from tests.codec.helpers import image, pk_table, same_value, utf8
from tests.strategies import row_changes, tables

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "canal_json"
CLOCK = 1639633142960


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def opts(**kw: Any) -> CodecOptions:
    kw.setdefault("clock", lambda: CLOCK)
    return CodecOptions(protocol="canal-json", **kw)


def encode_one(row: RowChange, **kw: Any) -> bytes:
    enc = CanalJSONEncoder(opts(**kw))
    enc.append_row(row)
    (msg,) = enc.build()
    assert msg.key is None and msg.rows == 1 and msg.commit_ts == row.commit_ts
    assert msg.value is not None
    return msg.value


def decode(value: bytes, **kw: Any) -> list[Any]:
    return CanalJSONDecoder(opts(**kw)).decode(Message(key=None, value=value), where="test:0")


# The seed's tp_int table, in its real column order.
TP_INT = pk_table(
    Column("id", TypeCode.INT, nullable=False),
    Column("c_tinyint", TypeCode.TINYINT),
    Column("c_smallint", TypeCode.SMALLINT),
    Column("c_mediumint", TypeCode.MEDIUMINT),
    Column("c_int", TypeCode.INT),
    Column("c_bigint", TypeCode.BIGINT),
    table="tp_int",
)
TP_INT_ROW = {"id": 2, "c_tinyint": 127, "c_smallint": 32767, "c_mediumint": 8388607, "c_int": 2147483647}
TP_INT_ROW["c_bigint"] = 9223372036854775807
TP_INT_UPDATED = {**TP_INT_ROW, "c_int": 0, "c_tinyint": 0}


def column_types(ts: TableSchema) -> dict[str, tuple[TypeCode, bool, bool]]:
    return {c.name: (c.type_code, c.binary, c.unsigned) for c in ts.columns}


# ====================================================================== seed 001 examples


def test_seed_ddl_drop_database_decodes() -> None:
    (ev,) = decode(fixture("seed_ddl_drop_database.json"))
    assert isinstance(ev, DDLEvent)
    assert (ev.schema, ev.table, ev.query) == ("test", "", "drop database if exists test")
    assert ev.ddl_type == ActionType.DROP_SCHEMA
    assert ev.commit_ts == 163963309467037594


def test_seed_ddl_reencodes_except_inconsistent_es() -> None:
    seed = json.loads(fixture("seed_ddl_drop_database.json"))
    (ev,) = decode(fixture("seed_ddl_drop_database.json"))
    enc = CanalJSONEncoder(opts(enable_tidb_extension=True, clock=lambda: seed["ts"]))
    out = json.loads(enc.encode_ddl(ev).value)  # type: ignore[arg-type]
    # The docs' commitTs lost digits: es is not commitTs >> 18 there; ours is.
    assert seed["es"] != seed["_tidb"]["commitTs"] >> 18
    assert out.pop("es") == ev.commit_ts >> 18
    seed.pop("es")
    assert out == seed
    assert list(out) == list(seed)  # struct member order: data before old


def test_seed_insert_tp_int_decodes() -> None:
    (ev,) = decode(fixture("seed_insert_tp_int.json"))
    assert isinstance(ev, RowChange) and ev.op is Op.INSERT and ev.old is None
    assert ev.commit_ts == 163963314122145239
    assert (ev.schema, ev.table) == ("test", "tp_int")
    assert ev.as_dict() == TP_INT_ROW
    ts = ev.table_schema
    assert [ts.columns[i].name for i in ts.primary_key] == ["id"]
    assert ts.handle_key == ts.primary_key
    assert column_types(ts) == column_types(TP_INT)


def test_seed_insert_reencodes_except_inconsistent_es() -> None:
    seed = json.loads(fixture("seed_insert_tp_int.json"))
    row = RowChange(Op.INSERT, TP_INT, seed["_tidb"]["commitTs"], new=image(TP_INT, TP_INT_ROW))
    value = encode_one(row, enable_tidb_extension=True, clock=lambda: seed["ts"])
    out = json.loads(value)
    assert seed["es"] != seed["_tidb"]["commitTs"] >> 18
    assert out.pop("es") == row.commit_ts >> 18
    seed.pop("es")
    assert out == seed
    # Current encoders: old before data, and sqlType/data in table column order.
    assert list(out)[-3:] == ["old", "data", "_tidb"]
    assert list(out["sqlType"]) == [c.name for c in TP_INT.columns]
    # The decoded table (columns in the seed's sqlType order) gives the same JSON again.
    (ev,) = decode(fixture("seed_insert_tp_int.json"))
    again = json.loads(encode_one(ev, enable_tidb_extension=True, clock=lambda: seed["ts"]))
    again.pop("es")
    assert again == seed


def test_seed_watermark_decodes_and_reencodes() -> None:
    (ev,) = decode(fixture("seed_watermark.json"))
    assert ev == Resolved(commit_ts=429918007904436226)
    seed = json.loads(fixture("seed_watermark.json"))
    msg = CanalJSONEncoder(opts(enable_tidb_extension=True, clock=lambda: seed["ts"])).encode_resolved(ev)
    assert msg is not None and msg.key is None
    assert json.loads(msg.value) == seed  # type: ignore[arg-type]
    assert list(json.loads(msg.value)) == list(seed)  # type: ignore[arg-type]


def test_seed_update_with_full_old() -> None:
    raw = fixture("seed_update_ticdc_old_all_columns.json")
    (ev,) = decode(raw)
    assert ev.op is Op.UPDATE
    assert ev.as_dict() == TP_INT_UPDATED
    assert ev.as_dict(old=True) == TP_INT_ROW
    seed = json.loads(raw)
    assert ev.commit_ts == seed["es"] << 18  # no _tidb: the millisecond only
    row = RowChange(Op.UPDATE, TP_INT, ev.commit_ts, new=image(TP_INT, TP_INT_UPDATED), old=image(TP_INT, TP_INT_ROW))
    assert json.loads(encode_one(row, clock=lambda: seed["ts"])) == seed


def test_seed_update_canal_changed_columns_only() -> None:
    raw = fixture("seed_update_canal_old_changed_only.json")
    (ev,) = decode(raw)
    # Columns missing from old are unchanged: their old value is the new one.
    assert ev.as_dict(old=True) == TP_INT_ROW
    assert ev.as_dict() == TP_INT_UPDATED
    seed = json.loads(raw)
    row = RowChange(Op.UPDATE, TP_INT, ev.commit_ts, new=image(TP_INT, TP_INT_UPDATED), old=image(TP_INT, TP_INT_ROW))
    out = json.loads(encode_one(row, only_output_updated_columns=True, clock=lambda: seed["ts"]))
    assert out == seed
    assert out["data"][0].keys() == {c.name for c in TP_INT.columns}


def test_seed_delete_v54_and_pre_v54() -> None:
    for name in ("seed_delete_v54.json", "seed_delete_pre_v54.json"):
        (ev,) = decode(fixture(name))
        assert ev.op is Op.DELETE and ev.new is None
        assert ev.as_dict(old=True) == TP_INT_UPDATED
    seed = json.loads(fixture("seed_delete_v54.json"))
    row = RowChange(Op.DELETE, TP_INT, seed["es"] << 18, old=image(TP_INT, TP_INT_UPDATED))
    assert json.loads(encode_one(row, clock=lambda: seed["ts"])) == seed


T_TABLE = pk_table(
    Column("id", TypeCode.INT, nullable=False),
    Column("c_decimal", TypeCode.DECIMAL, length=10, decimal=4),
    utf8("c_char", TypeCode.CHAR, length=16),
    utf8("c_varchar", length=16),
    Column("c_binary", TypeCode.CHAR, charset="binary", length=16),
    Column("c_varbinary", TypeCode.VARCHAR, charset="binary", length=16),
    utf8("c_enum", TypeCode.ENUM, elements=("a", "b", "c")),
    utf8("c_set", TypeCode.SET, elements=("a", "b", "c")),
    Column("c_bit", TypeCode.BIT, length=64),
)
T_ROW = {
    "id": 1,
    "c_decimal": Decimal("123.4560"),
    "c_char": "abc",
    "c_varchar": "abc",
    "c_binary": b"abc" + bytes(13),
    "c_varbinary": b"abc",
    "c_enum": 1,
    "c_set": 3,
    "c_bit": 65,
}


def test_seed_mysqltype_ticdc_form() -> None:
    raw = fixture("seed_mysqltype_ticdc.json")
    (ev,) = decode(raw)
    assert ev.as_dict() == T_ROW
    assert column_types(ev.table_schema) == column_types(T_TABLE)
    assert str(ev.as_dict()["c_decimal"]) == "123.4560"
    seed = json.loads(raw)
    row = RowChange(Op.INSERT, T_TABLE, seed["es"] << 18, new=image(T_TABLE, T_ROW))
    assert json.loads(encode_one(row, clock=lambda: seed["ts"])) == seed


def test_seed_mysqltype_canal_full_forms() -> None:
    raw = fixture("seed_mysqltype_canal.json")
    (ev,) = decode(raw)
    assert ev.as_dict() == T_ROW  # ENUM/SET member names accepted when the type lists them
    cols = {c.name: c for c in ev.table_schema.columns}
    assert (cols["c_decimal"].length, cols["c_decimal"].decimal) == (10, 4)
    assert cols["c_char"].length == cols["c_varbinary"].length == 16
    assert cols["c_bit"].length == 64
    assert cols["c_enum"].elements == cols["c_set"].elements == ("a", "b", "c")
    assert column_types(ev.table_schema) == column_types(T_TABLE)
    # content-compatible reproduces Canal's parameters, in TiDB's spelling.
    seed_types = json.loads(raw)["mysqlType"]
    row = RowChange(Op.INSERT, T_TABLE, 1 << 18, new=image(T_TABLE, T_ROW))
    ours = json.loads(encode_one(row, content_compatible=True))["mysqlType"]
    for name in ("c_binary", "c_bit", "c_char", "c_enum", "c_set", "c_varbinary", "c_varchar"):
        assert ours[name] == seed_types[name]
    assert (ours["c_decimal"], seed_types["c_decimal"]) == ("decimal(10,4)", "decimal(10, 4)")
    assert (ours["id"], seed_types["id"]) == ("int(11)", "int")


# ====================================================================== exact bytes


def test_spec_ddl_exact_bytes() -> None:
    ddl = DDLEvent("cdc", "person", "create table person(...)", ActionType.CREATE_TABLE, 417318403368288260)
    enc = CanalJSONEncoder(opts(enable_tidb_extension=True, clock=lambda: 1469579899))
    msg = enc.encode_ddl(ddl)
    assert msg.key is None and msg.commit_ts == ddl.commit_ts
    assert msg.value == fixture("spec_ddl_create_person.json")
    (back,) = decode(msg.value)  # type: ignore[arg-type]
    assert (back.schema, back.table, back.query, back.ddl_type, back.commit_ts) == (
        "cdc",
        "person",
        "create table person(...)",
        ActionType.CREATE_TABLE,
        417318403368288260,
    )


def test_ddl_without_extension_and_kinds() -> None:
    enc = CanalJSONEncoder(opts(clock=lambda: 5))
    ddl = DDLEvent("d", "t", "alter table t add index i(a)", ActionType.ADD_INDEX, 7 << 18)
    assert enc.encode_ddl(ddl).value == (
        b'{"id":0,"database":"d","table":"t","pkNames":null,"isDdl":true,"type":"CINDEX","es":7,"ts":5,'
        b'"sql":"alter table t add index i(a)","sqlType":null,"mysqlType":null,"data":null,"old":null}'
    )
    kinds = {
        ActionType.DROP_TABLE: "ERASE",
        ActionType.TRUNCATE_TABLE: "TRUNCATE",
        ActionType.RENAME_TABLES: "RENAME",
        ActionType.DROP_PRIMARY_KEY: "DINDEX",
        ActionType.MODIFY_COLUMN: "ALTER",
        ActionType.CREATE_VIEW: "QUERY",
    }
    for action, kind in kinds.items():
        out = json.loads(enc.encode_ddl(DDLEvent("d", "t", "x", action, 1 << 18)).value)  # type: ignore[arg-type]
        assert out["type"] == kind


def test_ddl_std_escaping_vs_dml_easyjson() -> None:
    enc = CanalJSONEncoder(opts(clock=lambda: 0))
    ddl = DDLEvent("d", "t", "create table t(a varchar(1) default '<&>\b\u2028')", ActionType.CREATE_TABLE, 0)
    assert b'"sql":"create table t(a varchar(1) default \'\\u003c\\u0026\\u003e\\b\\u2028\')"' in (
        enc.encode_ddl(ddl).value or b""
    )
    ts = pk_table(Column("id", TypeCode.INT), utf8("s"))
    value = encode_one(RowChange(Op.INSERT, ts, 0, new=(1, "<&>\b\f\n\u2029\x00\x7f")))
    assert b'"s":"\\u003c\\u0026\\u003e\\u0008\\u000c\\n\\u2029\\u0000\x7f"' in value
    # An escaped backslash followed by "b" is not mistaken for \b.
    value = encode_one(RowChange(Op.INSERT, ts, 0, new=(1, "\\b\\f")))
    assert b'"s":"\\\\b\\\\f"' in value


def test_binary_iso_8859_1_exact_bytes() -> None:
    ts = pk_table(Column("id", TypeCode.INT, nullable=False), Column("b", TypeCode.BLOB, charset="binary"))
    raw = bytes.fromhex("05070a0f24322b63783c26fffe2d3746")
    value = encode_one(RowChange(Op.INSERT, ts, 417318403368288260, new=(1, raw)))
    assert value == (
        b'{"id":0,"database":"test","table":"t","pkNames":["id"],"isDdl":false,"type":"INSERT",'
        b'"es":1591943372224,"ts":1639633142960,"sql":"","sqlType":{"id":4,"b":2004},'
        b'"mysqlType":{"id":"int","b":"blob"},"old":null,'
        b'"data":[{"id":"1","b":"\\u0005\\u0007\\n\\u000f$2+cx\\u003c\\u0026' + "ÿþ".encode() + b'-7F"}]}'
    )
    (ev,) = decode(value)
    assert ev.as_dict()["b"] == raw
    # every byte value survives
    every = bytes(range(256))
    (ev,) = decode(encode_one(RowChange(Op.INSERT, ts, 1, new=(1, every))))
    assert ev.as_dict()["b"] == every


@pytest.mark.parametrize(
    ("tc", "limit", "base", "promoted"),
    [
        (TypeCode.TINYINT, 127, -6, 5),
        (TypeCode.SMALLINT, 32767, 5, 4),
        (TypeCode.INT, 2147483647, 4, -5),
        (TypeCode.BIGINT, 2**63 - 1, -5, 3),
        (TypeCode.MEDIUMINT, 8388607, 4, 4),  # never promoted
    ],
)
def test_sqltype_unsigned_promotion_boundaries(tc: TypeCode, limit: int, base: int, promoted: int) -> None:
    ts = pk_table(Column("id", TypeCode.INT), Column("u", tc, unsigned=True), Column("s", tc))
    for value, code in ((limit, base), (limit + 1, promoted), (None, base), (0, base)):
        out = encode_one(RowChange(Op.INSERT, ts, 1, new=(1, value, 0)))
        assert f'"sqlType":{{"id":4,"u":{code},"s":{base}}}'.encode() in out
        (ev,) = decode(out)
        assert ev.as_dict()["u"] == value and ev.table_schema.column("u").unsigned
    top = {TypeCode.MEDIUMINT: 16777215, TypeCode.BIGINT: 2**64 - 1}.get(tc)
    if top is not None:
        out = encode_one(RowChange(Op.INSERT, ts, 1, new=(1, top, 0)))
        assert f'"u":{promoted}'.encode() in out and f'"u":"{top}"'.encode() in out


def test_sqltype_uses_old_row_for_delete_and_new_for_update() -> None:
    ts = pk_table(Column("id", TypeCode.INT), Column("u", TypeCode.TINYINT, unsigned=True))
    out = encode_one(RowChange(Op.DELETE, ts, 1, old=(1, 200)))
    assert b'"sqlType":{"id":4,"u":5}' in out
    out = encode_one(RowChange(Op.UPDATE, ts, 1, new=(1, 1), old=(1, 200)))
    assert b'"sqlType":{"id":4,"u":-6}' in out


def test_float32_and_double_digits() -> None:
    ts = pk_table(Column("id", TypeCode.INT), Column("f", TypeCode.FLOAT), Column("d", TypeCode.DOUBLE))
    cases = [
        (3.14, 3.14, "3.14", "3.14"),
        (1e-7, 1e-7, "0.0000001", "0.0000001"),
        (1e21, 1e21, "1000000000000000000000", "1000000000000000000000"),
        (-0.0, -0.0, "-0", "-0"),
        (16777217.0, 0.1, "16777216", "0.1"),
        (math.nan, math.inf, "0", "0"),  # the mounter maps NaN/Inf to 0
    ]
    for f, d, f_text, d_text in cases:
        out = encode_one(RowChange(Op.INSERT, ts, 1, new=(1, to_float32(f) if math.isfinite(f) else f, d)))
        assert f'"data":[{{"id":"1","f":"{f_text}","d":"{d_text}"}}]'.encode() in out
        (ev,) = decode(out)
        got = ev.as_dict()
        if math.isfinite(f):
            assert struct.pack("<f", got["f"]) == struct.pack("<f", f)
            assert struct.pack("<d", got["d"]) == struct.pack("<d", d)


def test_value_rendering_table() -> None:
    ts = pk_table(
        Column("id", TypeCode.BIGINT, unsigned=True),
        Column("dec", TypeCode.DECIMAL, length=10, decimal=2),
        Column("dt", TypeCode.DATETIME, decimal=3),
        Column("tm", TypeCode.TIME),
        Column("y", TypeCode.YEAR),
        Column("e", TypeCode.ENUM, charset="utf8mb4", elements=("x", "y")),
        Column("st", TypeCode.SET, charset="utf8mb4", elements=("x", "y", "z")),
        Column("bt", TypeCode.BIT, length=10),
        Column("j", TypeCode.JSON),
        utf8("n"),
        utf8("empty"),
    )
    new = (2**64 - 1, Decimal("-1.00"), "2020-02-20 02:20:20.123", "-838:59:59", 0, 2, 5, 683, '{"a": [1, 2]}')
    out = encode_one(RowChange(Op.INSERT, ts, 1, new=(*new, None, "")))
    assert (
        b'"data":[{"id":"18446744073709551615","dec":"-1.00","dt":"2020-02-20 02:20:20.123","tm":"-838:59:59",'
        b'"y":"0","e":"2","st":"5","bt":"683","j":"{\\"a\\": [1, 2]}","n":null,"empty":""}]'
    ) in out
    assert (b'"sqlType":{"id":3,"dec":3,"dt":93,"tm":92,"y":12,"e":4,"st":-7,"bt":-7,"j":12,"n":12,"empty":12}') in out
    assert (
        b'"mysqlType":{"id":"bigint unsigned","dec":"decimal","dt":"datetime","tm":"time","y":"year","e":"enum",'
        b'"st":"set","bt":"bit","j":"json","n":"varchar","empty":"varchar"}'
    ) in out
    (ev,) = decode(out)
    assert ev.new == (*new, None, "")


MYSQL_TYPES = [
    (Column("a", TypeCode.INT), "int", "int(11)"),
    (Column("a", TypeCode.INT, unsigned=True, zerofill=True), "int unsigned zerofill", "int(10) unsigned zerofill"),
    (Column("a", TypeCode.TINYINT, length=1), "tinyint", "tinyint(1)"),
    (Column("a", TypeCode.BIGINT, unsigned=True), "bigint unsigned", "bigint(20) unsigned"),
    (Column("a", TypeCode.SMALLINT, unsigned=True), "smallint unsigned", "smallint(5) unsigned"),
    (Column("a", TypeCode.MEDIUMINT), "mediumint", "mediumint(9)"),
    (Column("a", TypeCode.DECIMAL), "decimal", "decimal(10,0)"),
    (
        Column("a", TypeCode.DECIMAL, length=65, decimal=30, unsigned=True),
        "decimal unsigned",
        "decimal(65,30) unsigned",
    ),
    (Column("a", TypeCode.BIT, length=1), "bit", "bit(1)"),
    (Column("a", TypeCode.BIT), "bit", "bit(1)"),
    (utf8("a", TypeCode.ENUM, elements=("a", "b", "c")), "enum", "enum('a','b','c')"),
    (utf8("a", TypeCode.SET, elements=("it's", "x\ny")), "set", "set('it''s','x\\ny')"),
    (Column("a", TypeCode.YEAR), "year", "year(4)"),
    (Column("a", TypeCode.FLOAT), "float", "float"),
    (Column("a", TypeCode.FLOAT, length=10), "float", "float"),
    (Column("a", TypeCode.FLOAT, unsigned=True, zerofill=True), "float unsigned zerofill", "float unsigned zerofill"),
    (Column("a", TypeCode.DOUBLE, length=10, decimal=2), "double", "double(10,2)"),
    (Column("a", TypeCode.DATETIME, decimal=3), "datetime", "datetime(3)"),
    (Column("a", TypeCode.TIMESTAMP, decimal=0), "timestamp", "timestamp"),
    (Column("a", TypeCode.TIME, decimal=6), "time", "time(6)"),
    (utf8("a", TypeCode.CHAR), "char", "char(1)"),
    (utf8("a", TypeCode.VARCHAR, length=16), "varchar", "varchar(16)"),
    (Column("a", TypeCode.CHAR, charset="binary", length=16), "binary", "binary(16)"),
    (Column("a", TypeCode.VARCHAR, charset="binary", length=16), "varbinary", "varbinary(16)"),
    (Column("a", TypeCode.BLOB, charset="binary"), "blob", "blob"),
    (Column("a", TypeCode.TINYBLOB, charset="binary"), "tinyblob", "tinyblob"),
    (utf8("a", TypeCode.MEDIUMBLOB), "mediumtext", "mediumtext"),
    (utf8("a", TypeCode.LONGBLOB), "longtext", "longtext"),
    (Column("a", TypeCode.JSON), "json", "json"),
    (Column("a", TypeCode.DATE), "date", "date"),
]


@pytest.mark.parametrize(("col", "default", "full"), MYSQL_TYPES)
def test_mysqltype_strings(col: Column, default: str, full: str) -> None:
    assert default_mysql_type(col) == default
    assert full_mysql_type(col) == full
    for text in (default, full):
        parsed = parse_mysql_type(text)
        # the model itself makes BIT/YEAR unsigned (and YEAR zerofill), as TiDB does
        back = Column("a", parsed.type_code, charset="binary" if parsed.binary else "utf8mb4")
        back = Column("a", parsed.type_code, charset=back.charset, unsigned=parsed.unsigned, zerofill=parsed.zerofill)
        assert (back.type_code, back.is_bytes, back.unsigned, back.zerofill) == (
            col.type_code,
            col.is_bytes,
            col.unsigned,
            col.zerofill,
        )
    parsed = parse_mysql_type(full)
    if col.elements:
        assert parsed.elements == col.elements


def test_parse_mysqltype_canal_forms() -> None:
    p = parse_mysql_type("decimal(10, 4)")
    assert (p.type_code, p.length, p.decimal) == (TypeCode.DECIMAL, 10, 4)
    p = parse_mysql_type("int(10) unsigned zerofill")
    assert (p.type_code, p.length, p.unsigned, p.zerofill) == (TypeCode.INT, 10, True, True)
    p = parse_mysql_type("enum('unsigned','a,b','x)y')")
    assert p.elements == ("unsigned", "a,b", "x)y") and not p.unsigned
    p = parse_mysql_type("DATETIME(6)")
    assert (p.type_code, p.decimal) == (TypeCode.DATETIME, 6)
    assert parse_mysql_type("decimal(12)").decimal == 0
    for bad in ("varchar2", "int(11", "int(x)", "int(1,2)", "datetime(9)", "int unsigned big", "enum('a'", "enum(a)"):
        with pytest.raises(ValueError):
            parse_mysql_type(bad)


def test_content_compatible_forces_only_updated_columns() -> None:
    ts = pk_table(Column("id", TypeCode.INT), utf8("a", length=8), utf8("b", length=8))
    out = json.loads(
        encode_one(RowChange(Op.UPDATE, ts, 1, new=(1, "x", "y"), old=(1, "x", "z")), content_compatible=True)
    )
    assert out["old"] == [{"b": "z"}]
    assert out["data"] == [{"id": "1", "a": "x", "b": "y"}]
    assert out["mysqlType"] == {"id": "int(11)", "a": "varchar(8)", "b": "varchar(8)"}


def test_only_updated_columns_null_differs_from_empty_and_tiflow_values() -> None:
    ts = pk_table(Column("id", TypeCode.INT), utf8("a"), Column("d", TypeCode.DOUBLE))
    row = RowChange(Op.UPDATE, ts, 1, new=(1, None, -0.0), old=(1, "", 0.0))
    ticdc = json.loads(encode_one(row, only_output_updated_columns=True))
    assert ticdc["old"] == [{"a": "", "d": "0"}]  # [ticdc] rendered strings "-0" != "0"
    tiflow = json.loads(encode_one(row, only_output_updated_columns=True, compat="tiflow"))
    assert tiflow["old"] == [{"a": ""}]  # [tiflow] Go values: -0.0 == 0.0
    row = RowChange(Op.UPDATE, ts, 1, new=(1, "same", 1.5), old=(1, "same", 1.5))
    assert json.loads(encode_one(row, only_output_updated_columns=True))["old"] == [{}]


def test_delete_only_output_handle_key_columns() -> None:
    ts = pk_table(Column("id", TypeCode.INT, nullable=False), utf8("a"), Column("u", TypeCode.INT, unsigned=True))
    out = encode_one(RowChange(Op.DELETE, ts, 5 << 18, old=(7, "gone", 3)), delete_only_output_handle_key_columns=True)
    assert out == (
        b'{"id":0,"database":"test","table":"t","pkNames":["id"],"isDdl":false,"type":"DELETE","es":5,'
        b'"ts":1639633142960,"sql":"","sqlType":{"id":4},"mysqlType":{"id":"int"},"old":null,"data":[{"id":"7"}]}'
    )
    (ev,) = decode(out)
    assert ev.op is Op.DELETE and ev.as_dict(old=True) == {"id": 7}
    assert [c.name for c in ev.table_schema.columns] == ["id"]
    # inserts and updates are unaffected
    assert b'"a":"x"' in encode_one(
        RowChange(Op.INSERT, ts, 1, new=(1, "x", 0)), delete_only_output_handle_key_columns=True
    )


def test_absent_columns_bad_values_and_invalid_utf8() -> None:
    ts = pk_table(
        Column("id", TypeCode.INT), utf8("a"), Column("n", TypeCode.INT), Column("b", TypeCode.BLOB, charset="binary")
    )
    out = json.loads(encode_one(RowChange(Op.INSERT, ts, 1, new=(1, ABSENT, ABSENT, b"\x00"))))
    assert out["data"] == [{"id": "1", "b": "\u0000"}]
    assert list(out["sqlType"]) == ["id", "a", "n", "b"]  # the table still describes every column
    (ev,) = decode(orjson.dumps(out))
    assert ev.new == (1, ABSENT, ABSENT, b"\x00")
    with pytest.raises(CodecError, match=r"insert row of test\.t .*cannot render"):
        encode_one(RowChange(Op.INSERT, ts, 1, new=(1, "x", "not an int", b"")))
    with pytest.raises(CodecError, match="cannot render"):
        encode_one(RowChange(Op.INSERT, ts, 1, new=(1, "x", 1, "text for a blob")))
    # A str carrying undecodable bytes (surrogateescape) is written as Go does: U+FFFD per byte.
    bad = b"ok\xe2\x80 \xff".decode("utf-8", "surrogateescape")
    out = json.loads(encode_one(RowChange(Op.INSERT, ts, 1, new=(1, bad, 1, b""))))
    assert out["data"][0]["a"] == "ok\ufffd\ufffd \ufffd"


def test_no_primary_key_gives_null_pknames() -> None:
    ts = TableSchema("d", "t", (utf8("a"),))
    out = json.loads(encode_one(RowChange(Op.INSERT, ts, 1, new=("x",))))
    assert out["pkNames"] is None
    (ev,) = decode(orjson.dumps(out))
    assert ev.table_schema.primary_key == () and ev.table_schema.handle_key == ()


def test_tidb_extension_rowkey_ticdc_only() -> None:
    ts = pk_table(Column("id", TypeCode.BIGINT, unsigned=True), utf8("a"), table_id=104)
    row = RowChange(Op.INSERT, ts, 9, new=(1, "x"))
    out = json.loads(encode_one(row, enable_tidb_extension=True, output_row_key=True))
    assert out["_tidb"] == {
        "commitTs": 9,
        "rowkey": base64.b64encode(bytes.fromhex("7480000000000000685f728000000000000001")).decode(),
    }
    # unsigned handle 2^64-1 is int64 -1 -> 7fff...ff; partition id is the physical table id
    row = RowChange(Op.DELETE, ts, 9, old=(2**64 - 1, "x"), partition_id=105)
    out = json.loads(encode_one(row, enable_tidb_extension=True, output_row_key=True))
    assert (
        base64.b64decode(out["_tidb"]["rowkey"])
        == b"t" + bytes.fromhex("8000000000000069") + b"_r" + b"\x7f" + b"\xff" * 7
    )
    assert record_key(104, -1) == b"t" + bytes.fromhex("8000000000000068") + b"_r" + b"\x7f" + b"\xff" * 7
    # no int handle and no row id: omitted; _tidb_rowid used when known
    noint = pk_table(utf8("k"), table_id=104)
    assert json.loads(
        encode_one(RowChange(Op.INSERT, noint, 9, new=("k",)), enable_tidb_extension=True, output_row_key=True)
    )["_tidb"] == {"commitTs": 9}
    with_rid = RowChange(Op.INSERT, noint, 9, new=("k",), row_id=1)
    out = json.loads(encode_one(with_rid, enable_tidb_extension=True, output_row_key=True))
    assert base64.b64decode(out["_tidb"]["rowkey"]) == bytes.fromhex("7480000000000000685f728000000000000001")
    # [tiflow] has no rowkey; without the extension there is no _tidb at all
    assert (
        "rowkey"
        not in json.loads(encode_one(row, enable_tidb_extension=True, output_row_key=True, compat="tiflow"))["_tidb"]
    )
    assert "_tidb" not in json.loads(encode_one(row, output_row_key=True))


def test_resolved_only_with_extension() -> None:
    assert CanalJSONEncoder(opts()).encode_resolved(Resolved(5)) is None
    msg = CanalJSONEncoder(opts(enable_tidb_extension=True, clock=lambda: 3)).encode_resolved(Resolved(7 << 18 | 1))
    assert msg is not None
    assert msg.value == (
        b'{"id":0,"database":"","table":"","pkNames":null,"isDdl":false,"type":"TIDB_WATERMARK","es":7,"ts":3,'
        b'"sql":"","sqlType":null,"mysqlType":null,"data":null,"old":null,"_tidb":{"watermarkTs":1835009}}'
    )


def test_encode_stream_and_registry() -> None:
    enc = make_encoder(opts(enable_tidb_extension=True))
    assert isinstance(enc, CanalJSONEncoder)
    assert isinstance(make_decoder(opts()), CanalJSONDecoder)
    r1 = RowChange(Op.INSERT, TP_INT, 10 << 18, new=image(TP_INT, TP_INT_ROW))
    r2 = RowChange(Op.DELETE, TP_INT, 11 << 18, old=image(TP_INT, TP_INT_ROW))
    ddl = DDLEvent("test", "tp_int", "truncate table tp_int", ActionType.TRUNCATE_TABLE, 12 << 18)
    msgs = enc.encode([r1, r2, ddl, Resolved(13 << 18)])
    assert len(msgs) == 4 and [m.rows for m in msgs] == [1, 1, 0, 0]
    dec = CanalJSONDecoder(opts())
    events = [e for m in msgs for e in dec.decode(m)]
    assert [type(e).__name__ for e in events] == ["RowChange", "RowChange", "DDLEvent", "Resolved"]
    assert events[0].table_schema is events[1].table_schema  # one shared schema object
    assert events[2].ddl_type == ActionType.TRUNCATE_TABLE and events[3].commit_ts == 13 << 18


# ====================================================================== large messages


BIG = pk_table(Column("id", TypeCode.INT, nullable=False), utf8("payload", TypeCode.LONGBLOB), table_id=104)


def noise(n: int, seed: int) -> str:
    """Text that does not compress, so the compressed message is large too."""
    rnd = random.Random(seed)
    return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def big_row(n: int = 5000) -> RowChange:
    return RowChange(Op.UPDATE, BIG, 77 << 18, new=(1, noise(n, 1)), old=(1, noise(n, 2)))


def test_message_too_large_names_the_row() -> None:
    with pytest.raises(
        MessageTooLargeError, match=r"update row of test\.t \(commit ts 20185088\).*max-message-bytes 1000"
    ):
        encode_one(big_row(), max_message_bytes=1000)


def test_large_message_needs_extension() -> None:
    for option in ("handle-key-only", "claim-check"):
        with pytest.raises(ConfigError, match="enable-tidb-extension"):
            CanalJSONEncoder(opts(large_message_handle_option=option, claim_check_storage_uri="/tmp/x"))
    with pytest.raises(ConfigError, match="claim-check-storage-uri"):
        CanalJSONEncoder(opts(enable_tidb_extension=True, large_message_handle_option="claim-check"))
    with pytest.raises(ConfigError, match="only local"):
        CanalJSONEncoder(
            opts(
                enable_tidb_extension=True,
                large_message_handle_option="claim-check",
                claim_check_storage_uri="s3://b/p",
            )
        )


def test_handle_key_only() -> None:
    kw = {"enable_tidb_extension": True, "large_message_handle_option": "handle-key-only", "max_message_bytes": 1000}
    out = encode_one(big_row(), **kw)
    assert out == (
        b'{"id":0,"database":"test","table":"t","pkNames":["id"],"isDdl":false,"type":"UPDATE","es":77,'
        b'"ts":1639633142960,"sql":"","sqlType":{"id":4},"mysqlType":{"id":"int"},"old":[{"id":"1"}],'
        b'"data":[{"id":"1"}],"_tidb":{"commitTs":20185088,"onlyHandleKey":true}}'
    )
    (ev,) = decode(out)
    assert ev.as_dict() == {"id": 1} and ev.as_dict(old=True) == {"id": 1}
    small = encode_one(big_row(10), **kw)
    assert b"onlyHandleKey" not in small and f'"payload":"{noise(10, 1)}"'.encode() in small
    with pytest.raises(MessageTooLargeError, match="handle-key-only"):
        encode_one(big_row(), **{**kw, "max_message_bytes": 100})


@pytest.mark.parametrize("raw_value", [False, True])
@pytest.mark.parametrize("compression", ["none", "snappy", "lz4"])
def test_claim_check_round_trip(tmp_path: Path, raw_value: bool, compression: str) -> None:
    kw = {
        "enable_tidb_extension": True,
        "large_message_handle_option": "claim-check",
        "claim_check_storage_uri": f"file://{tmp_path}/cc",
        "claim_check_raw_value": raw_value,
        "large_message_handle_compression": compression,
        "max_message_bytes": 1000,
    }
    value = encode_one(big_row(), **kw)
    text = value.decode() if compression == "none" else None
    files = list((tmp_path / "cc").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    if text is not None:
        ref = json.loads(text)
        assert ref["_tidb"] == {"commitTs": 77 << 18, "claimCheckLocation": f"file://{tmp_path}/cc/{files[0].name}"}
        assert ref["data"] == [{"id": "1"}]
    stored = files[0].read_bytes()
    if not raw_value:
        wrapper = json.loads(stored)
        assert list(wrapper) == ["key", "value"] and wrapper["key"] is None
    (ev,) = decode(value, **kw)
    assert ev.op is Op.UPDATE and ev.new == big_row().new and ev.old == big_row().old
    # Without the storage configured the reference cannot be followed.
    with pytest.raises(CodecError, match="no claim-check-storage-uri"):
        decode(value, large_message_handle_compression=compression)
    files[0].unlink()
    with pytest.raises(CodecError, match="cannot read claim-check file"):
        decode(value, **kw)


@pytest.mark.parametrize("compression", ["snappy", "lz4"])
def test_compression_round_trip_and_formats(compression: str) -> None:
    enc = CanalJSONEncoder(opts(enable_tidb_extension=True, large_message_handle_compression=compression))
    row = RowChange(Op.INSERT, TP_INT, 5 << 18, new=image(TP_INT, TP_INT_ROW))
    enc.append_row(row)
    (msg,) = enc.build()
    assert msg.value is not None
    if compression == "lz4":
        assert msg.value[:4] == bytes.fromhex("04224d18")  # LZ4 frame magic
    else:
        assert msg.value[:1] != b"{"
    dec = CanalJSONDecoder(opts(large_message_handle_compression=compression))
    (ev,) = dec.decode(msg)
    assert ev.new == row.new
    ddl = enc.encode_ddl(DDLEvent("test", "t", "drop table t", ActionType.DROP_TABLE, 6 << 18))
    resolved = enc.encode_resolved(Resolved(7 << 18))
    assert resolved is not None
    assert [type(e) for m in (ddl, resolved) for e in dec.decode(m)] == [DDLEvent, Resolved]
    with pytest.raises(CodecError, match=compression):
        dec.decode(Message(None, b"\x10garbage-not-compressed"), where="p:1")


# ====================================================================== decoder leniency


def test_decoder_accepts_data_before_old_and_either_order() -> None:
    body = {
        "id": 0,
        "database": "d",
        "table": "t",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "UPDATE",
        "es": 1,
        "ts": 2,
        "sql": "",
        "sqlType": {"id": 4, "v": 12},
        "mysqlType": {"v": "varchar", "id": "int"},
        "data": [{"v": "new", "id": "1"}],
        "old": [{"id": "1", "v": "old"}],
    }
    dec = CanalJSONDecoder(opts())
    (a,) = dec.decode(Message(None, orjson.dumps(body)))
    reordered = {k: body[k] for k in [*list(body)[:11], "old", "data"]}
    (b,) = dec.decode(Message(None, json.dumps(reordered, indent=2).encode()))
    assert a.new == b.new == (1, "new") and a.old == b.old == (1, "old")
    assert [c.name for c in a.table_schema.columns] == ["id", "v"]  # sqlType order, not mysqlType's
    assert a.table_schema is b.table_schema


def test_decoder_multi_row_data_pairs_old() -> None:
    body = {
        "database": "d",
        "table": "t",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "UPDATE",
        "es": 3,
        "mysqlType": {"id": "int", "v": "varchar(10)"},
        "sqlType": {"id": 4, "v": 12},
        "data": [{"id": "1", "v": "a2"}, {"id": "2", "v": "b2"}, {"id": "3", "v": "c2"}],
        "old": [{"v": "a1"}, {"v": "b1"}, {"v": "c1"}],
    }
    events = decode(orjson.dumps(body))
    assert [(e.new, e.old) for e in events] == [
        ((1, "a2"), (1, "a1")),
        ((2, "b2"), (2, "b1")),
        ((3, "c2"), (3, "c1")),
    ]
    assert all(e.commit_ts == 3 << 18 and e.table_schema is events[0].table_schema for e in events)
    body.update(type="INSERT", old=[None, None, None])
    assert [e.new[1] for e in decode(orjson.dumps(body))] == ["a2", "b2", "c2"]


def test_decoder_shares_schema_across_promotion_and_member_order() -> None:
    ts = pk_table(Column("id", TypeCode.INT), Column("u", TypeCode.TINYINT, unsigned=True))
    a = encode_one(RowChange(Op.INSERT, ts, 1, new=(1, 1)))
    b = encode_one(RowChange(Op.INSERT, ts, 1, new=(2, 255)))
    assert b'"u":-6' in a and b'"u":5' in b
    body = json.loads(a)
    body["mysqlType"] = dict(reversed(body["mysqlType"].items()))
    dec = CanalJSONDecoder(opts())
    (ea,), (eb,), (ec,) = (dec.decode(Message(None, v)) for v in (a, b, orjson.dumps(body)))
    assert ea.table_schema is eb.table_schema is ec.table_schema


def test_decode_lines_storage_file() -> None:
    enc = CanalJSONEncoder(opts(enable_tidb_extension=True))
    rows = [RowChange(Op.INSERT, TP_INT, (i + 1) << 18, new=image(TP_INT, {**TP_INT_ROW, "id": i})) for i in range(3)]
    blob = b"".join(m.value + b"\r\n" for m in enc.encode(rows))  # type: ignore[operator]
    events = CanalJSONDecoder(opts()).decode_lines(blob, "s3://b/test/tp_int/1/CDC000001.json")
    assert [e.as_dict()["id"] for e in events] == [0, 1, 2]
    bad = blob + b'{"isDdl":false}\r\n'
    with pytest.raises(CodecError, match=r"CDC000001\.json:line 4"):
        CanalJSONDecoder(opts()).decode_lines(bad, "s3://b/test/tp_int/1/CDC000001.json")
    custom = CanalJSONDecoder(opts(terminator="|"))
    assert len(custom.decode_lines(b"|".join(m.value for m in enc.encode(rows)))) == 3  # type: ignore[misc]


def test_commit_ts_without_extension_is_millisecond_only() -> None:
    row = RowChange(Op.INSERT, TP_INT, (5 << 18) | 12345, new=image(TP_INT, TP_INT_ROW))
    (ev,) = decode(encode_one(row))
    assert ev.commit_ts == 5 << 18  # the logical part is lost
    (ev,) = decode(encode_one(row, enable_tidb_extension=True))
    assert ev.commit_ts == row.commit_ts


# ====================================================================== hostile input


GOOD: dict[str, Any] = {
    "id": 0,
    "database": "d",
    "table": "t",
    "pkNames": ["id"],
    "isDdl": False,
    "type": "INSERT",
    "es": 1,
    "ts": 1,
    "sql": "",
    "sqlType": {"id": 4, "v": 12},
    "mysqlType": {"id": "int", "v": "varchar"},
    "data": [{"id": "1", "v": "x"}],
    "old": None,
}


def with_(**changes: Any) -> bytes:
    return json.dumps({**GOOD, **changes}, ensure_ascii=False).encode()


def data_with(**values: Any) -> bytes:
    return with_(data=[{**GOOD["data"][0], **values}])


def typed(mysql_type: str, value: Any) -> bytes:
    return with_(sqlType={"id": 4, "v": 12}, mysqlType={"id": "int", "v": mysql_type}, data=[{"id": "1", "v": value}])


HOSTILE = {
    "not json": (b'{"id":0,', "not a JSON document"),
    "comments": (b'{"id": 0 // c\n}', "not a JSON document"),
    "array": (b"[1]", "expected an object"),
    "isDdl string": (with_(isDdl="false"), "isDdl is a string"),
    "type missing": (with_(type=None), "type is null"),
    "unknown type": (with_(type="UPSERT"), "unknown event type 'UPSERT'"),
    "ext list": (with_(_tidb=[1]), "_tidb is an array"),
    "commitTs negative": (with_(_tidb={"commitTs": -1}), "_tidb.commitTs is -1"),
    "commitTs string": (with_(_tidb={"commitTs": "1"}), "_tidb.commitTs is '1'"),
    "commitTs too big": (with_(_tidb={"commitTs": 2**64}), "unsigned 64-bit"),
    "es string": (with_(es="1"), "es is '1'"),
    "watermark no ts": (with_(type="TIDB_WATERMARK", _tidb={}), "without _tidb.watermarkTs"),
    "database number": (with_(database=5), "database is a number"),
    "data null": (with_(data=None), "data null, expected a non-empty array"),
    "data empty": (with_(data=[]), "non-empty array"),
    "data row not object": (with_(data=["x"]), r"data\[0\] is a string"),
    "old not array": (with_(type="UPDATE", old={"id": "1"}), "old is an object"),
    "old length": (with_(type="UPDATE", old=[{"id": "1"}, {"id": "2"}]), "old has 2 rows but data has 1"),
    "old row not object": (with_(type="UPDATE", old=[5]), r"old\[0\] is a number"),
    "value number": (data_with(v=5), r"data\[0\]: column 'v' is a number"),
    "value object": (data_with(v={}), "is an object, expected a string or null"),
    "mysqlType missing": (with_(mysqlType=None), "mysqlType is null"),
    "mysqlType value number": (with_(mysqlType={"id": "int", "v": 3}), "mysqlType of column 'v'"),
    "unknown mysqlType": (with_(mysqlType={"id": "int", "v": "varchar2"}), "unknown MySQL type name 'varchar2'"),
    "sqlType string": (with_(sqlType={"id": "4", "v": 12}), "sqlType of 'id' is a string"),
    "sqlType list": (with_(sqlType=[4, 12]), "sqlType is an array"),
    "sqlType/mysqlType differ": (with_(sqlType={"id": 4, "w": 12}), r"different columns: \['v', 'w'\]"),
    "pkNames string": (with_(pkNames="id"), "pkNames must be null or an array"),
    "pkNames unknown": (with_(pkNames=["nope"]), r"pkNames names \['nope'\]"),
    "column not in mysqlType": (data_with(zz="1"), r"data\[0\] names column 'zz'"),
    "int text": (data_with(id="abc"), r"column 'id' \(int\): 'abc' is not an integer"),
    "int spaces": (data_with(id=" 1"), "is not an integer"),
    "int underscore": (data_with(id="1_0"), "is not an integer"),
    "int unicode digits": (data_with(id="١٢"), "is not an integer"),
    "int range": (data_with(id="2147483648"), "out of range"),
    "uint negative": (typed("int unsigned", "-1"), "not an unsigned integer"),
    "tinyint unsigned range": (typed("tinyint unsigned", "256"), "out of range"),
    "float nan": (typed("double", "NaN"), "is not a number"),
    "float inf": (typed("float", "inf"), "is not a number"),
    "float32 overflow": (typed("float", "1e39"), "overflows a FLOAT"),
    "double overflow": (typed("double", "1e999"), "overflows a DOUBLE"),
    "decimal exponent": (typed("decimal", "1e5"), "is not a decimal"),
    "decimal too precise": (typed("decimal(5,2)", "1.234"), "scale is 2"),
    "date format": (typed("date", "2020/01/01"), "not a DATE value"),
    "datetime format": (typed("datetime", "2020-01-01T00:00:00"), "not a DATETIME value"),
    "time format": (typed("time", "1:2:3"), "not a TIME value"),
    "json invalid": (typed("json", "{a:1}"), "is not JSON text"),
    "binary code point": (typed("varbinary", "Ā"), "U\\+0100 above U\\+00FF"),
    "enum unknown name": (typed("enum('a','b')", "c"), "neither an ENUM index nor a member name"),
    "enum index range": (typed("enum('a','b')", "3"), "out of range"),
    "set unknown member": (typed("set('a','b')", "a,c"), "'c' is not a member"),
    "set without members": (typed("set", "a"), "not a SET bitmask"),
    "bit too wide": (typed("bit(4)", "16"), "out of range"),
    "year range": (typed("year", "1800"), "out of range"),
    "ddl unknown type": (with_(isDdl=True, type="DROP"), "unknown DDL event type 'DROP'"),
    "ddl sql number": (with_(isDdl=True, type="QUERY", sql=1), "sql is a number"),
    "too many columns": (
        with_(sqlType=None, mysqlType={f"c{i}": "int" for i in range(5000)}, pkNames=None),
        "describes 5000 columns",
    ),
    "claim check location number": (with_(_tidb={"commitTs": 1, "claimCheckLocation": 5}), "non-empty string"),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_input_raises_codec_error(case: str) -> None:
    value, pattern = HOSTILE[case]
    with pytest.raises(CodecError, match=pattern) as info:
        decode(value)
    assert info.value.where == "test:0"


def test_no_value_and_claim_check_recursion(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match="no value"):
        CanalJSONDecoder(opts()).decode(Message(None, None), where="x")
    inner = with_(_tidb={"commitTs": 1, "claimCheckLocation": "file:///elsewhere/loop.json"})
    (tmp_path / "loop.json").write_bytes(inner)
    with pytest.raises(CodecError, match="another claim-check reference"):
        decode(inner, claim_check_storage_uri=str(tmp_path), claim_check_raw_value=True)
    (tmp_path / "w.json").write_bytes(b'{"key":null,"value":"!!!"}')
    with pytest.raises(CodecError, match="not base64"):
        decode(with_(_tidb={"claimCheckLocation": "x/w.json"}), claim_check_storage_uri=str(tmp_path))
    (tmp_path / "ddl.json").write_bytes(with_(isDdl=True, type="QUERY"))
    with pytest.raises(CodecError, match="does not hold a DML message"):
        decode(
            with_(_tidb={"claimCheckLocation": "ddl.json"}),
            claim_check_storage_uri=str(tmp_path),
            claim_check_raw_value=True,
        )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_garbage_never_escapes_as_other_errors(blob: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode(blob)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from([*GOOD, "v", "id"]), inner),
        max_leaves=12,
    ),
    st.sampled_from(list(GOOD)),
)
def test_mutated_members_raise_codec_error_or_decode(junk: Any, member: str) -> None:
    for body in ({**GOOD, member: junk}, {**GOOD, "data": [{"id": "1", "v": junk}]}):
        with contextlib.suppress(CodecError):
            decode(json.dumps(body).encode())


# ====================================================================== model round trips

# What canal-json cannot carry (docs/protocols/canal-json.md): per-column nullability, generated,
# defaults, ids, lengths/scales/fsp/members (the default mysqlType is bare), charsets of text
# columns, unique/multiple-key flags and non-primary indexes, table id and schema version.
SURVIVING_FLAGS = ColumnFlag.BINARY | ColumnFlag.UNSIGNED | ColumnFlag.PRIMARY_KEY | ColumnFlag.HANDLE_KEY


def carried(col: Column) -> tuple[Any, ...]:
    return (col.name, col.type_code, col.zerofill, col.flags & SURVIVING_FLAGS)


def assert_round_trip(row: RowChange, back: RowChange, commit_ts: int) -> None:
    assert back.op is row.op and back.commit_ts == commit_ts
    src, dst = row.table_schema, back.table_schema
    assert (dst.schema, dst.table) == (src.schema, src.table)
    assert [carried(c) for c in dst.columns] == [carried(c) for c in src.columns]
    assert dst.primary_key == src.primary_key and dst.handle_key == src.handle_key
    for label in ("new", "old"):
        a, b = getattr(row, label), getattr(back, label)
        assert (a is None) == (b is None), label
        if a is not None:
            assert len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True)), (label, a, b)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_changes())
def test_round_trip_model_message_model(row: RowChange) -> None:
    value = encode_one(row, enable_tidb_extension=True)
    (back,) = decode(value)
    assert_round_trip(row, back, row.commit_ts)
    # Not carried: nullability (every decoded column is nullable), lengths, table id.
    assert all(c.nullable for c in back.table_schema.columns)
    assert back.table_schema.table_id == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_changes())
def test_round_trip_only_updated_columns_and_no_extension(row: RowChange) -> None:
    value = encode_one(row, only_output_updated_columns=True)
    (back,) = decode(value)
    assert_round_trip(row, back, row.commit_ts >> 18 << 18)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.data())
def test_round_trip_content_compatible_keeps_parameters(ts: TableSchema, data: st.DataObject) -> None:
    row = data.draw(row_changes(ts))
    (back,) = decode(encode_one(row, content_compatible=True, enable_tidb_extension=True))
    if row.op is Op.UPDATE:
        assert back.old is not None
    assert [carried(c) for c in back.table_schema.columns] == [carried(c) for c in ts.columns]
    for src, dst in zip(ts.columns, back.table_schema.columns, strict=True):
        if src.type_code in (TypeCode.ENUM, TypeCode.SET):
            assert dst.elements == src.elements
        if src.type_code is TypeCode.DECIMAL:
            assert (dst.length, dst.decimal) == (src.length, src.decimal)
        if src.type_code in (TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.TIME) and src.decimal:
            assert dst.decimal == src.decimal
        if src.type_code is TypeCode.BIT:
            assert dst.length == (src.length or 1)


def test_lost_attributes_are_documented_ones() -> None:
    col = Column(
        "g",
        TypeCode.VARCHAR,
        charset="latin1",
        collation="latin1_swedish_ci",
        length=32,
        nullable=False,
        generated=True,
        default="d",
        column_id=9,
    )
    ts = TableSchema(
        "d",
        "t",
        (Column("id", TypeCode.INT, nullable=False), col),
        indexes=(Index("PRIMARY", ("id",), primary=True), Index("uk", ("g",), unique=True)),
        table_id=5,
        version=3,
    )
    (back,) = decode(encode_one(RowChange(Op.INSERT, ts, 1, new=(1, "v")), enable_tidb_extension=True))
    g = back.table_schema.column("g")
    assert (g.charset, g.length, g.nullable, g.generated, g.default, g.column_id) == (
        "utf8mb4",
        None,
        True,
        False,
        None,
        None,
    )
    assert not g.key_flags & ColumnFlag.UNIQUE_KEY
    assert (back.table_schema.table_id, back.table_schema.version) == (0, 0)
    assert [i.name for i in back.table_schema.indexes] == ["PRIMARY"]
    assert back.as_dict() == {"id": 1, "g": "v"}
