"""What the Delta and Iceberg sinks share: options, change sets, the three modes, checkpoints, DDL.

Why one base: both formats apply a micro-batch the same way and differ only in how a table is
found, created, evolved and committed to. Per table and batch the rows become one Arrow table in
the lake's types (`lake_array`), collapsed for the mode, and go to the format in ONE commit that
also records the table's checkpoint ts (Delta: an application transaction; Iceberg: snapshot
summary properties). A table's checkpoint is the ts up to which every change of that table is in
it, so a replayed row at or below it is skipped table by table: a crash after some tables of a
batch committed and before others did recovers each from its own commit. After every table of a
flush committed, ``<root>/_checkpoint.json`` records the batch's Resolved ts, which every table is
complete to (also those the batch did not touch); `open` returns the lowest complete-to ts over
the tables.

Rows are handled by column position (``c<i>``, ``b<i>`` for the before image) until the table is
written, so column names from data never meet this code's own column names. Images that lack
columns (binlog_row_image=MINIMAL) carry presence columns (``p<i>``, ``q<i>``) through the change
set: changelog records them (``_cf_absent``), upsert and scd2 complete the images from the stored
rows first (`complete_changes`; docs/lakehouse.md, "MINIMAL row images").
"""

from __future__ import annotations

import logging
import re
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import ConfigError, SinkError, clip
from ...files.paths import encode_name, join_under, table_label
from ...model import ABSENT, ActionType, DDLEvent, Event, Op, Resolved, RowChange, TableSchema
from ...model.arrow import LAKE_TIME_ZONE, images_to_batch, lake_array, lake_arrow_type, zero_dates
from ...model.ddl import ddl_tables
from ...model.ddlschema import column_renames
from ...model.rowblock import RowBlock, TableRows
from ...model.types import DATE_TYPES, FLOAT_TYPES, INTEGER_TYPES, STRING_TYPES, TEMPORAL_TYPES, TypeCode
from ..base import SinkContext
from ..replay import ResolvedGuard
from ..storage.writer import write_atomically

log = logging.getLogger(__name__)

MODES = ("upsert", "changelog", "scd2")
CHECKPOINT_FILE = "_checkpoint.json"
#: Default ``optimize-every``: compact a table's small files every this many versions.
OPTIMIZE_EVERY = 100
#: Entries of the root beside the schema directories: a schema with one of these names is escaped.
ROOT_ENTRIES = frozenset({CHECKPOINT_FILE, "_spark_checkpoint", "_catalog.db"})
#: Columns the sink adds per mode (a source column of the same name is refused).
OP, COMMIT_TS, VALID_FROM, VALID_TO, DELETE = "_cf_op", "_cf_commit_ts", "_cf_valid_from", "_cf_valid_to", "_cf_delete"
BEFORE = "_cf_before_"
WEIGHT = "_cf_weight"  # copies a batch adds or removes of a row of a table without a key (upsert)
#: changelog: the names of a change's columns its binlog images did not carry (MINIMAL row images)
ABSENT_COLUMNS = "_cf_absent"
OP_NAMES = np.array(["insert", "update", "delete"], dtype=object)


class LakeError(SinkError):
    """A lake sink cannot apply a change (hostile input, a shape the format cannot hold)."""


class LakeDDLError(LakeError):
    """A DDL the table format (or this sink, yet) cannot express."""


@dataclass(frozen=True)
class LakeOptions:
    """The ``delta://DIR?...`` / ``iceberg://DIR?...`` parameters."""

    mode: str = "upsert"
    catalog_uri: str | None = None  # iceberg only: another SQL or REST catalog
    #: iceberg only: the namespace the schemas' namespaces are created under (``catalog-namespace=a.b``)
    catalog_namespace: tuple[str, ...] = ()
    time_zone: str = LAKE_TIME_ZONE  # the zone TIMESTAMP text is in (the changefeed's)
    app_id: str = "changefeed"  # Delta application transaction id / Iceberg summary key prefix
    optimize_every: int = OPTIMIZE_EVERY  # compact small files every N table versions (0: never)
    retain_versions: int = 0  # keep the newest N versions for time travel, drop older ones (0: keep all)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {clip(self.mode)}")
        for key, value in (("optimize-every", self.optimize_every), ("retain-versions", self.retain_versions)):
            if value < 0:
                raise ConfigError(f"{key} must be a count >= 0 (0 turns it off), got {value}")

    @property
    def maintenance_every(self) -> int:
        """Table versions between maintenance runs (0: none): the optimize interval, else the retention."""
        return self.optimize_every or self.retain_versions

    @classmethod
    def from_params(cls, scheme: str, params: Mapping[str, str], time_zone: str = LAKE_TIME_ZONE) -> LakeOptions:
        """Checked URI parameters; unknown ones (and ``catalog-uri`` outside iceberg) are refused."""
        known = {"mode", "optimize-every", "retain-versions"}
        known |= {"catalog-uri", "catalog-namespace"} if scheme == "iceberg" else set()
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigError(f"{scheme}:// takes {', '.join(sorted(known))}; unknown: {', '.join(unknown)}")
        return cls(
            mode=params.get("mode", "upsert"),
            catalog_uri=params.get("catalog-uri") or None,
            catalog_namespace=_namespace(params.get("catalog-namespace", "")),
            time_zone=time_zone,
            optimize_every=_count(scheme, params, "optimize-every", OPTIMIZE_EVERY),
            retain_versions=_count(scheme, params, "retain-versions", 0),
        )


def _namespace(text: str) -> tuple[str, ...]:
    """``catalog-namespace=a.b`` -> ("a", "b"): a catalog's parent namespace, for catalogs that hold tables only
    under names of their own (Lakana's REST catalog: under ``bronze``, ``silver`` or ``gold``)."""
    if not text.strip():
        return ()
    parts = tuple(text.split("."))
    if any(not p or p != p.strip() or not p.isprintable() for p in parts):
        raise ConfigError(f"iceberg://...?catalog-namespace= takes dot-separated names, got {clip(text)}")
    return parts


def _count(scheme: str, params: Mapping[str, str], key: str, default: int) -> int:
    text = params.get(key, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f"{scheme}://...?{key}= takes a count >= 0 (0 turns it off), got {clip(text)}")
    return int(text)


# ---------------------------------------------------------------- table shapes per mode


def lake_schema(shape: TableSchema, mode: str) -> pa.Schema:
    """The lake table's columns for a source shape in ``mode`` (docs/lakehouse.md)."""
    columns = [pa.field(c.name, lake_arrow_type(c)) for c in shape.columns]
    if mode == "changelog":
        before = [pa.field(BEFORE + c.name, lake_arrow_type(c)) for c in shape.columns]
        absent = pa.field(ABSENT_COLUMNS, pa.list_(pa.string()))
        return pa.schema([pa.field(OP, pa.string()), pa.field(COMMIT_TS, pa.int64()), *columns, *before, absent])
    if mode == "scd2":
        stamp = pa.timestamp("us", LAKE_TIME_ZONE)
        extra = [pa.field(VALID_FROM, stamp), pa.field(VALID_TO, stamp), pa.field(OP, pa.string())]
        return pa.schema([*columns, *extra, pa.field(COMMIT_TS, pa.int64())])
    return pa.schema(columns)


