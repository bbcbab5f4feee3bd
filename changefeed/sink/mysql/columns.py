"""Row blocks in the MySQL sink: buffered segments, and SQL literals rendered a column at a time.

A `RowBlock` segment waits in the sink's buffer as a `BlockRows` (no per-row objects). At flush,
a table whose rows are all whole-image block inserts is rendered from its Arrow columns
(`render_inserts`, behind `TableSQL.insert_columns`); every other table's block rows become
`RowChange`s again (`expand`) and take the row path, so both give the same statements.

Every literal here is the text `Literal.column_renderer` gives the value `TableRows.images`
holds: integers as Arrow's decimal text, DECIMAL as plain digits, text quoted and escaped by
PyMySQL's rules (or with doubled quotes under NO_BACKSLASH_ESCAPES), bytes as ``X'hex'``, ENUM
indexes as member names. Types without a rule here (and floats, whose shortest-repr text needs
Python) go value by value through the row path's own renderer.

`load_rows` renders the same rows as a ``LOAD DATA`` file instead (tab-separated fields, ``\\N``
for NULL): each field is the text whose store gives what the INSERT literal stores (`load_fields`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...codec.values import decimal_texts, value_bytes
from ...model import Column, Position, RowChange, TypeCode
from ...model.arrow import arrow_type
from ...model.rowblock import Segment, TableRows, model_values
from ...model.types import TEXT_VALUE_TYPES, UINT_VALUE_TYPES

if TYPE_CHECKING:
    from .sql import Literal

__all__ = [
    "BlockRows",
    "Gather",
    "ImageColumns",
    "LoadFile",
    "expand",
    "load_fields",
    "load_rows",
    "pieces",
    "render_inserts",
]

_TEXT = pa.large_string()


@cache
def _s(text: str) -> pa.Scalar:
    """A large_string scalar (made on first use: building one imports pandas)."""
    return pa.scalar(text, _TEXT)


# PyMySQL's escape table (converters._escape_table), backslash first so no escape is escaped again.
_BACKSLASH_ESCAPES = (("\\", "\\\\"), ("\0", "\\0"), ("\n", "\\n"), ("\r", "\\r"), ("\x1a", "\\Z"), ("'", "\\'"),
                      ('"', '\\"'))  # fmt: skip
_QUOTE_ESCAPES = (("'", "''"),)
# A DECIMAL text that `format(Decimal(text), "f")` gives back unchanged.
_PLAIN_DECIMAL = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$"
_HEX_DIGITS = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint8).reshape(256, 2)


@dataclass(slots=True)
class BlockRows:
    """One segment of a `RowBlock` in the sink's buffer: rows [start, start + seg.rows) of ``table``."""

    table: TableRows  # the block's table, its schema shaped by the sink (DownstreamKeys)
    start: int
    seg: Segment

    @property
    def commit_ts(self) -> int:
        return self.seg.commit_ts

    @property
    def last_position(self) -> Position | None:
        """The position of the segment's last row (what the row path's last `RowChange` carries)."""
        return self.seg.row_position(self.seg.rows - 1)


Entry = RowChange | BlockRows


def expand(entries: Sequence[Entry]) -> list[RowChange]:
    """``entries`` as `RowChange`s in order, block rows with the positions `RowBlock.rows` gives them.

    Each block table is sliced once to the rows buffered from it, so its images are built once.
    """
    spans: dict[int, tuple[TableRows, int, int]] = {}
    for e in entries:
        if isinstance(e, BlockRows):
            lo, hi = e.start, e.start + e.seg.rows
            hit = spans.get(id(e.table))
            if hit is not None:
                lo, hi = min(lo, hit[1]), max(hi, hit[2])
            spans[id(e.table)] = (e.table, lo, hi)
    slices = {k: (t.slice(lo, hi - lo), lo) for k, (t, lo, hi) in spans.items()}
    out: list[RowChange] = []
    for e in entries:
        if not isinstance(e, BlockRows):
            out.append(e)
            continue
        rows, base = slices[id(e.table)]
        seg, at = e.seg, e.start - base
        for j in range(seg.rows):
            row = rows.row(at + j, seg.commit_ts)
            row.position = seg.row_position(j)
            out.append(row)
    return out


