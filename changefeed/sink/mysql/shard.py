"""A shard's DDL on a merged table, decided against the table's columns downstream (DM's optimistic mode).

The rule is `changefeed.dispatch.shardddl.optimistic`; this module only reads what it needs, the
merged table's columns and types from information_schema. The downstream table is the whole
coordination state: a restarted sink (or one replaying a DDL after kill -9) decides the same way.
"""

from __future__ import annotations

from typing import Any

from ...dispatch.route import ShardDDL
from ...dispatch.shardddl import Verdict, optimistic
from ..observe import observer

_COLUMNS = (
    "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"
)


def read_columns(conn: Any, schema: str, table: str) -> dict[str, str]:
    """Lower-case column name -> MySQL column type (``int(11)``, ``varchar(20)``) of a downstream table."""
    with conn.cursor() as cur:
        cur.execute(_COLUMNS, (schema, table))
        return {str(name).lower(): str(kind) for name, kind in cur.fetchall()}


def shard_verdict(conn: Any, ddl: ShardDDL) -> Verdict:
    """Apply or skip ``ddl`` on its merged table; raises `ShardDDLConflictError` for an incompatible one.

    A merged table not there yet (its first CREATE TABLE) takes the DDL as it is.
    """
    columns = read_columns(conn, ddl.schema, ddl.table)
    if not columns:
        return Verdict(True)
    return optimistic(ddl.query, columns, ddl.shard, ddl.shards, target=f"{ddl.schema}.{ddl.table}")


def report_shard_ddl(ddl: ShardDDL, outcome: str) -> None:
    """A shard DDL decision on a merged table for the status file and metrics (`sink/observe.shard_ddl`)."""
    observer().shard_ddl(f"{ddl.schema}.{ddl.table}", ".".join(ddl.shard), ddl.query, outcome, ddl.commit_ts)


__all__ = ["read_columns", "report_shard_ddl", "shard_verdict"]
