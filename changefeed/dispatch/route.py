"""Table routing: DM's ``[[routes]]`` and TiCDC's dispatcher ``target-schema``/``target-table``.

A `Router` maps each upstream table to its downstream name and rewrites events to it once, before
any sink sees them, so MySQL tables, Kafka topics and messages, storage paths and lake tables all
carry the routed names. Rules, in DM's and TiCDC's words:

* DM (``[[routes]]``): ``schema-pattern`` + ``table-pattern`` -> ``target-schema`` /
  ``target-table`` (a table rule; an empty ``target-table`` keeps the table's name); a rule with
  only ``schema-pattern`` is a schema rule: it routes schema statements (CREATE/DROP DATABASE) and
  tables no table rule matches. Patterns are wildcards (``*`` once and only at the end, ``?``,
  ``[...]``) or, starting with ``~``, regular expressions; case-insensitive. Table rules come before
  schema rules, and a table matching two table rules is an error, as in DM.
  ``extract-table`` / ``extract-schema`` / ``extract-source`` (``table-regexp`` / ``schema-regexp``
  / ``source-regexp`` + ``target-column``) add a column holding the regexp's groups of the shard's
  table, schema or source name: added to the target table and to its keys, so equal keys of
  different shards do not collide.
* TiCDC (``[[sink.dispatchers]]`` with ``target-schema`` and/or ``target-table``): ``matcher`` in
  table-filter syntax; targets may hold ``{schema}`` and ``{table}``; the first matching rule wins.

A merged table's shard DDL goes to the MySQL sink as a `ShardDDL` (coordinated there, DM's two modes)
and to Kafka once per shard; for a storage directory or a lake table (one schema timeline per table,
``shard_ddl=False``) the router coordinates it itself with DM's optimistic rule against the merged
table's one shape, onto which it projects every shard's rows (`shardmerge`; its state is the job's).

Costs are per table, not per row: names and shapes are resolved once per table shape (cached), a
`RowBlock`'s tables get the routed shape without copying (or, with shard columns, two constant
columns each), and DDL text is rewritten by sqlglot (`ddlrewrite`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ChangefeedError, ConfigError, clip
from ..model import ActionType, Column, DDLEvent, Index, RowChange, TableSchema
from ..model.rowblock import RowBlock, TableRows
from ..model.tablefilter import TableFilter
from ..model.types import TypeCode
from .ddlrewrite import DDLRewriteError, add_shard_columns, rename_schema, rename_tables
from .shardddl import ShardDDLConflictError, optimistic
from .shardmerge import MergedShapes, Report, columns_of, shape_after, union

log = logging.getLogger(__name__)

TableName = tuple[str, str]


class RouteError(ChangefeedError):
    """An event that routing cannot map (a conflict of rules, a DDL it cannot rewrite safely)."""


# ---------------------------------------------------------------------------------------------- rules


def dm_pattern(text: str, case_sensitive: bool = False) -> re.Pattern[str]:
    """A DM name pattern: ``~regexp`` (searched, as Go's MatchString does) or a wildcard (whole name).

    DM's wildcards: ``*`` (at most one, at the end), ``?``, ``[...]`` / ``[!...]``.
    """
    flags = 0 if case_sensitive else re.IGNORECASE
    if text.startswith("~"):
        try:
            return re.compile(text[1:], flags)
        except re.error as exc:
            raise ConfigError(f"bad regular expression {text!r}: {exc}") from None
    if text.count("*") > 1 or ("*" in text and not text.endswith("*")):
        raise ConfigError(f"pattern {text!r}: DM allows one * and only at the end (or a ~regular expression)")
    out, i = [r"\A"], 0
    while i < len(text):
        ch = text[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and "]" in text[i + 1 :]:
            end = text.index("]", i + 1)
            body = text[i + 1 : end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace(r"\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    out.append(r"\Z")
    return re.compile("".join(out), flags | re.DOTALL)


@dataclass(frozen=True)
class Extract:
    """DM's ``extract-*``: the groups of ``regexp`` in a shard's table, schema or source name go into ``column``."""

    column: str
    regexp: str

    def __post_init__(self) -> None:
        if self.regexp.startswith("~"):
            raise ConfigError(f"extract regexp {self.regexp!r} must not start with ~ (DM: a plain regular expression)")
        try:
            object.__setattr__(self, "_re", re.compile(self.regexp))
        except re.error as exc:
            raise ConfigError(f"bad extract regexp {self.regexp!r}: {exc}") from None
        if not self.column:
            raise ConfigError("an extract rule needs a target-column")

    def value(self, name: str) -> str:
        """The matched groups joined (the whole match without groups); "" when it does not match, as DM."""
        m = self._re.search(name)  # type: ignore[attr-defined]
        if m is None:
            return ""
        return "".join(g or "" for g in m.groups()) if m.groups() else m.group(0)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_WILDCARDS = frozenset("*?[~")


@dataclass(frozen=True)
class RouteRule:
    """One routing rule; ``matcher`` set: TiCDC's dispatcher form, else DM's ``[[routes]]`` form."""

    schema_pattern: str = ""
    table_pattern: str = ""
    target_schema: str = ""
    target_table: str = ""
    extract_table: Extract | None = None
    extract_schema: Extract | None = None
    extract_source: Extract | None = None
    matcher: tuple[str, ...] = ()
    case_sensitive: bool = False
    _schema_re: Any = field(default=None, init=False, repr=False, compare=False)
    _table_re: Any = field(default=None, init=False, repr=False, compare=False)
    _filter: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.matcher:
            object.__setattr__(self, "_filter", TableFilter(list(self.matcher), self.case_sensitive))
            for text in (self.target_schema, self.target_table):
                bad = [p for p in _PLACEHOLDER.findall(text) if p not in ("schema", "table")]
                if bad:
                    raise ConfigError(
                        f"target {text!r}: unknown placeholder {{{bad[0]}}} (only {{schema}} and {{table}})"
                    )
            if not (self.target_schema or self.target_table):
                raise ConfigError("a routing dispatcher needs target-schema or target-table")
            return
        if not self.schema_pattern:
            raise ConfigError("a route needs schema-pattern")
        if not self.target_schema:
            raise ConfigError(f"route {self.schema_pattern!r}: target-schema is required (DM)")
        if not self.table_pattern and (self.target_table or self.extract_table):
            raise ConfigError(f"route {self.schema_pattern!r}: target-table and extract-table need a table-pattern")
        object.__setattr__(self, "_schema_re", dm_pattern(self.schema_pattern, self.case_sensitive))
        if self.table_pattern:
            object.__setattr__(self, "_table_re", dm_pattern(self.table_pattern, self.case_sensitive))
        columns = [e.column.lower() for e in self.extracts]
        if len(set(columns)) != len(columns):
            raise ConfigError(f"route {self.schema_pattern!r}.{self.table_pattern!r}: extract columns repeat")

    @classmethod
    def from_mapping(cls, obj: Mapping[str, Any], where: str = "[[routes]]") -> RouteRule:
        """A DM route from its TOML table (DM's keys)."""
        keys = {"schema-pattern", "table-pattern", "target-schema", "target-table", "extract-table"}
        keys |= {"extract-schema", "extract-source"}
        unknown = set(obj) - keys
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(sorted(unknown))} in {where} (expected: {', '.join(sorted(keys))})"
            )
        texts: dict[str, Any] = {}
        for key in ("schema-pattern", "table-pattern", "target-schema", "target-table"):
            value = obj.get(key, "")
            if not isinstance(value, str):
                raise ConfigError(f"{where} {key} must be a string, got {clip(value)}")
            texts[key.replace("-", "_")] = value
        extracts: dict[str, Any] = {}
        for key, regexp_key in (
            ("extract-table", "table-regexp"),
            ("extract-schema", "schema-regexp"),
            ("extract-source", "source-regexp"),
        ):
            if key not in obj:
                continue
            sub = obj[key]
            if not isinstance(sub, Mapping) or set(sub) - {regexp_key, "target-column"}:
                raise ConfigError(f"{where} {key} must be a table with {regexp_key} and target-column, got {clip(sub)}")
            regexp, column = sub.get(regexp_key, ""), sub.get("target-column", "")
            if not isinstance(regexp, str) or not isinstance(column, str) or not regexp:
                raise ConfigError(f"{where} {key}: {regexp_key} and target-column must be strings")
            extracts[key.replace("-", "_")] = Extract(column, regexp)
        return cls(**texts, **extracts)

    @classmethod
    def from_dispatcher(cls, matcher: Sequence[str], target_schema: str, target_table: str) -> RouteRule:
        """TiCDC's ``[[sink.dispatchers]]`` with ``target-schema`` / ``target-table``."""
        return cls(matcher=tuple(matcher), target_schema=target_schema, target_table=target_table)

    @property
    def extracts(self) -> tuple[Extract, ...]:
        return tuple(e for e in (self.extract_table, self.extract_schema, self.extract_source) if e is not None)

    @property
    def is_table_rule(self) -> bool:
        return bool(self.matcher) or bool(self.table_pattern)

    @property
    def merges(self) -> bool:
        """Several upstream tables may land in one target (a shard merge): its DDL is coordinated."""
        if self.extracts:
            return True
        if self.matcher:
            return (
                bool(self.target_table)
                and "{table}" not in self.target_table
                and any(_WILDCARDS & set(m) for m in self.matcher)
            )
        return bool(self.target_table) and bool(_WILDCARDS & set(self.schema_pattern + self.table_pattern))

    def matches(self, schema: str, table: str) -> bool:
        if self._filter is not None:
            return bool(self._filter.match(schema, table))
        if self._schema_re.search(schema) is None:
            return False
        return self._table_re is None or self._table_re.search(table) is not None

    def matches_schema(self, schema: str) -> bool:
        if self._filter is not None:
            return bool(self._filter.match_schema(schema))
        return self._schema_re.search(schema) is not None

    def target(self, schema: str, table: str) -> TableName:
        if self.matcher:
            return (
                _expand(self.target_schema, schema, table) or schema,
                _expand(self.target_table, schema, table) or table,
            )
        return (self.target_schema or schema, self.target_table or table)


