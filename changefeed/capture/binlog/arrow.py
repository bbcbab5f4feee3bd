"""Row events straight to typed Arrow record batches, one table per batch: the Spark read path.

Why not RowChange: a Spark executor wants columns, and building one Python object per row (and one
per value) is most of the cost of the RowChange path. Here the per-row Python work is only a walk
that records where each row image starts and where its variable-length fields are; every value
is then decoded for all rows at once with numpy gathers over the event bytes.

How a batch is built (`ArrowBatchBuilder`): the row bodies of a table's ROWS events are appended
to one buffer. For each (event kind, present bitmap(s)) a small walker is generated once; per row
it reads the NULL bitmap, looks up how many bytes the non-NULL fixed-width fields of each segment
take (a segment ends at a variable-length field), and records the image start and the position of
each variable-length field. At `finish`, field positions follow from those anchors and the NULL
bits with a few vectorised sums, and each column has a vectorised converter (integers, floats,
DECIMAL up to 18 digits, DATE, DATETIME2, UTC TIMESTAMP2, UTF-8 and binary strings); the rest
(TIME, JSON, other charsets, wide DECIMAL, old temporal types) goes through the RowChange path's
own per-value readers, so both paths give the same values.

Columns: the table's columns in order (the new image; the old one for deletes), then ``op``
(``insert``/``update``/``delete``), ``commit_ts`` (int64, the same TSO as the RowChange path), then
``before_<column>`` for each column: the old image of updates, NULL for other rows. Types: the
model's (`changefeed.model.arrow.arrow_type`, one mapping for the project): integers of their
width and sign (TINYINT int8/uint8 ... BIGINT int64/uint64), YEAR int16, ENUM/SET/BIT uint64,
FLOAT float32, DOUBLE float64, DECIMAL decimal128/decimal256(p, s) or, with ``decimal="string"``,
TiDB's text, temporal and JSON as the model's text (zero dates kept), text string,
binary/GEOMETRY binary. Columns a row image does not carry (binlog_row_image=MINIMAL/NOBLOB) are
NULL here: the Arrow path needs FULL images to tell NULL from absent.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ...errors import CaptureError, ConfigError
from ...model.arrow import arrow_type as model_arrow_type
from ...model.events import DDLEvent
from ...model.jsonl import table_schema_to_json
from ...model.rowblock import TableRows
from ...model.schema import TableSchema
from ...model.values import decimal_text
from .capture import BinlogCapture
from .charsets import BINARY_COLLATION_ID, decoder_for
from .constants import ColumnType, RowsKind
from .decoders import decimal_reader, decimal_size, frac_bytes
from .events import RowsEvent
from .files import BinlogFileReader
from .filters import BlockAllowList
from .position import BinlogPosition, reached
from .rows import _column_reader, column_charset
from .schema import model_column
from .tablemap import BLOB_TYPES, ColumnMeta, TableMap, read_lenenc

log = logging.getLogger(__name__)

OPS = ("insert", "update", "delete")
_OP_CODE = {RowsKind.INSERT: 0, RowsKind.UPDATE: 1, RowsKind.DELETE: 2}
_PAD = 64  # zero bytes after the buffer: reads for NULL fields may run past the last row
_UTF8_CHARSETS = frozenset({"utf8mb4", "utf8mb3", "utf8", "ascii"})
_INT_SIZES = {ColumnType.TINY: 1, ColumnType.SHORT: 2, ColumnType.INT24: 3, ColumnType.LONG: 4, ColumnType.LONGLONG: 8}
_FRAC_SCALE = (1, 10000, 10000, 100, 100, 1, 1)  # stored fraction -> microseconds (my_time.cc)

Converter = Callable[["_Ctx", np.ndarray, np.ndarray, np.ndarray | None], pa.Array]
"""(context, field positions, valid mask, value lengths) -> the column's values for those rows.

A variable-length field's position is that of its length prefix, as the per-value readers expect."""


@dataclass(slots=True)
class _Ctx:
    """The finished buffer: a numpy view for gathers and, lazily, bytes for per-value readers."""

    buf: bytearray
    d: np.ndarray
    _raw: bytes | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = bytes(self.buf)
        return self._raw


@dataclass(slots=True)
class _ColumnPlan:
    index: int
    name: str
    type: pa.DataType
    size: int  # fixed width in bytes, or 0 for a variable-length field
    lb: int  # length-prefix bytes of a variable-length field
    convert: Converter


# ------------------------------------------------------------------ vectorised converters


def _gather(d: np.ndarray, pos: np.ndarray, size: int) -> np.ndarray:
    """(n, size) bytes starting at each position."""
    return d[pos[:, None] + np.arange(size)]


