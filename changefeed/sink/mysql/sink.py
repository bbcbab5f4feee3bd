"""The MySQL/MariaDB sink: model events -> downstream transactions, exactly once with one worker.

Flow (docs/mysql-sink.md has the whole story):

* rows buffer until ``batch_rows`` and are cut only where commit_ts changes, so one upstream
  transaction is never split across downstream batches; several small upstream transactions
  merge into one downstream transaction (TiCDC's mysql sink does the same);
* `RowBlock`s are taken segment by segment with the semantics of their `RowChange`s, and stay
  columnar in the buffer: whole-image inserts are rendered from the Arrow columns (columns.py),
  other rows become `RowChange`s at flush;
* one worker: the batch and the checkpoint upsert commit in ONE transaction (exactly once),
  run by an applier thread while the caller goes on decoding and buffering the next rows (in
  order; at most `APPLIER_QUEUE` handed over and not yet running, so a caller faster than the
  server waits instead of holding ever more rendered rows; `flush` waits for all); several workers: rows are
  routed by causality (causality.py), each worker commits its share, and the checkpoint is
  written only after every worker committed (at least once; safe mode makes the replay converge);
* runs of whole-row inserts (block rows or row images) are sent as ``LOAD DATA LOCAL INFILE`` of
  rows built from Arrow columns and sent from memory (``load-data=auto``, where the server allows
  LOCAL; no file is written), inside the same transaction; the server's reply is checked so the
  result is the INSERT's, errors included;
* DDL is a barrier: flush, run the DDL alone, save the checkpoint at its commit ts;
* DM's pessimistic shard DDL mode (shardlock.py): the rows of shards that ran a merged table's
  pending DDL (and their later DDL, queued in order) are stored in a held table with the checkpoint,
  and replayed after the DDL once the last shard ran it;
* transient errors (lost connection, deadlock, lock wait timeout) roll back, reconnect and re-run
  the whole downstream transaction in safe mode, with exponential backoff.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from queue import Queue
from typing import Any

import pyarrow as pa

from ...clients.mysql import (
    CLIENT,
    Connection,
    InternalError,
    MySQLError,
    MySQLParams,
    load_local_infile,
    mask_url,
    parse_mysql_url,
    split_mysql_url,
    warning_error,
)
from ...dispatch.route import ShardDDL
from ...dispatch.shardddl import ShardDDLConflictError
from ...dispatch.shardlock import ShardKey
from ...errors import ConfigError, SinkError, positive_int, true_false
from ...model import ActionType, DDLEvent, Event, Index, Resolved, RowChange, TableSchema
from ...model.rowblock import RowBlock, TableRows
from ..base import SinkContext
from ..observe import observer
from ..replay import ResolvedGuard
from .causality import Causality, row_keys
from .checkpoint import Checkpoint, CheckpointTable
from .columns import BlockRows, Entry, LoadFile, expand
from .ddlguard import UnsafeDDLError, check_ddl
from .errors import ddl_already_done, error_code, is_transient
from .keys import DownstreamKeys, read_unique_indexes
from .pessimistic import PessimisticShards
from .plan import PlannedOp, plan_rows, render_ops
from .shard import report_shard_ddl, shard_verdict
from .shardlock import Member, ShardLockStore
from .sql import make_literal, quote_ident

__all__ = ["DEFAULT_SQL_MODE", "FaultHook", "MySQLSink", "MySQLSinkConfig"]

log = logging.getLogger(__name__)

# Not strict, zero and invalid dates allowed, 0 stays 0 in AUTO_INCREMENT columns: the values
# were accepted upstream, so the downstream must store them as they are, not re-validate them.
DEFAULT_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES,NO_ENGINE_SUBSTITUTION"

FaultHook = Callable[[str, Mapping[str, Any]], None]
"""Test hook called at named points (statement, commit, committed, checkpoint, ddl); may raise."""

_SCHEMA_ACTIONS = frozenset(
    {ActionType.CREATE_SCHEMA, ActionType.DROP_SCHEMA, ActionType.MODIFY_SCHEMA_CHARSET_AND_COLLATE}
)


@dataclass
class MySQLSinkConfig:
    """Sink options (TiCDC sink-uri / DM syncer names where one exists)."""

    changefeed_id: str = "default"
    workers: int = 1  # TiCDC worker-count
    batch_rows: int = 4096  # rows per downstream transaction (cut at upstream transaction ends)
    statement_rows: int = 1000  # rows per multi-row statement (TiCDC max-multi-update-row-count)
    statement_bytes: int = 1 << 21  # SQL text per statement, well under max_allowed_packet
    pack_bytes: int = 1 << 18  # statements sent together in one multi-statement round trip
    safe_mode: bool = False  # always on
    safe_mode_duration: float = 60.0  # seconds of safe mode after start / resume (DM: 60 s)
    checkpoint_schema: str = "changefeed"
    sql_mode: str = DEFAULT_SQL_MODE
    time_zone: str = "UTC"  # the zone TIMESTAMP text is in (the changefeed time zone)
    max_retries: int = 8
    retry_backoff: float = 0.1
    retry_backoff_max: float = 5.0
    lock_wait_timeout: int | None = None  # innodb_lock_wait_timeout for the sink's sessions
    # auto: runs of whole-row inserts go as LOAD DATA LOCAL INFILE where the server allows LOCAL; off: INSERT
    load_data: str = "auto"
    # shorter runs stay INSERTs: a LOAD DATA costs ~0.4 ms more (file, round trips, Arrow calls per column);
    # measured crossover ~200 rows of the 10-column orders table (bench/RESULTS.md)
    load_data_min_rows: int = 256
    fault_hook: FaultHook | None = field(default=None, repr=False)
    #: DM's shard-mode of merged tables: "optimistic" (shard.py) or "pessimistic" (shardlock.py).
    shard_mode: str = "optimistic"
    #: Pessimistic mode: this source's shards of each merged table, read from the source at start.
    shard_members: tuple[Member, ...] = ()

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        if self.shard_mode not in ("optimistic", "pessimistic"):
            raise ConfigError(f"shard-mode must be optimistic or pessimistic, got {self.shard_mode!r}")
        if self.shard_mode == "pessimistic" and self.workers > 1:
            # Held rows are written with the checkpoint, in the one transaction a single worker commits.
            raise ConfigError("shard-mode = pessimistic needs worker-count=1 (held rows commit with the checkpoint)")
        if self.batch_rows < 1 or self.statement_rows < 1:
            raise ConfigError("batch_rows and statement_rows must be >= 1")
        if self.load_data not in _LOAD_DATA_MODES:
            raise ConfigError(f"load-data must be one of {', '.join(_LOAD_DATA_MODES)}, got {self.load_data!r}")

    @classmethod
    def from_uri(cls, uri: str, changefeed_id: str, time_zone: str = "UTC") -> tuple[MySQLParams, MySQLSinkConfig]:
        """A mysql:// sink-uri, parsed once: the connection (checked now, not inside the job) and TiCDC's
        sink parameters (worker-count, safe-mode, max-txn-row) as the sink's settings."""
        params, given = split_mysql_url(uri, _URI_PARAMS)
        settings: dict[str, Any] = {"changefeed_id": changefeed_id, "time_zone": time_zone}
        for key, value in given.items():
            name = _URI_PARAMS[key]
            if name == "safe_mode":
                settings[name] = true_false(value, "mysql sink-uri safe-mode")
            elif name == "load_data":
                settings[name] = value.strip().lower()
            else:
                settings[name] = positive_int(value, f"mysql sink-uri {key}")
        return params, cls(**settings)


