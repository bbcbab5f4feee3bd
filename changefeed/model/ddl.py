"""DDL kinds: TiDB ActionType numbers (Open Protocol ``"t"``) and Canal/Simple event types.

MySQL binlog QUERY events carry only SQL text, so `classify_ddl` derives the ActionType from the
statement the way TiDB's parser would bucket it; it reads only the leading keywords.
"""

from __future__ import annotations

import re
from enum import IntEnum


class ActionType(IntEnum):
    """TiDB ``model.ActionType`` (seed 000's DDL type table, spec §1.8)."""

    NONE = 0
    CREATE_SCHEMA = 1
    DROP_SCHEMA = 2
    CREATE_TABLE = 3
    DROP_TABLE = 4
    ADD_COLUMN = 5
    DROP_COLUMN = 6
    ADD_INDEX = 7
    DROP_INDEX = 8
    ADD_FOREIGN_KEY = 9
    DROP_FOREIGN_KEY = 10
    TRUNCATE_TABLE = 11
    MODIFY_COLUMN = 12
    REBASE_AUTO_ID = 13
    RENAME_TABLE = 14
    SET_DEFAULT_VALUE = 15
    SHARD_ROW_ID = 16
    MODIFY_TABLE_COMMENT = 17
    RENAME_INDEX = 18
    ADD_TABLE_PARTITION = 19
    DROP_TABLE_PARTITION = 20
    CREATE_VIEW = 21
    MODIFY_TABLE_CHARSET_AND_COLLATE = 22
    TRUNCATE_TABLE_PARTITION = 23
    DROP_VIEW = 24
    RECOVER_TABLE = 25
    MODIFY_SCHEMA_CHARSET_AND_COLLATE = 26
    LOCK_TABLE = 27
    UNLOCK_TABLE = 28
    REPAIR_TABLE = 29
    SET_TIFLASH_REPLICA = 30
    UPDATE_TIFLASH_REPLICA_STATUS = 31
    ADD_PRIMARY_KEY = 32
    DROP_PRIMARY_KEY = 33
    CREATE_SEQUENCE = 34
    ALTER_SEQUENCE = 35
    DROP_SEQUENCE = 36
    MODIFY_TABLE_AUTO_ID_CACHE = 37
    REBASE_AUTO_RANDOM_BASE = 38
    ALTER_INDEX_VISIBILITY = 39
    EXCHANGE_TABLE_PARTITION = 40
    ADD_CHECK_CONSTRAINT = 41
    DROP_CHECK_CONSTRAINT = 42
    ALTER_CHECK_CONSTRAINT = 43
    RENAME_TABLES = 55
    MODIFY_SCHEMA_DEFAULT_PLACEMENT = 58
    ALTER_TABLE_PARTITIONING = 59
    MULTI_SCHEMA_CHANGE = 61
    REORGANIZE_PARTITION = 62
    REMOVE_PARTITIONING = 64


# Canal-JSON / Simple DDL event type per ActionType (spec §2.7; Simple also counts exchange
# partition as ALTER). Anything unlisted is QUERY.
_CANAL_KIND: dict[int, str] = {
    ActionType.CREATE_TABLE: "CREATE",
    ActionType.RENAME_TABLE: "RENAME",
    ActionType.RENAME_TABLES: "RENAME",
    ActionType.ADD_INDEX: "CINDEX",
    ActionType.ADD_FOREIGN_KEY: "CINDEX",
    ActionType.ADD_PRIMARY_KEY: "CINDEX",
    ActionType.DROP_INDEX: "DINDEX",
    ActionType.DROP_FOREIGN_KEY: "DINDEX",
    ActionType.DROP_PRIMARY_KEY: "DINDEX",
    ActionType.DROP_TABLE: "ERASE",
    ActionType.TRUNCATE_TABLE: "TRUNCATE",
    **{
        a: "ALTER"
        for a in (
            ActionType.ADD_COLUMN,
            ActionType.DROP_COLUMN,
            ActionType.MODIFY_COLUMN,
            ActionType.REBASE_AUTO_ID,
            ActionType.SET_DEFAULT_VALUE,
            ActionType.MODIFY_TABLE_COMMENT,
            ActionType.RENAME_INDEX,
            ActionType.ADD_TABLE_PARTITION,
            ActionType.DROP_TABLE_PARTITION,
            ActionType.TRUNCATE_TABLE_PARTITION,
            ActionType.REORGANIZE_PARTITION,
            ActionType.MODIFY_TABLE_CHARSET_AND_COLLATE,
            ActionType.ALTER_INDEX_VISIBILITY,
            ActionType.MULTI_SCHEMA_CHANGE,
            ActionType.ALTER_TABLE_PARTITIONING,
            ActionType.REMOVE_PARTITIONING,
        )
    },
}

