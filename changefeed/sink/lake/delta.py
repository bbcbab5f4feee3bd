"""``delta://DIR``: one Delta table per source table under ``DIR/<schema>/<table>`` (delta-rs).

How Delta differs from the shared lake sink (common.py): a table's checkpoint is a Delta
application transaction (``app_id`` -> version = the checkpoint ts) in the same commit as the
data, the mechanism Spark's idempotent writes use, and each commit also carries it as commit
metadata (``changefeed.checkpoint_ts``) for time travel by commit ts. upsert and scd2 are one MERGE
per chunk; changelog is an append. delta-rs cannot drop, rename or retype a column in place
(renames need column mapping, which it does not write), so those rewrite the table (one overwrite
commit with the new schema); adding columns is metadata only.

Maintenance (maintenance.py): compaction is delta-rs' OPTIMIZE (``optimize.compact``), a commit
with no data change carrying the table's current app transaction and checkpoint metadata.
Retention keeps the newest ``retain-versions`` versions readable: VACUUM (full, retention 0) keeps
exactly the files those versions read (``keep_versions``), and the commit log below the newest
checkpoint at or before the oldest kept version goes too (Delta's metadata cleanup, by version
rather than by age). The VACUUM commits record that oldest kept version (`RETAINED_KEY`), which
`version_at` checks so a ts older than the kept history is an error, not a version whose files are gone.

Tables are read with pyarrow's local file system, not deltalake's own one: with the latter a
process that read a table aborts at exit now and then ("terminate called without an active exception").
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Field, Transaction, write_deltalake
from deltalake.exceptions import DeltaError

from ...files.paths import decode_name
from ...model import TableSchema
from .common import (
    COMMIT_TS,
    DELETE,
    OP,
    ROOT_ENTRIES,
    VALID_TO,
    WEIGHT,
    Evolution,
    LakeError,
    LakeOptions,
    LakeSink,
    Name,
    changelog_rows,
    collapse_upsert,
    commit_time,
    keyless_rewrite,
    keyless_weights,
    lake_schema,
    reshape,
    rows_of_keys,
    scd2_rows,
)
from .maintenance import Cadence, ExpiredVersionError, best_effort

log = logging.getLogger(__name__)
CHECKPOINT_KEY = "changefeed.checkpoint_ts"
#: Commit metadata of maintenance commits: what they did (``optimize``, ``vacuum``) and, for a
#: VACUUM, the oldest version it kept readable.
MAINTENANCE_KEY, RETAINED_KEY = "changefeed.maintenance", "changefeed.retained_from"
#: Commit log entries by version: commits, checksums, classic single- and multi-part checkpoints.
_LOG_ENTRY = re.compile(r"(\d{20})\.(?:json|crc|checkpoint\.parquet|checkpoint\.\d{10}\.\d{10}\.parquet)")


def read_delta(path: str | Path, version: int | None = None) -> pa.Table:
    """A Delta table's rows (at ``version``) through pyarrow's local file system (see the module docstring)."""
    table = DeltaTable(str(path), version=version)
    return table.to_pyarrow_table(filesystem=pafs.SubTreeFileSystem(str(path), pafs.LocalFileSystem()))


def _quote(name: str) -> str:
    return f"`{name}`"


class DeltaSink(LakeSink):
    """Delta tables under ``root`` (a `Sink`)."""

    kind = "delta"

    def __init__(self, root: str | Path, options: LakeOptions | None = None) -> None:
        super().__init__(root, options)
        self._cadence = Cadence(self.options.maintenance_every)

    def _props(self, version: int, extra: Mapping[str, str] | None = None) -> CommitProperties:
        return CommitProperties(
            app_transactions=[Transaction(self.options.app_id, version)],
            custom_metadata={CHECKPOINT_KEY: str(version), **(extra or {})},
        )

    def _table(self, name: Name) -> DeltaTable | None:
        path = self.table_path(name)
        if not DeltaTable.is_deltatable(str(path)):
            return None
        return DeltaTable(str(path))

    def _scan(self) -> dict[Name, int]:
        out: dict[Name, int] = {}
        for log_dir in sorted(self.root.glob("*/*/_delta_log")):
            table_dir = log_dir.parent
            where = str(table_dir)
            name = (
                decode_name(table_dir.parent.name, ROOT_ENTRIES, where=where),
                decode_name(table_dir.name, where=where),
            )
            table = DeltaTable(str(table_dir))
            out[name] = table.transaction_version(self.options.app_id) or 0
        return out

    def _schema(self, name: Name) -> pa.Schema | None:
        table = self._table(name)
        return None if table is None else pa.schema(table.schema().to_arrow())

    def _create(self, name: Name, schema: pa.Schema, version: int) -> None:
        self._check_names(name, schema)
        DeltaTable.create(str(self.table_path(name)), schema, commit_properties=self._props(version))

    def _evolve(self, name: Name, evolution: Evolution, version: int) -> None:
        self._check_names(name, evolution.target)
        table = self._table(name)
        assert table is not None
        if not evolution.dropped and not evolution.widened and not evolution.renamed:
            fields = [Field.from_arrow(evolution.target.field(n)) for n in evolution.added]
            table.alter.add_columns(fields, commit_properties=self._props(version))
            return
        path = self.table_path(name)
        data = reshape(read_delta(path), evolution.target, evolution.renamed)
        write_deltalake(
            str(path),
            data,
            mode="overwrite",
            schema_mode="overwrite",
            commit_properties=self._props(version),
        )
        log.info(
            "delta %s: rewritten for dropped/widened/renamed columns (%d rows)",
            self.label(name),
            data.num_rows,
            extra={
                "table": f"{name[0]}.{name[1]}",
                "dropped": evolution.dropped,
                "widened": evolution.widened,
                "renamed": evolution.renamed,
            },
        )

    def _write(self, name: Name, shape: TableSchema, changes: pa.Table, version: int) -> None:
        table = self._table(name)
        assert table is not None
        mode = self.options.mode
        try:
            if mode == "changelog":
                write_deltalake(
                    table, changelog_rows(shape, changes), mode="append", commit_properties=self._props(version)
                )
            elif mode == "upsert" and not shape.handle_key:
                self._rewrite_keyless(name, table, shape, changes, version)
            elif mode == "upsert":
                self._merge_upsert(table, shape, collapse_upsert(shape, changes), version)
            else:
                self._merge_scd2(table, shape, changes, version)
        except DeltaError as exc:
            raise LakeError(f"delta {self.label(name)}: {exc}", where=f"checkpoint ts {version}") from None

    def _on_key(self, shape: TableSchema) -> str:
        return " AND ".join(
            f"t.{_quote(shape.columns[i].name)} = s.{_quote(shape.columns[i].name)}" for i in shape.handle_key
        )

    def _merge_upsert(self, table: DeltaTable, shape: TableSchema, source: pa.Table, version: int) -> None:
        flag = f"s.{DELETE}"
        (
            table.merge(
                source, self._on_key(shape), source_alias="s", target_alias="t", commit_properties=self._props(version)
            )
            .when_matched_delete(flag)
            .when_matched_update_all(f"NOT {flag}", except_cols=[DELETE])
            .when_not_matched_insert_all(f"NOT {flag}", except_cols=[DELETE])
            .execute()
        )

    def _rewrite_keyless(
        self, name: Name, table: DeltaTable, shape: TableSchema, changes: pa.Table, version: int
    ) -> None:
        """A table without a key (`keyless_weights`): one MERGE deletes every copy of the rows the batch removes
        copies of (matched on every column, NULLs equal) and inserts what stays of them and the added rows."""
        names = [c.name for c in shape.columns]
        weights = keyless_weights(shape, changes)
        gone = weights.filter(pc.less(weights.column(WEIGHT), 0)).select(names)
        held = gone.slice(0, 0)
        if gone.num_rows:  # the stored copies of the rows the batch removes copies of
            dataset = table.to_pyarrow_dataset(filesystem=self._fs(name))
            held = dataset.to_table(columns=names, filter=_rows_filter(gone, dataset.schema))
        back = keyless_rewrite(shape, weights, held.select(names))
        if not gone.num_rows and not back.num_rows:  # the batch's changes cancel out: a commit all the same
            self._mark(name, version)
            return
        source = pa.concat_tables(
            [
                gone.append_column(DELETE, pa.array(np.ones(gone.num_rows, bool))),
                back.append_column(DELETE, pa.array(np.zeros(back.num_rows, bool))),
            ]
        )
        same = " AND ".join(f"(t.{_quote(n)} IS NOT DISTINCT FROM s.{_quote(n)})" for n in names)
        on = f"s.{DELETE} AND {same}"
        (
            table.merge(source, on, source_alias="s", target_alias="t", commit_properties=self._props(version))
            .when_matched_delete()
            .when_not_matched_insert_all(f"NOT s.{DELETE}", except_cols=[DELETE])
            .execute()
        )

    def _fs(self, name: Name) -> pafs.FileSystem:
        return pafs.SubTreeFileSystem(str(self.table_path(name)), pafs.LocalFileSystem())

    def _merge_scd2(self, table: DeltaTable, shape: TableSchema, changes: pa.Table, version: int) -> None:
        versions, closes = scd2_rows(shape, changes)
        schema = lake_schema(shape, "scd2")
        close_rows = pa.Table.from_arrays(
            [
                closes.column(f.name) if f.name in closes.column_names else pa.nulls(closes.num_rows, f.type)
                for f in schema
            ],
            schema=schema,
        )
        source = pa.concat_tables([close_rows, versions])
        is_close = [True] * close_rows.num_rows + [False] * versions.num_rows
        source = source.append_column(DELETE, pa.array(is_close))
        on = f"{self._on_key(shape)} AND t.{VALID_TO} IS NULL AND s.{DELETE}"
        (
            table.merge(source, on, source_alias="s", target_alias="t", commit_properties=self._props(version))
            .when_matched_update({VALID_TO: f"s.{VALID_TO}"})
            .when_not_matched_insert_all(f"NOT s.{DELETE}", except_cols=[DELETE])
            .execute()
        )

    def _stored(self, name: Name, shape: TableSchema, keys: pa.Table) -> pa.Table:
        """A scan filtered on the non-text key columns (files skipped by their statistics; delta-rs types text
        as views, which pyarrow's filter cannot compare), narrowed to ``keys`` exactly."""
        table = self._table(name)
        assert table is not None
        names = [c.name for c in shape.columns]
        dataset = table.to_pyarrow_dataset(filesystem=self._fs(name))
        types = {f.name: f.type for f in dataset.schema}
        terms = [
            pc.field(k).isin(pc.cast(keys.column(k), types[k]))
            for k in keys.column_names
            if not (pa.types.is_string(types[k]) or pa.types.is_binary(types[k]) or types[k].id in _VIEW_TYPES)
        ]
        wanted = names
        if self.options.mode == "scd2":  # the open versions
            terms.append(pc.field(VALID_TO).is_null())
            wanted = [*names, VALID_TO]
        rows = dataset.to_table(columns=wanted, filter=functools.reduce(operator.and_, terms) if terms else None)
        return rows_of_keys(rows.select(names), keys)

    def _truncate(self, name: Name, version: int, drop: bool) -> None:
        table = self._table(name)
        assert table is not None
        mode = self.options.mode
        if mode == "upsert":
            table.delete(commit_properties=self._props(version))
        elif mode == "scd2":
            ended = commit_time(pa.array([version], pa.int64()))[0].as_py()
            table.update(
                new_values={VALID_TO: ended}, predicate=f"{VALID_TO} IS NULL", commit_properties=self._props(version)
            )
        else:
            schema = pa.schema(table.schema().to_arrow())
            marker = {f.name: pa.nulls(1, f.type) for f in schema}
            marker[OP] = pa.array(["drop" if drop else "truncate"])
            marker[COMMIT_TS] = pa.array([version], pa.int64())
            write_deltalake(
                table, pa.table(marker, schema=schema), mode="append", commit_properties=self._props(version)
            )

    def _move(self, old: Name, new: Name) -> None:
        src, dst = self.table_path(old), self.table_path(new)
        if not DeltaTable.is_deltatable(str(src)):
            return  # moved before a crash (or never written)
        if dst.exists():
            raise LakeError(f"delta {self.label(old)}: cannot rename to {self.label(new)}: {dst} exists")
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)  # rename(2): the table's log and files move at once

    def _mark(self, name: Name, version: int) -> None:
        table = self._table(name)
        if table is None or (table.transaction_version(self.options.app_id) or 0) >= version:
            return
        empty = pa.schema(table.schema().to_arrow()).empty_table()
        write_deltalake(table, empty, mode="append", commit_properties=self._props(version))  # a commit, no rows

    def _maintain(self, name: Name) -> None:
        table = self._table(name)
        if table is None or not self._cadence.due(name, table.version(), lambda: self._last_run(table)):
            return
        version = table.transaction_version(self.options.app_id)
        if version is None:
            return  # no checkpoint to carry: not a table of this sink
        with best_effort(self.kind, name, (DeltaError, OSError)):
            if self.options.optimize_every:
                self._optimize(name, table, version)
            if self.options.retain_versions:
                self._retain(name, table, version)
        self._cadence.ran(name, table.version())

    def _last_run(self, table: DeltaTable) -> int:
        """The version of the newest maintenance commit among the last ``every`` (0: none, so due at ``every``)."""
        for entry in table.history(self.options.maintenance_every):  # newest first
            if entry.get(MAINTENANCE_KEY) is not None:
                return int(entry["version"])
        return 0

    def _optimize(self, name: Name, table: DeltaTable, version: int) -> None:
        """OPTIMIZE: small files bin-packed (``delta.targetFileSize``, 100 MB by default); no commit if none."""
        metrics = table.optimize.compact(commit_properties=self._props(version, {MAINTENANCE_KEY: "optimize"}))
        if not metrics.get("numFilesRemoved"):
            return
        log.info(
            "delta %s: compacted %d files into %d (table version %d)",
            self.label(name),
            metrics.get("numFilesRemoved", 0),
            metrics.get("numFilesAdded", 0),
            table.version(),
            extra={
                "sink": self.kind,
                "table": f"{name[0]}.{name[1]}",
                "files_removed": metrics.get("numFilesRemoved", 0),
                "files_added": metrics.get("numFilesAdded", 0),
                "checkpoint_ts": version,
            },
        )

    def _retain(self, name: Name, table: DeltaTable, version: int) -> None:
        """VACUUM all but the files of the newest ``retain-versions`` versions, then prune the commit log."""
        current = table.version()
        log_dir = self.table_path(name) / "_delta_log"
        # not below what the log still loads (retain-versions may have grown since an earlier run)
        oldest = max(current - self.options.retain_versions + 1, _log_floor(log_dir))
        if oldest <= 0:
            return
        removed = table.vacuum(
            retention_hours=0,
            dry_run=False,
            enforce_retention_duration=False,
            full=True,  # also files of commits that never happened (a crash mid-write)
            keep_versions=list(range(oldest, current + 1)),
            commit_properties=self._props(version, {MAINTENANCE_KEY: "vacuum", RETAINED_KEY: str(oldest)}),
        )
        pruned = _prune_log(log_dir, oldest)
        log.info(
            "delta %s: kept versions %d..%d, removed %d data files and %d log files",
            self.label(name),
            oldest,
            current,
            len(removed),
            pruned,
            extra={
                "sink": self.kind,
                "table": f"{name[0]}.{name[1]}",
                "retained_from": oldest,
                "files_removed": len(removed),
                "log_files_removed": pruned,
            },
        )

    def _check_names(self, name: Name, schema: pa.Schema) -> None:
        """delta-rs quotes column names with backticks in MERGE and cannot hold one inside a name."""
        bad = [f.name for f in schema if "`" in f.name]
        if bad:
            raise LakeError(
                f"delta {self.label(name)}: column name {bad[0]!r} contains a backtick, which delta-rs cannot address"
            )


