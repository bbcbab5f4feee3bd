"""Lake tables read back by commit ts (changefeed/sink/lake/reader.py): every format and mode against a model."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from changefeed.errors import ConfigError
from changefeed.model import TableSchema, compose_tso
from changefeed.model.rowblock import RowBlock, Segment, TableRows
from changefeed.model.tso import LOGICAL_MASK
from changefeed.sink.lake.common import LakeError, LakeOptions, LakeSink
from changefeed.sink.lake.delta import DeltaSink, read_delta
from changefeed.sink.lake.iceberg import IcebergSink
from changefeed.sink.lake.reader import as_of, open_lake, parse_ts, tables, ts_text, versions

from .helpers import T, dele, ins, resolved, ts, upd

FORMATS = {"delta": DeltaSink, "iceberg": IcebergSink}
Row = tuple[int, str, Decimal]


def _history(seed: int) -> tuple[list[list[Any]], dict[int, Counter[Row]]]:
    """Random batches of inserts, updates (keys too) and deletes, and the table after every commit ts."""
    rng = random.Random(seed)
    state: dict[int, Row] = {}
    states: dict[int, Counter[Row]] = {0: Counter()}
    batches: list[list[Any]] = []
    n = 0
    for _ in range(6):
        batch: list[Any] = []
        for _ in range(rng.randint(1, 4)):  # commit ts within the batch
            n += 1
            for _ in range(rng.randint(1, 3)):  # changes sharing that commit ts
                op = rng.random()
                key = rng.randrange(12)
                row = (key, rng.choice("abc"), Decimal(f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}"))
                if key not in state:
                    batch.append(ins(T, n, *row))
                    state[key] = row
                elif op < 0.4:
                    batch.append(upd(T, n, state[key], row))
                    state[key] = row
                elif op < 0.6:  # the key moves
                    to = rng.randrange(12, 40)
                    if to not in state:
                        moved = (to, row[1], row[2])
                        batch.append(upd(T, n, state.pop(key), moved))
                        state[to] = moved
                else:
                    batch.append(dele(T, n, state.pop(key)))
            states[n] = Counter(state.values())
        batch.append(resolved(n))
        batches.append(batch)
    return batches, states


def _rows(table: Any) -> Counter[Row]:
    return Counter((r["id"], r["note"], r["amount"]) for r in table.to_pylist())


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("mode", ["upsert", "scd2", "changelog"])
def test_as_of_every_commit_ts_matches_the_model(tmp_path: Path, fmt: str, mode: str) -> None:
    batches, states = _history(seed=len(fmt) * 7 + len(mode))
    sink: LakeSink = FORMATS[fmt](tmp_path, LakeOptions(mode=mode))
    sink.open()
    boundaries = [0]
    for batch in batches:
        sink.write(batch)
        sink.flush()
        boundaries.append(batch[-1].commit_ts)
    lake = open_lake(f"{fmt}://{tmp_path}")
    assert tables(lake) == [("shop", "orders")]
    assert [v.checkpoint_ts for v in versions(lake, ("shop", "orders"))][-len(batches) :] == boundaries[1:]
    first = versions(lake, ("shop", "orders"))[0].checkpoint_ts
    for n, state in states.items():
        at = ts(n) if n else 1
        if mode != "changelog" and at < first:  # before the lake's first version: it cannot know
            with pytest.raises(LakeError, match="no version at or before"):
                as_of(lake, ("shop", "orders"), at)
            continue
        got = as_of(lake, ("shop", "orders"), at)
        assert got.mode == mode
        if mode == "changelog":  # every change carries its ts: exact at any ts
            assert got.exact_ts == at
            assert _rows(got.rows) == state, n
        else:  # a version per micro-batch: the table at the last checkpoint at or below the ts
            boundary = max(v.checkpoint_ts for v in versions(lake, ("shop", "orders")) if v.checkpoint_ts <= at)
            assert got.exact_ts == boundary
            expected = states[max(k for k in states if (ts(k) if k else 0) <= boundary)]
            assert _rows(got.rows) == expected, n
        assert got.rows.column_names == ["id", "note", "amount"]
    latest = as_of(lake, ("shop", "orders"))
    assert _rows(latest.rows) == states[max(states)]


def test_a_changelog_that_removes_a_row_it_never_had_is_refused(tmp_path: Path) -> None:
    sink = DeltaSink(tmp_path, LakeOptions(mode="changelog"))
    sink.open()
    sink.write([ins(T, 1, 1, "a"), dele(T, 2, (2, "x", Decimal("1.00"))), resolved(2)])
    sink.flush()
    with pytest.raises(Exception, match="never had: id=2"):
        as_of(open_lake(f"delta://{tmp_path}"), ("shop", "orders"))


def test_parse_ts_takes_a_tso_or_an_iso_time() -> None:
    assert parse_ts("450000000000000000") == 450000000000000000
    ms = 1_704_067_200_000  # 2024-01-01T00:00:00Z
    assert parse_ts("2024-01-01T00:00:00Z") == compose_tso(ms, LOGICAL_MASK)
    assert parse_ts("2024-01-01 00:00:00") == compose_tso(ms, LOGICAL_MASK)  # no offset: UTC
    assert parse_ts("2024-01-01T08:00:00+08:00") == compose_tso(ms, LOGICAL_MASK)
    assert ts_text(compose_tso(ms, 3)).endswith("(2024-01-01T00:00:00.000Z)")
    with pytest.raises(ConfigError, match="--ts"):
        parse_ts("yesterday")


def test_open_lake_refuses_what_is_not_a_lake(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no lake directory"):
        open_lake(f"delta://{tmp_path / 'nothing'}")
    with pytest.raises(ConfigError, match="no Iceberg catalog"):
        open_lake(f"iceberg://{tmp_path}")
    with pytest.raises(ConfigError, match="expected delta"):
        open_lake(f"parquet://{tmp_path}")
    assert not (tmp_path / "_catalog.db").exists()  # reading created nothing


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_as_of_sees_only_the_versions_retention_kept(tmp_path: Path, fmt: str) -> None:
    """With ``retain-versions`` the reader lists only readable versions, reads each exactly, and refuses a ts
    older than the oldest kept one (never a version whose files are gone)."""
    batches, states = _history(seed=5)
    sink: LakeSink = FORMATS[fmt](tmp_path, LakeOptions(mode="upsert", optimize_every=0, retain_versions=3))
    sink.open()
    for batch in batches:
        sink.write(batch)
        sink.flush()
    lake = open_lake(f"{fmt}://{tmp_path}")
    kept = versions(lake, ("shop", "orders"))
    assert 1 <= len(kept) < len(batches)
    for v in kept:
        got = as_of(lake, ("shop", "orders"), v.checkpoint_ts)
        expected = states[max(k for k in states if (ts(k) if k else 0) <= v.checkpoint_ts)]
        assert _rows(got.rows) == expected
    with pytest.raises(LakeError, match="no version at or before"):
        as_of(lake, ("shop", "orders"), kept[0].checkpoint_ts - 1)


def _block(changes: list[tuple[TableSchema, int, str, str]]) -> RowBlock:
    """One-row segments of insert rows (table, id, note, commit ts n), interleaved as given."""
    shapes = list(dict.fromkeys(c[0] for c in changes))
    tables, segments = [], []
    for shape_ in shapes:
        mine = [c for c in changes if c[0] is shape_]
        arrays = [
            pa.array([c[1] for c in mine], pa.int64()),
            pa.array([c[2] for c in mine]),
            pa.array([Decimal(c[3]) for c in mine], pa.decimal128(10, 2)),
            pa.array(["insert"] * len(mine)),
            pa.array([ts(int(c[3].split(".")[0])) for c in mine], pa.int64()),
            *(pa.nulls(len(mine), t) for t in (pa.int64(), pa.string(), pa.decimal128(10, 2))),
        ]
        names = ["id", "note", "amount", "op", "ts", "b_id", "b_note", "b_amount"]
        tables.append(TableRows(shape_, pa.RecordBatch.from_arrays(arrays, names)))
    for table, _id, _note, amount in changes:
        n = int(amount.split(".")[0])
        segments.append(Segment(shapes.index(table), 1, ts(n), {"topic": "t", "partition": 0, "offset": n}, None))
    return RowBlock(tables, segments)


def test_block_segments_are_converted_in_runs_and_replays_skip_by_segment(tmp_path: Path) -> None:
    """Runs of one table's segments become one change set; a replayed block whose first segments are at or
    below the tables' checkpoints appends only the rest (changelog: a double would show)."""
    other = T.renamed("shop", "other")
    changes = [(t, i, f"n{i}", f"{i}.00") for i in range(1, 7) for t in (T, other)]
    first = DeltaSink(tmp_path, LakeOptions(mode="changelog"))
    first.open()
    first.write([_block(changes[:6]), resolved(3)])
    first.flush()
    again = DeltaSink(tmp_path, LakeOptions(mode="changelog"))
    again.open()
    again.write([_block(changes), resolved(6)])  # ts 1-3 again, then 4-6
    again.flush()
    lake = open_lake(f"delta://{tmp_path}")
    for name in (("shop", "orders"), ("shop", "other")):
        rows = read_delta(lake.table_path(name)).to_pylist()
        assert sorted((r["id"], r["_cf_commit_ts"]) for r in rows) == [(i, ts(i)) for i in range(1, 7)]


