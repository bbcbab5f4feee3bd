"""Row images of WRITE/UPDATE/DELETE_ROWS events, decoded by a per-table compiled plan.

For each TABLE_MAP we build, once, one small reader per column (no per-value type dispatch) and,
per (present bitmap, null bitmap) pattern of a row, a *plan*: runs of fixed-width numeric columns
merged into one ``struct`` unpack, NULL/absent runs merged into one constant, and the remaining
columns' readers. Patterns repeat, so plans are cached; the row loop only runs the plan's steps.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, date, timedelta, tzinfo
from functools import lru_cache
from typing import Any

from ...errors import CaptureError
from ...model.values import ABSENT
from .charsets import BINARY_COLLATION_ID, collation_info, decoder_for
from .constants import ColumnType, RowsKind
from .decoders import (
    date_text,
    decimal_reader,
    decimal_size,
    frac_bytes,
    old_datetime_text,
    old_time_text,
    time2_text,
    timestamp_text,
)
from .jsonb import jsonb_to_text
from .tablemap import ColumnMeta, TableMap, read_lenenc

Step = Callable[[bytes, int, list], int]
"""Reads one or more values at ``pos`` into ``out`` and returns the next position."""

_MAX_PLANS = 1024

# (signed, unsigned) struct codes of the fixed-width numeric types; values need no conversion.
_STRUCT_CODES: dict[int, tuple[str, str]] = {
    ColumnType.TINY: ("b", "B"),
    ColumnType.SHORT: ("h", "H"),
    ColumnType.LONG: ("i", "I"),
    ColumnType.LONGLONG: ("q", "Q"),
    ColumnType.FLOAT: ("f", "f"),  # 'f' yields the exact float32 value the model wants
    ColumnType.DOUBLE: ("d", "d"),
}


class RowDecoder:
    """Decodes the row images of one table map; built once per table-map signature."""

    def __init__(
        self,
        table_map: TableMap,
        tz: tzinfo = UTC,
        collations: dict[int, tuple[str, str]] | None = None,
    ) -> None:
        self.table_map = table_map
        self.width = len(table_map.columns)
        self._items: list[str | Step] = [_column_reader(c, tz, collations) for c in table_map.columns]
        self._plans: dict[tuple[int, bytes], list[Step]] = {}

    def decode(self, data: bytes, pos: int, end: int, kind: RowsKind, version: int) -> list[Any]:
        """Rows of a ROWS event body from the column count on.

        Returns new images (insert), old images (delete) or (old, new) pairs (update); each
        image is a tuple over all columns with ``ABSENT`` for columns not in the image.
        """
        count, pos = read_lenenc(data, pos)
        if count != self.width:
            raise ValueError(f"ROWS event has {count} columns, its TABLE_MAP {self.width}")
        mlen = (count + 7) // 8
        present1 = int.from_bytes(data[pos : pos + mlen], "little")
        pos += mlen
        present2 = present1
        update = kind is RowsKind.UPDATE
        if update and version > 0:  # v0 UPDATE has one bitmap for both images
            present2 = int.from_bytes(data[pos : pos + mlen], "little")
            pos += mlen
        if present1 == 0 or present2 == 0:
            # Zero bytes per row: the loop below would never reach the end (found by fuzzing: a hang
            # filling memory). The columnar reader refuses the same (arrow.py, _make_walker).
            raise ValueError("a row image without columns")
        nlen1 = (present1.bit_count() + 7) // 8
        nlen2 = (present2.bit_count() + 7) // 8
        plans = self._plans
        plan_for = self._plan
        rows: list[Any] = []
        append = rows.append
        while pos < end:
            nulls = data[pos : pos + nlen1]
            pos += nlen1
            plan = plans.get((present1, nulls)) or plan_for(present1, nulls)
            out: list[Any] = []
            for step in plan:
                pos = step(data, pos, out)
            if update:
                nulls = data[pos : pos + nlen2]
                pos += nlen2
                plan = plans.get((present2, nulls)) or plan_for(present2, nulls)
                new: list[Any] = []
                for step in plan:
                    pos = step(data, pos, new)
                append((tuple(out), tuple(new)))
            else:
                append(tuple(out))
        if pos != end:
            raise ValueError(f"row data overruns the event by {pos - end} bytes")
        return rows

    def _plan(self, present: int, null_bitmap: bytes) -> list[Step]:
        """Compile the steps for one (present, null) pattern: merge struct runs and constant runs."""
        nulls = int.from_bytes(null_bitmap, "little")
        steps: list[Step] = []
        fmt = ""
        consts: list[Any] = []
        nth_present = 0

        def flush() -> None:
            nonlocal fmt, consts
            if fmt:
                steps.append(_struct_step("<" + fmt))
                fmt = ""
            if consts:
                steps.append(_const_step(tuple(consts)))
                consts = []

        for i, item in enumerate(self._items):
            if not present >> i & 1:
                if fmt:
                    flush()
                consts.append(ABSENT)
                continue
            is_null = nulls >> nth_present & 1
            nth_present += 1
            if is_null:
                if fmt:
                    flush()
                consts.append(None)
            elif isinstance(item, str):
                if consts:
                    flush()
                fmt += item
            else:
                flush()
                steps.append(item)
        flush()
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[(present, null_bitmap)] = steps
        return steps


def _struct_step(fmt: str) -> Step:
    unpack = struct.Struct(fmt).unpack_from
    size = struct.calcsize(fmt)

    def step(buf: bytes, pos: int, out: list) -> int:
        out.extend(unpack(buf, pos))
        return pos + size

    return step


def _const_step(values: tuple[Any, ...]) -> Step:
    def step(buf: bytes, pos: int, out: list) -> int:
        out.extend(values)
        return pos

    return step


def column_charset(col: ColumnMeta, collations: dict[int, tuple[str, str]] | None) -> tuple[str, str]:
    """(charset, collation) of a string column; ``binary`` when the binlog carries no charset."""
    if col.collation_id is None:
        return ("binary", "binary")
    return collation_info(col.collation_id, collations)


def _column_reader(col: ColumnMeta, tz: tzinfo, collations: dict[int, tuple[str, str]] | None) -> str | Step:  # noqa: C901  (per-type switch: one reader per MySQL binlog column type)
    """A struct code (fixed-width numbers) or a step reading one value of this column."""
    tp = col.real_type
    unsigned = bool(col.unsigned)
    codes = _STRUCT_CODES.get(tp)
    if codes is not None:
        return codes[unsigned]
    if tp == ColumnType.INT24:
        signed = not unsigned

        def int24(buf: bytes, pos: int, out: list) -> int:
            out.append(int.from_bytes(buf[pos : pos + 3], "little", signed=signed))
            return pos + 3

        return int24
    if tp == ColumnType.YEAR:

        def year(buf: bytes, pos: int, out: list) -> int:
            v = buf[pos]
            out.append(v + 1900 if v else 0)
            return pos + 1

        return year
    if tp == ColumnType.NEWDECIMAL:
        read_decimal = decimal_reader(col.precision, col.scale)
        size = decimal_size(col.precision, col.scale)

        def newdecimal(buf: bytes, pos: int, out: list) -> int:
            out.append(read_decimal(buf[pos : pos + size]))
            return pos + size

        return newdecimal
    if tp in (ColumnType.DATE, ColumnType.NEWDATE):

        def date(buf: bytes, pos: int, out: list) -> int:
            out.append(date_text(buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16))
            return pos + 3

        return date
    if tp == ColumnType.DATETIME2:
        return _datetime2_reader(col.meta)
    if tp == ColumnType.TIME2:
        fsp = col.meta
        size = 3 + frac_bytes(fsp)

        def time2(buf: bytes, pos: int, out: list) -> int:
            out.append(time2_text(buf[pos : pos + size], fsp))
            return pos + size

        return time2
    if tp == ColumnType.TIMESTAMP2:
        return _timestamp2_reader(col.meta, tz)
    if tp == ColumnType.TIMESTAMP:

        def timestamp(buf: bytes, pos: int, out: list) -> int:
            out.append(timestamp_text(int.from_bytes(buf[pos : pos + 4], "little"), 0, 0, tz))
            return pos + 4

        return timestamp
    if tp == ColumnType.DATETIME:

        def datetime_(buf: bytes, pos: int, out: list) -> int:
            out.append(old_datetime_text(int.from_bytes(buf[pos : pos + 8], "little")))
            return pos + 8

        return datetime_
    if tp == ColumnType.TIME:

        def time_(buf: bytes, pos: int, out: list) -> int:
            out.append(old_time_text(int.from_bytes(buf[pos : pos + 3], "little", signed=True)))
            return pos + 3

        return time_
    if tp == ColumnType.BIT:
        nbytes = (col.length + 7) // 8

        def bit(buf: bytes, pos: int, out: list) -> int:
            out.append(int.from_bytes(buf[pos : pos + nbytes], "big"))
            return pos + nbytes

        return bit
    if tp in (ColumnType.ENUM, ColumnType.SET):
        nbytes = col.length
        if nbytes in (1, 2, 4, 8):
            return {1: "B", 2: "H", 4: "I", 8: "Q"}[nbytes]

        def enum_set(buf: bytes, pos: int, out: list) -> int:
            out.append(int.from_bytes(buf[pos : pos + nbytes], "little"))
            return pos + nbytes

        return enum_set
    if tp == ColumnType.JSON:
        lb = col.meta

        def json_(buf: bytes, pos: int, out: list) -> int:
            n = int.from_bytes(buf[pos : pos + lb], "little")
            pos += lb
            out.append(jsonb_to_text(buf[pos : pos + n]))
            return pos + n

        return json_
    if tp == ColumnType.GEOMETRY:
        return _blob_reader(col.meta, None)
    if tp in (ColumnType.TINY_BLOB, ColumnType.BLOB, ColumnType.MEDIUM_BLOB, ColumnType.LONG_BLOB):
        return _blob_reader(col.meta, decoder_for(column_charset(col, collations)[0]))
    if tp in (ColumnType.VARCHAR, ColumnType.VAR_STRING, ColumnType.STRING):
        decode = decoder_for(column_charset(col, collations)[0])
        lb = 1 if col.length < 256 else 2
        pad = col.length if tp == ColumnType.STRING and col.collation_id == BINARY_COLLATION_ID else 0
        return _string_reader(lb, decode, pad)
    raise CaptureError(f"column {col.name or col.index + 1}: binlog type {tp} cannot be decoded")


def _fraction_format(fsp: int) -> tuple[str, int, int]:
    """(format, stored-fraction multiplier, divisor) giving ``.`` + exactly ``fsp`` digits, truncated."""
    if not fsp:
        return "", 0, 1
    return f".%0{fsp}d", _FRAC_SCALE[fsp], 10 ** (6 - fsp)


_FRAC_SCALE = (1, 10000, 10000, 100, 100, 1, 1)


def _datetime2_reader(fsp: int) -> Step:
    """DATETIME2 straight to text (same result as `decoders.datetime2_text`, without the calls)."""
    fb = frac_bytes(fsp)
    size = 5 + fb
    frac_fmt, scale, div = _fraction_format(fsp)
    fmt = "%04d-%02d-%02d %02d:%02d:%02d" + frac_fmt

    def datetime2(buf: bytes, pos: int, out: list) -> int:
        packed = int.from_bytes(buf[pos : pos + 5], "big") - 0x8000000000
        ymd = packed >> 17
        ym = ymd >> 5
        hms = packed & 0x1FFFF
        parts: tuple[int, ...] = (ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63)
        if fb:
            parts += (int.from_bytes(buf[pos + 5 : pos + size], "big") * scale // div,)
        out.append(fmt % parts)
        return pos + size

    return datetime2


def _timestamp2_reader(fsp: int, tz: tzinfo) -> Step:
    """TIMESTAMP2 to text in ``tz``; UTC days are cached, other zones go through datetime."""
    fb = frac_bytes(fsp)
    size = 4 + fb
    frac_fmt, scale, div = _fraction_format(fsp)
    zero = "0000-00-00 00:00:00" + (frac_fmt % 0 if fsp else "")
    utc = tz is UTC

    def timestamp2(buf: bytes, pos: int, out: list) -> int:
        seconds = int.from_bytes(buf[pos : pos + 4], "big")
        micro = int.from_bytes(buf[pos + 4 : pos + size], "big") * scale if fb else 0
        if not seconds and not micro:
            out.append(zero)
        elif utc:
            days, secs = divmod(seconds, 86400)
            text = f"{_utc_day(days)} {secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
            out.append(text + frac_fmt % (micro // div) if fb else text)
        else:
            out.append(timestamp_text(seconds, micro, fsp, tz))
        return pos + size

    return timestamp2


@lru_cache(maxsize=4096)
def _utc_day(days: int) -> str:
    return (_EPOCH + timedelta(days=days)).isoformat()


_EPOCH = date(1970, 1, 1)


def _blob_reader(lb: int, decode: Callable[[bytes], str] | None) -> Step:
    if decode is None:

        def blob(buf: bytes, pos: int, out: list) -> int:
            n = int.from_bytes(buf[pos : pos + lb], "little")
            pos += lb
            out.append(buf[pos : pos + n])
            return pos + n

        return blob

    def text(buf: bytes, pos: int, out: list) -> int:
        n = int.from_bytes(buf[pos : pos + lb], "little")
        pos += lb
        out.append(decode(buf[pos : pos + n]))
        return pos + n

    return text


def _string_reader(lb: int, decode: Callable[[bytes], str] | None, pad: int) -> Step:
    if lb == 1:
        if decode is None:
            if pad:
                # BINARY(n): the binlog may drop trailing 0x00; the column value is always n bytes.
                def binary_char(buf: bytes, pos: int, out: list) -> int:
                    end = pos + 1 + buf[pos]
                    out.append(buf[pos + 1 : end].ljust(pad, b"\0"))
                    return end

                return binary_char

            def varbinary(buf: bytes, pos: int, out: list) -> int:
                end = pos + 1 + buf[pos]
                out.append(buf[pos + 1 : end])
                return end

            return varbinary

        def varchar(buf: bytes, pos: int, out: list) -> int:
            end = pos + 1 + buf[pos]
            out.append(decode(buf[pos + 1 : end]))
            return end

        return varchar

    def long_string(buf: bytes, pos: int, out: list) -> int:
        end = pos + 2 + (buf[pos] | buf[pos + 1] << 8)
        raw = buf[pos + 2 : end]
        if decode is None:
            out.append(raw.ljust(pad, b"\0") if pad else raw)
        else:
            out.append(decode(raw))
        return end

    return long_string


__all__ = ["RowDecoder", "column_charset"]
