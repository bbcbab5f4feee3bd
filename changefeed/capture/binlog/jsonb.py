"""MySQL's binary JSON (``json_binary.h``) rendered as MySQL prints JSON: ``{"k": "v", "a": [1, 2]}``.

MariaDB stores JSON as LONGTEXT, so only MySQL sources need this.
"""

from __future__ import annotations

import base64
import json
import struct

from .constants import ColumnType
from .decoders import decode_decimal, packed_datetime_text, packed_time_text

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING = range(0x04, 0x0D)
_OPAQUE = 0x0F
_LITERALS = {0x00: "null", 0x01: "true", 0x02: "false"}
_SCALARS = {
    _INT16: struct.Struct("<h"),
    _UINT16: struct.Struct("<H"),
    _INT32: struct.Struct("<i"),
    _UINT32: struct.Struct("<I"),
    _INT64: struct.Struct("<q"),
    _UINT64: struct.Struct("<Q"),
}
_DOUBLE_S = struct.Struct("<d")


class JSONBinaryError(ValueError):
    """The bytes are not valid MySQL binary JSON."""


def jsonb_to_text(data: bytes) -> str:
    """The JSON text of a binary JSON document; an empty value is JSON ``null`` (as MySQL reads it)."""
    if not data:
        return "null"
    try:
        return _value(data, data[0], 1, len(data))
    except (IndexError, struct.error) as exc:
        raise JSONBinaryError(f"truncated binary JSON ({exc})") from None


def _value(data: bytes, tp: int, pos: int, end: int) -> str:
    if tp in (_SMALL_OBJECT, _LARGE_OBJECT):
        return _container(data, pos, tp == _LARGE_OBJECT, True)
    if tp in (_SMALL_ARRAY, _LARGE_ARRAY):
        return _container(data, pos, tp == _LARGE_ARRAY, False)
    if tp == _LITERAL:
        return _literal(data[pos])
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        return str(scalar.unpack_from(data, pos)[0])
    if tp == _DOUBLE:
        return _double_text(_DOUBLE_S.unpack_from(data, pos)[0])
    if tp == _STRING:
        length, pos = _varlen(data, pos)
        return _string(data[pos : pos + length].decode("utf-8"))
    if tp == _OPAQUE:
        field_type = data[pos]
        length, pos = _varlen(data, pos + 1)
        return _opaque(field_type, data[pos : pos + length])
    raise JSONBinaryError(f"unknown binary JSON type {tp:#x}")


def _literal(code: int) -> str:
    try:
        return _LITERALS[code]
    except KeyError:
        raise JSONBinaryError(f"unknown JSON literal {code:#x}") from None


def _container(data: bytes, base: int, large: bool, is_object: bool) -> str:
    # Offsets inside an object/array count from its element-count field (``base``).
    width = 4 if large else 2
    fmt = "<I" if large else "<H"
    count = struct.unpack_from(fmt, data, base)[0]
    size = struct.unpack_from(fmt, data, base + width)[0]
    end = base + size
    if end > len(data):
        raise JSONBinaryError(f"container of {size} bytes runs past the value ({len(data) - base} left)")
    pos = base + 2 * width
    keys: list[str] = []
    if is_object:
        for _ in range(count):
            key_offset = struct.unpack_from(fmt, data, pos)[0]
            key_length = struct.unpack_from("<H", data, pos + width)[0]
            keys.append(data[base + key_offset : base + key_offset + key_length].decode("utf-8"))
            pos += width + 2
    values: list[str] = []
    for _ in range(count):
        tp = data[pos]
        if tp == _LITERAL:
            values.append(_literal(data[pos + 1]))
        elif tp in (_INT16, _UINT16) or (large and tp in (_INT32, _UINT32)):
            values.append(str(_SCALARS[tp].unpack_from(data, pos + 1)[0]))
        else:
            offset = struct.unpack_from(fmt, data, pos + 1)[0]
            values.append(_value(data, tp, base + offset, end))
        pos += 1 + width
    if is_object:
        return "{" + ", ".join(f"{_string(k)}: {v}" for k, v in zip(keys, values, strict=True)) + "}"
    return "[" + ", ".join(values) + "]"


def _varlen(data: bytes, pos: int) -> tuple[int, int]:
    """Length as 7 bits per byte, low bits first; the high bit says another byte follows."""
    length = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, pos
        shift += 7
        if shift > 28:
            raise JSONBinaryError("string length needs more than 5 bytes")


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _double_text(value: float) -> str:
    """MySQL prints doubles in shortest form, exponent without ``+`` or leading zeros (``1e100``)."""
    text = repr(value)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else ""
        text = f"{mantissa}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    return text


def _opaque(field_type: int, payload: bytes) -> str:
    """Values of other MySQL types inside JSON: decimals and temporals print as MySQL shows them."""
    if field_type == ColumnType.NEWDECIMAL and len(payload) >= 2:
        precision, scale = payload[0], payload[1]
        return str(decode_decimal(payload[2:], precision, scale))
    if (
        field_type in (ColumnType.DATE, ColumnType.DATETIME, ColumnType.TIMESTAMP, ColumnType.TIME)
        and len(payload) >= 8
    ):
        packed = int.from_bytes(payload[:8], "little", signed=True)
        if field_type == ColumnType.TIME:
            return _string(packed_time_text(packed, 6))
        return _string(packed_datetime_text(packed, 6, date_only=field_type == ColumnType.DATE))
    return _string(f"base64:type{field_type}:{base64.b64encode(payload).decode('ascii')}")
