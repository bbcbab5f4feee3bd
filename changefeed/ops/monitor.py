"""What a streaming job reports while it runs: metrics, the job status file and the log context.

The Spark jobs (changefeed/spark/jobs.py) make four calls: `JobMonitor.start` before the query
starts, `JobMonitor.batch` around every micro-batch, `JobMonitor.batch_done` once the batch is
flushed, `JobMonitor.stop` when the query ended. Everything else lives here, so the jobs stay
about data and this module about operations.

Who runs the job (changefeed id, source and sink kinds, the metrics port) is a `JobContext` the
CLI sets with `set_job_context` before it calls a job; a job started from Python without it runs
as changefeed ``default`` with no metrics endpoint (``job_context`` sets one for a block).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ChangefeedError
from . import metrics
from .jobfile import JobStatusWriter
from .logging import bind_log_context, log_context, mask_secrets

__all__ = [
    "JobContext",
    "JobMonitor",
    "compact_position",
    "current_job_context",
    "job_context",
    "set_job_context",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobContext:
    """Who runs the next job and what it exposes; set by the CLI, read when a job is built."""

    changefeed_id: str = "default"
    source: str = ""
    sink: str = ""
    metrics_port: int | None = None
    metrics_addr: str = metrics.DEFAULT_METRICS_ADDR


_JOB: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("changefeed_job", default=None)


def current_job_context() -> JobContext:
    return _JOB.get() or JobContext()


def set_job_context(
    args: Any = None, changefeed_id: str = "default", *, source: str = "", sink: str = ""
) -> JobContext:
    """Set the context for jobs started from here on (the CLI: ``args.metrics_port``, ``args.metrics_addr``)."""
    addr = getattr(args, "metrics_addr", None) or metrics.DEFAULT_METRICS_ADDR
    context = JobContext(changefeed_id, source, sink, getattr(args, "metrics_port", None), addr)
    _JOB.set(context)
    return context


@contextlib.contextmanager
def job_context(**fields: Any) -> Iterator[JobContext]:
    """`JobContext` fields for jobs built inside the block (tests, embedding applications)."""
    context = replace(current_job_context(), **fields)
    token = _JOB.set(context)
    try:
        yield context
    finally:
        _JOB.reset(token)


#: Bookkeeping inside source positions that grows with the tables and files read (binlog table
#: versions, a storage reader's file list): left out of logs and the status file, which keep the
#: coordinates a person resumes or compares by (file/pos/gtid, checkpoint, offsets).
_BULKY_POSITION_KEYS = frozenset({"versions", "files", "schema_files"})


def compact_position(position: Any) -> Any:
    """A source position without its bulky bookkeeping (the full one stays in Spark's offset log)."""
    if isinstance(position, Mapping):
        return {k: v for k, v in position.items() if k not in _BULKY_POSITION_KEYS}
    return position


def _tables(tally: Any) -> dict[str, dict[str, int]]:
    """Row kinds per table from a `metrics.tally_events` result (DDL and resolved left out)."""
    out: dict[str, dict[str, int]] = {}
    for (kind, table), n in tally.items():
        if kind in metrics.ROW_KINDS:
            out.setdefault(table, {})[kind] = n
    return out


class JobMonitor:
    """One job run's reporting: metrics endpoint and counters, status file, log context."""

    def __init__(self, job: str, sink: str = "") -> None:
        self.context = current_job_context()
        self.job = job
        self.sink = self.context.sink or sink
        self.status: JobStatusWriter | None = None
        self.server: Any = None
        self.position: Any = None
        # batch id -> tally of a batch collected and not yet reported: the one in progress, and the one
        # before it while it becomes durable (jobs.py, `durable_later`)
        self._collected: dict[int, Any] = {}
        self._status_broken = False

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"changefeed": self.context.changefeed_id, "job": self.job}

    def start(self, checkpoint: Path | str) -> None:
        """Before the query starts: the endpoint (when a port was asked for), ``changefeed_info``, the status file."""
        ctx = self.context
        metrics.set_info(changefeed=ctx.changefeed_id, job=self.job, source=ctx.source, sink=self.sink)
        if ctx.metrics_port is not None and self.server is None:
            try:
                self.server = metrics.start_metrics_server(ctx.metrics_port, ctx.metrics_addr)
            except OSError as exc:
                raise ChangefeedError(
                    f"cannot serve metrics on port {ctx.metrics_port}: {exc}", where=ctx.metrics_addr
                ) from None
            log.info("metrics endpoint up", extra={**self.log_fields, "port": self.server.server_port})
        self.status = self._guard(
            lambda: JobStatusWriter(checkpoint, ctx.changefeed_id, self.job, ctx.source, self.sink)
        )
        if self.status is not None:
            self.position = compact_position(self.status.doc.position)

    @contextlib.contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        """Around one micro-batch (on Spark's callback thread): log context; a raising batch counts as failed."""
        started = time.monotonic()
        with log_context(**self.log_fields, batch=batch_id, position=self.position):
            try:
                yield
            except BaseException as exc:
                metrics.observe_batch(self.job, time.monotonic() - started, ok=False)
                text = f"{type(exc).__name__}: {exc}"
                log.error("batch failed", extra={"error": mask_secrets(text)})
                tables = _tables(self._take(batch_id, ())) if batch_id in self._collected else None
                if self.status is not None:
                    status = self.status
                    shard_ddl = metrics.take_shard_ddl()  # a conflict is what stopped the batch
                    self._guard(lambda: status.error(text, batch_id, tables, shard_ddl))
                raise

    def collected(self, batch_id: int, events: Sequence[Any]) -> None:
        """The batch's events are known: tally them now, so a batch failing later still counts its rows once."""
        for old in [b for b in self._collected if b < batch_id - 1]:  # failed batches' tallies
            del self._collected[old]
        self._collected[batch_id] = metrics.tally_events(events)

    def _take(self, batch_id: int, events: Sequence[Any]) -> Any:
        tally = self._collected.pop(batch_id, None)
        return tally if tally is not None else metrics.tally_events(events)

    def batch_done(
        self, batch_id: int, events: Sequence[Any], checkpoint_ts: int, position: Any, resolved_ts: int, seconds: float
    ) -> dict[str, dict[str, int]]:
        """A flushed batch: counters, checkpoint gauges, status file; binds the new position. Returns rows per table."""
        tally = self._take(batch_id, events)
        rows = metrics.record_tally(tally)
        metrics.observe_batch(self.job, seconds, checkpoint_ts, rows=rows)
        if position is not None:
            position = self.position = compact_position(position)
            bind_log_context(position=position)
        tables = _tables(tally)
        if self.status is not None:
            status = self.status
            shard_ddl = metrics.take_shard_ddl()
            self._guard(
                lambda: status.batch(
                    batch_id,
                    tables,
                    position=position,
                    checkpoint_ts=checkpoint_ts,
                    resolved_ts=resolved_ts,
                    shard_ddl=shard_ddl,
                )
            )
        return tables

    def stop(self, error: BaseException | None) -> None:
        """The query ended: failed (``error``), or stopped (finished, interrupted: ``KeyboardInterrupt``)."""
        failed = error is not None and not isinstance(error, KeyboardInterrupt)
        if self.status is not None:
            status = self.status
            if failed and (
                status.doc.last_error is None or status.doc.last_error.get("time", 0) < status.doc.started_at
            ):
                first = (str(error).strip().splitlines() or [""])[0]  # a Spark error's first line, not its trace
                self._guard(lambda: status.error(f"{type(error).__name__}: {first}"))
            self._guard(lambda: status.stop("failed" if failed else "stopped"))
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def _guard(self, call: Callable[[], Any]) -> Any:
        """Run a status-file write; a broken one is logged once and never fails the job (the data path)."""
        try:
            return call()
        except ChangefeedError as exc:
            if not self._status_broken:
                self._status_broken = True
                log.warning("job status file not written", extra={**self.log_fields, "error": str(exc)})
            return None
