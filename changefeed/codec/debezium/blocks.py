"""Debezium messages -> `RowBlock`s: a run of messages' rows decoded a table's columns at a time.

Why: the row decoder (decoder.py) parses every message with orjson and builds a Python object per
value, ~10 µs a 10-column row; the apply job decodes every message it reads. Here the heads of a
run of messages (the value without TiCDC's repeated ``schema`` tail, the key likewise) are parsed
by msgspec in one call, each table's images by a typed reader generated for it (one field per
column, of the JSON type the row decoder accepts), and the values are converted a column at a
time. A run of one table's messages (as TiCDC's table dispatcher makes them) is checked a list at
a time, its images read with its heads by its first row's table's reader.

The result is exactly what `DebeziumDecoder.decode` gives for each message (tests prove it on
every type and on hostile input), start ts and positions included; the rows of a run of
consecutive messages come as one block at the run's first message (`DebeziumBlockDecoder.decode`).
The fast path only takes messages it can prove ordinary — a row event (op ``c``/``r``/``u``/``d``)
of a known table with full images, an update with its old image, values of the JSON type and range
the row decoder accepts — and hands every other message (watermarks, DDLs, anything odd or wrong)
to the row decoder, in message order, so events, errors and their order are the row decoder's.
The fast path never raises.
"""

from __future__ import annotations

from binascii import a2b_base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import CodecError
from ...model import Column, Event, RowChange, TableSchema, TypeCode
from ...model.arrow import arrow_type
from ...model.rowblock import RowBlock, Segment, TableRows, table_batch
from ...model.types import DATE_TYPES, FLOAT_TYPES, INTEGER_TYPES, STRING_TYPES
from ..base import Message
from ..codegen import value_lists
from ..values import int_range
from .decoder import _MAX_TSO, _SCHEMA_MEMBER, DebeziumDecoder, _Table
from .values import EPOCH, MAX_DT, MIN_DT, Hint

_I64_MIN, _I64_MAX, _U64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
_EXACT_INT = 1 << 53  # the largest magnitude below which every integer is a float64
_NULL = msgspec.Raw(b"null")
_OP_CODES = {"c": 0, "r": 0, "u": 1, "d": 2}  # Debezium's ops; "r" (snapshot read) is an insert, as the row decoder
_MIN_DAYS = (MIN_DT - EPOCH).days
_MAX_DAYS = (MAX_DT - EPOCH).days
_MIN_US = (MIN_DT - EPOCH) // EPOCH.resolution
_MAX_US = (MAX_DT - EPOCH) // EPOCH.resolution
_KEY_TAILS = 1024
_PLANS = 256


