"""Corrupt keys and values: a CaptureError naming the record, never a wrong row or a crash."""

from __future__ import annotations

import struct
from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.capture.mounter import KVRecord, Mounter
from changefeed.errors import CaptureError
from changefeed.model import Column, Index, RowChange, TypeCode

from . import tidb_encoder as enc
from .util import TS, catalog_for, delete, put, schema, utf8

TABLE = replace(
    schema(
        [
            Column("id", TypeCode.BIGINT, nullable=False),
            utf8("name", length=20),
            Column("n", TypeCode.INT),
            Column("d", TypeCode.DECIMAL, length=10, decimal=2),
            Column("j", TypeCode.JSON),
            Column("t", TypeCode.DATETIME, decimal=0),
        ]
    ),
    indexes=(Index("PRIMARY", ("id",), primary=True),),
)
KEY = enc.record_key(104, 7)
GOOD_CELLS = {
    2: b"abc",
    3: enc.compact_int(300),
    4: bytes([10, 2]) + enc.decimal_bin(Decimal("1.50"), 10, 2),
    5: bytes([enc.json_binary({"a": 2})[0]]) + enc.json_binary({"a": 2})[1],
    6: enc.compact_uint(enc.pack_time(2020, 1, 2, 3, 4, 5)),
}
GOOD_V2 = enc.row_v2(GOOD_CELLS)
GOOD_V1 = enc.row_v1(
    [
        (2, enc.datum_v1(TABLE.columns[1], "abc")),
        (3, enc.datum_v1(TABLE.columns[2], 300)),
    ]
)


@pytest.fixture(scope="module")
def mounter() -> Mounter:
    return Mounter(catalog_for(TABLE))


def _fails(mounter: Mounter, record: KVRecord, match: str) -> CaptureError:
    with pytest.raises(CaptureError, match=match) as info:
        mounter.mount(record, "records.jsonl:3")
    err = info.value
    assert err.where is not None and err.where.startswith("records.jsonl:3 key=")
    assert record.key.hex() in err.where
    return err


def test_good_values_decode(mounter: Mounter) -> None:
    ev = mounter.mount(put(KEY, GOOD_V2))
    assert ev.as_dict() == {
        "id": 7,
        "name": "abc",
        "n": 300,
        "d": Decimal("1.50"),
        "j": '{"a": 2}',
        "t": "2020-01-02 03:04:05",
    }
    assert mounter.mount(put(KEY, GOOD_V1)).as_dict() == {
        "id": 7,
        "name": "abc",
        "n": 300,
        "d": None,
        "j": None,
        "t": None,
    }


@pytest.mark.parametrize("cut", [1, 3, 6, 10, 15, len(GOOD_V2) - 1])
def test_truncated_v2(mounter: Mounter, cut: int) -> None:
    _fails(mounter, put(KEY, GOOD_V2[:cut]), "truncated|past|compact|decimal|JSON|bytes|packed")


@pytest.mark.parametrize("cut", [1, 2, 4, len(GOOD_V1) - 1])
def test_truncated_v1(mounter: Mounter, cut: int) -> None:
    _fails(mounter, put(KEY, GOOD_V1[:cut]), "truncated|no value|compact")


@pytest.mark.parametrize("key", [KEY[:15], KEY[:11], KEY + b"\x00"])
def test_bad_record_key(mounter: Mounter, key: bytes) -> None:
    _fails(mounter, put(key, GOOD_V2), "truncated|record key|handle")


def test_wrong_version_byte(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, b"\x81" + GOOD_V2[1:]), "unknown row format")


def test_offset_out_of_range(mounter: Mounter) -> None:
    value = bytearray(GOOD_V2)
    n = 5  # not-null columns
    last = 6 + n + 2 * (n - 1)
    struct.pack_into("<H", value, last, 0xFFF0)
    _fails(mounter, put(KEY, bytes(value)), "past the value")