def _rows_filter(rows: pa.Table, stored: pa.Schema) -> pc.Expression | None:
    """A pyarrow filter keeping at least the stored copies of ``rows`` (NULL matching NULL), for a scan that
    skips files by their statistics; None: read everything. Text and binary columns are left out: delta-rs
    types them as views, which pyarrow cannot compare with its filter's values, so the filter may keep
    more rows than ``rows``; `keyless_rewrite` counts exact matches only."""
    types = {f.name: f.type for f in stored}
    usable = [
        n
        for n in rows.column_names
        if not (pa.types.is_string(types[n]) or pa.types.is_binary(types[n]) or types[n].id in _VIEW_TYPES)
    ]
    if not usable:
        return None
    terms = [
        functools.reduce(
            operator.and_,
            [pc.field(k).is_null() if row[k] is None else pc.field(k) == pa.scalar(row[k], types[k]) for k in usable],
        )
        for row in rows.select(usable).to_pylist()
    ]
    return functools.reduce(operator.or_, terms)


_VIEW_TYPES = frozenset({pa.string_view().id, pa.binary_view().id, pa.large_string().id, pa.large_binary().id})


def _log_entries(log_dir: Path) -> list[tuple[int, Path]]:
    return [(int(m.group(1)), p) for p in log_dir.iterdir() if (m := _LOG_ENTRY.fullmatch(p.name))]


