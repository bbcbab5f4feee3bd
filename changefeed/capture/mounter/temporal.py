"""Packed times, durations and the TIMESTAMP time zone (TiDB ``CoreTime``/``Duration``; spec §6.3).

Values stay text (the model's representation) because MySQL dates include zero dates and day 0.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ...errors import CaptureError, ConfigError
from ...model.values import format_date, format_datetime, format_time

_NANOS_PER_SECOND = 1_000_000_000
_OFFSET = re.compile(r"^([+-])(\d{1,2}):(\d{2})$")


def resolve_time_zone(name: str | None) -> tzinfo | None:
    """``UTC`` (None: no conversion), an IANA name, or a fixed ``+HH:MM`` offset."""
    if name is None or name.upper() in ("UTC", "Z", "+00:00", "-00:00"):
        return None
    m = _OFFSET.match(name)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3))
        if hours > 14 or minutes > 59:
            raise ConfigError(f"time zone offset {name!r} out of range")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if m.group(1) == "-" else delta)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r} (use an IANA name like Asia/Shanghai, or +08:00)") from None


def unpack_time(packed: int) -> tuple[int, int, int, int, int, int, int]:
    """``CoreTime.FromPackedUint``: ((ymd << 17 | hms) << 24) | microsecond, ymd = (y*13+m) << 5 | d."""
    micro = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    hms = ymdhms & 0x1FFFF
    day = ymd & 0x1F
    ym = ymd >> 5
    year, month = divmod(ym, 13)
    hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
    if year > 9999 or month > 12 or hour > 23 or minute > 59 or second > 59 or micro > 999_999:
        raise CaptureError(f"packed time {packed:#x} holds an impossible date/time")
    return year, month, day, hour, minute, second, micro


# Rendering caches: a stream holds few distinct dates and clock times, so text for the date part
# (y/m/d) and the clock part (h:m:s) is built once. Bounded: cleared when full.
_CACHE_LIMIT = 1 << 16
_DATES: dict[int, str] = {}
_CLOCKS: dict[int, str] = {}
_FRAC_DIV = (1_000_000, 100_000, 10_000, 1_000, 100, 10, 1)
_FRAC_POW = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)  # a leading 1 keeps the zeros
_TWO_DIGITS = tuple(f"{i:02d}" for i in range(60))


def _date_part(ymd: int) -> str:
    text = _DATES.get(ymd)
    if text is None:
        year, month = divmod(ymd >> 5, 13)
        if year > 9999 or month > 12:
            raise CaptureError(f"packed time holds an impossible date ({year}-{month})")
        text = format_date(year, month, ymd & 0x1F)
        if len(_DATES) >= _CACHE_LIMIT:
            _DATES.clear()
        _DATES[ymd] = text
    return text


def _clock_part(hms: int) -> str:
    text = _CLOCKS.get(hms)
    if text is None:
        hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
        if hour > 23 or minute > 59 or second > 59:
            raise CaptureError(f"packed time holds an impossible time ({hour}:{minute}:{second})")
        text = f"{hour:02d}:{minute:02d}:{second:02d}"
        _CLOCKS[hms] = text  # at most 2**17 keys
    return text


def _fraction(micro: int, fsp: int) -> str:
    if micro > 999_999:
        raise CaptureError(f"packed time holds {micro} microseconds")
    return f".{micro // _FRAC_DIV[fsp]:0{fsp}d}" if fsp else ""


def date_text(packed: int) -> str:
    """DATE: ``YYYY-MM-DD`` (TiDB ``Time.String()`` of a date)."""
    return _DATES.get(packed >> 41) or _date_part(packed >> 41)


def datetime_text(packed: int, fsp: int) -> str:
    """DATETIME/TIMESTAMP as stored: ``YYYY-MM-DD HH:MM:SS`` plus exactly ``fsp`` fraction digits."""
    ymdhms = packed >> 24
    date = _DATES.get(ymdhms >> 17) or _date_part(ymdhms >> 17)
    clock = _CLOCKS.get(ymdhms & 0x1FFFF) or _clock_part(ymdhms & 0x1FFFF)
    micro = packed & 0xFFFFFF
    if micro > 999_999:
        raise CaptureError(f"packed time holds {micro} microseconds")
    if fsp:  # "." + the first fsp digits of the 6-digit microseconds
        return date + " " + clock + "." + str(_FRAC_POW[fsp] + micro // _FRAC_DIV[fsp])[1:]
    return date + " " + clock


class ZoneConverter:
    """UTC packed time -> local text prefix, cached per UTC minute (offsets are whole minutes).

    TIMESTAMP is stored in UTC; TiCDC converts it to the changefeed zone (zero values excepted).
    Zones with sub-minute offsets (historical LMT) take the uncached path.
    """

    __slots__ = ("_minutes", "tz")

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self._minutes: dict[int, str | None] = {}

    def text(self, packed: int, fsp: int) -> str:
        prefix: str | Literal[False] | None = self._minutes.get(packed >> 30, False)  # key: date, hour, minute
        if prefix is False:
            prefix = self.prefix(packed)
        if prefix is None:
            if packed >> 41 == 0:
                return datetime_text(packed, fsp)  # the zero date is not converted
            return self._convert(packed, fsp)
        second = (packed >> 24) & 0x3F
        micro = packed & 0xFFFFFF
        if second > 59 or micro > 999_999:
            raise CaptureError(f"packed time {packed:#x} holds an impossible time")
        if fsp:
            return prefix + _TWO_DIGITS[second] + "." + str(_FRAC_POW[fsp] + micro // _FRAC_DIV[fsp])[1:]
        return prefix + _TWO_DIGITS[second]

    def prefix(self, packed: int) -> str | None:
        """The local ``YYYY-MM-DD HH:MM:`` of the UTC minute of ``packed`` (cached); None: no shared prefix."""
        prefix: str | Literal[False] | None = self._minutes.get(packed >> 30, False)
        if prefix is False:
            prefix = self._prefix(packed)
            if len(self._minutes) >= _CACHE_LIMIT:
                self._minutes.clear()
            self._minutes[packed >> 30] = prefix
        return prefix

    def _prefix(self, packed: int) -> str | None:
        if packed >> 41 == 0:
            return None  # the zero date is not converted
        local = self._local(packed)
        if local.second != (packed >> 24) & 0x3F:
            return None  # a sub-minute offset
        return f"{format_date(local.year, local.month, local.day)} {local.hour:02d}:{local.minute:02d}:"

    def _local(self, packed: int) -> datetime:
        y, mo, d, h, mi, s, us = unpack_time(packed)
        try:
            return datetime(y, mo, d, h, mi, s, us, tzinfo=UTC).astimezone(self.tz)
        except (ValueError, OverflowError):
            raise CaptureError(f"TIMESTAMP {format_datetime(y, mo, d, h, mi, s, us, 6)} cannot be converted") from None

    def _convert(self, packed: int, fsp: int) -> str:
        t = self._local(packed)
        return format_datetime(t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond, fsp)


def timestamp_text(packed: int, fsp: int, tz: tzinfo | None) -> str:
    """TIMESTAMP (stored in UTC) in zone ``tz`` (None: UTC); uncached, for one-off use."""
    if tz is None:
        return datetime_text(packed, fsp)
    return ZoneConverter(tz).text(packed, fsp)


def duration_text(nanos: int, fsp: int) -> str:
    """``Duration.String()``: ``[-]HH:MM:SS[.f*fsp]`` from int64 nanoseconds."""
    negative = nanos < 0
    seconds, frac = divmod(-nanos if negative else nanos, _NANOS_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return format_time(negative, hour, minute, second, frac // 1000, fsp)


_DATETIME_TEXT = re.compile(r"^(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{0,9}))?)?$")
_TIME_TEXT = re.compile(r"^(-)?(\d{1,3}):(\d{1,2}):(\d{1,2})(?:\.(\d{0,9}))?$")


def parse_datetime_text(text: str) -> tuple[int, int, int, int, int, int, int]:
    """Read TiDB's ``Time.String()`` text (origin defaults in table info) into its fields."""
    m = _DATETIME_TEXT.match(text.strip())
    if not m:
        raise ValueError(f"not a date/time: {text!r}")
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    h, mi, s = (int(m.group(i)) if m.group(i) else 0 for i in (4, 5, 6))
    us = int((m.group(7) or "").ljust(6, "0")[:6])
    return y, mo, d, h, mi, s, us


def utc_to_zone(
    fields: tuple[int, int, int, int, int, int, int], tz: tzinfo | None
) -> tuple[int, int, int, int, int, int, int]:
    if tz is None or not any(fields[:3]):
        return fields
    local = datetime(*fields, tzinfo=UTC).astimezone(tz)
    return local.year, local.month, local.day, local.hour, local.minute, local.second, local.microsecond


def parse_duration_text(text: str) -> int:
    """Read ``[-]HH:MM:SS[.f]`` into int64 nanoseconds."""
    m = _TIME_TEXT.match(text.strip())
    if not m:
        raise ValueError(f"not a time: {text!r}")
    h, mi, s = int(m.group(2)), int(m.group(3)), int(m.group(4))
    frac = int((m.group(5) or "").ljust(9, "0")[:9])
    nanos = ((h * 60 + mi) * 60 + s) * _NANOS_PER_SECOND + frac
    return -nanos if m.group(1) else nanos
