"""``changefeed apply --from file://STORAGE | kafka://... --to parquet://DIR | delta://DIR | iceberg://DIR | mysql://...``:
the apply job on Spark."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError
from .run import (
    JobPlan,
    add_routes_option,
    add_spark_options,
    default_checkpoint,
    default_interval,
    launch,
    refuse_remote,
    wall_time,
)

if TYPE_CHECKING:
    from ..sink.base import Sink

# Storage-layout parameters of a sink-uri: the reader finds the layout itself, so they are accepted
# (the capture's sink-uri can be passed as is) and ignored.
_LAYOUT_PARAMS = frozenset(
    {"date-separator", "enable-partition-separator", "file-index-width", "file-size", "flush-interval"}
)


#: What a reader of the downstream sees, per setting (docs/mysql-sink.md, "What readers see").
VISIBILITY = """\
what a downstream reader sees:
  --to mysql://...?worker-count=1 (the default; any safe-mode, any max-txn-row)
      mid-batch:     only whole upstream transactions: a batch of whole transactions commits
                     with the checkpoint row in ONE downstream transaction (atomic per transaction)
      after a crash: nothing past the checkpoint; the restart resumes there (exactly once)
  --to mysql://...?worker-count=N, N > 1
      mid-batch:     PARTS of an upstream transaction: each worker commits its share separately
                     and the checkpoint is written after all of them, in a separate transaction
      after a crash: rows past the checkpoint may be there; the restart replays them in safe mode:
                     only EVENTUAL equality (the same final state once the replay passed them)
  --to parquet://DIR
      mid-batch:     each table's snapshot file is replaced whole, one table after another
      after a crash: snapshots may be ahead of the checkpoint; the replay converges (eventual)
  --to delta://DIR | iceberg://DIR
      mid-batch:     each table's batch is one table commit (with its checkpoint ts), one table after another
      after a crash: each table skips what its own last commit holds (exactly once per table)
Use worker-count=1 when readers must never see a partial upstream transaction.
"""


class _KeepLayout(argparse.HelpFormatter):
    """Wraps the description as usual; keeps a text laid out on several lines (the epilog) as it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return text
        return super()._fill_text(text, width, indent)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "apply",
        help="apply a storage-sink directory to Parquet snapshots or MySQL as a Spark streaming job",
        description="Follow a TiCDC storage-sink directory (written by `changefeed run` or by TiCDC) and keep "
        "one Parquet snapshot per table (latest row per key as of the published checkpoint), or apply it to "
        "MySQL/MariaDB exactly once (checkpoint row in the same transaction).",
        epilog=VISIBILITY,
        formatter_class=_KeepLayout,
    )
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        help="file://DIR?protocol=canal-json|csv&... or kafka://HOST:PORT/TOPIC?protocol=open-protocol|canal-json&...",
    )
    p.add_argument(
        "--to",
        dest="target",
        required=True,
        help="parquet://DIR, delta://DIR?mode=upsert|changelog|scd2&optimize-every=N&retain-versions=N (compact "
        "every N table versions, default 100, 0 off; keep the newest N versions, default 0: all), "
        "iceberg://DIR?mode=...&catalog-uri=URI&catalog-namespace=NS&optimize-every=N&retain-versions=N "
        "(docs/lakehouse.md), "
        "or mysql://USER@HOST:PORT/?worker-count=N&safe-mode=true&password-file=PATH (MySQLSink; "
        "password also ?password-env=NAME or MYSQL_PWD)",
    )
    p.add_argument(
        "--changefeed-id",
        default="default",
        help="the changefeed this job belongs to: the key of a mysql target's checkpoint row, the id in logs, "
        "metrics and `changefeed status --changefeed ID` (default 'default')",
    )
    add_routes_option(p)
    add_spark_options(p)
    p.set_defaults(func=run)


def _local_path(uri: str, scheme: str) -> tuple[Path, dict[str, str]]:
    parts = urlsplit(uri)
    if parts.scheme.lower() != scheme:
        raise ConfigError(f"expected a {scheme}:// URI, got {uri!r}")
    location = parts.netloc + parts.path
    if not location:
        raise ConfigError(f"{uri!r} names no directory")
    return Path(location), dict(parse_qsl(parts.query, keep_blank_values=True))


def kafka_source(uri: str) -> dict[str, str]:
    """``kafka://HOST:PORT/TOPIC?protocol=...`` (the capture's sink-uri as is) -> data source options.

    The sink's topic and writing parameters (`KAFKA_WRITE_PARAMS`) are accepted and ignored; TLS and
    SASL parameters (`changefeed.clients.kafkauri`) are checked and the SASL password read here; it
    travels as the ``sasl-password`` option, which Spark redacts wherever it shows options.
    """
    from ..clients.kafkauri import KAFKA_SECURITY_PARAMS, KAFKA_WRITE_PARAMS, KafkaSecurity, KafkaURI  # noqa: PLC0415
    from ..codec import CodecOptions  # noqa: PLC0415

    kafka = KafkaURI.parse(uri)
    security = KafkaSecurity.from_params(kafka.params, where="--from kafka://")
    ignored = KAFKA_WRITE_PARAMS | KAFKA_SECURITY_PARAMS
    params = {k: v for k, v in kafka.params.items() if k not in ignored}
    CodecOptions.from_mapping(params)  # unknown codec parameters fail here, naming the key
    return {"input": "kafka", "bootstrap.servers": kafka.servers, "topic": kafka.topic, **params, **security.params()}


