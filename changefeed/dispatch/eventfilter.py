"""TiCDC's event filters (``[[filter.event-filters]]``): drop events by kind, DDL text or row values.

Each rule, in TiCDC's words (docs "Changefeed log filters"):

* ``matcher``: the tables it concerns, in table-filter syntax; a schema statement (CREATE/DROP
  DATABASE) is concerned when the matcher names its schema, as in TiCDC;
* ``ignore-event``: kinds to drop: ``all dml``, ``all ddl``, ``insert``, ``update``, ``delete`` and
  the DDL kinds (``create table``, ``drop table``, ``add column``, ``alter table`` = every ALTER
  TABLE, ... `DDL_EVENTS`);
* ``ignore-sql``: regular expressions searched in a DDL's text, case-insensitively (TiCDC uses
  DM's binlog filter, which compiles them with ``(?i)``);
* ``ignore-insert-value-expr`` / ``ignore-update-new-value-expr`` /
  ``ignore-update-old-value-expr`` / ``ignore-delete-value-expr``: a SQL boolean expression over
  the row's columns; a row for which it is TRUE is dropped (an update when either of its two
  expressions is TRUE). NULL is not TRUE: a comparison with a NULL or absent value keeps the row.

An event is dropped when any rule concerning its table says so. Expressions are parsed once by
sqlglot's MySQL dialect into a tree of Arrow compute calls, compiled once per table shape and
evaluated vectorised over a `RowBlock`'s columns, and over the rows of a piece grouped by table
for `RowChange`s. Supported: comparisons (``= <> != < <= > >= <=>``), ``AND OR NOT XOR``, ``IS
[NOT] NULL``, ``[NOT] IN (...)``, ``[NOT] BETWEEN``, ``[NOT] LIKE``, ``+ - * /``, parentheses,
numbers, strings, NULL, TRUE/FALSE. A number compared with a string column compares as a double,
as MySQL does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ChangefeedError, ConfigError, clip
from ..model import ABSENT, ActionType, DDLEvent, Op, RowChange, TableSchema
from ..model.arrow import arrow_type
from ..model.rowblock import RowBlock, Segment, TableRows
from ..model.tablefilter import TableFilter

A = ActionType
#: TiCDC's DDL event kinds (its ``ignore-event`` names and aliases) and the DDL they cover.
DDL_EVENTS: dict[str, frozenset[int]] = {
    "create schema": frozenset({A.CREATE_SCHEMA}),
    "create database": frozenset({A.CREATE_SCHEMA}),
    "drop schema": frozenset({A.DROP_SCHEMA}),
    "drop database": frozenset({A.DROP_SCHEMA}),
    "create table": frozenset({A.CREATE_TABLE}),
    "drop table": frozenset({A.DROP_TABLE}),
    "rename table": frozenset({A.RENAME_TABLE, A.RENAME_TABLES}),
    "truncate table": frozenset({A.TRUNCATE_TABLE}),
    "alter table": frozenset(
        {
            A.ADD_COLUMN,
            A.DROP_COLUMN,
            A.ADD_INDEX,
            A.DROP_INDEX,
            A.ADD_FOREIGN_KEY,
            A.DROP_FOREIGN_KEY,
            A.MODIFY_COLUMN,
            A.REBASE_AUTO_ID,
            A.SET_DEFAULT_VALUE,
            A.MODIFY_TABLE_COMMENT,
            A.RENAME_INDEX,
            A.ADD_TABLE_PARTITION,
            A.DROP_TABLE_PARTITION,
            A.TRUNCATE_TABLE_PARTITION,
            A.MODIFY_TABLE_CHARSET_AND_COLLATE,
            A.ADD_PRIMARY_KEY,
            A.DROP_PRIMARY_KEY,
            A.ALTER_INDEX_VISIBILITY,
            A.EXCHANGE_TABLE_PARTITION,
            A.REORGANIZE_PARTITION,
            A.ALTER_TABLE_PARTITIONING,
            A.REMOVE_PARTITIONING,
            A.MULTI_SCHEMA_CHANGE,
        }
    ),
    "add table partition": frozenset({A.ADD_TABLE_PARTITION}),
    "drop table partition": frozenset({A.DROP_TABLE_PARTITION}),
    "truncate table partition": frozenset({A.TRUNCATE_TABLE_PARTITION}),
    "exchange partition": frozenset({A.EXCHANGE_TABLE_PARTITION}),
    "reorganize partition": frozenset({A.REORGANIZE_PARTITION}),
    "alter table partitioning": frozenset({A.ALTER_TABLE_PARTITIONING}),
    "remove table partitioning": frozenset({A.REMOVE_PARTITIONING}),
    "create view": frozenset({A.CREATE_VIEW}),
    "drop view": frozenset({A.DROP_VIEW}),
    "modify schema charset and collate": frozenset({A.MODIFY_SCHEMA_CHARSET_AND_COLLATE}),
    "recover table": frozenset({A.RECOVER_TABLE}),
    "rebase auto id": frozenset({A.REBASE_AUTO_ID}),
    "modify table comment": frozenset({A.MODIFY_TABLE_COMMENT}),
    "modify table charset and collate": frozenset({A.MODIFY_TABLE_CHARSET_AND_COLLATE}),
    "add column": frozenset({A.ADD_COLUMN}),
    "drop column": frozenset({A.DROP_COLUMN}),
    "modify column": frozenset({A.MODIFY_COLUMN}),
    "set default value": frozenset({A.SET_DEFAULT_VALUE}),
    "add primary key": frozenset({A.ADD_PRIMARY_KEY}),
    "drop primary key": frozenset({A.DROP_PRIMARY_KEY}),
    "add index": frozenset({A.ADD_INDEX}),
    "create index": frozenset({A.ADD_INDEX}),
    "drop index": frozenset({A.DROP_INDEX}),
    "rename index": frozenset({A.RENAME_INDEX}),
    "add foreign key": frozenset({A.ADD_FOREIGN_KEY}),
    "drop foreign key": frozenset({A.DROP_FOREIGN_KEY}),
}
DML_EVENTS = ("insert", "update", "delete")
_EXPR_KEYS = (
    "ignore-insert-value-expr",
    "ignore-update-new-value-expr",
    "ignore-update-old-value-expr",
    "ignore-delete-value-expr",
)


class EventFilterError(ChangefeedError):
    """An expression filter that cannot be evaluated on a table (a column it names is missing...)."""


# ---------------------------------------------------------------------------------------------- expressions

Value = Any  # a pa.Array (per row) or a Python scalar (a literal)
Compiled = Callable[[Callable[[str], pa.Array]], Value]


@dataclass(frozen=True)
class Expression:
    """A row expression, parsed and checked once; `mask` evaluates it over columns."""

    text: str
    columns: tuple[str, ...] = field(default=(), init=False)
    _run: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        import sqlglot  # noqa: PLC0415 - sqlglot on first use
        from sqlglot.errors import ParseError  # noqa: PLC0415

        try:
            tree = sqlglot.parse_one(self.text, dialect="mysql")
        except (ParseError, ValueError) as exc:
            plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # sqlglot underlines the spot with terminal codes
            raise ConfigError(f"expression filter {self.text!r} does not parse: {plain}") from None
        names: list[str] = []
        object.__setattr__(self, "_run", _compile(tree, names, self.text))
        object.__setattr__(self, "columns", tuple(dict.fromkeys(names)))

    def __getstate__(self) -> dict[str, Any]:
        return {"text": self.text}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "text", state["text"])
        self.__post_init__()

    def mask(self, column: Callable[[str], pa.Array], n: int) -> np.ndarray:
        """Per row: is the expression TRUE (NULL and FALSE are not)?"""
        out = self._run(column)
        if isinstance(out, pa.Scalar):
            out = out.as_py()
        if not isinstance(out, pa.Array | pa.ChunkedArray):
            return np.full(n, out is True or (isinstance(out, int | float | Decimal) and bool(out)))
        if not pa.types.is_boolean(out.type):
            out = pc.not_equal(_as_number(out), 0)
        filled: np.ndarray = pc.fill_null(out, False).to_numpy(zero_copy_only=False)
        return filled


def _literal(node: Any) -> Any:
    if node.is_string:
        return str(node.this)
    text = str(node.this)
    try:
        return int(text)
    except ValueError:
        return Decimal(text)


def _as_number(v: Value) -> Value:
    if isinstance(v, pa.Array | pa.ChunkedArray) and (pa.types.is_string(v.type) or pa.types.is_binary(v.type)):
        try:
            return pc.cast(v, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise EventFilterError("a text value that is not a number is compared with a number") from None
    if isinstance(v, str):
        return float(v)
    return v


def _numeric(v: Value) -> bool:
    if isinstance(v, pa.Array | pa.ChunkedArray):
        t = v.type
        return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    return isinstance(v, int | float | Decimal) and not isinstance(v, bool)


def _is_text(v: Value) -> bool:
    if isinstance(v, pa.Array | pa.ChunkedArray):
        return pa.types.is_string(v.type) or pa.types.is_binary(v.type)
    return isinstance(v, str)


def _scalar(v: Value) -> Value:
    return float(v) if isinstance(v, Decimal) else v


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Value, Value], Value]:
    """An Arrow comparison/arithmetic with MySQL's coercion: number against text compares as doubles."""

    def run(a: Value, b: Value) -> Value:
        if a is None or b is None:
            return None
        if (_numeric(a) and _is_text(b)) or (_is_text(a) and _numeric(b)):
            a, b = _as_number(a), _as_number(b)
        if not isinstance(a, pa.Array | pa.ChunkedArray) and not isinstance(b, pa.Array | pa.ChunkedArray):
            a, b = pa.scalar(_scalar(a)), pa.scalar(_scalar(b))
        try:
            return fn(a, b)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return fn(_float(a), _float(b))

    return run


