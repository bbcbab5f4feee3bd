"""Row changes as columns: a `RowBlock` is many `RowChange`s of several tables, in commit order.

Why: building one Python object per row and per value is most of what a row costs on its way
from the binlog to an encoder. A block keeps each table's rows as one Arrow record batch
(`TableRows`) and the order between tables as a list of `Segment`s (one per binlog ROWS event),
so an encoder can render whole columns at once and still emit rows in exactly the order, with
exactly the positions, that the `RowChange` path gives. `RowBlock.rows` is that path's events,
for any consumer that is not columnar (yet).

A table's batch has a fixed layout, addressed by position (column names come from data and may
be anything): the table's columns in order (the new image, the old one for deletes), ``op``
(``insert``/``update``/``delete``), ``commit_ts`` (int64), then the old image of updates (NULL
for other rows). Images not carrying every column (binlog_row_image=MINIMAL/NOBLOB) are recorded
as runs of present-column bitmaps; in `RowChange`s those columns are ``ABSENT``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cache
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .events import Op, Position, RowChange, trusted_row
from .schema import Column, TableSchema
from .types import TypeCode
from .values import ABSENT

OP_CODES = {"insert": 0, "update": 1, "delete": 2}
"""The integer code of each op in `TableRows.ops`."""
OP_NAMES = ("insert", "update", "delete")


@cache
def _op_names() -> pa.Array:
    # Made on first use: building an array from Python objects imports pandas (~0.2 s), which
    # Spark's planner processes import this module without ever needing.
    return pa.array(OP_NAMES, pa.string())


def table_batch(
    columns: Sequence[pa.Array], codes: np.ndarray, commit_ts: pa.Array, before: Sequence[pa.Array]
) -> pa.RecordBatch:
    """A `TableRows` batch (the layout above) from its columns, op codes (`OP_CODES`), commit ts and old images."""
    w = len(columns)
    names = [*(str(i) for i in range(w)), "\0op", "\0ts", *(f"\0b{i}" for i in range(w))]
    op = pc.take(_op_names(), pa.array(codes))
    return pa.RecordBatch.from_arrays([*columns, op, commit_ts, *before], names=names)


Runs = Sequence[tuple[int, int]]
"""(present-column bitmap, rows) in row order; bitmap -1: the row has no such image."""

_OPS = (Op.INSERT, Op.UPDATE, Op.DELETE)


@dataclass(slots=True)
class TableRows:
    """One table's rows of a block (see the module docstring for the batch layout)."""

    table_schema: TableSchema
    batch: pa.RecordBatch
    main_runs: Runs | None = None  # None: every new/deleted image carries every column
    before_runs: Runs | None = None  # None: every update's old image carries every column
    # Each row's bytes as received, where a decoder has them (one Open Protocol row value): the
    # Kafka merge tells a resent row by them without building its values.
    raw: Sequence[bytes] | None = None
    _ops: np.ndarray | None = field(default=None, repr=False)
    _images: list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]] | None = field(default=None, repr=False)
    # The table this one is a zero-copy slice of, and where its rows start there: a consumer that
    # meets many small slices (one per Kafka message) gathers them from their few origins at once.
    _root: TableRows | None = field(default=None, repr=False)
    _at: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        width = len(self.table_schema.columns)
        if self.batch.num_columns != 2 * width + 2:
            raise ValueError(
                f"rows of {self.table_schema.qualified_name}: {self.batch.num_columns} Arrow columns"
                f" for {width} table columns (expected {2 * width + 2})"
            )

    @property
    def width(self) -> int:
        return len(self.table_schema.columns)

    @property
    def num_rows(self) -> int:
        n: int = self.batch.num_rows
        return n

    def column(self, i: int) -> pa.Array:
        """Column ``i`` of each row's image: the new one, or the old one for deletes."""
        return self.batch.column(i)

    def before(self, i: int) -> pa.Array:
        """Column ``i`` of the old image of updates (NULL for inserts and deletes)."""
        return self.batch.column(self.width + 2 + i)

    @property
    def op_column(self) -> pa.Array:
        return self.batch.column(self.width)

    @property
    def commit_ts(self) -> np.ndarray:
        ts: np.ndarray = self.batch.column(self.width + 1).to_numpy(zero_copy_only=False)
        return ts

    @property
    def ops(self) -> np.ndarray:
        """int8 op codes (`OP_CODES`), one per row."""
        if self._ops is None:
            codes = np.zeros(self.num_rows, np.int8)
            op = self.op_column
            codes[pc.equal(op, "update").to_numpy(zero_copy_only=False)] = 1
            codes[pc.equal(op, "delete").to_numpy(zero_copy_only=False)] = 2
            self._ops = codes
        return self._ops

    def slice(self, start: int, length: int) -> TableRows:
        """Rows [start, start + length) as their own `TableRows` (zero-copy for the batch)."""
        return TableRows(
            self.table_schema,
            self.batch.slice(start, length),
            _slice_runs(self.main_runs, start, length),
            _slice_runs(self.before_runs, start, length),
            raw=None if self.raw is None else self.raw[start : start + length],
            _ops=None if self._ops is None else self._ops[start : start + length],
            _root=self if self._root is None else self._root,
            _at=self._at + start,
        )

    def with_schema(self, schema: TableSchema) -> TableRows:
        """The same rows under another (equally wide) schema, e.g. with the keys a sink knows of."""
        return TableRows(
            schema,
            self.batch,
            self.main_runs,
            self.before_runs,
            raw=self.raw,
            _ops=self._ops,
            _root=self if self._root is None else self._root,
            _at=self._at,
        )

    @property
    def origin(self) -> tuple[TableRows, int]:
        """The table these rows are a zero-copy slice of and their first row there (self, 0 if none)."""
        return (self, 0) if self._root is None else (self._root, self._at)

    def full(self) -> np.ndarray:
        """Per row: does each of its images carry every column? (False: MINIMAL/NOBLOB images)."""
        out = np.ones(self.num_rows, bool)
        every = (1 << self.width) - 1
        for runs in (self.main_runs, self.before_runs):
            at = 0
            for present, k in runs or ():
                if present not in (-1, every):
                    out[at : at + k] = False
                at += k
        return out

    def row(self, i: int, commit_ts: int | None = None) -> RowChange:
        """Row ``i`` as a new `RowChange` without position (the table's images are built once)."""
        if self._images is None:
            self._images = self.images()
        new, old = self._images[i]
        ts = int(self.batch.column(self.width + 1)[i].as_py()) if commit_ts is None else commit_ts
        return trusted_row(_OPS[self.ops[i]], self.table_schema, ts, new, old)

    def images(self) -> list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]]:
        """(new, old) of every row as the `RowChange` path holds them."""
        w, n = self.width, self.num_rows
        columns = [model_values(c, self.column(i)) for i, c in enumerate(self.table_schema.columns)]
        main = list(zip(*columns, strict=True)) if w else [()] * n
        ops = self.ops
        out: list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]] = []
        updates = np.flatnonzero(ops == 1)
        before: dict[int, tuple[Any, ...]] = {}
        if len(updates):
            picked = self.batch.take(pa.array(updates))
            cols = [model_values(c, picked.column(w + 2 + i)) for i, c in enumerate(self.table_schema.columns)]
            before = dict(zip(updates.tolist(), zip(*cols, strict=True), strict=True))
        main = _with_absent(main, self.main_runs, w)
        if self.before_runs is not None and before:
            olds = _with_absent([before.get(i, ()) for i in range(n)], self.before_runs, w)
            before = {i: olds[i] for i in before}
        for i, (code, image) in enumerate(zip(ops.tolist(), main, strict=True)):
            if code == 0:
                out.append((image, None))
            elif code == 2:
                out.append((None, image))
            else:
                out.append((image, before[i]))
        return out


