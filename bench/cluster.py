"""Scaling figure: each job alone on a Spark standalone cluster of 1 and of 2 one-core workers.

The pieces are bench/e2e.py's (the servers, the broker, the backlog, ``Job``, ``CpuMeter``); the
cluster is `changefeed.testing.cluster.StandaloneCluster` (workers that do not see the project:
the packed virtualenv is shipped, packed once up front and passed with ``--py-env``). For each
entry of ``--workers`` (default 1,2,2,1: the alternation shows drift in the machine's load) a new
cluster starts, then on a fresh topic, checkpoint and changefeed id:

* ``changefeed run --master spark://... --available-now``: binlog -> Kafka, timed from its query
  start (status file) until every row is in the topic (its progress lines);
* the downstream database dropped, then ``changefeed apply --master ... --available-now``:
  Kafka -> MariaDB, timed until the last row is visible; count and checksum must equal the upstream.

CPU per row from /proc, over the same interval: the driver's tree (the ``changefeed`` process, its
JVM, the JVM's Python workers), each worker's tree (the worker daemon, its executor JVM, the
executor's Python workers), the master, the broker and the MariaDB server the job talks to.
"Warm" figures start at the job's first progress line with rows (the first micro-batch carries
the executors' start: unpacking the archive, Python imports, JIT).

    .venv/bin/python bench/cluster.py --rows 200000 [--workers 1,2,2,1] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e import (
    BACKLOG,
    CHANGEFEED,
    PARTITIONS,
    BenchError,
    CpuMeter,
    Job,
    backlog_statements,
    batch_summary,
    check_equal,
    content,
    cpu_delta,
    create_tables,
    execute_all,
    report_header,
    say,
    server,
    service_pid,
)
from changefeed.spark.ship import pack_environment
from changefeed.testing import Broker, MariaDBServer
from changefeed.testing.cluster import StandaloneCluster

JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # as tests/spark/test_cluster.py
KINDS = ("driver", "driver JVM", "driver Python", "executor JVM", "executor Python", "worker daemons", "master")


def spark_conf(workers: int) -> list[str]:
    """tests/spark/test_cluster.py's settings: small executors, and no task before every worker's executor is up."""
    conf = {
        "spark.executor.memory": "512m",
        "spark.driver.extraJavaOptions": JVM,
        "spark.executor.extraJavaOptions": JVM,
        "spark.cores.max": str(workers),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "240s",
    }
    return [arg for k, v in conf.items() for arg in ("--spark-conf", f"{k}={v}")]


def kind(part: str) -> str:
    """CpuMeter's ``label: part`` -> a process kind of the table (a worker's root process is its daemon)."""
    label, _, role = part.partition(": ")
    if label == "job":
        return {"driver": "driver", "JVM": "driver JVM", "Python workers": "driver Python"}[role]
    if label.startswith("worker-"):
        return {"driver": "worker daemons", "JVM": "executor JVM", "Python workers": "executor Python"}[role]
    return label  # master, broker, MariaDB


def measure(job: Job, done: Callable[[], bool], meter: CpuMeter, timeout: float) -> dict[str, Any]:
    """Wait for ``done`` from the job's query start; wall and CPU in all and from its first batch with rows."""
    deadline = time.monotonic() + timeout
    while (started := job.started()) is None:
        job.check()
        if time.monotonic() > deadline:
            raise BenchError(f"{job.name}: no query start after {timeout:.0f} s")
        time.sleep(0.05)
    cpu0, t0, load0 = meter.read(), time.time(), os.getloadavg()
    warm: tuple[float, dict[str, float], int] | None = None
    while not done():
        if warm is None and any(b.rows for b in job.batches):
            warm = (time.time(), meter.read(), sum(b.rows for b in job.batches))
        if job.proc.poll() is not None:  # --available-now exits by itself: its last lines may still be parsed
            time.sleep(1.0)
            if done():
                break
            raise BenchError(f"{job.name} exited with {job.proc.returncode} before done; see {job.log}")
        if time.monotonic() > deadline:
            raise BenchError(f"{job.name}: not done after {timeout:.0f} s")
        time.sleep(0.05)
    t1, cpu1 = time.time(), meter.read()
    out: dict[str, Any] = {
        "startup_s": started - job.launched,
        "load_average": {"start": load0, "end": os.getloadavg()},
        "all": figures(t1 - t0, cpu_delta(cpu0, cpu1)),
        "batches": batch_summary(job.batches),
    }
    if warm is not None:
        out["warm"] = {"first_batch_rows": warm[2], **figures(t1 - warm[0], cpu_delta(warm[1], cpu1))}
    return out