def _float(v: Value) -> Value:
    if isinstance(v, pa.Array | pa.ChunkedArray | pa.Scalar):
        return pc.cast(v, pa.float64())
    return float(v) if v is not None else None


def _null_safe_equal(a: Value, b: Value) -> Value:
    """MySQL's ``<=>``: NULL <=> NULL is TRUE, never NULL."""
    if a is None and b is None:
        return True
    if a is None or b is None:
        other = b if a is None else a
        return pc.is_null(other) if isinstance(other, pa.Array | pa.ChunkedArray) else False
    eq = _binary(pc.equal)(a, b)
    if not isinstance(eq, pa.Array | pa.ChunkedArray):
        return bool(eq.as_py()) if isinstance(eq, pa.Scalar) else eq
    both_null = pc.and_(_nulls(a, len(eq)), _nulls(b, len(eq)))
    return pc.if_else(both_null, True, pc.fill_null(eq, False))


def _nulls(v: Value, n: int) -> pa.Array:
    if isinstance(v, pa.Array | pa.ChunkedArray):
        return pc.is_null(v)
    return pa.array([v is None] * n)


def _not(v: Value) -> Value:
    if v is None:
        return None
    if isinstance(v, pa.Array | pa.ChunkedArray):
        if not pa.types.is_boolean(v.type):
            v = pc.not_equal(_as_number(v), 0)
        return pc.invert(v)
    if isinstance(v, pa.Scalar):
        v = v.as_py()
    return None if v is None else not v


