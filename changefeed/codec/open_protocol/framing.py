"""Open Protocol's batch framing, value compression and claim-check storage (spec §0.7, §1.1, §1.9).

Key   = u64be(1) ‖ u64be(len(k1)) ‖ k1 ‖ u64be(len(k2)) ‖ k2 ‖ …
Value =            u64be(len(v1)) ‖ v1 ‖ u64be(len(v2)) ‖ v2 ‖ …
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import orjson

from ...errors import ConfigError
from ...model.values import b64decode, b64encode

BATCH_VERSION = 1
VERSION_HEADER = struct.pack(">Q", BATCH_VERSION)
U64 = struct.Struct(">Q")
# tiflow/ticdc common.MaxRecordOverhead: Kafka's per-record overhead in the size accounting.
MAX_RECORD_OVERHEAD = 36


def frame_single(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A one-event message: what a DDL, resolved or claim-check file carries."""
    return VERSION_HEADER + U64.pack(len(key)) + key, U64.pack(len(value)) + value


def split_frames(key: bytes | None, value: bytes | None) -> list[tuple[bytes, bytes]]:
    """Walk key and value in lockstep (as TiCDC's Go decoder does); ValueError names the event.

    Unlike the Java demo (which stops at the end of the key), a value with entries left over,
    or a key without a matching value entry, is corrupt.
    """
    if key is None:
        raise ValueError("the message has no key (Open Protocol keys carry the event headers)")
    value = value or b""
    klen_total, vlen_total = len(key), len(value)
    if klen_total < 8:
        raise ValueError(f"key is {klen_total} bytes, shorter than the 8-byte version header")
    version = U64.unpack_from(key, 0)[0]
    if version != BATCH_VERSION:
        raise ValueError(f"unsupported batch version {version} in the key header (expected {BATCH_VERSION})")
    pairs: list[tuple[bytes, bytes]] = []
    kpos, vpos = 8, 0
    while kpos < klen_total:
        n = len(pairs) + 1
        left = klen_total - kpos
        if left < 8:
            raise ValueError(f"event {n}: key length prefix truncated ({left} bytes left in the key)")
        klen = U64.unpack_from(key, kpos)[0]
        kpos += 8
        if klen > klen_total - kpos:
            raise ValueError(f"event {n}: key length {klen} overruns the key ({klen_total - kpos} bytes left)")
        k = key[kpos : kpos + klen]
        kpos += klen
        left = vlen_total - vpos
        if left == 0:
            raise ValueError(f"event {n}: the value has no entry for this key (more keys than values)")
        if left < 8:
            raise ValueError(f"event {n}: value length prefix truncated ({left} bytes left in the value)")
        vlen = U64.unpack_from(value, vpos)[0]
        vpos += 8
        if vlen > vlen_total - vpos:
            raise ValueError(f"event {n}: value length {vlen} overruns the value ({vlen_total - vpos} bytes left)")
        pairs.append((k, value[vpos : vpos + vlen]))
        vpos += vlen
    if vpos != vlen_total:
        raise ValueError(
            f"the value has {vlen_total - vpos} bytes left after {len(pairs)} events (more values than keys)"
        )
    if not pairs:
        raise ValueError("the message holds no events (key is only the version header)")
    return pairs


# ---------------------------------------------------------------- compression (spec §0.7)

Transform = Callable[[bytes], bytes]
_MAX_INFLATED = 1 << 28  # refuse to inflate hostile input beyond 256 MiB
_SNAPPY_MAX_RATIO = 32  # a Snappy block cannot expand much beyond ~21:1


