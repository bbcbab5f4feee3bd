"""Open Protocol event texts for whole Arrow columns at once: the columnar twin of the per-row encoder.

Why: rendering one Python value at a time is most of what the per-row encoder costs. Here every
column of a table's `TableRows` becomes its JSON value texts in a few vectorised steps (Arrow
casts, numpy byte tables learnt from the per-row quoters), and the row texts are joined
column-wise. The result is byte for byte what `OpenProtocolEncoder._row_key`/`_row_value` give
for the same rows ([ticdc] line only). The only values rendered one by one are floats whose Go
text has an exponent (or NaN/±Inf), by the per-row renderer.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...model import ColumnFlag
from ...model.rowblock import TableRows
from ...model.schemacache import PlanCache
from ..gojson import go_quote_json
from ..values import decimal_texts, value_bytes
from .values import Kind, Render, column_kind

if TYPE_CHECKING:
    from ..options import CodecOptions
    from .encoder import _Plan

Rendered = tuple[list[bytes | None], list[bytes | None]]
Piece: TypeAlias = str | pa.Array  # a constant text, or one text per row

_I32_MAX = (1 << 31) - 1
_NULL = pa.scalar("null")
_PADS = pa.array(["", "\0\0", "\0"])  # zero bytes completing a value's last 3-byte group, by length % 3
# Per count k <= 8: a uint64 whose first k bytes (in memory order) are 1: row masks for _translate.
_FIRST_BYTES = np.frombuffer(b"".join(bytes([1] * k + [0] * (8 - k)) for k in range(9)), np.uint64)


class _NotColumnarError(Exception):
    """A column's Arrow type is not one this module renders: the table takes the per-row path."""


@dataclass(slots=True)
class _ColumnPlan:
    index: int  # position in the image
    head: str  # what goes before the value: "}," (not for the first member) + the column prefix
    kind: Kind
    render: Render  # the per-row renderer (per-value fallback)
    quote: Render  # the encoder's JSON string quoter: the source of the byte tables
    scale: int | None


@dataclass(slots=True)
class _TablePlan:
    cols: tuple[_ColumnPlan, ...]
    handle: tuple[_ColumnPlan, ...]
    key_tail: str


def _table_plan(plan: _Plan, quote: Render) -> _TablePlan:
    ts = plan.schema
    cols: list[_ColumnPlan] = []
    handle: list[_ColumnPlan] = []
    for i, prefix, render in plan.cols:
        column = ts.columns[i]
        kind = column_kind(column)
        cols.append(_ColumnPlan(i, ("}," if cols else "") + prefix, kind, render, quote, column.decimal))
        if column.key_flags & ColumnFlag.HANDLE_KEY:
            handle.append(_ColumnPlan(i, ("}," if handle else "") + prefix, kind, render, quote, column.decimal))
    return _TablePlan(tuple(cols), tuple(handle), plan.key_head + "}")


