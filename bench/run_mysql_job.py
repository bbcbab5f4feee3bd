"""`changefeed run` from a binlog straight into MySQL, measured: binlog -> `run_job` -> `MySQLSink`, CPU per row.

    .venv/bin/python bench/run_mysql_job.py --rows 200000

Starts two private MariaDB servers, writes ``--rows`` row events of the orders table into the
first (bench/binlog.py's workload: multi-row INSERTs in big transactions, then updates and
deletes), and runs the job over its binlog files (``availableNow``, ``local[2]``) into the second,
alternating two hand-overs on one Spark session:

* ``blocks``: today's job (`run_job`, `plan`): the source hands over binlog ranges; the driver
  decodes them into Arrow row blocks, which the MySQL sink applies as multi-row statements
  built from columns;
* ``jsonl``: the previous hand-over (`changelog_plan`): the source decodes each range in an
  executor and emits one changelog row per event with four JSON documents; the driver parses
  the JSONL ``event`` column back into row changes.

CPU is per process tree from /proc (this driver, the Spark JVM with its Python workers, each
MariaDB server), so figures are comparable on a shared machine. Each run must leave the
downstream table equal to the upstream one (``CHECKSUM TABLE``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.apply_job import cpu_by_part
from bench.binlog import SCHEMA, generate
from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.spark.jobs import _BatchRunner, _run_query, changelog_plan, run_job, source_options
from changefeed.spark.session import spark_session
from changefeed.testing.mariadb import MariaDBServer


def checksum(server: MariaDBServer) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE {SCHEMA}.orders")
        return int(cur.fetchone()[1])


def reset(server: MariaDBServer) -> None:
    """The binlog's own CREATE DATABASE / CREATE TABLE make the table again."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute("DROP DATABASE IF EXISTS changefeed")


def jsonl_run(spark: Any, source: dict[str, str], sink: MySQLSink, checkpoint: Path) -> int:
    """The previous hand-over: changelog rows with JSONL events, parsed again on the driver."""
    sink.open()
    plan = changelog_plan(spark, source, sink)
    try:
        return _run_query(
            spark, plan.stream, _BatchRunner("jsonl", sink, plan, None), checkpoint, None, True, "jsonl"
        ).rows
    finally:
        sink.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--variants", default="blocks,jsonl")
    args = p.parse_args()
    print("$ " + shlex.join(sys.orig_argv), flush=True)
    extra = {"innodb_buffer_pool_size": "512M", "max_binlog_size": "1G", "innodb_log_file_size": "256M"}
    with (
        MariaDBServer(server_id=1, name="bench-run-up", extra_config=extra) as upstream,
        MariaDBServer(server_id=2, name="bench-run-down", extra_config=extra) as downstream,
        tempfile.TemporaryDirectory() as tmp,
    ):
        generate(upstream, args.rows, no_progress=True)
        upstream.connect().cursor().execute("FLUSH BINARY LOGS")
        want = checksum(upstream)
        spark = spark_session("local[2]")
        me = os.getpid()
        services = {"mariadb-up": upstream.pid, "mariadb-down": downstream.pid}
        source = source_options(upstream.binlog_dir, time_zone="UTC")
        best: dict[str, dict[str, float]] = {}
        for rep in range(args.repeat):
            for variant in args.variants.split(","):
                reset(downstream)
                ck = Path(tmp) / f"ck-{variant}-{rep}"
                sink = MySQLSink(downstream.url, MySQLSinkConfig(changefeed_id=f"bench-{variant}-{rep}"))
                before, t0 = cpu_by_part(me, services), time.perf_counter()
                if variant == "blocks":
                    rows = run_job(spark, source, sink, ck, job="capture", available_now=True).rows
                else:
                    rows = jsonl_run(spark, source, sink, ck)
                wall = time.perf_counter() - t0
                after = cpu_by_part(me, services)
                if rows != args.rows:
                    raise SystemExit(f"{variant}: applied {rows} rows, expected {args.rows}")
                if checksum(downstream) != want:
                    raise SystemExit(f"{variant}: the downstream table differs from the upstream one")
                spent = {k: (after[k] - before[k]) * 1e6 / rows for k in after}
                total = spent["driver"] + spent["jvm+workers"]
                parts = ", ".join(f"{k} {v:.1f}" for k, v in spent.items())
                print(
                    f"{variant} rep {rep}: {rows / wall:,.0f} rows/s wall, job {total:.1f} µs CPU/row ({parts})",
                    flush=True,
                )
                if variant not in best or total < best[variant]["job"]:
                    best[variant] = {"job": total, "wall": rows / wall, **spent}
        spark.stop()
    for variant, figures in best.items():
        print(f"best {variant}: job {figures['job']:.1f} µs CPU/row, {figures['wall']:,.0f} rows/s wall")
    if {"blocks", "jsonl"} <= best.keys():
        print(f"job CPU ratio jsonl/blocks: {best['jsonl']['job'] / best['blocks']['job']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
