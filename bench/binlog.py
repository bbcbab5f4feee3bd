"""Binlog decoding throughput: our reader vs python-mysql-replication on the same binlog, one core each.

    .venv/bin/python bench/binlog.py                 # 500k row events
    .venv/bin/python bench/binlog.py --rows 100000   # a quick run

Starts a private MariaDB (changefeed.testing), writes one binlog of ``--rows`` row events on a
10-column mixed table (80% inserts as multi-row INSERTs in big transactions, 15% updates, 5%
deletes), then decodes the same range side by side:

* ``ours rowchange (files)``: `file_capture` emitting model `RowChange`s;
* ``ours arrow (files)``: `read_range_arrow`, typed Arrow record batches per table (the Spark path);
* ``ours rowchange (live)``: `live_capture` over the replication protocol (as the peer reads);
* ``python-mysql-replication``: its fastest sensible settings (rows events only, one schema,
  resume by file/pos with ``is_mariadb=False``, non-blocking), iterating every row's values.

Each path runs ``--repeat`` times; the best run counts (the machine is shared). Prints rows/s and
the ratio to python-mysql-replication.
"""

from __future__ import annotations

import argparse
import logging
import random
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture, live_capture
from changefeed.capture.binlog.arrow import read_range_arrow
from changefeed.model.events import RowChange
from changefeed.ops.progress import Progress, add_progress_option
from changefeed.testing.mariadb import MariaDBServer

SCHEMA = "bench"
DDL = (
    f"CREATE TABLE {SCHEMA}.orders (id BIGINT PRIMARY KEY, qty INT UNSIGNED, sku VARCHAR(64),"
    " amount DECIMAL(12,2), ratio DOUBLE, weight FLOAT, created DATETIME(3), note TEXT, flag TINYINT,"
    " payload VARBINARY(64)) DEFAULT CHARSET=utf8mb4"
)
INSERTS_PER_STATEMENT = 2000
STATEMENTS_PER_TXN = 25


def _row(rng: random.Random, i: int) -> str:
    note = "NULL" if rng.random() < 0.3 else f"'note {rng.randrange(10**6)} gift wrap, leave at the door'"
    payload = "NULL" if rng.random() < 0.2 else f"X'{rng.randbytes(rng.randrange(4, 24)).hex()}'"
    return (
        f"({i},{rng.randrange(1 << 32)},'SKU-{rng.randrange(10**8):08d}',{rng.randrange(-(10**9), 10**9) / 100:.2f},"
        f"{rng.random() * 1000!r},{rng.random() * 100:.3f},"
        f"'2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} {rng.randrange(24):02d}:"
        f"{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}',{note},{rng.randrange(-128, 128)},"
        f"{payload})"
    )


def generate(
    server: MariaDBServer, rows: int, *, no_progress: bool = False
) -> tuple[BinlogPosition, BinlogPosition, dict[str, int]]:
    """Write ``rows`` row events; return the (start, end) binlog positions and the count per op."""
    rng = random.Random(42)
    inserts = rows * 80 // 100
    updates = rows * 15 // 100
    deletes = rows - inserts - updates
    bar = Progress("generate", inserts, "rows", unit_scale=True, disabled=no_progress)
    with bar, server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(DDL)
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        start = BinlogPosition(str(file), int(pos))
        done = 0
        while done < inserts:
            cur.execute("BEGIN")
            for _ in range(STATEMENTS_PER_TXN):
                n = min(INSERTS_PER_STATEMENT, inserts - done)
                if n <= 0:
                    break
                values = ",".join(_row(rng, done + i) for i in range(n))
                cur.execute(f"INSERT INTO {SCHEMA}.orders VALUES {values}")
                done += n
                bar.update(n)
            cur.execute("COMMIT")
        step = 10_000
        for lo in range(0, updates, step):  # updates hit the first rows, deletes the last ones
            hi = min(lo + step, updates)
            cur.execute(
                f"UPDATE {SCHEMA}.orders SET qty = qty DIV 2, note = CONCAT('u', IFNULL(note, '')), flag = flag DIV 2"
                f" WHERE id >= {lo} AND id < {hi}"
            )
        cur.execute(f"DELETE FROM {SCHEMA}.orders WHERE id >= {inserts - deletes}")
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        end = BinlogPosition(str(file), int(pos))
    return start, end, {"insert": inserts, "update": updates, "delete": deletes}


# ------------------------------------------------------------------ the paths


