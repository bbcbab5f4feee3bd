"""Model events -> TiCDC Open Protocol messages, byte for byte ([ticdc] default, [tiflow] by ``compat``).

Row events are batched into Kafka messages (spec §1.2); DDL and resolved events are single-event
messages. Each table gets a precompiled plan (column prefixes and value renderers in output
order) so the per-row work is string concatenation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ...errors import CodecError, ConfigError, MessageTooLargeError
from ...model import ABSENT, ColumnFlag, DDLEvent, Op, Resolved, RowChange, TableSchema
from ...model.rowblock import TableRows
from ...model.schemacache import PlanCache
from ..base import Encoder, Message, Rendered
from ..claimcheck import ClaimCheckStore, wrap_pair
from ..codegen import compile_text_renderer
from ..compression import compression_codec
from ..gojson import go_quote_json, quote_jsoniter, quote_std
from ..options import CodecOptions
from ..rowkey import int_handle_position
from .columns import ColumnRenderer
from .framing import MAX_RECORD_OVERHEAD, U64, VERSION_HEADER, frame_single
from .values import Render, renderer

# Row/DDL/resolved message types in the key's "t" (spec §1.3).
TYPE_ROW, TYPE_DDL, TYPE_RESOLVED = 1, 2, 3
# Single-event size check: key + value + record overhead + two length prefixes + version header.
_SINGLE_EVENT_EXTRA = MAX_RECORD_OVERHEAD + 16 + 8
_U64 = U64.pack

PlanColumn: TypeAlias = tuple[int, str, Render]  # (position in the image, '"name":{"t":..,"f":..,"v":', renderer)


ImageRenderer = Callable[[Sequence[Any]], str]


def _image_json(cols: Sequence[PlanColumn], image: Sequence[Any]) -> str:
    """The members of one image object (generic path: any image, ABSENT columns left out)."""
    parts = []
    for i, prefix, render in cols:
        v = image[i]
        if v is None:
            parts.append(prefix + "null}")
        elif v is not ABSENT:  # a column the image does not carry is left out
            parts.append(prefix + render(v) + "}")
    return ",".join(parts)


@dataclass(slots=True)
class _Plan:
    """One table's precompiled rendering for one compat line."""

    schema: TableSchema
    label: str
    cols: tuple[PlanColumn, ...]
    render_all: ImageRenderer
    render_handle: ImageRenderer
    key_head: str  # [ticdc] ',"scm":..,"tbl":..,"t":1'; [tiflow] the omitempty scm/tbl members
    rid_index: int | None  # [tiflow] position of a single integer PK handle (rid fallback)


def _compile(ts: TableSchema, tiflow: bool, quote: Render, binary_quote: Render) -> _Plan:
    columns = list(enumerate(ts.columns))
    if tiflow:
        # tiflow: the column map is a Go map, so encoding/json sorts names bytewise (spec §1.4);
        # ticdc: table order.
        columns.sort(key=lambda ic: ic[1].name.encode("utf-8"))
    cols: list[PlanColumn] = []
    handle: list[PlanColumn] = []
    for i, col in columns:
        hk = bool(col.key_flags & ColumnFlag.HANDLE_KEY)
        # Column object {"t","h","f","v"}: "h" only when true (spec §1.5).
        h = ',"h":true' if hk else ""
        prefix = f'{quote(col.name)}:{{"t":{int(col.type_code)}{h},"f":{int(col.flags)},"v":'
        entry = (i, prefix, renderer(col, quote, binary_quote))
        cols.append(entry)
        if hk:
            handle.append(entry)
    if tiflow:
        key_head = (f',"scm":{quote(ts.schema)}' if ts.schema else "") + (
            f',"tbl":{quote(ts.table)}' if ts.table else ""
        )
    else:
        key_head = f',"scm":{quote(ts.schema)},"tbl":{quote(ts.table)},"t":{TYPE_ROW}'
    # An integer primary key is TiDB's row handle, so tiflow's rid is its value.
    rid_index = int_handle_position(ts)
    width = len(ts.columns)
    return _Plan(
        schema=ts,
        label=ts.qualified_name,
        cols=tuple(cols),
        render_all=compile_text_renderer(cols, width, _image_json),
        render_handle=compile_text_renderer(handle, width, _image_json),
        key_head=key_head,
        rid_index=rid_index,
    )


