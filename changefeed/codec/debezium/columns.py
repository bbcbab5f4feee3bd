"""Debezium column renderers: one table's rows (`TableRows`) to record keys and values, a column at a time.

Why: the per-row encoder pays a Python call per value (float digits, date arithmetic, base64)
and a join per row. Here each column of a table's Arrow batch becomes the JSON text of its
values in a few numpy/pyarrow passes, and every record is one ``binary_join_element_wise`` over
those columns and the table's constant bytes (the ``schema`` sections and the ``source`` block's
constant members, built once per table by `DebeziumEncoder`). The bytes are exactly the per-row
path's: tests/codec/test_debezium_columnar.py holds both paths to that.

Values (debezium.md §6), rendered as `values.value_renderer` renders one value:

* integers (YEAR too) are Arrow's decimal casts; BIGINT UNSIGNED >= 2^63 its int64 two's
  complement (Debezium's "long" mode, as TiCDC);
* FLOAT/DOUBLE are Arrow's shortest round-trip texts, which are Go's JSON digits wherever Arrow
  writes them positionally; values Arrow writes with an exponent, NaN and Inf go through
  `jfloat32`/`jfloat64` one by one. DECIMAL is TiDB's text parsed as float64 (correctly
  rounded, as Go's ParseFloat of the decimal's string), then rendered the same way;
* strings are escaped byte-wise as json-iterator writes them (``"``, ``\\`` and controls only;
  ``\\b``/``\\f`` as ``\\u0008``/``\\u000c``), binary values are standard base64;
* DATE/DATETIME are epoch days/ms/µs computed from the digits (2-digit years adjusted as
  Debezium's time adjuster does; zero or impossible dates: ``null``, or ``0`` when NOT NULL);
* ENUM is a table look-up; BIT(1) ``true``/``false``.

Anything else (TIME, TIMESTAMP with its zone, SET, wider BIT, GEOMETRY, text of an odd shape, an
Arrow type the model does not give that column) goes through the per-row renderer a value at a
time, still a column at a time. A value that renderer refuses makes the whole table not
columnar (None): the caller's per-row path then raises the error with the row's label. NULL is
the column's NULL rendering (TiCDC writes a NULL as its DEFAULT when the column has one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...model import Column, TypeCode
from ...model.rowblock import model_values
from ...model.types import BLOB_TYPES, CHAR_TYPES, DATE_TYPES, JSON_VECTOR_TYPES
from ..gojson import jfloat32, jfloat64, jstr
from ..values import B64_ALPHABET, decimal_texts, value_bytes
from .values import INTEGER_SCHEMA, Render, bit_length, fsp_of

_BIN = pa.binary()
_FAST_ERRORS = (TypeError, ValueError, AttributeError, ArithmeticError, IndexError)

Part: TypeAlias = bytes | pa.Array  # constant bytes, or one value per row


# ------------------------------------------------------------------ byte-level helpers


def _binary_array(n: int, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """A binary array from int64 offsets (from 0) and its bytes; ``valid``: False rows are null."""
    offset_type = np.int32 if int(offsets[-1]) < (1 << 31) else np.int64
    typ = _BIN if offset_type is np.int32 else pa.large_binary()
    validity = None
    nulls = 0
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = int(n - valid.sum())
    arr = pa.Array.from_buffers(
        typ, n, [validity, pa.py_buffer(offsets.astype(offset_type)), pa.py_buffer(data)], nulls
    )
    return arr if typ == _BIN else arr.cast(_BIN)


def _valid(values: pa.Array) -> np.ndarray | None:
    if not values.null_count:
        return None
    out: np.ndarray = values.is_valid().to_numpy(zero_copy_only=False)
    return out


def _escape_table() -> tuple[np.ndarray, np.ndarray]:
    """Per byte value: its output length and output bytes (6 slots) in a json-iterator string."""
    short = {0x22: b'\\"', 0x5C: b"\\\\", 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}
    lengths = np.ones(256, np.int64)
    codes = np.zeros((256, 6), np.uint8)
    codes[:, 0] = np.arange(256)
    for c in [*range(0x20), 0x22, 0x5C]:
        out = short.get(c, b"\\u%04x" % c)
        lengths[c] = len(out)
        codes[c, : len(out)] = np.frombuffer(out, np.uint8)
    return lengths, codes


_ESC_LEN, _ESC_CODES = _escape_table()


def quoted_strings(values: pa.Array) -> pa.Array:
    """String (or binary, read as its bytes) array -> each value as a JSON string literal, as `jstr`
    writes it: byte-wise (json-iterator copies bytes >= 0x80 as they are); nulls stay null."""
    n = len(values)
    offsets, data = value_bytes(values)
    counts = np.diff(offsets)
    lengths = _ESC_LEN[data]
    ends = np.cumsum(lengths)
    row_of_byte = np.repeat(np.arange(n, dtype=np.int64), counts)
    start = ends - lengths + 2 * row_of_byte + 1  # each value gains its two quotes
    out_offsets = np.zeros(n + 1, np.int64)
    before = np.concatenate((np.zeros(1, np.int64), ends))[offsets]  # escaped bytes before each value
    out_offsets[:] = before + 2 * np.arange(n + 1, dtype=np.int64)
    out = np.empty(int(out_offsets[-1]), np.uint8)
    out[out_offsets[:-1]] = 0x22
    out[out_offsets[1:] - 1] = 0x22
    out[start] = _ESC_CODES[data, 0]
    special = np.flatnonzero(lengths > 1)
    if len(special):
        for k in range(1, 6):
            idx = special[lengths[special] > k]
            out[start[idx] + k] = _ESC_CODES[data[idx], k]
    return _binary_array(n, out_offsets, out, _valid(values))


def quoted_base64(values: pa.Array) -> pa.Array:
    """Binary array -> ``"<standard base64 with padding>"`` per value (binary.handling.mode=base64)."""
    n = len(values)
    offsets, data = value_bytes(values)
    counts = np.diff(offsets)
    groups = (counts + 2) // 3
    padded_start = np.concatenate((np.zeros(1, np.int64), np.cumsum(groups * 3)))
    row_of_byte = np.repeat(np.arange(n, dtype=np.int64), counts)
    padded = np.zeros(int(padded_start[-1]), np.uint8)
    padded[np.arange(len(data), dtype=np.int64) - offsets[row_of_byte] + padded_start[row_of_byte]] = data
    triples = padded.reshape(-1, 3).astype(np.uint32)
    word = (triples[:, 0] << 16) | (triples[:, 1] << 8) | triples[:, 2]
    chars = B64_ALPHABET[np.stack([(word >> s) & 63 for s in (18, 12, 6, 0)], axis=1)].reshape(-1)
    text_len = groups * 4
    text_start = np.concatenate((np.zeros(1, np.int64), np.cumsum(text_len)))
    rem = counts % 3  # 1: two "=", 2: one "="
    last = text_start[1:] - 1
    chars[last[rem == 1] - 1] = ord("=")
    chars[last[rem != 0]] = ord("=")
    out_offsets = text_start + 2 * np.arange(n + 1, dtype=np.int64)
    out = np.empty(int(out_offsets[-1]), np.uint8)
    out[out_offsets[:-1]] = 0x22
    out[out_offsets[1:] - 1] = 0x22
    row_of_char = np.repeat(np.arange(n, dtype=np.int64), text_len)
    out[np.arange(len(chars), dtype=np.int64) + 2 * row_of_char + 1] = chars
    return _binary_array(n, out_offsets, out, _valid(values))


# ------------------------------------------------------------------ numbers


def _numbers(values: pa.Array) -> pa.Array:
    return pc.cast(values, pa.string()).view(_BIN)


def _floats(values: pa.Array, float32: bool) -> pa.Array:
    """JSON numbers of a float array (§0.5): Arrow's text where positional; the rest per value."""
    texts = pc.cast(values, pa.string())
    _, data = value_bytes(texts)
    if bool((data >= ord("a")).any()):  # a letter: an exponent, nan or inf
        odd = pc.match_substring_regex(texts, "[eni]").fill_null(False)
        render = jfloat32 if float32 else jfloat64
        fixed = [render(v).decode() for v in values.filter(odd).to_pylist()]
        texts = pc.replace_with_mask(texts, odd, pa.array(fixed, pa.string()))
    return texts.view(_BIN)


