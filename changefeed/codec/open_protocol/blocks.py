"""Open Protocol messages -> `RowBlock`s: many messages' rows decoded a table's columns at a time.

Why: the row decoder (decoder.py) builds a Python object per value, ~20 µs per 10-column row;
the apply job decodes every message it reads. Here the keys of a call's messages are parsed by
msgspec in one call, a run's rows grouped per table a list at a time (a run of one table's rows,
as TiCDC's table dispatcher makes them, needs no per-row work), each table's values parsed by a
msgspec reader typed for its exact shape (one call per 4096 rows) and checked and converted a
column at a time, and each message's segments found with numpy.

The result is exactly what `OpenProtocolDecoder.decode` gives for each message (tests prove it
on every type and on hostile input): the fast path only takes rows it can prove ordinary — full
images, the column set, type codes and flags of the table's first row, values of the JSON type
the row decoder accepts and in range — and hands anything else to the row decoder, message by
message in order, so errors and the decoder's table state are the same. Errors of the fast
path's rows are raised in message order, the first one first.
"""

from __future__ import annotations

from binascii import a2b_base64
from bisect import bisect_right
from codecs import escape_decode
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import CodecError
from ...model import Event, Resolved, TypeCode
from ...model.arrow import arrow_type
from ...model.rowblock import RowBlock, Segment, TableRows, table_batch
from ...model.schema import Column
from ...model.types import BLOB_TYPES, CHAR_TYPES, FLOAT_TYPES, INTEGER_TYPES, UINT_VALUE_TYPES
from ..base import Message
from ..codegen import value_lists
from ..gojson import _BYTE_ESCAPES_ONLY, go_unquote
from ..values import DECIMAL_PATTERN, MAX_DECIMAL_DIGITS, int_range
from .decoder import _NEG_ZERO_MARKS, OpenProtocolDecoder
from .framing import frame_lists
from .values import TEXT_TYPES

_I64_MAX = (1 << 63) - 1
_DECIMAL = f"^{DECIMAL_PATTERN}$"  # TiDB MyDecimal.String(): the decoders' shared rule (codec/values.py)
_BYTE_ESCAPES = f"^{_BYTE_ESCAPES_ONLY.pattern}$"
_KEY_CACHE = 65536
_SHAPES = 256
_PARSE_ROWS = 4096  # rows parsed per call: the JSON text of one call stays small
_ROW, _RESOLVED = 1, 3
_first = itemgetter(0)


class _SlowPathError(Exception):
    """The fast path cannot prove these rows ordinary: the row decoder takes them."""


_Head = tuple[int, int, str, str]
"""An event key's (t, ts, scm, tbl); one object per distinct key text (cached)."""


