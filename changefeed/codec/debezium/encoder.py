"""TiCDC ``protocol=debezium`` encoder: one Kafka record per row, key and value JSON (debezium.md).

Everything per table (schema sections, member names, value renderers) is built once per
`TableSchema` and a generated function renders a row image; a row then costs one join. Row
blocks are rendered a column at a time (`render_rows`, `columns.py`) from the same plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import CodecError, ConfigError, MessageTooLargeError
from ...model import ABSENT, Column, DDLEvent, Op, Resolved, RowChange, TableSchema
from ...model.rowblock import TableRows
from ...model.schemacache import PlanCache
from ...timezones import zone
from ..base import Encoder, Message
from ..codegen import compile_joined_renderer
from ..compression import compression_codec
from ..gojson import jstr
from ..options import CodecOptions
from . import columns
from . import ddl as ddl_msg
from .values import (
    null_rendering,
    sanitize_name,
    sanitize_topic_name,
    schema_element,
    value_renderer,
)

_RECORD_OVERHEAD = 36  # Kafka MaxRecordOverhead (ticdc-protocols.md §0.7)
_OPS = {Op.INSERT: b"c", Op.UPDATE: b"u", Op.DELETE: b"d"}

# §5.2: the source struct's fields, in TiCDC's member order.
SOURCE_FIELDS = (
    b'{"type":"string","optional":false,"field":"version"},'
    b'{"type":"string","optional":false,"field":"connector"},'
    b'{"type":"string","optional":false,"field":"name"},'
    b'{"type":"int64","optional":false,"field":"ts_ms"},'
    b'{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,'
    b'"parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},'
    b'{"type":"string","optional":false,"field":"db"},'
    b'{"type":"string","optional":true,"field":"sequence"},'
    b'{"type":"string","optional":true,"field":"table"},'
    b'{"type":"int64","optional":false,"field":"server_id"},'
    b'{"type":"string","optional":true,"field":"gtid"},'
    b'{"type":"string","optional":false,"field":"file"},'
    b'{"type":"int64","optional":false,"field":"pos"},'
    b'{"type":"int32","optional":false,"field":"row"},'
    b'{"type":"int64","optional":true,"field":"thread"},'
    b'{"type":"string","optional":true,"field":"query"}'
)
_EXT_FIELDS = (
    b',{"type":"int64","optional":false,"field":"commit_ts"},{"type":"string","optional":false,"field":"cluster_id"}'
)
_START_TS_FIELD = b',{"type":"int64","optional":false,"field":"start_ts"}'
_OP_TS_TXN_FIELDS = (
    b'{"type":"string","optional":false,"field":"op"},'
    b'{"type":"int64","optional":true,"field":"ts_ms"},'
    b'{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},'
    b'{"type":"int64","optional":false,"field":"total_order"},'
    b'{"type":"int64","optional":false,"field":"data_collection_order"}],'
    b'"optional":true,"name":"event.block","version":1,"field":"transaction"}'
)


def source_schema(extension: bool, start_ts: bool, tiflow: bool) -> bytes:
    """The ``source`` struct field: [ticdc] declares commit_ts/cluster_id with the extension, start_ts
    with include-start-ts; [tiflow] declares neither."""
    fields = SOURCE_FIELDS
    if extension and not tiflow:
        fields += _EXT_FIELDS
    if start_ts and not tiflow:
        fields += _START_TS_FIELD
    return (
        b'{"type":"struct","fields":[' + fields + b'],"optional":false,'
        b'"name":"io.debezium.connector.mysql.Source","field":"source"}'
    )


# ------------------------------------------------------------------ per-table plans

_FAST_ERRORS = (TypeError, ValueError, AttributeError, ArithmeticError, IndexError)


@dataclass(slots=True)
class _Image:
    """How one image (all columns, or the handle key) is written."""

    columns: tuple[Column, ...]
    positions: tuple[int, ...]
    renders: tuple[Callable[[Any], bytes], ...]
    nulls: tuple[bytes, ...]
    fast: Callable[[tuple[Any, ...]], bytes]
    members: tuple[bytes, ...]  # each column's `"name":`

    def render(self, image: tuple[Any, ...], label: Callable[[], str]) -> bytes:
        try:
            return self.fast(image)
        except _FAST_ERRORS:
            pass
        parts = []
        for col, pos, render, null in zip(self.columns, self.positions, self.renders, self.nulls, strict=True):
            v = image[pos]
            if v is ABSENT:
                raise CodecError(
                    f"{label()}: the image does not carry column {col.name!r}; Debezium writes every column"
                )
            try:
                text = null if v is None else render(v)
            except _FAST_ERRORS as exc:
                raise CodecError(f"{label()}: column {col.name!r} ({col.type_name}): {exc}") from None
            parts.append(jstr(col.name) + b":" + text)
        return b"{" + b",".join(parts) + b"}"


def _image(ts: TableSchema, positions: tuple[int, ...], tz: tzinfo) -> _Image:
    cols = tuple(ts.columns[p] for p in positions)
    try:
        renders = tuple(value_renderer(c, tz) for c in cols)
    except ValueError as exc:
        raise CodecError(f"{ts.qualified_name}: {exc}") from None
    nulls = tuple(null_rendering(c, r, tz) for c, r in zip(cols, renders, strict=True))
    fast = compile_joined_renderer("debezium", tuple(jstr(c.name) + b":" for c in cols), renders, nulls, positions)
    return _Image(cols, positions, renders, nulls, fast, tuple(jstr(c.name) + b":" for c in cols))


@dataclass(slots=True)
class _TablePlan:
    full: _Image
    key: _Image
    source_head: bytes  # through `"ts_ms":` of the source
    source_mid: bytes  # from `,"snapshot"` through `"commit_ts":`
    key_tail: bytes  # `,"schema":{...}}` or `}`
    value_tail: bytes


# ------------------------------------------------------------------ the encoder


def _row_label(row: RowChange) -> str:
    return f"{row.op} row of {row.table_schema.qualified_name} (commit ts {row.commit_ts})"


class DebeziumEncoder(Encoder):
    """TiCDC ``protocol=debezium`` in JSON mode (debezium.md §2-§9)."""

    protocol = "debezium"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        opts = self.options
        self._tiflow = opts.tiflow
        if opts.debezium_include_start_ts and self._tiflow:
            raise ConfigError(
                "debezium-include-start-ts is a TiCDC (new architecture) option; --compat tiflow has none"
            )
        if opts.large_message_handle_option != "none":
            # TiCDC's Debezium encoder has no claim-check or handle-key-only fallback (§2).
            raise ConfigError("protocol debezium has no large-message-handle-option; leave it none")
        self._ext = opts.enable_tidb_extension
        self._schema = not opts.debezium_disable_schema
        self._start_ts = opts.debezium_include_start_ts
        self._old_value = opts.output_old_value
        self._cluster = opts.cluster_id
        self._zone = zone(opts.time_zone)
        self._clock = opts.clock
        codec = compression_codec(opts.large_message_handle_compression)
        self._compress = codec[0] if codec else None
        self._source_schema = source_schema(self._ext, self._start_ts, self._tiflow)
        self._cluster_json = jstr(self._cluster)
        self._plans = PlanCache(self._plan)
        self._messages: list[Message] = []

    # -------------------------------------------------------------- plans

    def _ns(self, db: str, table: str) -> str:
        return f"{sanitize_name(self._cluster)}.{sanitize_name(db)}.{sanitize_topic_name(table)}"

    def source_parts(self, db: str, table: str) -> tuple[bytes, bytes]:
        """§4.2: the source block around its ``ts_ms`` value (head) and its ``commit_ts`` value (mid)."""
        head = b'{"version":"2.4.0.Final","connector":"TiCDC","name":' + self._cluster_json + b',"ts_ms":'
        mid = (
            b',"snapshot":"false","db":'
            + jstr(db)
            + b',"table":'
            + jstr(table)
            + b',"server_id":0,"gtid":null,"file":"","pos":0,"row":0,"thread":0,"query":null,"commit_ts":'
        )
        return head, mid

    def _plan(self, ts: TableSchema) -> _TablePlan:
        full = _image(ts, tuple(range(len(ts.columns))), self._zone)
        key = _image(ts, ts.handle_key, self._zone)
        ns = jstr(self._ns(ts.schema, ts.table))[1:-1]
        head, mid = self.source_parts(ts.schema, ts.table)
        if not self._schema:
            return _TablePlan(full, key, b'{"payload":{"source":' + head, mid, b"}", b"}")
        extension = self._ext
        key_fields = b",".join(schema_element(c, extension) for c in key.columns)
        key_tail = (
            b',"schema":{"type":"struct","name":"' + ns + b'.Key","optional":false,"fields":[' + key_fields + b"]}}"
        )
        cols = b",".join(schema_element(c, extension) for c in full.columns)
        value_struct = b'"type":"struct","optional":true,"name":"' + ns + b'.Value","field":'
        value_tail = (
            b',"schema":{"type":"struct","optional":false,"name":"'
            + ns
            + b'.Envelope","version":1,"fields":[{'
            + value_struct
            + b'"before","fields":['
            + cols
            + b"]},{"
            + value_struct
            + b'"after","fields":['
            + cols
            + b"]},"
            + self._source_schema
            + b","
            + _OP_TS_TXN_FIELDS
            + b"]}}"
        )
        return _TablePlan(full, key, b'{"payload":{"source":' + head, mid, key_tail, value_tail)

    # -------------------------------------------------------------- rows

    def append_row(self, row: RowChange) -> None:
        self._messages.append(self.encode_row(row))

    def build(self) -> list[Message]:
        out, self._messages = self._messages, []
        return out

    def render_rows(self, rows: TableRows) -> tuple[list[bytes | None], list[bytes | None]] | None:
        """Every row's key and uncompressed value rendered a column at a time (`columns.py`);
        None entries are rows whose images leave columns out (the per-row path refuses them).

        The bytes are `encode_row`'s, with the clock read once for the whole table. Not rendered
        (None): include-start-ts (a block does not carry a row's start ts) and tables holding a
        value the per-row renderer refuses (so its error names the row).
        """
        if self._start_ts:
            return None
        n = rows.num_rows
        if not n:
            return [], []
        plan = self._plans.get(rows.table_schema)
        full = plan.full
        texts: list[pa.Array] = []
        for pos, col, render, null in zip(full.positions, full.columns, full.renders, full.nulls, strict=True):
            t = columns.value_texts(col, rows.column(pos), render, null)
            if t is None:
                return None
            texts.append(t)
        key_texts = [texts[p] for p in plan.key.positions]
        keys = columns.concat([b'{"payload":', *columns.object_parts(plan.key.members, key_texts)], n)
        ops = rows.ops
        # UPDATE with output-old-value: the old image (the block has one for every update).
        updates = ops == 1
        before: columns.Part = b""
        if self._old_value and updates.any():
            idx = None if updates.all() else np.flatnonzero(updates)
            old = []
            for pos, col, render, null in zip(full.positions, full.columns, full.renders, full.nulls, strict=True):
                t = columns.value_texts(col, columns.take(rows.before(pos), idx), render, null)
                if t is None:
                    return None
                old.append(t)
            before = columns.scatter(
                n, updates, columns.concat(columns.object_parts(full.members, old), int(updates.sum())), b""
            )
        # Member order as encode_row writes it (TiCDC's): INSERT before:null then after, DELETE
        # after:null then before, UPDATE before (output-old-value only, else no member) then after.
        op_parts = (
            b'c","before":null,"after":',
            (b'u","before":' if self._old_value else b'u","after":'),
            b'd","after":null,"before":',
        )
        after_sep = (b"", b',"after":' if self._old_value else b"", b"")
        commit = rows.batch.column(rows.width + 1)
        parts: list[columns.Part] = [
            plan.source_head,
            pc.shift_right(commit, 18).cast(pa.string()).view(pa.binary()),
            plan.source_mid,
            commit.cast(pa.string()).view(pa.binary()),
            b',"cluster_id":' + self._cluster_json + b'},"ts_ms":' + str(self._clock()).encode(),
            b',"transaction":null,"op":"',
            columns.select(ops, op_parts),
            before,
            columns.select(ops, after_sep),
            *columns.object_parts(full.members, texts),
        ]
        # The constant tails (the schema sections, most of a record's bytes) are appended in
        # Python: one copy instead of two through an Arrow buffer.
        key_tail, value_tail = plan.key_tail, b"}" + plan.value_tail
        key_list: list[bytes | None] = [k + key_tail for k in columns.as_bytes(keys)]
        value_list: list[bytes | None] = [v + value_tail for v in columns.as_bytes(columns.concat(parts, n))]
        complete = rows.full()
        if not complete.all():
            for i in np.flatnonzero(~complete).tolist():
                key_list[i] = value_list[i] = None
        return key_list, value_list

    def append_rendered(self, key: bytes, value: bytes, commit_ts: int, row: Callable[[], RowChange]) -> None:
        """Queue a record from `render_rows` as `append_row` queues the row's; one over
        max-message-bytes goes through `append_row`, which raises the error naming the row."""
        if self._compress is not None:
            key, value = self._compress(key), self._compress(value)
        if len(key) + len(value) + _RECORD_OVERHEAD > self.options.max_message_bytes:
            self.append_row(row())
            return
        self._messages.append(Message(key, value, None, None, 1, commit_ts))

    def encode_row(self, row: RowChange) -> Message:
        """One DML record: key = the handle-key columns of the identifying image, value = the envelope."""
        plan = self._plans.get(row.table_schema)
        op = row.op
        label = partial(_row_label, row)  # only an error needs it: formatted then
        # Key from the new image for INSERT/UPDATE (so a key-changing UPDATE carries the new key),
        # the old one for DELETE (§3).
        image = row.old if op is Op.DELETE else row.new
        if image is None:
            raise CodecError(f"{label()}: no {'old' if op is Op.DELETE else 'new'} image")
        key = b'{"payload":' + plan.key.render(image, label) + plan.key_tail
        commit_ts = row.commit_ts
        parts = [plan.source_head, str(commit_ts >> 18).encode(), plan.source_mid, str(commit_ts).encode()]
        if self._start_ts:
            parts += (b',"start_ts":', str(row.start_ts).encode())  # [ticdc] include-start-ts
        parts += (b',"cluster_id":', self._cluster_json, b'},"ts_ms":', str(self._clock()).encode())
        parts.append(b',"transaction":null,"op":"' + _OPS[op] + b'"')
        if op is Op.INSERT:
            parts += (b',"before":null,"after":', plan.full.render(image, label))
        elif op is Op.DELETE:
            # DELETE: the full old row, not only the key (delete-only-output-handle-key-columns is not consulted).
            parts += (b',"after":null,"before":', plan.full.render(image, label))
        else:
            if self._old_value and row.old is not None:
                parts += (b',"before":', plan.full.render(row.old, label))
            # output-old-value=false: no "before" member at all (not null).
            parts += (b',"after":', plan.full.render(image, label))
        parts.append(b"}")
        parts.append(plan.value_tail)
        return self._message(key, b"".join(parts), label, rows=1, commit_ts=commit_ts)

    def _message(self, key: bytes, value: bytes, label: Callable[[], str], rows: int, commit_ts: int) -> Message:
        if self._compress is not None:
            # large-message-handle-compression: key and value each compressed whole.
            key, value = self._compress(key), self._compress(value)
        size = len(key) + len(value) + _RECORD_OVERHEAD
        if size > self.options.max_message_bytes:
            raise MessageTooLargeError(
                f"{label()} encodes to {size} bytes, over max-message-bytes {self.options.max_message_bytes}"
                " (the Debezium protocol has no large-message fallback)"
            )
        return Message(key, value, None, None, rows, commit_ts)

    # -------------------------------------------------------------- DDL and watermark

    def encode_ddl(self, ddl: DDLEvent) -> Message:
        """SchemaChangeKey/Value (§7). A DDL action TiCDC cannot classify is a CodecError here;
        `skips_ddl` tells a caller beforehand (TiCDC's batch encoder drops those silently)."""
        label = f"DDL {ddl.query[:80]!r} (commit ts {ddl.commit_ts})"
        kind = ddl_msg.change_type(ddl.ddl_type)
        if kind is None:
            raise CodecError(f"{label}: TiCDC's Debezium codec sends no message for DDL action {ddl.action!r}")
        db_json = jstr(ddl.schema)
        key = b'{"payload":{"databaseName":' + db_json + b"}"
        if self._schema:
            key += b',"schema":' + ddl_msg.KEY_SCHEMA
        key += b"}"
        head, mid = self.source_parts(ddl.schema, ddl.table)
        value = (
            b'{"payload":{"source":'
            + head
            + str(ddl.commit_ts >> 18).encode()
            + mid
            + str(ddl.commit_ts).encode()
            + b',"cluster_id":'
            + self._cluster_json
            + b'},"ts_ms":'
            + str(self._clock()).encode()
            + b',"databaseName":'
            + db_json
            + b',"schemaName":null,"ddl":'
            + jstr(ddl.query)
            + b',"tableChanges":'
            + ddl_msg.table_changes(ddl, kind)
            + b"}"
        )
        if self._schema:
            value += b',"schema":' + ddl_msg.value_schema(source_schema(self._ext, False, self._tiflow))
        return self._message(key, value + b"}", lambda: label, rows=0, commit_ts=ddl.commit_ts)

    @staticmethod
    def skips_ddl(ddl: DDLEvent) -> bool:
        """TiCDC sends no Debezium message for this DDL's action (§7 "Any other action")."""
        return ddl_msg.change_type(ddl.ddl_type) is None

    def encode_resolved(self, resolved: Resolved) -> Message | None:
        """The watermark (``op:"m"``, §9), only with enable-tidb-extension."""
        if not self._ext:
            return None
        ts = resolved.commit_ts
        cluster = sanitize_name(self._cluster).encode()
        key = b'{"payload":{}'
        if self._schema:
            key += b',"schema":{"type":"struct","name":"' + cluster + b'.watermark.Key","optional":false,"fields":[]}'
        head, mid = self.source_parts("", "")
        value = (
            b'{"payload":{"source":'
            + head
            + str(ts >> 18).encode()
            + mid
            + str(ts).encode()
            + b',"cluster_id":'
            + self._cluster_json
            + b'},"ts_ms":'
            + str(self._clock()).encode()
            + b',"transaction":null,"op":"m"}'
        )
        if self._schema:
            value += (
                b',"schema":{"type":"struct","optional":false,"name":"'
                + cluster
                + b'.watermark.Envelope","version":1,"fields":['
                + source_schema(self._ext, False, self._tiflow)
                + b","
                + _OP_TS_TXN_FIELDS
                + b"]}"
            )
        return self._message(key + b"}", value + b"}", lambda: f"watermark {ts}", rows=0, commit_ts=ts)
