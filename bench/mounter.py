"""Mounter throughput: rows/s decoding KV records of a 10-column mixed table, on one core and in Spark.

    .venv/bin/python bench/mounter.py              # 1M records: one core, then Spark local[2]
    .venv/bin/python bench/mounter.py -n 100000    # a quick run
    .venv/bin/python bench/mounter.py --no-spark   # the one-core figure only
    .venv/bin/python bench/mounter.py --reference  # also the record-by-record path, for comparison

Records are row format v2 values (90% inserts, 10% updates carrying an old value) in Arrow record
batches of 8192 rows with binary columns. One core: `decode_batch` on each batch, rows/s of process
CPU time. Spark: the same records as a Parquet file (one row group per batch, so one task each) read
by the `changefeed` data source with ``input=kv`` on ``local[2]`` and counted with ``count()``; the
figure is wall time, measured after the session and its Python workers have started.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the test encoder

from changefeed.capture.mounter import Catalog, Mounter, decode_batch
from changefeed.model import Column, Index, TableSchema, TypeCode
from changefeed.ops.progress import Progress, add_progress_option
from tests.mounter import tidb_encoder as enc

TABLE_ID = 2024
COMMIT_TS = 440000000000000000
BATCH = 8192  # Spark's Arrow batches hold 10000 rows by default
POOL = 4096  # distinct row values, cycled under distinct keys
TIME_ZONE = "Asia/Shanghai"


def _table() -> TableSchema:
    utf8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
    cols = [
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("user_id", TypeCode.INT, nullable=False),
        Column("qty", TypeCode.SMALLINT, unsigned=True),
        Column("sku", TypeCode.VARCHAR, length=32, **utf8),
        Column("price", TypeCode.DECIMAL, length=12, decimal=2),
        Column("created", TypeCode.DATETIME, decimal=0),
        Column("updated", TypeCode.TIMESTAMP, decimal=3),
        Column("score", TypeCode.DOUBLE),
        Column("active", TypeCode.TINYINT),
        Column("note", TypeCode.BLOB, **utf8),
    ]
    cols = [replace(c, column_id=i + 1) for i, c in enumerate(cols)]
    return TableSchema("bench", "orders", tuple(cols), (Index("PRIMARY", ("id",), primary=True),), table_id=TABLE_ID)


def _values(ts: TableSchema, rng: random.Random) -> list[bytes]:
    out = []
    for _ in range(POOL):
        image = (
            0,
            rng.randrange(1, 1 << 31),
            rng.randrange(0, 500),
            f"SKU-{rng.randrange(10**8):08d}",
            Decimal(rng.randrange(10**9)).scaleb(-2),
            f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} 12:{rng.randrange(60):02d}:00",
            f"2024-05-01 08:00:{rng.randrange(60):02d}.{rng.randrange(1000):03d}",
            rng.random() * 1000,
            rng.randrange(2),
            None if rng.random() < 0.7 else "gift wrap, leave at the door",
        )
        out.append(enc.encode_image(ts, image, "v2", skip=[0]))
    return out


def _batches(n: int, values: list[bytes], rng: random.Random) -> list[pa.RecordBatch]:
    batches = []
    for start in range(0, n, BATCH):
        size = min(BATCH, n - start)
        keys = [enc.record_key(TABLE_ID, start + i) for i in range(size)]
        vals = [values[(start + i) % POOL] for i in range(size)]
        olds = [values[(start + i + 1) % POOL] if rng.random() < 0.1 else None for i in range(size)]
        batches.append(
            pa.record_batch(
                {
                    "op": pa.array(["put"] * size),
                    "key": pa.array(keys, pa.binary()),
                    "value": pa.array(vals, pa.binary()),
                    "old_value": pa.array(olds, pa.binary()),
                    "start_ts": pa.array([COMMIT_TS - 10] * size, pa.uint64()),
                    "commit_ts": pa.array([COMMIT_TS] * size, pa.uint64()),
                }
            )
        )
    return batches


def _spark_rate(batches: list[pa.RecordBatch], catalog_json: dict, time_zone: str) -> tuple[int, float, float]:
    """(rows counted, wall s of the timed read, wall s of session start + warm-up) through Spark local[2]."""
    from changefeed.spark import spark_session  # noqa: PLC0415 - only this part needs pyspark
    from changefeed.spark.datasource import register  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="bench-mounter-") as tmp:
        work = Path(tmp)
        catalog = work / "catalog.json"
        catalog.write_bytes(orjson.dumps(catalog_json))
        (work / "warm").mkdir()
        (work / "data").mkdir()
        warm_rows = pa.Table.from_batches([batches[0].slice(0, 1000)])  # 4 tasks: both Python workers start
        pq.write_table(warm_rows, work / "warm" / "records.parquet", row_group_size=250)
        with pq.ParquetWriter(work / "data" / "records.parquet", batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)  # one row group per batch: one Spark task each

        start = time.perf_counter()
        spark = spark_session("local[2]", app_name="bench-mounter")
        register(spark)

        def read(path: Path) -> int:
            return (
                spark.read.format("changefeed")
                .option("input", "kv")
                .option("catalog", str(catalog))
                .option("timezone", time_zone)
                .load(str(path))
                .count()
            )

        try:
            read(work / "warm")  # JVM, Python workers and the first job: not timed
            warm = time.perf_counter() - start
            t = time.perf_counter()
            rows = read(work / "data")
            return rows, time.perf_counter() - t, warm
        finally:
            spark.stop()


def _task_rate(batches: list[pa.RecordBatch], mounter: Mounter) -> float:
    """Rows/s of CPU time for the Python work of a Spark kv task: decode_batch, then the changelog rows."""
    from changefeed.spark.changelog import ChangelogRows  # noqa: PLC0415

    changelog = ChangelogRows()
    rows = 0
    cpu = time.process_time()
    for batch in batches:
        rows += sum(1 for _ in changelog.rows(decode_batch(batch, mounter)))
    return rows / (time.process_time() - cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--records", type=int, default=1_000_000, help="records to decode (default 1M)")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of one batch")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark local[2] figure")
    parser.add_argument("--reference", action="store_true", help="also time the record-by-record path")
    add_progress_option(parser)
    args = parser.parse_args()

    ts = _table()
    catalog_json = {"tables": [{"schema": "bench", "version": 1, "table": enc.table_info(ts, TABLE_ID)}]}
    catalog = Catalog.from_json(catalog_json)
    rng = random.Random(7)
    batches = _batches(args.records, _values(ts, rng), rng)
    mounter = Mounter(catalog, TIME_ZONE)
    decode_batch(batches[0].slice(0, 100), mounter)  # compile the decoder

    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(decode_batch, batches[0], mounter)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)

    rows = 0
    per_batch: list[float] = []  # CPU s per row of each batch: the median resists other load
    bar = Progress("decode", args.records, "records", unit_scale=True, disabled=args.no_progress)
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in batches:
        t = time.process_time()
        rows += len(decode_batch(batch, mounter))
        per_batch.append((time.process_time() - t) / batch.num_rows)
        bar.update(batch.num_rows)  # outside the per-batch timing
    bar.close()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    updates = sum(b.num_rows - b.column("old_value").null_count for b in batches)
    print(
        f"mounter: {rows:,} records ({updates:,} updates with an old value) of a 10-column mixed table, "
        f"row format v2, Arrow batches of {BATCH}, TIMESTAMP in {TIME_ZONE}"
    )
    print(
        f"  {rows / cpu:,.0f} rows/s per core (CPU {cpu:.2f} s; wall {elapsed:.2f} s = {rows / elapsed:,.0f} rows/s); "
        f"median batch {1 / statistics.median(per_batch):,.0f} rows/s, best batch {1 / min(per_batch):,.0f} rows/s"
    )
    if args.reference:
        tables = [pa.Table.from_batches([b]) for b in batches]  # decode_batch mounts a Table record by record
        cpu_start = time.process_time()
        ref_rows = sum(len(decode_batch(t, mounter)) for t in tables)
        cpu = time.process_time() - cpu_start
        print(f"  record-by-record reference path: {ref_rows / cpu:,.0f} rows/s per core (CPU {cpu:.2f} s)")
    if args.no_spark:
        return 0
    task = _task_rate(batches, mounter)
    print(f"  decode_batch + Spark changelog rows (a kv task's Python work), one process: {task:,.0f} rows/s per core")
    counted, wall, warm = _spark_rate(batches, catalog_json, TIME_ZONE)
    if counted != rows:
        raise SystemExit(f"Spark counted {counted:,} rows, expected {rows:,}")
    print(
        f"  Spark local[2], input=kv, count(): {counted / wall:,.0f} rows/s wall ({wall:.2f} s for {counted:,} rows, "
        f"{len(batches)} tasks; session start + warm-up {warm:.1f} s not included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