def check_shape(shape: TableSchema, mode: str, where: str) -> None:
    """Refuse a shape this sink cannot write: no key where the mode needs one, a name clash."""
    names = {c.name for c in shape.columns}
    ours = {OP, COMMIT_TS, VALID_FROM, VALID_TO, DELETE, WEIGHT, ABSENT_COLUMNS} | (
        {BEFORE + n for n in names} if mode == "changelog" else set()
    )
    clash = sorted(names & ours)
    if clash:
        raise LakeError(f"{_label(shape)}: column {clash[0]!r} clashes with a column the {mode} mode adds", where=where)
    if mode == "scd2" and not shape.handle_key:
        raise LakeError(
            f"{_label(shape)} has no primary key or NOT NULL unique key: mode=scd2 needs one to tell the versions "
            "of a row apart (mode=upsert and mode=changelog take such a table)",
            where=where,
        )


def _label(shape: TableSchema) -> str:
    return table_label(shape.schema, shape.table)


# ---------------------------------------------------------------- change sets


def _positional(
    ts: TableSchema, arrays: list[pa.Array], ops: pa.Array, commit: pa.Array, before: list[pa.Array]
) -> pa.Table:
    w = len(ts.columns)
    names = [f"c{i}" for i in range(w)] + ["op", "ts"] + [f"b{i}" for i in range(w)]
    return pa.Table.from_arrays([*arrays, ops, commit, *before], names=names)


def _lake_columns(ts: TableSchema, arrays: Iterable[pa.Array], time_zone: str, where: str) -> list[pa.Array]:
    out = []
    for column, values in zip(ts.columns, arrays, strict=True):
        zero = None
        if column.type_code in TEMPORAL_TYPES and pa.types.is_string(values.type):
            zero = zero_dates(values)
            if zero.true_count:
                log.warning(
                    "%s: %d zero or partial dates in column %r written as NULL",
                    _label(ts),
                    zero.true_count,
                    column.name,
                    extra={"table": ts.qualified_name, "column": column.name, "rows": zero.true_count, "where": where},
                )
        try:
            out.append(lake_array(column, values, time_zone, zero=zero))
        except ValueError as exc:
            raise LakeError(f"{_label(ts)}: {exc}", where=where) from None
    return out


def changes_from_block(rows: TableRows, time_zone: str) -> pa.Table:
    """One table's rows of a `RowBlock` as a change set (columnar when every image is whole)."""
    ts = rows.table_schema
    if rows.main_runs is not None or rows.before_runs is not None:  # MINIMAL images: per row
        return changes_from_rows(ts, [rows.row(i) for i in range(rows.num_rows)], time_zone)
    w = rows.width
    commit = pc.cast(rows.batch.column(w + 1), pa.int64())
    where = f"commit ts {_ts_range(commit)}"
    main = _lake_columns(ts, (rows.column(i) for i in range(w)), time_zone, where)
    before = _lake_columns(ts, (rows.before(i) for i in range(w)), time_zone, where)
    return _positional(ts, main, pa.array(rows.ops, pa.int8()), commit, before)


def changes_from_rows(ts: TableSchema, rows: list[RowChange], time_zone: str) -> pa.Table:
    """`RowChange`s of one table shape as a change set.

    Absent columns (binlog_row_image=MINIMAL/NOBLOB, `ABSENT`) are NULL in the change set plus a
    presence column per image column (``p<i>`` for the main image, ``q<i>`` for an update's before
    image), added only when some image lacks a column; each mode then completes the images
    (`complete_changes`) or records what was carried (`changelog_rows`). The key columns are
    filled in between an update's two images (an image leaves out a key column the statement did
    not change, so its value is the other image's); a delete needs its key columns (without a key:
    its whole old image, checked when the images are completed).
    """
    handle = set(ts.handle_key)
    key = handle or set(range(len(ts.columns)))  # without a key, the whole row is its identity
    mains: list[tuple[Any, ...]] = []
    befores: list[tuple[Any, ...] | None] = []
    ops: list[int] = []
    commit: list[int] = []
    partial = False
    for row in rows:
        if row.op is Op.DELETE:
            image = row.old
            assert image is not None
            if any(image[i] is ABSENT for i in key):
                raise LakeError(f"{_label(ts)}: a delete without its key columns", where=f"commit ts {row.commit_ts}")
            mains.append(image)
            befores.append(None)
        else:
            image = row.new
            assert image is not None
            old = row.old
            if row.op is Op.UPDATE and old is not None:
                # a table without a key: its whole row is the key, and a column the after image lacks kept its value
                image = tuple(old[i] if v is ABSENT and i in key else v for i, v in enumerate(image))
                old = tuple(image[i] if v is ABSENT and i in handle else v for i, v in enumerate(old))
            if ts.handle_key and any(image[i] is ABSENT for i in key):
                raise LakeError(
                    f"{_label(ts)}: an {row.op} without its key columns", where=f"commit ts {row.commit_ts}"
                )
            mains.append(image)
            befores.append(old)
            partial = partial or (old is not None and ABSENT in old)
        partial = partial or ABSENT in image
        ops.append(0 if row.op is Op.INSERT else 1 if row.op is Op.UPDATE else 2)
        commit.append(row.commit_ts)
    none = (None,) * len(ts.columns)
    main_batch = images_to_batch(ts, mains)  # ABSENT -> NULL
    before_batch = images_to_batch(ts, [none if b is None else b for b in befores])
    commit_arr = pa.array(commit, pa.int64())
    where = f"commit ts {_ts_range(commit_arr)}"
    changes = _positional(
        ts,
        _lake_columns(ts, main_batch.columns, time_zone, where),
        pa.array(ops, pa.int8()),
        commit_arr,
        _lake_columns(ts, before_batch.columns, time_zone, where),
    )
    if not partial:
        return changes
    for i in range(len(ts.columns)):
        changes = changes.append_column(f"p{i}", pa.array([img[i] is not ABSENT for img in mains]))
    for i in range(len(ts.columns)):
        changes = changes.append_column(f"q{i}", pa.array([b is not None and b[i] is not ABSENT for b in befores]))
    return changes


def _ts_range(commit: pa.Array) -> str:
    if len(commit) == 0:
        return "-"
    lo, hi = pc.min(commit).as_py(), pc.max(commit).as_py()
    return str(lo) if lo == hi else f"{lo}..{hi}"


# ---------------------------------------------------------------- partial images (binlog_row_image=MINIMAL)


def has_presence(changes: pa.Table) -> bool:
    """Whether a change set carries presence columns (some image lacks columns)."""
    return "p0" in changes.column_names


def with_presence(changes: pa.Table, width: int) -> pa.Table:
    """A change set with presence columns (every column present where it had none), to concatenate."""
    if has_presence(changes) or not width:
        return changes
    n = changes.num_rows
    op = changes.column("op").to_numpy()
    for i in range(width):
        changes = changes.append_column(f"p{i}", pa.array(np.ones(n, bool)))
    for i in range(width):
        changes = changes.append_column(f"q{i}", pa.array(op == 1))
    return changes


def without_presence(changes: pa.Table) -> pa.Table:
    return changes.drop_columns([n for n in changes.column_names if n[0] in "pq" and n[1:].isdigit()])


