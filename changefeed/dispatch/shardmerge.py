"""A merged table's one shape, for sinks that keep one schema timeline per table (storage, lake).

A storage directory (one schema file per table version) or a Delta/Iceberg table (one schema that
evolves) cannot take rows of several shapes at once, and shards of a merged table change shape one
by one. So the router keeps, per merged target, *the merged shape*, DM's optimistic "joined table
info": the union of the shards' routed shapes, every column at the widest type any shard has
(`shardddl.compare_types`), in the order first seen. Then:

* a shard's DDL is decided by DM's optimistic rule (`shardddl.optimistic`) against the merged
  shape's columns: the first shard's compatible change makes a new merged shape and ONE DDL on the
  target; the same change from the next shards is skipped; an incompatible one stops the job;
* every shard's rows are projected onto the merged shape before any sink sees them: columns by
  name, a column the shard lacks (yet) holds NULL, a narrower type is cast to the merged one. NULL,
  not the column's DEFAULT: DM's downstream MySQL would fill the DEFAULT of an omitted column, but
  a file or lake row carries every value, a binlog does not tell defaults, and NULL is what a
  consumer can tell apart; add columns NULL-able (DM's optimistic mode refuses NOT NULL without
  DEFAULT anyway).

The merged shapes are the only state (`MergedShapes.state`): kept with the job's checkpoint, so a
restart replaying from it decides the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ChangefeedError, clip
from ..model import Column, RowChange, TableSchema
from ..model.arrow import arrow_type
from ..model.jsonl import table_schema_from_json, table_schema_to_json
from ..model.rowblock import TableRows
from ..model.types import BLOB_TYPES, INTEGER_TYPES, ColumnFlag, TypeCode, parse_type_name, type_name
from .shardddl import ShardDDLConflictError, compare_types

TableName = tuple[str, str]
#: Who hears a shard DDL decision: (target, shard, query, outcome, commit_ts), as `sink.observe`.
Report = Callable[[str, str, str, str, int], None]

_SIZED = frozenset({TypeCode.VARCHAR, TypeCode.CHAR, TypeCode.VAR_STRING, TypeCode.BIT})
_FSP = frozenset({TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.TIME})


def sql_type(column: Column) -> str:
    """The column's MySQL type text as `shardddl.compare_types` reads it (``bigint unsigned``, ``varchar(20)``)."""
    tc = column.type_code
    name = type_name(tc, column.binary)
    if tc in _SIZED and column.length is not None:
        name += f"({column.length})"
    elif tc is TypeCode.DECIMAL:
        name += f"({column.length if column.length is not None else 10},{column.decimal or 0})"
    elif tc in _FSP and column.decimal:
        name += f"({column.decimal})"
    elif tc in (TypeCode.ENUM, TypeCode.SET):
        name += "(" + ",".join("'" + e.replace("'", "''") + "'" for e in column.elements) + ")"
    if column.unsigned and tc in INTEGER_TYPES | {TypeCode.FLOAT, TypeCode.DOUBLE, TypeCode.DECIMAL}:
        name += " unsigned"
    return name


def columns_of(ts: TableSchema) -> dict[str, str]:
    """Lower-case column name -> MySQL type text: what `shardddl.optimistic` decides against."""
    return {c.name.lower(): sql_type(c) for c in ts.columns}


def _order(new: Column, current: Column) -> int | None:
    if new.type_code is current.type_code and new.binary == current.binary and sql_type(new) == sql_type(current):
        return 0
    try:
        return compare_types(sql_type(new), sql_type(current))
    except Exception:  # sqlglot cannot read one of them: no order between them
        return None


def union(
    base: TableSchema, shape: TableSchema, shard: TableName, target: str, version: int
) -> tuple[TableSchema, bool]:
    """``base`` joined with a shard's routed ``shape`` (DM's joined table info) and whether it changed.

    New columns are appended (NULL-able: the other shards' rows lack them), a wider type replaces a
    narrower one; two types neither of which holds the other raise `ShardDDLConflictError`.
    """
    columns = list(base.columns)
    at = {c.name.lower(): i for i, c in enumerate(columns)}
    changed = False
    for col in shape.columns:
        i = at.get(col.name.lower())
        if i is None:
            at[col.name.lower()] = len(columns)
            columns.append(replace(col, nullable=True, key_flags=ColumnFlag(0), column_id=None))
            changed = True
            continue
        order = _order(col, columns[i])
        if order is None:
            raise ShardDDLConflictError(
                f"shard DDL conflict (optimistic mode) on merged table {target}: column {col.name} is "
                f"{sql_type(columns[i])} on the merged table and {sql_type(col)} on shard {shard[0]}.{shard[1]}, "
                "neither holds the other; make the shards' columns compatible"
            )
        if order > 0:
            columns[i] = replace(col, name=columns[i].name, nullable=columns[i].nullable or col.nullable)
            changed = True
    if not changed:
        return base, False
    return TableSchema(base.schema, base.table, tuple(columns), base.indexes, base.table_id, version), True


