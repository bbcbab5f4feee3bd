"""Hostile input the decoders must refuse quickly, with bounded memory (issue 14 items 2, 3 and 9).

Claim-check locations are message text: no decoder may open a path a message names outside its
configured directory, a FIFO or a device, nor read an unbounded file, and a refusal must not say
whether something outside exists. Compressed values are bounded per message, DECIMAL text by
MySQL's precision, Simple's held DMLs in bytes. An Open Protocol message that is only the
version header holds zero events.
"""

from __future__ import annotations

import os
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from changefeed.codec import CodecOptions, Decoder, Message, make_decoder, make_encoder
from changefeed.codec.claimcheck import MAX_FILE_BYTES, ClaimCheckStore, read_limit
from changefeed.codec.compression import INFLATE_FACTOR, InflateLimitError, compression_codec, inflater
from changefeed.codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder
from changefeed.codec.options import DEFAULT_MAX_MESSAGE_BYTES
from changefeed.codec.simple import SimpleDecoder, SimpleEncoder
from changefeed.codec.values import MAX_DECIMAL_DIGITS, is_decimal_text, parse_decimal_text
from changefeed.errors import ChangefeedError, CodecError, UnknownSchemaError
from changefeed.model import Column, Op, RowChange, TypeCode
from tests.codec.helpers import UTF8, pk_table
from tests.codec.test_open_protocol import GOOD_KEY, GOOD_VALUE, frame
from tests.codec.test_open_protocol_blocks import assert_same

WHERE = "topic-h/3/77"
TS = 424242 << 18
TABLE = pk_table(Column("id", TypeCode.INT, nullable=False), Column("payload", TypeCode.VARCHAR, length=9000, **UTF8))
BIG = RowChange(Op.INSERT, TABLE, TS, new=(1, "x" * 5000))
DEC_TABLE = pk_table(
    Column("id", TypeCode.INT, nullable=False), Column("d", TypeCode.DECIMAL, length=10, decimal=2), table="dec"
)
V1 = struct.pack(">Q", 1)

# (protocol, extra options) of every decoder that follows claim-check references.
KINDS: dict[str, dict[str, Any]] = {
    "open-protocol": {"protocol": "open-protocol"},
    "canal-json": {"protocol": "canal-json", "enable_tidb_extension": True},
    "simple-json": {"protocol": "simple"},
    "simple-avro": {"protocol": "simple", "encoding_format": "avro"},
}
# Decoders without claim-check (TiCDC's Debezium encoder has no large-message fallback).
PLAIN_KINDS: dict[str, dict[str, Any]] = {"debezium": {"protocol": "debezium", "enable_tidb_extension": True}}
#: A Debezium message carries its schema (a 1000-character row is ~3.5 KB): its own size bound.
DEBEZIUM_LIMIT = 16 << 10


def options(kind: str, **kw: Any) -> CodecOptions:
    return CodecOptions(**{**KINDS, **PLAIN_KINDS}[kind], **kw)


def encode(kind: str, row: RowChange, **kw: Any) -> Message:
    (msg,) = make_encoder(options(kind, **kw)).encode([row])
    return msg


def decoder(kind: str, **kw: Any) -> Decoder:
    """A decoder that knows BIG's and DEC_TABLE's schemas (Simple needs a BOOTSTRAP first)."""
    dec = make_decoder(options(kind, **kw))
    if isinstance(dec, SimpleDecoder):
        method = dec.options.large_message_handle_compression
        enc = SimpleEncoder(options(kind, large_message_handle_compression=method))
        dec.decode(enc.encode_bootstrap(TABLE))
        dec.decode(enc.encode_bootstrap(DEC_TABLE))
    return dec


def refusal(dec: Decoder, msg: Message) -> CodecError:
    with pytest.raises(CodecError) as err:
        dec.decode(msg, WHERE)
    assert isinstance(err.value, ChangefeedError) and err.value.where == WHERE
    return err.value


# ---------------------------------------------------------------- item 2: claim-check locations


