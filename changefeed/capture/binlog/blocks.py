"""A binlog range as `RowBlock`s: Arrow-decoded rows in exact commit order, DDL between blocks.

Why not `ArrowCapture`: it batches per table, which loses the order between tables that a sink
must keep (Kafka partitions, storage files and the acknowledged position all follow commit
order). Here each ROWS event becomes a marker that travels through the capture's own event
order (held back with a DDL group exactly as `RowChange`s are, see docs/capture.md); only when
a marker comes out is its event added to its table's `ArrowBatchBuilder`, and a `Segment`
records where its rows go. A block is finished before every DDL, when a table's shape changes,
when it is full, and at the end; the range's one `Resolved` comes last, as in `range_events`.

Positions equal the `RowChange` path's: a transaction's events are numbered from 1 (DDLs and
rows, filtered tables included), and a marker's number is fixed up by the rows of earlier
markers of its transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import CaptureError, ConfigError
from ...model import DDLEvent, Resolved
from ...model.rowblock import RowBlock, Segment, TableRows
from ...model.schema import TableSchema
from .arrow import ArrowBatchBuilder
from .capture import BinlogCapture
from .events import RowsEvent
from .tablemap import TableMap

# MySQL identifiers cannot hold U+0000, so these never clash with a table's own column names.
_BUILDER_NAMES = {"op_column": "\0op", "commit_ts_column": "\0commit_ts", "before_prefix": "\0before:"}

KeepTable = Callable[[str, str], bool]


@dataclass(slots=True)
class _RowsMark:
    """One ROWS event in the capture's event order; ``position`` is set by the capture."""

    ev: RowsEvent
    table_map: TableMap
    table_schema: TableSchema
    commit_ts: int
    where: str
    position: Mapping[str, Any] | None = None


class BlockCapture(BinlogCapture):
    """A `BinlogCapture` whose `blocks` are row blocks, DDL events and one final `Resolved`."""

    def __init__(
        self,
        *args: Any,
        keep: KeepTable | None = None,
        block_rows: int = 65536,
        max_block_bytes: int = 64 << 20,
        decimal: str = "arrow",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.savepoint.skip or self._skip:
            raise ConfigError("a row-block range must start at a transaction boundary (a Resolved position)")
        self.keep = keep
        self.block_rows = block_rows
        self.max_block_bytes = max_block_bytes
        self.decimal = decimal
        self._builders: dict[tuple[str, str], tuple[Any, ArrowBatchBuilder]] = {}
        self._slots: dict[tuple[str, str], int] = {}  # table -> index in the block being built
        self._order: list[ArrowBatchBuilder] = []
        self._segments: list[Segment] = []
        self._rows_in_block = 0
        self._txn: tuple[Mapping[str, Any] | None, int] = (None, 0)  # (transaction start, ordinal fix-up)

    def _rows(self, ev: RowsEvent, ts: int, where: str) -> Iterator[Any]:
        tm = self.effective_map(ev.table_map, where)
        yield _RowsMark(ev, tm, self.table_schema_for(tm, where), ts, where)

    def _kept_table(self, schema: str, table: str) -> bool:
        return self.keep is None or self.keep(schema, table)

    def blocks(self) -> Iterator[RowBlock | DDLEvent | Resolved]:
        """The range's events in commit order: blocks and kept DDLs, then its last `Resolved`."""
        last: Resolved | None = None
        for ev in self.events():
            if type(ev) is _RowsMark:
                yield from self._add(ev)
            elif isinstance(ev, Resolved):
                last = ev
            elif isinstance(ev, DDLEvent) and self._kept_table(ev.schema, ev.table):
                yield from self._finish()
                yield ev
        yield from self._finish()
        if last is not None:
            yield last

    def _builder(self, mark: _RowsMark) -> tuple[ArrowBatchBuilder, bool]:
        """The table's builder for this shape, and whether the block must be finished first."""
        tm, schema = mark.table_map, mark.table_schema
        name = (tm.schema, tm.table)
        key = (tm.signature, schema.version)
        entry = self._builders.get(name)
        if entry is not None and entry[0] == key:
            return entry[1], False
        try:
            builder = ArrowBatchBuilder(
                tm, schema, tz=self.tz, collations=self.collations, decimal=self.decimal, **_BUILDER_NAMES
            )
        except CaptureError as exc:
            raise CaptureError(exc.message, where=mark.where) from None
        self._builders[name] = (key, builder)
        return builder, entry is not None and name in self._slots

    def _add(self, mark: _RowsMark) -> Iterator[RowBlock]:
        tm = mark.table_map
        builder, reshaped = self._builder(mark)
        if reshaped:
            yield from self._finish()
        base: dict[str, Any] | None = None
        number = 0
        if mark.position is not None:
            base = dict(mark.position)
            number = int(base.pop("skip", 0))
        start, fixup = self._txn
        if base != start:
            fixup = 0
        first = number + fixup
        if not self._kept_table(tm.schema, tm.table):
            rows = builder.count(mark.ev, mark.where)
        else:
            rows = builder.add(mark.ev, mark.commit_ts, mark.where)
            self.rows_decoded += rows
            if rows:
                slot = self._slots.get((tm.schema, tm.table))
                if slot is None:
                    slot = self._slots[(tm.schema, tm.table)] = len(self._order)
                    self._order.append(builder)
                self._segments.append(Segment(slot, rows, mark.commit_ts, base, first))
                self._rows_in_block += rows
        self._txn = (base, fixup + rows - 1)  # the marker took one number, its rows take `rows`
        if self._rows_in_block >= self.block_rows or sum(b.nbytes for b in self._order) >= self.max_block_bytes:
            yield from self._finish()

    def _finish(self) -> Iterator[RowBlock]:
        if not self._segments:
            return
        tables: list[TableRows] = []
        for builder in self._order:
            rows = builder.finish_rows()
            assert rows is not None  # a builder gets a slot only with rows
            tables.append(rows)
        block = RowBlock(tables, self._segments)
        self._slots, self._order, self._segments, self._rows_in_block = {}, [], [], 0
        yield block


__all__ = ["BlockCapture"]