class Gather:
    """Rows of many slices, in order, as the few tables they were sliced from and one take index.

    Why: the Kafka decoder gives each message its own slice of a decoded chunk, and the merge
    interleaves partitions by commit ts, so a flush holds tens of thousands of few-row slices of
    a handful of tables. Joining them piece by piece costs per piece and column; taking each
    origin's rows (one index per origin) and putting them in order (one more) costs per row taken.
    Joining whole origins first cost per row of the origins: a decoded range is ~32k rows and a
    flush ~5k, so that join was most of a flush's rendering (~1.3 µs a row).
    """

    __slots__ = ("_picks", "bases", "index", "num_rows", "spans", "whole")

    def __init__(self, spans: Sequence[tuple[TableRows, int, int]]) -> None:
        """``spans``: (table, first row, rows), each table possibly a slice of another (`TableRows.origin`)."""
        where: dict[int, int] = {}
        self.bases: list[TableRows] = []
        which = np.empty(len(spans), np.int64)
        starts = np.empty(len(spans), np.int64)
        lengths = np.empty(len(spans), np.int64)
        for j, (table, start, rows) in enumerate(spans):
            root, at = table.origin
            k = where.get(id(root))
            if k is None:
                k = where[id(root)] = len(self.bases)
                self.bases.append(root)
            which[j], starts[j], lengths[j] = k, at + start, rows
        self.spans = (which, starts, lengths)
        self.num_rows = int(lengths.sum())
        base_at = np.cumsum([0, *(b.num_rows for b in self.bases)])[:-1]
        firsts = base_at[which] + starts  # each span's first row in the bases laid end to end
        run_at = np.cumsum(lengths) - lengths
        self.index = np.repeat(firsts - run_at, lengths) + np.arange(self.num_rows)
        # Exactly one base's rows in order: columns need no take.
        self.whole = (
            len(self.bases) == 1
            and self.num_rows == self.bases[0].num_rows
            and bool((self.index == np.arange(self.num_rows)).all())
        )
        self._picks: tuple[list[pa.Array], pa.Array | None] | None = None

    @classmethod
    def of(cls, tables: Sequence[TableRows]) -> Gather:
        return cls([(t, 0, t.num_rows) for t in tables])

    def tables(self) -> list[TableRows]:
        """The rows as slices of their bases, in order (the piece-by-piece form)."""
        return [self.bases[k].slice(s, n) for k, s, n in zip(*(a.tolist() for a in self.spans), strict=True)]

    def column(self, i: int) -> pa.Array | None:
        """Column ``i`` of the rows in order; None when the bases' Arrow types differ."""
        arrays = [b.column(i) for b in self.bases]
        if self.whole:
            return arrays[0]
        if any(a.type != arrays[0].type for a in arrays):
            return None
        picks, order = self._picked()
        taken = [a.take(p) for a, p in zip(arrays, picks, strict=True)]
        if order is None:
            return taken[0]
        try:
            return pa.concat_arrays(taken).take(order)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None

    def _picked(self) -> tuple[list[pa.Array], pa.Array | None]:
        """Each base's rows (its own row numbers, in order) and where each row is in their join (None: one base)."""
        if self._picks is None:
            if len(self.bases) == 1:
                self._picks = [pa.array(self.index)], None
            else:
                which = np.repeat(self.spans[0], self.spans[2])
                starts = np.cumsum([0, *(b.num_rows for b in self.bases)])
                by_base = np.argsort(which, kind="stable")  # join position -> row
                order = np.empty_like(by_base)
                order[by_base] = np.arange(len(by_base))
                picks = [pa.array(self.index[which == k] - starts[k]) for k in range(len(self.bases))]
                self._picks = picks, pa.array(order)
        return self._picks

    def inserts_full(self, writable: Sequence[int]) -> bool:
        """Whether every row is an INSERT whose image carries every writable column (`TableSQL.full`)."""
        mask = sum(1 << i for i in writable)
        ok = []
        for b in self.bases:
            good = b.ops == 0
            if b.main_runs is not None:
                per_run = [present == -1 or present & mask == mask for present, _ in b.main_runs]
                good &= np.repeat(np.array(per_run, bool), [k for _, k in b.main_runs])
            ok.append(good)
        return bool(np.concatenate(ok)[self.index].all()) if ok else True


def pieces(entries: Sequence[BlockRows]) -> Gather:
    """The buffered rows, gathered from the tables their segments were sliced from."""
    return Gather([(e.table, e.start, e.seg.rows) for e in entries])


# --- literals ------------------------------------------------------------------------------------


def _join(*parts: Any) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _s(""))