def ours_rowchange_files(server: MariaDBServer, start: BinlogPosition, end: BinlogPosition) -> int:
    capture = file_capture(
        server.binlog_dir, start, table_filter=BlockAllowList.build(do_dbs=[SCHEMA]), until=(end.file, end.pos)
    )
    return sum(1 for e in capture.events() if type(e) is RowChange)


def ours_rowchange_live(server: MariaDBServer, start: BinlogPosition, end: BinlogPosition) -> int:
    capture = live_capture(
        server.url,
        start,
        blocking=False,
        table_filter=BlockAllowList.build(do_dbs=[SCHEMA]),
        until=(end.file, end.pos),
    )
    return sum(1 for e in capture.events() if type(e) is RowChange)


def ours_arrow_files(server: MariaDBServer, start: BinlogPosition, end: BinlogPosition) -> int:
    batches = read_range_arrow(server.binlog_dir, start, end, table_filter=BlockAllowList.build(do_dbs=[SCHEMA]))
    return sum(b.num_rows for b in batches)


def python_mysql_replication(server: MariaDBServer, start: BinlogPosition, end: BinlogPosition) -> int:
    from pymysqlreplication import BinLogStreamReader  # noqa: PLC0415
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: PLC0415

    stream = BinLogStreamReader(
        connection_settings={"host": server.host, "port": server.port, "user": server.user, "password": ""},
        server_id=4242,
        is_mariadb=False,  # with is_mariadb=True it ignores log_file/log_pos (TOOLCHAIN.md)
        resume_stream=True,
        log_file=start.file,
        log_pos=start.pos,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[SCHEMA],
        enable_logging=False,
    )
    n = 0
    try:
        for event in stream:
            if stream.log_file == end.file and event.packet.log_pos > end.pos:
                break
            for row in event.rows:  # decoding happens here
                n += 1
                _ = row.get("values") or row.get("after_values")
    finally:
        stream.close()
    return n


PATHS: dict[str, Callable[[MariaDBServer, BinlogPosition, BinlogPosition], int]] = {
    "ours rowchange (files)": ours_rowchange_files,
    "ours arrow (files)": ours_arrow_files,
    "ours rowchange (live)": ours_rowchange_live,
    "python-mysql-replication (live)": python_mysql_replication,
}
PEER = "python-mysql-replication (live)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="row events to write and decode (default 500k)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per path; the best counts (default 2)")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of: " + ", ".join(PATHS))
    parser.add_argument("--profile", metavar="PATH", help="profile one run of this path with cProfile")
    add_progress_option(parser)
    args = parser.parse_args(argv)
    print("$ " + shlex.join(sys.orig_argv), flush=True)  # the exact command line, interpreter included
    logging.basicConfig(level=logging.WARNING)
    names = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        parser.error(f"unknown paths {unknown}")
    extra = {"innodb_buffer_pool_size": "512M", "max_binlog_size": "1G", "innodb_log_file_size": "256M"}
    with MariaDBServer(server_id=1, name="bench-binlog", extra_config=extra) as server:
        t0 = time.perf_counter()
        start, end, ops = generate(server, args.rows, no_progress=args.no_progress)
        size = end.pos - start.pos if end.file == start.file else -1
        print(
            f"generated {args.rows} row events ({ops}) in {time.perf_counter() - t0:.1f} s;"
            f" binlog {start} .. {end} ({size / 1e6:.1f} MB)",
            flush=True,
        )
        if args.profile:
            import cProfile  # noqa: PLC0415
            import pstats  # noqa: PLC0415

            prof = cProfile.Profile()
            prof.runcall(PATHS[args.profile], server, start, end)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return 0
        results: dict[str, float] = {}
        runs = Progress("runs", len(names) * args.repeat, "runs", disabled=args.no_progress)  # between timings only
        for name in names:
            best = float("inf")
            for _ in range(args.repeat):
                runs.note(name)
                t = time.perf_counter()
                n = PATHS[name](server, start, end)
                best = min(best, time.perf_counter() - t)
                runs.update()
                if n != args.rows:
                    raise SystemExit(f"{name} decoded {n} rows, expected {args.rows}")
            results[name] = args.rows / best
            print(f"  {name:34s} {results[name]:>10,.0f} rows/s  ({best:.2f} s)", flush=True)
        runs.close()
        peer = results.get(PEER)
        if peer:
            print(f"ratio vs {PEER} (target >= 3x):")
            for name, rate in results.items():
                if name != PEER:
                    print(f"  {name:34s} {rate / peer:>6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