def figures(seconds: float, cpu: Mapping[str, float]) -> dict[str, Any]:
    by_kind: dict[str, float] = defaultdict(float)
    for part, s in cpu.items():
        by_kind[kind(part)] += s
    return {"seconds": seconds, "cpu_seconds": dict(by_kind)}


def per_row(fig: Mapping[str, Any], rows: int) -> dict[str, Any]:
    """Rows/s and CPU µs/row by kind (``rows`` is what the interval moved)."""
    us = {k: s * 1e6 / rows for k, s in fig["cpu_seconds"].items()}
    us["total"] = sum(us.values())
    return {"rows": rows, "seconds": fig["seconds"], "rows_per_s": rows / fig["seconds"], "cpu_us_per_row": us}


def run_one(
    args: argparse.Namespace,
    n: int,
    index: int,
    work: Path,
    up: MariaDBServer,
    down: MariaDBServer,
    broker: Broker,
    archive: Path,
    upstream: tuple[int, int],
) -> dict[str, Any]:
    """One cluster of ``n`` workers: capture alone, then apply alone, each a new application."""
    cid, topic = f"bench-cluster-{index}", f"cluster-{index}"
    broker.create_topic(topic, PARTITIONS)
    uri = f"kafka://{broker.bootstrap_servers}/{topic}?protocol={args.protocol}"
    config = work / f"{cid}.toml"
    config.write_text(
        f'changefeed-id = "{cid}"\nsink-uri = "{uri}"\n\n'
        f'[source]\ntype = "mysql"\nurl = "{up.url}"\nstart-position = "earliest"\n\n'
        f'[filter]\nrules = ["{BACKLOG}.*"]\n'
    )
    out: dict[str, Any] = {"workers": n, "load_average_start": os.getloadavg()}
    with StandaloneCluster(workers=n, cores=1) as cluster:
        common = ["--master", cluster.url, "--available-now", "--py-env", str(archive), *spark_conf(n)]
        roots = {f"worker-{i}": (service_pid(w), True) for i, w in enumerate(cluster.workers)}
        roots["master"] = (service_pid(cluster.master), False)
        roots["broker"] = (service_pid(broker), False)
        rows = args.rows

        def app_tasks(before: list[str]) -> dict[str, Any]:
            apps = [a for a in cluster.applications() if a not in before]
            return {"app": apps, "tasks_per_worker": cluster.finished_tasks(apps[0]) if len(apps) == 1 else None}

        before = cluster.applications()
        argv = ["run", str(config), *common, "--max-events", str(args.max_events)]
        with Job(f"capture-{index}", argv, work, work / ".changefeed" / f"run-{cid}") as cap:
            meter_roots = {**roots, "job": (cap.proc.pid, True), "MariaDB upstream": (service_pid(up), False)}
            with CpuMeter(meter_roots) as meter:
                out["capture"] = measure(cap, lambda: cap.rows >= rows, meter, args.timeout)
            cap.proc.wait(120)  # the application ends (its executors with it) before the next
        out["capture"].update(app_tasks(before), exit_code=cap.proc.returncode)

        with down.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{BACKLOG}`")
        before = cluster.applications()
        argv = ["apply", "--from", uri, "--to", f"{down.url}/", "--changefeed-id", cid, *common]
        with (
            Job(f"apply-{index}", argv, work, work / ".changefeed" / f"apply-{cid}") as app,
            down.connect() as conn,
            conn.cursor() as cur,
        ):

            def last_row() -> bool:
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = 'orders'",
                    (BACKLOG,),
                )
                if not cur.fetchone()[0]:
                    return False
                cur.execute(f"SELECT MAX(id) FROM `{BACKLOG}`.orders")
                return cur.fetchone()[0] == rows

            meter_roots = {**roots, "job": (app.proc.pid, True), "MariaDB downstream": (service_pid(down), False)}
            with CpuMeter(meter_roots) as meter:
                out["apply"] = measure(app, last_row, meter, args.timeout)
            app.proc.wait(120)
        out["apply"].update(app_tasks(before), exit_code=app.proc.returncode)
        check_equal(down, BACKLOG, args.columns, upstream)
        out["apply"]["equal"] = list(upstream)
    out["load_average_end"] = os.getloadavg()
    for job in ("capture", "apply"):
        m = out[job]
        m["all"].update(per_row(m["all"], rows))
        if "warm" in m:
            m["warm"].update(per_row(m["warm"], rows - m["warm"]["first_batch_rows"]))
    return out


def show(run: Mapping[str, Any]) -> None:
    load = lambda xs: "/".join(f"{x:.2f}" for x in xs)  # noqa: E731
    print(f"\n== {run['workers']} worker(s): load {load(run['load_average_start'])} -> {load(run['load_average_end'])}")
    for job in ("capture", "apply"):
        m = run[job]
        print(
            f"  {job}: startup {m['startup_s']:.1f} s; tasks per worker {m['tasks_per_worker']}; "
            f"load {load(m['load_average']['start'])} -> {load(m['load_average']['end'])}"
        )
        for span in ("all", "warm"):
            if span not in m:
                continue
            f = m[span]
            us = ", ".join(f"{k} {v:.1f}" for k, v in f["cpu_us_per_row"].items() if v >= 0.05)
            print(
                f"    {span:>4}: {f['rows']:,} rows in {f['seconds']:.1f} s = {f['rows_per_s']:,.0f} rows/s;"
                f" µs/row {us}"
            )
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="backlog rows (default 200000)")
    ap.add_argument("--columns", type=int, choices=(3, 10), default=10, help="orders table width (default 10)")
    ap.add_argument("--workers", default="1,2,2,1", help="worker counts, one cluster each, in order (default 1,2,2,1)")
    ap.add_argument("--max-events", type=int, default=40_000, help="capture rows per micro-batch (default 40000)")
    ap.add_argument("--protocol", default="open-protocol", help="Kafka protocol (default open-protocol)")
    ap.add_argument("--timeout", type=float, default=600.0, help="give up any wait after this many seconds")
    ap.add_argument("--json", type=Path, help="write the figures here as JSON (after each cluster)")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    if not CHANGEFEED.exists():
        sys.exit(f"{CHANGEFEED} not found: run scripts/setup")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: clusters, servers, broker stop
    report = report_header("bench/cluster.py", rows=args.rows, columns=args.columns, workers=counts)
    report["runs"] = []
    print(
        f"command: {report['command']}\n{report['date_utc']} UTC, {report['cores']} cores,"
        f" load {report['load_average_start']}"
    )
    work = Path(tempfile.mkdtemp(prefix="changefeed-bench-cluster-"))
    print(f"work directory (job logs, configs, checkpoints): {work}", flush=True)
    try:
        with contextlib.ExitStack() as stack:
            # Packed once, before anything is measured; a private link so no other run's pruning removes it.
            archive = work / "pyenv.tar.gz"
            packed = pack_environment()
            try:
                os.link(packed, archive)
            except OSError:
                shutil.copyfile(packed, archive)
            up = stack.enter_context(server(1, "bench-up"))
            down = stack.enter_context(server(2, "bench-down"))
            broker = stack.enter_context(Broker())
            create_tables(up, BACKLOG, args.columns)
            seconds = execute_all(up, backlog_statements(args.rows, args.columns, 1000))
            upstream = content(up, BACKLOG, args.columns)
            say(f"backlog: {args.rows:,} rows upstream in {seconds:.1f} s")
            for index, n in enumerate(counts):
                say(f"cluster {index}: {n} worker(s)")
                run = run_one(args, n, index, work, up, down, broker, archive, upstream)
                report["runs"].append(run)
                show(run)
                if args.json:
                    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    except BenchError as exc:
        print(f"FAILED: {exc}\njob logs in {work}", file=sys.stderr)
        return 1
    finally:
        (work / "pyenv.tar.gz").unlink(missing_ok=True)
    report["load_average_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nload average at the end {report['load_average_end']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