def _escaped(values: pa.Array, escapes: Sequence[tuple[str, str]]) -> pa.Array:
    """Text with ``escapes`` applied, only for the characters the column holds (one count over its bytes)."""
    values = values.cast(_TEXT)
    data = value_bytes(values)[1]
    if data.size:
        counts = np.bincount(data, minlength=256)
        for char, escaped in escapes:
            if counts[ord(char)]:
                values = pc.replace_substring(values, char, escaped)
    return values


def _text_literals(values: pa.Array, literal: Literal) -> pa.Array:
    """Quoted text, escaped as the session's sql_mode reads it."""
    escapes = _QUOTE_ESCAPES if literal.no_backslash_escapes else _BACKSLASH_ESCAPES
    return _join(_s("'"), _escaped(values, escapes), _s("'"))


def _hex_digits(values: pa.Array) -> pa.Array:
    """Two hex digits per byte of binary values, by table lookup (a NULL's slot is empty)."""
    offsets, data = value_bytes(values)
    digits = _HEX_DIGITS[data].reshape(-1)
    return pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets * 2), pa.py_buffer(digits))


def _hex_literals(values: pa.Array) -> pa.Array:
    """``X'..'`` of binary values."""
    out = _join(_s("X'"), _hex_digits(values), _s("'"))
    return pc.if_else(values.is_valid(), out, _s("NULL")) if values.null_count else out


def _float_literals(values: pa.Array) -> pa.Array:
    """Shortest round-trip digits (``repr``) with ``e0`` where there is no exponent; NaN/inf raise."""
    out = []
    for v in values.to_pylist():
        if v is None:
            out.append("NULL")
            continue
        text = repr(v)
        if "e" in text:
            out.append(text)
        elif "n" in text:  # nan, inf, -inf
            raise ValueError(f"{text} has no MySQL literal")
        else:
            out.append(text + "e0")
    return pa.array(out, _TEXT)


def _enum_literals(column: Column, values: pa.Array, literal: Literal) -> pa.Array:
    """ENUM indexes as member names (0: ''), an index past the members as the number (`_enum_param`)."""
    n = len(column.elements)
    names = pa.array([literal.text(""), *(literal.text(e) for e in column.elements)], _TEXT)
    known = pc.less_equal(values, n)
    named = pc.take(names, pc.if_else(known, values, pa.scalar(0, values.type)))
    return pc.if_else(known, named, values.cast(_TEXT))


def _decimal_text_literals(values: pa.Array) -> pa.Array | None:
    """DECIMAL text as `format(Decimal(text), "f")` gives it: the text itself when it is plain digits."""
    plain = pc.match_substring_regex(values, _PLAIN_DECIMAL)
    if not pc.all(plain.fill_null(True)).as_py():
        return None
    return values.cast(_TEXT)


def column_literals(column: Column, values: pa.Array, literal: Literal, render: Callable[[Any], str]) -> pa.Array:
    """The SQL literal of each value (large_string, no nulls): ``render`` over `TableRows.images`' values.

    ``render`` is the row path's renderer of the column, used value by value where no
    vectorised rule applies. Raises what ``render`` raises for a value without a literal.
    """
    t = values.type
    tc = column.type_code
    out: pa.Array | None = None
    if pa.types.is_integer(t):
        if tc is TypeCode.ENUM and column.elements:
            if not pa.types.is_signed_integer(t) or not pc.any(pc.less(values, 0)).as_py():
                out = _enum_literals(column, values, literal)
        else:
            out = values.cast(_TEXT)
    elif pa.types.is_boolean(t):
        if tc is not TypeCode.ENUM:
            out = pc.if_else(values, _s("1"), _s("0"))
    elif pa.types.is_floating(t):
        return _float_literals(values)
    elif pa.types.is_decimal(t):
        out = decimal_texts(values).cast(_TEXT)
    elif pa.types.is_string(t) and tc is TypeCode.DECIMAL:  # exact text; the model holds a Decimal
        out = _decimal_text_literals(values)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = _text_literals(values, literal)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out = _hex_literals(values)
    if out is None:
        return _python_literals(column, values, render)
    return out.fill_null(_s("NULL")) if out.null_count else out


def _python_literals(column: Column, values: pa.Array, render: Callable[[Any], str]) -> pa.Array:
    return pa.array([render(v) for v in model_values(column, values)], _TEXT)


