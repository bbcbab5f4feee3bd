"""Compare routed and merged tables: every source table a route sends to a target, together, with the target.

``changefeed diff --source URL --routes CF.toml [--source URL2 --routes CF2.toml ...] --target URL``:
each source is read through its changefeed's ``[[routes]]`` (docs/routing.md) — the table's
target name and DM's ``extract-*`` columns (``extract-source`` reads that file's
``changefeed-id``, as `changefeed run` does) — so shards of several schemas and servers merged
into one table are compared with it as one table, as sync-diff-inspector does with route rules.
Rows are compared by the target's primary (or NOT NULL unique) key, else as multisets, as the
servers print them (text protocol, UTC sessions); in memory, per target table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..clients.mysql import MySQLParams
from ..dispatch.route import Router
from ..model.tablefilter import TableFilter
from ..ops.progress import Progress
from ..sink.mysql.sql import quote_ident
from .compare import (
    DiffError,
    DiffReport,
    Recorder,
    RowDiff,
    Side,
    TableInfo,
    TableReport,
    literal,
    select_expr,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoutedSource:
    """One source server and the router of the changefeed that reads it."""

    params: MySQLParams
    router: Router | None


@dataclass(frozen=True)
class _Shard:
    side: int  # which source
    schema: str
    table: str
    extras: tuple[tuple[str, str], ...]  # DM's extract-* columns and their values for this shard


class RoutedDiffer(Recorder):
    """Compares each target table with the union of the source tables routed into it."""

    def __init__(
        self,
        sources: Sequence[RoutedSource],
        target: MySQLParams,
        *,
        max_samples: int = 20,
        fix: Callable[[str], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.sources = list(sources)
        self.target_params = target
        self.max_samples = max_samples
        self.fix = fix
        self.progress = progress or Progress("diff", enabled=False)

    def run(self, patterns: Sequence[str] | None = None) -> DiffReport:
        """Compare the target tables ``patterns`` select (matched against target names)."""
        sides: list[Side] = []
        try:
            for i, source in enumerate(self.sources):
                sides.append(Side(source.params, f"source {i + 1}" if len(self.sources) > 1 else "source"))
            dst = Side(self.target_params, "target")
            sides.append(dst)
            flt = TableFilter(list(patterns)) if patterns else TableFilter(["*.*", "!*.changefeed_checkpoint"])
            groups: dict[tuple[str, str], list[_Shard]] = {}
            for i, (source, side) in enumerate(zip(self.sources, sides[: len(self.sources)], strict=True)):
                for schema, table in side.tables():
                    found = None if source.router is None else source.router.target(schema, table)
                    name = (schema, table) if found is None else found.name
                    if flt.match(*name):
                        extras = () if found is None else found.extras
                        groups.setdefault(name, []).append(_Shard(i, schema, table, extras))
            names = sorted(set(groups) | {n for n in dst.tables() if flt.match(*n)})
            report = DiffReport()
            self.progress.set_total(len(names))
            for name in names:
                self.progress.note(".".join(name))
                report.tables.append(self._table(sides, dst, name, groups.get(name, [])))
                self.progress.update()
            return report
        finally:
            for side in sides:
                side.close()

    def _table(self, sides: list[Side], dst: Side, name: tuple[str, str], shards: list[_Shard]) -> TableReport:
        report = TableReport(*name)
        info = dst.table_info(*name)
        if info is None:
            report.status = "missing_in_target"
            report.rows_source = sum(len(self._shard_rows(sides[s.side], s, None) or ()) for s in shards)
            return report
        columns = [c for c in info.columns if not c.generated]  # rows hold these (generated ones follow)
        report.key_name, report.columns = info.key_name, tuple(columns)
        report.key_positions = tuple(columns.index(info.columns[k]) for k in info.key)
        if not shards:
            report.status = "missing_in_source"
            return report
        source_rows: list[tuple[Any, ...]] = []
        for shard in shards:
            rows = self._shard_rows(sides[shard.side], shard, info)
            if rows is None:
                report.status = "columns_differ"
                self._emit(f"-- {shard.schema}.{shard.table}: its columns are not the target's {info.label}")
                return report
            source_rows.extend(rows)
        target_rows = dst.query(self._select(info, info))
        report.rows_source, report.rows_target, report.chunks = len(source_rows), len(target_rows), len(shards)
        if info.key:
            self._keyed(info, report, source_rows, target_rows)
        else:
            self._multiset(info, report, source_rows, target_rows)
        if report.counts:
            report.status = "different"
        log.info(
            "routed table compared table=%s shards=%d status=%s rows_source=%d rows_target=%d",
            report.label,
            len(shards),
            report.status,
            report.rows_source,
            report.rows_target,
        )
        return report

    def _shard_rows(self, side: Side, shard: _Shard, target: TableInfo | None) -> list[tuple[Any, ...]] | None:
        """A shard's rows in the target's column order, its extract columns filled in; None when its
        columns (name and type) are not the target's."""
        info = side.table_info(shard.schema, shard.table)
        if info is None:
            raise DiffError(f"{shard.schema}.{shard.table} vanished from the source while comparing")
        if target is None:
            return side.query(self._select(info, info))
        extras = dict(shard.extras)
        own = {c.name: c for c in info.columns}
        wanted = [c for c in target.columns if not c.generated]
        if {c.name for c in info.columns if not c.generated} != {c.name for c in wanted} - set(extras):
            return None
        if any(own[c.name].data_type != c.data_type for c in wanted if c.name not in extras):
            return None
        exprs = [select_expr(own[c.name]) if c.name not in extras else "NULL" for c in wanted]
        rows = side.query(f"SELECT {','.join(exprs)} FROM {info.name}")
        fill = [(i, extras[c.name]) for i, c in enumerate(wanted) if c.name in extras]  # text, as the server sends
        out = []
        for row in rows:
            values = list(row)
            for i, value in fill:
                values[i] = value
            out.append(tuple(values))
        return out

    @staticmethod
    def _select(info: TableInfo, like: TableInfo) -> str:
        cols = ",".join(select_expr(c) for c in like.columns if not c.generated)
        return f"SELECT {cols} FROM {info.name}"

    def _keyed(
        self, info: TableInfo, report: TableReport, s_rows: list[tuple[Any, ...]], t_rows: list[tuple[Any, ...]]
    ) -> None:
        columns = [c for c in info.columns if not c.generated]
        positions = [columns.index(info.columns[k]) for k in info.key]
        source: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for row in s_rows:
            key = tuple(row[i] for i in positions)
            if key in source:  # two shards with the same target key: the merge would collide
                raise DiffError(
                    f"{info.label}: two source rows share the target key {key!r}; the routes need extract columns"
                )
            source[key] = row
        target = {tuple(r[i] for i in positions): tuple(r) for r in t_rows}
        for key, row in target.items():
            if key not in source:
                self._record(report, RowDiff("extra", key, None, row))
                cond = " AND ".join(
                    f"{quote_ident(columns[i].name)}={literal(columns[i], v)}"
                    for i, v in zip(positions, key, strict=True)
                )
                self._emit(f"DELETE FROM {info.name} WHERE {cond};")
        for key, row in source.items():
            other = target.get(key)
            if other is None or other != row:
                self._record(report, RowDiff("missing" if other is None else "changed", key, row, other))
                self._emit(self._write(info, columns, row, "REPLACE"))

    def _multiset(
        self, info: TableInfo, report: TableReport, s_rows: list[tuple[Any, ...]], t_rows: list[tuple[Any, ...]]
    ) -> None:
        columns = [c for c in info.columns if not c.generated]
        extra, missing = self._record_multisets(report, s_rows, map(tuple, t_rows))
        for row, n in extra:
            cond = " AND ".join(f"{quote_ident(c.name)}<=>{literal(c, v)}" for c, v in zip(columns, row, strict=True))
            self._emit(f"DELETE FROM {info.name} WHERE {cond} LIMIT {n};")
        for row, n in missing:
            for _ in range(n):
                self._emit(self._write(info, columns, row, "INSERT"))

    @staticmethod
    def _write(info: TableInfo, columns: list[Any], row: tuple[Any, ...], verb: str) -> str:
        names = ",".join(quote_ident(c.name) for c in columns)
        values = ",".join(literal(c, v) for c, v in zip(columns, row, strict=True))
        return f"{verb} INTO {info.name} ({names}) VALUES ({values});"


__all__ = ["RoutedDiffer", "RoutedSource"]
