"""Shard DDL coordination, DM's optimistic mode: one merged table, DDL arriving shard by shard.

In DM's optimistic mode each shard's DDL is checked against the merged table as it is now and:

* a compatible change reaches the merged table at once, when the first shard runs it: ADD COLUMN
  of a column that can be NULL or has a DEFAULT (the other shards' rows still lack it), MODIFY
  COLUMN to a type that holds every value of the current one (INT -> BIGINT, VARCHAR(10) ->
  VARCHAR(20), DECIMAL(10,2) -> DECIMAL(12,2), TEXT -> MEDIUMTEXT, FLOAT -> DOUBLE), anything not
  about columns (indexes, options);
* the same change from the next shards finds it done and is skipped (idempotent), as is a
  narrower type than the merged table already has (the merged table keeps the widest);
* an incompatible change stops the changefeed with an error naming the shard, the shards seen and
  the DDL: the same column added with another type, ADD COLUMN NOT NULL without a DEFAULT, a type
  change across families, CHANGE/RENAME/DROP COLUMN (DM: these need pessimistic mode or a manual
  step).

The decision reads only the merged table's current columns, so the coordination state is the
downstream table itself: it survives any crash, and a replayed DDL decides the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ChangefeedError, clip

TableName = tuple[str, str]


class ShardDDLConflictError(ChangefeedError):
    """A shard's DDL that the merged table cannot take in optimistic mode."""


@dataclass(frozen=True)
class Verdict:
    """``apply``: run the DDL on the merged table; else skip it (``reason`` says why)."""

    apply: bool
    reason: str = ""


_INTS = ("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT")
_TEXTS = ("TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT")
_BLOBS = ("TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB")
_FLOATS = ("FLOAT", "DOUBLE")
_LADDERS = [tuple(_INTS), tuple("U" + t for t in _INTS), _TEXTS, _BLOBS, _FLOATS]
_SIZED = ("VARCHAR", "CHAR", "VARBINARY", "BINARY", "BIT")


def _type(text_or_node: Any) -> Any:
    from sqlglot import exp  # noqa: PLC0415

    if isinstance(text_or_node, exp.DataType):
        return text_or_node
    return exp.DataType.build(str(text_or_node), dialect="mysql")


def _params(dt: Any) -> list[str]:
    return [p.sql(dialect="mysql") for p in dt.expressions]


def compare_types(new: Any, current: Any) -> int | None:
    """-1 / 0 / 1: ``new`` holds fewer / the same / more values than ``current``; None: neither holds the other."""
    a, b = _type(new), _type(current)
    ka, kb = a.this.name, b.this.name
    for ladder in _LADDERS:
        if ka in ladder and kb in ladder:
            return (ladder.index(ka) > ladder.index(kb)) - (ladder.index(ka) < ladder.index(kb))
    if ka in _INTS and kb in _INTS:
        return None
    if ka != kb:
        return None
    pa_, pb = _params(a), _params(b)
    if ka in _SIZED:
        na, nb = int(pa_[0]) if pa_ else 1, int(pb[0]) if pb else 1
        return (na > nb) - (na < nb)
    if ka == "DECIMAL":
        pa2 = [int(x) for x in pa_] + [10, 0][len(pa_) :]
        pb2 = [int(x) for x in pb] + [10, 0][len(pb) :]
        ia, ib = pa2[0] - pa2[1], pb2[0] - pb2[1]
        if ia >= ib and pa2[1] >= pb2[1]:
            return 0 if (ia, pa2[1]) == (ib, pb2[1]) else 1
        if ia <= ib and pa2[1] <= pb2[1]:
            return -1
        return None
    return 0 if pa_ == pb else None


def _not_null_without_default(cd: Any) -> bool:
    from sqlglot import exp  # noqa: PLC0415

    not_null = has_default = False
    for c in cd.args.get("constraints") or ():
        kind = c.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
            not_null = True
        elif isinstance(kind, exp.DefaultColumnConstraint | exp.AutoIncrementColumnConstraint):
            has_default = True
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            not_null = True
    return not_null and not has_default