def _concat_column(column: Column, arrays: list[pa.Array], literal: Literal, render: Callable[[Any], str]) -> pa.Array:
    if len(arrays) == 1:
        return column_literals(column, arrays[0], literal, render)
    if all(a.type == arrays[0].type for a in arrays):
        return column_literals(column, pa.concat_arrays(arrays), literal, render)
    return pa.concat_arrays([column_literals(column, a, literal, render) for a in arrays])


def render_inserts(
    columns: Sequence[Column],
    rows: Gather,
    positions: Sequence[int],
    renderers: Sequence[Callable[[Any], str]],
    literal: Literal,
    prefix: str,
    max_rows: int,
    max_bytes: int,
) -> Iterator[tuple[str, int]]:
    """``prefix`` + ``(v,..),(v,..)`` statements over ``rows``, cut where `_chunked` cuts.

    Everything is rendered before the first statement is yielded, so a value without a literal
    raises before any statement.
    """
    n = rows.num_rows
    if not n:
        return
    pieces: list[TableRows] | None = None
    if positions:
        parts: list[Any] = [_s("(")]
        for k, i in enumerate(positions):
            if k:
                parts.append(_s(","))
            column = rows.column(i)
            if column is not None:
                arrays = [column]
            else:  # bases of different Arrow types: literals piece by piece
                pieces = rows.tables() if pieces is None else pieces
                arrays = [t.column(i) for t in pieces]
            parts.append(_concat_column(columns[i], arrays, literal, renderers[i]))
        parts.append(_s("),"))
        items = _join(*parts)
    else:
        items = pa.array(["(),"] * n, _TEXT)
    offsets, data = value_bytes(items)
    # `_chunked` counts characters: bytes unless some text is not ASCII. Lengths include the comma.
    ascii_only = not data.size or int(data.max()) < 0x80
    lengths = np.diff(offsets) if ascii_only else pc.utf8_length(items).to_numpy().astype(np.int64)
    ends = np.cumsum(lengths)  # ends[i]: chars of items 0..i, commas included
    text = data.data  # memoryview(data): the same view, typed (numpy declares __buffer__ for 3.12+ only)
    base = len(prefix)
    start = 0
    while start < n:
        before = int(ends[start - 1]) if start else 0
        # `_chunked` cuts before item i > start when base + ends[i] - 1 - before > max_bytes.
        limit = max_bytes - base + 1 + before
        end = max(int(np.searchsorted(ends, limit, side="right")), start + 1)
        end = min(end, start + max_rows, n)
        body = str(text[int(offsets[start]) : int(offsets[end]) - 1], "utf-8")
        yield prefix + body, end - start
        start = end


# --- LOAD DATA fields ----------------------------------------------------------------------------

# LOAD DATA's escapes (FIELDS ESCAPED BY '\\'): the escape character, the field and line
# terminators (tab, newline) must be escaped; NUL as \0 so no raw NUL reaches the parser.
_LOAD_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\0", "\\0"))
# Values stored as text: what the INSERT path sends as a quoted string literal (Field::store of text).
# VECTOR (text in the model) has no field storing what its INSERT literal stores: left out.
_LOAD_TEXT_TYPES = TEXT_VALUE_TYPES - {TypeCode.VECTOR}
# Types whose INSERT literal is a number although the column is not numeric (ENUM index, SET
# bitmask, BIT value, YEAR 0 = 0000): a text field would be read as a member name, bytes or
# year 2000, so they load into a variable stored as CAST(@v AS UNSIGNED), a number like the literal.
_LOAD_NUMBER_TYPES = UINT_VALUE_TYPES

#: How a field reaches its column: as is, ``UNHEX(@v)`` (bytes sent as hex) or ``CAST(@v AS UNSIGNED)``.
AS_IS, UNHEX, UNSIGNED = "", "unhex", "unsigned"


@dataclass(slots=True)
class LoadFile:
    """One LOAD DATA file of rows: its bytes and how each field reaches its column (`AS_IS`...)."""

    data: memoryview
    kinds: tuple[str, ...]
    rows: int


def _load_hex(values: pa.Array) -> pa.Array:
    out = _hex_digits(values)
    return pc.if_else(values.is_valid(), out, pa.scalar(None, _TEXT)) if values.null_count else out


