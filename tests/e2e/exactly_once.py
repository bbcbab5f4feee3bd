"""Exactly once under crashes: live MariaDB -> ``changefeed run`` -> storage/Kafka -> ``changefeed apply`` -> MariaDB.

The scenario behind ``tests/e2e/test_exactly_once.py`` (10 kills per CI run) and ``scripts/soak``
(hundreds). Both jobs run as streaming subprocesses (500 ms trigger) while a workload writes to a
private upstream; each run is SIGKILLed (its whole process group, so no Spark JVM survives) at a
random point and restarted from the same checkpoint. Then the workload stops, a marker transaction
goes last, both jobs run until the marker is downstream and stop cleanly (Ctrl-C), and ``changefeed
diff``'s comparison must find downstream == upstream: a crash mid-batch, mid-flush or between data
and checkpoint must neither lose nor duplicate a change.

Where kills land: a JVM start takes 10-20 s on 2 cores, so a plain timer would mostly hit start-up.
40% of the kills land 0.3-2.5 s after the run's first micro-batch, the others before it, at 10-90%
of the job's last measured start-up (JVM start, session, query start, recovery, the first batch of
the backlog): those cost half a start-up on average, and they hit recovery at every stage. The
first kill of each job waits for its first batch (start-up time depends on the machine's load).
The two jobs have their own timers, so one restarts while the other keeps streaming or recovers.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymysql.cursors import Cursor

from changefeed.clients.mysql import parse_mysql_url
from changefeed.diff.compare import Differ, DiffReport
from changefeed.testing import Broker, MariaDBServer

__all__ = ["Outcome", "Scenario", "ScenarioError", "run_scenario"]

#: C1-only JIT and the serial GC: faster JVM starts on 2 cores, as the Spark test fixture uses.
JVM = "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
#: Share of kills that land before the run's first micro-batch (start-up and recovery).
EARLY_KILLS = 0.6
#: A run that has not processed a batch by then is killed anyway (the job is idle or slow).
IDLE_KILL = 120.0
#: After the workload: the marker must be downstream within this time.
CATCH_UP = 120.0
TABLES = ("accounts", "orders", "tags")


class ScenarioError(AssertionError):
    """The scenario found a fault: a job died on its own, did not catch up or stop, or the diff differs."""


@dataclass
class Kill:
    """One SIGKILL: which job, how long its run had been up, and what it had done by then."""

    job: str
    run: int
    uptime: float
    batches: int  # micro-batches the run had logged when it was killed


class Job:
    """One ``changefeed`` subprocess in its own session, killed as a whole group."""

    def __init__(self, name: str, argv: list[str], workdir: Path, hosts: list[Path] | None = None) -> None:
        self.name, self.argv, self.workdir = name, argv, workdir
        #: Working directories taken in turn, one per run, each its own HOME and TMPDIR: a job
        #: restarted "on another host" finds nothing of the previous run but the checkpoint URI.
        self.hosts = hosts or [workdir]
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.kills: list[Kill] = []
        self.started = 0.0

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}-{self.runs}.log"

    def start(self) -> None:
        self.runs += 1
        self.started = time.monotonic()
        host = self.hosts[self.runs % len(self.hosts)]
        host.mkdir(exist_ok=True)
        env = os.environ if len(self.hosts) == 1 else {**os.environ, "HOME": str(host), "TMPDIR": str(host)}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "changefeed", *self.argv],
                cwd=host,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def batches(self) -> int:
        """Micro-batches the current run logged (its Spark query is up once there is one)."""
        return self.log.read_text(errors="replace").count(" batch=")

    def check_alive(self) -> None:
        """A streaming job must only end by our kill: an exit on its own is a failure."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise ScenarioError(f"{self.name} exited with {self.proc.returncode} before it was killed:\n{self.tail()}")

    def kill(self) -> Kill:
        """SIGKILL the running job (it must be running: a kill that hits nothing proves nothing)."""
        assert self.proc is not None
        batches = self.batches()
        self.check_alive()
        _killpg(self.proc)
        kill = Kill(self.name, self.runs, time.monotonic() - self.started, batches)
        self.kills.append(kill)
        return kill

    def interrupt(self) -> None:
        """Ctrl-C: the job stops its query between batches and exits with 130."""
        assert self.proc is not None
        self.check_alive()
        self.proc.send_signal(signal.SIGINT)

    def finish(self, timeout: float = 60.0) -> None:
        """Wait for a clean stop after :meth:`interrupt`."""
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _killpg(self.proc)
            raise ScenarioError(f"{self.name} did not stop in {timeout:.0f} s:\n{self.tail()}") from None
        _killpg(self.proc)  # nothing of the group may outlive the job
        if rc != 130:
            raise ScenarioError(f"{self.name} failed ({rc}):\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _killpg(self.proc)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _setup(server: MariaDBServer, schema: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(
            f"CREATE TABLE `{schema}`.accounts (id INT PRIMARY KEY, email VARCHAR(64) NOT NULL, "
            "balance DECIMAL(12,2) NOT NULL, note VARCHAR(64), UNIQUE KEY uk_email (email))"
        )
        cur.execute(
            f"CREATE TABLE `{schema}`.orders (id BIGINT PRIMARY KEY, account INT NOT NULL, "
            "qty SMALLINT NOT NULL, placed DATETIME(6) NOT NULL)"
        )
        cur.execute(f"CREATE TABLE `{schema}`.tags (name VARCHAR(32) PRIMARY KEY, hits INT NOT NULL)")