DDL_KINDS = ("CREATE", "RENAME", "CINDEX", "DINDEX", "ERASE", "TRUNCATE", "ALTER", "QUERY")


def ddl_kind(action: int, simple: bool = False) -> str:
    """The Canal-JSON (or, with ``simple``, the Simple protocol) DDL ``type`` for an ActionType."""
    if simple and action == ActionType.EXCHANGE_TABLE_PARTITION:
        return "ALTER"
    return _CANAL_KIND.get(int(action), "QUERY")


_COMMENT = re.compile(r"/\*(?!!).*?\*/|--[^\n]*\n|#[^\n]*\n", re.S)
_VERSIONED = re.compile(r"/\*!\d*\s?(.*?)\*/", re.S)
_IDENT = r"(?:`(?:[^`]|``)*`|[\w$]+)"
_ALTER_CLAUSES: tuple[tuple[str, ActionType], ...] = (
    (r"add\s+(?:constraint\s+\S+\s+)?primary\s+key", ActionType.ADD_PRIMARY_KEY),
    (r"drop\s+primary\s+key", ActionType.DROP_PRIMARY_KEY),
    (r"add\s+(?:constraint\s+\S+\s+)?foreign\s+key", ActionType.ADD_FOREIGN_KEY),
    (r"drop\s+foreign\s+key", ActionType.DROP_FOREIGN_KEY),
    (
        r"add\s+(?:constraint\s+\S+\s+)?(?:unique\s+|fulltext\s+|spatial\s+)?(?:index|key)\b",
        ActionType.ADD_INDEX,
    ),
    (r"add\s+(?:constraint\s+\S+\s+)?unique\b", ActionType.ADD_INDEX),
    (r"drop\s+(?:index|key)\b", ActionType.DROP_INDEX),
    (r"rename\s+(?:index|key)\b", ActionType.RENAME_INDEX),
    (r"rename\s+(?:column)\b", ActionType.MODIFY_COLUMN),
    (r"rename\s+(?:to|as)?\s*" + _IDENT, ActionType.RENAME_TABLE),
    (r"add\s+partition", ActionType.ADD_TABLE_PARTITION),
    (r"drop\s+partition", ActionType.DROP_TABLE_PARTITION),
    (r"truncate\s+partition", ActionType.TRUNCATE_TABLE_PARTITION),
    (r"exchange\s+partition", ActionType.EXCHANGE_TABLE_PARTITION),
    (r"reorganize\s+partition", ActionType.REORGANIZE_PARTITION),
    (r"remove\s+partitioning", ActionType.REMOVE_PARTITIONING),
    (r"partition\s+by", ActionType.ALTER_TABLE_PARTITIONING),
    (r"add\b", ActionType.ADD_COLUMN),
    (r"drop\s+(?:column\s+)?" + _IDENT, ActionType.DROP_COLUMN),
    (r"(?:modify|change)\b", ActionType.MODIFY_COLUMN),
    (r"alter\s+(?:column\s+)?" + _IDENT + r"\s+(?:set|drop)\s+default", ActionType.SET_DEFAULT_VALUE),
    (r"alter\s+index", ActionType.ALTER_INDEX_VISIBILITY),
    (
        r"(?:default\s+)?(?:character\s+set|charset|collate|convert\s+to)\b",
        ActionType.MODIFY_TABLE_CHARSET_AND_COLLATE,
    ),
    (r"comment\b", ActionType.MODIFY_TABLE_COMMENT),
    (r"auto_increment\b", ActionType.REBASE_AUTO_ID),
)