def _load_number(column: Column, values: pa.Array) -> pa.Array | None:
    """ENUM/SET/BIT/YEAR as their number; None where the INSERT path's literal is not that number."""
    t = values.type
    if pa.types.is_boolean(t):
        values = values.cast(pa.uint8())
    elif not pa.types.is_integer(t):
        return None
    if pa.types.is_signed_integer(t) and pc.any(pc.less(values, 0)).as_py():
        return None
    if column.type_code is TypeCode.ENUM and column.elements:
        # The INSERT path writes index 0 as '' and an index past the members as a number: both
        # stored with a warning, which LOAD DATA refuses; such runs keep the INSERT path.
        bad = pc.or_(pc.equal(values, 0), pc.greater(values, len(column.elements)))
        if pc.any(bad).as_py():
            return None
    return values.cast(_TEXT)


def _load_float(values: pa.Array) -> pa.Array | None:
    """Arrow's shortest round-trip digits of the double (the digits of the INSERT path's ``repr``).

    NaN and infinities have no literal: None, so the INSERT path raises its own error.
    """
    doubles = values.cast(pa.float64())
    if not pc.all(pc.is_finite(doubles).fill_null(True)).as_py():
        return None
    return doubles.cast(_TEXT)


def load_fields(column: Column, values: pa.Array) -> tuple[pa.Array, str] | None:
    """A column's LOAD DATA fields (large_string, NULL as ``\\N``) and how they reach the column.

    None when this column has no field that stores what the INSERT literal stores (VECTOR, an
    odd Arrow type, NaN, non-plain DECIMAL text, an ENUM index without a member): the run goes
    the INSERT way.
    """
    t = values.type
    tc = column.type_code
    out: pa.Array | None = None
    kind = AS_IS
    if tc in _LOAD_NUMBER_TYPES:
        out, kind = _load_number(column, values), UNSIGNED
    elif pa.types.is_integer(t):
        out = values.cast(_TEXT)
    elif pa.types.is_boolean(t):
        out = pc.if_else(values, _s("1"), _s("0"))
    elif pa.types.is_floating(t):
        out = _load_float(values)
    elif pa.types.is_decimal(t):
        out = decimal_texts(values).cast(_TEXT)
    elif pa.types.is_string(t) and tc is TypeCode.DECIMAL:
        out = _decimal_text_literals(values)
    elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and tc in _LOAD_TEXT_TYPES:
        out = _escaped(values, _LOAD_ESCAPES)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out, kind = _load_hex(values), UNHEX
    if out is None:
        return None
    return (out.fill_null(_s("\\N")) if out.null_count else out), kind


class ImageColumns:
    """Row images (the row path's INSERTs, snapshot rows) as the columns `load_rows` reads.

    A column is built with the block path's Arrow type (`model.arrow.arrow_type`); None when a
    value does not convert exactly, or is ``bytes`` in a text column (the INSERT writes those
    bytes as ``X'..'``, unconverted, where a text field would be converted from utf8mb4).
    """

    __slots__ = ("columns", "images", "num_rows")

    def __init__(self, columns: Sequence[Column], images: Sequence[Sequence[Any]]) -> None:
        self.columns = columns
        self.images = images
        self.num_rows = len(images)

    def column(self, i: int) -> pa.Array | None:
        col = self.columns[i]
        values = [im[i] for im in self.images]
        t = arrow_type(col)
        if pa.types.is_string(t):
            if col.type_code is TypeCode.DECIMAL:  # DECIMAL of unknown precision travels as text
                if not all(type(v) is Decimal or v is None for v in values):
                    return None
                values = [None if v is None else format(v, "f") for v in values]
            elif not all(type(v) is str or v is None for v in values):
                return None
        try:
            return pa.array(values, t)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None


def load_rows(columns: Sequence[Column], rows: Gather | ImageColumns, positions: Sequence[int]) -> LoadFile | None:
    """``rows``' ``positions`` as a LOAD DATA file (fields tab-separated, lines newline-ended).

    None when a column has no LOAD DATA rule (`load_fields`) or the bases' Arrow types differ.
    """
    if not positions or not rows.num_rows:
        return None
    parts: list[Any] = []
    kinds: list[str] = []
    for i in positions:
        column = rows.column(i)
        fields = None if column is None else load_fields(columns[i], column)
        if fields is None:
            return None
        parts += [fields[0], _s("\t")]
        kinds.append(fields[1])
    parts[-1] = _s("\n")
    data = value_bytes(_join(*parts))[1]
    return LoadFile(data.data, tuple(kinds), rows.num_rows)