def _le(m: np.ndarray) -> np.ndarray:
    """Little-endian unsigned integers from an (n, k) byte matrix, as uint64."""
    out = np.zeros(len(m), np.uint64)
    for k in range(m.shape[1] - 1, -1, -1):
        out = (out << np.uint64(8)) | m[:, k].astype(np.uint64)
    return out


def _be(m: np.ndarray) -> np.ndarray:
    """Big-endian unsigned integers from an (n, k) byte matrix (k <= 8), as uint64."""
    out = np.zeros(len(m), np.uint64)
    for k in range(m.shape[1]):
        out = (out << np.uint64(8)) | m[:, k].astype(np.uint64)
    return out


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = int(len(valid) - np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _int_converter(size: int, signed: bool, typ: pa.DataType, year: bool = False) -> Converter:
    dtype = (
        {1: "i1", 2: "<i2", 4: "<i4", 8: "<i8"}.get(size)
        if signed
        else {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}.get(size)
    )

    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        m = _gather(ctx.d, pos, size)
        if dtype is not None:
            values = np.ascontiguousarray(m).view(dtype).reshape(len(pos))
        else:  # INT24
            values = _le(m).astype(np.int64)
            if signed:
                values = values - ((values & 0x800000) << 1)
        if year:  # YEAR: one byte, year - 1900; 0 is the zero year (Field_year)
            values = np.where(values == 0, 0, values.astype(np.int64) + 1900)
        return pa.array(values.astype(typ.to_pandas_dtype(), copy=False), typ, mask=~valid)

    return convert


def _float_converter(dtype: str, typ: pa.DataType) -> Converter:
    size = 4 if dtype == "<f4" else 8

    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        values = np.ascontiguousarray(_gather(ctx.d, pos, size)).view(dtype).reshape(len(pos))
        return pa.array(values, typ, mask=~valid)

    return convert


def _be_uint_converter(size: int, typ: pa.DataType) -> Converter:
    """BIT(n): the bytes read big-endian."""

    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        values = _be(_gather(ctx.d, pos, size))
        return pa.array(values.astype(typ.to_pandas_dtype(), copy=False), typ, mask=~valid)

    return convert


def _decimal_fields(precision: int, scale: int) -> list[tuple[int, int, int]]:
    """(byte offset, bytes, digits) of each base-10**9 field of MySQL's binary DECIMAL (decimal.c)."""
    dig2bytes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    intg = precision - scale
    intg0, intg0x = divmod(intg, 9)
    frac0, frac0x = divmod(scale, 9)
    sizes = ([(dig2bytes[intg0x], intg0x)] if intg0x else []) + [(4, 9)] * intg0 + [(4, 9)] * frac0
    sizes += [(dig2bytes[frac0x], frac0x)] if frac0x else []
    out, off = [], 0
    for nbytes, digits in sizes:
        out.append((off, nbytes, digits))
        off += nbytes
    return out


def _decimal_unscaled(d: np.ndarray, pos: np.ndarray, precision: int, scale: int) -> np.ndarray:
    """Unscaled int64 values of DECIMAL(p <= 18): sign in the top bit, negatives stored inverted."""
    size = decimal_size(precision, scale)
    m = _gather(d, pos, size)
    negative = (m[:, 0] & 0x80) == 0
    m[:, 0] ^= 0x80
    m[negative] ^= 0xFF
    acc = np.zeros(len(pos), np.int64)
    for off, nbytes, digits in _decimal_fields(precision, scale):
        acc = acc * (10**digits) + _be(m[:, off : off + nbytes]).astype(np.int64)
    return np.where(negative, -acc, acc)


def _decimal_text(unscaled: int, scale: int) -> str:
    """TiDB's MyDecimal text: plain digits, exactly ``scale`` fraction digits (as `decimal_text`)."""
    sign = "-" if unscaled < 0 else ""
    q, r = divmod(abs(unscaled), 10**scale)
    return f"{sign}{q}.{r:0{scale}d}" if scale else f"{sign}{q}"


def _decimal_converter(col: ColumnMeta, typ: pa.DataType, as_string: bool) -> Converter:
    p, s = col.precision, col.scale
    size = decimal_size(p, s)
    read = decimal_reader(p, s)

    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        n = len(pos)
        if p <= 18:
            unscaled = _decimal_unscaled(ctx.d, pos, p, s)
            if as_string:
                texts = [
                    _decimal_text(u, s) if v else None for u, v in zip(unscaled.tolist(), valid.tolist(), strict=True)
                ]
                return pa.array(texts, pa.string())
            words = np.empty((n, 2), np.int64)  # decimal128: 16 bytes little-endian two's complement
            words[:, 0] = unscaled
            words[:, 1] = unscaled >> 63
            validity, nulls = _validity(valid)
            return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(words)], nulls)
        raw = ctx.raw
        values = [read(raw[q : q + size]) if v else None for q, v in zip(pos.tolist(), valid.tolist(), strict=True)]
        if as_string:
            return pa.array([None if x is None else decimal_text(x, s) for x in values], pa.string())
        return pa.array(values, typ)

    return convert


