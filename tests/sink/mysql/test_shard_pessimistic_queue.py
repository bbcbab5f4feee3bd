"""DM's pessimistic mode, a done shard's next DDL: queued behind the pending lock, replayed in order.

Three shards ``up.t_0..t_2`` merged into ``<db>.m``. ``t_0`` runs ADD COLUMN x, then ADD COLUMN y, with rows
between and after; ``t_1`` and ``t_2`` run ADD COLUMN x (lock 1 releases: ``t_0``'s held rows up to its
second DDL are applied, the queued DDL opens lock 2 with ``t_0`` done, ``t_0``'s later rows stay held);
then ``t_1`` and ``t_2`` run ADD COLUMN y (lock 2 releases). Crashes anywhere converge on restart, each DDL
run once downstream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from changefeed.cli.status import pending_locks
from changefeed.dispatch.route import Extract, Router, RouteRule
from changefeed.dispatch.shardddl import ShardDDLConflictError
from changefeed.model import ActionType, Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.mysql import MySQLSink
from changefeed.testing import MariaDBServer

SHARDS = ("t_0", "t_1", "t_2")
ADD_X = "ALTER TABLE {t} ADD COLUMN x INT NULL"
ADD_Y = "ALTER TABLE {t} ADD COLUMN y INT NULL"


class CrashError(Exception):
    pass


def _shape(table: str, version: int) -> TableSchema:
    cols = [Column("id", TypeCode.INT, nullable=False), Column("a", TypeCode.INT)]
    cols += [Column(n, TypeCode.INT) for n in ("x", "y")[: version - 1]]
    return TableSchema("up", table, tuple(cols), (Index("PRIMARY", ("id",), primary=True),), version=version)


def _ddl(table: str, query: str, action: ActionType, ts: int) -> DDLEvent:
    return DDLEvent("up", table, query.format(t=table), int(action), ts, position={"ts": ts})


def _ins(table: str, version: int, ts: int, *values: int | None) -> RowChange:
    return RowChange(Op.INSERT, _shape(table, version), ts, new=values)


def stream() -> list[Event]:
    create = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, a INT NULL)"
    add = ActionType.ADD_COLUMN
    events: list[Event] = [_ddl(t, create, ActionType.CREATE_TABLE, 10 + i) for i, t in enumerate(SHARDS)]
    events += [_ins(t, 1, 15, k, k * 10) for t in SHARDS for k in (1, 2)]
    events += [
        _ddl("t_0", ADD_X, add, 20),  # lock 1 opens
        _ins("t_0", 2, 21, 3, 30, 300),  # held
        _ins("t_1", 1, 22, 3, 30),  # applied
        Resolved(23),
        _ddl("t_0", ADD_Y, add, 25),  # t_0's second DDL: queued behind lock 1
        _ins("t_0", 3, 26, 4, 40, 400, 4000),  # held behind it
        RowChange(Op.UPDATE, _shape("t_0", 3), 27, old=(1, 10, None, None), new=(1, 11, 100, 1000)),
        Resolved(28),
        _ddl("t_1", ADD_X, add, 30),  # joins lock 1
        _ins("t_1", 2, 31, 4, 40, 401),  # held
        Resolved(32),
        _ddl("t_2", ADD_X, add, 40),  # lock 1 released; t_0's queued DDL opens lock 2
        _ins("t_2", 2, 41, 5, 50, 502),  # applied (t_2 has not run ADD y)
        _ins("t_1", 2, 41, 5, 50, 501),  # applied
        Resolved(42),
        _ddl("t_1", ADD_Y, add, 50),  # joins lock 2
        _ins("t_1", 3, 51, 6, 60, 601, 6001),  # held
        Resolved(52),
        _ddl("t_2", ADD_Y, add, 60),  # lock 2 released
        _ins("t_2", 3, 61, 6, 60, 602, 6002),
        Resolved(62),
    ]
    return events


EXPECTED = [
    ("0", 1, 11, 100, 1000),
    ("0", 2, 20, None, None),
    ("0", 3, 30, 300, None),
    ("0", 4, 40, 400, 4000),
    ("1", 1, 10, None, None),
    ("1", 2, 20, None, None),
    ("1", 3, 30, None, None),
    ("1", 4, 40, 401, None),
    ("1", 5, 50, 501, None),
    ("1", 6, 60, 601, 6001),
    ("2", 1, 10, None, None),
    ("2", 2, 20, None, None),
    ("2", 5, 50, 502, None),
    ("2", 6, 60, 602, 6002),
]


def _router(db: str) -> Router:
    return Router([RouteRule("up", "t_*", db, "m", extract_table=Extract("c_table", "t_(.*)"))], "cf-test")


def _sink(make_sink: Callable[..., MySQLSink], server: MariaDBServer, db: str, **options: Any) -> MySQLSink:
    members = tuple((db, "m", "up", t) for t in SHARDS)
    return make_sink(server, shard_mode="pessimistic", shard_members=members, **options)


def fetch(server: MariaDBServer, sql: str) -> list[tuple[Any, ...]]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def _merged(server: MariaDBServer, db: str, columns: str = "a, x, y") -> list[tuple[Any, ...]]:
    rows = fetch(server, f"SELECT c_table, id, {columns} FROM `{db}`.m ORDER BY c_table, id")
    return [(str(c), *(None if v is None else int(v) for v in rest)) for c, *rest in rows]


def _columns(server: MariaDBServer, db: str) -> list[str]:
    rows = fetch(
        server,
        f"SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = 'm' "
        "ORDER BY ORDINAL_POSITION",
    )
    return [str(r[0]) for r in rows]


def _held(server: MariaDBServer, db: str) -> list[tuple[Any, ...]]:
    return fetch(server, f"SELECT shard_table, commit_ts FROM `{db}_cp`.changefeed_shard_held ORDER BY id")


def _lock(server: MariaDBServer, db: str) -> list[tuple[Any, ...]]:
    return fetch(server, f"SELECT state, ddl FROM `{db}_cp`.changefeed_shard_lock")


def _until(events: list[Event], ts: int) -> int:
    return next(i for i, e in enumerate(events) if isinstance(e, DDLEvent) and e.commit_ts == ts)


def test_a_done_shards_next_ddl_is_queued_and_replayed_in_order(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    server = mariadb_downstream
    events = _router(db).route(stream())
    sink = _sink(make_sink, server, db)
    sink.write(events[: _until(events, 30)])
    sink.flush()
    # t_0's second DDL waits in its queue, between its held rows, with the checkpoint.
    assert _held(server, db) == [("t_0", 21), ("t_0", 25), ("t_0", 26), ("t_0", 27)]
    assert [r[0] for r in _lock(server, db)] == ["waiting"] and " x " in _lock(server, db)[0][1].lower()
    assert "x" not in _columns(server, db)

    sink.write(events[_until(events, 30) : _until(events, 50)])
    sink.flush()
    # Lock 1 released: ADD x ran; t_0's row before its queued DDL and t_1's held row applied; the queued
    # ADD y opened lock 2 (t_0 done) and t_0's later rows stay held for it.
    assert "x" in _columns(server, db) and "y" not in _columns(server, db)
    assert _held(server, db) == [("t_0", 26), ("t_0", 27)]
    lock = _lock(server, db)
    assert [r[0] for r in lock] == ["waiting"] and " y " in lock[0][1].lower()
    done = fetch(server, f"SELECT shard_table FROM `{db}_cp`.changefeed_shard_done")
    assert done == [("t_0",)]
    merged = _merged(server, db, "a, x")
    assert ("0", 3, 30, 300) in merged and ("1", 4, 40, 401) in merged and ("2", 5, 50, 502) in merged
    assert ("0", 1, 10, None) in merged and ("0", 4) not in [m[:2] for m in merged]  # waiting for lock 2

    sink.write(events[_until(events, 50) :])
    sink.flush()
    assert _merged(server, db) == EXPECTED
    assert _held(server, db) == [] and _lock(server, db) == []
    assert sink.stats["ddl"] == 3  # CREATE TABLE, ADD x and ADD y, each once


def _crash_at(point: str, ts: int) -> Callable[[str, Mapping[str, Any]], None]:
    """A crash at ``point`` for the DDL at ``ts``; ``replay``: at the commit of the release's replay."""
    armed = []

    def crash(name: str, info: Mapping[str, Any]) -> None:
        if point == "replay":
            if name == "shard-ddl" and info["commit_ts"] == ts:
                armed.append(True)
            elif name == "commit" and armed:
                raise CrashError(name)
        elif name == point and info["commit_ts"] == ts:
            raise CrashError(name)

    return crash


