"""``changefeed pipeline CONFIG.toml``: capture and apply as two streaming queries in one SparkSession.

For a user who wants both jobs on one host: the config's sink-uri (a Kafka topic or a storage
directory) is what the capture writes and the apply reads, and its ``[apply]`` table names the
target (``to = "mysql://..."``, ``delta://DIR``, ...). Each query keeps its own checkpoint and is
exactly once on its own, as `changefeed run` and `changefeed apply` are; one JVM, one set of
Python workers, one command. With ``--available-now`` the capture runs to the end of what is
there and then the apply does (run together, the apply could stop before the capture's last batch
reached it). Streaming, both run until Ctrl-C, which stops both, or until one fails, which stops
the other and reports the failure.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .run import (
    JobPlan,
    add_capture_options,
    add_spark_options,
    capture_plan,
    launch,
    refuse_remote,
    spark_session,
    wall_time,
)

if TYPE_CHECKING:
    from ..spark.jobs import JobStats


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pipeline",
        help="run capture and apply of one config as two Spark streaming queries in one process",
        description="Run the capture job of CONFIG.toml (into its kafka:// or file:// sink-uri) and the apply job "
        "of its [apply] table (that topic or directory into [apply] to) in one SparkSession. --checkpoint is "
        "the capture's; the apply's is [apply] checkpoint or its default (docs/deploy.md).",
    )
    p.add_argument("config", type=Path, help="changefeed config (TOML) with an [apply] table")
    add_spark_options(p)
    add_capture_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..config import load_config  # noqa: PLC0415
    from .apply import apply_plan  # noqa: PLC0415

    refuse_remote(args)
    config = load_config(args.config)
    if not config.apply_to:
        raise ConfigError(f'{args.config}: no [apply] table: `changefeed pipeline` needs [apply] to = "..."')
    capture = capture_plan(args, config)
    apply_args = argparse.Namespace(
        **{
            **vars(args),
            "metrics_port": args.metrics_port + 1 if args.metrics_port else None,  # beside the capture's
            "source": config.apply_source(),
            "target": config.apply_to,
            "changefeed_id": config.changefeed_id,
            "routes": None,  # the capture routed the events already
            "checkpoint": config.apply_checkpoint,
        }
    )
    apply = apply_plan(apply_args, wait_for_topic=False)  # checked now; the capture's sink creates the topic
    spark_session(args)  # one session for both (`launch` gets the active one)
    if args.available_now:
        first = launch(args, capture)
        second = launch(apply_args, apply)
    else:
        first, second = _together(args, capture, apply_args, apply)
    print(
        f"pipeline {config.changefeed_id}: captured {first.rows} rows in {first.batches} batches, applied "
        f"{second.rows} rows in {second.batches} batches; checkpoint ts {second.checkpoint_ts} "
        f"({wall_time(second.checkpoint_ts)}); {capture.where} -> {apply.where}",
        file=sys.stdout,
    )
    return 0


def _together(
    args: argparse.Namespace, capture: JobPlan, apply_args: argparse.Namespace, apply: JobPlan
) -> tuple[JobStats, JobStats]:
    """Both queries at once, the capture in a thread: Ctrl-C (the main thread's) or a failure of either
    stops both; the first failure is what the command reports."""
    stop = threading.Event()
    outcome: dict[str, JobStats | BaseException] = {}

    def capture_job() -> None:
        try:
            outcome["capture"] = launch(args, capture, stop)
        except BaseException as exc:
            outcome["capture"] = exc
        finally:
            stop.set()  # the capture ended (stopped or failed): so does the apply

    thread = threading.Thread(target=capture_job, name="changefeed-capture", daemon=True)
    thread.start()
    try:
        if apply.source.get("input") == "kafka":  # the capture creates it with its first batch
            from .apply import wait_for_kafka_topic  # noqa: PLC0415

            wait_for_kafka_topic(apply.source, cancel=stop)
        outcome["apply"] = launch(apply_args, apply, stop)
    except BaseException as exc:
        outcome["apply"] = exc
    finally:
        stop.set()
        thread.join()
    failures = [v for v in (outcome.get("capture"), outcome.get("apply")) if isinstance(v, BaseException)]
    real = [f for f in failures if not isinstance(f, KeyboardInterrupt)]
    if real:
        raise real[0]
    if failures:
        raise failures[0]
    first, second = outcome["capture"], outcome["apply"]
    assert not isinstance(first, BaseException) and not isinstance(second, BaseException)
    return first, second
