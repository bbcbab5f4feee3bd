"""Lake sinks: upsert rows/s into Delta and Iceberg next to a plain Parquet append of the same rows.

    .venv/bin/python bench/lake.py [--rows 200000] [--batch 20000] [--formats delta,iceberg]
        [--modes upsert[,changelog,scd2]] [--updates 1,10,100] [--segment 16] [--repeat 2] [--json out.json]

The 10-column orders table (bench/orders.py). A table first gets ``--preload`` rows (default: one
batch) through the sink, untimed; then ``--rows`` changes in micro-batches of ``--batch``, each a
`RowBlock` as the apply job hands the sink (the block's columns in the decoders' Arrow types,
`changefeed.model.arrow.arrow_type`; one `Segment` of ``--segment`` rows per Kafka message, 16 being
Open Protocol's max-batch-size) and a Resolved, then ``flush()``: one table commit per batch.
Per workload, ``--updates`` percent of each batch's rows are UPDATEs of keys the table holds
(uniformly drawn, each at most once per batch; the before image is the stored one) and the rest
INSERTs of new keys (row values drawn from a pool of up to 50,000 random rows). With uniform
updates nearly every data file holds an updated key, so a copy-on-write MERGE / delete rewrites
the whole table every batch: the worst case for the formats, and why batch time grows with it.

The peer, in the same run on the same rows, interleaved with the sinks: ``pyarrow.parquet.write_table``
of each batch's new images (the block's 10 columns as they are) into a new file: an append that
neither converts types, nor matches keys, nor commits.

Per (format, mode, workload): rows/s (wall), process CPU µs/row (``time.process_time``: every
thread, delta-rs' Rust ones included), the sink against the append (rows/s, and CPU per row), the
first and the last timed batch's wall and CPU time (MERGE cost grows with the table), and the
table at the end: bytes and data files under its directory (every version's: no retention) and
what its current version reads. Each upsert table's row count is checked against the expected
one. Best of ``--repeat`` (by wall time), each repeat into a fresh directory; ``--json`` keeps
every batch's times.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.orders import order_image, orders_table
from changefeed.model import Event, Resolved, compose_tso
from changefeed.model.arrow import images_to_batch
from changefeed.model.rowblock import RowBlock, Segment, TableRows
from changefeed.sink.lake.common import LakeOptions, LakeSink

TABLE = orders_table()
NAME = (TABLE.schema, TABLE.table)
BASE_MS = 1_767_225_600_000  # 2026-01-01 UTC: commit ts' physical part


@dataclass
class Run:
    """One timed run: per-batch wall and CPU seconds, and what the table holds at the end."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    disk: dict[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return sum(self.wall)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu)


@dataclass
class Workload:
    """The preload and the timed batches of one update share (built before anything is timed)."""

    percent: int
    preload: list[Event | RowBlock]
    batches: list[list[Event | RowBlock]]
    appends: list[pa.Table]  # each batch's new images: what the Parquet peer writes
    preload_append: pa.Table | None  # the preload's, written untimed first (as the sinks' preload)
    final_rows: int


def pool_table(n: int, seed: int) -> pa.Table:
    """``n`` random rows of the orders table in the decoders' Arrow types (ids replaced per use)."""
    rnd = random.Random(seed)
    return pa.Table.from_batches([images_to_batch(TABLE, [order_image(rnd, i) for i in range(n)])])