def _mask(changes: pa.Table, name: str) -> np.ndarray:
    return changes.column(name).to_numpy(zero_copy_only=False).astype(bool)


def default_value(ts: TableSchema, i: int) -> Any:
    """The model value of column ``i``'s declared constant default, which an INSERT that leaves the column out
    stored; ValueError when the schema does not give it or gives one this sink cannot read exactly."""
    column = ts.columns[i]
    text, tc = column.default, column.type_code
    if text is None:
        raise ValueError("its default is not known here (the table schema carries none)")
    text = str(text)
    try:
        if tc in INTEGER_TYPES or tc is TypeCode.YEAR:
            return int(text, 10)
        if tc in FLOAT_TYPES:
            return float(text)
        if tc is TypeCode.DECIMAL:
            return Decimal(text)
        if tc is TypeCode.ENUM:
            return column.elements.index(text) + 1
        if tc is TypeCode.SET:
            names = [n for n in text.split(",") if n]
            return sum(1 << column.elements.index(n) for n in names)
    except (ValueError, ArithmeticError):
        raise ValueError(f"its default {clip(text)} is no constant of its type") from None
    if tc in DATE_TYPES and _DATE.fullmatch(text):
        return text
    if tc is TypeCode.DATETIME and _DATETIME.fullmatch(text):
        return text
    if tc in STRING_TYPES and not column.is_bytes:
        return text
    raise ValueError(
        f"its default {clip(text)} ({tc.name}) is not one this sink reads (a constant number, "
        "text, ENUM/SET member, DATE or DATETIME)"
    )


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?")


def _fill_defaults(ts: TableSchema, changes: pa.Table, time_zone: str) -> pa.Table:
    """Inserts' absent columns set to the columns' declared defaults (what MySQL stored: a column an INSERT
    does not give takes its DEFAULT, and MINIMAL logs only the columns the statement gave plus those a
    function default computed); an unknown default is refused, naming the table and the column."""
    insert = changes.column("op").to_numpy() == 0
    for i, column in enumerate(ts.columns):
        missing = insert & ~_mask(changes, f"p{i}")
        if not missing.any():
            continue
        at = _first_ts(changes, missing)
        if column.generated:
            raise LakeError(
                f"{_label(ts)}: an INSERT without generated column {column.name!r} (binlog_row_image=MINIMAL does "
                "not log a VIRTUAL column): its value is unknown here; make it STORED or use binlog_row_image=FULL",
                where=f"commit ts {at}",
            )
        try:
            value = default_value(ts, i)
        except ValueError as exc:
            raise LakeError(
                f"{_label(ts)}: an INSERT leaves out column {column.name!r} (binlog_row_image=MINIMAL logs only "
                f"the columns the statement gives) and {exc}: give every column in INSERTs or use "
                "binlog_row_image=FULL",
                where=f"commit ts {at}",
            ) from None
        image = tuple(value if j == i else None for j in range(len(ts.columns)))
        filled = _lake_columns(ts, images_to_batch(ts, [image]).columns, time_zone, f"commit ts {at}")[i]
        column_at = changes.schema.get_field_index(f"c{i}")
        values = pc.if_else(pa.array(missing), filled[0], changes.column(f"c{i}"))
        changes = changes.set_column(column_at, f"c{i}", values)
        changes = changes.set_column(
            changes.schema.get_field_index(f"p{i}"), f"p{i}", pc.or_(changes.column(f"p{i}"), pa.array(missing))
        )
    return changes


def _first_ts(changes: pa.Table, mask: np.ndarray) -> int:
    return int(changes.column("ts").to_numpy()[np.flatnonzero(mask)[0]])


def partial_keys(ts: TableSchema, changes: pa.Table) -> pa.Table:
    """The keys (real column names, distinct) of the rows whose stored values complete the batch's updates
    that lack columns (`complete_changes`): each such update's old key. Empty without a key."""
    key = list(ts.handle_key)
    names = [ts.columns[i].name for i in key]
    if not key or not has_presence(changes):
        return pa.table({n: pa.array([], changes.column(f"c{i}").type) for n, i in zip(names, key, strict=True)})
    w = len(ts.columns)
    update = changes.column("op").to_numpy() == 1
    partial = np.zeros(changes.num_rows, bool)
    for i in range(w):
        partial |= ~_mask(changes, f"p{i}")
    picked = changes.filter(pa.array(update & partial))
    keys = pa.Table.from_arrays([pc.coalesce(picked.column(f"b{i}"), picked.column(f"c{i}")) for i in key], names=names)
    return keys.group_by(names, use_threads=False).aggregate([]).select(names)


def rows_of_keys(rows: pa.Table, keys: pa.Table) -> pa.Table:
    """The ``rows`` whose key columns (``keys``' names) equal one of ``keys`` (a scan's superset narrowed)."""
    names = keys.column_names
    if not rows.num_rows or not keys.num_rows:
        return rows.slice(0, 0)
    probe = pa.Table.from_arrays(
        [pc.cast(rows.column(n), keys.column(n).type) for n in names] + [pa.array(np.arange(rows.num_rows))],
        names=[*names, "__cf_row"],
    )
    hit = probe.join(keys, names, join_type="left semi", use_threads=False).column("__cf_row")
    return rows.take(hit)


def complete_changes(ts: TableSchema, changes: pa.Table, stored: pa.Table | None, time_zone: str) -> pa.Table:
    """A change set whose images lack columns made whole, for upsert and scd2 (then without presence columns).

    Inserts take the columns' defaults (`_fill_defaults`). An update's absent columns keep the values
    its row had: per key, in commit order, the image before it in the batch (itself completed) or,
    for the key's first change in the batch, the ``stored`` row (the table's current row, or scd2's
    open version; real column names, the rows of `partial_keys`). A table without a key takes them
    from the update's own before image (MINIMAL logs a keyless row whole there), and a delete of
    such a table needs its whole old image. An update of a row neither the batch nor the table has is
    refused, naming the table and the key (its other columns are unknown).
    """
    if not has_presence(changes):
        return changes
    w = len(ts.columns)
    changes = _fill_defaults(ts, changes, time_zone)
    op = changes.column("op").to_numpy()
    present: np.ndarray = np.ones((changes.num_rows, w), bool)
    for i in range(w):
        present[:, i] = _mask(changes, f"p{i}")
    if present[op != 0].all():
        return without_presence(changes)
    for i, column in enumerate(ts.columns):
        stale = ~present[:, i] & (op == 1)
        if column.generated and stale.any():
            raise LakeError(
                f"{_label(ts)}: an UPDATE without generated column {column.name!r} "
                "(binlog_row_image=MINIMAL does not log a VIRTUAL column): its new value is unknown here; make it "
                "STORED or use binlog_row_image=FULL",
                where=f"commit ts {_first_ts(changes, stale)}",
            )
    if not ts.handle_key:
        return _complete_keyless(ts, changes, op, present)
    names = [c.name for c in ts.columns]
    if stored is not None:
        stored = pa.Table.from_arrays(
            [pc.cast(stored.column(n), changes.column(f"c{i}").type) for i, n in enumerate(names)], names=names
        )
    src = _fold_sources(ts, changes, op, present, stored)
    out = without_presence(changes)
    base_rows = 0 if stored is None else stored.num_rows
    for i, name in enumerate(names):
        own = changes.column(f"c{i}")
        pool = own if stored is None else pa.chunked_array([*stored.column(name).chunks, *own.chunks], own.type)
        out = out.set_column(i, f"c{i}", pool.take(pa.array(src[:, i] + (base_rows if stored is not None else 0))))
    return out