class _SlowPathError(Exception):
    """These rows cannot be proven ordinary: the row decoder takes their messages."""

    def __init__(self, rows: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.rows = rows  # which rows of a group (empty: the whole group)


# ------------------------------------------------------------------ message heads (msgspec, in C)


class _Source(msgspec.Struct, gc=False):
    """The members of ``payload.source`` the row decoder reads; the others are skipped."""

    db: str | None = None  # another JSON type: the row decoder's error (this message goes its way)
    table: str | None = None
    commit_ts: int | msgspec.UnsetType = msgspec.UNSET  # absent (a genuine connector) is not null
    start_ts: Any = None
    ts_ms: Any = None


class _Payload(msgspec.Struct, gc=False):
    op: str | None = None
    source: _Source | None = None
    before: msgspec.Raw = _NULL  # absent reads as null, as payload.get does
    after: msgspec.Raw = _NULL


class _Envelope(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    payload: _Payload


class _Key(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    payload: dict[str, Any]


_HEADS = msgspec.json.Decoder(list[_Envelope])
_HEAD = msgspec.json.Decoder(_Envelope)
_KEYS = msgspec.json.Decoder(list[_Key])
_KEY = msgspec.json.Decoder(_Key)


@dataclass(slots=True)
class _Group:
    """One table's fast rows in a run of messages: a list per field (cheaper than an object per row)."""

    table: _Table
    messages: list[int] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)  # `OP_CODES`
    commits: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    # The new image (the old one of a delete) and an update's old image: `msgspec.Raw`, or images
    # the table's reader has parsed (``parsed``).
    mains: list[Any] = field(default_factory=list)
    befores: list[Any] = field(default_factory=list)
    parsed: bool = False


# ------------------------------------------------------------------ the block's tables


@dataclass(slots=True)
class DebeziumRows(TableRows):
    """`TableRows` that also carry each row's start ts (``source.start_ts``, else the commit ts, as
    the row decoder sets it), so `row` gives the row decoder's `RowChange` to the last field."""

    start_ts: np.ndarray | None = None

    def row(self, i: int, commit_ts: int | None = None) -> RowChange:
        row = TableRows.row(self, i, commit_ts)
        if self.start_ts is not None:
            row.start_ts = int(self.start_ts[i])
        return row

    def slice(self, start: int, length: int) -> TableRows:
        root = self if self._root is None else self._root
        if isinstance(root, DebeziumRows) and root.table_schema is self.table_schema:
            return _Slice.of(root, self._at + start, length)
        sliced = TableRows.slice(self, start, length)  # under another schema (`with_schema`)
        return DebeziumRows(
            sliced.table_schema,
            sliced.batch,
            sliced.main_runs,
            sliced.before_runs,
            raw=sliced.raw,
            _ops=sliced._ops,
            _root=sliced._root,
            _at=sliced._at,
            start_ts=None if self.start_ts is None else self.start_ts[start : start + length],
        )

    def with_schema(self, schema: TableSchema) -> TableRows:
        return DebeziumRows(
            schema,
            self.batch,
            self.main_runs,
            self.before_runs,
            raw=self.raw,
            _ops=self._ops,
            _root=self if self._root is None else self._root,
            _at=self._at,
            start_ts=self.start_ts,
        )


class _Slice(DebeziumRows):
    """Rows of a root `DebeziumRows` whose Arrow slice is made only when asked for.

    Why: a Debezium message holds one row, so a run's block broken by other messages, and each
    piece the merge releases, is a slice of few rows; slicing a record batch costs ~3 µs (an Arrow
    array per column), more than decoding a row. The merge and the sinks mostly address rows
    through ``origin``/``row``, which need no slice.
    """

    __slots__ = ("_lazy", "_n")
    _lazy: pa.RecordBatch | None
    _n: int

    @classmethod
    def of(cls, root: DebeziumRows, at: int, n: int) -> _Slice:
        s = cls.__new__(cls)
        s._lazy = None
        s._n = n
        s.table_schema = root.table_schema
        s.main_runs = None
        s.before_runs = None
        s.raw = None
        s._ops = None  # `ops` and `with_schema` take the root's when asked
        s._images = None
        s._root = root
        s._at = at
        s.start_ts = None
        return s

    def _root_rows(self) -> DebeziumRows:
        root = self._root
        assert isinstance(root, DebeziumRows)
        return root

    @property
    def ops(self) -> np.ndarray:
        if self._ops is None:
            self._ops = self._root_rows().ops[self._at : self._at + self._n]
        return self._ops

    def with_schema(self, schema: TableSchema) -> TableRows:
        if self.start_ts is None:
            starts = self._root_rows().start_ts
            self.start_ts = None if starts is None else starts[self._at : self._at + self._n]
        return DebeziumRows.with_schema(self, schema)

    @property
    def batch(self) -> pa.RecordBatch:
        lazy = self._lazy
        if lazy is None:
            root = self._root
            assert root is not None
            lazy = self._lazy = root.batch.slice(self._at, self._n)
        return lazy

    @batch.setter
    def batch(self, value: pa.RecordBatch) -> None:
        self._lazy = value

    @property
    def num_rows(self) -> int:
        n: int = self._n
        return n

    def row(self, i: int, commit_ts: int | None = None) -> RowChange:
        # The root builds every row's images once, not each one-row slice its own.
        return self._root_rows().row(self._at + i, commit_ts)


# ------------------------------------------------------------------ per-table readers


def _kind(column: Column, hint: Hint | None) -> tuple[str, Any]:
    """How a column's values are read: (converter, the msgspec type of its JSON value).

    Mirrors `decoder._parser`'s dispatch; "generic" runs the table's own parser on each value.
    """
    tc = column.type_code
    if tc in INTEGER_TYPES:
        if tc is TypeCode.BIGINT and column.unsigned:
            return "generic", int | str | None  # bigint.unsigned.handling.mode=string, two's complement
        return "int", int | None
    if tc in FLOAT_TYPES:
        return ("float32" if tc is TypeCode.FLOAT else "float64"), float | None
    if tc is TypeCode.DECIMAL:
        return "decimal", Any
    if tc in DATE_TYPES:
        return "date", int | None
    if tc is TypeCode.DATETIME:
        return "datetime", int | None
    if tc in (TypeCode.YEAR, TypeCode.TIME):
        return "generic", int | None
    if tc in (TypeCode.BIT, TypeCode.GEOMETRY):
        return "generic", Any
    if tc in (TypeCode.TIMESTAMP, TypeCode.ENUM, TypeCode.SET, TypeCode.JSON):
        return "generic", str | None
    if column.is_bytes:
        return "base64", str | None
    if tc in STRING_TYPES or tc is TypeCode.VECTOR:
        return "str", str | None
    raise _SlowPathError


class _Plan:
    """A table version's typed image reader and column converters."""

    def __init__(self, table: _Table) -> None:
        self.table = table
        columns = table.schema.columns
        kinds = [_kind(c, h) for c, h in zip(columns, table.hints, strict=True)]
        self.kinds = [k for k, _ in kinds]
        fields = [(f"c{j}", t) for j, (_, t) in enumerate(kinds)]
        try:
            image = msgspec.defstruct(
                "Image",
                fields,
                rename={f"c{j}": c.name for j, c in enumerate(columns)},
                forbid_unknown_fields=True,  # an unknown column is the row decoder's error
                gc=False,
            )
            self.many = msgspec.json.Decoder(list[image])  # type: ignore[valid-type]
            self.one = msgspec.json.Decoder(image)
            # Message heads with their images read by this reader (`DebeziumBlockDecoder._whole_run`).
            payload = msgspec.defstruct(
                "Payload",
                [(f, t, None) for f, t in (("op", str | None), ("source", _Source | None))]
                + [(f, image | None, None) for f in ("before", "after")],
                gc=False,
            )
            envelope = msgspec.defstruct("Envelope", [("payload", payload)], forbid_unknown_fields=True, gc=False)
            self.heads = msgspec.json.Decoder(list[envelope])  # type: ignore[valid-type]
        except (NotImplementedError, TypeError, ValueError):  # a name msgspec takes not ('"', '\\', controls)
            raise _SlowPathError from None
        for c, kind in zip(columns, self.kinds, strict=True):
            if kind == "decimal" and c.length is not None and c.decimal is None:
                raise _SlowPathError  # an Arrow decimal of scale 0 would round: the row decoder's values
        self.values = value_lists(len(columns))

    def images(self, raws: list[msgspec.Raw]) -> tuple[list[Any], set[int]]:
        """The parsed images and the positions of those that do not parse (the row decoder's)."""
        if not raws:
            return [], set()
        try:
            return self.many.decode(_json_array(raws, b",", b"]")), set()
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            pass
        out: list[Any] = []
        bad: set[int] = set()
        for i, raw in enumerate(raws):
            try:
                out.append(self.one.decode(raw))
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
                out.append(None)
                bad.add(i)
        return out, bad

    def columns(self, images: list[Any]) -> list[pa.Array]:
        """Every column converted as the row decoder converts each value; rows it would refuse
        (or read otherwise) are raised as `_SlowPathError` with their positions."""
        table = self.table
        cols = self.values(images) if images else [[] for _ in table.schema.columns]
        out = []
        bad: set[int] = set()
        for j, (values, column) in enumerate(zip(cols, table.schema.columns, strict=True)):
            parse = table.parsers[j]
            try:
                out.append(_convert(self.kinds[j], values, column, table.hints[j], parse))
            except (_SlowPathError, ValueError, TypeError, OverflowError, ArithmeticError, pa.ArrowException):
                rows = {i for i, v in enumerate(values) if not _parses(parse, v)}
                if not rows:
                    raise _SlowPathError from None  # a rule stricter than the parser: the whole group
                bad |= rows
        if bad:
            raise _SlowPathError(frozenset(bad))
        return out


def _parses(parse: Callable[[Any], Any], v: Any) -> bool:
    if v is None:
        return True
    try:
        parse(v)
    except (ValueError, TypeError, ArithmeticError, OverflowError):
        return False
    return not (type(v) is int and not _I64_MIN <= v <= _U64_MAX)  # orjson reads it as a float


def _ints(values: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """int64 values (nulls as 0) and the null mask (None: no nulls)."""
    arr = pa.array(values, pa.int64())  # beyond int64: ArrowInvalid/OverflowError, the slow path's
    mask = None
    if arr.null_count:
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        arr = arr.fill_null(0)
    return arr.to_numpy(), mask


def _convert(kind: str, values: list[Any], column: Column, hint: Hint | None, parse: Callable[[Any], Any]) -> pa.Array:
    """A column's values (JSON types checked by the image reader) converted as ``parse`` converts
    each one (decoder.py's value parsers, debezium.md §11)."""
    typ = arrow_type(column)
    if kind == "str":
        if not pa.types.is_string(typ):
            raise _SlowPathError  # text the model holds as bytes: not the row decoder's str
        return pa.array(values, pa.string())
    if kind == "int":
        lo, hi = int_range(column)
        array = pa.array(values, pa.int64())
        bounds = pc.min_max(array).as_py()
        if bounds["min"] is not None and (bounds["min"] < lo or bounds["max"] > hi):
            raise _SlowPathError  # out of the column's range: the row decoder's error
        return array.cast(typ)
    if kind == "float64":
        return pa.array(values, pa.float64())
    if kind == "float32":
        # Nearest float32, as to_float32; one beyond float32's range is the row decoder's error.
        narrowed = pa.array(values, pa.float64()).cast(pa.float32(), safe=False)
        if pc.any(pc.is_inf(narrowed)).as_py():
            raise _SlowPathError
        return narrowed
    if kind == "date":
        days, mask = _ints(values)
        if len(days) and (days.min() < _MIN_DAYS or days.max() > _MAX_DAYS):
            raise _SlowPathError  # beyond Python's dates: the row decoder's error
        return pa.array(days.astype(np.int32), pa.date32(), mask=mask).cast(pa.string())
    if kind == "datetime":
        return _datetimes(values, column, hint)
    if kind == "decimal":
        return _decimals(values, column, hint, parse, typ)
    if kind == "base64":
        # b64decode(v, validate=True) is a2b_base64(v.encode("ascii"), strict_mode=True); a
        # non-ASCII str fails a2b_base64 as it fails the encode.
        return pa.array([None if v is None else a2b_base64(v, strict_mode=True) for v in values], pa.binary())
    out = [None if v is None else parse(v) for v in values]
    want = bytes if pa.types.is_binary(typ) else str if pa.types.is_string(typ) else int
    if any(v is not None and type(v) is not want for v in out):
        raise _SlowPathError
    if want is int and any(type(v) is int and not _I64_MIN <= v <= _U64_MAX for v in values):
        raise _SlowPathError  # a number orjson reads as a float: the row decoder refuses it
    return pa.array(out, typ)


def _datetimes(values: list[Any], column: Column, hint: Hint | None) -> pa.Array:
    """Epoch ms/µs (io.debezium.time.Timestamp/MicroTimestamp) to TiDB's text with fsp digits."""
    fsp = max(0, min(6, column.decimal or 0))
    micro = hint.micro if hint is not None and hint.micro is not None else fsp > 3  # as decoder._parser
    unit = 1 if micro else 1000
    raw, mask = _ints(values)
    if len(raw) and (raw.min() < -(-_MIN_US // unit) or raw.max() > _MAX_US // unit):
        raise _SlowPathError  # beyond Python's datetimes: the row decoder's error
    us = raw * unit
    if fsp < 6 and (us % 10 ** (6 - fsp)).any():
        raise _SlowPathError  # more fraction digits than the column's: the row decoder's error
    text = pa.array(us, pa.timestamp("us"), mask=mask).cast(pa.string())  # YYYY-MM-DD HH:MM:SS.ffffff
    return pc.utf8_slice_codeunits(text, 0, 19 + (fsp + 1 if fsp else 0))


def _doubles_as_decimals(values: list[Any], typ: pa.DataType) -> pa.Array | None:
    """DECIMAL as a double (Debezium's decimal.handling.mode=double, TiCDC's JSON mode) into the
    column's Arrow decimal a column at a time, where every value's shortest digits fit its scale;
    else None (the per-value parse).

    Why it is the per-value parse's result: that parse is ``Decimal(repr(v))`` quantized to the
    column's scale. Arrow's float64 -> string cast writes the same shortest round-trip digits as
    ``repr`` (positional from 1e-7 to below 1e10, the only form taken here), and its string ->
    decimal cast of positional digits is exact or fails: digits beyond the scale, or beyond the
    precision, fail the whole column into the per-value path, whose quantize rounds or refuses.
    Integers (JSON numbers without a fraction, as Go writes a whole double) pass through float64
    exactly up to 2**53; a larger one takes the per-value path.
    """
    if not pa.types.is_decimal(typ):
        return None
    for v in values:
        if type(v) is not float and v is not None and not (type(v) is int and -_EXACT_INT <= v <= _EXACT_INT):
            return None
    texts = pa.array(values, pa.float64()).cast(pa.string())
    if pc.any(pc.match_substring(texts, "e")).as_py():
        return None  # exponent forms: Arrow 26's string -> decimal cast misreads tiny ones (1e-58 -> digits)
    try:
        return texts.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _doubles_as_text(values: list[Any]) -> pa.Array | None:
    """DECIMAL of unknown precision as a double (decimal.handling.mode=double), as the per-value
    path's text, a column at a time: ``repr`` of a float, ``str`` of an int (a whole double, as Go
    writes it). Taken where every value's magnitude is 0 or from 1e-4 to below 1e10; else None
    (the per-value path).

    Why it is ``repr``: Arrow's float64 -> string cast writes the same shortest round-trip digits,
    and in that range both write them positionally (``repr``'s exponent forms start at 1e16 and
    below 1e-4, Arrow's at 1e10 and below ~1e-6), except that Arrow writes a whole number without
    ``repr``'s ".0" ("100" for 100.0, "-0" for -0.0), which is added here to floats. An int in that
    range is a float64 exactly, which Arrow writes as ``str`` does.
    """
    kinds = {type(v) for v in values}
    if not kinds <= {float, int, type(None)}:
        return None
    try:
        doubles = pa.array(values, pa.float64())
    except (OverflowError, pa.ArrowInvalid):
        return None  # an int beyond float64's exact ones
    x = doubles.fill_null(1.0).to_numpy()
    magnitude = np.abs(x)
    if not (((magnitude >= 1e-4) & (magnitude < 1e10)) | (magnitude == 0)).all():
        return None
    texts = doubles.cast(pa.string())
    whole = x == np.floor(x)
    if int in kinds:
        whole &= np.array([type(v) is float for v in values])
    if whole.any():
        texts = pc.if_else(pa.array(whole), pc.binary_join_element_wise(texts, ".0", ""), texts)
    return texts


def _decimals(
    values: list[Any], column: Column, hint: Hint | None, parse: Callable[[Any], Any], typ: pa.DataType
) -> pa.Array:
    """DECIMAL as the model holds it (exact text, or an Arrow decimal when the precision is known)."""
    if column.length is not None:
        if hint is None or hint.connect_scale is None:
            exact = _doubles_as_decimals(values, typ)
            if exact is not None:
                return exact
        if any(type(v) is int and not _I64_MIN <= v <= _U64_MAX for v in values):
            raise _SlowPathError  # orjson reads it as a float: Decimal(repr(float)) differs
        return pa.array([None if v is None else parse(v) for v in values], typ)
    plain = column.decimal is None and (hint is None or hint.connect_scale is None)
    if plain:
        texts = _doubles_as_text(values)
        if texts is not None:
            return texts
    out: list[str | None] = []
    for v in values:
        if type(v) is float and plain:
            # Decimal(repr(v)) keeps a positional repr's digits as they are (no exponent: < 1e16).
            r = repr(v)
            out.append(r if "e" not in r else str(parse(v)))
        elif v is None:
            out.append(None)
        elif type(v) is int and not _I64_MIN <= v <= _U64_MAX:
            raise _SlowPathError  # orjson reads it as a float: Decimal(repr(float)) differs
        else:
            out.append(str(v) if plain and type(v) is int else str(parse(v)))
    return pa.array(out, pa.string())


# ------------------------------------------------------------------ the decoder


class DebeziumBlockDecoder:
    """Decodes runs of one partition's messages; the row decoder it wraps keeps the table state."""

    def __init__(self, decoder: DebeziumDecoder) -> None:
        self.decoder = decoder
        self._key_tails: dict[bytes, None] = {}  # key tails verified as `DebeziumDecoder._load` verifies value tails
        self._key_last = b""
        self._plans: dict[int, tuple[_Table, _Plan | None]] = {}

    def decode(
        self, messages: Sequence[Message], wheres: Sequence[str], positions: Sequence[Mapping[str, Any]]
    ) -> list[list[Event | RowBlock]]:
        """Each message's events, in order; the rows the fast path took as `RowBlock`s.

        A run of consecutive messages the fast path took is one `RowBlock` in the run's first
        message's list (the others' are empty), with a `Segment` per message at that message's
        position (``skip`` None), so ``expand_blocks`` over the lists gives the row decoder's events
        in order, positions included. Why not a block per message: a block, its segment, a one-row
        slice and their lists cost ~0.5 µs a message and as much again in the GC (`PartitionMerger.feed`
        counts each segment at its own message; `decoded.pack` keeps each one's offset).

        ``wheres`` name each message in errors; ``positions`` are given to its events (the row
        decoder's caller sets the same on each of its events).
        """
        n = len(messages)
        out: list[list[Event | RowBlock]] = [[] for _ in range(n)]
        slow: set[int] = set()
        if self.decoder._inflate is not None:
            slow.update(range(n))  # compressed messages: the row decoder inflates them
        else:
            taken: list[tuple[DebeziumRows, list[int], list[int]]] = []
            self._fast(messages, wheres, taken, slow)
            _run_blocks(taken, positions, out)
        for i in sorted(slow):
            events = self.decoder.decode(messages[i], wheres[i])
            for ev in events:
                ev.position = dict(positions[i])
            out[i] = list(events)
        return out

    # -------------------------------------------------------------- the fast path

    def _fast(
        self,
        messages: Sequence[Message],
        wheres: Sequence[str],
        taken: list[tuple[DebeziumRows, list[int], list[int]]],
        slow: set[int],
    ) -> None:
        """The rows the fast path takes, per table (rows, message of each, commit ts of each) into
        ``taken``; the messages it leaves to the row decoder into ``slow``."""
        runs = self._one_table(messages, wheres) if messages else None
        if runs is not None:  # the common run: one table's messages, every tail as the last one's
            heads, keys = runs
            names = self._key_names(keys)
            whole, envelopes = self._whole_run(heads, names, wheres[0])
            if whole is not None:
                self._group(whole, taken, slow)
                return
            index = list(range(len(messages)))
            schemas = [self.decoder._last[1]] * len(messages)
        else:
            index, heads, schemas, keys = self._heads(messages, wheres, slow)
            if not heads:
                return
            envelopes = _decode_all(_HEADS, _HEAD, heads)
            names = self._key_names(keys)
        for group in self._groups(index, envelopes, names, schemas, wheres, slow).values():
            self._group(group, taken, slow)

    def _whole_run(self, heads: list[bytes], names: list[Any], where: str) -> tuple[_Group | None, list[Any]]:
        """A one-table run as one group (`_run_group`), else None and its heads parsed (for `_groups`).

        Why the guess: the run's images are read with the heads, by the reader of the first
        message's table: one parse of every message instead of a parse of its head and another of
        its images (~0.3 µs a message). The guess holds only where every head and image parses
        and the run is that table's; else the heads are parsed again as any run's.
        """
        schema = self.decoder._last[1]
        plan = self._first_plan(heads[0], names[0], schema, where)
        if plan is not None:
            typed = _decode_run(plan.heads, heads)
            whole = None if typed is None else self._run_group(typed, names, schema, where, None)
            if whole is not None and whole.table is plan.table:
                whole.parsed = True
                return whole, []
        envelopes = _decode_all(_HEADS, _HEAD, heads)
        return self._run_group(envelopes, names, schema, where, _NULL), envelopes

    def _first_plan(self, head: bytes, key_names: Any, schema: Any, where: str) -> _Plan | None:
        """The reader of the table of a run's first row (None: no row, or no reader)."""
        try:
            source = _HEAD.decode(head + b"}").payload.source
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            return None
        if source is None or source.db is None or source.table is None or key_names is False:
            return None
        t = self._table_of(schema, source.db, source.table, key_names, where)
        return None if t is None else self._plan(t)

    def _groups(
        self,
        index: list[int],
        envelopes: list[Any],
        names: list[Any],
        schemas: list[Any],
        wheres: Sequence[str],
        slow: set[int],
    ) -> dict[int, _Group]:
        """Message by message (``index``: the message of each head), the rows of each table;
        messages to leave to the row decoder are added to ``slow``."""
        groups: dict[int, _Group] = {}
        op_codes, UNSET = _OP_CODES, msgspec.UNSET  # noqa: N806
        memo: tuple[Any, ...] = ()  # (schema, db, table, key names, table) of the last row
        for k, i in enumerate(index):
            env = envelopes[k]
            key_names = names[k]
            if env is None or key_names is False:
                slow.add(i)
                continue
            payload = env.payload
            op = op_codes.get(payload.op)
            source = payload.source
            if op is None or source is None:
                slow.add(i)  # a watermark, DDL or no row: the row decoder's
                continue
            db, table, schema = source.db, source.table, schemas[k]
            # As `DebeziumDecoder._row`; where it raises (or gives an update without old values,
            # which a block does not hold) the message goes its way.
            commit = source.commit_ts
            if commit is UNSET:
                # A genuine connector has no commit_ts: the event's ms as a TSO with logical 0.
                ms = source.ts_ms
                if type(ms) is not int or not 0 <= ms <= _MAX_TSO >> 18:
                    slow.add(i)
                    continue
                commit = ms << 18
            elif not 0 <= commit <= _MAX_TSO or db is None or table is None:
                slow.add(i)
                continue
            start = source.start_ts
            before, after = payload.before, payload.after
            before_null = before == _NULL
            if op == 2:
                if after != _NULL or before_null:
                    slow.add(i)  # a delete with after, or without before
                    continue
                main, before = before, None
            elif after == _NULL or (op == 0) != before_null:
                slow.add(i)  # no image, an insert with before, an update without old values
                continue
            else:
                main = after
                before = None if op == 0 else before
            if memo and memo[0] is schema and memo[1] == db and memo[2] == table and memo[3] == key_names:
                t = memo[4]
            else:
                t = self._table_of(schema, db, table, key_names, wheres[i])
                if t is None:
                    slow.add(i)
                    continue
                memo = (schema, db, table, key_names, t)
            group = groups.get(id(t)) or groups.setdefault(id(t), _Group(t))  # a _Group is always true
            group.messages.append(i)
            group.ops.append(op)
            group.commits.append(commit)
            group.starts.append(start if type(start) is int and 0 < start <= _MAX_TSO else commit)
            group.mains.append(main)
            group.befores.append(before)
        return groups

    def _run_group(self, envelopes: list[Any], names: list[Any], schema: Any, where: str, null: Any) -> _Group | None:
        """A one-table run's messages as one group, checked a list at a time, when every one is a
        row `_groups` would put in the same group (the same table and key names, ordinary images
        and commit ts); else None, and `_groups` decides message by message. ``null`` is a
        missing image: `_NULL` (images as `msgspec.Raw`) or None (images parsed).

        Why: the run TiCDC's table dispatcher makes; list comprehensions over it cost about half
        the loop's per-message branches.
        """
        first = names[0]
        if first is False or names.count(first) != len(names) or None in envelopes:
            return None
        payloads = [e.payload for e in envelopes]
        sources = [p.source for p in payloads]
        codes = [_OP_CODES.get(p.op) for p in payloads]
        if None in codes or None in sources:
            return None
        ops = cast("list[int]", codes)
        commits = [s.commit_ts for s in sources]
        places = {(s.db, s.table) for s in sources}
        if msgspec.UNSET in commits or len(places) != 1 or not 0 <= min(commits) <= max(commits) <= _MAX_TSO:
            return None  # a genuine connector's ts_ms, or a check `_groups` makes message by message
        db, table = places.pop()
        befores = [p.before for p in payloads]
        afters = [p.after for p in payloads]
        # As `_groups`: a delete has only its old image, an insert only its new one, an update both.
        if codes.count(0) == len(codes):  # inserts only (a load, an append-only table): no zip
            if befores.count(null) != len(befores) or null in afters:
                return None
            mains, olds = afters, [None] * len(afters)
        else:
            images = zip(ops, befores, afters, strict=True)
            if not all([(a == null) is (op == 2) and (b == null) is (op == 0) for op, b, a in images]):
                return None
            mains = [b if op == 2 else a for op, b, a in zip(ops, befores, afters, strict=True)]
            olds = [b if op == 1 else None for op, b in zip(ops, befores, strict=True)]
        t = None if db is None or table is None else self._table_of(schema, db, table, first, where)
        if t is None:
            return None
        starts = [s.start_ts for s in sources]
        starts = [s if type(s) is int and 0 < s <= _MAX_TSO else c for s, c in zip(starts, commits, strict=True)]
        return _Group(t, list(range(len(payloads))), ops, commits, starts, mains, olds)

    def _table_of(self, schema: Any, db: str, table: str, key_names: Any, where: str) -> _Table | None:
        """The row decoder's table of a row (the one given, else from the message's schema
        section); None: no schema section and no table given, or a schema the row decoder refuses
        (its error, with the message's own path)."""
        decoder = self.decoder
        t = decoder._given.get((db, table))
        if t is not None:
            return t
        if schema is None:
            return None
        try:
            return decoder._table({"schema": schema}, db, table, key_names, where)
        except CodecError:
            return None

    def _heads(
        self, messages: Sequence[Message], wheres: Sequence[str], slow: set[int]
    ) -> tuple[list[int], list[bytes], list[Any], list[bytes]]:
        """Message by message: (message of each head, values without their schema tail and closing
        brace, their schemas, keys likewise (b"": no key)); messages to leave to the row decoder
        are added to ``slow``, tombstones to neither."""
        decoder = self.decoder
        key_last = self._key_last
        index: list[int] = []
        heads: list[bytes] = []
        schemas: list[Any] = []
        keys: list[bytes] = []
        for i, message in enumerate(messages):
            value = message.value
            if not value:
                continue  # a tombstone: no event (genuine Debezium sends one after each delete; TiCDC none)
            if type(value) is not bytes:
                value = bytes(value)
            last, schema = decoder._last
            if last and value.endswith(last):
                head: bytes | None = value[: len(value) - len(last)]
            else:
                head, schema = self._head(value, wheres[i])
            if head is None:
                slow.add(i)
                continue
            key = message.key
            if key:
                if type(key) is not bytes:
                    key = bytes(key)
                if key_last and key.endswith(key_last):
                    key = key[: len(key) - len(key_last)]
                else:
                    key = self._key_head(key)
                    key_last = self._key_last
                    if key is None:
                        slow.add(i)
                        continue
            index.append(i)
            heads.append(head)
            schemas.append(schema)
            keys.append(key or b"")
        return index, heads, schemas, keys

    def _one_table(self, messages: Sequence[Message], wheres: Sequence[str]) -> tuple[list[bytes], list[bytes]] | None:
        """The heads of values and keys when every message ends with the tails of the run's first
        message (one table's run, as TiCDC's table dispatcher makes them), else None: a
        comprehension per list instead of the loop's per-message branches."""
        value, key = messages[0].value, messages[0].key
        last, key_last = self.decoder._last[0], self._key_last
        if value and type(value) is bytes and not (last and value.endswith(last)):
            self._head(value, wheres[0])  # its tail (verified as `_heads` would) the last one
        if key and type(key) is bytes and not (key_last and key.endswith(key_last)):
            self._key_head(key)
        last, key_last = self.decoder._last[0], self._key_last
        if not (last and key_last):
            return None
        n, kn = len(last), len(key_last)
        values: list[Any] = [m.value for m in messages]
        heads = [v[: len(v) - n] for v in values if type(v) is bytes and v.endswith(last)]
        if len(heads) != len(values):
            return None
        keys: list[Any] = [m.key for m in messages]
        key_heads = [k[: len(k) - kn] for k in keys if type(k) is bytes and k.endswith(key_last)]
        return (heads, key_heads) if len(key_heads) == len(keys) else None

    def _head(self, value: bytes, where: str) -> tuple[bytes | None, Any]:
        """The value without its ``schema`` tail (and the parsed schema) where the row decoder has
        verified that tail (`DebeziumDecoder._load`), else the whole value (and no schema); always
        without the closing brace (None: no closing brace, the row decoder's to read)."""
        decoder = self.decoder
        cut = value.rfind(_SCHEMA_MEMBER)
        if cut > 0 and value.endswith(b"}"):
            tail = value[cut:]
            schema = decoder._suffixes.get(tail)
            if schema is None:
                try:
                    decoder._load(value, where)  # verifies and keeps the tail when it is one
                except CodecError:
                    return None, None  # the row decoder raises it
                schema = decoder._suffixes.get(tail)
            if schema is not None:
                decoder._last = (tail, schema)  # as `DebeziumDecoder._load` keeps a verified tail found
                return value[:cut], schema
        return (value[:-1], None) if value.endswith(b"}") else (None, None)

    def _key_head(self, key: bytes) -> bytes | None:
        """The key without a ``schema`` tail verified like a value's (the payload names the handle)
        and without the closing brace (None: no closing brace, the row decoder's to read)."""
        cut = key.rfind(_SCHEMA_MEMBER)
        if cut > 0 and key.endswith(b"}"):
            tail = key[cut:]
            if tail not in self._key_tails and _tail_holds(key, cut):
                if len(self._key_tails) >= _KEY_TAILS:
                    self._key_tails.clear()
                self._key_tails[tail] = None
            if tail in self._key_tails:
                self._key_last = tail
                return key[:cut]
        return key[:-1] if key.endswith(b"}") else None

    def _key_names(self, keys: list[bytes]) -> list[tuple[str, ...] | bool | None]:
        """Per message, the key payload's member names as `DebeziumDecoder._key_names` reads them
        (None: no key; False: the row decoder's to read)."""
        if keys and all(keys):  # the common run: every message keyed
            return [False if key is None else tuple(key.payload) for key in _decode_all(_KEYS, _KEY, keys)]
        present = [k for k in keys if k]
        parsed = _decode_all(_KEYS, _KEY, present) if present else []
        out: list[tuple[str, ...] | bool | None] = []
        at = 0
        for k in keys:
            if not k:
                out.append(None)
                continue
            key = parsed[at]
            at += 1
            out.append(False if key is None else tuple(key.payload))
        return out

    def _plan(self, t: _Table) -> _Plan | None:
        hit = self._plans.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        try:
            plan: _Plan | None = _Plan(t)
        except _SlowPathError:
            plan = None
        if len(self._plans) >= _PLANS:
            self._plans.clear()
        self._plans[id(t)] = (t, plan)
        return plan

    def _group(self, group: _Group, taken: list[tuple[DebeziumRows, list[int], list[int]]], slow: set[int]) -> None:
        plan = self._plan(group.table)
        messages = group.messages
        if plan is None:
            slow.update(messages)
            return
        olds_of = [k for k, before in enumerate(group.befores) if before is not None]
        if group.parsed:
            mains, olds, bad = group.mains, [group.befores[k] for k in olds_of], set[int]()
        else:
            mains, bad = plan.images(group.mains)
            olds, bad_olds = plan.images([group.befores[k] for k in olds_of])
            bad |= {olds_of[k] for k in bad_olds}
        keep = list(range(len(messages)))
        while True:
            if bad:
                keep = [k for k in range(len(messages)) if k not in bad]
            if not keep:
                slow.update(messages)
                return
            try:
                table = _build(plan, group, mains, olds, olds_of, keep)
                break
            except _SlowPathError as e:
                if not e.rows:
                    slow.update(messages)
                    return
                bad |= {keep[k] for k in e.rows}
        slow.update(messages[k] for k in bad)
        if len(keep) == len(messages):
            taken.append((table, messages, group.commits))
        else:
            commits = group.commits
            taken.append((table, [messages[k] for k in keep], [commits[k] for k in keep]))


def _run_blocks(
    taken: list[tuple[DebeziumRows, list[int], list[int]]],
    positions: Sequence[Mapping[str, Any]],
    out: list[list[Event | RowBlock]],
) -> None:
    """The rows of ``taken`` (per table: its rows, the message of each, the commit ts of each) as
    one `RowBlock` per run of consecutive messages, in the run's first message's list: a table
    per table of the run (the decoded rows, or the slice of them the run holds), a `Segment` per
    message (a Debezium message holds one row) at its position.

    Why the segments are built without their constructor: its generated ``__init__`` costs ~0.15 µs
    a message here, as much as a column's conversion; each is built empty and every slot assigned
    (`test_run_blocks_are_the_dataclasses` checks that no field is left out).
    """
    if not taken:
        return
    table, messages, commits = taken[0]
    if len(taken) == 1 and messages[-1] - messages[0] == len(messages) - 1:  # the common run: all one table's
        out[messages[0]] = [RowBlock([table], _segments([0] * len(messages), messages, commits, positions))]
        return
    rows_of: dict[int, tuple[int, int, int]] = {}  # message -> (its table in ``taken``, its row there, commit ts)
    for t, (_, messages, commits) in enumerate(taken):
        for row, (at, commit) in enumerate(zip(messages, commits, strict=True)):
            rows_of[at] = (t, row, commit)
    order = sorted(rows_of)
    first = 0
    for k in range(1, len(order) + 1):
        if k < len(order) and order[k] == order[k - 1] + 1:
            continue
        run = order[first:k]
        first = k
        index: dict[int, int] = {}  # table in ``taken`` -> its index in the block
        spans: list[list[int]] = []  # per block table: [table in ``taken``, first row, rows]
        tables: list[int] = []
        for at in run:
            t, row, _ = rows_of[at]
            i = index.get(t)
            if i is None:
                i = index[t] = len(spans)
                spans.append([t, row, 0])
            spans[i][2] += 1  # a table's rows in a run of consecutive messages are consecutive rows
            tables.append(i)
        picked = [taken[t][0] for t, _, _ in spans]
        block_tables: list[TableRows] = [
            rows if start == 0 and n == rows.num_rows else rows.slice(start, n)
            for rows, (_, start, n) in zip(picked, spans, strict=True)
        ]
        segments = _segments(tables, run, [rows_of[at][2] for at in run], positions)
        out[run[0]] = [RowBlock(block_tables, segments)]


def _segments(
    tables: list[int], messages: list[int], commits: list[int], positions: Sequence[Mapping[str, Any]]
) -> list[Segment]:
    """A one-row `Segment` per message: of block table ``tables[k]``, at ``commits[k]`` and the message's position."""
    new = object.__new__
    out = []
    for table, at, commit in zip(tables, messages, commits, strict=True):
        segment = new(Segment)
        segment.table = table
        segment.rows = 1
        segment.commit_ts = commit
        segment.position = positions[at]
        segment.skip = None
        out.append(segment)
    return out


def _build(
    plan: _Plan, group: _Group, mains: list[Any], olds: list[Any], olds_of: list[int], keep: list[int]
) -> DebeziumRows:
    """One table's rows (those of ``keep``) as `DebeziumRows`; `_SlowPathError` names rows (by
    their place in ``keep``) whose values the row decoder would read otherwise."""
    n = len(keep)
    whole = n == len(group.messages)

    def kept(values: list[Any]) -> list[Any]:
        return values if whole else [values[k] for k in keep]

    columns = plan.columns(kept(mains))
    codes = np.array(kept(group.ops), np.int8)
    updates: np.ndarray = codes == 1
    schema = plan.table.schema
    if updates.any():
        where = {k: j for j, k in enumerate(olds_of)}
        picked = [olds[where[keep[j]]] for j in np.flatnonzero(updates).tolist()]
        try:
            old_columns = plan.columns(picked)
        except _SlowPathError as e:
            positions = np.flatnonzero(updates)
            raise _SlowPathError(frozenset(int(positions[k]) for k in e.rows)) from None
        at = pa.array(np.where(updates, np.cumsum(updates) - 1, 0))
        mask = pa.array(updates)
        # Old images of updates at their rows, NULL elsewhere (the `TableRows` layout).
        before = [pc.if_else(mask, old.take(at), pa.nulls(n, old.type)) for old in old_columns]
    else:
        before = [pa.nulls(n, arrow_type(c)) for c in schema.columns]
    ts = kept(group.commits)
    if max(ts) > _I64_MAX:
        raise _SlowPathError(frozenset(k for k, v in enumerate(ts) if v > _I64_MAX))
    batch = table_batch(columns, codes, pa.array(ts, pa.int64()), before)
    return DebeziumRows(schema, batch, _ops=codes, start_ts=np.array(kept(group.starts), np.uint64))


def _decode_all(many: msgspec.json.Decoder[Any], one: msgspec.json.Decoder[Any], texts: list[bytes]) -> list[Any]:
    """Each text (an object without its closing brace) parsed (None where it does not parse), in
    one call when every one does.

    Text msgspec skips is checked for UTF-8 here: orjson (the row decoder's parser) refuses
    invalid UTF-8 anywhere in a document, msgspec only in the strings it reads.
    """
    parsed = _decode_run(many, texts)
    if parsed is not None:
        return parsed
    out: list[Any] = []
    for text in texts:
        try:
            text.decode()
            out.append(one.decode(text + b"}"))
        except (UnicodeDecodeError, msgspec.DecodeError, msgspec.ValidationError, ValueError):
            out.append(None)
    return out


def _decode_run(many: msgspec.json.Decoder[Any], texts: list[bytes]) -> list[Any] | None:
    """Every text (an object without its closing brace) parsed in one call, else None (one does
    not parse, or is not UTF-8 where `_decode_all` checks it)."""
    joined = _json_array(texts, b"},", b"}]")
    try:
        if _utf8(joined):
            return list(many.decode(joined))
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        pass
    return None


def _json_array(texts: Sequence[bytes | msgspec.Raw], separator: bytes, end: bytes) -> bytes:
    """``b"[" + separator.join(texts) + end`` (``texts`` not empty) in one copy of the texts.

    Why: a run's texts are megabytes; each ``+`` copies them again into fresh memory (page faults
    included), ~0.3 µs a message for the value heads, more than slicing them.
    """
    parts = list(texts)
    parts[0] = b"".join((b"[", parts[0]))  # a `msgspec.Raw` is a buffer, without `+`
    parts[-1] = b"".join((parts[-1], end))
    return separator.join(parts)


def _utf8(text: bytes) -> bool:
    """Is ``text`` valid UTF-8? (Arrow's check on the bytes in place: no copy, no Python str.)"""
    offsets = pa.py_buffer(np.array([0, len(text)], np.int64))
    try:
        pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(text)]).cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def _tail_holds(key: bytes, cut: int) -> bool:
    """Is ``key[cut:]`` a top-level ``schema`` member whose removal leaves the same payload?
    (as `DebeziumDecoder._remember` checks a value's tail before trusting it)."""
    import orjson  # noqa: PLC0415

    try:
        whole = orjson.loads(key)
        head = orjson.loads(key[:cut] + b"}")
        schema = orjson.loads(key[cut + len(_SCHEMA_MEMBER) : -1])
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(whole, dict)
        and isinstance(head, dict)
        and "schema" not in head
        and {**head, "schema": schema} == whole
    )


__all__ = ["DebeziumBlockDecoder", "DebeziumRows"]
