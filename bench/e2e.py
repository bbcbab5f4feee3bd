"""End-to-end benchmark of the data path: MariaDB -> ``changefeed run`` -> tansu -> ``changefeed apply`` -> MariaDB.

The jobs run the way a user runs them, as subprocesses with default options: ``changefeed run
CONFIG.toml`` (a live ``mysql`` source read through the replica protocol, a ``kafka://`` sink) and
``changefeed apply --from kafka://... --to mysql://...``, against private MariaDB servers and a tansu
broker the bench starts and stops. Modes (``--modes``, all by default, run in this order):

* ``idle``: both jobs up and warm and nothing written for ``--duration`` seconds: the CPU per second
  each process spends on empty micro-batches, the fixed cost a trigger interval buys.

* ``catch-up``: both jobs up and warm (the CREATE TABLE reached the downstream), then a backlog of
  ``--rows`` rows is written upstream with multi-row INSERTs, far faster than the pipeline; rows/s
  from the first upstream write until the downstream equals the upstream (count and checksum).
* ``alone``: each job by itself on the same backlog. ``changefeed run`` is started once the backlog
  is written and timed until every row is in the topic; ``changefeed apply`` then reads that full
  topic into a fresh server until it equals the upstream, and ``LOAD DATA LOCAL INFILE`` of the same
  rows into that server gives the practical limit the apply rate is compared with.
* ``steady``: offered load at fixed ``--rates`` with a heartbeat row inserted every 100 ms carrying
  its commit wall time; commit -> visible-downstream lag of the heartbeats, and whether it stays flat.

CPU per row comes from /proc for every process of the data path (each job's driver, JVM and Python
workers, the broker, each server): on a shared machine wall-clock rates swing with the other load,
CPU time per row much less. The interval is the measured one: a job's Spark start-up is left out.

    .venv/bin/python bench/e2e.py --rows 200000 [--columns 3] [--modes catch-up,alone] [--json out.json]
    .venv/bin/python bench/e2e.py --modes steady --rates 1000,2000,5000 --duration 15 --warmup 15
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from pymysql.converters import escape_item

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply import DDL as ORDERS_DDL
from bench.apply import tsv_value
from bench.orders import order_image
from changefeed.clients.mysql import load_local_infile
from changefeed.ops.jobfile import read_job_document
from changefeed.testing import Broker, MariaDBServer

HERE = Path(__file__).resolve().parent
CHANGEFEED = Path(sys.executable).with_name("changefeed")  # the console script a user runs
MODES = ("idle", "catch-up", "alone", "steady")
BACKLOG = "bench_e2e"  # catch-up and alone
STEADY = "bench_steady"
IDLE = "bench_idle"
LOADED = "bench_load"  # LOAD DATA's copy, next to the apply job's on the same server
COLUMNS = ("id", "customer_id", "status", "amount", "ratio", "weight", "created_at", "note", "flags", "payload")
ORDERS_3 = (
    "CREATE TABLE `{db}`.orders (id BIGINT NOT NULL PRIMARY KEY, customer_id INT UNSIGNED, status VARCHAR(32))"
    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
HEARTBEAT_DDL = "CREATE TABLE `{db}`.heartbeat (id BIGINT NOT NULL PRIMARY KEY, committed_us BIGINT NOT NULL)"
PARTITIONS = 3  # the Kafka sink's default for a topic it creates; created up front so apply can subscribe at once
# The backlog fits in memory as in bench/apply.py: the test harness's 64 MB pool makes a 1M-row run disk-bound.
SERVER_CONFIG = {"innodb_buffer_pool_size": "512M", "innodb_log_file_size": "256M", "innodb_log_buffer_size": "64M"}
PROGRESS = re.compile(r"changefeed\.progress \S+ batch=\d+ rows=(\d+) rows/s=(\d+)")
SPARK = re.compile(r"changefeed\.progress\.spark \S+ spark batch=\d+ rows=(\d+) (.*)$")
TROUBLE = re.compile(r"\b(ERROR|CRITICAL|Traceback|Exception)\b")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """The run cannot go on (a job died, a timeout, unequal data); the job logs are kept."""


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


# --- rows ---------------------------------------------------------------------------------------


def images(columns: int, seed: int = 1) -> Iterator[tuple[Any, ...]]:
    """Rows of the orders table with ids 1, 2, ... (the first ``columns`` columns), the same for a seed."""
    rnd = random.Random(seed)
    for i in itertools.count(1):
        yield order_image(rnd, i)[:columns]


def literals(values: Iterable[Any]) -> str:
    return ",".join(escape_item(v, "utf8mb4") for v in values)


def insert_sql(db: str, rows: Iterable[str]) -> str:
    """One multi-row INSERT of rendered rows: a single statement and transaction, like executemany's batches."""
    return f"INSERT INTO `{db}`.orders VALUES " + ",".join(rows)


def backlog_statements(rows: int, columns: int, per_statement: int) -> list[str]:
    """The backlog rendered up front, so that writing it is bound by the server, not by Python."""
    source = (f"({literals(row)})" for row in images(columns))
    return [
        insert_sql(BACKLOG, itertools.islice(source, min(per_statement, rows - n)))
        for n in range(0, rows, per_statement)
    ]


def steady_rows(columns: int, pool: int = 4096) -> Iterator[str]:
    """Rendered rows with ids 1, 2, ...; the other values cycle through a pool rendered up front.

    Generating and rendering a row of ten values takes ~15 µs of Python here: at 20k rows/s the writer
    would want 30% of a core the pipeline needs, and fall short of the rate on a busy machine.
    """
    tails = [literals(row[1:]) for row in itertools.islice(images(columns), pool)]
    for i in itertools.count(1):
        yield f"({i},{tails[i % pool]})"


def create_tables(server: MariaDBServer, db: str, columns: int, heartbeat: bool = False) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute((ORDERS_DDL if columns == 10 else ORDERS_3).format(db=db))
        if heartbeat:
            cur.execute(HEARTBEAT_DDL.format(db=db))


