"""DDL mid-stream: barriers between rows of different shapes, replays of DDL that already ran."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from changefeed.errors import SinkError
from changefeed.model import ActionType, Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.mysql import MySQLSink
from changefeed.testing import MariaDBServer

from .helpers import diff, execute, fetch

U8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}


class CrashError(Exception):
    pass


def ddl_stream(db: str) -> list[Event]:
    id_col = Column("id", TypeCode.INT, nullable=False)
    a_col = Column("a", TypeCode.VARCHAR, length=20, **U8)
    b_col = Column("b", TypeCode.INT)
    pk = (Index("PRIMARY", ("id",), primary=True),)
    v1 = TableSchema(db, "t1", (id_col, a_col), pk)
    v2 = TableSchema(db, "t1", (id_col, a_col, b_col), pk, version=20)
    v3 = TableSchema(db, "t1", (id_col, b_col), pk, version=40)
    t2 = TableSchema(db, "t2", (id_col,), pk)

    def ddl(query: str, action: ActionType, ts: int, table: str = "t1") -> DDLEvent:
        return DDLEvent(db, table, query, int(action), ts, position={"ddl": ts})

    events: list[Event] = [
        ddl("CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, a VARCHAR(20))", ActionType.CREATE_TABLE, 10),
        *[RowChange(Op.INSERT, v1, 11 + i // 5, new=(i, f"a{i}")) for i in range(20)],
        ddl("ALTER TABLE t1 ADD COLUMN b INT NULL", ActionType.ADD_COLUMN, 20),
        *[RowChange(Op.INSERT, v2, 21, new=(100 + i, "new", i)) for i in range(10)],
        RowChange(Op.UPDATE, v2, 22, old=(0, "a0", None), new=(0, "a0", 7)),
        ddl("CREATE INDEX ib ON t1 (b)", ActionType.ADD_INDEX, 30),
        ddl(f"CREATE TABLE `{db}`.t2 (id INT NOT NULL PRIMARY KEY)", ActionType.CREATE_TABLE, 31, "t2"),
        RowChange(Op.INSERT, t2, 32, new=(1,)),
        ddl("DROP TABLE t2", ActionType.DROP_TABLE, 33, "t2"),
        ddl("ALTER TABLE t1 DROP COLUMN a", ActionType.DROP_COLUMN, 40),
        RowChange(Op.DELETE, v3, 41, old=(1, None)),
        RowChange(Op.INSERT, v3, 41, new=(500, 5)),
        Resolved(50),
    ]  # fmt: skip
    return events


def test_ddl_mid_stream_and_replayed_after_crash(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    events = ddl_stream(db)
    with make_sink(mariadb, changefeed_id="reference") as sink:
        sink.write(events)
    for crash_after in (0, 1, 4, 5):  # CREATE TABLE, ADD COLUMN, DROP TABLE, DROP COLUMN replayed
        execute(mariadb_downstream, f"DROP DATABASE IF EXISTS `{db}`", f"CREATE DATABASE `{db}`",
                f"DROP DATABASE IF EXISTS `{db}_cp`")  # fmt: skip
        count = {"n": 0}

        def hook(point: str, info: Mapping[str, Any], count: dict[str, int] = count, k: int = crash_after) -> None:
            if point == "ddl":
                count["n"] += 1
                if count["n"] == k + 1:
                    raise CrashError("after the DDL ran, before its checkpoint")

        sink = make_sink(mariadb_downstream, workers=4, batch_rows=7, fault_hook=hook)
        with pytest.raises(CrashError), sink:
            sink.write(events)
        with make_sink(mariadb_downstream, workers=4, batch_rows=7) as resumed:
            checkpoint = resumed.load_checkpoint()
            resumed.write([e for e in events if checkpoint is None or e.commit_ts > checkpoint.commit_ts])
        assert resumed.stats["ddl_skipped"] == 1, f"crash after DDL #{crash_after + 1}"
        report = diff(mariadb, mariadb_downstream, f"{db}.*")
        assert report.equal and [t.table for t in report.tables] == ["t1"], report
    with mariadb_downstream.connect() as conn:
        assert fetch(conn, f"SELECT id, b FROM `{db}`.t1 WHERE id IN (0, 100, 500) ORDER BY id") == [
            (0, 7),
            (100, 0),
            (500, 5),
        ]


def test_failing_ddl_stops_the_sink_naming_it(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    bad = DDLEvent(db, "t", "ALTER TABLE missing ADD COLUMN c INT", int(ActionType.ADD_COLUMN), 77,
                   position={"file": "binlog.000001", "pos": 99})  # fmt: skip
    with pytest.raises(SinkError) as exc, make_sink(mariadb_downstream) as sink:
        sink.write([bad])
    text = str(exc.value)
    assert "ALTER TABLE missing ADD COLUMN c INT" in text and "1146" in text
    assert "commit_ts 77" in text and "binlog.000001" in text
    # Nothing was claimed past the failure.
    with make_sink(mariadb_downstream) as sink:
        assert sink.load_checkpoint() is None
    # The same error on a DROP means "already done": skipped.
    drop = DDLEvent(db, "missing", "DROP TABLE missing", int(ActionType.DROP_TABLE), 78)
    with make_sink(mariadb_downstream) as sink:
        sink.write([drop])
        assert sink.stats["ddl_skipped"] == 1 and sink.checkpoint.commit_ts == 78