def test_offsets_not_ascending(mounter: Mounter) -> None:
    value = bytearray(GOOD_V2)
    struct.pack_into("<H", value, 6 + 5 + 2, 1)  # second end offset 1 < first end offset 3
    _fails(mounter, put(KEY, bytes(value)), "not ascending")


def test_column_ids_not_ascending(mounter: Mounter) -> None:
    value = bytearray(GOOD_V2)
    value[6], value[7] = value[7], value[6]
    # column 3 (INT) now meets the 3-byte cell of column 2 first; either way the row is refused
    _fails(mounter, put(KEY, bytes(value)), "not ascending|compact int of 3 bytes")
    value = enc.row_v2({2: b"ab", 3: b"\x01"})
    value = value[:6] + bytes([3, 2]) + value[8:]  # ids 3, 2 with cells 2 and 1 bytes long
    _fails(mounter, put(KEY, value), "not ascending")


def test_column_id_not_in_schema(mounter: Mounter) -> None:
    value = enc.row_v2({**GOOD_CELLS, 200: b"x"})
    _fails(mounter, put(KEY, value), "column id 200 not in schema")
    v1 = enc.row_v1([(2, enc.datum_v1(TABLE.columns[1], "a")), (99, b"\x00")])
    _fails(mounter, put(KEY, v1), "column id 99 not in schema")


def test_dropped_column_id_is_ignored() -> None:
    # ids up to max_col_id belong to columns dropped since: TiDB's decoder skips them
    catalog = catalog_for(TABLE, extra={"max_col_id": 9})
    ev = Mounter(catalog).mount(put(KEY, enc.row_v2({**GOOD_CELLS, 9: b"gone"})))
    assert ev.as_dict()["name"] == "abc"


def test_trailing_bytes(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, GOOD_V2 + b"\x00"), "after its data")


def test_bad_datum_flag(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, enc.row_v1([(2, b"\x0b\x00")])), "bad datum flag 11")
    # a valid datum of the wrong kind for the column is refused too
    _fails(mounter, put(KEY, enc.row_v1([(3, b"\x02\x02a")])), "bad datum flag 2")
    _fails(mounter, put(KEY, b"\x03" + enc.cmp_int(2) + b"\x00"), "unknown row format")


def test_bad_json_type_code(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, enc.row_v2({5: b"\x02\x00"})), "bad JSON type code")
    # a value entry inside an object with a bad code
    code, body = enc.json_binary({"a": "x"})
    body = bytearray(body)
    body[8 + 6] = 0x66
    _fails(mounter, put(KEY, enc.row_v2({5: bytes([code]) + bytes(body)})), "bad JSON type code")


def test_json_offsets_outside_container(mounter: Mounter) -> None:
    code, body = enc.json_binary([1, 2])
    body = bytearray(body)
    struct.pack_into("<I", body, 8 + 1, 0x7FFF)
    _fails(mounter, put(KEY, enc.row_v2({5: bytes([code]) + bytes(body)})), "outside")
    _fails(mounter, put(KEY, enc.row_v2({5: bytes([code]) + bytes(body[:-2])})), "truncated|outside|is .* bytes")


def test_bad_compact_int_length(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, enc.row_v2({3: b"\x01\x02\x03"})), "compact int of 3 bytes")


def test_bad_decimal(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, enc.row_v2({4: bytes([10, 2]) + b"\xff" * 5})), "bad binary decimal")
    _fails(mounter, put(KEY, enc.row_v2({4: bytes([10, 40]) + b"\x80" * 5})), "precision/frac")
    _fails(mounter, put(KEY, enc.row_v2({4: GOOD_CELLS[4] + b"\x00"})), "stray")


def test_bad_packed_time(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, enc.row_v2({6: enc.compact_uint(enc.pack_time(2020, 1, 1, 24))})), "impossible")


def test_invalid_utf8(mounter: Mounter) -> None:
    _fails(mounter, put(KEY, enc.row_v2({2: b"\xff\xfe"})), "malformed record: 'utf-8' codec")


