"""Compare tables of two MySQL/MariaDB servers chunk by chunk, as sync-diff-inspector does.

Per table: the key is the primary key, else the shortest unique index over NOT NULL columns.
Chunk boundaries come from the source by keyset pagination over the key; each chunk's
``COUNT(*)``, ``SUM(CRC32(r))`` and ``BIT_XOR`` of 64 bits of ``MD5(r)`` are computed server-side on
both sides, where ``r`` encodes every column unambiguously (``ISNULL(c)`` then ``HEX(CAST(c AS
BINARY))``, comma separated: NULL, '' and commas inside values cannot collide). Differing chunks
are split into smaller ranges and finally compared row by row; differing rows are reported and
turned into fix-up SQL for the target (DELETE of extra keys, REPLACE of missing/changed rows).

Tables without such a key are checksummed whole and, if different, compared as multisets of
rows ordered by all columns (in memory: the documented limit).

Values are compared as the servers print them (text protocol, both sessions in UTC): the two
tables must have the same column types. The comparison is not a snapshot across both servers;
run it when replication has caught up.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..clients.mysql import MySQLError, MySQLParams, escape_string
from ..errors import ChangefeedError
from ..model.tablefilter import TableFilter
from ..ops.progress import Progress
from ..sink.mysql.sink import DEFAULT_SQL_MODE
from ..sink.mysql.sql import quote_ident, quote_table

__all__ = ["SESSION_SQL_MODE", "DiffError", "DiffReport", "Differ", "Recorder", "RowDiff", "TableReport"]

log = logging.getLogger(__name__)

#: Both sides' sql_mode, the MySQL sink's: backslash escapes on, no padding of CHAR values.
SESSION_SQL_MODE = DEFAULT_SQL_MODE
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
_NUMBER_TYPES = frozenset(
    {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric", "float", "double", "year"}
)
BINARY_TYPES = frozenset(
    {
        "binary",
        "varbinary",
        "tinyblob",
        "blob",
        "mediumblob",
        "longblob",
        "bit",
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
        "geomcollection",
    }
)


class DiffError(ChangefeedError):
    """The comparison itself failed (connection, permissions, a table that cannot be read)."""


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    name: str
    data_type: str
    generated: bool

    @property
    def kind(self) -> str:
        """How values print and are written back: number (bare), binary (X'hex') or text (quoted)."""
        if self.data_type in _NUMBER_TYPES:
            return "number"
        if self.data_type in BINARY_TYPES:
            return "binary"
        return "text"


@dataclass(frozen=True)
class TableInfo:
    schema: str
    table: str
    columns: tuple[ColumnInfo, ...]
    key: tuple[int, ...]  # positions of the comparison key; () when the table has none
    key_name: str | None

    @property
    def name(self) -> str:
        return quote_table(self.schema, self.table)

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(slots=True)
class RowDiff:
    """One differing row: ``missing`` (only in source), ``extra`` (only in target) or ``changed``."""

    kind: str
    key: tuple[Any, ...]
    source: tuple[Any, ...] | None
    target: tuple[Any, ...] | None


@dataclass
class TableReport:
    schema: str
    table: str
    status: str = "equal"  # equal | different | missing_in_target | missing_in_source | columns_differ
    rows_source: int = 0
    rows_target: int = 0
    chunks: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    samples: list[RowDiff] = field(default_factory=list)
    key_name: str | None = None
    columns: tuple[ColumnInfo, ...] = ()

    def format_row(self, row: Sequence[Any] | None) -> str:
        """A fetched row (or key) as SQL literals, long values clipped, for people."""
        if row is None:
            return "-"
        cols = self.columns if len(row) == len(self.columns) else [self.columns[i] for i in self.key_positions]
        parts = [literal(c, v) for c, v in zip(cols, row, strict=True)]
        return "(" + ", ".join(p if len(p) <= 60 else p[:56] + "...'" for p in parts) + ")"

    key_positions: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def equal(self) -> bool:
        return self.status == "equal"


@dataclass
class DiffReport:
    tables: list[TableReport] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)


def literal(column: ColumnInfo, value: Any) -> str:
    """A value as fetched (raw text protocol) -> SQL literal that writes it back unchanged."""
    if value is None:
        return "NULL"
    kind = column.kind
    if kind == "binary":
        raw = value if isinstance(value, bytes | bytearray) else str(value).encode("utf-8")
        return "X'" + bytes(raw).hex() + "'"
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes | bytearray) else str(value)
    if kind == "number":
        return text
    return "'" + escape_string(text) + "'"


def _cond(op: str, cols: Sequence[str], vals: Sequence[str]) -> str:
    """Row comparison ``(cols) op (vals)`` expanded so the range optimiser uses the key's index."""
    if len(cols) == 1:
        return f"{cols[0]} {op} {vals[0]}"
    strict = op[0]  # '>' or '<'
    parts = []
    for i in range(len(cols)):
        eqs = [f"{cols[j]} = {vals[j]}" for j in range(i)]
        last_op = op if i == len(cols) - 1 else strict
        parts.append("(" + " AND ".join([*eqs, f"{cols[i]} {last_op} {vals[i]}"]) + ")")
    return "(" + " OR ".join(parts) + ")"


