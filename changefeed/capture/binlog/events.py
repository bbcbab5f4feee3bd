"""Binlog events: the v4 header, FORMAT_DESCRIPTION, checksums, and the event bodies we use.

`EventParser` is stateful (the format description and the table maps in force) and serves both
binlog files and the replication stream: it takes one whole event's bytes at a time.
"""

from __future__ import annotations

import logging
import re
import struct
import uuid
import zlib
from dataclasses import dataclass, field

from ...errors import CaptureError
from .constants import (
    CHECKSUM_CRC32,
    CHECKSUM_LEN,
    CHECKSUM_OFF,
    HEADER_LEN,
    LOG_EVENT_BINLOG_IN_USE_F,
    MARIA_FL_GROUP_COMMIT_ID,
    MARIA_FL_STANDALONE,
    ROWS_EVENTS,
    UNSUPPORTED_EVENTS,
    EventType,
    RowsKind,
)
from .tablemap import TableMap, check_table_map, parse_table_map_body

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IBIIIH")


@dataclass(slots=True)
class EventHeader:
    timestamp: int
    type: int
    server_id: int
    size: int
    log_pos: int  # position of the *next* event (0 for artificial events)
    flags: int


@dataclass(slots=True)
class Event:
    """An event we do not interpret (skipped by length)."""

    header: EventHeader


@dataclass(slots=True)
class FormatDescriptionEvent(Event):
    binlog_version: int
    server_version: str
    post_header_lengths: bytes
    checksum_alg: int

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


@dataclass(slots=True)
class RotateEvent(Event):
    position: int
    next_file: str


@dataclass(slots=True)
class StopEvent(Event):
    pass


@dataclass(slots=True)
class QueryEvent(Event):
    schema: str
    query: str
    thread_id: int
    error_code: int


@dataclass(slots=True)
class XidEvent(Event):
    xid: int


@dataclass(slots=True)
class TableMapEvent(Event):
    table_id: int
    table_map: TableMap


@dataclass(slots=True)
class RowsEvent(Event):
    """Rows are decoded later (and only for tables the filters keep): ``data[body:end]`` holds them."""

    kind: RowsKind
    version: int
    table_id: int
    table_map: TableMap
    flags: int
    data: bytes
    body: int
    end: int


@dataclass(slots=True)
class GtidEvent(Event):
    """MySQL GTID / ANONYMOUS_GTID: the next transaction's id and (8.0.1+) its commit times in µs."""

    sid: str
    gno: int
    anonymous: bool
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_us: int | None = None
    original_commit_us: int | None = None

    @property
    def gtid(self) -> str:
        return f"{self.sid}:{self.gno}"


@dataclass(slots=True)
class PreviousGtidsEvent(Event):
    gtid_set: dict[str, list[tuple[int, int]]]


@dataclass(slots=True)
class MariaGtidEvent(Event):
    """MariaDB GTID: starts an event group; ``standalone`` groups (DDL) have no BEGIN/COMMIT."""

    domain: int
    seq: int
    flags: int
    commit_id: int | None

    @property
    def standalone(self) -> bool:
        return bool(self.flags & MARIA_FL_STANDALONE)

    @property
    def gtid(self) -> str:
        return f"{self.domain}-{self.header.server_id}-{self.seq}"


@dataclass(slots=True)
class MariaGtidListEvent(Event):
    gtids: list[tuple[int, int, int]]  # (domain, server_id, seq)


@dataclass(slots=True)
class AnnotateRowsEvent(Event):
    query: str


@dataclass(slots=True)
class BinlogCheckpointEvent(Event):
    file: str


@dataclass(slots=True)
class HeartbeatEvent(Event):
    file: str


@dataclass(slots=True)
class IncidentEvent(Event):
    incident: int
    message: str


_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def _checksum_capable(server_version: str) -> bool:
    """Servers from MySQL 5.6.1 / MariaDB 5.3 end the FDE with the checksum algorithm (and a checksum)."""
    m = _VERSION.match(server_version)
    if not m:
        return False
    version = tuple(int(x) for x in m.groups())
    if "mariadb" in server_version.lower():
        return version >= (5, 3, 0)
    return version >= (5, 6, 1)


