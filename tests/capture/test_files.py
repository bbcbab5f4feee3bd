"""File mode on the committed fixture binlogs (tests/fixtures/binlog): no server needed."""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from changefeed.capture.binlog import BinlogFileReader, BinlogPosition, BlockAllowList, file_capture
from changefeed.capture.binlog.events import EventParser, RowsEvent
from changefeed.errors import CaptureError
from changefeed.model.ddl import ActionType
from changefeed.model.events import DDLEvent, Event, Op, Resolved, RowChange
from changefeed.model.jsonl import EventReader, dumps_event
from changefeed.model.types import ColumnFlag, TypeCode

from .workload import EXPECTED, SCHEMA, compare

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"
FULL = FIXTURES / "full"


def capture_all(path: Path, start: BinlogPosition | None = None, **kwargs: Any) -> list[Event]:
    return list(file_capture(path, start, **kwargs).events())


@pytest.fixture(scope="module")
def full_events() -> list[Event]:
    return capture_all(FULL)


@pytest.mark.parametrize("variant", ["full", "nocrc"])
def test_fixture_matches_workload(variant: str) -> None:
    compare(capture_all(FIXTURES / variant))


def test_transactions_share_one_ts_and_resolved_follows(full_events: list[Event]) -> None:
    groups: list[list[Event]] = [[]]
    for ev in full_events:
        groups[-1].append(ev)
        if isinstance(ev, Resolved):
            groups.append([])
    assert not groups[-1]
    last = 0
    for group in groups[:-1]:
        *changes, resolved = group
        assert isinstance(resolved, Resolved)
        assert all(ev.commit_ts > last for ev in changes)
        rows = [ev for ev in changes if isinstance(ev, RowChange)]
        assert len({ev.commit_ts for ev in rows}) <= 1  # one transaction, one commit ts
        if changes:
            assert resolved.commit_ts == max(ev.commit_ts for ev in changes)  # covers <= (TiCDC)
        last = resolved.commit_ts
    multi = next(g for g in groups if len([e for e in g if isinstance(e, RowChange)]) == 4)
    assert [e.op for e in multi if isinstance(e, RowChange)] == [Op.INSERT, Op.UPDATE, Op.DELETE, Op.UPDATE]


def test_table_schema_from_metadata(full_events: list[Event]) -> None:
    ints = next(e for e in full_events if isinstance(e, RowChange) and e.table == "ints")
    ts = ints.table_schema
    assert [c.name for c in ts.columns][:4] == ["id", "ti", "tu", "si"]
    assert ts.column("tu").unsigned and not ts.column("ti").unsigned
    assert ts.column("bu").unsigned and ts.column("b64").type_code is TypeCode.BIT and ts.column("b64").length == 64
    assert ts.column("id").flags & ColumnFlag.PRIMARY_KEY and not ts.column("id").nullable
    assert ts.column("y").type_code is TypeCode.YEAR
    strs = next(e for e in full_events if isinstance(e, RowChange) and e.table == "strs").table_schema
    assert (strs.column("l1").charset, strs.column("l1").length) == ("latin1", 10)
    assert strs.column("vc").length == 300 and strs.column("vc").charset == "utf8mb4"
    assert strs.column("vb").type_name == "varbinary" and strs.column("bin").type_name == "binary"
    assert strs.column("tb").type_name == "tinyblob" and strs.column("lt").type_name == "longtext"
    assert strs.column("e").elements == ("a", "b", "c") and strs.column("s").elements == ("x", "y", "z")
    nums = next(e for e in full_events if isinstance(e, RowChange) and e.table == "nums").table_schema
    assert (nums.column("d65").length, nums.column("d65").decimal) == (65, 30)
    assert nums.column("d52").unsigned
    times = next(e for e in full_events if isinstance(e, RowChange) and e.table == "times").table_schema
    assert times.column("ts6").decimal == 6 and times.column("t0").decimal == 0


