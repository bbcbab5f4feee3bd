"""The ``binlog`` input's snapshot phase (docs/snapshot.md "In a Spark job"): options, spilled chunks, offsets;
and the batch read's chunks, each read by its own task (`snapshot_partitions`).

While a snapshot runs, an offset is ``{"snapshot": SnapshotProgress, "file", "pos"}`` (file/pos:
where the binlog will take over, so the preflight checks it is not purged). The planning process
reads a micro-batch's chunks itself when Spark asks for the next offset, because the offset must
hold their high watermarks; it writes the chunks' events to the spill directory (fsynced) before
it returns the offset, so a micro-batch re-run after a crash emits the very same rows at the same
commit ts, and the sinks' replay rules drop what they already hold. Chunk files of committed
batches are deleted when Spark reports the commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ...capture.binlog.replica import ServerAddress
from ...capture.snapshot.columns import ChunkColumns
from ...capture.snapshot.progress import (
    ReadChunk,
    SnapshotProgress,
    TableState,
    events_of_chunk,
    plan_table,
    spill_names,
)
from ...capture.snapshot.progress import begin as begin_snapshot
from ...capture.snapshot.reader import DEFAULT_CHUNK_SIZE, SnapshotReader, replica_window
from ...clients.mysql import MySQLParams
from ...errors import ConfigError, positive_int, true_false
from ...files.store import StateStore, local_path
from ...model.tso import CommitClock
from ...timezones import zone
from ..changelog import ChangelogRows

log = logging.getLogger(__name__)

#: Debezium's ``snapshot.mode`` words: ``initial`` (snapshot, then the binlog), ``never``,
#: ``initial-only`` (the snapshot alone), ``when-needed`` (only if the start position is missing or purged).
MODES = ("initial", "never", "initial-only", "when-needed")
#: ``snapshotParallelism`` by default: DM's dump threads default (mydumper ``threads``).
DEFAULT_PARALLELISM = 4
#: The most a snapshot micro-batch spills and hands to its tasks by default (JSONL bytes), whatever
#: its rows: the chunks travel inside Spark's partitions, through the driver's JVM, and 131,072
#: rows of a 10-column table (~140 MB of JSONL) ran a 1 GB driver out of heap
#: (bench/RESULTS.md, "Snapshot batches bounded in bytes"). ``maxBytesPerTrigger`` sets it instead.
DEFAULT_BATCH_BYTES = 32 * 1024 * 1024
SNAPSHOT = "snapshot"


#: Rows per chunk of a snapshot on demand unless ``snapshotOnDemandChunkSize`` says (and never more
#: than ``snapshotChunkSize``): each micro-batch of one reads and applies a chunk, which the live
#: stream's changes wait for; 2048-row chunks kept its lag within ~0.05 s of its baseline where
#: 8192-row ones added ~0.11 s at p50 (bench/RESULTS.md). Debezium's incremental snapshots: 1024.
DEFAULT_ON_DEMAND_CHUNK_SIZE = 2048


@dataclass(frozen=True)
class SnapshotOptions:
    """The input's ``snapshot``, ``snapshotChunkSize``, ``snapshotOnDemandChunkSize``,
    ``snapshotParallelism``, ``snapshotDir`` and ``snapshotDirShared`` options.

    ``snapshotDirShared=true`` (set by the jobs in local mode): whatever reads a batch's partitions
    (executors, the driver) sees ``snapshotDir``, so a partition names its chunk's spill file instead
    of carrying the chunk, and the chunks never pass through Spark's JVM (bench/RESULTS.md,
    "Initial snapshot"). On a cluster the chunks travel inside the partitions.
    """

    mode: str = "never"
    chunk_size: int = DEFAULT_CHUNK_SIZE
    parallelism: int = DEFAULT_PARALLELISM
    spill: str | None = None  # a directory or URI (`changefeed.files.store`)
    shared: bool = False
    on_demand_chunk_size: int = DEFAULT_ON_DEMAND_CHUNK_SIZE

    @classmethod
    def parse(cls, extra: Mapping[str, str]) -> SnapshotOptions:
        mode = (extra.get("snapshot") or "never").strip().lower().replace("_", "-")
        if mode not in MODES:
            raise ConfigError(f"option snapshot must be one of {', '.join(MODES)}, got {mode!r}")
        size = extra.get("snapshotchunksize")
        par = extra.get("snapshotparallelism")
        spill = extra.get("snapshotdir")
        shared = true_false(extra.get("snapshotdirshared", "false"), "snapshotDirShared")
        chunk_size = positive_int(size, "snapshotChunkSize") if size else DEFAULT_CHUNK_SIZE
        on_demand = extra.get("snapshotondemandchunksize")
        return cls(
            mode,
            chunk_size,
            positive_int(par, "snapshotParallelism") if par else DEFAULT_PARALLELISM,
            spill or None,
            shared and spill is not None and local_path(spill) is not None,
            positive_int(on_demand, "snapshotOnDemandChunkSize")
            if on_demand
            else min(chunk_size, DEFAULT_ON_DEMAND_CHUNK_SIZE),
        )

    @property
    def on(self) -> bool:
        return self.mode != "never"


def is_snapshot(offset: Mapping[str, Any]) -> bool:
    return SNAPSHOT in offset


def pending() -> dict[str, Any]:
    """The initial offset of a snapshot not begun: deterministic, so a restart before batch 0 commits plans the same."""
    return {SNAPSHOT: {"pending": True}}


def progress_of(offset: Mapping[str, Any]) -> SnapshotProgress | None:
    """The offset's snapshot progress; None for the pending marker."""
    body = offset[SNAPSHOT]
    return None if body.get("pending") else SnapshotProgress.from_dict(body)


