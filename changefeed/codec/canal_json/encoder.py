"""Canal-JSON encoder: one JSON object per event, byte-compatible with TiCDC (spec §2).

DML bodies imitate TiCDC's hand-rolled easyjson writer; DDL and watermark bodies imitate
``json.Marshal`` of a struct. Per-table work (header bytes, ``mysqlType``, ``sqlType``
fragments, value renderers) is done once per `TableSchema` object.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ...errors import CodecError, ConfigError, MessageTooLargeError
from ...model import ABSENT, DDLEvent, Op, Resolved, RowChange, TableSchema, TypeCode, ddl_kind
from ...model.rowblock import TableRows
from ...model.schemacache import PlanCache
from ...model.tso import tso_physical_ms
from ...model.types import java_sql_type
from ...model.values import b64encode
from ..base import Encoder, Message
from ..claimcheck import ClaimCheckStore, wrap_value
from ..codegen import compile_dict_renderer
from ..compression import compression_codec
from ..gojson import easyjson_fix, std_fix
from ..options import CodecOptions
from ..rowkey import int_handle_position, row_key
from . import columns  # refers back to this module's plans; used only at call time
from .values import Renderer, default_mysql_type, full_mysql_type, value_renderer

_RECORD_OVERHEAD = 36  # Kafka MaxRecordOverhead (spec §0.7), as Message.size counts it
_TYPE_NAMES = {Op.INSERT: b"INSERT", Op.UPDATE: b"UPDATE", Op.DELETE: b"DELETE"}
_UNSIGNED_PROMOTION_LIMITS = {
    TypeCode.TINYINT: 127,
    TypeCode.SMALLINT: 32767,
    TypeCode.INT: 2147483647,
    TypeCode.BIGINT: 9223372036854775807,
}


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    assert isinstance(exc, UnicodeDecodeError)
    return "\ufffd" * (exc.end - exc.start), exc.end


codecs.register_error("changefeed.goreplace", _go_replace)


def _go_utf8(text: str) -> str:
    """Go writes U+FFFD for each byte of invalid UTF-8; a Python str carries such bytes as lone
    surrogates (``surrogateescape``), which orjson refuses. Only called on that rare path."""
    raw = bytearray()
    for ch in text:
        if "\udc80" <= ch <= "\udcff":
            raw.append(ord(ch) - 0xDC00)
        else:
            raw += ch.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "changefeed.goreplace")


# Errors that send a row from the generated fast path to the careful one (ABSENT columns,
# values of the wrong type, strings orjson refuses); the careful path reports real problems.
_FAST_ERRORS = (TypeError, ValueError, AttributeError, ArithmeticError, orjson.JSONEncodeError)


# ------------------------------------------------------------------ per-table plans


@dataclass(slots=True)
class _Plan:
    """The columns one kind of DML message carries (all of them, or only the handle key)."""

    positions: tuple[int, ...]
    names: tuple[str, ...]
    renderers: tuple[Renderer, ...]
    fast: Callable[[tuple[Any, ...]], bytes]
    sql_fragments: tuple[bytes, ...]
    promotions: tuple[tuple[int, int, int, bytes], ...]  # (fragment index, position, limit, promoted fragment)
    sql_type: bytes  # the whole member when nothing is promoted
    mysql_type: bytes

    def render(self, image: tuple[Any, ...]) -> dict[str, Any]:
        """Column name -> value string or None, without the columns the image does not carry."""
        out = {}
        for name, r, pos in zip(self.names, self.renderers, self.positions, strict=True):
            v = image[pos]
            if v is ABSENT:
                continue
            out[name] = v if (r is None or v is None) else r(v)
        return out

    def dump(self, image: tuple[Any, ...]) -> bytes:
        try:
            return self.fast(image)
        except _FAST_ERRORS:
            return _dump_object(self.render(image))

    def sql_type_for(self, image: tuple[Any, ...]) -> bytes:
        """``sqlType`` with per-value unsigned promotion (ticdc formatColumnValue)."""
        if not self.promotions:
            return self.sql_type
        fragments = None
        for k, pos, limit, promoted in self.promotions:
            v = image[pos]
            if type(v) is int and v > limit:
                if fragments is None:
                    fragments = list(self.sql_fragments)
                fragments[k] = promoted
        if fragments is None:
            return self.sql_type
        return b"{" + b",".join(fragments) + b"}"


def _dump_object(obj: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        # Lone surrogates (undecodable bytes carried in a str): Go writes U+FFFD per byte.
        fixed = {}
        for k, v in obj.items():
            if v is not None and not isinstance(v, str):
                raise TypeError(f"column {k!r}: unsupported value {v!r}") from None
            fixed[_go_utf8(k)] = v if v is None else _go_utf8(v)
        return orjson.dumps(fixed)


def _build_plan(ts: TableSchema, positions: tuple[int, ...], content_compatible: bool) -> _Plan:
    columns = [ts.columns[i] for i in positions]
    fragments = []
    promotions = []
    mysql_members = []
    for k, (pos, col) in enumerate(zip(positions, columns, strict=True)):
        key = easyjson_fix(_dumps_str(col.name))
        base = java_sql_type(col.type_code, col.binary, col.unsigned)
        fragments.append(key + b":" + str(int(base)).encode())
        if col.unsigned and col.type_code in _UNSIGNED_PROMOTION_LIMITS:
            limit = _UNSIGNED_PROMOTION_LIMITS[col.type_code]
            promoted = java_sql_type(col.type_code, col.binary, True, limit + 1)
            promotions.append((k, pos, limit, key + b":" + str(int(promoted)).encode()))
        text = full_mysql_type(col) if content_compatible else default_mysql_type(col)
        mysql_members.append(key + b":" + easyjson_fix(_dumps_str(text)))
    # ticdc: sqlType null when no column is written; mysqlType is a non-nil Go map, so {}.
    sql_type = b"{" + b",".join(fragments) + b"}" if fragments else b"null"
    names = tuple(c.name for c in columns)
    renderers = tuple(value_renderer(c) for c in columns)
    full = len(positions) == len(ts.columns)
    return _Plan(
        positions=positions,
        names=names,
        renderers=renderers,
        fast=compile_dict_renderer("canal-json", names, renderers, None if full else positions),
        sql_fragments=tuple(fragments),
        promotions=tuple(promotions),
        sql_type=sql_type,
        mysql_type=b"{" + b",".join(mysql_members) + b"}",
    )


@dataclass(slots=True)
class _TablePlan:
    schema: TableSchema
    prefixes: dict[Op, bytes]
    full: _Plan
    handle: _Plan
    handle_pos: int | None


def _build_table_plan(ts: TableSchema, content_compatible: bool) -> _TablePlan:
    if not ts.columns:
        raise CodecError(f"{ts.qualified_name}: canal-json cannot encode a table without columns")
    pk = [ts.columns[i].name for i in ts.primary_key]
    head = easyjson_fix(
        b'{"id":0,"database":'
        + _dumps_str(ts.schema)
        + b',"table":'
        + _dumps_str(ts.table)  # the logical table name, also for partitions
        + b',"pkNames":'
        + (b"[" + b",".join(_dumps_str(n) for n in pk) + b"]" if pk else b"null")
    )
    head += b',"isDdl":false,"type":"'
    return _TablePlan(
        schema=ts,
        prefixes={op: head + name + b'","es":' for op, name in _TYPE_NAMES.items()},
        full=_build_plan(ts, tuple(range(len(ts.columns))), content_compatible),
        handle=_build_plan(ts, ts.handle_key, content_compatible),
        handle_pos=int_handle_position(ts),
    )


# ------------------------------------------------------------------ the encoder


class CanalJSONEncoder(Encoder):
    """TiCDC ``protocol=canal-json`` (spec §2): key None, value one JSON object per event."""

    protocol = "canal-json"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        opts = self.options
        self._ext = opts.enable_tidb_extension
        self._large = opts.large_message_handle_option
        if self._large != "none" and not self._ext:
            # TiCDC refuses the changefeed: the markers live in `_tidb`.
            raise ConfigError(
                f"large-message-handle-option={self._large} needs enable-tidb-extension=true for canal-json"
            )
        codec = compression_codec(opts.large_message_handle_compression)
        self._compress = codec[0] if codec else None
        # A plain-path storage is written into locations as an absolute file:// URI.
        self._claim_check: ClaimCheckStore | None = None
        if self._large == "claim-check":
            self._claim_check = ClaimCheckStore(opts.claim_check_storage_uri, absolute_file_uri=True)
        self._row_key = opts.output_row_key and self._ext and not opts.tiflow  # [ticdc] only
        self._tiflow = opts.tiflow
        self._only_updated = opts.only_output_updated_columns  # content-compatible implies it
        self._delete_handle_only = opts.delete_only_output_handle_key_columns
        self._content_compatible = opts.content_compatible
        self._clock = opts.clock
        self._plans = PlanCache(lambda ts: _build_table_plan(ts, self._content_compatible))
        self._messages: list[Message] = []
        self._column_settings: columns.Settings | None = None  # made on first render_rows

    # -------------------------------------------------------------- rows

    def append_row(self, row: RowChange) -> None:
        self._messages.append(self.encode_row(row))

    def render_rows(self, rows: TableRows) -> tuple[list[bytes | None], list[bytes | None]] | None:
        """Uncompressed values of a table's rows rendered column-wise (`columns.render_table`).

        canal-json messages have no key: a rendered row's key is ``b""`` (None: not rendered)
        and `append_rendered` queues it with key None, as `append_row` does.
        """
        if not rows.width:
            return None  # the per-row path explains that canal-json needs columns
        if self._column_settings is None:
            self._column_settings = columns.Settings(
                tidb_extension=self._ext,
                delete_handle_only=self._delete_handle_only,
                only_updated=self._only_updated,
                tiflow=self._tiflow,
                row_key=self._row_key,
            )
        return columns.render_table(rows, self._plans.get(rows.table_schema), self._column_settings, self._clock())

    def append_rendered(self, key: bytes, value: bytes, commit_ts: int, row: Callable[[], RowChange]) -> None:
        """Queue a value from `render_rows` as `append_row` queues the row's message; a value
        over max-message-bytes goes through `append_row` (handle-key-only, claim-check, errors)."""
        value, fits = self._packed(value)
        if fits:
            self._messages.append(Message(None, value, None, None, 1, commit_ts))  # as encode_row's
        else:
            self.append_row(row())

    def build(self) -> list[Message]:
        out, self._messages = self._messages, []
        return out

    def _packed(self, value: bytes) -> tuple[bytes, bool]:
        """The value as sent (compressed if configured) and whether it fits max-message-bytes."""
        if self._compress is not None:
            value = self._compress(value)
        return value, len(value) + _RECORD_OVERHEAD <= self.options.max_message_bytes

    def encode_row(self, row: RowChange) -> Message:
        """One DML message, applying the large-message rules of spec §2.10."""
        tp = self._plans.get(row.table_schema)
        value, fits = self._packed(self._dml(row, tp, only_handle=False, too_large=False, location=None))
        if not fits:
            limit = self.options.max_message_bytes
            size = len(value) + _RECORD_OVERHEAD
            if self._large == "none":
                raise MessageTooLargeError(f"{_row_label(row)} encodes to {size} bytes, over max-message-bytes {limit}")
            location = None
            if self._large == "claim-check":
                location = self._write_claim_check(value, row)
            small, fits = self._packed(self._dml(row, tp, only_handle=True, too_large=True, location=location))
            if not fits:
                what = "claim-check reference" if location else "handle-key-only form"
                raise MessageTooLargeError(
                    f"{_row_label(row)}: even its {what} is {len(small) + _RECORD_OVERHEAD} bytes,"
                    f" over max-message-bytes {limit}"
                )
            value = small
        return Message(None, value, None, None, 1, row.commit_ts)  # key, value, partition, topic, rows, commit_ts

    def _dml(self, row: RowChange, tp: _TablePlan, only_handle: bool, too_large: bool, location: str | None) -> bytes:
        op = row.op
        if op is Op.DELETE and self._delete_handle_only:
            only_handle = True  # no onlyHandleKey marker for this case
        plan = tp.handle if only_handle else tp.full
        image = row.old if op is Op.DELETE else row.new
        if image is None:
            raise CodecError(f"{_row_label(row)}: {op} row without its {'old' if op is Op.DELETE else 'new'} image")
        try:
            if op is not Op.UPDATE or row.old is None:
                # v5.4+: INSERT and DELETE carry "old":null; DELETE's data is the deleted row.
                body = b',"old":null,"data":[' + plan.dump(image) + b"]"
            elif not self._only_updated:
                body = b',"old":[' + plan.dump(row.old) + b'],"data":[' + plan.dump(image) + b"]"
            else:
                new = plan.render(image)
                old = self._changed(plan, row, new, plan.render(row.old))
                body = b',"old":[' + _dump_object(old) + b'],"data":[' + _dump_object(new) + b"]"
        except (TypeError, ValueError, AttributeError, ArithmeticError, orjson.JSONEncodeError) as exc:
            raise CodecError(f"{_row_label(row)}: cannot render a value: {exc}") from None
        parts = [
            tp.prefixes[op],
            str(row.commit_ts >> 18).encode(),  # es: the TSO's physical milliseconds
            b',"ts":',
            str(self._clock()).encode(),
            b',"sql":"","sqlType":',
            plan.sql_type_for(image),
            b',"mysqlType":',
            plan.mysql_type,
            easyjson_fix(body),
        ]
        if self._ext:
            parts += (b',"_tidb":{"commitTs":', str(row.commit_ts).encode())
            if too_large and self._large == "handle-key-only":
                parts.append(b',"onlyHandleKey":true')
            if too_large and location is not None:
                parts += (b',"claimCheckLocation":', easyjson_fix(_dumps_str(location)))
            if self._row_key:
                key = row_key(row, tp.handle_pos)
                if key is not None:  # TiCDC always has one; we only know int handles
                    parts += (b',"rowkey":"', b64encode(key).encode(), b'"')
            parts.append(b"}}")
        else:
            parts.append(b"}")
        return b"".join(parts)

    def _changed(self, plan: _Plan, row: RowChange, new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
        """``only-output-updated-columns``: keep the old values that differ from the new ones."""
        if self._tiflow:
            # [tiflow] compares the Go values of the same type; -0.0 == 0.0 there, as in Python.
            assert row.new is not None and row.old is not None
            same = {
                name
                for name, pos in zip(plan.names, plan.positions, strict=True)
                if type(a := row.new[pos]) is type(b := row.old[pos]) and a is not ABSENT and a == b
            }
            return {k: v for k, v in old.items() if k not in same}
        # [ticdc] compares the rendered strings; NULL differs from "".
        missing = object()
        return {k: v for k, v in old.items() if new.get(k, missing) != v}

    def _write_claim_check(self, value: bytes, row: RowChange) -> str:
        store = self._claim_check
        assert store is not None
        name = store.new_name()
        try:
            return store.write(name, value if self.options.claim_check_raw_value else wrap_value(value))
        except OSError as exc:
            raise CodecError(f"{_row_label(row)}: cannot write claim-check file {name}: {exc}") from None

    # -------------------------------------------------------------- DDL and watermark

    def encode_ddl(self, ddl: DDLEvent) -> Message:
        """json.Marshal of TiCDC's JSONMessage struct (std escaping, data before old; spec §2.7)."""
        out = (
            b'{"id":0,"database":'
            + _dumps_str(ddl.schema)
            + b',"table":'
            + _dumps_str(ddl.table)
            + b',"pkNames":null,"isDdl":true,"type":'
            + orjson.dumps(ddl_kind(ddl.ddl_type))
            + b',"es":'
            + str(tso_physical_ms(ddl.commit_ts)).encode()
            + b',"ts":'
            + str(self._clock()).encode()
            + b',"sql":'
            + _dumps_str(ddl.query)
            + b',"sqlType":null,"mysqlType":null,"data":null,"old":null'
        )
        if self._ext:
            # tidbExtension members are omitempty.
            out += b',"_tidb":{' + (b'"commitTs":' + str(ddl.commit_ts).encode() if ddl.commit_ts else b"") + b"}"
        value = std_fix(out + b"}")
        if self._compress is not None:
            value = self._compress(value)
        return Message(key=None, value=value, commit_ts=ddl.commit_ts)

    def encode_resolved(self, resolved: Resolved) -> Message | None:
        """TIDB_WATERMARK (spec §2.8); nothing at all without the TiDB extension."""
        if not self._ext:
            return None
        ts = resolved.commit_ts
        value = (
            b'{"id":0,"database":"","table":"","pkNames":null,"isDdl":false,"type":"TIDB_WATERMARK","es":'
            + str(tso_physical_ms(ts)).encode()
            + b',"ts":'
            + str(self._clock()).encode()
            + b',"sql":"","sqlType":null,"mysqlType":null,"data":null,"old":null,"_tidb":{'
            + (b'"watermarkTs":' + str(ts).encode() if ts else b"")
            + b"}}"
        )
        if self._compress is not None:
            value = self._compress(value)
        return Message(key=None, value=value, commit_ts=ts)


def _dumps_str(text: str) -> bytes:
    try:
        return orjson.dumps(text)
    except orjson.JSONEncodeError:
        return orjson.dumps(_go_utf8(text))


def _row_label(row: RowChange) -> str:
    return f"{row.op} row of {row.table_schema.qualified_name} (commit ts {row.commit_ts})"
