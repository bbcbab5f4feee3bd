"""The apply job's hand-over, measured: Kafka topic -> `run_job` -> `MySQLSink` -> MariaDB, CPU per row.

    .venv/bin/python bench/apply_job.py --rows 100000 --protocols open-protocol,canal-json

Starts a tansu broker and a private MariaDB, fills one topic per protocol (3 partitions, rows
dispatched by primary key) with ``--rows`` inserts of the 10-column orders table through
`KafkaSink` (10 rows per transaction, a resolved event every 1000 rows), then runs the apply job
over it with ``availableNow`` into a fresh database, ``--repeat`` times per variant, interleaved:

* ``decoded``: today's job (`run_job` into a `MySQLSink`): a protocol with a columnar decoder (Open Protocol) is
  decoded in the range tasks, which hand the decoded tables over (``output=decoded``), and the
  driver only merges and applies; other protocols are as ``messages``;
* ``messages``: the same job with every protocol decoded on the driver: the source hands the raw
  messages over as Arrow envelopes, the driver decodes each once and merges;
* ``jsonl``: the previous hand-over, rebuilt from the same parts: each message decoded in an
  executor into changelog rows with four JSON documents and the JSONL ``event`` column, parsed
  again on the driver before the merge.

CPU is read from /proc per process: the driver (this Python process alone), the JVM with its
Python workers (dead workers included through their parent's cutime), MariaDB and the broker.
Every run checks that the downstream table holds ``--rows`` rows.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kafka import make_events
from changefeed.codec import CodecOptions
from changefeed.dispatch import DispatchRule
from changefeed.model.jsonl import EventReader
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.spark.datasource import KafkaInput, SourceOptions, register
from changefeed.spark.datasource import kafka as kafka_input
from changefeed.spark.datasource.decoded import columnar
from changefeed.spark.jobs import Plan, _BatchRunner, _run_query, run_job
from changefeed.spark.merge import MergeStage
from changefeed.spark.session import spark_session
from changefeed.testing import Broker
from changefeed.testing.mariadb import MariaDBServer

TICK = os.sysconf("SC_CLK_TCK")
PROTOCOLS = {
    "open-protocol": CodecOptions(protocol="open-protocol"),
    "canal-json": CodecOptions(protocol="canal-json", enable_tidb_extension=True),
    "simple": CodecOptions(protocol="simple"),
}
DDL = (
    "CREATE TABLE bench.orders (id BIGINT NOT NULL PRIMARY KEY, customer_id INT UNSIGNED, status VARCHAR(32),"
    " amount DECIMAL(12,2), ratio DOUBLE, weight FLOAT, created_at DATETIME(3), note TEXT, flags TINYINT,"
    " payload VARBINARY(64)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


def _stats() -> tuple[dict[int, list[int]], dict[int, tuple[float, float]]]:
    """ppid -> children, and pid -> (own CPU s, own + reaped children's CPU s), from /proc."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, tuple[float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        own = (int(fields[11]) + int(fields[12])) / TICK
        cpu[pid] = (own, own + (int(fields[13]) + int(fields[14])) / TICK)
    return children, cpu


def tree_cpu(
    root: int,
    children: dict[int, list[int]] | None = None,
    cpu: dict[int, tuple[float, float]] | None = None,
    *,
    with_reaped: bool = False,
) -> float:
    """CPU seconds of ``root`` and every live descendant (``with_reaped``: plus children they reaped)."""
    if children is None or cpu is None:
        children, cpu = _stats()
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, (0.0, 0.0))[1 if with_reaped else 0]
        todo.extend(children.get(pid, []))
    return total


def cpu_by_part(me: int, services: dict[str, int | None]) -> dict[str, float]:
    """CPU seconds of the driver alone, the JVM tree (Spark: JVM + Python workers), and each service tree."""
    children, cpu = _stats()
    skip = {pid for pid in services.values() if pid}

    def tree(root: int) -> float:
        return tree_cpu(root, children, cpu, with_reaped=True)

    out = {"driver": cpu[me][0], "jvm+workers": sum(tree(c) for c in children.get(me, []) if c not in skip)}
    out.update({name: tree(pid) if pid else 0.0 for name, pid in services.items()})
    return out


