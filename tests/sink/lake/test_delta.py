"""delta:// upsert: collapse per key, exactly once by application transaction, per-table recovery."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from changefeed.files.paths import PathEscapeError
from changefeed.model import Column, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.base import Sink
from changefeed.sink.lake.common import LakeError, LakeOptions, LakeSink
from changefeed.sink.lake.delta import DeltaSink, read_delta, version_at
from changefeed.sink.lake.iceberg import IcebergSink
from changefeed.sink.replay import ResolvedContradictionError

from .helpers import T, dele, ins, resolved, shape, ts, upd

D = Decimal


def rows(path: Path, version: int | None = None) -> list[dict[str, Any]]:
    """Rows read back through the Delta log with pyarrow, sorted by id."""
    return sorted(read_delta(path, version).to_pylist(), key=lambda r: r["id"])


def files_rows(path: Path) -> list[dict[str, Any]]:
    """An independent reader: the Parquet files the current Delta version lists, read by pyarrow alone."""
    files = [u.removeprefix("file://") for u in DeltaTable(str(path)).file_uris()]
    return sorted((r for f in files for r in pq.read_table(f).to_pylist()), key=lambda r: r["id"])


def sink(root: Path, **kw: Any) -> DeltaSink:
    s = DeltaSink(root, LakeOptions(**kw))
    s.open()
    return s


def test_is_a_sink(tmp_path: Path) -> None:
    assert isinstance(DeltaSink(tmp_path), Sink)


def test_changes_collapse_per_key_in_commit_order(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.write(
        [
            ins(T, 1, 1, "a"),
            ins(T, 1, 2, "b"),
            ins(T, 1, 3, "c"),
            upd(T, 2, (1, "a", D("1.00")), (1, "a2", D("2.00"))),
            upd(T, 3, (1, "a2", D("2.00")), (1, "a3", D("3.00"))),
            dele(T, 3, (2, "b", D("1.00"))),
            ins(T, 4, 2, "b again"),
            upd(T, 4, (3, "c", D("1.00")), (30, "c moved", D("1.00"))),  # key change: 3 gone, 30 new
            ins(T, 5, 4, "d"),
            dele(T, 5, (4, "d", D("1.00"))),  # inserted and deleted in one batch: never there
            resolved(5),
        ]
    )
    assert s.flush() == ts(5)
    path = tmp_path / "shop" / "orders"
    want = [
        {"id": 1, "note": "a3", "amount": D("3.00")},
        {"id": 2, "note": "b again", "amount": D("1.00")},
        {"id": 30, "note": "c moved", "amount": D("1.00")},
    ]
    assert rows(path) == want
    assert files_rows(path) == want
    # a second batch updates and deletes rows stored by the first
    s.write([upd(T, 6, (2, "b again", D("1.00")), (2, "b2", D("9.99"))), dele(T, 6, (30, "", None)), resolved(6)])
    assert s.flush() == ts(6)
    assert rows(path) == [{"id": 1, "note": "a3", "amount": D("3.00")}, {"id": 2, "note": "b2", "amount": D("9.99")}]
    assert DeltaTable(str(path)).transaction_version("changefeed") == ts(6)
    s.close()


def test_replayed_batch_changes_nothing(tmp_path: Path) -> None:
    batch = [ins(T, 1, 1, "a"), ins(T, 2, 2, "b"), resolved(2)]
    s = sink(tmp_path)
    s.write(batch)
    s.flush()
    s.close()
    path = tmp_path / "shop" / "orders"
    version = DeltaTable(str(path)).version()
    again = DeltaSink(tmp_path)
    assert again.open() == ts(2)
    again.write(batch)  # a restart's replay of the same micro-batch
    assert again.flush() == ts(2)
    assert DeltaTable(str(path)).version() == version  # no commit at all
    assert rows(path) == [{"id": 1, "note": "a", "amount": D("1.00")}, {"id": 2, "note": "b", "amount": D("1.00")}]
    # the batch after it applies as usual
    again.write([*batch, upd(T, 3, (1, "a", D("1.00")), (1, "x", D("1.00"))), resolved(3)])
    again.flush()
    assert rows(path)[0]["note"] == "x"


def test_row_below_resolved_of_the_same_run_is_refused(tmp_path: Path) -> None:
    s = sink(tmp_path)
    with pytest.raises(ResolvedContradictionError, match=r"shop\.orders at commit ts"):
        s.write([resolved(5), ins(T, 4, 1, "late")])


def test_crash_between_tables_recovers_table_by_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = shape("shop", "items")
    s = sink(tmp_path)
    s.write([ins(T, 1, 1, "a"), ins(other, 1, 1, "i"), resolved(1)])
    s.flush()
    s.close()
    batch = [
        ins(T, 2, 2, "b"),
        ins(other, 2, 2, "j"),
        upd(T, 3, (1, "a", D("1.00")), (1, "a2", D("1.00"))),
        resolved(3),
    ]
    crashing = sink(tmp_path)
    real = DeltaSink._write
    calls = []

    def write_then_die(self: DeltaSink, name: Any, shp: Any, changes: Any, version: int) -> None:
        if calls:
            raise OSError("killed between the tables' commits")
        calls.append(name)
        real(self, name, shp, changes, version)

    monkeypatch.setattr(DeltaSink, "_write", write_then_die)
    crashing.write(batch)
    with pytest.raises(OSError, match="killed"):
        crashing.flush()
    crashing.close()
    monkeypatch.setattr(DeltaSink, "_write", real)
    assert calls == [("shop", "orders")]  # orders committed, items not; the root checkpoint not written

    restarted = DeltaSink(tmp_path)
    assert restarted.open() == ts(1)  # the lowest table: items
    assert restarted.table_version(("shop", "orders")) == ts(3)
    orders_version = DeltaTable(str(tmp_path / "shop/orders")).version()
    restarted.write(batch)  # the replay: orders skips it, items applies it
    assert restarted.flush() == ts(3)
    assert DeltaTable(str(tmp_path / "shop/orders")).version() == orders_version
    assert [r["note"] for r in rows(tmp_path / "shop/orders")] == ["a2", "b"]
    assert [r["note"] for r in rows(tmp_path / "shop/items")] == ["i", "j"]
    assert DeltaSink(tmp_path).open() == ts(3)


@pytest.mark.parametrize("sink_class", [DeltaSink, IcebergSink])
@pytest.mark.parametrize("killed_in", ["_ensure", "_write"])
def test_crash_before_a_new_tables_first_commit_loses_none_of_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink_class: type[LakeSink], killed_in: str
) -> None:
    """The first batch of two new tables, killed after the first one's commit: before the second table was
    created (`open` must not report the first one's checkpoint for every table: the replay would be skipped
    for the second) or after its create and before its rows (the create must not record the batch's ts)."""
    other = shape("shop", "items")
    batch: list[RowChange | Resolved] = [ins(T, 1, 1, "a"), ins(other, 1, 1, "i"), resolved(1)]
    real = getattr(sink_class, killed_in)
    first: list[Any] = []

    def killed_at_the_second_table(self: LakeSink, name: Any, *args: Any) -> Any:
        if first and name != first[0]:
            raise OSError("killed")
        first[:] = [name]
        return real(self, name, *args)

    monkeypatch.setattr(sink_class, killed_in, killed_at_the_second_table)
    crashing = sink_class(tmp_path)
    crashing.open()
    crashing.write(batch)
    with pytest.raises(OSError, match="killed"):
        crashing.flush()
    crashing.close()
    monkeypatch.setattr(sink_class, killed_in, real)
    assert first == [("shop", "orders")]

    restarted = sink_class(tmp_path)
    assert restarted.open() == 0  # no root checkpoint yet: items holds nothing
    restarted.write(batch)  # the replay: orders skips it, items applies it
    assert restarted.flush() == ts(1)
    for name, note in ((("shop", "orders"), "a"), (("shop", "items"), "i")):
        if isinstance(restarted, DeltaSink):
            stored = read_delta(restarted.table_path(name))
        else:
            assert isinstance(restarted, IcebergSink)
            stored = restarted.catalog.load_table(name).scan().to_arrow()
        assert stored.column("note").to_pylist() == [note], name


def test_untouched_tables_follow_the_root_checkpoint(tmp_path: Path) -> None:
    other = shape("shop", "items")
    s = sink(tmp_path)
    s.write([ins(T, 1, 1, "a"), ins(other, 1, 1, "i"), resolved(1)])
    s.flush()
    s.write([ins(T, 2, 2, "b"), resolved(9)])  # items untouched, complete to 9 all the same
    assert s.flush() == ts(9)
    assert DeltaSink(tmp_path).open() == ts(9)


@pytest.mark.parametrize(
    ("schema", "table"),
    [
        ("../../esc", "../../../pwn"),
        ("a/b", "c"),
        ("a", "b/c"),
        ("..", "."),
        ("店", "表/ü"),
        ("_spark_checkpoint", "x"),
    ],
)
def test_names_from_data_stay_under_the_root(tmp_path: Path, schema: str, table: str) -> None:
    root = tmp_path / "l1" / "l2" / "root"
    s = sink(root)
    t = shape(schema, table)
    s.write([ins(t, 1, 1, f"{schema}|{table}"), resolved(1)])
    s.flush()
    inside = [
        p for p in tmp_path.rglob("*") if not p.is_relative_to(root) and p not in (root.parent, root.parent.parent)
    ]
    assert inside == []
    reopened = DeltaSink(root)
    reopened.open()
    assert reopened.table_version((schema, table)) == ts(1)
    assert rows(reopened.table_path((schema, table)))[0]["note"] == f"{schema}|{table}"


def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "evil").symlink_to(tmp_path / "elsewhere")
    s = sink(root)
    with pytest.raises(PathEscapeError):
        s.write([ins(shape("evil", "t"), 1, 1, "x"), resolved(1)])
        s.flush()