def _changed(old: Any, new: Any) -> bool:
    """only-output-updated-columns: does ``p`` keep this column? (spec §1.4)

    [ticdc]: both NULL -> no; one side NULL -> yes; else only if different. [tiflow] drops a
    column whose type and value compare equal, which gives the same answer for one table.
    """
    if old is None:
        return new is not None
    return new is None or new is ABSENT or old != new


@dataclass(slots=True)
class _Batch:
    """One message being filled: its events' keys and values, framed once, by `build`.

    ``room`` and ``left`` say what still fits (spec §1.2): events fit while the framed key and
    value (from the version header) plus Kafka's record overhead stay within max-message-bytes,
    up to max-batch-size events.
    """

    room: int  # max-message-bytes - record overhead - framed bytes so far
    left: int  # events still allowed
    keys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    commit_ts: int = 0

    @classmethod
    def open(cls, o: CodecOptions) -> _Batch:
        return cls(o.max_message_bytes - MAX_RECORD_OVERHEAD - len(VERSION_HEADER), o.max_batch_size, [], [])


class _LengthPrefixes(dict[int, bytes]):
    """u64be(n) per length n, packed once per distinct length (framing packs one per event)."""

    def __missing__(self, n: int) -> bytes:
        packed = _U64(n)
        if n < 1 << 16:  # keep the cache small: longer events are rare and cheap to pack
            self[n] = packed
        return packed


_prefix = _LengthPrefixes().__getitem__


def _framed(parts: list[bytes], head: bytes = b"") -> bytes:
    """``head`` then each part after its u64be length (spec §1.1)."""
    out = [head, *parts, *parts]  # 2n + 1 slots, filled below
    out[1::2] = map(_prefix, map(len, parts))
    out[2::2] = parts
    return b"".join(out)


