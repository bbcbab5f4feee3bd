"""Pure decoders for the binary value formats of ROWS events (MySQL ``field.cc``, ``my_time.cc``, ``decimal.c``).

Each ``*_text`` function returns the model's text for a temporal value (`changefeed.model.values`).
They are small and pure so they can be tested on hand-built bytes; the row decoder calls them
through per-column closures.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from decimal import Decimal

from ...model.values import format_date, format_datetime, format_time

# ------------------------------------------------------------------ bitmaps


def bits_set(bitmap: bytes) -> int:
    """Number of 1 bits (the null bitmap of a row is sized by the present columns, not all columns)."""
    return int.from_bytes(bitmap, "little").bit_count()


def bitmap_indexes(bitmap: bytes, n: int) -> list[int]:
    """Indexes of the set bits among the first ``n``; bit i is byte i//8, bit i%8 (LSB first)."""
    value = int.from_bytes(bitmap, "little")
    return [i for i in range(n) if value >> i & 1]


def msb_bitmap_flags(data: bytes, n: int) -> list[bool]:
    """``n`` flags from an MSB-first bitmap (TABLE_MAP signedness and visibility metadata)."""
    return [bool(data[i >> 3] & (0x80 >> (i & 7))) for i in range(n)]


# ------------------------------------------------------------------ DECIMAL

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_DIGITS_PER_WORD = 9


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a DECIMAL(precision, scale) value: 4 per 9 digits plus the leftover digits."""
    intg = precision - scale
    return (
        intg // _DIGITS_PER_WORD * 4
        + _DIG2BYTES[intg % _DIGITS_PER_WORD]
        + scale // _DIGITS_PER_WORD * 4
        + _DIG2BYTES[scale % _DIGITS_PER_WORD]
    )


def decode_decimal(data: bytes, precision: int, scale: int) -> Decimal:
    """MySQL's binary DECIMAL (``bin2decimal``): big-endian base-10**9 words, sign in the top bit.

    Positive values have the top bit set; negative values are stored with every byte inverted.
    Built through a string so Decimal keeps all 65 digits and exactly ``scale`` fraction digits.
    """
    intg = precision - scale
    intg0, intg0x = divmod(intg, _DIGITS_PER_WORD)
    frac0, frac0x = divmod(scale, _DIGITS_PER_WORD)
    negative = not data[0] & 0x80
    raw = bytearray(data)
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    pos = 0
    size = _DIG2BYTES[intg0x]
    int_part = int.from_bytes(raw[pos : pos + size], "big") if size else 0
    pos += size
    for _ in range(intg0):
        int_part = int_part * 1_000_000_000 + int.from_bytes(raw[pos : pos + 4], "big")
        pos += 4
    frac_text = ""
    for _ in range(frac0):
        frac_text += f"{int.from_bytes(raw[pos : pos + 4], 'big'):09d}"
        pos += 4
    size = _DIG2BYTES[frac0x]
    if size:
        frac_text += f"{int.from_bytes(raw[pos : pos + size], 'big'):0{frac0x}d}"
    text = ("-" if negative else "") + str(int_part)
    if scale:
        text += "." + frac_text
    return Decimal(text)


def decimal_reader(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    """A `decode_decimal` specialised to one column: the word layout is worked out once.

    The value is read as one big-endian integer; each base-10**9 word is then a fixed bit
    field, so decoding is a few shifts and multiplications per value.
    """
    intg = precision - scale
    intg0, intg0x = divmod(intg, _DIGITS_PER_WORD)
    frac0, frac0x = divmod(scale, _DIGITS_PER_WORD)
    # (bytes, decimal digits) of each field, most significant first
    int_fields = ([(_DIG2BYTES[intg0x], intg0x)] if intg0x else []) + [(4, 9)] * intg0
    frac_fields = [(4, 9)] * frac0 + ([(_DIG2BYTES[frac0x], frac0x)] if frac0x else [])
    size = sum(b for b, _ in int_fields + frac_fields)
    top = 1 << (8 * size - 1)
    ones = (1 << (8 * size)) - 1

    def plan(fields: list[tuple[int, int]], end_shift: int) -> list[tuple[int, int, int]]:
        out = []
        shift = end_shift
        mult = 1
        for nbytes, digits in reversed(fields):
            out.append((shift, (1 << (8 * nbytes)) - 1, mult))
            shift += 8 * nbytes
            mult *= 10**digits
        return out

    frac_bits = sum(8 * b for b, _ in frac_fields)
    int_plan = plan(int_fields, frac_bits)
    frac_plan = plan(frac_fields, 0)
    frac_format = f"0{scale}d"

    def read(data: bytes) -> Decimal:
        value = int.from_bytes(data, "big")
        negative = not value & top
        if negative:
            value ^= ones
        value ^= top
        int_part = 0
        for shift, mask, mult in int_plan:
            int_part += (value >> shift & mask) * mult
        if not scale:
            return Decimal(-int_part if negative else int_part)
        frac = 0
        for shift, mask, mult in frac_plan:
            frac += (value >> shift & mask) * mult
        return Decimal(f"{'-' if negative else ''}{int_part}.{frac:{frac_format}}")

    read.size = size  # type: ignore[attr-defined]
    return read


# ------------------------------------------------------------------ temporal

_FRAC_BYTES = (0, 1, 1, 2, 2, 3, 3)
_FRAC_SCALE = (1, 10000, 10000, 100, 100, 1, 1)  # stored fraction -> microseconds


def frac_bytes(fsp: int) -> int:
    """Bytes of the fractional part of TIME2/DATETIME2/TIMESTAMP2 (``my_datetime_binary_length``)."""
    return _FRAC_BYTES[fsp]


def date_text(value: int) -> str:
    """DATE: 3 bytes little-endian, ``year << 9 | month << 5 | day`` (``Field_newdate``)."""
    return format_date(value >> 9, (value >> 5) & 15, value & 31)


def datetime2_text(data: bytes, fsp: int) -> str:
    """DATETIME2: 5 big-endian bytes offset by 2**39 (sign bit), then the fraction (``my_datetime_packed_from_binary``).

    Layout of the 40 bits: sign(1) year*13+month(17) day(5) hour(5) minute(6) second(6).
    """
    packed = int.from_bytes(data[:5], "big") - 0x8000000000
    fb = _FRAC_BYTES[fsp]
    micro = int.from_bytes(data[5 : 5 + fb], "big") * _FRAC_SCALE[fsp] if fb else 0
    ymd = packed >> 17
    ym = ymd >> 5
    hms = packed & 0x1FFFF
    return format_datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, micro, fsp)


def time2_text(data: bytes, fsp: int) -> str:
    """TIME2: 3 big-endian bytes + fraction, the whole offset so it sorts as unsigned (``my_time_packed_from_binary``).

    Reading integer and fraction as one number and taking its absolute value gives MySQL's own
    borrow rule for negative times with a fraction.
    """
    fb = _FRAC_BYTES[fsp]
    value = int.from_bytes(data[: 3 + fb], "big") - (0x800000 << (8 * fb))
    negative = value < 0
    value = -value if negative else value
    hms = value >> (8 * fb)
    micro = (value & ((1 << (8 * fb)) - 1)) * _FRAC_SCALE[fsp] if fb else 0
    return format_time(negative, (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63, micro, fsp)


def timestamp2_parts(data: bytes, fsp: int) -> tuple[int, int]:
    """TIMESTAMP2: big-endian seconds since the epoch, then the fraction -> (seconds, microseconds)."""
    fb = _FRAC_BYTES[fsp]
    seconds = int.from_bytes(data[:4], "big")
    micro = int.from_bytes(data[4 : 4 + fb], "big") * _FRAC_SCALE[fsp] if fb else 0
    return seconds, micro


def timestamp_text(seconds: int, micro: int, fsp: int, tz: tzinfo = UTC) -> str:
    """A TIMESTAMP in ``tz``; 0 is MySQL's zero timestamp ``0000-00-00 00:00:00``."""
    if seconds == 0 and micro == 0:
        return format_datetime(0, 0, 0, 0, 0, 0, 0, fsp)
    dt = datetime.fromtimestamp(seconds, tz)
    return format_datetime(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, micro, fsp)