def has_table(server: MariaDBServer, db: str, table: str) -> bool:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s", (db, table)
        )
        return bool(cur.fetchone()[0])


def execute_all(server: MariaDBServer, statements: Sequence[str]) -> float:
    """Seconds to run the statements, autocommit (one upstream transaction per statement)."""
    with server.connect() as conn, conn.cursor() as cur:
        started = time.time()
        for statement in statements:
            cur.execute(statement)
        return time.time() - started


def content(server: MariaDBServer, db: str, columns: int) -> tuple[int, int]:
    """Row count and the sum of each row's CRC32 over all its columns' text: independent of storage format."""
    text = ", ".join(COLUMNS[:columns])
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', {text}))), 0) FROM `{db}`.orders")
        count, checksum = cur.fetchone()
        return int(count), int(checksum)


# --- processes: the jobs, CPU time ----------------------------------------------------------------


@dataclass
class Batch:
    """One progress line of a job: when the bench saw it, its rows and its foreachBatch seconds."""

    seen: float
    rows: int
    seconds: float | None  # rows / (rows/s) as logged; None for a batch without rows


class Job:
    """A ``changefeed`` command in its own process group; its log is followed for progress lines.

    ``checkpoint`` is the job's default checkpoint directory (``./.changefeed/run-ID`` or
    ``apply-ID`` in the working directory): the status file there appears just before Spark starts
    the query, which is where a job's measured interval may begin (Spark start-up left out).
    """

    def __init__(self, name: str, argv: list[str], work: Path, checkpoint: Path) -> None:
        self.name = name
        self.log = work / f"{name}.log"
        self.checkpoint = checkpoint
        self.batches: list[Batch] = []
        self.spark: list[tuple[float, int, dict[str, int]]] = []  # (seen, rows, Spark's durationMs) per batch
        self.launched = time.time()
        self.stopped_at = 0  # log size when the bench stopped the job: what follows is shutdown
        say(f"{name}: {shlex.join(['changefeed', *argv])}")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(CHANGEFEED), *argv], cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._done = threading.Event()
        self._follower = threading.Thread(target=self._follow, daemon=True)
        self._follower.start()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _follow(self) -> None:
        with self.log.open("rb") as f:
            pending = b""
            while not self._done.is_set():
                pending += f.readline()
                if not pending.endswith(b"\n"):
                    time.sleep(0.05)
                    continue
                line = pending.decode("utf-8", "replace").rstrip("\n")
                m = PROGRESS.search(line)
                pending = b""
                if s := SPARK.search(line):
                    times = dict(kv.split("=", 1) for kv in s[2].split())
                    self.spark.append((time.time(), int(s[1]), {k: int(v) for k, v in times.items()}))
                if m:
                    rows, rate = int(m[1]), int(m[2])
                    self.batches.append(Batch(time.time(), rows, rows / rate if rows and rate else None))

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)

    def started(self) -> float | None:
        """When the job started its streaming query (status file), None before."""
        doc = read_job_document(self.checkpoint)
        return doc.started_at if doc is not None and doc.pid == self.proc.pid else None

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise BenchError(f"{self.name} exited with {self.proc.returncode}; {self.log}:\n{tail}")

    def stop(self) -> None:
        """Ctrl-C (the job stops its query), then SIGKILL the group: no JVM or Python worker may outlive the bench."""
        if self.proc.poll() is None:
            self.stopped_at = self.log.stat().st_size
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._done.set()
        self._follower.join()

    def trouble(self, limit: int = 5) -> dict[str, list[str]]:
        """Log lines that look like errors, while running and after the bench's Ctrl-C (the jobs' own problems)."""
        raw = self.log.read_bytes()
        cut = self.stopped_at or len(raw)
        parts = {"running": raw[:cut], "on_stop": raw[cut:]}
        return {
            when: [line for line in text.decode("utf-8", "replace").splitlines() if TROUBLE.search(line)][:limit]
            for when, text in parts.items()
        }


Roots = Mapping[str, tuple[int, bool]]
"""What CPU is measured for: label -> (pid, whether it is a job whose process tree counts, split by part)."""


