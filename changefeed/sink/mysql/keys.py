"""The downstream's unique keys, added to the shapes rows arrive with.

Conflict detection (causality.py) and UPDATE batching (sql.py) must know every unique index a row
touches, or a DELETE that frees a unique value and the INSERT that reuses it can run on two
workers in the wrong order (``Duplicate entry``). A source may not know them: a MySQL binlog's
TABLE_MAP carries at most the primary key (binlog_row_metadata=FULL), never UNIQUE KEYs, and Open
Protocol carries per-column flags only. The indexes that can conflict are the downstream table's,
so the sink reads them from the downstream's information_schema (TiCDC's MySQL sink detects
conflicts over every unique index of the table info; this is the same set for a replicated table).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...model import Index, TableSchema

_UNIQUE_INDEXES = (
    "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 AND COLUMN_NAME IS NOT NULL "
    "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX"
)


def read_unique_indexes(conn: Any, schema: str, table: str) -> tuple[Index, ...]:
    """The table's unique indexes downstream (``()`` for a table it does not have)."""
    columns: dict[str, list[str]] = {}
    with conn.cursor() as cur:
        cur.execute(_UNIQUE_INDEXES, (schema, table))
        for name, column in cur.fetchall():
            columns.setdefault(str(name), []).append(str(column))
    return tuple(Index(n, tuple(cols), primary=n == "PRIMARY", unique=True) for n, cols in columns.items())


def with_unique_indexes(table: TableSchema, downstream: tuple[Index, ...]) -> TableSchema:
    """``table`` plus the downstream unique indexes it lacks (same column set = same index).

    An index over a column the row's shape does not have (a DDL in flight) is left out: the
    shape must stay consistent with its images.
    """
    have = {frozenset(i.columns) for i in table.indexes if i.unique}
    names = table.column_index
    extra = tuple(
        Index(i.name, i.columns, primary=False, unique=True)
        for i in downstream
        if frozenset(i.columns) not in have and all(c in names for c in i.columns)
    )
    if not extra:
        return table
    return replace(table, indexes=(*table.indexes, *extra))


class DownstreamKeys:
    """Per-table cache of `read_unique_indexes`, and of the enriched shape per source shape."""

    def __init__(self) -> None:
        self._indexes: dict[tuple[str, str], tuple[Index, ...]] = {}
        self._shapes: dict[int, tuple[TableSchema, TableSchema]] = {}

    def shape(self, table: TableSchema, read: Any) -> TableSchema:
        """``table`` with the downstream's unique keys; ``read(schema, table)`` queries on a miss."""
        hit = self._shapes.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        key = (table.schema, table.table)
        indexes = self._indexes.get(key)
        if indexes is None:
            indexes = self._indexes[key] = read(table.schema, table.table)
        enriched = with_unique_indexes(table, indexes)
        if len(self._shapes) > 4096:
            self._shapes.clear()
        self._shapes[id(table)] = (table, enriched)
        return enriched

    def forget(self) -> None:
        """After a DDL: indexes may have changed (re-read on next use)."""
        self._indexes.clear()
        self._shapes.clear()