def strip_comments(query: str) -> str:
    """Drop SQL comments, keeping the body of MySQL ``/*!NNNNN ... */`` versioned comments."""
    return _COMMENT.sub(" ", _VERSIONED.sub(r"\1", query + "\n")).strip()


def _split_top_level_commas(text: str) -> list[str]:
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def classify_ddl(query: str) -> ActionType:  # noqa: C901  (keyword switch: TiDB's ActionType per DDL verb and object)
    """ActionType of a DDL statement, from its leading keywords (MySQL/MariaDB/TiDB syntax).

    ALTER TABLE with several clauses of different kinds is MULTI_SCHEMA_CHANGE, as in TiDB.
    Statements that are not DDL return ``ActionType.NONE``.
    """
    text = strip_comments(query).lower()
    m = re.match(r"(create|drop|alter|rename|truncate|recover|lock|unlock|repair)\s+(.*)", text, re.S)
    if not m:
        return ActionType.NONE
    verb, rest = m.groups()
    rest = re.sub(r"^(?:or\s+replace\s+|temporary\s+|online\s+|offline\s+|ignore\s+)+", "", rest)
    rest = re.sub(r"^(?:algorithm\s*=\s*\w+\s+|definer\s*=\s*\S+\s+|sql\s+security\s+\w+\s+)+", "", rest)
    obj = rest.split(None, 1)[0] if rest else ""
    if verb == "create":
        if obj in ("database", "schema"):
            return ActionType.CREATE_SCHEMA
        if obj == "table":
            return ActionType.CREATE_TABLE
        if obj == "view":
            return ActionType.CREATE_VIEW
        if obj == "sequence":
            return ActionType.CREATE_SEQUENCE
        if re.match(r"(?:unique\s+|fulltext\s+|spatial\s+)?index\b", rest):
            return ActionType.ADD_INDEX
        return ActionType.NONE
    if verb == "drop":
        return {
            "database": ActionType.DROP_SCHEMA,
            "schema": ActionType.DROP_SCHEMA,
            "table": ActionType.DROP_TABLE,
            "view": ActionType.DROP_VIEW,
            "sequence": ActionType.DROP_SEQUENCE,
            "index": ActionType.DROP_INDEX,
        }.get(obj, ActionType.NONE)
    if verb == "rename":
        return ActionType.RENAME_TABLE if obj == "table" else ActionType.NONE
    if verb == "truncate":
        return ActionType.TRUNCATE_TABLE
    if verb == "recover":
        return ActionType.RECOVER_TABLE
    if verb in ("lock", "unlock"):
        return ActionType.LOCK_TABLE if verb == "lock" else ActionType.UNLOCK_TABLE
    if verb == "repair":
        return ActionType.REPAIR_TABLE
    # ALTER
    if obj in ("database", "schema"):
        return ActionType.MODIFY_SCHEMA_CHARSET_AND_COLLATE
    if obj == "sequence":
        return ActionType.ALTER_SEQUENCE
    if obj != "table":
        return ActionType.NONE
    m = re.match(r"table\s+" + _IDENT + r"(?:\s*\.\s*" + _IDENT + r")?\s*(.*)", rest, re.S)
    body = m.group(1) if m else ""
    kinds = {_alter_clause_kind(clause) for clause in _split_top_level_commas(body)}
    kinds.discard(ActionType.NONE)
    if len(kinds) == 1:
        return kinds.pop()
    return ActionType.MULTI_SCHEMA_CHANGE if kinds else ActionType.NONE


def _alter_clause_kind(clause: str) -> ActionType:
    for pattern, action in _ALTER_CLAUSES:
        if re.match(pattern, clause):
            return action
    return ActionType.NONE


# ------------------------------------------------------------------ DDL targets: which tables a statement names