def _proc_table() -> dict[int, tuple[int, str, int, int]]:
    """pid -> (ppid, comm, utime+stime in clock ticks, start time) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:  # gone meanwhile
            continue
        head, _, tail = text.rpartition(")")  # comm may hold spaces and parentheses
        v = tail.split()  # v[0] is field 3 (state): utime, stime are fields 14, 15 and starttime 22
        table[int(name)] = (int(v[1]), head.partition("(")[2], int(v[11]) + int(v[12]), int(v[19]))
    return table


def _threads(pid: int) -> list[tuple[int, str, int]]:
    """(tid, name with digits as #, utime+stime ticks) of each thread of ``pid``."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        head, _, tail = text.rpartition(")")
        v = tail.split()
        out.append((int(tid), re.sub(r"[0-9]+", "#", head.partition("(")[2]), int(v[11]) + int(v[12])))
    return out


def _module(pid: int) -> str:
    """The module a Python worker runs (its command's last word, last dotted part)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    words = [w for w in words if w]
    return words[-1].decode(errors="replace").rsplit(".", 1)[-1] if words else "?"


class CpuMeter:
    """CPU seconds of the roots' processes by part (a job's driver, JVM, Python workers), sampled every 0.25 s.

    Each process is followed by pid and start time through its own utime+stime, so one that ends
    mid-interval still counts up to its last sample. Reaped children's cutime is not used: not every
    parent reaps (one ignoring SIGCHLD leaves no trace), and it would count followed children twice.
    A process living less than one sampling period is missed.
    """

    def __init__(self, roots: Roots, every: float = 0.25, detail: bool = False) -> None:
        self.roots = roots
        self.detail = detail  # JVMs by thread name, Python workers by module
        self.seen: dict[tuple[int, int], tuple[str, int]] = {}  # (pid, start time) -> (part, ticks)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def __enter__(self) -> CpuMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            self._sample()

    def _sample(self) -> None:
        table = _proc_table()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, *_) in table.items():
            children[ppid].append(pid)
        with self._lock:
            for label, (root, job) in self.roots.items():
                stack = [root]
                while stack:
                    pid = stack.pop()
                    if pid not in table:
                        continue
                    _, comm, ticks, started = table[pid]
                    if not job:
                        self.seen[pid, started] = (label, ticks)
                        continue
                    stack.extend(children[pid])
                    part = "driver" if pid == root else "JVM" if comm == "java" else "Python workers"
                    if self.detail and part == "JVM":
                        for tid, name, tticks in _threads(pid):
                            self.seen[tid, -started] = (f"{label}: JVM [{name}]", tticks)
                        continue
                    if self.detail and part == "Python workers":
                        part += f" [{_module(pid)}]"
                    self.seen[pid, started] = (f"{label}: {part}", ticks)

    def read(self) -> dict[str, float]:
        """CPU seconds so far by part, sampled now (processes that ended: up to their last sample)."""
        self._sample()
        with self._lock:
            seconds: dict[str, float] = defaultdict(float)
            for part, ticks in self.seen.values():
                seconds[part] += ticks / CLOCK_TICKS
        return dict(seconds)


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {part: after[part] - before.get(part, 0.0) for part in after}


def _part_order(part: str) -> tuple[int, int]:
    process, _, role = part.partition(": ")
    known = ("capture", "apply", "broker", "MariaDB upstream", "MariaDB downstream", "MariaDB", "bench")
    roles = ("", "driver", "JVM", "Python workers")
    return known.index(process) if process in known else len(known), roles.index(role) if role in roles else 0


def cpu_report(cpu: Mapping[str, float], rows: int) -> dict[str, Any]:
    """CPU seconds and µs per row by part; the total is the data path's (the bench's own process left out)."""
    cpu = {part: cpu[part] for part in sorted(cpu, key=_part_order)}
    total = sum(s for part, s in cpu.items() if part != "bench")
    us = {part: s * 1e6 / rows for part, s in cpu.items()}
    return {"cpu_seconds": {**cpu, "total": total}, "cpu_us_per_row": {**us, "total": total * 1e6 / rows}}


def print_cpu(report: Mapping[str, Any], indent: str = "  ") -> None:
    seconds, us = report["cpu_seconds"], report["cpu_us_per_row"]
    print(f"{indent}{'CPU by process':<30} {'seconds':>8} {'µs/row':>8}")
    for part in seconds:
        note = " (writer and poller: not part of the total)" if part == "bench" else ""
        print(f"{indent}{part:<30} {seconds[part]:>8.2f} {us[part]:>8.1f}{note}")


def by_process(values: Mapping[str, float]) -> dict[str, float]:
    """Figures summed per process tree (``capture: JVM`` -> ``capture``)."""
    groups: dict[str, float] = defaultdict(float)
    for part, value in values.items():
        groups[part.split(":")[0]] += value
    return dict(groups)


def batch_summary(batches: Sequence[Batch]) -> dict[str, Any]:
    """Batch count, rows per batch and foreachBatch seconds (from the progress lines) of the batches with rows."""
    busy = [b for b in batches if b.rows]
    if not busy:
        return {"batches": 0, "empty_batches": len(batches)}
    rows = [b.rows for b in busy]
    seconds = [b.seconds for b in busy if b.seconds is not None]
    return {
        "batches": len(busy),
        "empty_batches": len(batches) - len(busy),
        "rows_per_batch": {"min": min(rows), "median": statistics.median(rows), "max": max(rows)},
        "batch_seconds": {
            "min": min(seconds),
            "median": statistics.median(seconds),
            "max": max(seconds),
            "sum": sum(seconds),
        },
    }


def spark_summary(jobs: Sequence[Job], start: float, end: float) -> dict[str, Any]:
    """Per job, Spark's phase times (durationMs) of the micro-batches that ended in [start, end]:
    median ms per batch with rows, and the seconds summed over all of them (empty ones too)."""
    out: dict[str, Any] = {}
    for job in jobs:
        seen = [(rows, d) for t, rows, d in job.spark if start <= t <= end]
        if not seen:
            continue
        busy = [d for rows, d in seen if rows] or [d for _, d in seen]
        phases = sorted({k for _, d in seen for k in d})
        out[job.name.rsplit("-", 1)[-1]] = {
            "batches": len(seen),
            "with_rows": sum(1 for rows, _ in seen if rows),
            "median_ms": {k: statistics.median(d.get(k, 0) for d in busy) for k in phases},
            "sum_s": {k: sum(d.get(k, 0) for _, d in seen) / 1000 for k in phases},
        }
    return out


def print_spark(summary: Mapping[str, Any], indent: str = "  ") -> None:
    for job, s in summary.items():
        parts = ", ".join(f"{k} {v:.0f}" for k, v in s["median_ms"].items() if v)
        print(
            f"{indent}{job}: Spark ms per batch (median of {s['with_rows']} with rows, {s['batches']} in all): {parts}"
        )


def print_batches(name: str, s: Mapping[str, Any]) -> None:
    if not s["batches"]:
        print(f"  {name}: no batch with rows ({s['empty_batches']} empty)")
        return
    r, t = s["rows_per_batch"], s["batch_seconds"]
    print(
        f"  {name}: {s['batches']} batches with rows (+{s['empty_batches']} empty); rows/batch min {r['min']:,}"
        f" median {r['median']:,.0f} max {r['max']:,}; foreachBatch s min {t['min']:.2f} median {t['median']:.2f}"
        f" max {t['max']:.2f} sum {t['sum']:.1f}"
    )


# --- waiting --------------------------------------------------------------------------------------


def wait_for(what: str, check: Callable[[], Any], jobs: Sequence[Job], timeout: float, every: float = 0.05) -> Any:
    """Poll ``check`` until it returns something true (returned), failing early if a job exits."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        for job in jobs:
            job.check()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def visible_at(server: MariaDBServer, db: str, rows: int, jobs: Sequence[Job], timeout: float) -> float:
    """Wall time at which the downstream first held id ``rows``, the last row of the last upstream transaction.

    The apply job commits upstream transactions in commit order, so the last one visible means all
    are (`content` checks it afterwards). MAX(id) is an index lookup: polling it every 50 ms costs the
    server next to nothing, unlike COUNT(*) over the table.
    """
    with server.connect() as conn, conn.cursor() as cur:

        def last_row_there() -> float | None:
            try:
                cur.execute(f"SELECT MAX(id) FROM `{db}`.orders")
            except pymysql.err.MySQLError as exc:
                if exc.args[0] in (1049, 1146):  # the database or table is not there yet
                    return None
                raise
            return time.time() if cur.fetchone()[0] == rows else None

        return wait_for(f"row {rows} in {db}.orders downstream", last_row_there, jobs, timeout)


