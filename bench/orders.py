"""The 10-column "orders" table every benchmark uses, and its rows.

bigint pk, int unsigned, varchar, decimal(12,2), double, float, datetime(3), text, tinyint,
varbinary: a realistic mix of the types that cost differently in every codec and sink.
"""

from __future__ import annotations

import random
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from changefeed.model import Column, Index, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
NOTES = ("", "gift wrap", "leave at door", 'it\'s fragile\\ "x"', "日本語のメモ")


def orders_table(schema: str = "bench", extra_indexes: tuple[Index, ...] = ()) -> TableSchema:
    return TableSchema(
        schema,
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
        (Index("PRIMARY", ("id",), primary=True), *extra_indexes),
        table_id=42,
        version=1,
    )


def order_image(rnd: random.Random, i: int) -> tuple[Any, ...]:
    """One row of `orders_table` with key ``i`` and random other values."""
    return (
        i,
        rnd.randrange(1 << 32),
        rnd.choice(["new", "paid", "shipped", "cancelled"]),
        Decimal(rnd.randrange(10**9)).scaleb(-2),
        rnd.random() * 1000,
        to_float32(rnd.random() * 100),
        f"2024-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d} 12:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}",
        rnd.choice(NOTES) + f" order {i}",
        rnd.randrange(-128, 128),
        rnd.randbytes(rnd.randint(0, 32)),
    )
