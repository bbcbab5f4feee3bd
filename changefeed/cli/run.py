"""``changefeed run CONFIG.toml``: the capture job (binlog files or a live server -> storage, Kafka or MySQL) on Spark.

Before Spark starts, the preflight checks that apply to the configured parts run (docs/operations.md):
a live source's binlog settings, grants and resume position, a Kafka sink's broker and partitions, a
MySQL sink's reachability; any error stops the run with its fix (``--skip-preflight`` opts out).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..files.store import checkpoint_location, open_store, private_dir

if TYPE_CHECKING:
    from ..clients.mysql import MySQLParams
    from ..config import ChangefeedConfig
    from ..dispatch.route import EventTransform
    from ..sink.base import Sink
    from ..spark.jobs import JobStats

log = logging.getLogger(__name__)
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a changefeed (binlog files or a live server -> storage, kafka or mysql) as a Spark streaming job",
        description="Run the changefeed described by CONFIG.toml as a Spark Structured Streaming query. "
        "Spark's checkpoint directory is the savepoint: run it again to resume. Progress goes to stderr; "
        "Ctrl-C stops cleanly.",
    )
    p.add_argument("config", type=Path, help="changefeed config (TOML, docs/configuration.md)")
    add_spark_options(p)
    p.add_argument("--sink-uri", help="override the config's sink-uri (relative paths: the current directory)")
    add_capture_options(p)
    p.set_defaults(func=run)


def add_capture_options(p: argparse.ArgumentParser) -> None:
    """What the commands running a capture job take besides Spark's options (`run`, `pipeline`)."""
    p.add_argument(
        "--max-events", type=int, help="about this many binlog rows per micro-batch (cut at a transaction boundary)"
    )
    p.add_argument(
        "--max-bytes",
        metavar="SIZE",
        help="about this many bytes of binlog per micro-batch, e.g. 64m (cut at a transaction boundary)",
    )
    p.add_argument(
        "--skip-preflight",
        action="store_true",
        help="do not check the source, broker and MySQL sink before starting (the checks of `changefeed check`)",
    )


def add_routes_option(p: argparse.ArgumentParser) -> None:
    """``--routes CONFIG.toml`` for the commands that take no whole changefeed config (apply, capture)."""
    p.add_argument(
        "--routes",
        type=Path,
        metavar="CONFIG.toml",
        help="route tables by the [[routes]] (and routing [[sink.dispatchers]]) of this file, with its "
        "[[filter.event-filters]] and online-ddl (docs/routing.md)",
    )


def add_spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--checkpoint",
        type=checkpoint_location,
        help="Spark checkpoint directory or Hadoop URI (hdfs://, s3a://...; default: OUTPUT/_spark_checkpoint)",
    )
    p.add_argument(
        "--trigger-interval",
        default=None,
        help="micro-batch interval such as 500ms, 1s, 1m (default 300ms into Kafka or MySQL, 1s into files)",
    )
    p.add_argument("--available-now", action="store_true", help="process what is there now, then exit")
    p.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting (repeatable)"
    )
    p.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="Spark Connect: not supported (the jobs' foreachBatch would run on the Connect server; docs/deploy.md)",
    )
    ship = p.add_mutually_exclusive_group()
    ship.add_argument(
        "--py-env",
        metavar="ARCHIVE",
        help="a cluster master: ship this pre-built packed virtualenv (.tar.gz, local path or a URI the cluster "
        "reads) to the executors instead of packing this one (docs/deploy.md)",
    )
    ship.add_argument(
        "--no-ship",
        action="store_true",
        help="a cluster master: ship nothing, the nodes' Python has changefeed installed (docs/deploy.md)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on http://ADDR:PORT/metrics while the job runs (docs/operations.md)",
    )
    p.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address the metrics endpoint listens on (default 127.0.0.1; 0.0.0.0 for every interface)",
    )


def default_checkpoint(kind: str, changefeed_id: str) -> Path:
    """``./.changefeed/KIND-ID``: where a job without an output directory keeps Spark's checkpoint."""
    return private_dir(Path.cwd() / ".changefeed") / f"{kind}-{changefeed_id}"


