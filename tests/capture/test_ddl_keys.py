"""Unique keys over a real binlog: TABLE_MAPs carry none, the DDL text and information_schema do.

A MariaDB table with a UNIQUE KEY (and one added by ALTER) is written, captured from the server's
own binlog files and live without the schema tracker, and encoded: the Open Protocol column flags
and the Simple protocol's index list must be what TiCDC writes for that table (spec §0.3, §1.6,
§3.2).
"""

from __future__ import annotations

import struct
from typing import Any

import orjson
import pytest

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, file_capture, live_capture
from changefeed.codec import CodecOptions, make_encoder
from changefeed.codec.simple import SimpleEncoder
from changefeed.model import TableSchema
from changefeed.model.events import DDLEvent, Event, RowChange
from changefeed.testing import MariaDBServer

pytestmark = pytest.mark.mariadb

# TiCDC's flags (spec §1.6): Binary 1, HandleKey 2, PrimaryKey 8, UniqueKey 16, MultipleKey 32, Nullable 64.
USERS_FLAGS = {
    "id": 1 | 2 | 8,  # INT PRIMARY KEY: binary, handle, primary
    "email": 16,  # VARCHAR NOT NULL in UNIQUE KEY uk_email
    "code": 1 | 16 | 32 | 64,  # INT NULL in the two-column UNIQUE KEY uk_code_note
    "note": 16 | 32 | 64,  # VARCHAR NULL in it too
    "nick": 16 | 64,  # VARCHAR NULL, UNIQUE added by ALTER TABLE
}
USERS_INDEXES = [
    {"name": "primary", "unique": True, "primary": True, "nullable": False, "columns": ["id"]},
    {"name": "uk_email", "unique": True, "primary": False, "nullable": False, "columns": ["email"]},
    {"name": "uk_code_note", "unique": True, "primary": False, "nullable": True, "columns": ["code", "note"]},
    {"name": "uk_nick", "unique": True, "primary": False, "nullable": True, "columns": ["nick"]},
]
# No primary key: the NOT NULL unique key added by ALTER becomes the handle key. MariaDB's binlog
# calls it the primary key (the server promotes it); TiDB, and so TiCDC, keep it a unique key.
NOPK_BEFORE = {"a": 1, "b": 1 | 64}
NOPK_AFTER = {"a": 1 | 2 | 16, "b": 1 | 64}


def _position(server: MariaDBServer) -> BinlogPosition:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return BinlogPosition(str(file), int(pos))


