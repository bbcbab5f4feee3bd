"""Compare a MySQL/MariaDB source with the Delta / Iceberg tables a changefeed keeps (``diff --target delta://``).

The lake side is each table's newest state (`changefeed.sink.lake.reader.as_of`: an scd2 table's
open versions, a changelog folded); the source side is read in the diff's UTC session with
ENUM, SET and BIT as their numbers, the form the lake stores (docs/lakehouse.md, "Types"). Both
sides become the same Python values per MySQL type before they are compared by the table's key
(or as multisets without one), in memory: the documented limit, as for keyless tables in
`compare.py`. No fix-up SQL: a lake table is not written with SQL.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from ..clients.mysql import MySQLParams
from ..model.tablefilter import TableFilter
from ..ops.progress import Progress
from ..sink.lake.common import LakeError, LakeSink
from ..sink.lake.reader import as_of, open_lake, tables, ts_text
from ..sink.mysql.sql import quote_ident
from .compare import (
    BINARY_TYPES,
    SYSTEM_SCHEMAS,
    ColumnInfo,
    DiffError,
    DiffReport,
    Recorder,
    RowDiff,
    Side,
    TableInfo,
    TableReport,
    select_expr,
    text_of,
)

log = logging.getLogger(__name__)

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
#: Stored by the lake as their numbers (ENUM index, SET bitmask, BIT bits): the source selects ``c+0``.
_AS_NUMBER = frozenset({"enum", "set", "bit"})
_BINARY = BINARY_TYPES - {"bit"}


def _source_value(data_type: str) -> Callable[[Any], Any]:
    """Raw text-protocol bytes of a column of ``data_type`` -> the value the lake's reader gives back."""
    if data_type in _INTEGERS or data_type in _AS_NUMBER:
        return lambda v: int(text_of(v))
    if data_type in ("float", "double", "real"):
        return lambda v: float(text_of(v))
    if data_type in ("decimal", "numeric"):
        return lambda v: Decimal(text_of(v))
    if data_type == "date":
        return lambda v: _date(text_of(v))
    if data_type in ("datetime", "timestamp"):
        return lambda v: _datetime(text_of(v))
    if data_type in _BINARY:
        return bytes
    return text_of


def _lake_value(data_type: str) -> Callable[[Any], Any]:
    """A value read from the lake table -> the same form as `_source_value`'s."""
    if data_type in _INTEGERS or data_type in _AS_NUMBER:
        return int
    if data_type in ("float", "double", "real"):
        return float
    if data_type in ("decimal", "numeric"):
        return lambda v: Decimal(str(v))  # DECIMAL over 38 digits is stored as its exact text
    if data_type in ("datetime", "timestamp"):
        return lambda v: v.astimezone(dt.UTC).replace(tzinfo=None) if v.tzinfo is not None else v
    if data_type in _BINARY:
        return bytes
    if data_type == "date":
        return lambda v: v
    return str


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:  # zero and partial dates: the lake holds NULL for them
        return None


