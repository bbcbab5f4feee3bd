"""Table definitions learned from DDL text: keys and DECIMAL precision the wire formats leave out.

A binlog TABLE_MAP has no unique keys, and Open Protocol has no DECIMAL precision, but the
CREATE/ALTER TABLE text that made the table passes through both. `DDLCatalog` parses that text
with sqlglot's MySQL dialect (imported on first use) into the facts the rest of changefeed needs:
per table, the ordered columns (name, NOT NULL, DECIMAL precision and scale) and the indexes
(primary, unique, plain; functional indexes are left out, prefix key parts count as their column),
and keeps them across the stream: CREATE TABLE (also LIKE), ALTER TABLE (ADD/DROP INDEX, KEY,
UNIQUE, CONSTRAINT, PRIMARY KEY, ADD/DROP/MODIFY/CHANGE/RENAME COLUMN, RENAME INDEX, RENAME TO),
CREATE [UNIQUE] INDEX, DROP INDEX, DROP TABLE, RENAME TABLE, DROP DATABASE.

What it never does is guess: a statement sqlglot cannot parse, or that uses a clause this module
does not model, logs one structured warning and leaves what was known unchanged; a statement that
contradicts the knowledge (an index over a column the table does not have) forgets the table. A
table is known only from a full definition (CREATE TABLE with columns, CREATE TABLE LIKE a known
table, or `DDLCatalog.put` from information_schema); ALTERs of an unknown table are ignored.

Index order follows TiDB's index ids, since TiCDC's handle-key rule breaks ties by them: the
table-level keys of CREATE TABLE in text order, then the column-level ones (``a INT UNIQUE``) in
column order, then each later ADD; `TableDef.indexes` lists PRIMARY first. Unnamed indexes are
named as MySQL and TiDB name them: the first column, then ``_2``, ``_3``...
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .schema import Index, TableSchema
from .types import TypeCode

log = logging.getLogger(__name__)

TableName = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ColumnDef:
    """A column as DDL text declares it (only what keys and DECIMAL precision need)."""

    name: str
    nullable: bool = True
    #: (precision, scale) of a DECIMAL/NUMERIC column (MySQL's defaults filled in: DECIMAL = (10, 0)).
    decimal: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TableDef:
    """One table as the DDL seen so far defines it. ``indexes``: PRIMARY first, then index-id order."""

    schema: str
    table: str
    columns: tuple[ColumnDef, ...]
    indexes: tuple[Index, ...] = ()

    def column(self, name: str) -> ColumnDef | None:
        low = name.lower()
        return next((c for c in self.columns if c.name.lower() == low), None)

    def decimals(self) -> dict[str, tuple[int, int]]:
        """(precision, scale) by lower-cased column name, for the DECIMAL columns."""
        return {c.name.lower(): c.decimal for c in self.columns if c.decimal is not None}


class DDLUnsupportedError(Exception):
    """A statement (or a clause of it) this module does not model: the caller keeps its knowledge."""


@dataclass
class _Table:
    columns: list[ColumnDef]
    indexes: list[Index] = field(default_factory=list)  # index-id order, PRIMARY wherever it was added

    def col(self, name: str) -> int | None:
        low = name.lower()
        return next((i for i, c in enumerate(self.columns) if c.name.lower() == low), None)

    def index_pos(self, name: str) -> int | None:
        low = name.lower()
        return next((i for i, x in enumerate(self.indexes) if x.name.lower() == low), None)

    def copy(self) -> _Table:
        return _Table(list(self.columns), list(self.indexes))

    def freeze(self, schema: str, table: str) -> TableDef:
        ordered = [x for x in self.indexes if x.primary] + [x for x in self.indexes if not x.primary]
        return TableDef(schema, table, tuple(self.columns), tuple(ordered))


class _ContradictionError(Exception):
    """The statement names something the knowledge does not have: the knowledge is stale."""


class DDLCatalog:
    """Per-table definitions learned from DDL statements in stream order (module docstring)."""

    def __init__(self) -> None:
        self._tables: dict[TableName, _Table] = {}
        #: Bumped on every change: callers cache what they derived from the catalog per generation.
        self.generation = 0

    # ------------------------------------------------------------------ reading

    def table(self, schema: str, table: str) -> TableDef | None:
        """The table's definition, or None when no full definition was seen (or it was dropped)."""
        key = self._key(schema, table)
        t = self._tables.get(key) if key is not None else None
        return t.freeze(*key) if t is not None and key is not None else None

    def _key(self, schema: str, table: str) -> TableName | None:
        if (schema, table) in self._tables:
            return (schema, table)
        # lower_case_table_names=1 servers store names lower-cased while the DDL text keeps its case
        low = (schema.lower(), table.lower())
        found = [k for k in self._tables if (k[0].lower(), k[1].lower()) == low]
        return found[0] if len(found) == 1 else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, tuple) and len(name) == 2 and self._key(*name) is not None

    def __len__(self) -> int:
        return len(self._tables)

    # ------------------------------------------------------------------ copies and transport

    def copy(self) -> DDLCatalog:
        """An independent catalog with the same knowledge (cheap: tables are replaced, never changed in place)."""
        out = DDLCatalog()
        out._tables = dict(self._tables)
        out.generation = self.generation
        return out

    def to_compact(self, names: Iterable[TableName] | None = None) -> list[Any]:
        """The knowledge as JSON-able lists (all tables, or the known ones of ``names``); `from_compact` reads it.

        A table is ``[schema, table, columns, indexes]``; a column ``[name, nullable]`` or
        ``[name, nullable, precision, scale]``; an index ``[name, columns, kind]`` with kind 2
        primary, 1 unique, 0 plain, in index-id order.
        """
        if names is None:
            keys: Iterable[TableName] = self._tables
        else:
            found = (self._key(*n) for n in names)
            keys = sorted({k for k in found if k is not None})
        out: list[Any] = []
        for key in keys:
            t = self._tables[key]
            columns = [[c.name, c.nullable, *c.decimal] if c.decimal else [c.name, c.nullable] for c in t.columns]
            indexes = [[x.name, list(x.columns), 2 if x.primary else int(x.unique)] for x in t.indexes]
            out.append([key[0], key[1], columns, indexes])
        return out

    @classmethod
    def from_compact(cls, data: Iterable[Any]) -> DDLCatalog:
        """A catalog from `to_compact`'s lists."""
        catalog = cls()
        for schema, table, columns, indexes in data:
            cols = [ColumnDef(str(c[0]), bool(c[1]), (int(c[2]), int(c[3])) if len(c) > 2 else None) for c in columns]
            idx = [Index(str(n), tuple(map(str, cs)), primary=kind == 2, unique=kind >= 1) for n, cs, kind in indexes]
            catalog._tables[(str(schema), str(table))] = _Table(cols, idx)
        catalog.generation = 1 if catalog._tables else 0
        return catalog

    # ------------------------------------------------------------------ writing

    def put(self, tdef: TableDef) -> None:
        """Know a table from elsewhere (an information_schema snapshot); replaces what was known."""
        self._set((tdef.schema, tdef.table), _Table(list(tdef.columns), list(tdef.indexes)))  # freeze orders them

    def forget(self, schema: str, table: str) -> None:
        key = self._key(schema, table)
        if key is not None:
            del self._tables[key]
            self.generation += 1

    def forget_schema(self, schema: str) -> None:
        for key in [k for k in self._tables if k[0] == schema]:
            del self._tables[key]
        self.generation += 1

    def _set(self, key: TableName, t: _Table) -> None:
        old = self._key(*key)
        if old is not None and old != key:
            del self._tables[old]
        self._tables[key] = t
        self.generation += 1

    def apply(self, query: str, default_schema: str, where: str | None = None) -> bool:
        """Learn from one DDL statement; False when a statement naming a table was not understood (warning logged).

        Never raises for bad SQL: the catalog then keeps what it knew.
        """
        try:
            statement = _parse(query)
        except DDLUnsupportedError as exc:
            return not _warn(query, default_schema, str(exc), where)
        except Exception as exc:  # sqlglot's ParseError/TokenError, RecursionError on hostile nesting...
            return not _warn(query, default_schema, _error_text(exc), where)
        if statement is None:
            return True
        try:
            self._statement(statement, query, default_schema)
        except DDLUnsupportedError as exc:
            return not _warn(query, default_schema, str(exc), where)
        return True

    # ------------------------------------------------------------------ statements

    def _statement(self, e: Any, query: str, default_schema: str) -> None:
        from sqlglot import exp  # noqa: PLC0415 - sqlglot is imported on first use

        if isinstance(e, exp.Create):
            kind = str(e.args.get("kind") or "").upper()
            if kind == "TABLE":
                self._create_table(e, default_schema)
            elif kind == "INDEX":
                self._create_index(e, default_schema)
            return
        if isinstance(e, exp.Alter):
            if str(e.args.get("kind") or "").upper() == "TABLE":
                self._alter(e, default_schema)
            return
        if isinstance(e, exp.Drop):
            self._drop(e, default_schema)
            return
        if isinstance(e, exp.Command) and str(e.this).upper() == "RENAME":
            from .ddl import ddl_tables  # noqa: PLC0415

            _, pairs = ddl_tables(query, default_schema)
            if not pairs:
                raise DDLUnsupportedError("RENAME without table pairs")
            for old, new in pairs:
                self._rename(old, new)
            return
        if isinstance(e, exp.Command):
            raise DDLUnsupportedError(f"sqlglot cannot parse this {str(e.this).upper()} statement")
        # TRUNCATE, views, databases, grants...: nothing that changes a table's keys or columns

    def _drop(self, e: Any, default_schema: str) -> None:
        kind = str(e.args.get("kind") or "").upper()
        if kind == "TABLE":
            for t in e.args.get("tables") or ():
                self.forget(*_table_name(t, default_schema))
        elif kind in ("DATABASE", "SCHEMA"):
            for t in e.args.get("tables") or ():
                db = t.args.get("db")
                self.forget_schema(_ident(db) if db is not None else _ident(t.this))
        elif kind == "INDEX":
            self._drop_index(e, default_schema)

    def _drop_index(self, e: Any, default_schema: str) -> None:
        on = e.args.get("cluster")
        tables = e.args.get("tables") or ()
        if on is None or not tables:
            raise DDLUnsupportedError("DROP INDEX without ON table")
        name = _table_name(on.this, default_schema)
        t = self._known(name)
        if t is not None:
            t = t.copy()
            pos = t.index_pos(tables[0].name)
            if pos is not None:
                del t.indexes[pos]
            self._set(self._key(*name) or name, t)

    def _known(self, name: TableName) -> _Table | None:
        key = self._key(*name)
        return self._tables.get(key) if key is not None else None

    def _rename(self, old: TableName, new: TableName) -> None:
        key = self._key(*old)
        t = self._tables.pop(key) if key is not None else None
        dest = self._key(*new)
        if dest is not None:
            del self._tables[dest]
        if t is not None:
            self._tables[new] = t
        self.generation += 1

    def _create_table(self, e: Any, default_schema: str) -> None:
        from sqlglot import exp  # noqa: PLC0415

        target = e.this
        props = e.args.get("properties")
        if props is not None and any(isinstance(p, exp.TemporaryProperty) for p in props.expressions):
            return  # temporary tables are session-local: never written to a row-format binlog
        if isinstance(target, exp.Schema):
            name = _table_name(target.this, default_schema)
            if e.args.get("exists") and self._known(name) is not None:
                return  # CREATE TABLE IF NOT EXISTS of a table that exists: nothing changed
            if e.args.get("expression") is not None:  # CREATE TABLE t (...) SELECT: more columns from the query
                self.forget(*name)
                return
            try:
                self._set(name, _table_from_schema(target))
            except _ContradictionError:
                self.forget(*name)
            return
        name = _table_name(target, default_schema)
        like = None
        if props is not None:
            like = next((p for p in props.expressions if isinstance(p, exp.LikeProperty)), None)
        if like is not None:
            if e.args.get("exists") and self._known(name) is not None:
                return
            source = self._known(_table_name(like.this, default_schema))
            if source is None:
                self.forget(*name)
            else:
                self._set(name, source.copy())
            return
        self.forget(*name)  # CREATE TABLE ... AS SELECT: columns come from the query

    def _create_index(self, e: Any, default_schema: str) -> None:
        idx = e.this
        name = _table_name(idx.args["table"], default_schema)
        t = self._known(name)
        if t is None:
            return
        params = idx.args.get("params")
        parts = params.args.get("columns") if params is not None else None
        t = t.copy()
        try:
            cols = _key_columns(parts or ())
            if cols is not None:
                _add_index(t, idx.name or None, cols, unique=bool(e.args.get("unique")), primary=False)
        except _ContradictionError:
            self.forget(*name)
            return
        self._set(self._key(*name) or name, t)

    def _alter(self, e: Any, default_schema: str) -> None:
        from sqlglot import exp  # noqa: PLC0415

        name = _table_name(e.this, default_schema)
        current = self._known(name)
        actions = e.args.get("actions") or ()
        renamed_to: TableName | None = None
        t = current.copy() if current is not None else None
        try:
            for action in actions:
                if isinstance(action, exp.AlterRename):
                    renamed_to = _table_name(action.this, default_schema)
                    continue
                if t is not None:
                    _alter_action(t, action)
                else:
                    _check_action(action)  # an unknown table: still refuse what we cannot model
        except _ContradictionError:
            self.forget(*name)
            return
        if t is not None:
            self._set(self._key(*name) or name, t)
        if renamed_to is not None:
            self._rename(name, renamed_to)