def _run(server: MariaDBServer, *statements: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
        conn.commit()


def _open_flags(row: RowChange) -> dict[str, int]:
    """The ``f`` of each column in the Open Protocol message of ``row``."""
    enc = make_encoder(CodecOptions(protocol="open-protocol"))
    enc.append_row(row)
    (msg,) = enc.build()
    (vl,) = struct.unpack_from(">Q", msg.value, 0)
    value = orjson.loads(msg.value[8 : 8 + vl])
    image = value.get("u") or value.get("d")
    return {name: col["f"] for name, col in image.items()}


def _simple_indexes(ts: TableSchema) -> list[dict[str, Any]]:
    out = SimpleEncoder(CodecOptions(protocol="simple")).encode_bootstrap(ts)
    return orjson.loads(out.value)["tableSchema"]["indexes"]


def _rows(events: list[Event], table: str) -> list[RowChange]:
    return [e for e in events if isinstance(e, RowChange) and e.table == table]


def _workload(server: MariaDBServer, db: str) -> None:
    _run(
        server,
        f"CREATE TABLE `{db}`.users (id INT PRIMARY KEY, email VARCHAR(40) NOT NULL, code INT, note VARCHAR(10),"
        " /* a comment */ UNIQUE KEY uk_email (email(20)), UNIQUE KEY `uk_code_note` (code, note))",
        f"INSERT INTO `{db}`.users VALUES (1, 'a@x', 1, 'n1'), (2, 'b@x', NULL, NULL)",
        f"ALTER TABLE `{db}`.users ADD COLUMN nick VARCHAR(20) NULL, ADD UNIQUE KEY uk_nick (nick)",
        f"UPDATE `{db}`.users SET nick = 'bee', code = 7 WHERE id = 2",
        f"CREATE TABLE `{db}`.nopk (a INT NOT NULL, b INT)",
        f"INSERT INTO `{db}`.nopk VALUES (1, 10)",
        f"ALTER TABLE `{db}`.nopk ADD CONSTRAINT ua UNIQUE (a)",
        f"INSERT INTO `{db}`.nopk VALUES (2, 20)",
        f"UPDATE `{db}`.nopk SET b = 21 WHERE a = 2",
    )


def _check(events: list[Event]) -> None:
    users = _rows(events, "users")
    assert len(users) == 3
    before, after = users[0], users[-1]
    assert _open_flags(before) == {k: v for k, v in USERS_FLAGS.items() if k != "nick"}
    assert _open_flags(after) == USERS_FLAGS
    assert _simple_indexes(after.table_schema) == USERS_INDEXES
    assert _simple_indexes(before.table_schema) == USERS_INDEXES[:3]
    nopk = _rows(events, "nopk")
    assert [_open_flags(r) for r in nopk] == [NOPK_BEFORE, NOPK_AFTER, NOPK_AFTER]
    assert nopk[-1].table_schema.handle_key == (0,)
    alters = [e for e in events if isinstance(e, DDLEvent) and e.table == "users" and "ALTER" in e.query]
    assert alters and alters[0].table_schema is not None  # file mode: the next TABLE_MAP's shape, with its keys
    assert [x.name for x in alters[0].table_schema.indexes] == ["PRIMARY", "uk_email", "uk_code_note", "uk_nick"]


def test_file_capture_learns_unique_keys_from_ddl(mariadb: MariaDBServer, fresh_db: str) -> None:
    start = _position(mariadb)
    _workload(mariadb, fresh_db)
    end = _position(mariadb)
    only = BlockAllowList.build(do_dbs=[fresh_db])
    events = list(file_capture(mariadb.binlog_dir, start, table_filter=only, until=(end.file, end.pos)).events())
    _check(events)


def test_live_capture_without_tracker_learns_keys_from_ddl(mariadb: MariaDBServer, fresh_db: str) -> None:
    start = _position(mariadb)
    _workload(mariadb, fresh_db)
    end = _position(mariadb)
    only = BlockAllowList.build(do_dbs=[fresh_db])
    capture = live_capture(
        mariadb.url, start, blocking=False, table_filter=only, until=(end.file, end.pos), track_schema=False
    )
    _check(list(capture.events()))


def test_live_capture_without_tracker_takes_keys_from_the_start_snapshot(mariadb: MariaDBServer, fresh_db: str) -> None:
    # The table and its keys predate the capture's start: only information_schema knows them.
    _run(
        mariadb,
        f"CREATE TABLE `{fresh_db}`.old (id INT NOT NULL, u VARCHAR(8) NOT NULL, UNIQUE KEY uu (u), KEY k (id))",
    )
    start = _position(mariadb)
    _run(mariadb, f"INSERT INTO `{fresh_db}`.old VALUES (1, 'x')")
    end = _position(mariadb)
    only = BlockAllowList.build(do_dbs=[fresh_db])
    live = list(
        live_capture(
            mariadb.url, start, blocking=False, table_filter=only, until=(end.file, end.pos), track_schema=False
        ).events()
    )
    (row,) = _rows(live, "old")
    assert _open_flags(row) == {"id": 1 | 32, "u": 2 | 16}
    # File mode from the same start saw no CREATE TABLE: TABLE_MAP keys only, nothing guessed (the
    # server reports the unique key it promoted to primary key as the primary key).
    files = list(file_capture(mariadb.binlog_dir, start, table_filter=only, until=(end.file, end.pos)).events())
    (row,) = _rows(files, "old")
    assert _open_flags(row) == {"id": 1, "u": 2 | 8}