def offset_of(progress: SnapshotProgress) -> dict[str, Any]:
    return {SNAPSHOT: progress.to_dict(), "file": progress.start.file, "pos": progress.start.pos}


class SpillStore:
    """A micro-batch's chunk events until the batch is committed: files in a state store, or memory without one.

    Memory is enough for a batch read (one process, no restart); a streaming job gets a directory
    beside its checkpoint (`changefeed.spark.jobs.plan` sets ``snapshotDir``).
    """

    def __init__(self, store: StateStore | None) -> None:
        self.store = store
        self._memory: dict[str, bytes] = {}

    def write(self, progress: SnapshotProgress, chunks: Sequence[ReadChunk]) -> None:
        """Give ``progress`` a new spill id for ``chunks`` and store them durably before the offset is returned."""
        progress.batch += 1
        progress.spill = uuid.uuid4().hex[:12]
        progress.chunks = len(chunks)
        files = list(zip(spill_names(progress), (c.jsonl for c in chunks), strict=True))
        if self.store is None:
            self._memory.update(files)
            return
        store = self.store
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="spill") as pool:  # fsyncs side by side
            list(pool.map(lambda f: store.write(*f), files))

    def read(self, progress: SnapshotProgress) -> list[str]:
        """The JSONL events of each chunk the offset's batch read, in order."""
        out: list[str] = []
        for name in spill_names(progress):
            data = self._memory.get(name) if self.store is None else self.store.read(name)
            if data is None:
                raise self._gone(progress)
            out.append(data.decode())
        return out

    def paths(self, progress: SnapshotProgress) -> list[Path]:
        """The spill file of each chunk the offset's batch read, in order (a local spill directory only)."""
        assert self.store is not None and self.store.local is not None
        out = [self.store.local / name for name in spill_names(progress)]
        if not all(path.is_file() for path in out):
            raise self._gone(progress)
        return out

    def _gone(self, progress: SnapshotProgress) -> ConfigError:
        where = self.store.where if self.store is not None else "memory (no snapshotDir)"
        return ConfigError(
            f"the snapshot chunks of micro-batch {progress.batch} are gone from {where}: "
            "the checkpoint cannot be resumed; delete it (and the downstream's copy) to snapshot again"
        )

    def prune(self, progress: SnapshotProgress) -> None:
        """Drop the chunks of ``progress``'s batch and every earlier one (Spark committed it)."""
        names = list(self._memory) if self.store is None else self.store.names()
        for name in names:
            head = name.split("-", 1)[0]
            if head.isdigit() and int(head) <= progress.batch:
                if self.store is None:
                    del self._memory[name]
                else:
                    self.store.delete(name)


# ---------------------------------------------------------------------------------------- batch reads


class LiveServer(Protocol):
    """What a snapshot task needs of the binlog input's live source (`binlog.BinlogServer`)."""

    @property
    def address(self) -> ServerAddress: ...

    def params(self) -> MySQLParams: ...


