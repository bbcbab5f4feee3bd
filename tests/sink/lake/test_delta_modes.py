"""delta:// mode=changelog (every change appended) and mode=scd2 (every version a row)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from changefeed.model import ActionType, DDLEvent
from changefeed.sink.lake.common import LakeOptions
from changefeed.sink.lake.delta import DeltaSink, read_delta

from .helpers import T, dele, ins, resolved, ts, upd

D = Decimal
PATH = ("shop", "orders")


def at(n: int) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=n)


def run(root: Path, mode: str, batches: list[list[Any]]) -> DeltaSink:
    s = DeltaSink(root, LakeOptions(mode=mode))
    s.open()
    for batch in batches:
        s.write(batch)
        s.flush()
    return s


def test_changelog_appends_every_change_once(tmp_path: Path) -> None:
    first = [ins(T, 1, 1, "a"), upd(T, 2, (1, "a", D("1.00")), (1, "b", D("1.00"))), resolved(2)]
    second = [dele(T, 3, (1, "b", D("1.00"))), resolved(3)]
    run(tmp_path, "changelog", [first, second])
    run(tmp_path, "changelog", [first, second])  # a restart replaying both batches appends nothing
    table = read_delta(tmp_path / "shop/orders").sort_by("_cf_commit_ts")
    before = ["_cf_before_id", "_cf_before_note", "_cf_before_amount"]
    assert table.schema.names == ["_cf_op", "_cf_commit_ts", "id", "note", "amount", *before, "_cf_absent"]
    got = [(r["_cf_op"], r["_cf_commit_ts"], r["note"], r["_cf_before_note"]) for r in table.to_pylist()]
    assert got == [("insert", ts(1), "a", None), ("update", ts(2), "b", "a"), ("delete", ts(3), None, "b")]


#: Two batches of scd2 history (a stored open version closed by the next batch, a key move, a delete), and
#: the versions they leave (id, note, valid from, valid to, op): both lake formats must store the same.
SCD2_BATCHES = [
    [ins(T, 1, 1, "a"), ins(T, 1, 2, "x"), upd(T, 2, (1, "a", D("1.00")), (1, "b", D("1.00"))), resolved(2)],
    [
        upd(T, 3, (1, "b", D("1.00")), (1, "c", D("1.00"))),
        dele(T, 4, (2, "x", D("1.00"))),
        upd(T, 5, (1, "c", D("1.00")), (7, "c", D("1.00"))),  # the key moves: 1 closes, 7 opens
        resolved(5),
    ],
]
SCD2_VERSIONS = [
    (1, "a", at(1), at(2), "insert"),
    (1, "b", at(2), at(3), "update"),
    (1, "c", at(3), at(5), "update"),
    (2, "x", at(1), at(4), "insert"),
    (7, "c", at(5), None, "update"),
]


def scd2_versions(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rows = sorted(rows, key=lambda r: (r["id"], r["_cf_commit_ts"]))
    return [(r["id"], r["note"], r["_cf_valid_from"], r["_cf_valid_to"], r["_cf_op"]) for r in rows]


def test_scd2_keeps_every_version_with_its_validity(tmp_path: Path) -> None:
    run(tmp_path, "scd2", SCD2_BATCHES)
    rows = read_delta(tmp_path / "shop/orders").to_pylist()
    assert scd2_versions(rows) == SCD2_VERSIONS
    assert sorted(r["_cf_commit_ts"] for r in rows) == sorted([ts(1), ts(2), ts(3), ts(1), ts(5)])
    # TRUNCATE closes every open version; a replay of it after a restart changes nothing
    truncate = DDLEvent("shop", "orders", "TRUNCATE TABLE orders", ActionType.TRUNCATE_TABLE, ts(6), table_schema=T)
    run(tmp_path, "scd2", [[truncate, resolved(6)]])
    version = DeltaTable(str(tmp_path / "shop/orders")).version()
    run(tmp_path, "scd2", [[truncate, resolved(6)]])
    assert DeltaTable(str(tmp_path / "shop/orders")).version() == version
    open_rows = [r for r in read_delta(tmp_path / "shop/orders").to_pylist() if r["_cf_valid_to"] is None]
    assert open_rows == []
