"""Reading a snapshot from a live MySQL/MariaDB: table plans, chunks with watermarks, keyless tables.

No FLUSH TABLES WITH READ LOCK and no long transaction for a keyed table: each chunk is one short
read. On MariaDB the chunk's SELECT runs in ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and its
low watermark is MariaDB's ``binlog_snapshot_file``/``binlog_snapshot_position``, the binlog
position of exactly that read view; on MySQL (no such status) the low watermark is ``SHOW MASTER
STATUS`` read just before. The high watermark is ``SHOW MASTER STATUS`` after the SELECT, and the
binlog between the two (`WindowReader`) is replayed over the chunk (`chunks.reconcile`).

A table without a usable key (no primary key and no unique key over NOT NULL columns) is read in
one consistent read whose position is its watermark (MariaDB only: MySQL does not report the
position of a consistent snapshot).

Connections come from the caller (``connect``: a DB-API connection with ``charset=utf8mb4``,
made by `changefeed.clients.mysql`), so this package needs no client of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from typing import Any

from ...errors import CaptureError
from ...model.ddl import quote_ident, quote_table
from ...model.events import DDLEvent, Event, RowChange
from ...model.schema import Column, TableSchema
from ...model.tso import compose_tso
from ..binlog.capture import BinlogCapture
from ..binlog.position import BinlogPosition, file_key
from ..binlog.tracker import SchemaTracker
from .chunks import KeyRange, Row, chunk_filter, key_getter, reconcile, split
from .columns import ChunkColumns, joined_sql, line_sql, parse_joined, parse_lines
from .order import Key, KeyOrder, PythonOrder, python_orderable
from .sql import tuple_compare, tuple_params
from .values import converter, order_sql, param_sql, param_value, select_sql

log = logging.getLogger(__name__)

Connect = Callable[[], Any]
"""Opens a DB-API connection (autocommit on, utf8mb4) to the source."""
WindowReader = Callable[[BinlogPosition, BinlogPosition], Iterable[Event]]
"""The binlog events from a low to a high watermark (`replica_window`)."""

#: Rows per chunk by default: 2048, 8192 and 32768 copied 300k rows at the same rate (bench/RESULTS.md,
#: "Initial snapshot"); where chunks travel inside Spark's partitions (a cluster), a round of
#: ``snapshot-parallelism`` 32768-row chunks (~130 MB of JSONL) ran a 1 GB driver JVM out of heap.
DEFAULT_CHUNK_SIZE = 8192
_RETRIES = 3


def position_key(pos: BinlogPosition | Mapping[Any, Any]) -> tuple[tuple[str, int], int]:
    """A sortable binlog position (`handover.PositionKey`)."""
    if isinstance(pos, BinlogPosition):
        return (file_key(pos.file), pos.pos)
    return (file_key(str(pos.get("file", ""))), int(pos.get("pos", 4)))


@dataclass
class TablePlan:
    """One table to snapshot: its shape, the key chunks are cut by (names; () for one consistent read),
    and its chunks (`chunks.split`)."""

    schema: TableSchema
    key: tuple[str, ...]
    ranges: list[KeyRange] = field(default_factory=lambda: [KeyRange()])
    # Chunks read as one joined value (`columns.joined_sql`) until one is too long for it.
    joined: bool = field(default=True, compare=False)

    @property
    def name(self) -> tuple[str, str]:
        return (self.schema.schema, self.schema.table)

    @property
    def boundaries(self) -> list[Key]:
        return [r.lo for r in self.ranges[1:] if r.lo is not None]


@dataclass
class ChunkResult:
    """A chunk as the table held it at ``high``; its rows go downstream with ``commit_ts``.

    ``selected``: the rows, or the columns they were read as (`columns.ChunkColumns`), which an
    ``inserts`` line is written from without a Python tuple per row (`rows` makes them on demand).
    """

    table: tuple[str, str]
    index: int
    selected: list[Row] | ChunkColumns
    low: BinlogPosition
    high: BinlogPosition
    commit_ts: int
    window_events: int = 0

    @property
    def rows(self) -> list[Row]:
        if isinstance(self.selected, ChunkColumns):
            self.selected = self.selected.rows()
        return self.selected


class DatabaseOrder:
    """`order.KeyOrder` answered by the database: ``DENSE_RANK() OVER (ORDER BY ...)`` of the keys as
    literals of the key columns' types and collations (`values.order_sql`)."""

    def __init__(self, connect: Connect, columns: Sequence[Column], tz: tzinfo = UTC) -> None:
        self.connect = connect
        self.columns = tuple(columns)
        self.tz = tz
        self._conn: Any = None

    def rank(self, keys: Sequence[Key]) -> list[int]:
        if not keys:
            return []
        exprs = [order_sql(c) for c in self.columns]
        row = "SELECT %s AS i, " + ", ".join(f"{e} AS k{j}" for j, e in enumerate(exprs))
        order = ", ".join(f"k{j}" for j in range(len(exprs)))
        sql = f"SELECT i, DENSE_RANK() OVER (ORDER BY {order}) FROM ({' UNION ALL '.join([row] * len(keys))}) AS t"
        args: list[Any] = []
        for i, key in enumerate(keys):
            args.append(i)
            args.extend(param_value(c, v, self.tz) for c, v in zip(self.columns, key, strict=True))
        if self._conn is None:
            self._conn = self.connect()
            _session(self._conn)
        with self._conn.cursor() as cur:
            cur.execute(sql, args)
            out = [0] * len(keys)
            for i, r in cur.fetchall():
                out[int(i)] = int(r)
        return out

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __getstate__(self) -> dict[str, Any]:  # a connection does not travel
        return {**self.__dict__, "_conn": None}


