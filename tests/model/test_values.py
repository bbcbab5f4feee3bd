"""Value representation and TiCDC's canonical text for every type (spec §0.4, §0.5)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changefeed.model import Column, TypeCode, canonical_text, check_value
from changefeed.model.gofloat import format_f, format_g, format_json, to_float32
from changefeed.model.tso import CommitClock, compose_tso, tso_logical, tso_physical_ms
from changefeed.model.values import (
    ABSENT,
    decimal_text,
    enum_name,
    format_datetime,
    format_time,
    parse_text,
    set_names,
)

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}


@pytest.mark.parametrize(
    ("value", "float32", "f", "g", "json"),
    [
        (3.14, True, "3.14", "3.14", "3.14"),
        (2.0, False, "2", "2", "2"),
        (1e-7, False, "0.0000001", "1e-07", "1e-7"),
        (0.0000012, False, "0.0000012", "1.2e-06", "0.0000012"),
        (1e21, False, "1000000000000000000000", "1e+21", "1e+21"),
        (1000000.0, False, "1000000", "1e+06", "1000000"),
        (123456.0, False, "123456", "123456", "123456"),
        (1234567.0, False, "1234567", "1.234567e+06", "1234567"),
        (0.0001, False, "0.0001", "0.0001", "0.0001"),
        (0.00001, False, "0.00001", "1e-05", "0.00001"),
        (12345.678, False, "12345.678", "12345.678", "12345.678"),
        (-0.5, False, "-0.5", "-0.5", "-0.5"),
        (0.0, False, "0", "0", "0"),
        (3.4028234663852886e38, True, "340282350000000000000000000000000000000", "3.4028235e+38", "3.4028235e+38"),
    ],
)
def test_go_float_formats(value: float, float32: bool, f: str, g: str, json: str) -> None:
    v = to_float32(value) if float32 else value
    assert format_f(v, float32) == f
    assert format_g(v, float32) == g
    assert format_json(v, float32) == json


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_format_f_round_trips_float64(v: float) -> None:
    assert float(format_f(v)) == v


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_format_f_round_trips_float32(v: float) -> None:
    assert to_float32(float(format_f(v, True))) == v
    assert to_float32(float(format_g(v, True))) == v


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [
        (Column("i", TypeCode.BIGINT, unsigned=True), 18446744073709551615, "18446744073709551615"),
        (Column("i", TypeCode.TINYINT), -128, "-128"),
        (Column("y", TypeCode.YEAR), 0, "0"),
        (Column("f", TypeCode.FLOAT), to_float32(3.14), "3.14"),
        (Column("d", TypeCode.DOUBLE), 1e-7, "0.0000001"),
        (Column("d", TypeCode.DECIMAL, length=10, decimal=2), Decimal("1"), "1.00"),
        (Column("d", TypeCode.DECIMAL, length=14, decimal=7), Decimal("129012.1230000"), "129012.1230000"),
        (Column("d", TypeCode.DECIMAL, length=65, decimal=30), Decimal("-0." + "0" * 29 + "1"), "-0." + "0" * 29 + "1"),
        (Column("d", TypeCode.DECIMAL, length=10, decimal=0), Decimal("-0"), "0"),
        (Column("t", TypeCode.DATETIME, decimal=3), "2020-02-20 02:20:20.123", "2020-02-20 02:20:20.123"),
        (Column("t", TypeCode.TIME, decimal=1), "-838:59:59.0", "-838:59:59.0"),
        (Column("e", TypeCode.ENUM, elements=("a", "b"), **UTF8), 2, "2"),
        (Column("s", TypeCode.SET, elements=("a", "b", "c"), **UTF8), 5, "5"),
        (Column("b", TypeCode.BIT, length=16), 683, "683"),
        (Column("v", TypeCode.VARCHAR, **UTF8), "测试😀", "测试😀"),
        (Column("v", TypeCode.VARCHAR, charset="binary"), b"\x00\xff", "\x00\xff"),
        (Column("j", TypeCode.JSON), '{"key1": "value1"}', '{"key1": "value1"}'),
        (Column("s", TypeCode.SMALLINT, unsigned=True), 65535, "65535"),
        (Column("m", TypeCode.MEDIUMINT), -8388608, "-8388608"),
        (Column("i", TypeCode.INT, unsigned=True), 4294967295, "4294967295"),
        (Column("d", TypeCode.DATE), "0000-00-00", "0000-00-00"),
        (Column("ts", TypeCode.TIMESTAMP, decimal=6), "2011-11-10 11:11:11.999999", "2011-11-10 11:11:11.999999"),
        (Column("c", TypeCode.CHAR, **UTF8), "", ""),
        (Column("c", TypeCode.CHAR, charset="binary", length=4), b"ab\x00\x00", "ab\x00\x00"),
        (Column("t", TypeCode.BLOB, **UTF8), "long text ✓", "long text ✓"),
        (Column("g", TypeCode.GEOMETRY), b"\x00\x01", "\x00\x01"),
        (Column("v", TypeCode.VECTOR), "[1,2,3]", "[1,2,3]"),
    ],
)
def test_canonical_text(column: Column, value: object, text: str) -> None:
    assert canonical_text(column, value) == text
    assert parse_text(column, text) == value


def test_temporal_text_helpers() -> None:
    assert format_datetime(0, 0, 0, 0, 0, 0, 0, 0) == "0000-00-00 00:00:00"
    assert format_datetime(2011, 11, 10, 11, 11, 11, 999999, 6) == "2011-11-10 11:11:11.999999"
    assert format_datetime(2011, 11, 10, 11, 11, 11, 999999, 2) == "2011-11-10 11:11:11.99"
    assert format_time(True, 838, 59, 59, 0, 0) == "-838:59:59"
    assert format_time(False, 4, 0, 0, 500000, 1) == "04:00:00.5"


def test_decimal_text_pads_to_scale() -> None:
    assert decimal_text(Decimal("123.4"), 3) == "123.400"
    assert decimal_text(Decimal("17374.96"), 2) == "17374.96"
    assert decimal_text(Decimal("5"), 0) == "5"


def test_enum_and_set_names() -> None:
    col = Column("s", TypeCode.SET, elements=("a", "b", "c"), **UTF8)
    assert set_names(col, 0b101) == "a,c"
    assert set_names(col, 0) == ""
    with pytest.raises(ValueError, match="beyond the members"):
        set_names(col, 0b1000)
    en = Column("e", TypeCode.ENUM, elements=("x", "y"), **UTF8)
    assert enum_name(en, 2) == "y" and enum_name(en, 0) == ""
    with pytest.raises(ValueError, match="out of range"):
        enum_name(en, 3)


def test_check_value_rejects_wrong_representations() -> None:
    with pytest.raises(ValueError, match="out of range"):
        check_value(Column("t", TypeCode.TINYINT), 128)
    with pytest.raises(ValueError, match="out of range"):
        check_value(Column("t", TypeCode.BIGINT, unsigned=True), 1 << 64)
    with pytest.raises(TypeError, match="needs bytes"):
        check_value(Column("b", TypeCode.BLOB, charset="binary"), "text")
    with pytest.raises(TypeError, match="needs str"):
        check_value(Column("v", TypeCode.VARCHAR, **UTF8), b"raw")
    assert check_value(Column("f", TypeCode.FLOAT), 3.14) == to_float32(3.14)
    assert check_value(Column("v", TypeCode.VARCHAR, **UTF8), ABSENT) is ABSENT
    assert check_value(Column("v", TypeCode.VARCHAR, **UTF8), None) is None


def test_tso_shape() -> None:
    # Spec §0.1: 417318403368288260 has physical ms 1591943372224.
    assert tso_physical_ms(417318403368288260) == 1591943372224
    assert compose_tso(1591943372224, tso_logical(417318403368288260)) == 417318403368288260


def test_commit_clock_is_strictly_increasing_and_resumable() -> None:
    clock = CommitClock()
    a = clock.next(1_700_000_000_000)
    b = clock.next(1_700_000_000_000)  # same millisecond: logical + 1
    c = clock.next(1_699_999_999_000)  # clock went backwards: still increasing
    d = clock.next(1_700_000_001_000)
    assert a < b < c < d
    assert tso_physical_ms(a) == 1_700_000_000_000 and tso_logical(b) == 1
    assert d == compose_tso(1_700_000_001_000)
    resumed = CommitClock(last=b)
    assert resumed.next(1_699_999_999_000) == c


def test_decimal_text_keeps_65_digits() -> None:
    # Python's default context rounds at 28 digits; DECIMAL(65,30) must not.
    assert decimal_text(Decimal("1" * 35), 30) == "1" * 35 + "." + "0" * 30
