"""Where a changefeed stands, read from what it leaves behind: no running process is needed.

Three places hold progress, and each answers a different question:

* a storage-sink directory's ``metadata`` (`storage_status`): what consumers can read;
* a MySQL sink's checkpoint table (`mysql_status`): what the downstream has applied, and the
  source position it resumes from;
* a Spark checkpoint directory (`spark_status`): which micro-batch ran last, the source offsets
  it planned (``offsets/<id>``) and whether it finished (``commits/<id>``). A last batch without
  a commit is re-run with the same offsets on restart.
* the job status file in that directory (`job_status`, written by the driver every batch,
  changefeed/ops/jobfile.py): who runs it, whether that process is alive, rows/s over the last
  minute, rows per table, the last error.

Lag is now minus the checkpoint's physical time (TSO-shaped commit ts), so it grows while the
source is idle too: it is "how old is the newest change we are sure of", as TiCDC reports it.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..clients.mysql import MySQLError, MySQLParams, ProgrammingError, parse_mysql_url
from ..errors import ChangefeedError, ascii_digits
from ..files.layout import DATA_FILE_RE, SCHEMA_FILE_RE, read_checkpoint
from ..files.offsetlog import read_offsets
from ..files.store import StateStore, open_store
from ..model.tso import tso_physical_ms
from ..secrets import mask_secrets
from ..sink.mysql.checkpoint import CHECKPOINT_TABLE
from ..sink.mysql.sql import quote_table
from .jobfile import WINDOW_SECONDS, JobDocument, pid_alive, read_job_document

__all__ = [
    "JobStatus",
    "MySQLCheckpointStatus",
    "SparkCheckpointStatus",
    "StatusError",
    "StorageStatus",
    "TableFiles",
    "find_job_checkpoints",
    "job_status",
    "mysql_status",
    "spark_status",
    "storage_status",
    "ts_wall_time",
]


class StatusError(ChangefeedError):
    """A status source is missing or unreadable."""


def ts_wall_time(ts: int) -> str | None:
    """The UTC wall time of a TSO-shaped commit ts (ISO 8601), ``None`` for 0 (nothing yet)."""
    if ts <= 0:
        return None
    return dt.datetime.fromtimestamp(tso_physical_ms(ts) / 1000, dt.UTC).isoformat(timespec="milliseconds")


def ts_lag(ts: int, now: float | None = None) -> float | None:
    """Seconds between now and the commit ts's physical time; ``None`` for 0."""
    if ts <= 0:
        return None
    return round((time.time() if now is None else now) - tso_physical_ms(ts) / 1000, 3)


@dataclass(frozen=True, slots=True)
class TableFiles:
    """One table of a storage directory: data files, its newest table version and how many versions it had."""

    table: str
    files: int
    newest_version: int | None
    versions: int


@dataclass(frozen=True, slots=True)
class StorageStatus:
    root: str
    checkpoint_ts: int
    checkpoint_time: str | None
    lag_seconds: float | None
    tables: list[TableFiles] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def storage_status(root: str | Path, now: float | None = None) -> StorageStatus:
    """The published checkpoint and per-table data file counts of a storage-sink directory."""
    path = Path(root)
    if not path.is_dir():
        raise StatusError(f"no storage directory at {path}")
    checkpoint = read_checkpoint(path)
    tables: list[TableFiles] = []
    for schema_dir in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for table_dir in sorted(p for p in schema_dir.iterdir() if p.is_dir() and p.name != "meta"):
            # A version shows as a data directory, or only as a schema file (a DDL with no rows since).
            versions = {int(p.name) for p in table_dir.iterdir() if p.is_dir() and ascii_digits(p.name)}
            if (table_dir / "meta").is_dir():
                matches = (SCHEMA_FILE_RE.match(p.name) for p in (table_dir / "meta").iterdir())
                versions |= {int(m.group(1)) for m in matches if m}
            files = sum(
                1
                for f in table_dir.rglob("CDC*")
                if f.is_file() and "meta" not in f.relative_to(table_dir).parts and DATA_FILE_RE.match(f.name)
            )
            tables.append(
                TableFiles(f"{schema_dir.name}.{table_dir.name}", files, max(versions, default=None), len(versions))
            )
    return StorageStatus(str(path), checkpoint, ts_wall_time(checkpoint), ts_lag(checkpoint, now), tables)


