"""The apply job's driver work without Spark: Kafka messages -> decode -> merge -> MariaDB, CPU per row.

    .venv/bin/python bench/apply_stage.py --rows 100000

Encodes ``--rows`` inserts of the 10-column orders table (``--txn`` rows per transaction, a
resolved event every ``--resolved`` rows) into Open Protocol messages of 3 partitions, as the
capture job's Kafka sink does (rows dispatched by primary key, resolved events to every
partition), and runs what the apply job's foreachBatch runs for one micro-batch holding them
all, in this process, timed with ``time.process_time`` (best of ``--repeat``):

* ``rows``: each message decoded into `RowChange`s, merged row by row, applied by the MySQL sink
  from row images (the path before the columnar decoder);
* ``blocks``: messages of a partition decoded into `RowBlock`s (`OpenProtocolBlockDecoder`),
  merged segment by segment, applied from Arrow columns where the sink can.

The sink writes into a private MariaDB (its own CPU is not counted here); both variants must
leave the same table (checked with CHECKSUM TABLE). ``--no-sink`` stops after the merge.

``--load-data auto,off`` runs each variant once per sink ``load-data`` setting (runs of inserts
as LOAD DATA LOCAL INFILE, or INSERT statements), alternated within each repeat; ``server`` is
the private MariaDB's CPU during the sink stage (/proc), next to this process's.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.kafka import TABLE, order_image
from changefeed.codec import CodecOptions, make_encoder
from changefeed.dispatch import DispatchRule
from changefeed.model import Event, Op, Resolved, RowChange
from changefeed.model.jsonl import EventReader
from changefeed.sink.kafka.encode import KafkaEncoder
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource.kafka import MESSAGE_SCHEMA, MessageDecoder
from changefeed.spark.encode import _kafka_rows
from changefeed.spark.merge import MergeStage

PARTITIONS = 3
DDL = (
    "CREATE TABLE bench.orders (id BIGINT NOT NULL PRIMARY KEY, customer_id INT UNSIGNED, status VARCHAR(32),"
    " amount DECIMAL(12,2), ratio DOUBLE, weight FLOAT, created_at DATETIME(3), note TEXT, flags TINYINT,"
    " payload VARBINARY(64)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


def events(n: int, txn: int, resolved: int) -> list[Event]:
    rnd = random.Random(7)
    base = 1_700_000_000_000 << 18
    out: list[Event] = []
    for i in range(n):
        ts = base + (i // txn + 1) * 1000
        out.append(RowChange(Op.INSERT, TABLE, ts, new=order_image(rnd, i)))
        if (i + 1) % resolved == 0 and (i + 1) % txn == 0:
            out.append(Resolved(ts))
    out.append(Resolved(base + (n // txn + 2) * 1000))
    return out


def messages(n: int, txn: int, resolved: int) -> pa.Table:
    """The topic's messages as the apply job's source hands them over (``output=messages``)."""
    codec = CodecOptions(protocol="open-protocol")
    encoder = KafkaEncoder(codec, "cdc", rules=[DispatchRule(matcher=["*.*"], partition="index-value")])
    control = make_encoder(codec)
    per: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for item in _kafka_rows(encoder, events(n, txn, resolved), {"cdc": PARTITIONS}, -1):
        if item["kind"] == "message":
            per[item["partition"]].append((item["key"], item["value"]))
        elif item["kind"] == "event":  # a resolved event: the driver sends it to every partition
            event = EventReader().parse(item["event"])
            assert isinstance(event, Resolved)
            message = control.encode_resolved(event)
            for sent in per.values():
                sent.append((message.key, message.value))
    rows = [(p, o, k, v) for p, ms in per.items() for o, (k, v) in enumerate(ms)]
    columns = list(zip(*rows, strict=True))
    return pa.table(
        [
            pa.array(columns[0], pa.int32()),
            pa.array(columns[1], pa.int64()),
            *(pa.array(c, pa.binary()) for c in columns[2:]),
        ],
        schema=MESSAGE_SCHEMA,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--txn", type=int, default=1000, help="rows per upstream transaction")
    p.add_argument("--resolved", type=int, default=10_000, help="rows between resolved events")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-sink", action="store_true")
    p.add_argument("--variants", default="rows,blocks", help="which paths to run, in this order")
    p.add_argument("--freeze", action="store_true", help="gc.freeze() before each variant")
    p.add_argument("--load-data", default="auto", help="the sink's load-data settings to run, alternated (auto,off)")
    args = p.parse_args()
    print("$ " + shlex.join(sys.orig_argv), flush=True)
    table = messages(args.rows, args.txn, args.resolved)
    print(f"{table.num_rows} messages, {table.nbytes / args.rows:.0f} bytes per row", flush=True)
    codec = CodecOptions(protocol="open-protocol")
    n = args.rows
    server: Any = None
    if not args.no_sink:
        from changefeed.testing.mariadb import MariaDBServer  # noqa: PLC0415

        extra = {"innodb_buffer_pool_size": "512M", "innodb_log_file_size": "256M"}
        server = MariaDBServer(server_id=3, name="bench-apply-stage", extra_config=extra).__enter__()
    modes = args.load_data.split(",")
    try:
        for variant in args.variants.split(","):
            if args.freeze:
                gc.collect()
                gc.freeze()
            best: dict[str, dict[str, float]] = {m: {} for m in modes}
            checksums: dict[str, Any] = {}
            for _ in range(args.repeat):
                for mode in modes:
                    times, checksums[mode] = run(variant, table, codec, server, mode)
                    for k, v in times.items():
                        best[mode][k] = min(best[mode].get(k, float("inf")), v)
            for mode in modes:
                took = best[mode]
                total = sum(v for k, v in took.items() if k != "server" and not k.endswith(" wall"))
                parts = "  ".join(f"{k} {v * 1e6 / n:6.2f}" for k, v in took.items() if not k.endswith(" wall"))
                rate = f"  sink {n / took['sink wall']:,.0f} rows/s" if "sink wall" in took else ""
                name = variant + (f" load-data={mode}" if len(modes) > 1 else "")
                print(
                    f"{name:6s}: {total * 1e6 / n:6.2f} µs/row  ({parts}){rate}  checksum {checksums[mode]}",
                    flush=True,
                )
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    return 0


def _server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(
    variant: str, table: pa.Table, codec: CodecOptions, server: Any, load_data: str = "auto"
) -> tuple[dict[str, float], Any]:
    from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig  # noqa: PLC0415

    decoder = MessageDecoder("unused:1", "cdc", codec, ChangelogRows())
    if variant == "rows":
        decoder.columnar = False
    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        gc.collect()
        t, wall = time.process_time(), time.perf_counter()
        out = fn()
        times[name] = time.process_time() - t
        times[f"{name} wall"] = time.perf_counter() - wall
        return out

    with tempfile.TemporaryDirectory() as state:
        decoded = timed("decode", lambda: decoder.decode(table))
        stage = MergeStage(state, "cdc", list(range(PARTITIONS)))
        released = timed("merge", lambda: stage.merge(decoded, 1))
        if server is None:
            return times, None
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS bench")
            cur.execute("CREATE DATABASE bench")
            cur.execute(DDL)
        config = MySQLSinkConfig(changefeed_id=f"bench-{variant}-{time.monotonic_ns()}", load_data=load_data)
        sink = MySQLSink(server.url, config)

        def apply() -> None:
            sink.write(released)
            sink.flush()

        try:
            server_cpu = _server_cpu(server.pid)
            timed("sink", apply)
            times["server"] = _server_cpu(server.pid) - server_cpu
        finally:
            sink.close()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CHECKSUM TABLE bench.orders")
            checksum = cur.fetchone()[1]
    return times, checksum


if __name__ == "__main__":
    sys.exit(main())