def _fold_sources(
    ts: TableSchema, changes: pa.Table, op: np.ndarray, present: np.ndarray, stored: pa.Table | None
) -> np.ndarray:
    """Per change and column, where its value comes from: ``r >= 0`` the batch's row r, ``j < 0`` the stored
    row ``j + len(stored)``. Each key's changes are walked in commit order; an update's absent columns come
    from where the key's previous image got them."""
    key = list(ts.handle_key)
    n, w = changes.num_rows, len(ts.columns)
    new_keys = list(zip(*(changes.column(f"c{i}").to_pylist() for i in key), strict=True))
    old_keys = list(zip(*(changes.column(f"b{i}").to_pylist() for i in key), strict=True))
    held: dict[tuple[Any, ...], int] = {}
    if stored is not None:
        stored_keys = zip(*(stored.column(ts.columns[i].name).to_pylist() for i in key), strict=True)
        held = {k: j - stored.num_rows for j, k in enumerate(stored_keys)}
    src = np.repeat(np.arange(n, dtype=np.int64)[:, None], w, axis=1)
    state: dict[tuple[Any, ...], int | None] = {}  # key -> its newest row in the batch (None: deleted)
    partial = np.logical_not(np.all(present, axis=1))
    for r in range(n):
        if op[r] == 2:
            state[new_keys[r]] = None
            continue
        if op[r] == 1:
            old = old_keys[r] if None not in old_keys[r] else new_keys[r]
            if partial[r]:
                absent = ~present[r]
                src[r, absent] = _base(ts, changes, r, old, state, held, src)[absent]
            if old != new_keys[r]:
                state[old] = None
        state[new_keys[r]] = r
    return src


def _base(
    ts: TableSchema,
    changes: pa.Table,
    r: int,
    old: tuple[Any, ...],
    state: dict[tuple[Any, ...], int | None],
    held: dict[tuple[Any, ...], int],
    src: np.ndarray,
) -> np.ndarray:
    """Where the values of key ``old`` before change ``r`` come from (a row of `_fold_sources`' ``src``)."""
    where = f"commit ts {int(changes.column('ts')[r].as_py())}"
    if old in state:
        prev = state[old]
        if prev is None:
            raise LakeError(f"{_label(ts)}: an UPDATE of key {clip(old)} after its DELETE", where=where)
        return src[prev]
    if old in held:
        return np.full(len(ts.columns), held[old], dtype=np.int64)
    raise LakeError(
        f"{_label(ts)}: an UPDATE of key {clip(old)} carries only some columns (binlog_row_image=MINIMAL) and the "
        "table holds no such row to take the others from",
        where=where,
    )


def _complete_keyless(ts: TableSchema, changes: pa.Table, op: np.ndarray, present: np.ndarray) -> pa.Table:
    """A table without a key: an update's absent columns are its before image's, a delete's image is whole."""
    for i in range(len(ts.columns)):
        before = _mask(changes, f"q{i}")
        lacking = ~present[:, i] & ((op == 2) | ((op == 1) & ~before))
        if lacking.any():
            raise LakeError(
                f"{_label(ts)} has no key: its rows are matched on every column, and a change at this commit "
                f"lacks column {ts.columns[i].name!r} in both images (binlog_row_image=MINIMAL)",
                where=f"commit ts {_first_ts(changes, lacking)}",
            )
        fill = ~present[:, i] & (op == 1)
        if fill.any():
            at = changes.schema.get_field_index(f"c{i}")
            changes = changes.set_column(
                at, f"c{i}", pc.if_else(pa.array(fill), changes.column(f"b{i}"), changes.column(f"c{i}"))
            )
    return without_presence(changes)


# ---------------------------------------------------------------- modes


def _key_moves(key: list[int], changes: pa.Table, op: np.ndarray) -> np.ndarray:
    """Per change: an update whose old key differs from its new one (a NULL old key is not carried)."""
    moved = np.zeros(changes.num_rows, dtype=bool)
    for i in key:
        differs = pc.fill_null(pc.not_equal(changes.column(f"c{i}"), changes.column(f"b{i}")), False)
        moved |= differs.to_numpy(zero_copy_only=False)
    return moved & (op == 1)


def collapse_upsert(ts: TableSchema, changes: pa.Table) -> pa.Table:
    """The last action per key, in commit order: the final image (upsert) or a delete.

    An update that changes the key also deletes the old key. The result has the table's columns
    (real names) and `DELETE` (bool); delete rows carry the key (other columns are not read).
    """
    w, key = len(ts.columns), list(ts.handle_key)
    n = changes.num_rows
    seq = np.arange(n, dtype=np.int64)
    op = changes.column("op").to_numpy()
    moved = _key_moves(key, changes, op)
    main = changes.select([f"c{i}" for i in range(w)]).append_column("seq", pa.array(seq * 2 + 1))
    main = main.append_column("del", pa.array(op == 2))
    parts = [main]
    if moved.any():
        picked = changes.filter(pa.array(moved))
        old = [picked.column(f"b{i}") for i in range(w)]
        olds = pa.Table.from_arrays(
            [*old, pa.array(seq[moved] * 2), pa.array(np.ones(int(moved.sum()), dtype=bool))],
            names=[*(f"c{i}" for i in range(w)), "seq", "del"],
        )
        parts.append(olds)
    actions = pa.concat_tables(parts)
    last = actions.group_by([f"c{i}" for i in key], use_threads=False).aggregate([("seq", "max")])
    final = actions.filter(pc.is_in(actions.column("seq"), value_set=last.column("seq_max")))
    final = final.sort_by("seq")
    return pa.Table.from_arrays(
        [*(final.column(f"c{i}") for i in range(w)), final.column("del")],
        names=[*(c.name for c in ts.columns), DELETE],
    )


def keyless_weights(ts: TableSchema, changes: pa.Table) -> pa.Table:
    """A table without a key, in upsert mode: the batch as a multiset delta — each distinct row (real
    column names) and how many copies of it the batch adds (> 0) or removes (< 0); rows whose changes
    cancel out are left out. The MySQL sink's rule for such tables (TiCDC's: match every column, one
    row at a time) comes to the same table: a delete or update removes one row equal to its old image."""
    w = len(ts.columns)
    names = [c.name for c in ts.columns]
    op = changes.column("op").to_numpy()
    main = changes.select([f"c{i}" for i in range(w)]).rename_columns(names)
    main = main.append_column(WEIGHT, pa.array(np.where(op == 2, -1, 1).astype(np.int64)))  # a delete's main is old
    before = changes.filter(pa.array(op == 1)).select([f"b{i}" for i in range(w)]).rename_columns(names)
    before = before.append_column(WEIGHT, pa.array(np.full(before.num_rows, -1, np.int64)))
    summed = pa.concat_tables([main, before]).group_by(names, use_threads=False).aggregate([(WEIGHT, "sum")])
    summed = summed.select([*names, f"{WEIGHT}_sum"]).rename_columns([*names, WEIGHT])
    return summed.filter(pc.not_equal(summed.column(WEIGHT), 0))


