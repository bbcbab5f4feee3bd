"""TiCDC Open Protocol messages -> model events (spec §1.10), for [ticdc], [tiflow] and v4.0-era output.

Open Protocol carries no table schema: each row names its columns with a type code and flag
bits. The decoder rebuilds a `TableSchema` from them and shares it between rows with the same
column signature; an image that carries only some of the table's columns (handle-key-only
rows, old handle-only deletes, only-updated-columns ``p``) reuses the table's last full schema
with the missing columns ABSENT.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from ...errors import CodecError, clip
from ...model import ABSENT, Column, ColumnFlag, DDLEvent, Event, Op, Resolved, RowChange, TableSchema, TypeCode
from ...model.events import trusted_row
from ...model.types import CHAR_TYPES, INTEGER_TYPES
from ..base import Decoder, Message
from ..claimcheck import reading_store, unwrap_pair
from ..codegen import build
from ..compression import inflater
from ..options import CodecOptions
from ..values import U64_MAX, int_range
from .framing import split_frames
from .values import TEXT_TYPES, Convert, converter, kind_of, parse_int_keep_neg_zero

_KNOWN_TYPES = frozenset(int(t) for t in TypeCode)
# "v":-0 — orjson reads it as the integer 0 and loses the sign a float column needs. TiCDC
# writes "v" last; another writer may not.
_NEG_ZERO_MARKS = (b'"v":-0}', b'"v":-0,')


def _reject_constant(text: str) -> Any:
    raise ValueError(f"invalid JSON number {clip(text)}")


def _loads_row(raw: bytes) -> Any:
    doc = orjson.loads(raw)
    if _NEG_ZERO_MARKS[0] in raw or _NEG_ZERO_MARKS[1] in raw:
        # Rare: re-read with the stdlib parser, which hands us the number text (orjson validated it).
        doc = json.loads(raw, parse_int=parse_int_keep_neg_zero, parse_constant=_reject_constant)
    return doc


# ---------------------------------------------------------------- schema reconstruction

Meta = tuple[str, Any, Any, Any]  # (name, "t", "f", "h") exactly as in the JSON
Signature = tuple[Meta, ...]


@dataclass(slots=True)
class _Plan:
    schema: TableSchema
    signature: Signature  # the column set the schema was built from
    positions: dict[str, tuple[int, Convert]]  # name -> (schema position, converter)


Reader = Callable[[dict[str, Any]], tuple[Any, ...]]


class _MismatchError(Exception):
    """A column object's type/flags differ from the reader's: take the slow path."""


@dataclass(slots=True)
class _TableState:
    latest: _Plan | None = None  # the last full (non-subset) column set seen
    plans: dict[Signature, _Plan] = field(default_factory=dict)
    # Fast path: image member names -> (plan, generated reader checking type/flags as it reads).
    readers: dict[tuple[str, ...], tuple[_Plan, Reader]] = field(default_factory=dict)


def _compile_reader(plan: _Plan, image_sig: Signature) -> Reader:
    """A straight-line reader for images with exactly these members, in this order.

    It checks each column's "t"/"f"/"h" against the signature (raising _MismatchError otherwise) and
    converts the values, leaving plain ints and strings of the right type untouched. Names and
    converters are namespace constants, never spliced into the generated source.
    """
    ns: dict[str, Any] = {"ABSENT": ABSENT, "_MismatchError": _MismatchError}
    out = ["ABSENT"] * len(plan.schema.columns)
    lines = ["def read(img):"]
    for k, (name, t, f, h) in enumerate(image_sig):
        pos, convert = plan.positions[name]
        column = plan.schema.columns[pos]
        ns.update({f"N{k}": name, f"T{k}": t, f"F{k}": f, f"H{k}": h, f"C{k}": convert})
        lines.append(f"    c = img[N{k}]")
        lines.append(f"    if c.get('t') != T{k} or c.get('f') != F{k} or c.get('h') != H{k}: raise _MismatchError")
        lines.append(f"    v{k} = c.get('v')")
        tc = column.type_code
        if tc in INTEGER_TYPES:
            ns[f"LO{k}"], ns[f"HI{k}"] = int_range(column)
            lines.append(f"    if v{k}.__class__ is not int or v{k} < LO{k} or v{k} > HI{k}:")
            lines.append(f"        if v{k} is not None: v{k} = C{k}(v{k})")
        elif tc in TEXT_TYPES or (tc in CHAR_TYPES and not column.binary and f is not None):
            lines.append(f"    if v{k}.__class__ is not str and v{k} is not None: v{k} = C{k}(v{k})")
        else:
            lines.append(f"    if v{k} is not None: v{k} = C{k}(v{k})")
        out[pos] = f"v{k}"
    lines.append(f"    return ({', '.join(out)},)")
    return cast(Reader, build(f"open-protocol reader of {len(image_sig)} columns", "\n".join(lines) + "\n", ns))


def _image_signature(image: Any, label: str) -> Signature:
    if type(image) is not dict:
        raise ValueError(f'"{label}" must be an object of columns, got {kind_of(image)}')
    try:
        return tuple([(name, col["t"], col.get("f"), col.get("h")) for name, col in image.items()])
    except (KeyError, TypeError, AttributeError):
        for name, col in image.items():
            if type(col) is not dict:
                raise ValueError(f'"{label}" column {name!r} must be an object, got {kind_of(col)}') from None
            if "t" not in col:
                raise ValueError(f'"{label}" column {name!r} has no type code "t"') from None
        raise


def _column(meta: Meta) -> tuple[Column, bool]:
    """A Column from one column object's type code, flags and "h"; and whether it is legacy (no "f")."""
    name, t, f, h = meta
    if type(t) is not int or t not in _KNOWN_TYPES:
        raise ValueError(f"column {name!r}: unknown type code {clip(t)}")
    if f is not None and (type(f) is not int or f < 0):
        raise ValueError(f"column {name!r}: flag must be a non-negative integer, got {clip(f)}")
    if h is not None and type(h) is not bool:
        raise ValueError(f'column {name!r}: "h" must be a boolean, got {clip(h)}')
    flags = (f or 0) & 0xFF  # bits above the eight TiCDC defines are ignored
    if h:
        flags |= ColumnFlag.HANDLE_KEY  # v4.0 output has "h" but no "f"
    return Column.from_flags(name, t, flags), f is None