class ColumnRenderer:
    """Row key and value texts of whole `TableRows` for one encoder ([ticdc] Open Protocol)."""

    def __init__(self, plan_of: Callable[[Any], _Plan], options: CodecOptions, quote: Render) -> None:
        self.options = options
        self._plans = PlanCache(lambda ts: _table_plan(plan_of(ts), quote))

    def supports(self, rows: TableRows) -> bool:
        o = self.options
        # tiflow's key (rid, omitempty members) and only-output-updated-columns' per-row column
        # choice are left to the per-row path, as are partitioned tables (per-row "ptn").
        return not (o.tiflow or o.only_output_updated_columns or rows.table_schema.partitioned)

    def render(self, rows: TableRows) -> Rendered | None:
        """(keys, values) per row, UTF-8 and uncompressed; None where a row is not rendered here."""
        if not self.supports(rows):
            return None
        plan = self._plans.get(rows.table_schema)
        try:
            values = self._render(plan, rows)
        except _NotColumnarError:
            return None
        key_list = _keys(plan, rows.commit_ts)
        value_list: list[bytes | None] = values.cast(pa.binary()).to_pylist()
        partial = np.flatnonzero(~rows.full())
        for i in partial.tolist():  # MINIMAL/NOBLOB images: absent columns need the per-row path
            key_list[i] = value_list[i] = None
        return key_list, value_list

    def _render(self, plan: _TablePlan, rows: TableRows) -> pa.Array:
        o = self.options
        n = rows.num_rows
        ops = rows.ops
        texts = {c.index: column_pieces(c, rows.column(c.index)) for c in plan.cols}

        updates = np.flatnonzero(ops == 1)
        deletes = np.flatnonzero(ops == 2)
        # Insert {"u":{..}}, delete {"d":{..}}, update {"u":{..},"p":{..}} (spec §1.4).
        head: Piece = '{"u":{'
        if len(deletes):
            head = pa.array(['{"u":{', '{"u":{', '{"d":{']).take(pa.array(ops))
        tail: Piece = "}}"
        if len(updates) and o.output_old_value:
            take = pa.array(updates)
            old = [x for c in plan.cols for x in (c.head, *column_pieces(c, rows.before(c.index).take(take)))]
            with_old = _join('},"p":{', *old, "}" if plan.cols else "", "}}", n=len(updates))
            where = np.zeros(n, np.int32)
            where[updates] = np.arange(1, len(updates) + 1, dtype=np.int32)
            tail = pa.concat_arrays([pa.array(["}}"]), with_old]).take(pa.array(where))
        body = [x for c in plan.cols for x in (c.head, *texts[c.index])]
        values = _join(head, *body, "}" if plan.cols else "", tail, n=n)
        if len(deletes) and o.delete_only_output_handle_key_columns:
            # TiCDC's delete-only-output-handle-key-columns: a delete carries only its handle key.
            take = pa.array(deletes)
            handle = [_take(x, take) for c in plan.handle for x in (c.head, *texts[c.index])]
            short = _join('{"d":{', *handle, "}" if plan.handle else "", "}}", n=len(deletes))
            values = pc.replace_with_mask(values, pa.array(ops == 2), short)
        return values


def _keys(plan: _TablePlan, commit_ts: np.ndarray) -> list[bytes | None]:
    """Every row's key; rows of one transaction share one commit ts, so one key object per run."""
    n = len(commit_ts)
    if not n:
        return []
    starts = np.flatnonzero(np.concatenate([[True], commit_ts[1:] != commit_ts[:-1]]))
    run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n))).tolist()
    # ticdc's key writer: ts, scm, tbl, t (no ohk/ccl/ptn for a plain row event, spec §1.3).
    ts = pa.array(commit_ts[starts]).cast(pa.string())
    texts = _join('{"ts":', ts, plan.key_tail, n=len(starts)).cast(pa.binary()).to_pylist()
    return list(map(texts.__getitem__, run))


def _join(*pieces: Piece, n: int) -> pa.Array:
    """Row-wise concatenation of ``n`` rows of string arrays and constant texts."""
    merged: list[Piece] = []
    for p in pieces:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        elif p != "":
            merged.append(p)
    if all(isinstance(p, str) for p in merged):  # e.g. only NULL-typed columns
        return pa.array(["".join(merged)] * n, pa.string())
    return pc.binary_join_element_wise(*merged, "")


def _take(piece: Piece, rows: pa.Array) -> Piece:
    return piece if isinstance(piece, str) else piece.take(rows)


# ------------------------------------------------------------------ one column's value texts


def column_pieces(col: _ColumnPlan, arr: pa.Array) -> tuple[Piece, ...]:
    """The JSON text of every value of ``arr`` (``null`` for NULL) as pieces to concatenate.

    A string value's quotes stay constant pieces when the column has no NULL (one
    concatenation fewer); otherwise the texts are quoted first and NULLs filled in.
    """
    kind, t = col.kind, arr.type
    if kind is Kind.NULL or t == pa.null():
        return ("null",)
    if kind is Kind.INT:
        if not pa.types.is_integer(t):
            raise _NotColumnarError
        return (_fill(pc.cast(arr, pa.string()), arr),)
    if kind is Kind.FLOAT32 or kind is Kind.FLOAT64:
        # A FLOAT column must be float32 in Arrow: its text has float32 shortest digits.
        if t != (pa.float32() if kind is Kind.FLOAT32 else pa.float64()):
            raise _NotColumnarError
        return (_fill(_float_texts(arr, col.render), arr),)
    if kind is Kind.DECIMAL:
        return _quoted(_decimal_texts(arr, col.scale), arr)
    if t not in (pa.string(), pa.binary()):
        raise _NotColumnarError
    if kind is Kind.BASE64:
        return _quoted(_base64(arr), arr)
    if kind is Kind.GO_QUOTE:
        return _quoted(_go_quoted(arr, col.quote), arr)
    if t != pa.string():
        raise _NotColumnarError  # the model holds these values as str
    return _quoted(_json_escaped(arr, col.quote), arr)