def _bool(v: Value) -> Value:
    if isinstance(v, pa.Array | pa.ChunkedArray) and not pa.types.is_boolean(v.type):
        return pc.not_equal(_as_number(v), 0)
    if isinstance(v, pa.Scalar):
        return v.as_py()
    return v


def _logic(fn: Callable[[Any, Any], Any]) -> Callable[[Value, Value], Value]:
    def run(a: Value, b: Value) -> Value:
        a, b = _bool(a), _bool(b)
        if not isinstance(a, pa.Array | pa.ChunkedArray) and not isinstance(b, pa.Array | pa.ChunkedArray):
            out = fn(pa.scalar(a, pa.bool_()), pa.scalar(b, pa.bool_()))
            return out.as_py()
        if not isinstance(a, pa.Array | pa.ChunkedArray):
            a = pa.scalar(a, pa.bool_())
        if not isinstance(b, pa.Array | pa.ChunkedArray):
            b = pa.scalar(b, pa.bool_())
        return fn(a, b)

    return run


def _in(value: Value, options: list[Value]) -> Value:
    """SQL IN: TRUE if equal to one, NULL if the value is NULL (or no match and a NULL option), else FALSE."""
    out: Value = False
    for option in options:
        out = _logic(pc.or_kleene)(out, _binary(pc.equal)(value, option))
    return out