class Side:
    """One server: a raw-value connection (no type conversion) in UTC, in the sink's sql_mode.

    The sql_mode is set, not inherited from the server: `literal` escapes with backslashes, which a
    server default of NO_BACKSLASH_ESCAPES would read as plain characters (and a quote in a value
    would end its string), and PAD_CHAR_TO_FULL_LENGTH on one side only would make CHAR values differ.
    """

    def __init__(self, params: MySQLParams, label: str) -> None:
        self.params = params
        self.label = label
        try:
            self.conn = params.connect(autocommit=True, conv={})
            with self.conn.cursor() as cur:
                mode = escape_string(SESSION_SQL_MODE)  # no %s: conv={} leaves PyMySQL no encoders
                cur.execute(f"SET SESSION sql_mode='{mode}', time_zone='+00:00', group_concat_max_len=1048576")
        except MySQLError as exc:
            raise DiffError(f"cannot connect to {label} {params.url}: {exc}") from exc

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        except MySQLError as exc:
            raise DiffError(f"query on {self.label} {self.params.url} failed: {exc}; sql: {sql[:300]}") from exc

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            log.debug("closing %s failed", self.label, exc_info=True)

    def tables(self) -> list[tuple[str, str]]:
        rows = self.query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE='BASE TABLE'"
        )
        return [(text_of(a), text_of(b)) for a, b in rows if text_of(a).lower() not in SYSTEM_SCHEMAS]

    def table_info(self, schema: str, table: str) -> TableInfo | None:
        s, t = "'" + escape_string(schema) + "'", "'" + escape_string(table) + "'"
        cols = self.query(
            "SELECT COLUMN_NAME, DATA_TYPE, EXTRA, IS_NULLABLE FROM information_schema.COLUMNS"
            f" WHERE TABLE_SCHEMA={s} AND TABLE_NAME={t} ORDER BY ORDINAL_POSITION"
        )
        if not cols:
            return None
        columns = tuple(
            ColumnInfo(text_of(n), text_of(dt).lower(), "GENERATED" in text_of(ex).upper()) for n, dt, ex, _ in cols
        )
        nullable = {text_of(n) for n, _, _, nul in cols if text_of(nul).upper() == "YES"}
        stats = self.query(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS"
            f" WHERE TABLE_SCHEMA={s} AND TABLE_NAME={t} AND NON_UNIQUE=0 ORDER BY INDEX_NAME, SEQ_IN_INDEX"
        )
        indexes: dict[str, list[str]] = {}
        for idx, col in stats:
            indexes.setdefault(text_of(idx), []).append(text_of(col))
        positions = {c.name: i for i, c in enumerate(columns)}
        key_name = None
        if "PRIMARY" in indexes:
            key_name = "PRIMARY"
        else:
            candidates = [n for n, cs in indexes.items() if not nullable.intersection(cs)]
            if candidates:
                key_name = min(candidates, key=lambda n: (len(indexes[n]), n))
        key = tuple(positions[c] for c in indexes[key_name]) if key_name else ()
        return TableInfo(schema, table, columns, key, key_name)

    def create_table(self, info: TableInfo) -> str:
        rows = self.query(f"SHOW CREATE TABLE {info.name}")
        return text_of(rows[0][1])


