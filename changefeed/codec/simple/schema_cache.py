"""The consumer side's memory: table schemas by (schema, table, version), and DMLs waiting for one.

Simple DML messages carry no column types, only ``database``/``table``/``schemaVersion``; the
consumer must have seen a DDL or BOOTSTRAP with that TableSchema first (seed 002, "メッセージの消費方法").
A consumer that joins midway holds DMLs until a BOOTSTRAP (sent every 120 s / 10000 rows by
TiCDC) or a DDL provides the schema, then releases them in their original order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...model import Resolved, TableSchema
from ..base import Message
from .common import Parsed

SchemaKey = tuple[str, str, int]


class SchemaCache:
    """TableSchema by (schema, table, version).

    RENAME TABLE keeps the version (TiDB limitation, seed 002 注記), so a renamed table lives
    under its new name and version as well as the old one: DDL messages cache both their
    ``tableSchema`` and ``preTableSchema``.
    """

    def __init__(self) -> None:
        self._schemas: dict[SchemaKey, TableSchema] = {}

    def __len__(self) -> int:
        return len(self._schemas)

    def __contains__(self, key: SchemaKey) -> bool:
        return key in self._schemas

    def get(self, key: SchemaKey) -> TableSchema | None:
        return self._schemas.get(key)

    def add(self, ts: TableSchema) -> bool:
        """Cache ``ts``; True when its key was new (held DMLs may now be released)."""
        key = (ts.schema, ts.table, ts.version)
        if self._schemas.get(key) is ts:
            return False
        new = key not in self._schemas
        self._schemas[key] = ts
        return new

    def keys(self) -> list[SchemaKey]:
        return list(self._schemas)


@dataclass(slots=True)
class Held:
    """A DML waiting for its schema, or a watermark waiting for the DMLs received before it."""

    parsed: Parsed | None
    message: Message | None
    where: str
    resolved: Resolved | None = None

    @property
    def table(self) -> tuple[str, str]:
        assert self.parsed is not None
        return self.parsed.database, self.parsed.table

    @property
    def key(self) -> SchemaKey:
        assert self.parsed is not None
        return self.parsed.database, self.parsed.table, self.parsed.schema_version

    @property
    def size(self) -> int:
        return self.parsed.size if self.parsed is not None else 0


class PendingQueue:
    """Held DMLs in arrival order, with watermarks as barriers between them.

    Release rule (`ready`): a DML goes out when its schema is cached and no earlier DML of the
    same table is still waiting (per-table order); a watermark goes out only when every DML
    received before it has gone out (a watermark promises nothing earlier is outstanding).
    """

    def __init__(self) -> None:
        self.entries: list[Held] = []
        self.dml_count = 0
        self.dml_bytes = 0  # the held DMLs' `Parsed.size`, summed
        self.blocked: dict[tuple[str, str], int] = {}  # table -> held DMLs of it

    def __len__(self) -> int:
        return len(self.entries)

    def hold(self, entry: Held) -> None:
        if entry.resolved is not None:
            if self.entries and self.entries[-1].resolved is not None:
                self.entries[-1] = entry  # a later watermark subsumes an adjacent earlier one
            else:
                self.entries.append(entry)
            return
        self.entries.append(entry)
        self.dml_count += 1
        self.dml_bytes += entry.size
        self.blocked[entry.table] = self.blocked.get(entry.table, 0) + 1

    def is_blocked(self, table: tuple[str, str]) -> bool:
        return table in self.blocked

    def ready(self, known: Callable[[SchemaKey], bool]) -> list[Held]:
        """Remove and return the entries that may go out now, in order."""
        out: list[Held] = []
        keep: list[Held] = []
        waiting: set[tuple[str, str]] = set()
        for entry in self.entries:
            if entry.resolved is not None:
                (keep if waiting else out).append(entry)
                continue
            if entry.table in waiting or not known(entry.key):
                waiting.add(entry.table)
                keep.append(entry)
                continue
            out.append(entry)
        if out:
            self.entries = keep
            self._recount()
        return out

    def requeue(self, entries: list[Held]) -> None:
        """Put released-but-undelivered entries back in front (an earlier one failed to decode)."""
        if entries:
            self.entries = entries + self.entries
            self._recount()

    def clear(self) -> list[Held]:
        entries, self.entries = self.entries, []
        self._recount()
        return entries

    def _recount(self) -> None:
        self.blocked.clear()
        self.dml_count = self.dml_bytes = 0
        for entry in self.entries:
            if entry.resolved is None:
                self.dml_count += 1
                self.dml_bytes += entry.size
                self.blocked[entry.table] = self.blocked.get(entry.table, 0) + 1