def _quoted(texts: pa.Array, arr: pa.Array) -> tuple[Piece, ...]:
    if not arr.null_count:
        return '"', texts, '"'
    return (_fill(pc.binary_join_element_wise('"', texts, '"', ""), arr),)


def _fill(texts: pa.Array, arr: pa.Array) -> pa.Array:
    return pc.fill_null(texts, _NULL) if arr.null_count else texts


def _patch(texts: pa.Array, rows: np.ndarray, values: list[str]) -> pa.Array:
    """``texts`` with ``rows`` (ascending indices) replaced by ``values``."""
    if not len(rows):
        return texts
    mask = np.zeros(len(texts), bool)
    mask[rows] = True
    return pc.replace_with_mask(texts, pa.array(mask), pa.array(values, pa.string()))


def _float_texts(arr: pa.Array, render: Render) -> pa.Array:
    """Go's JSON float text (spec §0.5): Arrow's shortest digits where Go also prints positional.

    Arrow's cast prints the shortest round-trip digits like Go; where it writes plain digits
    (never for |v| < 1e-6, where Go switches to an exponent) the text is Go's. Exponent forms,
    NaN and ±Inf (the mounter's 0) take the per-row renderer.
    """
    texts = pc.cast(arr, pa.string())
    v = np.abs(arr.to_numpy(zero_copy_only=False).astype(np.float64))
    plain = ((v >= 1e-6) & (v < 1e21)) | (v == 0)  # not NaN/±Inf either
    if arr.null_count:
        plain |= arr.is_null().to_numpy(zero_copy_only=False)
    odd = ~plain
    off, data = value_bytes(texts)
    exponent = np.flatnonzero(data == ord("e"))  # any text Arrow wrote with an exponent
    if len(exponent):
        odd[np.searchsorted(off, exponent, side="right") - 1] = True
    rows = np.flatnonzero(odd)
    if len(rows):
        values = arr.take(pa.array(rows)).to_pylist()
        texts = _patch(texts, rows, [render(x) for x in values])
    return texts


def _decimal_texts(arr: pa.Array, scale: int | None) -> pa.Array:
    """TiDB's ``MyDecimal.String()`` of every value: plain digits, exactly ``scale`` fraction digits."""
    t = arr.type
    if t == pa.string():  # already that text (read_range_arrow(decimal="string"))
        return arr
    if not pa.types.is_decimal(t) or t.scale != scale:
        raise _NotColumnarError
    return decimal_texts(arr)


# ------------------------------------------------------------------ variable-length values as bytes


def _string_array(arr: pa.Array, off: np.ndarray, data: np.ndarray) -> pa.Array:
    """A string array of ``arr``'s length and NULLs with these offsets and bytes."""
    if len(data) > _I32_MAX:
        raise _NotColumnarError
    validity = arr.is_valid().buffers()[1] if arr.null_count else None
    return pa.Array.from_buffers(
        pa.string(),
        len(arr),
        [validity, pa.py_buffer(off.astype(np.int32)), pa.py_buffer(data)],
        null_count=arr.null_count,
    )


