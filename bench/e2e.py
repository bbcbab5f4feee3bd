"""End-to-end benchmark: MariaDB -> ``changefeed run`` -> tansu broker -> ``changefeed apply`` -> MariaDB.

Measures what a user sees: rows/s from the first upstream commit to the last row visible
downstream, and the lag of each row from its upstream commit (time ``COMMIT`` returned) to the
moment a downstream poller first sees it. Both jobs run as streaming subprocesses with
``local[2]`` and a short trigger; they start (and are warmed up by the CREATE TABLE reaching the
downstream) before the workload, so JVM start-up is not counted.

    .venv/bin/python bench/e2e.py --rows 20000 --txn-rows 500

Writes ``bench/e2e_lag.png`` (lag over time) when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from changefeed.testing import Broker, MariaDBServer

SCHEMA = "bench_e2e"
HERE = Path(__file__).resolve().parent


def _start(argv: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "changefeed", *argv],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, then the whole group (no Spark JVM may outlive the benchmark)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _wait(
    what: str, check: Callable[[], bool], timeout: float, procs: list[subprocess.Popen[bytes]], logs: list[Path]
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                sys.exit(f"{log.name} exited ({proc.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)


def _workload(up: MariaDBServer, rows: int, txn_rows: int, commits: dict[int, float]) -> None:
    """Insert ``rows`` rows in transactions of ``txn_rows``, recording when each COMMIT returned."""
    with up.connect(database=SCHEMA, autocommit=False) as conn, conn.cursor() as cur:
        for start in range(1, rows + 1, txn_rows):
            ids = range(start, min(start + txn_rows, rows + 1))
            cur.executemany("INSERT INTO t VALUES (%s, %s, NOW(6))", [(i, f"payload-{i:08d}-abcdefgh") for i in ids])
            conn.commit()
            now = time.time()
            for i in ids:
                commits[i] = now


def _poll(down: MariaDBServer, rows: int, seen: dict[int, float], timeout: float) -> None:
    """Record when each id first becomes visible downstream (new ids only, every 20 ms)."""
    deadline = time.monotonic() + timeout
    last = 0
    with down.connect(database=SCHEMA) as conn, conn.cursor() as cur:
        while len(seen) < rows and time.monotonic() < deadline:
            cur.execute("SELECT id FROM t WHERE id > %s", (last,))
            now = time.time()
            for (i,) in cur.fetchall():
                seen.setdefault(i, now)
            # Rows commit downstream in upstream commit order: ids below the smallest unseen are all seen.
            while last + 1 in seen:
                last += 1
            time.sleep(0.02)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--txn-rows", type=int, default=500, help="rows per upstream transaction")
    p.add_argument("--trigger", default="200ms", help="micro-batch trigger of both jobs")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--protocol", default="open-protocol")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds of polling")
    p.add_argument("--plot", type=Path, default=HERE / "e2e_lag.png")
    args = p.parse_args()
    print("command:", shlex.join([".venv/bin/python", "bench/e2e.py", *sys.argv[1:]]))

    work = Path(tempfile.mkdtemp(prefix="changefeed-bench-e2e-"))
    with contextlib.ExitStack() as stack:
        up = stack.enter_context(MariaDBServer(server_id=1, name="bench-up"))
        down = stack.enter_context(MariaDBServer(server_id=2, name="bench-down"))
        broker = stack.enter_context(Broker())
        topic = f"bench-{int(time.time())}"
        broker.create_topic(topic, args.partitions)
        uri = f"kafka://{broker.bootstrap_servers}/{topic}?protocol={args.protocol}&partition-num={args.partitions}"
        config = work / "changefeed.toml"
        config.write_text(
            f'changefeed-id = "bench"\nsink-uri = "{uri}"\n[source]\npath = "{up.binlog_dir}"\n'
            f'[filter]\nrules = ["{SCHEMA}.*"]\n'
        )
        spark = ["--master", args.master, "--trigger-interval", args.trigger]
        capture_argv = ["run", str(config), "--checkpoint", str(work / "ck-run"), *spark]
        apply_argv = ["apply", "--from", uri, "--to", f"{down.url}/?worker-count=4", "--changefeed-id", "bench"]
        apply_argv += ["--checkpoint", str(work / "ck-apply"), *spark]
        logs = [work / "capture.log", work / "apply.log"]
        print("capture:", shlex.join(["changefeed", *capture_argv]))
        print("apply:  ", shlex.join(["changefeed", *apply_argv]))
        procs = [_start(capture_argv, logs[0], work), _start(apply_argv, logs[1], work)]
        try:
            with up.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {SCHEMA}")
                cur.execute(
                    f"CREATE TABLE {SCHEMA}.t (id BIGINT PRIMARY KEY, payload VARCHAR(64), committed DATETIME(6))"
                )

            def table_downstream() -> bool:
                with down.connect() as conn, conn.cursor() as cur:
                    cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s", (SCHEMA,))
                    return bool(cur.fetchone()[0])

            t_warm = time.monotonic()
            _wait("the pipeline to start", table_downstream, 300, procs, logs)
            print(f"pipeline up (CREATE TABLE downstream) after {time.monotonic() - t_warm:.1f} s")

            commits: dict[int, float] = {}
            seen: dict[int, float] = {}
            poller = threading.Thread(target=_poll, args=(down, args.rows, seen, args.timeout), daemon=True)
            poller.start()
            t0 = time.time()
            _workload(up, args.rows, args.txn_rows, commits)
            t_written = time.time()
            poller.join()
        finally:
            for proc in procs:
                _stop(proc)

    if len(seen) < args.rows:
        print(f"only {len(seen)} of {args.rows} rows visible after {args.timeout:.0f} s; logs in {work}")
        return 1
    lags = [seen[i] - commits[i] for i in range(1, args.rows + 1)]
    t_end = max(seen.values())
    print(f"upstream write: {args.rows} rows in {t_written - t0:.2f} s ({args.rows / (t_written - t0):,.0f} rows/s)")
    print(f"end to end: {args.rows} rows in {t_end - t0:.2f} s = {args.rows / (t_end - t0):,.0f} rows/s")
    print(
        f"lag commit -> visible: p50 {_pct(lags, 50):.2f} s, p99 {_pct(lags, 99):.2f} s, "
        f"max {max(lags):.2f} s, min {min(lags):.2f} s"
    )
    print(f"logs: {work}")
    _plot(commits, lags, t0, args)
    return 0


def _plot(commits: dict[int, float], lags: list[float], t0: float, args: argparse.Namespace) -> None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    xs = [commits[i] - t0 for i in range(1, args.rows + 1)]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(xs, lags, ".", markersize=2)
    ax.set_xlabel("upstream commit time since start (s)")
    ax.set_ylabel("lag to downstream visibility (s)")
    ax.set_title(
        f"MariaDB -> Kafka ({args.protocol}) -> MariaDB, {args.rows} rows, {args.master}, trigger {args.trigger}"
    )
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    raise SystemExit(main())