def optimistic(
    query: str, columns: Mapping[str, str], shard: TableName, shards: Sequence[TableName] = (), target: str = ""
) -> Verdict:
    """Decide a routed shard DDL against the merged table's columns (lower-case name -> MySQL column type).

    Raises `ShardDDLConflictError` for a change the merged table cannot take (see the module docstring).
    """
    from sqlglot import exp  # noqa: PLC0415

    from .ddlrewrite import parse_statement  # noqa: PLC0415 - one parse helper for routing and coordination

    tree = parse_statement(query)
    if not isinstance(tree, exp.Alter) or str(tree.args.get("kind") or "").upper() != "TABLE":
        return Verdict(True)  # CREATE TABLE (exists: skipped by the sink), indexes, options...

    def conflict(why: str) -> ShardDDLConflictError:
        seen = ", ".join(f"{s}.{t}" for s, t in shards) or f"{shard[0]}.{shard[1]}"
        return ShardDDLConflictError(
            f"shard DDL conflict (optimistic mode) on merged table {target}: {why}; "
            f"DDL of shard {shard[0]}.{shard[1]}: {clip(query)}; shards seen: {seen}. "
            f"Make the shards' DDL compatible, or apply the change downstream yourself and skip it"
        )

    verdicts: list[bool] = []
    done: list[str] = []
    for action in tree.args.get("actions") or ():
        already: str | None = None  # why the merged table needs no change, or None: apply it
        if isinstance(action, exp.ColumnDef):
            already = _add_column(action, columns, conflict)
        elif isinstance(action, exp.ModifyColumn):
            already = _modify_column(action, columns, conflict)
        elif isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN":
            raise conflict("DROP COLUMN on a merged table (other shards still write the column)")
        elif isinstance(action, exp.RenameColumn):
            raise conflict("RENAME COLUMN on a merged table")
        verdicts.append(already is None)
        if already is not None:
            done.append(already)
    if all(verdicts):
        return Verdict(True)
    if not any(verdicts):
        return Verdict(False, "; ".join(done) or "nothing to change")
    raise conflict("the statement mixes changes already made by another shard with new ones; split it")


def _add_column(
    action: Any, columns: Mapping[str, str], conflict: Callable[[str], ShardDDLConflictError]
) -> str | None:
    """ADD COLUMN: None to apply it, or why the merged table already has it; raises what it cannot take."""
    have = columns.get(action.name.lower())
    if have is None:
        if _not_null_without_default(action):
            raise conflict(f"ADD COLUMN {action.name} NOT NULL without DEFAULT (other shards' rows lack it)")
        return None
    kind = action.args.get("kind")
    order = compare_types(kind, have) if kind is not None else None
    if order is None or order > 0:
        raise conflict(f"column {action.name} is already {have} on the merged table, this adds it as {kind}")
    return f"column {action.name} already there as {have}"


def _modify_column(
    action: Any, columns: Mapping[str, str], conflict: Callable[[str], ShardDDLConflictError]
) -> str | None:
    """MODIFY / CHANGE COLUMN: None to apply a widening, or why the merged table is already as wide."""
    cd = action.this
    if action.args.get("rename_from") is not None and action.args["rename_from"].name.lower() != cd.name.lower():
        raise conflict(f"CHANGE COLUMN renames {action.args['rename_from'].name} to {cd.name}")
    have = columns.get(cd.name.lower())
    if have is None:
        raise conflict(f"column {cd.name} is not on the merged table")
    kind = cd.args.get("kind")
    order = compare_types(kind, have) if kind is not None else None
    if order is None:
        raise conflict(f"column {cd.name} changes type across families: {have} -> {kind}")
    if order > 0:
        return None
    return f"column {cd.name} is already {have}"


__all__ = ["ShardDDLConflictError", "Verdict", "compare_types", "optimistic"]
