"""TiKV keys as TiDB writes them (``pkg/tablecodec``; spec §6.2).

Record keys are ``t{EncodeInt(tableID)}_r{handle}``; the handle is an 8-byte comparable int or,
for clustered non-int primary keys, the concatenated key datums of the PK columns. Index keys
(``_i``) and meta keys (``m``) are recognised so the mounter can skip them.
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import Any, NamedTuple

from ...errors import CaptureError
from .datum import decode_key_datums

TABLE_PREFIX = b"t"
RECORD_PREFIX_SEP = b"_r"
INDEX_PREFIX_SEP = b"_i"
META_PREFIX = b"m"
KEYSPACE_PREFIX = 0x78  # 'x': API v2 key-space mode, followed by a 3-byte keyspace id
_KEYSPACE_LEN = 4
_TABLE_HEAD = 11  # 't' + 8-byte table id + 2-byte separator
INT_HANDLE_KEY_LEN = _TABLE_HEAD + 8  # RecordRowKeyLen: 19 bytes
_U64 = struct.Struct(">Q")
_SIGN = 1 << 63


class KeyKind(Enum):
    RECORD = "record"
    INDEX = "index"
    META = "meta"
    OTHER = "other"


class RecordKey(NamedTuple):
    """A decoded record key: the physical table id and either an int or a common handle."""

    table_id: int
    int_handle: int | None
    common_handle: bytes | None  # the encoded PK datums (decode with `common_handle_datums`)


def strip_keyspace(key: bytes) -> bytes:
    """Drop the ``x`` + 3-byte keyspace prefix of API v2 deployments (TiCDC strips it first)."""
    if key[:1] == b"x" and len(key) >= _KEYSPACE_LEN:
        return key[_KEYSPACE_LEN:]
    return key


def table_id_of(key: bytes) -> int:
    u = _U64.unpack_from(key, 1)[0] ^ _SIGN
    return u - (1 << 64) if u & _SIGN else u


def classify_key(key: bytes) -> KeyKind:
    """What a (keyspace-stripped) key addresses; only RECORD keys are mounted."""
    if key[:1] == META_PREFIX:
        return KeyKind.META
    if key[:1] == TABLE_PREFIX and len(key) >= _TABLE_HEAD:
        sep = key[9:11]
        if sep == RECORD_PREFIX_SEP:
            return KeyKind.RECORD
        if sep == INDEX_PREFIX_SEP:
            return KeyKind.INDEX
    return KeyKind.OTHER


def decode_record_key(key: bytes) -> RecordKey:
    """Table id and handle of a record key (``tablecodec.DecodeRecordKey``).

    TiDB tells the handle kinds apart by length: exactly 19 bytes is an int handle.
    """
    if classify_key(key) is not KeyKind.RECORD:
        raise CaptureError(f"not a record key: {key[:16].hex()}...")
    table_id = table_id_of(key)
    if len(key) == INT_HANDLE_KEY_LEN:
        u = _U64.unpack_from(key, _TABLE_HEAD)[0] ^ _SIGN
        return RecordKey(table_id, u - (1 << 64) if u & _SIGN else u, None)
    if len(key) <= _TABLE_HEAD:
        raise CaptureError("record key has no handle")
    if len(key) < INT_HANDLE_KEY_LEN:
        raise CaptureError(f"record key truncated: {len(key)} bytes")
    return RecordKey(table_id, None, key[_TABLE_HEAD:])


def common_handle_datums(handle: bytes) -> list[tuple[int, Any]]:
    """The (flag, raw value) datums of a common handle, in PK column order."""
    datums = decode_key_datums(handle)
    if not datums:
        raise CaptureError("empty common handle")
    return datums
