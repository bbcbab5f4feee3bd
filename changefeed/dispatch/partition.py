"""Partition dispatchers that pick the same Kafka partition TiCDC would (spec §4.1-4.2).

TiCDC hashes with "position inertia": each Write(parts...) XORs ``crc32_ieee(concat(parts))`` into
a uint32, so the order of writes does not matter; partition = hash % partition count.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..model import ABSENT, Column, RowChange, TableSchema, canonical_text
from ..model.rowblock import TableRows
from ..model.schemacache import PlanCache

Choice = tuple[int, str]
"""(partition, partition key): the key is what Pulsar would hash; Kafka uses the partition."""


def hash_value(column: Column, value: Any) -> bytes:
    """The bytes TiCDC feeds the hash for one value: raw bytes for binary strings, else its text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return canonical_text(column, value).encode("ascii")


class PartitionDispatcher(ABC):
    """Chooses a partition for a row (DDL and resolved events are broadcast by the sink)."""

    @abstractmethod
    def partition(self, row: RowChange, partitions: int) -> Choice: ...

    def partitions_of(self, rows: TableRows, partitions: int) -> np.ndarray | None:
        """The partition of every row of one table at once, or None: ask `partition` row by row."""
        return None


class TableDispatcher(PartitionDispatcher):
    """``table`` (and ``default``): Write(schema, table) with the logical names."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], int] = {}

    def partition(self, row: RowChange, partitions: int) -> Choice:
        key = (row.schema, row.table)
        h = self._cache.get(key)
        if h is None:
            h = self._cache[key] = zlib.crc32(row.schema.encode() + row.table.encode())
        return h % partitions, f"{row.schema}.{row.table}"

    def partitions_of(self, rows: TableRows, partitions: int) -> np.ndarray:
        ts = rows.table_schema
        return np.full(rows.num_rows, zlib.crc32(ts.schema.encode() + ts.table.encode()) % partitions, np.int64)


class TsDispatcher(PartitionDispatcher):
    """``ts``: commitTs % partitions."""

    def partition(self, row: RowChange, partitions: int) -> Choice:
        return row.commit_ts % partitions, str(row.commit_ts)

    def partitions_of(self, rows: TableRows, partitions: int) -> np.ndarray:
        return rows.commit_ts % partitions


class _ColumnHashDispatcher(PartitionDispatcher):
    """Write(schema, table), then Write(name, value) per chosen column (new row, old for DELETE)."""

    def __init__(self, null_as_text: bool) -> None:
        # [tiflow] hashes a NULL as the string "null"; [ticdc] skips the column (spec §4.2).
        self._null_as_text = null_as_text
        self._positions: PlanCache[tuple[int, ...]] = PlanCache(self._columns)  # hashed columns per schema

    @abstractmethod
    def _columns(self, table: TableSchema) -> tuple[int, ...]: ...

    def hash(self, row: RowChange) -> int:
        table = row.table_schema
        image = row.image
        h = zlib.crc32(table.schema.encode() + table.table.encode())
        for pos in self._positions.get(table):
            column = table.columns[pos]
            value = image[pos]
            if value is ABSENT:
                continue
            if value is None:
                if not self._null_as_text:
                    continue
                data = b"null"
            else:
                data = hash_value(column, value)
            h ^= zlib.crc32(column.name.encode() + data)
        return h

    def partition(self, row: RowChange, partitions: int) -> Choice:
        h = self.hash(row)
        return h % partitions, str(h)


class IndexValueDispatcher(_ColumnHashDispatcher):
    """``index-value``: the handle-key columns, or those of the index named by ``index``."""

    def __init__(self, index: str | None = None, null_as_text: bool = False) -> None:
        super().__init__(null_as_text)
        self.index = index

    def _columns(self, table: TableSchema) -> tuple[int, ...]:
        if not self.index:
            return table.handle_key
        matches = [i for i in table.indexes if i.name.lower() == self.index.lower()]
        if len(matches) != 1:
            raise ConfigError(f"index-value dispatcher: {table.qualified_name} has no index named {self.index!r}")
        return tuple(table.column_index[n] for n in matches[0].columns)


class ColumnsDispatcher(_ColumnHashDispatcher):
    """``columns``: configured names matched case-insensitively; the schema's spelling is hashed."""

    def __init__(self, columns: Sequence[str], null_as_text: bool = False) -> None:
        super().__init__(null_as_text)
        if not columns:
            raise ConfigError("the columns dispatcher needs at least one column")
        self.columns = tuple(columns)

    def _columns(self, table: TableSchema) -> tuple[int, ...]:
        by_lower = {c.name.lower(): i for i, c in enumerate(table.columns)}
        missing = [n for n in self.columns if n.lower() not in by_lower]
        if missing:
            raise ConfigError(f"columns dispatcher: {table.qualified_name} has no column(s) {missing}")
        return tuple(by_lower[n.lower()] for n in self.columns)


def make_partition_dispatcher(
    rule: str, *, index: str | None = None, columns: Sequence[str] = (), compat: str = "ticdc"
) -> PartitionDispatcher:
    """A dispatcher from a ``[[sink.dispatchers]] partition = ...`` value."""
    null_as_text = compat == "tiflow"
    name = (rule or "default").lower()
    if columns:
        return ColumnsDispatcher(columns, null_as_text)
    if name in ("default", "table"):
        # Current tiflow and ticdc both map `default` to the table dispatcher (spec §4.2).
        return TableDispatcher()
    if name == "ts":
        return TsDispatcher()
    if name in ("index-value", "rowid"):
        return IndexValueDispatcher(index, null_as_text)
    if name == "columns":
        raise ConfigError("partition = 'columns' needs a `columns` list")
    raise ConfigError(f"unknown partition dispatcher {rule!r} (default, table, ts, index-value, columns)")