def old_time_text(value: int) -> str:
    """Pre-5.6 TIME: signed 3-byte integer ``HHMMSS`` (``Field_time``)."""
    negative = value < 0
    value = -value if negative else value
    return format_time(negative, value // 10000, value // 100 % 100, value % 100, 0, 0)


def old_datetime_text(value: int) -> str:
    """Pre-5.6 DATETIME: 8-byte integer ``YYYYMMDDhhmmss`` (``Field_datetime``)."""
    date, time = divmod(value, 1_000_000)
    return format_datetime(
        date // 10000, date // 100 % 100, date % 100, time // 10000, time // 100 % 100, time % 100, 0, 0
    )


def packed_time_text(packed: int, fsp: int) -> str:
    """A TIME in MySQL's in-memory packed form (``TIME_from_longlong_time_packed``), as JSON opaque values hold."""
    negative = packed < 0
    packed = -packed if negative else packed
    hms = packed >> 24
    return format_time(negative, (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63, packed & 0xFFFFFF, fsp)


def packed_datetime_text(packed: int, fsp: int, date_only: bool = False) -> str:
    """A DATETIME/DATE in MySQL's packed form (``TIME_from_longlong_datetime_packed``)."""
    if packed < 0:
        packed = -packed
    micro = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    ym = ymd >> 5
    hms = ymdhms & 0x1FFFF
    if date_only:
        return format_date(ym // 13, ym % 13, ymd & 31)
    return format_datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, micro, fsp)