def _decimals(values: pa.Array) -> pa.Array | None:
    """DECIMAL as float64 (decimal.handling.mode=double): Go's ParseFloat of TiDB's text, correctly rounded."""
    t = values.type
    if pa.types.is_decimal(t):
        texts = decimal_texts(values)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        return None  # decimal text of unknown shape: the per-value renderer reads it
    else:
        return None
    return _floats(pc.cast(texts, pa.float64()), float32=False)


# ------------------------------------------------------------------ temporal values


def _digits(data: np.ndarray, starts: np.ndarray, at: int, width: int) -> np.ndarray | None:
    """The number written by ``width`` ASCII digits at ``starts + at``; None: a byte is no digit."""
    out = np.zeros(len(starts), np.int64)
    for k in range(width):
        digit = data[starts + at + k].astype(np.int64) - 48
        if not ((digit >= 0) & (digit <= 9)).all():
            return None
        out = out * 10 + digit
    return out


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (years >= 1)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, np.int64(-3), np.int64(9))) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    out: np.ndarray = era * 146097 + doe - 719468
    return out


_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def _calendar(data: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(days since the epoch, is a real date) of ``YYYY-MM-DD`` at ``starts``; None: not that shape.

    Years below 100 are moved as Debezium's time adjuster moves them (0-69 -> 20xx, 70-99 ->
    19xx, which TiCDC applies too); month or day 0, or a day past the month's end, is no date.
    """
    for at in (4, 7):
        if not (data[starts + at] == ord("-")).all():
            return None
    y, m, d = _digits(data, starts, 0, 4), _digits(data, starts, 5, 2), _digits(data, starts, 8, 2)
    if y is None or m is None or d is None:
        return None
    y = y + 2000 * (y < 70) + 1900 * ((y >= 70) & (y < 100))
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    ok = (m >= 1) & (m <= 12) & (d >= 1)
    m, d = m * ok + ~ok, d * ok + ~ok  # impossible dates computed as January 1st (not used)
    ok &= d <= _MONTH_DAYS[m] + ((m == 2) & leap)
    return _days_from_civil(y, m, d), ok


def _fixed_shape(values: pa.Array, widths: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """(bytes, start of each non-null value, non-null mask, width) when every non-null value is
    ASCII digits and separators of one of ``widths``; None otherwise."""
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return None
    offsets, data = value_bytes(values)
    valid = values.is_valid().to_numpy(zero_copy_only=False) if values.null_count else np.ones(len(values), bool)
    starts = offsets[:-1][valid]
    if not len(starts):
        return data, starts, valid, 0
    lengths = offsets[1:][valid] - starts
    width = int(lengths[0])
    if width not in widths or not (lengths == width).all():
        return None
    return data, starts, valid, width


def _texts_at(n: int, valid: np.ndarray, numbers: np.ndarray, ok: np.ndarray, zero: bytes) -> pa.Array:
    """Texts of ``numbers`` at the non-null rows (``zero`` where not ``ok``), null elsewhere."""
    full = np.zeros(n, np.int64)
    full[valid] = numbers
    good = np.zeros(n, bool)
    good[valid] = ok
    texts = pa.array(full, mask=~good).cast(pa.string()).view(_BIN)
    if not bool((valid & ~good).any()):
        return texts
    return pc.if_else(pa.array(valid), texts.fill_null(zero), pa.scalar(None, _BIN))


def _dates(values: pa.Array, zero: bytes) -> pa.Array | None:
    shape = _fixed_shape(values, (10,))
    if shape is None:
        return None
    data, starts, valid, _ = shape
    cal = _calendar(data, starts) if len(starts) else (np.zeros(0, np.int64), np.zeros(0, bool))
    if cal is None:
        return None
    days, ok = cal
    return _texts_at(len(values), valid, days, ok, zero)


_DATETIME_WIDTHS = (19, 21, 22, 23, 24, 25, 26)


def _datetimes(values: pa.Array, micro: bool, zero: bytes) -> pa.Array | None:
    """io.debezium.time.Timestamp (ms, fsp <= 3) or MicroTimestamp (µs) of ``YYYY-MM-DD HH:MM:SS[.f]``."""
    shape = _fixed_shape(values, _DATETIME_WIDTHS)
    if shape is None:
        return None
    data, starts, valid, width = shape
    if not len(starts):
        return _texts_at(len(values), valid, np.zeros(0, np.int64), np.zeros(0, bool), zero)
    if not (np.isin(data[starts + 10], (ord(" "), ord("T")))).all():
        return None
    for at in (13, 16) + ((19,) if width > 19 else ()):
        if not (data[starts + at] == (ord(".") if at == 19 else ord(":"))).all():
            return None
    cal = _calendar(data, starts)
    if cal is None:
        return None
    days, ok = cal
    h, mi, s = _digits(data, starts, 11, 2), _digits(data, starts, 14, 2), _digits(data, starts, 17, 2)
    fraction = _digits(data, starts, 20, width - 20) if width > 19 else np.zeros(len(starts), np.int64)
    if h is None or mi is None or s is None or fraction is None:
        return None
    frac = fraction * 10 ** (26 - width) if width > 19 else fraction
    ok &= (h <= 23) & (mi <= 59) & (s <= 59)
    us = (days * 86400 + h * 3600 + mi * 60 + s) * 1_000_000 + frac
    return _texts_at(len(values), valid, us if micro else us // 1000, ok, zero)


# ------------------------------------------------------------------ per column


def _vector(col: Column, values: pa.Array) -> pa.Array | None:
    """The column's JSON value texts (null where NULL) with whole-array passes; None: not this way."""
    tc, t = col.type_code, values.type
    if tc in INTEGER_SCHEMA or tc is TypeCode.YEAR:
        if not pa.types.is_integer(t):
            return None
        if tc is TypeCode.BIGINT and col.unsigned and t == pa.uint64():
            values = values.cast(pa.int64(), safe=False)  # >= 2^63: two's complement (Debezium "long")
        return _numbers(values)
    if tc is TypeCode.FLOAT or tc is TypeCode.DOUBLE:
        want = pa.float32() if tc is TypeCode.FLOAT else pa.float64()
        return _floats(values, tc is TypeCode.FLOAT) if t == want else None
    if tc is TypeCode.DECIMAL:
        return _decimals(values)
    zero = b"null" if col.nullable else b"0"
    if tc in DATE_TYPES:
        return _dates(values, zero)
    if tc is TypeCode.DATETIME:
        return _datetimes(values, fsp_of(col) > 3, zero)
    if tc in (TypeCode.TIMESTAMP, TypeCode.TIME, TypeCode.SET, TypeCode.GEOMETRY):
        return None
    if tc is TypeCode.BIT:
        if bit_length(col) != 1 or not pa.types.is_unsigned_integer(t):
            return None
        return pc.if_else(pc.not_equal(values, pa.scalar(0, t)), b"true", b"false").cast(_BIN)
    if tc is TypeCode.ENUM:
        if not pa.types.is_unsigned_integer(t):
            return None
        table = pa.array([b'""', *(jstr(e) for e in col.elements)], _BIN)
        idx = values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.uint64)
        idx[idx > len(col.elements)] = 0  # MySQL's error value 0, or out of range: ""
        out = table.take(pa.array(idx.astype(np.int64)))
        return out if not values.null_count else pc.if_else(values.is_valid(), out, pa.scalar(None, _BIN))
    if tc in JSON_VECTOR_TYPES or (not col.is_bytes and (tc in CHAR_TYPES or tc in BLOB_TYPES)):
        return quoted_strings(values) if pa.types.is_string(t) or pa.types.is_large_string(t) else None
    if col.is_bytes and (tc in CHAR_TYPES or tc in BLOB_TYPES):
        return quoted_base64(values) if pa.types.is_binary(t) or pa.types.is_large_binary(t) else None
    return None