@dataclass(frozen=True, slots=True)
class MySQLCheckpointStatus:
    changefeed_id: str
    commit_ts: int
    checkpoint_time: str | None
    lag_seconds: float | None
    position: Mapping[str, Any] | None
    updated_at: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def mysql_status(
    target: str | MySQLParams,
    changefeed_id: str | None = None,
    *,
    schema: str = "changefeed",
    now: float | None = None,
) -> list[MySQLCheckpointStatus]:
    """Rows of a MySQL sink's checkpoint table (one changefeed, or all of them)."""
    params = parse_mysql_url(target) if isinstance(target, str) else target
    table = quote_table(schema, CHECKPOINT_TABLE)
    sql = f"SELECT changefeed_id, commit_ts, position, updated_at FROM {table}"
    args: tuple[Any, ...] = ()
    if changefeed_id is not None:
        sql += " WHERE changefeed_id=%s"
        args = (changefeed_id,)
    try:
        with params.connect(autocommit=True, connect_timeout=5) as conn, conn.cursor() as cur:
            cur.execute(sql + " ORDER BY changefeed_id", args)
            rows = cur.fetchall()
    except ProgrammingError as exc:
        if exc.args and exc.args[0] == 1146:  # ER_NO_SUCH_TABLE
            raise StatusError(
                f"{params.url} has no checkpoint table {schema}.{CHECKPOINT_TABLE}: no MySQL sink has run there "
                "(or it uses another checkpoint schema: --checkpoint-schema)"
            ) from None
        raise StatusError(f"reading the checkpoint table on {params.url} failed: {mask_secrets(str(exc))}") from None
    except MySQLError as exc:
        raise StatusError(f"cannot read the checkpoint table on {params.url}: {mask_secrets(str(exc))}") from None
    if changefeed_id is not None and not rows:
        raise StatusError(
            f"changefeed {changefeed_id!r} has no checkpoint in {schema}.{CHECKPOINT_TABLE} on {params.url}"
        )
    out: list[MySQLCheckpointStatus] = []
    for cf, commit_ts, position, updated_at in rows:
        ts = int(commit_ts)
        out.append(
            MySQLCheckpointStatus(
                str(cf),
                ts,
                ts_wall_time(ts),
                ts_lag(ts, now),
                json.loads(position) if position else None,
                updated_at.isoformat() if updated_at is not None else None,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class SparkCheckpointStatus:
    directory: str
    query_id: str | None
    last_batch_id: int | None
    last_committed_batch_id: int | None
    last_batch_committed: bool
    batch_time: str | None
    offsets: list[Any] = field(default_factory=list)
    committed_offsets: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _batch_ids(log: StateStore) -> list[int]:
    return sorted(int(name) for name in log.names() if ascii_digits(name))


def _read_offsets(log: StateStore, batch: int) -> tuple[dict[str, Any], list[Any]]:
    """``offsets/<id>`` (`read_offsets`); gone or damaged: a `StatusError` naming it."""
    try:
        found = read_offsets(log, batch)
    except ChangefeedError as exc:
        raise StatusError(exc.message, where=exc.where) from None
    if found is None:
        raise StatusError("unreadable Spark offset log: the file is gone", where=f"{log.where}/{batch}")
    return found


def spark_status(directory: str | Path) -> SparkCheckpointStatus:
    """The last micro-batch of a Structured Streaming checkpoint (a directory or URI) and whether it committed."""
    store = open_store(directory)
    offset_log = store.child("offsets")
    if not offset_log.exists():
        raise StatusError(f"{store.where} is not a Spark streaming checkpoint (no offsets/ folder)")
    query_id = None
    metadata = store.read("metadata")
    if metadata is not None:
        try:
            query_id = json.loads(metadata).get("id")
        except ValueError:
            query_id = None
    planned = _batch_ids(offset_log)
    committed = _batch_ids(store.child("commits"))
    last = planned[-1] if planned else None
    last_commit = committed[-1] if committed else None
    meta: dict[str, Any] = {}
    offsets: list[Any] = []
    if last is not None:
        meta, offsets = _read_offsets(offset_log, last)
    committed_offsets: list[Any] = offsets if last is not None and last == last_commit else []
    if last_commit is not None and last_commit != last and last_commit in planned:
        committed_offsets = _read_offsets(offset_log, last_commit)[1]
    stamp = meta.get("batchTimestampMs")
    batch_time = (
        dt.datetime.fromtimestamp(int(stamp) / 1000, dt.UTC).isoformat(timespec="milliseconds") if stamp else None
    )
    return SparkCheckpointStatus(
        store.where,
        query_id,
        last,
        last_commit,
        last is not None and last == last_commit,
        batch_time,
        offsets,
        committed_offsets,
    )


def _iso(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class TableRows:
    """Row changes a job wrote for one table, all runs together."""

    table: str
    insert: int
    update: int
    delete: int
    total: int


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A Spark job's status file, read: ``state`` is what the job wrote, unless its process is gone.

    ``state`` ``dead`` means the file says running but the process that wrote it no longer exists
    (killed, or the machine restarted): the job is not running, and its last batch re-runs on restart.
    """

    directory: str
    changefeed_id: str
    job: str
    source: str
    sink: str
    state: str
    running: bool | None
    pid: int
    host: str
    started_at: str | None
    updated_at: str | None
    last_batch: int | None
    position: Any
    checkpoint_ts: int
    checkpoint_time: str | None
    lag_seconds: float | None
    resolved_ts: int
    resolved_time: str | None
    rows: int
    rows_last_minute: int
    rows_per_second: float
    tables: list[TableRows] = field(default_factory=list)
    last_error: dict[str, Any] | None = None
    #: The newest shard DDL decisions on merged tables (DM's optimistic mode), oldest first.
    shard_ddl: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rate(doc: JobDocument, now: float, running: bool | None) -> tuple[int, float]:
    """Rows in the last minute and rows/s over it (over the run's age if it started less than a minute ago)."""
    rows = int(sum(n for t, n in doc.window if t > now - WINDOW_SECONDS))
    if not running:
        return rows, 0.0
    span = min(WINDOW_SECONDS, max(now - doc.started_at, 1.0))
    return rows, round(rows / span, 1)


def job_status(directory: str | Path, now: float | None = None) -> JobStatus | None:
    """The job status file of a Spark checkpoint directory, None when no job wrote one there."""
    doc = read_job_document(directory)
    if doc is None:
        return None
    now = time.time() if now is None else now
    alive = pid_alive(doc) if doc.state == "running" else False
    state = "dead" if doc.state == "running" and alive is False else doc.state
    running = alive if doc.state == "running" else False
    last_minute, per_second = _rate(doc, now, running)
    tables = [
        TableRows(name, kinds.get("insert", 0), kinds.get("update", 0), kinds.get("delete", 0), sum(kinds.values()))
        for name, kinds in sorted(doc.tables.items())
    ]
    error = dict(doc.last_error) if doc.last_error else None
    if error is not None:
        error["time"] = _iso(error.get("time"))
    return JobStatus(
        str(directory),
        doc.changefeed_id,
        doc.job,
        doc.source,
        doc.sink,
        state,
        running,
        doc.pid,
        doc.host,
        _iso(doc.started_at),
        _iso(doc.updated_at),
        doc.last_batch,
        doc.position,
        doc.checkpoint_ts,
        ts_wall_time(doc.checkpoint_ts),
        ts_lag(doc.checkpoint_ts, now),
        doc.resolved_ts,
        ts_wall_time(doc.resolved_ts),
        doc.rows,
        last_minute,
        per_second,
        tables,
        error,
        [{**d, "time": _iso(d.get("time"))} for d in doc.shard_ddl],
    )


def find_job_checkpoints(
    changefeed_id: str, base: str | Path = ".", outputs: tuple[str | Path, ...] = ()
) -> list[Path]:
    """The checkpoint directories `changefeed run`/`apply` use by default for ``changefeed_id``.

    ``BASE/.changefeed/run-ID`` (capture to Kafka) and ``BASE/.changefeed/apply-ID`` (apply to
    MySQL), then ``OUTPUT/_spark_checkpoint`` of each output directory given (capture to a storage
    directory, apply to Parquet) whose status file names this changefeed.
    """
    root = Path(base) / ".changefeed"
    found = [d for d in (root / f"run-{changefeed_id}", root / f"apply-{changefeed_id}") if d.is_dir()]
    for output in outputs:
        candidate = Path(output) / "_spark_checkpoint"
        doc = read_job_document(candidate) if candidate.is_dir() else None
        if doc is not None and doc.changefeed_id == changefeed_id:
            found.append(candidate)
    return found