def _expand(text: str, schema: str, table: str) -> str:
    return _PLACEHOLDER.sub(lambda m: schema if m.group(1) == "schema" else table, text)


# ---------------------------------------------------------------------------------------------- routed shapes


@dataclass(frozen=True)
class Target:
    """Where one upstream table goes: its name, the shard columns' values, whether it is a merge."""

    name: TableName
    extras: tuple[tuple[str, str], ...] = ()  # (column, value), DM's extract-* columns
    merge: bool = False


def _shard_column(name: str) -> Column:
    return Column(name, TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin", length=64, nullable=False)


def routed_schema(ts: TableSchema, target: Target) -> TableSchema:
    """``ts`` under the target's name, with the shard columns appended and added to every unique key."""
    origin = (ts.schema, ts.table) if target.merge else None
    if not target.extras:
        return replace(ts, schema=target.name[0], table=target.name[1], origin=origin)
    names = [c for c, _ in target.extras]
    taken = {c.name.lower() for c in ts.columns} & {n.lower() for n in names}
    if taken:
        raise RouteError(f"{ts.qualified_name} already has column(s) {sorted(taken)} that routing adds for shards")
    columns = (*ts.columns, *(_shard_column(n) for n in names))
    indexes = tuple(
        Index(i.name, (*i.columns, *names), primary=i.primary, unique=i.unique) if i.unique else i for i in ts.indexes
    )
    return TableSchema(
        target.name[0], target.name[1], columns, indexes, ts.table_id, ts.version, ts.partitioned, origin
    )


def _extended(rows: TableRows, schema: TableSchema, values: Sequence[str]) -> TableRows:
    """``rows`` with constant shard columns appended to both images (NULL in the old image of non-updates)."""
    w, n, k = rows.width, rows.num_rows, len(values)
    batch = rows.batch
    arrays = [batch.column(i) for i in range(batch.num_columns)]
    fields = list(batch.schema)
    updates = pa.array(rows.ops == 1)
    new_main = [pa.repeat(pa.scalar(v, pa.string()), n) for v in values]
    new_before = [pc.if_else(updates, pa.scalar(v, pa.string()), pa.scalar(None, pa.string())) for v in values]
    names = [f"_route_{i}" for i in range(k)]
    out = pa.RecordBatch.from_arrays(
        [*arrays[:w], *new_main, *arrays[w : 2 * w + 2], *new_before],
        schema=pa.schema(
            [
                *fields[:w],
                *(pa.field(m, pa.string(), nullable=False) for m in names),
                *fields[w : 2 * w + 2],
                *(pa.field("_before" + m, pa.string()) for m in names),
            ]
        ),
    )
    extra_bits = ((1 << k) - 1) << w

    def runs(r: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]] | None:
        return None if r is None else [(p if p == -1 else p | extra_bits, m) for p, m in r]

    return TableRows(schema, out, runs(rows.main_runs), runs(rows.before_runs), _ops=rows.ops)


