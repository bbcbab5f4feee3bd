"""Value decoders on hand-built bytes: DECIMAL, temporal types, binary JSON, bitmaps.

The temporal byte strings below were all found verbatim in a MariaDB 10.11 binlog holding the
value named in the test (tests/fixtures/binlog/full), so they are the server's encoding, not ours.
"""

from __future__ import annotations

import json
import struct
from datetime import UTC
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.capture.binlog.decoders import (
    bitmap_indexes,
    bits_set,
    date_text,
    datetime2_text,
    decimal_reader,
    decimal_size,
    decode_decimal,
    msb_bitmap_flags,
    old_datetime_text,
    old_time_text,
    packed_datetime_text,
    packed_time_text,
    time2_text,
    timestamp2_parts,
    timestamp_text,
)
from changefeed.capture.binlog.jsonb import JSONBinaryError, jsonb_to_text
from changefeed.model.values import decimal_text

# ------------------------------------------------------------------ DECIMAL

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def encode_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """A test-side ``decimal2bin``: base-10**9 big-endian words, leftovers first, top bit = positive."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int) and -exponent <= scale
    text = "".join(map(str, digits)) + "0" * (scale + exponent)
    text = text.rjust(scale + 1, "0")
    int_text, frac_text = (text[: len(text) - scale], text[len(text) - scale :]) if scale else (text, "")
    intg = precision - scale
    int_text = int_text.rjust(intg, "0")[-intg:] if intg else ""
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(int_text[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(int_text[i : i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac_text[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac_text[scale - scale % 9 :]).to_bytes(_DIG2BYTES[scale % 9], "big")
    out[0] |= 0x80
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


def test_decimal_mysql_manual_example() -> None:
    # MySQL's decimal.c comment: DECIMAL(14,4) 1234567890.1234 -> 81 0D FB 38 D2 04 D2, negative inverted.
    assert decimal_size(14, 4) == 7
    assert decode_decimal(bytes.fromhex("810DFB38D204D2"), 14, 4) == Decimal("1234567890.1234")
    assert decode_decimal(bytes.fromhex("7EF204C72DFB2D"), 14, 4) == Decimal("-1234567890.1234")


@pytest.mark.parametrize(
    ("text", "precision", "scale"),
    [
        ("12345678901234567890123456789012345.123456789012345678901234567890", 65, 30),
        ("-99999999999999999999999999999999999.999999999999999999999999999999", 65, 30),
        ("0.000000000000000000000000000000", 65, 30),
        ("-9999999999", 10, 0),
        ("999.99", 5, 2),
        ("-0.000000001", 18, 9),
        ("0", 1, 0),
        ("0.5", 1, 1),
    ],
)
def test_decimal_keeps_all_digits_and_scale(text: str, precision: int, scale: int) -> None:
    value = decode_decimal(encode_decimal(Decimal(text), precision, scale), precision, scale)
    assert decimal_text(value, scale) == text
    assert value.as_tuple().exponent == -scale


@st.composite
def decimals(draw: st.DrawFn) -> tuple[Decimal, int, int]:
    precision = draw(st.integers(1, 65))
    scale = draw(st.integers(0, min(precision, 30)))
    digits = draw(st.integers(0, 10**precision - 1))
    sign = draw(st.sampled_from(["", "-"])) if digits else ""
    text = str(digits).rjust(scale + 1, "0")
    text = text[: len(text) - scale] + ("." + text[len(text) - scale :] if scale else "")
    return Decimal(sign + text), precision, scale


@settings(max_examples=300, deadline=None)
@given(decimals())
def test_decimal_roundtrip(case: tuple[Decimal, int, int]) -> None:
    value, precision, scale = case
    data = encode_decimal(value, precision, scale)
    assert len(data) == decimal_size(precision, scale)
    decoded = decode_decimal(data, precision, scale)
    assert decoded == value
    fast = decimal_reader(precision, scale)(data)
    assert str(fast) == str(decoded) or (fast == decoded == 0 and fast.as_tuple().exponent == -scale)
    assert decimal_text(decoded, scale) == decimal_text(value, scale)


# ------------------------------------------------------------------ temporal


@pytest.mark.parametrize(
    ("hexbytes", "fsp", "text"),
    [
        ("7ffffee7", 2, "-00:00:01.25"),
        ("4b9105", 0, "-838:59:59"),
        ("4ba104f0bdc1", 6, "-837:59:59.999999"),
        ("80c000000a", 3, "12:00:00.001"),
        ("7ffffff6", 1, "-00:00:00.1"),
        ("800000", 0, "00:00:00"),
    ],
)
def test_time2(hexbytes: str, fsp: int, text: str) -> None:
    assert time2_text(bytes.fromhex(hexbytes), fsp) == text


@pytest.mark.parametrize(
    ("hexbytes", "fsp", "text"),
    [
        ("99a5bac8b81ed2", 3, "2020-02-29 12:34:56.789"),
        ("fef3ff7efb", 0, "9999-12-31 23:59:59"),
        ("8000000000", 0, "0000-00-00 00:00:00"),
        ("8cb2420000000001", 6, "1000-01-01 00:00:00.000001"),
    ],
)
def test_datetime2(hexbytes: str, fsp: int, text: str) -> None:
    assert datetime2_text(bytes.fromhex(hexbytes), fsp) == text


def test_timestamp2_and_time_zone() -> None:
    seconds, micro = timestamp2_parts(struct.pack(">I", 2147483647) + (999999).to_bytes(3, "big"), 6)
    assert (seconds, micro) == (2147483647, 999999)
    assert timestamp_text(seconds, micro, 6) == "2038-01-19 03:14:07.999999"
    assert timestamp_text(seconds, micro, 3, ZoneInfo("Asia/Shanghai")) == "2038-01-19 11:14:07.999"
    assert timestamp_text(0, 0, 2, UTC) == "0000-00-00 00:00:00.00"  # the zero timestamp stays zero
    assert timestamp2_parts(struct.pack(">I", 1) + b"\x32", 1) == (1, 500000)


def test_date_and_old_temporal_types() -> None:
    assert date_text(2024 << 9 | 2 << 5 | 29) == "2024-02-29"
    assert date_text(0) == "0000-00-00"
    assert old_time_text(-8385959) == "-838:59:59"
    assert old_time_text(123456) == "12:34:56"
    assert old_datetime_text(20200229123456) == "2020-02-29 12:34:56"


def test_packed_temporal_forms() -> None:
    hms = 12 << 12 | 34 << 6 | 56
    assert packed_time_text(-(hms << 24 | 500000), 6) == "-12:34:56.500000"
    ymd = ((2020 * 13 + 2) << 5) | 29
    assert packed_datetime_text((ymd << 17 | hms) << 24, 6) == "2020-02-29 12:34:56.000000"
    assert packed_datetime_text((ymd << 17) << 24, 0, date_only=True) == "2020-02-29"


# ------------------------------------------------------------------ bitmaps


def test_bitmaps() -> None:
    assert bits_set(b"\xff\x01") == 9
    assert bits_set(b"") == 0
    assert bitmap_indexes(b"\x05\x80", 16) == [0, 2, 15]
    assert bitmap_indexes(b"\xff", 3) == [0, 1, 2]
    assert msb_bitmap_flags(b"\xa0", 3) == [True, False, True]


# ------------------------------------------------------------------ binary JSON


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode_jsonb(value: object, large: bool = False) -> bytes:
    """A test-side MySQL binary JSON encoder written from json_binary.h (independent of the decoder)."""
    tp, payload = _encode_value(value, large)
    return bytes([tp]) + payload


def _encode_value(value: object, large: bool) -> tuple[int, bytes]:
    if value is None or isinstance(value, bool):
        return 0x04, bytes([{None: 0, True: 1, False: 2}[value]])  # type: ignore[index]
    if isinstance(value, int):
        if -(2**15) <= value < 2**15:
            return 0x05, struct.pack("<h", value)
        if -(2**63) <= value < 2**63:
            return 0x09, struct.pack("<q", value)
        return 0x0A, struct.pack("<Q", value)
    if isinstance(value, float):
        return 0x0B, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        return 0x0C, _varlen(len(raw)) + raw
    if isinstance(value, dict | list):
        return _encode_container(value, large)
    raise TypeError(value)


def _encode_container(value: dict | list, large: bool) -> tuple[int, bytes]:
    is_object = isinstance(value, dict)
    width, fmt = (4, "<I") if large else (2, "<H")
    items = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())) if is_object else None
    keys = [k.encode() for k, _ in items] if items is not None else []
    values = [v for _, v in items] if items is not None else list(value)  # type: ignore[arg-type]
    n = len(values)
    header = 2 * width + (n * (width + 2) if is_object else 0) + n * (1 + width)
    key_blob = b"".join(keys)
    offset = header + len(key_blob)
    entries = bytearray()
    blobs = bytearray()
    for v in values:
        tp, payload = _encode_value(v, large)
        inline = tp == 0x04 or (tp == 0x05 and len(payload) == 2)
        if inline:
            entries += bytes([tp]) + payload.ljust(width, b"\0")
        else:
            entries += bytes([tp]) + struct.pack(fmt, offset + len(blobs))
            blobs += payload
    key_entries = bytearray()
    koff = header
    for k in keys:
        key_entries += struct.pack(fmt, koff) + struct.pack("<H", len(k))
        koff += len(k)
    size = offset + len(blobs)
    body = struct.pack(fmt, n) + struct.pack(fmt, size) + key_entries + entries + key_blob + blobs
    return (0x01 if large else 0x00) if is_object else (0x03 if large else 0x02), bytes(body)


def test_jsonb_object_prints_like_mysql() -> None:
    data = encode_jsonb({"k": "v", "a": [1, 2]})
    # keys come out in MySQL's stored order (length, then bytes), with ", " and ": " separators
    assert jsonb_to_text(data) == '{"a": [1, 2], "k": "v"}'
    assert jsonb_to_text(encode_jsonb({"k": "v", "a": [1, 2]}, large=True)) == '{"a": [1, 2], "k": "v"}'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        ([], "[]"),
        ({}, "{}"),
        (1.5, "1.5"),
        (1e100, "1e100"),
        (-2.5e-7, "-2.5e-7"),
        (2**64 - 1, "18446744073709551615"),
        (-(2**63), "-9223372036854775808"),
        ('a"b\\c\n😀', '"a\\"b\\\\c\\n😀"'),
        ([None, False, [{"x": 1}]], '[null, false, [{"x": 1}]]'),
    ],
)
def test_jsonb_scalars_and_nesting(value: object, text: str) -> None:
    assert jsonb_to_text(encode_jsonb(value)) == text


def test_jsonb_opaque_decimal_and_datetime() -> None:
    dec = encode_decimal(Decimal("3.14"), 5, 2)
    payload = bytes([5, 2]) + dec
    assert jsonb_to_text(b"\x0f\xf6" + _varlen(len(payload)) + payload) == "3.14"
    ymd = ((2020 * 13 + 2) << 5) | 29
    packed = ((ymd << 17) | (1 << 12)) << 24
    assert jsonb_to_text(b"\x0f\x0c\x08" + struct.pack("<q", packed)) == '"2020-02-29 01:00:00.000000"'
    assert jsonb_to_text(b"\x0f\x0f\x02ab") == '"base64:type15:YWI="'


def test_jsonb_empty_is_null_and_garbage_is_an_error() -> None:
    assert jsonb_to_text(b"") == "null"
    with pytest.raises(JSONBinaryError):
        jsonb_to_text(b"\x00\x05\x00")
    with pytest.raises(JSONBinaryError):
        jsonb_to_text(b"\x42")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_jsonb_roundtrip(value: object, large: bool) -> None:
    assert json.loads(jsonb_to_text(encode_jsonb(value, large))) == value


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 6), st.integers(0, 2**40 - 1), st.integers(0, 2**32 - 1), st.integers(0, 999999))
def test_compiled_temporal_readers_match_reference(fsp: int, packed: int, seconds: int, micro: int) -> None:
    from changefeed.capture.binlog.rows import _datetime2_reader, _timestamp2_reader  # noqa: PLC0415

    fb = (0, 1, 1, 2, 2, 3, 3)[fsp]
    stored = micro // (1, 10000, 10000, 100, 100, 1, 1)[fsp] if fb else 0
    frac = stored.to_bytes(fb, "big") if fb else b""
    data = packed.to_bytes(5, "big") + frac
    out: list[str] = []
    assert _datetime2_reader(fsp)(data, 0, out) == len(data)
    assert out == [datetime2_text(data, fsp)]
    data = seconds.to_bytes(4, "big") + frac
    out = []
    _timestamp2_reader(fsp, UTC)(data, 0, out)
    _timestamp2_reader(fsp, ZoneInfo("Europe/Paris"))(data, 0, out)
    s, m = timestamp2_parts(data, fsp)
    assert out == [timestamp_text(s, m, fsp, UTC), timestamp_text(s, m, fsp, ZoneInfo("Europe/Paris"))]
