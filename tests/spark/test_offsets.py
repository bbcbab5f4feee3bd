"""Offset planning and partition reads of the data source inputs, driven directly (no JVM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from changefeed.codec import CodecOptions
from changefeed.model import Resolved
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import BinlogInput, SourceOptions, StorageInput

from .helpers import BINLOG, captured, expected_changes

CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)


def _read(source: Any, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [row for p in source.partitions(start, end, ChangelogRows()) for row in p.rows()]


def test_binlog_ranges_cover_the_capture_exactly_once() -> None:
    source = BinlogInput(SourceOptions.parse({"input": "binlog", "path": str(BINLOG), "eventsperpartition": "3"}))
    offset, rows, batches = source.initial_offset(), [], 0
    while True:
        end = source.latest_offset(offset, 5, None)
        if end == offset:
            break
        rows += _read(source, offset, end)
        offset, batches = end, batches + 1
    assert batches > 3
    assert [r[1:8] for r in rows if r[0] == "row"] == expected_changes("row")
    assert offset["pos"] == captured()[-1].position["pos"]


def test_storage_files_published_ahead_of_the_checkpoint_are_read_again(tmp_path: Path) -> None:
    """An offset taken between a flush's data files and its checkpoint loses and repeats nothing."""
    events = list(captured())
    cut = next(i for i, e in enumerate(events) if isinstance(e, Resolved) and i > len(events) // 2)
    writer = StorageWriter(tmp_path, CODEC)
    writer.write_all(events[: cut + 1])
    writer.flush()
    source = StorageInput(
        SourceOptions.parse({"input": "storage", "path": str(tmp_path), "enable-tidb-extension": "true"})
    )
    metadata = (tmp_path / "metadata").read_bytes()
    writer.write_all(events[cut + 1 :])
    writer.flush()
    final = (tmp_path / "metadata").read_bytes()
    (tmp_path / "metadata").write_bytes(metadata)  # observed mid-flush: new files, old checkpoint
    start = source.initial_offset()
    first = source.latest_offset(start, None, None)
    (tmp_path / "metadata").write_bytes(final)
    second = source.latest_offset(first, None, None)
    assert source.latest_offset(second, None, None) == second
    rows = _read(source, start, first) + _read(source, first, second)
    got = [r[1:8] for r in rows if r[0] == "row"]
    assert sorted(got, key=repr) == sorted(expected_changes("row"), key=repr)
    assert [r[4] for r in rows if r[0] == "resolved"] == [first["checkpoint"], second["checkpoint"]]