def check_equal(down: MariaDBServer, db: str, columns: int, expected: tuple[int, int]) -> None:
    got = content(down, db, columns)
    if got != expected:
        raise BenchError(f"downstream {db}.orders has (rows, checksum) {got}, upstream {expected}")


# --- the modes --------------------------------------------------------------------------------------


@dataclass
class Bench:
    """What the modes share: options, the work directory, the upstream, the broker, the downstream."""

    args: argparse.Namespace
    work: Path
    stack: contextlib.ExitStack
    up: MariaDBServer
    broker: Broker
    down: MariaDBServer | None = None
    backlog: dict[str, Any] = field(default_factory=dict)  # writer figures and upstream (count, checksum)
    cold: dict[str, float] = field(default_factory=dict)  # catch-up's CPU seconds from query start to the DDL applied

    def downstream(self) -> MariaDBServer:
        if self.down is None:
            self.down = self.stack.enter_context(server(2, "bench-down"))
        return self.down

    def uri(self, topic: str) -> str:
        return f"kafka://{self.broker.bootstrap_servers}/{topic}?protocol={self.args.protocol}"

    def trigger(self) -> list[str]:
        """Both jobs' ``--trigger-interval`` when one is asked for (else their defaults), and ``--spark-conf``s."""
        interval = ["--trigger-interval", self.args.trigger_interval] if self.args.trigger_interval else []
        return interval + [arg for kv in self.args.spark_conf for arg in ("--spark-conf", kv)]

    def logging(self) -> list[str]:
        """With ``--detail``, the jobs also log Spark's phase times per micro-batch."""
        return ["--log-level", "warning,changefeed.progress.spark=debug"] if self.args.detail else []

    def capture(self, name: str, cid: str, topic: str, db: str) -> Job:
        self.broker.create_topic(topic, PARTITIONS)
        config = self.work / f"{cid}.toml"
        config.write_text(
            f'changefeed-id = "{cid}"\nsink-uri = "{self.uri(topic)}"\n\n'
            # The binlog from its start (not an initial snapshot of the rows already there): "alone"
            # starts the capture after the backlog is written and measures binlog capture.
            f'[source]\ntype = "mysql"\nurl = "{self.up.url}"\nstart-position = "earliest"\n\n'
            f'[filter]\nrules = ["{db}.*"]\n'
        )
        argv = [*self.logging(), "run", str(config), *self.trigger()]
        return Job(name, argv, self.work, self.work / ".changefeed" / f"run-{cid}")

    def apply(self, name: str, cid: str, topic: str, down: MariaDBServer) -> Job:
        argv = [
            *self.logging(),
            "apply",
            "--from",
            self.uri(topic),
            "--to",
            f"{down.url}/" + (f"?{self.args.sink_params}" if self.args.sink_params else ""),
            "--changefeed-id",
            cid,
            *self.trigger(),
        ]
        return Job(name, argv, self.work, self.work / ".changefeed" / f"apply-{cid}")

    def meter(self, *jobs: Job, down: MariaDBServer | None = None, up: bool = True) -> CpuMeter:
        """CPU of the jobs' trees, the broker, the servers and the bench itself."""
        roots = {job.name.rsplit("-", 1)[-1]: (job.proc.pid, True) for job in jobs}
        roots["broker"] = (service_pid(self.broker), False)
        if up:
            roots["MariaDB upstream"] = (service_pid(self.up), False)
        if down is not None:
            roots["MariaDB downstream"] = (service_pid(down), False)
        roots["bench"] = (os.getpid(), False)
        return CpuMeter(roots, detail=self.args.detail)

    def write_backlog(self, statements: Sequence[str]) -> float:
        """Write the rendered backlog upstream (its table exists) and keep the writer's own rate."""
        rows = self.args.rows
        seconds = execute_all(self.up, statements)
        self.backlog.update(rows=rows, seconds=seconds, rows_per_s=rows / seconds)
        say(f"upstream writer: {rows:,} rows in {seconds:.2f} s = {rows / seconds:,.0f} rows/s")
        return seconds


def server(server_id: int, name: str) -> MariaDBServer:
    return MariaDBServer(server_id=server_id, name=name, extra_config=SERVER_CONFIG)


def service_pid(service: MariaDBServer | Broker) -> int:
    if service.pid is None:
        raise BenchError(f"{service.name} is not running")
    return service.pid


