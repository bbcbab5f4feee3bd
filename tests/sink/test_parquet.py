"""Parquet snapshot sink: latest row per key, replays change nothing, schema changes carry over."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq

from changefeed.model import (
    ABSENT,
    ActionType,
    Column,
    DDLEvent,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
)
from changefeed.sink.parquet import ParquetSnapshotSink

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
T = TableSchema(
    "s",
    "t",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("v", TypeCode.VARCHAR, **UTF8),
        Column("d", TypeCode.DECIMAL, length=65, decimal=30),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)
D = Decimal("1." + "0" * 30)


def _read(root: Path) -> list[dict[str, object]]:
    return sorted(pq.read_table(root / "s/t/snapshot.parquet").to_pylist(), key=lambda r: r["id"])


def test_latest_row_per_key(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(
        [
            RowChange(Op.INSERT, T, 10, new=(1, "a", D)),
            RowChange(Op.INSERT, T, 10, new=(2, "b", None)),
            RowChange(Op.UPDATE, T, 11, new=(1, "a2", D), old=(1, "a", D)),
            RowChange(Op.UPDATE, T, 12, new=(3, "b", None), old=(2, "b", None)),  # key change
            RowChange(Op.INSERT, T, 13, new=(4, "x", None)),
            RowChange(Op.DELETE, T, 14, old=(4, "x", None)),
            Resolved(15),
        ]
    )
    assert sink.flush() == 15
    assert _read(tmp_path) == [{"id": 1, "v": "a2", "d": D}, {"id": 3, "v": "b", "d": None}]


def test_restart_and_replay_change_nothing(tmp_path: Path) -> None:
    events = [RowChange(Op.INSERT, T, 10, new=(1, "a", D)), Resolved(11)]
    first = ParquetSnapshotSink(tmp_path)
    first.write(events)
    first.flush()
    again = ParquetSnapshotSink(tmp_path)
    assert again.checkpoint_ts == 11
    again.write([*events, RowChange(Op.UPDATE, T, 20, new=(1, "b", D), old=(1, "a", D)), Resolved(21)])
    again.flush()
    assert _read(tmp_path) == [{"id": 1, "v": "b", "d": D}]


def test_minimal_images_keep_absent_columns(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(
        [
            RowChange(Op.INSERT, T, 10, new=(1, "a", D)),
            RowChange(Op.UPDATE, T, 11, new=(1, "z", ABSENT), old=(1, ABSENT, ABSENT)),
            Resolved(12),
        ]
    )
    sink.flush()
    assert _read(tmp_path) == [{"id": 1, "v": "z", "d": D}]


def test_schema_change_and_truncate(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    t2 = TableSchema("s", "t", (*T.columns, Column("n", TypeCode.BIGINT)), T.indexes, version=5)
    sink.write(
        [
            RowChange(Op.INSERT, T, 1, new=(1, "a", None)),
            DDLEvent("s", "t", "ALTER TABLE t ADD n BIGINT", ActionType.ADD_COLUMN, 5, t2, T),
            RowChange(Op.INSERT, t2, 6, new=(2, "b", None, 7)),
            Resolved(7),
        ]
    )
    sink.flush()
    rows = pq.read_table(tmp_path / "s/t/snapshot.parquet").to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"id": 1, "v": "a", "d": None, "n": None},
        {"id": 2, "v": "b", "d": None, "n": 7},
    ]
    sink.write([DDLEvent("s", "t", "TRUNCATE TABLE t", ActionType.TRUNCATE_TABLE, 8, t2), Resolved(9)])
    sink.flush()
    assert pq.read_table(tmp_path / "s/t/snapshot.parquet").num_rows == 0


def test_tables_without_a_key_are_multisets(tmp_path: Path) -> None:
    nokey = TableSchema("s", "t", (Column("id", TypeCode.INT), Column("v", TypeCode.VARCHAR, **UTF8)))
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(
        [
            RowChange(Op.INSERT, nokey, 1, new=(1, "a")),
            RowChange(Op.INSERT, nokey, 1, new=(1, "a")),
            RowChange(Op.DELETE, nokey, 2, old=(1, "a")),
            Resolved(3),
        ]
    )
    sink.flush()
    assert pq.read_table(tmp_path / "s/t/snapshot.parquet").to_pylist() == [{"id": 1, "v": "a"}]


def test_decimal_without_precision_is_exact_text(tmp_path: Path) -> None:
    # Open Protocol carries a DECIMAL's type code but not its precision or scale.
    shape = TableSchema(
        "s",
        "t",
        (Column("id", TypeCode.INT, nullable=False), Column("d", TypeCode.DECIMAL)),
        (Index("PRIMARY", ("id",), primary=True),),
    )
    values = [Decimal("12.34"), Decimal("-0.000000000000000000000000000001"), Decimal("9" * 65), None]
    sink = ParquetSnapshotSink(tmp_path)
    sink.write([RowChange(Op.INSERT, shape, 10, new=(i, v)) for i, v in enumerate(values)] + [Resolved(11)])
    sink.flush()
    table = pq.read_table(tmp_path / "s/t/snapshot.parquet")
    assert str(table.schema.field("d").type) == "string"
    got = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert [r["d"] for r in got] == ["12.34", "-0.000000000000000000000000000001", "9" * 65, None]
    again = ParquetSnapshotSink(tmp_path)  # reloads the snapshot: text back to exact Decimal
    again.write([RowChange(Op.UPDATE, shape, 20, new=(0, Decimal("1.5")), old=(0, values[0])), Resolved(21)])
    again.flush()
    assert sorted(pq.read_table(tmp_path / "s/t/snapshot.parquet").to_pylist(), key=lambda r: r["id"])[1:] == got[1:]


def test_rename_moves_the_rows(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    renamed = T.renamed("s", "t2")
    sink.write([RowChange(Op.INSERT, T, 1, new=(1, "a", None)), Resolved(1)])
    sink.flush()
    # As a storage schema file or a Canal-JSON message gives it: no shape before the rename.
    sink.write(
        [
            DDLEvent("s", "t2", "RENAME TABLE `t` TO `t2`", ActionType.RENAME_TABLE, 2, renamed),
            RowChange(Op.INSERT, renamed, 3, new=(2, "b", None)),
            Resolved(3),
        ]
    )
    sink.flush()
    assert not (tmp_path / "s/t/snapshot.parquet").exists()
    rows = pq.read_table(tmp_path / "s/t2/snapshot.parquet").to_pylist()
    assert sorted(r["id"] for r in rows) == [1, 2]


def test_rename_after_restart_and_swap(tmp_path: Path) -> None:
    first = ParquetSnapshotSink(tmp_path)
    other = T.renamed("s", "u")
    first.write([RowChange(Op.INSERT, T, 1, new=(1, "t", None)), RowChange(Op.INSERT, other, 1, new=(2, "u", None))])
    first.write([Resolved(1)])
    first.flush()
    again = ParquetSnapshotSink(tmp_path)  # the old snapshots are only on disk now
    query = "RENAME TABLE s.t TO s.tmp, s.u TO s.t, s.tmp TO s.u"
    again.write([DDLEvent("s", "u", query, ActionType.RENAME_TABLES, 2, other), Resolved(2)])
    again.flush()
    assert [r["v"] for r in _read(tmp_path)] == ["u"]
    assert [r["v"] for r in pq.read_table(tmp_path / "s/u/snapshot.parquet").to_pylist()] == ["t"]
    assert not (tmp_path / "s/tmp").exists() or not (tmp_path / "s/tmp/snapshot.parquet").exists()


def test_multi_rename_of_different_shapes_after_restart(tmp_path: Path) -> None:
    first = ParquetSnapshotSink(tmp_path)
    narrow = TableSchema(
        "s", "n", (Column("id", TypeCode.INT, nullable=False),), (Index("PRIMARY", ("id",), primary=True),)
    )
    first.write([RowChange(Op.INSERT, T, 1, new=(1, "t", D)), RowChange(Op.INSERT, narrow, 1, new=(7,)), Resolved(1)])
    first.flush()
    again = ParquetSnapshotSink(tmp_path)  # neither table in memory: shapes come from the snapshots
    query = "RENAME TABLE s.t TO s.t2, s.n TO s.n2"
    again.write([DDLEvent("s", "n2", query, ActionType.RENAME_TABLES, 2, narrow.renamed("s", "n2")), Resolved(2)])
    again.flush()
    assert pq.read_table(tmp_path / "s/t2/snapshot.parquet").to_pylist() == [{"id": 1, "v": "t", "d": D}]
    assert pq.read_table(tmp_path / "s/n2/snapshot.parquet").to_pylist() == [{"id": 7}]
    assert not (tmp_path / "s/t/snapshot.parquet").exists() and not (tmp_path / "s/n/snapshot.parquet").exists()


def test_crash_before_the_checkpoint_replays_the_rename(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    sink.write([RowChange(Op.INSERT, T, 1, new=(1, "a", None)), Resolved(1)])
    sink.flush()
    rename = DDLEvent("s", "t2", "ALTER TABLE t RENAME TO t2", ActionType.RENAME_TABLE, 3, T.renamed("s", "t2"))
    batch = [RowChange(Op.DELETE, T, 2, old=(1, "a", None)), RowChange(Op.INSERT, T, 2, new=(5, "e", None)), rename]
    crashed = ParquetSnapshotSink(tmp_path)
    crashed.write(batch)
    crashed._pending_checkpoint = crashed.checkpoint_ts  # as if killed after the snapshots, before the checkpoint
    crashed.flush()
    assert (tmp_path / "s/t/snapshot.parquet").exists()  # not removed before a checkpoint covers the rename
    replay = ParquetSnapshotSink(tmp_path)
    replay.write([*batch, Resolved(3)])
    replay.flush()
    assert not (tmp_path / "s/t/snapshot.parquet").exists()
    assert pq.read_table(tmp_path / "s/t2/snapshot.parquet").to_pylist() == [{"id": 5, "v": "e", "d": None}]
