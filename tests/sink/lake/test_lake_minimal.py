"""MINIMAL row images (binlog_row_image=MINIMAL: ABSENT columns) in the lake sinks, both formats, every mode.

Fast: no MariaDB, no Spark (tests/sink/lake/test_lake_minimal_run.py runs a real server through
`changefeed run`). The fold of partial updates is checked against a model of the table with
hypothesis: random inserts, updates of random column sets (key moves too) and deletes, cut into
random batches, must leave what a FULL-image stream leaves.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.model import ABSENT, Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.sink.lake.common import (
    ABSENT_COLUMNS,
    LakeError,
    LakeOptions,
    LakeSink,
    changes_from_rows,
    collapse_upsert,
    complete_changes,
    partial_keys,
)
from changefeed.sink.lake.delta import DeltaSink
from changefeed.sink.lake.iceberg import IcebergSink
from changefeed.sink.lake.reader import as_of, open_lake, read_version

from .helpers import UTF8, resolved, ts

A = ABSENT
D = Decimal
PATH = ("shop", "items")
SHAPE = TableSchema(
    "shop",
    "items",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("name", TypeCode.VARCHAR, length=20, **UTF8),
        Column("qty", TypeCode.INT, nullable=False, default="7"),
        Column("price", TypeCode.DECIMAL, length=8, decimal=2, default="1.50"),
        Column("state", TypeCode.ENUM, elements=("new", "done"), default="new", **UTF8),
        Column("day", TypeCode.DATE),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)
FORMATS = ["delta", "iceberg"]


def sink(fmt: str, root: Path, mode: str = "upsert") -> LakeSink:
    cls = DeltaSink if fmt == "delta" else IcebergSink
    s = cls(root, LakeOptions(mode=mode))
    s.open()
    return s


def run(fmt: str, root: Path, batches: list[list[Any]], mode: str = "upsert") -> None:
    s = sink(fmt, root, mode)
    for batch in batches:
        s.write(batch)
        s.flush()


def stored(fmt: str, root: Path, mode: str = "upsert") -> list[dict[str, Any]]:
    table = read_version(open_lake(f"{fmt}://{root}?mode={mode}"), PATH, None)
    return sorted(table.to_pylist(), key=lambda r: (r.get("_cf_commit_ts") or 0, r["id"] or 0))


def ins(n: int, image: tuple[Any, ...]) -> RowChange:
    return RowChange(Op.INSERT, SHAPE, ts(n), new=image)


def upd(n: int, key: int, new: tuple[Any, ...]) -> RowChange:
    """A MINIMAL update: the old image is the key only."""
    return RowChange(Op.UPDATE, SHAPE, ts(n), new=new, old=(key, A, A, A, A, A))


def dele(n: int, key: int) -> RowChange:
    return RowChange(Op.DELETE, SHAPE, ts(n), old=(key, A, A, A, A, A))


def full(i: int, name: str | None, qty: int, price: str | None, state: int, day: str | None) -> dict[str, Any]:
    return {
        "id": i,
        "name": name,
        "qty": qty,
        "price": None if price is None else D(price),
        "state": state,
        "day": None if day is None else dt.date.fromisoformat(day),
    }


# ------------------------------------------------------------------ upsert, both formats


@pytest.mark.parametrize("fmt", FORMATS)
def test_upsert_updates_only_the_present_columns(fmt: str, tmp_path: Path) -> None:
    first = [
        ins(1, (1, "a", 1, D("2.00"), 1, "2024-01-01")),
        ins(1, (2, "b", 2, D("3.00"), 2, None)),
        ins(1, (3, "c", 3, D("4.00"), 1, "2024-03-03")),
        resolved(1),
    ]
    second = [
        upd(2, 1, (A, "a2", A, A, A, A)),  # a stored row, one column
        upd(3, 1, (A, A, 10, A, 2, A)),  # the same key again, other columns: folds onto the one before
        upd(3, 2, (A, A, A, None, A, A)),  # a column set to NULL is present
        upd(4, 3, (30, A, A, A, A, "2025-05-05")),  # the key moves
        dele(5, 2),  # a delete by key only
        ins(5, (4, "d", A, A, A, None)),  # an insert leaving out columns with defaults
        upd(6, 4, (A, A, 8, A, A, A)),  # ... then updated in the same batch
        resolved(6),
    ]
    run(fmt, tmp_path, [first, second])
    expect = [
        full(1, "a2", 10, "2.00", 2, "2024-01-01"),
        full(4, "d", 8, "1.50", 1, None),
        full(30, "c", 3, "4.00", 1, "2025-05-05"),
    ]
    assert stored(fmt, tmp_path) == expect
    run(fmt, tmp_path, [first, second])  # a replay of both batches changes nothing
    assert stored(fmt, tmp_path) == expect
    third = [upd(7, 30, (A, A, A, D("9.99"), A, A)), resolved(7)]
    run(fmt, tmp_path, [third])
    assert stored(fmt, tmp_path)[2] == full(30, "c", 3, "9.99", 1, "2025-05-05")


@pytest.mark.parametrize("fmt", FORMATS)
def test_upsert_refuses_what_it_cannot_know(fmt: str, tmp_path: Path) -> None:
    with pytest.raises(LakeError, match=r"'shop'.'items'.*INSERT leaves out column 'name'.*default is not known"):
        run(fmt, tmp_path / "a", [[ins(1, (1, A, 1, D("1.00"), 1, None)), resolved(1)]])
    with pytest.raises(LakeError, match=r"UPDATE of key \(5,\) carries only some columns.*holds no such row"):
        run(fmt, tmp_path / "b", [[upd(1, 5, (A, "x", A, A, A, A)), resolved(1)]])


@pytest.mark.parametrize("fmt", FORMATS)
def test_scd2_builds_versions_from_the_open_one(fmt: str, tmp_path: Path) -> None:
    first = [ins(1, (1, "a", 1, D("2.00"), 1, None)), resolved(1)]
    second = [upd(2, 1, (A, "b", A, A, A, A)), upd(3, 1, (A, A, 5, A, A, A)), resolved(3)]
    third = [upd(4, 1, (A, A, A, A, 2, A)), dele(5, 1), resolved(5)]
    run(fmt, tmp_path, [first, second, third], mode="scd2")
    rows = stored(fmt, tmp_path, "scd2")
    got = [(r["name"], r["qty"], r["price"], r["state"], r["_cf_op"]) for r in rows]
    assert got == [
        ("a", 1, D("2.00"), 1, "insert"),
        ("b", 1, D("2.00"), 1, "update"),
        ("b", 5, D("2.00"), 1, "update"),
        ("b", 5, D("2.00"), 2, "update"),
    ]
    assert all(r["_cf_valid_to"] is not None for r in rows)  # the delete closed the last one


@pytest.mark.parametrize("fmt", FORMATS)
def test_changelog_records_what_the_binlog_carried(fmt: str, tmp_path: Path) -> None:
    batch = [
        ins(1, (1, "a", 1, D("2.00"), 1, None)),
        upd(2, 1, (A, None, A, A, A, A)),
        dele(3, 1),
        resolved(3),
    ]
    run(fmt, tmp_path, [batch], mode="changelog")
    rows = stored(fmt, tmp_path, "changelog")
    assert [r["_cf_op"] for r in rows] == ["insert", "update", "delete"]
    assert rows[0][ABSENT_COLUMNS] is None  # a whole image
    before = ["_cf_before_name", "_cf_before_qty", "_cf_before_price", "_cf_before_state", "_cf_before_day"]
    assert rows[1][ABSENT_COLUMNS] == ["qty", "price", "state", "day", *before]
    assert rows[1]["name"] is None and "name" not in rows[1][ABSENT_COLUMNS]  # NULL, not absent
    assert rows[1]["id"] == 1 and rows[1]["_cf_before_id"] == 1  # the key, unchanged, is in both images
    assert rows[2][ABSENT_COLUMNS] == before and rows[2]["_cf_before_id"] == 1
    with pytest.raises(LakeError, match="cannot be folded"):
        as_of(open_lake(f"{fmt}://{tmp_path}"), PATH)


@pytest.mark.parametrize("fmt", FORMATS)
def test_keyless_table_completes_from_the_before_image(fmt: str, tmp_path: Path) -> None:
    """MINIMAL logs a row of a table without a key whole in the before image; the after image may lack some."""
    bare = TableSchema("shop", "items", SHAPE.columns[:3])
    first = [RowChange(Op.INSERT, bare, ts(1), new=(1, "a", 1)), resolved(1)]
    second = [RowChange(Op.UPDATE, bare, ts(2), new=(A, "b", A), old=(1, "a", 1)), resolved(2)]
    run(fmt, tmp_path, [first, second])
    assert [(r["id"], r["name"], r["qty"]) for r in stored(fmt, tmp_path)] == [(1, "b", 1)]


# ------------------------------------------------------------------ the fold, against a model


def _fold(batches: list[list[RowChange]]) -> dict[int, tuple[Any, ...]]:
    """Apply batches of MINIMAL changes as the sink does (`complete_changes` over the rows stored so far, then
    `collapse_upsert`), keeping the table as a dict key -> row (lake values)."""
    table: dict[int, tuple[Any, ...]] = {}
    names = [c.name for c in SHAPE.columns]
    for batch in batches:
        changes = changes_from_rows(SHAPE, batch, "UTC")
        keys = partial_keys(SHAPE, changes)
        wanted = set(keys.column("id").to_pylist())
        rows = [table[k] for k in sorted(wanted) if k in table]
        held = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=_lake_schema())
        final = collapse_upsert(SHAPE, complete_changes(SHAPE, changes, held, "UTC"))
        for row in final.to_pylist():
            if row["_cf_delete"]:
                table.pop(row["id"], None)
            else:
                table[row["id"]] = tuple(row[n] for n in names)
    return table


def _lake_schema() -> pa.Schema:
    from changefeed.sink.lake.common import lake_schema  # noqa: PLC0415

    return lake_schema(SHAPE, "upsert")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[list[RowChange]], dict[int, tuple[Any, ...]]]:
    """Random changes of the model table as MINIMAL images, cut into batches, and the rows they leave."""
    live: dict[int, list[Any]] = {}
    events: list[RowChange] = []
    values = {
        1: st.one_of(st.none(), st.text(max_size=3)),
        2: st.integers(-5, 5),
        3: st.one_of(st.none(), st.decimals(-99, 99, places=2)),
        4: st.sampled_from([1, 2]),
        5: st.one_of(st.none(), st.sampled_from(["2024-01-01", "2025-02-03"])),
    }
    for n in range(1, draw(st.integers(1, 30)) + 1):
        kind = draw(st.sampled_from(["insert", "update", "update", "delete"])) if live else "insert"
        if kind == "insert" and len(live) == 8:
            kind = "delete"
        if kind == "insert":
            key = draw(st.sampled_from(sorted(set(range(8)) - set(live))))
            row = [key, *(draw(values[i]) for i in range(1, 6))]
            given_cols = draw(st.sets(st.sampled_from([2, 3, 4]), max_size=3))  # columns left to their default
            image = tuple(A if i in given_cols else v for i, v in enumerate(row))
            for i in given_cols:
                row[i] = {2: 7, 3: D("1.50"), 4: 1}[i]
            live[key] = row
            events.append(ins(n, image))
        elif kind == "update":
            key = draw(st.sampled_from(sorted(live)))
            row = live[key]
            changed = draw(st.sets(st.integers(0, 5), min_size=1))
            new = list(row)
            free = sorted({key} | (set(range(8)) - set(live)))
            for i in changed:
                new[i] = draw(st.sampled_from(free)) if i == 0 else draw(values[i])
            del live[key]
            live[new[0]] = new
            events.append(upd(n, key, tuple(new[i] if i in changed else A for i in range(6))))
        else:
            key = draw(st.sampled_from(sorted(live)))
            del live[key]
            events.append(dele(n, key))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=4)))
    batches = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True) if events[a:b]]
    return batches, {k: _lake_row(v) for k, v in live.items()}


def _lake_row(row: list[Any]) -> tuple[Any, ...]:
    i, name, qty, price, state, day = row
    price = None if price is None else D(price).quantize(D("0.01"))
    return (i, name, qty, price, state, None if day is None else dt.date.fromisoformat(day))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_fold_of_partial_images_equals_the_full_history(case: tuple[list[list[RowChange]], dict[int, Any]]) -> None:
    batches, expect = case
    assert _fold(batches) == expect


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_changelog_table_from_before_gains_the_absent_column(fmt: str, tmp_path: Path) -> None:
    """A changelog table written before `_cf_absent` existed gets it added (metadata only); old rows read NULL."""
    from changefeed.sink.lake.common import lake_schema  # noqa: PLC0415

    s = sink(fmt, tmp_path, "changelog")
    old = lake_schema(SHAPE, "changelog")
    s._create(PATH, s.format_schema(old.remove(old.get_field_index(ABSENT_COLUMNS))), 0)
    run(
        fmt,
        tmp_path,
        [[ins(1, (1, "a", 1, D("2.00"), 1, None)), upd(2, 1, (A, "b", A, A, A, A)), resolved(2)]],
        "changelog",
    )
    rows = stored(fmt, tmp_path, "changelog")
    assert [r["_cf_op"] for r in rows] == ["insert", "update"]
    assert rows[0][ABSENT_COLUMNS] is None and "qty" in rows[1][ABSENT_COLUMNS]


@pytest.mark.parametrize("fmt", FORMATS)
def test_many_composite_keys_read_their_stored_rows(fmt: str, tmp_path: Path) -> None:
    """A text-and-int key (Delta filters the scan on the int only) and more keys than Iceberg filters on."""
    pair = TableSchema(
        "shop",
        "items",
        (
            Column("a", TypeCode.VARCHAR, length=8, nullable=False, **UTF8),
            Column("b", TypeCode.INT, nullable=False),
            Column("v", TypeCode.INT),
            Column("w", TypeCode.VARCHAR, length=8, **UTF8),
        ),
        (Index("PRIMARY", ("a", "b"), primary=True),),
    )
    keys = [(f"k{i % 30}", i) for i in range(260)]
    first = [*(RowChange(Op.INSERT, pair, ts(1), new=(a, b, b, "w")) for a, b in keys), resolved(1)]
    second = [
        *(RowChange(Op.UPDATE, pair, ts(2), new=(A, A, -b, A), old=(a, b, A, A)) for a, b in keys),
        *(RowChange(Op.UPDATE, pair, ts(3), new=(A, A, A, "x"), old=(a, b, A, A)) for a, b in keys[::3]),
        resolved(3),
    ]
    run(fmt, tmp_path, [first, second])
    table = read_version(open_lake(f"{fmt}://{tmp_path}"), PATH, None)
    got = {(r["a"], r["b"]): (r["v"], r["w"]) for r in table.to_pylist()}
    assert got == {(a, b): (-b, "x" if b % 3 == 0 else "w") for a, b in keys}
