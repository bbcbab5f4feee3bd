"""Round trips through the test encoder: every column type and edge value, row v2 and v1."""

from __future__ import annotations

import struct
from dataclasses import replace
from datetime import timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.capture.mounter import Mounter
from changefeed.errors import CaptureError
from changefeed.model import ABSENT, Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.jsonl import EventReader, dumps_event
from tests.strategies import columns, values

from . import tidb_encoder as enc
from .util import TS, catalog_for, delete, put, schema, utf8

_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same(col: Column, got: Any, want: Any) -> bool:
    if col.type_code is TypeCode.DECIMAL and want is not None:
        return got == want and got.as_tuple().exponent == -(col.decimal or 0)
    return type(got) is type(want) and got == want


def _check_image(ts: TableSchema, got: tuple[Any, ...] | None, want: tuple[Any, ...] | None) -> None:
    assert (got is None) == (want is None)
    if want is None:
        return
    for col, g, w in zip(ts.columns, got, want, strict=True):
        assert _same(col, g, w), (col, g, w)


def _records(change: RowChange, fmt: str, table_id: int, tz: Any = None):
    ts = change.table_schema
    handle = change.image[0]
    key = enc.record_key(table_id, handle)
    new = enc.encode_image(ts, change.new, fmt, skip=[0], tz=tz) if change.new is not None else None
    old = enc.encode_image(ts, change.old, fmt, skip=[0], tz=tz) if change.old is not None else None
    if change.op is Op.DELETE:
        return delete(key, old)
    return put(key, new, old)


_COLUMN = columns("c")  # built once: tests/strategies.tables() rebuilds it per column, which is slow
_ID = Column("id", TypeCode.BIGINT, nullable=False)
_ID_VALUES = values(_ID)


@st.composite
def _changes(draw: st.DrawFn) -> RowChange:
    """A table with a BIGINT PK (the int handle) and up to 10 columns of any type, and a change."""
    cols = [_ID] + [replace(draw(_COLUMN), name=f"c{i}") for i in range(draw(st.integers(1, 10)))]
    ts = TableSchema(
        "test",
        "t",
        tuple(replace(c, column_id=i + 1) for i, c in enumerate(cols)),
        (Index("PRIMARY", ("id",), primary=True),),
        table_id=draw(st.integers(1, 1 << 40)),
    )
    op = draw(st.sampled_from(list(Op)))
    handle = draw(_ID_VALUES)

    def image() -> tuple[Any, ...]:
        return (handle, *(draw(values(c)) for c in ts.columns[1:]))

    return RowChange(
        op=op,
        table_schema=ts,
        commit_ts=TS,
        new=image() if op is not Op.DELETE else None,
        old=image() if op is not Op.INSERT else None,
    )


@_SETTINGS
@given(change=_changes(), fmt=st.sampled_from(["v2", "v1"]))
def test_round_trip_every_type(change: RowChange, fmt: str) -> None:
    ts = change.table_schema
    mounter = Mounter(catalog_for(ts, table_id=ts.table_id))
    ev = mounter.mount(_records(change, fmt, ts.table_id))
    assert ev.op is change.op
    assert ev.table_schema.columns == ts.columns
    assert ev.row_id == change.image[0]
    _check_image(ts, ev.new, change.new)
    _check_image(ts, ev.old, change.old)
    # the JSONL interchange form carries it losslessly
    back = EventReader().parse(dumps_event(ev))
    assert back.new == ev.new and back.old == ev.old


_OFFSET_TZ = timezone(timedelta(hours=8))


@_SETTINGS
@given(change=_changes(), fmt=st.sampled_from(["v2", "v1"]))
def test_round_trip_timestamp_time_zone(change: RowChange, fmt: str) -> None:
    ts = change.table_schema
    mounter = Mounter(catalog_for(ts, table_id=ts.table_id), time_zone="+08:00")
    ev = mounter.mount(_records(change, fmt, ts.table_id, tz=_OFFSET_TZ))
    _check_image(ts, ev.new, change.new)
    _check_image(ts, ev.old, change.old)