@pytest.mark.parametrize(
    ("point", "ts"),
    [("shard-queued", 25), ("shard-ddl", 40), ("replay", 40), ("shard-held", 50), ("replay", 60)],
)
def test_a_crash_around_the_queue_and_its_replay_converges_each_ddl_once(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink], point: str, ts: int
) -> None:
    """A crash (the sink dropped, no flush) after the queued DDL was stored, between lock 1's DDL and the
    replay, inside the replay's transaction, after the next lock took a shard, inside lock 2's replay: the
    restart replays from the stored checkpoint and ends equal, each DDL run once downstream."""
    server = mariadb_downstream
    sink = _sink(make_sink, server, db, fault_hook=_crash_at(point, ts))
    with pytest.raises(CrashError):
        sink.write(_router(db).route(stream()))
    sink.close()

    again = _sink(make_sink, server, db)
    assert again.load_checkpoint() is not None
    again.write(_router(db).route(stream()))  # from the start: the sink skips what it has
    again.flush()
    assert _merged(server, db) == EXPECTED
    assert _held(server, db) == [] and _lock(server, db) == []
    assert sink.stats["ddl"] + again.stats["ddl"] == 3


def test_with_two_sources_a_done_shards_next_ddl_is_still_refused(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    """The lock table keeps one lock a merged table: another source's held rows of the released lock would
    share it with the next one, so with several sources the queued DDL stays a conflict naming them."""
    rule = RouteRule(
        "up", "t_*", db, "m", extract_table=Extract("c_table", "t_(.*)"), extract_source=Extract("c_source", "(.*)")
    )
    shared = ((db, "m", "up", "t_0"),)
    b = make_sink(mariadb_downstream, changefeed_id="cf-b", shard_mode="pessimistic", shard_members=shared)
    b.open()  # registers cf-b's shard
    a = make_sink(mariadb_downstream, changefeed_id="cf-a", shard_mode="pessimistic", shard_members=shared)
    create = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, a INT NULL)"
    events = [
        _ddl("t_0", create, ActionType.CREATE_TABLE, 10),
        _ddl("t_0", ADD_X, ActionType.ADD_COLUMN, 20),
        _ddl("t_0", ADD_Y, ActionType.ADD_COLUMN, 25),
    ]
    with pytest.raises(ShardDDLConflictError, match="only when one source feeds the merged table") as caught:
        a.write(Router([rule], "cf-a").route(events))
    assert "other sources: cf-b" in str(caught.value) and " y " in str(caught.value).lower()


def test_status_keeps_the_pending_lock_when_a_ddl_is_queued_behind_it() -> None:
    held = {"table": "d.m", "outcome": "held: done: up.t_0; waiting: up.t_1", "ddl": "ADD x"}
    queued = {"table": "d.m", "outcome": "queued: behind the pending DDL ADD x", "ddl": "ADD y"}
    assert pending_locks([held, queued]) == [held]
    assert pending_locks([held, queued, {**held, "outcome": "released: ..."}]) == []