def _like(value: Value, pattern: Value) -> Value:
    if value is None or pattern is None:
        return None
    if not isinstance(pattern, str):
        raise EventFilterError("LIKE needs a string pattern")
    if isinstance(value, pa.Array | pa.ChunkedArray):
        if not _is_text(value):
            value = pc.cast(value, pa.string())
        return pc.match_like(value, pattern)
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, str(value), re.DOTALL) is not None


def _compile(node: Any, names: list[str], text: str) -> Compiled:
    """The expression tree as a function of a column getter; refuses what it does not evaluate."""
    from sqlglot import exp  # noqa: PLC0415

    def sub(n: Any) -> Compiled:
        return _compile(n, names, text)

    if isinstance(node, exp.Paren):
        return sub(node.this)
    if isinstance(node, exp.Column):
        name = node.name
        names.append(name)
        return lambda col: col(name)
    if isinstance(node, exp.Literal):
        value = _literal(node)
        return lambda col: value
    if isinstance(node, exp.Null):
        return lambda col: None
    if isinstance(node, exp.Boolean):
        flag = bool(node.this)
        return lambda col: flag
    if isinstance(node, exp.Neg):
        inner = sub(node.this)
        return lambda col: _binary(pc.subtract)(0, inner(col))
    binary: dict[Any, Callable[[Value, Value], Value]] = {
        exp.EQ: _binary(pc.equal),
        exp.NEQ: _binary(pc.not_equal),
        exp.GT: _binary(pc.greater),
        exp.GTE: _binary(pc.greater_equal),
        exp.LT: _binary(pc.less),
        exp.LTE: _binary(pc.less_equal),
        exp.NullSafeEQ: _null_safe_equal,
        exp.Add: _binary(pc.add),
        exp.Sub: _binary(pc.subtract),
        exp.Mul: _binary(pc.multiply),
        exp.Div: _binary(lambda a, b: pc.divide(_float(a), _float(b))),
        exp.And: _logic(pc.and_kleene),
        exp.Or: _logic(pc.or_kleene),
        exp.Xor: _logic(pc.xor),
    }
    fn = binary.get(type(node))
    if fn is not None:
        left, right = sub(node.this), sub(node.expression)
        return lambda col: fn(left(col), right(col))
    if isinstance(node, exp.Not):
        inner = sub(node.this)
        return lambda col: _not(inner(col))
    return _compile_predicate(node, sub, text)


def _compile_predicate(node: Any, sub: Callable[[Any], Compiled], text: str) -> Compiled:
    """IS [NOT] NULL, IN, BETWEEN and LIKE; refuses any other node."""
    from sqlglot import exp  # noqa: PLC0415

    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise ConfigError(f"expression filter {text!r}: only IS [NOT] NULL is supported")
        inner = sub(node.this)

        def is_null(col: Callable[[str], pa.Array]) -> Value:
            v = inner(col)
            return pc.is_null(v) if isinstance(v, pa.Array | pa.ChunkedArray) else v is None

        return is_null
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise ConfigError(f"expression filter {text!r}: IN takes a list of values here")
        value, options = sub(node.this), [sub(e) for e in node.expressions]
        return lambda col: _in(value(col), [o(col) for o in options])
    if isinstance(node, exp.Between):
        value, low, high = sub(node.this), sub(node.args["low"]), sub(node.args["high"])
        ge, le, both = _binary(pc.greater_equal), _binary(pc.less_equal), _logic(pc.and_kleene)
        return lambda col: both(ge(value(col), low(col)), le(value(col), high(col)))
    if isinstance(node, exp.Like):
        value, pattern = sub(node.this), sub(node.expression)
        return lambda col: _like(value(col), pattern(col))
    raise ConfigError(
        f"expression filter {text!r}: {clip(node.sql(dialect='mysql'))} ({type(node).__name__}) is not supported "
        f"(comparisons, AND/OR/NOT, IS NULL, IN, BETWEEN, LIKE, arithmetic)"
    )


