"""Initial snapshot benchmark: a populated table copied by ``changefeed run`` next to dump + load.

The upstream holds ``--rows`` rows of the 10-column orders table (or its first 3 columns) and its
binlog was reset afterwards, so the snapshot is the only way the rows can reach the downstream.
In the same run, on the same two private MariaDB servers:

* ``changefeed run`` with ``snapshot = "initial-only"`` and a ``mysql://`` sink-uri (the snapshot's
  chunks go straight into the downstream through the MySQL sink, exactly once), timed from its
  query start (status file) to its exit, and from its launch (Spark start-up included);
* with ``--parquet``, the snapshot as a Spark batch DataFrame (``input=snapshot``) written as
  Parquet (docs/snapshot.md, "As a Spark batch DataFrame"), in a process of its own, timed and
  metered from its session's start, the files read back with pyarrow (rows, sum of ids);
* ``mariadb-dump --single-transaction | mariadb``: DM's dump-and-load way;
* ``SELECT ... INTO OUTFILE`` on the upstream + ``LOAD DATA INFILE`` on the downstream: the
  fastest copy the servers themselves offer.

Each copy is checked equal to the upstream (row count and a checksum over every column's text).
CPU per row comes from /proc for the job's process tree and both servers; the clients' (dump,
mariadb) from their rusage. The issue's target is changefeed >= 70% of dump + load.

``--mode lag`` measures the issue's other target, the live stream's lag while a snapshot runs. One
``changefeed run`` (a ``mysql://`` sink-uri, the binlog from ``earliest``, no initial snapshot)
streams a small heartbeat table: a row inserted upstream every 100 ms carrying its commit wall time,
the downstream polled every 20 ms (``bench.e2e.Heartbeats``, as ``bench/e2e.py --modes steady``).
The orders table's ``--rows`` rows are upstream only (binlog reset after they were written). After
a warm-up, the heartbeats' commit -> visible-downstream lag is taken for ``--baseline`` seconds with
no snapshot, then ``changefeed snapshot CONFIG --tables bench_e2e.orders`` is issued and the lag is
taken again until the table's last row is downstream (the snapshot's rows/s: rows over that time),
then for ``--after`` seconds more. The copy is checked equal to the upstream.

    .venv/bin/python bench/snapshot.py [--rows 1000000] [--columns 10] [--chunk-size N] [--parquet] [--json out.json]
    .venv/bin/python bench/snapshot.py --mode lag [--rows 500000] [--baseline 45] [--trigger-interval 1s]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e import (
    BACKLOG,
    CHANGEFEED,
    COLUMNS,
    HEARTBEAT_DDL,
    BenchError,
    CpuMeter,
    Heartbeats,
    Job,
    backlog_statements,
    check_equal,
    content,
    cpu_delta,
    cpu_report,
    create_tables,
    execute_all,
    has_table,
    pct,
    print_cpu,
    print_trouble,
    report_header,
    say,
    server,
    service_pid,
    visible_at,
    wait_for,
)
from changefeed.testing import MariaDBServer


def _client_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _drop(down: MariaDBServer) -> None:
    with down.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{BACKLOG}`")
        cur.execute("DROP DATABASE IF EXISTS changefeed")  # the MySQL sink's checkpoint schema


def _meter(up: MariaDBServer, down: MariaDBServer, job: Job | None = None) -> CpuMeter:
    roots = {"MariaDB upstream": (service_pid(up), False), "MariaDB downstream": (service_pid(down), False)}
    if job is not None:
        roots["changefeed"] = (job.proc.pid, True)
    return CpuMeter(roots)


def changefeed_snapshot(
    args: argparse.Namespace, work: Path, up: MariaDBServer, down: MariaDBServer, load_data: str = "auto"
) -> dict[str, Any]:
    """``changefeed run`` with ``snapshot = "initial-only"`` into the downstream (the sink-uri's
    ``load-data``), until it exits."""
    name = f"bench-snapshot-{load_data}"  # a changefeed of its own per setting: no state shared
    config = work / f"{name}.toml"
    extra = f"snapshot-chunk-size = {args.chunk_size}\n" if args.chunk_size else ""
    config.write_text(
        f'changefeed-id = "{name}"\nsink-uri = "{down.url}/?load-data={load_data}"\n\n'
        f'[source]\ntype = "mysql"\nurl = "{up.url}"\nsnapshot = "initial-only"\n{extra}\n'
        f'[filter]\nrules = ["{BACKLOG}.*"]\n'
    )
    argv = ["run", str(config), *[a for kv in args.spark_conf for a in ("--spark-conf", kv)]]
    job = Job("snapshot-run", argv, work, work / ".changefeed" / f"run-{name}")
    try:
        with _meter(up, down, job) as meter:
            cpu0 = meter.read()
            started = wait_for("the snapshot job's query to start", job.started, [job], args.timeout, 0.05)
            query_cpu = meter.read()
            deadline = time.monotonic() + args.timeout
            while job.proc.poll() is None:
                if time.monotonic() > deadline:
                    raise BenchError(f"the snapshot job did not end within {args.timeout:.0f} s")
                time.sleep(0.05)
            ended = time.time()
            cpu = cpu_delta(query_cpu, meter.read())
            cpu_all = cpu_delta(cpu0, meter.read())
        if job.proc.returncode != 0:
            raise BenchError(f"the snapshot job exited with {job.proc.returncode}; {job.log}")
    finally:
        job.stop()
    rows = args.rows
    return {
        "seconds": ended - started,
        "rows_per_s": rows / (ended - started),
        "seconds_from_launch": ended - job.launched,
        "rows_per_s_from_launch": rows / (ended - job.launched),
        **cpu_report(cpu, rows),
        "cpu_seconds_from_launch": sum(s for part, s in cpu_all.items()),
        "batches": len([b for b in job.batches if b.rows]),
        "log_trouble": job.trouble(),
    }


def parquet_child(url: str, table: str, out: str, chunk_size: int = 0) -> int:
    """In its own process: the snapshot as a Spark batch DataFrame (``input=snapshot``, docs/snapshot.md)
    written as Parquet; prints when the read started (the session up) and ended, as JSON."""
    from changefeed.spark import spark_session  # noqa: PLC0415 - pyspark only in this child
    from changefeed.spark.datasource import register  # noqa: PLC0415

    spark = spark_session(app_name="bench-snapshot-parquet")
    register(spark)
    started = time.time()
    print("ready", flush=True)  # the parent reads the CPU spent so far: Spark's start-up, as the run's is left out
    reader = spark.read.format("changefeed").option("input", "snapshot").option("url", url).option("table", table)
    if chunk_size:
        reader = reader.option("snapshotChunkSize", str(chunk_size))
    reader.load().where("kind = 'row'").select("after.*").write.mode("overwrite").parquet(out)
    print(json.dumps({"started": started, "ended": time.time()}))
    spark.stop()
    return 0


def snapshot_to_parquet(
    args: argparse.Namespace, work: Path, up: MariaDBServer, upstream: tuple[int, int]
) -> dict[str, Any]:
    """`parquet_child` timed and metered; the files read back with pyarrow (count, sum of ids) against the upstream."""
    out = work / "orders-parquet"
    argv = [sys.executable, str(Path(__file__).resolve()), "--parquet-child", up.url, f"{BACKLOG}.orders", str(out)]
    argv += ["--chunk-size", str(args.chunk_size)] if getattr(args, "chunk_size", 0) else []
    launched = time.time()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with CpuMeter({"MariaDB upstream": (service_pid(up), False), "changefeed": (child.pid, True)}) as meter:
        assert child.stdout is not None
        ready = child.stdout.readline()  # the session is up (or the child failed: read its error below)
        cpu0 = meter.read()
        stdout, stderr = child.communicate(timeout=args.timeout)
        cpu = cpu_delta(cpu0, meter.read())
    if child.returncode == 0 and ready.strip() != "ready":
        raise BenchError(f"the Parquet snapshot said {ready!r} before its figures")
    if child.returncode != 0:
        raise BenchError(f"the Parquet snapshot exited with {child.returncode}: {stderr[-2000:]}")
    times = json.loads(stdout.strip().splitlines()[-1])
    table = pq.read_table(out)
    with up.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), SUM(id) FROM `{BACKLOG}`.orders")
        count, ids = cur.fetchone()
    got = (table.num_rows, pc.sum(table.column("id")).as_py())
    if got != (int(count), int(ids)) or got[0] != upstream[0]:
        raise BenchError(f"the Parquet copy holds {got} (rows, sum of ids), the upstream {(count, ids)}")
    seconds = times["ended"] - times["started"]
    rows = args.rows
    return {
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "seconds_from_launch": times["ended"] - launched,
        "rows_per_s_from_launch": rows / (times["ended"] - launched),
        "parquet_bytes": sum(f.stat().st_size for f in out.rglob("*.parquet")),
        **cpu_report(cpu, rows),
    }


def dump_and_load(args: argparse.Namespace, up: MariaDBServer, down: MariaDBServer) -> dict[str, Any]:
    """``mariadb-dump --single-transaction DB | mariadb`` (the clients' CPU from their rusage)."""
    dump = [
        shutil.which("mariadb-dump") or "mariadb-dump",
        "--protocol=tcp",
        "-h127.0.0.1",
        f"-P{up.port}",
        "-uroot",
        "--single-transaction",
        "--skip-lock-tables",
        "--databases",
        BACKLOG,
    ]
    load = [shutil.which("mariadb") or "mariadb", "--protocol=tcp", "-h127.0.0.1", f"-P{down.port}", "-uroot"]
    with _meter(up, down) as meter:
        cpu0, clients0, started = meter.read(), _client_seconds(), time.time()
        producer = subprocess.Popen(dump, stdout=subprocess.PIPE)
        consumer = subprocess.run(load, stdin=producer.stdout, check=False, capture_output=True)
        assert producer.stdout is not None
        producer.stdout.close()
        producer.wait()
        seconds = time.time() - started
        cpu = cpu_delta(cpu0, meter.read())
    if producer.returncode or consumer.returncode:
        raise BenchError(f"dump | load failed ({producer.returncode}, {consumer.returncode}): {consumer.stderr!r}")
    cpu["clients (mariadb-dump, mariadb)"] = _client_seconds() - clients0
    return {"seconds": seconds, "rows_per_s": args.rows / seconds, **cpu_report(cpu, args.rows)}


def outfile_and_load(args: argparse.Namespace, work: Path, up: MariaDBServer, down: MariaDBServer) -> dict[str, Any]:
    """``SELECT ... INTO OUTFILE`` on the upstream, ``LOAD DATA INFILE`` of that file on the downstream."""
    path = work / "orders.tsv"
    path.unlink(missing_ok=True)
    names = ", ".join(COLUMNS[: args.columns])
    with _meter(up, down) as meter:
        cpu0, started = meter.read(), time.time()
        with up.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT {names} FROM `{BACKLOG}`.orders INTO OUTFILE %s", (str(path),))
        create_tables(down, BACKLOG, args.columns)
        with down.connect() as conn, conn.cursor() as cur:
            cur.execute(f"LOAD DATA INFILE %s INTO TABLE `{BACKLOG}`.orders", (str(path),))
            conn.commit()
        seconds = time.time() - started
        cpu = cpu_delta(cpu0, meter.read())
    path.unlink(missing_ok=True)
    return {"seconds": seconds, "rows_per_s": args.rows / seconds, **cpu_report(cpu, args.rows)}


# --- the live stream's lag while a snapshot on demand runs (--mode lag) ------------------------------

HEARTBEAT = "bench_heartbeat"  # its own schema, created after the binlog reset: the run streams it from its CREATE


def _lags(hb: Heartbeats, start: float, end: float) -> dict[str, Any]:
    """Lag figures of the heartbeats sent in [start, end) (an unseen one counts with its age)."""
    window = hb.window(start, end)
    lags = [lag for _, lag, _ in window]
    if not lags:
        raise BenchError(f"no heartbeat sent in a {end - start:.1f} s window")
    return {
        "seconds": end - start,
        "heartbeats": len(lags),
        "unseen": sum(1 for *_, seen in window if not seen),
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "lag_max": max(lags),
        "load_average": os.getloadavg(),
    }


def _hold(seconds: float, hb: Heartbeats, job: Job) -> tuple[float, float]:
    """Let ``seconds`` pass with the job running; the window (start, end)."""
    start = time.time()
    while time.time() < start + seconds:
        job.check()
        hb.behind()  # raises if a heartbeat thread failed
        time.sleep(0.2)
    return start, time.time()


def _settle(hb: Heartbeats, end: float, job: Job, timeout: float) -> None:
    """Wait until every heartbeat sent before ``end`` was seen downstream."""
    wait_for("the window's heartbeats downstream", lambda: hb.seen_through(end), [job], timeout, 0.1)


def snapshot_lag(args: argparse.Namespace, work: Path, up: MariaDBServer, down: MariaDBServer) -> dict[str, Any]:
    """Heartbeat lag with no snapshot, then while a snapshot on demand of the orders table runs in the same job."""
    config = work / "lag.toml"
    extra = f"snapshot-chunk-size = {args.chunk_size}\n" if args.chunk_size else ""
    if args.on_demand_chunk_size:
        extra += f"snapshot-on-demand-chunk-size = {args.on_demand_chunk_size}\n"
    # when-needed with a position the server has: no initial snapshot, only the one on demand measured here.
    config.write_text(
        f'changefeed-id = "bench-snapshot-lag"\nsink-uri = "{down.url}/"\n\n'
        f'[source]\ntype = "mysql"\nurl = "{up.url}"\nstart-position = "earliest"\nsnapshot = "when-needed"\n'
        f"{extra}\n"
        f'[filter]\nrules = ["{BACKLOG}.*", "{HEARTBEAT}.*"]\n'
    )
    interval = ["--trigger-interval", args.trigger_interval] if args.trigger_interval else []
    argv = ["run", str(config), *interval, *[a for kv in args.spark_conf for a in ("--spark-conf", kv)]]
    out: dict[str, Any] = {"trigger_interval": args.trigger_interval or "300ms (the job's default)"}
    with Job("lag-run", argv, work, work / ".changefeed" / "run-bench-snapshot-lag") as job:
        with up.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{HEARTBEAT}`")
            cur.execute(HEARTBEAT_DDL.format(db=HEARTBEAT))
        wait_for("the heartbeat table downstream", lambda: has_table(down, HEARTBEAT, "heartbeat"), [job], args.timeout)
        say(f"job up after {time.time() - job.launched:.1f} s; heartbeats every 100 ms")
        with Heartbeats(up, down, HEARTBEAT) as hb:
            _hold(args.warmup, hb, job)
            say(f"no snapshot: {args.baseline:.0f} s")
            start, end = _hold(args.baseline, hb, job)
            _settle(hb, end, job, args.timeout)
            out["baseline"] = _lags(hb, start, end)
            batches0 = len(job.batches)
            say(f"changefeed snapshot --tables {BACKLOG}.orders")
            signalled = time.time()
            subprocess.run(
                [str(CHANGEFEED), "snapshot", str(config), "--tables", f"{BACKLOG}.orders"],
                check=True,
                cwd=work,
                stdout=subprocess.DEVNULL,
            )
            wait_for("the first chunk downstream", lambda: has_table(down, BACKLOG, "orders"), [job], args.timeout)
            first = time.time()
            done = visible_at(down, BACKLOG, args.rows, [job], args.timeout)
            _settle(hb, done, job, args.timeout)
            out["snapshot"] = _lags(hb, signalled, done)
            seconds = done - signalled
            out["snapshot"].update(
                rows=args.rows,
                rows_per_s=args.rows / seconds,
                first_chunk_after_s=first - signalled,
                batches=len(job.batches) - batches0,
                # the batches that emitted a chunk (their progress line's position is the chunk's)
                chunks=job.log.read_text(errors="replace").count('position={"snapshot"'),
            )
            say(f"snapshot done in {seconds:.1f} s; lag after it for {args.after:.0f} s")
            start, end = _hold(args.after, hb, job)
            _settle(hb, end, job, args.timeout)
            out["after"] = _lags(hb, start, end)
        out["log_trouble"] = job.trouble()
    return out


def _print_lag(name: str, w: dict[str, Any]) -> None:
    unseen = f", {w['unseen']} not seen" if w["unseen"] else ""
    load = "/".join(f"{x:.2f}" for x in w["load_average"])
    print(
        f"  {name}: {w['heartbeats']} heartbeats over {w['seconds']:.1f} s{unseen}: lag p50 {w['lag_p50']:.2f} s,"
        f" p99 {w['lag_p99']:.2f} s, max {w['lag_max']:.2f} s (load average at its end {load})"
    )


def lag_main(args: argparse.Namespace, report: dict[str, Any], work: Path) -> int:
    try:
        with server(1, "bench-up") as up, server(2, "bench-down") as down:
            create_tables(up, BACKLOG, args.columns)
            seconds = execute_all(up, backlog_statements(args.rows, args.columns, args.statement_rows))
            with up.connect() as conn, conn.cursor() as cur:
                cur.execute("RESET MASTER")  # the rows are not in the binlog: only the snapshot brings them
            upstream = content(up, BACKLOG, args.columns)
            say(f"upstream: {args.rows:,} rows written in {seconds:.1f} s, binlog reset")
            report["lag"] = snapshot_lag(args, work, up, down)
            check_equal(down, BACKLOG, args.columns, upstream)
    except BenchError as exc:
        print(f"FAILED: {exc}\nwork directory kept: {work}", file=sys.stderr)
        return 1
    lag = report["lag"]
    snap = lag["snapshot"]
    print(
        f"\n== heartbeat commit -> visible downstream lag, one changefeed run (mysql sink,"
        f" trigger {lag['trigger_interval']}), heartbeat every 100 ms"
    )
    _print_lag("no snapshot", lag["baseline"])
    _print_lag(f"snapshot on demand of {args.rows:,} rows running", snap)
    _print_lag("after it", lag["after"])
    print(
        f"  snapshot: {snap['rows_per_s']:,.0f} rows/s ({snap['seconds']:.1f} s from the signal to the last row"
        f" downstream, first chunk after {snap['first_chunk_after_s']:.1f} s, {snap['chunks']} chunks in"
        f" {snap['batches']} micro-batches);"
        " copy equal to the upstream"
    )
    print_trouble({"lag-run": lag["log_trouble"]})
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the upstream table (default 1,000,000)")
    p.add_argument("--columns", type=int, choices=(3, 10), default=10, help="orders table width (default 10)")
    p.add_argument("--statement-rows", type=int, default=1000, help="rows per INSERT while filling the upstream")
    p.add_argument("--chunk-size", type=int, default=0, help="snapshot-chunk-size (default: the job's)")
    p.add_argument(
        "--on-demand-chunk-size", type=int, default=0, help="lag: snapshot-on-demand-chunk-size (default: the job's)"
    )
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="passed to the job")
    p.add_argument("--timeout", type=float, default=1800, help="give up any wait after this many seconds")
    p.add_argument("--mode", choices=("initial", "lag"), default="initial", help="what to measure (docstring)")
    p.add_argument("--warmup", type=float, default=15, help="lag: seconds before the baseline window")
    p.add_argument("--baseline", type=float, default=45, help="lag: seconds of heartbeats with no snapshot")
    p.add_argument("--after", type=float, default=15, help="lag: seconds of heartbeats after the snapshot")
    p.add_argument(
        "--trigger-interval", help="lag: the job's micro-batch interval (default: the job's, 300ms into MySQL)"
    )
    p.add_argument("--json", type=Path, help="also write the figures here as JSON")
    p.add_argument(
        "--load-data", default="auto", help="initial: the sink-uri's load-data settings to run, in order (auto,off)"
    )
    p.add_argument("--parquet", action="store_true", help="initial: also the Spark batch read into Parquet")
    p.add_argument("--parquet-child", nargs=3, metavar=("URL", "TABLE", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.parquet_child:
        return parquet_child(*args.parquet_child, chunk_size=args.chunk_size)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the servers and the job are stopped
    report = report_header("bench/snapshot.py", mode=args.mode, rows=args.rows, columns=args.columns)
    print(f"command: {report['command']}")
    print(f"{report['date_utc']} UTC, {report['cores']} cores, load average {os.getloadavg()[0]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="changefeed-bench-snapshot-"))
    if args.mode == "lag":
        code = lag_main(args, report, work)
        report["load_average_end"] = os.getloadavg()
        print(f"load average at the end {'/'.join(f'{x:.2f}' for x in report['load_average_end'])}")
        if code == 0 and args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
            print(f"figures: {args.json}")
        if code == 0:
            shutil.rmtree(work, ignore_errors=True)
        return code
    try:
        with server(1, "bench-up") as up, server(2, "bench-down") as down:
            create_tables(up, BACKLOG, args.columns)
            seconds = execute_all(up, backlog_statements(args.rows, args.columns, args.statement_rows))
            with up.connect() as conn, conn.cursor() as cur:
                cur.execute("RESET MASTER")  # the rows are not in the binlog: only a snapshot brings them
            upstream = content(up, BACKLOG, args.columns)
            say(f"upstream: {args.rows:,} rows written in {seconds:.1f} s, binlog reset")

            runs: dict[str, dict[str, Any]] = {}
            for mode in args.load_data.split(","):
                say(f"changefeed run, snapshot = initial-only, into the downstream, load-data={mode}")
                runs[mode] = changefeed_snapshot(args, work, up, down, mode)
                check_equal(down, BACKLOG, args.columns, upstream)
                _drop(down)
            report["changefeed"] = next(iter(runs.values()))
            report["changefeed_by_load_data"] = runs
            if args.parquet:
                say("Spark batch read (input=snapshot) into Parquet")
                report["parquet"] = snapshot_to_parquet(args, work, up, upstream)
            say("mariadb-dump | mariadb")
            report["dump_load"] = dump_and_load(args, up, down)
            check_equal(down, BACKLOG, args.columns, upstream)
            _drop(down)
            say("SELECT INTO OUTFILE + LOAD DATA INFILE")
            report["outfile_load"] = outfile_and_load(args, work, up, down)
            check_equal(down, BACKLOG, args.columns, upstream)
    except BenchError as exc:
        print(f"FAILED: {exc}\nwork directory kept: {work}", file=sys.stderr)
        return 1
    dl, ol = report["dump_load"], report["outfile_load"]
    print(f"\n== initial snapshot of {args.rows:,} rows of {args.columns} columns (each copy equal to the upstream)")
    for mode, cf in report["changefeed_by_load_data"].items():
        cf["percent_of_dump_load"] = 100 * cf["rows_per_s"] / dl["rows_per_s"]
        print(
            f"  changefeed run (initial-only, mysql sink, load-data={mode}): {cf['rows_per_s']:,.0f} rows/s"
            f" ({cf['seconds']:.1f} s from query start, {cf['batches']} batches) = {cf['percent_of_dump_load']:.0f}%"
            f" of dump | load; {cf['rows_per_s_from_launch']:,.0f} rows/s from launch"
            f" ({cf['seconds_from_launch']:.1f} s)"
        )
        print_cpu(cf, "    ")
    if "parquet" in report:
        pq_run = report["parquet"]
        pq_run["percent_of_dump_load"] = 100 * pq_run["rows_per_s"] / dl["rows_per_s"]
        print(
            f"  Spark batch read (input=snapshot) into Parquet: {pq_run['rows_per_s']:,.0f} rows/s"
            f" ({pq_run['seconds']:.1f} s from the session up, CPU from then)"
            f" = {pq_run['percent_of_dump_load']:.0f}% of dump | load;"
            f" {pq_run['rows_per_s_from_launch']:,.0f} rows/s from launch; {pq_run['parquet_bytes']:,} bytes"
        )
        print_cpu(pq_run, "    ")
    print(f"  mariadb-dump | mariadb: {dl['rows_per_s']:,.0f} rows/s ({dl['seconds']:.1f} s)")
    print_cpu(dl, "    ")
    print(f"  SELECT INTO OUTFILE + LOAD DATA INFILE: {ol['rows_per_s']:,.0f} rows/s ({ol['seconds']:.1f} s)")
    print_cpu(ol, "    ")
    runs = report["changefeed_by_load_data"]
    print_trouble({f"snapshot-run load-data={m}": cf["log_trouble"] for m, cf in runs.items()})
    report["load_average_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"figures: {args.json}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