# ---------------------------------------------------------------------------------------------- parsing


class _FallbackFilter(logging.Filter):
    """sqlglot logs its own warning when it falls back to a raw Command; `_warn` says it with context."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


_sqlglot_ready = False


def _sqlglot() -> Any:
    global _sqlglot_ready  # noqa: PLW0603 - one filter, installed on first use
    import sqlglot  # noqa: PLC0415 - ~0.2 s to import: only where DDL is seen

    if not _sqlglot_ready:
        logging.getLogger("sqlglot").addFilter(_FallbackFilter())
        _sqlglot_ready = True
    return sqlglot


def _error_text(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)  # sqlglot.errors.ParseError: structured, without terminal colours
    if errors and isinstance(errors[0], dict):
        e = errors[0]
        return f"{type(exc).__name__}: {e.get('description')} at line {e.get('line')}, column {e.get('col')}"
    return f"{type(exc).__name__}: {_clip(str(exc))}"


def _parse(query: str) -> Any:
    """The sqlglot expression of one statement (None for an empty one)."""
    sqlglot = _sqlglot()
    from sqlglot import exp  # noqa: PLC0415

    text = _normalise(unwrap_versioned_comments(query))
    first = next(iter(sqlglot.tokenize(text, read="mysql")), None)
    if first is not None and first.text.upper() == "RENAME":  # RENAME TABLE: not in sqlglot's grammar
        return exp.Command(this="RENAME", expression=exp.Literal.string(text))
    statements = [s for s in sqlglot.parse(text, read="mysql") if s is not None]
    if not statements:
        return None
    if len(statements) > 1:
        raise DDLUnsupportedError("more than one statement")
    return statements[0]


def column_renames(query: str) -> list[tuple[str, str]]:
    """(old, new) of each column an ALTER TABLE renames (``RENAME COLUMN a TO b``, ``CHANGE a b ...``), in order.

    [] for other statements and for text sqlglot cannot read (a sink then sees a drop and an add).
    """
    from sqlglot import exp  # noqa: PLC0415

    try:
        tree = _parse(query)
    except Exception:  # unreadable DDL: no rename is claimed
        return []
    if not isinstance(tree, exp.Alter):
        return []
    out: list[tuple[str, str]] = []
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.RenameColumn):
            out.append((_ident(action.this), _ident(action.args["to"])))
        elif isinstance(action, exp.ModifyColumn) and action.args.get("rename_from") is not None:
            old, new = _ident(action.args["rename_from"]), _ident(action.this.this)
            if old != new:
                out.append((old, new))
    return out


def unwrap_versioned_comments(query: str) -> str:
    """MySQL runs the body of ``/*!NNNNN ... */`` (MariaDB also ``/*M!NNNNN ... */``): make it plain text.

    A small lexer, not a pattern: quotes (with backslash escapes and doubled quotes) and ordinary
    comments are skipped as the server's lexer skips them, so a ``/*!`` inside a string stays.
    """
    if "/*" not in query:
        return query
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch in "'\"`":
            j = i + 1
            while j < n:
                if query[j] == "\\" and ch != "`":
                    j += 2
                    continue
                if query[j] == ch:
                    if j + 1 < n and query[j + 1] == ch:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            out.append(query[i : j + 1])
            i = j + 1
            continue
        if query.startswith("/*!", i) or query.startswith("/*M!", i):
            j = i + (3 if query[i + 2] == "!" else 4)
            while j < n and query[j].isdigit():
                j += 1
            end = query.find("*/", j)
            if end < 0:
                raise DDLUnsupportedError("unterminated /*! comment")
            out.append(" " + unwrap_versioned_comments(query[j:end]) + " ")
            i = end + 2
            continue
        if query.startswith("/*", i):
            end = query.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(query[i:end])
            i = end
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _normalise(text: str) -> str:
    """Drop the MariaDB/MySQL words sqlglot's grammar lacks and that change nothing for keys.

    ``ALTER ONLINE|IGNORE TABLE`` and ``ADD ... IF NOT EXISTS`` inside ALTER TABLE (the catalog
    treats adding an index or column that exists as a no-op anyway). Works on sqlglot's tokens,
    cutting the original text at their offsets, so names and strings are untouched.
    """
    tokens = list(_sqlglot().tokenize(text, read="mysql"))
    if not tokens or tokens[0].text.upper() != "ALTER":
        return text
    drop: list[tuple[int, int]] = []
    if len(tokens) > 1 and tokens[1].text.upper() in ("ONLINE", "IGNORE", "OFFLINE"):
        drop.append((tokens[1].start, tokens[1].end + 1))
    depth = 0
    after_add = False
    for k, tok in enumerate(tokens):
        word = tok.text.upper()
        if word == "(":
            depth += 1
        elif word == ")":
            depth -= 1
        if depth:
            continue
        if word == "ADD":
            after_add = True
        elif word == ",":
            after_add = False
        elif (
            after_add
            and word == "IF"
            and k + 2 < len(tokens)
            and tokens[k + 1].text.upper() == "NOT"
            and tokens[k + 2].text.upper() == "EXISTS"
        ):
            drop.append((tok.start, tokens[k + 2].end + 1))
            after_add = False
    if not drop:
        return text
    out, last = [], 0
    for start, end in drop:
        out.append(text[last:start])
        out.append(" ")
        last = end
    out.append(text[last:])
    return "".join(out)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _warn(query: str, default_schema: str, reason: str, where: str | None) -> bool:
    """Log a statement about a table that was not understood (True); others are only debug-logged."""
    from .ddl import ddl_tables  # noqa: PLC0415

    if not ddl_tables(query, default_schema)[0][1]:
        log.debug("statement names no table; nothing to learn query=%r", _clip(query))
        return False  # GRANT, ALTER DATABASE, ...: nothing a table's keys depend on
    why, text = _clip(reason), _clip(" ".join(query.split()))
    log.warning(
        "DDL not understood; keeping what was known of its table reason=%r schema=%r query=%r where=%s",
        why,
        default_schema,
        text,
        where or "-",
        extra={
            "event": "ddl_not_understood",
            "reason": why,
            "ddl_schema": default_schema,
            "query": text,
            "where": where,
        },
    )
    return True


def _ident(e: Any) -> str:
    """The unquoted name of an identifier-like node (`a``b` -> a`b)."""
    this = e.this if hasattr(e, "this") else e
    if hasattr(this, "this") and not isinstance(this, str):
        this = this.this
    return str(this)


def _table_name(t: Any, default_schema: str) -> TableName:
    db = t.args.get("db")
    return (_ident(db) if db is not None else default_schema, _ident(t.this))


def _key_columns(parts: Iterable[Any]) -> list[str] | None:
    """Column names of index key parts; None for an index with a functional part (left out)."""
    from sqlglot import exp  # noqa: PLC0415

    names: list[str] = []
    for part in parts:
        p = part.this if isinstance(part, exp.Ordered) else part
        if isinstance(p, exp.Column) and not p.args.get("table"):
            names.append(_ident(p.this))
        elif isinstance(p, exp.Identifier):
            names.append(p.name)
        elif isinstance(p, exp.ColumnPrefix):
            names.append(_ident(p.this))
        elif (
            isinstance(p, exp.Anonymous)  # `b(10)` in CREATE INDEX: a prefix (an expression needs ((...)))
            and len(p.expressions) == 1
            and isinstance(p.expressions[0], exp.Literal)
            and not p.expressions[0].is_string
        ):
            names.append(p.this.name if isinstance(p.this, exp.Identifier) else str(p.this))
        else:
            return None
    return names or None


def _unique_name(t: _Table, first_column: str) -> str:
    taken = {x.name.lower() for x in t.indexes}
    if first_column.lower() not in taken and first_column.lower() != "primary":
        return first_column
    n = 2
    while f"{first_column}_{n}".lower() in taken:
        n += 1
    return f"{first_column}_{n}"


def _add_index(t: _Table, name: str | None, columns: list[str], *, unique: bool, primary: bool) -> None:
    resolved = []
    for c in columns:
        pos = t.col(c)
        if pos is None:
            raise _ContradictionError(f"index over unknown column {c!r}")
        resolved.append(t.columns[pos].name)
    if primary:
        if any(x.primary for x in t.indexes):
            return
        for c in resolved:
            pos = t.col(c)
            assert pos is not None
            t.columns[pos] = replace(t.columns[pos], nullable=False)  # PRIMARY KEY columns are NOT NULL
        t.indexes.append(Index("PRIMARY", tuple(resolved), primary=True))
        return
    if name is not None and t.index_pos(name) is not None:
        return  # ADD ... IF NOT EXISTS of an index that exists (otherwise the server refused it)
    t.indexes.append(Index(name or _unique_name(t, resolved[0]), tuple(resolved), unique=unique))


def _column_def(cd: Any) -> tuple[ColumnDef, list[tuple[bool, bool]]]:
    """A ColumnDef node -> (column, inline keys as (unique, primary))."""
    from sqlglot import exp  # noqa: PLC0415

    name = _ident(cd.this)
    nullable = True
    keys: list[tuple[bool, bool]] = []
    for c in cd.args.get("constraints") or ():
        kind = c.args.get("kind") if isinstance(c, exp.ColumnConstraint) else c
        if isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            keys.append((True, True))
            nullable = False
        elif isinstance(kind, exp.UniqueColumnConstraint):
            keys.append((True, False))
    decimal = None
    dtype = cd.args.get("kind")
    if isinstance(dtype, exp.DataType) and dtype.this in (exp.DataType.Type.DECIMAL, exp.DataType.Type.UDECIMAL):
        params = [int(p.this.this) if isinstance(p, exp.DataTypeParam) else int(p.this) for p in dtype.expressions]
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        decimal = (precision, scale)
    return ColumnDef(name, nullable, decimal), keys


def _table_from_schema(schema: Any) -> _Table:
    from sqlglot import exp  # noqa: PLC0415

    t = _Table([])
    inline: list[tuple[str, bool, bool]] = []
    table_keys: list[Any] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            col, keys = _column_def(item)
            if t.col(col.name) is not None:
                raise _ContradictionError(f"column {col.name!r} twice")
            t.columns.append(col)
            inline.extend((col.name, unique, primary) for unique, primary in keys)
        else:
            table_keys.append(item)
    for item in table_keys:
        _constraint(t, item)
    for name, unique, primary in inline:  # TiDB appends column-level keys after the table's
        _add_index(t, None, [name], unique=unique, primary=primary)
    return t


def _constraint(t: _Table, item: Any, name: str | None = None) -> None:
    """One table-level key/constraint (CREATE TABLE body or ALTER TABLE ADD)."""
    from sqlglot import exp  # noqa: PLC0415

    if isinstance(item, exp.Constraint):
        for sub in item.expressions:
            _constraint(t, sub, _ident(item.this))
        return
    if isinstance(item, exp.PrimaryKey):
        cols = _key_columns(item.expressions)
        if cols is not None:
            _add_index(t, None, cols, unique=True, primary=True)
        return
    if isinstance(item, exp.UniqueColumnConstraint):
        target = item.this
        if isinstance(target, exp.Schema):
            cols = _key_columns(target.expressions)
            own = _ident(target.this) if target.this is not None else None
        else:
            raise DDLUnsupportedError("UNIQUE without a column list")
        if cols is not None:
            _add_index(t, own or name, cols, unique=True, primary=False)
        return
    if isinstance(item, exp.IndexColumnConstraint):
        cols = _key_columns(item.expressions)
        own = _ident(item.this) if item.this is not None else None
        if cols is not None:
            _add_index(t, own or name, cols, unique=False, primary=False)
        return
    if isinstance(item, exp.ForeignKey):
        # InnoDB adds an index for the referencing columns unless one already starts with them.
        cols = _key_columns(item.expressions)
        if cols is None:
            return
        low = [c.lower() for c in cols]
        if not any([c.lower() for c in x.columns[: len(low)]] == low for x in t.indexes):
            _add_index(t, name, cols, unique=False, primary=False)
        return
    if isinstance(item, exp.CheckColumnConstraint | exp.Check):
        return
    raise DDLUnsupportedError(f"table element {type(item).__name__} is not modelled")


def _check_action(action: Any) -> None:
    """Refuse an ALTER clause that `_alter_action` would refuse (for tables not known)."""
    _alter_action(_Table([]), action, dry=True)


def _place(t: _Table, col: ColumnDef, position: Any, old_pos: int | None) -> None:
    """Insert ``col`` at an ADD/MODIFY/CHANGE position (FIRST, AFTER x, or the end / where it was)."""
    where = str(position.args.get("position") or "").upper() if position is not None else ""
    if old_pos is not None:
        del t.columns[old_pos]
    if where == "FIRST":
        t.columns.insert(0, col)
    elif where == "AFTER":
        after = t.col(_ident(position.this))
        if after is None:
            raise _ContradictionError("AFTER an unknown column")
        t.columns.insert(after + 1, col)
    elif old_pos is not None:
        t.columns.insert(old_pos, col)
    else:
        t.columns.append(col)


def _rename_in_indexes(t: _Table, old: str, new: str) -> None:
    low = old.lower()
    t.indexes = [
        replace(x, columns=tuple(new if c.lower() == low else c for c in x.columns))
        if low in map(str.lower, x.columns)
        else x
        for x in t.indexes
    ]


def _alter_action(t: _Table, action: Any, dry: bool = False) -> None:  # noqa: C901  (per-clause switch: one branch per MySQL ALTER TABLE clause kind)
    from sqlglot import exp  # noqa: PLC0415

    if isinstance(action, exp.AddConstraint):
        for item in action.expressions:
            if dry:
                if not isinstance(
                    item,
                    exp.Constraint
                    | exp.PrimaryKey
                    | exp.UniqueColumnConstraint
                    | exp.IndexColumnConstraint
                    | exp.ForeignKey
                    | exp.CheckColumnConstraint
                    | exp.Check,
                ):
                    raise DDLUnsupportedError(f"table element {type(item).__name__} is not modelled")
                continue
            _constraint(t, item)
        return
    if isinstance(action, exp.ColumnDef):  # ADD [COLUMN]
        if dry:
            return
        col, keys = _column_def(action)
        if t.col(col.name) is not None:
            return  # ADD COLUMN IF NOT EXISTS of a column that exists
        _place(t, col, action.args.get("position"), None)
        for unique, primary in keys:
            _add_index(t, None, [col.name], unique=unique, primary=primary)
        return
    if isinstance(action, exp.ModifyColumn):  # MODIFY a ... / CHANGE a b ...
        if dry:
            return
        cd = action.this
        col, keys = _column_def(cd)
        old_name = _ident(action.args["rename_from"]) if action.args.get("rename_from") is not None else col.name
        pos = t.col(old_name)
        if pos is None:
            raise _ContradictionError(f"MODIFY/CHANGE of unknown column {old_name!r}")
        if any(x.primary and old_name.lower() in map(str.lower, x.columns) for x in t.indexes):
            col = replace(col, nullable=False)
        _rename_in_indexes(t, t.columns[pos].name, col.name)
        _place(t, col, cd.args.get("position"), pos)
        for unique, primary in keys:
            _add_index(t, None, [col.name], unique=unique, primary=primary)
        return
    if isinstance(action, exp.RenameColumn):
        if dry:
            return
        old, new = _ident(action.this), _ident(action.args["to"])
        pos = t.col(old)
        if pos is None:
            raise _ContradictionError(f"RENAME COLUMN of unknown column {old!r}")
        _rename_in_indexes(t, t.columns[pos].name, new)
        t.columns[pos] = replace(t.columns[pos], name=new)
        return
    if isinstance(action, exp.Drop):
        kind = str(action.args.get("kind") or "").upper()
        if kind not in ("INDEX", "KEY", "CONSTRAINT", "COLUMN", "FOREIGN KEY", "CHECK"):
            raise DDLUnsupportedError(f"DROP {kind or '?'} is not modelled")
        if dry:
            return
        for target in action.args.get("tables") or ():
            name = _ident(target.this) if isinstance(target, exp.Column | exp.Table) else target.name
            if kind == "COLUMN":
                pos = t.col(name)
                if pos is None:
                    if action.args.get("exists"):
                        continue
                    raise _ContradictionError(f"DROP COLUMN of unknown column {name!r}")
                real = t.columns[pos].name.lower()
                del t.columns[pos]
                # MySQL removes the column from its indexes and drops an index left without columns.
                kept = []
                for x in t.indexes:
                    cols = tuple(c for c in x.columns if c.lower() != real)
                    if cols:
                        kept.append(replace(x, columns=cols) if cols != x.columns else x)
                t.indexes = kept
            elif kind in ("INDEX", "KEY", "CONSTRAINT"):
                pos = t.index_pos(name)
                if pos is not None:  # DROP INDEX `PRIMARY` drops the primary key
                    del t.indexes[pos]
            # FOREIGN KEY (its index stays) and CHECK change no index
        return
    if isinstance(action, exp.DropPrimaryKey):
        if not dry:
            t.indexes = [x for x in t.indexes if not x.primary]
        return
    if isinstance(action, exp.RenameIndex):
        if dry:
            return
        pos = t.index_pos(_ident(action.this))
        if pos is None:
            raise _ContradictionError("RENAME INDEX of an unknown index")
        t.indexes[pos] = replace(t.indexes[pos], name=_ident(action.args["to"]))
        return
    if isinstance(action, exp.AlterColumn | exp.AlterIndex | exp.ForceProperty):
        return  # defaults, visibility, a rebuild: no key or precision change
    raise DDLUnsupportedError(f"ALTER TABLE clause {type(action).__name__} is not modelled")


# ---------------------------------------------------------------------------------------------- applying


def keys_for(ts: TableSchema, tdef: TableDef | None) -> tuple[TableSchema, str | None]:
    """``ts`` with the indexes of ``tdef`` (binlog TABLE_MAP schemas have the primary key only).

    Applied only when the definition agrees with ``ts``: the same column names in the same order
    (case-insensitive) and the same primary key (or, for a table without one, the unique key MySQL
    promotes to primary, which TiDB and so TiCDC keep a unique key); otherwise ``ts`` comes back
    unchanged with the reason, and nothing is guessed.
    """
    if tdef is None:
        return ts, None
    names = [c.name for c in ts.columns]
    if [n.lower() for n in names] != [c.name.lower() for c in tdef.columns]:
        return ts, "its columns differ from the last CREATE/ALTER TABLE seen"
    real = {n.lower(): n for n in names}
    indexes = tuple(replace(x, columns=tuple(real[c.lower()] for c in x.columns)) for x in tdef.indexes)
    have_pk = next((x.columns for x in ts.indexes if x.primary), ())
    want_pk = next((x.columns for x in indexes if x.primary), ())
    # MySQL/MariaDB promote the first NOT NULL unique key of a table without a primary key to its
    # primary key, and the binlog reports it as such; TiDB keeps it a unique key (the handle key).
    promoted = not want_pk and any(x.unique and x.columns == have_pk for x in indexes)
    if have_pk != want_pk and not promoted:
        return ts, "its primary key differs from the last CREATE/ALTER TABLE seen"
    if not indexes or indexes == ts.indexes:
        return ts, None
    return replace(ts, indexes=indexes), None


def decimals_for(ts: TableSchema, tdef: TableDef | None) -> TableSchema:
    """``ts`` with (precision, scale) on DECIMAL columns that lack them (Open Protocol), from ``tdef``."""
    if tdef is None:
        return ts
    known = tdef.decimals()
    columns = list(ts.columns)
    changed = False
    for i, c in enumerate(columns):
        if c.type_code is TypeCode.DECIMAL and c.length is None:
            ps = known.get(c.name.lower())
            if ps is not None:
                columns[i] = replace(c, length=ps[0], decimal=ps[1])
                changed = True
    return replace(ts, columns=tuple(columns)) if changed else ts


__all__ = ["ColumnDef", "DDLCatalog", "DDLUnsupportedError", "TableDef", "decimals_for", "keys_for"]
