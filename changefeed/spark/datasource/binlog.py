"""The `binlog` input: MySQL/MariaDB binlog files or a live server, split at transaction boundaries.

One scan/range implementation over a pluggable raw-event source: `BinlogFiles` (a directory of
binlog files) or `BinlogServer` (the replica protocol of ``mysql://USER@HOST:PORT``, a
non-blocking dump per read, so every read ends at the last event the server had). Offsets hold
binlog positions only; partitions also carry the DDL catalog (unique and other keys) as of their
start (`_KeyLog`, docs/capture.md "Keys from DDL text"). The server's credentials live in the
picklable source object handed to executors, never in an offset, a log line or an error message.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypeVar

import orjson
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ...capture.binlog import BinlogCapture, BinlogFileReader, BinlogPosition, ReconnectPolicy
from ...capture.binlog.arrow import ArrowBatchBuilder
from ...capture.binlog.blocks import BlockCapture
from ...capture.binlog.capture import SourceFactory
from ...capture.binlog.constants import ROWS_EVENTS, EventType
from ...capture.binlog.events import TableMapEvent
from ...capture.binlog.files import RawEvent
from ...capture.binlog.position import file_key, reached
from ...capture.binlog.replica import ReplicaStream, ServerAddress, random_server_id
from ...capture.snapshot.progress import BatchReader, HandoverState, SnapshotProgress, close_orders
from ...capture.snapshot.progress import begin as begin_snapshot
from ...capture.snapshot.reader import SnapshotReader, replica_window
from ...capture.snapshot.signal import Signal, parse_signal_table, read_signal
from ...capture.snapshot.stream import handed_over
from ...clients.mysql import MySQLError, MySQLParams, binary_logs, binlog_status
from ...errors import CaptureError, ConfigError, true_false
from ...files.store import open_store
from ...model import DDLEvent, Event, Resolved, RowChange, TableSchema
from ...model.ddlschema import DDLCatalog
from ...model.jsonl import EventReader
from ...model.rowblock import RowBlock
from ...model.tablefilter import TableFilter
from ...model.tso import CommitClock
from ..changelog import ChangelogRows, EventFilter
from .options import CHANGELOG, Input, SourceOptions, zone
from .snapshot import (
    DEFAULT_BATCH_BYTES,
    SnapshotOptions,
    SpillStore,
    is_snapshot,
    offset_of,
    pending,
    progress_of,
    snapshot_partitions,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: ``startPosition`` keywords: the oldest binlog, or the server's current end (live only).
EARLIEST, LATEST = "earliest", "latest"
#: ``output=ranges``: one row per partition naming its binlog range (start and end position JSON).
#: The capture job's hand-over: its encode stage decodes each range where it encodes it
#: (`RangeDecoder`), so no row crosses a process boundary before it is encoded.
RANGES = "ranges"
#: ``chunk``: a snapshot chunk's events (JSONL) instead of a binlog range, or ``chunk_file``: the spill
#: file holding them; ``handover``: the snapshot's cuts a range is checked against while it overlaps
#: the snapshot (docs/snapshot.md).
_RANGES_COLUMNS = ("start", "end", "keys", "chunk", "handover", "chunk_file")
RANGES_SCHEMA = ", ".join(f"{n} string" for n in _RANGES_COLUMNS)
RANGES_ARROW = pa.schema([pa.field(n, pa.string()) for n in _RANGES_COLUMNS])
#: Planning state kept per input: catalogs at this many boundaries, key logs of this many batches.
_REMEMBERED = 8
#: A live source reconnects (from the savepoint) for this long before failing the read.
_RECONNECT = ReconnectPolicy(initial=0.2, maximum=2.0, max_wait=30.0)


def parse_start(text: str) -> BinlogPosition | str:
    """``startPosition``: ``FILE[:POS]``, a position JSON object, ``gtid:SET``, ``earliest`` or ``latest``."""
    text = text.strip()
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    if text.startswith("{"):
        try:
            return BinlogPosition.from_dict(orjson.loads(text))
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"startPosition is not a JSON position: {exc}") from None
    if text.lower().startswith("gtid:"):
        gtid = text[5:].strip()
        if not gtid:
            raise ConfigError("startPosition gtid: needs a GTID set (MariaDB 0-1-5, MySQL uuid:1-5)")
        return BinlogPosition("", 4, gtid=gtid)  # the capture anchors file:pos at the first GTID event
    return BinlogPosition.parse(text)


PositionKey = tuple[tuple[str, int], int]
"""A binlog position as a sortable key: (`file_key` of the file, offset)."""


def _pkey(file: str, pos: int) -> PositionKey:
    return (file_key(file), int(pos))


def _bound_key(bound: Mapping[str, Any]) -> PositionKey:
    return _pkey(str(bound.get("file", "")), int(bound.get("pos", 4)))


@dataclass
class _KeyLog:
    """What a planning scan saw of keys: the DDL catalog before it, after each DDL, and the tables mapped.

    Binlog TABLE_MAPs carry the primary key only; the unique and other indexes come from the
    DDL text seen since the stream's start (and, live, one information_schema snapshot), as in
    the non-Spark capture (`model.ddlschema.DDLCatalog`). A range is decoded in a task of its
    own, so it gets the catalog as of its start (`payload`).
    """

    initial: DDLCatalog
    ddls: list[tuple[PositionKey, DDLCatalog]] = field(default_factory=list)  # (QUERY event, catalog after it)
    maps: list[tuple[PositionKey, tuple[str, str]]] = field(default_factory=list)  # (TABLE_MAP event, table)

    def at(self, key: PositionKey) -> DDLCatalog:
        """The catalog at a transaction boundary: after every DDL event before it."""
        i = bisect.bisect_left(self.ddls, key, key=lambda d: d[0])
        return self.ddls[i - 1][1] if i else self.initial

    def payload(self, start: PositionKey, end: PositionKey) -> str:
        """The compact catalog a range [start, end) needs (`DDLCatalog.to_compact`), as JSON.

        A range without DDL reads the catalog only for the tables it has rows of, and only a
        table with an index besides the primary key can differ from its TABLE_MAP: just those.
        A range with DDL gets the whole catalog (an ALTER, CREATE ... LIKE or RENAME may name
        any table).
        """
        catalog = self.at(start)
        lo = bisect.bisect_left(self.ddls, start, key=lambda d: d[0])
        names: list[tuple[str, str]] | None = None
        if not (lo < len(self.ddls) and self.ddls[lo][0] < end):
            a = bisect.bisect_left(self.maps, start, key=lambda m: m[0])
            b = bisect.bisect_left(self.maps, end, key=lambda m: m[0])
            names = []
            for table in {table for _, table in self.maps[a:b]}:
                tdef = catalog.table(*table)
                if tdef is not None and any(not x.primary for x in tdef.indexes):
                    names.append(table)
        return orjson.dumps(catalog.to_compact(names)).decode()


def _catalog(keys: str | None) -> DDLCatalog | None:
    """A range's catalog (`_KeyLog.payload`); None (TABLE_MAP keys only) when the range carries none."""
    return DDLCatalog.from_compact(orjson.loads(keys)) if keys is not None else None