def model_values(column: Column, values: pa.Array) -> list[Any]:
    """A column's values as the model holds them (DECIMAL of unknown precision travels as text)."""
    out: list[Any] = values.to_pylist()
    if column.type_code is TypeCode.DECIMAL and pa.types.is_string(values.type):
        out = [None if v is None else Decimal(v) for v in out]
    return out


def _slice_runs(runs: Runs | None, start: int, length: int) -> Runs | None:
    """The (bitmap, rows) runs covering rows [start, start + length)."""
    if runs is None:
        return None
    out: list[tuple[int, int]] = []
    at, end = 0, start + length
    for present, k in runs:
        lo, hi = max(at, start), min(at + k, end)
        if lo < hi:
            out.append((present, hi - lo))
        at += k
    return out


def _with_absent(images: list[tuple[Any, ...]], runs: Runs | None, width: int) -> list[tuple[Any, ...]]:
    """Images with the columns their present bitmap leaves out set to ABSENT."""
    if runs is None:
        return images
    every = (1 << width) - 1
    at = 0
    for present, k in runs:
        if present not in (-1, every):
            missing = [i for i in range(width) if not present >> i & 1]
            for j in range(at, at + k):
                image = list(images[j])
                for i in missing:
                    image[i] = ABSENT
                images[j] = tuple(image)
        at += k
    return images


