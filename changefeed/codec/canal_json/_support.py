"""Pieces of canal-json that are not JSON: compression, claim-check files, TiKV row keys."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any

from ...errors import CodecError, ConfigError
from ...model import Op, RowChange, TypeCode

# Large-message compression (spec §0.7): raw Snappy *block* and LZ4 *frame*, both from pyarrow
# (a project dependency; no separate snappy/lz4 package is installed).
_MAX_DECOMPRESSED = 1 << 28  # refuse to inflate hostile input beyond 256 MiB
# Snappy's densest element (a 3-byte copy of 64 bytes) bounds the ratio near 21:1.
_SNAPPY_MAX_RATIO = 32


def _codec(name: str) -> Any:
    try:
        import pyarrow as pa  # noqa: PLC0415 - heavy import, only when compression is configured
    except ImportError:  # pragma: no cover - pyarrow is a declared dependency
        raise ConfigError(f"large-message-handle-compression={name} needs pyarrow, which is not installed") from None
    if not pa.Codec.is_available(name):  # pragma: no cover - depends on the pyarrow build
        raise ConfigError(f"large-message-handle-compression={name}: this pyarrow build has no {name} codec")
    return pa


def compressor(name: str) -> Callable[[bytes], bytes] | None:
    """The value compressor for ``large-message-handle-compression`` (None for ``none``)."""
    if name == "none":
        return None
    pa = _codec(name)
    codec = pa.Codec(name)  # "snappy": raw block format; "lz4": LZ4 frame format

    def compress(data: bytes) -> bytes:
        return codec.compress(data, asbytes=True)

    return compress


def decompressor(name: str) -> Callable[[bytes, str], bytes] | None:
    """The inverse of `compressor`; raises `CodecError` (with ``where``) on corrupt input."""
    if name == "none":
        return None
    pa = _codec(name)
    errors = (pa.lib.ArrowException, OSError, ValueError, EOFError)
    if name == "snappy":
        codec = pa.Codec("snappy")

        def unsnappy(data: bytes, where: str) -> bytes:
            size = _snappy_length(data, where)
            if size > len(data) * _SNAPPY_MAX_RATIO + 64 or size > _MAX_DECOMPRESSED:
                raise CodecError(f"snappy block claims {size} bytes from {len(data)}: corrupt", where=where)
            try:
                out = codec.decompress(data, decompressed_size=size, asbytes=True)
            except errors as exc:
                raise CodecError(f"snappy block does not decompress: {exc}", where=where) from None
            if len(out) != size:
                raise CodecError(f"snappy block gave {len(out)} bytes, header said {size}", where=where)
            return out

        return unsnappy

    def unlz4(data: bytes, where: str) -> bytes:
        try:
            stream = pa.input_stream(pa.py_buffer(data), compression="lz4")
            out = stream.read(_MAX_DECOMPRESSED + 1)
        except errors as exc:
            raise CodecError(f"lz4 frame does not decompress: {exc}", where=where) from None
        if len(out) > _MAX_DECOMPRESSED:
            raise CodecError(f"lz4 frame inflates beyond {_MAX_DECOMPRESSED} bytes", where=where)
        return out

    return unlz4


def _snappy_length(data: bytes, where: str) -> int:
    """The uncompressed length: a little-endian base-128 varint at the start of a Snappy block."""
    size = shift = 0
    for i, byte in enumerate(data[:5]):
        size |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return size
        shift += 7
        if i == 4:
            break
    raise CodecError("snappy block has no valid length header", where=where)


def claim_check_dir(uri: str) -> str:
    """Local directory of ``claim-check-storage-uri``: ``file:///path`` or a plain path.

    Only local storage is implemented; S3/GCS/Azure URIs are refused.
    """
    if not uri:
        raise ConfigError("large-message-handle-option=claim-check needs claim-check-storage-uri")
    if uri.startswith("file://"):
        path = uri[len("file://") :]
        if not path.startswith("/"):
            raise ConfigError(f"claim-check-storage-uri {uri!r}: file:// URIs need an absolute path")
        return path
    if "://" in uri:
        raise ConfigError(f"claim-check-storage-uri {uri!r}: only local (file:// or plain path) storage is supported")
    return uri


def claim_check_prefix(uri: str) -> str:
    """The location prefix written into ``claimCheckLocation`` (TiCDC: storage URI + ``/``)."""
    if uri.startswith("file://"):
        return uri.rstrip("/")
    return "file://" + os.path.abspath(uri).rstrip("/")


# ------------------------------------------------------------------ TiKV record key ([ticdc] rowkey)

_KEY = struct.Struct(">cQ2sQ")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_INT_HANDLE_TYPES = frozenset({TypeCode.TINYINT, TypeCode.SMALLINT, TypeCode.MEDIUMINT, TypeCode.INT, TypeCode.BIGINT})


def record_key(table_id: int, handle: int) -> bytes:
    """``t`` + EncodeInt(tableID) + ``_r`` + EncodeInt(handle): sign bit flipped, big-endian (spec §6.2)."""
    return _KEY.pack(b"t", (table_id & _MASK) ^ _SIGN, b"_r", (handle & _MASK) ^ _SIGN)


def int_handle_position(columns: tuple[Any, ...], primary_key: tuple[int, ...]) -> int | None:
    """Position of the integer primary key that TiDB uses as the row handle, if there is one.

    TiDB clusters a single-column integer primary key by default (PKIsHandle); we cannot see a
    NONCLUSTERED override, so such a table is assumed to use its PK as the handle.
    """
    if len(primary_key) == 1 and columns[primary_key[0]].type_code in _INT_HANDLE_TYPES:
        return primary_key[0]
    return None


def row_key(row: RowChange, handle_pos: int | None) -> bytes | None:
    """The TiKV record key of ``row``, or None when it has no int handle we can see."""
    table_id = row.physical_table_id
    if table_id <= 0:
        return None
    handle: Any = None
    if handle_pos is not None:
        image = row.old if row.op is Op.DELETE else row.new
        if image is not None:
            handle = image[handle_pos]
    elif row.row_id is not None:
        handle = row.row_id  # _tidb_rowid of a table without an int PK handle
    if type(handle) is not int:
        return None
    return record_key(table_id, handle)
