"""iceberg:// on a local SQL catalog: upsert, changelog, exactly once by snapshot property, evolution."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from changefeed.errors import ConfigError
from changefeed.model import ActionType, Column, DDLEvent, Op, RowChange, TableSchema, TypeCode
from changefeed.sink.base import Sink
from changefeed.sink.lake.common import LakeDDLError, LakeOptions
from changefeed.sink.lake.iceberg import IcebergSink

from .helpers import T, dele, ins, resolved, shape, ts, upd
from .test_delta_modes import SCD2_BATCHES, SCD2_VERSIONS, at, scd2_versions
from .test_delta_types_ddl import EXPECTED, TYPES, VALUES

D = Decimal


def catalog(root: Path) -> SqlCatalog:
    """A second, independent catalog client on the sink's SQLite file (a SQL catalog is named in its rows)."""
    return SqlCatalog(
        "changefeed", uri=f"sqlite:///{root.resolve() / '_catalog.db'}", warehouse=root.resolve().as_uri()
    )


def scan(root: Path, schema: str = "shop", table: str = "orders") -> list[dict[str, Any]]:
    rows = catalog(root).load_table((schema, table)).scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r.get("_cf_commit_ts") or 0, r.get("id") or r.get("_cf_before_id")))


def sink(root: Path, **kw: Any) -> IcebergSink:
    s = IcebergSink(root, LakeOptions(**kw))
    s.open()
    return s


def test_is_a_sink(tmp_path: Path) -> None:
    assert isinstance(IcebergSink(tmp_path), Sink)
    with pytest.raises(ConfigError, match="mode must be one of"):
        IcebergSink(tmp_path, LakeOptions(mode="history"))


def test_scd2_keeps_every_version_with_its_validity(tmp_path: Path) -> None:
    """The Delta test's batches (test_delta_modes.py) give the same versions in Iceberg: a stored open version
    closed by the next batch, key moves, deletes, TRUNCATE closing what is open; replays commit nothing."""
    first, second = SCD2_BATCHES
    for batch in (first, second):
        s = sink(tmp_path, mode="scd2")
        s.write(batch)
        s.flush()
    assert scd2_versions(scan(tmp_path)) == SCD2_VERSIONS
    snapshots = len(catalog(tmp_path).load_table(("shop", "orders")).snapshots())
    s = sink(tmp_path, mode="scd2")  # a restart replaying both batches commits nothing
    for batch in (first, second):
        s.write(batch)
        s.flush()
    assert len(catalog(tmp_path).load_table(("shop", "orders")).snapshots()) == snapshots
    truncate = DDLEvent("shop", "orders", "TRUNCATE TABLE orders", ActionType.TRUNCATE_TABLE, ts(6), table_schema=T)
    for _ in range(2):  # the second time is a replay: nothing changes
        s = sink(tmp_path, mode="scd2")
        s.write([truncate, resolved(6)])
        s.flush()
    rows = scan(tmp_path)
    assert len(rows) == 5 and [r for r in rows if r["_cf_valid_to"] is None] == []
    assert {r["_cf_valid_to"] for r in rows if r["id"] == 7} == {at(6)}


def test_upsert_collapses_and_replay_changes_nothing(tmp_path: Path) -> None:
    batch = [
        ins(T, 1, 1, "a"),
        ins(T, 1, 2, "b"),
        upd(T, 2, (1, "a", D("1.00")), (1, "a2", D("2.00"))),
        dele(T, 3, (2, "b", D("1.00"))),
        upd(T, 3, (1, "a2", D("2.00")), (10, "moved", D("2.00"))),
        ins(T, 4, 3, "c"),
        resolved(4),
    ]
    s = sink(tmp_path)
    s.write(batch)
    assert s.flush() == ts(4)
    want = [{"id": 3, "note": "c", "amount": D("1.00")}, {"id": 10, "note": "moved", "amount": D("2.00")}]
    assert scan(tmp_path) == want
    s.write([upd(T, 5, (3, "c", D("1.00")), (3, "c2", D("1.00"))), dele(T, 5, (10, None, None)), resolved(5)])
    s.flush()
    assert scan(tmp_path) == [{"id": 3, "note": "c2", "amount": D("1.00")}]
    s.close()
    snapshots = len(catalog(tmp_path).load_table(("shop", "orders")).snapshots())
    again = IcebergSink(tmp_path)
    assert again.open() == ts(5)
    again.write(batch)
    again.flush()
    assert len(catalog(tmp_path).load_table(("shop", "orders")).snapshots()) == snapshots
    assert scan(tmp_path) == [{"id": 3, "note": "c2", "amount": D("1.00")}]