def idle(b: Bench) -> dict[str, Any]:
    """Both jobs warm and nothing written: the CPU each spends per second on empty micro-batches.

    This is the fixed cost a trigger interval buys (planning, offsets, the Python data source's
    runner, status files); the lag target trades it against how often a batch may start.
    """
    a = b.args
    down = b.downstream()
    with (
        b.capture("idle-capture", "bench-idle", "idle", IDLE) as cap,
        b.apply("idle-apply", "bench-idle", "idle", down) as app,
        b.meter(cap, app, down=down) as meter,
    ):
        wait_for("both queries to start", lambda: cap.started() and app.started(), [cap, app], a.timeout)
        create_tables(b.up, IDLE, a.columns)
        wait_for("the CREATE TABLE downstream", lambda: has_table(down, IDLE, "orders"), [cap, app], a.timeout, 0.2)
        time.sleep(5)  # the DDL's own batches and the first JIT settle
        n0 = {job.name: len(job.batches) for job in (cap, app)}
        cpu0, t0 = meter.read(), time.time()
        time.sleep(a.duration)
        cpu, t1 = cpu_delta(cpu0, meter.read()), time.time()
        seconds = t1 - t0
        triggers = {job.name.rsplit("-", 1)[-1]: len(job.batches) - n0[job.name] for job in (cap, app)}
    per_s = {part: s / seconds for part, s in cpu.items()}
    out = {
        "seconds": seconds,
        "cpu_seconds_per_second": per_s,
        "by_process": by_process(per_s),
        "progress_lines": triggers,
        "spark": spark_summary((cap, app), t0, t1),
    }
    print(f"\n== idle: both jobs warm, nothing written, {seconds:.0f} s, trigger {a.trigger_interval or '1s'}")
    print(f"  {'CPU seconds per second':<40} {'':>8}")
    for part, value in sorted(out["by_process"].items()):
        print(f"  {part:<40} {value:>8.3f}")
    if a.detail:
        for part, value in sorted(per_s.items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {part:<40} {value:>8.3f}")
    print(f"  progress lines logged: {', '.join(f'{k} {v}' for k, v in triggers.items())}")
    print_spark(out["spark"])
    return out


def catch_up(b: Bench) -> dict[str, Any]:
    """Both jobs warm, then the backlog written upstream; rows/s until the downstream equals the upstream."""
    a = b.args
    down = b.downstream()
    statements = backlog_statements(a.rows, a.columns, a.statement_rows)  # before the JVMs start, not beside them
    with (
        b.capture("catch-up-capture", "bench-catch-up", "catch-up", BACKLOG) as cap,
        b.apply("catch-up-apply", "bench-catch-up", "catch-up", down) as app,
        b.meter(cap, app, down=down) as meter,
    ):
        wait_for("both queries to start", lambda: cap.started() and app.started(), [cap, app], a.timeout)
        cold0, started = meter.read(), time.time()
        create_tables(b.up, BACKLOG, a.columns)
        wait_for("the CREATE TABLE downstream", lambda: has_table(down, BACKLOG, "orders"), [cap, app], a.timeout, 0.2)
        cpu0, t0 = meter.read(), time.time()
        b.cold = by_process(cpu_delta(cold0, cpu0))
        say(
            f"queries started {started - cap.launched:.1f} s after launch, CREATE TABLE downstream {t0 - started:.1f} s"
            f" later (CPU {', '.join(f'{k} {v:.1f} s' for k, v in b.cold.items())}); writing the backlog"
        )
        written = b.write_backlog(statements)
        t_end = visible_at(down, BACKLOG, a.rows, [cap, app], a.timeout)
        cpu = cpu_delta(cpu0, meter.read())
    b.backlog["upstream"] = upstream = content(b.up, BACKLOG, a.columns)
    check_equal(down, BACKLOG, a.columns, upstream)
    seconds = t_end - t0
    out = {
        "rows": a.rows,
        "writer": {"seconds": written, "rows_per_s": a.rows / written},
        "seconds": seconds,
        "rows_per_s": a.rows / seconds,
        "equal": {"rows": upstream[0], "checksum": upstream[1]},
        "cold_start_cpu_seconds": b.cold,
        **cpu_report(cpu, a.rows),
        "batches": {
            job: batch_summary([x for x in j.batches if x.seen >= t0]) for job, j in (("capture", cap), ("apply", app))
        },
        "log_trouble": {job.name: job.trouble() for job in (cap, app)},
        "spark": spark_summary((cap, app), t0, t_end + 2),
    }
    print(f"\n== catch-up: {a.rows:,} rows of {a.columns} columns, {a.protocol}, jobs with default options")
    print(f"  upstream writer: {a.rows / written:,.0f} rows/s ({written:.2f} s), {seconds / written:.1f}x the pipeline")
    print(f"  first upstream write -> downstream equal: {seconds:.1f} s = {a.rows / seconds:,.0f} rows/s")
    print(f"  equal: {upstream[0]:,} rows, checksum {upstream[1]} on both sides")
    print_cpu(out)
    for name, summary in out["batches"].items():
        print_batches(name, summary)
    print_spark(out["spark"])
    print_trouble(out["log_trouble"])
    return out


def _alone_report(
    job: Job, started: float, t0: float, t1: float, cpu: Mapping[str, float], rows: int
) -> dict[str, Any]:
    """One job's figures in the alone mode, timed from its query start (``t0``) to done (``t1``)."""
    return {
        "startup_seconds": started - job.launched,
        "seconds": t1 - t0,
        "rows_per_s": rows / (t1 - t0),
        "seconds_from_launch": t1 - job.launched,
        **cpu_report(cpu, rows),
        "batches": batch_summary(job.batches),
        "log_trouble": job.trouble(),
    }


def alone(b: Bench) -> dict[str, Any]:
    """Capture alone on the written backlog, apply alone from its full topic, LOAD DATA of the same rows."""
    a = b.args
    if not b.backlog:  # catch-up did not run: the same backlog, written with no job running
        statements = backlog_statements(a.rows, a.columns, a.statement_rows)
        create_tables(b.up, BACKLOG, a.columns)
        b.write_backlog(statements)
        b.backlog["upstream"] = content(b.up, BACKLOG, a.columns)
    upstream = b.backlog["upstream"]
    out: dict[str, Any] = {"rows": a.rows}

    with b.capture("alone-capture", "bench-alone", "alone", BACKLOG) as cap:
        started = wait_for("the capture job's query to start", cap.started, [cap], a.timeout, 0.05)
        with b.meter(cap) as meter:
            cpu0, t0 = meter.read(), time.time()
            wait_for(f"{a.rows:,} rows in the topic", lambda: cap.rows >= a.rows, [cap], a.timeout)
            t1 = time.time()
            cpu = cpu_delta(cpu0, meter.read())
    out["capture"] = _alone_report(cap, started, t0, t1, cpu, a.rows)

    with server(3, "bench-down-alone") as fresh:
        with b.apply("alone-apply", "bench-alone", "alone", fresh) as app:
            started = wait_for("the apply job's query to start", app.started, [app], a.timeout, 0.05)
            with b.meter(app, down=fresh, up=False) as meter:
                cpu0, t0 = meter.read(), time.time()
                t1 = visible_at(fresh, BACKLOG, a.rows, [app], a.timeout)
                cpu = cpu_delta(cpu0, meter.read())
        check_equal(fresh, BACKLOG, a.columns, upstream)
        out["apply"] = _alone_report(app, started, t0, t1, cpu, a.rows)
        out["load_data"] = load_data(fresh, b.work, a.rows, a.columns)
    out["apply"]["percent_of_load_data"] = 100 * out["apply"]["rows_per_s"] / out["load_data"]["rows_per_s"]

    print(f"\n== each job alone: {a.rows:,} rows of {a.columns} columns, {a.protocol}")
    c, p, ld = out["capture"], out["apply"], out["load_data"]
    print(
        f"  capture (binlog -> topic, started after the backlog was written): {c['rows_per_s']:,.0f} rows/s"
        f" ({c['seconds']:.1f} s from query start; Spark start-up {c['startup_seconds']:.1f} s before it)"
    )
    print_cpu(c, "    ")
    print_batches("capture", c["batches"])
    print(
        f"  apply (full topic -> fresh server): {p['rows_per_s']:,.0f} rows/s ({p['seconds']:.1f} s from query"
        f" start; Spark start-up {p['startup_seconds']:.1f} s before it)"
        f" = {p['percent_of_load_data']:.1f}% of LOAD DATA"
    )
    print_cpu(p, "    ")
    print_batches("apply", p["batches"])
    if b.cold:
        cold = ", ".join(f"{k} {v:.1f} s" for k, v in b.cold.items() if k in ("capture", "apply"))
        print(
            f"    (each includes its job's cold first micro-batch; in catch-up, query start -> DDL applied took {cold})"
        )
    print(
        f"  LOAD DATA LOCAL INFILE, same rows, same server: {ld['rows_per_s']:,.0f} rows/s ({ld['seconds']:.2f} s),"
        f" server CPU {ld['cpu_us_per_row']['MariaDB']:.1f} µs/row"
    )
    print_trouble({"alone-capture": c["log_trouble"], "alone-apply": p["log_trouble"]})
    return out


def load_data(down: MariaDBServer, work: Path, rows: int, columns: int) -> dict[str, Any]:
    """LOAD DATA LOCAL INFILE of the backlog's rows into an empty copy of the table on ``down`` (file written first)."""
    path = work / "backlog.tsv"
    with path.open("wb") as f:
        for row in itertools.islice(images(columns), rows):
            f.write(b"\t".join(tsv_value(v) for v in row) + b"\n")
    create_tables(down, LOADED, columns)
    try:
        with CpuMeter({"MariaDB": (service_pid(down), False)}) as meter, down.connect(local_infile=True) as conn:
            cur = conn.cursor()
            cur.execute("SET GLOBAL local_infile=1")
            cpu0, started = meter.read(), time.perf_counter()
            load_local_infile(  # the client sends only the file it offers (clients.mysql)
                conn,
                f"LOAD DATA LOCAL INFILE {conn.escape(str(path))} INTO TABLE `{LOADED}`.orders CHARACTER SET utf8mb4"
                " FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'",
                str(path),
            )
            seconds = time.perf_counter() - started
            cpu = cpu_delta(cpu0, meter.read())
    finally:
        path.unlink()
    loaded, _ = content(down, LOADED, columns)
    if loaded != rows:
        raise BenchError(f"LOAD DATA loaded {loaded} of {rows} rows")
    return {
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "cpu_us_per_row": {p: s * 1e6 / rows for p, s in cpu.items()},
    }


class Heartbeats:
    """A heartbeat row inserted upstream every 100 ms carrying its wall time, and a downstream poller.

    A heartbeat's lag is when the poller (every 20 ms) first saw it minus the time it carries, taken
    just before its autocommit INSERT: commit -> visible downstream, sampled at a fixed rate whatever
    the load. Heartbeats commit in id order and are applied in commit order, so ids are seen in order.
    """

    def __init__(self, up: MariaDBServer, down: MariaDBServer, db: str) -> None:
        self.sent: dict[int, float] = {}
        self.lag: dict[int, float] = {}
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guard, args=(self._beat, up, db), daemon=True),
            threading.Thread(target=self._guard, args=(self._poll, down, db), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> Heartbeats:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _guard(self, body: Callable[[MariaDBServer, str], None], server: MariaDBServer, db: str) -> None:
        try:
            body(server, db)
        except Exception as exc:  # surfaced by behind(), on the main thread
            self.error = exc

    def _beat(self, up: MariaDBServer, db: str) -> None:
        with up.connect(database=db) as conn, conn.cursor() as cur:
            start = time.monotonic()
            for k in itertools.count(1):
                if self._stop.wait(max(0.0, start + k * 0.1 - time.monotonic())):
                    return
                now = time.time()
                self.sent[k] = now
                cur.execute("INSERT INTO heartbeat VALUES (%s, %s)", (k, round(now * 1e6)))

    def _poll(self, down: MariaDBServer, db: str) -> None:
        with down.connect(database=db) as conn, conn.cursor() as cur:
            last = 0
            while not self._stop.wait(0.02):
                cur.execute("SELECT id, committed_us FROM heartbeat WHERE id > %s ORDER BY id", (last,))
                now = time.time()
                for k, us in cur.fetchall():
                    self.lag[k] = now - us / 1e6
                    last = k

    def behind(self) -> float:
        """Age of the oldest heartbeat not yet seen downstream (0 when all are)."""
        if self.error is not None:
            raise BenchError(f"heartbeat thread failed: {self.error!r}")
        sent = self.sent.get(len(self.lag) + 1)
        return time.time() - sent if sent is not None else 0.0

    def seen_through(self, t: float) -> bool:
        """Whether every heartbeat sent up to wall time ``t`` was seen downstream."""
        sent = self.sent.get(len(self.lag) + 1)
        return sent is None or sent > t

    def window(self, start: float, end: float) -> list[tuple[float, float, bool]]:
        """(sent, lag, seen) of the heartbeats sent in [start, end); an unseen one's lag is its age so far."""
        now = time.time()
        return [(t, self.lag.get(k, now - t), k in self.lag) for k, t in list(self.sent.items()) if start <= t < end]


def offer(up: MariaDBServer, rate: int, rows: Iterator[str], until: Callable[[], bool], per: int) -> int:
    """Insert ``rate`` rows/s upstream in 100 ms ticks (multi-row statements of at most ``per``) until ``until()``."""
    written = 0
    with up.connect() as conn, conn.cursor() as cur:
        start = time.monotonic()
        while not until():
            tick = time.monotonic()
            due = int(rate * (tick - start)) - written
            while due > 0:
                n = min(due, per)
                cur.execute(insert_sql(STEADY, itertools.islice(rows, n)))
                due -= n
                written += n
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
    return written


def pct(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def steady(b: Bench) -> dict[str, Any]:
    """Fixed offered rates, ascending, each held until its heartbeats are seen; stops at the first whose lag grows."""
    a = b.args
    down = b.downstream()
    phases: list[dict[str, Any]] = []
    trace: list[tuple[str, float, float]] = []  # (phase, seconds since the load started, lag) for the plot
    with (
        b.capture("steady-capture", "bench-steady", "steady", STEADY) as cap,
        b.apply("steady-apply", "bench-steady", "steady", down) as app,
    ):
        create_tables(b.up, STEADY, a.columns, heartbeat=True)
        launched = time.time()
        wait_for(
            "the heartbeat table downstream", lambda: has_table(down, STEADY, "heartbeat"), [cap, app], a.timeout, 0.2
        )
        say(f"pipeline up after {time.time() - launched:.1f} s")
        rows = steady_rows(a.columns)
        t_start = time.time()
        with b.meter(cap, app, down=down) as meter, Heartbeats(b.up, down, STEADY) as hb:
            plan = [("warm-up", a.rates[0], a.warmup)] + [(f"{r:,} rows/s", r, a.duration) for r in a.rates]
            for name, rate, seconds in plan:
                say(f"steady: {name} for {seconds:.0f} s")
                phase, window = run_phase(b, hb, meter, rows, name, rate, seconds, (cap, app))
                for job in (cap, app):
                    job.check()
                trace += [(name, t - t_start, lag) for t, lag, _ in window]
                phases.append(phase)
                print_phase(phase)
                if name != "warm-up" and not phase["flat"]:
                    say(f"steady: lag grows at {name}; higher rates skipped")
                    break
    flat = [ph["rate"] for ph in phases[1:] if ph["flat"]]
    out = {
        "phases": phases,
        "max_flat_rate": max(flat) if flat else None,
        "log_trouble": {j.name: j.trouble() for j in (cap, app)},
    }
    print(f"\n== steady: heartbeat commit -> visible downstream lag, {a.columns} columns, {a.protocol}")
    for phase in phases:
        print_phase(phase)
    print(f"  highest rate with a flat lag: {out['max_flat_rate'] or 'none'} rows/s")
    print_trouble(out["log_trouble"])
    out["plot"] = plot(trace, a)
    return out


def run_phase(
    b: Bench,
    hb: Heartbeats,
    meter: CpuMeter,
    rows: Iterator[str],
    name: str,
    rate: int,
    seconds: float,
    jobs: Sequence[Job],
) -> tuple[dict[str, Any], list[tuple[float, float, bool]]]:
    """One offered rate for ``seconds``, then the same load until its heartbeats are all seen (or too late).

    The warm-up's backlog (built while the jobs were cold) drains with no load, so the first rate starts
    from an empty pipeline; the rates after it follow each other under continuous load.
    """
    a = b.args
    cpu0, start = meter.read(), time.time()
    deadline = start + seconds
    written = offer(b.up, rate, rows, lambda: time.time() >= deadline or hb.behind() > a.max_lag, a.statement_rows)
    end = time.time()
    cpu = cpu_delta(cpu0, meter.read())
    settle = 0 if name == "warm-up" else rate
    offer(b.up, settle, rows, lambda: hb.seen_through(end) or hb.behind() > a.max_lag, a.statement_rows)
    window = hb.window(start, end)
    phase = judge(name, rate, written, end - start, window)
    phase.update(cpu_report(cpu, max(written, 1)))
    phase["spark"] = spark_summary(jobs, start, end)
    return phase, window


def judge(
    name: str, rate: int, written: int, seconds: float, window: list[tuple[float, float, bool]]
) -> dict[str, Any]:
    """Lag figures of one phase; flat when the last third's p99 is at most 1.1x the first third's + 0.5 s.

    The 0.5 s absorbs the micro-batch sawtooth; heartbeats not seen (the phase hit --max-lag) make it not flat.
    """
    lags = [lag for _, lag, _ in window]
    third = max(1, len(lags) // 3)
    first, last = pct(lags[:third], 99), pct(lags[-third:], 99)
    unseen = sum(1 for *_, seen in window if not seen)
    return {
        "phase": name,
        "rate": rate,
        "offered_rows_per_s": written / seconds,
        "seconds": seconds,
        "heartbeats": len(lags),
        "unseen": unseen,
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "lag_max": max(lags),
        "first_third_p99": first,
        "last_third_p99": last,
        "flat": unseen == 0 and last <= 1.1 * first + 0.5,
    }


def print_phase(ph: Mapping[str, Any]) -> None:
    unseen = f", {ph['unseen']} not seen (lag = age)" if ph["unseen"] else ""
    print(
        f"  {ph['phase']:>14}: offered {ph['offered_rows_per_s']:>7,.0f} rows/s for {ph['seconds']:.0f} s;"
        f" lag p50 {ph['lag_p50']:.2f} s, p99 {ph['lag_p99']:.2f} s, max {ph['lag_max']:.2f} s; p99 first/last third"
        f" {ph['first_third_p99']:.2f}/{ph['last_third_p99']:.2f} s -> {'flat' if ph['flat'] else 'GROWING'}{unseen};"
        f" CPU µs/row {', '.join(f'{k} {v:.0f}' for k, v in by_process(ph['cpu_us_per_row']).items())}",
        flush=True,
    )
    print_spark(ph.get("spark", {}), indent="      ")


def plot(trace: list[tuple[str, float, float]], a: argparse.Namespace) -> str | None:
    """Lag over time, one colour per phase, to ``--plot`` (skipped without matplotlib)."""
    try:
        import matplotlib  # noqa: PLC0415 - optional: the figures do not need it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("  matplotlib not installed: no plot")
        return None
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, points in itertools.groupby(trace, key=lambda x: x[0]):
        xs, ys = zip(*((t, lag) for _, t, lag in points), strict=True)
        ax.plot(xs, ys, ".", markersize=3, label=name)
    ax.set_xlabel("heartbeat commit time since the load started (s)")
    ax.set_ylabel("commit -> visible downstream (s)")
    ax.set_title(f"MariaDB -> Kafka ({a.protocol}) -> MariaDB, {a.columns} columns, heartbeat every 100 ms")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.plot, dpi=100)
    print(f"  plot: {a.plot}")
    return str(a.plot)


def print_trouble(trouble: Mapping[str, Mapping[str, list[str]]]) -> None:
    for name, parts in trouble.items():
        for when, lines in parts.items():
            for line in lines:
                print(f"  {name} log ({when.replace('_', ' ')}): {line[:300]}")


# --- main -------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)} (default all)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="backlog rows for catch-up and alone (default 1000000)")
    ap.add_argument("--columns", type=int, choices=(3, 10), default=10, help="orders table width (default 10)")
    ap.add_argument(
        "--statement-rows", type=int, default=1000, help="rows per upstream INSERT statement (default 1000)"
    )
    ap.add_argument("--protocol", default="open-protocol", help="Kafka protocol (default open-protocol)")
    ap.add_argument(
        "--rates", default="5000,10000,20000", help="steady offered rates, rows/s (default 5000,10000,20000)"
    )
    ap.add_argument("--duration", type=float, default=60.0, help="steady seconds per rate; idle seconds (default 60)")
    ap.add_argument("--warmup", type=float, default=30.0, help="steady warm-up seconds at the first rate (default 30)")
    ap.add_argument(
        "--max-lag", type=float, default=60.0, help="steady: a phase ends once a heartbeat is this late (s)"
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="give up any wait after this many seconds")
    ap.add_argument(
        "--plot", type=Path, default=HERE / "e2e_lag.png", help="steady lag PNG (default bench/e2e_lag.png)"
    )
    ap.add_argument("--trigger-interval", help="both jobs' micro-batch interval, e.g. 300ms (default: theirs, 1s)")
    ap.add_argument("--json", type=Path, help="also write the figures here as JSON")
    ap.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="passed to both jobs (repeatable)"
    )
    ap.add_argument("--detail", action="store_true", help="CPU of each JVM thread kind and Python worker module")
    ap.add_argument("--sink-params", default="", help="query added to the apply job's mysql:// (e.g. load-data=off)")
    return ap


def report_header(script: str, **fields: Any) -> dict[str, Any]:
    """What every bench report starts with: the command, when, the machine's cores and load, ``fields``, git."""
    return {
        "command": shlex.join([".venv/bin/python", script, *sys.argv[1:]]),
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cores": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        **fields,
        "git": git_state(),
    }


def git_state() -> dict[str, Any]:
    """The commit, and the files changed under changefeed/ (the jobs run the working tree, not the commit)."""

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=HERE.parent, capture_output=True, text=True, check=False).stdout

    changed = [line.strip() for line in git("status", "--short", "--", "changefeed").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD").strip(), "changed": changed}


def main() -> int:
    args = _parser().parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := set(modes) - set(MODES):
        _parser().error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    args.rates = sorted(int(r) for r in args.rates.split(","))
    if not CHANGEFEED.exists():
        sys.exit(f"{CHANGEFEED} not found: run scripts/setup")
    # SIGTERM unwinds like Ctrl-C, so every job, server and broker is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = report_header(
        "bench/e2e.py",
        rows=args.rows,
        columns=args.columns,
        protocol=args.protocol,
        trigger_interval=args.trigger_interval or "the jobs' defaults",
        spark_conf=args.spark_conf,
    )
    print(f"command: {report['command']}")
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{report['date_utc']} UTC, {report['cores']} cores, load average {load}")
    changed = report["git"]["changed"]
    print(
        f"commit {report['git']['commit']}" + (f", {len(changed)} files changed under changefeed/" if changed else "")
    )
    work = Path(tempfile.mkdtemp(prefix="changefeed-bench-e2e-"))
    print(f"work directory (job logs, configs, checkpoints): {work}", flush=True)
    runners = {"idle": idle, "catch-up": catch_up, "alone": alone, "steady": steady}
    try:
        with contextlib.ExitStack() as stack:
            up = stack.enter_context(server(1, "bench-up"))
            broker = stack.enter_context(Broker())
            bench = Bench(args, work, stack, up, broker)
            for mode in MODES:
                if mode in modes:
                    say(f"mode {mode}")
                    report[mode] = runners[mode](bench)
            if bench.backlog:
                report["writer"] = bench.backlog
    except BenchError as exc:
        print(f"FAILED: {exc}\njob logs in {work}", file=sys.stderr)
        return 1
    report["load_average_end"] = os.getloadavg()
    print(f"\nload average at the end {'/'.join(f'{x:.2f}' for x in report['load_average_end'])}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"figures: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