class OpenProtocolDecoder(Decoder):
    """TiCDC Open Protocol decoder.

    Stateful only as a cache: rebuilt schemas per (schema, table, column signature), and each
    table's last full schema (dropped when a DDL for the table or its schema arrives).
    """

    protocol = "open-protocol"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        o = self.options
        self._decompress = inflater(o.large_message_handle_compression, o.max_message_bytes)
        self._claim_store = reading_store(o.claim_check_storage_uri, o.max_message_bytes)
        self._tables: dict[tuple[str, str, bool], _TableState] = {}

    # ------------------------------------------------------------ messages

    def decode(self, message: Message, where: str = "") -> list[Event]:
        if self._decompress is not None:
            self._decompress.new_message()  # one budget for the message's values and claim-check files
        return self._decode(message.key, message.value, where, allow_claim_check=True)

    def _decode(self, key: bytes | None, value: bytes | None, where: str, allow_claim_check: bool) -> list[Event]:
        try:
            pairs = split_frames(key, value)
        except ValueError as e:
            raise CodecError(f"open-protocol message: {e}", where=where) from None
        events: list[Event] = []
        for n, (k, v) in enumerate(pairs, 1):
            try:
                events.append(self._event(k, v, allow_claim_check))
            except CodecError as e:
                raise CodecError(f"open-protocol event {n} of {len(pairs)}: {e.message}", where=where) from e
            except Exception as e:  # hostile input: JSON, base64, types, structure
                raise CodecError(f"open-protocol event {n} of {len(pairs)}: {e}", where=where) from e
        return events

    def _event(self, k: bytes, v: bytes, allow_claim_check: bool) -> Event:
        key = orjson.loads(k)
        if type(key) is not dict:
            raise ValueError(f"event key must be a JSON object, got {kind_of(key)}")
        ts, t = key.get("ts"), key.get("t")
        if type(t) is not int:
            raise ValueError(f'key "t" must be 1 (row), 2 (DDL) or 3 (resolved), got {clip(t)}')
        if type(ts) is not int or not 0 <= ts <= U64_MAX:
            raise ValueError(f'key "ts" must be a uint64, got {clip(ts)}')
        scm, tbl = key.get("scm", ""), key.get("tbl", "")
        if type(scm) is not str or type(tbl) is not str:
            raise ValueError(f'key "scm"/"tbl" must be strings, got {clip(scm)}/{clip(tbl)}')
        if t == 3:
            if v:
                raise ValueError(f"resolved event (t=3) has a {len(v)}-byte value; it must be empty")
            return Resolved(commit_ts=ts)
        if self._decompress is not None:
            try:
                v = self._decompress(v)
            except Exception as e:
                raise ValueError(f"cannot decompress the value: {e}") from None
        if t == 2:
            return self._ddl(key, v, ts, scm, tbl)
        if t != 1:
            raise ValueError(f'key "t" must be 1 (row), 2 (DDL) or 3 (resolved), got {clip(t)}')
        ccl = key.get("ccl")
        if ccl is not None and ccl != "":
            if type(ccl) is not str:
                raise ValueError(f'key "ccl" must be a string, got {clip(ccl)}')
            if not allow_claim_check:
                raise ValueError("a claim-check file refers to another claim-check file")
            return self._claim_check(ccl, ts)
        return self._row(key, v, ts, scm, tbl)

    def _ddl(self, key: dict[str, Any], v: bytes, ts: int, scm: str, tbl: str) -> DDLEvent:
        doc = orjson.loads(v)
        if type(doc) is not dict or type(doc.get("q")) is not str or type(doc.get("t")) is not int:
            raise ValueError('DDL value must be {"q": <query string>, "t": <type number>}')
        # The table's shape may change: forget the schemas rebuilt for it (all tables of a schema
        # for a schema-level DDL).
        for state_key in [sk for sk in self._tables if sk[0] == scm and (not tbl or sk[1] == tbl)]:
            del self._tables[state_key]
        return DDLEvent(schema=scm, table=tbl, query=doc["q"], ddl_type=doc["t"], commit_ts=ts)

    def _claim_check(self, ccl: str, ts: int) -> Event:
        """Spec §1.9: read the full one-event message named by the last path element of ``ccl``.

        Only from the configured storage, as TiCDC's consumer does: a location is message text,
        and following it would let a message open any path (a device, a FIFO, a file oracle).
        """
        if self._claim_store is None:
            raise ValueError(
                f'claim-check reference "ccl" {ccl[:200]!r} refused: no claim-check-storage-uri is configured '
                "(configure claim-check-storage-uri to read claim-check files)"
            )
        path = self._claim_store.path(ccl)
        data = self._claim_store.read(ccl)  # ValueError names the file and the directory
        try:
            framed_key, framed_value = unwrap_pair(data)
        except ValueError as e:
            raise ValueError(f"claim-check file {path}: {e}") from None
        try:
            events = self._decode(framed_key, framed_value, str(path), allow_claim_check=False)
        except CodecError as e:
            raise ValueError(f"claim-check file {path}: {e.message}") from None
        if len(events) != 1 or not isinstance(events[0], RowChange):
            raise ValueError(f"claim-check file {path} must hold exactly one row event, found {len(events)} events")
        if events[0].commit_ts != ts:
            raise ValueError(f"claim-check file {path} holds commit ts {events[0].commit_ts}, the reference says {ts}")
        return events[0]

    # ------------------------------------------------------------ rows

    def _row(self, key: dict[str, Any], v: bytes, ts: int, scm: str, tbl: str) -> RowChange:
        rid, ptn = key.get("rid"), key.get("ptn")
        if rid is not None and type(rid) is not int:
            raise ValueError(f'key "rid" must be an integer, got {clip(rid)}')
        if ptn is not None and type(ptn) is not int:
            raise ValueError(f'key "ptn" must be an integer, got {clip(ptn)}')
        doc = _loads_row(v)
        state = self._tables.get((scm, tbl, ptn is not None))
        if state is not None and type(doc) is dict:
            # Fast path: a reader already compiled for these member names.
            u, p, d = doc.get("u"), doc.get("p"), doc.get("d")
            readers = state.readers
            try:
                if d is not None:
                    if u is None and p is None:
                        plan, read = readers[tuple(d)]
                        return trusted_row(Op.DELETE, plan.schema, ts, old=read(d), partition_id=ptn, row_id=rid)
                elif u is not None:
                    plan, read = readers[tuple(u)]
                    if p is None:
                        return trusted_row(Op.INSERT, plan.schema, ts, new=read(u), partition_id=ptn, row_id=rid)
                    plan_p, read_p = readers[tuple(p)]
                    if plan_p is plan:
                        new, old = read(u), read_p(p)
                        return trusted_row(Op.UPDATE, plan.schema, ts, new=new, old=old, partition_id=ptn, row_id=rid)
            except Exception:
                pass
        return self._row_slow(doc, ts, scm, tbl, rid, ptn)

    def _row_slow(self, doc: Any, ts: int, scm: str, tbl: str, rid: int | None, ptn: int | None) -> RowChange:
        """Validate everything, build (or find) the plan and readers, and decode with good errors."""
        if type(doc) is not dict:
            raise ValueError(f"row value must be a JSON object, got {kind_of(doc)}")
        u, p, d = doc.get("u"), doc.get("p"), doc.get("d")
        images: list[tuple[dict[str, Any], Signature]] = []
        if d is not None:
            if u is not None or p is not None:
                raise ValueError('row value has "d" together with "u"/"p"')
            sig = _image_signature(d, "d")
            images.append((d, sig))
        elif u is not None:
            sig = _image_signature(u, "u")
            images.append((u, sig))
            if p is not None:
                sig_p = _image_signature(p, "p")
                images.append((p, sig_p))
                if sig_p != sig:
                    sig = _union(sig, sig_p)
        else:
            raise ValueError('row value has neither "u" nor "d"')
        state, plan = self._plan(scm, tbl, ptn is not None, sig)
        decoded = []
        for image, image_sig in images:
            names = tuple(image)
            entry = state.readers.get(names)
            if entry is None or entry[0] is not plan or entry[0].signature is not plan.signature:
                if len(state.readers) >= 256:
                    state.readers.clear()
                entry = state.readers[names] = (plan, _compile_reader(plan, image_sig))
            try:
                decoded.append(entry[1](image))
            except _MismatchError:  # same names, other type/flags than the cached reader: recompile
                entry = state.readers[names] = (plan, _compile_reader(plan, image_sig))
                decoded.append(entry[1](image))
        schema = plan.schema
        if d is not None:
            return trusted_row(Op.DELETE, schema, ts, old=decoded[0], partition_id=ptn, row_id=rid)
        if p is not None:
            return trusted_row(Op.UPDATE, schema, ts, new=decoded[0], old=decoded[1], partition_id=ptn, row_id=rid)
        # "u" alone: INSERT (an UPDATE sent without old value cannot be told apart).
        return trusted_row(Op.INSERT, schema, ts, new=decoded[0], partition_id=ptn, row_id=rid)

    def _plan(self, scm: str, tbl: str, partitioned: bool, sig: Signature) -> tuple[_TableState, _Plan]:
        state = self._tables.get((scm, tbl, partitioned))
        if state is None:
            state = self._tables[(scm, tbl, partitioned)] = _TableState()
        plan = state.plans.get(sig)
        if plan is not None:
            return state, plan
        latest = state.latest
        if latest is not None and _is_subset(sig, latest):
            plan = latest  # a partial image of the known table: the other columns are ABSENT
        else:
            columns, converters = [], []
            for meta in sig:
                column, legacy = _column(meta)
                columns.append(column)
                converters.append(converter(column, legacy))
            schema = TableSchema(schema=scm, table=tbl, columns=tuple(columns), partitioned=partitioned)
            positions = {c.name: (i, conv) for i, (c, conv) in enumerate(zip(columns, converters, strict=True))}
            plan = _Plan(schema, sig, positions)
            if latest is not None:
                # The table changed shape: partial images seen so far may belong to the new one.
                state.plans.clear()
                state.readers.clear()
            state.latest = plan
        if len(state.plans) >= 256:
            state.plans.clear()
        state.plans[sig] = plan
        return state, plan


def _union(a: Signature, b: Signature) -> Signature:
    """Columns of two images in order of appearance; the same name must have the same metadata."""
    seen = {m[0]: m for m in a}
    out = list(a)
    for m in b:
        prev = seen.get(m[0])
        if prev is None:
            seen[m[0]] = m
            out.append(m)
        elif prev != m:
            raise ValueError(f"column {m[0]!r} has different type/flags in two images: {prev[1:]} vs {m[1:]}")
    return tuple(out)


def _is_subset(sig: Signature, plan: _Plan) -> bool:
    known = {m[0]: m for m in plan.signature}
    return len(sig) < len(plan.signature) and all(known.get(m[0]) == m for m in sig)