def _base64(arr: pa.Array) -> pa.Array:
    """Standard padded base64 of each value's bytes (TEXT/BLOB/GEOMETRY, spec §1.7).

    Each value is zero-padded to whole 3-byte groups (one Arrow concatenation), the lot is
    encoded in one call, and the characters standing for padding become ``=``: the other
    characters do not depend on it.
    """
    lengths = pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    rest = lengths % 3
    if 4 * ((int(lengths.sum()) + 2 * len(arr)) // 3) > _I32_MAX:
        raise _NotColumnarError
    pads = _PADS if arr.type == pa.string() else _PADS.cast(arr.type)
    # NULLs stay NULL (no bytes): their texts are filled in later.
    padded = pc.binary_join_element_wise(arr, pads.take(pa.array(rest)), pads[0])
    off, data = value_bytes(padded)
    out = np.frombuffer(bytearray(binascii.b2a_base64(data.data, newline=False)), np.uint8)
    starts = off // 3 * 4
    ends = starts[1:]
    out[ends[rest != 0] - 1] = ord("=")
    out[ends[rest == 1] - 2] = ord("=")
    return _string_array(arr, starts, out)


def _translate(
    off: np.ndarray,
    data: np.ndarray,
    tokens: np.ndarray,
    sizes: np.ndarray,
    keep: np.ndarray | None = None,
    runes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    size: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Replace every byte ``b`` by ``tokens[b, :sizes[b]]`` (tokens up to 8 bytes); new offsets and bytes.

    ``keep``: positions (an index array or a mask) of bytes that stay as they are. ``runes``:
    (positions, widths, tokens, token sizes) of multi-byte sequences replaced as a whole (a token
    up to 8 bytes per byte of the sequence). Each byte gets an 8-byte row; the bytes in use, read
    row by row, are the output.
    ``size``: ``sizes[data]`` if the caller has it (it is modified).
    """
    matrix = tokens.view("<u8")[data, 0].view(np.uint8).reshape(len(data), 8)
    if size is None:
        size = np.take(sizes, data)
    if keep is not None:
        matrix[keep, 0] = data[keep]
        size[keep] = 1
    if runes is not None:
        at, width, rune_tokens, rune_sizes = runes
        for k in range(int(width.max())):
            part = np.minimum(np.maximum(rune_sizes.astype(np.int64) - 8 * k, 0), 8)
            some = width > k
            size[at[some] + k] = part[some]
            if rune_tokens.shape[1] > 8 * k:
                matrix[at[some] + k, : rune_tokens.shape[1] - 8 * k] = rune_tokens[some, 8 * k : 8 * k + 8]
    out = np.extract(_FIRST_BYTES[size].view(np.bool_), matrix)
    total = np.zeros(len(data) + 1, np.int64)
    np.cumsum(size, out=total[1:])
    return total[off], out


def _token_table(encoded: list[bytes], width: int = 8) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.zeros((len(encoded), max(width, *(len(e) for e in encoded))), np.uint8)
    for b, e in enumerate(encoded):
        tokens[b, : len(e)] = np.frombuffer(e, np.uint8)
    return tokens, np.array([len(e) for e in encoded], np.uint8)


# The tables below are learnt from the per-row renderers themselves, once per JSON quoter (a
# module-level function, so the caches stay small).


@functools.cache
def _json_table(quote: Render) -> tuple[np.ndarray, np.ndarray]:
    """Per UTF-8 byte, what ``quote`` writes for it in a string: ASCII as it escapes it, others kept."""
    return _token_table([quote(chr(b))[1:-1].encode() if b < 0x80 else bytes([b]) for b in range(256)])


@functools.cache
def _go_table(quote: Render) -> tuple[np.ndarray, np.ndarray]:
    """Per byte, the binary-string renderer's text of that byte alone: ASCII as Go's Quote and then
    ``quote`` escape it, others (never valid alone) as ``\\\\xHH``."""
    render = go_quote_json(quote)
    return _token_table([render(bytes([b]))[1:-1].encode() for b in range(256)])


class _Runes:
    """What the binary-string renderer writes for each valid multi-byte rune, learnt as runes appear."""

    def __init__(self, quote: Render) -> None:
        self._render = go_quote_json(quote)
        self._state = np.zeros(0x110000, np.int8)  # 0 not seen yet, 1 kept as it is, 2 escaped
        self._escapes: dict[int, bytes] = {}

    def escaped(self, code: np.ndarray) -> np.ndarray:
        """Per rune: does Go escape it (not ``unicode.IsPrint``)?"""
        state = self._state[code]
        new = np.unique(code[state == 0])
        if len(new):
            for c in new.tolist():
                text = self._render(chr(c).encode("utf-8"))[1:-1].encode()
                if text == chr(c).encode("utf-8"):
                    self._state[c] = 1
                else:
                    self._state[c] = 2
                    self._escapes[c] = text
            state = self._state[code]
        escaped: np.ndarray = state == 2
        return escaped

    def tokens(self, code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        distinct, which = np.unique(code, return_inverse=True)
        tokens, sizes = _token_table([self._escapes[c] for c in distinct.tolist()])
        return tokens[which], sizes[which]


@functools.cache
def _runes(quote: Render) -> _Runes:
    return _Runes(quote)


def _json_escaped(arr: pa.Array, quote: Render) -> pa.Array:
    """Each string's JSON string body as ``quote`` (ticdc's json-iterator) writes it."""
    tokens, sizes = _json_table(quote)
    off, data = value_bytes(arr)
    if not len(data):
        return arr
    size = np.take(sizes, data)
    if size.max() == 1:
        return arr  # nothing to escape (the common case)
    return _string_array(arr, *_translate(off, data, tokens, sizes, size=size))


def _go_quoted(arr: pa.Array, quote: Render) -> pa.Array:
    """Each value's Go ``strconv.Quote`` body, JSON-escaped (binary CHAR/VARCHAR, spec §1.7).

    Go walks the bytes as UTF-8, rune by rune: printable ASCII stays, a byte that does not start a
    valid sequence becomes ``\\xHH``, a valid rune stays if printable and is escaped otherwise.
    Valid sequences are found for all bytes at once; each distinct rune is learnt once (`_Runes`).
    """
    tokens, sizes = _go_table(quote)
    off, data = value_bytes(arr)
    if not len(data):
        return arr.cast(pa.string())
    size = np.take(sizes, data)
    if size.max() == 1:
        return arr.cast(pa.string())  # printable ASCII only
    keep = runes = None
    last = len(data) - 1
    lead = np.flatnonzero((data >= 0xC2) & (data <= 0xF4))
    # Every valid sequence's second byte is a continuation byte (10xxxxxx): the cheap test first.
    lead = lead[(data[np.minimum(lead + 1, last)] & 0xC0) == 0x80]
    if len(lead):
        b0 = data[lead]
        b1, b2, b3 = (data[np.minimum(lead + k, last)] for k in (1, 2, 3))
        # Go's utf8.DecodeRune: no overlong forms, no surrogates, nothing above U+10FFFF.
        lo = np.where(b0 == 0xE0, 0xA0, np.where(b0 == 0xF0, 0x90, 0x80))
        hi = np.where(b0 == 0xED, 0x9F, np.where(b0 == 0xF4, 0x8F, 0xBF))
        cont2, cont3 = (b2 & 0xC0) == 0x80, (b3 & 0xC0) == 0x80
        width = np.where(b0 < 0xE0, 2, np.where(b0 < 0xF0, 3, 4))
        ok = (b1 >= lo) & (b1 <= hi) & ((width == 2) | cont2 & ((width == 3) | cont3))
        lead, width = lead[ok], width[ok]
        owner = np.searchsorted(off, lead, side="right") - 1
        inside = lead + width <= off[owner + 1]  # a rune never spans two values
        lead, width = lead[inside], width[inside]
        if len(lead):
            c0, c1, c2, c3 = (
                data[np.minimum(lead + k, last)].astype(np.int64) & (0xFF if k == 0 else 0x3F) for k in range(4)
            )
            code = np.where(
                width == 2,
                ((c0 & 0x1F) << 6) | c1,
                np.where(
                    width == 3, ((c0 & 0x0F) << 12) | (c1 << 6) | c2, ((c0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3
                ),
            )
            learnt = _runes(quote)
            escaped = learnt.escaped(code)
            kept, kept_width = lead[~escaped], width[~escaped]
            keep = np.concatenate([kept[kept_width > k] + k for k in range(4)])  # positions, not a mask
            if escaped.any():
                runes = (lead[escaped], width[escaped], *learnt.tokens(code[escaped]))
    return _string_array(arr, *_translate(off, data, tokens, sizes, keep, runes, size))


__all__ = ["ColumnRenderer", "Kind", "column_kind", "column_pieces"]
