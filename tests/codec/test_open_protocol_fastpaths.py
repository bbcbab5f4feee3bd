"""The Open Protocol encoder's fast paths give the bytes of the slow paths they stand in for.

Covered: the per-value binary quoter's ASCII shortcut, the length-prefix framing (and the block
decoder's unchecked walk of it against the checked one, on damaged frames too), the columnar
base64/Go-quote/float texts (against the per-row encoder, over generated values), and the
inlined `append_rendered` batching (against `append_row`, over batch limits and compression).
"""

from __future__ import annotations

import math
import random
import struct
from itertools import chain
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec.gojson import go_quote, go_quote_json, quote_jsoniter, quote_std
from changefeed.codec.open_protocol.encoder import _framed
from changefeed.codec.open_protocol.framing import frame_lists, split_frames
from changefeed.errors import MessageTooLargeError
from changefeed.model import Column, Op, TypeCode
from tests.codec.helpers import BIN, UTF8
from tests.codec.test_open_protocol_columns import _check_generated, _rows, _table, assert_identical, encode_both, opts

_SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bytes that stress each branch: printable ASCII (the shortcut), the bytes Go or JSON escape,
# invalid and valid UTF-8 (printable and not), and anything at all.
_SPECIAL = b"\"\\<>&'\x00\x07\x08\x0b\x0c\x1f\x7f\x80\xff\xc2\xa0\xe2\x80\xa8\xf0\x9f\x98\x80"
_ASCII = st.binary(max_size=30).map(lambda b: bytes(0x20 + c % 0x5F for c in b))
_MIXED = st.lists(
    st.one_of(_ASCII, st.sampled_from([_SPECIAL[i : i + 1] for i in range(len(_SPECIAL))]), st.binary(max_size=6)),
    max_size=8,
).map(b"".join)
_TEXT = st.text(max_size=20)


@_SETTINGS
@given(st.one_of(_ASCII, _MIXED, st.binary(max_size=40)))
def test_go_quote_json_is_the_json_text_of_go_quote(data: bytes) -> None:
    for json_quote in (quote_jsoniter, quote_std):
        assert go_quote_json(json_quote)(data) == json_quote(go_quote(data))


@_SETTINGS
@given(st.lists(st.binary(max_size=300), max_size=40), st.binary(max_size=8))
def test_framing_is_length_prefixed_parts(parts: list[bytes], head: bytes) -> None:
    want = head + b"".join(chain.from_iterable((struct.pack(">Q", len(p)), p) for p in parts))
    assert _framed(parts, head) == want


def _walk(walker: Any, key: bytes | None, value: bytes | None) -> Any:
    try:
        return walker(key, value)
    except ValueError as e:
        return str(e)


_PREFIX = st.one_of(st.integers(0, 40), st.integers(0, (1 << 64) - 1)).map(lambda n: struct.pack(">Q", n))


@_SETTINGS
@given(
    st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=30)), max_size=12),
    st.sampled_from(["intact", "cut key", "cut value", "prefix", "header", "none"]),
    st.data(),
)
def test_the_unchecked_walk_splits_as_the_checked_one(pairs: list[tuple[bytes, bytes]], damage: str, data: Any) -> None:
    key = _framed([k for k, _ in pairs], struct.pack(">Q", 1))
    value: bytes | None = _framed([v for _, v in pairs], b"")
    if damage == "cut key":
        key = key[: data.draw(st.integers(0, len(key)))]
    elif damage == "cut value":
        assert value is not None
        value = value[: data.draw(st.integers(0, len(value)))]
    elif damage == "prefix" and pairs:  # one length prefix replaced, possibly beyond any slice index
        which = data.draw(st.sampled_from(["key", "value"]))
        framed = bytearray(key if which == "key" else value or b"")
        at = 8 if which == "key" else 0
        framed[at : at + 8] = data.draw(_PREFIX)
        key, value = (bytes(framed), value) if which == "key" else (key, bytes(framed))
    elif damage == "header":
        key = struct.pack(">Q", data.draw(st.integers(0, 3))) + key[8:]
    elif damage == "none":
        value = None
    want = _walk(split_frames, key, value)
    got = _walk(frame_lists, key, value)
    if isinstance(want, str):
        assert got == want  # the same error, naming the same event
    else:
        assert got == ([k for k, _ in want], [v for _, v in want])


