"""SimpleDecoder: Simple protocol messages in either encoding -> model events (spec §3).

The decoder keeps the schema cache and holds DMLs whose schema it has not seen yet (a consumer
joining midway, seed 002 scenario 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import CodecError, UnknownSchemaError
from ...model import ABSENT, DDLEvent, Event, Op, Resolved, RowChange, TableSchema
from ...model.events import trusted_row
from ...model.schemacache import PlanCache
from ..base import Decoder, Message
from ..claimcheck import reading_store, unwrap_value
from ..codegen import compile_object_reader
from ..compression import inflater
from ..options import CodecOptions
from .avro import AvroFormat
from .common import (
    DDL_TYPES,
    U64,
    Parsed,
    SimpleFormatError,
    ddl_action,
    fail,
    schema_of_sql,
    within,
)
from .message import JSONFormat
from .schema_cache import Held, PendingQueue, SchemaCache, SchemaKey

DEFAULT_MAX_PENDING_MESSAGES = 10_000
DEFAULT_MAX_PENDING_BYTES = 128 << 20
"""Held DMLs wait at most until TiCDC's next BOOTSTRAP (send-bootstrap-in-msg-count 10000 / 120 s):
128 MiB of value text holds the 10000 at ~13 KiB each, or a dozen 10 MiB messages. The decoder
uses 4 x max-message-bytes when larger, so a few of the largest messages always fit."""
_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}


class SimpleDecoder(Decoder):
    """Simple protocol messages -> model events, with a schema cache and held DMLs.

    ``decode`` returns, in order: the DMLs this message released and the message's own event
    (a BOOTSTRAP has none; a DDL's DDLEvent comes after the DMLs its preTableSchema released and
    before those its tableSchema released). A DML whose (schema, table, version) is unknown is
    held; at most ``max_pending_messages`` DMLs and ``max_pending_bytes`` of their value text
    (`Parsed.size`) are held, beyond either the DML is refused with UnknownSchemaError. A
    watermark received while DMLs are held waits behind them (it promises nothing earlier is
    outstanding). Events already released when an error is raised are not lost: they come first
    out of the next call.
    """

    protocol = "simple"

    def __init__(
        self,
        options: CodecOptions | None = None,
        *,
        max_pending_messages: int = DEFAULT_MAX_PENDING_MESSAGES,
        max_pending_bytes: int | None = None,
    ) -> None:
        super().__init__(options)
        o = self.options
        self._fmt = AvroFormat(o) if o.encoding_format == "avro" else JSONFormat(o)
        self._decompress = inflater(o.large_message_handle_compression, o.max_message_bytes)
        uri = o.claim_check_storage_uri
        self._claim_check = reading_store(uri, o.max_message_bytes)
        self.max_pending_messages = max_pending_messages
        if max_pending_bytes is None:
            max_pending_bytes = max(DEFAULT_MAX_PENDING_BYTES, 4 * o.max_message_bytes)
        self.max_pending_bytes = max_pending_bytes
        self.schemas = SchemaCache()
        self._readers = PlanCache(lambda ts: _Reader(ts, self._fmt.parsers(ts)))
        self._pending = PendingQueue()
        self._undelivered: list[Event] = []  # released, but the call that released them raised
        self._retry = False  # a release stopped at a bad message; the rest are ready

    # -------------------------------------------------------------- pending DMLs

    def pending(self) -> int:
        """How many DMLs are held waiting for their schema."""
        return self._pending.dml_count

    def pending_tables(self) -> list[SchemaKey]:
        """The distinct (schema, table, schemaVersion) the held DMLs wait for, in arrival order."""
        seen: dict[SchemaKey, None] = {}
        for entry in self._pending.entries:
            if entry.parsed is not None:
                seen.setdefault(entry.key, None)
        return list(seen)

    def take_pending(self) -> list[tuple[Message, str]]:
        """Give up on the held DMLs: return their messages (and ``where``) and forget them.

        Held watermarks are dropped with them (TiCDC sends one every second).
        """
        return [(e.message, e.where) for e in self._pending.clear() if e.message is not None]

    def learn(self, message: Message, where: str = "") -> bool:
        """Cache the table schemas a BOOTSTRAP or DDL message carries, without decoding it as an event.

        For a reader that starts mid-partition (a Spark range read): it looks back before its start
        for the schema of a held DML. Other messages are ignored. True when a schema was new; the
        DMLs it unblocks come out of :meth:`release`.
        """
        if message.value is None:
            return False
        p = self._parse(message.value, where, fetch=False)
        if p.type != "BOOTSTRAP" and p.type not in DDL_TYPES:
            return False
        added = [self.schemas.add(ts) for ts in (p.pre_table_schema, p.table_schema) if ts is not None]
        return any(added)

    def release(self) -> list[Event]:
        """The held DMLs (and the watermarks behind them) that may go out now, e.g. after :meth:`learn`."""
        out = self._undelivered
        self._retry = False
        self._release(out)
        self._undelivered = []
        return out

    # -------------------------------------------------------------- decode

    def decode(self, message: Message, where: str = "") -> list[Event]:
        out = self._undelivered  # appended to in place, so an exception below keeps what was released
        if self._retry:
            self._retry = False
            self._release(out)
        value = message.value
        if value is None:
            raise fail(where, "message has no value")
        p = self._parse(value, where)
        if p.is_dml:
            self._dml(p, message, where, out)
        elif p.type == "WATERMARK":
            resolved = Resolved(commit_ts=p.commit_ts)
            if self._pending.dml_count:
                self._pending.hold(Held(None, None, where, resolved))
            else:
                out.append(resolved)
        elif p.type == "BOOTSTRAP":
            assert p.table_schema is not None
            if self.schemas.add(p.table_schema):
                self._release(out)
        else:
            self._ddl(p, out)
        self._undelivered = []
        return out

    def _parse(self, value: bytes, where: str, *, fetch: bool = True) -> Parsed:
        if self._decompress is not None:
            self._decompress.new_message()  # the value and its claim-check file share one budget
            try:
                value = self._decompress(value)
            except Exception as exc:
                method = self.options.large_message_handle_compression
                raise fail(where, f"cannot decompress ({method}): {exc}") from None
        p = self._fmt.parse(value, where, self.schemas)
        p.size = len(value)
        if fetch and p.is_dml and p.claim_check_location:
            p = self._fetch_claim_check(p, where)
        return p

    def _fetch_claim_check(self, p: Parsed, where: str) -> Parsed:
        # claimCheckLocation wins over handleKeyOnly: the full message is in the file (§3.4).
        if self._claim_check is None:
            raise fail(where, f"claim-check message ({p.claim_check_location}) but no claim-check-storage-uri is set")
        location = p.claim_check_location
        scope = f"claim-check file {location!r}"
        try:
            stored = self._claim_check.read(location)  # a regular file inside the directory, bounded
        except ValueError as exc:
            raise fail(where, str(exc)) from None
        try:
            # The wrapped form, or (claim-check-raw-value) the value itself: both are recognised.
            value = unwrap_value(stored, raw_allowed=True)
        except ValueError as exc:
            raise fail(where, f"{scope}: {exc}") from None
        if self._decompress is not None:
            try:
                value = self._decompress(value)
            except Exception as exc:
                raise fail(where, f"{scope}: cannot decompress: {exc}") from None
        try:
            full = self._fmt.parse(value, where, self.schemas)
        except SimpleFormatError as exc:
            raise within(exc, scope) from None
        if not full.is_dml or full.claim_check_location or full.handle_key_only:
            raise fail(where, f"{scope} does not hold a complete DML message")
        if (full.type, full.database, full.table, full.commit_ts) != (p.type, p.database, p.table, p.commit_ts):
            raise fail(where, f"{scope} holds a different DML than the message refers to")
        full.size = len(value)
        return full

    def _dml(self, p: Parsed, message: Message, where: str, out: list[Event]) -> None:
        if not 0 <= p.schema_version <= U64:
            raise fail(where, f"schemaVersion {p.schema_version} is not a uint64")
        ts = self.schemas.get((p.database, p.table, p.schema_version))
        if ts is not None and not self._pending.is_blocked((p.database, p.table)):
            out.append(self._row(p, ts, where))
            return
        held = self._pending
        if held.dml_count >= self.max_pending_messages:
            raise UnknownSchemaError(
                f"simple protocol: no schema for {p.database}.{p.table} schemaVersion {p.schema_version} "
                f"and {held.dml_count} DMLs already held (max_pending_messages); "
                f"waiting for: {self.pending_tables()[:5]}",
                where=where or None,
            )
        if held.dml_bytes + p.size > self.max_pending_bytes:
            raise UnknownSchemaError(
                f"simple protocol: no schema for {p.database}.{p.table} schemaVersion {p.schema_version}, "
                f"and holding this {p.size}-byte DML would exceed max_pending_bytes {self.max_pending_bytes} "
                f"({held.dml_count} DMLs, {held.dml_bytes} bytes already held); "
                f"waiting for: {self.pending_tables()[:5]}",
                where=where or None,
            )
        held.hold(Held(p, message, where))

    def _ddl(self, p: Parsed, out: list[Event]) -> None:
        if p.pre_table_schema is not None and self.schemas.add(p.pre_table_schema):
            self._release(out)  # rows of the old version precede the DDL
        ts = p.table_schema or p.pre_table_schema
        assert p.type in DDL_TYPES
        out.append(
            DDLEvent(
                schema=ts.schema if ts is not None else schema_of_sql(p.sql),
                table=ts.table if ts is not None else "",
                query=p.sql,
                ddl_type=ddl_action(p.type, p.sql),
                commit_ts=p.commit_ts,
                table_schema=p.table_schema,
                pre_table_schema=p.pre_table_schema,
            )
        )
        if p.table_schema is not None and self.schemas.add(p.table_schema):
            self._release(out)

    def _release(self, out: list[Event]) -> None:
        """Append the held entries that may go out now; a bad one is dropped (and raised), the
        rest after it stay ready for the next call."""
        ready = self._pending.ready(lambda key: key in self.schemas)
        for n, entry in enumerate(ready):
            if entry.resolved is not None:
                out.append(entry.resolved)
                continue
            assert entry.parsed is not None
            ts = self.schemas.get(entry.key)
            assert ts is not None
            try:
                out.append(self._row(entry.parsed, ts, entry.where))
            except CodecError:
                self._pending.requeue(ready[n + 1 :])
                self._retry = True
                raise

    def _row(self, p: Parsed, ts: TableSchema, where: str) -> RowChange:
        op = _OPS[p.type]
        if op is not Op.DELETE and p.data is None:
            raise fail(where, f"{p.type} of {ts.qualified_name} without data")
        if op is Op.DELETE and p.old is None:
            raise fail(where, f"DELETE of {ts.qualified_name} without old")
        if op is Op.INSERT and p.old is not None:
            raise fail(where, f"INSERT of {ts.qualified_name} with old")
        if op is Op.DELETE and p.data is not None:
            raise fail(where, f"DELETE of {ts.qualified_name} with data")
        reader = self._readers.get(ts)
        new = reader.image(p.data, "data", where) if p.data is not None else None
        old = reader.image(p.old, "old", where) if p.old is not None else None
        # Images are built at the schema's width here, so the constructor's checks can be skipped.
        partition_id = p.table_id if p.table_id and p.table_id != ts.table_id else None
        return trusted_row(op, ts, p.commit_ts, new, old, partition_id)


class _Reader:
    """One table's ``data``/``old`` map reader: a generated fast path for complete maps of good
    values, and the careful loop that reads partial maps and explains bad ones."""

    __slots__ = ("fast", "parsers", "ts")

    def __init__(self, ts: TableSchema, parsers: dict[str, tuple[int, Callable[[Any], Any]]]) -> None:
        self.ts = ts
        self.parsers = parsers
        self.fast = compile_object_reader(
            tuple(c.name for c in ts.columns), tuple(parsers[c.name][1] for c in ts.columns), strings_only=False
        )

    def image(self, raw: Any, which: str, where: str) -> tuple[Any, ...]:
        if type(raw) is dict:
            try:
                return self.fast(raw)
            except Exception:
                pass
        return self._careful(raw, which, where)

    def _careful(self, raw: Any, which: str, where: str) -> tuple[Any, ...]:
        ts, parsers = self.ts, self.parsers
        image: list[Any] = [ABSENT] * len(ts.columns)
        for name, value in raw.items():
            entry = parsers.get(name)
            if entry is None:
                raise fail(where, f"{which}: column {name!r} is not in {ts.qualified_name} schemaVersion {ts.version}")
            idx, parse = entry
            if value is None:
                image[idx] = None
                continue
            try:
                image[idx] = parse(value)
            except (ValueError, TypeError, OverflowError, ArithmeticError, KeyError) as exc:
                col = ts.columns[idx]
                raise fail(where, f"{which}: column {name!r} ({col.type_name}) value {value!r}: {exc}") from None
        return tuple(image)