def _workload(
    server: MariaDBServer, schema: str, seed: int, stop: threading.Event, pause: float, min_rows: int = 0
) -> None:
    """Small random transactions of inserts, updates and deletes until ``stop`` and until the tables hold
    ``min_rows`` rows; e-mails are reused after deletes so the unique key sees a value move between
    rows, the case that trips naive replays."""
    rng = random.Random(seed)
    accounts: set[int] = set()
    orders: set[int] = set()
    tags: set[str] = set()
    free_emails: list[str] = []
    next_id = 1
    with server.connect(database=schema, autocommit=False) as conn, conn.cursor() as cur:
        while not stop.is_set() or len(accounts) + len(orders) + len(tags) < min_rows:
            for _ in range(rng.randint(1, 5)):
                op = rng.random()
                if op < 0.45 or not accounts:
                    next_id += 1
                    email = free_emails.pop() if free_emails and rng.random() < 0.5 else f"a{next_id}@x"
                    cur.execute(
                        "INSERT INTO accounts VALUES (%s, %s, %s, %s)",
                        (next_id, email, f"{rng.randint(0, 10**6)}.{rng.randint(0, 99):02d}", None),
                    )
                    accounts.add(next_id)
                    cur.execute(
                        "INSERT INTO orders VALUES (%s, %s, %s, NOW(6))", (next_id * 10, next_id, rng.randint(1, 9))
                    )
                    orders.add(next_id * 10)
                    tag = f"t{rng.randint(0, 40)}"
                    cur.execute("INSERT INTO tags VALUES (%s, 1) ON DUPLICATE KEY UPDATE hits = hits + 1", (tag,))
                    tags.add(tag)
                elif op < 0.8:
                    key = rng.choice(sorted(accounts))
                    cur.execute(
                        "UPDATE accounts SET balance = balance + 1, note = %s WHERE id = %s", (f"n{rng.random()}", key)
                    )
                    if orders:
                        cur.execute("UPDATE orders SET qty = qty + 1 WHERE id = %s", (rng.choice(sorted(orders)),))
                else:
                    key = rng.choice(sorted(accounts))
                    cur.execute("SELECT email FROM accounts WHERE id = %s", (key,))
                    (email,) = _one(cur)
                    cur.execute("DELETE FROM accounts WHERE id = %s", (key,))
                    accounts.discard(key)
                    free_emails.append(email)
                    if key * 10 in orders:
                        cur.execute("DELETE FROM orders WHERE id = %s", (key * 10,))
                        orders.discard(key * 10)
                    if tags and rng.random() < 0.3:
                        tag = rng.choice(sorted(tags))
                        cur.execute("DELETE FROM tags WHERE name = %s", (tag,))
                        tags.discard(tag)
            conn.commit()
            time.sleep(rng.uniform(0.2, 1.8) * pause)


