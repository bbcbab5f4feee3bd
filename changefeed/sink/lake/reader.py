"""Lake tables read back: which tables, their versions by checkpoint ts, the source's rows as of a commit ts.

What ``changefeed lake as-of`` and ``changefeed diff --target delta://|iceberg://`` read. Every
table commit of the sinks records the checkpoint ts the table is complete to (docs/lakehouse.md,
"Exactly once"); a version is therefore the source table exactly as it was at that ts, and the
newest version at or below a ts is the table at that ts up to one micro-batch. A ``changelog``
table holds every change with its own commit ts, so it gives the table exactly at any ts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import ConfigError
from ...model.tso import LOGICAL_MASK, compose_tso, tso_physical_ms
from . import LAKE_SCHEMES
from .common import ABSENT_COLUMNS, BEFORE, COMMIT_TS, OP, VALID_FROM, VALID_TO, LakeError, LakeOptions, LakeSink, Name

#: The columns each mode adds to the source's (docs/lakehouse.md, "Modes").
_SCD2_COLUMNS = (VALID_FROM, VALID_TO, OP, COMMIT_TS)


@dataclass(frozen=True)
class Version:
    """One table version: its format handle (Delta version, Iceberg snapshot id) and checkpoint ts."""

    handle: int
    checkpoint_ts: int


@dataclass(frozen=True)
class TableAsOf:
    """A lake table's source rows as of a ts (`as_of`)."""

    name: Name
    mode: str
    #: The ts the rows are exact at: the asked one for changelog, else the version's checkpoint (<= asked).
    exact_ts: int
    version: Version
    rows: pa.Table


def parse_ts(text: str) -> int:
    """``--ts``: a TSO (digits) or an ISO time (no offset: UTC); a time covers its whole millisecond."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        raise ConfigError(f"--ts must be a TSO or an ISO time like 2026-12-04T10:00:00Z, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    # Every change committed within that millisecond: a binlog source's TSOs count them in the logical part.
    return compose_tso(ms, LOGICAL_MASK)


def ts_text(tso: int) -> str:
    """A TSO with its UTC wall time, for people."""
    moment = datetime.fromtimestamp(tso_physical_ms(tso) / 1000, UTC)
    return f"{tso} ({moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')})"


def open_lake(uri: str) -> LakeSink:
    """The sink object over an existing ``delta://DIR`` / ``iceberg://DIR?catalog-uri=...`` (read only here)."""
    from urllib.parse import parse_qsl, urlsplit  # noqa: PLC0415

    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in LAKE_SCHEMES:
        raise ConfigError(f"expected delta://DIR or iceberg://DIR, got {uri!r}")
    root = Path(parts.netloc + parts.path)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    options = LakeOptions.from_params(scheme, {k: v for k, v in params.items() if k != "mode"})
    if not root.is_dir():
        raise ConfigError(f"no lake directory at {root}")
    if scheme == "delta":
        from .delta import DeltaSink  # noqa: PLC0415

        return DeltaSink(root, options)
    if options.catalog_uri is None and not (root / "_catalog.db").is_file():
        raise ConfigError(f"no Iceberg catalog at {root / '_catalog.db'} (written by iceberg://{root})")
    from .iceberg import IcebergSink  # noqa: PLC0415

    return IcebergSink(root, options)


def tables(lake: LakeSink) -> list[Name]:
    """The source tables the lake holds, sorted."""
    return sorted(lake._scan())


def versions(lake: LakeSink, name: Name) -> list[Version]:
    """The table's versions that record a checkpoint ts, oldest first; of several commits recording the
    same ts (an Iceberg delete-and-append transaction is two snapshots) only the last, the complete one."""
    found: list[Version] = []
    if lake.kind == "delta":
        from deltalake import DeltaTable  # noqa: PLC0415

        from .delta import CHECKPOINT_KEY, readable_floor  # noqa: PLC0415

        history = DeltaTable(str(_delta_path(lake, name))).history()
        floor = readable_floor(history)  # versions below it lost their files to retain-versions
        found = sorted(
            (
                Version(int(e["version"]), int(e[CHECKPOINT_KEY]))
                for e in history
                if e.get(CHECKPOINT_KEY) is not None and int(e["version"]) >= floor
            ),
            key=lambda v: v.handle,
        )
    else:
        from .iceberg import CHECKPOINT_KEY as ICEBERG_KEY  # noqa: PLC0415

        table = _iceberg_table(lake, name)
        snapshot = table.current_snapshot()
        while snapshot is not None:  # the current snapshot's ancestry, newest first
            recorded = None if snapshot.summary is None else snapshot.summary.additional_properties.get(ICEBERG_KEY)
            if recorded is not None:
                found.append(Version(snapshot.snapshot_id, int(recorded)))
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else table.snapshot_by_id(parent)
        found.reverse()
    last = {v.checkpoint_ts: (i, v) for i, v in enumerate(found)}  # the later commit of a ts wins
    return [v for _, v in sorted(last.values(), key=lambda p: p[0])]


def read_version(lake: LakeSink, name: Name, version: Version | None) -> pa.Table:
    """The lake table's stored rows at ``version`` (None: the current ones)."""
    where = f"{lake.kind} {lake.label(name)}"
    try:
        if lake.kind == "delta":
            from .delta import read_delta  # noqa: PLC0415

            return read_delta(_delta_path(lake, name), None if version is None else version.handle)
        table = _iceberg_table(lake, name)
        scan = table.scan() if version is None else table.scan(snapshot_id=version.handle)
        return scan.to_arrow()
    except (OSError, ValueError) as exc:  # a version whose files maintenance removed, a damaged table
        at = "" if version is None else f" version {version.handle} (checkpoint ts {version.checkpoint_ts})"
        raise LakeError(f"cannot read {where}{at}: {exc}", where=where) from None