def keyless_rewrite(ts: TableSchema, weights: pa.Table, held: pa.Table) -> pa.Table:
    """The rows to write back for `keyless_weights`: every copy the table ``held`` of a row the batch removes
    copies of goes (the format deletes them all), and ``held - removed`` come back; rows the batch adds
    come ``weight`` times. Removing more copies than the table holds leaves none (logged, as the MySQL
    sink's DELETE ... LIMIT 1 that matches nothing)."""
    names = [c.name for c in ts.columns]
    have: dict[tuple[Any, ...], int] = {}
    if held.num_rows:
        ones = held.select(names).append_column(WEIGHT, pa.array(np.ones(held.num_rows, np.int64)))
        counts = ones.group_by(names, use_threads=False).aggregate([(WEIGHT, "sum")])
        for row in counts.to_pylist():
            have[tuple(row[n] for n in names)] = int(row[f"{WEIGHT}_sum"])
    rows = weights.to_pylist()
    repeat = []
    for row in rows:
        w = int(row[WEIGHT])
        if w > 0:
            repeat.append(w)
            continue
        kept = have.get(tuple(row[n] for n in names), 0) + w
        if kept < 0:
            log.warning(
                "%s: a change removes %d more copies of a row than the table holds (a table without a key)",
                _label(ts),
                -kept,
                extra={"table": _label(ts)},
            )
        repeat.append(max(kept, 0))
    out = weights.select(names)
    return out.take(pa.array(np.repeat(np.arange(len(rows)), repeat), pa.int64()))


def changelog_rows(ts: TableSchema, changes: pa.Table) -> pa.Table:
    """Every change as one row: op, commit ts, the after image (NULL for a delete), the before image, and
    `ABSENT_COLUMNS`: the names of this row's columns (``x`` / ``_cf_before_x``) the binlog did not carry
    (binlog_row_image=MINIMAL; NULL there is no value, not SQL NULL), NULL when it carried every one."""
    w = len(ts.columns)
    op = changes.column("op").to_numpy()
    is_delete = pa.array(op == 2)
    is_insert = pa.array(op == 0)
    after, before = [], []
    for i in range(w):
        main = changes.column(f"c{i}")
        nulls = pa.nulls(changes.num_rows, main.type)
        after.append(pc.if_else(is_delete, nulls, main))
        # a delete's image is its before image; an insert has none
        before.append(pc.if_else(is_delete, main, pc.if_else(is_insert, nulls, changes.column(f"b{i}"))))
    return pa.Table.from_arrays(
        [pa.array(OP_NAMES[op]), changes.column("ts"), *after, *before, _absent_names(ts, changes, op)],
        schema=lake_schema(ts, "changelog"),
    )


def _absent_names(ts: TableSchema, changes: pa.Table, op: np.ndarray) -> pa.Array:
    """Per change, the changelog columns its images lacked, after-image columns first, in table order (None: none)."""
    n = changes.num_rows
    if not has_presence(changes):
        return pa.nulls(n, pa.list_(pa.string()))
    names: list[list[str]] = [[] for _ in range(n)]
    for i, column in enumerate(ts.columns):  # a delete's main image is its before image
        for r in np.flatnonzero(~_mask(changes, f"p{i}")).tolist():
            names[r].append(BEFORE + column.name if op[r] == 2 else column.name)
    for i, column in enumerate(ts.columns):
        for r in np.flatnonzero(~_mask(changes, f"q{i}") & (op == 1)).tolist():
            names[r].append(BEFORE + column.name)
    return pa.array([x or None for x in names], pa.list_(pa.string()))


def commit_time(commit: pa.Array | pa.ChunkedArray) -> pa.Array:
    """TSO commit ts -> its physical time as a UTC timestamp (microseconds)."""
    ms = pc.shift_right(pc.cast(commit, pa.int64()), 18)
    return pc.cast(pc.multiply(ms, 1000), pa.int64()).cast(pa.timestamp("us", LAKE_TIME_ZONE))


def scd2_rows(ts: TableSchema, changes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(versions, closes): new version rows and, per key touched, when its open version ended.

    Each insert or update opens a version at its commit ts, closed by the next change of its key
    in the batch (or left open: ``_cf_valid_to`` NULL); a delete closes the key's version. An
    update that moves the key closes the old key. ``closes`` holds the key columns and
    `VALID_TO` (the first change of each key in the batch): the stored open version ends there.
    """
    w, key = len(ts.columns), list(ts.handle_key)
    op = changes.column("op").to_numpy()
    n = changes.num_rows
    moved = _key_moves(key, changes, op)
    seq = np.arange(n, dtype=np.int64)
    # events per key: (key, seq, ts, opens a version?, row index)
    ev_keys = [pa.concat_arrays([_arr(changes, f"c{i}"), _arr(changes.filter(pa.array(moved)), f"b{i}")]) for i in key]
    ev_seq = np.concatenate([seq * 2 + 1, seq[moved] * 2])
    commit = changes.column("ts").to_numpy()
    ev_ts = np.concatenate([commit, commit[moved]])
    ev_opens = np.concatenate([op != 2, np.zeros(int(moved.sum()), dtype=bool)])
    ev_row = np.concatenate([seq, np.full(int(moved.sum()), -1)])
    events = pa.Table.from_arrays(
        [*ev_keys, pa.array(ev_seq), pa.array(ev_ts), pa.array(ev_opens), pa.array(ev_row)],
        names=[*(f"k{j}" for j in range(len(key))), "seq", "ts", "opens", "row"],
    )
    events = events.sort_by([*((f"k{j}", "ascending") for j in range(len(key))), ("seq", "ascending")])
    # the next event of the same key ends a version: compare each event's key with the next one's
    same_next = np.zeros(events.num_rows, dtype=bool)
    if events.num_rows > 1:
        same = np.ones(events.num_rows - 1, dtype=bool)
        for j in range(len(key)):
            col = events.column(f"k{j}")
            eq = pc.fill_null(pc.equal(col.slice(0, events.num_rows - 1), col.slice(1)), False)
            same &= eq.to_numpy(zero_copy_only=False)
        same_next[:-1] = same
    ts_sorted = events.column("ts").to_numpy()
    next_ts = np.where(same_next, np.roll(ts_sorted, -1), -1)
    first = np.ones(events.num_rows, dtype=bool)
    first[1:] = ~same_next[:-1]
    opens = events.column("opens").to_numpy(zero_copy_only=False)
    rows = events.column("row").to_numpy()
    pick = np.flatnonzero(opens)
    order = np.argsort(events.column("seq").to_numpy()[pick], kind="stable")
    pick = pick[order]
    src = changes.take(pa.array(rows[pick]))
    valid_to = pa.array(np.where(next_ts[pick] >= 0, next_ts[pick], 0), pa.int64())
    valid_to = pc.if_else(
        pa.array(next_ts[pick] >= 0), commit_time(valid_to), pa.nulls(len(pick), commit_time(valid_to).type)
    )
    versions = pa.Table.from_arrays(
        [
            *(src.column(f"c{i}") for i in range(w)),
            commit_time(src.column("ts")),
            valid_to,
            pa.array(OP_NAMES[src.column("op").to_numpy()]),
            src.column("ts"),
        ],
        schema=lake_schema(ts, "scd2"),
    )
    firsts = events.filter(pa.array(first))
    closes = pa.Table.from_arrays(
        [*(firsts.column(f"k{j}") for j in range(len(key))), commit_time(firsts.column("ts"))],
        names=[*(ts.columns[i].name for i in key), VALID_TO],
    )
    return versions, closes


def _arr(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


# ---------------------------------------------------------------- schema evolution


def _digits(t: pa.DataType) -> int | None:
    """Integer digits a type holds exactly (for widening to decimals), None if not integral/decimal."""
    if pa.types.is_integer(t):
        return {8: 3, 16: 5, 32: 10, 64: 19}[t.bit_width]
    if pa.types.is_decimal(t):
        return int(t.precision - t.scale)
    return None


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Every value of ``old`` is a value of ``new`` (a widening type change both formats accept)."""
    if old == new:
        return True
    if pa.types.is_integer(old) and pa.types.is_integer(new):
        return bool(new.bit_width >= old.bit_width)
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return bool(new.bit_width >= old.bit_width)
    if pa.types.is_decimal(new) and (pa.types.is_integer(old) or pa.types.is_decimal(old)):
        old_digits, scale = _digits(old), old.scale if pa.types.is_decimal(old) else 0
        return bool(new.scale >= scale and (_digits(new) or 0) >= (old_digits or 0))
    if pa.types.is_string(new):  # exact text of a number (a DECIMAL grown past 38 digits)
        return bool(pa.types.is_integer(old) or pa.types.is_decimal(old))
    if pa.types.is_timestamp(new) and pa.types.is_date(old):
        return new.tz is None
    return False


@dataclass(frozen=True)
class Evolution:
    """How a lake table's columns must change to take a new shape."""

    target: pa.Schema
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    widened: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...] = ()  # (stored name, new name)

    @property
    def needed(self) -> bool:
        return bool(self.added or self.dropped or self.widened or self.renamed)