def claim_checked(kind: str, store: Path) -> tuple[Message, Path]:
    """BIG as a claim-check reference into ``store``, and the file it names."""
    msg = encode(
        kind, BIG, max_message_bytes=1000, large_message_handle_option="claim-check", claim_check_storage_uri=str(store)
    )
    (file,) = store.iterdir()
    return msg, file


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.timeout(60)
def test_claim_check_reads_only_regular_files_inside_the_directory(tmp_path: Path, kind: str) -> None:
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_bytes(b"secret")
    msg, file = claim_checked(kind, store)
    good = file.read_bytes()
    dec = decoder(kind, claim_check_storage_uri=str(store))

    def refused(make: Any) -> str:
        if file.is_dir() and not file.is_symlink():
            file.rmdir()
        else:
            file.unlink()
        make(file)
        text = refusal(dec, msg).message
        assert file.name in text and str(store) in text
        return text

    assert "not a regular file" in refused(os.mkfifo)  # no writer: opening must not block
    assert "not a regular file" in refused(os.mkdir)
    assert "outside" in refused(lambda f: f.symlink_to("/dev/zero"))
    # A symlink leaving the directory: the same text whether its target exists or not.
    present = refused(lambda f: f.symlink_to(outside / "secret.json"))
    assert "outside" in present and "secret" not in present
    assert refused(lambda f: f.symlink_to(outside / "missing.json")) == present
    # Over the bound: refused from the size, nothing read (a sparse file).
    big = refused(_sparse)
    assert f"over the {MAX_FILE_BYTES}-byte bound" in big
    # A symlink to a file inside the directory is followed.
    (store / "real.data").write_bytes(good)
    file.unlink()
    file.symlink_to(store / "real.data")
    (row,) = dec.decode(msg, WHERE)
    assert row.new == BIG.new


def _sparse(path: Path) -> None:
    """A file one byte over the default claim-check bound, holding no data blocks."""
    with path.open("wb") as f:
        f.truncate(read_limit(1000) + 1)


def _op_reference(ccl: str) -> Message:
    key = f'{{"ts":{TS},"scm":"test","tbl":"t","t":1,"ohk":false,"ccl":{_json(ccl)}}}'
    return frame((key, '{"u":{"id":{"t":3,"h":true,"f":11,"v":1}}}'))