def _warned(cur: Any) -> bool:
    """Whether the statement ``cur`` ran last left warnings (PyMySQL counts them; else ask)."""
    count = getattr(cur, "warning_count", None)
    if count is None:
        cur.execute("SELECT @@warning_count")
        count = cur.fetchone()[0]
    return int(count) > 0


def _session(conn: Any) -> None:
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        # A chunk's joined lines (`columns.joined_sql`) are bounded by the packet size alone.
        cur.execute("SET SESSION group_concat_max_len = @@GLOBAL.max_allowed_packet")


def master_status(cur: Any) -> BinlogPosition:
    try:
        cur.execute("SHOW MASTER STATUS")
    except Exception:  # MySQL 8.4 renamed it
        cur.execute("SHOW BINARY LOG STATUS")
    row = cur.fetchone()
    if not row:
        raise CaptureError("the source reports no binlog position (is log_bin on?)")
    return BinlogPosition(str(row[0]), int(row[1]))


def _snapshot_status(cur: Any) -> BinlogPosition | None:
    """MariaDB's binlog position of the current consistent snapshot; None elsewhere."""
    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    status = {str(k).lower(): v for k, v in cur.fetchall()}
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos is None:
        return None
    return BinlogPosition(str(file), int(pos))


class SnapshotReader:
    """Plans and reads table snapshots from one source (module docstring)."""

    def __init__(
        self,
        connect: Connect,
        window: WindowReader,
        *,
        tz: tzinfo = UTC,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        lines: bool = True,
    ) -> None:
        """``lines``: read a chunk as one line of text a row where its columns allow (`columns`);
        off, value by value (the row path)."""
        if chunk_size < 1:
            raise CaptureError(f"snapshot chunk size must be positive, got {chunk_size}")
        self.connect = connect
        self.window = window
        self.tz = tz
        self.chunk_size = chunk_size
        self.lines = lines

    # ------------------------------------------------------------------ plans

    def table_schema(self, schema: str, table: str) -> TableSchema:
        tracker = SchemaTracker(self.connect)
        try:
            info = tracker.table(schema, table)
        finally:
            tracker.close()
        if info is None:
            raise CaptureError(f"no table {schema}.{table} to snapshot")
        return SchemaTracker.table_schema(info, 0)

    def exists(self, schema: str, table: str) -> bool:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                    (schema, table),
                )
                return cur.fetchone() is not None
        finally:
            conn.close()

    def create_table(self, schema: str, table: str) -> str:
        """``SHOW CREATE TABLE``'s statement (the table's name unqualified, as the server writes it)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SHOW CREATE TABLE {quote_table(schema, table)}")
                row = cur.fetchone()
        finally:
            conn.close()
        if not row:
            raise CaptureError(f"no table {schema}.{table} to snapshot")
        return str(row[1])

    @staticmethod
    def chunk_key(ts: TableSchema) -> tuple[str, ...]:
        """The primary key, else the shortest unique key over NOT NULL columns (TiCDC's handle key);
        () when there is none (a NULL-able unique key may hold many NULLs: no ranges by it)."""
        cols = [ts.columns[i] for i in ts.handle_key]
        if not cols or any(c.nullable for c in cols):
            return ()
        return tuple(c.name for c in cols)

    def order(self, ts: TableSchema, key: Sequence[str]) -> KeyOrder:
        columns = [ts.column(n) for n in key]
        return PythonOrder() if python_orderable(columns) else DatabaseOrder(self.connect, columns, self.tz)

    def plan(self, schema: str, table: str) -> TablePlan:
        """The table's chunks: boundaries every ``chunk_size`` keys, sought by the database."""
        ts = self.table_schema(schema, table)
        key = self.chunk_key(ts)
        if not key:
            return TablePlan(ts, ())
        columns = [ts.column(n) for n in key]
        names = [quote_ident(n) for n in key]
        keys_sql = ", ".join(select_sql(c) for c in columns)
        convert = [converter(c, self.tz) for c in columns]
        order_by = ", ".join(names)
        src = quote_table(schema, table)
        conn = self.connect()
        try:
            _session(conn)

            def seek(after: Key | None) -> Key | None:
                args: list[Any] = []
                where = ""
                if after is not None:
                    where = " WHERE " + tuple_compare(names, [param_sql(c) for c in columns], ">=")
                    args = tuple_params([param_value(c, v, self.tz) for c, v in zip(columns, after, strict=True)])
                sql = f"SELECT {keys_sql} FROM {src}{where} ORDER BY {order_by} LIMIT 1 OFFSET {self.chunk_size}"
                with conn.cursor() as cur:
                    cur.execute(sql, args)
                    row = cur.fetchone()
                return None if row is None else tuple(f(v) for f, v in zip(convert, row, strict=True))

            ranges = split(seek)
        finally:
            conn.close()
        log.info("snapshot plan %s.%s: %d chunks by key %s", schema, table, len(ranges), key)
        return TablePlan(ts, key, ranges)

    # ------------------------------------------------------------------ reads

    def _select(self, plan: TablePlan, rng: KeyRange, line: str | None = None) -> tuple[str, list[Any]]:
        """The chunk's SELECT: each row as its values (`values.select_sql`), or as ``line`` (`columns.line_sql`)."""
        ts = plan.schema
        cols = line or ", ".join(select_sql(c) for c in ts.columns)
        sql = f"SELECT {cols} FROM {quote_table(ts.schema, ts.table)}"
        conds, args = [], []
        if plan.key:
            columns = [ts.column(n) for n in plan.key]
            names = [quote_ident(n) for n in plan.key]
            params = [param_sql(c) for c in columns]
            for bound, op in ((rng.lo, ">="), (rng.hi, "<")):
                if bound is not None:
                    conds.append(tuple_compare(names, params, op))
                    args += tuple_params([param_value(c, v, self.tz) for c, v in zip(columns, bound, strict=True)])
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        return sql, args

    def _rows(self, cur: Any, ts: TableSchema) -> list[Row]:
        convert = [converter(c, self.tz) for c in ts.columns]
        return [tuple(f(v) for f, v in zip(convert, row, strict=True)) for row in cur.fetchall()]

    def read_chunk(self, plan: TablePlan, index: int) -> ChunkResult:
        """Chunk ``index`` of ``plan`` at its high watermark (a DDL on the table meanwhile: read again)."""
        for attempt in range(1, _RETRIES + 1):
            try:
                return self._read_chunk(plan, index)
            except _ReshapedError as exc:
                if attempt == _RETRIES:
                    raise CaptureError(f"{exc} (chunk {index}, {_RETRIES} attempts)") from None
                plan.schema = self.table_schema(*plan.name)
        raise AssertionError("unreachable")

    def _read_chunk(self, plan: TablePlan, index: int) -> ChunkResult:
        rng = plan.ranges[index]
        line = line_sql(plan.schema) if self.lines else None
        conn = self.connect()
        try:
            _session(conn)
            with conn.cursor() as cur:
                before = master_status(cur)
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                low = _snapshot_status(cur)
                if low is None:
                    if not plan.key:
                        raise CaptureError(
                            f"{plan.schema.qualified_name} has no primary or NOT NULL unique key: its snapshot is one "
                            "consistent read, and only MariaDB reports that read's binlog position "
                            "(binlog_snapshot_position); add a key"
                        )
                    low = before  # MySQL: the position just before the read
                columns = self._read_lines(cur, plan, index, line) if line is not None else None
                selected: list[Row] | ChunkColumns
                if columns is not None:
                    selected = columns
                else:
                    cur.execute(*self._select(plan, rng))
                    selected = self._rows(cur, plan.schema)
                cur.execute("COMMIT")
                high = master_status(cur) if plan.key else low
                commit_ts = compose_tso(int(time.time() * 1000))
        finally:
            conn.close()
        events = 0
        if plan.key and position_key(high) > position_key(low):
            window = list(self._window(plan, low, high))
            events = len(window)
        if events:  # the window's changes of this table replayed over the chunk's rows
            order = self.order(plan.schema, plan.key)
            try:
                key_of = key_getter([plan.schema.column_index[n] for n in plan.key])
                rows = selected.rows() if isinstance(selected, ChunkColumns) else selected
                selected = reconcile(rows, window, key_of, chunk_filter(order, rng))
            finally:
                if isinstance(order, DatabaseOrder):
                    order.close()
        log.debug(
            "snapshot chunk %s.%s #%d: %d rows, window %s..%s (%d events)",
            *plan.name,
            index,
            len(selected),
            low,
            high,
            events,
        )
        return ChunkResult(plan.name, index, selected, low, high, commit_ts, events)

    def _read_lines(self, cur: Any, plan: TablePlan, index: int, line: str) -> ChunkColumns | None:
        """The chunk as one joined value, else line by line; None when a value is too long for a
        line too (`columns`: then it is read value by value). A warning means something came back
        cut or NULL: the value is not used."""
        rng, where = plan.ranges[index], f"chunk {index}"
        if plan.joined:
            cur.execute(*self._select(plan, rng, joined_sql(line)))
            count, joined = cur.fetchone()
            if not _warned(cur):
                return parse_joined(plan.schema, joined, int(count), self.tz, where)
            plan.joined = False  # this table's rows are long: its next chunks go line by line at once
            log.info("snapshot chunk %s.%s #%d: too long as one value, read again line by line", *plan.name, index)
        cur.execute(*self._select(plan, rng, line))
        fetched = [r[0] for r in cur.fetchall()]
        selected = None if _warned(cur) else parse_lines(plan.schema, fetched, self.tz, where)
        if selected is None:
            log.info("snapshot chunk %s.%s #%d: read again value by value", *plan.name, index)
        return selected

    def _window(self, plan: TablePlan, low: BinlogPosition, high: BinlogPosition) -> Iterator[RowChange]:
        """The table's row changes between the watermarks, with images in the plan's column order."""
        names = tuple(c.name for c in plan.schema.columns)
        for ev in self.window(low, high):
            if isinstance(ev, DDLEvent) and (ev.schema, ev.table) == plan.name:
                raise _ReshapedError(f"{plan.schema.qualified_name} changed (DDL) while a chunk was read")
            if not isinstance(ev, RowChange) or (ev.schema, ev.table) != plan.name:
                continue
            if tuple(c.name for c in ev.table_schema.columns) != names:
                raise _ReshapedError(f"{plan.schema.qualified_name} has other columns in the binlog than when planned")
            yield ev


class _ReshapedError(CaptureError):
    """The table's shape changed under a chunk read: plan its schema again and re-read the chunk."""


def replica_window(address: Any, tz: tzinfo = UTC) -> WindowReader:
    """A `WindowReader` over the replication protocol of ``address`` (`binlog.replica.ServerAddress`):
    one non-blocking dump per window, decoded from the binlog's own TABLE_MAP metadata."""

    def read(low: BinlogPosition, high: BinlogPosition) -> Iterator[Event]:
        from ..binlog.replica import ReplicaStream, random_server_id  # noqa: PLC0415 - PyMySQL only here

        sid = random_server_id()

        def open_source(at: BinlogPosition) -> ReplicaStream:
            return ReplicaStream(address, at, server_id=sid, blocking=False, require_full_metadata=True)

        capture = BinlogCapture(open_source, low, tz=tz, until=(high.file, high.pos))
        yield from capture.events()

    return read