@pytest.mark.parametrize("length", [41, (1 << 63) - 9, (1 << 63) - 1, (1 << 64) - 1])
@pytest.mark.parametrize("which", ["key", "value"])
def test_a_length_beyond_any_index_is_the_checked_walks_error(length: int, which: str) -> None:
    parts = [b"a" * 10, b"b" * 10, b"c" * 10]
    key, value = _framed(parts, struct.pack(">Q", 1)), _framed(parts, b"")
    if which == "key":
        key = key[:8] + struct.pack(">Q", length) + key[16:]
    else:
        value = struct.pack(">Q", length) + value[8:]
    want = _walk(split_frames, key, value)
    assert isinstance(want, str)  # a truncated prefix or an overrun, named by event
    assert _walk(frame_lists, key, value) == want


def _with_nulls(draw: st.DrawFn, values: list[Any]) -> list[Any]:
    mask = draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    return [None if null else v for v, null in zip(values, mask, strict=True)]


@st.composite
def _string_columns(draw: st.DrawFn) -> tuple[list[pa.DataType], list[list[Any]]]:
    n = draw(st.integers(3, 24))
    binary = draw(st.lists(st.one_of(_ASCII, _MIXED, st.binary(max_size=30)), min_size=n, max_size=n))
    ascii_only = draw(st.lists(_ASCII, min_size=n, max_size=n))
    texts = draw(st.lists(_TEXT, min_size=n, max_size=n))
    blobs = draw(st.lists(st.binary(max_size=20), min_size=n, max_size=n))
    columns = [
        _with_nulls(draw, binary),
        ascii_only,  # no NULL, nothing to escape: the column-wide shortcut
        _with_nulls(draw, texts),  # TEXT: base64 of the UTF-8 bytes
        _with_nulls(draw, blobs),
        blobs,
        _with_nulls(draw, texts),  # VARCHAR: JSON-escaped
    ]
    return [pa.binary(), pa.binary(), pa.string(), pa.binary(), pa.binary(), pa.string()], columns


@_SETTINGS
@given(_string_columns(), st.integers(0, 1000))
def test_columnar_strings_match_the_per_row_encoder(
    columns: tuple[list[pa.DataType], list[list[Any]]], seed: int
) -> None:
    types, values = columns
    ts = _table(
        Column("vb", TypeCode.VARCHAR, **BIN),
        Column("asc", TypeCode.VARCHAR, **BIN),
        Column("tx", TypeCode.BLOB, **UTF8),
        Column("bl", TypeCode.BLOB, **BIN),
        Column("bl2", TypeCode.MEDIUMBLOB, **BIN),
        Column("vc", TypeCode.VARCHAR, **UTF8),
    )
    _check_generated(ts, types, values, seed)


def _float32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0] if math.isfinite(v) and abs(v) < 3.4e38 else 0.5


_DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-7, 9.99e-7, 1e-6, 1e20, 1e21, 1e22, 5e-324, 0.0, -0.0, 123.5e-9]),
    st.integers(-30, 30).map(lambda e: 1.25 * 10.0**e),
)


@_SETTINGS
@given(st.lists(_DOUBLES, min_size=3, max_size=30), st.integers(0, 1000), st.data())
def test_columnar_floats_match_the_per_row_encoder(doubles: list[float], seed: int, data: st.DataObject) -> None:
    ts = _table(Column("f", TypeCode.FLOAT), Column("d", TypeCode.DOUBLE), Column("dn", TypeCode.DOUBLE))
    values = [[_float32(v) for v in doubles], doubles, _with_nulls(data.draw, doubles[::-1])]
    _check_generated(ts, [pa.float32(), pa.float64(), pa.float64()], values, seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 5),
    st.integers(200, 3000),
    st.sampled_from(["none", "lz4", "snappy"]),
    st.sampled_from(["none", "handle-key-only"]),
    st.integers(0, 1000),
)
def test_append_rendered_batches_as_append_row(
    max_batch_size: int, max_message_bytes: int, compression: str, large: str, seed: int
) -> None:
    """`append_rendered`'s inlined batching opens messages where `append_row`'s does (`encode_both`)."""
    rng = random.Random(seed)
    ts = _table(Column("s", TypeCode.VARCHAR, **UTF8), Column("b", TypeCode.VARCHAR, **BIN))
    n = 30
    images = [(i, "x" * rng.randrange(0, 120), rng.randbytes(rng.randrange(0, 40))) for i in range(n)]
    ops = [rng.choice([Op.INSERT, Op.UPDATE, Op.DELETE]) for _ in range(n)]
    pair = _rows(ts, [pa.int64(), pa.string(), pa.binary()], images, ops)
    options = opts(
        max_batch_size=max_batch_size,
        max_message_bytes=max_message_bytes,
        large_message_handle_compression=compression,
        large_message_handle_option=large,
    )
    try:
        want, got, _ = encode_both(options, [pair])
    except MessageTooLargeError:  # a row too large even as a reference: the per-row path raises first
        return
    assert_identical(want, got)