def select_expr(column: ColumnInfo) -> str:
    # FLOAT prints with 6 significant digits; as DOUBLE it prints every digit of the float32.
    q = quote_ident(column.name)
    return f"CAST({q} AS DOUBLE)" if column.data_type == "float" else q


def text_of(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes | bytearray) else str(value)


class Recorder:
    """What every differ shares: up to ``max_samples`` differing rows kept per table, fix-up SQL to ``fix``."""

    max_samples: int
    fix: Callable[[str], None] | None

    def _record(self, report: TableReport, diff: RowDiff) -> None:
        report.counts[diff.kind] += 1
        if len(report.samples) < self.max_samples:
            report.samples.append(diff)

    def _emit(self, sql: str) -> None:
        if self.fix is not None:
            self.fix(sql)

    def _record_multisets(
        self, report: TableReport, source: Iterable[tuple[Any, ...]], target: Iterable[tuple[Any, ...]]
    ) -> tuple[list[tuple[tuple[Any, ...], int]], list[tuple[tuple[Any, ...], int]]]:
        """Rows of a table without a key compared as multisets: the extra (target only) and missing (source
        only) rows with their counts, in a stable order, each copy recorded."""
        s, t = Counter(source), Counter(target)
        extra, missing = sorted((t - s).items(), key=repr), sorted((s - t).items(), key=repr)
        for row, n in extra:
            for _ in range(n):
                self._record(report, RowDiff("extra", (), None, row))
        for row, n in missing:
            for _ in range(n):
                self._record(report, RowDiff("missing", (), row, None))
        return extra, missing


