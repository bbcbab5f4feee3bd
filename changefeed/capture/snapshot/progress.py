"""A snapshot in progress as JSON, so a streaming offset can hold it; one micro-batch's chunks read from it.

A streaming job (the Spark ``binlog`` input) cannot keep the hand-over's state in memory: a crash
would lose which chunks were emitted and at which high watermarks. So the whole state lives in
the offset Spark logs for each micro-batch (`SnapshotProgress`): the binlog position taken before
the tables were listed (where the binlog stream will start), each table's chunk boundaries (cut
when the table's first chunk is due) and the high watermark of every chunk emitted so far, the
next chunk, and the last commit ts handed out. A restarted job resumes at the next chunk; once
every chunk is read, `HandoverState` (the same tables, boundaries and highs) travels with the
binlog offsets until the stream has passed the last high watermark (docs/snapshot.md).

Key values are model values; in JSON they are tagged where JSON would lose them (`key_to_json`).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from decimal import Decimal
from typing import Any

from ...errors import CaptureError
from ...model import ActionType
from ...model.events import DDLEvent, Event, Op, Resolved, RowChange
from ...model.jsonl import column_definition, column_from_definition, dumps_event, dumps_events, dumps_insert_values
from ...model.schema import TableSchema
from ...model.tso import CommitClock
from ..binlog.position import BinlogPosition
from .chunks import Row, ranges
from .columns import ChunkColumns
from .handover import Handover, TableCut
from .order import Key, KeyOrder, PythonOrder, python_orderable
from .reader import ChunkResult, Connect, DatabaseOrder, SnapshotReader, TablePlan, master_status, position_key

log = logging.getLogger(__name__)

#: Schemas never snapshotted (the server's own; TiCDC and DM skip them too).
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


# ---------------------------------------------------------------------------------------- key values


def value_to_json(value: Any) -> Any:
    """A key value as JSON: ints and strings as they are, others tagged (bytes, Decimal, float)."""
    if isinstance(value, bool):
        raise TypeError(f"no key value is a bool: {value!r}")
    if value is None or isinstance(value, int | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Decimal):
        return {"d": format(value, "f")}
    if isinstance(value, float):
        return {"f": value.hex()}
    raise TypeError(f"cannot write key value {value!r} as JSON")


def value_from_json(raw: Any) -> Any:
    if isinstance(raw, dict) and len(raw) == 1:
        ((tag, text),) = raw.items()
        if tag == "b":
            return base64.b64decode(text)
        if tag == "d":
            return Decimal(text)
        if tag == "f":
            return float.fromhex(text)
    if raw is None or (isinstance(raw, int | str) and not isinstance(raw, bool)):
        return raw
    raise CaptureError(f"bad key value in a snapshot offset: {raw!r}")


def key_to_json(key: Key) -> list[Any]:
    return [value_to_json(v) for v in key]


def key_from_json(raw: Sequence[Any]) -> Key:
    return tuple(value_from_json(v) for v in raw)


def _pos(raw: Sequence[Any]) -> BinlogPosition:
    return BinlogPosition(str(raw[0]), int(raw[1]))


# ---------------------------------------------------------------------------------------- state


@dataclass
class TableState:
    """One table of the snapshot: its chunk key and boundaries once planned, and the highs of the chunks read."""

    name: tuple[str, str]
    planned: bool = False
    key: tuple[str, ...] = ()
    columns: list[dict[str, Any]] = field(default_factory=list)  # the key columns' definitions (model.jsonl)
    bounds: list[Key] = field(default_factory=list)
    highs: list[BinlogPosition] = field(default_factory=list)

    @property
    def chunks(self) -> int:
        return len(self.bounds) + 1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": list(self.name)}
        if self.planned:
            out.update(
                key=list(self.key),
                columns=self.columns,
                bounds=[key_to_json(b) for b in self.bounds],
                highs=[[h.file, h.pos] for h in self.highs],
            )
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> TableState:
        schema, table = obj["name"]
        state = cls((str(schema), str(table)))
        if "key" in obj:
            state.planned = True
            state.key = tuple(str(k) for k in obj["key"])
            state.columns = list(obj.get("columns") or [])
            state.bounds = [key_from_json(b) for b in obj.get("bounds") or []]
            state.highs = [_pos(h) for h in obj.get("highs") or []]
        return state

    def cut(self, order: KeyOrder) -> TableCut:
        return TableCut(self.key, self.bounds, [position_key(h) for h in self.highs], order)

    def order(self, connect: Connect | None, tz: tzinfo = UTC) -> KeyOrder:
        """The database's key order (`order.py`): Python's where it agrees, else ranked by the source."""
        columns = [column_from_definition(c) for c in self.columns]
        if python_orderable(columns):
            return PythonOrder()
        if connect is None:
            raise CaptureError(f"the key of {'.'.join(self.name)} needs the source's order, and no source is given")
        return DatabaseOrder(connect, columns, tz)


@dataclass
class SnapshotProgress:
    """The snapshot as far as a micro-batch got (module docstring); ``batch``/``chunks`` name that batch's spill."""

    start: BinlogPosition
    tables: list[TableState]
    table: int = 0  # the next chunk: table index ...
    chunk: int = 0  # ... and chunk index within it
    clock: int = 0  # the last commit ts handed out
    batch: int = 0  # micro-batches that read chunks so far (this offset's batch number when ``chunks``)
    chunks: int = 0  # chunks this offset's batch read (its spilled files)
    spill: str = ""  # that batch's spill id

    @property
    def done(self) -> bool:
        return self.table >= len(self.tables)

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": [self.start.file, self.start.pos],
            "tables": [t.to_dict() for t in self.tables],
            "next": [self.table, self.chunk],
            "clock": self.clock,
            "batch": self.batch,
            "chunks": self.chunks,
            "spill": self.spill,
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SnapshotProgress:
        try:
            table, chunk = obj.get("next") or (0, 0)
            return cls(
                _pos(obj["start"]),
                [TableState.from_dict(t) for t in obj.get("tables") or []],
                int(table),
                int(chunk),
                int(obj.get("clock", 0)),
                int(obj.get("batch", 0)),
                int(obj.get("chunks", 0)),
                str(obj.get("spill", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CaptureError(f"bad snapshot progress in an offset: {exc!r}") from None

    def binlog_start(self) -> BinlogPosition:
        """Where the binlog stream takes over: the position before the tables were listed, with the snapshot's clock.

        Earlier than every chunk's low watermark, so a table created while the snapshot ran is
        captured from its CREATE on; changes a chunk already holds are dropped by the hand-over.
        """
        return BinlogPosition(self.start.file, self.start.pos, clock=self.clock)

    def handover(self) -> HandoverState:
        return HandoverState([t for t in self.tables if t.planned])


@dataclass
class HandoverState:
    """The snapshotted tables' cuts, carried with the binlog offsets until the stream passes ``until``."""

    tables: list[TableState]

    @property
    def until(self) -> BinlogPosition | None:
        highs = [h for t in self.tables for h in t.highs]
        return max(highs, key=position_key) if highs else None

    def to_dict(self) -> dict[str, Any]:
        return {"tables": [t.to_dict() for t in self.tables]}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> HandoverState:
        return cls([TableState.from_dict(t) for t in obj.get("tables") or []])

    def passed(self, file: str, pos: int) -> bool:
        until = self.until
        return until is None or position_key(BinlogPosition(file, pos)) >= position_key(until)

    def build(self, connect: Connect | None, tz: tzinfo = UTC) -> Handover:
        return Handover({t.name: t.cut(t.order(connect, tz)) for t in self.tables})


def close_orders(handover: Handover) -> None:
    for cut in handover.tables.values():
        if isinstance(cut.order, DatabaseOrder):
            cut.order.close()


# ---------------------------------------------------------------------------------------- reading


def list_tables(connect: Connect, keeps: Callable[[str, str], bool]) -> tuple[BinlogPosition, list[tuple[str, str]]]:
    """The binlog position now, then the base tables the filter keeps (system schemas never), in name order."""
    conn = connect()
    try:
        with conn.cursor() as cur:
            start = master_status(cur)
            cur.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "ORDER BY table_schema, table_name"
            )
            names = [(str(s), str(t)) for s, t in cur.fetchall()]
    finally:
        conn.close()
    return start, [n for n in names if n[0].lower() not in SYSTEM_SCHEMAS and keeps(*n)]


def begin(connect: Connect, keeps: Callable[[str, str], bool], clock: int = 0) -> SnapshotProgress:
    """A new snapshot of the tables ``keeps`` selects, nothing read yet."""
    start, names = list_tables(connect, keeps)
    log.info("snapshot of %d tables; the binlog takes over from %s", len(names), start)
    return SnapshotProgress(start, [TableState(n) for n in names], clock=clock)


@dataclass
class ReadChunk:
    """A chunk read in a micro-batch: the DDL before a table's first chunk, its rows as INSERTs at
    ``commit_ts``, a `Resolved` (`events`)."""

    table: tuple[str, str]
    index: int
    head: list[Event]
    schema: TableSchema
    commit_ts: int
    selected: list[Row] | ChunkColumns
    _jsonl: bytes | None = field(default=None, repr=False)

    @property
    def rows(self) -> int:
        return len(self.selected)

    @property
    def resolved(self) -> Resolved:
        return Resolved(self.commit_ts, position={"snapshot": {"table": list(self.table), "chunk": self.index}})

    @property
    def events(self) -> list[Event]:
        rows = self.selected.rows() if isinstance(self.selected, ChunkColumns) else self.selected
        inserts = [RowChange(Op.INSERT, self.schema, self.commit_ts, new=row) for row in rows]
        return [*self.head, *inserts, self.resolved]

    @property
    def jsonl(self) -> bytes:
        """The chunk's events as JSONL: what a micro-batch spills and hands to its tasks (made once).

        The rows (INSERTs of one table at one commit ts) go as one ``inserts`` line
        (`model.jsonl.dumps_events`): the table's definition once instead of once a row; rows read
        as columns are written from the columns (`model.jsonl.dumps_insert_values`), the same bytes.
        """
        if self._jsonl is None:
            # One row goes as a row line (`dumps_events`' rule), two or more as an ``inserts`` line.
            if isinstance(self.selected, ChunkColumns) and len(self.selected) > 1:
                inserts = dumps_insert_values(self.schema, self.commit_ts, self.selected.rows_json())
                self._jsonl = dumps_events(self.head) + inserts + dumps_event(self.resolved)
            else:
                self._jsonl = dumps_events(self.events)
        return self._jsonl


class BatchReader:
    """Reads a micro-batch's chunks of a `SnapshotProgress` (plans kept across batches in this process)."""

    def __init__(self, reader: SnapshotReader, parallelism: int = 1, read_ahead: bool = False) -> None:
        """``read_ahead``: once a batch's chunks are read, read as many of the next ones in the
        background (`read`), so that they are read while Spark writes this batch."""
        self.reader = reader
        self.parallelism = max(1, parallelism)
        self.read_ahead = read_ahead
        self._plans: dict[tuple[str, str], TablePlan] = {}
        self._ahead: dict[Hashable, Future[ChunkResult]] = {}
        self._ahead_pool: ThreadPoolExecutor | None = None
        self._started = False

    def _plan(self, state: TableState) -> TablePlan:
        plan = self._plans.get(state.name)
        if plan is not None and plan.key == state.key and plan.boundaries == state.bounds:
            return plan
        plan = self._plans[state.name] = plan_table(self.reader, state)
        return plan

    def next_chunks(self, progress: SnapshotProgress, count: int) -> list[tuple[int, TablePlan, int]]:
        """The next ``count`` chunks (table index, plan, chunk index) from ``progress``'s next one."""
        jobs: list[tuple[int, TablePlan, int]] = []
        ti, ci = progress.table, progress.chunk
        while len(jobs) < count and ti < len(progress.tables):
            if not progress.tables[ti].planned and not self.reader.exists(*progress.tables[ti].name):
                log.info("snapshot: %s.%s was dropped before its first chunk; skipped", *progress.tables[ti].name)
                del progress.tables[ti]  # its DROP is in the binlog after the snapshot's start
                continue
            plan = self._plan(progress.tables[ti])
            while len(jobs) < count and ci < len(plan.ranges):
                jobs.append((ti, plan, ci))
                ci += 1
            if ci >= len(plan.ranges):
                ti, ci = ti + 1, 0
        return jobs

    def read(self, progress: SnapshotProgress, max_rows: int | None, max_bytes: int | None = None) -> list[ReadChunk]:
        """The next chunks, ``parallelism`` at a time, until about ``max_rows`` rows or ``max_bytes``
        bytes of their JSONL (`ReadChunk.jsonl`), whichever comes first (at least one round of chunks).

        Advances ``progress`` (next chunk, highs, clock) in place; chunks come back in plan order.
        With ``read_ahead``, the chunks after them are read in the background next (`_read_ahead`),
        and a later call takes those it asks for from there.
        """
        out: list[ReadChunk] = []
        clock = CommitClock(progress.clock)
        rows = size = 0
        ahead, self._ahead = self._ahead, {}
        # Reading ahead, the first batch is one round of chunks: it is written while the next is read.
        rounds = 1 if self.read_ahead and not self._started else None
        self._started = True
        pool = ThreadPoolExecutor(max_workers=self.parallelism, thread_name_prefix="snapshot")
        try:
            while (
                not progress.done
                and (max_rows is None or rows < max_rows)
                and (max_bytes is None or size < max_bytes)
                and (rounds is None or rounds > 0)
            ):
                rounds = None if rounds is None else rounds - 1
                jobs = self.next_chunks(progress, self.parallelism)
                if not jobs:
                    break
                pending: list[tuple[Future[ChunkResult], bool]] = []  # (the read, whether read ahead)
                for _, plan, ci in jobs:
                    early = ahead.pop(_job_key(plan, ci), None)
                    pending.append(
                        (early, True) if early is not None else (pool.submit(self.reader.read_chunk, plan, ci), False)
                    )
                results = [
                    _ahead_result(f, plan, ci, self.reader) if was_ahead else f.result()
                    for (f, was_ahead), (_, plan, ci) in zip(pending, jobs, strict=True)
                ]
                for (ti, plan, ci), result in zip(jobs, results, strict=True):
                    state = progress.tables[ti]
                    chunk = self.chunk(progress, ti, plan, result, clock)
                    state.highs.append(result.high)
                    out.append(chunk)
                    rows += chunk.rows
                    size += len(chunk.jsonl) if max_bytes is not None else 0
                    progress.table, progress.chunk = (ti, ci + 1) if ci + 1 < len(plan.ranges) else (ti + 1, 0)
        finally:
            pool.shutdown(wait=True)
            for future in ahead.values():  # read ahead for a batch that went otherwise
                future.cancel()
        progress.clock = clock.last
        if self.read_ahead and out:
            rounds_ahead = -(-chunks_within(out, max_rows, max_bytes) // self.parallelism)
            self._read_ahead(progress, rounds_ahead * self.parallelism)
        return out

    def _read_ahead(self, progress: SnapshotProgress, count: int) -> None:
        """Start reading the ``count`` chunks after ``progress`` in the background, as far as its
        tables are planned in this process (planning stays in `read`)."""
        jobs: list[tuple[TablePlan, int]] = []
        ti, ci = progress.table, progress.chunk
        while len(jobs) < count and ti < len(progress.tables):
            state = progress.tables[ti]
            plan = self._plans.get(state.name)
            if not state.planned or plan is None or plan.key != state.key or plan.boundaries != state.bounds:
                break
            while len(jobs) < count and ci < len(plan.ranges):
                jobs.append((plan, ci))
                ci += 1
            ti, ci = ti + 1, 0
        if not jobs:
            return
        if self._ahead_pool is None:
            self._ahead_pool = ThreadPoolExecutor(max_workers=self.parallelism, thread_name_prefix="snapshot-ahead")
        self._ahead = {_job_key(plan, i): self._ahead_pool.submit(self._read_early, plan, i) for plan, i in jobs}

    def _read_early(self, plan: TablePlan, index: int) -> ChunkResult:
        """A chunk read ahead, its rows' JSON made too (the spill's bulk: off the next offset's path)."""
        result = self.reader.read_chunk(plan, index)
        if isinstance(result.selected, ChunkColumns):
            result.selected.rows_json()
        return result

    def close(self) -> None:
        """Stop reading ahead (what is being read is dropped)."""
        for future in self._ahead.values():
            future.cancel()
        self._ahead = {}
        if self._ahead_pool is not None:
            self._ahead_pool.shutdown(wait=False, cancel_futures=True)
            self._ahead_pool = None

    def chunk(
        self, progress: SnapshotProgress, ti: int, plan: TablePlan, result: ChunkResult, clock: CommitClock
    ) -> ReadChunk:
        """A read chunk's events (CREATE DATABASE before the first of its schema's tables in ``progress``)."""
        first_of_schema = not any(t.name[0] == plan.name[0] for t in progress.tables[:ti])
        return events_of_chunk(self.reader, plan, result, clock, first_of_schema)


def _ahead_result(future: Future[ChunkResult], plan: TablePlan, index: int, reader: SnapshotReader) -> ChunkResult:
    """A chunk read ahead; read again now if that read failed (and raise then if it must)."""
    try:
        return future.result()
    except Exception as exc:
        log.info("snapshot chunk %s #%d: the read ahead failed (%s); read again", ".".join(plan.name), index, exc)
        return reader.read_chunk(plan, index)


def chunks_within(chunks: Sequence[ReadChunk], max_rows: int | None, max_bytes: int | None) -> int:
    """How many chunks like ``chunks`` a batch of ``max_rows`` rows / ``max_bytes`` bytes takes (what to read ahead)."""
    n = len(chunks)
    rows, size = sum(c.rows for c in chunks), sum(len(c.jsonl) for c in chunks)
    bounds = [-(-limit * n // got) for limit, got in ((max_rows, rows), (max_bytes, size)) if limit and got]
    return max(n, min(bounds)) if bounds else n


def _job_key(plan: TablePlan, index: int) -> Hashable:
    """A chunk as cut: the same key for the same table, key, boundaries and chunk index."""
    return (plan.name, plan.key, tuple(plan.boundaries), index)


def plan_table(reader: SnapshotReader, state: TableState) -> TablePlan:
    """``state``'s chunks: cut now (and recorded in ``state``) if not yet planned, else its recorded
    boundaries over the table's shape today (planned by an earlier process or another task)."""
    if state.planned:
        return TablePlan(reader.table_schema(*state.name), state.key, ranges(state.bounds))
    plan = reader.plan(*state.name)
    state.planned, state.key = True, plan.key
    state.columns = [column_definition(plan.schema.column(n)) for n in plan.key]
    state.bounds = list(plan.boundaries)
    return plan


def events_of_chunk(
    reader: SnapshotReader, plan: TablePlan, result: ChunkResult, clock: CommitClock, first_of_schema: bool
) -> ReadChunk:
    """A chunk's events: the DDL before a table's first chunk, its rows as INSERTs at one commit ts, a `Resolved`."""
    ms = result.commit_ts >> 18
    events: list[Event] = []
    if result.index == 0:  # each DDL at a ts of its own, before the rows' (a DDL's ts closes everything below)
        events += _ddl(reader, plan, first_of_schema, lambda: clock.next(ms))
    ts = clock.next(ms)
    return ReadChunk(plan.name, result.index, events, plan.schema, ts, result.selected)


def _ddl(reader: SnapshotReader, plan: TablePlan, first_of_schema: bool, ts: Callable[[], int]) -> list[Event]:
    """CREATE DATABASE (before the schema's first table) and CREATE TABLE, so a downstream without them gets them.

    DM's dump carries the schema the same way; both statements are no-ops where the objects
    exist (the MySQL sink takes "exists" as done, TiCDC's rule).
    """
    schema, table = plan.name
    events: list[Event] = []
    if first_of_schema:
        query = f"CREATE DATABASE IF NOT EXISTS {_quote(schema)}"
        events.append(DDLEvent(schema, "", query, int(ActionType.CREATE_SCHEMA), ts()))
    query = reader.create_table(schema, table)
    events.append(DDLEvent(schema, table, query, int(ActionType.CREATE_TABLE), ts(), table_schema=plan.schema))
    return events


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spill_names(progress: SnapshotProgress) -> Iterator[str]:
    """The file names of the chunks the offset's batch read (one per chunk, in order)."""
    for k in range(progress.chunks):
        yield f"{progress.batch:010d}-{progress.spill}-{k:05d}.jsonl"
