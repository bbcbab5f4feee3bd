"""Snapshot signals: a row inserted into a table on the source asks a running changefeed to snapshot tables.

Debezium's mechanism (its "signaling" docs: a ``signal.data.collection`` table with ``id``,
``type``, ``data`` columns and an ``execute-snapshot`` row whose ``data`` is
``{"data-collections": [...], "type": "incremental"}``), kept in its words so a Debezium user
knows it. The row reaches the changefeed through the binlog like any change, so the snapshot
starts at a well-defined point of the stream, and a restarted job that reads the row again plans
the same snapshot. ``changefeed snapshot`` writes such a row (`signal_row`).

Ours differs in two ways: ``data-collections`` are TiDB table-filter patterns (``shop.*``,
``shop.orders``; Debezium takes regular expressions), and an optional ``changefeed`` member
names the changefeed meant, for sources read by several.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from ...errors import CaptureError, ConfigError
from ...model.events import Op, RowChange

#: The signal table by default (schema, table); ``[source] signal-table`` names another.
DEFAULT_SIGNAL_TABLE = ("changefeed", "changefeed_signal")
#: Debezium's signal table shape (its docs' example), created by ``changefeed snapshot`` if missing.
SIGNAL_COLUMNS = "id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL"
EXECUTE_SNAPSHOT = "execute-snapshot"
_MAX_PATTERNS = 1000


@dataclass(frozen=True)
class Signal:
    """An ``execute-snapshot`` signal for this changefeed: which tables (table-filter patterns)."""

    id: str
    tables: tuple[str, ...]


def parse_signal_table(text: str) -> tuple[str, str]:
    schema, sep, table = text.strip().partition(".")
    if not sep or not schema or not table:
        raise ConfigError(f"signal-table must be schema.table, got {text[:80]!r}")
    return schema, table


def read_signal(row: RowChange, changefeed: str, where: str) -> Signal | None:
    """The snapshot an inserted signal row asks of ``changefeed``; None for other signals and changefeeds.

    A row that claims to be an ``execute-snapshot`` signal but is malformed is an error naming
    its id and ``where`` (a signal silently ignored would look like a snapshot that never ran).
    """
    if row.op is not Op.INSERT or row.new is None:
        return None
    names = [c.name.lower() for c in row.table_schema.columns]
    if not {"id", "type", "data"} <= set(names):
        raise CaptureError(
            f"signal table {row.table_schema.qualified_name} needs columns id, type, data ({SIGNAL_COLUMNS})",
            where=where,
        )
    values = dict(zip(names, row.new, strict=True))
    if _text(values["type"]) != EXECUTE_SNAPSHOT:
        return None  # Debezium's other signal types (log, pause, ...) are not ours
    sid = _text(values["id"])
    try:
        data = orjson.loads(_text(values["data"]) or "null")
    except orjson.JSONDecodeError as exc:
        raise CaptureError(f"snapshot signal {sid[:42]!r}: data is not JSON ({exc})", where=where) from None
    if not isinstance(data, dict):
        raise CaptureError(f"snapshot signal {sid[:42]!r}: data must be a JSON object", where=where)
    target = data.get("changefeed")
    if target is not None and target != changefeed:
        return None
    kind = data.get("type", "incremental")
    if not isinstance(kind, str) or kind.lower() != "incremental":
        raise CaptureError(f"snapshot signal {sid[:42]!r}: type must be incremental, not {kind!r}", where=where)
    tables = data.get("data-collections")
    if (
        not isinstance(tables, list)
        or not tables
        or len(tables) > _MAX_PATTERNS
        or not all(isinstance(t, str) and t.strip() for t in tables)
    ):
        raise CaptureError(
            f"snapshot signal {sid[:42]!r}: data-collections must be a list of table patterns", where=where
        )
    return Signal(sid, tuple(t.strip() for t in tables))


def signal_row(changefeed: str, tables: list[str]) -> tuple[str, str, str]:
    """(id, type, data) of the row that asks ``changefeed`` to snapshot ``tables``."""
    data = {"data-collections": tables, "type": "incremental", "changefeed": changefeed}
    return uuid.uuid4().hex, EXECUTE_SNAPSHOT, orjson.dumps(data).decode()


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)
