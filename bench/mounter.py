"""Mounter throughput: rows/s decoding KV records of a 10-column mixed table on one core.

    .venv/bin/python bench/mounter.py            # 1M records
    .venv/bin/python bench/mounter.py -n 100000  # a quick run

Records are row format v2 values (90% inserts, 10% updates carrying an old value) in Arrow record
batches of 8192 rows with binary columns, decoded with `decode_batch` as the Spark ``kv`` input
will. The Spark ``local[2]`` figure comes with the Spark data source (not built yet).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for the test encoder

from changefeed.capture.mounter import Catalog, Mounter, decode_batch
from changefeed.model import Column, Index, TableSchema, TypeCode
from tests.mounter import tidb_encoder as enc

TABLE_ID = 2024
COMMIT_TS = 440000000000000000
BATCH = 8192  # Spark's Arrow batches hold 10000 rows by default
POOL = 4096  # distinct row values, cycled under distinct keys


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--records", type=int, default=1_000_000, help="records to decode (default 1M)")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of one batch")
    args = parser.parse_args()

    ts = _table()
    catalog = Catalog.from_json({"tables": [{"schema": "bench", "version": 1, "table": enc.table_info(ts, TABLE_ID)}]})
    rng = random.Random(7)
    batches = _batches(args.records, _values(ts, rng), rng)
    mounter = Mounter(catalog, "Asia/Shanghai")
    decode_batch(batches[0].slice(0, 100), mounter)  # compile the decoder

    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(decode_batch, batches[0], mounter)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)

    rows = 0
    per_batch: list[float] = []  # CPU s per row of each batch: the median resists other load
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in batches:
        t = time.process_time()
        rows += len(decode_batch(batch, mounter))
        per_batch.append((time.process_time() - t) / batch.num_rows)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    updates = sum(b.num_rows - b.column("old_value").null_count for b in batches)
    print(
        f"mounter: {rows:,} records ({updates:,} updates with an old value) of a 10-column mixed table, "
        f"row format v2, Arrow batches of {BATCH}, TIMESTAMP in Asia/Shanghai"
    )
    print(
        f"  {rows / cpu:,.0f} rows/s per core (CPU {cpu:.2f} s; wall {elapsed:.2f} s = {rows / elapsed:,.0f} rows/s); "
        f"median batch {1 / statistics.median(per_batch):,.0f} rows/s, best batch {1 / min(per_batch):,.0f} rows/s"
    )
    print("Spark local[2]: not measured yet (comes with the Spark kv data source)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