class Differ(Recorder):
    """Compares the tables a filter selects; reports per table and streams fix-up SQL to ``fix``."""

    def __init__(
        self,
        source: MySQLParams,
        target: MySQLParams,
        *,
        chunk_size: int = 10000,
        row_batch: int = 1000,
        max_samples: int = 20,
        fix: Callable[[str], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        if chunk_size < 1:
            raise DiffError("chunk size must be >= 1")
        self.source_params = source
        self.target_params = target
        self.chunk_size = chunk_size
        self.row_batch = max(1, min(row_batch, chunk_size))
        self.max_samples = max_samples
        self.fix = fix
        self.progress = progress or Progress("diff", enabled=False)  # tables done; the note names the chunk

    def run(self, patterns: Sequence[str] | None = None) -> DiffReport:
        """Compare every table matched by ``patterns`` (TiDB table-filter syntax) on either side."""
        src = Side(self.source_params, "source")
        try:
            dst = Side(self.target_params, "target")
        except BaseException:
            src.close()
            raise
        try:
            flt = TableFilter(list(patterns)) if patterns else TableFilter(["*.*", "!*.changefeed_checkpoint"])
            names = sorted({n for n in (*src.tables(), *dst.tables()) if flt.match(*n)})
            report = DiffReport()
            self.progress.set_total(len(names))
            for schema, table in names:
                self.progress.note(f"{schema}.{table}")
                report.tables.append(self._table(src, dst, schema, table))
                self.progress.update()
            return report
        finally:
            src.close()
            dst.close()

    # --- one table -------------------------------------------------------------------------------

    def _table(self, src: Side, dst: Side, schema: str, table: str) -> TableReport:
        report = TableReport(schema, table)
        s_info = src.table_info(schema, table)
        t_info = dst.table_info(schema, table)
        if s_info is None:
            assert t_info is not None
            report.columns, report.key_positions = t_info.columns, t_info.key
            report.status = "missing_in_source"
            self._emit(f"-- {t_info.label} exists only in the target\n-- DROP TABLE {t_info.name};")
            return report
        report.key_name = s_info.key_name
        report.columns = s_info.columns
        report.key_positions = s_info.key
        if t_info is None:
            report.status = "missing_in_target"
            self._emit(
                f"CREATE DATABASE IF NOT EXISTS {quote_ident(schema)};\nUSE {quote_ident(schema)};\n"
                + src.create_table(s_info)
                + ";"
            )
        elif [(c.name, c.data_type) for c in t_info.columns] != [(c.name, c.data_type) for c in s_info.columns]:
            report.status = "columns_differ"  # rows cannot be compared; the fix is a schema change
            self._emit(f"-- {s_info.label}: columns differ between source and target; align the schema first")
            return report
        target = dst if t_info is not None else None
        if s_info.key:
            self._keyed(src, target, s_info, report)
        else:
            self._keyless(src, target, s_info, report)
        if report.counts and report.status == "equal":
            report.status = "different"
        log.info(
            "table compared table=%s status=%s chunks=%d rows_source=%d rows_target=%d diffs=%s",
            report.label,
            report.status,
            report.chunks,
            report.rows_source,
            report.rows_target,
            dict(report.counts),
        )
        return report

    def _row_expr(self, info: TableInfo) -> str:
        parts = []
        for c in info.columns:
            q = quote_ident(c.name)
            parts.append(f"ISNULL({q})")
            parts.append(f"HEX(CAST({select_expr(c)} AS BINARY))")
        return "CONCAT_WS(','," + ",".join(parts) + ")"

    def _checksum_sql(self, info: TableInfo, where: str) -> str:
        r = self._row_expr(info)
        return (
            f"SELECT COUNT(*), COALESCE(SUM(CRC32({r})),0),"
            f" COALESCE(BIT_XOR(CAST(CONV(LEFT(MD5({r}),16),16,10) AS UNSIGNED)),0)"
            f" FROM {info.name}" + (f" WHERE {where}" if where else "")
        )

    def _range(self, info: TableInfo, lo: tuple[Any, ...] | None, hi: tuple[Any, ...] | None) -> str:
        cols = [quote_ident(info.columns[i].name) for i in info.key]
        conds = []
        if lo is not None:
            conds.append(_cond(">", cols, [literal(info.columns[i], v) for i, v in zip(info.key, lo, strict=True)]))
        if hi is not None:
            conds.append(_cond("<=", cols, [literal(info.columns[i], v) for i, v in zip(info.key, hi, strict=True)]))
        return " AND ".join(conds)

    def _bounds(
        self, side: Side, info: TableInfo, lo: tuple[Any, ...] | None, hi: tuple[Any, ...] | None, step: int
    ) -> list[tuple[Any, ...]]:
        """Keys closing each ``step`` rows of (lo, hi] on ``side`` (keyset pagination)."""
        cols = ",".join(quote_ident(info.columns[i].name) for i in info.key)
        bounds: list[tuple[Any, ...]] = []
        cursor = lo
        while True:
            where = self._range(info, cursor, hi)
            rows = side.query(
                f"SELECT {cols} FROM {info.name}"
                + (f" WHERE {where}" if where else "")
                + f" ORDER BY {cols} LIMIT 1 OFFSET {step - 1}"
            )
            if not rows:
                return bounds
            cursor = tuple(rows[0])
            if hi is not None and cursor == hi:
                return bounds
            bounds.append(cursor)

    def _keyed(self, src: Side, dst: Side | None, info: TableInfo, report: TableReport) -> None:
        bounds = self._bounds(src, info, None, None, self.chunk_size)
        edges: list[tuple[Any, ...] | None] = [None, *bounds, None]
        for lo, hi in itertools.pairwise(edges):
            report.chunks += 1
            self.progress.note(f"{info.label} chunk {report.chunks}/{len(edges) - 1}")
            self._chunk(src, dst, info, report, lo, hi, top=True)

    def _chunk(
        self,
        src: Side,
        dst: Side | None,
        info: TableInfo,
        report: TableReport,
        lo: tuple[Any, ...] | None,
        hi: tuple[Any, ...] | None,
        top: bool = False,
    ) -> None:
        where = self._range(info, lo, hi)
        s_sum = tuple(src.query(self._checksum_sql(info, where))[0])
        t_sum = tuple(dst.query(self._checksum_sql(info, where))[0]) if dst is not None else (0, 0, 0)
        s_count, t_count = int(s_sum[0]), int(t_sum[0])
        if top:
            report.rows_source += s_count
            report.rows_target += t_count
        if s_sum == t_sum:
            return
        bigger, count = (src, s_count) if s_count >= t_count else (dst, t_count)
        if count <= self.row_batch or bigger is None:
            self._compare_rows(src, dst, info, report, where)
            return
        step = max(count // 8, self.row_batch // 2, 1)
        sub = self._bounds(bigger, info, lo, hi, step)
        edges = [lo, *sub, hi]
        for a, b in itertools.pairwise(edges):
            self._chunk(src, dst, info, report, a, b)

    def _select(self, info: TableInfo, where: str, order: str) -> str:
        cols = ",".join(select_expr(c) for c in info.columns)
        return f"SELECT {cols} FROM {info.name}" + (f" WHERE {where}" if where else "") + f" ORDER BY {order}"

    def _compare_rows(self, src: Side, dst: Side | None, info: TableInfo, report: TableReport, where: str) -> None:
        order = ",".join(quote_ident(info.columns[i].name) for i in info.key)
        sql = self._select(info, where, order)
        s_rows = {tuple(r[i] for i in info.key): tuple(r) for r in src.query(sql)}
        t_rows = {tuple(r[i] for i in info.key): tuple(r) for r in dst.query(sql)} if dst is not None else {}
        deletes, replaces = [], []
        for key, extra in t_rows.items():
            if key not in s_rows:
                self._record(report, RowDiff("extra", key, None, extra))
                deletes.append(key)
        for key, s_row in s_rows.items():
            t_row = t_rows.get(key)
            if t_row is None:
                self._record(report, RowDiff("missing", key, s_row, None))
                replaces.append(s_row)
            elif t_row != s_row:
                self._record(report, RowDiff("changed", key, s_row, t_row))
                replaces.append(s_row)
        if deletes:
            cols = [quote_ident(info.columns[i].name) for i in info.key]
            for key in deletes:
                vals = [literal(info.columns[i], v) for i, v in zip(info.key, key, strict=True)]
                cond = " AND ".join(f"{c}={v}" for c, v in zip(cols, vals, strict=True))
                self._emit(f"DELETE FROM {info.name} WHERE {cond};")
        for stmt in self._replace_sql(info, replaces, "REPLACE"):
            self._emit(stmt)

    def _replace_sql(self, info: TableInfo, rows: Sequence[tuple[Any, ...]], verb: str) -> Iterator[str]:
        positions = [i for i, c in enumerate(info.columns) if not c.generated]
        head = (
            f"{verb} INTO {info.name} (" + ",".join(quote_ident(info.columns[i].name) for i in positions) + ") VALUES "
        )
        for start in range(0, len(rows), 100):
            values = (
                "(" + ",".join(literal(info.columns[i], row[i]) for i in positions) + ")"
                for row in rows[start : start + 100]
            )
            yield head + ",".join(values) + ";"

    def _keyless(self, src: Side, dst: Side | None, info: TableInfo, report: TableReport) -> None:
        report.chunks = 1
        s_sum = tuple(src.query(self._checksum_sql(info, ""))[0])
        t_sum = tuple(dst.query(self._checksum_sql(info, ""))[0]) if dst is not None else (0, 0, 0)
        report.rows_source, report.rows_target = int(s_sum[0]), int(t_sum[0])
        if s_sum == t_sum:
            return
        order = ",".join(quote_ident(c.name) for c in info.columns)
        sql = self._select(info, "", order)
        s_rows = Counter(tuple(r) for r in src.query(sql))
        t_rows = Counter(tuple(r) for r in dst.query(sql)) if dst is not None else Counter()
        extra = t_rows - s_rows
        missing = s_rows - t_rows
        positions = [i for i, c in enumerate(info.columns) if not c.generated]
        for row, n in sorted(extra.items(), key=repr):
            for _ in range(n):
                self._record(report, RowDiff("extra", (), None, row))
            cond = " AND ".join(
                f"{quote_ident(info.columns[i].name)}<=>{literal(info.columns[i], row[i])}" for i in positions
            )
            self._emit(f"DELETE FROM {info.name} WHERE {cond} LIMIT {n};")
        rows = []
        for row, n in sorted(missing.items(), key=repr):
            for _ in range(n):
                self._record(report, RowDiff("missing", (), row, None))
                rows.append(row)
        for stmt in self._replace_sql(info, rows, "INSERT"):
            self._emit(stmt)