_RENAME_COLUMN = re.compile(r"\b(RENAME\s+COLUMN|CHANGE(\s+COLUMN)?)\b", re.IGNORECASE)


def _renames(ddl: DDLEvent | None, have: Mapping[str, pa.DataType], want: Mapping[str, pa.DataType]) -> dict[str, str]:
    """Stored column -> its new name, for the columns the DDL renames (their ``_cf_before_`` twins too).

    The DDL's renames are composed in order (``a TO t, b TO a, t TO b`` swaps a and b); a name
    the stored table or the new shape does not know is no rename of ours.
    """
    if ddl is None:
        return {}
    current = {name: name for name in have}  # stored name -> its name after the renames so far
    for old, new in column_renames(ddl.query):
        for o, n in ((old, new), (BEFORE + old, BEFORE + new)):
            for stored, now in current.items():
                if now == o:
                    current[stored] = n
                    break
    return {o: n for o, n in current.items() if o != n and n in want}


def plan_evolution(current: pa.Schema, target: pa.Schema, what: str, ddl: DDLEvent | None) -> Evolution:
    """Compare the stored columns with the wanted ones; refuse what is no widening, naming the DDL."""
    cause = f"DDL {clip(ddl.query)} at commit ts {ddl.commit_ts}" if ddl is not None else "a new table shape"
    stored = {f.name: f.type for f in current}
    want = {f.name: f.type for f in target}
    renames = _renames(ddl, stored, want)
    have = {renames.get(name, name): t for name, t in stored.items()}  # the stored columns, renamed
    added = tuple(n for n in want if n not in have)
    dropped = tuple(n for n in have if n not in want)
    widened = []
    for name, new in want.items():
        old = have.get(name)
        if old is None or old == new:
            continue
        if not widens(old, new):
            raise LakeDDLError(f"{what}: {cause} changes column {name!r} from {old} to {new}, which is no widening")
        widened.append(name)
    if added and dropped and ddl is not None and not renames and _RENAME_COLUMN.search(ddl.query):
        raise LakeDDLError(f"{what}: {cause} renames a column in a way this sink cannot follow")
    return Evolution(target, added, dropped, tuple(widened), tuple(renames.items()))


def reshape(data: pa.Table, target: pa.Schema, renamed: Iterable[tuple[str, str]] = ()) -> pa.Table:
    """Rows of a stored table in the ``target`` columns: renamed, dropped ones gone, new ones NULL, widened cast."""
    names = dict(renamed)
    data = data.rename_columns([names.get(n, n) for n in data.column_names])
    arrays = []
    for f in target:
        if f.name in data.column_names:
            arrays.append(pc.cast(data.column(f.name), f.type))
        else:
            arrays.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=target)


# ---------------------------------------------------------------- the sink


@dataclass
class _Chunk:
    """Changes of one table under one shape, in commit order (one commit at flush)."""

    shape: TableSchema
    parts: list[pa.Table] = field(default_factory=list)
    last_ts: int = 0


Name = tuple[str, str]
Step = _Chunk | DDLEvent


