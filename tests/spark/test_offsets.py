"""Offset planning and partition reads of the data source inputs, driven directly (no JVM)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.codec import CodecOptions
from changefeed.model import Resolved
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import BinlogInput, ChangefeedDataSource, SourceOptions, StorageInput
from changefeed.spark.datasource.kafka import KafkaInput, fair_shares

from .helpers import BINLOG, captured, changelog_tuples, expected_changes

CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)


def _read(source: Any, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [row for p in source.partitions(start, end, ChangelogRows()) for row in changelog_tuples(p.rows())]


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
    writer.write(events[: cut + 1])
    writer.flush()
    source = StorageInput(
        SourceOptions.parse({"input": "storage", "path": str(tmp_path), "enable-tidb-extension": "true"})
    )
    metadata = (tmp_path / "metadata").read_bytes()
    writer.write(events[cut + 1 :])
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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50_000), min_size=1, max_size=6), st.integers(1, 30_000))
def test_kafka_fair_shares_fill_the_limit_and_never_overread(backlogs: list[int], limit: int) -> None:
    backlog = {str(p): n for p, n in enumerate(backlogs)}
    take = fair_shares(backlog, limit)
    assert all(0 <= take[p] <= backlog[p] for p in backlog)
    assert sum(take.values()) == min(limit, sum(backlogs))
    # Even where it can be: a partition gets less than another only when its backlog ran out.
    for p, q in itertools.permutations(backlog, 2):
        assert take[p] >= take[q] - 1 or take[p] == backlog[p]


def test_kafka_reads_a_bounded_backlog_per_batch_by_default() -> None:
    options = {"input": "kafka", "bootstrap.servers": "127.0.0.1:9", "topic": "t", "protocol": "open-protocol"}
    source = KafkaInput(SourceOptions.parse(options))
    assert SourceOptions.parse(options).max_events is None and source.DEFAULT_MAX_EVENTS == 10_000
    reader = ChangefeedDataSource(options).streamReader(None)  # type: ignore[arg-type]
    assert reader.max_events == 10_000
    assert ChangefeedDataSource({**options, "maxEventsPerTrigger": "50"}).streamReader(None).max_events == 50
    # One partition holds the table: it still gets (almost) the whole limit, not a third of it.
    target = {"topic": "t", "offsets": {"0": 40_000, "1": 3, "2": 3}}
    start = {"topic": "t", "offsets": {"0": 0, "1": 0, "2": 0}}
    end = source.latest_offset(start, 10_000, target)
    assert end["offsets"] == {"0": 9_994, "1": 3, "2": 3}
    assert source.latest_offset(end, None, target)["offsets"] == target["offsets"]


def _planned_ends(source: BinlogInput, limit: int) -> list[dict[str, Any]]:
    start, ends = source.initial_offset(), []
    while (end := source.latest_offset(start, limit, None)) != start:
        ends.append(end)
        start = end
    return ends


def test_the_next_batch_is_planned_ahead_with_the_same_offsets() -> None:
    """A batch that ended at its limit starts the next batch's scan in a thread (`_ScanAhead`): the offsets are
    the ones scanned in turn, each batch is scanned once, and a scan run ahead for other arguments is not used."""
    opts = SourceOptions.parse({"input": "binlog", "path": str(BINLOG), "eventsperpartition": "2"})
    ahead, plain = BinlogInput(opts), BinlogInput(opts)
    plain._ahead.start = lambda *args: None  # type: ignore[method-assign]
    scans: list[str] = []  # the thread of each scan
    inner = ahead._scan
    ahead._scan = lambda *args: scans.append(threading.current_thread().name) or inner(*args)  # type: ignore[method-assign]
    ends = _planned_ends(ahead, 3)
    assert ends == _planned_ends(plain, 3) and len(ends) > 3
    # Scanned while Spark waited: the first batch, the last one (its scan ahead reached the binlog's end:
    # more may have come since, so it is done again) and the call that found nothing new. Every other
    # batch was scanned ahead.
    assert scans.count("MainThread") == 3
    assert scans.count("changefeed-scan-ahead") == len(ends) - 1
    # The scan run ahead of the first batch's end is not taken for another limit.
    first = ahead.initial_offset()
    scans.clear()
    one = ahead.latest_offset(first, 3, None)
    running = ahead._ahead._thread
    assert running is not None
    running.join()
    assert sorted(scans) == ["MainThread", "changefeed-scan-ahead"]
    scans.clear()
    assert ahead.latest_offset(one, 5, None) == plain.latest_offset(one, 5, None)
    assert scans[0] == "MainThread"  # the scan run ahead for limit 3 dropped, this one's done here
    # Pickled for the executors without the thread and its lock.
    import pickle  # noqa: PLC0415

    third = BinlogInput(opts)
    assert third.latest_offset(first, 3, None) == one  # and a scan ahead is running
    copy = pickle.loads(pickle.dumps(third))
    assert copy.latest_offset(one, 5, None) == plain.latest_offset(one, 5, None)