def _one(cur: Cursor) -> tuple[Any, ...]:
    """The row of a query that always returns one (COUNT(*), or a key the workload knows exists)."""
    row = cur.fetchone()
    assert row is not None
    return row


def _downstream_rows(server: MariaDBServer, schema: str) -> int:
    """Rows of the scenario's tables downstream (0 while the apply job has not created them)."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        present = [name for (name,) in cur.fetchall() if name in TABLES]
        total = 0
        for name in present:
            cur.execute(f"SELECT COUNT(*) FROM `{schema}`.`{name}`")
            total += _one(cur)[0]
        return total


def _visible(server: MariaDBServer, schema: str) -> bool:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = 'tags'", (schema,)
        )
        if not _one(cur)[0]:
            return False
        cur.execute(f"SELECT COUNT(*) FROM `{schema}`.tags WHERE name = 'zz-marker'")
        return bool(_one(cur)[0])


@dataclass
class Scenario:
    """One exactly-once run: ``kills`` SIGKILLs in total through ``via`` (storage or kafka)."""

    upstream: MariaDBServer  # private: its binlog directory holds only this scenario's changes
    downstream: MariaDBServer
    workdir: Path
    via: str = "storage"
    broker: Broker | None = None
    kills: int = 10
    seed: int = 20261122
    #: Mean seconds between workload transactions (each 1-5 statements of 1-3 rows).
    pause: float = 0.2
    progress: Callable[[str], None] = lambda _: None
    #: The wire protocol through Kafka (storage is always canal-json with the TiDB extension).
    protocol: str = "open-protocol"
    #: The MySQL sink's workers in the apply job (rows of different keys apply in parallel).
    worker_count: int = 2
    #: How the capture reads the upstream: ``files`` (its binlog directory) or ``server`` (the
    #: replica protocol, ``[source] type = "mysql"``).
    source: str = "files"
    #: Seconds the workload runs at least, kills or not (``scripts/soak --kills 0`` as a live demo).
    duration: float = 0.0
    #: Rows the tables hold at least when the workload stops: the kills come as fast as the jobs
    #: start, so a run's length alone does not say how much it wrote (one run ended with 49 rows).
    min_rows: int = 60
    #: Each restart in another working directory (HOME, TMPDIR) with the checkpoints given as
    #: ``file://`` URIs of one shared directory: a job resumed on another host (docs/deploy.md).
    elsewhere: bool = False

    def __post_init__(self) -> None:
        if self.source not in ("files", "server"):
            raise ValueError(f"source must be files or server, not {self.source!r}")
        if self.via not in ("storage", "kafka"):
            raise ValueError(f"via must be storage or kafka, not {self.via!r}")
        if self.via == "kafka" and self.broker is None:
            raise ValueError("via kafka needs a broker")
        if self.protocol not in ("open-protocol", "canal-json", "simple", "debezium"):
            raise ValueError(f"protocol must be open-protocol, canal-json, simple or debezium, not {self.protocol!r}")


@dataclass
class Outcome:
    """What a scenario did; ``report`` is the final diff (``report.equal`` is the verdict)."""

    seed: int
    kills: list[Kill]
    runs: dict[str, int]
    rows_during_chaos: int  # downstream rows when the last kill landed: the pipeline moved meanwhile
    chaos_s: float
    catch_up_s: float
    report: DiffReport
    schema: str
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        by_job = {name: sum(k.job == name for k in self.kills) for name in self.runs}
        mid = sum(k.batches > 0 for k in self.kills)
        return (
            f"kills: {by_job} ({mid} after a micro-batch, {len(self.kills) - mid} during start-up/recovery); "
            f"runs {self.runs}; {self.rows_during_chaos} rows downstream during the kills; "
            f"chaos {self.chaos_s:.0f} s, catch-up {self.catch_up_s:.0f} s"
        )


def _uris(scenario: Scenario, schema: str, storage: Path) -> str:
    if scenario.via == "storage":
        storage.mkdir(exist_ok=True)  # the apply job may start before the capture wrote anything
        return f"file://{storage}?protocol=canal-json&enable-tidb-extension=true"
    assert scenario.broker is not None
    topic = schema.replace("_", "-")
    # No topic made beforehand: an apply job that starts before the capture's first send waits for it.
    params = f"protocol={scenario.protocol}&partition-num=3"
    if scenario.protocol in ("canal-json", "debezium"):
        params += "&enable-tidb-extension=true"  # their watermarks (and canal-json's commit ts) need it
    return f"kafka://{scenario.broker.bootstrap_servers}/{topic}?{params}"


class _Chaos:
    """Each job on its own timer: killed at its planned point, restarted at once from its checkpoint."""

    def __init__(self, jobs: list[Job], rng: random.Random, progress: Callable[[str], None]) -> None:
        self.jobs, self.rng, self.progress = jobs, rng, progress
        self.wanted: dict[str, int] = {}  # batches the run must log before its kill clock starts (0: at start)
        self.delay: dict[str, float] = {}  # then seconds to the kill
        self.kill_at: dict[str, float | None] = {}
        self.first_batch: dict[str, float | None] = {}
        self.startup: dict[str, float] = {}  # the last measured time to a first batch, per job
        self.kills: list[Kill] = []

    def _launch(self, job: Job) -> None:
        job.start()
        # Before the first batch: at a fraction of the last measured start-up. Until one run of the
        # job got that far (start-up time depends on the machine's load), every kill waits for it.
        early = job.name in self.startup and self.rng.random() < EARLY_KILLS
        # Else after its 1st-3rd batch, counted in batches: on a loaded machine the first batch can come a
        # minute after the start and find nothing new yet; a kill some seconds after it would find no rows.
        if early:
            self.wanted[job.name], self.delay[job.name] = 0, self.rng.uniform(0.1, 0.9) * self.startup[job.name]
        else:
            self.wanted[job.name], self.delay[job.name] = self.rng.randint(1, 3), self.rng.uniform(0.0, 1.5)
        self.kill_at[job.name] = job.started + self.delay[job.name] if self.wanted[job.name] == 0 else None
        self.first_batch[job.name] = None

    def run(self, kills: int, on_kill: Callable[[Kill], str]) -> None:
        for job in self.jobs:
            self._launch(job)
        while len(self.kills) < kills:
            time.sleep(0.1)
            now = time.monotonic()
            for job in self.jobs:
                job.check_alive()
                if self.first_batch[job.name] is None or self.kill_at[job.name] is None:
                    batches = job.batches()  # reads the run's whole log: only while something waits for it
                    if self.first_batch[job.name] is None and batches:
                        self.first_batch[job.name] = now
                        self.startup[job.name] = now - job.started
                    if self.kill_at[job.name] is None and batches >= self.wanted[job.name]:
                        self.kill_at[job.name] = now + self.delay[job.name]
                kill_at = self.kill_at[job.name]
                if (kill_at is not None and now >= kill_at) or now >= job.started + IDLE_KILL:
                    kill = job.kill()
                    self.kills.append(kill)
                    self.progress(
                        f"kill {len(self.kills)}/{kills}: {kill.job} run {kill.run} after {kill.uptime:.1f} s "
                        f"({kill.batches} batches); {on_kill(kill)}"
                    )
                    self._launch(job)
                    if len(self.kills) >= kills:
                        break


def run_scenario(scenario: Scenario) -> Outcome:
    """Run the scenario; ScenarioError when a job misbehaves. The caller judges ``Outcome.report``."""
    s = scenario
    via = f"kafka ({s.protocol})" if s.via == "kafka" else s.via
    s.progress(f"exactly-once from {s.source} via {via}, seed {s.seed}, {s.kills} kills")
    rng = random.Random(s.seed)
    schema = f"eo_{uuid.uuid4().hex[:10]}"
    changefeed_id = schema.replace("_", "-")
    _setup(s.upstream, schema)
    uri = _uris(s, schema, s.workdir / "storage")
    config = s.workdir / "changefeed.toml"
    config.write_text(
        f'changefeed-id = "{changefeed_id}"\nsink-uri = "{uri}"\n{_source_section(s)}[filter]\nrules = ["{schema}.*"]\n'
    )
    spark = ["--master", "local[2]", "--trigger-interval", "500ms", "--spark-conf", JVM]
    shared = s.workdir / "shared"
    ck_run, ck_apply = (shared / "ck-run").as_uri(), (shared / "ck-apply").as_uri()
    if not s.elsewhere:
        ck_run, ck_apply = str(s.workdir / "ck-run"), str(s.workdir / "ck-apply")
    hosts = [s.workdir / "host-a", s.workdir / "host-b"] if s.elsewhere else None
    capture = Job("capture", ["run", str(config), "--checkpoint", ck_run, *spark], s.workdir, hosts)
    apply_argv = ["apply", "--from", uri, "--to", f"{s.downstream.url}/?worker-count={s.worker_count}"]
    apply_argv += ["--changefeed-id", changefeed_id, "--checkpoint", ck_apply, *spark]
    apply = Job("apply", apply_argv, s.workdir, hosts)

    failures: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        try:
            _workload(s.upstream, schema, s.seed, stop, s.pause, s.min_rows)
        except BaseException as exc:  # re-raised in the calling thread
            failures.append(exc)

    workload = threading.Thread(target=write, name="workload", daemon=True)
    chaos = _Chaos([capture, apply], rng, s.progress)
    try:
        t0 = time.monotonic()
        workload.start()
        chaos.run(s.kills, lambda _: f"{_downstream_rows(s.downstream, schema)} rows downstream")
        while time.monotonic() < t0 + s.duration:
            capture.check_alive()
            apply.check_alive()
            time.sleep(0.5)
        rows_during_chaos = _downstream_rows(s.downstream, schema)
        stop.set()
        workload.join()
        if failures:
            raise ScenarioError(f"the workload failed: {failures[0]!r}") from failures[0]
        with s.upstream.connect(database=schema) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO tags VALUES ('zz-marker', 0)")  # the last transaction upstream
        t1 = time.monotonic()
        while not _visible(s.downstream, schema):
            if time.monotonic() > t1 + CATCH_UP:
                raise ScenarioError(f"not caught up in {CATCH_UP:.0f} s:\n{capture.tail()}\n{apply.tail()}")
            capture.check_alive()
            apply.check_alive()
            time.sleep(0.5)
        capture.interrupt()
        apply.interrupt()
        capture.finish()
        apply.finish()
        t2 = time.monotonic()
        report = Differ(parse_mysql_url(s.upstream.url), parse_mysql_url(s.downstream.url)).run([f"{schema}.*"])
        outcome = Outcome(
            s.seed,
            chaos.kills,
            {capture.name: capture.runs, apply.name: apply.runs},
            rows_during_chaos,
            t1 - t0,
            t2 - t1,
            report,
            schema,
        )
        s.progress(outcome.summary())
        return outcome
    finally:
        capture.stop()
        apply.stop()
        stop.set()
        workload.join(60)
        _cleanup(s.downstream, schema, changefeed_id)


def _source_section(s: Scenario) -> str:
    if s.source == "server":
        return f'[source]\ntype = "mysql"\nurl = "{s.upstream.url}"\n'
    return f'[source]\npath = "{s.upstream.binlog_dir}"\n'


def _cleanup(downstream: MariaDBServer, schema: str, changefeed_id: str) -> None:
    with downstream.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables "
            "WHERE table_schema = 'changefeed' AND table_name = 'changefeed_checkpoint'"
        )
        if _one(cur)[0]:
            cur.execute("DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = %s", (changefeed_id,))


def describe(report: DiffReport) -> str:
    """The diff's verdict for people: equal, or each differing table with sample rows."""
    if report.equal:
        tables = ", ".join(f"{t.table} ({t.rows_source} rows)" for t in report.tables)
        return f"diff: equal ({tables})"
    lines = ["diff: DIFFERENT"]
    for t in report.tables:
        if t.equal:
            continue
        counts = ", ".join(f"{k} {v}" for k, v in sorted(t.counts.items()))
        lines.append(f"  {t.label}: {t.status}, source {t.rows_source} rows, target {t.rows_target} rows; {counts}")
        for d in t.samples[:10]:
            lines.append(
                f"    {d.kind} key {t.format_row(d.key)}: {t.format_row(d.source)} -> {t.format_row(d.target)}"
            )
    return "\n".join(lines)
