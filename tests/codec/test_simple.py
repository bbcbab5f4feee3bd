"""TiCDC Simple protocol (JSON and Avro): the seed document's examples, exact bytes pinned by the
protocol notes, the consumer's schema cache (from the start / joining midway), large messages,
hostile input and model round trips (docs/protocols/simple.md)."""

from __future__ import annotations

import base64
import io
import json
import math
import struct
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec import make_decoder, make_encoder
from changefeed.codec.base import Message
from changefeed.codec.options import CodecOptions
from changefeed.codec.simple import SimpleDecoder, SimpleEncoder, SimpleFormatError
from changefeed.codec.simple.avro import SCHEMA, SCHEMA_PATH
from changefeed.codec.simple.message import table_schema_json
from changefeed.codec.simple.values import bit_default, column_length
from changefeed.errors import CodecError, ConfigError, MessageTooLargeError, UnknownSchemaError
from changefeed.model import (
    ABSENT,
    ActionType,
    Column,
    DDLEvent,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
    ddl_kind,
)
from changefeed.model.gofloat import to_float32
from tests.codec.helpers import ALL_TYPES, ALL_VALUES, UTF8
from tests.strategies import row_changes, tables

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "simple"
V_OLD = 447984074911121426  # `user` before the ALTER; also `new_user` after the rename (same version)
V_NEW = 447987408682614791


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def compact(name: str) -> bytes:
    """The seed example without its pretty-printing: member order is what TiCDC's struct pins."""
    return orjson.dumps(orjson.loads(fixture(name)))


def opts(clock: int = 0, **kw: Any) -> CodecOptions:
    return CodecOptions(protocol="simple", clock=lambda: clock, **kw)


def msg(value: bytes) -> Message:
    return Message(key=None, value=value)


def user_columns(with_create_time: bool = False) -> tuple[Column, ...]:
    cols = (
        Column("id", TypeCode.INT, length=11, nullable=False),
        Column("name", TypeCode.VARCHAR, **UTF8, length=255),
        Column("age", TypeCode.INT, length=11),
        Column("score", TypeCode.FLOAT, length=12),
    )
    if with_create_time:
        cols += (Column("createTime", TypeCode.TIMESTAMP, length=19),)
    return cols


PK = (Index("PRIMARY", ("id",), primary=True),)
USER = TableSchema("simple", "user", user_columns(), PK, table_id=148, version=V_OLD)
USER_ALTERED = TableSchema("simple", "user", user_columns(True), PK, table_id=148, version=V_NEW)
NEW_USER = USER.renamed("simple", "new_user")

ALTER = DDLEvent(
    schema="simple",
    table="user",
    query="ALTER TABLE `user` ADD COLUMN `createTime` TIMESTAMP",
    ddl_type=ActionType.ADD_COLUMN,
    commit_ts=447987408682614795,
    table_schema=USER_ALTERED,
    pre_table_schema=USER,
)
INSERT = RowChange(Op.INSERT, USER, 447984084414103554, new=(1, "John Doe", 25, 90.5))
UPDATE = RowChange(Op.UPDATE, USER, 447984099186180098, new=(1, "John Doe", 25, 95.0), old=(1, "John Doe", 25, 90.5))
DELETE = RowChange(Op.DELETE, USER, 447984114259722243, old=(1, "John Doe", 25, 95.0))


def same_row(got: RowChange, want: RowChange) -> None:
    assert (got.op, got.commit_ts, got.new, got.old) == (want.op, want.commit_ts, want.new, want.old)
    assert got.physical_table_id == want.physical_table_id
    assert got.table_schema == carried(want.table_schema, avro=False)


# ------------------------------------------------------------------ seed 002 examples (JSON)


def test_seed_alter_ddl_decodes_to_the_described_event() -> None:
    events = SimpleDecoder(opts()).decode(msg(fixture("ddl_alter")), "seed:ddl")
    assert len(events) == 1
    ddl = events[0]
    assert isinstance(ddl, DDLEvent)
    assert (ddl.schema, ddl.table, ddl.query, ddl.commit_ts) == ("simple", "user", ALTER.query, ALTER.commit_ts)
    assert ddl.ddl_type == ActionType.ADD_COLUMN
    assert ddl.table_schema == USER_ALTERED
    assert ddl.pre_table_schema == USER
    assert ddl.table_schema.handle_key == (0,)


def test_seed_alter_ddl_encodes_to_the_same_bytes() -> None:
    out = SimpleEncoder(opts(1708936343598)).encode_ddl(ALTER)
    assert out.key is None
    assert out.value == compact("ddl_alter")


@pytest.mark.parametrize(
    ("name", "row", "build_ts"),
    [
        ("dml_insert", INSERT, 1708923662983),
        ("dml_update", UPDATE, 1708923719184),
        ("dml_delete", DELETE, 1708923776484),
    ],
)
def test_seed_dml_decode_and_encode(name: str, row: RowChange, build_ts: int) -> None:
    dec = SimpleDecoder(opts())
    assert dec.decode(msg(fixture("ddl_alter"))) != []  # caches user@V_OLD (preTableSchema) and @V_NEW
    (got,) = dec.decode(msg(fixture(name)), name)
    assert isinstance(got, RowChange)
    same_row(got, row)
    enc = SimpleEncoder(opts(build_ts))
    enc.append_row(row)
    (out,) = enc.build()
    assert (out.key, out.value, out.rows, out.commit_ts) == (None, compact(name), 1, row.commit_ts)


def test_seed_watermark() -> None:
    assert SimpleDecoder(opts()).decode(msg(fixture("watermark"))) == [Resolved(447984124732375041)]
    out = SimpleEncoder(opts(1708923816911)).encode_resolved(Resolved(447984124732375041))
    assert out.value == compact("watermark")
    assert out.value == b'{"version":1,"type":"WATERMARK","commitTs":447984124732375041,"buildTs":1708923816911}'


