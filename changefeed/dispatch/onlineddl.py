"""Online-DDL tools upstream (DM's ``online-ddl = true``): gh-ost and pt-online-schema-change.

Both tools change a table ``t`` without locking it: they create a shadow table, ALTER it, copy the
rows into it (and keep copying new writes), then swap it in with one RENAME. Replicated as they
are, the downstream would get the shadow table, every copied row twice and a RENAME. DM instead
(docs "Migrate from databases that use gh-ost/pt-osc"), and so this module:

* recognises the tables by name, as DM does: gh-ost's ghost table ``_t_gho`` and its trash tables
  ``_t_ghc`` (changelog) and ``_t_del`` (the old table after the swap); pt-osc's ghost table
  ``_t_new`` and its trash table ``_t_old``;
* drops every row of a ghost or trash table (the copy, the tool's bookkeeping) and every DDL on
  them (CREATE, DROP), and a RENAME of the real table to a trash table;
* remembers each ALTER run on a ghost table, rewritten to name the real table (sqlglot-based,
  `ddlrewrite.rename_tables`), and forgets them when the ghost table is created again;
* at the cut-over ``RENAME TABLE t TO _t_del, _t_gho TO t`` (pt-osc: ``t TO _t_old, _t_new TO
  t``), emits the remembered ALTER against ``t`` instead of the RENAME, at the RENAME's commit ts
  (several ALTERs become one statement with all their clauses: a sink takes one DDL per commit ts).

The remembered ALTERs are the only state (`state` / `restore`: JSON), kept by the job next to its
Spark checkpoint (`pipeline.BatchState`), so a restart between the ALTER and the RENAME still
applies it. Triggers (pt-osc) never reach here: the binlog capture drops statements that are not
table DDL.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ChangefeedError, clip
from ..model import ActionType, DDLEvent, RowChange, TableSchema, classify_ddl
from ..model.rowblock import RowBlock
from .ddlrewrite import DDLRewriteError, rename_tables, table_spans

log = logging.getLogger(__name__)

TableName = tuple[str, str]

# DM's default rules (its shadow-table-rules / trash-table-rules for gh-ost and pt): ghost tables
# hold the new shape, trash tables only the tool's bookkeeping and the swapped-out original.
_GHOST = re.compile(r"\A_(.+)_(?:gho|new)\Z", re.DOTALL)
_TRASH = re.compile(r"\A_(.+)_(?:ghc|del|old)\Z", re.DOTALL)


class OnlineDDLError(ChangefeedError):
    """An online-DDL tool's statement this module cannot follow safely."""


@dataclass(frozen=True)
class Kind:
    """What a table name is to an online-DDL tool: ``ghost``, ``trash`` or ``real``, and its real table."""

    role: str
    real: str


def classify(table: str) -> Kind:
    """The role of ``table`` (DM's name rules); ``real`` for any other table."""
    m = _GHOST.match(table)
    if m is not None:
        return Kind("ghost", m.group(1))
    m = _TRASH.match(table)
    if m is not None:
        return Kind("trash", m.group(1))
    return Kind("real", table)


def _tool_table(table: str) -> bool:
    return _GHOST.match(table) is not None or _TRASH.match(table) is not None