@dataclass(slots=True)
class Segment:
    """Consecutive rows of one table in a block (one binlog ROWS event), all of one transaction.

    ``position`` is the transaction's start position; row ``j`` (from 0) of the segment is at
    ``{**position, "skip": skip + j}``, as the `RowChange` path numbers a transaction's events
    (a decoded Kafka message: ``{topic, partition, offset}`` for every row, ``skip`` None).
    """

    table: int  # index into RowBlock.tables
    rows: int
    commit_ts: int
    position: Mapping[str, Any] | None = None
    skip: int | None = 0  # None: every row is at ``position`` itself (the rows of one Kafka message)

    def row_position(self, j: int) -> Position | None:
        if self.position is None:
            return None
        if self.skip is None:
            return dict(self.position)
        return {**self.position, "skip": self.skip + j}


@dataclass(slots=True)
class RowBlock:
    """Row changes of several tables in commit order (see the module docstring)."""

    kind: ClassVar[str] = "rows"
    tables: list[TableRows]
    segments: list[Segment]

    @property
    def num_rows(self) -> int:
        return sum(s.rows for s in self.segments)

    @property
    def commit_ts(self) -> int:
        """The last row's commit ts (a block sorts where its last row does)."""
        return self.segments[-1].commit_ts if self.segments else 0

    def walk(self) -> Iterator[tuple[Segment, int]]:
        """Every segment in commit order, with the index of its first row in its table's batch."""
        cursor = [0] * len(self.tables)
        for seg in self.segments:
            start = cursor[seg.table]
            cursor[seg.table] = start + seg.rows
            yield seg, start

    def segment_rows(self, seg: Segment, start: int) -> Iterator[RowChange]:
        """One segment's rows as `RowChange`s, with their positions."""
        table = self.tables[seg.table]
        for j in range(seg.rows):
            row = table.row(start + j, seg.commit_ts)
            row.position = seg.row_position(j)
            yield row

    def only(self, keep: Callable[[TableSchema], bool]) -> RowBlock | None:
        """The block without the rows of tables ``keep`` refuses (None: nothing left)."""
        kept = [keep(t.table_schema) for t in self.tables]
        if all(kept):
            return self
        if not any(kept):
            return None
        at = [-1] * len(self.tables)
        tables: list[TableRows] = []
        for i, table in enumerate(self.tables):
            if kept[i]:
                at[i] = len(tables)
                tables.append(table)
        segments = [replace(s, table=at[s.table]) for s in self.segments if kept[s.table]]
        return RowBlock(tables, segments)

    def rows(self) -> Iterator[RowChange]:
        """The block's rows as `RowChange`s, in commit order, with their positions."""
        for seg, start in self.walk():
            yield from self.segment_rows(seg, start)


def expand_blocks(events: Iterable[Any]) -> Iterator[Any]:
    """``events`` with every `RowBlock` replaced by its `RowChange`s (for row-at-a-time consumers)."""
    for event in events:
        if isinstance(event, RowBlock):
            yield from event.rows()
        else:
            yield event


__all__ = ["OP_CODES", "OP_NAMES", "RowBlock", "Segment", "TableRows", "expand_blocks", "model_values"]