# ---------------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class EventFilterRule:
    """One ``[[filter.event-filters]]`` entry (TiCDC's keys)."""

    matcher: tuple[str, ...]
    ignore_event: tuple[str, ...] = ()
    ignore_sql: tuple[str, ...] = ()
    ignore_insert_value_expr: Expression | None = None
    ignore_update_new_value_expr: Expression | None = None
    ignore_update_old_value_expr: Expression | None = None
    ignore_delete_value_expr: Expression | None = None
    _filter: Any = field(default=None, init=False, repr=False, compare=False)
    _sql: Any = field(default=(), init=False, repr=False, compare=False)
    _ddl: Any = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_filter", TableFilter(list(self.matcher)))
        kinds = [k.strip().lower() for k in self.ignore_event]
        unknown = [k for k in kinds if k not in DDL_EVENTS and k not in DML_EVENTS and k not in ("all dml", "all ddl")]
        if unknown:
            raise ConfigError(
                f"ignore-event {unknown[0]!r} is not an event kind (insert, update, delete, all dml, all ddl, "
                f"{', '.join(sorted(DDL_EVENTS))})"
            )
        object.__setattr__(self, "ignore_event", tuple(kinds))
        ddl: set[int] = set()
        for k in kinds:
            ddl |= DDL_EVENTS.get(k, frozenset())
        object.__setattr__(self, "_ddl", frozenset(ddl))
        sql = []
        for pattern in self.ignore_sql:
            try:
                sql.append(re.compile(pattern, re.IGNORECASE))  # DM's binlog filter: (?i)
            except re.error as exc:
                raise ConfigError(f"ignore-sql {pattern!r} is not a regular expression: {exc}") from None
        object.__setattr__(self, "_sql", tuple(sql))

    @classmethod
    def from_mapping(cls, obj: Mapping[str, Any], where: str = "[[filter.event-filters]]") -> EventFilterRule:
        keys = {"matcher", "ignore-event", "ignore-sql", *_EXPR_KEYS}
        unknown = set(obj) - keys
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(sorted(unknown))} in {where} (expected: {', '.join(sorted(keys))})"
            )
        lists: dict[str, Any] = {}
        for key in ("matcher", "ignore-event", "ignore-sql"):
            value = obj.get(key, ["*.*"] if key == "matcher" else [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where} {key} must be a list of strings, got {clip(value)}")
            lists[key.replace("-", "_")] = tuple(value)
        exprs: dict[str, Any] = {}
        for key in _EXPR_KEYS:
            value = obj.get(key, "")
            if not isinstance(value, str):
                raise ConfigError(f"{where} {key} must be a string, got {clip(value)}")
        try:
            for key in _EXPR_KEYS:
                value = obj.get(key, "")
                exprs[key.replace("-", "_")] = Expression(value) if value.strip() else None
            return cls(**lists, **exprs)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc.message}") from None

    @classmethod
    def from_dm_expression(cls, obj: Mapping[str, Any], where: str = "expression-filter") -> EventFilterRule:
        """DM's ``expression-filter`` entry: ``schema``, ``table`` (names, no wildcards in DM) and its four
        expressions; a row for which one is true is dropped, as with TiCDC's ``ignore-*-value-expr``."""
        renamed = {  # DM's key -> TiCDC's
            "insert-value-expr": "ignore-insert-value-expr",
            "update-before-value-expr": "ignore-update-old-value-expr",
            "update-after-value-expr": "ignore-update-new-value-expr",
            "delete-value-expr": "ignore-delete-value-expr",
        }
        unknown = set(obj) - {"schema", "table", *renamed}
        if unknown:
            expected = ", ".join(sorted({"schema", "table", *renamed}))
            raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))} in {where} (expected: {expected})")
        names = [obj.get("schema"), obj.get("table")]
        if not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where} needs schema and table (names, as in DM), got {clip(dict(obj))}")
        if any(ch in str(n) for n in names for ch in "*?[]!\\.`"):
            raise ConfigError(f"{where}: DM's expression filter names one table; {names[0]}.{names[1]} is a pattern")
        mapping = {"matcher": [f"{names[0]}.{names[1]}"], **{renamed[k]: v for k, v in obj.items() if k in renamed}}
        return cls.from_mapping(mapping, where)

    def concerns(self, schema: str, table: str) -> bool:
        if not table:
            return bool(self._filter.match_schema(schema))
        return bool(self._filter.match(schema, table))

    def ignores_dml(self, op: str) -> bool:
        return "all dml" in self.ignore_event or op in self.ignore_event

    def ignores_ddl(self, ddl: DDLEvent) -> bool:
        if "all ddl" in self.ignore_event or int(ddl.ddl_type) in self._ddl:
            return True
        return any(p.search(ddl.query) for p in self._sql)

    @property
    def has_values(self) -> bool:
        return any(e is not None for e in self.expressions)

    @property
    def expressions(self) -> tuple[Expression | None, ...]:
        return (
            self.ignore_insert_value_expr,
            self.ignore_update_new_value_expr,
            self.ignore_update_old_value_expr,
            self.ignore_delete_value_expr,
        )


