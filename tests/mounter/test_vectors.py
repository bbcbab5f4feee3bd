"""TiDB's and TiCDC's worked examples (tests/fixtures/mounter/tidb_kv_codec.json) decode exactly."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from changefeed.capture.mounter import KeyKind, Mounter, classify_key, decode_record_key
from changefeed.capture.mounter.codec import decode_bytes, decode_decimal_bin, decode_decimal_datum
from changefeed.capture.mounter.datum import decode_key_datums
from changefeed.capture.mounter.jsonbin import json_to_text
from changefeed.capture.mounter.temporal import datetime_text, duration_text, timestamp_text, unpack_time
from changefeed.model import Column, Index, Op, TypeCode

from . import tidb_encoder as enc
from .util import TS, catalog_for, put, schema, utf8

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "mounter" / "tidb_kv_codec.json"
CASES = {c["id"]: c for c in json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]}


def _expected(case_id: str) -> dict:
    return CASES[case_id]["expected"]


def test_record_key_table104_handle1() -> None:
    exp = _expected("kv-record-key-table104-handle1")
    key = bytes.fromhex(CASES["kv-record-key-table104-handle1"]["input"]["key_hex"])
    assert classify_key(key) is KeyKind.RECORD
    rk = decode_record_key(key)
    assert (rk.table_id, rk.int_handle, rk.common_handle) == (exp["table_id"], exp["int_handle"], None)
    assert enc.record_key(104, 1).hex() == exp["check_encode"]


def test_index_key_is_recognised_and_decodes() -> None:
    key = bytes.fromhex(_expected("kv-index-key-nonunique")["key_hex"])
    assert classify_key(key) is KeyKind.INDEX
    assert decode_key_datums(key, 19) == [(1, b"abc"), (3, 1)]
    assert enc.index_key(104, 1, enc.key_bytes(b"abc") + enc.key_int(1)) == key


@pytest.mark.parametrize("row", _expected("kv-memcomparable-bytes")["rows"], ids=lambda r: r["input_hex"] or "empty")
def test_memcomparable_bytes(row: dict) -> None:
    encoded = bytes.fromhex(row["encoded_hex"])
    assert decode_bytes(encoded + b"\x99", 0) == (bytes.fromhex(row["input_hex"]), len(encoded))


def test_flattened_values() -> None:
    rows = _expected("kv-flattened-values")["rows"]
    by_type = {r["type"]: r for r in rows}
    ts6 = by_type["timestamp(6)"]["flattened_uint64"]
    assert ts6 == 1840446893366133311
    assert unpack_time(ts6) == (2011, 11, 10, 11, 11, 11, 999999)
    assert timestamp_text(ts6, 6, None) == "2011-11-10 11:11:11.999999"
    assert datetime_text(ts6, 6) == "2011-11-10 11:11:11.999999"
    assert duration_text(by_type["time(0)"]["flattened_int64_nanoseconds"], 0) == "04:00:00"
    assert by_type["bit(24)"]["flattened_uint64"] == int.from_bytes(b"\x31\x30\x30", "big")
    assert enc.pack_time(2011, 11, 10, 11, 11, 11, 999999) == ts6


@pytest.mark.parametrize("row", _expected("kv-decimal-binary")["rows"], ids=lambda r: r["value"])
def test_decimal_binary(row: dict) -> None:
    value, end = decode_decimal_bin(bytes.fromhex(row["bin_hex"]), 0, row["precision"], row["frac"])
    assert str(value) == row["value"]
    assert end == len(row["bin_hex"]) // 2
    if "row_value_hex" in row:
        (v, p, f), _ = decode_decimal_datum(bytes.fromhex(row["row_value_hex"]), 0)
        assert (str(v), p, f) == (row["value"], row["precision"], row["frac"])


def test_json_binary_a_2() -> None:
    cell = bytes.fromhex("01010000001c0000001300000001000914000000610200000000000000")
    assert json_to_text(cell[0], cell, 1) == '{"a": 2}'


def _pk_table():
    # create table t(a int primary key, b varchar(10), c int) -- table id 104, ids a=1, b=2, c=3
    return schema(
        [
            Column("a", TypeCode.INT, nullable=False),
            utf8("b", length=10),
            Column("c", TypeCode.INT),
        ],
        (Index("PRIMARY", ("a",), primary=True),),
    )


@pytest.mark.parametrize("case_id", ["kv-row-v2-pk-is-handle", "kv-row-v1-same-row"])
def test_pk_is_handle_row(case_id: str) -> None:
    ts = _pk_table()
    m = Mounter(catalog_for(ts))
    key = bytes.fromhex(_expected("kv-row-v2-pk-is-handle")["key_hex"])
    value = bytes.fromhex(_expected(case_id)["value_hex"])
    ev = m.mount(put(key, value))
    assert ev.op is Op.INSERT
    assert ev.as_dict() == {"a": 1, "b": "abc", "c": None} == _expected("kv-row-v2-pk-is-handle")["decoded"]
    assert (ev.table_id, ev.row_id, ev.commit_ts, ev.partition_id) == (104, 1, TS, None)
    # and our test encoder writes the same bytes
    fmt = "v2" if "v2" in case_id else "v1"
    assert enc.encode_image(ev.table_schema, ev.new, fmt, skip=[0]) == value


_MANY_TYPES = {
    1: Column("c1", TypeCode.BIGINT),
    22: Column("c22", TypeCode.SMALLINT, unsigned=True),
    3: Column("c3", TypeCode.DOUBLE),
    24: Column("c24", TypeCode.BLOB),  # charset binary -> bytes
    25: utf8("c25", TypeCode.CHAR),
    5: Column("c5", TypeCode.TIMESTAMP, decimal=6),
    16: Column("c16", TypeCode.TIME, decimal=0),
    8: Column("c8", TypeCode.DECIMAL, length=6, decimal=4),
    12: Column("c12", TypeCode.YEAR),
    9: utf8("c9", TypeCode.ENUM, elements=("y", "n")),
    14: Column("c14", TypeCode.JSON),
    11: Column("c11", TypeCode.INT),
    2: utf8("c2"),
    100: Column("c100", TypeCode.DATETIME),
    116: Column("c116", TypeCode.FLOAT),
    117: utf8("c117", TypeCode.SET, elements=("n1", "n2")),
    118: Column("c118", TypeCode.BIT, length=24),
    119: utf8("c119"),
}
_MANY_EXPECTED = {
    "c1": 1,
    "c22": 1,
    "c3": 2.0,
    "c24": b"abc",
    "c25": "ab",
    "c5": "2011-11-10 11:11:11.999999",
    "c16": "04:00:00",
    "c8": Decimal("11.9900"),
    "c12": 1999,
    "c9": 2,
    "c14": '{"a": 2}',
    "c11": None,
    "c2": None,
    "c100": None,
    "c116": 6.0,
    "c117": 1,
    "c118": 3223600,
    "c119": "",
}


@pytest.mark.parametrize("case_id", ["kv-row-v2-many-types", "kv-row-v2-large-colid"])
def test_many_types_row(case_id: str) -> None:
    cols = dict(_MANY_TYPES)
    expected = dict(_MANY_EXPECTED)
    if case_id.endswith("large-colid"):
        cols[300] = Column("c300", TypeCode.BIGINT)
        del cols[1]
        expected["c300"] = expected.pop("c1")
    ts = schema([replace(c, column_id=cid) for cid, c in cols.items()])  # no PK: _tidb_rowid handle
    value = bytes.fromhex(_expected(case_id)["row_value_hex"])
    if case_id.endswith("many-types"):
        layout = _expected(case_id)["layout"]
        assert (value[0], value[1]) == (layout["version"], layout["flags"])
    else:
        assert value[1] == 0x01  # LARGE
    ev = Mounter(catalog_for(ts, table_id=77)).mount(put(enc.record_key(77, 5), value))
    got = ev.as_dict()
    assert got == expected
    assert isinstance(got["c8"], Decimal) and got["c8"].as_tuple().exponent == -4
    assert ev.row_id == 5
    # the test encoder agrees byte for byte with the derived vector
    cells = {c.column_id: None if got[c.name] is None else enc.cell_v2(c, got[c.name]) for c in ts.columns}
    assert enc.row_v2(cells) == value


def test_many_types_cells_match_vector() -> None:
    for entry in CASES["kv-row-v2-many-types"]["input"]["columns"]:
        if entry["cell_hex"] is None:
            continue
        col = _MANY_TYPES[entry["col_id"]]
        value = _MANY_EXPECTED[col.name]
        assert enc.cell_v2(col, value).hex() == entry["cell_hex"], entry


def test_ints_float_row() -> None:
    ts = schema([Column("a", TypeCode.INT), Column("b", TypeCode.INT, unsigned=True), Column("c", TypeCode.DOUBLE)])
    value = bytes.fromhex(_expected("kv-row-v2-ints-float")["value_hex"])
    ev = Mounter(catalog_for(ts)).mount(put(enc.record_key(104, 9), value))
    assert ev.as_dict() == {"a": -1, "b": 300, "c": -1.5}