def test_seed_bootstrap_caches_the_renamed_table_and_encodes_back() -> None:
    dec = SimpleDecoder(opts())
    assert dec.decode(msg(fixture("bootstrap"))) == []
    assert dec.schemas.get(("simple", "new_user", V_OLD)) == NEW_USER
    out = SimpleEncoder(opts(1708924603278)).encode_bootstrap(NEW_USER)
    assert out.value == compact("bootstrap")


def test_seed_table_schema_column_and_index_definitions() -> None:
    doc = table_schema_json(USER)
    assert doc == orjson.loads(fixture("table_schema"))
    assert orjson.dumps(doc) == compact("table_schema")
    assert orjson.dumps(doc["columns"][0]) == compact("column")
    assert orjson.dumps(doc["indexes"][0]) == compact("index")


# ------------------------------------------------------------------ consuming (seed 002 scenarios)


def _user_dml(kind: str, table: str = "user", version: int = V_OLD, commit_ts: int = 1, uid: int = 1) -> bytes:
    doc = {
        "version": 1,
        "database": "simple",
        "table": table,
        "tableID": 148,
        "type": kind,
        "commitTs": commit_ts,
        "buildTs": 0,
        "schemaVersion": version,
    }
    image = {"age": "25", "id": str(uid), "name": "x", "score": "1.5"}
    if kind != "DELETE":
        doc["data"] = image
    if kind != "INSERT":
        doc["old"] = image
    return orjson.dumps(doc)


def test_scenario1_consumer_from_the_start() -> None:
    create = DDLEvent("simple", "user", "CREATE TABLE `user` (...)", ActionType.CREATE_TABLE, 10, table_schema=USER)
    enc = SimpleEncoder(opts())
    stream = [enc.encode_ddl(create), enc.encode_bootstrap(USER)]
    enc.append_row(INSERT)
    enc.append_row(UPDATE)
    stream += enc.build()
    stream.append(enc.encode_ddl(ALTER))
    enc.append_row(RowChange(Op.INSERT, USER_ALTERED, 20, new=(2, "b", 3, 1.5, "2024-02-26 08:32:23")))
    stream += enc.build()
    stream.append(enc.encode_resolved(Resolved(21)))
    assert b"preTableSchema" not in stream[0].value  # CREATE carries no previous schema
    dec = SimpleDecoder(opts())
    events = [e for i, m in enumerate(stream) for e in dec.decode(m, f"offset {i}")]
    assert [type(e).__name__ for e in events] == [
        "DDLEvent",
        "RowChange",
        "RowChange",
        "DDLEvent",
        "RowChange",
        "Resolved",
    ]
    assert events[0].ddl_type == ActionType.CREATE_TABLE and events[0].pre_table_schema is None
    same_row(events[1], INSERT)
    same_row(events[2], UPDATE)
    assert events[4].new == (2, "b", 3, 1.5, "2024-02-26 08:32:23")
    assert dec.pending() == 0


def test_scenario2_consumer_joining_midway_holds_dml_until_bootstrap() -> None:
    dec = SimpleDecoder(opts())
    assert dec.decode(msg(_user_dml("INSERT", commit_ts=5)), "p0@1") == []
    assert dec.decode(msg(_user_dml("UPDATE", commit_ts=6)), "p0@2") == []
    assert dec.decode(msg(fixture("watermark")), "p0@3") == []  # must not overtake the held rows
    assert dec.pending() == 2
    assert dec.pending_tables() == [("simple", "user", V_OLD)]
    # A BOOTSTRAP of another table releases nothing.
    assert dec.decode(msg(fixture("bootstrap")), "p0@4") == []
    assert dec.pending() == 2
    boot = SimpleEncoder(opts()).encode_bootstrap(USER)
    released = dec.decode(boot, "p0@5")
    assert [type(e).__name__ for e in released] == ["RowChange", "RowChange", "Resolved"]
    assert [e.commit_ts for e in released] == [5, 6, 447984124732375041]
    assert released[0].op is Op.INSERT and released[1].op is Op.UPDATE
    assert released[0].new == (1, "x", 25, 1.5)
    assert dec.pending() == 0 and dec.pending_tables() == []
    # Now known: decoded at once.
    assert len(dec.decode(msg(_user_dml("DELETE", commit_ts=7)))) == 1


def test_scenario2_release_keeps_per_table_order_and_ddl_releases() -> None:
    dec = SimpleDecoder(opts())
    dec.decode(msg(fixture("bootstrap")))  # new_user@V_OLD known
    dec.decode(SimpleEncoder(opts()).encode_bootstrap(USER_ALTERED))  # user@V_NEW known
    # user@V_OLD unknown: held; the later user@V_NEW row waits behind it although V_NEW is known.
    assert dec.decode(msg(_user_dml("INSERT", commit_ts=1, uid=1))) == []
    assert len(dec.decode(msg(_user_dml("INSERT", table="new_user", commit_ts=2, uid=2)))) == 1
    assert dec.decode(msg(_user_dml("INSERT", commit_ts=3, uid=3, version=V_NEW))) == []
    assert dec.pending() == 2
    assert dec.pending_tables() == [("simple", "user", V_OLD), ("simple", "user", V_NEW)]
    # The ALTER DDL provides user@V_OLD (preTableSchema): the held rows come out, in order,
    # before the DDL event.
    events = dec.decode(msg(fixture("ddl_alter")), "ddl")
    assert [type(e).__name__ for e in events] == ["RowChange", "RowChange", "DDLEvent"]
    assert [(e.new[0], e.table_schema.version) for e in events[:2]] == [(1, V_OLD), (3, V_NEW)]
    assert events[1].new == (3, "x", 25, 1.5, ABSENT)


def test_scenario2_bound_raises_unknown_schema_error() -> None:
    dec = SimpleDecoder(opts(), max_pending_messages=2)
    dec.decode(msg(_user_dml("INSERT", commit_ts=1)), "p0@1")
    dec.decode(msg(_user_dml("INSERT", commit_ts=2)), "p0@2")
    with pytest.raises(UnknownSchemaError) as err:
        dec.decode(msg(_user_dml("INSERT", commit_ts=3, version=99)), "p0@3")
    assert err.value.where == "p0@3"
    assert "simple.user" in str(err.value) and "schemaVersion 99" in str(err.value)
    assert dec.pending() == 2
    taken = dec.take_pending()
    assert [w for _, w in taken] == ["p0@1", "p0@2"]
    assert dec.pending() == 0