# ---------------------------------------------------------------------------------------------- the filter


def _getter(ts: TableSchema, fetch: Callable[[int], pa.Array], expr: Expression) -> Callable[[str], pa.Array]:
    index = {c.name.lower(): i for i, c in enumerate(ts.columns)}

    def column(name: str) -> pa.Array:
        i = index.get(name.lower())
        if i is None:
            raise EventFilterError(
                f"expression filter {expr.text!r} names column {name!r}, which {ts.qualified_name} does not have"
            )
        return fetch(i)

    return column


def _images_array(ts: TableSchema, images: Sequence[tuple[Any, ...]], i: int) -> pa.Array:
    col = ts.columns[i]
    values = [None if img[i] is ABSENT else img[i] for img in images]
    t = arrow_type(col)
    if pa.types.is_string(t) and any(isinstance(v, Decimal) for v in values):
        values = [None if v is None else format(v, "f") for v in values]
    return pa.array(values, type=t)


class EventFilter:
    """Applies TiCDC's event filter rules to events (module docstring); stateless, shipped to executors."""

    def __init__(self, rules: Sequence[EventFilterRule]) -> None:
        self.rules = tuple(rules)
        self._tables: dict[tuple[str, str], tuple[EventFilterRule, ...]] = {}

    @classmethod
    def of(cls, rules: Sequence[EventFilterRule]) -> EventFilter | None:
        return cls(rules) if rules else None

    def __getstate__(self) -> dict[str, Any]:
        return {"rules": self.rules}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["rules"])  # type: ignore[misc]

    def _rules(self, schema: str, table: str) -> tuple[EventFilterRule, ...]:
        key = (schema, table)
        hit = self._tables.get(key)
        if hit is None:
            if len(self._tables) > 65536:
                self._tables.clear()
            hit = self._tables[key] = tuple(r for r in self.rules if r.concerns(schema, table))
        return hit

    def apply(self, events: Iterable[Any]) -> list[Any]:
        """``events`` without the ones a rule ignores, in order."""
        events = list(events)
        drop = self._row_verdicts([e for e in events if isinstance(e, RowChange)])
        out: list[Any] = []
        for event in events:
            if isinstance(event, RowChange):
                if id(event) not in drop:
                    out.append(event)
            elif isinstance(event, RowBlock):
                kept = self._block(event)
                if kept is not None:
                    out.append(kept)
            elif isinstance(event, DDLEvent):
                if not any(r.ignores_ddl(event) for r in self._rules(event.schema, event.table)):
                    out.append(event)
            else:
                out.append(event)
        return out

    # ------------------------------------------------------------------ RowChange: grouped by table

    def _row_verdicts(self, rows: list[RowChange]) -> set[int]:
        drop: set[int] = set()
        groups: dict[tuple[int, int, int], list[RowChange]] = {}  # (rule, table shape, expression) -> rows
        shapes: dict[int, TableSchema] = {}
        for row in rows:
            rules = self._rules(row.table_schema.schema, row.table_schema.table)
            for rule in rules:
                if rule.ignores_dml(row.op.value):
                    drop.add(id(row))
                    break
                which = {Op.INSERT: (0,), Op.UPDATE: (1, 2), Op.DELETE: (3,)}[row.op]
                for w in which:
                    if rule.expressions[w] is not None:
                        shapes[id(row.table_schema)] = row.table_schema
                        groups.setdefault((id(rule), id(row.table_schema), w), []).append(row)
        by_id = {id(r): r for r in self.rules}
        for (rule_id, shape_id, w), grouped in groups.items():
            members = [m for m in grouped if id(m) not in drop]
            if not members:
                continue
            expr = by_id[rule_id].expressions[w]
            assert expr is not None
            ts = shapes[shape_id]
            images = [(m.old if w in (2, 3) else m.new) or () for m in members]
            cache: dict[int, pa.Array] = {}

            def fetch(
                i: int, images: list[Any] = images, ts: TableSchema = ts, cache: dict[int, pa.Array] = cache
            ) -> pa.Array:
                if i not in cache:
                    cache[i] = _images_array(ts, images, i)
                return cache[i]

            mask = expr.mask(_getter(ts, fetch, expr), len(members))
            drop.update(id(m) for m, hit in zip(members, mask.tolist(), strict=True) if hit)
        return drop

    # ------------------------------------------------------------------ RowBlock: vectorised per table

    def _block(self, block: RowBlock) -> RowBlock | None:
        masks: dict[int, np.ndarray] = {}
        for t, rows in enumerate(block.tables):
            rules = self._rules(rows.table_schema.schema, rows.table_schema.table)
            if not rules:
                continue
            drop = self._table_drop(rows, rules)
            if drop is not None and drop.any():
                masks[t] = drop
        return block if not masks else _without(block, masks)

    def _table_drop(self, rows: TableRows, rules: tuple[EventFilterRule, ...]) -> np.ndarray | None:
        ops = rows.ops
        drop = np.zeros(rows.num_rows, bool)
        for rule in rules:
            for code, op in enumerate(DML_EVENTS):
                if rule.ignores_dml(op):
                    drop |= ops == code
            for w, expr in enumerate(rule.expressions):
                if expr is None:
                    continue
                code = (0, 1, 1, 2)[w]
                if not (ops == code).any():
                    continue
                fetch = rows.before if w == 2 else rows.column
                drop |= (ops == code) & expr.mask(_getter(rows.table_schema, fetch, expr), rows.num_rows)
        return drop


