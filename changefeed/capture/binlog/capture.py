"""Binlog events -> model events: transactions, commit timestamps, schemas, positions, reconnects.

One event group (BEGIN or a MariaDB GTID .. XID/COMMIT, or one standalone DDL) becomes its
events in binlog order, all sharing one TSO-shaped commit ts from `CommitClock`, followed by
``Resolved(commit_ts)``: every later group gets a larger ts, so once a group is out nothing at
or below ``commit_ts`` can follow (TiCDC's resolved-ts meaning). A group is emitted only when its
commit event has been read, so a dropped connection or a file still being written never yields
half a transaction.

Positions: the final ``Resolved`` of a group carries the savepoint after it; every other event
carries the group's start plus its ordinal (``skip``), so resuming from any event's position
re-emits nothing before it and loses nothing after it.
"""

from __future__ import annotations

import logging
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, tzinfo
from typing import Any

from ...errors import CaptureError
from ...model.ddl import ActionType, classify_ddl, ddl_tables
from ...model.ddlschema import DDLCatalog, keys_for
from ...model.events import DDLEvent, Event, Op, Resolved, RowChange
from ...model.schema import TableSchema
from ...model.tso import CommitClock
from .constants import LOG_EVENT_ARTIFICIAL_F, RowsKind
from .events import (
    EventParser,
    GtidEvent,
    IncidentEvent,
    MariaGtidEvent,
    MariaGtidListEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    RowsEvent,
    XidEvent,
)
from .files import RawEvent
from .filters import BlockAllowList
from .gtid import MariaGtidState, MySQLGtidSet, is_mariadb_gtid
from .position import BinlogPosition, reached
from .rows import RowDecoder
from .schema import build_table_schema
from .tablemap import TableMap
from .tracker import SchemaTracker

log = logging.getLogger(__name__)

_OPS = {RowsKind.INSERT: Op.INSERT, RowsKind.UPDATE: Op.UPDATE, RowsKind.DELETE: Op.DELETE}
_DML = re.compile(r"^\s*(?:insert|update|delete|replace|load\s+data)\b", re.I)
_FIRST_WORD = re.compile(r"^\s*(\w+)")

SourceFactory = Callable[[BinlogPosition], Iterable[RawEvent | None]]
"""Opens a raw-event source (files or a replication stream) at a savepoint."""


# What parsing corrupt bytes raises (no CRC to catch them first): turned into a CaptureError at file:pos.
_MALFORMED = (IndexError, KeyError, ValueError, OverflowError, struct.error, UnicodeDecodeError)


class SourceDisconnectedError(CaptureError):
    """The replication connection dropped; the capture reconnects from its savepoint."""


@dataclass
class ReconnectPolicy:
    """Exponential backoff between reconnects; give up after ``max_wait`` seconds without progress."""

    initial: float = 0.2
    maximum: float = 5.0
    max_wait: float = 120.0


@dataclass(slots=True)
class _Group:
    start: BinlogPosition
    items: list[tuple[Any, str]] = field(default_factory=list)  # (RowsEvent | QueryEvent, where)