def value_texts(col: Column, values: pa.Array, render: Render, null: bytes) -> pa.Array | None:
    """Every row's JSON value text of ``col`` (``null`` where NULL); None: a value the per-row
    renderer refuses (the row path raises it with the row's label)."""
    texts = _vector(col, values)
    if texts is None:
        try:
            rendered = [null if v is None else render(v) for v in model_values(col, values)]
        except _FAST_ERRORS:
            return None
        return pa.array(rendered, _BIN)
    return texts.fill_null(null) if texts.null_count else texts


# ------------------------------------------------------------------ records


def concat(parts: Sequence[Part], n: int) -> pa.Array:
    """Row-wise concatenation of constant bytes and binary arrays (adjacent constants merged)."""
    merged: list[Any] = []
    for p in parts:
        if isinstance(p, bytes):
            if merged and isinstance(merged[-1], bytes):
                merged[-1] += p
            elif p:
                merged.append(p)
        else:
            merged.append(p)
    arrays = [p if not isinstance(p, bytes) else pa.scalar(p, _BIN) for p in merged]
    if not any(isinstance(p, pa.Array) for p in arrays):
        return pa.array([b"".join(merged)] * n, _BIN)
    if len(arrays) == 1:
        return arrays[0]
    return pc.binary_join_element_wise(*arrays, pa.scalar(b"", _BIN))


