"""TiDB's memcomparable and datum primitives (``pkg/util/codec``; spec §6.1).

Every function reads from ``buf`` at ``pos`` and returns ``(value, next_pos)`` so callers can walk
a key or an old-format row without slicing. Malformed input raises `CaptureError` without a
``where``; the mounter adds the record's position.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Context, Decimal
from typing import cast

from ...errors import CaptureError

_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_SIGN = 1 << 63
_MASK64 = (1 << 64) - 1

# Datum flags: the first byte of every datum encoding (codec.NilFlag ... codec.MaxFlag).
NIL_FLAG = 0
BYTES_FLAG = 1
COMPACT_BYTES_FLAG = 2
INT_FLAG = 3
UINT_FLAG = 4
FLOAT_FLAG = 5
DECIMAL_FLAG = 6
DURATION_FLAG = 7
VARINT_FLAG = 8
UVARINT_FLAG = 9
JSON_FLAG = 10
VECTOR_FLOAT32_FLAG = 20
MAX_FLAG = 250

_GROUP = 8  # EncodeBytes group size
_MARKER = 0xFF


def _need(buf: bytes, pos: int, n: int, what: str) -> None:
    if pos + n > len(buf):
        raise CaptureError(f"truncated {what}: need {n} bytes at offset {pos}, have {max(len(buf) - pos, 0)}")


def decode_cmp_int(buf: bytes, pos: int) -> tuple[int, int]:
    """EncodeInt: 8-byte big-endian with the sign bit flipped, so byte order = numeric order."""
    _need(buf, pos, 8, "comparable int")
    u = _U64.unpack_from(buf, pos)[0] ^ _SIGN
    return (u - (1 << 64) if u & _SIGN else u), pos + 8


def decode_cmp_uint(buf: bytes, pos: int) -> tuple[int, int]:
    """EncodeUint: plain 8-byte big-endian."""
    _need(buf, pos, 8, "comparable uint")
    return _U64.unpack_from(buf, pos)[0], pos + 8


def cmp_float_from_bits(u: int) -> float:
    """Invert EncodeFloat on the 64 bits: set sign bit means non-negative, else all bits inverted."""
    u = u & ~_SIGN if u & _SIGN else ~u & _MASK64
    return struct.unpack(">d", u.to_bytes(8, "big"))[0]


def decode_cmp_float(buf: bytes, pos: int) -> tuple[float, int]:
    """EncodeFloat (keys, datums and row v2 cells alike)."""
    _need(buf, pos, 8, "comparable float")
    return cmp_float_from_bits(_U64.unpack_from(buf, pos)[0]), pos + 8


def decode_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    """Ascending EncodeBytes: 8-byte groups, each followed by marker ``0xFF - padding``."""
    out = bytearray()
    n = len(buf)
    while True:
        if pos + _GROUP + 1 > n:
            raise CaptureError(f"truncated memcomparable bytes at offset {pos}")
        marker = buf[pos + _GROUP]
        pad = _MARKER - marker
        if pad == 0:
            out += buf[pos : pos + _GROUP]
            pos += _GROUP + 1
            continue
        if pad > _GROUP:
            raise CaptureError(f"bad memcomparable bytes marker {marker:#04x} at offset {pos + _GROUP}")
        real = _GROUP - pad
        out += buf[pos : pos + real]
        # TiDB rejects a group whose padding bytes are not all zero.
        if any(buf[pos + real : pos + _GROUP]):
            raise CaptureError(f"bad memcomparable bytes padding at offset {pos + real}")
        return bytes(out), pos + _GROUP + 1


def decode_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Go ``binary.Uvarint``: LEB128, at most 10 bytes, value < 2**64."""
    result = 0
    shift = 0
    n = len(buf)
    start = pos
    while True:
        if pos >= n:
            raise CaptureError(f"truncated varint at offset {start}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > _MASK64:
                raise CaptureError(f"varint overflows 64 bits at offset {start}")
            return result, pos
        shift += 7
        if shift >= 70:
            raise CaptureError(f"varint longer than 10 bytes at offset {start}")


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Go ``binary.Varint``: zigzag over Uvarint."""
    ux, pos = decode_uvarint(buf, pos)
    x = ux >> 1
    return (~x if ux & 1 else x), pos


def decode_compact_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    """EncodeCompactBytes: zigzag varint length, then the bytes."""
    length, pos = decode_varint(buf, pos)
    if length < 0:
        raise CaptureError(f"negative compact bytes length {length} at offset {pos}")
    _need(buf, pos, length, "compact bytes")
    return buf[pos : pos + length], pos + length


# ---------------------------------------------------------------- MySQL binary decimal

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_DIGITS_PER_WORD = 9
_WORD_SIZE = 4
MAX_DECIMAL_PRECISION = 65
MAX_DECIMAL_SCALE = 30
_WIDE = Context(prec=MAX_DECIMAL_PRECISION + 5)


_DecimalReader = Callable[[bytes, int], tuple[Decimal, int]]
_READERS: dict[int, _DecimalReader] = {}


def _bad_group(value: int, digits: int) -> None:
    raise CaptureError(f"bad binary decimal: group value {value} has more than {digits} digits")


def _truncated(pos: int, size: int) -> None:
    raise CaptureError(f"truncated binary decimal: need {size} bytes at offset {pos}")


def _decimal_reader(precision: int, frac: int) -> _DecimalReader:
    """A reader for one (precision, frac), generated with the group arithmetic unrolled.

    The binary is read as one big-endian integer: flip the top bit, invert everything when the
    value is negative, then peel the 9-digit groups (``dig2bytes`` wide) off from the right.
    """
    if not (0 < precision <= MAX_DECIMAL_PRECISION and 0 <= frac <= MAX_DECIMAL_SCALE and frac <= precision):
        raise CaptureError(f"bad decimal precision/frac ({precision}, {frac})")
    intg = precision - frac
    groups: list[tuple[int, int]] = []  # (bytes, digits) left to right
    if intg % _DIGITS_PER_WORD:
        groups.append((_DIG2BYTES[intg % _DIGITS_PER_WORD], intg % _DIGITS_PER_WORD))
    groups += [(_WORD_SIZE, _DIGITS_PER_WORD)] * (intg // _DIGITS_PER_WORD + frac // _DIGITS_PER_WORD)
    if frac % _DIGITS_PER_WORD:
        groups.append((_DIG2BYTES[frac % _DIGITS_PER_WORD], frac % _DIGITS_PER_WORD))
    groups.reverse()  # from the right
    size = sum(b for b, _ in groups)
    sign = 1 << (8 * size - 1)
    lines = [
        f"end = pos + {size}",
        f"if end > len(buf): _truncated(pos, {size})",
        f"x = _int(buf[pos:end], 'big') ^ {sign}",
        "neg = buf[pos] < 128",  # sign bit clear: negative
        f"if neg: x ^= {(sign << 1) - 1}",
    ]
    for i, (nbytes, digits) in enumerate(groups):
        lines.append(f"g{i} = x & {(1 << (8 * nbytes)) - 1}")
        if i + 1 < len(groups):
            lines.append(f"x >>= {8 * nbytes}")
        lines.append(f"if g{i} >= {10**digits}: _bad_group(g{i}, {digits})")
    horner = f"g{len(groups) - 1}"
    for i in range(len(groups) - 2, -1, -1):
        horner = f"g{i} + {10 ** groups[i][1]} * ({horner})"
    # Exactly `frac` fraction digits; a wide context so 65 digits never round; no negative zero.
    lines += [f"u = {horner}", f"return _D(-u if neg else u).scaleb({-frac}, _WIDE), end"]
    env = {"_int": int.from_bytes, "_D": Decimal, "_WIDE": _WIDE, "_bad_group": _bad_group, "_truncated": _truncated}
    exec("def read(buf, pos):\n    " + "\n    ".join(lines) + "\n", env)  # integers and fixed names only
    reader = cast(_DecimalReader, env["read"])  # exec-generated above
    _READERS[precision << 8 | frac] = reader
    return reader


def decode_decimal_bin(buf: bytes, pos: int, precision: int, frac: int) -> tuple[Decimal, int]:
    """MySQL binary decimal (TiDB ``MyDecimal.FromBin``): 9-digit groups, sign in the top bit."""
    reader = _READERS.get(precision << 8 | frac) or _decimal_reader(precision, frac)
    return reader(buf, pos)


def decode_decimal_datum(buf: bytes, pos: int) -> tuple[tuple[Decimal, int, int], int]:
    """EncodeDecimal body: ``u8 precision, u8 frac`` then the binary decimal."""
    _need(buf, pos, 2, "decimal header")
    precision, frac = buf[pos], buf[pos + 1]
    value, pos = decode_decimal_bin(buf, pos + 2, precision, frac)
    return (value, precision, frac), pos