def compression_codec(name: str) -> tuple[Transform, Transform] | None:
    """(compress, decompress) for ``large-message-handle-compression``, or None for ``none``.

    TiCDC writes the raw Snappy *block* format and the LZ4 *frame* format; pyarrow (a project
    dependency) has both. Nothing in a message says it is compressed, so the decoder must be
    given the same option. The decompressor raises ValueError on corrupt or absurdly inflating
    input.
    """
    if name == "none":
        return None
    if name not in ("snappy", "lz4"):
        raise ConfigError(f"unknown large-message-handle-compression {name!r}")
    try:
        import pyarrow as pa  # noqa: PLC0415 - heavy import, only when compression is configured
    except ImportError:  # pragma: no cover - pyarrow is a declared dependency
        raise ConfigError(f"large-message-handle-compression={name} needs pyarrow, which is not installed") from None
    if not pa.Codec.is_available(name):  # pragma: no cover - depends on the pyarrow build
        raise ConfigError(f"large-message-handle-compression={name}: this pyarrow build has no {name} codec")
    codec = pa.Codec(name)  # "snappy": raw block; "lz4": LZ4 frame
    failures = (pa.lib.ArrowException, OSError, ValueError, EOFError)

    def compress(data: bytes) -> bytes:
        return codec.compress(data, asbytes=True)

    def unsnappy(data: bytes) -> bytes:
        size, shift, pos = 0, 0, 0
        while True:  # the block starts with the uncompressed length as a base-128 varint
            if pos >= len(data) or shift > 35:
                raise ValueError("snappy block without a valid length header")
            byte = data[pos]
            size |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if byte < 0x80:
                break
        if size > len(data) * _SNAPPY_MAX_RATIO + 64 or size > _MAX_INFLATED:
            raise ValueError(f"snappy block claims {size} bytes from {len(data)}")
        try:
            out = codec.decompress(data, decompressed_size=size, asbytes=True)
        except failures as e:
            raise ValueError(f"snappy block does not decompress: {e}") from None
        if len(out) != size:
            raise ValueError(f"snappy block gave {len(out)} bytes, its header said {size}")
        return out

    def unlz4(data: bytes) -> bytes:
        try:
            out = pa.input_stream(pa.py_buffer(data), compression="lz4").read(_MAX_INFLATED + 1)
        except failures as e:
            raise ValueError(f"lz4 frame does not decompress: {e}") from None
        if len(out) > _MAX_INFLATED:
            raise ValueError("lz4 frame inflates beyond 256 MiB")
        return bytes(out)

    return compress, (unsnappy if name == "snappy" else unlz4)


# ---------------------------------------------------------------- claim-check storage (spec §1.9)


def storage_dir(uri: str) -> Path:
    """The local directory behind a ``claim-check-storage-uri``: ``file:///path`` or a plain path."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"claim-check storage {uri!r}: file URIs must name a local path")
        return Path(unquote(parts.path))
    if parts.scheme == "":
        return Path(uri.split("?", 1)[0])
    raise ConfigError(f"claim-check storage {uri!r}: only local storage (file:// or a path) is supported")


def claim_check_location(uri: str, file_name: str) -> str:
    """TiCDC's ``ccl``: the storage URI with its trailing ``/`` trimmed, ``/``, the file name."""
    return uri.removesuffix("/") + "/" + file_name


def write_claim_check(directory: Path, file_name: str, key: bytes, value: bytes) -> None:
    """Store ``{"key":base64,"value":base64}`` of a framed one-event message (Go []byte -> base64)."""
    directory.mkdir(parents=True, exist_ok=True)
    body = orjson.dumps({"key": b64encode(key), "value": b64encode(value)})
    tmp = directory / f".{file_name}.tmp"
    tmp.write_bytes(body)
    os.replace(tmp, directory / file_name)


def read_claim_check(path: Path) -> tuple[bytes, bytes]:
    """The framed key and value of a claim-check file; ValueError/OSError when unreadable."""
    doc = orjson.loads(path.read_bytes())
    if not isinstance(doc, dict) or not isinstance(doc.get("key"), str) or not isinstance(doc.get("value"), str):
        raise ValueError(f"claim-check file {path} is not a {{'key','value'}} object of base64 strings")
    return b64decode(doc["key"]), b64decode(doc["value"])