def _digits(out: np.ndarray, col: int, values: np.ndarray, width: int) -> None:
    """Write ``values`` as zero-padded decimal digits into columns ``col .. col + width`` of a char matrix."""
    v = values.astype(np.int64)
    for k in range(width - 1, -1, -1):
        out[:, col + k] = 48 + v % 10
        v = v // 10


def _text_array(chars: np.ndarray, valid: np.ndarray) -> pa.Array:
    """A string array over a fixed-width (n, w) character matrix."""
    n, w = chars.shape
    offsets = np.arange(0, (n + 1) * w, w, dtype=np.int32)
    validity, nulls = _validity(valid)
    return pa.Array.from_buffers(
        pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())], nulls
    )


def _datetime_chars(n: int, fsp: int, parts: tuple[np.ndarray, ...], frac: np.ndarray | None) -> np.ndarray:
    """``YYYY-MM-DD HH:MM:SS[.f*fsp]`` for each row, as `format_datetime` prints it."""
    width = 19 + (fsp + 1 if fsp else 0)
    out = np.full((n, width), ord("-"), np.uint8)
    out[:, 10] = ord(" ")
    out[:, [13, 16]] = ord(":")
    year, month, day, hour, minute, second = parts
    _digits(out, 0, year, 4)
    _digits(out, 5, month, 2)
    _digits(out, 8, day, 2)
    _digits(out, 11, hour, 2)
    _digits(out, 14, minute, 2)
    _digits(out, 17, second, 2)
    if fsp:
        out[:, 19] = ord(".")
        _digits(out, 20, frac, fsp)  # type: ignore[arg-type]
    return out


def _fraction(d: np.ndarray, pos: np.ndarray, fsp: int) -> np.ndarray | None:
    """The first ``fsp`` digits of the stored fraction (truncated, as the row readers do)."""
    fb = frac_bytes(fsp)
    if not fb:
        return None
    micro = _be(_gather(d, pos, fb)).astype(np.int64) * _FRAC_SCALE[fsp]
    return micro // 10 ** (6 - fsp)


def _date_converter() -> Converter:
    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        v = _le(_gather(ctx.d, pos, 3)).astype(np.int64)  # year << 9 | month << 5 | day (Field_newdate)
        out = np.full((len(pos), 10), ord("-"), np.uint8)
        _digits(out, 0, v >> 9, 4)
        _digits(out, 5, (v >> 5) & 15, 2)
        _digits(out, 8, v & 31, 2)
        return _text_array(out, valid)

    return convert


def _datetime2_converter(fsp: int) -> Converter:
    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        # 5 big-endian bytes offset by 2**39: year*13+month(17) day(5) hour(5) minute(6) second(6)
        packed = _be(_gather(ctx.d, pos, 5)).astype(np.int64) - 0x8000000000
        packed = np.where(valid, packed, 0)
        ymd, hms = packed >> 17, packed & 0x1FFFF
        ym = ymd >> 5
        parts = (ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63)
        return _text_array(_datetime_chars(len(pos), fsp, parts, _fraction(ctx.d, pos + 5, fsp)), valid)

    return convert


def _timestamp2_utc_converter(fsp: int) -> Converter:
    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        seconds = _be(_gather(ctx.d, pos, 4)).astype(np.int64)
        frac = _fraction(ctx.d, pos + 4, fsp)
        zero = seconds == 0 if frac is None else (seconds == 0) & (frac == 0)  # MySQL's zero timestamp
        days, secs = np.divmod(seconds, 86400)
        # civil_from_days (H. Hinnant): proleptic Gregorian date of a day count since 1970-01-01
        z = days + 719468
        era = z // 146097
        doe = z - era * 146097
        yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
        doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
        mp = (5 * doy + 2) // 153
        day = doy - (153 * mp + 2) // 5 + 1
        month = np.where(mp < 10, mp + 3, mp - 9)
        year = yoe + era * 400 + (month <= 2)
        fields = [year, month, day, secs // 3600, secs // 60 % 60, secs % 60]
        parts = tuple(np.where(zero, 0, p) for p in fields)
        return _text_array(_datetime_chars(len(pos), fsp, parts, frac), valid)

    return convert


def _var_converter(lb: int, typ: pa.DataType, utf8: bool) -> Converter:
    """Length-prefixed bytes (VARCHAR, TEXT, BLOB...) as a binary or UTF-8 string array."""

    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, lengths: np.ndarray | None) -> pa.Array:
        assert lengths is not None
        n = len(pos)
        pos = pos + lb  # the value follows its length prefix
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2**31:
            raise CaptureError(f"string column of {total} bytes in one batch: lower max_batch_bytes")
        if total == 0:
            data = b""
        elif total <= 64 * n:  # short values: one vectorised gather
            idx = np.repeat(pos - offsets[:-1], lengths) + np.arange(total)
            data = ctx.d[idx].tobytes()
        else:  # long values: slices of the buffer, joined once
            mv = memoryview(ctx.buf)
            data = b"".join([mv[q : q + k] for q, k in zip(pos.tolist(), lengths.tolist(), strict=True) if k])
        validity, nulls = _validity(valid)
        arr = pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], nulls
        )
        return arr.cast(pa.string()) if utf8 else arr

    return convert


