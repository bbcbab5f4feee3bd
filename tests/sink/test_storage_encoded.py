"""The storage sink's two halves: `StorageEncoder` (executors) and `StorageWriter.write_encoded` (driver)."""

from __future__ import annotations

import pickle
from decimal import Decimal
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from changefeed.codec import CodecOptions
from changefeed.files.layout import SchemaFile
from changefeed.model import Event, Op, Resolved, RowChange
from changefeed.sink.storage.writer import DataSegment, StorageEncoder, StorageOptions, StorageWriter, _roll

from .test_storage import T, _ins

CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True, clock=int)
FLAT = StorageOptions(date_separator="none", file_size=300)


def _segment(lines: list[bytes]) -> DataSegment:
    ends, size = [], 0
    for line in lines:
        size += len(line)
        ends.append(size)
    return DataSegment("d", SchemaFile("s", "t", 1), None, b"", b"".join(lines), ends, list(range(len(lines))))


def _greedy(lines: list[bytes], file_size: int) -> list[bytes]:
    """TiCDC's rule, line by line: a new file when the next line would pass file-size."""
    files: list[list[bytes]] = [[]]
    size = 0
    for line in lines:
        if size and size + len(line) > file_size:
            files.append([])
            size = 0
        files[-1].append(line)
        size += len(line)
    return [b"".join(f) for f in files if f]


@given(
    st.lists(st.lists(st.binary(min_size=1, max_size=40), max_size=12), max_size=4),
    st.integers(min_value=1, max_value=120),
)
def test_rolling_over_segments_equals_the_line_by_line_rule(segments: list[list[bytes]], file_size: int) -> None:
    flat = [line for seg in segments for line in seg]
    assert list(_roll([_segment(s) for s in segments if s], file_size)) == _greedy(flat, file_size)


@given(st.lists(st.booleans(), min_size=1, max_size=20))
def test_select_keeps_the_chosen_lines(keep: list[bool]) -> None:
    lines = [f"line {i}\n".encode() for i in range(len(keep))]
    got = _segment(lines).select(keep)
    assert got.data == b"".join(line for line, k in zip(lines, keep, strict=True) if k)
    assert got.commit_ts == [i for i, k in enumerate(keep) if k]
    assert got.ends[-1:] == ([len(got.data)] if got.data else [])


def _events() -> list[Event]:
    rows: list[Event] = [_ins(i, 100 + i) for i in range(12)]
    update = RowChange(Op.UPDATE, T, 120, new=(1, "x", Decimal("9.99")), old=(1, "n1", Decimal("0.01")))
    return [*rows[:6], Resolved(105), *rows[6:], update, Resolved(130)]


def test_encoded_path_writes_what_the_event_path_writes(tmp_path: Path) -> None:
    """Segments from a pickled encoder (as in an executor), written in several calls, give the same files."""
    events = _events()
    direct = StorageWriter(tmp_path / "direct", CODEC, FLAT)
    direct.write(events)
    direct.flush()

    encoder = pickle.loads(pickle.dumps(StorageEncoder(CODEC, FLAT)))
    items = list(encoder.encode(events))
    segments = [i for i in items if isinstance(i, DataSegment)]
    assert len(segments) == 2 and sum(s.rows for s in segments) == 13  # a Resolved closes the open segment
    assert segments[0].counts == {("insert", "shop.orders"): 6}
    encoded = StorageWriter(tmp_path / "encoded", CODEC, FLAT)
    for item in items:
        encoded.write_encoded([item])
    encoded.flush()
    tree = {p.relative_to(tmp_path / "direct"): p.read_bytes() for p in (tmp_path / "direct").rglob("*") if p.is_file()}
    assert len([p for p in tree if p.name.startswith("CDC0")]) > 1  # rolled at 300 bytes
    assert {
        p.relative_to(tmp_path / "encoded"): p.read_bytes() for p in (tmp_path / "encoded").rglob("*") if p.is_file()
    } == tree


def test_replayed_segments_are_dropped_and_uncovered_lines_wait(tmp_path: Path) -> None:
    events = _events()
    items = list(StorageEncoder(CODEC, FLAT).encode(events))
    first = StorageWriter(tmp_path, CODEC, FLAT)
    first.write_encoded(items[:2])  # rows 0-5 and Resolved(105)
    assert first.flush() == 105
    files = sorted(tmp_path.rglob("CDC0*.json"))
    replay = StorageWriter(tmp_path, CODEC, FLAT)  # a restart replays the whole batch from the start
    replay.write_encoded(items[:3])  # rows 0-5 again, then rows 6-12 with no Resolved covering them
    assert replay.flush() == 105
    assert sorted(tmp_path.rglob("CDC0*.json")) == files  # nothing replayed, nothing uncovered published
    replay.write_encoded(items[3:])
    assert replay.flush() == 130
    assert len(sorted(tmp_path.rglob("CDC0*.json"))) > len(files)
