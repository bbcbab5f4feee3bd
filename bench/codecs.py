"""Encode/decode throughput per protocol on a realistic 10-column table, one core.

Usage: .venv/bin/python bench/codecs.py [--rows N] [--protocols canal-json,simple,...]

Prints rows/s per protocol and direction, the ratio to the issue's targets (encode 150k rows/s,
decode 200k rows/s for the JSON protocols) and, as the side-by-side peer, plain ``orjson``
dumping/loading the same rows as dicts (the floor any JSON codec in Python pays).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from changefeed.codec import CodecOptions, make_decoder, make_encoder  # noqa: E402
from changefeed.model import Column, Index, Op, RowChange, TableSchema, TypeCode  # noqa: E402
from changefeed.model.gofloat import to_float32  # noqa: E402

TARGET_ENCODE = 150_000
TARGET_DECODE = 200_000
UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}

TABLE = TableSchema(
    "bench",
    "orders",
    (
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("customer_id", TypeCode.INT, unsigned=True),
        Column("status", TypeCode.VARCHAR, length=32, **UTF8),
        Column("amount", TypeCode.DECIMAL, length=12, decimal=2),
        Column("ratio", TypeCode.DOUBLE),
        Column("weight", TypeCode.FLOAT),
        Column("created_at", TypeCode.DATETIME, decimal=3),
        Column("note", TypeCode.BLOB, **UTF8),
        Column("flags", TypeCode.TINYINT),
        Column("payload", TypeCode.VARCHAR, charset="binary", length=64),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=42,
    version=1,
)


def make_rows(n: int) -> list[RowChange]:
    rnd = random.Random(7)
    rows = []
    for i in range(n):
        image = (
            i,
            rnd.randrange(1 << 32),
            rnd.choice(["new", "paid", "shipped", "cancelled"]),
            Decimal(rnd.randrange(10**9)).scaleb(-2),
            rnd.random() * 1000,
            to_float32(rnd.random() * 100),
            f"2024-05-{1 + i % 28:02d} 12:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}",
            "note about order " + str(i),
            rnd.randrange(-128, 128),
            rnd.randbytes(16),
        )
        rows.append(RowChange(Op.INSERT, TABLE, (1_700_000_000_000 << 18) + i, new=image))
    return rows


def timed(fn: Callable[[], object], rows: int) -> float:
    start = time.perf_counter()
    fn()
    return rows / (time.perf_counter() - start)


def bench_protocol(protocol: str, rows: list[RowChange], **extra: object) -> tuple[float, float]:
    options = CodecOptions(protocol=protocol, enable_tidb_extension=True, clock=lambda: 0, **extra)  # type: ignore[arg-type]
    encoder = make_encoder(options)
    messages = []

    def encode() -> None:
        for row in rows:
            encoder.append_row(row)
        messages.extend(encoder.build())

    enc_rate = timed(encode, len(rows))
    decoder = make_decoder(options)
    if protocol == "simple":
        bootstrap = encoder.encode_bootstrap(TABLE)
        assert bootstrap is not None
        decoder.decode(bootstrap)
    if protocol == "csv":
        decoder.set_table_schema(TABLE)  # type: ignore[attr-defined]

    def decode() -> None:
        for msg in messages:
            decoder.decode(msg)

    dec_rate = timed(decode, len(rows))
    return enc_rate, dec_rate


def bench_orjson(rows: list[RowChange]) -> tuple[float, float]:
    dicts = [
        {c.name: (str(v) if not isinstance(v, bytes) else v.hex()) for c, v in zip(TABLE.columns, r.new, strict=True)}
        for r in rows
    ]
    blobs: list[bytes] = []
    enc = timed(lambda: blobs.extend(orjson.dumps(d) for d in dicts), len(rows))
    dec = timed(lambda: [orjson.loads(b) for b in blobs], len(rows))
    return enc, dec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--protocols", default="open-protocol,canal-json,simple,simple-avro,csv")
    args = parser.parse_args()
    rows = make_rows(args.rows)
    peer_enc, peer_dec = bench_orjson(rows)
    print(f"rows={args.rows} table=10 columns (bigint, int unsigned, varchar, decimal, double, float, "
          "datetime(3), text, tinyint, varbinary); one core")
    print(f"{'protocol':<16}{'encode rows/s':>15}{'vs target':>11}{'vs orjson':>11}"
          f"{'decode rows/s':>15}{'vs target':>11}{'vs orjson':>11}")
    print(f"{'orjson (peer)':<16}{peer_enc:>15,.0f}{'':>11}{'':>11}{peer_dec:>15,.0f}")
    for name in args.protocols.split(","):
        protocol, extra = (("simple", {"encoding_format": "avro"}) if name == "simple-avro" else (name, {}))
        enc, dec = bench_protocol(protocol, rows, **extra)
        print(
            f"{name:<16}{enc:>15,.0f}{enc / TARGET_ENCODE:>10.2f}x{enc / peer_enc:>10.2f}x"
            f"{dec:>15,.0f}{dec / TARGET_DECODE:>10.2f}x{dec / peer_dec:>10.2f}x"
        )


if __name__ == "__main__":
    main()