def test_crash_between_tables_recovers_table_by_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = shape("shop", "items")
    s = sink(tmp_path)
    s.write([ins(T, 1, 1, "a"), ins(other, 1, 1, "i"), resolved(1)])
    s.flush()
    batch = [ins(T, 2, 2, "b"), ins(other, 2, 2, "j"), resolved(2)]
    real = IcebergSink._write
    done: list[Any] = []

    def write_then_die(self: IcebergSink, name: Any, shp: Any, changes: Any, version: int) -> None:
        if done:
            raise OSError("killed")
        done.append(name)
        real(self, name, shp, changes, version)

    monkeypatch.setattr(IcebergSink, "_write", write_then_die)
    crashing = sink(tmp_path)
    crashing.write(batch)
    with pytest.raises(OSError, match="killed"):
        crashing.flush()
    monkeypatch.setattr(IcebergSink, "_write", real)
    restarted = IcebergSink(tmp_path)
    assert restarted.open() == ts(1)
    restarted.write(batch)
    assert restarted.flush() == ts(2)
    assert [r["note"] for r in scan(tmp_path)] == ["a", "b"]
    assert [r["note"] for r in scan(tmp_path, "shop", "items")] == ["i", "j"]


def test_hostile_names_stay_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "root"
    s = sink(root)
    names = [("../../esc", "../../../pwn"), ("a.b", "c"), ("a", "b.c"), ("店", "表/ü")]
    s.write([*(ins(shape(sch, tab), 1, 1, f"{sch}|{tab}") for sch, tab in names), resolved(1)])
    s.flush()
    assert [p for p in tmp_path.rglob("*") if not p.is_relative_to(root) and p not in root.parents] == []
    reopened = IcebergSink(root)
    reopened.open()
    assert all(reopened.table_version(n) == ts(1) for n in names)
    for sch, tab in names:
        loaded = reopened._load((sch, tab))
        assert loaded is not None
        assert loaded.scan().to_arrow().column("note").to_pylist() == [f"{sch}|{tab}"]


def test_every_type_reads_back_exactly(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.write([RowChange(Op.INSERT, TYPES, ts(1), new=VALUES), resolved(1)])
    s.flush()
    rows = scan(tmp_path, "shop", "types")
    widened = {"y": 2155, "tu": 255, "e": 2}  # 8/16-bit ints are Iceberg ints: same values
    assert rows == [EXPECTED | widened]


def test_changelog_and_evolution(tmp_path: Path) -> None:
    s = sink(tmp_path, mode="changelog")
    added = shape(extra=(Column("qty", TypeCode.INT),))
    wider = shape(extra=(Column("qty", TypeCode.BIGINT),))
    s.write(
        [
            ins(T, 1, 1, "a"),
            upd(T, 2, (1, "a", D("1.00")), (1, "b", D("1.00"))),
            DDLEvent(
                "shop", "orders", "ALTER TABLE orders ADD qty INT", ActionType.ADD_COLUMN, ts(3), table_schema=added
            ),
            RowChange(Op.INSERT, added, ts(4), new=(2, "c", D("1.00"), 5)),
            DDLEvent("shop", "orders", "ALTER TABLE orders MODIFY qty BIGINT", ActionType.MODIFY_COLUMN, ts(5), wider),
            RowChange(Op.DELETE, wider, ts(6), old=(1, "b", D("1.00"), None)),
            DDLEvent("shop", "orders", "TRUNCATE TABLE orders", ActionType.TRUNCATE_TABLE, ts(7), table_schema=wider),
            resolved(7),
        ]
    )
    s.flush()
    table = catalog(tmp_path).load_table(("shop", "orders")).scan().to_arrow()
    assert table.schema.field("qty").type == pa.int64()
    got = [
        (r["_cf_op"], r["_cf_commit_ts"], r["id"], r["note"], r["_cf_before_id"], r["_cf_before_note"])
        for r in scan(tmp_path)
    ]
    assert got == [
        ("insert", ts(1), 1, "a", None, None),
        ("update", ts(2), 1, "b", 1, "a"),
        ("insert", ts(4), 2, "c", None, None),
        ("delete", ts(6), None, None, 1, "b"),
        ("truncate", ts(7), None, None, None, None),
    ]
    narrowed = TableSchema("shop", "orders", (*T.columns, Column("qty", TypeCode.VARCHAR)), T.indexes)
    s.write([DDLEvent("shop", "orders", "ALTER TABLE orders MODIFY qty TEXT", 12, ts(8), table_schema=narrowed)])
    with pytest.raises(LakeDDLError, match=r"MODIFY qty TEXT.*no widening"):
        s.flush()
    assert len(scan(tmp_path)) == 5  # the refused DDL left the table as it was
