"""Fixtures of the Spark tests that write into MariaDB: a clean downstream and its dumps."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.testing import MariaDBServer

from .helpers import captured

SCHEMA = "cf"  # the binlog fixture's DDL names it


def drop(server: MariaDBServer, *schemas: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for name in schemas:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def dump(server: MariaDBServer, schema: str = SCHEMA) -> dict[str, Any]:
    """Every table of ``schema``: column names and rows (sorted), as the server returns them."""
    out: dict[str, Any] = {}
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        for (table,) in sorted(cur.fetchall()):
            cur.execute(f"SELECT * FROM `{schema}`.`{table}`")
            names = [d[0] for d in cur.description]
            out[table] = (names, sorted(cur.fetchall(), key=repr))
    return out


@pytest.fixture
def downstream(mariadb_downstream: MariaDBServer) -> Iterator[tuple[MariaDBServer, str]]:
    """The shared downstream with ``cf`` dropped, and a private checkpoint schema."""
    ck_schema = f"ck_{uuid.uuid4().hex[:10]}"
    drop(mariadb_downstream, SCHEMA)
    try:
        yield mariadb_downstream, ck_schema
    finally:
        drop(mariadb_downstream, SCHEMA, ck_schema)


def direct_dump(server: MariaDBServer, ck_schema: str) -> dict[str, Any]:
    """What MySQLSink makes of file_capture's events applied directly (then dropped again)."""
    with MySQLSink(server.url, MySQLSinkConfig(changefeed_id="direct", checkpoint_schema=ck_schema)) as sink:
        sink.write(captured())
    expected = dump(server)
    drop(server, SCHEMA)
    return expected
