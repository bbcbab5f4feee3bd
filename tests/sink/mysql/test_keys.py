"""The downstream's unique keys join the row shapes: conflicts over a UNIQUE KEY the source did not describe."""

from __future__ import annotations

from collections.abc import Callable

from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.mysql.causality import row_keys
from changefeed.sink.mysql.keys import with_unique_indexes
from changefeed.testing import MariaDBServer

from .helpers import UTF8, execute, fetch


def _accounts(db: str, indexes: tuple[Index, ...] = (Index("PRIMARY", ("id",), primary=True),)) -> TableSchema:
    columns = (Column("id", TypeCode.INT, nullable=False), Column("email", TypeCode.VARCHAR, length=64, **UTF8))
    return TableSchema(db, "accounts", columns, indexes)


def test_with_unique_indexes_adds_what_is_missing() -> None:
    table = _accounts("s")
    downstream = (
        Index("PRIMARY", ("id",), primary=True, unique=True),
        Index("uk_email", ("email",), unique=True),
        Index("uk_gone", ("email", "dropped_column"), unique=True),
    )
    enriched = with_unique_indexes(table, downstream)
    assert [i.name for i in enriched.indexes] == ["PRIMARY", "uk_email"]
    assert enriched.handle_key == table.handle_key
    assert with_unique_indexes(enriched, downstream) is enriched  # nothing left to add
    freed = RowChange(Op.DELETE, enriched, 2, old=(1, "a@x"))
    reused = RowChange(Op.INSERT, enriched, 3, new=(2, "A@x"))  # a _ci collation: the same unique value
    assert set(row_keys(freed)) & set(row_keys(reused))
    assert not set(row_keys(RowChange(Op.DELETE, table, 2, old=(1, "a@x")))) & set(
        row_keys(RowChange(Op.INSERT, table, 3, new=(2, "A@x")))
    )


def test_a_unique_value_freed_and_reused_applies_in_order_with_workers(
    mariadb_downstream: MariaDBServer, make_sink: Callable[..., MySQLSink], db: str
) -> None:
    execute(
        mariadb_downstream,
        f"CREATE TABLE `{db}`.accounts (id INT PRIMARY KEY, email VARCHAR(64) "
        "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, UNIQUE KEY uk_email (email))",
    )
    table = _accounts(db)  # as binlog files describe it: the primary key only
    n = 300
    events: list = [RowChange(Op.INSERT, table, 10, new=(k, f"e{k}@x")) for k in range(n)]
    events.append(Resolved(10))
    ts = 11
    for k in range(n):  # each e-mail moves to a new account in the next transaction
        events.append(RowChange(Op.DELETE, table, ts, old=(k, f"e{k}@x")))
        events.append(RowChange(Op.INSERT, table, ts + 1, new=(k + n, f"E{k}@x")))
        ts += 2
    events.append(Resolved(ts))
    with make_sink(mariadb_downstream, workers=4, safe_mode=False, safe_mode_duration=0) as sink:
        sink.write(events[: n + 1])
        sink.flush()
        sink.write(events[n + 1 :])
        sink.flush()
    with mariadb_downstream.connect() as conn:
        rows = fetch(conn, f"SELECT id, email FROM `{db}`.accounts ORDER BY id")
    assert rows == [(k + n, f"E{k}@x") for k in range(n)]