class OnlineDDL:
    """Follows gh-ost and pt-osc migrations in an event stream (module docstring); one per job."""

    def __init__(self) -> None:
        # real table -> the ALTERs run on its ghost table so far, rewritten to name the real table
        self._pending: dict[TableName, list[str]] = {}

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """The remembered ALTERs, JSON-able (`restore` reads it)."""
        return {"pending": [[s, t, list(q)] for (s, t), q in sorted(self._pending.items())]}

    def restore(self, state: Mapping[str, Any] | None) -> None:
        self._pending = {}
        for schema, table, queries in (state or {}).get("pending", []):
            self._pending[(str(schema), str(table))] = [str(q) for q in queries]

    @property
    def pending(self) -> dict[TableName, list[str]]:
        """A copy of the remembered ALTERs by real table (for status and tests)."""
        return {k: list(v) for k, v in self._pending.items()}

    # ------------------------------------------------------------------ events

    def apply(self, events: Iterable[Any]) -> list[Any]:
        """``events`` with the tools' tables left out and cut-over RENAMEs replaced by the ALTERs."""
        out: list[Any] = []
        for event in events:
            if isinstance(event, RowChange):
                if not _tool_table(event.table_schema.table):
                    out.append(event)
            elif isinstance(event, RowBlock):
                kept = event.only(_keeps)
                if kept is not None:
                    out.append(kept)
            elif isinstance(event, DDLEvent):
                out.extend(self._ddl(event))
            else:
                out.append(event)
        return out

    def stream(self, events: Iterable[Any]) -> Iterator[Any]:
        for event in events:
            yield from self.apply((event,))

    def _ddl(self, ddl: DDLEvent) -> list[DDLEvent]:
        if not ddl.table:
            return [ddl]  # schema statements
        try:
            spans = table_spans(ddl.query, ddl.schema)
        except DDLRewriteError:
            spans = []
        names = [s.name for s in spans] or [(ddl.schema, ddl.table)]
        if not any(_tool_table(t) for _, t in names):
            return [ddl]
        where = f"DDL at commit_ts {ddl.commit_ts}"
        if ddl.action in (ActionType.RENAME_TABLE, ActionType.RENAME_TABLES) and len(names) % 2 == 0:
            return self._rename(ddl, names, where)
        first = names[0]
        kind = classify(first[1])
        if kind.role == "ghost":
            real = (first[0], kind.real)
            if ddl.action == ActionType.CREATE_TABLE:
                # DM: a new ghost table starts a new migration; what an aborted one left is forgotten.
                self._pending.pop(real, None)
                log.info("online DDL: ghost table created ghost=%s.%s", *first)
            elif ddl.action == ActionType.DROP_TABLE:
                self._pending.pop(real, None)
            elif ddl.query.lstrip()[:5].lower() == "alter" or ddl.action in _ALTERS:
                self._remember(ddl, first, real, where)
        return []  # every other statement on a ghost or trash table (CREATE _ghc, DROP _del, ...)

    def _remember(self, ddl: DDLEvent, ghost: TableName, real: TableName, where: str) -> None:
        def to_real(schema: str, table: str) -> TableName | None:
            return real if (schema, table) == ghost else None

        try:
            query, _ = rename_tables(ddl.query, ddl.schema, to_real)
        except DDLRewriteError as exc:
            raise OnlineDDLError(
                f"cannot rewrite the ALTER of ghost table {ghost[0]}.{ghost[1]}: {exc.message}: {clip(ddl.query)}",
                where=where,
            ) from None
        self._pending.setdefault(real, []).append(query)
        log.info("online DDL: ALTER of ghost table remembered real=%s.%s query=%s", *real, clip(query))

    def _rename(self, ddl: DDLEvent, names: list[TableName], where: str) -> list[DDLEvent]:
        """A RENAME touching the tools' tables: the cut-over (ghost -> real) emits the remembered ALTERs."""
        out: list[DDLEvent] = []
        others: list[tuple[TableName, TableName]] = []
        for old, new in zip(names[::2], names[1::2], strict=True):
            a, b = classify(old[1]), classify(new[1])
            if a.role == "ghost" and b.role == "real":
                real = new
                if (old[0], a.real) != real:
                    raise OnlineDDLError(
                        f"ghost table {old[0]}.{old[1]} renamed to {real[0]}.{real[1]}, not to its real table "
                        f"{old[0]}.{a.real}: {clip(ddl.query)}",
                        where=where,
                    )
                out.extend(self._cut_over(ddl, real))
            elif (a.role == "real" and b.role == "trash") or (a.role != "real" and b.role != "real"):
                continue  # the original swapped out (t -> _t_del / _t_old), or between the tools' tables
            else:
                others.append((old, new))
        if others:
            raise OnlineDDLError(
                f"RENAME TABLE mixes an online-DDL tool's tables with others "
                f"({', '.join(f'{o[0]}.{o[1]} -> {n[0]}.{n[1]}' for o, n in others)}): {clip(ddl.query)}",
                where=where,
            )
        return out

    def _cut_over(self, ddl: DDLEvent, real: TableName) -> list[DDLEvent]:
        queries = self._pending.pop(real, [])
        if not queries:
            # DM does the same: nothing recorded (the migration began before the changefeed did).
            log.warning(
                "online DDL: cut-over of %s.%s with no ALTER recorded for it; apply the change downstream by hand "
                "query=%s",
                *real,
                clip(ddl.query),
            )
            return []
        log.info("online DDL: cut-over real=%s.%s alters=%d", *real, len(queries))
        where = f"DDL at commit_ts {ddl.commit_ts}"
        query = queries[0] if len(queries) == 1 else _combined(queries, ddl.schema, where)
        # One statement at the RENAME's commit ts: a sink skips a DDL at or below the last one it applied.
        return [
            replace(
                ddl,
                schema=real[0],
                table=real[1],
                query=query,
                ddl_type=int(classify_ddl(query)),
                table_schema=ddl.table_schema,
                pre_table_schema=None,
            )
        ]


def _combined(queries: list[str], schema: str, where: str) -> str:
    """Several ALTER TABLE statements of one table as one (their clauses joined by commas, MySQL's syntax)."""
    clauses: list[str] = []
    for query in queries:
        spans = table_spans(query, schema)
        if not query.lstrip()[:5].lower() == "alter" or not spans:
            raise OnlineDDLError(
                f"the ghost table had several statements and one is not an ALTER TABLE: {clip(query)}", where=where
            )
        clauses.append(query[spans[0].end + 1 :].strip())
    head = queries[0][: table_spans(queries[0], schema)[0].end + 1]
    return head + " " + ", ".join(clauses)


_ALTERS = frozenset(
    {
        ActionType.ADD_COLUMN,
        ActionType.DROP_COLUMN,
        ActionType.MODIFY_COLUMN,
        ActionType.ADD_INDEX,
        ActionType.DROP_INDEX,
        ActionType.MULTI_SCHEMA_CHANGE,
    }
)


def _keeps(ts: TableSchema) -> bool:
    return not _tool_table(ts.table)


__all__ = ["Kind", "OnlineDDL", "OnlineDDLError", "classify"]
