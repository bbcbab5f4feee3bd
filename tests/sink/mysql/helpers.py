"""Shared pieces of the MySQL sink tests: a random change stream with its expected end state,
reading rows back as model values, and running the diff tool."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pymysql.connections

from changefeed.clients.mysql import parse_mysql_url
from changefeed.diff import Differ, DiffReport
from changefeed.model import Column, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32
from changefeed.sink.mysql.sql import quote_ident, quote_table
from changefeed.testing import MariaDBServer

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_general_ci"}

KV_DDL = (
    "CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, u VARCHAR(32) NULL, n INT NOT NULL, "
    "s VARCHAR(64) NULL, UNIQUE KEY uk (u)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
)


def kv_table(schema: str, table: str = "kv") -> TableSchema:
    return TableSchema(
        schema,
        table,
        (
            Column("id", TypeCode.INT, nullable=False),
            Column("u", TypeCode.VARCHAR, length=32, **UTF8),
            Column("n", TypeCode.INT, nullable=False),
            Column("s", TypeCode.VARCHAR, length=64, **UTF8),
        ),
        (Index("PRIMARY", ("id",), primary=True), Index("uk", ("u",), unique=True)),
    )


@dataclass
class Stream:
    """A change stream over one kv table and the table's content after it."""

    events: list[Event] = field(default_factory=list)
    final: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def rows(self) -> list[RowChange]:
        return [e for e in self.events if isinstance(e, RowChange)]


def kv_stream(table: TableSchema, seed: int, txns: int, start_ts: int = 1000, max_rows: int = 4) -> Stream:
    """Random inserts, updates (value, unique key, primary key) and deletes, in transactions.

    Unique values come from a small pool, so rows keep releasing and taking each other's values:
    the order-sensitive case for parallel workers.
    """
    rng = random.Random(seed)
    rows: dict[int, tuple[Any, ...]] = {}
    holder: dict[str, int] = {}
    pool = [f"u{i}" for i in range(12)]
    next_id = 1
    out = Stream()
    ts = start_ts

    def free_u() -> str | None:
        free = [u for u in pool if u not in holder]
        return rng.choice(free) if free and rng.random() < 0.8 else None

    for t in range(txns):
        ts += rng.randint(1, 3)
        for _ in range(rng.randint(1, max_rows)):
            roll = rng.random()
            if not rows or roll < 0.35:
                rid = next_id
                next_id += 1
                u = free_u()
                new = (rid, u, rng.randint(-1000, 1000), rng.choice(["a", "it's", "日本", None, "x" * 64]))
                rows[rid] = new
                if u is not None:
                    holder[u] = rid
                out.events.append(RowChange(Op.INSERT, table, ts, new=new))
                continue
            rid = rng.choice(sorted(rows))
            old = rows[rid]
            if roll < 0.55:
                new = (rid, old[1], old[2] + 1, old[3])
            elif roll < 0.75:  # move the unique value: release it, maybe take a free one
                if old[1] is not None:
                    del holder[old[1]]
                u = free_u()
                if u is not None:
                    holder[u] = rid
                new = (rid, u, old[2], old[3])
            elif roll < 0.85:  # change the primary key
                nid = next_id
                next_id += 1
                new = (nid, old[1], old[2], old[3])
                if old[1] is not None:
                    holder[old[1]] = nid
            else:
                del rows[rid]
                if old[1] is not None:
                    del holder[old[1]]
                out.events.append(RowChange(Op.DELETE, table, ts, old=old))
                continue
            del rows[rid]
            rows[new[0]] = new
            out.events.append(RowChange(Op.UPDATE, table, ts, old=old, new=new))
        if t % 7 == 6:
            out.events.append(Resolved(ts))  # everything at or below ts is out (TiCDC's meaning)
    out.events.append(Resolved(ts))
    out.final = rows
    return out


def fetch(conn: pymysql.connections.Connection, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def read_kv(server: MariaDBServer, table: TableSchema) -> dict[int, tuple[Any, ...]]:
    with server.connect() as conn:
        return {r[0]: r for r in fetch(conn, f"SELECT id, u, n, s FROM {quote_table(table.schema, table.table)}")}


def read_model(server: MariaDBServer, table: TableSchema, order_by: str = "id") -> list[tuple[Any, ...]]:
    """Rows read back as model values (values.py): ENUM/SET/BIT as ints, temporal as text, ..."""
    exprs = []
    for c in table.columns:
        q = quote_ident(c.name)
        tc = c.type_code
        if tc in (TypeCode.ENUM, TypeCode.SET, TypeCode.BIT):
            exprs.append(f"{q}+0")
        elif tc is TypeCode.FLOAT:
            exprs.append(f"CAST({q} AS DOUBLE)")
        elif tc in (TypeCode.DATE, TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.TIME):
            exprs.append(f"CAST({q} AS CHAR)")
        else:
            exprs.append(q)
    with server.connect() as conn:
        with conn.cursor() as cur:
            cur.execute("SET time_zone='+00:00'")
        rows = fetch(
            conn, f"SELECT {','.join(exprs)} FROM {quote_table(table.schema, table.table)} ORDER BY {order_by}"
        )
    out = []
    for row in rows:
        values = []
        for c, raw in zip(table.columns, row, strict=True):
            value = raw
            if raw is not None and c.type_code is TypeCode.FLOAT:
                value = to_float32(raw)
            elif raw is not None and c.type_code in (TypeCode.ENUM, TypeCode.SET, TypeCode.BIT, TypeCode.YEAR):
                value = int(raw)  # `x+0` may come back as Decimal for BIT(64)
            values.append(value)
        out.append(tuple(values))
    return out


def diff(source: MariaDBServer, target: MariaDBServer, *patterns: str, **kw: Any) -> DiffReport:
    return Differ(parse_mysql_url(source.url), parse_mysql_url(target.url), **kw).run(list(patterns))


def execute(server: MariaDBServer, *sqls: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for sql in sqls:
            cur.execute(sql)
