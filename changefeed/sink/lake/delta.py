"""``delta://DIR``: one Delta table per source table under ``DIR/<schema>/<table>`` (delta-rs).

How Delta differs from the shared lake sink (common.py): a table's checkpoint is a Delta
application transaction (``app_id`` -> version = the checkpoint ts) in the same commit as the
data, the mechanism Spark's idempotent writes use, and each commit also carries it as commit
metadata (``changefeed.checkpoint_ts``) for time travel by commit ts. upsert and scd2 are one MERGE
per chunk; changelog is an append. delta-rs cannot drop, rename or retype a column in place
(renames need column mapping, which it does not write), so those rewrite the table (one overwrite
commit with the new schema); adding columns is metadata only.

Tables are read with pyarrow's local file system, not deltalake's own one: with the latter a
process that read a table aborts at exit now and then ("terminate called without an active exception").
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
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
    Evolution,
    LakeError,
    LakeSink,
    Name,
    changelog_rows,
    collapse_upsert,
    commit_time,
    lake_schema,
    reshape,
    scd2_rows,
)

log = logging.getLogger(__name__)
CHECKPOINT_KEY = "changefeed.checkpoint_ts"


def read_delta(path: str | Path, version: int | None = None) -> pa.Table:
    """A Delta table's rows (at ``version``) through pyarrow's local file system (see the module docstring)."""
    table = DeltaTable(str(path), version=version)
    return table.to_pyarrow_table(filesystem=pafs.SubTreeFileSystem(str(path), pafs.LocalFileSystem()))


def _quote(name: str) -> str:
    return f"`{name}`"


class DeltaSink(LakeSink):
    """Delta tables under ``root`` (a `Sink`)."""

    kind = "delta"

    def _props(self, version: int) -> CommitProperties:
        return CommitProperties(
            app_transactions=[Transaction(self.options.app_id, version)],
            custom_metadata={CHECKPOINT_KEY: str(version)},
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

    def _check_names(self, name: Name, schema: pa.Schema) -> None:
        """delta-rs quotes column names with backticks in MERGE and cannot hold one inside a name."""
        bad = [f.name for f in schema if "`" in f.name]
        if bad:
            raise LakeError(
                f"delta {self.label(name)}: column name {bad[0]!r} contains a backtick, which delta-rs cannot address"
            )


def version_at(path: str | Path, commit_ts: int) -> int | None:
    """The last Delta version whose recorded checkpoint ts is <= ``commit_ts`` (time travel by commit ts)."""
    best: tuple[int, int] | None = None
    for entry in DeltaTable(str(path)).history():
        recorded = entry.get(CHECKPOINT_KEY)
        if recorded is None:
            continue
        ts, v = int(recorded), int(entry["version"])
        if ts <= commit_ts and (best is None or v > best[1]):
            best = (ts, v)
    return None if best is None else best[1]


__all__ = ["CHECKPOINT_KEY", "DeltaSink", "read_delta", "version_at"]
