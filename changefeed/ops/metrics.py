"""Prometheus metrics for a changefeed process, and the HTTP endpoint that serves them.

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` units, base units only) so
the sample dashboard (docs/grafana-dashboard.json) and ordinary alert rules work unchanged. All
metrics live in `REGISTRY`, not prometheus-client's global one: an application embedding
changefeed keeps its own registry clean, and tests can read values without cross-talk.

The calls a job makes are small and cheap (a dict lookup and an add per call): `record_events`
once per batch with its events, `observe_batch` once per batch with its duration and checkpoint,
`sink_error` when a sink gives up or retries, `kafka_delivered` per acknowledged message.
`changefeed.ops.monitor` makes the job-level calls; docs/operations.md lists the metrics.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as _Tally
from collections import deque
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    start_http_server,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from ..model.tso import tso_physical_ms
from ..secrets import mask_secrets
from ..sink.observe import set_observer
from .jobfile import SHARD_DDL_KEPT

__all__ = [
    "BATCHES",
    "BATCH_DURATION",
    "CHECKPOINT_LAG",
    "CHECKPOINT_TS",
    "DEFAULT_METRICS_ADDR",
    "DELIVERY_LATENCY",
    "EVENTS",
    "OTHER_TABLES",
    "REGISTRY",
    "SINK_ERRORS",
    "SINK_RETRIES",
    "SOURCE_RECONNECTS",
    "TABLE_LABEL_LIMIT",
    "kafka_delivered",
    "observe_batch",
    "record_events",
    "record_tally",
    "scrape",
    "set_info",
    "sink_error",
    "start_metrics_server",
    "table_label",
    "tally_events",
]

#: Where the endpoint listens unless told otherwise: metrics name tables and hosts, so not the network.
DEFAULT_METRICS_ADDR = "127.0.0.1"
#: Distinct ``table`` label values at most; later tables count under ``OTHER_TABLES``. Each label value
#: is a time series kept for the life of the process: a source with tens of thousands of tables must
#: not grow the process and the Prometheus server without bound.
TABLE_LABEL_LIMIT = 500
OTHER_TABLES = "_other"

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

INFO = Info("changefeed", "The changefeed this process runs (id, job, source and sink kinds).", registry=REGISTRY)
EVENTS = Counter(
    "changefeed_events",
    "Events handled, by kind (insert, update, delete, ddl, resolved) and table (schema.table; '' for resolved).",
    ["kind", "table"],
    registry=REGISTRY,
)
BATCHES = Counter(
    "changefeed_batches",
    "Micro-batches finished, by job and outcome (ok, failed).",
    ["job", "outcome"],
    registry=REGISTRY,
)
BATCH_DURATION = Histogram(
    "changefeed_batch_duration_seconds",
    "Wall time of one micro-batch, from its events to its flushed checkpoint.",
    ["job"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
BATCH_ROWS = Histogram(
    "changefeed_batch_rows",
    "Row changes per micro-batch.",
    ["job"],
    buckets=(0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
    registry=REGISTRY,
)
CHECKPOINT_TS = Gauge(
    "changefeed_checkpoint_ts",
    "The last flushed checkpoint (TSO-shaped commit ts; everything at or below it is in the sink).",
    ["job"],
    registry=REGISTRY,
)
CHECKPOINT_TIME = Gauge(
    "changefeed_checkpoint_timestamp_seconds",
    "Physical time of the last flushed checkpoint, in Unix seconds (lag = time() - this).",
    ["job"],
    registry=REGISTRY,
)
CHECKPOINT_LAG = Gauge(
    "changefeed_checkpoint_lag_seconds",
    "Seconds between the last flush and its checkpoint's commit time (TiCDC's checkpoint lag).",
    ["job"],
    registry=REGISTRY,
)
SINK_ERRORS = Counter(
    "changefeed_sink_errors",
    "Sink errors, by sink (mysql, kafka, storage, parquet) and whether they were retried or fatal.",
    ["sink", "kind"],
    registry=REGISTRY,
)
SINK_RETRIES = Counter("changefeed_sink_retries", "Sink operations retried.", ["sink"], registry=REGISTRY)
SHARD_DDL = Counter(
    "changefeed_shard_ddl",
    "Shard DDLs on merged tables, by outcome (applied, skipped, conflict; pessimistic mode: held, queued, released).",
    ["outcome"],
    registry=REGISTRY,
)

DELIVERY_LATENCY = Histogram(
    "changefeed_sink_delivery_latency_seconds",
    "Time from handing a message to the producer to the broker's acknowledgement (librdkafka's latency).",
    ["sink"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
_KAFKA_DELIVERY = DELIVERY_LATENCY.labels(sink="kafka")  # bound once: observed per message
SOURCE_RECONNECTS = Counter(
    "changefeed_source_reconnects", "Source reconnects after a lost connection.", ["source"], registry=REGISTRY
)


ROW_KINDS = frozenset({"insert", "update", "delete"})
_TABLES: set[str] = set()
_TABLES_LOCK = threading.Lock()


def table_label(table: str) -> str:
    """``table`` as a label value: itself while fewer than `TABLE_LABEL_LIMIT` tables have one, else ``_other``."""
    if table in _TABLES or not table:
        return table
    with _TABLES_LOCK:
        if len(_TABLES) < TABLE_LABEL_LIMIT:
            _TABLES.add(table)
            return table
    return OTHER_TABLES


def set_info(**labels: str) -> None:
    """Describe the process once at start (``changefeed="orders", job="capture", sink="storage"``)."""
    INFO.info({k: str(v) for k, v in labels.items()})


def tally_events(events: Iterable[Any]) -> _Tally[tuple[str, str]]:
    """A batch's events counted by (kind, table): ``insert``/``update``/``delete``/``ddl``/``resolved``.

    Takes model events, or the capture jobs' encoded items (storage `DataSegment`, Kafka
    `MessageGroup`), which carry their rows' counts per (op, table).

    Tallied locally first so a batch of a million rows costs a few label lookups, not a million.
    """
    tally: _Tally[tuple[str, str]] = _Tally()
    for event in events:
        counts = getattr(event, "counts", None)
        if isinstance(counts, dict):  # rows encoded in executors, counted there: (op, table) -> rows
            tally.update(counts)
            continue
        kind = getattr(event, "kind", "unknown")
        if kind == "row":
            tally[(str(event.op), f"{event.schema}.{event.table}")] += 1
        elif kind == "ddl":
            tally[("ddl", f"{event.schema}.{event.table}" if event.table else event.schema)] += 1
        else:
            tally[(kind, "")] += 1
    return tally


def record_tally(tally: _Tally[tuple[str, str]]) -> int:
    """Add a `tally_events` result to the event counters; returns the number of row changes."""
    for (kind, table), n in tally.items():
        EVENTS.labels(kind=kind, table=table_label(table)).inc(n)
    return sum(n for (kind, _), n in tally.items() if kind in ROW_KINDS)


def record_events(events: Iterable[Any]) -> int:
    """Count a batch's events by kind and table; returns the number of row changes."""
    return record_tally(tally_events(events))