def test_timestamp_rendered_in_iana_zone_zero_stays_zero() -> None:
    ts = schema([Column("id", TypeCode.INT, nullable=False), Column("t", TypeCode.TIMESTAMP, decimal=3)])
    ts = replace(ts, indexes=(Index("PRIMARY", ("id",), primary=True),))
    value = enc.row_v2({2: enc.compact_uint(enc.pack_time(2011, 11, 10, 23, 30, 0, 123000))})
    m = Mounter(catalog_for(ts), time_zone="Asia/Shanghai")
    assert m.mount(put(enc.record_key(104, 1), value)).as_dict()["t"] == "2011-11-11 07:30:00.123"
    zero = enc.row_v2({2: enc.compact_uint(0)})
    assert m.mount(put(enc.record_key(104, 1), zero)).as_dict()["t"] == "0000-00-00 00:00:00.000"


def test_unsigned_bigint_handle() -> None:
    ts = schema([Column("id", TypeCode.BIGINT, unsigned=True, nullable=False), utf8("v")])
    ts = replace(ts, indexes=(Index("PRIMARY", ("id",), primary=True),))
    m = Mounter(catalog_for(ts))
    # TiDB stores uint64 handles as the int64 bit pattern: 2**64-1 is handle -1
    ev = m.mount(put(enc.record_key(104, -1), enc.row_v2({2: b"x"})))
    assert ev.as_dict() == {"id": 2**64 - 1, "v": "x"}
    assert ev.row_id == -1


def _common_table(pk_first: Column) -> TableSchema:
    cols = [pk_first, Column("b", TypeCode.INT, nullable=False), utf8("c")]
    return replace(schema(cols), indexes=(Index("PRIMARY", ("a", "b"), primary=True),))


@pytest.mark.parametrize("fmt", ["v2", "v1"])
def test_common_handle_row_from_value(fmt: str) -> None:
    ts = _common_table(utf8("a", length=20, nullable=False))
    m = Mounter(catalog_for(ts, common_handle=True))
    # the key holds a collation key (trailing spaces trimmed); the value holds the real string
    key = enc.record_key(104, enc.key_bytes(b"Ab") + enc.key_int(-7))
    image = ("Ab  ", -7, "hello")
    ev = m.mount(put(key, enc.encode_image(ts, image, fmt)))
    assert ev.new == image
    assert ev.row_id is None


def test_common_handle_fills_binary_pk_from_key() -> None:
    ts = _common_table(Column("a", TypeCode.VARCHAR, length=20, nullable=False))  # VARBINARY
    m = Mounter(catalog_for(ts, common_handle=True))
    key = enc.record_key(104, enc.key_bytes(b"\x00\xffk") + enc.key_int(42))
    ev = m.mount(put(key, enc.row_v2({3: b"v"})))
    assert ev.new == (b"\x00\xffk", 42, "v")
    gone = m.mount(delete(key))
    assert gone.op is Op.DELETE and gone.old == (b"\x00\xffk", 42, ABSENT)


def test_common_handle_collation_key_cannot_fill() -> None:
    ts = _common_table(utf8("a", length=20, nullable=False))
    m = Mounter(catalog_for(ts, common_handle=True))
    key = enc.record_key(104, enc.key_bytes(b"ab") + enc.key_int(1))
    with pytest.raises(CaptureError, match="cannot be restored from the key"):
        m.mount(delete(key))


def test_common_handle_other_key_types() -> None:
    cols = [
        Column("d", TypeCode.DECIMAL, length=10, decimal=2, nullable=False),
        Column("t", TypeCode.DATETIME, decimal=0, nullable=False),
        Column("u", TypeCode.TIME, decimal=1, nullable=False),
        Column("f", TypeCode.DOUBLE, nullable=False),
        Column("n", TypeCode.INT, unsigned=True, nullable=False),
    ]
    ts = replace(schema(cols), indexes=(Index("PRIMARY", ("d", "t", "u", "f", "n"), primary=True),))
    handle = (
        enc.key_decimal(Decimal("-12.50"), 10, 2)
        + enc.key_uint(enc.pack_time(2020, 2, 29, 1, 2, 3))
        + enc.key_duration(-(3600 * 10**9 + 5 * 10**8))
        + enc.key_float(-0.25)
        + enc.key_uint(4000000000)
    )
    ev = Mounter(catalog_for(ts, common_handle=True)).mount(delete(enc.record_key(104, handle)))
    assert ev.old == (Decimal("-12.50"), "2020-02-29 01:02:03", "-01:00:00.5", -0.25, 4000000000)


