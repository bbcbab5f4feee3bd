"""DDL text rewritten for table routing: table and schema names replaced, shard columns added.

DM and TiCDC both rewrite a routed DDL's names with a MySQL parser (DM's ``RenameDDLTable``,
TiCDC's ``ddl_routing``), never with patterns. Here sqlglot's MySQL dialect finds the names and
its tokens give their exact offsets, so only the name spans of the original text change: every
other clause (partitioning, MariaDB words, ``/*! */`` comments, charsets) is kept byte for byte,
which regenerating the statement from sqlglot's tree would not guarantee. Statements sqlglot
keeps as a raw ``Command`` (``RENAME TABLE``, some partitioning clauses) are read from its tokens:
their leading names (and every ``RENAME`` pair) are rewritten.

A rewritten name is always written qualified and backquoted (```schema`.`table```), so its
meaning does not depend on the session's current database downstream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ChangefeedError, clip
from ..model.ddl import quote_ident, quote_table

TableName = tuple[str, str]
NameMap = Callable[[str, str], TableName | None]
"""(schema, table) -> the routed name, or None to leave the name as it is written."""


class DDLRewriteError(ChangefeedError):
    """A routed DDL whose names cannot be found or rewritten safely."""


@dataclass(frozen=True, slots=True)
class NameSpan:
    """Where a table name is written in a statement: ``query[start:end + 1]``, and what it names."""

    start: int
    end: int
    name: TableName


def qualified(name: TableName) -> str:
    return quote_table(name[0], name[1])


def _sqlglot() -> Any:
    from ..model.ddlschema import _sqlglot as ready  # noqa: PLC0415 - sqlglot on first use, its fallback log filtered

    return ready()


def _tokens(text: str) -> list[Any]:
    try:
        return list(_sqlglot().tokenize(text, read="mysql"))
    except Exception as exc:  # sqlglot's TokenError on an unterminated quote or comment
        raise DDLRewriteError(f"cannot read DDL {clip(text)}: {exc}") from None


def _word(tok: Any) -> str:
    return str(tok.text).upper() if tok.token_type.name not in ("IDENTIFIER", "STRING") else ""


_PUNCTUATION = frozenset({"DOT", "COMMA", "L_PAREN", "R_PAREN", "SEMICOLON", "STRING", "NUMBER", "EQ"})


def _qname(tokens: list[Any], i: int, default_schema: str, offset: int) -> tuple[NameSpan, int] | None:
    """A (possibly qualified) name starting at token ``i``, and the index after it."""
    if i >= len(tokens) or tokens[i].token_type.name in _PUNCTUATION:
        return None
    first = tokens[i]
    if i + 2 < len(tokens) and tokens[i + 1].token_type.name == "DOT":
        second = tokens[i + 2]
        if second.token_type.name in _PUNCTUATION:
            return None
        return NameSpan(first.start + offset, second.end + offset, (str(first.text), str(second.text))), i + 3
    return NameSpan(first.start + offset, first.end + offset, (default_schema, str(first.text))), i + 1


def _skip_if_exists(tokens: list[Any], i: int) -> int:
    if i < len(tokens) and _word(tokens[i]) == "IF":
        i += 1
        if i < len(tokens) and _word(tokens[i]) == "NOT":
            i += 1
        if i < len(tokens) and _word(tokens[i]) == "EXISTS":
            i += 1
    return i


_LEADING_WORDS = frozenset({"OR", "REPLACE", "TEMPORARY", "ONLINE", "OFFLINE", "IGNORE"})


def _leading_spans(query: str, default_schema: str) -> list[NameSpan]:
    """The name after ``CREATE|ALTER|DROP|TRUNCATE [words] TABLE [IF [NOT] EXISTS]`` (statements sqlglot keeps raw)."""
    tokens = _tokens(query)
    if not tokens or _word(tokens[0]) not in ("CREATE", "ALTER", "DROP", "TRUNCATE"):
        return []
    i = 1
    while i < len(tokens) and _word(tokens[i]) in _LEADING_WORDS:
        i += 1
    if i < len(tokens) and _word(tokens[i]) == "TABLE":
        i += 1
    elif _word(tokens[0]) != "TRUNCATE":
        return []
    found = _qname(tokens, _skip_if_exists(tokens, i), default_schema, 0)
    return [found[0]] if found else []


def _rename_spans(query: str, default_schema: str) -> list[NameSpan]:
    """Every old and new name of ``RENAME TABLE a TO b, c TO d`` (not in sqlglot's grammar: read from tokens)."""
    at = query.upper().find("RENAME")
    offset = at + len("RENAME")
    tokens = _tokens(query[offset:])  # sqlglot's tokenizer swallows what follows a RENAME keyword whole
    if not tokens or _word(tokens[0]) not in ("TABLE", "TABLES"):
        raise DDLRewriteError(f"cannot read the names of {clip(query)}")
    out: list[NameSpan] = []
    i = 1
    while i < len(tokens):
        old = _qname(tokens, i, default_schema, offset)
        if old is None or old[1] >= len(tokens) or _word(tokens[old[1]]) != "TO":
            raise DDLRewriteError(f"cannot read the names of {clip(query)}")
        new = _qname(tokens, old[1] + 1, default_schema, offset)
        if new is None:
            raise DDLRewriteError(f"cannot read the names of {clip(query)}")
        out += [old[0], new[0]]
        i = new[1]
        if i < len(tokens) and tokens[i].token_type.name == "COMMA":
            i += 1
        elif i < len(tokens) and tokens[i].token_type.name != "SEMICOLON":
            raise DDLRewriteError(f"cannot read the names of {clip(query)}")
        else:
            break
    return out


def parse_statement(query: str) -> Any:
    """sqlglot's tree of one statement, or None where it keeps it raw or cannot parse it."""
    sqlglot = _sqlglot()
    from sqlglot import exp  # noqa: PLC0415

    try:
        statements = [s for s in sqlglot.parse(query, read="mysql") if s is not None]
    except Exception:  # ParseError/TokenError: the token reading below decides
        return None
    if len(statements) != 1 or isinstance(statements[0], exp.Command):
        return None
    return statements[0]


def table_spans(query: str, default_schema: str) -> list[NameSpan]:
    """Every table name a DDL statement writes, in text order (unqualified ones in ``default_schema``).

    Index names (``DROP INDEX i ON t``) and schema statements (``CREATE DATABASE``) name no table.
    """
    tokens = _tokens(query)
    if tokens and _word(tokens[0]) == "RENAME":
        return _rename_spans(query, default_schema)
    if len(tokens) > 1 and _word(tokens[1]) in ("DATABASE", "SCHEMA"):
        return []
    tree = parse_statement(query)
    if tree is None:
        return _leading_spans(query, default_schema)
    from sqlglot import exp  # noqa: PLC0415

    skip: set[int] = set()
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() == "INDEX":
        skip = {id(t) for t in tree.args.get("tables") or ()}
    out: list[NameSpan] = []
    for t in tree.find_all(exp.Table):
        if id(t) in skip:
            continue
        name, db = t.this, t.args.get("db")
        if t.args.get("catalog") is not None or not isinstance(name, exp.Identifier):
            raise DDLRewriteError(f"cannot rewrite the table names of {clip(query)}")
        if db is not None and not isinstance(db, exp.Identifier):
            raise DDLRewriteError(f"cannot rewrite the table names of {clip(query)}")
        first = db if db is not None else name
        if "start" not in first.meta or "end" not in name.meta:
            raise DDLRewriteError(f"cannot place the table names of {clip(query)}")
        schema = str(db.this) if db is not None else default_schema
        out.append(NameSpan(int(first.meta["start"]), int(name.meta["end"]), (schema, str(name.this))))
    out.sort(key=lambda s: s.start)
    return out


def schema_span(query: str) -> tuple[int, int, str] | None:
    """Where ``CREATE|DROP|ALTER DATABASE|SCHEMA [IF [NOT] EXISTS] name`` writes its name (None: no name)."""
    tokens = _tokens(query)
    if len(tokens) < 2 or _word(tokens[0]) not in ("CREATE", "DROP", "ALTER"):
        return None
    if _word(tokens[1]) not in ("DATABASE", "SCHEMA"):
        return None
    i = _skip_if_exists(tokens, 2)
    if i >= len(tokens) or tokens[i].token_type.name in _PUNCTUATION:
        return None
    if _word(tokens[i]) in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "READ"):
        return None  # ALTER DATABASE without a name: the current one
    return tokens[i].start, tokens[i].end, str(tokens[i].text)


