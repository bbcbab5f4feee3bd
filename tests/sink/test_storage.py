"""Storage sink writer and reader: round trips, following a growing directory, replays."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec import CodecOptions
from changefeed.consume.storage import ReaderPosition, StorageReader
from changefeed.files.layout import SchemaFile
from changefeed.model import (
    ActionType,
    Column,
    DDLEvent,
    Event,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
)
from changefeed.sink.storage import writer as writer_module
from changefeed.sink.storage.writer import StorageOptions, StorageWriter, read_checkpoint
from tests.strategies import row_changes, tables

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
T = TableSchema(
    "shop",
    "orders",
    (
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("note", TypeCode.VARCHAR, length=64, **UTF8),
        Column("amount", TypeCode.DECIMAL, length=10, decimal=2),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=7,
    version=5,  # a table version precedes the commit ts of its rows
)
NOW = dt.datetime(2024, 5, 1, 12, 0)


def _codec(protocol: str, **kw: object) -> CodecOptions:
    csv = {"include_commit_ts": True} if protocol == "csv" else {}
    return CodecOptions(protocol=protocol, enable_tidb_extension=True, clock=lambda: 0, **{**csv, **kw})  # type: ignore[arg-type]


def _ins(i: int, ts: int) -> RowChange:
    return RowChange(Op.INSERT, T, ts, new=(i, f"n{i}", Decimal(i).scaleb(-2)))


def _rows_only(events: list[Event]) -> list[RowChange]:
    return [e for e in events if isinstance(e, RowChange)]


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_round_trip_and_layout(tmp_path: Path, protocol: str) -> None:
    codec = _codec(protocol)
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    events: list[Event] = [_ins(i, 1000 + i) for i in range(5)]
    events.append(RowChange(Op.UPDATE, T, 1010, new=(1, "x", Decimal("9.99")), old=(1, "n1", Decimal("0.01"))))
    events.append(RowChange(Op.DELETE, T, 1011, old=(2, "n2", Decimal("0.02"))))
    w.write([*events, Resolved(1012)])
    assert w.flush() == 1012  # Resolved(R): everything at or below R is in
    ext = ".json" if protocol == "canal-json" else ".csv"
    data = tmp_path / "shop/orders/5/2024-05-01" / f"CDC{1:020d}{ext}"
    assert data.exists()
    assert (data.parent / "meta/CDC.index").read_text() == data.name + "\n"
    schema_file = SchemaFile.from_table(T, 5)
    assert (tmp_path / schema_file.path()).exists()
    assert read_checkpoint(tmp_path) == 1012

    got = StorageReader(tmp_path, codec).poll()
    assert isinstance(got[-1], Resolved) and got[-1].commit_ts == 1012
    rows = _rows_only(got)
    assert [(r.op, r.commit_ts) for r in rows] == [(e.op, e.commit_ts) for e in events]
    for r, e in zip(rows, events, strict=True):
        assert r.new == e.new
        if protocol == "canal-json" or e.op is not Op.UPDATE:  # CSV without old value has no old image
            assert r.old == e.old


def test_reader_follows_a_growing_directory(tmp_path: Path) -> None:
    codec = _codec("canal-json")
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    r = StorageReader(tmp_path, codec)
    assert r.poll() == []  # nothing published yet
    w.write([_ins(1, 10), _ins(2, 11), Resolved(12)])
    w.flush()
    assert [e.commit_ts for e in _rows_only(r.poll())] == [10, 11]
    assert r.poll() == []  # no new checkpoint, nothing new
    # A transaction split across two flushes: its first half is published before the
    # checkpoint covers it, so the reader must hold it, not emit half a transaction.
    w.write([_ins(3, 20), _ins(4, 20)])
    w.flush()
    assert r.poll() == []
    w.write([_ins(5, 20), Resolved(21)])
    w.flush()
    assert [(e.new[0], e.commit_ts) for e in _rows_only(r.poll())] == [(3, 20), (4, 20), (5, 20)]


def test_replay_after_a_crash_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codec = _codec("canal-json")
    batch1 = [_ins(1, 10), _ins(2, 11), Resolved(12)]
    batch2 = [_ins(3, 20), Resolved(21)]
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    w.write(batch1)
    w.flush()
    w.write(batch2)
    real_write = writer_module.write_atomically

    def crash_on_checkpoint(path: Path, data: bytes) -> None:
        if path.name == "metadata":
            raise OSError("killed before the checkpoint was written")
        real_write(path, data)

    monkeypatch.setattr(writer_module, "write_atomically", crash_on_checkpoint)
    with pytest.raises(OSError, match="killed"):
        w.flush()  # data file 2 is published, the checkpoint is not
    monkeypatch.undo()
    directory = tmp_path / "shop/orders/5/2024-05-01"
    assert read_checkpoint(tmp_path) == 12 and (directory / f"CDC{2:020d}.json").exists()

    reader = StorageReader(tmp_path, codec)
    assert [e.new[0] for e in _rows_only(reader.poll())] == [1, 2]
    # Restart: the writer drops the unfinished flush's file, then the job replays from the checkpoint.
    w2 = StorageWriter(tmp_path, codec, now=lambda: NOW)
    assert not (directory / f"CDC{2:020d}.json").exists()
    w2.write([_ins(2, 11), *batch2])
    w2.flush()
    assert [e.new[0] for e in _rows_only(reader.poll())] == [3]  # row 3 once, row 2 not again
    files = sorted(p.name for p in directory.glob("CDC*.json"))
    assert files == [f"CDC{i:020d}.json" for i in (1, 2)]
    # A fresh reader from scratch sees every row exactly once.
    assert [e.new[0] for e in _rows_only(StorageReader(tmp_path, codec).poll())] == [1, 2, 3]


def test_rows_above_the_checkpoint_wait_for_their_resolved(tmp_path: Path) -> None:
    codec = _codec("canal-json")
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    w.write([_ins(1, 10), Resolved(11), _ins(2, 30)])
    w.flush()
    assert [e.new[0] for e in _rows_only(StorageReader(tmp_path, codec).poll())] == [1]
    assert len(list(tmp_path.rglob("CDC0*.json"))) == 1  # row 2 is not published yet
    w.write([Resolved(31)])
    w.flush()
    assert [e.new[0] for e in _rows_only(StorageReader(tmp_path, codec).poll())] == [1, 2]


def test_reader_resumes_from_its_position(tmp_path: Path) -> None:
    codec = _codec("csv")
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    w.write([_ins(1, 10), Resolved(11)])
    w.flush()
    first = StorageReader(tmp_path, codec)
    first.poll()
    saved = first.position.to_json()
    w.write([_ins(2, 30), Resolved(31)])
    w.flush()
    resumed = StorageReader(tmp_path, codec, ReaderPosition.from_json(saved))
    assert [e.new[0] for e in _rows_only(resumed.poll())] == [2]


def test_ddl_schema_files_and_versions(tmp_path: Path) -> None:
    codec = _codec("csv")
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    t2 = TableSchema("shop", "orders", (*T.columns, Column("extra", TypeCode.INT)), T.indexes, 7, version=200)
    ddl = DDLEvent("shop", "orders", "ALTER TABLE orders ADD extra INT", ActionType.ADD_COLUMN, 200, t2, T)
    w.write([_ins(1, 150), ddl, RowChange(Op.INSERT, t2, 250, new=(2, "b", Decimal("1.00"), 5)), Resolved(251)])
    w.write([DDLEvent("shop", "", "CREATE DATABASE shop", ActionType.CREATE_SCHEMA, 90)])
    w.flush()
    assert (tmp_path / SchemaFile.from_table(t2, 200, ddl.query, ddl.ddl_type).path()).exists()
    assert list((tmp_path / "shop/meta").glob("schema_90_*.json"))
    events = StorageReader(tmp_path, codec).poll()
    kinds = [(e.kind, e.commit_ts) for e in events]
    assert kinds == [("ddl", 90), ("row", 150), ("ddl", 200), ("row", 250), ("resolved", 251)]
    assert events[3].new == (2, "b", Decimal("1.00"), 5)


def test_partitioned_tables_and_file_rolling(tmp_path: Path) -> None:
    codec = _codec("canal-json")
    pt = TableSchema("s", "p", T.columns, T.indexes, table_id=9, version=5, partitioned=True)
    w = StorageWriter(tmp_path, codec, StorageOptions(date_separator="none", file_size=200, file_index_width=6))
    rows = [RowChange(Op.INSERT, pt, 10 + i, new=(i, "x" * 50, Decimal("1.00")), partition_id=91) for i in range(6)]
    w.write([*rows, Resolved(100)])
    w.flush()
    files = sorted((tmp_path / "s/p/5/91").glob("CDC*.json"))
    assert len(files) > 1 and files[0].name == "CDC000001.json"
    got = _rows_only(StorageReader(tmp_path, codec).poll())
    assert [r.new[0] for r in got] == list(range(6))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_round_trip_every_type(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    table = data.draw(tables())
    rows = data.draw(st.lists(row_changes(table), min_size=1, max_size=5))
    for i, row in enumerate(rows):  # a table version precedes its rows' commit ts
        row.commit_ts = table.version + 1 + i
    root = tmp_path_factory.mktemp("st")
    codec = _codec("canal-json")
    w = StorageWriter(root, codec, StorageOptions(date_separator="none"))
    w.write([*rows, Resolved(rows[-1].commit_ts + 1)])
    w.flush()
    got = _rows_only(StorageReader(root, codec).poll())
    assert [(r.op, r.commit_ts, r.new) for r in got] == [(r.op, r.commit_ts, r.new) for r in rows]


def test_csv_without_commit_ts_uses_file_positions(tmp_path: Path) -> None:
    codec = _codec("csv", include_commit_ts=False)
    w = StorageWriter(tmp_path, codec, now=lambda: NOW)
    w.write([_ins(1, 10), Resolved(11)])
    w.flush()
    r = StorageReader(tmp_path, codec)
    assert [(e.new[0], e.commit_ts) for e in _rows_only(r.poll())] == [(1, 11)]  # the checkpoint
    w.write([_ins(2, 20), Resolved(21)])
    w.flush()
    assert [(e.new[0], e.commit_ts) for e in _rows_only(r.poll())] == [(2, 21)]
