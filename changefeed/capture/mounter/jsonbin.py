"""TiDB binary JSON -> MySQL-style JSON text (``pkg/types/json_binary.go``; spec §6.3, §0.4).

TiCDC prints a JSON column with ``BinaryJSON.String()``: ``", "`` and ``": "`` separators, keys
in stored order, Go-style string escaping without HTML escaping, doubles with ``.0`` when
integral and exponent form outside [1e-15, 1e15).
"""

from __future__ import annotations

import base64
import codecs
import math
import struct

from ...errors import CaptureError
from ...model.gofloat import shortest_digits
from .codec import decode_uvarint
from .temporal import duration_text, unpack_time

OBJECT = 0x01
ARRAY = 0x03
LITERAL = 0x04
INT64 = 0x09
UINT64 = 0x0A
FLOAT64 = 0x0B
STRING = 0x0C
OPAQUE = 0x0D
DATE = 0x0E
DATETIME = 0x0F
TIMESTAMP = 0x10
DURATION = 0x11

_LITERALS = {0x00: "null", 0x01: "true", 0x02: "false"}
_HEADER = 8  # u32 count + u32 size
_KEY_ENTRY = 6  # u32 offset + u16 length
_VALUE_ENTRY = 5  # u8 type + u32 offset-or-inlined
_MAX_DEPTH = 100  # TiDB's maxJSONDepth
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_Q64 = struct.Struct("<Q")
_D64 = struct.Struct("<d")


def _need(buf: bytes, pos: int, n: int, what: str) -> None:
    if pos < 0 or pos + n > len(buf):
        raise CaptureError(f"truncated binary JSON {what} at offset {pos}")


def json_value_size(code: int, buf: bytes, pos: int) -> int:
    """Bytes taken by a JSON value of type ``code`` at ``pos`` (TiDB ``PeekBytesAsJSON``)."""
    if code in (OBJECT, ARRAY):
        _need(buf, pos, _HEADER, "container header")
        size = _U32.unpack_from(buf, pos + 4)[0]
        _need(buf, pos, size, "container")
        return size
    if code == LITERAL:
        _need(buf, pos, 1, "literal")
        return 1
    if code in (INT64, UINT64, FLOAT64, DATE, DATETIME, TIMESTAMP):
        _need(buf, pos, 8, "number")
        return 8
    if code == DURATION:
        _need(buf, pos, 12, "duration")
        return 12
    if code == STRING:
        length, after = decode_uvarint(buf, pos)
        _need(buf, after, length, "string")
        return after - pos + length
    if code == OPAQUE:
        _need(buf, pos, 1, "opaque type")
        length, after = decode_uvarint(buf, pos + 1)
        _need(buf, after, length, "opaque")
        return after - pos + length
    raise CaptureError(f"bad JSON type code {code:#04x}")


def json_to_text(code: int, buf: bytes, pos: int = 0, end: int | None = None) -> str:
    """Render the JSON value of type ``code`` whose bytes start at ``pos`` as TiDB's text."""
    end = len(buf) if end is None else end
    view = buf[pos:end] if (pos or end != len(buf)) else buf
    size = json_value_size(code, view, 0)
    if size != len(view):
        raise CaptureError(f"binary JSON value is {len(view)} bytes, its encoding says {size}")
    out: list[str] = []
    _render(code, view, 0, out, 0)
    return "".join(out)