def prepare_checkpoint(checkpoint: Path | str) -> Path | str:
    """The checkpoint location made absolute; a local directory created 0700 before Spark, the merge stage or
    the status file write into it (a URI's directories are the filesystem's to create)."""
    location = checkpoint_location(checkpoint)
    return private_dir(location) if isinstance(location, Path) else location


#: The micro-batch interval when neither ``--trigger-interval`` nor the sink-uri's ``flush-interval``
#: sets one, by sink. Kafka and MySQL take 300 ms: with a fork-free checkpoint a micro-batch costs
#: each job ~0.1 s of CPU whatever it holds, and the two jobs in series then keep the commit ->
#: visible lag at p99 0.8-0.9 s from 500 to 10,000 rows/s (1 s gave 2.2-2.4 s; bench/RESULTS.md,
#: "The trigger interval"). Under more load than that, batches outlast the interval and the fixed
#: cost spreads over more rows by itself. Files and lake tables keep 1 s: every batch writes a file
#: or a table commit, and TiCDC's storage sink flushes every 5 s.
DEFAULT_INTERVAL = {"kafka": "300ms", "mysql": "300ms", "tidb": "300ms"}
FILES_INTERVAL = "1s"


def default_interval(sink_scheme: str) -> str:
    """The default trigger interval of a job into ``sink_scheme`` (``kafka``, ``mysql``, ``file``, ``delta``...)."""
    return DEFAULT_INTERVAL.get(sink_scheme, FILES_INTERVAL)


def spark_interval(text: str) -> str:
    """``1s`` / ``500ms`` / ``2m`` -> Spark's ``processingTime`` text."""
    m = _INTERVAL.match(text)
    if not m:
        raise ConfigError(f"bad interval {text!r}: expected a number with ms, s, m or h (1s, 500ms)")
    ms = int(float(m.group(1)) * _UNIT_MS[m.group(2) or "s"])
    return f"{ms} milliseconds"


def show_progress() -> None:
    """Progress lines (rows/s, position, lag) go to stderr unless --log-level asked for less."""
    logger = logging.getLogger("changefeed.progress")
    if logger.getEffectiveLevel() > logging.INFO and logging.getLogger().level <= logging.WARNING:
        logger.setLevel(logging.INFO)