class Builder:
    """Row blocks of inserts of new keys and updates of stored keys, with their true before images."""

    def __init__(self, pool: pa.Table, segment: int, seed: int) -> None:
        self.pool = pool
        self.segment = segment
        self.rng = np.random.default_rng(seed)
        self.current = np.zeros(0, np.int64)  # key -> the pool row that is its stored image
        self.commit = 0  # logical commit counter (one commit ts per segment)
        self.offset = 0  # Kafka offset of the next segment (positions, as the apply job gives them)

    def _ts(self) -> int:
        self.commit += 1
        return compose_tso(BASE_MS + self.commit, 0)

    def _images(self, rows: np.ndarray, keys: np.ndarray) -> list[pa.Array]:
        picked = self.pool.take(pa.array(rows))
        return [pa.array(keys, pa.int64()), *(picked.column(i).combine_chunks() for i in range(1, len(TABLE.columns)))]

    def batch(self, n: int, updates: int, segment: int | None = None) -> tuple[list[Event | RowBlock], pa.Table]:
        """One micro-batch: ``updates`` updates of distinct stored keys, ``n - updates`` inserts, shuffled."""
        stored = len(self.current)
        if updates > stored:
            raise SystemExit(f"{updates} updates per batch but the table holds only {stored} keys: raise --preload")
        upd_keys = self.rng.choice(stored, updates, replace=False) if updates else np.zeros(0, np.int64)
        new_keys = np.arange(stored, stored + n - updates, dtype=np.int64)
        keys = np.concatenate([upd_keys, new_keys])
        is_update = np.zeros(n, bool)
        is_update[:updates] = True
        order = self.rng.permutation(n)
        keys, is_update = keys[order], is_update[order]
        images = self.rng.integers(0, len(self.pool), n)
        main = self._images(images, keys)
        before_at = np.zeros(n, np.int64)
        before_at[is_update] = self.current[keys[is_update]]
        before_rows = pa.array(before_at, mask=~is_update)
        old = self.pool.take(before_rows)
        before = [
            pa.array(np.where(is_update, keys, 0), pa.int64(), mask=~is_update),
            *(old.column(i).combine_chunks() for i in range(1, len(TABLE.columns))),
        ]
        self.current = np.concatenate([self.current, np.zeros(n - updates, np.int64)])
        self.current[keys] = images
        codes = is_update.astype(np.int8)
        step = segment or self.segment
        segments, ts = [], []
        for start in range(0, n, step):
            rows = min(step, n - start)
            t = self._ts()
            segments.append(Segment(0, rows, t, {"topic": "cdc", "partition": 0, "offset": self.offset}, None))
            self.offset += 1
            ts.append(np.full(rows, t, np.int64))
        op = pa.array(np.where(is_update, "update", "insert"))
        batch = pa.RecordBatch.from_arrays(
            [*main, op, pa.array(np.concatenate(ts)), *before],
            names=[*(str(i) for i in range(len(main))), "\0op", "\0ts", *(f"\0b{i}" for i in range(len(main)))],
        )
        block = RowBlock([TableRows(TABLE, batch, _ops=codes)], segments)
        append = pa.Table.from_arrays(main, names=[c.name for c in TABLE.columns])
        return [block, Resolved(compose_tso(BASE_MS + self.commit, 0))], append


def workload(args: argparse.Namespace, pool: pa.Table, percent: int) -> Workload:
    builder = Builder(pool, args.segment, seed=percent)
    preload, preload_append = builder.batch(args.preload, 0, args.preload) if args.preload else ([], None)
    batches, appends = [], []
    for start in range(0, args.rows, args.batch):
        n = min(args.batch, args.rows - start)
        events, append = builder.batch(n, round(n * percent / 100))
        batches.append(events)
        appends.append(append)
    return Workload(percent, preload, batches, appends, preload_append, len(builder.current))


def make_sink(fmt: str, root: Path, mode: str) -> LakeSink:
    options = LakeOptions(mode=mode)
    if fmt == "delta":
        from changefeed.sink.lake.delta import DeltaSink  # noqa: PLC0415

        return DeltaSink(root, options)
    from changefeed.sink.lake.iceberg import IcebergSink  # noqa: PLC0415

    return IcebergSink(root, options)


