"""Against a real MariaDB: live replica protocol and file mode on the server's own binlog files,
the differential check against python-mysql-replication, GTID starts, and a restart mid-stream."""

from __future__ import annotations

import datetime as dt
import threading
import time
from decimal import Decimal
from typing import Any

import pytest

from changefeed.capture.binlog import (
    BinlogPosition,
    BlockAllowList,
    ReconnectPolicy,
    file_capture,
    live_capture,
)
from changefeed.model.events import Event, Resolved, RowChange
from changefeed.model.jsonl import dumps_event
from changefeed.model.schema import Column
from changefeed.model.types import TypeCode
from changefeed.model.values import format_datetime, format_time
from changefeed.testing import MariaDBServer

from .workload import compare, master_position, run_workload

pytestmark = pytest.mark.mariadb


@pytest.fixture
def workload_run(mariadb: MariaDBServer, fresh_db: str) -> tuple[BinlogPosition, BinlogPosition, str]:
    """Run the workload in a fresh database: (start, end, schema)."""
    start = master_position(mariadb)
    with mariadb.connect() as conn:
        run_workload(conn, fresh_db)
    return start, master_position(mariadb), fresh_db


def test_live_and_file_mode_give_the_same_events(
    mariadb: MariaDBServer, workload_run: tuple[BinlogPosition, BinlogPosition, str]
) -> None:
    start, end, schema = workload_run
    only = BlockAllowList.build(do_dbs=[schema])
    until = (end.file, end.pos)
    live = list(
        live_capture(mariadb.url, start, blocking=False, table_filter=only, until=until, track_schema=False).events()
    )
    compare(live)
    assert all(e.schema == schema for e in live if isinstance(e, RowChange))
    files = list(file_capture(mariadb.binlog_dir, start, table_filter=only, until=until).events())
    assert [dumps_event(e) for e in files] == [dumps_event(e) for e in live]  # same positions and timestamps


def test_live_resume_from_gtid_matches_file_position(
    mariadb: MariaDBServer, workload_run: tuple[BinlogPosition, BinlogPosition, str]
) -> None:
    start, end, schema = workload_run
    only = BlockAllowList.build(do_dbs=[schema])
    until = (end.file, end.pos)
    events = list(live_capture(mariadb.url, start, blocking=False, table_filter=only, until=until).events())
    middle = [e for e in events if isinstance(e, Resolved)][5]
    by_gtid = BinlogPosition.from_dict({**middle.position, "file": "", "pos": 4})  # the GTID state only
    resumed = list(live_capture(mariadb.url, by_gtid, blocking=False, table_filter=only, until=until).events())
    after = events[events.index(middle) + 1 :]
    assert [e.commit_ts for e in resumed] == [e.commit_ts for e in after]
    assert [e.position for e in resumed] == [e.position for e in after]
    assert [dumps_event(e) for e in resumed] == [dumps_event(e) for e in after]


# ------------------------------------------------------------------ differential


def _their_value(column: Column, value: Any) -> Any:
    """python-mysql-replication's value in our representation: its documented quirks undone on ITS side."""
    tc = column.type_code
    if value is None:
        return None
    if tc is TypeCode.YEAR:
        return 0 if value == 1900 else value  # it adds 1900 to the zero year
    if tc is TypeCode.BIT:
        return int(value, 2)  # a '0'/'1' string
    if tc is TypeCode.ENUM:
        return column.elements.index(value) + 1 if value else 0
    if tc is TypeCode.SET:
        return sum(1 << column.elements.index(v) for v in value)
    if tc is TypeCode.TIMESTAMP:
        if value == dt.datetime(1970, 1, 1):  # its zero timestamp
            return format_datetime(0, 0, 0, 0, 0, 0, 0, column.decimal or 0)
        return format_datetime(*value.timetuple()[:6], value.microsecond, column.decimal or 0)
    if tc is TypeCode.DATETIME:
        return format_datetime(*value.timetuple()[:6], value.microsecond, column.decimal or 0)
    if tc is TypeCode.DATE:
        return value.isoformat()
    if tc is TypeCode.TIME:
        if value < dt.timedelta(0) and value.microseconds:
            # it adds the fraction of a negative TIME2 instead of subtracting it: -1.25 s comes out as -2 + 0.25
            value = dt.timedelta(days=value.days, seconds=value.seconds + 1) - dt.timedelta(
                microseconds=value.microseconds
            )
        micro = value // dt.timedelta(microseconds=1)
        negative, micro = micro < 0, abs(micro)
        seconds, micro = divmod(micro, 1_000_000)
        return format_time(negative, seconds // 3600, seconds // 60 % 60, seconds % 60, micro, column.decimal or 0)
    if column.is_bytes:
        raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)  # empty BLOB comes as ''
        return raw.ljust(column.length or 0, b"\0") if tc is TypeCode.CHAR else raw
    if tc is TypeCode.DECIMAL:
        return Decimal(value)
    return value