def column_from_sql(action: Any) -> Column:
    """A model column from an ALTER's column definition (sqlglot ``ColumnDef``): for a DDL whose
    shape after it the source did not give (a binlog file with no row of the table after it)."""
    from sqlglot import exp  # noqa: PLC0415

    kind = action.args.get("kind")
    text = kind.sql(dialect="mysql").lower() if kind is not None else "text"
    code, binary, unsigned = parse_type_name(text)
    params = [p.sql(dialect="mysql") for p in kind.expressions] if kind is not None else []
    attrs: dict[str, Any] = {}
    if code in (TypeCode.ENUM, TypeCode.SET):
        attrs["elements"] = tuple(p.strip("'") for p in params)
    elif params and params[0].isdigit():
        first = int(params[0])
        if code in _FSP:
            attrs["decimal"] = first
        else:
            attrs["length"] = first
            if len(params) > 1 and params[1].isdigit():
                attrs["decimal"] = int(params[1])
    if code in _SIZED | BLOB_TYPES | {TypeCode.ENUM, TypeCode.SET} and not binary:
        attrs["charset"], attrs["collation"] = "utf8mb4", "utf8mb4_bin"
    nullable = True
    for c in action.args.get("constraints") or ():
        k = c.args.get("kind")
        if isinstance(k, exp.NotNullColumnConstraint) and not k.args.get("allow_null"):
            nullable = False
        elif isinstance(k, exp.DefaultColumnConstraint) and isinstance(k.this, exp.Literal):
            attrs["default"] = str(k.this.this)
    return Column(action.name, code, unsigned=unsigned, nullable=nullable, **attrs)


def shape_after(base: TableSchema, query: str) -> TableSchema:
    """``base`` with the ADD / MODIFY COLUMN of an ALTER TABLE (what DM's optimistic mode applies)."""
    from sqlglot import exp  # noqa: PLC0415

    from .ddlrewrite import parse_statement  # noqa: PLC0415

    tree = parse_statement(query)
    columns = list(base.columns)
    for action in (tree.args.get("actions") or ()) if isinstance(tree, exp.Alter) else ():
        cd = action.this if isinstance(action, exp.ModifyColumn) else action
        if not isinstance(cd, exp.ColumnDef):
            continue
        col = column_from_sql(cd)
        at = next((i for i, c in enumerate(columns) if c.name.lower() == col.name.lower()), None)
        if at is None:
            columns.append(replace(col, nullable=True))
        else:
            columns[at] = replace(col, name=columns[at].name, nullable=columns[at].nullable or col.nullable)
    return replace(base, columns=tuple(columns))


# ---------------------------------------------------------------------------------------------- projection


@dataclass(frozen=True)
class Projection:
    """Where each merged column comes from in a shard's routed shape (None: the shard lacks it)."""

    source: TableSchema
    merged: TableSchema
    picks: tuple[int | None, ...]
    #: The shard already has the merged shape (same columns, same Arrow types, same order): the usual
    #: case once every shard ran the DDL, where a row or a block only changes its schema.
    identity: bool = False

    @classmethod
    def of(cls, source: TableSchema, merged: TableSchema) -> Projection:
        at = {c.name.lower(): i for i, c in enumerate(source.columns)}
        names = {c.name.lower() for c in merged.columns}
        missing = [c.name for c in source.columns if c.name.lower() not in names]
        if missing:
            raise ValueError(f"{merged.qualified_name} has no column(s) {missing} of {source.qualified_name}")
        picks = tuple(at.get(c.name.lower()) for c in merged.columns)
        identity = picks == tuple(range(len(source.columns))) and all(
            arrow_type(a) == arrow_type(b) for a, b in zip(source.columns, merged.columns, strict=True)
        )
        return cls(source, merged, picks, identity)

    def image(self, image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        if image is None:
            return None
        return tuple(None if i is None else image[i] for i in self.picks)

    def row(self, row: RowChange) -> None:
        """``row`` onto the merged shape, in place (a batch's rows are routed once, where they are made)."""
        if not self.identity:
            row.new = self.image(row.new)
            row.old = self.image(row.old)
        row.table_schema = self.merged

    def _array(self, rows: TableRows, j: int, before: bool) -> pa.Array:
        col, i = self.merged.columns[j], self.picks[j]
        want = arrow_type(col)
        if i is None:
            return pa.nulls(rows.num_rows, want)
        arr = rows.before(i) if before else rows.column(i)
        if arr.type != want and arr.type == arrow_type(self.source.columns[i]):
            arr = pc.cast(arr, want)  # a narrower type of the shard: widening keeps every value
        return arr

    def _bits(self, present: int) -> int:
        if present == -1:
            return -1
        out = 0
        for j, i in enumerate(self.picks):
            if i is None or present >> i & 1:  # a column the shard lacks holds a known NULL
                out |= 1 << j
        return out

    def rows(self, rows: TableRows) -> TableRows:
        """``rows`` onto the merged shape (changefeed/model/rowblock.py's layout): columns picked and
        reordered, NULL for the shard's missing ones, casts for widened types, present-column runs remapped."""
        if self.identity:
            return rows.with_schema(self.merged)
        w = len(self.merged.columns)
        main = [self._array(rows, j, False) for j in range(w)]
        before = [self._array(rows, j, True) for j in range(w)]
        batch = rows.batch
        fields = list(batch.schema)
        ws = rows.width
        names = [c.name for c in self.merged.columns]
        out = pa.RecordBatch.from_arrays(
            [*main, batch.column(ws), batch.column(ws + 1), *before],
            schema=pa.schema(
                [
                    *(pa.field(n, a.type) for n, a in zip(names, main, strict=True)),
                    fields[ws],
                    fields[ws + 1],
                    *(pa.field("_before_" + n, a.type) for n, a in zip(names, before, strict=True)),
                ]
            ),
        )

        def runs(r: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]] | None:
            return None if r is None else [(self._bits(p), k) for p, k in r]

        return TableRows(self.merged, out, runs(rows.main_runs), runs(rows.before_runs), _ops=rows.ops)


