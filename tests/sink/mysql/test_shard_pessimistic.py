"""DM's pessimistic shard DDL mode in the MySQL sink, on a real MariaDB: held rows, release, crashes.

Three upstream shards ``up.t_0..t_2`` (equal keys) are routed into ``<db>.m`` with a ``c_table``
column. A type change across families (optimistic mode refuses it) arrives shard by shard with
writes in between: the rows of the shards that changed are held downstream (in the lock tables,
with the checkpoint) until the last shard's DDL, which runs once; then the held rows are applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from changefeed.dispatch.route import Extract, Router, RouteRule
from changefeed.dispatch.shardddl import ShardDDLConflictError
from changefeed.errors import SinkError
from changefeed.model import ActionType, Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.mysql import MySQLSink
from changefeed.testing import MariaDBServer

U8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
SHARDS = ("t_0", "t_1", "t_2")
MODIFY = "ALTER TABLE {t} MODIFY a VARCHAR(10) NULL"


class CrashError(Exception):
    pass


def _shapes(table: str) -> tuple[TableSchema, TableSchema]:
    pk = (Index("PRIMARY", ("id",), primary=True),)
    id_col = Column("id", TypeCode.INT, nullable=False)
    old = TableSchema("up", table, (id_col, Column("a", TypeCode.INT)), pk)
    new = TableSchema("up", table, (id_col, Column("a", TypeCode.VARCHAR, length=10, **U8)), pk, version=2)
    return old, new


def _ddl(table: str, query: str, action: ActionType, ts: int) -> DDLEvent:
    return DDLEvent("up", table, query, int(action), ts, position={"ts": ts})


def stream(modify: Mapping[str, str] | None = None) -> list[Event]:
    """The shards' events before routing; ``modify``: a shard's own DDL text (for the conflict test)."""
    old = {t: _shapes(t)[0] for t in SHARDS}
    new = {t: _shapes(t)[1] for t in SHARDS}
    create = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, a INT NULL)"

    def alter(t: str, ts: int) -> DDLEvent:
        return _ddl(t, (modify or {}).get(t, MODIFY).format(t=t), ActionType.MODIFY_COLUMN, ts)

    events: list[Event] = [_ddl(t, create.format(t=t), ActionType.CREATE_TABLE, 10 + i) for i, t in enumerate(SHARDS)]
    events += [RowChange(Op.INSERT, old[t], 15, new=(k, k * 10)) for t in SHARDS for k in (1, 2, 3)]
    events += [
        alter("t_0", 20),  # the first shard: the lock opens, nothing runs downstream
        RowChange(Op.INSERT, new["t_0"], 21, new=(4, "four")),  # held (new shape)
        RowChange(Op.INSERT, old["t_1"], 21, new=(4, 40)),  # applied (old shape)
        RowChange(Op.UPDATE, new["t_0"], 22, old=(1, "10"), new=(1, "one")),  # held
        Resolved(23),
        alter("t_1", 30),
        RowChange(Op.DELETE, new["t_1"], 31, old=(2, "20")),  # held
        RowChange(Op.INSERT, old["t_2"], 31, new=(5, 50)),  # applied
        Resolved(32),
        alter("t_2", 40),  # the last shard: the DDL runs once, the held rows follow
        RowChange(Op.INSERT, new["t_2"], 41, new=(6, "six")),
        Resolved(42),
    ]
    return events


def fetch(server: MariaDBServer, sql: str) -> list[tuple[Any, ...]]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


EXPECTED = [
    ("0", 1, "one"),
    ("0", 2, "20"),
    ("0", 3, "30"),
    ("0", 4, "four"),
    ("1", 1, "10"),
    ("1", 3, "30"),
    ("1", 4, "40"),
    ("2", 1, "10"),
    ("2", 2, "20"),
    ("2", 3, "30"),
    ("2", 5, "50"),
    ("2", 6, "six"),
]


def _router(db: str) -> Router:
    rule = RouteRule("up", "t_*", db, "m", extract_table=Extract("c_table", "t_(.*)"))
    return Router([rule], "cf-test")


def _sink(make_sink: Callable[..., MySQLSink], server: MariaDBServer, db: str, **options: Any) -> MySQLSink:
    members = tuple((db, "m", "up", t) for t in SHARDS)
    return make_sink(server, shard_mode="pessimistic", shard_members=members, **options)


def _merged(server: MariaDBServer, db: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in fetch(server, f"SELECT c_table, id, a FROM `{db}`.m ORDER BY c_table, id")]


def _column_type(server: MariaDBServer, db: str) -> str:
    rows = fetch(
        server,
        f"SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{db}' "
        "AND TABLE_NAME = 'm' AND COLUMN_NAME = 'a'",
    )
    return str(rows[0][0])


def _held(server: MariaDBServer, db: str) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in fetch(server, f"SELECT shard_table, commit_ts FROM `{db}_cp`.changefeed_shard_held ORDER BY id")
    ]


def test_rows_held_until_the_last_shard_then_the_ddl_runs_once(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    events = _router(db).route(stream())
    cut = next(i for i, e in enumerate(events) if isinstance(e, DDLEvent) and e.commit_ts == 40)
    sink = _sink(make_sink, mariadb_downstream, db)
    sink.write(events[:cut])
    sink.flush()
    # Two shards ran the DDL: the merged table keeps the old type, their rows wait in the held table.
    assert _column_type(mariadb_downstream, db) == "int(11)"
    assert _held(mariadb_downstream, db) == [("t_0", 21), ("t_0", 22), ("t_1", 31)]
    lock = fetch(mariadb_downstream, f"SELECT state, ddl FROM `{db}_cp`.changefeed_shard_lock")
    assert [r[0] for r in lock] == ["waiting"] and "VARCHAR(10)" in lock[0][1].upper()
    done = fetch(mariadb_downstream, f"SELECT shard_table FROM `{db}_cp`.changefeed_shard_done ORDER BY 1")
    assert [r[0] for r in done] == ["t_0", "t_1"]
    assert (4, 40) in [(r[1], r[2]) for r in _merged(mariadb_downstream, db) if r[0] == "1"]  # old shape applied

    sink.write(events[cut:])
    sink.flush()
    assert _column_type(mariadb_downstream, db) == "varchar(10)"
    assert [(c, int(i), str(a)) for c, i, a in _merged(mariadb_downstream, db)] == EXPECTED
    assert _held(mariadb_downstream, db) == []
    assert fetch(mariadb_downstream, f"SELECT COUNT(*) FROM `{db}_cp`.changefeed_shard_lock") == [(0,)]
    assert sink.stats["ddl"] == 2  # the CREATE TABLE of the first shard and the MODIFY, once


@pytest.mark.parametrize("point", ["shard-held", "shard-ddl"])
def test_a_crash_while_rows_are_held_or_between_the_ddl_and_the_release_replays_to_the_same_table(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink], point: str
) -> None:
    """A crash (the sink dropped without flushing) after the second shard's DDL held its rows, or after
    the DDL ran but before the release committed: the replay from the stored checkpoint ends equal,
    and the DDL is not run again."""
    events = _router(db).route(stream())

    def crash(name: str, info: Mapping[str, Any]) -> None:
        if name == point and info["commit_ts"] == (30 if point == "shard-held" else 40):
            raise CrashError(name)

    sink = _sink(make_sink, mariadb_downstream, db, fault_hook=crash)
    with pytest.raises(CrashError):
        sink.write(events)
    sink.close()
    if point == "shard-ddl":
        assert _column_type(mariadb_downstream, db) == "varchar(10)"  # the DDL ran, the release did not
        assert len(_held(mariadb_downstream, db)) == 3

    again = _sink(make_sink, mariadb_downstream, db)
    checkpoint = again.load_checkpoint()
    assert checkpoint is not None
    replay = [e for e in _router(db).route(stream())]  # from the start: the sink skips what it has
    again.write(replay)
    again.flush()
    assert [(c, int(i), str(a)) for c, i, a in _merged(mariadb_downstream, db)] == EXPECTED
    assert _held(mariadb_downstream, db) == []
    assert again.stats["ddl"] == 0 if point == "shard-ddl" else again.stats["ddl"] == 1


def test_a_different_ddl_while_a_lock_is_pending_stops_with_both_ddls(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    events = _router(db).route(stream({"t_1": "ALTER TABLE {t} MODIFY a VARCHAR(20) NULL"}))
    sink = _sink(make_sink, mariadb_downstream, db)
    with pytest.raises(ShardDDLConflictError) as caught:
        sink.write(events)
    text = str(caught.value)
    assert f"merged table {db}.m" in text, text
    assert "up.t_1" in text and "VARCHAR(20)" in text and "VARCHAR(10)" in text, text
    assert "shards done: up.t_0 (source cf-test)" in text and "up.t_2" in text, text
    with pytest.raises(SinkError):
        sink.write([Resolved(100)])  # the sink stays failed until it is reopened


def test_two_sources_one_lock_the_other_source_releases_its_rows_when_told(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    """Two changefeeds feed one merged table: the lock waits for the shards of both (the shard list in the
    member table); the source whose shard runs the DDL last runs it, the other applies its held rows at
    its next transaction."""
    old, new = _shapes("t_0")
    old1, new1 = _shapes("t_1")
    rule = RouteRule(
        "up", "t_*", db, "m", extract_table=Extract("c_table", "t_(.*)"), extract_source=Extract("c_source", "(.*)")
    )
    routers = {cid: Router([rule], cid) for cid in ("cf-a", "cf-b")}
    a = make_sink(mariadb_downstream, changefeed_id="cf-a", shard_mode="pessimistic",
                  shard_members=((db, "m", "up", "t_0"), (db, "m", "up", "t_1")))  # fmt: skip
    b = make_sink(mariadb_downstream, changefeed_id="cf-b", shard_mode="pessimistic",
                  shard_members=((db, "m", "up", "t_0"),))  # fmt: skip
    create = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, a INT NULL)"

    def write(sink: MySQLSink, cid: str, events: list[Event]) -> None:
        sink.write(routers[cid].route(events))
        sink.flush()

    write(a, "cf-a", [_ddl("t_0", create.format(t="t_0"), ActionType.CREATE_TABLE, 10),
                      RowChange(Op.INSERT, old, 11, new=(1, 1)), RowChange(Op.INSERT, old1, 11, new=(1, 1)),
                      _ddl("t_0", MODIFY.format(t="t_0"), ActionType.MODIFY_COLUMN, 20),
                      RowChange(Op.INSERT, new, 21, new=(2, "a-two")), Resolved(22)])  # fmt: skip
    write(b, "cf-b", [_ddl("t_0", create.format(t="t_0"), ActionType.CREATE_TABLE, 10),
                      RowChange(Op.INSERT, old, 11, new=(1, 1)),
                      _ddl("t_0", MODIFY.format(t="t_0"), ActionType.MODIFY_COLUMN, 20),
                      RowChange(Op.INSERT, new, 21, new=(2, "b-two")), Resolved(22)])  # fmt: skip
    assert _column_type(mariadb_downstream, db) == "int(11)"  # cf-a's t_1 has not run it
    assert len(_held(mariadb_downstream, db)) == 2
    write(a, "cf-a", [_ddl("t_1", MODIFY.format(t="t_1"), ActionType.MODIFY_COLUMN, 30),
                      RowChange(Op.INSERT, new1, 31, new=(3, "a-three")), Resolved(32)])  # fmt: skip
    assert _column_type(mariadb_downstream, db) == "varchar(10)"
    assert _held(mariadb_downstream, db) == [("t_0", 21)]  # cf-b's row: its own sink applies it
    write(b, "cf-b", [RowChange(Op.INSERT, new, 31, new=(4, "b-four")), Resolved(32)])
    rows = fetch(mariadb_downstream, f"SELECT c_source, c_table, id, a FROM `{db}`.m ORDER BY 1, 2, 3")
    assert [tuple(map(str, r)) for r in rows] == [
        ("cf-a", "0", "1", "1"),
        ("cf-a", "0", "2", "a-two"),
        ("cf-a", "1", "1", "1"),
        ("cf-a", "1", "3", "a-three"),
        ("cf-b", "0", "1", "1"),
        ("cf-b", "0", "2", "b-two"),
        ("cf-b", "0", "4", "b-four"),
    ]
    assert _held(mariadb_downstream, db) == []
    assert fetch(mariadb_downstream, f"SELECT COUNT(*) FROM `{db}_cp`.changefeed_shard_lock") == [(0,)]


def test_a_dropped_shard_leaves_the_shard_list_and_releases_a_lock_waiting_only_for_it(
    mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    router = _router(db)
    router.shard_drops = True
    events = [e for e in stream() if e.commit_ts < 30]  # t_1 and t_2 never run the DDL: they are dropped
    drops = [
        _ddl("t_1", "DROP TABLE t_1", ActionType.DROP_TABLE, 30),
        _ddl("t_2", "DROP TABLE t_2", ActionType.DROP_TABLE, 40),  # the last shard waited for: released
        Resolved(41),
    ]
    sink = _sink(make_sink, mariadb_downstream, db)
    sink.write(router.route([*events, *drops[:1]]))
    sink.flush()
    assert _column_type(mariadb_downstream, db) == "int(11)" and len(_held(mariadb_downstream, db)) == 2
    sink.write(router.route(drops[1:]))
    sink.flush()
    assert _column_type(mariadb_downstream, db) == "varchar(10)"
    assert _held(mariadb_downstream, db) == []
    members = fetch(mariadb_downstream, f"SELECT shard_table FROM `{db}_cp`.changefeed_shard_member")
    assert members == [("t_0",)]
    rows = [(c, int(i), str(a)) for c, i, a in _merged(mariadb_downstream, db)]
    assert ("0", 1, "one") in rows and ("0", 4, "four") in rows and len([r for r in rows if r[0] == "1"]) == 4