def _datetime(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


class LakeDiffer(Recorder):
    """Compares the source tables a filter selects with a lake's (`Differ`'s reports, no fix-up SQL)."""

    def __init__(
        self, source: MySQLParams, lake_uri: str, *, max_samples: int = 20, progress: Progress | None = None
    ) -> None:
        self.source_params = source
        self.lake_uri = lake_uri
        self.max_samples = max_samples
        self.fix = None  # a lake table is not written with SQL
        self.progress = progress or Progress("diff", enabled=False)

    def run(self, patterns: Sequence[str] | None = None) -> DiffReport:
        lake = open_lake(self.lake_uri)
        src = Side(self.source_params, "source")
        try:
            flt = TableFilter(list(patterns)) if patterns else TableFilter(["*.*"])
            names = {n for n in src.tables() if flt.match(*n)}
            names |= {n for n in tables(lake) if flt.match(*n) and n[0].lower() not in SYSTEM_SCHEMAS}
            report = DiffReport()
            self.progress.set_total(len(names))
            for schema, table in sorted(names):
                self.progress.note(f"{schema}.{table}")
                report.tables.append(self._table(src, lake, schema, table))
                self.progress.update()
            return report
        finally:
            src.close()

    def _table(self, src: Side, lake: LakeSink, schema: str, table: str) -> TableReport:
        report = TableReport(schema, table)
        info = src.table_info(schema, table)
        held = (schema, table) in set(tables(lake))
        if info is None:
            report.status = "missing_in_source"
            return report
        report.key_name, report.columns, report.key_positions = info.key_name, info.columns, info.key
        if not held:
            report.status = "missing_in_target"
            report.rows_source = int(text_of(src.query(f"SELECT COUNT(*) FROM {info.name}")[0][0]))
            return report
        try:
            state = as_of(lake, (schema, table))
        except LakeError as exc:
            raise DiffError(f"cannot read the lake's {schema}.{table}: {exc}") from exc
        names = [c.name for c in info.columns if not c.generated or c.name in state.rows.column_names]
        if state.rows.column_names != names:
            report.status = "columns_differ"
            return report
        columns = [c for c in info.columns if c.name in names]
        s_rows = self._source_rows(src, info, columns)
        t_rows = self._lake_rows(state.rows, columns)
        report.rows_source, report.rows_target, report.chunks = len(s_rows), len(t_rows), 1
        key = [info.columns[k].name for k in info.key]
        positions = [i for i, c in enumerate(columns) if c.name in key]
        report.columns, report.key_positions = tuple(columns), tuple(positions)  # how samples print
        if positions:
            self._keyed(report, s_rows, t_rows, positions)
        else:
            self._multiset(report, s_rows, t_rows)
        if report.counts:
            report.status = "different"
        log.info(
            "lake table compared table=%s status=%s lake_ts=%s rows_source=%d rows_target=%d",
            report.label,
            report.status,
            ts_text(state.exact_ts),
            report.rows_source,
            report.rows_target,
        )
        return report

    def _source_rows(self, src: Side, info: TableInfo, columns: list[ColumnInfo]) -> list[tuple[Any, ...]]:
        exprs = [f"{quote_ident(c.name)}+0" if c.data_type in _AS_NUMBER else select_expr(c) for c in columns]
        convert = [_source_value(c.data_type) for c in columns]
        rows = src.query(f"SELECT {','.join(exprs)} FROM {info.name}")
        return [tuple(None if v is None else f(v) for f, v in zip(convert, row, strict=True)) for row in rows]

    @staticmethod
    def _lake_rows(rows: Any, columns: list[ColumnInfo]) -> list[tuple[Any, ...]]:
        convert = [_lake_value(c.data_type) for c in columns]
        out = []
        for batch in rows.to_batches(max_chunksize=8192):
            values = [batch.column(i).to_pylist() for i in range(len(columns))]
            for row in zip(*values, strict=True):
                try:
                    out.append(tuple(None if v is None else f(v) for f, v in zip(convert, row, strict=True)))
                except (InvalidOperation, ValueError, TypeError) as exc:
                    raise DiffError(f"a lake value does not fit its source column: {exc}: {row!r:.300}") from exc
        return out

    def _keyed(
        self,
        report: TableReport,
        s_rows: list[tuple[Any, ...]],
        t_rows: list[tuple[Any, ...]],
        positions: list[int],
    ) -> None:
        source = {tuple(r[i] for i in positions): r for r in s_rows}
        target: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for row in t_rows:
            key = tuple(row[i] for i in positions)
            if key in target:  # an upsert table holds one row per key: a second one is a defect to show
                self._record(report, RowDiff("extra", key, None, row))
            target[key] = row
        for key, row in target.items():
            if key not in source:
                self._record(report, RowDiff("extra", key, None, row))
        for key, row in source.items():
            other = target.get(key)
            if other is None:
                self._record(report, RowDiff("missing", key, row, None))
            elif other != row:
                self._record(report, RowDiff("changed", key, row, other))

    def _multiset(self, report: TableReport, s_rows: list[tuple[Any, ...]], t_rows: list[tuple[Any, ...]]) -> None:
        self._record_multisets(report, s_rows, t_rows)


__all__ = ["LakeDiffer"]