def test_schema_version_is_the_last_ddl_ts(full_events: list[Event]) -> None:
    version = {}
    for ev in full_events:
        if ev.kind == "ddl" and ev.table:
            version[ev.table] = ev.commit_ts
        elif isinstance(ev, RowChange):
            assert ev.table_schema.version == version[ev.table], ev
    ddls = [(e.table, e.action) for e in full_events if e.kind == "ddl" and e.table]
    assert ddls[-4:] == [
        ("ints", ActionType.ADD_COLUMN),
        ("ints", ActionType.DROP_COLUMN),
        ("ints", ActionType.MODIFY_COLUMN),
        ("ints2", ActionType.RENAME_TABLE),
    ]
    assert all(e.schema == SCHEMA for e in full_events if e.kind == "ddl")


def _key(ev: Event, schema: bool = True) -> tuple[Any, ...]:
    """The event as JSON; a DDL's pre_table_schema aside: it is the shape *this* capture last saw, so a
    capture resumed between the table's last rows and the DDL cannot know it (it gives None)."""
    if isinstance(ev, DDLEvent):
        ev = replace(ev, pre_table_schema=None, table_schema=ev.table_schema if schema else None)
    return (dumps_event(ev),)


def test_resume_from_every_position(full_events: list[Event]) -> None:
    """Restarting from any event's position re-emits nothing before it and loses nothing after it."""
    for i, ev in enumerate(full_events):
        assert ev.position is not None
        resumed = capture_all(FULL, BinlogPosition.from_dict(ev.position))
        assert [_key(e) for e in resumed] == [_key(e) for e in full_events[i + 1 :]], f"resume after event {i}"


def test_positions_are_savepoints_and_jsonl_roundtrip(full_events: list[Event]) -> None:
    resolved = [e for e in full_events if isinstance(e, Resolved)]
    assert resolved[0].position["file"] == "binlog.000001"
    assert resolved[-1].position["file"] == "binlog.000002"  # followed the rotation
    assert all("skip" not in e.position for e in resolved)
    reader = EventReader()
    for ev in full_events:
        back = reader.parse(dumps_event(ev))
        assert dumps_event(back) == dumps_event(ev)


def test_until_stops_at_a_transaction_boundary(full_events: list[Event]) -> None:
    target = next(e for e in full_events if isinstance(e, Resolved) and e.position["file"] == "binlog.000002")
    until = (target.position["file"], target.position["pos"])
    events = capture_all(FULL, until=until)
    assert events == [] or events[-1].position == target.position
    # A DDL just before ``until`` cannot look at the next transaction's TABLE_MAP: no table_schema there.
    assert [_key(e, schema=False) for e in events] == [
        _key(e, schema=False) for e in full_events[: full_events.index(target) + 1]
    ]


def test_filters_skip_rows_before_decoding() -> None:
    capture = file_capture(FULL, table_filter=BlockAllowList.build(ignore_tables=[f"{SCHEMA}.str*", "*.nums"]))
    events = list(capture.events())
    tables = {e.table for e in events if isinstance(e, RowChange)}
    assert tables == {"ints", "times", "ints2"}
    assert capture.rows_decoded == len([e for e in events if isinstance(e, RowChange)])
    only = capture_all(FULL, table_filter=BlockAllowList.build(do_tables=[f"{SCHEMA}.times"], ignore_ops=["delete"]))
    assert {e.table for e in only if e.kind != "resolved"} == {"", "times"}  # "": CREATE DATABASE cf
    nothing = capture_all(FULL, table_filter=BlockAllowList.build(ignore_dbs=["c?"]))
    assert all(isinstance(e, Resolved) for e in nothing)  # filtered groups still move the savepoint
    everything = [e for e in capture_all(FULL) if isinstance(e, Resolved)]
    assert [(e.position["file"], e.position["pos"]) for e in nothing] == [
        (e.position["file"], e.position["pos"]) for e in everything
    ]


