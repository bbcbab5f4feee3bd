"""The replay rule of the file sinks: rows at or below the checkpoint stored when the run began are
a restart's replay (skipped); a row at or below a Resolved the sink already received in the same
run is a broken stream (`ResolvedContradictionError` naming the row and the Resolved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from changefeed.codec import CodecOptions
from changefeed.errors import ChangefeedError
from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.sink.replay import ResolvedContradictionError
from changefeed.sink.storage.writer import StorageWriter

TABLE = TableSchema(
    "db",
    "t",
    (Column("id", TypeCode.INT, nullable=False), Column("v", TypeCode.INT)),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=7,
)


def row(ts: int, ident: int) -> RowChange:
    return RowChange(Op.INSERT, TABLE, ts, new=(ident, ts), position={"file": "binlog.000001", "pos": ts})


def stream(*tss: int) -> list[RowChange | Resolved]:
    """A row per commit ts, each followed by its Resolved."""
    out: list[RowChange | Resolved] = []
    for ts in tss:
        out += [row(ts, ts), Resolved(ts)]
    return out


def _assert_names_row_and_resolved(err: ResolvedContradictionError, ts: int, resolved: int) -> None:
    assert isinstance(err, ChangefeedError)
    assert err.where is not None
    assert f"db.t commit ts {ts}" in err.where and f"Resolved {resolved}" in err.where
    assert "same run" in err.message


def test_parquet_row_below_a_resolved_of_this_run_raises(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(stream(10, 20))
    with pytest.raises(ResolvedContradictionError) as caught:
        sink.write([row(15, 99)])  # before any flush: the Resolved alone says 15 is past
    _assert_names_row_and_resolved(caught.value, 15, 20)
    assert "pos=15" in (caught.value.where or "")
    sink.flush()
    with pytest.raises(ResolvedContradictionError):
        sink.write([row(20, 98)])  # at the Resolved ts itself
    assert sink.table_rows("db", "t") == 2


def test_parquet_restart_replay_below_the_stored_checkpoint_is_skipped(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(stream(10, 20))
    assert sink.flush() == 20
    again = ParquetSnapshotSink(tmp_path)  # a restart: the source replays from before the checkpoint
    again.write(stream(10, 20, 30))
    assert again.flush() == 30
    assert again.table_rows("db", "t") == 3
    with pytest.raises(ResolvedContradictionError, match="after Resolved 30"):
        again.write([row(25, 97)])  # above the stored checkpoint, below this run's Resolved


def _writer(root: Path) -> StorageWriter:
    return StorageWriter(root, CodecOptions(protocol="canal-json"))


def test_storage_writer_row_below_a_resolved_of_this_run_raises(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.write(stream(10, 20))
    with pytest.raises(ResolvedContradictionError) as caught:
        writer.write([row(15, 99)])
    _assert_names_row_and_resolved(caught.value, 15, 20)
    writer.flush()
    with pytest.raises(ResolvedContradictionError, match="after Resolved 20"):
        writer.write([row(20, 98)])


def test_storage_writer_restart_replay_below_the_stored_checkpoint_is_skipped(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.write(stream(10, 20))
    assert writer.flush() == 20
    again = _writer(tmp_path)
    assert again.replay_ts == 20
    again.write(stream(10, 20, 30))  # rows 10 and 20 are the replay: skipped, no error
    assert again.flush() == 30
    lines = [line for f in sorted(tmp_path.rglob("*.json")) if "CDC" in f.name for line in f.read_text().splitlines()]
    assert len(lines) == 3  # each row published once
    with pytest.raises(ResolvedContradictionError):
        again.write([row(25, 97)])
