"""Datum decoding: the flag-prefixed values of keys and old-format rows (spec §6.1, §6.4)."""

from __future__ import annotations

from typing import Any

from ...errors import CaptureError
from .codec import (
    BYTES_FLAG,
    COMPACT_BYTES_FLAG,
    DECIMAL_FLAG,
    DURATION_FLAG,
    FLOAT_FLAG,
    INT_FLAG,
    JSON_FLAG,
    NIL_FLAG,
    UINT_FLAG,
    UVARINT_FLAG,
    VARINT_FLAG,
    VECTOR_FLOAT32_FLAG,
    decode_bytes,
    decode_cmp_float,
    decode_cmp_int,
    decode_cmp_uint,
    decode_compact_bytes,
    decode_decimal_datum,
    decode_uvarint,
    decode_varint,
)
from .jsonbin import json_value_size


def decode_datum(buf: bytes, pos: int) -> tuple[int, Any, int]:
    """One datum (key or old-format value encoding): ``(flag, raw value, next_pos)``.

    Raw values: None (nil), bytes (bytes/compact bytes), int (int, uint, duration nanos, varints),
    float, (Decimal, precision, frac), (json type code, json bytes), bytes (vector payload).
    """
    if pos >= len(buf):
        raise CaptureError(f"truncated datum at offset {pos}")
    flag = buf[pos]
    pos += 1
    if flag == NIL_FLAG:
        return flag, None, pos
    v: Any  # the raw value, of the flag's type (see above)
    if flag == VARINT_FLAG:
        v, pos = decode_varint(buf, pos)
    elif flag == UVARINT_FLAG:
        v, pos = decode_uvarint(buf, pos)
    elif flag == COMPACT_BYTES_FLAG:
        v, pos = decode_compact_bytes(buf, pos)
    elif flag == BYTES_FLAG:
        v, pos = decode_bytes(buf, pos)
    elif flag in (INT_FLAG, DURATION_FLAG):
        v, pos = decode_cmp_int(buf, pos)
    elif flag == UINT_FLAG:
        v, pos = decode_cmp_uint(buf, pos)
    elif flag == FLOAT_FLAG:
        v, pos = decode_cmp_float(buf, pos)
    elif flag == DECIMAL_FLAG:
        v, pos = decode_decimal_datum(buf, pos)
    elif flag == JSON_FLAG:
        if pos >= len(buf):
            raise CaptureError(f"truncated JSON datum at offset {pos}")
        code = buf[pos]
        size = json_value_size(code, buf, pos + 1)
        v = (code, buf[pos + 1 : pos + 1 + size])
        pos += 1 + size
    elif flag == VECTOR_FLOAT32_FLAG:
        count = int.from_bytes(buf[pos : pos + 4], "little")
        if pos + 4 + 4 * count > len(buf):
            raise CaptureError(f"truncated vector datum at offset {pos}")
        v = buf[pos : pos + 4 + 4 * count]
        pos += 4 + 4 * count
    else:
        raise CaptureError(f"bad datum flag {flag} at offset {pos - 1}")
    return flag, v, pos


def decode_key_datums(buf: bytes, pos: int = 0) -> list[tuple[int, Any]]:
    """All datums to the end of ``buf`` (a common handle, an index key's values)."""
    out: list[tuple[int, Any]] = []
    while pos < len(buf):
        flag, value, pos = decode_datum(buf, pos)
        out.append((flag, value))
    return out
