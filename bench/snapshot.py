"""Initial snapshot benchmark: a populated table copied by ``changefeed run`` next to dump + load.

The upstream holds ``--rows`` rows of the 10-column orders table (or its first 3 columns) and its
binlog was reset afterwards, so the snapshot is the only way the rows can reach the downstream.
In the same run, on the same two private MariaDB servers:

* ``changefeed run`` with ``snapshot = "initial-only"`` and a ``mysql://`` sink-uri (the snapshot's
  chunks go straight into the downstream through the MySQL sink, exactly once), timed from its
  query start (status file) to its exit, and from its launch (Spark start-up included);
* ``mariadb-dump --single-transaction | mariadb``: DM's dump-and-load way;
* ``SELECT ... INTO OUTFILE`` on the upstream + ``LOAD DATA INFILE`` on the downstream: the
  fastest copy the servers themselves offer.

Each copy is checked equal to the upstream (row count and a checksum over every column's text).
CPU per row comes from /proc for the job's process tree and both servers; the clients' (dump,
mariadb) from their rusage. The issue's target is changefeed >= 70% of dump + load.

    .venv/bin/python bench/snapshot.py [--rows 1000000] [--columns 10] [--chunk-size N] [--json out.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.e2e import (
    BACKLOG,
    COLUMNS,
    BenchError,
    CpuMeter,
    Job,
    backlog_statements,
    check_equal,
    content,
    cpu_delta,
    cpu_report,
    create_tables,
    execute_all,
    print_cpu,
    print_trouble,
    report_header,
    say,
    server,
    service_pid,
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


def changefeed_snapshot(args: argparse.Namespace, work: Path, up: MariaDBServer, down: MariaDBServer) -> dict[str, Any]:
    """``changefeed run`` with ``snapshot = "initial-only"`` into the downstream, until it exits."""
    config = work / "snapshot.toml"
    extra = f"snapshot-chunk-size = {args.chunk_size}\n" if args.chunk_size else ""
    config.write_text(
        f'changefeed-id = "bench-snapshot"\nsink-uri = "{down.url}/"\n\n'
        f'[source]\ntype = "mysql"\nurl = "{up.url}"\nsnapshot = "initial-only"\n{extra}\n'
        f'[filter]\nrules = ["{BACKLOG}.*"]\n'
    )
    argv = ["run", str(config), *[a for kv in args.spark_conf for a in ("--spark-conf", kv)]]
    job = Job("snapshot-run", argv, work, work / ".changefeed" / "run-bench-snapshot")
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the upstream table (default 1,000,000)")
    p.add_argument("--columns", type=int, choices=(3, 10), default=10, help="orders table width (default 10)")
    p.add_argument("--statement-rows", type=int, default=1000, help="rows per INSERT while filling the upstream")
    p.add_argument("--chunk-size", type=int, default=0, help="snapshot-chunk-size (default: the job's)")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="passed to the job")
    p.add_argument("--timeout", type=float, default=1800, help="give up any wait after this many seconds")
    p.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the servers and the job are stopped
    report = report_header("bench/snapshot.py", rows=args.rows, columns=args.columns)
    print(f"command: {report['command']}")
    print(f"{report['date_utc']} UTC, {report['cores']} cores, load average {os.getloadavg()[0]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="changefeed-bench-snapshot-"))
    try:
        with server(1, "bench-up") as up, server(2, "bench-down") as down:
            create_tables(up, BACKLOG, args.columns)
            seconds = execute_all(up, backlog_statements(args.rows, args.columns, args.statement_rows))
            with up.connect() as conn, conn.cursor() as cur:
                cur.execute("RESET MASTER")  # the rows are not in the binlog: only a snapshot brings them
            upstream = content(up, BACKLOG, args.columns)
            say(f"upstream: {args.rows:,} rows written in {seconds:.1f} s, binlog reset")

            say("changefeed run, snapshot = initial-only, into the downstream")
            report["changefeed"] = changefeed_snapshot(args, work, up, down)
            check_equal(down, BACKLOG, args.columns, upstream)
            _drop(down)
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
    cf, dl, ol = report["changefeed"], report["dump_load"], report["outfile_load"]
    cf["percent_of_dump_load"] = 100 * cf["rows_per_s"] / dl["rows_per_s"]
    print(f"\n== initial snapshot of {args.rows:,} rows of {args.columns} columns (each copy equal to the upstream)")
    print(
        f"  changefeed run (initial-only, mysql sink): {cf['rows_per_s']:,.0f} rows/s ({cf['seconds']:.1f} s from"
        f" query start, {cf['batches']} batches) = {cf['percent_of_dump_load']:.0f}% of dump | load;"
        f" {cf['rows_per_s_from_launch']:,.0f} rows/s from launch ({cf['seconds_from_launch']:.1f} s)"
    )
    print_cpu(cf, "    ")
    print(f"  mariadb-dump | mariadb: {dl['rows_per_s']:,.0f} rows/s ({dl['seconds']:.1f} s)")
    print_cpu(dl, "    ")
    print(f"  SELECT INTO OUTFILE + LOAD DATA INFILE: {ol['rows_per_s']:,.0f} rows/s ({ol['seconds']:.1f} s)")
    print_cpu(ol, "    ")
    print_trouble({"snapshot-run": cf["log_trouble"]})
    report["load_average_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"figures: {args.json}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
