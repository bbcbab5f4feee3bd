"""The pieces every protocol shares: compression, claim-check storage, value text, plan cache."""

from __future__ import annotations

import math
from dataclasses import fields
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changefeed.codec.claimcheck import (
    ClaimCheckStore,
    file_name,
    storage_dir,
    unwrap_pair,
    unwrap_value,
    wrap_pair,
    wrap_value,
)
from changefeed.codec.compression import compression_codec
from changefeed.codec.values import decimal_renderer, float32_text, float64_text, float_g_text, int_range
from changefeed.errors import ConfigError
from changefeed.model import Column, Op, RowChange, TableSchema, TypeCode
from changefeed.model.events import trusted_row
from changefeed.model.gofloat import format_f, format_g, to_float32
from changefeed.model.schemacache import PlanCache
from changefeed.model.values import decimal_text


@pytest.mark.parametrize("name", ["snappy", "lz4"])
def test_compression_round_trip_and_refusals(name: str) -> None:
    codec = compression_codec(name)
    assert codec is not None
    compress, decompress = codec
    data = b"hello " * 1000
    assert decompress(compress(data)) == data
    with pytest.raises(ValueError, match=name):
        decompress(b"\x10garbage-not-compressed")
    assert compression_codec("none") is None
    with pytest.raises(ConfigError):
        compression_codec("zstd")


def test_snappy_refuses_absurd_or_missing_length() -> None:
    codec = compression_codec("snappy")
    assert codec is not None
    with pytest.raises(ValueError, match="claims"):
        codec[1](b"\xff\xff\xff\xff\x0f" + b"\x00" * 4)
    with pytest.raises(ValueError, match="length header"):
        codec[1](b"\xff" * 6)


def test_storage_dir_forms(tmp_path: Path) -> None:
    assert storage_dir(str(tmp_path)) == tmp_path
    assert storage_dir(tmp_path.as_uri()) == tmp_path
    assert storage_dir("file:///a%20b/c") == Path("/a b/c")
    for bad in ("", "s3://bucket/x", "file://host/x"):
        with pytest.raises(ConfigError):
            storage_dir(bad)


def test_store_locations_and_round_trip(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/"
    store = ClaimCheckStore(uri)
    loc = store.write("a.json", b"data")
    assert loc == f"file://{tmp_path}/a.json" and store.read(loc) == b"data"
    assert store.read("s3://elsewhere/a.json") == b"data"  # only the file name counts
    assert ClaimCheckStore("rel/dir", absolute_file_uri=True).location("x.json").startswith("file:///")
    assert ClaimCheckStore("rel/dir").location("x.json") == "rel/dir/x.json"
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(ValueError, match="names no file"):
        file_name("file:///a/..")


def test_wrappers() -> None:
    assert wrap_value(b"\x00v") == b'{"key":null,"value":"AHY="}'
    assert unwrap_value(wrap_value(b"v")) == b"v"
    assert unwrap_value(b"\x16raw", raw_allowed=True) == b"\x16raw"
    assert unwrap_value(b'{"type":"INSERT"}', raw_allowed=True) == b'{"type":"INSERT"}'
    for bad in (b"nope", b'{"key":null}', b'{"key":null,"value":"!"}'):
        with pytest.raises(ValueError, match="claim-check"):
            unwrap_value(bad)
    assert unwrap_pair(wrap_pair(b"k", b"v")) == (b"k", b"v")
    with pytest.raises(ValueError):
        unwrap_pair(b'{"key":1}')


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float_text_matches_the_reference(v: float) -> None:
    want = format_f(v) if math.isfinite(v) else "0"
    assert float64_text(v) == want
    try:
        f = to_float32(v)
    except OverflowError:
        return
    assert float32_text(f) == (format_f(f, float32=True) if math.isfinite(f) else "0")
    assert float_g_text(v) == (format_g(v) if math.isfinite(v) else "0")
    assert float_g_text(f, True) == (format_g(f, True) if math.isfinite(f) else "0")


@given(st.decimals(allow_nan=False, allow_infinity=False), st.sampled_from([None, 0, 2, 6]))
def test_decimal_renderer_matches_the_reference(v: Decimal, scale: int | None) -> None:
    try:
        want = decimal_text(v, scale)
    except ArithmeticError:
        return
    assert decimal_renderer(scale)(v) == want


def test_decimal_renderer_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        decimal_renderer(2)(1.5)  # type: ignore[arg-type]


def test_int_range() -> None:
    assert int_range(Column("a", TypeCode.TINYINT)) == (-128, 127)
    assert int_range(Column("a", TypeCode.BIGINT, unsigned=True)) == (0, (1 << 64) - 1)
    assert int_range(Column("a", TypeCode.YEAR)) == (0, (1 << 64) - 1)


def test_plan_cache_is_per_object() -> None:
    built: list[TableSchema] = []
    cache = PlanCache(lambda ts: built.append(ts) or len(built), limit=2)
    a = TableSchema("s", "a", (Column("x", TypeCode.INT),))
    b = TableSchema("s", "a", (Column("x", TypeCode.INT),))
    assert cache.get(a) == 1 and cache.get(a) == 1 and cache.get(b) == 2
    cache.get(TableSchema("s", "c", (Column("x", TypeCode.INT),)))  # over the limit: starts over
    assert len(cache) == 1


def test_trusted_row_equals_the_checked_constructor() -> None:
    ts = TableSchema("s", "t", (Column("x", TypeCode.INT), Column("y", TypeCode.INT)))
    checked = RowChange(Op.UPDATE, ts, 7, new=(1, 2), old=(1, 3), partition_id=9, row_id=4)
    fast = trusted_row(Op.UPDATE, ts, 7, (1, 2), (1, 3), 9, 4)
    assert fast == checked
    # Every field is set: a field added to RowChange must be added to trusted_row too.
    assert all(getattr(fast, f.name) == getattr(checked, f.name) for f in fields(RowChange))
