"""The canonical event model: everything else in changefeed speaks these types."""

from .ddl import ActionType, classify_ddl, ddl_kind
from .events import DDLEvent, Event, Op, Position, Resolved, RowChange
from .schema import Column, Index, TableSchema
from .tso import CommitClock, compose_tso, tso_logical, tso_physical_ms
from .types import (
    ColumnFlag,
    JavaSQLType,
    TypeCode,
    java_sql_type,
    mysql_type_string,
    parse_type_name,
    type_name,
)
from .values import ABSENT, canonical_text, check_value

__all__ = [
    "ABSENT",
    "ActionType",
    "Column",
    "ColumnFlag",
    "CommitClock",
    "DDLEvent",
    "Event",
    "Index",
    "JavaSQLType",
    "Op",
    "Position",
    "Resolved",
    "RowChange",
    "TableSchema",
    "TypeCode",
    "canonical_text",
    "check_value",
    "classify_ddl",
    "compose_tso",
    "ddl_kind",
    "java_sql_type",
    "mysql_type_string",
    "parse_type_name",
    "tso_logical",
    "tso_physical_ms",
    "type_name",
]