def _python_converter(step: Callable[[bytes, int, list], int], typ: pa.DataType, to_text: bool = False) -> Converter:
    """Any column: the RowChange path's own reader, value by value (TIME, JSON, other charsets...)."""

    def convert(ctx: _Ctx, pos: np.ndarray, valid: np.ndarray, _lengths: np.ndarray | None) -> pa.Array:
        raw = ctx.raw
        out: list[Any] = []
        for q, v in zip(pos.tolist(), valid.tolist(), strict=True):
            if v:
                step(raw, q, out)
            else:
                out.append(None)
        return pa.array(out, typ)

    return convert


# ------------------------------------------------------------------ per-table plans


def arrow_type(
    col: ColumnMeta, decimal: str = "arrow", collations: dict[int, tuple[str, str]] | None = None
) -> pa.DataType:
    """The Arrow type of a column's values: the model's (`changefeed.model.arrow.arrow_type`), the one
    mapping every columnar stage speaks; with ``decimal="string"``, DECIMAL as TiDB's text."""
    if col.real_type == ColumnType.NEWDECIMAL and decimal == "string":
        return pa.string()
    return model_arrow_type(model_column(col, collations))


def _column_plan(  # noqa: C901  (per-type switch: field width and Arrow converter per MySQL binlog type)
    col: ColumnMeta, name: str, tz: tzinfo, collations: dict[int, tuple[str, str]] | None, decimal: str
) -> _ColumnPlan:
    tp = col.real_type
    typ = arrow_type(col, decimal, collations)
    step = _column_reader(col, tz, collations)
    size = struct.calcsize("<" + step) if isinstance(step, str) else 0  # a struct code: fixed-width number
    lb = 0
    if tp in (ColumnType.VARCHAR, ColumnType.VAR_STRING, ColumnType.STRING):
        lb = 1 if col.length < 256 else 2
    elif tp in BLOB_TYPES or tp in (ColumnType.JSON, ColumnType.GEOMETRY):
        lb = col.meta
    elif tp in (ColumnType.INT24, ColumnType.DATE, ColumnType.NEWDATE):
        size = 3
    elif tp == ColumnType.YEAR:
        size = 1
    elif tp == ColumnType.NEWDECIMAL:
        size = decimal_size(col.precision, col.scale)
    elif tp == ColumnType.DATETIME2:
        size = 5 + frac_bytes(col.meta)
    elif tp == ColumnType.TIMESTAMP2:
        size = 4 + frac_bytes(col.meta)
    elif tp == ColumnType.TIME2:
        size = 3 + frac_bytes(col.meta)
    elif tp == ColumnType.TIMESTAMP:
        size = 4
    elif tp == ColumnType.DATETIME:
        size = 8
    elif tp == ColumnType.TIME:
        size = 3
    elif tp == ColumnType.BIT:
        size = (col.length + 7) // 8
    elif tp in (ColumnType.ENUM, ColumnType.SET):
        size = col.length
    if not size and not lb:
        raise CaptureError(f"column {name}: binlog type {tp} has no Arrow reader")

    convert: Converter | None = None
    if tp in _INT_SIZES:
        convert = _int_converter(size, not col.unsigned, typ)
    elif tp == ColumnType.YEAR:
        convert = _int_converter(1, False, typ, year=True)
    elif tp == ColumnType.FLOAT:
        convert = _float_converter("<f4", typ)
    elif tp == ColumnType.DOUBLE:
        convert = _float_converter("<f8", typ)
    elif tp in (ColumnType.ENUM, ColumnType.SET) and size in (1, 2, 4, 8):
        convert = _int_converter(size, False, typ)
    elif tp == ColumnType.BIT:
        convert = _be_uint_converter(size, typ)
    elif tp == ColumnType.NEWDECIMAL:
        convert = _decimal_converter(col, typ, decimal == "string")
    elif tp in (ColumnType.DATE, ColumnType.NEWDATE):
        convert = _date_converter()
    elif tp == ColumnType.DATETIME2:
        convert = _datetime2_converter(col.meta)
    elif tp == ColumnType.TIMESTAMP2 and tz is UTC:
        convert = _timestamp2_utc_converter(col.meta)
    elif lb and tp != ColumnType.JSON:
        charset = "binary" if tp == ColumnType.GEOMETRY else column_charset(col, collations)[0]
        binary_pad = tp == ColumnType.STRING and col.collation_id == BINARY_COLLATION_ID
        if charset == "binary" and not binary_pad:
            convert = _var_converter(lb, typ, utf8=False)
        elif charset in _UTF8_CHARSETS:
            convert = _var_converter(lb, typ, utf8=True)
        else:
            decoder_for(charset)  # raises for a charset without a codec, like the RowChange path
    if convert is None:
        assert not isinstance(step, str)
        convert = _python_converter(step, typ)
    return _ColumnPlan(col.index, name, typ, size, lb, convert)