def _render(code: int, buf: bytes, pos: int, out: list[str], depth: int) -> None:
    if code in (OBJECT, ARRAY):
        if depth >= _MAX_DEPTH:
            raise CaptureError(f"binary JSON nested deeper than {_MAX_DEPTH}")
        _container(code, buf, pos, out, depth)
    elif code == LITERAL:
        _need(buf, pos, 1, "literal")
        lit = _LITERALS.get(buf[pos])
        if lit is None:
            raise CaptureError(f"bad JSON literal {buf[pos]:#04x}")
        out.append(lit)
    elif code == INT64:
        _need(buf, pos, 8, "int64")
        out.append(str(_I64.unpack_from(buf, pos)[0]))
    elif code == UINT64:
        _need(buf, pos, 8, "uint64")
        out.append(str(_Q64.unpack_from(buf, pos)[0]))
    elif code == FLOAT64:
        _need(buf, pos, 8, "double")
        out.append(format_json_double(_D64.unpack_from(buf, pos)[0]))
    elif code == STRING:
        length, start = decode_uvarint(buf, pos)
        _need(buf, start, length, "string")
        out.append(quote_string(buf[start : start + length]))
    elif code == OPAQUE:
        _need(buf, pos, 1, "opaque type")
        length, start = decode_uvarint(buf, pos + 1)
        _need(buf, start, length, "opaque")
        payload = base64.b64encode(buf[start : start + length]).decode("ascii")
        out.append(f'"base64:type{buf[pos]}:{payload}"')
    elif code in (DATE, DATETIME, TIMESTAMP):
        _need(buf, pos, 8, "time")
        y, mo, d, h, mi, s, us = unpack_time(_Q64.unpack_from(buf, pos)[0])
        # jsonMarshalTimeTo: always 6 fraction digits; a DATE prints the date only.
        text = f"{y:04d}-{mo:02d}-{d:02d}"
        if code != DATE:
            text += f" {h:02d}:{mi:02d}:{s:02d}.{us:06d}"
        out.append(f'"{text}"')
    elif code == DURATION:
        _need(buf, pos, 12, "duration")
        # jsonMarshalDurationTo: always 6 fraction digits, whatever fsp was stored.
        out.append(f'"{duration_text(_I64.unpack_from(buf, pos)[0], 6)}"')
    else:
        raise CaptureError(f"bad JSON type code {code:#04x}")


def _container(code: int, buf: bytes, pos: int, out: list[str], depth: int) -> None:
    _need(buf, pos, _HEADER, "container header")
    count, size = struct.unpack_from("<II", buf, pos)
    _need(buf, pos, size, "container")
    is_obj = code == OBJECT
    entries = pos + _HEADER + (count * _KEY_ENTRY if is_obj else 0)
    if entries + count * _VALUE_ENTRY > pos + size:
        raise CaptureError(f"binary JSON container of {count} elements does not fit its {size} bytes")
    out.append("{" if is_obj else "[")
    for i in range(count):
        if i:
            out.append(", ")
        if is_obj:
            koff, klen = struct.unpack_from("<IH", buf, pos + _HEADER + i * _KEY_ENTRY)
            if koff + klen > size:
                raise CaptureError(f"binary JSON key {i} lies outside its object")
            out.append(quote_string(buf[pos + koff : pos + koff + klen]))
            out.append(": ")
        entry = entries + i * _VALUE_ENTRY
        vcode = buf[entry]
        if vcode == LITERAL:
            _render(LITERAL, buf, entry + 1, out, depth + 1)
            continue
        voff = _U32.unpack_from(buf, entry + 1)[0]
        if voff >= size:
            raise CaptureError(f"binary JSON value {i} lies outside its container")
        # Bound the child to its container so a bad offset cannot read a sibling's bytes.
        child = buf[: pos + size]
        vsize = json_value_size(vcode, child, pos + voff)
        if pos + voff + vsize > pos + size:
            raise CaptureError(f"binary JSON value {i} lies outside its container")
        _render(vcode, child, pos + voff, out, depth + 1)
    out.append("}" if is_obj else "]")


def format_json_double(value: float) -> str:
    """TiDB ``marshalFloat64To``: shortest digits, ``.0`` when integral, ``1e15``/``1e-16`` style."""
    if math.isnan(value) or math.isinf(value):
        raise CaptureError(f"binary JSON holds {value!r}, which has no JSON text")
    neg, digits, dp = shortest_digits(value)
    sign = "-" if neg else ""
    if not digits:
        return sign + "0.0"
    magnitude = abs(value)
    if magnitude < 1e-15 or magnitude >= 1e15:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{dp - 1}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= len(digits):
        return f"{sign}{digits}{'0' * (dp - len(digits))}.0"
    return f"{sign}{digits[:dp]}.{digits[dp:]}"


# Go encoding/json's escaping as TiDB copied it (jsonMarshalStringTo): short forms for
# \" \\ \n \r \t \b \f, \u00XX for other controls, no HTML escaping, U+2028/9 escaped,
# invalid UTF-8 bytes become \ufffd.
_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0C: "\\f"})
_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


def _replace_each_byte(exc: UnicodeError) -> tuple[str, int]:
    # Go's utf8.DecodeRune consumes one byte per invalid sequence: one U+FFFD per bad byte.
    assert isinstance(exc, UnicodeDecodeError)
    return "\ufffd" * (exc.end - exc.start), exc.end


codecs.register_error("changefeed-go-replace", _replace_each_byte)


def quote_string(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="changefeed-go-replace")
    return '"' + text.translate(_ESCAPES) + '"'