class _Key(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An event key as the fast path reads a whole call's keys (msgspec, in C, in one call).

    The members `OpenProtocolDecoder._event` reads, of the JSON types and ranges the fast path takes
    (`_key`'s rules, checked in C); anything else fails the whole parse, and the keys are then read
    one at a time by `_key` (partitioned tables, row ids, claim checks and DDLs at their ts).
    """

    t: int
    ts: Annotated[int, msgspec.Meta(ge=0, le=_I64_MAX)]
    scm: str = ""
    tbl: str = ""
    rid: None = None
    ptn: None = None
    ccl: Literal[""] | None = None


_KEYS = msgspec.json.Decoder(list[_Key])


@dataclass(slots=True)
class _Events:
    """A call's events, flat in message order: each one's key members and value."""

    t: list[int]
    ts: list[int]
    scm: list[str]
    tbl: list[str]
    values: list[bytes]
    starts: list[int]  # message i's events are [starts[i], starts[i + 1])
    fast: list[bool]  # per message: framed, every event an ordinary row or resolved event


@dataclass(slots=True)
class _Group:
    """One table's rows in a chunk of messages, in order."""

    index: Sequence[int]  # its events, chunk-relative
    values: list[bytes]
    ts: list[int]
    rows: TableRows | None = None  # the fast path's result
    events: list[Event] | None = None  # the row decoder's result where it took the group
    error: tuple[int, int, CodecError] | None = None  # (message, event number, error)


def _grouped(
    t: list[int], scm: list[str], tbl: list[str], ts: list[int], values: list[bytes]
) -> tuple[dict[tuple[str, str], _Group], list[int] | None]:
    """A chunk's row events per table, and each one's row in its group (None: its index in the chunk).

    One table's rows (as TiCDC's table dispatcher sends them, resolved events between) are told by
    ``list.count`` and taken a list at a time; rows of several tables one event at a time.
    """
    n = len(t)
    groups: dict[tuple[str, str], _Group] = {}
    index: Sequence[int] = range(n)  # the row events
    rows_scm, rows_tbl = scm, tbl
    if t.count(_ROW) != n:  # resolved events too (TiCDC sends them to every partition)
        mask = list(map(_ROW.__eq__, t))
        index, rows_scm, rows_tbl = list(compress(index, mask)), list(compress(scm, mask)), list(compress(tbl, mask))
    m = len(index)
    if m and rows_scm.count(rows_scm[0]) == m and rows_tbl.count(rows_tbl[0]) == m:
        if m == n:
            groups[(scm[0], tbl[0])] = _Group(index, values, ts)
            return groups, None
        groups[(rows_scm[0], rows_tbl[0])] = _Group(index, list(compress(values, mask)), list(compress(ts, mask)))
        return groups, (np.cumsum(mask) - 1).tolist()
    row_of = [0] * n
    for j in index:
        table = (scm[j], tbl[j])
        group = groups.get(table)
        if group is None:
            group = groups[table] = _Group([], [], [])
        row_of[j] = len(group.values)
        group.index.append(j)  # type: ignore[attr-defined]
        group.values.append(values[j])
        group.ts.append(ts[j])
    return groups, row_of


def _value_type(column: Column) -> type | None:
    """The JSON type of a column's "v" that the fast path reads; None: the row decoder's alone."""
    tc = column.type_code
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        return int
    if tc in FLOAT_TYPES:
        return float  # a JSON integer too, as the row decoder's float(v)
    if tc in (TypeCode.DECIMAL, TypeCode.GEOMETRY) or tc in BLOB_TYPES or tc in CHAR_TYPES or tc in TEXT_TYPES:
        return str
    return None


def _join(texts: list[bytes]) -> bytes | None:
    """``[t1\\n,t2\\n,...]``, or None unless every text starts with ``{``.

    Why both: a parse of the joined text that yields one element per text proves each text one JSON
    document only if no separator can be swallowed. A raw newline ends any number or literal and is
    invalid inside a string, so no token spans a separator; a separator's comma followed by ``{`` is
    invalid inside an object, and the typed readers take no arrays, so every separator splits the
    outer array. (A plain comma let a string or object run on into the next text.)
    """
    if [t[:1] for t in texts].count(b"{") != len(texts):
        return None
    return b"[" + b"\n,".join(texts) + b"]"


class OpenProtocolBlockDecoder:
    """Decodes runs of one partition's messages; the row decoder it wraps keeps the table state."""

    def __init__(self, decoder: OpenProtocolDecoder) -> None:
        self.decoder = decoder
        self._keys: dict[bytes, _Head | None] = {}
        self._shapes: dict[tuple[tuple[Any, ...], ...], _Shape] = {}

    def decode(
        self, messages: Sequence[Message], wheres: Sequence[str], positions: Sequence[Mapping[str, Any]]
    ) -> list[list[Event | RowBlock]]:
        """Each message's events (`RowBlock`s for the rows the fast path took), in order; a run of
        messages of one table's rows comes as one block in the run's first message's list, each of
        its segments at its own message's position (`_blocks`).

        ``wheres`` name each message in errors; ``positions`` are given to its events (the row
        decoder's caller sets the same on each of its events).
        """
        out: list[list[Event | RowBlock]] = [[] for _ in messages]
        flat = self._flatten(messages)
        first = 0  # the first message of the run of fast ones
        for i, message in enumerate(messages):
            if not flat.fast[i]:
                self._chunk(flat, first, i, out, wheres, positions)
                first = i + 1
                events = self.decoder.decode(message, wheres[i])
                for ev in events:
                    ev.position = dict(positions[i])
                out[i] = list(events)
        self._chunk(flat, first, len(messages), out, wheres, positions)
        return out

    # ------------------------------------------------------------ messages

    def _flatten(self, messages: Sequence[Message]) -> _Events:
        """Every message's events, and which messages hold only ordinary row or resolved events."""
        framed: list[tuple[list[bytes], list[bytes]] | None] = []
        if self.decoder._decompress is None:  # compressed values: the row decoder inflates them
            for message in messages:
                try:
                    framed.append(frame_lists(message.key, message.value))
                except ValueError:
                    framed.append(None)  # the row decoder raises the framing error
        else:
            framed = [None] * len(messages)
        keys: list[bytes] = []
        values: list[bytes] = []
        starts = [0]
        for frames in framed:
            if frames is not None:
                keys += frames[0]
                values += frames[1]
            starts.append(len(keys))
        fast = [frames is not None for frames in framed]
        text = _join(keys)
        try:
            parsed = None if text is None else _KEYS.decode(text)
        except (msgspec.DecodeError, ValueError):
            parsed = None
        if parsed is None or len(parsed) != len(keys):
            return self._flatten_one_by_one(keys, values, starts, fast)
        t = [k.t for k in parsed]
        if t.count(_ROW) != len(t):  # resolved events (ordinary where their value is empty) or DDLs
            for j in compress(range(len(t)), map(_ROW.__ne__, t)):
                if t[j] != _RESOLVED or values[j]:
                    fast[bisect_right(starts, j) - 1] = False
        return _Events(
            t, [k.ts for k in parsed], [k.scm for k in parsed], [k.tbl for k in parsed], values, starts, fast
        )

    def _flatten_one_by_one(
        self, keys: list[bytes], values: list[bytes], starts: list[int], fast: list[bool]
    ) -> _Events:
        """`_flatten` where the keys are not all of the fast parse's shape: each read by `_key` (cached)."""
        cache = self._keys
        heads: list[_Head | None] = []
        for k in keys:
            head = cache.get(k, False)
            if head is False:
                if len(cache) >= _KEY_CACHE:
                    cache.clear()
                head = cache[k] = _key(k)
            heads.append(head)  # type: ignore[arg-type]
        for i in range(len(fast)):
            for j in range(starts[i], starts[i + 1]):
                head = heads[j]
                if head is None or (head[0] == _RESOLVED and values[j]):
                    fast[i] = False
                    break
        known = [(0, 0, "", "") if h is None else h for h in heads]  # the placeholders' messages are not fast
        return _Events(
            [h[0] for h in known],
            [h[1] for h in known],
            [h[2] for h in known],
            [h[3] for h in known],
            values,
            starts,
            fast,
        )

    def _chunk(
        self,
        flat: _Events,
        first: int,
        end: int,
        out: list[list[Event | RowBlock]],
        wheres: Sequence[str],
        positions: Sequence[Mapping[str, Any]],
    ) -> None:
        """Decode messages [first, end), all fast-eligible: rows grouped per table, then events per message."""
        lo, hi = flat.starts[first], flat.starts[end]
        n = hi - lo
        if n == 0:
            return
        t, scm, tbl = flat.t[lo:hi], flat.scm[lo:hi], flat.tbl[lo:hi]
        ts, values = flat.ts[lo:hi], flat.values[lo:hi]
        starts = [s - lo for s in flat.starts[first : end + 1]]
        groups, row_of = _grouped(t, scm, tbl, ts, values)
        for table, group in groups.items():
            try:
                group.rows = self._fast(table, group)
            except _SlowPathError:
                self._rows(table, group, first, starts, wheres)
        errors = [g.error for g in groups.values() if g.error is not None]
        if errors:
            raise min(errors, key=lambda e: (e[0], e[1]))[2]
        mixed: Sequence[int] = range(first, end)  # the messages whose events `_events` gives
        tables: Sequence[tuple[str, str]] | None = None  # per event, its table (resolved events: any)
        if len(groups) == 1:
            ((table, group),) = groups.items()
            tables = [table] * n  # the resolved events' tables need not be told apart: they stay as they are
            if group.rows is not None:
                if len(group.values) == n:
                    _blocks(group.rows, starts, first, out, positions)
                    return
                # Messages of rows only as blocks; those holding a resolved event one by one.
                at = [0, *(np.cumsum(np.asarray(t) == _ROW).tolist())]
                row_starts = [at[s] for s in starts]
                mixed = [
                    first + k
                    for k in range(end - first)
                    if row_starts[k + 1] - row_starts[k] != starts[k + 1] - starts[k]
                ]
                _blocks(group.rows, row_starts, first, out, positions, breaks=mixed)
        if tables is None:
            tables = list(zip(scm, tbl, strict=True))
        for i in mixed:
            a, b = starts[i - first], starts[i - first + 1]
            out[i] = _events(a, b, t, ts, tables, row_of, groups, positions[i]) if a < b else []

    def _rows(
        self, table: tuple[str, str], group: _Group, first: int, starts: list[int], wheres: Sequence[str]
    ) -> None:
        """The row decoder's events for a group's rows, stopping at the first error."""
        events: list[Event] = []
        m = 0  # the group's event's message, from ``first``
        for j, value, ts in zip(group.index, group.values, group.ts, strict=True):
            while starts[m + 1] <= j:
                m += 1
            try:
                events.append(self.decoder._row({}, value, ts, table[0], table[1]))
            except Exception as e:  # hostile input, worded as OpenProtocolDecoder._decode does
                detail = e.message if isinstance(e, CodecError) else str(e)
                n, count = j - starts[m] + 1, starts[m + 1] - starts[m]
                error = CodecError(f"open-protocol event {n} of {count}: {detail}", where=wheres[first + m])
                group.error = (first + m, n, error)
                group.events = events
                return
        group.events = events

    # ------------------------------------------------------------ the fast path

    def _fast(self, table: tuple[str, str], group: _Group) -> TableRows:
        values = group.values
        sig = _signature(values[0])
        try:
            _, plan = self.decoder._plan(table[0], table[1], False, sig)
        except Exception:
            raise _SlowPathError from None
        if plan.signature != sig:
            raise _SlowPathError  # a partial image of a wider table
        schema = plan.schema
        shape = self._shapes.get(sig)
        if shape is None:
            if len(self._shapes) >= _SHAPES:
                self._shapes.clear()
            shape = self._shapes[sig] = _Shape(sig, schema.columns)
        rows = shape.rows(values)
        n = len(rows)
        us, ps, ds = [r.u for r in rows], [r.p for r in rows], [r.d for r in rows]
        if ps.count(None) == n and ds.count(None) == n and us.count(None) == 0:
            deletes = updates = np.zeros(n, bool)  # inserts only (a backlog's usual run), told in C
        else:
            has_u, has_p, has_d = (np.fromiter(map(is_not, images, repeat(None)), bool, n) for images in (us, ps, ds))
            deletes = has_d & ~has_u & ~has_p
            updates = has_u & has_p & ~has_d
            if not (deletes | updates | (has_u & ~has_p & ~has_d)).all():
                raise _SlowPathError  # no image, or "d" with "u"/"p": the row decoder's errors
        if deletes.all():
            main = ds
        elif not deletes.any():
            main = us
        else:
            main = [d if x else u for x, u, d in zip(deletes.tolist(), us, ds, strict=True)]
        columns = shape.columns(main)
        before: list[pa.Array] = []
        if updates.any():
            olds = shape.columns([p for p, x in zip(ps, updates.tolist(), strict=True) if x])
            at = pa.array(np.where(updates, np.cumsum(updates) - 1, 0))
            mask = pa.array(updates)
            # Old images of updates at their rows, NULL elsewhere.
            before = [pc.if_else(mask, old.take(at), pa.nulls(n, old.type)) for old in olds]
        else:
            before = [pa.nulls(n, arrow_type(c)) for c in schema.columns]
        _refuse_negative_zero(values, [a for j in shape.floats for a in (columns[j], before[j])])
        ts = np.array(group.ts, np.int64)
        codes = np.where(deletes, 2, np.where(updates, 1, 0)).astype(np.int8)
        batch = table_batch(columns, codes, pa.array(ts), before)
        return TableRows(schema, batch, raw=values, _ops=codes)


class _Shape:
    """A table shape's typed JSON reader (msgspec, in C): one row's exact column set, type codes
    and flags, and each value's JSON type as the row decoder accepts it; any other row fails it."""

    def __init__(self, sig: Sequence[tuple[Any, ...]], columns: Sequence[Column]) -> None:
        self.columns_of = tuple(columns)
        fields, names = [], {}
        for j, ((name, t, f, h), column) in enumerate(zip(sig, columns, strict=True)):
            vtype = _value_type(column)
            if vtype is None:
                raise _SlowPathError
            # "h" as the row decoder compares it (c.get("h")): absent and null are None.
            handle: list[tuple[str, Any]] = [("h", Literal[h])] if h is not None else []
            member: list[tuple[str, Any] | tuple[str, Any, Any]] = [
                ("t", Literal[t]),
                ("f", Literal[f]),
                *handle,
                ("v", vtype | None, None),
            ]
            if h is None:
                member.append(("h", None, None))
            # Unknown members are errors, not skipped: skipped text is not checked as strictly as
            # the row decoder's parser checks every byte, so an odd member goes the row decoder's way.
            fields.append((f"c{j}", msgspec.defstruct(f"Column{j}", member, forbid_unknown_fields=True, gc=False)))
            names[f"c{j}"] = name
        try:
            image = msgspec.defstruct("Image", fields, rename=names, forbid_unknown_fields=True, gc=False)
        except ValueError:  # msgspec takes no '\\', '"' or control characters in a member name
            raise _SlowPathError from None
        optional = image | None
        members = [("u", optional, None), ("p", optional, None), ("d", optional, None)]
        row = msgspec.defstruct("Row", members, forbid_unknown_fields=True, gc=False)
        try:
            self._decoder = msgspec.json.Decoder(list[row])  # type: ignore[valid-type]
        except (NotImplementedError, TypeError, ValueError):  # e.g. a "t" or "f" beyond int64 (found by fuzzing)
            raise _SlowPathError from None
        self._values = value_lists(len(fields), "v")
        self.floats = [j for j, c in enumerate(self.columns_of) if c.type_code in FLOAT_TYPES]

    def rows(self, values: list[bytes]) -> list[Any]:
        out: list[Any] = []
        for i in range(0, len(values), _PARSE_ROWS):
            part = values[i : i + _PARSE_ROWS]
            text = _join(part)
            if text is None:
                raise _SlowPathError
            try:
                parsed = self._decoder.decode(text)
            except (msgspec.DecodeError, ValueError):
                raise _SlowPathError from None
            if len(parsed) != len(part):
                raise _SlowPathError  # a value holding more than one JSON document
            out.extend(parsed)
        return out

    def columns(self, images: list[Any]) -> list[pa.Array]:
        return [_values(values, column) for values, column in zip(self._values(images), self.columns_of, strict=True)]


def _key(k: bytes) -> _Head | None:
    """(t, ts, scm, tbl) of an ordinary row (no claim check, no partition) or resolved event key."""
    try:
        key = orjson.loads(k)
    except orjson.JSONDecodeError:
        return None
    if type(key) is not dict:
        return None
    t, ts, scm, tbl = key.get("t"), key.get("ts"), key.get("scm", ""), key.get("tbl", "")
    if type(t) is not int or t not in (_ROW, _RESOLVED) or type(ts) is not int or not 0 <= ts <= _I64_MAX:
        return None
    if type(scm) is not str or type(tbl) is not str:
        return None
    if key.get("rid") is not None or key.get("ptn") is not None or key.get("ccl") not in (None, ""):
        return None
    return t, ts, scm, tbl


def _signature(value: bytes) -> tuple[tuple[Any, ...], ...]:
    """(name, "t", "f", "h") of each column of a row's full image (u, or d), as the row decoder reads it."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise _SlowPathError from None
    image = (
        doc.get("u") if type(doc) is dict and doc.get("u") is not None else doc.get("d") if type(doc) is dict else None
    )
    if type(image) is not dict or not image or not all(type(c) is dict for c in image.values()):
        raise _SlowPathError
    sig = tuple((name, col.get("t"), col.get("f"), col.get("h")) for name, col in image.items())
    if any(type(t) is not int or type(f) is not int or h not in (None, True, False) for _, t, f, h in sig):
        raise _SlowPathError  # v4.0-era columns without flags, or odd metadata: the row decoder's rules
    return sig


def _refuse_negative_zero(values: list[bytes], floats: list[pa.Array]) -> None:
    """Send rows whose float column may be "v":-0 to the row decoder, which keeps the sign.

    msgspec reads -0 as 0.0 (orjson as the integer 0); only a row with a zero float can hold one,
    so only those rows' texts are searched (a search of every row's text cost ~0.6 µs a row).
    """
    zero: np.ndarray | None = None
    for array in floats:
        if array.null_count == len(array):
            continue
        hit = pc.fill_null(pc.equal(array, 0.0), False).to_numpy(zero_copy_only=False)
        zero = hit if zero is None else zero | hit
    if zero is not None and zero.any():
        marks = _NEG_ZERO_MARKS
        if any(marks[0] in values[i] or marks[1] in values[i] for i in np.flatnonzero(zero).tolist()):
            raise _SlowPathError


def _values(values: list[Any], column: Column) -> pa.Array:
    """A column's values (JSON types checked by `_Shape`) converted as the row decoder does (spec §1.10)."""
    tc = column.type_code
    try:
        if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
            lo, hi = int_range(column)
            array = pa.array(values, pa.uint64() if hi > _I64_MAX else pa.int64())
            bounds = pc.min_max(array).as_py()
            if bounds["min"] is not None and (bounds["min"] < lo or bounds["max"] > hi):
                raise _SlowPathError  # out of the column's range: the row decoder's error
            return array.cast(arrow_type(column))
        if tc is TypeCode.DOUBLE:
            return pa.array(values, pa.float64())
        if tc is TypeCode.FLOAT:
            # Nearest float32, as to_float32; one beyond float32's range is the row decoder's error.
            narrowed = pa.array(values, pa.float64()).cast(pa.float32(), safe=False)
            if pc.any(pc.is_inf(narrowed)).as_py():
                raise _SlowPathError
            return narrowed
        if tc is TypeCode.DECIMAL:
            array = pa.array(values, pa.string())
            if pc.all(pc.match_substring_regex(array, _DECIMAL)).as_py() is False:
                raise _SlowPathError
            if (pc.max(pc.binary_length(array)).as_py() or 0) > MAX_DECIMAL_DIGITS:
                digits = pc.max(pc.count_substring_regex(array, "[0-9]")).as_py()
                if digits > MAX_DECIMAL_DIGITS:
                    raise _SlowPathError  # too many digits: the row decoder's error
            return array
        if tc in BLOB_TYPES or tc is TypeCode.GEOMETRY:
            data = pa.array([None if v is None else a2b_base64(v, strict_mode=True) for v in values], pa.binary())
            return data if column.is_bytes else data.cast(pa.string())  # the cast checks UTF-8
        if tc in CHAR_TYPES and column.binary:
            # Go's escapes that Python's bytes-literal decoder reads the same (go_unquote's fast
            # path), told value by value in one call; the rest (\u escapes, errors) by go_unquote.
            text = pa.array(values, pa.string())
            plain = pc.match_substring_regex(text, _BYTE_ESCAPES)
            if text.null_count == 0 and pc.all(plain).as_py():  # the usual column: each value in one C call
                return pa.array(list(map(_first, map(escape_decode, values))), pa.binary())
            simple = plain.to_pylist()
            return pa.array(
                [
                    None if v is None else escape_decode(v)[0] if plain else go_unquote(v)
                    for v, plain in zip(values, simple, strict=True)
                ],
                pa.binary(),
            )
        return pa.array(values, pa.string())
    except (ValueError, pa.ArrowInvalid, OverflowError):  # binascii.Error is a ValueError
        raise _SlowPathError from None


def _blocks(
    rows: TableRows,
    starts: list[int],
    first: int,
    out: list[list[Event | RowBlock]],
    positions: Sequence[Mapping[str, Any]],
    breaks: Sequence[int] = (),
) -> None:
    """The events of messages holding only rows of one table the fast path took (``rows``; message
    ``first + k`` holds rows [starts[k], starts[k + 1])): one `RowBlock` per run of consecutive
    messages, in the run's first message's list (the others' stay empty), holding the run's rows
    and a `Segment` per run of one commit ts of each message, at that message's position (how the
    merger takes a block of several messages, `PartitionMerger.feed`). Messages ``breaks`` (absolute
    indices, ascending) end runs and are left to the caller (they hold other events too).

    Why one block per run, not per message: a `TableRows` slice and a block per message cost ~0.5
    µs a row of the apply driver (bench/RESULTS.md). The runs are found for the whole chunk at once
    (numpy); each segment is built empty and its slots assigned (its generated ``__init__`` cost as
    much again).
    """
    n = rows.num_rows
    commits = rows.commit_ts  # the batch's own column, not copied
    new = np.empty(n, bool)
    new[0] = True
    np.not_equal(commits[1:], commits[:-1], out=new[1:])
    bounds = np.asarray(starts, np.intp)
    new[bounds[:-1][bounds[:-1] < n]] = True  # a message's first row starts a segment
    heads = np.flatnonzero(new)
    counts = np.diff(heads, append=n).tolist()
    at = np.searchsorted(heads, bounds).tolist()  # message k's segments are [at[k], at[k + 1])
    commit_list = commits[heads].tolist()
    make = object.__new__
    stops = [b - first for b in breaks]
    begin = 0
    for stop in [*stops, len(starts) - 1]:  # the run of messages [begin, stop)
        a, b = starts[begin], starts[stop]
        if a < b:
            segments = []
            for k in range(begin, stop):
                position = positions[first + k]
                for s in range(at[k], at[k + 1]):
                    segment = make(Segment)
                    segment.table = 0
                    segment.rows = counts[s]
                    segment.commit_ts = commit_list[s]
                    segment.position = position
                    segment.skip = None
                    segments.append(segment)
            head = bisect_right(starts, a, begin, stop) - 1  # the run's first message with rows
            out[first + head] = [RowBlock([rows if b - a == n else rows.slice(a, b - a)], segments)]
        begin = stop + 1


def _events(
    a: int,
    b: int,
    t: list[int],
    ts: list[int],
    tables: Sequence[tuple[str, str]],
    row_of: list[int] | None,
    groups: Mapping[tuple[str, str], _Group],
    position: Mapping[str, Any],
) -> list[Event | RowBlock]:
    """One message's events (its events are [a, b) of the chunk): fast rows as one RowBlock per
    run of them, other events as they are.

    A block holds one `TableRows` slice per run of one table's rows and one segment per commit ts.
    """
    events: list[Event | RowBlock] = []
    block_tables: list[TableRows] = []
    segments: list[Segment] = []
    span: tuple[tuple[str, str], int, int] | None = None  # (table, first row in its group, rows)

    def close_span() -> None:
        nonlocal span
        if span is not None:
            rows = groups[span[0]].rows
            assert rows is not None
            block_tables.append(rows.slice(span[1], span[2]))
            span = None

    def close_block() -> None:
        nonlocal block_tables, segments
        close_span()
        if segments:
            events.append(RowBlock(block_tables, segments))
            block_tables, segments = [], []

    j = a
    while j < b:
        kind, commit, table = t[j], ts[j], tables[j]
        k = j + 1
        while k < b and t[k] == kind and ts[k] == commit and tables[k] == table:
            k += 1
        count = k - j
        at = j if row_of is None else row_of[j]
        j = k
        if kind == _RESOLVED:
            close_block()
            events.extend(Resolved(commit_ts=commit, position=dict(position)) for _ in range(count))
            continue
        group = groups[table]
        if group.rows is None:
            close_block()
            assert group.events is not None
            for row in group.events[at : at + count]:
                row.position = dict(position)
                events.append(row)
            continue
        if span is None or span[0] != table or span[1] + span[2] != at:
            close_span()
            span = (table, at, 0)
        span = (table, span[1], span[2] + count)
        segments.append(Segment(len(block_tables), count, commit, position, skip=None))
    close_block()
    return events


__all__ = ["OpenProtocolBlockDecoder"]
