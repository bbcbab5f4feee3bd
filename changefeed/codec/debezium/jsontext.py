"""JSON text as TiCDC's Debezium codec writes it: json-iterator, compact, EscapeHTML off.

Strings follow variant 3 of ``ticdc-protocols.md`` §0.6 (only ``"``, ``\\`` and controls escaped;
bytes >= 0x80 copied verbatim, no UTF-8 validation). Numbers follow the "JSON number" rule of
§0.5 (shortest digits, exponent only below 1e-6 or from 1e21).
"""

from __future__ import annotations

import math
import re

import orjson

from ...model.gofloat import format_json, to_float32
from ..textvalues import float32_text, float64_text

_SHORT_BF = re.compile(rb"\\\\|\\b|\\f")
_BF = {b"\\\\": b"\\\\", b"\\b": b"\\u0008", b"\\f": b"\\u000c"}
_SHORT = {0x22: b'\\"', 0x5C: b"\\\\", 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}
_F32_1E_6 = to_float32(1e-6)


def _bf(m: re.Match[bytes]) -> bytes:
    return _BF[m.group()]


def jstr(text: str) -> bytes:
    """A JSON string literal as json-iterator writes it (``\\b``/``\\f`` as ``\\u0008``/``\\u000c``)."""
    try:
        out = orjson.dumps(text)
    except orjson.JSONEncodeError:
        # Lone surrogates carry bytes that are not UTF-8: json-iterator copies such bytes as they are.
        return jbytes(text.encode("utf-8", "surrogateescape"))
    if b"\\b" in out or b"\\f" in out:
        return _SHORT_BF.sub(_bf, out)
    return out


def jbytes(raw: bytes) -> bytes:
    """A JSON string literal of raw bytes, escaped byte by byte (no UTF-8 validation)."""
    out = bytearray(b'"')
    for b in raw:
        if b in _SHORT:
            out += _SHORT[b]
        elif b < 0x20:
            out += b"\\u%04x" % b
        else:
            out.append(b)
    out += b'"'
    return bytes(out)


def jfloat64(v: float) -> bytes:
    """A float64 as a JSON number; NaN/±Inf as ``0`` (TiDB's mounter maps them to 0)."""
    a = abs(v)
    if a == 0 or 1e-6 <= a < 1e21:
        return float64_text(v).encode()
    if not math.isfinite(v):
        return b"0"
    return format_json(v).encode()


def jfloat32(v: float) -> bytes:
    """A float32 value as a JSON number with the shortest float32 digits."""
    a = abs(v)
    if a == 0 or _F32_1E_6 <= a < 1e21:
        return float32_text(v).encode()
    if not math.isfinite(v):
        return b"0"
    return format_json(v, float32=True).encode()
