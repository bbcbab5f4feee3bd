"""The capture job's hand-over, measured: binlog -> encode stage -> storage sink, in Spark, per row.

    .venv/bin/python bench/capture_job.py --rows 200000

Starts a private MariaDB, writes ``--rows`` row events of the 10-column orders table (bench/binlog.py's
workload: multi-row INSERTs in big transactions, then updates and deletes), and runs the capture
job over the binlog files (``availableNow``, canal-json storage sink, ``local[2]``) twice per repeat,
interleaved, on one Spark session:

* ``ranges``: today's job (`run_job` into a `StorageWriter`): the source hands each partition's binlog range to the
  encode stage, which decodes and encodes it in one Python worker;
* ``jsonl``: the previous hand-over, rebuilt from the same parts as the peer: the source decodes
  and emits one changelog row per event with four JSON documents, the encode stage re-parses the
  JSONL ``event`` column.

CPU is the whole process tree (this driver, its JVM and the JVM's Python workers) from /proc, so
it is comparable on a shared machine; both outputs are compared byte for byte.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.apply_job import tree_cpu
from bench.binlog import generate
from changefeed.codec import CodecOptions
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.datasource import register
from changefeed.spark.encode import encode_storage, jsonl_events
from changefeed.spark.jobs import Plan, _BatchRunner, _run_query, run_job, source_options
from changefeed.spark.session import spark_session
from changefeed.testing.mariadb import MariaDBServer

CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True, clock=int)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def jsonl_capture(spark: object, binlog: Path, out: Path, checkpoint: Path) -> int:
    """The previous hand-over: changelog rows with JSONL events from the source, parsed again to encode."""
    writer = StorageWriter(out, CODEC)
    register(spark)
    stream = (
        spark.readStream.format("changefeed")  # type: ignore[attr-defined]
        .option("input", "binlog")
        .option("path", str(binlog))
        .option("events", "true")
        .load()
    )
    plan = Plan(stream, lambda df, _: encode_storage(df.select("event"), writer, jsonl_events), writer.write_encoded)
    runner = _BatchRunner("capture-jsonl", writer, plan, None)
    return _run_query(spark, stream, runner, checkpoint, None, True, "bench-jsonl").rows  # type: ignore[arg-type]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--events-per-partition", type=int, default=None)
    args = p.parse_args()
    print("$ " + shlex.join(sys.orig_argv), flush=True)
    extra = {"innodb_buffer_pool_size": "512M", "max_binlog_size": "1G", "innodb_log_file_size": "256M"}
    with (
        MariaDBServer(server_id=1, name="bench-capture", extra_config=extra) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        generate(server, args.rows, no_progress=True)
        server.connect().cursor().execute("FLUSH BINARY LOGS")
        spark = spark_session("local[2]")
        me = os.getpid()
        best: dict[str, tuple[float, float]] = {}
        outputs: dict[str, dict[str, bytes]] = {}
        for rep in range(args.repeat):
            for name in ("ranges", "jsonl"):
                out, ck = Path(tmp) / f"{name}-{rep}", Path(tmp) / f"ck-{name}-{rep}"
                c0, t0 = tree_cpu(me), time.perf_counter()
                if name == "ranges":
                    kw = {"events_per_partition": args.events_per_partition} if args.events_per_partition else {}
                    source = source_options(server.binlog_dir, **kw)
                    rows = run_job(spark, source, StorageWriter(out, CODEC), ck, job="capture", available_now=True).rows
                else:
                    rows = jsonl_capture(spark, server.binlog_dir, out, ck)
                cpu, wall = tree_cpu(me) - c0, time.perf_counter() - t0
                if rows != args.rows:
                    raise SystemExit(f"{name}: captured {rows} rows, expected {args.rows}")
                print(
                    f"  {name:7s} run {rep}: {rows / wall:>9,.0f} rows/s wall  {cpu * 1e6 / rows:7.1f} µs CPU/row"
                    f"  ({wall:.1f} s wall, {cpu:.1f} s CPU)",
                    flush=True,
                )
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, wall)
                outputs[name] = tree_bytes(out)
        spark.stop()
    same = outputs["ranges"] == outputs["jsonl"]
    print(f"outputs byte-identical: {same}")
    (rc, rw), (jc, jw) = best["ranges"], best["jsonl"]
    n = args.rows
    print(f"best ranges: {rc * 1e6 / n:.1f} µs CPU/row, {n / rw:,.0f} rows/s wall")
    print(f"best jsonl:  {jc * 1e6 / n:.1f} µs CPU/row, {n / jw:,.0f} rows/s wall")
    print(f"CPU ratio jsonl/ranges: {jc / rc:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