# ---------------------------------------------------------------------------------------------- DDL


@dataclass(slots=True)
class ShardDDL(DDLEvent):
    """A DDL of one shard of a merged table, routed to the merged table (coordinated by the sink)."""

    shard: TableName = ("", "")
    shards: tuple[TableName, ...] = ()  # the shards of the target seen so far (for messages)


_DROPS = frozenset({ActionType.DROP_TABLE, ActionType.TRUNCATE_TABLE})
_RENAMES = frozenset({ActionType.RENAME_TABLE, ActionType.RENAME_TABLES})


class Router:
    """Routes events; one per job (its caches are per table shape), applied once to every event."""

    def __init__(self, rules: Sequence[RouteRule], source: str = "", shard_ddl: bool = True) -> None:
        self.rules = tuple(rules)
        self.source = source
        #: Whether the sink coordinates a merged table's shard DDL (`ShardDDL`): the MySQL sink does (DM's
        #: optimistic mode), Kafka carries each shard's DDL for its consumer to. A storage directory or a
        #: lake table has one schema timeline per table while shards change shape one by one: False
        #: there, and the router coordinates it itself (`shardmerge`): one merged shape per target, DM's
        #: optimistic rule for each shard's DDL, every shard's rows projected onto the merged shape.
        self.shard_ddl = shard_ddl
        self.merged: MergedShapes | None = None if shard_ddl else MergedShapes()
        #: Who hears the router's shard DDL decisions (the status and metrics hook the MySQL sink reports to).
        self.report: Report | None = None
        #: DM's pessimistic mode (the MySQL sink's shard lock): a shard's DROP TABLE reaches the sink as a
        #: `ShardDDL`, never run downstream but taking the shard out of its merged table's shard list.
        self.shard_drops = False
        self._tables = [r for r in self.rules if r.is_table_rule and not r.matcher]
        self._schemas = [r for r in self.rules if not r.is_table_rule]
        self._ticdc = [r for r in self.rules if r.matcher]
        self._names: dict[TableName, Target | None] = {}
        self._shapes: dict[int, tuple[TableSchema, TableSchema | None, Target | None]] = {}
        self._outputs: set[int] = set()  # routed shapes: a routed event is never routed again
        self._shards: dict[TableName, set[TableName]] = {}

    @classmethod
    def of(cls, rules: Sequence[RouteRule], source: str = "", shard_ddl: bool = True) -> Router | None:
        """A router, or None when there are no rules (events pass untouched, at no cost)."""
        return cls(rules, source, shard_ddl) if rules else None

    def __getstate__(self) -> dict[str, Any]:  # shipped to Spark executors without its caches
        return {"rules": self.rules, "source": self.source, "shard_ddl": self.shard_ddl, "drops": self.shard_drops}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["rules"], state["source"], state.get("shard_ddl", True))  # type: ignore[misc]
        self.shard_drops = state.get("drops", False)

    @property
    def stateful(self) -> bool:
        """Keeps merged shapes across events (a one-timeline sink and a merging rule): run on the driver,
        its state saved with the checkpoint (`pipeline.EventPipeline`), as online DDL's."""
        return self.merged is not None and any(r.merges for r in self.rules)

    def state(self) -> list[Any]:
        return self.merged.state() if self.merged is not None else []

    def restore(self, state: list[Any] | None) -> None:
        if self.merged is not None:
            self.merged.restore(state)

    # ------------------------------------------------------------------ names

    def target(self, schema: str, table: str) -> Target | None:
        """Where ``schema.table`` goes (None: nowhere else, it keeps its name)."""
        key = (schema, table)
        if key in self._names:
            return self._names[key]
        found = self._resolve(schema, table)
        if len(self._names) > 65536:
            self._names.clear()
        self._names[key] = found
        return found

    def _resolve(self, schema: str, table: str) -> Target | None:
        rule: RouteRule | None = None
        hits = [r for r in self._tables if r.matches(schema, table)]
        if len(hits) > 1:
            raise RouteError(
                f"table {schema}.{table} matches {len(hits)} table routes "
                f"({', '.join(f'{r.schema_pattern}.{r.table_pattern}' for r in hits)}); DM allows one"
            )
        rule = hits[0] if hits else next((r for r in self._schemas if r.matches(schema, table)), None)
        if rule is None:
            rule = next((r for r in self._ticdc if r.matches(schema, table)), None)
        if rule is None:
            return None
        name = rule.target(schema, table)
        extras = tuple(
            (e.column, e.value(text))
            for e, text in (
                (rule.extract_table, table),
                (rule.extract_schema, schema),
                (rule.extract_source, self.source),
            )
            if e is not None
        )
        if name == (schema, table) and not extras:
            return None
        return Target(name, extras, rule.merges)

    def target_schema(self, schema: str) -> str:
        """Where a schema statement (CREATE/DROP/ALTER DATABASE) of ``schema`` goes.

        DM: its schema rule; TiCDC: the one target schema of the rules that can match it (several
        different ones are an error, as TiCDC refuses such a database DDL).
        """
        rule = next((r for r in self._schemas if r.matches_schema(schema)), None)
        if rule is not None:
            return rule.target_schema
        targets = {_expand(r.target_schema, schema, "") or schema for r in self._ticdc if r.matches_schema(schema)}
        if len(targets) > 1:
            raise RouteError(
                f"schema {schema!r} is routed to several schemas {sorted(targets)}: its DDL has no one target"
            )
        return targets.pop() if targets else schema

    def _name(self, schema: str, table: str) -> TableName | None:
        found = self.target(schema, table)
        return None if found is None else found.name

    # ------------------------------------------------------------------ shapes

    def shape(self, ts: TableSchema) -> tuple[TableSchema | None, Target | None]:
        """The routed shape of ``ts`` and its target; (None, None) when the table is not routed."""
        hit = self._shapes.get(id(ts))
        if hit is not None and hit[0] is ts:
            return hit[1], hit[2]
        if id(ts) in self._outputs:
            return None, None
        target = self.target(ts.schema, ts.table)
        routed = None if target is None else routed_schema(ts, target)
        if target is not None and target.merge:
            self._shards.setdefault(target.name, set()).add((ts.schema, ts.table))
        if len(self._shapes) > 16384:
            self._shapes.clear()
            self._outputs.clear()
        self._shapes[id(ts)] = (ts, routed, target)
        if routed is not None:
            self._outputs.add(id(routed))
        return routed, target

    # ------------------------------------------------------------------ events

    def route(self, events: Iterable[Any]) -> list[Any]:
        """``events`` routed, in order (a shard's DROP/TRUNCATE of a merged table is left out)."""
        out: list[Any] = []
        roots: dict[int, tuple[TableRows, TableRows]] = {}
        for event in events:
            if isinstance(event, RowChange):
                self._route_row(event)
                out.append(event)
            elif isinstance(event, RowBlock):
                out.append(self._route_block(event, roots))
            elif isinstance(event, DDLEvent):
                routed = self.route_ddl(event)
                if routed is not None:
                    out.append(routed)
            else:
                out.append(event)
        return out

    def stream(self, events: Iterable[Any]) -> Iterator[Any]:
        """``events`` routed one at a time (a live capture's endless stream)."""
        for event in events:
            yield from self.route((event,))

    def _route_row(self, row: RowChange) -> None:
        routed, target = self.shape(row.table_schema)
        if routed is None or target is None:
            return
        row.table_schema = routed  # in place: a batch's rows are routed once, where they are made
        if target.extras:
            values = tuple(v for _, v in target.extras)
            if row.new is not None:
                row.new = (*row.new, *values)
            if row.old is not None:
                row.old = (*row.old, *values)
        merged = self._merged_shape(routed, target)
        if merged is not None and self.merged is not None:
            self.merged.projection(routed, merged).row(row)

    def _merged_shape(self, routed: TableSchema, target: Target) -> TableSchema | None:
        """The merged shape rows of ``routed`` go into (a one-timeline sink's merged table), else None."""
        if self.merged is None or not target.merge:
            return None
        merged = self.merged.fit(routed)
        self._outputs.add(id(merged))  # a routed event is never routed again
        return merged

    def _route_block(self, block: RowBlock, roots: dict[int, tuple[TableRows, TableRows]]) -> RowBlock:
        tables: list[TableRows] = []
        changed = False
        for rows in block.tables:
            routed, target = self.shape(rows.table_schema)
            if routed is None or target is None:
                tables.append(rows)
                continue
            changed = True
            merged = self._merged_shape(routed, target)
            if not target.extras and merged is None:
                tables.append(rows.with_schema(routed))
                continue
            root, at = rows.origin  # extend each origin once: its slices (one per Kafka message) share it
            hit = roots.get(id(root))
            if hit is None or hit[0] is not root or hit[1].table_schema is not (merged or routed):
                out = _extended(root, routed, [v for _, v in target.extras]) if target.extras else root
                if merged is not None and self.merged is not None:
                    out = self.merged.projection(routed, merged).rows(out)  # onto the merged table's one shape
                hit = roots[id(root)] = (root, out)
            whole = at == 0 and rows.num_rows == root.num_rows
            tables.append(hit[1] if whole else hit[1].slice(at, rows.num_rows))
        return RowBlock(tables, block.segments) if changed else block

    def route_ddl(self, ddl: DDLEvent) -> DDLEvent | None:
        """The DDL under routed names (its text rewritten), or None when it must not reach a merged table."""
        if isinstance(ddl, ShardDDL):
            return ddl
        if not ddl.table:
            target = self.target_schema(ddl.schema)
            if target == ddl.schema:
                return ddl
            return replace(ddl, schema=target, query=rename_schema(ddl.query, target))
        where = f"DDL at commit_ts {ddl.commit_ts}"
        try:
            query, spans = rename_tables(ddl.query, ddl.schema, self._name)
        except DDLRewriteError as exc:
            if self.target(ddl.schema, ddl.table) is None:
                return ddl  # a statement we cannot read, about a table no rule routes: as it is
            raise RouteError(f"cannot route {clip(ddl.query)}: {exc.message}", where=where) from None
        targets = [self.target(*s.name) for s in spans]
        main = self.target(ddl.schema, ddl.table)
        if main is None and not any(targets):
            return ddl
        action = ddl.action
        merged = [s.name for s, t in zip(spans, targets, strict=True) if t is not None and t.merge]
        if merged and action in _DROPS:
            return self._shard_drop(ddl, query, merged, len(spans), main, where)
        if merged and action in _RENAMES:
            raise RouteError(
                f"{clip(ddl.query)} renames the shard "
                f"{'.'.join(merged[0])} of a merged table: DM does not support RENAME TABLE in shard merge",
                where=where,
            )
        if main is not None and main.extras and action == ActionType.CREATE_TABLE:
            target_name = main.name
            try:
                query = add_shard_columns(query, target_name[0], [c for c, _ in main.extras])
            except DDLRewriteError as exc:
                raise RouteError(f"cannot route {clip(ddl.query)}: {exc.message}", where=where) from None
        schema, table = main.name if main is not None else (ddl.schema, ddl.table)
        shape = self.shape(ddl.table_schema)[0] if ddl.table_schema is not None else None
        pre = self.shape(ddl.pre_table_schema)[0] if ddl.pre_table_schema is not None else None
        fields: dict[str, Any] = {
            "schema": schema,
            "table": table,
            "query": query,
            "ddl_type": ddl.ddl_type,
            "commit_ts": ddl.commit_ts,
            "table_schema": shape or ddl.table_schema,
            "pre_table_schema": pre or ddl.pre_table_schema,
            "start_ts": ddl.start_ts,
            "position": ddl.position,
        }
        if main is not None and main.merge:
            if self.merged is not None:
                return self._merged_ddl(ddl, fields, main.name)
            shards = self._shards.setdefault(main.name, set())
            shards.add((ddl.schema, ddl.table))
            return ShardDDL(**fields, shard=(ddl.schema, ddl.table), shards=tuple(sorted(shards)))
        return DDLEvent(**fields)

    def _merged_ddl(self, ddl: DDLEvent, fields: dict[str, Any], target: TableName) -> DDLEvent | None:
        """A shard's DDL for a one-timeline sink (`shardmerge`), DM's optimistic mode decided here against
        the merged shape: ONE DDL on the target for the first shard's compatible change, None for a change
        the merged shape has already, `ShardDDLConflictError` for one it cannot take."""
        assert self.merged is not None
        shard = (ddl.schema, ddl.table)
        label = f"{target[0]}.{target[1]}"
        shards = self._shards.setdefault(target, set())
        shards.add(shard)
        after: TableSchema | None = fields["table_schema"]
        pre: TableSchema | None = fields["pre_table_schema"]
        base = self.merged.get(target)
        if base is None and pre is not None:
            base = self.merged.fit(pre)  # the merged table as this shard knew it before
        if base is None:
            # DM: the first shard's CREATE TABLE (or a table first met in its DDL) makes the merged table.
            if after is not None:
                fields["table_schema"] = self.merged.fit(replace(after, version=after.version or ddl.commit_ts))
            self._told(label, shard, ddl, "applied")
            return DDLEvent(**fields)
        if ddl.action == ActionType.CREATE_TABLE:
            # DM: CREATE TABLE of a shard whose merged table exists is skipped (its rows join the merged shape).
            self._told(label, shard, ddl, "skipped: done by another shard: the merged table exists")
            return None
        try:
            # DM's optimistic rule, against the merged shape's columns instead of a downstream table's.
            verdict = optimistic(fields["query"], columns_of(base), shard, sorted(shards), label)
        except ShardDDLConflictError as exc:
            self._told(label, shard, ddl, f"conflict: {exc.message}")
            raise
        if not verdict.apply:
            # DM: the same change from the next shards finds it done (idempotent), a narrower type is kept wide.
            self._told(label, shard, ddl, f"skipped: done by another shard: {verdict.reason}")
            return None
        try:
            if after is not None:
                new, grew = union(base, after, shard, label, ddl.commit_ts)
            else:  # the source did not give the shape after it: the ALTER's columns, applied
                new = shape_after(base, fields["query"])
                grew = new.columns != base.columns
        except ShardDDLConflictError as exc:
            self._told(label, shard, ddl, f"conflict: {exc.message}")
            raise
        except ValueError as exc:  # a column type the model does not know
            raise RouteError(
                f"cannot tell the shape of the merged table {label} after {clip(ddl.query)} of the shard "
                f"{shard[0]}.{shard[1]}: {exc}",
                where=f"DDL at commit_ts {ddl.commit_ts}",
            ) from None
        if not grew:
            # A file or lake table keeps columns only: an index or option change of one shard is no new shape.
            self._told(label, shard, ddl, "skipped: it changes no column of the merged table")
            return None
        # DM: a compatible change reaches the merged table at once, when the first shard runs it.
        new = replace(new, version=ddl.commit_ts)
        self.merged.put(target, new)
        self._told(label, shard, ddl, "applied")
        return DDLEvent(**{**fields, "table_schema": new, "pre_table_schema": base})

    def _told(self, target: str, shard: TableName, ddl: DDLEvent, outcome: str) -> None:
        log.info("routing: shard DDL of %s.%s on %s: %s (%s)", *shard, target, outcome, clip(ddl.query))
        if self.report is not None:
            self.report(target, ".".join(shard), ddl.query, outcome, ddl.commit_ts)

    def _shard_drop(
        self, ddl: DDLEvent, query: str, merged: Sequence[TableName], spans: int, main: Target | None, where: str
    ) -> ShardDDL | None:
        """A shard's DROP/TRUNCATE TABLE: None (not run on the merged table), or for the pessimistic shard
        lock a DROP as a `ShardDDL` that only updates the shard list."""
        action = ddl.action
        if len(merged) != spans:
            raise RouteError(f"{clip(ddl.query)} drops shards of a merged table with other tables", where=where)
        if self.shard_drops and action == ActionType.DROP_TABLE and len(merged) == 1 and main is not None:
            return _dropped_shard(ddl, query, main.name, merged[0])
        # DM in shard mode: a shard's DROP/TRUNCATE TABLE is not run on the merged table.
        log.info(
            "routing: a shard's %s is not applied to its merged table shard=%s query=%s",
            "DROP TABLE" if action == ActionType.DROP_TABLE else "TRUNCATE TABLE",
            ".".join(merged[0]),
            clip(ddl.query),
        )
        return None