def thread_cpu(pid: int | str = "self") -> dict[str, float]:
    """CPU seconds of a process's threads by name: Python's thread names for this process, the
    kernel's (a JVM's thread names, cut to 15 characters, digits dropped) for another."""
    names = {t.native_id: t.name for t in threading.enumerate()} if pid == "self" else {}
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        name = names.get(int(tid)) or re.sub(r"[0-9]+", "#", stat[stat.index("(") + 1 : stat.rindex(")")])
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def jvm_pid(me: int) -> int | None:
    """The Spark JVM this driver started (its child running java)."""
    children, _ = _stats()
    for pid in children.get(me, []):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
    return None


def workers(jvm: int) -> str:
    """Each live process under the JVM: its command's tail and CPU seconds with what it reaped."""
    children, cpu = _stats()
    out, todo = [], list(children.get(jvm, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[-60:]
        except OSError:
            continue
        out.append(f"{pid} [{cmd.strip()}] {cpu[pid][1]:.2f}")
    return "; ".join(out)


def show_threads(label: str, before: dict[str, float], after: dict[str, float], rows: int, top: int = 12) -> None:
    spent = sorted(((v - before.get(k, 0.0), k) for k, v in after.items()), reverse=True)
    shown = ", ".join(f"{k} {v * 1e6 / rows:.1f}" for v, k in spent[:top] if v > 0)
    print(f"  {label} threads, µs/row: {shown}", flush=True)


def fill(broker: Broker, codec: CodecOptions, rows: int) -> str:
    topic = f"bench-apply-{codec.protocol}-{os.getpid()}"
    rules = [DispatchRule(matcher=["*.*"], partition="index-value")]
    config = KafkaSinkConfig(broker.bootstrap_servers, topic, codec, rules=rules, partition_num=3)
    with KafkaSink(config) as sink:
        sink.write(make_events(rows))
        sink.flush()
    return topic


def reset(server: MariaDBServer) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS bench")
        cur.execute("DROP DATABASE IF EXISTS changefeed")
        cur.execute("CREATE DATABASE bench")
        cur.execute(DDL)


def count(server: MariaDBServer) -> int:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM bench.orders")
        return int(cur.fetchone()[0])


def statements(server: MariaDBServer) -> int:
    """The server's statement counter (``Questions``), to see how a run applied its rows."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


def jsonl_apply(spark: Any, source: dict[str, str], server: MariaDBServer, checkpoint: Path) -> int:
    """The previous hand-over: changelog rows with JSONL events from executors, parsed again on the driver."""
    sink = MySQLSink(server.url, MySQLSinkConfig())
    sink.load_checkpoint()
    kafka = KafkaInput(SourceOptions.parse(source))
    stage = MergeStage(checkpoint / "changefeed-merge", kafka.topic, kafka.partition_ids())
    reader = EventReader(source="batch")

    def collect(df: Any, batch_id: int) -> tuple[list[Any]]:
        lines = df.select("event").toArrow().column("event").to_pylist()
        events = [reader.parse(line) for line in lines if line]
        messages: dict[tuple[int, int], list[Any]] = {}
        for ev in events:
            messages.setdefault((int(ev.position["partition"]), int(ev.position["offset"])), []).append(ev)
        return (stage.merge([(p, o, evs) for (p, o), evs in sorted(messages.items())], batch_id),)

    register(spark)
    reader_ = spark.readStream.format("changefeed")
    for key, value in source.items():
        reader_ = reader_.option(key, value)
    stream = reader_.option("events", "true").load()
    runner = _BatchRunner("apply-jsonl", sink, Plan(stream, collect, sink.write, stage), None)
    try:
        return _run_query(spark, stream, runner, checkpoint, None, True, "bench-apply-jsonl").rows
    finally:
        sink.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--protocols", default="open-protocol,canal-json")
    p.add_argument("--variants", default="decoded,messages,jsonl")
    p.add_argument("--threads", action="store_true", help="also show the driver's CPU per thread")
    p.add_argument("--max-events", type=int, default=None, help="maxEventsPerTrigger (messages per micro-batch)")
    args = p.parse_args()
    print("$ " + shlex.join(sys.orig_argv), flush=True)
    variants = args.variants.split(",")
    me = os.getpid()
    extra = {"innodb_buffer_pool_size": "512M", "innodb_log_file_size": "256M"}
    with (
        Broker() as broker,
        MariaDBServer(server_id=2, name="bench-apply", extra_config=extra) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        spark = spark_session("local[2]")
        services = {"mariadb": server.pid, "broker": broker.pid}
        for protocol in args.protocols.split(","):
            codec = PROTOCOLS[protocol]
            topic = fill(broker, codec, args.rows)
            source = {"input": "kafka", "bootstrap.servers": broker.bootstrap_servers, "topic": topic}
            source["protocol"] = codec.protocol
            source["enable-tidb-extension"] = str(codec.enable_tidb_extension).lower()
            if args.max_events:
                source["maxEventsPerTrigger"] = str(args.max_events)
            best: dict[str, dict[str, float]] = {}
            for rep in range(args.repeat):
                for variant in variants:
                    reset(server)
                    ck = Path(tmp) / f"ck-{protocol}-{variant}-{rep}"
                    asked = statements(server)
                    jvm = jvm_pid(me)
                    threads_before, jvm_before = thread_cpu(), thread_cpu(jvm) if jvm else {}
                    before, t0 = cpu_by_part(me, services), time.perf_counter()
                    if variant in ("decoded", "messages"):
                        # "messages": the driver decodes whatever the protocol (see the module docstring).
                        kafka_input.columnar = columnar if variant == "decoded" else lambda codec: False
                        stats = run_job(spark, source, MySQLSink(server.url), ck, available_now=True)
                        rows, batches = stats.rows, stats.batches
                    else:
                        rows, batches = jsonl_apply(spark, source, server, ck), -1
                    wall = time.perf_counter() - t0
                    after = cpu_by_part(me, services)
                    if args.threads:
                        show_threads("driver", threads_before, thread_cpu(), args.rows)
                        if jvm:
                            show_threads("JVM", jvm_before, thread_cpu(jvm), args.rows)
                            print(f"  JVM children (CPU s, own + reaped): {workers(jvm)}", flush=True)
                    used = {k: after[k] - before[k] for k in after}
                    asked = statements(server) - asked
                    applied = count(server)
                    if rows != args.rows or applied != args.rows:
                        raise SystemExit(f"{variant}: applied {rows} rows ({applied} downstream), expected {args.rows}")
                    spark_cpu = used["driver"] + used["jvm+workers"]
                    parts = "  ".join(f"{k} {v * 1e6 / rows:6.1f}" for k, v in used.items())
                    print(
                        f"{protocol:13s} {variant:8s} run {rep}: {rows / wall:>8,.0f} rows/s wall, "
                        f"job {spark_cpu * 1e6 / rows:6.1f} µs CPU/row ({parts} µs/row; {wall:.1f} s, "
                        f"{batches} batches, {asked} statements)",
                        flush=True,
                    )
                    if variant not in best or spark_cpu < best[variant]["job"]:
                        best[variant] = {"job": spark_cpu, "wall": wall, **used}
            for variant, b in best.items():
                n = args.rows
                print(
                    f"best {protocol} {variant}: job {b['job'] * 1e6 / n:.1f} µs CPU/row (driver "
                    f"{b['driver'] * 1e6 / n:.1f}, JVM+workers {b['jvm+workers'] * 1e6 / n:.1f}, MariaDB "
                    f"{b['mariadb'] * 1e6 / n:.1f}), {n / b['wall']:,.0f} rows/s wall"
                )
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