_QNAME = rf"({_IDENT})(?:\s*\.\s*({_IDENT}))?"
_TABLE_DDL = re.compile(
    r"^\s*(?:create|alter|drop|truncate)\s+(?:(?:or\s+replace|temporary|online|offline|ignore|if\s+not\s+exists"
    r"|if\s+exists)\s+)*(?:table\s+)?(?:(?:if\s+not\s+exists|if\s+exists)\s+)?" + _QNAME,
    re.I | re.S,
)
_INDEX_DDL = re.compile(
    rf"^\s*(?:create\s+(?:or\s+replace\s+)?(?:unique\s+|fulltext\s+|spatial\s+)?index|drop\s+index)\s+"
    rf"(?:if\s+(?:not\s+)?exists\s+)?{_IDENT}\s+on\s+" + _QNAME,
    re.I | re.S,
)
_SCHEMA_DDL = re.compile(
    rf"^\s*(?:create|drop|alter)\s+(?:database|schema)\s+(?:if\s+(?:not\s+)?exists\s+)?({_IDENT})?", re.I | re.S
)
_RENAME = re.compile(rf"{_QNAME}\s+to\s+{_QNAME}", re.I | re.S)
_ALTER_RENAME = re.compile(rf"\brename\s+(?:to\s+|as\s+)?{_QNAME}\s*$", re.I | re.S)
_VIEW_DDL = re.compile(
    rf"^\s*(?:create|alter|drop)\s+(?:or\s+replace\s+)?(?:algorithm\s*=\s*\w+\s+)?(?:definer\s*=\s*\S+\s+)?"
    rf"(?:sql\s+security\s+\w+\s+)?view\s+(?:if\s+(?:not\s+)?exists\s+)?{_QNAME}",
    re.I | re.S,
)


def quote_ident(name: str) -> str:
    """A backquoted identifier, embedded backquotes doubled (MySQL identifier quoting)."""
    return "`" + name.replace("`", "``") + "`"


def quote_table(schema: str, table: str) -> str:
    """``schema.table`` quoted; a table without schema alone."""
    return f"{quote_ident(schema)}.{quote_ident(table)}" if schema else quote_ident(table)


def unquote_ident(name: str | None) -> str:
    """`quote_ident` undone: ```a``b``` -> ``a`b``; an unquoted name as it is."""
    if not name:
        return ""
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _qualify(first: str, second: str | None, default_schema: str) -> tuple[str, str]:
    return (unquote_ident(first), unquote_ident(second)) if second else (default_schema, unquote_ident(first))


TableName = tuple[str, str]


def ddl_tables(query: str, default_schema: str) -> tuple[TableName, list[tuple[TableName, TableName]]]:
    """The (schema, table) a DDL names (the new name for renames) and every (old, new) rename pair.

    Schema-level statements give ``(schema, "")``. Only the leading names are read, as
    `classify_ddl` reads only the leading keywords.
    """
    text = strip_comments(query)
    renames: list[tuple[TableName, TableName]] = []
    if re.match(r"^\s*rename\s+tables?\s", text, re.I):
        body = re.sub(r"^\s*rename\s+tables?\s+", "", text, flags=re.I)
        for rm in _RENAME.finditer(body):
            renames.append(
                (_qualify(rm.group(1), rm.group(2), default_schema), _qualify(rm.group(3), rm.group(4), default_schema))
            )
        target = renames[-1][1] if renames else (default_schema, "")
        return target, renames
    m = _SCHEMA_DDL.match(text)
    if m:
        return (unquote_ident(m.group(1)) or default_schema, ""), renames
    m = _INDEX_DDL.match(text)
    if m:
        return _qualify(m.group(1), m.group(2), default_schema), renames
    m = _VIEW_DDL.match(text)
    if m:
        return _qualify(m.group(1), m.group(2), default_schema), renames
    m = _TABLE_DDL.match(text)
    if m:
        target = _qualify(m.group(1), m.group(2), default_schema)
        if re.match(r"^\s*alter\b", text, re.I):
            r = _ALTER_RENAME.search(text)
            if r:
                new = _qualify(r.group(1), r.group(2), default_schema)
                renames.append((target, new))
                target = new
        return target, renames
    return (default_schema, ""), renames