def table_mode(schema: pa.Schema) -> str:
    """The mode a table was written in, from the columns the mode adds."""
    names = set(schema.names)
    if {VALID_FROM, VALID_TO} <= names:
        return "scd2"
    if {OP, COMMIT_TS} <= names:
        return "changelog"
    return "upsert"


def as_of(lake: LakeSink, name: Name, ts: int | None = None) -> TableAsOf:
    """The source table's rows at ``ts`` (None: as far as the lake has it) as the lake holds them."""
    history = versions(lake, name)
    if not history:
        raise LakeError(f"{lake.kind} {lake.label(name)} has no version recording a checkpoint ts")
    latest = history[-1]
    current = read_version(lake, name, None)
    mode = table_mode(current.schema)
    if mode == "changelog":
        exact = latest.checkpoint_ts if ts is None else min(ts, latest.checkpoint_ts)
        return TableAsOf(name, mode, exact, latest, fold_changelog(current, exact, f"{lake.kind} {lake.label(name)}"))
    chosen = latest if ts is None else next((v for v in reversed(history) if v.checkpoint_ts <= ts), None)
    if chosen is None:  # older than anything kept: an empty table would claim what the lake cannot know
        raise LakeError(
            f"{lake.kind} {lake.label(name)} has no version at or before {ts_text(ts or 0)}: "
            f"the oldest it keeps is at checkpoint ts {ts_text(history[0].checkpoint_ts)}"
        )
    raw = current if chosen is latest else read_version(lake, name, chosen)
    return TableAsOf(name, mode, chosen.checkpoint_ts, chosen, source_rows(raw, mode))


def source_rows(raw: pa.Table, mode: str) -> pa.Table:
    """An upsert/scd2 table's current source rows (scd2: the open versions, without the history columns)."""
    if mode == "scd2":
        raw = raw.filter(pc.is_null(raw.column(VALID_TO)))
        return raw.drop_columns([c for c in _SCD2_COLUMNS if c in raw.column_names])
    return raw


def fold_changelog(raw: pa.Table, ts: int, where: str) -> pa.Table:
    """The source rows a changelog describes at ``ts``: after the last truncate/drop at or below it, each
    insert/update's after image counts +1 and each update/delete's before image -1 (a multiset, so the
    order of changes within a commit ts does not matter, and tables without a key fold the same way)."""
    raw = raw.filter(pc.less_equal(raw.column(COMMIT_TS), pa.scalar(ts, pa.int64())))
    ops = raw.column(OP)
    cleared = raw.filter(pc.is_in(ops, pa.array(["truncate", "drop"])))
    if cleared.num_rows:
        since = pc.max(cleared.column(COMMIT_TS)).as_py()
        raw = raw.filter(pc.greater(raw.column(COMMIT_TS), pa.scalar(since, pa.int64())))
        ops = raw.column(OP)
    if ABSENT_COLUMNS in raw.column_names:
        partial = raw.filter(pc.is_valid(raw.column(ABSENT_COLUMNS)))
        if partial.num_rows:
            at = pc.min(partial.column(COMMIT_TS)).as_py()
            raise LakeError(
                f"{where}: the changelog holds changes whose binlog images lacked columns (binlog_row_image=MINIMAL, "
                f"first at commit ts {at}): they cannot be folded into rows (a table in mode=upsert or scd2 can)",
                where=where,
            )
        raw = raw.drop_columns([ABSENT_COLUMNS])
    names = [n for n in raw.column_names if n not in (OP, COMMIT_TS) and not n.startswith(BEFORE)]
    after = raw.filter(pc.is_in(ops, pa.array(["insert", "update"]))).select(names)
    before = raw.filter(pc.is_in(ops, pa.array(["update", "delete"]))).select([BEFORE + n for n in names])
    before = before.rename_columns(names)
    weight = "__cf_weight"
    both = pa.concat_tables(
        [
            after.append_column(weight, pa.array(np.ones(after.num_rows, np.int64))),
            before.append_column(weight, pa.array(np.full(before.num_rows, -1, np.int64))),
        ]
    )
    counted = both.group_by(names, use_threads=False).aggregate([(weight, "sum")])
    counts = counted.column(f"{weight}_sum").to_numpy()
    if (counts < 0).any():
        bad = counted.filter(pc.less(counted.column(f"{weight}_sum"), 0)).slice(0, 1).to_pylist()[0]
        raise LakeError(f"{where}: a change removes a row the changelog never had: {_clip(bad)}", where=where)
    rows = counted.select(names)
    return rows.take(pa.array(np.repeat(np.arange(rows.num_rows), counts)))


def _clip(row: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in row.items() if not k.startswith("__cf"))
    return text if len(text) <= 300 else text[:300] + "..."


def _delta_path(lake: LakeSink, name: Name) -> Path:
    path = lake.table_path(name)
    if not (path / "_delta_log").is_dir():
        raise LakeError(f"no delta table {lake.label(name)} under {lake.root}")
    return path


def _iceberg_table(lake: LakeSink, name: Name) -> Any:
    table = lake._load(name)  # type: ignore[attr-defined]
    if table is None:
        raise LakeError(f"no iceberg table {lake.label(name)} in the catalog of {lake.root}")
    return table


__all__ = ["TableAsOf", "Version", "as_of", "fold_changelog", "open_lake", "parse_ts", "tables", "ts_text", "versions"]