#: TiCDC's mysql sink-uri parameters -> `MySQLSinkConfig` fields.
_URI_PARAMS = {
    "worker-count": "workers",
    "safe-mode": "safe_mode",
    "max-txn-row": "batch_rows",
    "load-data": "load_data",
}
_LOAD_DATA_MODES = ("auto", "off")
# Plan kinds a LOAD DATA can take: runs of whole-row INSERT/REPLACE, from columns or from images.
_LOAD_KINDS = frozenset({"insert", "replace", "insert_columns", "replace_columns"})
LoadStatement = tuple[str, LoadFile]
"""A LOAD DATA statement and its rows."""
Prepared = tuple[list[PlannedOp], list[LoadStatement | None]]
"""A transaction's statements (`plan_rows`) and the LOAD DATA of each that has one (`MySQLSink._prepare`)."""


def _session_time_zone(name: str) -> str:
    return "+00:00" if name.upper() in ("UTC", "Z", "GMT") else name


class _Session:
    """One downstream connection with the sink's session settings, reconnected on demand.

    ``multi_statements`` (CLIENT_MULTI_STATEMENTS) is for the workers, which send several
    statements the sink rendered itself per round trip; the coordinator, which runs DDL texts that
    come from the data, connects without it, so the server refuses a second statement in one.
    """

    def __init__(
        self,
        params: MySQLParams,
        config: MySQLSinkConfig,
        name: str,
        autocommit: bool,
        multi_statements: bool,
        told: threading.Event | None = None,
    ) -> None:
        self.params = params
        self.config = config
        self.name = name
        self.autocommit = autocommit
        self.client_flag = CLIENT.MULTI_STATEMENTS if multi_statements else 0
        self.conn: Connection | None = None
        self.literal = make_literal("NO_BACKSLASH_ESCAPES" in config.sql_mode.upper())
        # LOAD DATA LOCAL: wanted (workers, load-data=auto), then known per connection (`_setup`).
        self.want_load = multi_statements and config.load_data == "auto"
        self.loads = False
        self._told_no_local = told or threading.Event()  # shared by a sink's workers: one log line

    def ensure(self) -> Connection:
        if self.conn is None or not self.conn.open:
            conn = self.params.connect(
                autocommit=self.autocommit, client_flag=self.client_flag, local_infile=self.want_load
            )
            try:
                self._setup(conn)
            except BaseException:
                conn.close()
                raise
            self.conn = conn
            log.debug("connected session=%s thread_id=%s target=%s", self.name, conn.thread_id(), self.params.url)
        return self.conn

    def _setup(self, conn: Connection) -> None:
        """The session state rendering relies on: sql_mode (how literals escape), time zone, FK checks."""
        with conn.cursor() as cur:
            cur.execute(
                "SET SESSION sql_mode=%s, time_zone=%s, foreign_key_checks=0",
                (self.config.sql_mode, _session_time_zone(self.config.time_zone)),
            )
            if self.config.lock_wait_timeout is not None:
                cur.execute("SET SESSION innodb_lock_wait_timeout=%s", (self.config.lock_wait_timeout,))
            if self.want_load:
                cur.execute("SELECT @@local_infile")
                row = cur.fetchone()
                self.loads = bool(row and int(row[0]))
                if not self.loads and not self._told_no_local.is_set():
                    self._told_no_local.set()
                    log.info(
                        "the server does not allow LOAD DATA LOCAL INFILE (local_infile=0): "
                        "inserts go as INSERT statements session=%s target=%s",
                        self.name,
                        self.params.url,
                    )

    def restore(self, conn: Connection) -> None:
        """Set the session up again as at connect (character set included), after a statement from the data."""
        conn.set_character_set(conn.charset, conn.collation)
        self._setup(conn)

    @property
    def thread_id(self) -> int | None:
        return self.conn.thread_id() if self.conn is not None and self.conn.open else None

    def discard(self) -> None:
        """Drop the connection without committing (the server rolls back, as after a crash)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: nothing to roll back
                log.debug("closing session=%s failed", self.name, exc_info=True)

    def load(self, sql: str, file: LoadFile, fault: FaultHook) -> None:
        """Run ``file``'s LOAD DATA, its rows sent from memory (nothing is written to disk); the
        result must be the INSERT's: every row stored, no warning (a value the server adjusted is a
        wrong row).

        MySQL: without REPLACE/IGNORE a LOCAL load skips duplicate-key rows with a warning instead
        of failing, so a skipped row or any warning is raised as its own error (SHOW WARNINGS:
        1062 Duplicate entry, as the INSERT raises it).
        """
        conn = self.ensure()
        fault("statement", {"session": self.name, "sent": 0})
        try:
            result = load_local_infile(conn, sql, LOAD_NAME, file.data)
            if result.skipped or result.warnings or result.records != file.rows:
                raise warning_error(conn) or InternalError(
                    f"LOAD DATA read {result.records} of {file.rows} rows (skipped {result.skipped})"
                )
        except MySQLError as exc:
            exc.sql = sql  # type: ignore[attr-defined]
            raise

    def _packs(self, statements: Iterable[tuple[str, int]]) -> Iterator[tuple[list[str], int]]:
        pack: list[str] = []
        size = rows = 0
        for sql, n in statements:
            if pack and size + len(sql) > self.config.pack_bytes:
                yield pack, rows
                pack, size, rows = [], 0, 0
            pack.append(sql)
            size += len(sql)
            rows += n
        if pack:
            yield pack, rows

    def _send(self, cur: Any, pack: list[str], sent: int, fault: FaultHook) -> None:
        fault("statement", {"session": self.name, "sent": sent})
        done = 0
        try:
            cur.execute(";\n".join(pack))
            done = 1
            while cur.nextset():
                done += 1
        except MySQLError as exc:
            exc.sql = pack[done] if done < len(pack) else pack[-1]  # type: ignore[attr-defined]
            raise

    def run(self, statements: Iterable[tuple[str, int]], fault: FaultHook) -> int:
        """Execute statements in order, several per round trip (multi-statement); returns rows covered.

        Rendering (Python) and executing (the server) overlap: while the server runs one pack of
        statements, this thread renders the next, and a sender thread waits on the socket with
        the GIL released. A failing statement raises its error with ``exc.sql`` set to it.
        """
        conn = self.ensure()
        packs = self._packs(statements)
        cur = conn.cursor()
        try:
            first = next(packs, None)
            if first is None:
                return 0
            second = next(packs, None)
            if second is None:  # one round trip: no thread needed
                self._send(cur, first[0], 0, fault)
                return first[1]
            return self._pipelined(cur, itertools.chain((first, second), packs), fault)
        finally:
            try:
                cur.close()
            except Exception:  # the connection broke: the error that matters is already raised
                log.debug("cursor close failed session=%s", self.name, exc_info=True)

    def _pipelined(self, cur: Any, packs: Iterator[tuple[list[str], int]], fault: FaultHook) -> int:
        queue: Queue[list[str] | None] = Queue(maxsize=2)
        failure: list[BaseException] = []

        def sender() -> None:
            sent = 0
            while (pack := queue.get()) is not None:
                if failure:
                    continue  # drain: the producer stops at its next pack
                try:
                    self._send(cur, pack, sent, fault)
                    sent += len(pack)
                except BaseException as exc:
                    failure.append(exc)

        thread = threading.Thread(target=sender, name=f"{self.name}-send", daemon=True)
        thread.start()
        rows = 0
        try:
            for pack, n in packs:
                if failure:
                    break
                queue.put(pack)
                rows += n
        finally:
            queue.put(None)
            thread.join()
        if failure:
            raise failure[0]
        return rows


#: The name a LOAD DATA statement gives its rows; the server asks for it and gets them from memory.
LOAD_NAME = "changefeed-rows.tsv"
#: Transactions the applier holds before `_Applier.submit` waits: ~32k rows of `batch_rows`, a fraction
#: of a second of the server's work, enough to cover the caller's pause between two micro-batches.
APPLIER_QUEUE = 8


class _Applier:
    """One thread running the downstream transactions handed to it, in order.

    Why a thread: the server executes a transaction while the caller decodes and buffers the
    next rows. Exactly once needs what a single connection gives: transactions commit in the
    order they were handed over, and after one fails none of the later ones runs (each carries a
    later checkpoint, which would claim the failed rows).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: Queue[Callable[[], None] | None] = Queue(APPLIER_QUEUE)  # `submit` waits when full
        self._thread: threading.Thread | None = None
        self._done = threading.Condition()
        self.submitted = 0  # transactions handed over so far (`wait`'s tickets)
        self._ended = 0  # of them, those that ended (run, failed or skipped)
        self._applied = 0  # of them, those that committed
        self._failure: BaseException | None = None
        self._stopping = False

    def submit(self, transaction: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        with self._done:
            self.submitted += 1
        self._queue.put(transaction)

    def _run(self) -> None:
        while (transaction := self._queue.get()) is not None:
            if self._failure is None and not self._stopping:
                try:
                    transaction()
                    self._applied += 1
                except BaseException as exc:  # the caller raises it; nothing after it runs
                    self._failure = exc
            with self._done:
                self._ended += 1
                self._done.notify_all()

    def ended(self, upto: int) -> bool:
        """Whether the first ``upto`` transactions handed over have ended (`wait` would not wait)."""
        with self._done:
            return self._ended >= upto

    def wait(self, upto: int | None = None) -> None:
        """Until every transaction handed over (or the first ``upto`` of them) has ended; raises the
        first failure (a skipped transaction was never applied)."""
        with self._done:
            self._done.wait_for(lambda: self._ended >= (self.submitted if upto is None else upto))
        if self._failure is not None:
            raise self._failure
        if upto is not None and self._applied < upto:
            raise SinkError("the sink was closed before its transactions were applied")

    def close(self) -> None:
        """Skip what has not started, let a running transaction end (its session is never closed
        under it), stop the thread."""
        self._stopping = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None


@dataclass(frozen=True)
class _InFlight:
    """The transactions `MySQLSink.flush_async` handed over, up to the applier's ``ticket``-th."""

    sink: MySQLSink
    applier: _Applier | None  # None: nothing in flight
    ticket: int
    reached: int  # the checkpoint ts they reach

    def done(self) -> bool:
        return self.applier is None or self.applier.ended(self.ticket)

    def wait(self) -> int:
        if self.applier is not None:
            try:
                self.applier.wait(self.ticket)
            except BaseException as exc:
                self.sink._fail(exc)
                raise
        return self.reached


class MySQLSink(SinkContext):
    """Applies `Event`s to a MySQL/MariaDB database; see the module doc.

    A `Sink`: use as a context manager (a clean exit flushes, an exception closes without
    committing), or call `open`, `write`/`write_event`, `flush` and `close`.
    """

    kind = "mysql"

    def __init__(self, target: str | MySQLParams, config: MySQLSinkConfig | None = None, **options: Any) -> None:
        if config is None:
            config = MySQLSinkConfig(**options)
        elif options:
            raise ConfigError("pass either a MySQLSinkConfig or keyword options, not both")
        self.config = config
        self.params = parse_mysql_url(target) if isinstance(target, str) else target
        self.checkpoint_table = CheckpointTable(config.checkpoint_schema)
        self._coordinator = _Session(self.params, config, "coordinator", autocommit=True, multi_statements=False)
        told = threading.Event()
        self._workers = [
            _Session(self.params, config, f"worker-{i}", autocommit=False, multi_statements=True, told=told)
            for i in range(config.workers)
        ]
        self._pool: ThreadPoolExecutor | None = None
        self._applier: _Applier | None = None  # one worker: runs the downstream transactions, in order
        self._claimed: Checkpoint | None = None  # the last checkpoint handed to the applier
        self._opened = False
        self._mysql_json = False
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_ts = 0
        self._guard = ResolvedGuard("mysql sink", 0)
        self._safe_until = 0.0
        self._buffer: list[Entry] = []  # RowChanges and block segments, in order
        self._buffer_rows = 0  # rows in the buffer
        self._buffer_ts = 0
        # What the next flush will claim: a commit ts (0: nothing) and the latest source position.
        self._pending_ts = 0
        self._pending_pos: Mapping[str, Any] | None = None
        self._failed: BaseException | None = None
        self._keys = DownstreamKeys()
        # DM's pessimistic shard DDL mode: the locks of merged tables and the rows held this batch.
        self._shards = (
            PessimisticShards(self, ShardLockStore(config.checkpoint_schema))
            if config.shard_mode == "pessimistic"
            else None
        )
        # columnar_rows: rows whose statements were rendered from Arrow columns (`insert_columns`);
        # load_data_rows: those of them sent as LOAD DATA.
        self.stats = {
            "rows": 0,
            "skipped": 0,
            "transactions": 0,
            "ddl": 0,
            "ddl_skipped": 0,
            "retries": 0,
            "columnar_rows": 0,
            "load_data_rows": 0,
        }
        self._stats_lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> int:
        """Connect, create the checkpoint table if needed, read the checkpoint, start safe mode.

        Returns the checkpoint ts held downstream (0: none).
        """
        if self._failed is not None:
            # Rows of the failed batch are gone from the buffer: accepting more would let a later
            # checkpoint claim them. Restart: close(), then resume the source at load_checkpoint().
            raise SinkError(f"the sink failed earlier ({self._failed}); close() and resume from load_checkpoint()")
        if self._opened:
            return self._checkpoint_ts
        conn = self._with_retry(self._coordinator, "connect", lambda c: c)
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            version = str(cur.fetchone()[0])
        self._mysql_json = "mariadb" not in version.lower()
        self._with_retry(self._coordinator, "create checkpoint table", self.checkpoint_table.ensure)
        self._checkpoint = self._with_retry(
            self._coordinator, "load checkpoint", lambda c: self.checkpoint_table.load(c, self.config.changefeed_id)
        )
        self._checkpoint_ts = self._checkpoint.commit_ts if self._checkpoint else 0
        self._guard = ResolvedGuard("mysql sink", self._checkpoint_ts)  # a new run: replays end here
        if self._shards is not None:
            self._shards.open()
        if self.config.workers > 1:
            self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="mysql-sink")
        else:
            self._applier = _Applier("mysql-sink-apply")
        self._opened = True
        # DM enables safe mode for a while after every (re)start: the previous run may have
        # applied rows beyond its checkpoint.
        self._safe_until = time.monotonic() + self.config.safe_mode_duration
        log.info(
            "mysql sink open changefeed=%s target=%s version=%s workers=%d checkpoint_ts=%d",
            self.config.changefeed_id,
            self.params.url,
            version,
            self.config.workers,
            self._checkpoint_ts,
            extra={"changefeed": self.config.changefeed_id, "checkpoint_ts": self._checkpoint_ts},
        )
        return self._checkpoint_ts

    def load_checkpoint(self) -> Checkpoint | None:
        """Where the job must resume its source; turns safe mode on for ``safe_mode_duration``."""
        self.open()
        self._safe_until = time.monotonic() + self.config.safe_mode_duration
        return self._checkpoint

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The last checkpoint this sink made durable (or loaded)."""
        return self._checkpoint

    @property
    def safe_mode(self) -> bool:
        return self.config.safe_mode or time.monotonic() < self._safe_until

    def close(self) -> None:
        """Disconnect without flushing: uncommitted work is rolled back by the server.

        A transaction the applier is running ends first (committed with its checkpoint, or not at
        all): its session is never closed under it.
        """
        if self._applier is not None:
            self._applier.close()
            self._applier = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for session in (*self._workers, self._coordinator):
            session.discard()
        self._opened = False
        self._failed = None
        self._buffer = []
        self._buffer_rows = 0
        self._buffer_ts = 0
        self._pending_ts = 0
        self._pending_pos = None

    def connection_ids(self) -> dict[str, int | None]:
        """Server thread ids of the sink's sessions (for operators and for fault tests)."""
        return {s.name: s.thread_id for s in (self._coordinator, *self._workers)}

    # --- writing -----------------------------------------------------------------------------------

    def write(self, events: Iterable[Event | RowBlock]) -> None:
        """Apply events in order; rows are buffered (call `flush` at the end of a micro-batch)."""
        for event in events:
            self.write_event(event)

    def write_event(self, event: Event | RowBlock) -> None:
        if not self._opened or self._failed is not None:
            self.open()
        if isinstance(event, RowBlock):
            self._write_block(event)
        elif isinstance(event, RowChange):
            ts = event.commit_ts
            if not self._admit(ts, 1, event.table_schema, event.position):
                return
            if self._shards is not None and self._shards.locks and self._shards.hold(event):
                return
            shape = self._keys.shape(event.table_schema, self._read_unique_indexes)
            if shape is not event.table_schema:
                event = replace(event, table_schema=shape)
            self._buffer.append(event)
            self._count_pending(1, ts, event.position)
        elif isinstance(event, Resolved):
            ts = event.commit_ts  # everything at or below the resolved ts has been emitted
            self._guard.saw(ts)
            if ts > self._checkpoint_ts and ts > self._pending_ts:
                self._pending_ts = ts
                if event.position is not None:
                    self._pending_pos = event.position
            if self._buffer_rows >= self.config.batch_rows:
                self._transaction()
        elif isinstance(event, DDLEvent):
            self.flush()
            try:
                self._apply_ddl(event)
            except BaseException as exc:
                self._failed = exc
                raise
        else:
            raise SinkError(f"unknown event {type(event).__name__}")

    def _admit(self, ts: int, rows: int, table: TableSchema, position: Mapping[str, Any] | None) -> bool:
        """Whether ``rows`` rows at commit ts ``ts`` are new (else counted as skipped); a full buffer
        is flushed before a new commit ts, so it always ends on a transaction boundary.

        Skipped: a restart's replay, at or below the checkpoint stored when this run opened. At or
        below a Resolved (or a checkpoint) of this run: `ResolvedContradictionError`."""
        if self._guard.skip(ts, table.schema, table.table, position):
            self.stats["skipped"] += rows  # replayed: already applied downstream
            return False
        if ts != self._buffer_ts:
            if ts < self._buffer_ts:
                raise SinkError(
                    f"commit ts went backwards ({ts} after {self._buffer_ts}) for "
                    f"{table.qualified_name}: the sink needs events in commit order",
                    where=_where(ts, position),
                )
            if self._buffer_rows >= self.config.batch_rows:
                self._transaction()
            self._buffer_ts = ts
        return True

    def _write_block(self, block: RowBlock) -> None:
        """A block's segments as `write_event` takes each of its rows, kept columnar in the buffer."""
        shaped: dict[int, TableRows] = {}
        for seg, start in block.walk():
            ts = seg.commit_ts
            if not seg.rows or not self._admit(ts, seg.rows, block.tables[seg.table].table_schema, seg.row_position(0)):
                continue
            shards = self._shards
            if shards is not None and shards.locks and shards.hold_segment(block.tables[seg.table], start, seg):
                continue
            rows = shaped.get(seg.table)
            if rows is None:
                rows = block.tables[seg.table]
                shape = self._keys.shape(rows.table_schema, self._read_unique_indexes)
                if shape is not rows.table_schema:  # a new TableRows: the block's may be shared
                    rows = rows.with_schema(shape)
                shaped[seg.table] = rows
            entry = BlockRows(rows, start, seg)
            self._buffer.append(entry)
            self._count_pending(seg.rows, ts, entry.last_position)

    def _count_pending(self, rows: int, ts: int, position: Mapping[str, Any] | None) -> None:
        """``rows`` rows at commit ts ``ts`` taken into the next transaction (buffered, or held by a shard lock)."""
        self._buffer_rows += rows
        self._pending_ts = max(self._pending_ts, ts)
        if position is not None:
            self._pending_pos = position

    def flush(self) -> int:
        """Apply every buffered row and make the checkpoint durable; returns its commit ts.

        The caller asserts the buffer ends on an upstream transaction boundary (a micro-batch of
        whole transactions, or a Resolved event seen); a batch is the unit of downstream commit.
        """
        self._transaction()
        self._drain()
        return self._checkpoint_ts

    def flush_async(self) -> _InFlight:
        """`flush`'s transaction handed to the applier without waiting for it (`PipelinedSink`): done
        once it and every one before it committed (`wait` raises the first failure). A later `flush`
        or DDL waits for it too."""
        self._transaction()
        if self._applier is None or self._claimed is None:  # several workers applied it in `_transaction`
            return _InFlight(self, None, 0, self._checkpoint_ts)
        return _InFlight(self, self._applier, self._applier.submitted, self._checkpoint_ts)

    def _transaction(self) -> None:
        """The buffered rows (whole upstream transactions) and the checkpoint they reach, as one
        downstream transaction: handed to the applier with one worker, applied here with several.

        From here on the checkpoint ts counts as claimed (a later Resolved at or below it adds
        nothing); `_drain` makes it durable or raises the transaction's error.
        """
        self.open()
        if self._shards is not None and self._shards.locks:
            self._shards.take_released()
        rows, self._buffer = self._buffer, []
        count, self._buffer_rows = self._buffer_rows, 0
        held: list[tuple[ShardKey, RowChange]] = []
        if self._shards is not None:
            held, self._shards.held = self._shards.held, []
        if self._pending_ts <= self._checkpoint_ts:
            return  # nothing new (rows always advance the pending ts)
        last = self._claimed or self._checkpoint
        pending = Checkpoint(self._pending_ts, self._pending_pos if self._pending_pos is not None else _last_pos(last))
        self._pending_ts, self._pending_pos = 0, None
        if self._applier is not None:
            # One worker applies the transaction as planned here; several plan their own shares.
            prepared = self._prepare(rows) if self.config.workers == 1 else None
            self._applier.submit(lambda: self._apply(rows, count, pending, held, prepared))
            self._claimed = pending
        else:
            try:
                self._apply(rows, count, pending, held)
            except BaseException as exc:
                self._fail(exc)
                raise
        self._checkpoint_ts = pending.commit_ts
        self._guard.saw(pending.commit_ts, "the checkpoint committed")

    def _drain(self) -> None:
        """Wait for the applier's transactions; the first error fails the sink and is raised here."""
        if self._applier is None or self._claimed is None:
            return
        self._claimed = None
        try:
            self._applier.wait()
        except BaseException as exc:
            self._fail(exc)
            raise

    def _fail(self, exc: BaseException) -> None:
        self._failed = exc
        observer().sink_error("mysql", retried=False)

    def _apply(
        self,
        rows: list[Entry],
        count: int,
        pending: Checkpoint,
        held: Sequence[tuple[ShardKey, RowChange]] = (),
        prepared: Prepared | None = None,
    ) -> None:
        """One downstream transaction of ``rows`` reaching ``pending`` (the applier thread's work); ``held``:
        rows a shard DDL lock holds, stored in the same transaction (DM's pessimistic mode);
        ``prepared``: its statements, planned and rendered by `_prepare`."""
        started = time.monotonic()
        if self.config.workers == 1:
            store = self._shards.store if self._shards is not None else None
            after = None
            if held and store is not None:
                source = self.config.changefeed_id

                def after(conn: Connection) -> None:
                    store.hold(conn, source, held)

            self._apply_transaction(self._workers[0], rows, pending, after, prepared)
        else:
            self._apply_parallel(expand(rows))
            self._fault("checkpoint", {"commit_ts": pending.commit_ts})
            self._with_retry(self._coordinator, "save checkpoint", lambda c: self._save_checkpoint(c, pending))
        self._checkpoint = pending  # durable now (`checkpoint`)
        with self._stats_lock:
            self.stats["rows"] += count
        log.debug(
            "batch applied changefeed=%s rows=%d checkpoint_ts=%d safe_mode=%s seconds=%.3f",
            self.config.changefeed_id,
            count,
            pending.commit_ts,
            self.safe_mode,
            time.monotonic() - started,
        )

    # --- internals ---------------------------------------------------------------------------------

    def _fault(self, point: str, info: Mapping[str, Any]) -> None:
        if self.config.fault_hook is not None:
            self.config.fault_hook(point, info)

    def _save_checkpoint(self, conn: Connection, checkpoint: Checkpoint) -> None:
        self.checkpoint_table.save(conn, self.config.changefeed_id, checkpoint)
        if not conn.get_autocommit():
            conn.commit()

    def _backoff(self, attempt: int) -> float:
        return min(self.config.retry_backoff * (2 ** (attempt - 1)), self.config.retry_backoff_max)

    def _with_retry(self, session: _Session, what: str, action: Callable[[Connection], Any]) -> Any:
        """Run ``action`` on the session's connection, reconnecting on transient errors."""
        attempt = 0
        while True:
            try:
                return action(session.ensure())
            except (MySQLError, OSError) as exc:
                session.discard()
                if not is_transient(exc) or attempt >= self.config.max_retries:
                    raise SinkError(f"{what} on {self.params.url} failed: {mask_url(str(exc))}") from exc
                attempt += 1
                self._note_retry(session, what, exc, attempt)

    def _note_retry(self, session: _Session, what: str, exc: BaseException, attempt: int) -> None:
        with self._stats_lock:
            self.stats["retries"] += 1
        observer().sink_error("mysql", retried=True)
        delay = self._backoff(attempt)
        log.warning(
            "retrying after transient error changefeed=%s session=%s what=%s attempt=%d code=%s delay=%.2f error=%s",
            self.config.changefeed_id,
            session.name,
            what,
            attempt,
            error_code(exc),
            delay,
            mask_url(str(exc)),
            extra={"changefeed": self.config.changefeed_id, "attempt": attempt, "code": error_code(exc)},
        )
        time.sleep(delay)

    def _apply_transaction(
        self,
        session: _Session,
        rows: Sequence[Entry],
        checkpoint: Checkpoint | None,
        after: Callable[[Connection], object] | None = None,
        prepared: Prepared | None = None,
    ) -> None:
        """One downstream transaction: rows (+ ``after``'s statements, + the checkpoint upsert), re-run whole
        on transient errors (planned again: only the first try takes ``prepared``)."""
        safe = self.safe_mode
        attempt = 0
        where = _where_rows(rows, checkpoint)
        count = sum(1 if isinstance(e, RowChange) else e.seg.rows for e in rows)
        while True:
            try:
                conn = session.ensure()
                if attempt and checkpoint is not None and self._already_committed(conn, checkpoint):
                    log.info("transaction had committed before the connection was lost where=%s", where)
                    return
                if prepared is not None and not attempt:
                    ops, loads = prepared
                else:
                    try:
                        ops = plan_rows(rows, safe, self._mysql_json)
                    except ValueError as exc:
                        raise SinkError(str(exc), where=where) from None
                    loads = [self._load_statement(session, op, session.loads) for op in ops]
                conn.begin()
                loaded = self._run_ops(session, ops, loads, where)
                if after is not None:
                    after(conn)
                if checkpoint is not None:
                    self.checkpoint_table.save(conn, self.config.changefeed_id, checkpoint)
                self._fault("commit", {"session": session.name, "rows": count})
                conn.commit()
                with self._stats_lock:
                    self.stats["transactions"] += 1
                    self.stats["columnar_rows"] += sum(op.items.num_rows for op in ops if op.kind.endswith("_columns"))
                    self.stats["load_data_rows"] += loaded
                self._fault("committed", {"session": session.name, "rows": count})
                return
            except (MySQLError, OSError) as exc:
                session.discard()
                if not is_transient(exc) or attempt >= self.config.max_retries:
                    sql = getattr(exc, "sql", None)
                    detail = f" in statement {_clip(sql)}" if sql else ""
                    raise SinkError(
                        f"applying {count} rows on {self.params.url} failed{detail}: {mask_url(str(exc))}",
                        where=where,
                    ) from exc
                attempt += 1
                safe = True  # whatever part had landed (a commit whose answer was lost), replay converges
                self._note_retry(session, "transaction", exc, attempt)
            except BaseException:
                session.discard()  # a crash mid-transaction: the server rolls it back
                raise

    def _run_ops(
        self, session: _Session, ops: Sequence[PlannedOp], loads: Sequence[LoadStatement | None], where: str
    ) -> int:
        """The plan's statements in order, runs of inserts as LOAD DATA where `_load_statement` gave
        one (``loads``, one per op) and the session's server allows LOCAL; returns the rows loaded
        that way."""
        config = self.config
        waiting: list[PlannedOp] = []
        loaded = 0

        def send_waiting() -> None:
            if waiting:
                statements = render_ops(waiting, session.literal, config.statement_rows, config.statement_bytes)
                session.run(_rendered(statements, where), self._fault)
                waiting.clear()

        for op, load in zip(ops, loads, strict=True):
            if load is None or not session.loads:
                waiting.append(op)
                continue
            send_waiting()
            session.load(*load, self._fault)
            loaded += load[1].rows
        send_waiting()
        return loaded

    def _prepare(self, rows: Sequence[Entry]) -> Prepared | None:
        """A transaction's statements planned and its LOAD DATA rows rendered by the caller's thread,
        for the applier's first try (None: the applier plans, and raises what planning raises).

        Why here: rendering is ~60 Arrow calls a run, and each gives the GIL up; in the applier
        thread each call then waited for the GIL (up to the 5 ms switch interval) while this thread
        decoded the next rows: ~3x its CPU in wall time (bench/RESULTS.md). The applier now only
        sends and waits for the server. Before the session's first connection, rendered as if the
        server allows LOCAL (`want_load`); a session that finds it does not sends those runs as
        INSERTs (`_run_ops`).
        """
        session = self._workers[0]
        try:
            ops = plan_rows(rows, self.safe_mode, self._mysql_json)
        except ValueError:
            return None
        # Connected: the session knows whether its server allows LOCAL (MySQL 8's default does not).
        local = session.loads if session.conn is not None else session.want_load
        return ops, [self._load_statement(session, op, local) for op in ops]

    def _load_statement(self, session: _Session, op: PlannedOp, local: bool) -> LoadStatement | None:
        """The LOAD DATA of a run of whole-row inserts rendered from columns, None for the INSERT path.

        The one rule: LOAD DATA only where every column has a field that stores what its INSERT
        literal stores (`columns.load_fields`) and the server allows LOCAL (``local``: known, or
        expected); anything else, values that fail to render included, goes the INSERT way, which
        stores or raises as before.
        """
        if not local or op.kind not in _LOAD_KINDS:
            return None
        rows = op.items.num_rows if op.kind.endswith("_columns") else len(op.items)
        if rows < self.config.load_data_min_rows:
            return None
        try:
            return op.tsql.load_data(op.items, op.positions, op.kind.startswith("replace"), session.literal, LOAD_NAME)
        except (ValueError, TypeError, ArithmeticError, pa.ArrowException):
            log.debug("LOAD DATA rendering failed, the INSERT path takes the run", exc_info=True)
            return None

    def _already_committed(self, conn: Connection, checkpoint: Checkpoint) -> bool:
        stored = self.checkpoint_table.load(conn, self.config.changefeed_id)
        conn.commit()  # end the snapshot the read opened
        return stored is not None and stored.commit_ts >= checkpoint.commit_ts

    def _apply_parallel(self, rows: Sequence[RowChange]) -> None:
        """Route rows by causality into rounds; each round commits one transaction per busy worker."""
        causality = Causality(self.config.workers)
        shares: list[list[RowChange]] = [[] for _ in self._workers]
        for row in rows:
            keys = row_keys(row)
            worker = causality.route(keys)
            if worker is None:  # conflicts with two workers: let every worker finish first
                self._run_round(shares)
                shares = [[] for _ in self._workers]
                causality.reset()
                worker = causality.route(keys)
                assert worker is not None
            shares[worker].append(row)
        self._run_round(shares)

    def _run_round(self, shares: Sequence[Sequence[RowChange]]) -> None:
        assert self._pool is not None
        futures: list[Future[None]] = [
            self._pool.submit(self._apply_transaction, self._workers[i], share, None)
            for i, share in enumerate(shares)
            if share
        ]
        errors = []
        for f in futures:  # wait for every worker before failing: none may be mid-flight after
            try:
                f.result()
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _read_unique_indexes(self, schema: str, table: str) -> tuple[Index, ...]:
        return self._with_retry(self._coordinator, "read unique keys", lambda c: read_unique_indexes(c, schema, table))

    def _shard_skip(self, ddl: ShardDDL) -> str | None:
        """DM's optimistic shard DDL (shard.py): why a shard's DDL is skipped on its merged table, None to run it.

        A conflict is reported (`sink.observe`: metrics and ``changefeed status``) before it stops the job."""
        try:
            verdict = self._with_retry(self._coordinator, "read merged table columns", lambda c: shard_verdict(c, ddl))
        except ShardDDLConflictError as exc:
            report_shard_ddl(ddl, f"conflict: {exc.message}")
            raise
        return None if verdict.apply else f"done by another shard: {verdict.reason}"

    def _apply_ddl(self, ddl: DDLEvent) -> None:
        where = _where(ddl.commit_ts, ddl.position)
        self._keys.forget()  # the DDL may add, drop or rename unique indexes
        if ddl.commit_ts <= self._checkpoint_ts:
            self.stats["ddl_skipped"] += 1
            return
        try:
            check_ddl(ddl.query, self.config.sql_mode)
        except UnsafeDDLError as exc:
            raise SinkError(
                f"refusing the DDL of {_ddl_table(ddl) or '(no table)'} at commit_ts {ddl.commit_ts}: {exc}: "
                f"{_clip(ddl.query)!r}",
                where=where,
            ) from None
        if isinstance(ddl, ShardDDL) and self._shards is not None and self._shards.ddl(ddl):
            return
        if isinstance(ddl, ShardDDL) and ddl.action == ActionType.DROP_TABLE:
            skipped: str | None = "a shard's DROP TABLE is not run on its merged table"  # DM (router.route_ddl)
        else:
            skipped = self._shard_skip(ddl) if isinstance(ddl, ShardDDL) else None
        if not skipped:
            skipped = self._execute_ddl(ddl)
        if isinstance(ddl, ShardDDL):
            report_shard_ddl(ddl, f"skipped: {skipped}" if skipped else "applied")
        self._log_ddl(ddl, skipped)
        self._fault("ddl", {"commit_ts": ddl.commit_ts, "skipped": bool(skipped)})
        checkpoint = self._ddl_checkpoint(ddl)
        self._with_retry(self._coordinator, "save checkpoint", lambda c: self._save_checkpoint(c, checkpoint))
        self._checkpoint_saved(checkpoint, "the DDL applied")

    def _ddl_checkpoint(self, ddl: DDLEvent) -> Checkpoint:
        return Checkpoint(ddl.commit_ts, ddl.position if ddl.position is not None else _last_pos(self._checkpoint))

    def _checkpoint_saved(self, checkpoint: Checkpoint, what: str) -> None:
        self._checkpoint = checkpoint
        self._checkpoint_ts = checkpoint.commit_ts
        self._guard.saw(checkpoint.commit_ts, what)

    def _execute_ddl(self, ddl: DDLEvent) -> str | None:
        """Run the DDL text on the coordinator; returns why it was already done (an error saying so), or None."""
        where = _where(ddl.commit_ts, ddl.position)
        action = ddl.action
        use_schema = bool(ddl.schema) and action not in _SCHEMA_ACTIONS

        def run(conn: Connection) -> str | None:
            with conn.cursor() as cur:
                try:
                    if use_schema:
                        cur.execute(f"USE {quote_ident(ddl.schema)}")
                    cur.execute(ddl.query)
                    reason = None
                except MySQLError as exc:
                    if is_transient(exc):
                        raise
                    reason = ddl_already_done(error_code(exc), int(action))
                    if reason is None:
                        raise SinkError(
                            f"DDL {_clip(ddl.query)!r} failed on {self.params.url}: {mask_url(str(exc))}", where=where
                        ) from exc
                    reason = f"{reason} ({error_code(exc)})"
            self._coordinator.restore(conn)  # whatever the DDL text did to the session, undo it
            return reason

        return self._with_retry(self._coordinator, f"DDL {_clip(ddl.query, 80)!r}", run)

    def _log_ddl(self, ddl: DDLEvent, skipped: str | None) -> None:
        extra = {"changefeed": self.config.changefeed_id, "commit_ts": ddl.commit_ts, "table": _ddl_table(ddl)}
        if skipped:
            self.stats["ddl_skipped"] += 1
            log.info(
                "DDL already done, skipped changefeed=%s reason=%s commit_ts=%d query=%s",
                self.config.changefeed_id,
                skipped,
                ddl.commit_ts,
                _clip(ddl.query),
                extra=extra,
            )
        else:
            self.stats["ddl"] += 1
            log.info(
                "DDL applied changefeed=%s commit_ts=%d query=%s",
                self.config.changefeed_id,
                ddl.commit_ts,
                _clip(ddl.query),
                extra=extra,
            )