def timed_batches(batches: list[Any], apply: Any) -> Run:
    run = Run()
    gc.collect()
    for batch in batches:
        w, c = time.perf_counter(), time.process_time()
        apply(batch)
        run.cpu.append(time.process_time() - c)
        run.wall.append(time.perf_counter() - w)
    return run


def run_append(work: Path, wl: Workload) -> Run:
    root = Path(tempfile.mkdtemp(prefix="append-", dir=work))
    if wl.preload_append is not None:
        pq.write_table(wl.preload_append, root / "part-preload.parquet")
    count = iter(range(len(wl.appends)))
    run = timed_batches(wl.appends, lambda t: pq.write_table(t, root / f"part-{next(count):05d}.parquet"))
    run.disk = {"bytes": tree_bytes(root), "files": len(list(root.glob("*.parquet")))}
    run.disk["live_files"], run.disk["live_bytes"] = run.disk["files"], run.disk["bytes"]
    shutil.rmtree(root)
    return run


def run_sink(work: Path, fmt: str, mode: str, wl: Workload) -> Run:
    root = Path(tempfile.mkdtemp(prefix=f"{fmt}-{mode}-", dir=work))
    sink = make_sink(fmt, root, mode)
    sink.open()
    if wl.preload:
        sink.write(wl.preload)
        sink.flush()

    def apply(events: list[Event | RowBlock]) -> None:
        sink.write(events)
        sink.flush()

    run = timed_batches(wl.batches, apply)
    run.disk = disk_usage(fmt, sink, root)
    if mode == "upsert" and run.disk.get("rows", wl.final_rows) != wl.final_rows:
        raise SystemExit(f"{fmt} upsert: the table holds {run.disk['rows']} rows, expected {wl.final_rows}")
    sink.close()
    shutil.rmtree(root)
    return run


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def disk_usage(fmt: str, sink: LakeSink, root: Path) -> dict[str, int]:
    """Bytes and data files under the table's directory; the data files (and rows) the current version reads."""
    path = sink.table_path(NAME)
    out = {"bytes": tree_bytes(path)}
    if fmt == "delta":
        from deltalake import DeltaTable  # noqa: PLC0415

        data = list(path.glob("*.parquet"))
        table = DeltaTable(str(path))
        adds = table.get_add_actions(flatten=True)
        sizes = pa.table(adds).column("size_bytes")
        out |= {"files": len(data), "live_files": len(table.file_uris()), "live_bytes": int(pc.sum(sizes).as_py() or 0)}
        out["rows"] = int(pc.sum(pa.table(adds).column("num_records")).as_py() or 0)
    else:
        from changefeed.sink.lake.iceberg import IcebergSink  # noqa: PLC0415

        assert isinstance(sink, IcebergSink)
        itable = sink.catalog.load_table(sink._identifier(NAME))
        snapshot = itable.current_snapshot()
        summary = {} if snapshot is None or snapshot.summary is None else snapshot.summary.additional_properties
        out |= {
            "files": len(list((path / "data").rglob("*.parquet"))),
            "live_files": int(summary.get("total-data-files", 0)),
            "live_bytes": int(summary.get("total-files-size", 0)),
            "rows": int(summary.get("total-records", 0)),
        }
    out["all_files"] = sum(1 for p in root.rglob("*") if p.is_file())
    return out


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.seconds)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000, help="timed changes per workload (default 200,000)")
    p.add_argument("--batch", type=int, default=20_000, help="changes per micro-batch (default 20,000)")
    p.add_argument("--preload", type=int, help="rows inserted untimed before the batches (default: --batch)")
    p.add_argument("--formats", default="delta,iceberg")
    p.add_argument("--modes", default="upsert", help="upsert,changelog,scd2 (default upsert)")
    p.add_argument("--updates", default="1,10,100", help="workloads: percent of updates per batch (default 1,10,100)")
    p.add_argument("--segment", type=int, default=16, help="rows per block segment / Kafka message (default 16)")
    p.add_argument(
        "--repeat", type=int, default=2, help="best of N (by wall time), each into a fresh table (default 2)"
    )
    p.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = p.parse_args()
    if args.preload is None:
        args.preload = args.batch
    formats = [f for f in args.formats.split(",") if f]
    modes = [m for m in args.modes.split(",") if m]
    percents = [int(x) for x in args.updates.split(",") if x]
    print("$ " + shlex.join(sys.orig_argv), flush=True)
    start_load = Path("/proc/loadavg").read_text().strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, {os.cpu_count()} cores, loadavg {start_load}")
    pool = pool_table(min(args.rows + args.preload, 50_000), seed=17)
    report: dict[str, Any] = {"command": shlex.join(sys.orig_argv), "load_start": start_load, "results": []}
    work = Path(tempfile.mkdtemp(prefix="changefeed-bench-lake-"))
    header = (
        f"{'format':8s} {'mode':9s} {'upd%':>4s} {'rows/s':>9s} {'CPU µs/row':>10s} {'%append':>7s} {'%CPU':>5s}"
        f" {'1st/last ms':>11s} {'CPU ms':>11s} {'MB':>6s} {'files':>5s} {'live MB':>7s} {'files':>5s}"
    )
    try:
        for percent in percents:
            wl = workload(args, pool, percent)
            n = sum(len(a) for a in wl.appends)
            results: dict[tuple[str, str], list[Run]] = {}
            for _ in range(args.repeat):
                results.setdefault(("parquet", "append"), []).append(run_append(work, wl))
                for fmt in formats:
                    for mode in modes:
                        results.setdefault((fmt, mode), []).append(run_sink(work, fmt, mode, wl))
            append = best(results[("parquet", "append")])
            print(
                f"\n== {percent}% updates: {n:,} changes in {len(wl.batches)} batches, table {args.preload:,} -> "
                f"{wl.final_rows:,} rows\n{header}"
            )
            for (fmt, mode), runs in results.items():
                r = best(runs)
                ratio = append.seconds / r.seconds  # rows/s against the append's
                cpu_ratio = append.cpu_seconds / r.cpu_seconds  # the same per CPU second
                row = {
                    "format": fmt,
                    "mode": mode,
                    "updates_percent": percent,
                    "rows": n,
                    "seconds": r.seconds,
                    "rows_per_s": n / r.seconds,
                    "cpu_us_per_row": r.cpu_seconds * 1e6 / n,
                    "ratio_to_append": ratio,
                    "cpu_ratio_to_append": cpu_ratio,
                    "first_batch_ms": r.wall[0] * 1e3,
                    "last_batch_ms": r.wall[-1] * 1e3,
                    "first_batch_cpu_ms": r.cpu[0] * 1e3,
                    "last_batch_cpu_ms": r.cpu[-1] * 1e3,
                    "batch_ms": [w * 1e3 for w in r.wall],
                    "batch_cpu_ms": [c * 1e3 for c in r.cpu],
                    "disk": r.disk,
                    "all_runs_seconds": [x.seconds for x in runs],
                }
                report["results"].append(row)
                print(
                    f"{fmt:8s} {mode:9s} {percent:4d} {row['rows_per_s']:9,.0f} {row['cpu_us_per_row']:10.1f}"
                    f" {100 * ratio:6.1f}% {100 * cpu_ratio:4.1f}%"
                    f" {row['first_batch_ms']:5.0f}/{row['last_batch_ms']:<5.0f}"
                    f" {row['first_batch_cpu_ms']:5.0f}/{row['last_batch_cpu_ms']:<5.0f}"
                    f" {r.disk['bytes'] / 1e6:6.1f} {r.disk['files']:5d}"
                    f" {r.disk['live_bytes'] / 1e6:7.1f} {r.disk['live_files']:5d}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_end"] = Path("/proc/loadavg").read_text().strip()
    print(f"\nloadavg at the end {report['load_end']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
