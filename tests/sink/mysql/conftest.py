"""Fixtures for the MySQL sink tests: one schema per test on both shared MariaDB servers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from changefeed.sink.mysql import MySQLSink
from changefeed.testing import MariaDBServer

from .helpers import execute


@pytest.fixture
def db(mariadb: MariaDBServer, mariadb_downstream: MariaDBServer) -> Iterator[str]:
    """A fresh schema of the same name on upstream and downstream (and its checkpoint schema)."""
    name = f"sink_{uuid.uuid4().hex[:10]}"
    for server in (mariadb, mariadb_downstream):
        execute(server, f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        for server in (mariadb, mariadb_downstream):
            if server.is_running():
                execute(server, f"DROP DATABASE IF EXISTS `{name}`", f"DROP DATABASE IF EXISTS `{name}_cp`")


@pytest.fixture
def make_sink(db: str) -> Iterator[Callable[..., MySQLSink]]:
    """``make_sink(server, **options)``: a sink whose checkpoint lives in ``<db>_cp``; aborted after the test."""
    made: list[MySQLSink] = []

    def make(server: MariaDBServer, **options: Any) -> MySQLSink:
        options.setdefault("changefeed_id", "cf-test")
        options.setdefault("checkpoint_schema", f"{db}_cp")
        options.setdefault("retry_backoff", 0.01)
        sink = MySQLSink(server.url, **options)
        made.append(sink)
        return sink

    try:
        yield make
    finally:
        for sink in made:
            sink.close()