def _last_pos(checkpoint: Checkpoint | None) -> Mapping[str, Any] | None:
    return checkpoint.position if checkpoint is not None else None


def _where(commit_ts: int, position: Mapping[str, Any] | None) -> str:
    return f"commit_ts {commit_ts}" + (f", position {dict(position)}" if position else "")


def _where_rows(rows: Sequence[Entry], checkpoint: Checkpoint | None) -> str:
    if not rows:
        return _where(checkpoint.commit_ts, checkpoint.position) if checkpoint else "checkpoint"
    first, last = rows[0], rows[-1]
    text = f"commit_ts {first.commit_ts}..{last.commit_ts}"
    position = last.last_position if isinstance(last, BlockRows) else last.position
    if position:
        text += f", position {dict(position)}"
    return text


def _rendered(statements: Iterator[tuple[str, int]], where: str) -> Iterator[tuple[str, int]]:
    """``statements``, a value that has no SQL literal (NaN, an unknown type) raised as a SinkError."""
    try:
        yield from statements
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise SinkError(f"rendering SQL failed: {exc}", where=where) from exc


def _clip(text: str | None, limit: int = 300) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _ddl_table(ddl: DDLEvent) -> str:
    """``schema.table`` a DDL changes (``schema`` for a database-level DDL), for the ``table`` log field."""
    return f"{ddl.schema}.{ddl.table}" if ddl.table else ddl.schema
