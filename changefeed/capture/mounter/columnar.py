"""Vectorised mounting of Arrow record batches: row format v2 decoded a column at a time.

Per batch, numpy reads every key's table id and handle at once. Rows whose v2 values share a
column-id layout keep their cells at the same offset slots, so one gather reads all their end
offsets. Then each column is decoded for all of those rows together (ints, floats, decimals,
dates and times in numpy, strings through one Arrow take). A record that does not fit this path
goes to the per-record reference path (`Mounter.mount`). That path decodes it, or raises the
error naming the record. This covers other ops, keyspace or common-handle keys, v1 or empty
values, and cells that fail a check here. The fast path never raises for bad keys or values.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Context, Decimal
from itertools import compress, repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import CaptureError
from ...model.events import Event, Op, trusted_row
from ...model.schema import Column, TableSchema
from ...model.types import (
    CALENDAR_TYPES,
    DATE_TYPES,
    ENUM_SET_BIT_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    STRING_TYPES,
    TypeCode,
)
from .rowcodec import CODEC_VER, FLAG_CHECKSUM, FLAG_LARGE, RowDecoder, V2Cell
from .temporal import ZoneConverter

if TYPE_CHECKING:
    from .mounter import Mounter, _Hot

_PAD = 8  # zero bytes after each data buffer: an 8-byte read at any cell start stays inside
_AR8 = np.arange(8, dtype=np.int64)
_SIGN = np.uint64(1 << 63)
_KEY_LEN = 19  # t{table id:8}_r{int handle:8}
_OPS = ("put", "delete", "resolved")

# A column decoded for many rows: (source, cell starts, cell ends) -> (values, rows the scalar
# cell decoder must redo or None). The scalar decoder raises where the data is bad.
Vector = Callable[["_Source", np.ndarray, np.ndarray], tuple[list[Any], np.ndarray | None]]


class _Source:
    """One binary Arrow column as numpy: absolute starts/ends into its (padded) data buffer."""

    __slots__ = ("_bytes", "buffer", "data", "ends", "starts")

    def __init__(self, arr: pa.Array) -> None:
        n = len(arr)
        width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        bufs = arr.buffers()
        itemsize = np.dtype(width).itemsize
        offsets = np.frombuffer(bufs[1], width, count=n + 1, offset=arr.offset * itemsize).astype(np.int64)
        self.buffer: pa.Buffer = bufs[2] if bufs[2] is not None else pa.py_buffer(b"")
        self.data = np.concatenate((np.frombuffer(self.buffer, np.uint8), np.zeros(_PAD, np.uint8)))
        self.starts = offsets[:-1]
        self.ends = offsets[1:].copy()
        if arr.null_count:
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
            self.ends[~valid] = self.starts[~valid]  # a null reads as empty
        self._bytes: bytes | None = None

    def cell(self, start: int, end: int) -> bytes:
        """The bytes of one cell, for the scalar decoders (which then cannot read past it)."""
        if self._bytes is None:
            self._bytes = self.buffer.to_pybytes()
        return self._bytes[start:end]

    def u64le(self, starts: np.ndarray) -> np.ndarray:
        return self.data[starts[:, None] + _AR8].view("<u8").ravel()


def _same_rows(raw: np.ndarray) -> list[np.ndarray]:
    """Group the equal rows of a byte matrix: the row indices of each distinct row.

    A 64-bit polynomial hash sorts cheaply (np.unique over whole rows does not); each group is then
    checked against its first row, and rows of a colliding hash form groups of their own.
    """
    h = np.zeros(len(raw), np.uint64)
    for j in range(raw.shape[1]):
        h = h * np.uint64(0x100000001B3) + raw[:, j]
    if (h == h[0]).all():
        candidates = [np.arange(len(raw))]
    else:
        _, inverse = np.unique(h, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        candidates = np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1)
    groups = []
    while candidates:
        rows = candidates.pop()
        same = (raw[rows] == raw[rows[0]]).all(axis=1)
        groups.append(rows[same])
        if not same.all():
            candidates.append(rows[~same])
    return groups


def _digits(out: np.ndarray, at: int, values: np.ndarray, width: int) -> None:
    """Write ``values`` as ``width`` ASCII decimal digits into columns ``at..at+width`` of ``out``."""
    for k in range(width):
        out[:, at + k] = (values // 10 ** (width - 1 - k)) % 10 + 48


def _ascii_rows(chars: np.ndarray) -> list[str]:
    """Each row of an (m, w) ASCII byte matrix as a str."""
    m, w = chars.shape
    offsets = np.arange(0, (m + 1) * w, w, dtype=np.int64)
    arr = pa.Array.from_buffers(pa.large_string(), m, [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])
    return arr.to_numpy(zero_copy_only=False).tolist()


# ---------------------------------------------------------------- column kinds


def _int_vector(signed: bool) -> Vector:
    # rowcodec encodeInt: the smallest of 1/2/4/8 little-endian bytes
    def run(src: _Source, s: np.ndarray, e: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        n = e - s
        ok = (n == 1) | (n == 2) | (n == 4) | (n == 8)
        shift = np.where(ok, (8 - n) * 8, 0).astype(np.uint64)
        u = src.u64le(s) << shift
        v = u.view(np.int64) >> shift.view(np.int64) if signed else u >> shift
        return v.tolist(), None if ok.all() else ~ok

    return run


def _float_vector(narrow: bool) -> Vector:
    # EncodeFloat of the float64; NaN and +-Inf read as 0 (TiCDC); FLOAT rounds to float32
    def run(src: _Source, s: np.ndarray, e: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        redo = (e - s) != 8
        u = src.data[s[:, None] + _AR8].view(">u8").ravel().astype(np.uint64)
        v = np.where(u & _SIGN, u ^ _SIGN, ~u).view(np.float64)
        v = np.where(np.isfinite(v), v, 0.0)
        if narrow:
            with np.errstate(over="ignore"):
                f = v.astype(np.float32)
            redo |= np.isinf(f)  # too large for FLOAT: the scalar path raises, as struct.pack("f") does
            v = f.astype(np.float64)
        return v.tolist(), redo if redo.any() else None

    return run


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_DEC_CTX = Context(prec=40)  # wider than the 18 digits decoded here: products are exact


def _decimal_vector(col: Column) -> Vector | None:
    """MySQL binary decimals of the column's own (precision, scale) up to 18 digits, in int64."""
    precision, scale = col.length, col.decimal
    if precision is None or scale is None or not 0 < precision <= 18 or not 0 <= scale <= precision:
        return None
    intg = precision - scale
    groups: list[tuple[int, int]] = []  # (bytes, digits) left to right, as MyDecimal.FromBin
    if intg % 9:
        groups.append((_DIG2BYTES[intg % 9], intg % 9))
    groups += [(4, 9)] * (intg // 9 + scale // 9)
    if scale % 9:
        groups.append((_DIG2BYTES[scale % 9], scale % 9))
    size = sum(b for b, _ in groups)
    span = np.arange(size, dtype=np.int64)
    unit = Decimal(1).scaleb(-scale)

    def run(src: _Source, s: np.ndarray, e: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        data = src.data
        ok = (e - s == 2 + size) & (data[s] == precision) & (data[s + 1] == scale)
        raw = data[np.minimum(s + 2, len(data) - size)[:, None] + span].astype(np.int64)
        neg = raw[:, 0] < 128  # sign bit clear: negative, and every byte is inverted
        raw[:, 0] ^= 0x80
        raw[neg] ^= 0xFF
        u = np.zeros(len(s), np.int64)
        at = 0
        for nbytes, digits in groups:
            g = np.zeros(len(s), np.int64)
            for j in range(nbytes):
                g = (g << 8) | raw[:, at + j]
            ok &= g < 10**digits
            u = u * 10**digits + g
            at += nbytes
        # int * 1E-scale is exact with exactly `scale` fraction digits; -0 is 0: no negative zero
        out = list(map(_DEC_CTX.multiply, np.where(neg, -u, u).tolist(), repeat(unit)))
        return out, None if ok.all() else ~ok

    return run


def _time_vector(col: Column, zone: ZoneConverter | None) -> Vector | None:
    """DATE, DATETIME and TIMESTAMP (CoreTime packed uint) as text; TIMESTAMP via the zone's minutes."""
    fsp = col.decimal or 0
    if fsp > 6:
        return None
    date_only = col.type_code in DATE_TYPES
    width = 10 if date_only else 19 + (fsp + 1 if fsp else 0)

    def run(src: _Source, s: np.ndarray, e: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        ok = (e - s) == 8  # a non-zero time always takes 8 bytes; others go to the scalar path
        p = src.u64le(s)
        micro = p & 0xFFFFFF
        ymdhms = p >> 24
        ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
        year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd & 0x1F
        hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
        ok &= (year <= 9999) & (month <= 12)
        if not date_only:
            ok &= (hour <= 23) & (minute <= 59) & (second <= 59) & (micro <= 999_999)
        chars = np.empty((len(s), width), np.uint8)
        if zone is not None:  # TIMESTAMP: the local "YYYY-MM-DD HH:MM:" of each UTC minute
            ok &= (p >> 41) != 0  # the zero date is not converted: scalar path
            minutes, inverse = np.unique(np.where(ok, p >> 30, 0), return_inverse=True)  # 0: no prefix
            table = np.zeros((len(minutes), 17), np.uint8)
            good = np.zeros(len(minutes), bool)
            for i, m in enumerate(minutes.tolist()):
                try:
                    prefix = zone.prefix(m << 30)
                except CaptureError:
                    prefix = None
                if prefix is not None and len(prefix) == 17 and prefix.isascii():
                    table[i] = np.frombuffer(prefix.encode(), np.uint8)
                    good[i] = True
            ok &= good[inverse]
            chars[:, :17] = table[inverse]
        else:
            _digits(chars, 0, year, 4)
            chars[:, 4] = chars[:, 7] = 45  # "-"
            _digits(chars, 5, month, 2)
            _digits(chars, 8, day, 2)
            if not date_only:
                chars[:, 10] = 32  # " "
                _digits(chars, 11, hour, 2)
                chars[:, 13] = 58  # ":"
                _digits(chars, 14, minute, 2)
                chars[:, 16] = 58
        if not date_only:
            _digits(chars, 17, second, 2)
            if fsp:  # the first fsp digits of the 6-digit microseconds
                chars[:, 19] = 46  # "."
                _digits(chars, 20, micro // 10 ** (6 - fsp), fsp)
        return _ascii_rows(chars), None if ok.all() else ~ok

    return run


def _string_vector(as_bytes: bool) -> Vector:
    """Cells as one Arrow array: offsets s0, e0, s1, e1... over the data buffer, every other element taken."""

    def run(src: _Source, s: np.ndarray, e: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        m = len(s)
        bounds = np.empty(2 * m, np.int64)
        bounds[0::2], bounds[1::2] = s, e
        if m > 1 and (np.diff(bounds) < 0).any():  # Arrow offsets must ascend: let the scalar path look
            return [None] * m, np.ones(m, bool)
        spans = pa.Array.from_buffers(pa.large_binary(), 2 * m - 1, [None, pa.py_buffer(bounds), src.buffer])
        cells = spans.take(pa.array(np.arange(0, 2 * m, 2)))
        if not as_bytes:
            try:
                cells = cells.cast(pa.large_string())  # validates UTF-8 as bytes.decode() does
            except pa.ArrowInvalid:
                return [None] * m, np.ones(m, bool)  # the scalar path finds the bad cells
        return cells.to_numpy(zero_copy_only=False).tolist(), None

    return run


def vector_for(col: Column, zone: ZoneConverter | None) -> Vector | None:
    """The vectorised decoder of a column type, or None: its cells take the scalar decoder.

    Mirrors `rowcodec._cells` (v2): each kind must give exactly what the scalar cell gives.
    """
    tc = col.type_code
    if tc in INTEGER_TYPES or tc is TypeCode.YEAR:
        return _int_vector(signed=not (col.unsigned and tc is not TypeCode.YEAR))
    if tc in ENUM_SET_BIT_TYPES:
        return _int_vector(signed=False)
    if tc in FLOAT_TYPES:
        return _float_vector(narrow=tc is TypeCode.FLOAT)
    if tc is TypeCode.DECIMAL:
        return _decimal_vector(col)
    if tc in CALENDAR_TYPES:
        return _time_vector(col, zone if tc is TypeCode.TIMESTAMP else None)
    if tc in STRING_TYPES or tc is TypeCode.GEOMETRY:
        return _string_vector(col.is_bytes)
    return None  # TIME, JSON, VECTOR, NULL


# ---------------------------------------------------------------- one table version


class _Layout:
    """One validated v2 layout: (position, vector, scalar cell) per not-null id; null positions."""

    __slots__ = ("cells", "large", "n_notnull", "nulls")

    def __init__(self, cells: list[tuple[int, Vector | None, V2Cell | None]], nulls: list[int], n: int, large: int):
        self.cells = cells
        self.nulls = nulls
        self.n_notnull = n
        self.large = large


class VectorDecoder:
    """Decodes many v2 row values of one table version (no common handle) column by column."""

    def __init__(self, decoder: RowDecoder, zone: ZoneConverter | None) -> None:
        self.decoder = decoder
        columns = decoder.table.schema.columns
        self.vectors = [vector_for(col, zone) for col in columns]
        self.defaults = decoder.defaults
        self.layouts: dict[bytes, _Layout | None] = {}

    def layout(self, layout: bytes, n_notnull: int, large: int) -> _Layout | None:
        """The cached plan of a layout; None when it is invalid (the reference path raises)."""
        if layout in self.layouts:
            return self.layouts[layout]
        try:
            cells, nulls = self.decoder.layout_cells(layout, n_notnull, large)
        except CaptureError:
            plan = None
        else:
            handle = self.decoder.handle_position
            # PKIsHandle: the key's handle wins, a stored PK cell is never read (as in the reference)
            vec_cells: list[tuple[int, Vector | None, V2Cell | None]] = [
                (p, None, None) if c is None or p == handle else (p, self.vectors[p], c) for p, c in cells
            ]
            plan = _Layout(vec_cells, [p for p in nulls if p != handle], n_notnull, large)
        if len(self.layouts) >= 1024:
            self.layouts.clear()
        self.layouts[layout] = plan
        return plan

    def images(
        self, src: _Source, rows: np.ndarray, handles: np.ndarray, verify_checksum: bool
    ) -> tuple[list[Any], np.ndarray]:
        """The image tuples of v2 values ``rows`` of ``src`` (handles: their int handles), and which failed."""
        m = len(rows)
        out: list[Any] = [None] * m
        failed = np.zeros(m, bool)
        s = src.starts[rows]
        size = src.ends[rows] - s
        head = src.data[s[:, None] + _AR8[:6]].astype(np.int64)
        flags = head[:, 1]
        n_notnull = head[:, 2] | head[:, 3] << 8
        n_null = head[:, 4] | head[:, 5] << 8
        large = flags & FLAG_LARGE
        ids_end = 6 + np.where(large, 4, 1) * (n_notnull + n_null)
        data_start = ids_end + np.where(large, 4, 2) * n_notnull
        usable = (size >= 6) & (head[:, 0] == CODEC_VER) & (data_start <= size)
        failed |= ~usable
        group_key = np.where(usable, flags << 40 | n_notnull << 20 | n_null, -1)
        for key in np.unique(group_key).tolist():
            if key < 0:
                continue
            members = np.flatnonzero(group_key == key)
            flag, nn = key >> 40, (key >> 20) & 0xFFFFF
            idx_end = int(ids_end[members[0]])
            ms = s[members]
            raw = src.data[ms[:, None] + np.arange(1, idx_end, dtype=np.int64)]
            for k in _same_rows(raw):
                sub = members[k]
                plan = self.layout(raw[k[0]].tobytes(), nn, flag & FLAG_LARGE)
                if plan is None:
                    failed[sub] = True
                    continue
                self._fill(src, plan, s[sub], size[sub], idx_end, flag, handles[sub], sub, out, failed, verify_checksum)
        return out, failed

    def _fill(
        self,
        src: _Source,
        plan: _Layout,
        s: np.ndarray,
        size: np.ndarray,
        ids_end: int,
        flags: int,
        handles: np.ndarray,
        where: np.ndarray,
        out: list[Any],
        failed: np.ndarray,
        verify_checksum: bool,
    ) -> None:
        if flags & FLAG_CHECKSUM and verify_checksum:  # CRC per record: the reference path
            failed[where] = True
            return
        m = len(s)
        data_start = ids_end + (4 if plan.large else 2) * plan.n_notnull
        ends, ok = _cell_ends(src, plan, s, size, ids_end, data_start, flags & FLAG_CHECKSUM)
        columns: list[Any] = list(repeat(None, len(self.defaults)))
        decoded = [False] * len(self.defaults)
        base = s + data_start
        prev = np.zeros(m, np.int64)
        for i, (pos, vector, cell) in enumerate(plan.cells):
            end = ends[:, i]
            if cell is not None:
                columns[pos] = _decode_cells(src, vector, cell, base + prev, base + end, ok)
                decoded[pos] = True
            prev = end
        handle_pos = self.decoder.handle_position
        if handle_pos is not None:
            columns[handle_pos] = (handles.view(np.uint64) if self.decoder.handle_unsigned else handles).tolist()
            decoded[handle_pos] = True
        for pos in plan.nulls:  # an id in both lists of a damaged value reads as NULL, as in the reference
            columns[pos] = repeat(None)
            decoded[pos] = False
        for pos, done in enumerate(decoded):
            if not done and pos not in plan.nulls:
                columns[pos] = repeat(self.defaults[pos])
        if any(decoded):
            images = list(zip(*columns))  # noqa: B905 - the repeats are endless
        else:
            images = [tuple(self.defaults[p] if p not in plan.nulls else None for p in range(len(columns)))] * m
        bad = ~ok
        if bad.any():
            failed[where[bad]] = True
        if len(where) == len(out):
            out[:] = images
            return
        for j, image in zip(where.tolist(), images, strict=True):
            out[j] = image


def _cell_ends(
    src: _Source, plan: _Layout, s: np.ndarray, size: np.ndarray, ids_end: int, data_start: int, checksum: int
) -> tuple[np.ndarray, np.ndarray]:
    """(cell end offsets, rows whose offsets ascend and end the value) of records with this layout."""
    n = plan.n_notnull
    m = len(s)
    if n:
        raw = src.data[(s + ids_end)[:, None] + np.arange((4 if plan.large else 2) * n, dtype=np.int64)]
        ends = np.ascontiguousarray(raw).view("<u4" if plan.large else "<u2").reshape(m, n).astype(np.int64)
        ok = np.all(ends[:, 1:] >= ends[:, :-1], axis=1) if n > 1 else np.ones(m, bool)
        data_end = data_start + ends[:, -1]
        ok &= data_end <= size
    else:
        ends = np.zeros((m, 0), np.int64)
        ok = np.ones(m, bool)
        data_end = np.full(m, data_start, np.int64)
    if checksum:
        # trailer: header byte (bits 0-2 version <= 2, bit 3 extra) + u32 [+ u32]
        ok &= data_end < size
        trailer = src.data[s + np.minimum(data_end, size - 1)].astype(np.int64)
        ok &= ((trailer & 7) <= 2) & (data_end + 5 + (trailer & 8) // 2 == size)
    else:
        ok &= data_end == size
    if not ok.all():
        ends[~ok] = 0  # cells of rows already failed stay inside their value
    return ends, ok


def _decode_cells(
    src: _Source, vector: Vector | None, cell: V2Cell, cs: np.ndarray, ce: np.ndarray, ok: np.ndarray
) -> list[Any]:
    """One column's values of all rows: the vector decoder, the scalar cell decoder for the rows it
    leaves; a row the scalar decoder fails is cleared in ``ok``."""
    redo: np.ndarray | None
    if vector is None:
        values, redo = [None] * len(cs), np.ones(len(cs), bool)
    else:
        values, redo = vector(src, cs, ce)
    if redo is not None:
        for j in np.flatnonzero(redo & ok).tolist():
            a, b = int(cs[j]), int(ce[j])
            try:
                values[j] = cell(src.cell(a, b), 0, b - a)
            except Exception:  # any failure: the reference path decides
                ok[j] = False
    return values


def _vector_decoder(mounter: Mounter, decoder: RowDecoder) -> VectorDecoder:
    found = mounter.vector_decoders.get(id(decoder))
    if found is None:
        tz = mounter.tz
        found = VectorDecoder(decoder, ZoneConverter(tz) if tz is not None else None)
        mounter.vector_decoders[id(decoder)] = found
    return found


# ---------------------------------------------------------------- batches


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _ints(batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(values as int64/uint64 with nulls as 0, valid mask) of an integer column, None if absent."""
    if name not in batch.schema.names:
        return None
    arr = batch.column(name)
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else np.ones(len(arr), bool)
    return pc.fill_null(arr, 0).to_numpy(zero_copy_only=False), valid


def fits(batch: Any) -> bool:
    """Whether `mount_batch` can take this batch: a RecordBatch with binary keys/values and int timestamps."""
    if not isinstance(batch, pa.RecordBatch):
        return False
    schema = batch.schema
    names = set(schema.names)
    if not {"op", "key", "commit_ts"} <= names or "encoding" in names:
        return False
    if not (pa.types.is_string(schema.field("op").type) or pa.types.is_large_string(schema.field("op").type)):
        return False
    if not all(_is_binary(schema.field(c).type) for c in ("key", "value", "old_value") if c in names):
        return False
    ints = ("start_ts", "commit_ts", "region_id", "ts")
    return all(pa.types.is_integer(schema.field(c).type) for c in ints if c in names)


def mount_batch(mounter: Mounter, batch: pa.RecordBatch, source: str, first_row: int) -> list[Event]:
    """Mount a batch that `fits`: the vectorised path, with the reference path for the records it leaves."""
    n = batch.num_rows
    names = set(batch.schema.names)
    ops = batch.column("op")
    _check_ops(ops, source, first_row)
    commit, commit_valid = _ints(batch, "commit_ts")  # type: ignore[misc]
    ts = _ints(batch, "ts")
    has_ts = ts[1] if ts is not None else np.zeros(n, bool)
    missing = ~(commit_valid | has_ts)
    if missing.any():
        raise CaptureError("record has no commit_ts", where=f"{source} row {first_row + int(np.argmax(missing))}")

    keys = _Source(batch.column("key"))
    klen = keys.ends - keys.starts
    is_put = pc.fill_null(pc.equal(ops, "put"), False).to_numpy(zero_copy_only=False)
    is_del = pc.fill_null(pc.equal(ops, "delete"), False).to_numpy(zero_copy_only=False)
    fast = (is_put | is_del) & (klen == _KEY_LEN) & commit_valid & ~has_ts
    if commit.dtype.kind == "i":
        fast &= commit > 0  # the reference path refuses the rest
    commit = commit.astype(np.uint64)
    if not fast.any():
        return _finish(mounter, batch, source, first_row, [None] * n, fast)
    kbytes = keys.data[np.where(fast, keys.starts, 0)[:, None] + np.arange(_KEY_LEN, dtype=np.int64)]
    fast &= (kbytes[:, 0] == 0x74) & (kbytes[:, 9] == 0x5F) & (kbytes[:, 10] == 0x72)  # "t", "_r"
    tids = (np.ascontiguousarray(kbytes[:, 1:9]).view(">u8").ravel() ^ _SIGN).astype(np.uint64).view(np.int64)
    handles = (np.ascontiguousarray(kbytes[:, 11:19]).view(">u8").ravel() ^ _SIGN).astype(np.uint64).view(np.int64)

    values = _Source(batch.column("value")) if "value" in names else None
    olds = _Source(batch.column("old_value")) if "old_value" in names else None
    new_len = values.ends - values.starts if values is not None else np.zeros(n, np.int64)
    old_len = olds.ends - olds.starts if olds is not None else np.zeros(n, np.int64)
    fast &= np.where(is_put, new_len > 0, old_len > 0)  # puts without a value, key-only deletes: reference
    if not fast.any():
        return _finish(mounter, batch, source, first_row, [None] * n, fast)

    starts = _ints(batch, "start_ts")
    regions = _ints(batch, "region_id")
    done: list[tuple[np.ndarray, list[Any]]] = []  # (rows, their events) per table version
    for tid in np.unique(tids[fast]).tolist():
        pending = fast & (tids == tid)
        for _ in range(8):  # schema versions in one batch; more are left to the reference path
            if not pending.any():
                break
            hot = _direct_decoder(mounter, tid, int(commit[int(np.argmax(pending))]))
            if hot is None:
                break
            served = pending & (commit > np.uint64(hot.lo))
            if hot.hi < 1 << 64:
                served &= commit <= np.uint64(hot.hi)
            pending &= ~served
            vd = _vector_decoder(mounter, hot.decoder)
            rows = np.flatnonzero(served)
            ok = np.ones(len(rows), bool)
            verify = mounter.verify_checksum
            news = _side_images(vd, values, rows, is_put[rows], handles, verify, ok)
            prior = _side_images(vd, olds, rows, old_len[rows] > 0, handles, verify, ok)
            if not ok.all():
                fast[rows[~ok]] = False
                rows, news, prior = rows[ok], list(compress(news, ok)), list(compress(prior, ok))
            events = _row_events(hot.decoder.table.schema, hot.partition_id, rows, news, prior, commit, handles)
            _stamp(events, rows, starts, regions)
            done.append((rows, events))
        fast[pending] = False
    if len(done) == 1 and len(done[0][1]) == n:
        return done[0][1]
    placed: list[Any] = [None] * n
    for rows, events in done:
        for r, event in zip(rows.tolist(), events, strict=True):
            placed[r] = event
    return _finish(mounter, batch, source, first_row, placed, fast)


def _check_ops(ops: pa.Array, source: str, first_row: int) -> None:
    if ops.null_count or not pc.all(pc.is_in(ops, pa.array(_OPS))).as_py():
        from .records import _checked_op  # noqa: PLC0415 - raises naming the first bad op, as decode_batch does

        for i, op in enumerate(ops.to_pylist()):
            _checked_op(op, source, first_row + i)


def _direct_decoder(mounter: Mounter, tid: int, commit_ts: int) -> _Hot | None:
    """The table version a record committed at ``commit_ts`` reads with, if its rows can be read here."""
    try:
        hot = mounter.table_decoder(tid, commit_ts)
    except CaptureError:
        return None
    return hot if hot is not None and hot.decoder.direct else None


def _stamp(
    events: list[Any],
    rows: np.ndarray,
    starts: tuple[np.ndarray, np.ndarray] | None,
    regions: tuple[np.ndarray, np.ndarray] | None,
) -> None:
    """Set the start ts (where non-zero) and the region (where given) of the events of ``rows``."""
    if starts is not None:
        for j in np.flatnonzero(starts[0][rows]).tolist():
            events[j].start_ts = int(starts[0][rows[j]])
    if regions is not None:
        for j in np.flatnonzero(regions[1][rows]).tolist():
            events[j].position = {"region_id": int(regions[0][rows[j]])}


def _side_images(
    vd: VectorDecoder,
    src: _Source | None,
    rows: np.ndarray,
    mask: np.ndarray,
    handles: np.ndarray,
    verify_checksum: bool,
    ok: np.ndarray,
) -> list[Any]:
    """The new or the old images of ``rows`` (None where ``mask`` is False); failed rows are cleared in ``ok``."""
    m = len(rows)
    if src is None or not mask.any():
        return [None] * m
    sel = rows[mask]
    images, failed = vd.images(src, sel, handles[sel], verify_checksum)
    ok[mask] &= ~failed
    return images if len(sel) == m else _scatter(m, np.flatnonzero(mask), images)


def _row_events(
    table: TableSchema,
    partition: int | None,
    rows: np.ndarray,
    news: list[Any],
    prior: list[Any],
    commit: np.ndarray,
    handles: np.ndarray,
) -> list[Any]:
    """The row changes of one table version: DELETE without a new image, INSERT without an old one."""
    return [
        trusted_row(
            Op.DELETE if new is None else Op.INSERT if old is None else Op.UPDATE, table, c, new, old, partition, h
        )
        for new, old, c, h in zip(news, prior, commit[rows].tolist(), handles[rows].tolist(), strict=True)
    ]


def _scatter(m: int, at: np.ndarray, items: list[Any]) -> list[Any]:
    out: list[Any] = [None] * m
    for j, item in zip(at.tolist(), items, strict=True):
        out[j] = item
    return out


def _finish(
    mounter: Mounter, batch: pa.RecordBatch, source: str, first_row: int, events: list[Any], fast: np.ndarray
) -> list[Event]:
    """Mount the records the fast path left with the reference path, in place; drop the skipped."""
    from .mounter import KVRecord  # noqa: PLC0415
    from .records import _OPS as OP_NAMES  # noqa: PLC0415

    slow = np.flatnonzero(~fast)
    if len(slow):
        take = pa.array(slow)
        names = batch.schema.names

        def column(name: str) -> list[Any]:
            return batch.column(name).take(take).to_pylist() if name in names else [None] * len(slow)

        commits, tss = column("commit_ts"), column("ts")
        for r, raw_op, key, value, old, start, commit, ts, region in zip(
            slow.tolist(),
            column("op"),
            column("key"),
            column("value"),
            column("old_value"),
            column("start_ts"),
            commits,
            tss,
            column("region_id"),
            strict=True,
        ):
            op = OP_NAMES.get(raw_op.lower(), raw_op)
            record = KVRecord(op, key, value, old, start, commit if ts is None else ts, region)
            events[r] = mounter.mount(record, where=f"{source} row {first_row + r}")
    if len(slow) == 0:
        return events
    return [e for e in events if e is not None]