@dataclass
class EventParser:
    """Parses whole events; keeps the FORMAT_DESCRIPTION and the table maps in force.

    ``checksum`` is what to assume before the first FORMAT_DESCRIPTION (a replication stream's
    fake ROTATE comes first and carries a checksum when ``@master_binlog_checksum`` said so).
    """

    checksum: bool = False
    verify_checksum: bool = True
    fde: FormatDescriptionEvent | None = None
    table_maps: dict[int, TableMap] = field(default_factory=dict)
    _signatures: dict[bytes, TableMap] = field(default_factory=dict)
    _table_id_len: int = 6
    _rows_post_header: dict[int, int] = field(default_factory=dict)

    def header(self, data: bytes) -> EventHeader:
        return EventHeader(*_HEADER.unpack_from(data, 0))

    def parse(self, data: bytes, where: str) -> Event:
        """Parse one event (header included). ``where`` names it in errors (``file:pos``)."""
        if len(data) < HEADER_LEN:
            raise CaptureError(f"event of {len(data)} bytes is shorter than the 19-byte header", where=where)
        header = EventHeader(*_HEADER.unpack_from(data, 0))
        if header.size != len(data):
            raise CaptureError(f"event header says {header.size} bytes, got {len(data)}", where=where)
        etype = header.type
        if etype == EventType.FORMAT_DESCRIPTION:
            return self._format_description(header, data, where)
        end = len(data)
        if self.fde is None and etype == EventType.ROTATE:
            # A dump starts with a fake ROTATE, before any FORMAT_DESCRIPTION says whether events
            # carry checksums: it does exactly when its last 4 bytes are its CRC32.
            self.checksum = len(data) > HEADER_LEN + 8 + CHECKSUM_LEN and zlib.crc32(
                data[:-CHECKSUM_LEN]
            ) == int.from_bytes(data[-CHECKSUM_LEN:], "little")
        if self.checksum:
            end -= CHECKSUM_LEN
            if self.verify_checksum:
                self._verify(data, where)
        try:
            return self._dispatch(header, data, end, where)
        except CaptureError:
            raise
        except (IndexError, KeyError, ValueError, OverflowError, struct.error, UnicodeDecodeError) as exc:
            name = _type_name(etype)
            raise CaptureError(f"malformed {name} event: {exc}", where=where) from None

    @staticmethod
    def _verify(data: bytes, where: str) -> None:
        expected = int.from_bytes(data[-CHECKSUM_LEN:], "little")
        actual = zlib.crc32(data[:-CHECKSUM_LEN])
        if actual != expected:
            raise CaptureError(
                f"CRC32 mismatch in {_type_name(data[4])} event: stored {expected:#010x}, computed {actual:#010x}"
                " (corrupt binlog)",
                where=where,
            )

    def _format_description(self, header: EventHeader, data: bytes, where: str) -> FormatDescriptionEvent:
        # FORMAT_DESCRIPTION_EVENT: binlog_version(2) server_version(50) create_timestamp(4)
        # header_length(1) post_header_lengths[] [checksum_alg(1) checksum(4)]
        try:
            binlog_version = struct.unpack_from("<H", data, HEADER_LEN)[0]
            server_version = data[HEADER_LEN + 2 : HEADER_LEN + 52].split(b"\0", 1)[0].decode("ascii", "replace")
            header_len = data[HEADER_LEN + 56]
        except (IndexError, struct.error):
            raise CaptureError("truncated FORMAT_DESCRIPTION event", where=where) from None
        if binlog_version != 4 or header_len != HEADER_LEN:
            raise CaptureError(
                f"binlog version {binlog_version} with {header_len}-byte headers: only v4 (MySQL 5.0+) is supported",
                where=where,
            )
        start = HEADER_LEN + 57
        end = len(data)
        alg = CHECKSUM_OFF
        if _checksum_capable(server_version):
            alg = data[end - CHECKSUM_LEN - 1]
            end -= CHECKSUM_LEN + 1
            if alg == CHECKSUM_CRC32 and self.verify_checksum:
                # The server checksums the FDE before setting LOG_EVENT_BINLOG_IN_USE_F in the
                # header of an open file (event_checksum_test clears it before checking).
                flags = data[17] & ~LOG_EVENT_BINLOG_IN_USE_F
                self._verify(data[:17] + bytes([flags]) + data[18:], where)
        elif alg not in (CHECKSUM_OFF, CHECKSUM_CRC32):
            raise CaptureError(f"unknown binlog checksum algorithm {alg}", where=where)
        fde = FormatDescriptionEvent(header, binlog_version, server_version, bytes(data[start:end]), alg)
        self.fde = fde
        self.checksum = alg == CHECKSUM_CRC32
        table_map_post = self._post_header_len(EventType.TABLE_MAP)
        self._table_id_len = 4 if table_map_post == 6 else 6
        self._rows_post_header = {t: self._post_header_len(t) for t in ROWS_EVENTS}
        return fde

    def _post_header_len(self, etype: int) -> int:
        assert self.fde is not None
        lengths = self.fde.post_header_lengths
        return lengths[etype - 1] if etype - 1 < len(lengths) else 0

    def _dispatch(self, header: EventHeader, data: bytes, end: int, where: str) -> Event:
        """The events of every transaction; the file-level and server events in `_other`."""
        etype = header.type
        p = HEADER_LEN
        rows = ROWS_EVENTS.get(etype)
        if rows is not None:
            return self._rows(header, data, end, rows, where)
        if etype == EventType.TABLE_MAP:
            return self._table_map(header, data, end, where)
        if etype == EventType.QUERY:
            # post-header: thread_id(4) exec_time(4) db_len(1) error_code(2) status_vars_len(2)
            thread_id, _exec, db_len, error_code, status_len = struct.unpack_from("<IIBHH", data, p)
            q = p + self._post_header_len(EventType.QUERY) + status_len  # status vars skipped by length
            schema = data[q : q + db_len].decode("utf-8")
            query = data[q + db_len + 1 : end].decode("utf-8", "replace")
            return QueryEvent(header, schema, query, thread_id, error_code)
        if etype == EventType.XID:
            return XidEvent(header, int.from_bytes(data[p : p + 8], "little"))
        if etype in (EventType.GTID, EventType.ANONYMOUS_GTID, EventType.GTID_TAGGED):
            if etype == EventType.GTID_TAGGED:
                raise CaptureError("MySQL 8.4 tagged GTIDs are not supported yet", where=where)
            return self._mysql_gtid(header, data, end)
        if etype == EventType.MARIA_GTID:
            seq, domain, flags = struct.unpack_from("<QIB", data, p)
            commit_id = int.from_bytes(data[p + 13 : p + 21], "little") if flags & MARIA_FL_GROUP_COMMIT_ID else None
            return MariaGtidEvent(header, domain, seq, flags, commit_id)
        return self._other(header, data, end, where)

    def _table_map(self, header: EventHeader, data: bytes, end: int, where: str) -> TableMapEvent:
        p = HEADER_LEN
        table_id = int.from_bytes(data[p : p + self._table_id_len], "little")
        body = bytes(data[p + self._table_id_len + 2 : end])
        tm = self._signatures.get(body)
        if tm is None:
            tm = parse_table_map_body(body, self.fde is not None and self.fde.is_mariadb)
            check_table_map(tm, where)
            if len(self._signatures) > 10_000:
                self._signatures.clear()
            self._signatures[body] = tm
        self.table_maps[table_id] = tm
        return TableMapEvent(header, table_id, tm)

    def _other(self, header: EventHeader, data: bytes, end: int, where: str) -> Event:
        """File-level and server events (rotate, GTID sets, heartbeats...); unknown ones are skipped."""
        etype = header.type
        p = HEADER_LEN
        if etype == EventType.ROTATE:
            position = int.from_bytes(data[p : p + 8], "little")
            return RotateEvent(header, position, data[p + 8 : end].decode("utf-8"))
        if etype == EventType.MARIA_GTID_LIST:
            count = int.from_bytes(data[p : p + 4], "little") & 0x0FFFFFFF  # top 4 bits are flags
            gtids = [struct.unpack_from("<IIQ", data, p + 4 + 16 * i) for i in range(count)]
            return MariaGtidListEvent(header, [tuple(g) for g in gtids])
        if etype == EventType.PREVIOUS_GTIDS:
            return PreviousGtidsEvent(header, _parse_gtid_set(data, p))
        if etype == EventType.ANNOTATE_ROWS:
            return AnnotateRowsEvent(header, data[p:end].decode("utf-8", "replace"))
        if etype == EventType.BINLOG_CHECKPOINT:
            n = int.from_bytes(data[p : p + 4], "little")
            return BinlogCheckpointEvent(header, data[p + 4 : p + 4 + n].decode("utf-8"))
        if etype in (EventType.HEARTBEAT, EventType.HEARTBEAT_V2):
            return HeartbeatEvent(header, data[p:end].decode("utf-8", "replace"))
        if etype == EventType.STOP:
            return StopEvent(header)
        if etype == EventType.INCIDENT:
            incident = int.from_bytes(data[p : p + 2], "little")
            n = data[p + 2] if p + 2 < end else 0
            return IncidentEvent(header, incident, data[p + 3 : p + 3 + n].decode("utf-8", "replace"))
        reason = UNSUPPORTED_EVENTS.get(etype)
        if reason is not None:
            raise CaptureError(f"{_type_name(etype)} event: {reason}", where=where)
        log.debug("skipping event type=%s size=%d where=%s", _type_name(etype), header.size, where)
        return Event(header)

    def _rows(self, header: EventHeader, data: bytes, end: int, rows: tuple[RowsKind, int], where: str) -> RowsEvent:
        kind, version = rows
        p = HEADER_LEN
        post = self._rows_post_header.get(header.type, 0)
        id_len = 4 if post == 6 else 6
        table_id = int.from_bytes(data[p : p + id_len], "little")
        flags = int.from_bytes(data[p + id_len : p + id_len + 2], "little")
        body = p + id_len + 2
        if version == 2:
            extra_len = int.from_bytes(data[body : body + 2], "little")  # counts its own 2 bytes
            body += extra_len
        tm = self.table_maps.get(table_id)
        if tm is None:
            raise CaptureError(
                f"{_type_name(header.type)} event for table id {table_id} without a preceding TABLE_MAP", where=where
            )
        return RowsEvent(header, kind, version, table_id, tm, flags, data, body, end)

    @staticmethod
    def _mysql_gtid(header: EventHeader, data: bytes, end: int) -> GtidEvent:
        # flags(1) sid(16) gno(8) [lt_type(1) last_committed(8) sequence_number(8)]
        # [immediate_commit_timestamp(7, top bit: original follows) [original(7)]] ...
        p = HEADER_LEN
        sid = str(uuid.UUID(bytes=bytes(data[p + 1 : p + 17])))
        gno = int.from_bytes(data[p + 17 : p + 25], "little")
        ev = GtidEvent(header, sid, gno, header.type == EventType.ANONYMOUS_GTID)
        p += 25
        if p + 17 <= end and data[p] == 2:
            ev.last_committed = int.from_bytes(data[p + 1 : p + 9], "little")
            ev.sequence_number = int.from_bytes(data[p + 9 : p + 17], "little")
            p += 17
            if p + 7 <= end:
                immediate = int.from_bytes(data[p : p + 7], "little")
                p += 7
                if immediate & (1 << 55):
                    immediate &= (1 << 55) - 1
                    ev.original_commit_us = int.from_bytes(data[p : p + 7], "little")
                else:
                    ev.original_commit_us = immediate
                ev.immediate_commit_us = immediate
        return ev


def _parse_gtid_set(data: bytes, p: int) -> dict[str, list[tuple[int, int]]]:
    """PREVIOUS_GTIDS body: n_sids(8), per sid: uuid(16) n_intervals(8) [start(8) end(8, exclusive)]..."""
    n_sids = int.from_bytes(data[p : p + 8], "little")
    p += 8
    out: dict[str, list[tuple[int, int]]] = {}
    for _ in range(n_sids):
        sid = str(uuid.UUID(bytes=bytes(data[p : p + 16])))
        n = int.from_bytes(data[p + 16 : p + 24], "little")
        p += 24
        intervals = []
        for _ in range(n):
            start, stop = struct.unpack_from("<QQ", data, p)
            intervals.append((start, stop - 1))
            p += 16
        out[sid] = intervals
    return out


def _type_name(etype: int) -> str:
    try:
        return EventType(etype).name
    except ValueError:
        return f"type-{etype}"