def _splice(query: str, edits: Sequence[tuple[int, int, str]]) -> str:
    """``query`` with each ``[start, end]`` (inclusive) replaced; edits must not overlap."""
    out: list[str] = []
    last = 0
    for start, end, text in sorted(edits):
        if start < last:
            raise DDLRewriteError(f"overlapping edits in {clip(query)}")
        out += [query[last:start], text]
        last = end + 1
    out.append(query[last:])
    return "".join(out)


def rename_tables(query: str, default_schema: str, route: NameMap) -> tuple[str, list[NameSpan]]:
    """``query`` with every table name ``route`` maps replaced by its target; and the spans found."""
    spans = table_spans(query, default_schema)
    edits = []
    for span in spans:
        target = route(*span.name)
        if target is not None and target != span.name:
            edits.append((span.start, span.end, qualified(target)))
    return (_splice(query, edits) if edits else query), spans


def rename_schema(query: str, target: str) -> str:
    """A schema statement's name replaced by ``target`` (unchanged when it writes none)."""
    span = schema_span(query)
    if span is None or span[2] == target:
        return query
    return _splice(query, [(span[0], span[1], quote_ident(target))])


# ---------------------------------------------------------------------------------------------- shard columns

#: How an extracted column is declared (DM's extract-* columns hold names: MySQL names are at most 64 characters).
EXTRACT_COLUMN_TYPE = "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT ''"