def _log_floor(log_dir: Path) -> int:
    """The oldest version the commit log can load: 0 while it holds every commit, else its oldest checkpoint."""
    entries = _log_entries(log_dir)
    commits = {v for v, p in entries if p.name.endswith(".json")}
    if not commits or 0 in commits:
        return 0
    return min((v for v, p in entries if p.name.endswith(".checkpoint.parquet")), default=min(commits))


def _prune_log(log_dir: Path, oldest: int) -> int:
    """Delete the log entries below the newest single-file checkpoint at or before version ``oldest``.

    Reading any version from there on starts at that checkpoint, so the entries below it only
    served versions retention dropped. Returns how many files went.
    """
    entries = _log_entries(log_dir)
    checkpoints = [v for v, p in entries if p.name.endswith(".checkpoint.parquet") and v <= oldest]
    if not checkpoints:
        return 0
    floor = max(checkpoints)
    below = [p for v, p in entries if v < floor]
    for p in below:
        p.unlink(missing_ok=True)
    return len(below)


def readable_from(path: str | Path) -> int:
    """The oldest version of a Delta table time travel can read: retention's record, or the oldest left in the log."""
    return readable_floor(DeltaTable(str(path)).history())


def readable_floor(history: list[dict[str, Any]]) -> int:
    """`readable_from` over a history already read (``DeltaTable.history()``)."""
    oldest = min((int(e["version"]) for e in history), default=0)
    kept = max((int(e[RETAINED_KEY]) for e in history if e.get(RETAINED_KEY) is not None), default=0)
    return max(oldest, kept)