def _dropped_shard(ddl: DDLEvent, query: str, target: TableName, shard: TableName) -> ShardDDL:
    """A shard's DROP TABLE for the pessimistic shard lock: the sink never runs it, it updates the shard list."""
    return ShardDDL(
        schema=target[0],
        table=target[1],
        query=query,
        ddl_type=ddl.ddl_type,
        commit_ts=ddl.commit_ts,
        start_ts=ddl.start_ts,
        position=ddl.position,
        shard=shard,
        shards=(shard,),
    )


class EventTransform(Protocol):
    """What is applied to every event before a sink: a `Router`, or a `pipeline.EventPipeline` around one."""

    def route(self, events: Iterable[Any]) -> list[Any]: ...

    def stream(self, events: Iterable[Any]) -> Iterator[Any]: ...


def route_events(router: EventTransform | None, events: Iterable[Any]) -> Iterable[Any]:
    """``events`` routed by ``router`` (as they are when there is none)."""
    return events if router is None else router.route(events)


def partition_events(router: EventTransform | None, events_of: Any) -> Any:
    """A per-partition event reader (Spark's encode stage) whose events come out routed."""
    if router is None:
        return events_of

    def routed(batches: Any) -> list[Any]:
        return router.route(events_of(batches))

    return routed


__all__ = [
    "EventTransform",
    "Extract",
    "RouteError",
    "RouteRule",
    "Router",
    "ShardDDL",
    "Target",
    "dm_pattern",
    "partition_events",
    "route_events",
    "routed_schema",
]