def wall_time(tso: int) -> str:
    if not tso:
        return "-"
    return datetime.fromtimestamp((tso >> 18) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def refuse_remote(args: argparse.Namespace) -> None:
    """``--remote sc://...`` is refused before anything connects anywhere (the source, the broker, Spark)."""
    if getattr(args, "remote", None):
        raise ConfigError(
            f"--remote {args.remote}: Spark Connect cannot run these jobs: their foreachBatch holds the sink, the "
            "merge state and the exactly-once commit in this process, and Connect runs foreachBatch in a Python "
            "process on the server instead; run changefeed on a host of the cluster with --master (docs/deploy.md)"
        )


def run(args: argparse.Namespace) -> int:
    from ..config import load_config, parse_sink_uri  # noqa: PLC0415

    refuse_remote(args)
    config = load_config(args.config)
    if args.sink_uri:
        config.sink_uri = parse_sink_uri(args.sink_uri, Path.cwd())
    plan = capture_plan(args, config)
    stats = launch(args, plan)
    _summary(config.changefeed_id, stats, plan.where)
    return 0


@dataclass
class JobPlan:
    """What `run`, `apply` and `pipeline` decide before Spark starts: one job's source, sink and settings."""

    job: str  # capture | apply
    changefeed_id: str
    source: dict[str, str]  # data source options
    make_sink: Callable[[], Sink]
    checkpoint: Path | str
    interval: str
    where: str  # the sink, for the summary line
    kinds: tuple[str, str]  # source and sink kind, for logs and metrics (`set_job_context`)
    router: EventTransform | None = None


def capture_plan(args: argparse.Namespace, config: ChangefeedConfig) -> JobPlan:
    """The capture job of ``config`` (preflight checks included unless ``args.skip_preflight``)."""
    from ..spark.jobs import source_options  # noqa: PLC0415

    sink_kind = "storage" if config.sink_uri.scheme == "file" else config.sink_uri.scheme
    source = source_options(
        config.source.data_source_options(partial_images=config.sink_uri.is_lake),
        rules=config.filter.rules,
        time_zone=config.time_zone,
        max_events=args.max_events,
    )
    if args.max_bytes:
        source["maxBytesPerTrigger"] = args.max_bytes
    if config.source.is_live and config.source.signal_table != "":
        from ..capture.snapshot.signal import DEFAULT_SIGNAL_TABLE  # noqa: PLC0415

        source["signalTable"] = config.source.signal_table or ".".join(DEFAULT_SIGNAL_TABLE)
        source["changefeedId"] = config.changefeed_id  # a signal may name the changefeed it is for
    if config.sink_uri.is_kafka or config.sink_uri.is_mysql:
        # No output directory to hold Spark's offsets: default to one per changefeed in the current directory.
        checkpoint = args.checkpoint or default_checkpoint("run", config.changefeed_id)
    else:
        checkpoint = args.checkpoint or config.sink_uri.path / "_spark_checkpoint"
    make_sink: Callable[[], Sink]
    if config.sink_uri.is_kafka:
        from ..sink.kafka import KafkaSink  # noqa: PLC0415

        kafka = config.kafka_sink_config()
        if not args.skip_preflight:
            preflight(
                config,
                checkpoint,
                broker=(kafka.bootstrap_servers, kafka.topic, kafka.partition_num),
                broker_config=kafka.client_config,
            )
        make_sink = partial(KafkaSink, kafka)
        where = f"kafka {kafka.bootstrap_servers} topic {kafka.topic}"
    elif config.sink_uri.is_mysql:
        from ..sink.mysql import MySQLSink  # noqa: PLC0415

        connection, sink_config = config.mysql_sink()
        if config.shard_mode == "pessimistic":
            sink_config = replace(sink_config, shard_members=config.shard_members())
        if not args.skip_preflight:
            preflight(config, checkpoint, sink=connection)
        make_sink = partial(MySQLSink, connection, sink_config)
        where = f"{connection} (changefeed {config.changefeed_id})"
    elif config.sink_uri.is_lake:
        # Capture writes the tables itself (docs/lakehouse.md): no topic or files in between.
        make_sink = config.lake_sink()
        if not args.skip_preflight:
            preflight(config, checkpoint)
        mode = config.sink_uri.params.get("mode", "upsert")
        where = f"{config.sink_uri.scheme} tables in {config.sink_uri.path} (mode={mode})"
    else:
        from ..sink.storage.writer import StorageWriter  # noqa: PLC0415

        out = config.sink_uri.path
        if not args.skip_preflight:
            preflight(config, checkpoint)
        make_sink = partial(StorageWriter, out, config.codec_options(), config.storage_options())
        where = f"storage {out}"
    interval = args.trigger_interval or config.flush_interval or default_interval(config.sink_uri.scheme)
    if config.source.snapshot_mode == "initial-only":
        args.available_now = True  # the snapshot alone, then exit (Debezium's initial_only streams nothing after it)
    kinds = (config.source.type, sink_kind)
    return JobPlan(
        "capture", config.changefeed_id, source, make_sink, checkpoint, interval, where, kinds, config.router()
    )


def launch(args: argparse.Namespace, plan: JobPlan, stop: threading.Event | None = None) -> JobStats:
    """What `run` and `apply` share once they chose a source and a sink: the checkpoint directory,
    progress lines, Spark, the job (with its table router); a streaming failure becomes one error line.
    ``stop``: set by another thread to stop the job (`changefeed pipeline`)."""
    from ..ops.monitor import set_job_context  # noqa: PLC0415
    from ..spark.jobs import run_job, streaming  # noqa: PLC0415

    set_job_context(args, plan.changefeed_id, source=plan.kinds[0], sink=plan.kinds[1])
    trigger = spark_interval(plan.interval)
    checkpoint = prepare_checkpoint(plan.checkpoint)
    spark = spark_session(args)
    return streaming(
        lambda: run_job(
            spark,
            plan.source,
            plan.make_sink(),
            checkpoint,
            job=plan.job,
            trigger_interval=trigger,
            available_now=args.available_now,
            router=plan.router,
            stop=stop,
        )
    )


def spark_session(args: argparse.Namespace) -> Any:
    """The SparkSession of ``args`` (`--master`, `--spark-conf`, shipping): started once per process.
    (Typed Any: pyspark is imported only under changefeed/spark, tests/test_architecture.py.)"""
    from ..spark.session import start_spark  # noqa: PLC0415 - only these commands pay for a JVM

    show_progress()
    return start_spark(
        args.master, args.spark_conf, py_env=getattr(args, "py_env", None), ship=not getattr(args, "no_ship", False)
    )


def preflight(
    config: ChangefeedConfig,
    checkpoint: Path | str,
    *,
    broker: tuple[str, str, int | None] | None = None,
    broker_config: Mapping[str, Any] | None = None,
    sink: MySQLParams | None = None,
) -> None:
    """The checks of `changefeed check` that apply to this changefeed; raise `PreflightError` on any error.

    A live source is checked at the position the run will read from: the last committed offset in
    Spark's checkpoint (a purged file shows up here, not as replication error 1236 later), or the
    configured start. It must have binlog_row_metadata=FULL: the binlog input runs without the schema tracker.
    """
    from ..ops.preflight import check_all, raise_for_errors  # noqa: PLC0415

    source: MySQLParams | None = None
    start: Any = None
    snapshot: Callable[[str, str], bool] | None = None
    if config.source.is_live:
        source = config.source.server().sql_params()
        start = resume_position(checkpoint) or _configured_start(config.source.start_position)
        if config.source.snapshot_mode == "when-needed":
            start = None  # a purged position is not an error: the run snapshots the tables again
        if config.source.snapshot_mode != "never":
            from ..model.tablefilter import TableFilter  # noqa: PLC0415

            snapshot = TableFilter(config.filter.rules).match  # the tables a snapshot reads
    bootstrap, topic, partitions = broker if broker is not None else (None, None, None)
    findings = check_all(
        source=source,
        start=start,
        schema_tracker=False,
        snapshot=snapshot,
        broker=bootstrap,
        topic=topic,
        partitions=partitions,
        sink=sink,
        broker_config=broker_config,
        partial_images=config.sink_uri.is_lake,  # the lake sinks fill MINIMAL images (docs/lakehouse.md)
    )
    raise_for_errors(findings)


def _configured_start(text: str) -> Any:
    """``start-position`` as a position to check, when it names a file (not latest/earliest/a GTID set)."""
    from ..spark.datasource.binlog import parse_start  # noqa: PLC0415

    start = parse_start(text) if text else None
    return start if not isinstance(start, str) and start is not None and start.file else None


def resume_position(checkpoint: Path | str) -> dict[str, Any] | None:
    """The source offset the next micro-batch of a Spark checkpoint starts at: its last committed batch's end.

    A batch without a commit is re-run from the previous end (`changefeed.ops.status.spark_status`).
    """
    from ..ops.status import spark_status  # noqa: PLC0415

    if not open_store(checkpoint).child("offsets").exists():
        return None
    for offset in spark_status(checkpoint).committed_offsets:
        if isinstance(offset, dict) and "file" in offset:
            return offset
    return None


def _summary(changefeed_id: str, stats: Any, where: str) -> None:
    print(
        f"changefeed {changefeed_id}: {stats.rows} rows in {stats.batches} batches "
        f"({stats.seconds:.1f} s); position {stats.position or '-'}; "
        f"checkpoint ts {stats.checkpoint_ts} ({wall_time(stats.checkpoint_ts)}); {where}",
        file=sys.stdout,
    )