# ---------------------------------------------------------------------------------------------- state


class MergedShapes:
    """Each merged target's shape (see the module docstring); the router's state for one-timeline sinks."""

    def __init__(self) -> None:
        self.shapes: dict[TableName, TableSchema] = {}
        self._docs: list[Any] | None = None  # `state()` of the shapes as they are (None: to be made)
        self._projections: dict[tuple[int, int], tuple[TableSchema, TableSchema, Projection]] = {}
        self._fits: dict[int, tuple[TableSchema, TableSchema]] = {}  # id(routed) -> (routed, its merged shape)

    def get(self, target: TableName) -> TableSchema | None:
        return self.shapes.get(target)

    def put(self, target: TableName, shape: TableSchema) -> None:
        self.shapes[target] = shape
        self._docs = None

    def fit(self, routed: TableSchema) -> TableSchema:
        """The merged shape a shard's routed shape goes into, grown first when the shard has columns or
        types it lacks (a shard first seen already changed: DM's joined table info takes it)."""
        target = (routed.schema, routed.table)
        base = self.shapes.get(target)
        hit = self._fits.get(id(routed))
        if hit is not None and hit[0] is routed and hit[1] is base:
            return base  # per row: the join of this shape is done until the merged shape changes
        if base is None:
            self.put(target, base := replace(routed, origin=None))
        else:
            shard = routed.origin or target
            version = max(base.version + 1, routed.version)
            grown, changed = union(base, routed, shard, f"{target[0]}.{target[1]}", version)
            if changed:
                self.put(target, base := grown)
        if len(self._fits) > 4096:
            self._fits.clear()
        self._fits[id(routed)] = (routed, base)
        return base

    def projection(self, routed: TableSchema, merged: TableSchema) -> Projection:
        key = (id(routed), id(merged))
        hit = self._projections.get(key)
        if hit is not None and hit[0] is routed and hit[1] is merged:
            return hit[2]
        if len(self._projections) > 4096:
            self._projections.clear()
        made = Projection.of(routed, merged)
        self._projections[key] = (routed, merged, made)
        return made

    def state(self) -> list[Any]:
        """JSON: the merged shapes (the model's table schema JSON), sorted by target (made once per change:
        each batch restores and saves it)."""
        if self._docs is None:
            self._docs = [table_schema_to_json(self.shapes[k]) for k in sorted(self.shapes)]
        return self._docs

    def restore(self, state: Sequence[Mapping[str, Any]] | None) -> None:
        """Back to a saved state (each batch starts from the one its predecessor left)."""
        docs = list(state or ())
        if docs == self.state():
            return  # unchanged: keep the shape objects (and the projections cached for them)
        try:
            shapes = [table_schema_from_json(dict(d)) for d in docs]
        except (KeyError, TypeError, ValueError) as exc:
            raise ChangefeedError(
                f"unreadable merged table shape in the pipeline state ({clip(str(exc))}), kept with the checkpoint"
            ) from None
        self.shapes = {(s.schema, s.table): s for s in shapes}
        self._docs = None
        self._projections.clear()
        self._fits.clear()


__all__ = ["MergedShapes", "Projection", "Report", "column_from_sql", "columns_of", "shape_after", "sql_type", "union"]
