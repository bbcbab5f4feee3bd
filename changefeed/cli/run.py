"""``changefeed run CONFIG.toml``: the capture job (binlog files -> storage-sink directory or Kafka) on Spark."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ChangefeedError, ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a changefeed (binlog files -> storage or kafka sink) as a Spark streaming job",
        description="Run the changefeed described by CONFIG.toml as a Spark Structured Streaming query. "
        "Spark's checkpoint directory is the savepoint: run it again to resume. Progress goes to stderr; "
        "Ctrl-C stops cleanly.",
    )
    p.add_argument("config", type=Path, help="changefeed config (TOML, docs/configuration.md)")
    add_spark_options(p)
    p.add_argument("--sink-uri", help="override the config's sink-uri (relative paths: the current directory)")
    p.add_argument("--max-events", type=int, help="at most about this many binlog row events per micro-batch")
    p.set_defaults(func=run)


def add_spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--checkpoint", type=Path, help="Spark checkpoint directory (default: OUTPUT/_spark_checkpoint)")
    p.add_argument("--trigger-interval", default=None, help="micro-batch interval such as 500ms, 1s, 1m (default 1s)")
    p.add_argument("--available-now", action="store_true", help="process what is there now, then exit")
    p.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting (repeatable)"
    )


def spark_interval(text: str) -> str:
    """``1s`` / ``500ms`` / ``2m`` -> Spark's ``processingTime`` text."""
    m = _INTERVAL.match(text)
    if not m:
        raise ConfigError(f"bad interval {text!r}: expected a number with ms, s, m or h (1s, 500ms)")
    ms = int(float(m.group(1)) * _UNIT_MS[m.group(2) or "s"])
    return f"{ms} milliseconds"


def start_spark(master: str, settings: list[str] | None = None) -> SparkSession:
    from ..spark import spark_session  # noqa: PLC0415 - only these commands pay for a JVM

    conf: dict[str, str] = {}
    for item in settings or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--spark-conf needs KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    spark = spark_session(master=master, app_name="changefeed", extra_conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def show_progress() -> None:
    """Progress lines (rows/s, position, lag) go to stderr unless --log-level asked for less."""
    logger = logging.getLogger("changefeed.progress")
    if logger.getEffectiveLevel() > logging.INFO and logging.getLogger().level <= logging.WARNING:
        logger.setLevel(logging.INFO)


def wall_time(tso: int) -> str:
    if not tso:
        return "-"
    return datetime.fromtimestamp((tso >> 18) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def streaming(call: Any) -> Any:
    """Run a job; Spark's streaming failure becomes one ChangefeedError line (details in the log)."""
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415

    try:
        return call()
    except StreamingQueryException as exc:
        log.debug("streaming query failed", exc_info=True)
        text = str(exc).strip().splitlines()
        raise ChangefeedError(f"streaming query failed: {text[0] if text else type(exc).__name__}") from None


def run(args: argparse.Namespace) -> int:
    from ..config import load_config, parse_sink_uri  # noqa: PLC0415
    from ..spark.jobs import run_capture, run_capture_kafka  # noqa: PLC0415

    config = load_config(args.config)
    if args.sink_uri:
        config.sink_uri = parse_sink_uri(args.sink_uri, Path.cwd())
    interval = args.trigger_interval or config.flush_interval or "1s"
    if config.sink_uri.is_kafka:
        kafka = config.kafka_sink_config()
        # No output directory to hold Spark's offsets: default to one per changefeed in the current directory.
        checkpoint = args.checkpoint or Path.cwd() / ".changefeed" / f"run-{config.changefeed_id}"
        show_progress()
        spark = start_spark(args.master, args.spark_conf)
        stats = streaming(
            lambda: run_capture_kafka(
                spark,
                config.source.path,
                kafka,
                checkpoint,
                rules=config.filter.rules,
                time_zone=config.time_zone,
                max_events=args.max_events,
                trigger_interval=spark_interval(interval),
                available_now=args.available_now,
            )
        )
        where = f"kafka {kafka.bootstrap_servers} topic {kafka.topic}"
        _summary(config.changefeed_id, stats, where)
        return 0
    out = config.sink_uri.path
    checkpoint = args.checkpoint or out / "_spark_checkpoint"
    show_progress()
    spark = start_spark(args.master, args.spark_conf)
    stats = streaming(
        lambda: run_capture(
            spark,
            config.source.path,
            out,
            config.codec_options(),
            checkpoint,
            storage=config.storage_options(),
            rules=config.filter.rules,
            time_zone=config.time_zone,
            max_events=args.max_events,
            trigger_interval=spark_interval(interval),
            available_now=args.available_now,
        )
    )
    _summary(config.changefeed_id, stats, f"storage {out}")
    return 0


def _summary(changefeed_id: str, stats: Any, where: str) -> None:
    print(
        f"changefeed {changefeed_id}: {stats.rows} rows in {stats.batches} batches "
        f"({stats.seconds:.1f} s); position {stats.position or '-'}; "
        f"checkpoint ts {stats.checkpoint_ts} ({wall_time(stats.checkpoint_ts)}); {where}",
        file=sys.stdout,
    )