class OpenProtocolEncoder(Encoder):
    """TiCDC Open Protocol encoder (TiCDC's BatchEncoder).

    One encoder batches everything appended to it, so a sink uses one per (topic, partition),
    as TiCDC batches per partition after dispatching.
    """

    protocol = "open-protocol"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        o = self.options
        self._tiflow = o.tiflow
        self._quote: Render = quote_std if o.tiflow else quote_jsoniter  # spec §0.6 / §1.7
        self._binary_quote: Render = go_quote_json(self._quote)
        if o.claim_check_raw_value:
            raise ConfigError("claim-check-raw-value is not supported by open-protocol")
        self._claim_check: ClaimCheckStore | None = None
        if o.large_message_handle_option == "claim-check":
            self._claim_check = ClaimCheckStore(o.claim_check_storage_uri)
        codec = compression_codec(o.large_message_handle_compression)
        self._compress = codec[0] if codec else None
        self._plans = PlanCache(lambda ts: _compile(ts, self._tiflow, self._quote, self._binary_quote))
        self._columns = ColumnRenderer(self._plans.get, o, self._quote)
        self._done: list[_Batch] = []
        self._cur: _Batch | None = None
        # Claim-check object names: TiCDC uses a random UUID; tests may pin this.
        self.new_claim_check_name: Callable[[], str] = ClaimCheckStore.new_name

    # ------------------------------------------------------------ rows

    def _row_key(self, row: RowChange, plan: _Plan, only_handle_key: bool = False, ccl: str | None = None) -> str:
        ptn = ""
        if row.partition_id is not None or plan.schema.partitioned:
            ptn = f',"ptn":{row.physical_table_id}'
        if not self._tiflow:
            # ticdc's hand-written writer: ts,scm,tbl,t, then ohk/ccl, then ptn (spec §1.3).
            tail = ',"ohk":true' if only_handle_key else ""
            if ccl is not None:
                tail = ',"ohk":false,"ccl":' + self._quote(ccl)
            return '{"ts":' + str(row.commit_ts) + plan.key_head + tail + ptn + "}"
        # tiflow encoding/json struct: ts,scm,tbl,rid,ptn,t,ohk,ccl with omitempty.
        rid = row.row_id
        if rid is None and plan.rid_index is not None:
            v = row.image[plan.rid_index] if row.image is not None else None
            if isinstance(v, int):
                rid = v - (1 << 64) if v >= 1 << 63 else v  # the handle is an int64
        key = '{"ts":' + str(row.commit_ts) + plan.key_head
        if rid:
            key += f',"rid":{rid}'
        key += ptn + ',"t":1'
        if only_handle_key and ccl is None:  # a claim-check reference has ohk=false (omitted)
            key += ',"ohk":true'
        if ccl is not None:
            key += ',"ccl":' + self._quote(ccl)
        return key + "}"

    def _row_value(self, row: RowChange, plan: _Plan, only_handle_key: bool = False) -> str:
        o = self.options
        render = plan.render_handle if only_handle_key else plan.render_all
        op = row.op
        if op is Op.INSERT:
            return '{"u":{' + render(row.new) + "}}"  # type: ignore[arg-type]
        if op is Op.DELETE:
            if o.delete_only_output_handle_key_columns:
                render = plan.render_handle
            return '{"d":{' + render(row.old) + "}}"  # type: ignore[arg-type]
        out = '{"u":{' + render(row.new) + "}"  # type: ignore[arg-type]
        old = row.old
        if old is not None and o.output_old_value:
            if o.only_output_updated_columns and not only_handle_key:
                new = row.new
                cols = [c for c in plan.cols if _changed(old[c[0]], new[c[0]])]  # type: ignore[index]
                out += ',"p":{' + _image_json(cols, old) + "}"
            else:
                out += ',"p":{' + render(old) + "}"
        return out + "}"

    def _encode_row(
        self, row: RowChange, plan: _Plan, only_handle_key: bool = False, ccl: str | None = None
    ) -> tuple[bytes, bytes]:
        """The event's key and (uncompressed) value."""
        try:
            key = self._row_key(row, plan, only_handle_key, ccl).encode("utf-8")
            value = self._row_value(row, plan, only_handle_key).encode("utf-8")
        except (TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as e:
            raise CodecError(
                f"open-protocol: cannot encode {row.op} row of {plan.label} at commit ts {row.commit_ts}: {e}"
            ) from e
        return key, value

    def _compressed(self, value: bytes) -> bytes:
        return value if self._compress is None else self._compress(value)

    def append_row(self, row: RowChange) -> None:
        plan = self._plans.get(row.table_schema)
        key, value = self._encode_row(row, plan)
        # Compressed as configured; queued if it fits max-message-bytes on its own (spec §1.9).
        if self._compress is not None:
            value = self._compress(value)
        if len(key) + len(value) + _SINGLE_EVENT_EXTRA > self.options.max_message_bytes:
            self._push(*self._large_message(row, plan, key, value), row.commit_ts)
        else:
            self._push(key, value, row.commit_ts)

    def render_rows(self, rows: TableRows) -> tuple[list[bytes | None], list[bytes | None]] | None:
        """Whole columns at once ([ticdc] only; see `columns`): None for tiflow, only-output-updated-
        columns, partitioned tables and Arrow types it does not render."""
        return self._columns.render(rows)

    def render_table(self, rows: TableRows) -> Rendered | None:
        """`Encoder.render_table` without its per-row scan: `render_rows` leaves exactly the rows
        without a full image unrendered."""
        if rows.table_schema.partitioned:
            return None
        rendered = self.render_rows(rows)
        if rendered is None:
            return None
        return Rendered(rendered[0], rendered[1], ~rows.full())

    def append_rendered(self, key: bytes, value: bytes, commit_ts: int, row: Callable[[], RowChange]) -> None:
        # `append_row`'s size check: once per row of the columnar path.
        if self._compress is not None:
            value = self._compress(value)
        size = len(key) + len(value) + 16  # the event and its two length prefixes
        cur = self._cur
        # An event that fits the open message is not too large for one of its own either.
        if (cur is None or size > cur.room or not cur.left) and (
            size + _SINGLE_EVENT_EXTRA - 16 > self.options.max_message_bytes
        ):
            self.append_row(row())  # large-message handling needs the row: the per-row path does it
            return
        self._push(key, value, commit_ts, size)

    def _too_large(self, row: RowChange, plan: _Plan, size: int, what: str) -> MessageTooLargeError:
        image = row.image or ()
        hk = ", ".join(
            f"{row.table_schema.columns[i].name}={image[i]!r}" for i in row.table_schema.handle_key if i < len(image)
        )
        return MessageTooLargeError(
            f"open-protocol: {what} {row.op} row of {plan.label} at commit ts {row.commit_ts}"
            f" (handle key {hk or 'none'}) needs {size} bytes, over max-message-bytes {self.options.max_message_bytes}"
        )

    def _large_message(self, row: RowChange, plan: _Plan, key: bytes, value: bytes) -> tuple[bytes, bytes]:
        """Spec §1.9: fail, or fall back to a handle-key-only or claim-check reference message."""
        o = self.options
        size = len(key) + len(value) + _SINGLE_EVENT_EXTRA
        option = o.large_message_handle_option
        if option == "none":
            raise self._too_large(row, plan, size, "the")
        if option == "claim-check":
            name = self.new_claim_check_name()
            framed_key, framed_value = frame_single(key, value)
            assert self._claim_check is not None
            try:
                ccl = self._claim_check.write(name, wrap_pair(framed_key, framed_value))
            except OSError as e:
                raise CodecError(f"open-protocol: cannot write claim-check file {name}: {e}") from e
            key, value = self._encode_row(row, plan, only_handle_key=True, ccl=ccl)
            # The reference value holds only handle-key columns; its key says ccl (ticdc: and ohk=false).
        else:
            key, value = self._encode_row(row, plan, only_handle_key=True)
        value = self._compressed(value)
        size = len(key) + len(value) + _SINGLE_EVENT_EXTRA
        if size > o.max_message_bytes:
            raise self._too_large(row, plan, size, f"{option} reference of the")
        return key, value

    def _push(self, key: bytes, value: bytes, commit_ts: int, size: int = 0) -> None:
        """Append one row event (``size``: its bytes with the two length prefixes, if known), opening a
        new message per spec §1.2."""
        cur = self._cur
        size = size or len(key) + len(value) + 16  # the event and its two length prefixes
        # Length() of the open message (+36 record overhead) plus this event, or max-batch-size rows
        # (tiflow checks the rows first, ticdc the bytes; either opens a message).
        if cur is None or size > cur.room or not cur.left:
            if cur is not None:
                self._done.append(cur)
            cur = self._cur = _Batch.open(self.options)
        cur.keys.append(key)
        cur.values.append(value)
        cur.room -= size
        cur.left -= 1
        if commit_ts > cur.commit_ts:  # noqa: PLR1730 (cheaper than a max() call, once per row)
            cur.commit_ts = commit_ts

    def build(self) -> list[Message]:
        batches = self._done
        if self._cur is not None:
            batches.append(self._cur)
        self._done, self._cur = [], None
        return [
            Message(_framed(b.keys, VERSION_HEADER), _framed(b.values), rows=len(b.keys), commit_ts=b.commit_ts)
            for b in batches
        ]

    # ------------------------------------------------------------ DDL and resolved

    def ddl_key(self, ddl: DDLEvent) -> str:
        q = self._quote
        if self._tiflow:  # omitempty: DROP DATABASE has no "tbl"
            return (
                '{"ts":'
                + str(ddl.commit_ts)
                + (f',"scm":{q(ddl.schema)}' if ddl.schema else "")
                + (f',"tbl":{q(ddl.table)}' if ddl.table else "")
                + f',"t":{TYPE_DDL}}}'
            )
        return f'{{"ts":{ddl.commit_ts},"scm":{q(ddl.schema)},"tbl":{q(ddl.table)},"t":{TYPE_DDL}}}'

    def encode_ddl(self, ddl: DDLEvent) -> Message:
        key = self.ddl_key(ddl).encode("utf-8")
        value = self._compressed(f'{{"q":{self._quote(ddl.query)},"t":{int(ddl.ddl_type)}}}'.encode())
        framed_key, framed_value = frame_single(key, value)
        return Message(framed_key, framed_value, rows=0, commit_ts=ddl.commit_ts)

    def encode_resolved(self, resolved: Resolved) -> Message:
        # Resolved: {"ts":…,"t":3} and an empty value entry, i.e. u64be(0) (spec §1.1).
        key = f'{{"ts":{resolved.commit_ts},"t":{TYPE_RESOLVED}}}'.encode()
        framed_key, framed_value = frame_single(key, b"")
        return Message(framed_key, framed_value, rows=0, commit_ts=resolved.commit_ts)