def wait_for_kafka_topic(options: Mapping[str, str], cancel: threading.Event | None = None) -> None:
    """Before Spark starts: wait until the topic of ``options`` (`kafka_source`) exists (consume/kafka.py);
    ``cancel`` ends the wait with an error."""
    from ..clients.kafkauri import KafkaSecurity  # noqa: PLC0415
    from ..consume.kafka import new_consumer, wait_for_topic  # noqa: PLC0415

    servers, topic = options["bootstrap.servers"], options["topic"]
    consumer = new_consumer(servers, KafkaSecurity.from_params(options, where="--from kafka://").client_config())
    try:
        wait_for_topic(consumer, topic, servers, cancel=cancel)
    finally:
        consumer.close()


def run(args: argparse.Namespace) -> int:
    refuse_remote(args)
    plan = apply_plan(args)
    stats = launch(args, plan)
    print(
        f"apply: {stats.rows} rows in {stats.batches} batches ({stats.seconds:.1f} s); "
        f"checkpoint ts {stats.checkpoint_ts} ({wall_time(stats.checkpoint_ts)}); {plan.where}",
        file=sys.stdout,
    )
    return 0


def apply_plan(args: argparse.Namespace, wait_for_topic: bool | None = None) -> JobPlan:
    """The apply job of ``args`` (``source``, ``target``, ``changefeed_id``, ``routes``, ``checkpoint``,
    ``trigger_interval``, ``available_now``). A streaming one from Kafka waits for its topic first
    unless ``wait_for_topic`` is False (`changefeed pipeline` starts the capture that creates it)."""
    from ..codec import CodecOptions, require_transport  # noqa: PLC0415
    from ..spark.jobs import storage_source  # noqa: PLC0415

    codec = CodecOptions()
    if urlsplit(args.source).scheme.lower() == "kafka":
        options = kafka_source(args.source)
        if wait_for_topic is None:
            wait_for_topic = not args.available_now  # a streaming apply started before its capture waits
        if wait_for_topic:
            wait_for_kafka_topic(options)
    else:
        source, params = _local_path(args.source, "file")
        if not source.is_dir():
            raise ConfigError(f"no storage directory at {source}")
        codec = CodecOptions.from_mapping({k: v for k, v in params.items() if k not in _LAYOUT_PARAMS})
        require_transport(codec.protocol, "storage", "a storage directory holds")
        options = storage_source(source, codec)
    scheme = urlsplit(args.target).scheme.lower()
    make_sink: Callable[[], Sink]
    if scheme in ("mysql", "tidb"):
        from ..sink.mysql import MySQLSink, MySQLSinkConfig  # noqa: PLC0415

        connection, config = MySQLSinkConfig.from_uri(
            args.target, args.changefeed_id, options.get("time-zone", codec.time_zone)
        )
        # Spark's offsets only save re-reading: the downstream checkpoint row is what makes it exactly once.
        checkpoint = args.checkpoint or default_checkpoint("apply", args.changefeed_id)
        make_sink = partial(MySQLSink, connection, config)
        where = f"{connection} (changefeed {args.changefeed_id})"
    elif scheme in ("delta", "iceberg"):
        target, params = _local_path(args.target, scheme)
        from ..sink.lake import lake_sink  # noqa: PLC0415

        make_sink = lake_sink(scheme, target, params, options.get("time-zone", codec.time_zone))
        checkpoint = args.checkpoint or target / "_spark_checkpoint"
        where = f"{scheme} tables in {target} (mode={params.get('mode', 'upsert')})"
    else:
        from ..sink.parquet import ParquetSnapshotSink  # noqa: PLC0415

        target, extra = _local_path(args.target, "parquet")
        if extra:
            raise ConfigError(f"parquet:// takes no parameters, got {', '.join(sorted(extra))}")
        checkpoint = args.checkpoint or target / "_spark_checkpoint"
        make_sink = partial(ParquetSnapshotSink, target)
        where = f"snapshots in {target}"
    router = None
    if args.routes is not None:
        from ..config import load_pipeline  # noqa: PLC0415

        router = load_pipeline(args.routes, args.changefeed_id, shard_ddl=scheme in ("mysql", "tidb"))
    interval = args.trigger_interval or default_interval(scheme)
    kinds = (urlsplit(args.source).scheme.lower(), scheme)
    return JobPlan("apply", args.changefeed_id, options, make_sink, checkpoint, interval, where, kinds, router)