def version_at(path: str | Path, commit_ts: int) -> int | None:
    """The last Delta version whose recorded checkpoint ts is <= ``commit_ts`` (time travel by commit ts).

    None: the table has no version that old (it began later). `ExpiredVersionError`: that version
    is older than what retention (``retain-versions``, or Delta's own log retention) kept.
    """
    history = DeltaTable(str(path)).history()
    recorded = sorted((int(e["version"]), int(e[CHECKPOINT_KEY])) for e in history if e.get(CHECKPOINT_KEY) is not None)
    best = max((v for v, ts in recorded if ts <= commit_ts), default=None)
    floor = readable_floor(history)
    if (best is None and floor > 0) or (best is not None and best < floor):
        kept = next(((v, ts) for v, ts in recorded if v >= floor), None)
        oldest = "none" if kept is None else f"version {kept[0]} at checkpoint ts {kept[1]}"
        raise ExpiredVersionError(
            f"delta {path}: commit ts {commit_ts} is older than the versions the table keeps "
            f"(the oldest readable: {oldest}; see retain-versions)"
        )
    return best


__all__ = [
    "CHECKPOINT_KEY",
    "MAINTENANCE_KEY",
    "RETAINED_KEY",
    "DeltaSink",
    "ExpiredVersionError",
    "read_delta",
    "readable_from",
    "version_at",
]