# ------------------------------------------------------------------ row walkers


@dataclass(slots=True)
class _Group:
    """Row images of one present bitmap in one slot: image starts and variable-field positions."""

    present: int
    nlen: int
    fields: list[tuple[int, int]]  # (column index, null bit) of the present columns in order
    starts: list[int] = field(default_factory=list)
    var_pos: list[list[int]] = field(default_factory=list)  # per variable-length field
    skips: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class _Slot:
    """The main image (new, or old for deletes) or the before image (old of updates) of every row."""

    groups: dict[int, _Group] = field(default_factory=dict)
    runs: list[tuple[int, int]] = field(default_factory=list)  # (present bitmap or -1 for none, rows)


def _image_code(g: _Group, plans: list[_ColumnPlan], tag: str, indent: str) -> list[str]:
    """Source lines walking one image at ``pos``: record anchors, leave ``pos`` after the image."""
    lines = []
    n = g.nlen
    if n == 1:
        lines.append("nb = buf[pos]")
    elif n == 2:
        lines.append("nb = buf[pos] | buf[pos + 1] << 8")
    else:
        lines.append(f"nb = int.from_bytes(buf[pos:pos + {n}], 'little')")
    lines += [f"sk = {tag}SK.get(nb) or {tag}MK(nb)", f"{tag}S(pos)", f"p = pos + {n} + sk[0]"]
    k = 0
    for col, bit in g.fields:
        plan = plans[col]
        if not plan.lb:
            continue
        k += 1
        lines.append(f"{tag}V{k}(p)")
        lb = plan.lb
        if lb == 1:
            length = "buf[p]"
        elif lb == 2:
            length = "(buf[p] | buf[p + 1] << 8)"
        else:
            length = f"int.from_bytes(buf[p:p + {lb}], 'little')"
        lines.append(f"if not nb & {1 << bit}: p += {lb} + {length}")
        lines.append(f"p += sk[{k}]")
    lines.append("pos = p")
    return [indent + line for line in lines]


def _skips_maker(g: _Group, plans: list[_ColumnPlan]) -> Callable[[int], tuple[int, ...]]:
    """nb -> bytes taken by the non-NULL fixed-width fields of each segment (cached per NULL pattern)."""

    def make(nb: int) -> tuple[int, ...]:
        out = [0]
        for col, bit in g.fields:
            plan = plans[col]
            if plan.lb:
                out.append(0)
            elif not nb >> bit & 1:
                out[-1] += plan.size
        g.skips[nb] = result = tuple(out)
        return result

    return make


def _compile_walker(groups: list[tuple[str, _Group]], plans: list[_ColumnPlan]) -> Callable[[bytearray, int, int], int]:
    """A function walking every row of an event body (one image per row, or old + new for updates)."""
    env: dict[str, Any] = {}
    body = ["def walk(buf, pos, end):", "    while pos < end:"]
    for tag, g in groups:
        env[f"{tag}SK"] = g.skips
        env[f"{tag}MK"] = _skips_maker(g, plans)
        env[f"{tag}S"] = g.starts.append
        for k, lst in enumerate(g.var_pos, 1):
            env[f"{tag}V{k}"] = lst.append
        body += _image_code(g, plans, tag, "        ")
    body.append("    return pos")
    exec(compile("\n".join(body), f"<binlog walker {'/'.join(t for t, _ in groups)}>", "exec"), env)
    return env["walk"]


# ------------------------------------------------------------------ the builder