def test_rename_keeps_the_version_and_caches_both_names() -> None:
    rename = DDLEvent(
        "simple", "new_user", "RENAME TABLE `user` TO `new_user`", ActionType.RENAME_TABLE, 30, NEW_USER, USER
    )
    dec = SimpleDecoder(opts())
    (ev,) = dec.decode(SimpleEncoder(opts()).encode_ddl(rename))
    assert ev.ddl_type == ActionType.RENAME_TABLE and (ev.schema, ev.table) == ("simple", "new_user")
    assert len(dec.decode(msg(_user_dml("INSERT", table="new_user")))) == 1
    assert len(dec.decode(msg(_user_dml("INSERT", table="user")))) == 1


def test_schema_level_ddl_without_table_schema() -> None:
    drop = DDLEvent("shop", "", "DROP DATABASE IF EXISTS `shop`", ActionType.DROP_SCHEMA, 40)
    value = SimpleEncoder(opts(7)).encode_ddl(drop).value
    assert value == b'{"version":1,"type":"QUERY","sql":"DROP DATABASE IF EXISTS `shop`","commitTs":40,"buildTs":7}'
    (ev,) = SimpleDecoder(opts()).decode(msg(value))
    assert (ev.schema, ev.table, ev.ddl_type, ev.table_schema) == ("shop", "", ActionType.DROP_SCHEMA, None)


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        (ActionType.CREATE_TABLE, "CREATE"),
        (ActionType.RENAME_TABLES, "RENAME"),
        (ActionType.ADD_INDEX, "CINDEX"),
        (ActionType.DROP_PRIMARY_KEY, "DINDEX"),
        (ActionType.DROP_TABLE, "ERASE"),
        (ActionType.TRUNCATE_TABLE, "TRUNCATE"),
        (ActionType.MODIFY_COLUMN, "ALTER"),
        (ActionType.EXCHANGE_TABLE_PARTITION, "ALTER"),  # the one difference to canal (spec §3.1)
        (ActionType.CREATE_VIEW, "QUERY"),
    ],
)
def test_ddl_types(action: ActionType, kind: str) -> None:
    ddl = DDLEvent("simple", "user", "-- some ddl", action, 50, table_schema=USER, pre_table_schema=USER)
    value = SimpleEncoder(opts()).encode_ddl(ddl).value
    doc = orjson.loads(value)
    assert doc["type"] == kind
    assert ("preTableSchema" in doc) == (kind != "CREATE")
    (ev,) = SimpleDecoder(opts()).decode(msg(value))
    # The SQL says nothing here, so the decoder picks the kind's representative ActionType.
    assert ddl_kind(ev.ddl_type, simple=True) == kind


# ------------------------------------------------------------------ JSON value rendering


def test_json_value_rendering_table() -> None:
    row = RowChange(Op.INSERT, ALL_TYPES, 100, new=ALL_VALUES, partition_id=70)
    value = SimpleEncoder(opts(5, time_zone="Asia/Shanghai")).encode_row(row).value
    assert value == (
        b'{"version":1,"database":"db","table":"all_types","tableID":70,"type":"INSERT","commitTs":100,'
        b'"buildTs":5,"schemaVersion":99,"data":{"bit":"683","blob":"YmxvYg==","d":"0.0000001",'
        b'"dec":"-12.50","dt":"2024-02-29","dtm":"2024-02-29 12:34:56.789","e":"2","f":"3.14",'
        b'"id":"-9223372036854775808","j":"{\\"a\\": [1, 2.5], \\"k\\": \\"\\u003cv\\u003e\\"}","n":null,'
        b'"s":"5","ti":"-128","tm":"-838:59:59",'
        b'"ts":{"location":"Asia/Shanghai","value":"2024-02-29 12:34:56.000001"},"txt":"line\\nbreak",'
        b'"ubig":"18446744073709551615","vb":"AP8=","vc":"\xe6\x97\xa5\xe6\x9c\xac\\u003c\\u0026\\u003e\\u2028",'
        b'"y":"2024"}}'
    )
    dec = SimpleDecoder(opts())
    dec.decode(SimpleEncoder(opts()).encode_bootstrap(ALL_TYPES))
    (got,) = dec.decode(msg(value))
    assert got.new == ALL_VALUES
    assert got.partition_id == 70 and got.physical_table_id == 70


def test_table_schema_json_data_types() -> None:
    doc = table_schema_json(ALL_TYPES)
    dts = {c["name"]: c["dataType"] for c in doc["columns"]}
    assert dts["id"] == {"mysqlType": "bigint", "charset": "binary", "collate": "binary", "length": 20}
    assert dts["ubig"] == {
        "mysqlType": "bigint",
        "charset": "binary",
        "collate": "binary",
        "length": 20,
        "unsigned": True,
    }
    assert dts["f"] == {"mysqlType": "float", "charset": "binary", "collate": "binary", "length": 12}
    assert dts["dec"] == {"mysqlType": "decimal", "charset": "binary", "collate": "binary", "length": 10, "decimal": 2}
    assert dts["dtm"] == {"mysqlType": "datetime", "charset": "binary", "collate": "binary", "length": 23, "decimal": 3}
    assert dts["y"] == {
        "mysqlType": "year", "charset": "binary", "collate": "binary", "length": 4, "unsigned": True, "zerofill": True
    }  # fmt: skip
    assert dts["e"] == {
        "mysqlType": "enum",
        "charset": "utf8mb4",
        "collate": "utf8mb4_bin",
        "elements": ["a", "b", "c"],
    }
    assert dts["bit"]["unsigned"] is True and dts["bit"]["length"] == 10
    assert dts["vb"]["mysqlType"] == "varbinary" and dts["blob"]["mysqlType"] == "blob"
    assert dts["txt"]["mysqlType"] == "text"
    defaults = {c["name"]: c["default"] for c in doc["columns"]}
    assert defaults["bit"] == 258 and defaults["vc"] == "x<y" and defaults["id"] is None
    assert doc["indexes"] == [
        {"name": "primary", "unique": True, "primary": True, "nullable": False, "columns": ["id"]},
        {"name": "uk", "unique": True, "primary": False, "nullable": True, "columns": ["ti", "n"]},
    ]
    # The escaper applies to the schema too: `x<y` is written as std escapes it.
    value = SimpleEncoder(opts()).encode_bootstrap(ALL_TYPES).value
    assert b'"default":"x\\u003cy"' in value and b'"default":258' in value
    dec = SimpleDecoder(opts())
    assert dec.decode(msg(value)) == []
    back = dec.schemas.get(("db", "all_types", 99))
    assert back == carried(ALL_TYPES, avro=False)
    assert back.column("bit").default == 258 and back.column("dtm").decimal == 3
    assert back.indexes[0].name == "PRIMARY" and back.handle_key == (0,)


