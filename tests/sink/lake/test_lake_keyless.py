"""Tables without a key in ``mode=upsert``: the lake table holds the source's rows as a multiset.

A random history of inserts (duplicates on purpose), deletes and updates of one copy of a row
(NULLs, decimals, datetimes, bytes in the images), in batches, is written to both formats and
compared after every batch with a model of the source table, through the library's reader and
through DuckDB over the formats' own metadata; a replayed batch changes nothing.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from changefeed.model import Column, Op, RowChange, TableSchema, TypeCode
from changefeed.sink.lake.common import LakeOptions, LakeSink
from changefeed.sink.lake.delta import DeltaSink
from changefeed.sink.lake.iceberg import IcebergSink
from changefeed.sink.lake.reader import as_of, open_lake

from .helpers import UTF8, resolved, ts
from .independent import read_delta_independently, read_iceberg_independently

KEYLESS = TableSchema(
    "shop",
    "log",
    (
        Column("n", TypeCode.INT),
        Column("note", TypeCode.VARCHAR, length=20, **UTF8),
        Column("amount", TypeCode.DECIMAL, length=10, decimal=2),
        Column("at", TypeCode.DATETIME, decimal=3),
        Column("raw", TypeCode.VARCHAR, length=8, charset="binary", collation="binary"),
    ),
    (),
)
FORMATS = {"delta": (DeltaSink, read_delta_independently), "iceberg": (IcebergSink, read_iceberg_independently)}
Row = tuple[Any, ...]


def _value(rng: random.Random) -> Row:
    return (
        rng.choice([None, 1, 2]),
        rng.choice([None, "a", "b"]),
        rng.choice([None, Decimal("1.50"), Decimal("-2.00")]),
        rng.choice([None, "2024-05-06 07:08:09.123"]),
        rng.choice([None, b"\x00\x01", b""]),
    )


def _lake(row: Row) -> Row:
    """A model row as the lake reads it back (DATETIME text -> a datetime)."""
    at = row[3] if row[3] is None else dt.datetime.fromisoformat(row[3])
    return (row[0], row[1], row[2], at, row[4])


def _history(seed: int) -> tuple[list[list[Any]], list[Counter[Row]]]:
    rng = random.Random(seed)
    table: list[Row] = []
    batches, states = [], []
    n = 0
    for _ in range(7):
        batch: list[Any] = []
        for _ in range(rng.randint(3, 12)):
            n += 1
            op = rng.random()
            if not table or op < 0.45:
                row = _value(rng)
                table.append(row)
                batch.append(RowChange(Op.INSERT, KEYLESS, ts(n), new=row))
            elif op < 0.75:  # one copy of a row goes, others equal to it stay
                old = table.pop(rng.randrange(len(table)))
                batch.append(RowChange(Op.DELETE, KEYLESS, ts(n), old=old))
            else:
                i = rng.randrange(len(table))
                new = _value(rng)
                batch.append(RowChange(Op.UPDATE, KEYLESS, ts(n), old=table[i], new=new))
                table[i] = new
        batch.append(resolved(n))
        batches.append(batch)
        states.append(Counter(_lake(r) for r in table))
    return batches, states


def _rows(table: Any) -> Counter[Row]:
    return Counter(tuple(r[c.name] for c in KEYLESS.columns) for r in table.to_pylist())


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_table_without_a_key_is_mirrored_as_a_multiset(tmp_path: Path, fmt: str) -> None:
    make, independent = FORMATS[fmt]
    batches, states = _history(seed=len(fmt))
    sink: LakeSink = make(tmp_path, LakeOptions(mode="upsert"))
    sink.open()
    for i, (batch, state) in enumerate(zip(batches, states, strict=True)):
        sink.write(batch)
        sink.flush()
        got = as_of(open_lake(f"{fmt}://{tmp_path}"), ("shop", "log")).rows
        assert _rows(got) == state, f"after batch {i}"
        assert _rows(independent(tmp_path / "shop" / "log")) == state, f"after batch {i}, read by DuckDB"
    again: LakeSink = make(tmp_path, LakeOptions(mode="upsert"))  # a restart replays the last two batches
    again.open()
    for batch in batches[-2:]:
        again.write(batch)
        again.flush()
    assert _rows(as_of(open_lake(f"{fmt}://{tmp_path}"), ("shop", "log")).rows) == states[-1]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_changes_that_cancel_out_still_record_the_checkpoint(tmp_path: Path, fmt: str) -> None:
    make, _ = FORMATS[fmt]
    row = (1, "a", Decimal("1.50"), None, None)
    sink: LakeSink = make(tmp_path, LakeOptions(mode="upsert"))
    sink.open()
    sink.write([RowChange(Op.INSERT, KEYLESS, ts(1), new=row), resolved(1)])
    sink.flush()
    sink.write([RowChange(Op.INSERT, KEYLESS, ts(2), new=row), RowChange(Op.DELETE, KEYLESS, ts(3), old=row)])
    sink.write([resolved(3)])
    sink.flush()
    again: LakeSink = make(tmp_path, LakeOptions(mode="upsert"))
    assert again.open() == ts(3)
    assert _rows(as_of(open_lake(f"{fmt}://{tmp_path}"), ("shop", "log")).rows) == Counter([_lake(row)])
