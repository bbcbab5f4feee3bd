"""The job status file: a small JSON document a running Spark job rewrites after every micro-batch.

Spark's checkpoint says which offsets were planned and committed, but not who runs the query, how
fast it goes, what it wrote per table or why it stopped. The driver keeps that here, in
``<checkpoint dir>/changefeed-status.json``, so ``changefeed status`` can answer without talking to
the job. Every write replaces the file atomically (`changefeed.files.store`): a reader sees the
previous document or the next one, never half of one.

Per-table counts are cumulative across restarts: a new run starts from the previous document's
counts. A batch's rows are counted once per batch id, when it finishes or fails (its events were
collected, and may have reached the sink before the failure); Spark re-runs a failed batch with
the same batch id after restart, and a batch id at or below ``counted_through`` is not counted
again. No credentials go in: source and
sink are kinds (``binlog-files``, ``kafka``, ``mysql``), positions are binlog coordinates or
offsets, and the error text passes through `mask_secrets`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import ChangefeedError
from ..files.store import StateStore, open_store
from .logging import mask_secrets

__all__ = [
    "STATUS_FILE",
    "WINDOW_SECONDS",
    "JobDocument",
    "JobStatusWriter",
    "pid_alive",
    "read_job_document",
]

log = logging.getLogger(__name__)

STATUS_FILE = "changefeed-status.json"
WINDOW_SECONDS = 60.0  # rows/s is reported over the last minute
SHARD_DDL_KEPT = 20  # shard DDL decisions a status file keeps (the newest)
_VERSION = 1


@dataclass(slots=True)
class JobDocument:
    """What the file holds (times are Unix seconds; ``position`` is the source's resume position)."""

    changefeed_id: str
    job: str
    source: str = ""
    sink: str = ""
    state: str = "running"  # running, stopped, failed: as the job last wrote it
    pid: int = 0
    host: str = ""
    pid_start: int | None = None  # the process's start tick (/proc/PID/stat): tells a reused pid apart
    started_at: float = 0.0
    updated_at: float = 0.0
    last_batch: int | None = None
    counted_through: int = -1  # the highest batch id whose events are in `tables`
    batches: int = 0  # batches finished by this run
    rows: int = 0  # row changes, all runs
    position: Any = None
    checkpoint_ts: int = 0
    resolved_ts: int = 0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> kind -> count, all runs
    window: list[list[float]] = field(default_factory=list)  # [time, rows] per batch of the last minute
    last_error: dict[str, Any] | None = None  # {"text", "time", "batch"}
    # The newest shard DDL decisions on merged tables (DM's optimistic mode), all runs:
    # {"table", "shard", "ddl", "outcome", "commit_ts", "time"}.
    shard_ddl: list[dict[str, Any]] = field(default_factory=list)
    version: int = _VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> JobDocument:
        known = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _proc_start(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot); None off Linux or when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def pid_alive(doc: JobDocument) -> bool | None:
    """Whether the process that wrote ``doc`` still runs; None when it ran on another host."""
    if doc.host and doc.host != socket.gethostname():
        return None
    if doc.pid <= 0:
        return False
    try:
        os.kill(doc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    if doc.pid_start is not None:
        return _proc_start(doc.pid) == doc.pid_start
    return True


def read_job_document(directory: str | Path | StateStore) -> JobDocument | None:
    """The status document of a checkpoint directory, None when no job wrote one."""
    store = open_store(directory)
    where = f"{store.where}/{STATUS_FILE}"
    try:
        raw = store.read(STATUS_FILE)
    except ChangefeedError as exc:
        raise ChangefeedError(f"cannot read the job status file: {exc.message}", where=where) from None
    if raw is None:
        return None
    try:
        return JobDocument.from_json(orjson.loads(raw))
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise ChangefeedError(f"unreadable job status file: {exc}", where=where) from None


class JobStatusWriter:
    """Keeps one job's document up to date; every method writes the file."""

    def __init__(
        self, directory: str | Path | StateStore, changefeed_id: str, job: str, source: str = "", sink: str = ""
    ) -> None:
        self.store = open_store(directory)
        try:
            previous = read_job_document(self.store)
        except ChangefeedError as exc:  # a torn or foreign file: start counting afresh rather than not at all
            log.warning("previous job status file ignored", extra={"error": str(exc)})
            previous = None
        now = time.time()
        pid = os.getpid()
        self.doc = JobDocument(
            changefeed_id, job, source, sink, "running", pid, socket.gethostname(), _proc_start(pid), now, now
        )
        if previous is not None:  # carry what is cumulative or still true
            carried = ("counted_through", "rows", "position", "checkpoint_ts", "resolved_ts", "tables", "last_error")
            for name in (*carried, "shard_ddl"):
                setattr(self.doc, name, getattr(previous, name))
            self.doc.last_batch = previous.last_batch
            self.doc.window = [w for w in previous.window if w[0] > now - WINDOW_SECONDS]
        self._write()

    def batch(
        self,
        batch_id: int,
        tables: Mapping[str, Mapping[str, int]],
        *,
        position: Any = None,
        checkpoint_ts: int = 0,
        resolved_ts: int = 0,
        shard_ddl: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """A finished micro-batch: its row counts per table and kind, and where the job now stands."""
        now = time.time()
        doc = self.doc
        self._shard_ddl(shard_ddl)
        rows = self._count(batch_id, tables)
        doc.window = [w for w in doc.window if w[0] > now - WINDOW_SECONDS]
        doc.window.append([round(now, 3), rows])
        doc.batches += 1
        doc.last_batch = batch_id
        if position is not None:
            doc.position = position
        doc.checkpoint_ts = max(doc.checkpoint_ts, checkpoint_ts)
        doc.resolved_ts = max(doc.resolved_ts, resolved_ts)
        doc.updated_at = now
        self._write()

    def _count(self, batch_id: int, tables: Mapping[str, Mapping[str, int]]) -> int:
        """Add a batch's rows unless this batch id was counted before (a replay); returns its rows."""
        doc = self.doc
        rows = sum(n for kinds in tables.values() for n in kinds.values())
        if batch_id > doc.counted_through:
            for table, kinds in tables.items():
                slot = doc.tables.setdefault(table, {})
                for kind, n in kinds.items():
                    slot[kind] = slot.get(kind, 0) + n
            doc.rows += rows
            doc.counted_through = batch_id
        return rows

    def _shard_ddl(self, decisions: Sequence[Mapping[str, Any]]) -> None:
        """Keep the newest shard DDL decisions (one per shard, DDL and commit ts: a replay's is not kept twice)."""
        seen = {(d["table"], d["shard"], d["ddl"], d["commit_ts"]) for d in self.doc.shard_ddl}
        for decision in decisions:
            key = (decision["table"], decision["shard"], decision["ddl"], decision["commit_ts"])
            if key not in seen:
                seen.add(key)
                self.doc.shard_ddl.append(dict(decision))
        del self.doc.shard_ddl[:-SHARD_DDL_KEPT]

    def error(
        self,
        text: str,
        batch_id: int | None = None,
        tables: Mapping[str, Mapping[str, int]] | None = None,
        shard_ddl: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """A batch (or the query) failed: keep the reason, masked, with its time; count the batch's rows."""
        self._shard_ddl(shard_ddl)
        if batch_id is not None and tables is not None:
            self._count(batch_id, tables)
        self.doc.last_error = {"text": mask_secrets(text)[:2000], "time": time.time(), "batch": batch_id}
        self.doc.updated_at = time.time()
        self._write()

    def stop(self, state: str) -> None:
        """The query ended: ``stopped`` (finished, interrupted) or ``failed``."""
        self.doc.state = state
        self.doc.updated_at = time.time()
        self._write()

    def _write(self) -> None:
        data = orjson.dumps(self.doc.to_json(), default=str, option=orjson.OPT_INDENT_2)
        try:
            self.store.write(STATUS_FILE, data, durable=False)  # a status, not state: no fsync per batch
        except ChangefeedError as exc:
            raise ChangefeedError(f"cannot write the job status file: {exc.message}", where=exc.where) from None