class _ScanCapture(BinlogCapture):
    """A capture that finds transaction boundaries without decoding rows (driver-side planning).

    Counts rows by walking each ROWS event's row images (`ArrowBatchBuilder.count`: lengths
    only, no values), so read limits and partition sizes are in rows, whatever the number of
    rows the server packed into one event. Optionally remembers one table's schema. With a
    catalog it logs the keys' history (`_KeyLog`); ``ddl_only`` skips ROWS events altogether
    (rebuilding the catalog at a resumed position).
    """

    def __init__(
        self,
        *args: Any,
        want: tuple[str, str] | None = None,
        ddl_only: bool = False,
        signals: tuple[tuple[str, str], str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.want = want
        self.signal_table: tuple[str, str] | None = signals[0] if signals is not None else None
        self.changefeed_id = signals[1] if signals is not None else ""
        self.signals: list[Signal] = []  # snapshot signals for this changefeed, in binlog order
        self.found: TableSchema | None = None
        self.rows = 0
        self.ddl_only = ddl_only
        self.keys = _KeyLog(self.catalog.copy() if self.catalog is not None else DDLCatalog())
        self._mapped_in: BinlogPosition | None = None  # the savepoint when the last TABLE_MAP was logged

    def _handle(self, raw: RawEvent) -> Iterator[Event]:
        data = raw.data
        etype = data[4] if len(data) > 4 else -1
        if self.ddl_only and (etype == EventType.TABLE_MAP or etype in ROWS_EVENTS):
            return iter(())
        if etype == EventType.TABLE_MAP and self.catalog is not None:
            ev = self.parser.parse(data, f"{raw.file}:{raw.pos}")
            assert isinstance(ev, TableMapEvent)
            tm = ev.table_map
            maps, table = self.keys.maps, (tm.schema, tm.table)
            # One entry per table and transaction (ranges are cut at transaction boundaries only;
            # the savepoint object is replaced at every boundary).
            if not maps or maps[-1][1] != table or self._mapped_in is not self.savepoint:
                maps.append((_pkey(raw.file, raw.pos), table))
                self._mapped_in = self.savepoint
            return iter(())
        return super()._handle(raw)

    def _ddl(self, ev: Any, commit_ms: int, where: str) -> DDLEvent:
        ddl = super()._ddl(ev, commit_ms, where)
        if self.catalog is not None:
            file, _, pos = where.rpartition(":")
            last = self.keys.ddls[-1][1] if self.keys.ddls else self.keys.initial
            after = last if last.generation == self.catalog.generation else self.catalog.copy()
            self.keys.ddls.append((_pkey(file, int(pos)), after))
        return ddl

    def _rows(self, ev: Any, ts: int, where: str) -> Iterator[RowChange]:
        tm = self.effective_map(ev.table_map, where)
        if self.signal_table is not None and (tm.schema, tm.table) == self.signal_table:
            for row in list(super()._rows(ev, ts, where)):  # the signal table's rows are decoded (few, small)
                try:
                    signal = read_signal(row, self.changefeed_id, where)
                except CaptureError as exc:  # hand-written: the stream goes on, the error names the row
                    log.error("snapshot signal ignored: %s", exc)
                    continue
                if signal is not None:
                    self.signals.append(signal)
        counter: ArrowBatchBuilder | None = tm.cache.get("counter")
        if counter is None:
            schema = self.table_schema_for(tm, where)
            counter = tm.cache["counter"] = ArrowBatchBuilder(tm, schema, tz=self.tz, collations=self.collations)
            if self.want is not None and (tm.schema, tm.table) == self.want:
                self.found = schema
        self.rows += counter.count(ev, where)
        return iter(())


@dataclass(frozen=True)
class BinlogFiles:
    """Raw events from binlog files: a directory (in ``.index`` order) or one file."""

    path: Path
    reconnect: ClassVar[ReconnectPolicy | None] = None  # files do not disconnect

    def opener(self) -> SourceFactory:
        """Readers that end at the last complete event.

        Following with the stop flag already set: a partial event at the end (a server still
        writing) ends the read instead of raising "truncated".
        """
        stop = threading.Event()
        stop.set()

        def open_source(at: BinlogPosition) -> BinlogFileReader:
            return BinlogFileReader(self.path, at.file or None, at.pos, follow=True, poll_interval=0.01, stop=stop)

        return open_source

    def earliest(self) -> BinlogPosition:
        files = BinlogFileReader(self.path).files()
        return BinlogPosition(files[0] if files else "", 4)

    def latest(self) -> BinlogPosition:
        raise ConfigError("startPosition latest needs a live source (url); binlog files start at a FILE:POS")

    def end(self) -> dict[str, Any]:
        files = BinlogFileReader(self.path).files()
        if not files:
            return {"file": "", "pos": 4}
        directory = self.path if self.path.is_dir() else self.path.parent
        return {"file": files[-1], "pos": os.path.getsize(directory / files[-1])}

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class BinlogServer:
    """Raw events from a live server through the replica protocol (`ReplicaStream`).

    Every read is a non-blocking dump (it ends at the last event the server had) on its own
    connection with its own random replica server id: the source kills an older dump that
    registered with the same id, and partitions read in parallel. No schema tracker: a range is
    decoded from the binlog's own TABLE_MAP metadata (binlog_row_metadata=FULL), because today's
    information_schema need not describe a past range; only the keys TABLE_MAPs lack start from
    one information_schema snapshot (`key_snapshot`), as `live_capture` without the tracker does.
    """

    address: ServerAddress = field(repr=False)  # holds the password: repr and str show user@host:port only
    #: The sink fills rows without their unchanged columns (``partialImages=true``: a lake sink), so
    #: binlog_row_image MINIMAL/NOBLOB is read; otherwise refused.
    partial_images: bool = False
    reconnect: ClassVar[ReconnectPolicy | None] = _RECONNECT

    def opener(self) -> SourceFactory:
        server_id = random_server_id()  # one id per capture, kept across its reconnects

        def open_source(at: BinlogPosition) -> ReplicaStream:
            return ReplicaStream(self.address, at, server_id=server_id, blocking=False, require_full_metadata=True)

        return open_source

    def query(self, what: str, read: Callable[[Any], T]) -> T:
        """``read(cursor)`` on a connection of its own; errors become CaptureErrors naming ``what`` and the server."""
        try:
            conn = self.params().connect(autocommit=True)
        except MySQLError as exc:
            raise CaptureError(f"cannot connect to {self.address}: {exc}") from None
        try:
            with conn.cursor() as cur:
                return read(cur)
        except MySQLError as exc:
            raise CaptureError(f"{what} on {self.address} failed: {exc}") from None
        finally:
            conn.close()

    def binary_logs(self) -> list[tuple[str, int]]:
        return self.query("SHOW BINARY LOGS", binary_logs)

    def earliest(self) -> BinlogPosition:
        logs = self.binary_logs()
        if not logs:
            raise CaptureError(f"{self.address} has no binary logs (is log_bin on?)")
        return BinlogPosition(logs[0][0], 4)

    def latest(self) -> BinlogPosition:
        """The server's current end, with the GTID state there when the server reports it with the position.

        MySQL's SHOW MASTER STATUS has Executed_Gtid_Set in the same row; MariaDB's has no GTID
        column, and the capture then learns the GTID state from the events it reads.
        """
        row = self._status()
        gtid = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else ""
        return BinlogPosition(str(row[0]), int(row[1]), gtid)

    def _status(self) -> tuple[Any, ...]:
        row = self.query("SHOW MASTER STATUS", binlog_status)
        if not row:
            raise CaptureError(f"{self.address} reports no binlog position (is log_bin on?)")
        return row

    def end(self) -> dict[str, Any]:
        row = self._status()
        return {"file": str(row[0]), "pos": int(row[1])}

    def params(self) -> MySQLParams:
        return self.address.sql_params()

    def key_snapshot(self) -> DDLCatalog:
        """Every user table's columns and indexes from information_schema now (`tracker.snapshot_catalog`)."""
        from ...capture.binlog.tracker import snapshot_catalog  # noqa: PLC0415

        return snapshot_catalog(lambda: self.params().connect(autocommit=True))

    def check(self) -> None:
        """Refuse a server whose binlog this input cannot decode (the preflight findings, with their fixes)."""
        from ...ops.preflight import binlog_settings  # noqa: PLC0415 - the preflight owns the checks

        findings = binlog_settings(self.params(), schema_tracker=False, partial_images=self.partial_images)
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            raise ConfigError(f"the binlog input cannot read {self.address}: " + "; ".join(str(f) for f in errors))

    def __str__(self) -> str:
        return str(self.address)


BinlogSource = BinlogFiles | BinlogServer


def _capture(cls: type[BinlogCapture], source: BinlogSource, start: BinlogPosition, tz: tzinfo, **kw: Any) -> Any:
    return cls(source.opener(), start, tz=tz, reconnect=source.reconnect, **kw)


def range_events(
    source: BinlogSource,
    start: dict[str, Any],
    end: dict[str, Any],
    time_zone: str,
    keep: EventFilter | None = None,
    keys: str | None = None,
    handover: str | None = None,
) -> Iterator[Event]:
    """The events of one range in binlog (= commit) order, ending with its one `Resolved`.

    One resolved event per range, not one per transaction: it closes every batch a sink has open
    and carries the range's end position, which is what a job checkpoints. ``keys``: the DDL
    catalog as of ``start`` (`_KeyLog.payload`); without it, TABLE_MAP keys only. ``handover``:
    the snapshot's cuts (`HandoverState` JSON) while the range overlaps the snapshot: the changes a
    chunk already holds are dropped or halved (`capture.snapshot.handover`).
    """
    start_at, stop = BinlogPosition.from_dict(start), BinlogPosition.from_dict(end)
    capture = _capture(
        BinlogCapture, source, start_at, zone(time_zone), until=(stop.file, stop.pos), catalog=_catalog(keys)
    )
    cuts = None
    events: Iterable[Event] = capture.events()
    if handover is not None:
        cuts = HandoverState.from_dict(orjson.loads(handover)).build(_connector(source), zone(time_zone))
        events = handed_over(cuts, events)
    last: Resolved | None = None
    try:
        for ev in events:
            if isinstance(ev, Resolved):
                last = ev
            elif keep is None or keep(ev):
                yield ev
    finally:
        if cuts is not None:
            close_orders(cuts)
    if last is not None:
        yield last


def _connector(source: BinlogSource) -> Any:
    """Connections to a live source (the hand-over asks it for key order); None for binlog files."""
    if isinstance(source, BinlogServer):
        params = source.params()
        return lambda: params.connect(autocommit=True)
    return None


def chunk_events(text: str | None, path: str | None = None, blocks: bool = False) -> list[Any]:
    """A snapshot chunk's events from their JSONL (`snapshot.SpillStore`): ``text``, or the spill
    file ``path``; ``blocks``: its rows as `RowBlock`s (for the columnar consumers: ~3 µs a
    10-column row instead of ~11 as `RowChange`s, bench/RESULTS.md)."""
    assert text is not None or path is not None
    data = text.encode() if text is not None else Path(path).read_bytes()  # type: ignore[arg-type]
    reader = EventReader(source=path or "snapshot chunk")
    lines = data.splitlines()
    return list(reader.read_blocks(lines) if blocks else reader.read(lines))


@dataclass
class BinlogRange(InputPartition):
    """The transactions between two boundaries of a binlog, decoded in an executor."""

    source: BinlogSource
    start: dict[str, Any]
    end: dict[str, Any]
    time_zone: str
    changelog: ChangelogRows
    output: str = CHANGELOG
    keys: str | None = None  # the DDL catalog as of ``start`` (`_KeyLog.payload`)
    chunk: str | None = None  # a snapshot chunk's events (JSONL): this partition is that chunk, not a range
    chunk_file: str | None = None  # or the spill file holding them, where the reader shares the disk
    handover: str | None = None  # the snapshot's cuts while the range overlaps the snapshot (`HandoverState`)
    # Or the spill files of all of a batch's chunks, in order: one partition (one task) a batch
    # where ``output=ranges`` hands file names to the reader (`BinlogInput._chunk_partitions`).
    chunk_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[pa.RecordBatch]:
        files: list[str | None] = [*self.chunk_files] if self.chunk_files else [self.chunk_file]
        if self.output == RANGES:
            n = len(files)
            yield pa.RecordBatch.from_pydict(
                {
                    "start": [orjson.dumps(self.start).decode()] * n,
                    "end": [orjson.dumps(self.end).decode()] * n,
                    "keys": [self.keys] * n,
                    "chunk": [self.chunk] * n,
                    "handover": [self.handover] * n,
                    "chunk_file": files,
                },
                schema=RANGES_ARROW,
            )
            return
        if self.chunk is not None or files[0] is not None:
            events: Iterable[Event] = (e for file in files for e in chunk_events(self.chunk, file))
        else:
            events = range_events(
                self.source, self.start, self.end, self.time_zone, keys=self.keys, handover=self.handover
            )
        yield from self.changelog.batches(self.changelog.rows(events))


@dataclass(frozen=True)
class RangeDecoder:
    """Decodes the rows of an ``output=ranges`` DataFrame where the next stage runs (the capture job's encoder).

    Built on the driver from the same options as the data source; like a partition it carries
    the source (and so a server's credentials) pickled into the task, never in a row or offset.
    """

    source: BinlogSource
    time_zone: str
    changelog: ChangelogRows

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> RangeDecoder:
        opts = SourceOptions.parse(options)
        return cls(_source(opts), opts.time_zone, opts.changelog(None))

    def events(self, batches: Iterable[pa.RecordBatch]) -> Iterator[Event | RowBlock]:
        """Every event of the ranges in ``batches``, range after range, each in commit order.

        Rows come as `RowBlock`s (Arrow-decoded, see `BlockCapture`); `expand_blocks` turns them
        into the `RowChange`s `range_events` gives, positions included.
        """
        keep = EventFilter(self.changelog)
        for batch in batches:
            starts, ends = batch.column("start").to_pylist(), batch.column("end").to_pylist()
            none = [None] * len(starts)
            keys, chunks, handovers, files = (
                batch.column(n).to_pylist() if n in batch.schema.names else none
                for n in ("keys", "chunk", "handover", "chunk_file")
            )
            for start, end, catalog, chunk, handover, file in zip(
                starts, ends, keys, chunks, handovers, files, strict=True
            ):
                if chunk is not None or file is not None:  # a snapshot chunk: INSERTs, DDL first on a table's first
                    yield from keep.events(chunk_events(chunk, file, blocks=True))
                    continue
                if handover is not None:  # overlapping the snapshot: row by row through the hand-over
                    start_d, end_d = orjson.loads(start), orjson.loads(end)
                    yield from range_events(self.source, start_d, end_d, self.time_zone, keep, catalog, handover)
                    continue
                begin, stop = BinlogPosition.from_dict(orjson.loads(start)), BinlogPosition.from_dict(orjson.loads(end))
                capture = _capture(
                    BlockCapture,
                    self.source,
                    begin,
                    zone(self.time_zone),
                    until=(stop.file, stop.pos),
                    keep=keep.keeps,
                    catalog=_catalog(catalog),
                )
                yield from capture.blocks()


def _source(opts: SourceOptions) -> BinlogSource:
    url = opts.extra.get("url", "")
    if url:
        if opts.path != Path():
            raise ConfigError("input binlog takes a path (binlog files) or a url (a live server), not both")
        address = ServerAddress.from_url(url)  # its errors show the URL with the password masked; TLS options only
        if "password" in opts.extra:
            if address.password:
                raise ConfigError(f"the password is given twice: in the url and the password option ({address})")
            address = replace(address, password=opts.extra["password"])
        partial = true_false(opts.extra.get("partialimages", "false"), "partialImages")
        return BinlogServer(address, partial)
    if not opts.path.exists():
        raise ConfigError(f"no such binlog directory or file: {opts.path}")
    return BinlogFiles(opts.path)


#: A binlog offset's member holding a snapshot on demand in progress (`SnapshotProgress`, from a signal).
INCREMENTAL = "incremental"
#: Members of a binlog offset that are not its position.
_NOT_POSITION = ("splits", "handover", INCREMENTAL)


def _until(target: dict[str, Any] | None, handover: HandoverState | None) -> tuple[str, int] | None:
    """Where a batch must stop: the target's position (availableNow), but at least past the snapshot's
    last high watermark; None: no bound."""
    until = (str(target["file"]), int(target["pos"])) if target and target.get("file") else None
    last_high = handover.until if handover is not None else None
    if until is not None and last_high is not None and not reached(*until, (last_high.file, last_high.pos)):
        until = (last_high.file, last_high.pos)
    return until


class _Scan(NamedTuple):
    end: BinlogPosition | None
    splits: list[dict[str, Any]]
    found: TableSchema | None
    keys: _KeyLog
    signals: list[Signal]
    #: Ended by a limit or a signal, not by the end of the binlog: scanning again from the same start
    #: with the same arguments gives the same result (the binlog before its end does not change).
    stopped: bool = False


class _ScanAhead:
    """The next micro-batch's planning scan, run in a thread while Spark runs this one.

    Why: Spark asks for the next batch's end (`latest_offset`) only after the batch before it
    committed, and the scan behind it (~2 µs a row) ran alone then, every batch. A batch that
    ended at a limit (a backlog) will be followed by one starting at its end with the same
    limits, so that scan can run ahead; `take` hands it over only for exactly those arguments,
    and only if it ended at a limit too (one that reached the binlog's end is redone: more may
    have been written since). Scans never run side by side (`BinlogInput.scan` holds a lock).
    """

    def __init__(self) -> None:
        self._args: tuple[Any, ...] | None = None
        self._thread: threading.Thread | None = None
        self._result: _Scan | BaseException | None = None

    def start(self, scan: Callable[..., _Scan], start: BinlogPosition, *limits: Any) -> None:
        self.discard()
        self._args = (start.to_dict(), *limits)

        def run() -> None:
            try:
                self._result = scan(start, *limits)
            except BaseException as exc:  # the caller scans again and raises there, with its context
                self._result = exc

        self._thread = threading.Thread(target=run, name="changefeed-scan-ahead", daemon=True)
        self._thread.start()

    def take(self, start: BinlogPosition, *limits: Any) -> _Scan | None:
        """The scan run ahead from ``start`` with ``limits``, or None (none, other arguments, or redone)."""
        if self._thread is None:
            return None
        self._thread.join()
        result, same = self._result, self._args == (start.to_dict(), *limits)
        self._thread = self._args = self._result = None
        if same and isinstance(result, _Scan) and result.stopped:
            return result
        if isinstance(result, BaseException):
            log.info("binlog input: the scan run ahead failed (%s); scanning again", result)
        return None

    def discard(self) -> None:
        if self._thread is not None:
            self._thread.join()
        self._thread = self._args = self._result = None


class BinlogInput(Input):
    """MySQL/MariaDB binlog files (offline or relay-log mode) or a live server (replica protocol)."""

    OPTIONS = frozenset(
        {"startposition", "eventsperpartition", "url", "password"}
        | {"snapshot", "snapshotchunksize", "snapshotondemandchunksize", "snapshotparallelism", "snapshotdir"}
        | {"snapshotdirshared"}
        | {"signaltable", "changefeedid", "partialimages"}
    )
    OUTPUTS: ClassVar[Mapping[str, str]] = {RANGES: RANGES_SCHEMA}
    # Rows per micro-batch by default (cut at the next transaction boundary): the capture job
    # collects a batch's encoded messages on the driver, ~55 MB per 100k rows of a 10-column table.
    DEFAULT_MAX_EVENTS: ClassVar[int | None] = 100_000
    NO_BYTES_LIMIT: ClassVar[str] = ""  # the planning scan knows each transaction's binlog bytes

    @classmethod
    def needs_path(cls, options: Mapping[str, str]) -> bool:
        return not options.get("url")

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        self.source = _source(opts)
        if isinstance(self.source, BinlogServer):
            self.source.check()
        self.tz = zone(opts.time_zone)
        try:
            self.split_every = int(opts.extra.get("eventsperpartition", "20000"))
        except ValueError:
            raise ConfigError("eventsPerPartition must be an integer") from None
        self.start = parse_start(opts.extra.get("startposition", "") or EARLIEST)
        if isinstance(self.start, BinlogPosition) and not self.start.file and isinstance(self.source, BinlogFiles):
            raise ConfigError("startPosition gtid:... needs a live source (url); binlog files start at a FILE:POS")
        self.snapshot = SnapshotOptions.parse(opts.extra)
        self._start_given = bool(opts.extra.get("startposition", "").strip())
        if self.snapshot.on and not isinstance(self.source, BinlogServer):
            raise ConfigError("option snapshot needs a live source (url): binlog files hold no tables to read")
        if self.snapshot.mode in ("initial", "initial-only") and self._start_given:
            raise ConfigError(
                f"snapshot {self.snapshot.mode} starts the binlog where the snapshot read the tables: "
                "give no startPosition (or use snapshot when-needed: snapshot only if that position is purged)"
            )
        spill = open_store(self.snapshot.spill) if self.snapshot.spill else None
        self._spill = SpillStore(spill)
        # Snapshots on demand spill apart: `SpillStore.prune` goes by batch number, and their batches count from 1.
        self._on_demand = SpillStore(spill.child("on-demand") if spill is not None else None)
        signal = opts.extra.get("signaltable", "").strip()
        if signal and not isinstance(self.source, BinlogServer):
            raise ConfigError("option signalTable needs a live source (url): a snapshot reads the tables")
        self.signals = (parse_signal_table(signal), opts.extra.get("changefeedid", "")) if signal else None
        self._chunks: BatchReader | None = None
        self._on_demand_chunks: BatchReader | None = None
        self._purge_checked = False
        self._first: BinlogPosition | None = None
        # Planning state (this process only; rebuilt after a restart, see `catalog_at`): the DDL
        # catalog at boundaries planned here, and the key logs of planned batches by (start, end).
        self._catalogs: dict[PositionKey, DDLCatalog] = {}
        self._key_logs: dict[tuple[PositionKey, PositionKey], _KeyLog] = {}
        self._scanning = threading.RLock()
        self._ahead = _ScanAhead()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for the executors' reads: without the planning thread and its lock (made anew there)."""
        state = self.__dict__.copy()
        del state["_scanning"], state["_ahead"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._scanning = threading.RLock()
        self._ahead = _ScanAhead()

    def first(self) -> BinlogPosition:
        """Where reading starts without a checkpoint (resolved once: ``latest`` must not move)."""
        if self._first is None:
            start = self.start
            if start == LATEST:
                self._first = self.source.latest()
            elif start == EARLIEST:
                self._first = self.source.earliest()
            else:
                assert isinstance(start, BinlogPosition)
                self._first = start
            log.info("binlog input starts at %s gtid=%s source=%s", self._first, self._first.gtid or "-", self.source)
        return self._first

    def initial_offset(self) -> dict[str, Any]:
        if self._snapshot_first():
            return pending()
        return self.first().to_dict()

    def _snapshot_first(self) -> bool:
        """Does a changefeed without a checkpoint begin with a snapshot (Debezium's ``snapshot.mode``)?"""
        mode = self.snapshot.mode
        if mode == "when-needed":  # no start position, or one the server no longer has
            return not self._start_given or self._purged(self.first())
        return mode in ("initial", "initial-only")

    def _purged(self, at: BinlogPosition) -> bool:
        if not at.file or not isinstance(self.source, BinlogServer):
            return False
        names = {name for name, _ in self.source.binary_logs()}
        if at.file in names:
            return False
        log.warning("binlog input: %s is no longer on %s: snapshot (snapshot = when-needed)", at, self.source)
        return True

    def available_now_target(self) -> dict[str, Any]:
        return self.source.end()

    def batch_partitions(self, changelog: ChangelogRows) -> Sequence[InputPartition]:
        """A batch read: the binlog available now; with ``snapshot=initial-only``, the snapshot read chunk by
        chunk in the tasks (`snapshot_partitions`: the whole of every table, one chunk's memory per task)."""
        if not self._snapshot_first():
            return super().batch_partitions(changelog)
        if self.snapshot.mode != "initial-only":
            raise ConfigError(
                f"a batch read takes snapshot initial-only (or input snapshot), not {self.snapshot.mode}: the "
                "snapshot followed by the binlog is a stream (readStream with trigger availableNow)"
            )
        assert isinstance(self.source, BinlogServer)  # a snapshot needs one (checked in __init__)
        return snapshot_partitions(self.source, self.opts.time_zone, self.snapshot.chunk_size, changelog)

    # ------------------------------------------------------------------ snapshot (docs/snapshot.md)

    def _batch_reader(self) -> BatchReader:
        """The initial snapshot's chunks (several a micro-batch, the next batch's read ahead)."""
        if self._chunks is None:
            reader = self._reader(self.snapshot.chunk_size)
            self._chunks = BatchReader(reader, self.snapshot.parallelism, read_ahead=True)
        return self._chunks

    def _on_demand_reader(self) -> BatchReader:
        """The chunks of snapshots on demand: one a micro-batch, of their own size (`SnapshotOptions`)."""
        if self._on_demand_chunks is None:
            self._on_demand_chunks = BatchReader(self._reader(self.snapshot.on_demand_chunk_size))
        return self._on_demand_chunks

    def _reader(self, chunk_size: int) -> SnapshotReader:
        assert isinstance(self.source, BinlogServer)
        return SnapshotReader(
            _connector(self.source), replica_window(self.source.address, self.tz), tz=self.tz, chunk_size=chunk_size
        )

    def _snapshot_offset(self, start: dict[str, Any], max_events: int | None) -> dict[str, Any]:
        """The next chunks after ``start`` (a snapshot offset, or a purged binlog one), read and spilled now."""
        progress = progress_of(start) if is_snapshot(start) else None
        if progress is None:
            changelog = self.opts.changelog(None)
            clock = int(start.get("clock", 0)) if not is_snapshot(start) else 0
            progress = begin_snapshot(_connector(self.source), changelog.keeps, clock)
        chunks = self._batch_reader().read(progress, max_events, self.opts.max_bytes or DEFAULT_BATCH_BYTES)
        self._spill.write(progress, chunks)
        rows = sum(c.rows for c in chunks)
        log.info(
            "snapshot batch %d: %d chunks, %d rows; %s",
            progress.batch,
            len(chunks),
            rows,
            "done" if progress.done else f"next {'.'.join(progress.tables[progress.table].name)} #{progress.chunk}",
        )
        return offset_of(progress)

    def _binlog_start(self, offset: dict[str, Any]) -> tuple[dict[str, Any], HandoverState | None]:
        """Where an offset's binlog reading starts, and the snapshot cuts it is checked against (None: passed)."""
        if is_snapshot(offset):
            progress = progress_of(offset)
            assert progress is not None and progress.done
            return progress.binlog_start().to_dict(), progress.handover()
        handover = HandoverState.from_dict(offset["handover"]) if "handover" in offset else None
        return {k: v for k, v in offset.items() if k not in _NOT_POSITION}, handover

    def commit(self, end: dict[str, Any]) -> None:
        """A committed snapshot batch's spilled chunks are no longer needed (Spark will not re-run it)."""
        if is_snapshot(end):
            progress = progress_of(end)
            if progress is not None:
                self._spill.prune(progress)
        elif INCREMENTAL in end:
            self._on_demand.prune(SnapshotProgress.from_dict(end[INCREMENTAL]))

    def catalog_at(self, start: BinlogPosition) -> DDLCatalog:
        """The DDL catalog (unique and other keys) at a transaction boundary, as the non-Spark capture has it there.

        Planned in this process: remembered from the scan that reached ``start``. Otherwise (the
        first batch, or a restart from a checkpointed offset) rebuilt: binlog files start from an
        empty catalog at the stream's first position (`first`, as `file_capture` would) and
        apply the DDL from there to ``start`` (a DDL-only scan: ROWS events are skipped); a
        live server's catalog is one information_schema snapshot taken now (as `live_capture`
        without the schema tracker takes one when it starts), to which the planning scans add
        the DDL read from ``start`` on.
        """
        key = _pkey(start.file, start.pos)
        catalog = self._catalogs.get(key)
        if catalog is None:
            catalog = self._rebuild_catalog(start)
            self._remember(key, catalog)
        return catalog

    def _rebuild_catalog(self, start: BinlogPosition) -> DDLCatalog:
        if isinstance(self.source, BinlogServer):
            return self.source.key_snapshot()
        first = self.first()
        if not start.file or not first.file or reached(first.file, first.pos, (start.file, start.pos)):
            return DDLCatalog()
        began = time.monotonic()
        capture = _capture(
            _ScanCapture,
            self.source,
            first,
            self.tz,
            until=(start.file, start.pos),
            catalog=DDLCatalog(),
            ddl_only=True,
        )
        for _ in capture.events():
            pass
        catalog = capture.keys.at(_pkey(start.file, start.pos))
        log.info(
            "binlog input rebuilt the DDL catalog at %s from the DDL since %s: %d tables, %d DDL, %.2f s",
            start,
            first,
            len(catalog),
            len(capture.keys.ddls),
            time.monotonic() - began,
        )
        return catalog

    def _remember(self, key: PositionKey, catalog: DDLCatalog) -> None:
        self._catalogs[key] = catalog
        while len(self._catalogs) > _REMEMBERED:
            del self._catalogs[next(iter(self._catalogs))]

    def scan(
        self,
        start: BinlogPosition,
        max_events: int | None = None,
        until: tuple[str, int] | None = None,
        max_bytes: int | None = None,
        stop_at_signal: bool = True,
    ) -> _Scan:
        """The last transaction boundary after ``start`` (within the limits), split points, the table's schema,
        the keys' history over the scan (`_KeyLog`), and the snapshot signals met.

        Both limits are soft, as Spark's own read limits: the batch ends at the first boundary at
        or after ``max_events`` rows (+ DDLs) or ``max_bytes`` bytes of binlog, so it holds at
        least one whole transaction. A transaction holding a snapshot signal ends the scan: the
        snapshot it asks for starts right after it. One scan at a time (`_ScanAhead` runs them in
        a thread too): the catalogs they remember are shared.
        """
        with self._scanning:
            return self._scan(start, max_events, until, max_bytes, stop_at_signal)

    def _scan(
        self,
        start: BinlogPosition,
        max_events: int | None,
        until: tuple[str, int] | None,
        max_bytes: int | None,
        stop_at_signal: bool,
    ) -> _Scan:
        catalog = self.catalog_at(start).copy()
        capture = _capture(
            _ScanCapture,
            self.source,
            start,
            self.tz,
            until=until,
            want=self.opts.table,
            catalog=catalog,
            signals=self.signals,
        )
        end: BinlogPosition | None = None
        splits: list[dict[str, Any]] = []
        ddls = 0
        since_split = 0
        consumed, at = 0, (start.file, start.pos)
        stopped = False
        events = capture.events()
        try:
            for ev in events:
                if isinstance(ev, DDLEvent):
                    ddls += 1
                    continue
                if not isinstance(ev, Resolved) or ev.position is None:
                    continue
                end = BinlogPosition.from_dict(ev.position)
                count = capture.rows + ddls
                if count - since_split >= self.split_every:
                    splits.append(end.to_dict())
                    since_split = count
                # Binlog bytes read: position deltas within a file; a new file's position counts from its start.
                consumed += end.pos - at[1] if end.file == at[0] else end.pos
                at = (end.file, end.pos)
                stopped = (
                    bool(capture.signals and stop_at_signal)
                    or (max_events is not None and count >= max_events)
                    or (max_bytes is not None and consumed >= max_bytes)
                )
                if stopped:
                    break
        finally:
            events.close()
        if splits and end is not None and splits[-1] == end.to_dict():
            splits.pop()
        if end is not None:
            key = _pkey(end.file, end.pos)
            self._remember(key, capture.keys.at(key))
        return _Scan(end, splits, capture.found, capture.keys, capture.signals, stopped)

    def table_schema(self) -> TableSchema | None:
        if self.opts.table is None:
            return None
        found = self.scan(self.first(), stop_at_signal=False).found
        if found is None:
            schema, table = self.opts.table
            raise ConfigError(f"table {schema}.{table} has no rows in the binlog of {self.source}: shape unknown")
        return found

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        if is_snapshot(start):
            progress = progress_of(start)
            if progress is None or not progress.done:
                return self._snapshot_offset(start, max_events)
            if self.snapshot.mode == "initial-only":
                return start  # the snapshot alone: nothing after it
        elif self.snapshot.mode == "when-needed" and not self._purge_checked:
            self._purge_checked = True  # a resumed checkpoint whose position the server purged: snapshot again
            if self._purged(BinlogPosition.from_dict(start)):
                return self._snapshot_offset(start, max_events)
        start_d, handover = self._binlog_start(start)
        begin = BinlogPosition.from_dict(start_d)
        incremental = start.get(INCREMENTAL)
        if incremental is not None and handover is None:
            progress = SnapshotProgress.from_dict(incremental)
            if not progress.done:
                return self._incremental_offset(begin, progress)
            incremental = None  # done: the stream goes on without it
        until = _until(target, handover)
        if until is not None and begin.file and reached(begin.file, begin.pos, until):
            return start
        scan = self._planned(begin, (max_events, until, self.opts.max_bytes), ahead=handover is None)
        if scan is None or scan.end is None:
            return start
        end = scan.end
        out = {**end.to_dict(), "splits": scan.splits}
        if handover is not None and not handover.passed(end.file, end.pos):
            out["handover"] = handover.to_dict()  # later ranges still overlap the snapshot
        if scan.signals:
            progress = self._begin_incremental(
                scan.signals, SnapshotProgress.from_dict(incremental) if incremental else None
            )
            if progress is not None:
                out[INCREMENTAL] = progress.to_dict()
        elif incremental is not None:
            out[INCREMENTAL] = incremental  # asked for during the hand-over: it starts after it
        return out

    def _planned(self, begin: BinlogPosition, limits: tuple[Any, ...], ahead: bool) -> _Scan | None:
        """The scan planning a batch from ``begin`` (None: nothing new), its key log kept for `partitions`;
        with ``ahead``, the next batch's scan started (`_ScanAhead`) when this one ended at a limit."""
        scan = self._ahead.take(begin, *limits) or self.scan(begin, *limits)
        end = scan.end
        if end is None or (end.file, end.pos) == (begin.file, begin.pos):
            return None
        if ahead and scan.stopped and not scan.signals:
            self._ahead.start(self.scan, end, *limits)  # the next batch's, while Spark runs this one
        self._key_logs[(_pkey(begin.file, begin.pos), _pkey(end.file, end.pos))] = scan.keys
        while len(self._key_logs) > _REMEMBERED:
            del self._key_logs[next(iter(self._key_logs))]
        return scan

    # ------------------------------------------------------------------ snapshots on demand (docs/snapshot.md)

    def _begin_incremental(
        self, signals: Sequence[Signal], running: SnapshotProgress | None
    ) -> SnapshotProgress | None:
        """The tables the signals ask for (and the changefeed's filter keeps), none read yet; added to a
        snapshot already running. None when no table matches."""
        try:
            wanted = TableFilter([p for s in signals for p in s.tables])
        except ConfigError as exc:  # a hand-written signal: the job goes on, the error says which
            log.error("snapshot signal %s ignored: %s", ", ".join(s.id for s in signals), exc)
            return running
        keeps = self.opts.changelog(None).keeps
        progress = begin_snapshot(_connector(self.source), lambda s, t: keeps(s, t) and wanted.match(s, t))
        log.info(
            "snapshot signal %s: %d tables %s",
            ", ".join(s.id for s in signals),
            len(progress.tables),
            ", ".join(".".join(t.name) for t in progress.tables[:10]),
        )
        if running is not None:
            known = {t.name for t in running.tables}
            running.tables += [t for t in progress.tables if t.name not in known]
            return running
        return progress if progress.tables else None

    def _incremental_offset(self, begin: BinlogPosition, progress: SnapshotProgress) -> dict[str, Any]:
        """The next micro-batch of a snapshot asked for by a signal: one chunk and the binlog up to its high watermark.

        DBLog's rule: the chunk is read now (low watermark, SELECT, high watermark; the reader
        brings its rows to the high watermark), the batch holds the binlog from ``begin`` to that
        high watermark as usual, then the chunk's rows as INSERTs at the next commit ts. Every
        change at or before the high watermark comes before them, every later one after.
        """
        reader = self._on_demand_reader()
        jobs = reader.next_chunks(progress, 1)
        if not jobs:  # every table left was dropped meanwhile
            progress.table = len(progress.tables)
            return {**begin.to_dict(), "splits": [], INCREMENTAL: progress.to_dict()}
        ti, plan, ci = jobs[0]
        result = reader.reader.read_chunk(plan, ci)
        high = result.high
        end, splits = begin, []
        if (high.file, high.pos) != (begin.file, begin.pos):
            # Not when the high watermark is ``begin`` (nothing changed since): a scan from there
            # reads one transaction past it, which would come before rows that do not hold it.
            scan = self.scan(begin, until=(high.file, high.pos), stop_at_signal=False)
            if scan.signals:  # more tables asked for meanwhile: read after these
                self._begin_incremental(scan.signals, progress)
            if scan.end is not None and reached(scan.end.file, scan.end.pos, (begin.file, begin.pos)):
                end, splits = scan.end, scan.splits
            self._key_logs[(_pkey(begin.file, begin.pos), _pkey(end.file, end.pos))] = scan.keys
        if (end.file, end.pos) != (high.file, high.pos):
            log.warning("snapshot chunk %s #%d: high watermark %s, emitted at %s", ".".join(plan.name), ci, high, end)
        clock = CommitClock(end.clock)
        chunk = reader.chunk(progress, ti, plan, result, clock)
        progress.table, progress.chunk = (ti, ci + 1) if ci + 1 < len(plan.ranges) else (ti + 1, 0)
        progress.clock = clock.last
        self._on_demand.write(progress, [chunk])  # a re-run of the batch emits these very rows
        # No read ahead here: a chunk read ahead has an older high watermark, the batch that emits
        # it ends the binlog there, and the live stream's changes since wait a batch more (lag
        # p50 0.39 -> 0.64 s while a snapshot ran, bench/RESULTS.md "Chunks read as lines").
        log.info(
            "snapshot on demand: %s #%d of %d, %d rows at %s",
            ".".join(plan.name),
            ci,
            len(plan.ranges),
            chunk.rows,
            end,
        )
        return {**end.to_dict(), "clock": clock.last, "splits": splits, INCREMENTAL: progress.to_dict()}

    def _key_log(self, start: dict[str, Any], end: dict[str, Any]) -> _KeyLog:
        """The keys' history over [start, end): from the scan that planned it, or scanned again (after a restart)."""
        span = (_bound_key(start), _bound_key(end))
        keys = self._key_logs.get(span)
        if keys is None:
            stop = BinlogPosition.from_dict(end)
            keys = self.scan(BinlogPosition.from_dict(start), until=(stop.file, stop.pos), stop_at_signal=False).keys
            self._key_logs[span] = keys
        return keys

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        if is_snapshot(end):  # the chunks this batch read: one partition each, in plan order
            progress = progress_of(end)
            if progress is None or start == end:
                return []
            return self._chunk_partitions(self._spill, progress, changelog)
        # A snapshot on demand: the chunk this batch read comes after the binlog up to its high watermark.
        chunks: list[InputPartition] = []
        if INCREMENTAL in end:
            now, before = SnapshotProgress.from_dict(end[INCREMENTAL]), start.get(INCREMENTAL)
            if now.chunks and (before is None or SnapshotProgress.from_dict(before).spill != now.spill):
                chunks = self._chunk_partitions(self._on_demand, now, changelog)
        start_d, handover = self._binlog_start(start)
        cuts = orjson.dumps(handover.to_dict()).decode() if handover is not None else None
        bounds = [start_d, *end.get("splits", ())]
        bounds.append({k: v for k, v in end.items() if k not in _NOT_POSITION})
        pairs = [(a, b) for a, b in itertools.pairwise(bounds) if _bound_key(a) != _bound_key(b)]
        if not pairs:
            return chunks
        keys = self._key_log(bounds[0], bounds[-1])
        return [
            BinlogRange(
                self.source,
                a,
                b,
                self.opts.time_zone,
                changelog,
                self.opts.output,
                keys.payload(_bound_key(a), _bound_key(b)),
                handover=cuts if handover is not None and not handover.passed(a["file"], int(a["pos"])) else None,
            )
            for a, b in pairs
        ] + chunks

    def _chunk_partitions(
        self, spill: SpillStore, progress: SnapshotProgress, changelog: ChangelogRows
    ) -> list[InputPartition]:
        """One partition per chunk a batch read (spilled in ``spill``), in plan order."""
        where = {"snapshot": progress.batch}
        # Where the readers share the spill directory, name the files: the chunks stay out of the JVM.
        chunks: list[dict[str, Any]]
        if self.snapshot.shared and self.opts.output == RANGES:
            # The reader reads the files where it collects the names: one task a batch, not one a
            # chunk (~20 ms of the JVM's CPU each, bench/RESULTS.md "Chunks read as lines, read ahead").
            chunks = [{"chunk_files": tuple(str(p) for p in spill.paths(progress))}]
        elif self.snapshot.shared:
            chunks = [{"chunk_file": str(p)} for p in spill.paths(progress)]
        else:
            chunks = [{"chunk": text} for text in spill.read(progress)]
        return [
            BinlogRange(self.source, where, where, self.opts.time_zone, changelog, self.opts.output, **chunk)
            for chunk in chunks
        ]