class ArrowBatchBuilder:
    """Accumulates one table's ROWS events (one table-map signature) and finishes them as a RecordBatch.

    Usable on its own (``add`` any ROWS events of the table, then ``finish``) or through
    `read_range_arrow`. ``table_schema`` supplies the column names (and goes into the batch's
    schema metadata as ``changefeed.table_schema``).
    """

    def __init__(
        self,
        table_map: TableMap,
        table_schema: TableSchema,
        *,
        tz: tzinfo = UTC,
        collations: dict[int, tuple[str, str]] | None = None,
        decimal: str = "arrow",
        op_column: str = "op",
        commit_ts_column: str = "commit_ts",
        before_prefix: str = "before_",
    ) -> None:
        if decimal not in ("arrow", "string"):
            raise ConfigError(f"decimal must be 'arrow' or 'string', got {decimal!r}")
        if len(table_schema.columns) != len(table_map.columns):
            raise CaptureError(
                f"{table_map.qualified_name}: schema has {len(table_schema.columns)} columns, TABLE_MAP"
                f" {len(table_map.columns)}"
            )
        self.table_map = table_map
        self.table_schema = table_schema
        names = [c.name for c in table_schema.columns]
        meta_names = [op_column, commit_ts_column, *(before_prefix + n for n in names)]
        clash = sorted(set(names) & set(meta_names))
        if clash:
            raise ConfigError(
                f"{table_map.qualified_name}: columns {clash} clash with the Arrow metadata columns;"
                " choose other op_column/commit_ts_column/before_prefix names"
            )
        self.plans = [
            _column_plan(c, name, tz, collations, decimal) for c, name in zip(table_map.columns, names, strict=True)
        ]
        fields = [pa.field(p.name, p.type) for p in self.plans]
        fields += [pa.field(op_column, pa.string(), nullable=False), pa.field(commit_ts_column, pa.int64(), False)]
        fields += [pa.field(before_prefix + p.name, p.type) for p in self.plans]
        metadata = {
            "changefeed.schema": table_schema.schema,
            "changefeed.table": table_schema.table,
            "changefeed.version": str(table_schema.version),
            "changefeed.table_schema": orjson.dumps(table_schema_to_json(table_schema), default=str).decode(),
        }
        self.schema = pa.schema(fields, metadata=metadata)
        self.width = len(self.plans)
        self._walkers: dict[tuple[int, int, int], Callable[[bytearray, int, int], int]] = {}
        self._main = _Slot()
        self._before = _Slot()
        self._buf = bytearray()
        self._ops: list[tuple[int, int, int]] = []  # (op code, commit ts, rows)
        self.num_rows = 0

    @property
    def nbytes(self) -> int:
        return len(self._buf)

    def _group(self, slot: _Slot, present: int) -> _Group:
        g = slot.groups.get(present)
        if g is None:
            cols = [i for i in range(self.width) if present >> i & 1]
            g = _Group(present, (len(cols) + 7) // 8, [(c, j) for j, c in enumerate(cols)])
            g.var_pos = [[] for c, _ in g.fields if self.plans[c].lb]
            slot.groups[present] = g
        return g

    def add(self, ev: RowsEvent, commit_ts: int, where: str = "") -> int:
        """Walk the rows of one ROWS event of this table; returns how many rows it had."""
        data, pos, end, kind = ev.data, ev.body, ev.end, ev.kind
        try:
            count, pos = read_lenenc(data, pos)
            if count != self.width:
                raise ValueError(f"ROWS event has {count} columns, its TABLE_MAP {self.width}")
            mlen = (count + 7) // 8
            present1 = int.from_bytes(data[pos : pos + mlen], "little")
            pos += mlen
            present2 = present1
            if kind is RowsKind.UPDATE and ev.version > 0:  # v0 UPDATE has one bitmap for both images
                present2 = int.from_bytes(data[pos : pos + mlen], "little")
                pos += mlen
            key = (kind, present1, present2)
            walker = self._walkers.get(key)
            if walker is None:
                walker = self._walkers[key] = self._make_walker(kind, present1, present2)
            if kind is RowsKind.UPDATE:
                main, before = self._group(self._main, present2), self._group(self._before, present1)
            else:
                main, before = self._group(self._main, present1), None
            n0 = len(main.starts)
            base = len(self._buf)
            self._buf += memoryview(data)[pos:end]
            at = walker(self._buf, base, len(self._buf))
            if at != len(self._buf):
                raise ValueError(f"row data overruns the event by {at - len(self._buf)} bytes")
        except (IndexError, ValueError, struct.error) as exc:
            raise CaptureError(f"cannot decode rows of {self.table_map.qualified_name}: {exc}", where=where) from None
        n = len(main.starts) - n0
        self._main.runs.append((main.present, n))
        self._before.runs.append((before.present if before is not None else -1, n))
        self._ops.append((_OP_CODE[kind], commit_ts, n))
        self.num_rows += n
        return n

    def count(self, ev: RowsEvent, where: str = "") -> int:
        """How many rows one ROWS event of this table holds: walked, not decoded, and nothing kept."""
        try:
            return self.add(ev, 0, where)
        finally:
            self.discard()

    def discard(self) -> None:
        """Forget the rows added since the last finish (the walkers keep their bound lists)."""
        for slot in (self._main, self._before):
            slot.runs.clear()
            for g in slot.groups.values():
                g.starts.clear()
                for positions in g.var_pos:
                    positions.clear()
        self._buf.clear()
        self._ops.clear()
        self.num_rows = 0

    def _make_walker(self, kind: RowsKind, present1: int, present2: int) -> Callable[[bytearray, int, int], int]:
        if present1 == 0 or (kind is RowsKind.UPDATE and present2 == 0):
            raise ValueError("a row image without columns")
        if kind is RowsKind.UPDATE:
            images = [("b", self._group(self._before, present1)), ("m", self._group(self._main, present2))]
        else:
            images = [("m", self._group(self._main, present1))]
        return _compile_walker(images, self.plans)

    def finish(self) -> pa.RecordBatch | None:
        """The rows added since the last finish as one RecordBatch (None if there were none)."""
        n = self.num_rows
        if not n:
            return None
        buf = self._buf
        buf += bytes(_PAD)
        ctx = _Ctx(buf, np.frombuffer(buf, np.uint8))
        try:
            main = self._finish_slot(ctx, self._main, n)
            before = self._finish_slot(ctx, self._before, n)
        except (pa.ArrowInvalid, UnicodeDecodeError, ValueError) as exc:
            raise CaptureError(f"cannot decode rows of {self.table_map.qualified_name}: {exc}") from None
        finally:
            del ctx
        codes = np.repeat(np.array([c for c, _, _ in self._ops], np.int8), [k for _, _, k in self._ops])
        ts = np.repeat(np.array([t for _, t, _ in self._ops], np.int64), [k for _, _, k in self._ops])
        ops = pa.array(OPS).take(pa.array(codes))
        batch = pa.RecordBatch.from_arrays([*main, ops, pa.array(ts, pa.int64()), *before], schema=self.schema)
        self._buf = bytearray()  # the batch's arrays may still view the old buffer
        self.discard()
        return batch

    def finish_rows(self) -> TableRows | None:
        """Like `finish`, as a `TableRows` that also records images not carrying every column."""
        main_runs, before_runs = list(self._main.runs), list(self._before.runs)
        batch = self.finish()
        if batch is None:
            return None
        every = (1 << self.width) - 1
        return TableRows(
            self.table_schema,
            batch,
            None if all(p == every for p, _ in main_runs) else main_runs,
            None if all(p in (-1, every) for p, _ in before_runs) else before_runs,
        )

    def _finish_slot(self, ctx: _Ctx, slot: _Slot, n: int) -> list[pa.Array]:
        used = [g for g in slot.groups.values() if g.starts]
        if not used:
            return [pa.nulls(n, p.type) for p in self.plans]
        per_group = [self._finish_group(ctx, g) for g in used]
        if len(used) == 1 and len(used[0].starts) == n:
            return per_group[0]
        # Several present bitmaps (or rows without this image): put rows back in event order.
        first: dict[int, int] = {}
        offset = 0
        for g in used:
            first[g.present] = offset
            offset += len(g.starts)
        index = np.zeros(n, np.int64)
        valid = np.ones(n, bool)
        at = 0
        for present, k in slot.runs:
            if present < 0:
                valid[at : at + k] = False
            else:
                index[at : at + k] = np.arange(first[present], first[present] + k)
                first[present] += k
            at += k
        take = pa.array(index, mask=~valid)
        return [pa.concat_arrays([cols[i] for cols in per_group]).take(take) for i in range(self.width)]

    def _finish_group(self, ctx: _Ctx, g: _Group) -> list[pa.Array]:
        d = ctx.d
        starts = np.fromiter(g.starts, np.int64, len(g.starts))
        rows = len(starts)
        nb = _le(_gather(d, starts, g.nlen)) if g.nlen <= 8 else None
        null_bits = None if nb is not None else _gather(d, starts, g.nlen)
        out: list[pa.Array | None] = [None] * self.width
        base = starts + g.nlen  # the current segment's start
        offset = np.zeros(rows, np.int64)  # bytes taken so far in the segment
        k = 0
        for col, bit in g.fields:
            plan = self.plans[col]
            if nb is not None:
                valid = (nb >> np.uint64(bit)) & np.uint64(1) == 0
            else:
                valid = (null_bits[:, bit >> 3] >> (bit & 7)) & 1 == 0  # type: ignore[index]
            if plan.lb:
                vpos = np.fromiter(g.var_pos[k], np.int64, rows)
                k += 1
                lengths = np.where(valid, _le(_gather(d, vpos, plan.lb)), 0).astype(np.int64)
                out[col] = plan.convert(ctx, vpos, valid, lengths)
                base = vpos + np.where(valid, plan.lb + lengths, 0)
                offset = np.zeros(rows, np.int64)
            else:
                fpos = base + offset
                out[col] = plan.convert(ctx, fpos, valid, None)
                offset = offset + np.where(valid, plan.size, 0)
        return [a if a is not None else pa.nulls(rows, p.type) for a, p in zip(out, self.plans, strict=True)]


# ------------------------------------------------------------------ ranges of a binlog


class ArrowCapture(BinlogCapture):
    """A `BinlogCapture` whose row changes become Arrow batches instead of `RowChange`s.

    Transactions, commit timestamps, filters, schema versions and positions are the capture's
    own, so batches carry the same commit ts the RowChange path gives. `read` yields batches
    (when full, when a table's shape changes, and at the end) interleaved with the DDL events.
    """

    def __init__(
        self,
        *args: Any,
        batch_rows: int = 65536,
        max_batch_bytes: int = 64 << 20,
        decimal: str = "arrow",
        builder_options: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.savepoint.skip or self._skip:
            raise ConfigError(
                "an Arrow range must start at a transaction boundary (a Resolved position), not mid-group"
            )
        self.batch_rows = batch_rows
        self.max_batch_bytes = max_batch_bytes
        self.decimal = decimal
        self.builder_options = builder_options or {}
        self._builders: dict[tuple[str, str], tuple[Any, ArrowBatchBuilder]] = {}
        self._ready: list[pa.RecordBatch] = []

    def _rows(self, ev: RowsEvent, ts: int, where: str) -> Iterator[Any]:
        tm = self.effective_map(ev.table_map, where)
        ts_schema = self.table_schema_for(tm, where)
        name = (tm.schema, tm.table)
        key = (tm.signature, ts_schema.version)
        entry = self._builders.get(name)
        if entry is None or entry[0] != key:
            if entry is not None:
                self._flush(entry[1])
            try:
                builder = ArrowBatchBuilder(
                    tm, ts_schema, tz=self.tz, collations=self.collations, decimal=self.decimal, **self.builder_options
                )
            except CaptureError as exc:
                raise CaptureError(exc.message, where=where) from None
            entry = self._builders[name] = (key, builder)
        builder = entry[1]
        self.rows_decoded += builder.add(ev, ts, where)
        if builder.num_rows >= self.batch_rows or builder.nbytes >= self.max_batch_bytes:
            self._flush(builder)
        return iter(())

    def _flush(self, builder: ArrowBatchBuilder) -> None:
        batch = builder.finish()
        if batch is not None:
            self._ready.append(batch)

    def read(self) -> Iterator[pa.RecordBatch | DDLEvent]:
        """Batches and DDL events until the source ends or ``until`` is reached."""
        if self.until and reached(self.savepoint.file, self.savepoint.pos, self.until):
            return
        for ev in self.events():
            if self._ready:
                yield from self._ready
                self._ready.clear()
            if isinstance(ev, DDLEvent):
                yield ev
        for _, builder in self._builders.values():
            self._flush(builder)
        yield from self._ready
        self._ready.clear()


def read_range_arrow(
    binlog_dir: str | Path,
    start: BinlogPosition,
    end: BinlogPosition | None = None,
    *,
    tz: tzinfo = UTC,
    table_filter: BlockAllowList | None = None,
    batch_rows: int = 65536,
    max_batch_bytes: int = 64 << 20,
    decimal: str = "arrow",
    collations: dict[int, tuple[str, str]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the transactions in [start, end) of the binlog files in ``binlog_dir``.

    Meant for a Spark executor reading one partition: ``start`` and ``end`` are savepoints (the
    positions of ``Resolved`` events, or file:pos boundaries of transactions); ``start.clock`` and
    ``start.versions`` make commit ts and schema versions equal to a capture that read up to
    there. ``end`` None reads to the end of the newest file. Each batch holds one table's rows.
    """
    path = Path(binlog_dir)
    capture = ArrowCapture(
        lambda at: BinlogFileReader(path, at.file or None, at.pos),
        start,
        tz=tz,
        table_filter=table_filter,
        until=(end.file, end.pos) if end is not None else None,
        collations=collations,
        batch_rows=batch_rows,
        max_batch_bytes=max_batch_bytes,
        decimal=decimal,
    )
    for item in capture.read():
        if isinstance(item, pa.RecordBatch):
            yield item


__all__ = ["OPS", "ArrowBatchBuilder", "ArrowCapture", "arrow_type", "read_range_arrow"]
