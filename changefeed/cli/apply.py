"""``changefeed apply --from file://STORAGE --to parquet://DIR``: the apply job on Spark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError
from .run import add_spark_options, show_progress, spark_interval, start_spark, streaming, wall_time

# Storage-layout parameters of a sink-uri: the reader finds the layout itself, so they are accepted
# (the capture's sink-uri can be passed as is) and ignored.
_LAYOUT_PARAMS = frozenset(
    {"date-separator", "enable-partition-separator", "file-index-width", "file-size", "flush-interval"}
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "apply",
        help="apply a storage-sink directory to Parquet snapshots as a Spark streaming job",
        description="Follow a TiCDC storage-sink directory (written by `changefeed run` or by TiCDC) and keep "
        "one Parquet snapshot per table (latest row per key as of the published checkpoint).",
    )
    p.add_argument("--from", dest="source", required=True, help="file://DIR?protocol=canal-json|csv&...")
    p.add_argument("--to", dest="target", required=True, help="parquet://DIR")
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


def run(args: argparse.Namespace) -> int:
    from ..codec import CodecOptions  # noqa: PLC0415
    from ..spark.jobs import run_apply  # noqa: PLC0415

    source, params = _local_path(args.source, "file")
    target, extra = _local_path(args.target, "parquet")
    if extra:
        raise ConfigError(f"parquet:// takes no parameters, got {', '.join(sorted(extra))}")
    if not source.is_dir():
        raise ConfigError(f"no storage directory at {source}")
    codec = CodecOptions.from_mapping({k: v for k, v in params.items() if k not in _LAYOUT_PARAMS})
    if codec.protocol not in ("canal-json", "csv"):
        raise ConfigError(f"a storage directory holds csv or canal-json, not {codec.protocol!r}")
    checkpoint = args.checkpoint or target / "_spark_checkpoint"
    show_progress()
    spark = start_spark(args.master, args.spark_conf)
    stats = streaming(
        lambda: run_apply(
            spark,
            source,
            codec,
            target,
            checkpoint,
            trigger_interval=spark_interval(args.trigger_interval or "1s"),
            available_now=args.available_now,
        )
    )
    print(
        f"apply: {stats.rows} rows in {stats.batches} batches ({stats.seconds:.1f} s); "
        f"checkpoint ts {stats.checkpoint_ts} ({wall_time(stats.checkpoint_ts)}); snapshots in {target}",
        file=sys.stdout,
    )
    return 0