def test_delete_without_old_value_int_handle_gives_key_columns_only() -> None:
    ts = schema([Column("id", TypeCode.INT, nullable=False), utf8("v"), Column("n", TypeCode.INT)])
    ts = replace(ts, indexes=(Index("PRIMARY", ("id",), primary=True),))
    ev = Mounter(catalog_for(ts)).mount(delete(enc.record_key(104, 12)))
    assert ev.op is Op.DELETE
    assert ev.old == (12, ABSENT, ABSENT)
    assert ev.as_dict(old=True) == {"id": 12}


def test_update_and_delete_with_old_value() -> None:
    ts = schema([Column("id", TypeCode.INT, nullable=False), utf8("v")])
    ts = replace(ts, indexes=(Index("PRIMARY", ("id",), primary=True),))
    m = Mounter(catalog_for(ts))
    key = enc.record_key(104, 3)
    upd = m.mount(put(key, enc.row_v2({2: b"new"}), enc.row_v2({2: b"old"})))
    assert upd.op is Op.UPDATE and upd.new == (3, "new") and upd.old == (3, "old")
    dele = m.mount(delete(key, enc.row_v2({2: None})))
    assert dele.op is Op.DELETE and dele.old == (3, None) and dele.new is None


def test_json_values() -> None:
    ts = schema([Column("j", TypeCode.JSON)])
    m = Mounter(catalog_for(ts))
    cases = [
        ({"b": [1, 2.5, "x"], "a": None}, '{"b": [1, 2.5, "x"], "a": null}'),
        ([True, False, {}, []], "[true, false, {}, []]"),
        (3.0, "3.0"),
        (-0.0, "-0.0"),
        (1e15, "1e15"),
        (1.5e-16, "1.5e-16"),
        (123456789012345.6, "123456789012345.6"),
        (1e-15, "0.000000000000001"),
        (enc.JUint(2**64 - 1), "18446744073709551615"),
        (-(2**63), "-9223372036854775808"),
        ('a"b\\c\n\t\x01\x08\x0c<>&\u2028é😀', '"a\\"b\\\\c\\n\\t\\u0001\\b\\f<>&\\u2028é😀"'),
        (enc.JTime(0x0E, enc.pack_time(2020, 1, 2)), '"2020-01-02"'),
        (enc.JTime(0x0F, enc.pack_time(2020, 1, 2, 3, 4, 5, 60)), '"2020-01-02 03:04:05.000060"'),
        (enc.JDuration(-(3 * 3600 * 10**9 + 1000), 2), '"-03:00:00.000001"'),
        (enc.JOpaque(253, b"\x01\x02"), '"base64:type253:AQI="'),
    ]
    for obj, text in cases:
        code, body = enc.json_binary(obj)
        ev = m.mount(put(enc.record_key(104, 1), enc.row_v2({1: bytes([code]) + body})))
        assert ev.as_dict()["j"] == text, obj


def test_invalid_utf8_in_json_string_becomes_replacement_per_byte() -> None:
    ts = schema([Column("j", TypeCode.JSON)])
    body = b"\x0c" + enc.uvarint(4) + b"a\xe2\x82b"
    ev = Mounter(catalog_for(ts)).mount(put(enc.record_key(104, 1), enc.row_v2({1: body})))
    assert ev.as_dict()["j"] == '"a\ufffd\ufffdb"'


def test_vector_and_geometry() -> None:
    ts = schema([Column("v", TypeCode.VECTOR), Column("g", TypeCode.GEOMETRY)])
    vec = struct.pack("<I3f", 3, 1.0, 2.5, -0.1)
    ev = Mounter(catalog_for(ts)).mount(put(enc.record_key(104, 1), enc.row_v2({1: vec, 2: b"\x01\x02"})))
    assert ev.as_dict() == {"v": "[1,2.5,-0.1]", "g": b"\x01\x02"}


def test_float_inf_becomes_zero() -> None:
    ts = schema([Column("f", TypeCode.DOUBLE), Column("g", TypeCode.FLOAT)])
    ev = Mounter(catalog_for(ts)).mount(
        put(enc.record_key(104, 1), enc.row_v2({1: enc.cmp_float(float("-inf")), 2: enc.cmp_float(float("inf"))}))
    )
    assert ev.as_dict() == {"f": 0.0, "g": 0.0}


def test_keyspace_prefix_is_stripped() -> None:
    ts = schema([utf8("v")])
    key = enc.record_key(104, 8, keyspace=b"\x00\x00\x01")
    ev = Mounter(catalog_for(ts)).mount(put(key, enc.row_v2({1: b"k"})))
    assert ev.as_dict() == {"v": "k"} and ev.row_id == 8