def _compare_values(ours: RowChange, theirs: dict[str, Any], image: tuple[Any, ...]) -> list[str]:
    problems = []
    for column, value in zip(ours.table_schema.columns, image, strict=True):
        other = theirs[column.name]
        normalised = _their_value(column, other)
        if normalised == value:
            continue
        if other is None and column.type_code is TypeCode.SET and value == 0:
            continue  # it reports the empty set as None
        if other is None and isinstance(value, str) and value.startswith("0000-00-00"):
            continue  # it reports zero dates as None
        problems.append(f"{ours.table}.{column.name}: ours {value!r}, theirs {other!r} -> {normalised!r}")
    return problems


def test_differential_against_python_mysql_replication(
    mariadb: MariaDBServer, workload_run: tuple[BinlogPosition, BinlogPosition, str]
) -> None:
    from pymysqlreplication import BinLogStreamReader  # noqa: PLC0415 - the oracle, for tests only
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: PLC0415

    start, end, schema = workload_run
    only = BlockAllowList.build(do_dbs=[schema])
    ours = [
        e
        for e in live_capture(mariadb.url, start, blocking=False, table_filter=only, until=(end.file, end.pos)).events()
        if isinstance(e, RowChange)
    ]
    stream = BinLogStreamReader(
        connection_settings={"host": mariadb.host, "port": mariadb.port, "user": mariadb.user, "password": ""},
        server_id=4242,
        is_mariadb=False,  # with is_mariadb=True it ignores log_file/log_pos (TOOLCHAIN.md)
        resume_stream=True,
        log_file=start.file,
        log_pos=start.pos,
        blocking=False,
        only_schemas=[schema],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    theirs: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
    try:
        for event in stream:
            if event.packet.log_pos > end.pos and stream.log_file == end.file:
                break
            for row in event.rows:
                if isinstance(event, WriteRowsEvent):
                    theirs.append(("insert", row["values"], None))
                elif isinstance(event, DeleteRowsEvent):
                    theirs.append(("delete", None, row["values"]))
                else:
                    theirs.append(("update", row["after_values"], row["before_values"]))
    finally:
        stream.close()
    assert len(theirs) == len(ours) > 20
    problems = []
    for mine, (op, new, old) in zip(ours, theirs, strict=True):
        assert mine.op.value == op
        if new is not None:
            problems += _compare_values(mine, new, mine.new)
        if old is not None:
            problems += _compare_values(mine, old, mine.old)
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ restart


def test_live_capture_survives_a_server_restart(mariadb_factory: Any) -> None:
    """Rows written before, during and after a restart arrive exactly once, in order."""
    server: MariaDBServer = mariadb_factory()
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE r")
        cur.execute("CREATE TABLE r.t (id INT PRIMARY KEY, v VARCHAR(20))")
    start = master_position(server)
    capture = live_capture(
        server.url,
        start,
        heartbeat=0.5,
        table_filter=BlockAllowList.build(do_dbs=["r"]),
        reconnect=ReconnectPolicy(initial=0.1, maximum=1.0, max_wait=60),
    )
    seen: list[int] = []
    resolved: list[Event] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for ev in capture.events():
                if isinstance(ev, RowChange):
                    seen.append(ev.new[0])
                    if ev.new[0] == 9999:
                        capture.stop()
                elif isinstance(ev, Resolved):
                    resolved.append(ev)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    def write(first: int, last: int) -> None:
        with server.connect() as conn, conn.cursor() as cur:
            for base in range(first, last + 1, 10):
                cur.execute("BEGIN")
                for i in range(base, min(base + 10, last + 1)):
                    cur.execute("INSERT INTO r.t VALUES (%s, %s)", (i, f"v{i}"))
                cur.execute("COMMIT")

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    try:
        write(1, 100)
        deadline = time.monotonic() + 30
        while len(seen) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.restart()
        write(101, 200)
        write(9999, 9999)
        thread.join(60)
        assert not thread.is_alive(), f"capture did not finish; saw {len(seen)} rows"
    finally:
        capture.stop()
        thread.join(5)
    assert not errors, errors
    assert seen == [*range(1, 201), 9999]
    files = {e.position["file"] for e in resolved}
    assert len(files) >= 2  # the restart started a new binlog file and we followed it
    ts = [e.commit_ts for e in resolved]
    assert ts == sorted(set(ts))


def test_minimal_row_image_marks_absent_columns(mariadb_factory: Any) -> None:
    from changefeed.model.values import ABSENT  # noqa: PLC0415

    server: MariaDBServer = mariadb_factory(extra_config={"binlog_row_image": "MINIMAL"})
    start = master_position(server)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY, a INT, b VARCHAR(10), c TEXT)")
        cur.execute("INSERT INTO m.t VALUES (1, 10, 'x', NULL)")
        cur.execute("UPDATE m.t SET a = 11 WHERE id = 1")
        cur.execute("DELETE FROM m.t WHERE id = 1")
    rows = [e for e in live_capture(server.url, start, blocking=False).events() if isinstance(e, RowChange)]
    assert [r.op.value for r in rows] == ["insert", "update", "delete"]
    assert rows[0].new == (1, 10, "x", None)
    assert rows[1].old == (1, ABSENT, ABSENT, ABSENT) and rows[1].new == (ABSENT, 11, ABSENT, ABSENT)
    assert rows[2].old == (1, ABSENT, ABSENT, ABSENT)
    assert rows[1].as_dict() == {"a": 11}