def observe_batch(
    job: str, seconds: float, checkpoint_ts: int | None = None, *, rows: int | None = None, ok: bool = True
) -> None:
    """One finished micro-batch: its duration, outcome and (when it flushed) the checkpoint and lag."""
    BATCHES.labels(job=job, outcome="ok" if ok else "failed").inc()
    if not ok:
        return
    BATCH_DURATION.labels(job=job).observe(seconds)
    if rows is not None:
        BATCH_ROWS.labels(job=job).observe(rows)
    if checkpoint_ts:
        physical = tso_physical_ms(checkpoint_ts) / 1000
        CHECKPOINT_TS.labels(job=job).set(checkpoint_ts)
        CHECKPOINT_TIME.labels(job=job).set(physical)
        CHECKPOINT_LAG.labels(job=job).set(max(0.0, time.time() - physical))


def sink_error(sink: str, *, retried: bool) -> None:
    """A sink failed an operation: ``retried`` if it will try again, else it gave up (fatal)."""
    SINK_ERRORS.labels(sink=sink, kind="retried" if retried else "fatal").inc()
    if retried:
        SINK_RETRIES.labels(sink=sink).inc()


def kafka_delivered(seconds: float | None) -> None:
    """One message acknowledged by the broker after ``seconds`` (``Message.latency()``; None: unknown)."""
    if seconds is not None and seconds >= 0:
        _KAFKA_DELIVERY.observe(seconds)


def start_metrics_server(port: int, addr: str = DEFAULT_METRICS_ADDR) -> Any:
    """Serve ``/metrics`` from a daemon thread; returns the server (``.shutdown()`` stops it).

    ``port=0`` picks a free port (read it from ``server.server_port``). ``addr`` is loopback unless
    the caller names another address (``0.0.0.0`` for every interface).
    """
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    return server


def scrape() -> str:
    """The current exposition text (what ``/metrics`` returns), for tests and ad-hoc dumps."""
    return generate_latest(REGISTRY).decode()


#: Shard DDL decisions not yet handed to the status file (`take_shard_ddl`), newest last.
_SHARD_DDL: deque[dict[str, Any]] = deque(maxlen=SHARD_DDL_KEPT)


def shard_ddl(target: str, shard: str, query: str, outcome: str, commit_ts: int) -> None:
    """A shard's DDL decided on its merged table: counted, and kept for the job's status file."""
    SHARD_DDL.labels(outcome=outcome.split(":", 1)[0]).inc()
    _SHARD_DDL.append(
        {
            "table": target,
            "shard": shard,
            "ddl": mask_secrets(query)[:500],
            "outcome": outcome,
            "commit_ts": commit_ts,
            "time": round(time.time(), 3),
        }
    )


def take_shard_ddl() -> list[dict[str, Any]]:
    """The shard DDL decisions since the last call (the status file keeps them across batches and runs)."""
    out = list(_SHARD_DDL)
    _SHARD_DDL.clear()
    return out


class _Observer:
    """The sinks' reports (`changefeed.sink.observe`) counted here."""

    def sink_error(self, sink: str, *, retried: bool) -> None:
        sink_error(sink, retried=retried)

    def kafka_delivered(self, seconds: float | None) -> None:
        kafka_delivered(seconds)

    def shard_ddl(self, target: str, shard: str, query: str, outcome: str, commit_ts: int) -> None:
        shard_ddl(target, shard, query, outcome, commit_ts)


set_observer(_Observer())