def _rows_of(changes: list[tuple[str, int, str | None, str | None, int]]) -> TableRows:
    """T's rows (op, id, new note, old note, commit ts n): inserts and updates of note."""
    d = pa.decimal128(10, 2)
    arrays = [
        pa.array([c[1] for c in changes], pa.int64()),
        pa.array([c[2] for c in changes]),
        pa.array([Decimal("1.00")] * len(changes), d),
        pa.array([c[0] for c in changes]),
        pa.array([ts(c[4]) for c in changes], pa.int64()),
        pa.array([c[1] if c[0] == "update" else None for c in changes], pa.int64()),
        pa.array([c[3] for c in changes]),
        pa.array([Decimal("1.00") if c[0] == "update" else None for c in changes], d),
    ]
    return TableRows(T, pa.RecordBatch.from_arrays(arrays, ["id", "note", "amount", "op", "ts", "b1", "b2", "b3"]))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_one_tables_slices_of_two_origins_keep_commit_order(tmp_path: Path, fmt: str) -> None:
    """Per-message slices of two decoded chunks (two partitions) of one table, interleaved by commit ts: the
    runs of each origin must not be converted out of order (the last change of id 1 is chunk A's at ts 3)."""
    a = _rows_of([("insert", 1, "a", None, 1), ("update", 1, "c", "b", 3)])
    b = _rows_of([("update", 1, "b", "a", 2), ("insert", 2, "x", None, 4)])
    tables = [a.slice(0, 1), b.slice(0, 1), a.slice(1, 1), b.slice(1, 1)]
    where = {"topic": "t", "partition": 0, "offset": 0}
    block = RowBlock(tables, [Segment(i, 1, ts(i + 1), where, None) for i in range(4)])
    sink: LakeSink = FORMATS[fmt](tmp_path, LakeOptions(mode="upsert"))
    sink.open()
    sink.write([block, resolved(4)])
    sink.flush()
    got = as_of(open_lake(f"{fmt}://{tmp_path}"), ("shop", "orders")).rows
    assert sorted((r["id"], r["note"]) for r in got.to_pylist()) == [(1, "c"), (2, "x")]
