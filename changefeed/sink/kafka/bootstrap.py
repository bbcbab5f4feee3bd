"""When the Simple protocol's BOOTSTRAP messages are due (seed 002, "ブートストラップ"; spec §3.3).

TiCDC's rules: a table's BOOTSTRAP goes out before its first DML; then again every
``send-bootstrap-interval-in-sec`` seconds or every ``send-bootstrap-in-msg-count`` DML messages
of that table, whichever comes first; a table with no DML for 30 minutes is inactive and gets no
more BOOTSTRAP until its next DML (which counts as a first one again); both settings 0 disables
BOOTSTRAP entirely. Pure apart from the injectable clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ...model import RowChange, TableSchema

INACTIVE_AFTER_S = 30 * 60  # TiCDC's maxInactiveDuration


@dataclass(slots=True)
class _Table:
    schema: TableSchema
    last_sent: float
    last_dml: float
    count: int = 0


class BootstrapPolicy:
    def __init__(
        self,
        interval_s: int,
        msg_count: int,
        *,
        inactive_after_s: float = INACTIVE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s < 0 or msg_count < 0:
            raise ValueError("send-bootstrap-interval-in-sec and send-bootstrap-in-msg-count must be >= 0")
        self.interval_s = interval_s
        self.msg_count = msg_count
        self.inactive_after_s = inactive_after_s
        self._clock = clock
        self._tables: dict[tuple[str, str], _Table] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.interval_s or self.msg_count)

    def before_row(self, row: RowChange) -> TableSchema | None:
        """Called before ``row`` is sent: the schema to BOOTSTRAP first, or None."""
        return self.before(row.table_schema)

    def before(self, schema: TableSchema) -> TableSchema | None:
        """Called before a row of ``schema`` is sent: the schema to BOOTSTRAP first, or None."""
        if not self.enabled:
            return None
        now = self._clock()
        key = (schema.schema, schema.table)
        table = self._tables.get(key)
        due = False
        if table is None or now - table.last_dml > self.inactive_after_s:
            table = self._tables[key] = _Table(schema, now, now)
            due = True
        else:
            table.schema = schema  # BOOTSTRAP describes the newest version
            due = self._due(table, now)
        if due:
            table.last_sent = now
            table.count = 0
        table.count += 1
        table.last_dml = now
        return table.schema if due else None

    def due(self) -> list[TableSchema]:
        """Tables whose interval elapsed without DML-triggered BOOTSTRAP; inactive ones are dropped."""
        if not self.enabled:
            return []
        now = self._clock()
        out: list[TableSchema] = []
        for key, table in list(self._tables.items()):
            if now - table.last_dml > self.inactive_after_s:
                del self._tables[key]  # TiCDC stops sending BOOTSTRAP for inactive tables
            elif self._due(table, now):
                table.last_sent = now
                table.count = 0
                out.append(table.schema)
        return out

    def _due(self, table: _Table, now: float) -> bool:
        return bool(
            (self.msg_count and table.count >= self.msg_count)
            or (self.interval_s and now - table.last_sent >= self.interval_s)
        )