def test_time_travel_by_commit_ts(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.write([ins(T, 1, 1, "a"), resolved(1)])
    s.flush()
    s.write([upd(T, 2, (1, "a", D("1.00")), (1, "b", D("1.00"))), resolved(2)])
    s.flush()
    path = tmp_path / "shop/orders"
    v = version_at(path, ts(1))
    assert v is not None
    assert rows(path, v)[0]["note"] == "a"
    assert rows(path, version_at(path, ts(2) + 5))[0]["note"] == "b"


def test_table_without_key_is_refused_in_scd2(tmp_path: Path) -> None:
    keyless = TableSchema("s", "k", (Column("v", TypeCode.INT),))
    s = DeltaSink(tmp_path, LakeOptions(mode="scd2"))
    with pytest.raises(LakeError, match=r"'s'\.'k' has no primary key.*mode=scd2.*commit ts"):
        s.write([RowChange(Op.INSERT, keyless, ts(1), new=(1,))])


def test_timestamps_are_instants_in_the_changefeed_zone(tmp_path: Path) -> None:
    t = shape(extra=(Column("at", TypeCode.TIMESTAMP, decimal=6), Column("wall", TypeCode.DATETIME, decimal=6)))
    s = sink(tmp_path, time_zone="Asia/Shanghai")
    s.write([ins(t, 1, 1, "a", "1.00", "2024-05-01 08:00:00.123456", "2024-05-01 08:00:00.123456"), resolved(1)])
    s.flush()
    (row,) = rows(tmp_path / "shop/orders")
    assert row["at"] == dt.datetime(2024, 5, 1, 0, 0, 0, 123456, tzinfo=dt.UTC)
    assert row["wall"] == dt.datetime(2024, 5, 1, 8, 0, 0, 123456)