def test_only_output_updated_columns() -> None:
    row = RowChange(Op.UPDATE, USER, 9, new=(1, "a", 26, 1.5), old=(1, "a", 25, 1.5))
    full = orjson.loads(SimpleEncoder(opts()).encode_row(row).value)
    assert full["old"] == {"age": "25", "id": "1", "name": "a", "score": "1.5"}
    slim = orjson.loads(SimpleEncoder(opts(only_output_updated_columns=True)).encode_row(row).value)
    assert slim["data"] == full["data"] and slim["old"] == {"age": "25"}
    dec = SimpleDecoder(opts())
    dec.decode(SimpleEncoder(opts()).encode_bootstrap(USER))
    (got,) = dec.decode(SimpleEncoder(opts(only_output_updated_columns=True)).encode_row(row))
    assert got.old == (ABSENT, ABSENT, 25, ABSENT)


def test_checksum_member_is_read_and_ignored() -> None:
    doc = orjson.loads(fixture("dml_insert"))
    doc["checksum"] = {"version": 1, "corrupted": False, "current": 123, "previous": 0}
    dec = SimpleDecoder(opts())
    dec.decode(msg(fixture("ddl_alter")))
    (got,) = dec.decode(msg(orjson.dumps(doc)))
    same_row(got, INSERT)


# ------------------------------------------------------------------ Avro