def test_checksum_trailer() -> None:
    m = Mounter(catalog_for(TABLE), verify_checksum=True)
    for version in (1, 2):
        for extra in (False, True):
            good = enc.row_v2(GOOD_CELLS, checksum=(version, KEY), extra=extra)
            assert m.mount(put(KEY, good)).as_dict()["name"] == "abc"
            bad = bytearray(good)
            bad[-4 if not extra else -8] ^= 1  # flip a bit of the CRC
            _fails(m, put(KEY, bytes(bad)), "checksum mismatch")
    good = enc.row_v2(GOOD_CELLS, checksum=(1, KEY))
    _fails(m, put(KEY, good[:-2]), "checksum trailer")
    _fails(m, put(KEY, good[:-5]), "has none")
    _fails(m, put(KEY, good[:-5] + b"\x05" + good[-4:]), "checksum version 5")
    # not verifying: parsed, not checked
    assert Mounter(catalog_for(TABLE)).mount(put(KEY, bytes(bad))) is not None


def test_unknown_table_and_unknown_version(mounter: Mounter) -> None:
    _fails(mounter, put(enc.record_key(999, 1), GOOD_V2), "physical table 999 is not in the catalog")
    _fails(mounter, put(KEY, GOOD_V2, commit_ts=1), "no schema of physical table 104")
    skipping = Mounter(catalog_for(TABLE), skip_unknown_tables=True)
    assert skipping.mount(put(enc.record_key(999, 1), GOOD_V2)) is None
    assert skipping.skipped["unknown_table"] == 1


def test_common_handle_key_mismatch() -> None:
    ts = replace(schema([utf8("a", nullable=False), utf8("b")]), indexes=(Index("PRIMARY", ("a",), primary=True),))
    m = Mounter(catalog_for(ts, common_handle=True))
    _fails(m, put(enc.record_key(104, 1), enc.row_v2({1: b"x"})), "int handle key for common-handle table")
    _fails(m, delete(enc.record_key(104, enc.key_bytes(b"a") + enc.key_int(1))), "2 datums")
    _fails(m, delete(enc.record_key(104, b"\x01abcdefgh\x00\x00")), "memcomparable bytes marker")
    _fails(mounter_for_int(), put(enc.record_key(104, enc.key_int(1)), GOOD_V2), "has int handles")


def mounter_for_int() -> Mounter:
    return Mounter(catalog_for(TABLE))


def test_skipped_keys(mounter: Mounter) -> None:
    index = enc.index_key(104, 1, enc.key_bytes(b"abc") + enc.key_int(7))
    assert mounter.mount(put(index, b"\x00")) is None
    assert mounter.mount(put(b"mDDLJobList", b"x")) is None
    assert mounter.mount(put(b"zzz", b"x")) is None
    assert mounter.mount(put(KEY, b"")) is None  # put without value: warned and skipped
    assert mounter.skipped["index"] >= 1 and mounter.skipped["meta"] >= 1 and mounter.skipped["other"] >= 1


@settings(max_examples=300, deadline=None)
@given(
    data=st.sampled_from([GOOD_V2, GOOD_V1]),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=3),
    cut=st.integers(0, 200),
)
def test_fuzzed_values_never_crash(data: bytes, edits: list[tuple[int, int]], cut: int) -> None:
    """Any mutation gives a row or a CaptureError with the record's place, nothing else."""
    value = bytearray(data)
    for pos, byte in edits:
        if pos < len(value):
            value[pos] = byte
    value = value[: max(cut, 1)]
    m = Mounter(catalog_for(TABLE))
    try:
        ev = m.mount(put(KEY, bytes(value)), "fuzz")
    except CaptureError as exc:
        assert exc.where and exc.where.startswith("fuzz key=")
    else:
        assert ev is None or isinstance(ev, RowChange)
        if isinstance(ev, RowChange):
            assert ev.new[0] == 7 and len(ev.new) == len(TABLE.columns)


def test_resolved_marker(mounter: Mounter) -> None:
    ev = mounter.mount(KVRecord("resolved", commit_ts=TS))
    assert ev.kind == "resolved" and ev.commit_ts == TS
