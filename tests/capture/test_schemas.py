"""DDL events' table shapes (before/after) and the information_schema tracker of live captures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture, live_capture
from changefeed.errors import CaptureError
from changefeed.model.events import DDLEvent, Event, RowChange
from changefeed.model.types import ColumnFlag, TypeCode
from changefeed.testing import MariaDBServer

FULL = Path(__file__).resolve().parent.parent / "fixtures" / "binlog" / "full"


def _names(ts: Any) -> list[str]:
    return [c.name for c in ts.columns]


def _next_row(events: list[Event], after: Event) -> RowChange:
    return next(e for e in events[events.index(after) :] if isinstance(e, RowChange))


def test_file_mode_ddl_shapes_before_and_after() -> None:
    events = list(file_capture(FULL).events())
    ddls = [e for e in events if isinstance(e, DDLEvent)]
    create_db = ddls[0]
    assert create_db.table == "" and create_db.table_schema is None and create_db.pre_table_schema is None
    create = next(d for d in ddls if d.table == "ints")
    assert create.pre_table_schema is None
    assert create.table_schema is _next_row(events, create).table_schema  # from the next TABLE_MAP
    add, drop, modify, rename = ddls[-4:]
    first_cols = _names(create.table_schema)
    assert _names(add.pre_table_schema) == first_cols and _names(add.table_schema) == [*first_cols, "extra"]
    assert add.table_schema.version == add.commit_ts and add.pre_table_schema.version == create.commit_ts
    assert add.table_schema.column("extra").length == 10
    assert drop.pre_table_schema is add.table_schema and _names(drop.table_schema) == first_cols
    assert modify.pre_table_schema.column("ti").type_code is TypeCode.TINYINT
    assert modify.table_schema.column("ti").type_code is TypeCode.SMALLINT
    assert (rename.pre_table_schema.table, rename.table_schema.table) == ("ints", "ints2")
    assert rename.table_schema.columns == modify.table_schema.columns  # a rename keeps the shape
    assert rename.table_schema.version == rename.commit_ts
    assert _next_row(events, rename).table_schema.columns == rename.table_schema.columns


@pytest.mark.mariadb
def test_live_tracker_adds_keys_defaults_and_ddl_shapes(mariadb: MariaDBServer, fresh_db: str) -> None:
    db = f"`{fresh_db}`"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(
            f"CREATE TABLE {db}.t (id INT PRIMARY KEY, email VARCHAR(50) NOT NULL, n INT(5) UNSIGNED ZEROFILL"
            " DEFAULT 7, note VARCHAR(10) DEFAULT 'it''s', g INT AS (id * 2) VIRTUAL, UNIQUE KEY uk_email (email),"
            " KEY k_n (n))"
        )
        cur.execute(f"INSERT INTO {db}.t (id, email) VALUES (1, 'a@x')")
        cur.execute(f"ALTER TABLE {db}.t ADD COLUMN extra INT NOT NULL DEFAULT 5")
        cur.execute(f"INSERT INTO {db}.t (id, email) VALUES (2, 'b@x')")
        cur.execute(f"TRUNCATE TABLE {db}.t")
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[:2]
    events = list(
        live_capture(
            mariadb.url,
            BinlogPosition(str(file), int(pos)),
            blocking=False,
            table_filter=BlockAllowList.build(do_dbs=[fresh_db]),
            until=(str(end[0]), int(end[1])),
        ).events()
    )
    rows = [e for e in events if isinstance(e, RowChange)]
    create, alter, truncate = [e for e in events if isinstance(e, DDLEvent)]
    # The first row's TABLE_MAP has no `extra`: information_schema (read now) disagrees, the binlog wins.
    assert _names(rows[0].table_schema) == ["id", "email", "n", "note", "g"]
    assert [i.name for i in rows[0].table_schema.indexes] == ["PRIMARY"]
    ts = rows[1].table_schema  # matches information_schema: enriched
    assert _names(ts) == ["id", "email", "n", "note", "g", "extra"]
    assert {i.name: i.unique for i in ts.indexes} == {"PRIMARY": True, "k_n": False, "uk_email": True}
    assert ts.column("email").flags & ColumnFlag.UNIQUE_KEY and not ts.column("email").nullable
    # MariaDB prints a ZEROFILL default padded
    assert (
        ts.column("n").zerofill and ts.column("n").default == "00007" and ts.column("n").flags & ColumnFlag.MULTIPLE_KEY
    )
    assert ts.column("note").default == "it's" and ts.column("g").generated and ts.column("extra").default == "5"
    assert rows[1].as_dict() == {"id": 2, "email": "b@x", "n": 7, "note": "it's", "g": 4, "extra": 5}
    # DDL shapes: pre = last seen; after = information_schema right after the DDL
    assert alter.pre_table_schema is rows[0].table_schema
    assert _names(alter.table_schema) == _names(ts) and not alter.table_schema.column("extra").nullable
    assert alter.table_schema.column("extra").default == "5" and alter.table_schema.version == alter.commit_ts
    assert create.pre_table_schema is None and create.table_schema is not None
    assert truncate.pre_table_schema is ts and _names(truncate.table_schema) == _names(ts)


@pytest.mark.mariadb
def test_minimal_metadata_names_from_information_schema_and_misaligned_maps_fail(mariadb_factory: Any) -> None:
    server: MariaDBServer = mariadb_factory(extra_config={"binlog_row_metadata": "MINIMAL"})
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY, e ENUM('a','b'), v VARCHAR(10), u INT UNSIGNED)")
        cur.execute("INSERT INTO m.t VALUES (1, 'b', 'x', 4000000000)")
        cur.execute("SHOW MASTER STATUS")
        middle = BinlogPosition(*cur.fetchone()[:2])
    with pytest.raises(CaptureError, match="binlog_row_metadata=MINIMAL"):
        list(live_capture(server.url, start, blocking=False, track_schema=False).events())
    rows = [e for e in live_capture(server.url, start, blocking=False).events() if isinstance(e, RowChange)]
    assert rows[0].as_dict() == {"id": 1, "e": 2, "v": "x", "u": 4000000000}
    ts = rows[0].table_schema
    assert ts.column("e").elements == ("a", "b") and ts.primary_key == (0,) and ts.column("u").unsigned

    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE m.t ADD COLUMN w INT")
        cur.execute("INSERT INTO m.t VALUES (2, 'a', 'y', 1, 9)")
    # From the start again: the old TABLE_MAP (4 columns) no longer lines up with the table (5).
    with pytest.raises(CaptureError, match=r"m\.t cannot be aligned") as info:
        list(live_capture(server.url, start, blocking=False).events())
    assert info.value.where is not None and info.value.where.startswith(middle.file)
    # After the change everything lines up again, the new column included.
    rows = [e for e in live_capture(server.url, middle, blocking=False).events() if isinstance(e, RowChange)]
    assert [r.as_dict() for r in rows] == [{"id": 2, "e": 1, "v": "y", "u": 1, "w": 9}]