class LakeSink(SinkContext):
    """Applies micro-batches to one lake table per source table (a `Sink`; see the module docstring).

    Subclasses implement the format: `_scan`, `_schema`, `_evolve`, `_write`, `_truncate`.
    """

    kind = "lake"

    def __init__(self, root: str | Path, options: LakeOptions | None = None) -> None:
        self.root = Path(root)
        self.options = options or LakeOptions()
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoint_ts = 0
        self._versions: dict[Name, int] = {}  # each table's committed checkpoint (complete-to ts)
        self._steps: dict[Name, list[Step]] = {}
        self._pending_checkpoint = 0
        self._guard = ResolvedGuard(f"{self.kind} sink", 0)
        self._opened = False
        self._root = 0  # the root checkpoint read at open: every table is complete to it
        # RENAME TABLE journal, kept in the root checkpoint file: (from, to, ts, done). The old name's
        # rows up to ts are in the renamed table, so a replay after a crash must not bring it back.
        self._renames: list[tuple[Name, Name, int, bool]] = []

    # ------------------------------------------------------------ format hooks

    @abstractmethod
    def _scan(self) -> dict[Name, int]:
        """Every table this sink wrote and the checkpoint ts its last commit recorded."""

    @abstractmethod
    def _schema(self, name: Name) -> pa.Schema | None:
        """The stored table's columns (None: no table)."""

    @abstractmethod
    def _create(self, name: Name, schema: pa.Schema, version: int) -> None:
        """Create the table (empty) with its checkpoint."""

    @abstractmethod
    def _evolve(self, name: Name, evolution: Evolution, version: int) -> None:
        """Change the stored columns (`Evolution`), recording ``version``."""

    @abstractmethod
    def _write(self, name: Name, shape: TableSchema, changes: pa.Table, version: int) -> None:
        """Apply one chunk's change set in the mode, in ONE commit recording ``version``."""

    @abstractmethod
    def _stored(self, name: Name, shape: TableSchema, keys: pa.Table) -> pa.Table:
        """The stored rows of ``keys`` (real key column names) as the source columns (upsert: the current rows;
        scd2: the open versions), to complete images that lack columns (`complete_changes`)."""

    @abstractmethod
    def _truncate(self, name: Name, version: int, drop: bool) -> None:
        """TRUNCATE / DROP TABLE: no current rows remain, recording ``version``."""

    @abstractmethod
    def _move(self, old: Name, new: Name) -> None:
        """RENAME TABLE in the format: the table stored as ``old`` becomes ``new`` (a no-op once done)."""

    @abstractmethod
    def _mark(self, name: Name, version: int) -> None:
        """Record ``version`` in the table without changing its rows (a renamed table's checkpoint)."""

    def _maintain(self, name: Name) -> None:
        """After a table's commits: compaction and retention when due (maintenance.py); no-op by default."""

    def label(self, name: Name) -> str:
        return table_label(*name)

    def table_path(self, name: Name) -> Path:
        """Where a table lives under the root (names encoded; never outside it)."""
        return join_under(self.root, encode_name(name[0], ROOT_ENTRIES), encode_name(name[1]), what=self.label(name))

    # ------------------------------------------------------------ the Sink contract

    def open(self) -> int:
        """Read every table's checkpoint; return the lowest ts every table is complete to."""
        root = self._root = self._read_root()
        for i, (old, new, ts, done) in enumerate(self._renames):
            if not done:  # a crash in the middle of a RENAME TABLE: finish it
                self._finish_rename(old, new, ts)
                self._renames[i] = (old, new, ts, True)
                self._write_root(self._root)
        self._versions = self._scan()
        for old, _new, ts, _done in self._renames:
            self._versions[old] = max(self._versions.get(old, 0), ts)
        # Every table is complete to the root checkpoint; one holding its share of a batch the root does not
        # cover yet skips the replay itself (`_keep`), and a table the lake does not hold yet (a crash before
        # its first commit) is complete to the root only: rows above the root must not be skipped for it.
        self.checkpoint_ts = root
        self._pending_checkpoint = self.checkpoint_ts
        self._guard = ResolvedGuard(f"{self.kind} sink", self.checkpoint_ts)
        self._opened = True
        log.info(
            "%s sink opened at %s: checkpoint ts %d over %d tables",
            self.kind,
            self.root,
            self.checkpoint_ts,
            len(self._versions),
            extra={"sink": self.kind, "checkpoint_ts": self.checkpoint_ts, "tables": len(self._versions)},
        )
        return self.checkpoint_ts

    def close(self) -> None:
        """Drop what was written and not flushed (a failed batch is replayed)."""
        self._steps.clear()
        self._pending_checkpoint = self.checkpoint_ts

    def write(self, batch: Iterable[Event | RowBlock]) -> None:
        if not self._opened:
            self.open()
        pending: dict[TableSchema, list[RowChange]] = {}
        for event in batch:
            if isinstance(event, RowChange):
                if self._keep(event.table_schema, event.commit_ts, event.commit_ts, event.position):
                    pending.setdefault(event.table_schema, []).append(event)
                continue
            self._rows_out(pending)
            if isinstance(event, RowBlock):
                self._block(event)
            elif isinstance(event, Resolved):
                self._pending_checkpoint = max(self._pending_checkpoint, event.commit_ts)
                self._guard.saw(event.commit_ts)
            elif isinstance(event, DDLEvent):
                self._ddl(event)
        self._rows_out(pending)

    def _keep(self, ts: TableSchema, lo: int, hi: int, position: Any) -> bool:
        """False: rows at or below the table's checkpoint (replay); raises on a contradicted one."""
        name = (ts.schema, ts.table)
        stored = self.table_version(name)
        if hi <= stored:
            return False
        if lo <= stored:
            raise LakeError(
                f"{self.label(name)}: rows at commit ts {lo}..{hi} straddle the table's checkpoint {stored}",
                where=f"commit ts {lo}",
            )
        return not self._guard.skip(lo, ts.schema, ts.table, position)

    def _block(self, block: RowBlock) -> None:
        """A block's rows, each segment (a message's rows) checked against the replay rule, and each run of
        one table's kept rows that lie next to each other in one origin (`TableRows.origin`: the decoder's
        per-message slices of a decoded chunk share it) converted at once: a conversion per 16-row segment
        made it ~20 µs a row (bench/RESULTS.md, "Lake sinks"). A table's runs go out in commit order."""
        runs: dict[Name, tuple[TableRows, list[int]]] = {}  # table -> (origin, [start, end, last commit ts])
        commits = [t.commit_ts for t in block.tables]
        for seg, start in block.walk():
            rows = block.tables[seg.table]
            commit = commits[seg.table][start : start + seg.rows]
            if not len(commit):
                continue
            name = (rows.table_schema.schema, rows.table_schema.table)
            run = runs.get(name)
            lo, hi = int(commit.min()), int(commit.max())
            if not self._keep(rows.table_schema, lo, hi, seg.position):
                if run is not None:
                    self._run_out(*runs.pop(name))
                continue
            root, at = rows.origin
            first = at + start
            if run is not None and run[0] is root and run[1][1] == first:
                run[1][1], run[1][2] = first + seg.rows, max(run[1][2], hi)
                continue
            if run is not None:
                self._run_out(*run)
            runs[name] = (root, [first, first + seg.rows, hi])
        for run in runs.values():
            self._run_out(*run)

    def _run_out(self, root: TableRows, run: list[int]) -> None:
        start, end, hi = run
        part = root.slice(start, end - start)
        self._add(part.table_schema, changes_from_block(part, self.options.time_zone), hi)

    def _rows_out(self, pending: dict[TableSchema, list[RowChange]]) -> None:
        for ts, rows in pending.items():
            self._add(ts, changes_from_rows(ts, rows, self.options.time_zone), rows[-1].commit_ts)
        pending.clear()

    def _add(self, shape: TableSchema, changes: pa.Table, last_ts: int) -> None:
        name = (shape.schema, shape.table)
        check_shape(shape, self.options.mode, f"commit ts {last_ts}")
        steps = self._steps.setdefault(name, [])
        last = steps[-1] if steps else None
        if not (isinstance(last, _Chunk) and _same_shape(last.shape, shape)):
            last = _Chunk(shape)
            steps.append(last)
        last.parts.append(changes)
        last.last_ts = max(last.last_ts, last_ts)

    def _ddl(self, ddl: DDLEvent) -> None:
        if ddl.ddl_type in (ActionType.RENAME_TABLE, ActionType.RENAME_TABLES):
            _, pairs = ddl_tables(ddl.query, ddl.schema)
            # Skipped: no move, or done before a restart (the journal holds the old name's ts).
            todo = [(a, b) for a, b in pairs if a != b and ddl.commit_ts > self.table_version(a)]
            if todo:
                self._commit_steps()  # what came before the rename lands under the old names first
            for old_name, new_name in todo:  # in order: a TO t, b TO a, t TO b swaps, as in MySQL
                self._rename(old_name, new_name, ddl)
            return
        if not ddl.table:
            return  # schema-level DDL: tables follow their own events
        name = (ddl.schema, ddl.table)
        if ddl.commit_ts <= self.table_version(name):
            return  # already in the table's commit
        self._steps.setdefault(name, []).append(ddl)

    def flush(self) -> int:
        """Commit each table's steps in order (one commit each), then the root checkpoint."""
        self._commit_steps()
        if self._pending_checkpoint > self.checkpoint_ts:
            self._write_root(self._pending_checkpoint)
            self.checkpoint_ts = self._pending_checkpoint
            self._guard.saw(self.checkpoint_ts, "the checkpoint published")
        return self.checkpoint_ts

    def _commit_steps(self) -> None:
        for name, steps in self._steps.items():
            for i, step in enumerate(steps):
                final = i == len(steps) - 1
                if isinstance(step, _Chunk):
                    done = max(step.last_ts, self._pending_checkpoint) if final else step.last_ts
                    self._flush_chunk(name, step, done)
                else:
                    done = max(step.commit_ts, self._pending_checkpoint) if final else step.commit_ts
                    self._flush_ddl(name, step, done)
                self._versions[name] = max(self._versions.get(name, 0), done)
            if self.options.maintenance_every:
                self._maintain(name)
        self._steps.clear()

    def _flush_chunk(self, name: Name, chunk: _Chunk, version: int) -> None:
        # Created or evolved recording what the table held before: a crash before `_write` must not leave
        # it claiming the chunk's rows (the replay would skip them).
        self._ensure(name, chunk.shape, self.table_version(name), None)
        parts = chunk.parts
        if any(has_presence(p) for p in parts):  # some images lack columns (binlog_row_image=MINIMAL)
            parts = [with_presence(p, len(chunk.shape.columns)) for p in parts]
        changes = pa.concat_tables(parts)
        if has_presence(changes) and self.options.mode != "changelog":
            keys = partial_keys(chunk.shape, changes)
            stored = self._stored(name, chunk.shape, keys) if keys.num_rows else None
            changes = complete_changes(chunk.shape, changes, stored, self.options.time_zone)
        self._write(name, chunk.shape, changes, version)
        log.info(
            "%s %s: %d changes committed at checkpoint ts %d",
            self.kind,
            self.label(name),
            changes.num_rows,
            version,
            extra={
                "sink": self.kind,
                "table": f"{name[0]}.{name[1]}",
                "rows": changes.num_rows,
                "checkpoint_ts": version,
            },
        )

    def _rename(self, name: Name, new: Name, ddl: DDLEvent) -> None:
        """RENAME TABLE: journaled in the root file first, so a crash anywhere in it is finished at open."""
        ts = ddl.commit_ts
        if self._schema(name) is None:
            return  # nothing stored under the old name (its rows were never written here)
        if self._schema(new) is not None:
            raise LakeDDLError(
                f"{self.label(name)}: DDL {clip(ddl.query)} at commit ts {ts} renames it to {self.label(new)}, "
                "which the lake already holds (a dropped table keeps its files here): remove that table first"
            )
        self._renames.append((name, new, ts, False))
        self._write_root(self.checkpoint_ts)
        self._finish_rename(name, new, ts)
        self._renames[-1] = (name, new, ts, True)
        self._write_root(self.checkpoint_ts)
        self._versions[new] = max(self._versions.get(new, 0), ts)
        self._versions[name] = max(self._versions.get(name, 0), ts)
        log.info(
            "%s %s: renamed to %s at commit ts %d",
            self.kind,
            self.label(name),
            self.label(new),
            ts,
            extra={"sink": self.kind, "table": f"{name[0]}.{name[1]}", "ddl": clip(ddl.query)},
        )

    def _finish_rename(self, old: Name, new: Name, ts: int) -> None:
        self._move(old, new)
        self._mark(new, ts)

    def _flush_ddl(self, name: Name, ddl: DDLEvent, version: int) -> None:
        what = f"{self.label(name)}: DDL {clip(ddl.query)} at commit ts {ddl.commit_ts}"
        action = ddl.ddl_type
        if action in (ActionType.TRUNCATE_TABLE, ActionType.DROP_TABLE):
            if self._schema(name) is not None:
                self._truncate(name, version, drop=action == ActionType.DROP_TABLE)
        elif ddl.table_schema is not None and (ddl.table_schema.schema, ddl.table_schema.table) == name:
            try:
                check_shape(ddl.table_schema, self.options.mode, f"commit ts {ddl.commit_ts}")
            except LakeError as exc:
                raise LakeDDLError(f"{what}: {exc.message}") from None
            self._ensure(name, ddl.table_schema, version, ddl)
        else:
            return
        log.info(
            "%s %s: applied DDL at commit ts %d",
            self.kind,
            self.label(name),
            ddl.commit_ts,
            extra={
                "sink": self.kind,
                "table": f"{name[0]}.{name[1]}",
                "ddl": clip(ddl.query),
                "checkpoint_ts": version,
            },
        )

    def _ensure(self, name: Name, shape: TableSchema, version: int, ddl: DDLEvent | None) -> None:
        """The table exists with ``shape``'s columns (created or evolved, recording ``version``)."""
        target = self.format_schema(lake_schema(shape, self.options.mode))
        current = self._schema(name)
        if current is None:
            self._create(name, target, version)
            return
        evolution = plan_evolution(current, target, self.label(name), ddl)
        if evolution.needed:
            self._evolve(name, evolution, version)

    def format_schema(self, schema: pa.Schema) -> pa.Schema:
        """The lake schema as the format stores it (a format without some Arrow types widens them)."""
        return schema

    def _read_root(self) -> int:
        path = self.root / CHECKPOINT_FILE
        try:
            doc = orjson.loads(path.read_bytes())
            self._renames = [
                (_name(r["from"]), _name(r["to"]), int(r["ts"]), bool(r["done"])) for r in doc.get("renames") or []
            ]
            return int(doc["checkpoint_ts"])
        except FileNotFoundError:
            self._renames = []
            return 0
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise SinkError(f"unreadable lake checkpoint: {exc}", where=str(path)) from None

    def _write_root(self, checkpoint_ts: int) -> None:
        """The root checkpoint file: the ts every table is complete to, and the renames it does not cover yet."""
        self._renames = [r for r in self._renames if not (r[3] and r[2] <= checkpoint_ts)]
        renames = [{"from": list(a), "to": list(b), "ts": ts, "done": done} for a, b, ts, done in self._renames]
        doc: dict[str, Any] = {"checkpoint_ts": checkpoint_ts}
        if renames:
            doc["renames"] = renames
        write_atomically(self.root / CHECKPOINT_FILE, orjson.dumps(doc))

    def table_version(self, name: Name) -> int:
        """The ts a table is complete to: its last commit's checkpoint, or the root checkpoint if higher."""
        return max(self._versions.get(name, 0), self._root)


def _name(raw: Any) -> Name:
    schema, table = raw
    return str(schema), str(table)


def _same_shape(a: TableSchema, b: TableSchema) -> bool:
    return a is b or (a.columns == b.columns and a.handle_key == b.handle_key)


__all__ = [
    "ABSENT_COLUMNS",
    "CHECKPOINT_FILE",
    "MODES",
    "ROOT_ENTRIES",
    "LakeDDLError",
    "LakeError",
    "LakeOptions",
    "LakeSink",
    "changelog_rows",
    "collapse_upsert",
    "commit_time",
    "complete_changes",
    "lake_schema",
    "partial_keys",
    "rows_of_keys",
    "scd2_rows",
]