def object_parts(members: Sequence[bytes], texts: Sequence[pa.Array]) -> list[Part]:
    """``{"name":value,...}`` as parts for `concat` (``members``: each ``"name":``)."""
    parts: list[Part] = [b"{"]
    for k, (member, t) in enumerate(zip(members, texts, strict=True)):
        parts += [member if k == 0 else b"," + member, t]
    parts.append(b"}")
    return parts


def take(array: pa.Array, idx: np.ndarray | None) -> pa.Array:
    return array if idx is None else array.take(pa.array(idx))


def select(codes: np.ndarray, choices: Sequence[bytes]) -> Part:
    """Per row ``choices[code]``: one constant when every row has the same code."""
    first = int(codes[0])
    if (codes == first).all():
        return choices[first]
    return pa.array(list(choices), _BIN).take(pa.array(codes.astype(np.int64)))


def scatter(n: int, mask: np.ndarray, part: pa.Array, base: bytes) -> Part:
    """``base`` on every row but those of ``mask``, which take ``part``'s values in order."""
    if mask.all():
        return part
    if not mask.any():
        return base
    out = _binary_array(n, np.arange(n + 1, dtype=np.int64) * len(base), np.frombuffer(base * n, np.uint8), None)
    return pc.replace_with_mask(out, pa.array(mask), part)


def as_bytes(array: pa.Array) -> list[bytes]:
    """The values of a binary array without nulls, as bytes (numpy's conversion is the cheapest)."""
    out: list[bytes] = array.to_numpy(zero_copy_only=False).tolist()
    return out
