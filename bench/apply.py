"""MySQL sink apply throughput vs LOAD DATA LOCAL INFILE of the same rows, on one MariaDB.

Usage: .venv/bin/python bench/apply.py [--rows N] [--workers 1,2,4] [--url mysql://...] [--load-data auto,off]

Workloads over a 10-column table with a BIGINT primary key and one secondary index:

* ``insert``: N inserts in upstream transactions of 1-20 rows (the initial-load-like case);
* ``mixed``: N row changes, ~55% inserts, ~30% updates, ~15% deletes of earlier rows.

Each runs with 1, 2, 4 workers in normal mode (INSERT/UPDATE/DELETE, the steady state after the
safe-mode window) and, for ``insert``, in safe mode (REPLACE). The practical limit is LOAD DATA
LOCAL INFILE of the N insert rows into the same empty table on the same server in the same run;
the ratio printed is sink rows/s over LOAD DATA rows/s (the issue's target: >= 50% for inserts).
Without --url a private MariaDB is started (and stopped) like the test fixtures do.

``--load-data auto,off`` runs every measurement once per sink setting (``load-data``: runs of
inserts as LOAD DATA LOCAL INFILE, or INSERT statements), alternated in that order, and prints the
CPU per row of this process (the sink: `time.process_time`) and of the private server (/proc).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orders import order_image, orders_table
from changefeed.clients.mysql import MySQLParams, load_local_infile, parse_mysql_url
from changefeed.model import Event, Index, Op, Resolved, RowChange, TableSchema
from changefeed.ops.progress import Progress, add_progress_option
from changefeed.sink.mysql import MySQLSink

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
DB = "bench_apply"
DDL = (
    "CREATE TABLE `{db}`.orders (id BIGINT NOT NULL PRIMARY KEY, customer_id INT UNSIGNED, status VARCHAR(32),"
    " amount DECIMAL(12,2), ratio DOUBLE, weight FLOAT, created_at DATETIME(3), note TEXT, flags TINYINT,"
    " payload VARBINARY(64), KEY (customer_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


def table(schema: str) -> TableSchema:
    return orders_table(schema, (Index("customer_id", ("customer_id",)),))


def stream(t: TableSchema, n: int, mixed: bool, seed: int = 1) -> list[Event]:
    """n row changes in transactions of 1-20 rows, commit ts increasing, a Resolved every 100 txns.

    ``Resolved(ts)`` says every change with commit ts at or below ``ts`` has been emitted (TiCDC's
    meaning; the sink skips later ones at or below it), so it carries the last emitted commit ts.
    """
    rnd = random.Random(seed)
    live: dict[int, tuple[Any, ...]] = {}
    keys: list[int] = []
    events: list[Event] = []
    ts = 1000
    next_id = 1
    done = 0
    txns = 0
    while done < n:
        ts += 1
        txns += 1
        for _ in range(min(rnd.randint(1, 20), n - done)):
            roll = rnd.random() if mixed and live else 0.0
            if roll < 0.55:
                image = order_image(rnd, next_id)
                live[next_id] = image
                keys.append(next_id)
                next_id += 1
                events.append(RowChange(Op.INSERT, t, ts, new=image))
            else:
                while True:  # a random live key (lazily skipping deleted ones)
                    j = rnd.randrange(len(keys))
                    key = keys[j]
                    if key in live:
                        break
                    keys[j] = keys[-1]
                    keys.pop()
                old = live[key]
                if roll < 0.85:
                    new = (key, old[1], rnd.choice(["paid", "shipped"]), old[3] + 1, *old[4:])
                    live[key] = new
                    events.append(RowChange(Op.UPDATE, t, ts, old=old, new=new))
                else:
                    del live[key]
                    events.append(RowChange(Op.DELETE, t, ts, old=old))
            done += 1
        if txns % 100 == 0:
            events.append(Resolved(ts))
    events.append(Resolved(ts))
    return events


def tsv_value(v: Any) -> bytes:
    if v is None:
        return b"\\N"
    raw = v if isinstance(v, bytes) else str(v).encode("utf-8")
    return raw.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\0", b"\\0")


def reset(params: MySQLParams) -> None:
    conn = params.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DB}`")
        cur.execute(f"DROP DATABASE IF EXISTS `{DB}_cp`")
        cur.execute(f"CREATE DATABASE `{DB}`")
        cur.execute(DDL.format(db=DB))
    conn.close()


def load_data(params: MySQLParams, rows: list[tuple[Any, ...]]) -> float:
    """Seconds to LOAD DATA LOCAL INFILE the rows into the empty table (file written beforehand)."""
    reset(params)
    with tempfile.NamedTemporaryFile("wb", suffix=".tsv", delete=False) as f:
        for row in rows:
            f.write(b"\t".join(tsv_value(v) for v in row) + b"\n")
        path = f.name
    try:
        conn = params.connect(autocommit=True, local_infile=True)
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL local_infile=1")
            started = time.perf_counter()
            load_local_infile(  # the client sends only the file it offers (clients.mysql)
                conn,
                f"LOAD DATA LOCAL INFILE {conn.escape(path)} INTO TABLE `{DB}`.orders CHARACTER SET utf8mb4"
                " FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n'",
                path,
            )
            elapsed = time.perf_counter() - started
            cur.execute(f"SELECT COUNT(*) FROM `{DB}`.orders")
            (count,) = cur.fetchone()
        conn.close()
        if count != len(rows):
            raise SystemExit(f"LOAD DATA loaded {count} of {len(rows)} rows")
        return elapsed
    finally:
        os.unlink(path)


def _server_cpu(pid: int | None) -> float:
    """CPU seconds of the server process so far (all its threads), 0 without a private server."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apply(
    params: MySQLParams,
    events: list[Event],
    workers: int,
    safe: bool,
    rows: int,
    load_data: str,
    pid: int | None,
    sizes: tuple[int, int | None] = (4096, None),
) -> tuple[float, float, float]:
    """(seconds, this process's CPU seconds, the server's CPU seconds) of one run."""
    reset(params)
    sink = MySQLSink(
        params,
        changefeed_id="bench",
        checkpoint_schema=f"{DB}_cp",
        workers=workers,
        safe_mode=safe,
        safe_mode_duration=0,
        batch_rows=sizes[0],
        load_data=load_data,
        **({"load_data_min_rows": sizes[1]} if sizes[1] is not None else {}),
    )
    cpu, server = time.process_time(), _server_cpu(pid)
    started = time.perf_counter()
    with sink:
        sink.write(events)
    elapsed = time.perf_counter() - started
    cpu, server = time.process_time() - cpu, _server_cpu(pid) - server
    if sink.stats["rows"] != rows:
        raise SystemExit(f"sink applied {sink.stats['rows']} of {rows} rows")
    if load_data == "off" and sink.stats["load_data_rows"]:
        raise SystemExit("load-data=off loaded rows")
    return elapsed, cpu, server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500_000, help="row changes per workload (default 500000)")
    ap.add_argument("--workers", default="1,2,4", help="worker counts to run (default 1,2,4)")
    ap.add_argument("--url", help="an existing server (default: start a private MariaDB)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement, best kept (shared machines are noisy)")
    ap.add_argument("--load-data", default="auto", help="sink load-data settings to run, alternated (auto,off)")
    ap.add_argument("--workloads", default="insert,insert safe-mode,mixed", help="which workloads to run")
    ap.add_argument("--batch-rows", type=int, default=4096, help="the sink's rows per downstream transaction")
    ap.add_argument("--load-data-min-rows", type=int, help="shortest run sent as LOAD DATA (default: the sink's)")
    add_progress_option(ap)
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    modes = args.load_data.split(",")

    server = None
    if args.url:
        params = parse_mysql_url(args.url)
    else:
        from changefeed.testing import MariaDBServer  # noqa: PLC0415

        server = MariaDBServer(
            server_id=77,
            name="bench-mariadb",
            extra_config={
                "innodb_buffer_pool_size": "1G",
                "innodb_log_file_size": "512M",
                "innodb_log_buffer_size": "64M",
            },
        ).start()
        params = parse_mysql_url(server.url)
    pid = server.pid if server is not None else None
    try:
        t = table(DB)
        insert_events = stream(t, args.rows, mixed=False)
        mixed_events = stream(t, args.rows, mixed=True)
        insert_rows = [e.new for e in insert_events if isinstance(e, RowChange)]
        loads = []
        for _ in range(args.repeat):
            before = _server_cpu(pid)
            loads.append((load_data(params, insert_rows), _server_cpu(pid) - before))
        load_s, load_server = min(loads)
        load_rate = args.rows / load_s
        print(f"rows={args.rows} server={params.url}")
        print(
            f"{'LOAD DATA LOCAL INFILE':<50} {load_rate:>10,.0f} rows/s  {load_s:6.2f} s  (the practical limit)"
            f"  CPU µs/row: server {load_server * 1e6 / args.rows:5.2f}"
        )
        runs = [("insert", insert_events, False), ("insert safe-mode", insert_events, True)]
        runs.append(("mixed", mixed_events, False))
        runs = [r for r in runs if r[0] in args.workloads.split(",")]
        total = len(runs) * len(counts) * args.repeat * len(modes)
        bar = Progress("runs", total, "runs", disabled=args.no_progress)
        for label, events, safe in runs:
            for workers in counts:
                bar.note(f"{label} workers={workers}")
                timings: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
                for _ in range(args.repeat):
                    for mode in modes:  # alternated: the machine's noise hits every setting alike
                        sizes = (args.batch_rows, args.load_data_min_rows)
                        timings[mode].append(apply(params, events, workers, safe, args.rows, mode, pid, sizes))
                        bar.update()  # between timed runs: the bar costs nothing inside one
                for mode in modes:
                    seconds, cpu, server_cpu = min(timings[mode])
                    rate = args.rows / seconds
                    name = label + f" workers={workers}" + (f" load-data={mode}" if len(modes) > 1 else "")
                    print(
                        f"{name:<50} {rate:>10,.0f} rows/s  {seconds:6.2f} s  {rate / load_rate:6.1%} of LOAD DATA"
                        f"  CPU µs/row: sink {cpu * 1e6 / args.rows:5.2f}, server {server_cpu * 1e6 / args.rows:5.2f}"
                    )
                sys.stdout.flush()
        bar.close()
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