def snapshot_reader(server: LiveServer, time_zone: str, chunk_size: int) -> SnapshotReader:
    params = server.params()
    tz = zone(time_zone)
    return SnapshotReader(
        lambda: params.connect(autocommit=True), replica_window(server.address, tz), tz=tz, chunk_size=chunk_size
    )


#: Rows a batch read's task reads, in chunks of the chunk size (at least one chunk): each task cost
#: Spark's JVM ~55 ms of CPU (its Parquet writer, the task's commit), so a task a chunk of 8192 rows
#: spent 17 µs a row there against 11 with 65536 rows a task (bench/RESULTS.md, "Initial snapshot").
ROWS_PER_TASK = 65536


@dataclass
class SnapshotChunks(InputPartition):
    """Consecutive chunks of one table for a batch read, read in their task one after the other:
    low watermark, SELECT, high watermark, and the binlog between reconciled (docs/snapshot.md), on
    the task's own connections; each chunk's rows go to Spark before the next is read.

    Why not read in the planning process as a stream does: a stream's next offset must hold each
    chunk's high watermark, a batch read has no next offset; here memory holds one chunk per task
    and the chunks are read as parallel as Spark's tasks run.
    """

    server: LiveServer  # pickled into the task with its credentials, never put in a row
    table: str  # the table's `TableState` (key, boundaries) as JSON
    indexes: tuple[int, ...]
    first_of_schema: bool  # the table's first chunk also emits CREATE DATABASE
    chunk_size: int
    time_zone: str
    changelog: ChangelogRows

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[pa.RecordBatch]:
        """The chunks as record batches: PySpark passes them on after a schema check, where tuples
        cost it a conversion per value. A chunk read as lines goes to Arrow a column at a time
        (`ChunkColumns.model_arrays`, `ChangelogRows.inserts_batch`); any other as its tuples."""
        reader = snapshot_reader(self.server, self.time_zone, self.chunk_size)
        plan = plan_table(reader, TableState.from_dict(orjson.loads(self.table)))
        for index in self.indexes:
            result = reader.read_chunk(plan, index)
            yield from self._batches(events_of_chunk(reader, plan, result, CommitClock(), self.first_of_schema))

    def _batches(self, chunk: ReadChunk) -> Iterator[pa.RecordBatch]:
        changelog = self.changelog
        if isinstance(chunk.selected, ChunkColumns):
            inserts = changelog.inserts_batch(chunk.schema, chunk.commit_ts, chunk.selected.model_arrays())
            if inserts is not None:  # the DDL before the rows, the Resolved after them
                yield from changelog.batches(changelog.rows(chunk.head))
                yield inserts
                yield from changelog.batches(changelog.rows([chunk.resolved]))
                return
        yield from changelog.batches(changelog.rows(chunk.events))


def snapshot_partitions(
    server: LiveServer, time_zone: str, chunk_size: int, changelog: ChangelogRows
) -> list[SnapshotChunks]:
    """A batch read of the tables ``changelog`` keeps: each cut into chunks now, `ROWS_PER_TASK` rows
    of a table's consecutive chunks a partition.

    Each row is the table's row as of its chunk's high watermark (DBLog's rule), so a table read
    while it changes holds no torn or doubled rows; chunks of one table may be of different moments.
    """
    reader = snapshot_reader(server, time_zone, chunk_size)
    progress = begin_snapshot(reader.connect, changelog.keeps)
    per_task = max(1, ROWS_PER_TASK // chunk_size)
    out: list[SnapshotChunks] = []
    schemas: set[str] = set()
    chunks = 0
    for state in progress.tables:
        if not reader.exists(*state.name):
            continue  # dropped since it was listed
        plan = plan_table(reader, state)
        table = orjson.dumps(state.to_dict()).decode()
        first = state.name[0] not in schemas
        schemas.add(state.name[0])
        indexes = range(len(plan.ranges))
        chunks += len(indexes)
        out += [
            SnapshotChunks(server, table, tuple(indexes[i : i + per_task]), first, chunk_size, time_zone, changelog)
            for i in range(0, len(indexes), per_task)
        ]
    n_tables = len(progress.tables)
    log.info("snapshot batch read: %d tables, %d chunks of %d rows in %d tasks", n_tables, chunks, chunk_size, len(out))
    return out
