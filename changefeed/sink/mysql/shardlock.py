"""DM's pessimistic shard DDL mode, its state downstream: shard list, locks, held rows.

Why downstream: the lock and the rows it holds are written in the same transaction as the
checkpoint (`checkpoint.py`), so a kill -9 leaves them exactly as the checkpoint says: a restart
replays from the checkpoint and finds the lock and the held rows as they were committed. Several
changefeeds feeding one merged table share these tables (DM keeps its locks in DM-master; the
shared downstream is our DM-master): each registers its shards, and a lock waits for all of them.

Tables, in the sink's metadata schema (``changefeed`` by default):

* ``changefeed_shard_member``: the shards of each merged table, per source (changefeed id);
* ``changefeed_shard_lock``: the pending DDL of a merged table, its state and, while it is being
  run, the merged table's columns before it (what makes the DDL replay-safe);
* ``changefeed_shard_done``: the shards that ran the pending DDL;
* ``changefeed_shard_held``: the rows of those shards, and their DDLs queued behind the pending
  one (DM: a shard that ran it waits whole), serialised as the model's JSONL lines (`model.jsonl`),
  in commit order (``id``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields, replace
from typing import Any

import orjson

from ...dispatch.route import ShardDDL
from ...dispatch.shardlock import ShardKey, ShardLock
from ...errors import SinkError, clip
from ...model import DDLEvent, RowChange
from ...model.jsonl import EventReader, dumps_event
from .sql import quote_table

TableName = tuple[str, str]
Member = tuple[str, str, str, str]  # target schema, target table, shard schema, shard table
Held = RowChange | ShardDDL  # a held row, or a shard's DDL queued behind the pending one

_NAME = "VARCHAR(64) NOT NULL"
_SOURCE = "VARCHAR(255) NOT NULL"


class ShardLockStore:
    """SQL over the four tables; every method runs in the caller's transaction (the caller commits)."""

    def __init__(self, schema: str = "changefeed") -> None:
        self.schema = schema
        self.member = quote_table(schema, "changefeed_shard_member")
        self.lock = quote_table(schema, "changefeed_shard_lock")
        self.done = quote_table(schema, "changefeed_shard_done")
        self.held = quote_table(schema, "changefeed_shard_held")

    def create_sql(self) -> list[str]:
        shard = f"source {_SOURCE}, shard_schema {_NAME}, shard_table {_NAME}"
        return [
            f"CREATE DATABASE IF NOT EXISTS {quote_table('', self.schema)}",
            f"CREATE TABLE IF NOT EXISTS {self.member} (target_schema {_NAME}, target_table {_NAME}, {shard},"
            " PRIMARY KEY (target_schema, target_table, source, shard_schema, shard_table))"
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
            f"CREATE TABLE IF NOT EXISTS {self.lock} (target_schema {_NAME}, target_table {_NAME},"
            " ddl LONGTEXT NOT NULL, norm LONGTEXT NOT NULL, commit_ts BIGINT UNSIGNED NOT NULL,"
            " state VARCHAR(16) NOT NULL, columns_before LONGTEXT NULL,"
            " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
            " PRIMARY KEY (target_schema, target_table)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
            f"CREATE TABLE IF NOT EXISTS {self.done} (target_schema {_NAME}, target_table {_NAME}, {shard},"
            " PRIMARY KEY (target_schema, target_table, source, shard_schema, shard_table))"
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
            f"CREATE TABLE IF NOT EXISTS {self.held} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            f" target_schema {_NAME}, target_table {_NAME}, {shard}, commit_ts BIGINT UNSIGNED NOT NULL,"
            " row_json LONGTEXT NOT NULL, KEY by_target (target_schema, target_table, source, id))"
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        ]

    def ensure(self, conn: Any) -> None:
        with conn.cursor() as cur:
            for sql in self.create_sql():
                cur.execute(sql)
        conn.commit()

    # ------------------------------------------------------------------ shard list

    def register(self, conn: Any, source: str, members: Iterable[Member]) -> None:
        """This source's shards as read from it at start: replaces what it registered before."""
        with conn.cursor() as cur:
            cur.execute(f"DELETE FROM {self.member} WHERE source = %s", (source,))
            rows = [(t[0], t[1], source, t[2], t[3]) for t in sorted(set(members))]
            if rows:
                cur.executemany(
                    f"INSERT INTO {self.member} (target_schema, target_table, source, shard_schema, shard_table)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    rows,
                )

    def add_member(self, conn: Any, target: TableName, shard: ShardKey) -> None:
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT IGNORE INTO {self.member} (target_schema, target_table, source, shard_schema, shard_table)"
                " VALUES (%s, %s, %s, %s, %s)",
                (*target, *shard),
            )

    def remove_member(self, conn: Any, target: TableName, shard: ShardKey) -> None:
        with conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM {self.member} WHERE target_schema = %s AND target_table = %s AND source = %s"
                " AND shard_schema = %s AND shard_table = %s",
                (*target, *shard),
            )

    def members(self, conn: Any, target: TableName) -> set[ShardKey]:
        """Every source's shards of ``target``."""
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT source, shard_schema, shard_table FROM {self.member}"
                " WHERE target_schema = %s AND target_table = %s",
                target,
            )
            return {(str(a), str(b), str(c)) for a, b, c in cur.fetchall()}

    # ------------------------------------------------------------------ locks

    def locks(self, conn: Any) -> dict[TableName, ShardLock]:
        """Every lock, with the shards that ran its DDL."""
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT target_schema, target_table, ddl, norm, commit_ts, state, columns_before FROM {self.lock}"
            )
            found = {
                (str(s), str(t)): ShardLock(
                    (str(s), str(t)),
                    str(ddl),
                    str(norm),
                    int(ts),
                    state=str(state),
                    columns=orjson.loads(columns) if columns else None,
                )
                for s, t, ddl, norm, ts, state, columns in cur.fetchall()
            }
            cur.execute(f"SELECT target_schema, target_table, source, shard_schema, shard_table FROM {self.done}")
            done: dict[TableName, set[ShardKey]] = {}
            for s, t, source, a, b in cur.fetchall():
                done.setdefault((str(s), str(t)), set()).add((str(source), str(a), str(b)))
        return {k: _with_done(v, done.get(k, set())) for k, v in found.items()}

    def lock_of(self, conn: Any, target: TableName, for_update: bool = False) -> ShardLock | None:
        """``target``'s lock as stored; ``for_update``: row-locked until the transaction ends, so that two
        sources running the last shards' DDL at once decide one after the other (one of them releases)."""
        where = "WHERE target_schema = %s AND target_table = %s"
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT ddl, norm, commit_ts, state, columns_before FROM {self.lock} {where}"
                + (" FOR UPDATE" if for_update else ""),
                target,
            )
            row = cur.fetchone()
            if row is None:
                return None
            ddl, norm, ts, state, columns = row
            cur.execute(f"SELECT source, shard_schema, shard_table FROM {self.done} {where}", target)
            done = frozenset((str(a), str(b), str(c)) for a, b, c in cur.fetchall())
        return ShardLock(
            target, str(ddl), str(norm), int(ts), done, str(state), orjson.loads(columns) if columns else None
        )

    def state(self, conn: Any, target: TableName) -> str | None:
        """The stored state of ``target``'s lock (None: no lock)."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT state FROM {self.lock} WHERE target_schema = %s AND target_table = %s", target)
            row = cur.fetchone()
        return None if row is None else str(row[0])

    def save(self, conn: Any, lock: ShardLock) -> None:
        """Upsert the lock and its shards done."""
        columns = orjson.dumps(dict(lock.columns)).decode() if lock.columns is not None else None
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.lock} (target_schema, target_table, ddl, norm, commit_ts, state, columns_before,"
                " updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, NOW(6)) ON DUPLICATE KEY UPDATE"
                " state = VALUES(state), columns_before = VALUES(columns_before), updated_at = VALUES(updated_at)",
                (*lock.target, lock.ddl, lock.norm, lock.commit_ts, lock.state, columns),
            )
            cur.executemany(
                f"INSERT IGNORE INTO {self.done} (target_schema, target_table, source, shard_schema, shard_table)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(*lock.target, *s) for s in sorted(lock.done)],
            )

    def clear(self, conn: Any, target: TableName, source: str, held_ids: Sequence[int] | None = None) -> bool:
        """This source's held entries (only ``held_ids`` when given: the rest stay queued) and shards done
        deleted; the lock too when no other source still has rows to release (else it is marked released
        for them). Returns whether the lock is gone."""
        where = "target_schema = %s AND target_table = %s"
        with conn.cursor() as cur:
            if held_ids is None:
                cur.execute(f"DELETE FROM {self.held} WHERE {where} AND source = %s", (*target, source))
            elif held_ids:
                marks = ", ".join(["%s"] * len(held_ids))
                cur.execute(
                    f"DELETE FROM {self.held} WHERE {where} AND source = %s AND id IN ({marks})",
                    (*target, source, *held_ids),
                )
            cur.execute(f"DELETE FROM {self.done} WHERE {where} AND source = %s", (*target, source))
            cur.execute(f"SELECT COUNT(*) FROM {self.done} WHERE {where}", target)
            others = int(cur.fetchone()[0])
            if others:
                cur.execute(f"UPDATE {self.lock} SET state = 'released' WHERE {where}", target)
            else:
                cur.execute(f"DELETE FROM {self.lock} WHERE {where}", target)
        return not others

    # ------------------------------------------------------------------ held rows

    def hold(self, conn: Any, source: str, rows: Sequence[tuple[ShardKey, Held]]) -> None:
        """Held rows and queued DDLs, in order (``id`` keeps it)."""
        if not rows:
            return
        values = []
        for shard, event in rows:
            if isinstance(event, RowChange):
                target = (event.table_schema.schema, event.table_schema.table)
            else:
                target = (event.schema, event.table)
            values.append((*target, source, shard[1], shard[2], event.commit_ts, dumps_event(event).decode()))
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.held} (target_schema, target_table, source, shard_schema, shard_table,"
                " commit_ts, row_json) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                values,
            )

    def held_events(self, conn: Any, target: TableName, source: str) -> list[tuple[int, ShardKey, Held]]:
        """This source's held entries of ``target`` in commit order: (id, shard, row or queued DDL)."""
        reader = EventReader(f"{self.held}")
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT id, shard_schema, shard_table, row_json FROM {self.held}"
                " WHERE target_schema = %s AND target_table = %s AND source = %s ORDER BY id",
                (*target, source),
            )
            out: list[tuple[int, ShardKey, Held]] = []
            for row_id, schema, table, line in cur.fetchall():
                event = reader.parse(line, where=f"{self.held} id {row_id}")
                shard = (source, str(schema), str(table))
                if isinstance(event, DDLEvent):
                    values = {f.name: getattr(event, f.name) for f in fields(DDLEvent)}
                    event = ShardDDL(**values, shard=shard[1:])
                elif not isinstance(event, RowChange):
                    raise SinkError(f"held entry {row_id} of {'.'.join(target)} is not a row or a DDL: {clip(line)}")
                out.append((int(row_id), shard, event))
        return out

    def held_rows(self, conn: Any, target: TableName, source: str) -> list[RowChange]:
        """This source's held rows of ``target``, in commit order (a queued DDL among them is an error:
        the caller releases rows only)."""
        out = []
        for row_id, _, event in self.held_events(conn, target, source):
            if not isinstance(event, RowChange):
                raise SinkError(
                    f"held entry {row_id} of {'.'.join(target)} is a queued DDL where only rows were expected: "
                    f"{clip(event.query)}"
                )
            out.append(event)
        return out


def _with_done(lock: ShardLock, done: set[ShardKey]) -> ShardLock:
    return replace(lock, done=frozenset(done))


__all__ = ["Held", "Member", "ShardLockStore"]