def test_time_zone_renders_timestamps() -> None:
    events = capture_all(FULL, tz=ZoneInfo("Asia/Shanghai"), table_filter=BlockAllowList.build(do_tables=["*.times"]))
    rows = [e for e in events if isinstance(e, RowChange)]
    assert rows[1].as_dict()["ts0"] == "1970-01-01 08:00:01"
    assert rows[1].as_dict()["ts6"] == "2038-01-19 11:14:07.999999"
    assert rows[0].as_dict()["ts0"] == "0000-00-00 00:00:00"  # the zero timestamp has no zone
    assert rows[1].as_dict()["dt0"] == "9999-12-31 23:59:59"  # DATETIME is not zoned


def _first_rows_event(path: Path) -> tuple[int, int]:
    parser = EventParser()
    for raw in BinlogFileReader(path):
        assert raw is not None
        if isinstance(parser.parse(raw.data, ""), RowsEvent):
            return raw.pos, len(raw.data)
    raise AssertionError("no rows event")


def test_flipped_byte_is_a_crc_error_with_file_and_pos(tmp_path: Path) -> None:
    shutil.copytree(FULL, tmp_path / "b")
    pos, size = _first_rows_event(FULL / "binlog.000001")
    path = tmp_path / "b" / "binlog.000001"
    data = bytearray(path.read_bytes())
    data[pos + size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="CRC32 mismatch") as info:
        capture_all(tmp_path / "b")
    assert info.value.where == f"binlog.000001:{pos}"


def test_truncated_file_is_an_error_with_file_and_pos(tmp_path: Path) -> None:
    pos, size = _first_rows_event(FULL / "binlog.000001")
    path = tmp_path / "binlog.000001"
    path.write_bytes((FULL / "binlog.000001").read_bytes()[: pos + size - 3])
    with pytest.raises(CaptureError, match="truncated event") as info:
        capture_all(path)
    assert info.value.where == f"binlog.000001:{pos}"
    path.write_bytes((FULL / "binlog.000001").read_bytes()[: pos + 7])
    with pytest.raises(CaptureError, match="truncated event"):
        capture_all(path)
    path.write_bytes(b"\xfebix")
    with pytest.raises(CaptureError, match="not a binlog file"):
        capture_all(path)


@pytest.mark.parametrize("ends_in", ["body", "header"])
def test_follow_waits_for_a_file_being_written(tmp_path: Path, ends_in: str) -> None:
    """A file that ends mid-event is still being written: follow mode waits, then goes on (also when the
    file ended inside the event's header: the reader's buffer then holds less than a header)."""
    full = (FULL / "binlog.000001").read_bytes()
    pos, size = _first_rows_event(FULL / "binlog.000001")
    path = tmp_path / "binlog.000001"
    path.write_bytes(full[: pos + (size // 2 if ends_in == "body" else 10)])
    expected = capture_all(FULL / "binlog.000001")
    capture = file_capture(path, follow=True, poll_interval=0.02)
    got: list[Event] = []

    def consume() -> None:
        for ev in capture.events():
            got.append(ev)
            if len(got) == len(expected):
                capture.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        thread.join(0.5)
        assert thread.is_alive()  # waiting, not failing
        n_before = len(got)
        assert all(e.position["file"] == "binlog.000001" for e in got)
        path.write_bytes(full)
        thread.join(10)
        assert not thread.is_alive()
    finally:
        capture.stop()
        thread.join(5)
    assert n_before < len(expected)
    # While waiting, a DDL could not look ahead at the next TABLE_MAP: compare without DDL shapes.
    assert [_key(e, schema=False) for e in got] == [_key(e, schema=False) for e in expected]


def test_expected_covers_every_row_op() -> None:
    assert {op for op, *_ in EXPECTED} == {"ddl", "insert", "update", "delete"}