def zz(n: int) -> bytes:
    """Avro long: zigzag varint (written here independently of fastavro)."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def s(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return zz(len(data)) + data


def aopts(clock: int = 0, **kw: Any) -> CodecOptions:
    return opts(clock, encoding_format="avro", **kw)


def test_avro_schema_file_is_the_spec_union() -> None:
    raw = json.loads(SCHEMA_PATH.read_text())
    assert [r["name"] for r in raw] == [
        "DataType", "ColumnSchema", "IndexSchema", "TableSchema", "Checksum", "Watermark",
        "Bootstrap", "DDL", "Timestamp", "UnsignedBigint", "DML", "Message",
    ]  # fmt: skip
    assert {r["namespace"] for r in raw} == {"com.pingcap.simple.avro"}
    dml = next(r for r in raw if r["name"] == "DML")
    assert dml["fields"][-1]["type"][1]["values"] == [
        "null", "long", "float", "double", "string", "bytes", "Timestamp", "UnsignedBigint"
    ]  # fmt: skip


def test_avro_watermark_exact_bytes() -> None:
    value = SimpleEncoder(aopts(1708923816911)).encode_resolved(Resolved(447984124732375041)).value
    assert value == b"\x16\x00\x00\x02" + zz(447984124732375041) + zz(1708923816911)
    # The same bytes as fastavro writing the datum against the whole top-level union.
    out = io.BytesIO()
    ns = "com.pingcap.simple.avro."
    datum = {
        "type": "WATERMARK",
        "payload": (ns + "Watermark", {"version": 1, "commitTs": 447984124732375041, "buildTs": 1708923816911}),
    }
    schemaless_writer(out, parse_schema(json.loads(SCHEMA_PATH.read_text())), (ns + "Message", datum))
    assert out.getvalue() == value
    assert SimpleDecoder(aopts()).decode(msg(value)) == [Resolved(447984124732375041)]


BRANCHES = TableSchema(
    "d",
    "t",
    (
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("n", TypeCode.INT),
        Column("f", TypeCode.FLOAT),
        Column("db", TypeCode.DOUBLE),
        Column("vc", TypeCode.VARCHAR, **UTF8, length=10),
        Column("vb", TypeCode.VARCHAR, length=10),
        Column("ts", TypeCode.TIMESTAMP),
        Column("ub", TypeCode.BIGINT, unsigned=True),
        Column("dec", TypeCode.DECIMAL, length=5, decimal=1),
        Column("bit", TypeCode.BIT, length=8),
        Column("e", TypeCode.ENUM, **UTF8, elements=("x", "y")),
        Column("y", TypeCode.YEAR),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=5,
    version=6,
)
BRANCH_VALUES = (
    -3,
    None,
    1.5,
    0.1,
    "hé",
    b"\x00\x01",
    "2024-01-01 00:00:00",
    18446744073709551615,
    Decimal("-1.5"),
    255,
    2,
    1999,
)


def test_avro_dml_with_every_value_branch_exact_bytes() -> None:
    row = RowChange(Op.INSERT, BRANCHES, 7, new=BRANCH_VALUES)
    value = SimpleEncoder(aopts(9)).encode_row(row).value
    entries = [
        (b"id", b"\x02" + zz(-3)),  # long
        (b"n", b"\x00"),  # null
        (b"f", b"\x04" + struct.pack("<f", 1.5)),  # float
        (b"db", b"\x06" + struct.pack("<d", 0.1)),  # double
        (b"vc", b"\x08" + s("hé")),  # string
        (b"vb", b"\x0a" + s(b"\x00\x01")),  # bytes
        (b"ts", b"\x0c" + s("UTC") + s("2024-01-01 00:00:00")),  # Timestamp
        (b"ub", b"\x0e" + zz(-1)),  # UnsignedBigint: 2**64-1 as int64 bits = -1
        (b"dec", b"\x08" + s("-1.5")),  # DECIMAL as string
        (b"bit", b"\x08" + s("255")),  # BIT as decimal string (what the code writes)
        (b"e", b"\x02" + zz(2)),  # ENUM index as long
        (b"y", b"\x02" + zz(1999)),  # YEAR as long
    ]
    expected = (
        b"\x16"  # top-level union branch 11: Message
        + b"\x06"  # MessageType DML (3)
        + b"\x06"  # payload branch 3: DML
        + b"\x02"  # version 1
        + s("d")
        + s("t")
        + zz(5)  # tableID
        + b"\x00"  # DMLType INSERT
        + zz(7)  # commitTs
        + zz(9)  # buildTs
        + zz(6)  # schemaVersion
        + b"\x00\x00\x00"  # claimCheckLocation, handleKeyOnly, checksum: null
        + b"\x02"  # data: map branch
        + zz(len(entries))
        + b"".join(s(k) + v for k, v in entries)
        + b"\x00"  # end of map blocks
        + b"\x00"  # old: null
    )
    assert value == expected
    dec = SimpleDecoder(aopts())
    dec.decode(SimpleEncoder(aopts()).encode_bootstrap(BRANCHES))
    (got,) = dec.decode(msg(value))
    assert got.new == BRANCH_VALUES


def test_avro_unsigned_bigint_bits() -> None:
    table = TableSchema("d", "u", (Column("id", TypeCode.BIGINT, unsigned=True, nullable=False),), table_id=1)
    for v, bits in ((18446744073709551615, -1), (1 << 63, -(1 << 63)), (5, 5)):
        value = SimpleEncoder(aopts()).encode_row(RowChange(Op.INSERT, table, 1, new=(v,))).value
        assert value.endswith(s("id") + b"\x0e" + zz(bits) + b"\x00\x00")
        dec = SimpleDecoder(aopts())
        dec.decode(SimpleEncoder(aopts()).encode_bootstrap(table))
        assert dec.decode(msg(value))[0].new == (v,)


def test_avro_bootstrap_and_ddl_round_trip() -> None:
    enc = SimpleEncoder(aopts(3))
    boot = enc.encode_bootstrap(ALL_TYPES).value
    assert boot[:3] == b"\x16\x02\x02"  # Message, BOOTSTRAP, payload branch 1
    dec = SimpleDecoder(aopts())
    assert dec.decode(msg(boot)) == []
    ts = dec.schemas.get(("db", "all_types", 99))
    assert ts is not None
    # Avro's DataType sets `decimal` only for DECIMAL and TIMESTAMP: DATETIME's fsp is lost.
    assert ts.column("dtm").decimal is None and ts.column("ts").decimal == 6 and ts.column("dec").decimal == 2
    assert ts.column("bit").default == 258 and ts.column("vc").default == "x<y"
    assert ts.column("e").elements == ("a", "b", "c") and ts.column("y").zerofill
    (ev,) = dec.decode(enc.encode_ddl(ALTER))
    assert ev.table_schema == USER_ALTERED and ev.pre_table_schema == USER and ev.ddl_type == ActionType.ADD_COLUMN
    row = RowChange(Op.UPDATE, ALL_TYPES, 100, new=ALL_VALUES, old=ALL_VALUES)
    (got,) = dec.decode(enc.encode_row(row))
    assert got.new == ALL_VALUES == got.old


def test_avro_accepts_documented_older_value_forms() -> None:
    ns = "com.pingcap.simple.avro."
    dec = SimpleDecoder(aopts())
    dec.decode(SimpleEncoder(aopts()).encode_bootstrap(BRANCHES))
    data = {"id": ("long", 1), "bit": ("long", 7), "ub": ("string", "18446744073709551615"), "ts": ("string", "x")}
    payload = {
        "version": 1, "database": "d", "table": "t", "tableID": 5, "type": "INSERT", "commitTs": 1, "buildTs": 0,
        "schemaVersion": 6, "claimCheckLocation": None, "handleKeyOnly": None, "checksum": None,
        "data": ("map", data), "old": None,
    }  # fmt: skip
    out = io.BytesIO()
    schemaless_writer(out, SCHEMA, (ns + "Message", {"type": "DML", "payload": (ns + "DML", payload)}))
    (got,) = dec.decode(msg(out.getvalue()))
    assert got.as_dict() == {"id": 1, "bit": 7, "ub": 18446744073709551615, "ts": "x"}


# ------------------------------------------------------------------ large messages


WIDE = TableSchema(
    "db",
    "wide",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("k2", TypeCode.VARCHAR, **UTF8, length=10, nullable=False),
        Column("payload", TypeCode.BLOB, **UTF8),
    ),
    (Index("PRIMARY", ("id", "k2"), primary=True),),
    table_id=3,
    version=4,
)
BIG = RowChange(Op.UPDATE, WIDE, 11, new=(1, "a", "x" * 5000), old=(1, "a", "y" * 5000))


def test_too_large_without_handling_names_the_row() -> None:
    with pytest.raises(MessageTooLargeError, match=r"db\.wide at commitTs 11 \(id=1, k2='a'\)"):
        SimpleEncoder(opts(max_message_bytes=1000)).encode_row(BIG)


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_handle_key_only(fmt: str) -> None:
    o = opts(max_message_bytes=1000, large_message_handle_option="handle-key-only", encoding_format=fmt)
    out = SimpleEncoder(o).encode_row(BIG)
    assert out.size <= 1000
    if fmt == "json":
        doc = orjson.loads(out.value)
        assert doc["handleKeyOnly"] is True and "claimCheckLocation" not in doc
        assert doc["data"] == doc["old"] == {"id": "1", "k2": "a"}
    dec = SimpleDecoder(replace(o, max_message_bytes=10**7))
    dec.decode(SimpleEncoder(o).encode_bootstrap(WIDE))
    (got,) = dec.decode(out)
    assert got.new == (1, "a", ABSENT) and got.old == (1, "a", ABSENT)


@pytest.mark.parametrize("fmt", ["json", "avro"])
@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("uri_form", ["file", "path"])
def test_claim_check(tmp_path: Path, fmt: str, raw: bool, uri_form: str) -> None:
    uri = tmp_path.as_uri() if uri_form == "file" else str(tmp_path)
    o = opts(
        max_message_bytes=1000,
        large_message_handle_option="claim-check",
        claim_check_storage_uri=uri,
        claim_check_raw_value=raw,
        encoding_format=fmt,
    )
    out = SimpleEncoder(o).encode_row(BIG)
    (file,) = tmp_path.iterdir()
    assert file.suffix == ".json"
    stored = file.read_bytes()
    if raw:
        assert stored[:1] == (b"{" if fmt == "json" else b"\x16")
    else:
        wrapped = orjson.loads(stored)
        assert wrapped["key"] is None and list(wrapped) == ["key", "value"]
        assert base64.b64decode(wrapped["value"])[:1] == (b"{" if fmt == "json" else b"\x16")
    if fmt == "json":
        doc = orjson.loads(out.value)
        assert doc["handleKeyOnly"] is True and doc["claimCheckLocation"] == f"{uri}/{file.name}"
    # The consumer reads the file from its own storage (same directory here), whatever the form.
    dec = SimpleDecoder(opts(claim_check_storage_uri=str(tmp_path), encoding_format=fmt))
    dec.decode(SimpleEncoder(o).encode_bootstrap(WIDE))
    (got,) = dec.decode(out, "p0@9")
    same_row(got, BIG)
    # Without a claim-check store, or with the file gone: an error naming the message.
    with pytest.raises(CodecError, match="claim-check") as err:
        SimpleDecoder(opts(encoding_format=fmt)).decode(out, "p0@9")
    assert err.value.where == "p0@9"
    file.unlink()
    with pytest.raises(CodecError, match="claim-check file") as err:
        dec.decode(out, "p0@9")
    assert err.value.where == "p0@9"


def test_claim_check_needs_a_storage_uri() -> None:
    with pytest.raises(ConfigError):
        SimpleEncoder(opts(large_message_handle_option="claim-check"))
    with pytest.raises(ConfigError):
        SimpleEncoder(opts(large_message_handle_option="claim-check", claim_check_storage_uri="s3://bucket/x"))


@pytest.mark.parametrize("method", ["snappy", "lz4"])
@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_compression(method: str, fmt: str) -> None:
    pa = pytest.importorskip("pyarrow")
    o = opts(5, large_message_handle_compression=method, encoding_format=fmt)
    plain = SimpleEncoder(opts(5, encoding_format=fmt))
    enc, dec = SimpleEncoder(o), SimpleDecoder(o)
    boot = enc.encode_bootstrap(USER)
    row = enc.encode_row(UPDATE)
    # The whole value is compressed: a raw Snappy block (varint length first) or an LZ4 frame.
    if method == "snappy":
        expected = plain.encode_row(UPDATE).value
        n, header = len(expected), bytearray()
        while n >= 0x80:
            header.append(n & 0x7F | 0x80)
            n >>= 7
        assert row.value.startswith(bytes(header) + bytes([n]))
        assert pa.Codec("snappy").decompress(row.value, decompressed_size=len(expected), asbytes=True) == expected
    else:
        assert row.value[:4] == b"\x04\x22\x4d\x18"
    assert dec.decode(boot) == []
    (got,) = dec.decode(row)
    same_row(got, UPDATE)
    assert dec.decode(enc.encode_resolved(Resolved(9))) == [Resolved(9)]
    with pytest.raises(CodecError, match="cannot decompress") as err:
        dec.decode(msg(row.value[:3] + b"\xff" * 8), "z@1")
    assert err.value.where == "z@1"


def test_snappy_refuses_absurd_length_header() -> None:
    dec = SimpleDecoder(opts(large_message_handle_compression="snappy"))
    with pytest.raises(CodecError, match="claims"):
        dec.decode(msg(b"\xff\xff\xff\xff\x0f" + b"\x00" * 4), "z")


def test_registry_and_event_stream() -> None:
    enc = make_encoder(opts(1))
    dec = make_decoder(opts())
    assert isinstance(enc, SimpleEncoder) and isinstance(dec, SimpleDecoder)
    stream = enc.encode([ALTER, INSERT, Resolved(5)])
    assert [m.rows for m in stream] == [0, 1, 0]
    assert all(m.key is None for m in stream)
    events = [e for m in stream for e in dec.decode(m)]
    assert [type(e).__name__ for e in events] == ["DDLEvent", "RowChange", "Resolved"]


def test_bit_defaults() -> None:
    assert [bit_default(v) for v in (b"\x01\x02", "\x05", "b'101'", 7, None, b"")] == [258, 5, 5, 7, None, 0]


# ------------------------------------------------------------------ hostile input


def _known_decoder(fmt: str = "json") -> SimpleDecoder:
    dec = SimpleDecoder(opts(encoding_format=fmt))
    dec.decode(SimpleEncoder(opts(encoding_format=fmt)).encode_bootstrap(USER))
    return dec


def _patched(**changes: Any) -> bytes:
    doc = orjson.loads(fixture("dml_insert"))
    for k, v in changes.items():
        if v is ...:
            doc.pop(k, None)
        else:
            doc[k] = v
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "invalid JSON"),
        (_patched(version=2), "unsupported protocol version 2"),
        (_patched(version=...), "unsupported protocol version None"),
        (_patched(type="MERGE"), "unknown message type 'MERGE'"),
        (_patched(commitTs="1"), "commitTs must be an integer"),
        (_patched(commitTs=-1), "commitTs -1 is not a uint64"),
        (_patched(database=5), "database must be a string"),
        (_patched(data=[1]), "data must be an object"),
        (_patched(data=...), "INSERT of simple.user without data"),
        (_patched(old={"id": "1"}), "INSERT of simple.user with old"),
        (_patched(type="DELETE"), "DELETE of simple.user without old"),
        (_patched(type="DELETE", old={"id": "1"}), "DELETE of simple.user with data"),
        (_patched(data={"id": "1", "nope": "2"}), "column 'nope' is not in simple.user schemaVersion"),
        (_patched(data={"id": "x1"}), r"column 'id' \(int\) value 'x1'"),
        (_patched(data={"id": 1}), "expected a decimal integer string"),
        (_patched(data={"id": "2147483648"}), "out of range"),
        (_patched(data={"id": "1_0"}), "expected a decimal integer string"),
        (_patched(data={"score": "NaN"}), "expected a decimal number string"),
        (_patched(data={"score": "1e39"}), "column 'score'"),
        (_patched(data={"name": 5}), "expected a string"),
        (_patched(checksum=5), "checksum must be an object"),
        (b'{"version":1,"type":"BOOTSTRAP","commitTs":0,"buildTs":0}', "BOOTSTRAP message without tableSchema"),
    ],
)
def test_bad_json_messages(value: bytes, match: str) -> None:
    with pytest.raises(SimpleFormatError, match=match) as err:
        _known_decoder().decode(msg(value), "topic/0@42")
    assert err.value.where == "topic/0@42"


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d["columns"][0]["dataType"].update(mysqlType="int128"), "unknown MySQL type name"),
        (lambda d: d["columns"][0]["dataType"].pop("mysqlType"), "mysqlType must be a string"),
        (lambda d: d["columns"][0].update(nullable="no"), "nullable must be a boolean"),
        (lambda d: d["columns"][0]["dataType"].update(length="11"), "length must be an integer"),
        (lambda d: d["columns"][0]["dataType"].update(elements=[1]), "elements must be a list of strings"),
        (lambda d: d["columns"][0].update(default=[1]), "default must be a scalar"),
        (lambda d: d["indexes"][0].update(columns=["ghost"]), "names unknown columns"),
        (lambda d: d["columns"].append(d["columns"][0]), "duplicate column names"),
        (lambda d: d.update(columns=5), "columns/indexes must be arrays"),
        (lambda d: d.update(tableID="148"), "tableID must be an integer"),
        (lambda d: d.update(version=-1), "version -1 is not a uint64"),
    ],
)
def test_bad_table_schemas(mutate: Any, match: str) -> None:
    doc = orjson.loads(fixture("bootstrap"))
    mutate(doc["tableSchema"])
    with pytest.raises(SimpleFormatError, match=match) as err:
        SimpleDecoder(opts()).decode(msg(orjson.dumps(doc)), "p1@7")
    assert err.value.where == "p1@7" and "tableSchema: " in str(err.value)


def test_bad_base64_in_binary_column() -> None:
    dec = SimpleDecoder(opts())
    dec.decode(SimpleEncoder(opts()).encode_bootstrap(BRANCHES))
    doc = {
        "version": 1, "database": "d", "table": "t", "type": "INSERT", "commitTs": 1, "buildTs": 0,
        "schemaVersion": 6, "data": {"id": "1", "vb": "not base64!"},
    }  # fmt: skip
    with pytest.raises(SimpleFormatError, match=r"column 'vb' \(varbinary\)"):
        dec.decode(msg(orjson.dumps(doc)), "x")


def test_held_message_that_fails_on_release_does_not_lose_the_others() -> None:
    dec = SimpleDecoder(opts())
    dec.decode(msg(_user_dml("INSERT", commit_ts=1)), "a")
    bad = orjson.loads(_user_dml("INSERT", commit_ts=2))
    bad["data"]["ghost"] = "1"
    dec.decode(msg(orjson.dumps(bad)), "b")
    dec.decode(msg(_user_dml("INSERT", commit_ts=3)), "c")
    boot = SimpleEncoder(opts()).encode_bootstrap(USER)
    with pytest.raises(SimpleFormatError, match="ghost") as err:
        dec.decode(boot, "boot")
    assert err.value.where == "b"
    # Only "b" is dropped; "a" and "c" come out with the next message.
    events = dec.decode(msg(fixture("watermark")), "wm")
    assert [type(e).__name__ for e in events] == ["RowChange", "RowChange", "Resolved"]
    assert [e.commit_ts for e in events[:2]] == [1, 3]


def _avro_dml(**payload_changes: Any) -> bytes:
    enc = SimpleEncoder(aopts())
    value = enc.encode_row(INSERT).value
    if not payload_changes:
        return value
    ns = "com.pingcap.simple.avro."
    payload = {
        "version": 1, "database": "simple", "table": "user", "tableID": 148, "type": "INSERT", "commitTs": 1,
        "buildTs": 0, "schemaVersion": V_OLD, "claimCheckLocation": None, "handleKeyOnly": None, "checksum": None,
        "data": ("map", {"id": ("long", 1)}), "old": None,
    }  # fmt: skip
    payload.update(payload_changes)
    mtype = payload.pop("_mtype", "DML")
    out = io.BytesIO()
    schemaless_writer(out, SCHEMA, (ns + "Message", {"type": mtype, "payload": (ns + "DML", payload)}))
    return out.getvalue()


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (b"", "must start with 0x16"),
        (b"\x14\x00", "must start with 0x16"),  # union branch 10 (a bare DML record)
        (_avro_dml()[:-5], "invalid Avro data"),
        (_avro_dml() + b"\x00", "1 trailing bytes"),
        (b"\x16\x10", "invalid Avro data"),  # MessageType index 8 does not exist
        (_avro_dml(version=3), "unsupported protocol version 3"),
        (_avro_dml(_mtype="DDL"), "message type DDL carries a DML payload"),
        (_avro_dml(data=("map", {"id": ("string", "1")})), r"column 'id' \(int\).*union branch string where long"),
        (_avro_dml(data=("map", {"name": ("bytes", b"1")})), "union branch bytes where string"),
        (_avro_dml(data=("map", {"score": ("long", 1)})), "union branch long where float"),
        (
            _avro_dml(data=("map", {"age": ("com.pingcap.simple.avro.Timestamp", {"location": "", "value": ""})})),
            "Timestamp",
        ),
        (_avro_dml(data=("map", {"id": ("long", 1 << 40)})), "out of range"),
        (_avro_dml(data=("map", {"ghost": ("long", 1)})), "column 'ghost' is not in simple.user"),
    ],
)
def test_bad_avro_messages(value: bytes, match: str) -> None:
    with pytest.raises(SimpleFormatError, match=match) as err:
        _known_decoder("avro").decode(msg(value), "avro@1")
    assert err.value.where == "avro@1"


def _fuzz_seeds(fmt: str) -> list[bytes]:
    if fmt == "json":
        return [fixture(n) for n in ("dml_insert", "dml_update", "bootstrap", "ddl_alter")]
    enc = SimpleEncoder(aopts())
    return [_avro_dml(), enc.encode_bootstrap(USER).value, enc.encode_ddl(ALTER).value]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hostile_bytes_only_raise_codec_errors(data: st.DataObject) -> None:
    fmt = data.draw(st.sampled_from(["json", "avro"]))
    seed = data.draw(st.sampled_from(_fuzz_seeds(fmt)))
    pos = data.draw(st.integers(0, len(seed)))
    value = bytearray(seed)
    action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    if action == "flip" and pos < len(value):
        value[pos] ^= data.draw(st.integers(1, 255))
    elif action == "cut":
        del value[pos:]
    else:
        value[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        events = _known_decoder(fmt).decode(msg(bytes(value)), "fuzz")
    except CodecError as exc:
        assert exc.where == "fuzz"
        return
    for ev in events:  # whatever decodes must be a well-formed event
        assert isinstance(ev, RowChange | Resolved | DDLEvent)


def test_unknown_schema_is_held_not_dropped_and_errors_carry_where() -> None:
    dec = SimpleDecoder(opts(), max_pending_messages=0)
    with pytest.raises(UnknownSchemaError, match=r"simple\.user schemaVersion 447984074911121426") as err:
        dec.decode(msg(fixture("dml_insert")), "t/3@100")
    assert err.value.where == "t/3@100"


def test_message_without_value() -> None:
    with pytest.raises(CodecError, match="no value"):
        SimpleDecoder(opts()).decode(Message(key=None, value=None), "w")


# ------------------------------------------------------------------ model round trips


def carried(ts: TableSchema, avro: bool) -> TableSchema:
    """What of a TableSchema survives the protocol (docs/protocols/simple.md, "not carried")."""
    cols = []
    for c in ts.columns:
        decimal = c.decimal or None
        if c.type_code in (TypeCode.FLOAT, TypeCode.DOUBLE) or (
            avro and c.type_code not in (TypeCode.DECIMAL, TypeCode.TIMESTAMP)
        ):
            decimal = None
        default = bit_default(c.default) if c.type_code is TypeCode.BIT else c.default
        cols.append(
            replace(
                c, length=column_length(c) or None, decimal=decimal, default=default, generated=False, column_id=None
            )
        )
    indexes = tuple(replace(i, name="PRIMARY") if i.primary else i for i in ts.indexes)
    return TableSchema(ts.schema, ts.table, tuple(cols), indexes, ts.table_id, ts.version)


def _round_trip(fmt: str, rows: list[RowChange]) -> None:
    o = opts(encoding_format=fmt)
    enc, dec = SimpleEncoder(o), SimpleDecoder(o)
    assert dec.decode(enc.encode_bootstrap(rows[0].table_schema)) == []
    for row in rows:
        (got,) = dec.decode(enc.encode_row(row), "rt")
        assert got.table_schema == carried(row.table_schema, fmt == "avro")
        assert (got.op, got.commit_ts, got.physical_table_id) == (row.op, row.commit_ts, row.physical_table_id)
        assert got.new == row.new
        assert got.old == row.old
        for image in (got.new, got.old):  # FLOAT comes back as a float32 value
            for c, v in zip(got.table_schema.columns, image or [None] * len(row.table_schema.columns), strict=True):
                if isinstance(v, float) and c.type_code is TypeCode.FLOAT:
                    assert to_float32(v) == v


@pytest.mark.parametrize("fmt", ["json", "avro"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_every_type(fmt: str, data: st.DataObject) -> None:
    table = data.draw(tables())
    rows = data.draw(st.lists(row_changes(table), min_size=1, max_size=4))
    if data.draw(st.booleans()):
        rows = [replace(r, partition_id=r.table_schema.table_id + 1000) for r in rows]
    _round_trip(fmt, rows)


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_round_trip_edge_values(fmt: str) -> None:
    rows = [
        RowChange(Op.INSERT, ALL_TYPES, 1, new=ALL_VALUES),
        RowChange(
            Op.UPDATE, BRANCHES, 2, new=BRANCH_VALUES, old=(0, 1, -0.0, -0.0, "", b"", None, 0, Decimal("0.0"), 0, 1, 0)
        ),
    ]
    for row in rows:
        _round_trip(fmt, [row])
    # -0.0 keeps its sign (Go prints "-0"; Avro carries the IEEE bits).
    o = opts(encoding_format=fmt)
    dec = SimpleDecoder(o)
    dec.decode(SimpleEncoder(o).encode_bootstrap(BRANCHES))
    (got,) = dec.decode(SimpleEncoder(o).encode_row(rows[1]))
    assert math.copysign(1.0, got.old[2]) == -1.0 and math.copysign(1.0, got.old[3]) == -1.0


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_encoder_refuses_values_of_the_wrong_kind(fmt: str) -> None:
    enc = SimpleEncoder(opts(encoding_format=fmt))
    for bad in ((1, b"bytes in a text column", 1, 1.5), (1, "\ud800", 1, 1.5)):
        with pytest.raises(CodecError, match=r"cannot encode insert row of simple\.user at commitTs 3 \(id=1\)"):
            enc.encode_row(RowChange(Op.INSERT, USER, 3, new=bad))
