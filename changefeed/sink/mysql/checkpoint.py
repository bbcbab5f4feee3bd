"""The downstream checkpoint table: where a changefeed resumes, written with the rows it covers.

One row per changefeed, upserted inside the same downstream transaction as the rows (single
worker), so the checkpoint and the data are durable together or not at all: the exactly-once
half of DM's checkpoint design (``dm_meta.<task>_syncer_checkpoint``), without DM's separate
flush interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ...clients.mysql import Connection
from .sql import quote_table

__all__ = ["CHECKPOINT_TABLE", "Checkpoint", "CheckpointTable"]

CHECKPOINT_TABLE = "changefeed_checkpoint"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Everything with commit_ts <= ``commit_ts`` is applied; ``position`` is the source's resume point."""

    commit_ts: int
    position: Mapping[str, Any] | None = None


class CheckpointTable:
    """SQL for ``<schema>.changefeed_checkpoint`` (schema default ``changefeed``)."""

    def __init__(self, schema: str = "changefeed", table: str = CHECKPOINT_TABLE) -> None:
        self.schema = schema
        self.name = quote_table(schema, table)

    def create_sql(self) -> list[str]:
        return [
            f"CREATE DATABASE IF NOT EXISTS {quote_table('', self.schema)}",
            f"CREATE TABLE IF NOT EXISTS {self.name} ("
            " changefeed_id VARCHAR(255) NOT NULL PRIMARY KEY,"
            " commit_ts BIGINT UNSIGNED NOT NULL,"
            " position LONGTEXT NULL,"  # JSON text; LONGTEXT works on MySQL 5.7+ and MariaDB alike
            " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
            ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        ]

    def ensure(self, conn: Connection) -> None:
        with conn.cursor() as cur:
            for sql in self.create_sql():
                cur.execute(sql)
        conn.commit()

    def upsert_sql(self) -> str:
        """The upsert with ``%s`` placeholders for (changefeed id, commit_ts, position JSON)."""
        return (
            f"INSERT INTO {self.name} (changefeed_id, commit_ts, position, updated_at) VALUES (%s,%s,%s,NOW(6))"
            " ON DUPLICATE KEY UPDATE commit_ts=VALUES(commit_ts), position=VALUES(position),"
            " updated_at=VALUES(updated_at)"
        )

    @staticmethod
    def position_json(position: Mapping[str, Any] | None) -> str | None:
        if position is None:
            return None
        return orjson.dumps(dict(position), default=str, option=orjson.OPT_NON_STR_KEYS).decode()

    def save(self, conn: Connection, changefeed_id: str, checkpoint: Checkpoint) -> None:
        """Upsert in the connection's current transaction (the caller commits)."""
        with conn.cursor() as cur:
            cur.execute(
                self.upsert_sql(),
                (changefeed_id, checkpoint.commit_ts, self.position_json(checkpoint.position)),
            )

    def load(self, conn: Connection, changefeed_id: str) -> Checkpoint | None:
        with conn.cursor() as cur:
            cur.execute(f"SELECT commit_ts, position FROM {self.name} WHERE changefeed_id=%s", (changefeed_id,))
            row = cur.fetchone()
        if row is None:
            return None
        commit_ts, position = row
        return Checkpoint(int(commit_ts), orjson.loads(position) if position else None)