def _without(block: RowBlock, masks: dict[int, np.ndarray]) -> RowBlock | None:
    """``block`` without the rows ``masks`` (table index -> rows to drop) marks; segments split around them."""
    tables: list[TableRows | None] = []
    for t, rows in enumerate(block.tables):
        drop = masks.get(t)
        tables.append(rows if drop is None else (_take(rows, ~drop) if not drop.all() else None))
    new_index: list[int] = []
    kept_tables: list[TableRows] = []
    for table in tables:
        new_index.append(len(kept_tables) if table is not None else -1)
        if table is not None:
            kept_tables.append(table)
    segments: list[Segment] = []
    for seg, start in block.walk():
        drop = masks.get(seg.table)
        if drop is None:
            segments.append(replace(seg, table=new_index[seg.table]))
            continue
        keep = ~drop[start : start + seg.rows]
        j = 0
        while j < seg.rows:  # one segment per run of kept rows, each numbered as in the original
            if not keep[j]:
                j += 1
                continue
            k = j
            while k < seg.rows and keep[k]:
                k += 1
            skip = None if seg.skip is None else seg.skip + j
            segments.append(replace(seg, table=new_index[seg.table], rows=k - j, skip=skip))
            j = k
    if not segments:
        return None
    return RowBlock(kept_tables, segments)


def _take(rows: TableRows, keep: np.ndarray) -> TableRows:
    def runs(r: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]] | None:
        if r is None:
            return None
        per_row = [p for p, k in r for _ in range(k)]
        out: list[tuple[int, int]] = []
        for p, kept in zip(per_row, keep.tolist(), strict=True):
            if not kept:
                continue
            if out and out[-1][0] == p:
                out[-1] = (p, out[-1][1] + 1)
            else:
                out.append((p, 1))
        return out

    raw = None if rows.raw is None else [b for b, k in zip(rows.raw, keep.tolist(), strict=True) if k]
    return TableRows(
        rows.table_schema,
        rows.batch.filter(pa.array(keep)),
        runs(rows.main_runs),
        runs(rows.before_runs),
        raw=raw,
        _ops=rows.ops[keep],
    )


__all__ = ["DDL_EVENTS", "DML_EVENTS", "EventFilter", "EventFilterError", "EventFilterRule", "Expression"]