def _json(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


HOSTILE_LOCATIONS = ["/dev/zero", "../../etc/passwd", "/etc/passwd", "file:///etc/shadow", "file:///dev/zero"]


@pytest.mark.parametrize("location", HOSTILE_LOCATIONS)
@pytest.mark.timeout(30)
def test_open_protocol_never_follows_a_location_by_itself(location: str) -> None:
    """Without claim-check-storage-uri a reference is refused before anything is opened."""
    text = refusal(OpenProtocolDecoder(CodecOptions(protocol="open-protocol")), _op_reference(location)).message
    assert "no claim-check-storage-uri is configured" in text
    # The text depends on the location's spelling only, not on what exists there.
    missing = location.replace("etc", "no-such-dir").replace("dev", "no-such-dir")
    other = refusal(OpenProtocolDecoder(CodecOptions(protocol="open-protocol")), _op_reference(missing)).message
    assert other.replace(missing, "L") == text.replace(location, "L")


@pytest.mark.parametrize("kind", ["open-protocol", "canal-json", "simple-json"])
@pytest.mark.parametrize("location", HOSTILE_LOCATIONS)
@pytest.mark.timeout(30)
def test_locations_name_only_a_file_of_the_directory(tmp_path: Path, kind: str, location: str) -> None:
    """Only the last path element counts (TiCDC's rule): ../../etc/passwd is <dir>/passwd."""
    store = tmp_path / "store"
    msg, file = claim_checked(kind, store)
    if kind == "open-protocol":
        hostile = _op_reference(location)
    else:
        assert msg.value is not None
        start = msg.value.index(str(store).encode())
        end = msg.value.index(file.name.encode()) + len(file.name)
        hostile = Message(msg.key, msg.value[:start] + location.encode() + msg.value[end:])
    for dec_kw in ({}, {"claim_check_storage_uri": str(store)}):
        text = refusal(decoder(kind, **dec_kw), hostile).message
        name = location.rsplit("/", 1)[-1]
        if dec_kw:
            assert f"cannot read claim-check file {name!r} from {store}: No such file or directory" in text
        else:
            assert "no claim-check-storage-uri" in text


def test_store_refuses_a_device_directly() -> None:
    with pytest.raises(ValueError, match="'zero' from /dev: not a regular file"):
        ClaimCheckStore("/dev").read("file:///anything/zero")
    with pytest.raises(ValueError, match="names no file"):
        ClaimCheckStore("/dev").read("x/..")


def test_store_read_is_bounded(tmp_path: Path) -> None:
    store = ClaimCheckStore(str(tmp_path), max_read_bytes=100)
    (tmp_path / "ok.json").write_bytes(b"a" * 100)
    assert store.read("ok.json") == b"a" * 100
    (tmp_path / "big.json").write_bytes(b"a" * 101)
    with pytest.raises(ValueError, match="101 bytes, over the 100-byte bound"):
        store.read("big.json")
    assert read_limit(DEFAULT_MAX_MESSAGE_BYTES) == MAX_FILE_BYTES == 64 << 20
    assert read_limit(100 << 20) == 400 << 20


# ---------------------------------------------------------------- item 3: DECIMAL text


def test_decimal_rule() -> None:
    widest = "9" * 35 + "." + "9" * 30  # DECIMAL(65,30)
    for text in ("0", "-0", "1.50", "-12345.6789", widest, "-" + widest, "0." + "1" * 30, "9" * 65):
        assert is_decimal_text(text), text
        assert parse_decimal_text(text) == Decimal(text)
    for text in ("1e999999999", "1E5", "NaN", "Infinity", "+1", "1.", ".5", " 1", "1_0", "١", "", "-", "9" * 66):
        assert not is_decimal_text(text), text
    with pytest.raises(ValueError, match="no exponent, at most 65 digits"):
        parse_decimal_text("1e999999999")
    assert MAX_DECIMAL_DIGITS == 65


def _with_decimal(kind: str, text: str) -> Message:
    """A DEC_TABLE insert whose DECIMAL value text is ``text`` (11 characters: Avro's length stays)."""
    msg = encode(kind, RowChange(Op.INSERT, DEC_TABLE, TS, new=(1, Decimal("12345678.90"))))
    assert len(text) == 11 and msg.value is not None and msg.value.count(b"12345678.90") == 1
    return Message(msg.key, msg.value.replace(b"12345678.90", text.encode()))


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("text", ["1e999999999", "1E+99999999", "-1e99999999"])
@pytest.mark.timeout(30)
def test_decimal_exponents_are_refused(kind: str, text: str) -> None:
    (row,) = decoder(kind).decode(_with_decimal(kind, "12345678.90"))
    assert row.new == (1, Decimal("12345678.90"))
    err = refusal(decoder(kind), _with_decimal(kind, text))
    assert text in err.message and "'d'" in err.message
    if kind == "open-protocol":
        assert_same([_with_decimal(kind, "12345678.90"), _with_decimal(kind, text)])


def test_open_protocol_decimal_digits_bound_in_both_decoders() -> None:
    row = '{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"d":{"t":246,"f":64,"v":"V"}}}'
    fine = frame((GOOD_KEY, row.replace("V", "9" * 65)))
    wide = frame((GOOD_KEY, row.replace("V", "9" * 66)))
    (ev,) = OpenProtocolDecoder(CodecOptions(protocol="open-protocol")).decode(fine)
    assert ev.new[1] == Decimal("9" * 65)
    with pytest.raises(CodecError, match="expected DECIMAL text"):
        OpenProtocolDecoder(CodecOptions(protocol="open-protocol")).decode(wide, WHERE)
    assert_same([fine, fine, wide])
    assert_same([fine, fine])


# ---------------------------------------------------------------- item 3: inflation per message


def _lz4(data: bytes) -> bytes:
    return pa.Codec("lz4").compress(data, asbytes=True)


def _row_value(n: int) -> bytes:
    return b'{"u":{"id":{"t":3,"h":true,"f":11,"v":1},"s":{"t":15,"f":64,"v":"' + b"a" * n + b'"}}}'


@pytest.mark.timeout(60)
def test_open_protocol_inflation_is_bounded_per_message() -> None:
    """Eight events of ~300 KB each, compressed to ~1 KB: the budget (16 x 64 KiB) runs out at event 4."""
    o = CodecOptions(protocol="open-protocol", max_message_bytes=64 << 10, large_message_handle_compression="lz4")
    value = _lz4(_row_value(300_000))
    msg = frame(*[(GOOD_KEY, value)] * 8)
    assert msg.value is not None and len(msg.value) < 64 << 10  # a message the producer could send
    err = refusal(OpenProtocolDecoder(o), msg)
    assert "event 4 of 8" in err.message
    assert f"lz4 values of this message inflate beyond {16 * (64 << 10)} bytes" in err.message
    assert "max-message-bytes 65536" in err.message
    # Three such events are within the budget, message after message.
    dec = OpenProtocolDecoder(o)
    for _ in range(3):
        assert len(dec.decode(frame(*[(GOOD_KEY, value)] * 3))) == 3
    with pytest.raises(CodecError, match="event 4 of 8"):
        OpenProtocolBlockDecoder(OpenProtocolDecoder(o)).decode([msg], [WHERE], [{}])


@pytest.mark.timeout(60)
def test_one_lz4_frame_inflating_beyond_the_bound() -> None:
    o = CodecOptions(protocol="open-protocol", max_message_bytes=1 << 20, large_message_handle_compression="lz4")
    bomb = _lz4(b"\0" * ((16 << 20) + 1))
    assert len(bomb) < 100_000
    err = refusal(OpenProtocolDecoder(o), frame((GOOD_KEY, bomb)))
    assert "event 1 of 1" in err.message and f"inflate beyond {16 << 20} bytes" in err.message


@pytest.mark.parametrize(("kind", "limit"), [("canal-json", 4096), ("simple-json", 4096), ("debezium", DEBEZIUM_LIMIT)])
@pytest.mark.parametrize("method", ["lz4", "snappy"])
def test_whole_value_inflation_is_bounded(kind: str, limit: int, method: str) -> None:
    kw = {"max_message_bytes": limit, "large_message_handle_compression": method}
    small = encode(kind, RowChange(Op.INSERT, TABLE, TS, new=(1, "y" * 1000)), **kw)
    (row,) = decoder(kind, **kw).decode(small)
    assert row.new == (1, "y" * 1000)
    big = encode(kind, RowChange(Op.INSERT, TABLE, TS, new=(1, "y" * (INFLATE_FACTOR * limit))), **kw)
    assert big.value is not None and len(big.value) < limit  # a message the producer could send
    err = refusal(decoder(kind, **kw), big)
    assert f"{method} values of this message inflate beyond {INFLATE_FACTOR * limit} bytes" in err.message


def test_inflater_defaults_and_budget() -> None:
    inf = inflater("lz4", DEFAULT_MAX_MESSAGE_BYTES)
    assert inf is not None and inf.limit == 160 << 20
    assert inflater("none", 1) is None
    small = inflater("snappy", 10)
    assert small is not None and small.limit == 160
    compress = compression_codec("snappy")[0]  # type: ignore[index]
    assert small(compress(b"a" * 100)) == b"a" * 100
    with pytest.raises(InflateLimitError, match="beyond 160 bytes"):
        small(compress(b"a" * 61))  # 100 + 61 > 160: the budget is the message's
    small.new_message()
    assert small(compress(b"a" * 160)) == b"a" * 160


# ---------------------------------------------------------------- item 3: Simple's held DMLs


def test_simple_held_dmls_are_bounded_in_bytes() -> None:
    o = CodecOptions(protocol="simple")
    dec = SimpleDecoder(o, max_pending_bytes=12_000)
    rows = [encode("simple-json", RowChange(Op.INSERT, TABLE, TS + i, new=(i, "z" * 5000))) for i in range(3)]
    assert dec.decode(rows[0], "p3@1") == [] and dec.decode(rows[1], "p3@2") == []
    with pytest.raises(UnknownSchemaError) as err:
        dec.decode(rows[2], "p3@3")
    assert err.value.where == "p3@3" and "max_pending_bytes 12000" in err.value.message
    assert "test.t" in err.value.message and "2 DMLs" in err.value.message
    assert dec.pending() == 2  # the refused one is not held; the held ones still come out
    released = dec.decode(SimpleEncoder(o).encode_bootstrap(TABLE), "p3@4")
    assert [r.new[0] for r in released] == [0, 1]
    assert SimpleDecoder(o).max_pending_bytes == 128 << 20
    assert SimpleDecoder(CodecOptions(protocol="simple", max_message_bytes=100 << 20)).max_pending_bytes == 400 << 20


# ---------------------------------------------------------------- item 9: a header-only message


@pytest.mark.parametrize("value", [b"", None])
def test_a_version_header_alone_is_zero_events(value: bytes | None) -> None:
    empty = Message(V1, value)
    assert OpenProtocolDecoder(CodecOptions(protocol="open-protocol")).decode(empty, WHERE) == []
    row = frame((GOOD_KEY, GOOD_VALUE))
    assert_same([empty])
    assert_same([row, empty, row, empty, empty, row])
    decoded = OpenProtocolBlockDecoder(OpenProtocolDecoder(CodecOptions(protocol="open-protocol"))).decode(
        [empty, row], [WHERE, WHERE], [{}, {}]
    )
    assert decoded[0] == []
    # A header with value bytes left over is still corrupt.
    with pytest.raises(CodecError, match="more values than keys"):
        OpenProtocolDecoder(CodecOptions(protocol="open-protocol")).decode(Message(V1, b"\0" * 8), WHERE)


# ---------------------------------------------------------------- item 8: what bench/fuzz.py found


@pytest.mark.parametrize("member", ['"f":18446744073709551615', '"t":99999999999999999999', '"f":-9223372036854775809'])
def test_block_decoder_takes_integers_beyond_int64_in_type_and_flags(member: str) -> None:
    """A ``t``/``f`` outside int64 made building the columnar reader raise msgspec's NotImplementedError;
    the block decoder now leaves such a message to the row decoder, and both agree."""
    value = GOOD_VALUE.replace(b'"f":11', member.encode()) if '"f"' in member else GOOD_VALUE
    if '"t"' in member:
        value = value.replace(b'"t":3', member.encode())
    assert value != GOOD_VALUE
    assert_same([frame((GOOD_KEY, value)), frame((GOOD_KEY, GOOD_VALUE))])


# ---------------------------------------------------------------- Debezium: what its JSON can carry


def test_debezium_has_no_claim_check_to_follow(tmp_path: Path) -> None:
    """TiCDC's Debezium encoder has no large-message fallback: nothing names a file to open."""
    with pytest.raises(ChangefeedError, match="no large-message-handle-option"):
        make_encoder(
            options("debezium", large_message_handle_option="claim-check", claim_check_storage_uri=str(tmp_path))
        )
    big = encode("debezium", BIG, max_message_bytes=DEBEZIUM_LIMIT)
    assert big.value is not None and len(big.value) > 4096  # why it has its own limit here
    with pytest.raises(ChangefeedError, match=f"over max-message-bytes {4096}"):
        encode("debezium", BIG, max_message_bytes=4096)


def _debezium_decimal(text: bytes) -> Message:
    """DEC_TABLE's insert with the JSON double TiCDC writes for its DECIMAL replaced by ``text``."""
    msg = encode("debezium", RowChange(Op.INSERT, DEC_TABLE, TS, new=(1, Decimal("12345678.90"))))
    assert msg.value is not None and msg.value.count(b'"d":12345678.9}') == 1
    return Message(msg.key, msg.value.replace(b'"d":12345678.9}', b'"d":' + text + b"}"))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"1e999999999", "not a JSON document"),  # beyond a double: refused by the parser
        (b"-1E+99999999", "not a JSON document"),
        (b'"1e999999999"', "is not DECIMAL text"),  # decimal.handling.mode=string spelling, exponent
        (b'"' + b"9" * 66 + b'"', "is not DECIMAL text"),  # more digits than DECIMAL(65)
        (b"1e308", "more integer digits than DECIMAL(65) holds"),  # a double, but no DECIMAL
        (b"-1e65", "more integer digits than DECIMAL(65) holds"),
        (b"true", "expected a number"),
    ],
)
@pytest.mark.timeout(30)
def test_debezium_decimal_values_are_bounded(text: bytes, why: str) -> None:
    (row,) = decoder("debezium").decode(_debezium_decimal(b"12345678.9"))
    assert row.new == (1, Decimal("12345678.90"))
    err = refusal(decoder("debezium"), _debezium_decimal(text))
    assert why in err.message
    if "JSON" not in why:
        assert "payload.after.d" in err.message