class BinlogCapture:
    """Turns a raw binlog event source into model events (see the module docstring).

    ``savepoint`` is always the position after the last complete group; ``stop()`` ends
    `events` at the next group boundary or idle moment.
    """

    def __init__(
        self,
        open_source: SourceFactory,
        start: BinlogPosition,
        *,
        tz: tzinfo = UTC,
        table_filter: BlockAllowList | None = None,
        until: tuple[str, int] | None = None,
        reconnect: ReconnectPolicy | None = None,
        collations: dict[int, tuple[str, str]] | None = None,
        tracker: SchemaTracker | None = None,
        catalog: DDLCatalog | None = None,
    ) -> None:
        self.open_source = open_source
        self.tracker = tracker
        # Without a tracker: unique and other indexes learned from the DDL text in the stream
        # (model.ddlschema), which TABLE_MAP metadata does not carry. None: TABLE_MAP keys only.
        self.catalog = catalog
        self._catalog_warned: set[tuple[str, str, int]] = set()
        self.savepoint = replace(start, skip=0)
        self.tz = tz
        self.filter = table_filter
        self.until = until
        self.reconnect = reconnect
        self.collations = collations
        self.parser = EventParser()
        self.clock = CommitClock(start.clock)
        self._skip = start.skip
        # Started from a GTID state alone: the savepoint's file:pos is set by the first GTID event.
        self._unanchored = not start.file
        self._group: _Group | None = None
        self._gtid_event: GtidEvent | MariaGtidEvent | None = None
        self._gtid: MariaGtidState | MySQLGtidSet | None = None
        if start.gtid:
            self._gtid = MariaGtidState(start.gtid) if is_mariadb_gtid(start.gtid) else MySQLGtidSet(start.gtid)
        self._versions: dict[tuple[str, str], int] = {(s, t): v for s, t, v in start.versions}
        self._frozen_versions = start.versions
        self._stop = threading.Event()
        self.rows_decoded = 0
        # Last schema seen per table (a DDL's pre_table_schema), DDL events still waiting for the next
        # TABLE_MAP of their table (file mode), and the events held back meanwhile (one group at most).
        self._last_schema: dict[tuple[str, str], TableSchema] = {}
        self._pending: list[DDLEvent] = []
        self._held: list[Event] = []

    # ------------------------------------------------------------------ driving

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> threading.Event:
        return self._stop

    def events(self) -> Iterator[Event]:
        """Model events until the source ends, ``until`` is reached or `stop` is called."""
        waited_since: float | None = None
        delay = self.reconnect.initial if self.reconnect else 0.0
        while True:
            source = self.open_source(self.savepoint)
            collations = getattr(source, "collations", None)
            if collations:
                self.collations = {**(self.collations or {}), **collations}
            try:
                for raw in source:
                    if raw is None:  # idle: nothing more to look ahead at for now
                        yield from self._release()
                        if self._stop.is_set():
                            return
                        continue
                    emitted = False
                    for ev in self._handle(raw):
                        emitted = True
                        yield ev
                    if emitted or self._held:
                        waited_since = None
                        if self.reconnect:
                            delay = self.reconnect.initial
                        if self._group is None and (
                            self._stop.is_set()
                            or (self.until and reached(self.savepoint.file, self.savepoint.pos, self.until))
                        ):
                            yield from self._release()
                            return
                yield from self._release()
                return
            except SourceDisconnectedError as exc:
                yield from self._release()  # complete groups: their commit was read
                if self.reconnect is None or self._stop.is_set():
                    raise
                now = time.monotonic()
                waited_since = waited_since or now
                if now - waited_since > self.reconnect.max_wait:
                    raise CaptureError(
                        f"gave up reconnecting after {self.reconnect.max_wait:.0f} s: {exc.message}", where=exc.where
                    ) from exc
                log.warning(
                    "binlog source disconnected; reconnecting from savepoint error=%r savepoint=%s retry_in=%.1fs",
                    exc.message,
                    self.savepoint,
                    delay,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, self.reconnect.maximum)
                self._group = None
                self._gtid_event = None
                self.parser.table_maps.clear()
            finally:
                close = getattr(source, "close", None)
                if close is not None:
                    close()

    # ------------------------------------------------------------------ events

    def _handle(self, raw: RawEvent) -> Iterator[Event]:
        where = f"{raw.file}:{raw.pos}"
        ev = self.parser.parse(raw.data, where)
        if type(ev) is RowsEvent:
            self._add_rows(ev, where)
            return
        end = raw.pos + len(raw.data)
        if type(ev) is XidEvent:
            yield from self._commit(raw.file, end, ev.header.timestamp)
        elif type(ev) is QueryEvent:
            yield from self._query(ev, raw, end, where)
        elif type(ev) is MariaGtidEvent or type(ev) is GtidEvent:
            self._gtid_marker(ev, raw)
        elif type(ev) is RotateEvent:
            artificial = ev.header.flags & LOG_EVENT_ARTIFICIAL_F or ev.header.log_pos == 0
            if self._group is None and (not artificial or not self.savepoint.file):
                self.savepoint = replace(self.savepoint, file=ev.next_file, pos=ev.position)
        elif type(ev) is MariaGtidListEvent:
            self._seed_maria_gtids(ev)
        elif type(ev) is PreviousGtidsEvent:
            self._seed_mysql_gtids(ev)
        elif type(ev) is IncidentEvent:
            raise CaptureError(
                f"INCIDENT event {ev.incident} ({ev.message!r}): the source lost events; resync needed", where=where
            )

    def _add_rows(self, ev: RowsEvent, where: str) -> None:
        """Collect a rows event into the open group (its own group outside BEGIN..COMMIT) unless filtered."""
        if self._group is None:  # rows outside BEGIN..COMMIT: treat as their own group
            self._group = _Group(self.savepoint)
        tm = ev.table_map
        if (self.filter is None or self.filter.allows(tm.schema, tm.table)) and (
            self.filter is None or _OPS[ev.kind] not in self.filter.ignore_ops
        ):
            self._group.items.append((ev, where))

    def _gtid_marker(self, ev: MariaGtidEvent | GtidEvent, raw: RawEvent) -> None:
        """A transaction's GTID: anchors a savepoint that has none yet, applied at its commit."""
        if self._unanchored and self._group is None:
            self.savepoint = replace(self.savepoint, file=raw.file, pos=raw.pos)
            self._unanchored = False
        self._gtid_event = ev
        if type(ev) is MariaGtidEvent and not ev.standalone:
            self._group = _Group(self.savepoint)  # MariaDB: a transactional GTID stands in for BEGIN

    def _seed_maria_gtids(self, ev: MariaGtidListEvent) -> None:
        """MariaDB's GTID list at the head of a file: the starting state unless one is known."""
        if self._gtid is None or (isinstance(self._gtid, MariaGtidState) and not self._gtid):
            state = MariaGtidState()
            for domain, server, seq in ev.gtids:
                state.update(domain, server, seq)
            self._gtid = state

    def _seed_mysql_gtids(self, ev: PreviousGtidsEvent) -> None:
        """MySQL's previous-GTIDs set at the head of a file: the starting set unless one is known."""
        if self._gtid is None or (isinstance(self._gtid, MySQLGtidSet) and not self._gtid):
            gset = MySQLGtidSet()
            for sid, intervals in ev.gtid_set.items():
                for lo, hi in intervals:
                    gset.add_interval(sid, lo, hi)
            self._gtid = gset

    def _query(self, ev: QueryEvent, raw: RawEvent, end: int, where: str) -> Iterator[Event]:
        query = ev.query
        m = _FIRST_WORD.match(query)
        word = m.group(1).upper() if m else ""
        if word == "BEGIN":
            if self._group is None:
                self._group = _Group(self.savepoint)
            return
        if word == "COMMIT":
            yield from self._commit(raw.file, end, ev.header.timestamp)
            return
        if word == "ROLLBACK" and not re.match(r"^\s*rollback\s+to\b", query, re.I):
            # Only a group with non-transactional changes is logged and then rolled back: those
            # changes stay on the source, so they are emitted like a commit.
            if self._group is not None and self._group.items:
                log.warning("group ends with ROLLBACK; emitting its non-transactional rows where=%s", where)
            yield from self._commit(raw.file, end, ev.header.timestamp)
            return
        if word in ("SAVEPOINT", "ROLLBACK", "RELEASE"):
            return
        if word == "XA":
            raise CaptureError("XA transactions are not supported yet", where=where)
        action = classify_ddl(query)
        if action == ActionType.NONE:
            if _DML.match(query):
                raise CaptureError(
                    "statement-based DML in the binlog: the source must run with binlog_format=ROW", where=where
                )
            if self._group is None:  # GRANT, FLUSH, CREATE USER...: nothing to emit, but move past it
                self._apply_gtid()
                self.savepoint = self._position(raw.file, end)
            return
        if self._group is not None:  # DDL inside a group (CREATE TABLE ... SELECT)
            self._group.items.append((ev, where))
            return
        group = _Group(self.savepoint, [(ev, where)])
        self._group = group
        yield from self._commit(raw.file, end, ev.header.timestamp)

    # ------------------------------------------------------------------ groups

    def _commit_ms(self, header_ts: int) -> int:
        gtid = self._gtid_event
        if isinstance(gtid, GtidEvent) and gtid.immediate_commit_us:
            return gtid.immediate_commit_us // 1000  # MySQL 8.0.1+: the commit time in µs
        return header_ts * 1000

    def _apply_gtid(self) -> None:
        gtid = self._gtid_event
        self._gtid_event = None
        if isinstance(gtid, MariaGtidEvent):
            if not isinstance(self._gtid, MariaGtidState):
                self._gtid = MariaGtidState()
            self._gtid.update(gtid.domain, gtid.header.server_id, gtid.seq)
        elif isinstance(gtid, GtidEvent) and not gtid.anonymous:
            if not isinstance(self._gtid, MySQLGtidSet):
                self._gtid = MySQLGtidSet()
            self._gtid.add(gtid.sid, gtid.gno)

    def _gtid_text(self) -> str:
        return str(self._gtid) if self._gtid is not None else ""

    def _position(self, file: str, pos: int) -> BinlogPosition:
        return BinlogPosition(file, pos, self._gtid_text(), self.clock.last, 0, self._frozen_versions)

    def _commit(self, file: str, end: int, header_ts: int) -> Iterator[Event]:
        group = self._group
        self._group = None
        if group is None:  # COMMIT/XID without a group (we started mid-group): nothing to emit
            self._apply_gtid()
            self.savepoint = self._position(file, end)
            return
        commit_ms = self._commit_ms(header_ts)
        self._apply_gtid()
        skip, self._skip = self._skip, 0
        if not any(isinstance(item, QueryEvent) for item, _ in group.items):  # rows only: stream them
            yield from self._commit_rows(group, commit_ms, skip, file, end)
        else:
            yield from self._commit_with_ddl(group, commit_ms, skip, file, end)

    def _commit_rows(self, group: _Group, commit_ms: int, skip: int, file: str, end: int) -> Iterator[Event]:
        """A group of rows only: streamed, then a Resolved at its commit."""
        base = group.start.to_dict()
        ordinal = 0
        ts: int | None = None
        if self._held:  # this group's table maps are the held DDLs' last chance, then they go first
            for item, where in group.items:
                self.table_schema_for(self.effective_map(item.table_map, where), where)
            yield from self._release()
        self._pending = []
        for item, where in group.items:
            if ts is None:
                ts = self.clock.next(commit_ms)
            for change in self._rows(item, ts, where):
                ordinal += 1
                if ordinal > skip:
                    change.position = {**base, "skip": ordinal}
                    yield change
        self.savepoint = self._position(file, end)
        # Later groups get larger timestamps, so everything at or below `last` is out.
        yield Resolved(self.clock.last, position=self.savepoint.to_dict())

    def _commit_with_ddl(self, group: _Group, commit_ms: int, skip: int, file: str, end: int) -> Iterator[Event]:
        """A group with DDL is collected: it may be held back for one group (see docs/capture.md)."""
        base = group.start.to_dict()
        ordinal = 0
        ts: int | None = None
        # DDLs of the previous (held) group: this group's table maps are their last chance.
        previous = {id(d) for d in self._pending}
        out: list[Event] = []
        for item, where in group.items:
            if isinstance(item, QueryEvent):
                ddl = self._ddl(item, commit_ms, where)
                if self.filter is not None and (
                    self.filter.ignore_ddl or not self.filter.allows(ddl.schema, ddl.table)
                ):
                    continue
                ordinal += 1
                if ordinal > skip:
                    ddl.position = {**base, "skip": ordinal}
                    out.append(ddl)
                continue
            if ts is None:
                ts = self.clock.next(commit_ms)
            for change in self._rows(item, ts, where):
                ordinal += 1
                if ordinal > skip:
                    change.position = {**base, "skip": ordinal}
                    out.append(change)
        self.savepoint = self._position(file, end)
        out.append(Resolved(self.clock.last, position=self.savepoint.to_dict()))
        self._pending = [d for d in self._pending if id(d) not in previous and d.table_schema is None]
        yield from self._release()
        mine = {id(e) for e in out}
        if any(id(d) in mine for d in self._pending):
            self._held = out  # look ahead one group for the TABLE_MAP showing the new shape
        else:
            self._pending = []  # filtered-out DDLs: nothing to wait for
            yield from out

    def _release(self) -> Iterator[Event]:
        """Emit held events; DDLs whose table was not written in the next group keep table_schema None."""
        if self._held:
            held, self._held = self._held, []
            released = {id(e) for e in held}
            self._pending = [d for d in self._pending if id(d) not in released]
            yield from held

    def _ddl(self, ev: QueryEvent, commit_ms: int, where: str) -> DDLEvent:
        ts = self.clock.next(commit_ms)
        if self.catalog is not None and self.tracker is None:
            self.catalog.apply(ev.query, ev.schema, where)
        (schema, table), renames = ddl_tables(ev.query, ev.schema)
        action = classify_ddl(ev.query)
        for old, new in renames:
            self._versions.pop(old, None)
            self._versions[new] = ts
        if table:
            self._versions[(schema, table)] = ts
        self._frozen_versions = tuple((s, t, v) for (s, t), v in sorted(self._versions.items()))
        ddl = DDLEvent(schema=schema, table=table, query=ev.query, ddl_type=int(action), commit_ts=ts)
        if not table:  # schema-level DDL: no table shapes
            if self.tracker is not None and action in (ActionType.DROP_SCHEMA, ActionType.CREATE_SCHEMA):
                self.tracker.forget_schema(schema)
            return ddl
        # pre: the shape last seen under the old name (renames) or the table's name.
        old_name = renames[-1][0] if renames else (schema, table)
        pre = self._last_schema.pop(old_name, None) if renames else self._last_schema.get(old_name)
        ddl.pre_table_schema = pre
        after: TableSchema | None = None
        dropped = action in (ActionType.DROP_TABLE, ActionType.DROP_VIEW)
        if self.tracker is not None:  # live: information_schema right after the DDL (see docs/capture.md)
            for old, _new in renames:
                self.tracker.reload(*old)
            info = self.tracker.reload(schema, table)
            if info is not None and not dropped:
                after = self.tracker.table_schema(info, ts)
            elif not dropped:  # gone again by now (the server is ahead): the next TABLE_MAP will tell
                self._pending.append(ddl)
        elif dropped:
            after = None
        elif pre is not None and action in (
            ActionType.TRUNCATE_TABLE,
            ActionType.RENAME_TABLE,
            ActionType.RENAME_TABLES,
        ):
            after = replace(pre.renamed(schema, table), version=ts)  # same columns and keys
        elif action not in (ActionType.CREATE_VIEW, ActionType.DROP_VIEW):
            self._pending.append(ddl)  # file mode: the next TABLE_MAP of the table shows the new shape
        ddl.table_schema = after
        if dropped:
            self._last_schema.pop((schema, table), None)
        elif after is not None:
            self._last_schema[(schema, table)] = after
        log.debug(
            "ddl %s on %s.%s pre=%s after=%s where=%s",
            action.name,
            schema,
            table,
            pre is not None,
            after is not None,
            where,
        )
        return ddl

    def effective_map(self, tm: TableMap, where: str) -> TableMap:
        """The table map to decode with: checked and completed by the schema tracker when there is one."""
        return tm if self.tracker is None else self.tracker.effective(tm, where)

    def table_schema_for(self, tm: TableMap, where: str) -> TableSchema:
        """The model schema of a (effective) table map at the table's current version (cached on the map)."""
        key = (tm.schema, tm.table)
        version = self._versions.get(key, 0)
        ts_schema: TableSchema | None = tm.cache.get(version)
        if ts_schema is None:
            try:
                ts_schema = build_table_schema(tm, version, 0, self.collations, where)
            except CaptureError as exc:  # a column's error: name the event it came from
                raise CaptureError(exc.message, where=exc.where or where) from None
            except _MALFORMED as exc:  # a corrupt TABLE_MAP: primary key or fsp out of range, names twice
                raise CaptureError(f"bad TABLE_MAP of {tm.qualified_name}: {exc}", where=where) from None
            if self.tracker is not None:
                ts_schema = self.tracker.enrich(ts_schema, tm.cache.get("tracker_info"))
            elif self.catalog is not None:
                ts_schema = self._catalog_keys(ts_schema, where)
            tm.cache[version] = ts_schema
        if self._last_schema.get(key) is not ts_schema:
            self._last_schema[key] = ts_schema
            for ddl in self._pending:
                if (ddl.schema, ddl.table) == key and ddl.table_schema is None:
                    ddl.table_schema = ts_schema
        return ts_schema

    def _catalog_keys(self, ts_schema: TableSchema, where: str) -> TableSchema:
        """The indexes the DDL seen so far gives the table, when it agrees with the TABLE_MAP (else none)."""
        assert self.catalog is not None
        keyed, reason = keys_for(ts_schema, self.catalog.table(ts_schema.schema, ts_schema.table))
        mark = (ts_schema.schema, ts_schema.table, ts_schema.version)
        if reason is not None and mark not in self._catalog_warned:
            self._catalog_warned.add(mark)
            log.warning(
                "%s: the binlog does not match the table's DDL seen so far (%s); using TABLE_MAP keys only where=%s",
                ts_schema.qualified_name,
                reason,
                where,
                extra={"table": ts_schema.qualified_name, "reason": reason, "where": where},
            )
        return keyed

    def _rows(self, ev: RowsEvent, ts: int, where: str) -> Iterator[RowChange]:
        tm = self.effective_map(ev.table_map, where)
        ts_schema = self.table_schema_for(tm, where)
        cache = tm.cache
        decoder: RowDecoder | None = cache.get("decoder")
        if decoder is None:
            try:
                decoder = cache["decoder"] = RowDecoder(tm, self.tz, self.collations)
            except CaptureError as exc:
                raise CaptureError(f"{tm.qualified_name}: {exc.message}", where=where) from None
            except _MALFORMED as exc:
                raise CaptureError(f"bad TABLE_MAP of {tm.qualified_name}: {exc}", where=where) from None
        try:
            rows = decoder.decode(ev.data, ev.body, ev.end, ev.kind, ev.version)
        except _MALFORMED as exc:
            raise CaptureError(f"cannot decode rows of {tm.qualified_name}: {exc}", where=where) from None
        self.rows_decoded += len(rows)
        kind = ev.kind
        if kind is RowsKind.INSERT:
            for row in rows:
                yield RowChange(Op.INSERT, ts_schema, ts, new=row)
        elif kind is RowsKind.DELETE:
            for row in rows:
                yield RowChange(Op.DELETE, ts_schema, ts, old=row)
        else:
            for old, new in rows:
                yield RowChange(Op.UPDATE, ts_schema, ts, new=new, old=old)