def _matching(tokens: list[Any], i: int) -> int:
    """The index of the ``)`` closing the ``(`` at token ``i``."""
    depth = 0
    for j in range(i, len(tokens)):
        kind = tokens[j].token_type.name
        if kind == "L_PAREN":
            depth += 1
        elif kind == "R_PAREN":
            depth -= 1
            if depth == 0:
                return j
    raise DDLRewriteError("unbalanced parentheses")


def add_shard_columns(query: str, default_schema: str, columns: Sequence[str]) -> str:
    """``CREATE TABLE t (...)`` with ``columns`` added (`EXTRACT_COLUMN_TYPE`) and appended to every unique key.

    DM's extract-table/-schema/-source columns tell shards apart, so equal keys of different
    shards must not collide: the primary key and each UNIQUE key get the columns at their end. A
    column-level ``PRIMARY KEY`` / ``KEY`` / ``UNIQUE`` becomes a table-level key with them.
    """
    if not columns:
        return query
    tokens = _tokens(query)
    spans = _leading_spans(query, default_schema)
    if not spans or _word(tokens[0]) != "CREATE":
        raise DDLRewriteError(f"not a CREATE TABLE: {clip(query)}")
    open_at = next((k for k, t in enumerate(tokens) if t.start > spans[0].end), None)
    if open_at is None or tokens[open_at].token_type.name != "L_PAREN":
        raise DDLRewriteError(
            f"CREATE TABLE without a column list (LIKE or AS SELECT) cannot get the shard columns "
            f"{', '.join(columns)}; create the target table yourself: {clip(query)}"
        )
    close_at = _matching(tokens, open_at)
    lower = {c.lower() for c in columns}
    extra = ", ".join(quote_ident(c) for c in columns)
    edits: list[tuple[int, int, str]] = []
    keys: list[tuple[str, str]] = []  # (PRIMARY KEY | UNIQUE KEY, column) moved to table level
    item = open_at + 1
    while item < close_at:
        end = item
        while end < close_at and tokens[end].token_type.name != "COMMA":
            end = _matching(tokens, end) + 1 if tokens[end].token_type.name == "L_PAREN" else end + 1
        _shard_item(tokens, item, end, extra, lower, edits, keys)
        item = end + 1
    added = [f"{quote_ident(c)} {EXTRACT_COLUMN_TYPE}" for c in columns]
    added += [f"{kind} ({quote_ident(col)}, {extra})" for kind, col in keys]
    at = tokens[close_at].start
    edits.append((at, at - 1, ", " + ", ".join(added)))  # an insertion before the closing parenthesis
    return _splice(query, edits)


def _shard_item(
    tokens: list[Any],
    start: int,
    end: int,
    extra: str,
    lower: set[str],
    edits: list[tuple[int, int, str]],
    keys: list[tuple[str, str]],
) -> None:
    """One item of a CREATE TABLE body: extend a table-level unique key, or move a column's key out."""
    first = _word(tokens[start])
    i = start
    if first == "CONSTRAINT":  # CONSTRAINT [name] PRIMARY KEY | UNIQUE ...
        i += 1
        if i < end and _word(tokens[i]) not in ("PRIMARY KEY", "UNIQUE", "PRIMARY"):
            i += 1
        first = _word(tokens[i]) if i < end else ""
    if first in ("PRIMARY KEY", "PRIMARY", "UNIQUE"):
        paren = next((k for k in range(i, end) if tokens[k].token_type.name == "L_PAREN"), None)
        if paren is None:
            raise DDLRewriteError("a key without columns")
        close = _matching(tokens, paren)
        edits.append((tokens[close].start, tokens[close].start - 1, ", " + extra))
        return
    if first in ("KEY", "INDEX", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "CONSTRAINT", "PERIOD"):
        return
    column = str(tokens[start].text)
    if column.lower() in lower:
        raise DDLRewriteError(f"the table already has a column {column!r}, which routing would add for a shard")
    k = start + 1
    while k < end:
        kind, word = tokens[k].token_type.name, _word(tokens[k])
        if kind == "L_PAREN":
            k = _matching(tokens, k) + 1
            continue
        if word == "PRIMARY KEY" or (word == "KEY" and _word(tokens[k - 1]) not in ("UNIQUE",)):
            edits.append((tokens[k].start, tokens[k].end, " "))
            keys.append(("PRIMARY KEY", column))
        elif word == "UNIQUE":
            last = k + 1 if k + 1 < end and _word(tokens[k + 1]) == "KEY" else k
            edits.append((tokens[k].start, tokens[last].end, " "))
            keys.append(("UNIQUE KEY", column))
            k = last
        k += 1


__all__ = [
    "EXTRACT_COLUMN_TYPE",
    "DDLRewriteError",
    "NameSpan",
    "add_shard_columns",
    "qualified",
    "rename_schema",
    "rename_tables",
    "schema_span",
    "table_spans",
]
