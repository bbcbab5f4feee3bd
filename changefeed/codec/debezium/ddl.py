"""TiCDC's Debezium DDL message body (debezium.md §7): SchemaChangeKey/Value and ``tableChanges``.

What the model does not know is written as TiCDC writes it for a plain column: ``comment`` null
(TiCDC clears the comment of every column the statement names), ``autoIncremented`` and
``generated`` false, and the table's ``defaultCharsetName`` taken from its first text column.
"""

from __future__ import annotations

import re

from ...model import ActionType, Column, DDLEvent, TableSchema, TypeCode
from ...model.types import (
    BLOB_TYPES,
    DEFAULT_FLEN,
    ENUM_SET_TYPES,
    FLOAT_TYPES,
    FSP_TYPES,
    STRING_TYPES,
    UNSIGNED_DEFAULT_FLEN,
    type_name,
)
from ..gojson import jfloat64, jstr
from .values import NO_UNSIGNED_TYPES, bit_default, float_is_double

KEY_SCHEMA = (
    b'{"type":"struct","name":"io.debezium.connector.mysql.SchemaChangeKey","optional":false,"version":1,'
    b'"fields":[{"field":"databaseName","optional":false,"type":"string"}]}'
)
_VALUE_SCHEMA_HEAD = (
    b'{"optional":false,"type":"struct","version":1,"name":"io.debezium.connector.mysql.SchemaChangeValue","fields":['
)
_VALUE_SCHEMA_TAIL = (
    b',{"field":"ts_ms","optional":false,"type":"int64"},{"field":"databaseName","optional":true,"type":"string"},'
    b'{"field":"schemaName","optional":true,"type":"string"},{"field":"ddl","optional":true,"type":"string"},'
    b'{"field":"tableChanges","optional":false,"type":"array","items":{"name":"io.debezium.connector.schema.Change",'
    b'"optional":false,"type":"struct","version":1,"fields":[{"field":"type","optional":false,"type":"string"},'
    b'{"field":"id","optional":false,"type":"string"},{"field":"table","optional":true,"type":"struct",'
    b'"name":"io.debezium.connector.schema.Table","version":1,"fields":[{"field":"defaultCharsetName",'
    b'"optional":true,"type":"string"},{"field":"primaryKeyColumnNames","optional":true,"type":"array",'
    b'"items":{"type":"string","optional":false}},{"field":"columns","optional":false,"type":"array",'
    b'"items":{"name":"io.debezium.connector.schema.Column","optional":false,"type":"struct","version":1,'
    b'"fields":[{"field":"name","optional":false,"type":"string"},{"field":"jdbcType","optional":false,'
    b'"type":"int32"},{"field":"nativeType","optional":true,"type":"int32"},{"field":"typeName",'
    b'"optional":false,"type":"string"},{"field":"typeExpression","optional":true,"type":"string"},'
    b'{"field":"charsetName","optional":true,"type":"string"},{"field":"length","optional":true,'
    b'"type":"int32"},{"field":"scale","optional":true,"type":"int32"},{"field":"position","optional":false,'
    b'"type":"int32"},{"field":"optional","optional":true,"type":"boolean"},{"field":"autoIncremented",'
    b'"optional":true,"type":"boolean"},{"field":"generated","optional":true,"type":"boolean"},'
    b'{"field":"comment","optional":true,"type":"string"},{"field":"defaultValueExpression","optional":true,'
    b'"type":"string"},{"field":"enumValues","optional":true,"type":"array","items":{"type":"string",'
    b'"optional":false}}]}},{"field":"comment","optional":true,"type":"string"}]}]}}]}'
)

_A = ActionType
_CREATE = frozenset({_A.CREATE_SCHEMA, _A.CREATE_TABLE, _A.CREATE_VIEW})
_ALTER = frozenset(
    {
        _A.ADD_COLUMN,
        _A.MODIFY_COLUMN,
        _A.DROP_COLUMN,
        _A.MULTI_SCHEMA_CHANGE,
        _A.ADD_TABLE_PARTITION,
        _A.DROP_TABLE_PARTITION,
        _A.TRUNCATE_TABLE_PARTITION,
        _A.REORGANIZE_PARTITION,
        _A.EXCHANGE_TABLE_PARTITION,
        _A.ALTER_TABLE_PARTITIONING,
        _A.REMOVE_PARTITIONING,
        _A.REBASE_AUTO_ID,
        _A.SET_DEFAULT_VALUE,
        _A.MODIFY_TABLE_COMMENT,
        _A.MODIFY_TABLE_CHARSET_AND_COLLATE,
        _A.MODIFY_SCHEMA_CHARSET_AND_COLLATE,
        _A.ADD_INDEX,
        _A.ALTER_INDEX_VISIBILITY,
        _A.RENAME_INDEX,
        _A.RENAME_TABLE,
        _A.RENAME_TABLES,
        _A.ADD_PRIMARY_KEY,
        _A.DROP_PRIMARY_KEY,
    }
)
_DROP = frozenset({_A.DROP_SCHEMA, _A.DROP_TABLE, _A.DROP_INDEX, _A.DROP_VIEW, _A.TRUNCATE_TABLE})

# java.sql.Types per type (pingcap/ticdc common/java.go MySQLType2JdbcType), text/blob split by charset.
_JDBC: dict[TypeCode, int] = {
    TypeCode.TINYINT: 5,
    TypeCode.SMALLINT: 5,
    TypeCode.MEDIUMINT: 4,
    TypeCode.INT: 4,
    TypeCode.YEAR: 4,
    TypeCode.BIGINT: -5,
    TypeCode.FLOAT: 6,
    TypeCode.DOUBLE: 8,
    TypeCode.DECIMAL: 3,
    TypeCode.DATE: 91,
    TypeCode.NEWDATE: 91,
    TypeCode.TIME: 92,
    TypeCode.DATETIME: 93,
    TypeCode.TIMESTAMP: 2014,
    TypeCode.ENUM: 1,
    TypeCode.SET: 1,
    TypeCode.BIT: -7,
    TypeCode.JSON: 1111,
}
_DISPLAY_WIDTH = {
    TypeCode.TINYINT: 4,
    TypeCode.SMALLINT: 6,
    TypeCode.MEDIUMINT: 9,
    TypeCode.INT: 11,
    TypeCode.BIGINT: 20,
    TypeCode.BIT: 1,
    TypeCode.CHAR: 1,
    TypeCode.VARCHAR: 5,
    TypeCode.FLOAT: 12,
    TypeCode.DOUBLE: 22,
}
_CURRENT_TS = re.compile(r"(?i)\s*current_timestamp(?:\(\d?\))?\s*")


def change_type(action: int) -> str | None:
    """``tableChanges[].type`` of a DDL action; None: TiCDC sends no message for it."""
    if action in _CREATE:
        return "CREATE"
    if action in _ALTER:
        return "ALTER"
    if action in _DROP:
        return "DROP"
    return None


def value_schema(source: bytes) -> bytes:
    """SchemaChangeValue's schema around the ``source`` struct field (no start_ts in DDLs)."""
    return _VALUE_SCHEMA_HEAD + source + _VALUE_SCHEMA_TAIL


def _id(schema: str, table: str) -> str:
    return f'"{schema}"."{table}"'


def table_changes(ddl: DDLEvent, kind: str) -> bytes:
    """The ``tableChanges`` array: empty without a table name and for TRUNCATE TABLE."""
    if not ddl.table or ddl.ddl_type == ActionType.TRUNCATE_TABLE:
        return b"[]"
    ident = _id(ddl.schema, ddl.table)
    if ddl.ddl_type in (ActionType.RENAME_TABLE, ActionType.RENAME_TABLES) and ddl.pre_table_schema is not None:
        pre = ddl.pre_table_schema
        ident = _id(pre.schema, pre.table) + "," + ident  # old name first
    head = b'[{"type":"' + kind.encode() + b'","id":' + jstr(ident) + b',"table":'
    if ddl.ddl_type == ActionType.DROP_TABLE or ddl.table_schema is None:
        return head + b"null}]"
    return head + table_object(ddl.table_schema) + b"}]"


def table_object(ts: TableSchema) -> bytes:
    charset = next((c.charset for c in ts.columns if c.type_code in STRING_TYPES and not c.binary), "utf8mb4")
    pk = b",".join(jstr(ts.columns[i].name) for i in ts.primary_key)
    columns = b",".join(column_object(c, i + 1) for i, c in enumerate(ts.columns))
    return (
        b'{"defaultCharsetName":'
        + jstr(charset)
        + b',"primaryKeyColumnNames":['
        + pk
        + b'],"columns":['
        + columns
        + b'],"comment":null}'
    )


def _null_or(v: int | None) -> bytes:
    return b"null" if v is None else str(v).encode()


def _jdbc(col: Column) -> int:
    tc = col.type_code
    if tc in (TypeCode.CHAR,):
        return -2 if col.binary else 1
    if tc in (TypeCode.VARCHAR, TypeCode.VAR_STRING):
        return -3 if col.binary else 12
    if tc in BLOB_TYPES:
        return 2004 if col.binary else 12
    return _JDBC.get(tc, 12)


def _length(col: Column) -> int | None:
    tc = col.type_code
    if tc in FSP_TYPES:
        return col.decimal or 0  # fsp, 0 written as 0
    if tc in (TypeCode.YEAR, TypeCode.DECIMAL):
        return col.length if col.length is not None else DEFAULT_FLEN[tc]
    if tc is TypeCode.SET:
        return 2 * len(col.elements) - 1
    if tc is TypeCode.ENUM:
        return 1
    if tc in _DISPLAY_WIDTH or tc is TypeCode.VECTOR:
        if col.length is None:
            return None
        default = _DISPLAY_WIDTH.get(tc)
        if col.unsigned and tc in UNSIGNED_DEFAULT_FLEN and tc is not TypeCode.BIGINT:
            default = UNSIGNED_DEFAULT_FLEN[tc] + (1 if col.zerofill and tc is TypeCode.TINYINT else 0)
        return None if col.length == default else col.length
    return None


def _scale(col: Column) -> bytes:
    tc = col.type_code
    d = col.decimal
    if tc is TypeCode.DECIMAL and d is not None and d >= 0:
        return jfloat64(float(d))
    if tc in FLOAT_TYPES and float_is_double(col) and d is not None:
        return jfloat64(float(d))
    return b"null"


def _default_expression(col: Column) -> bytes:
    d = col.default
    if d is None or d == "<nil>":
        return b"null"
    if isinstance(d, str) and _CURRENT_TS.fullmatch(d):
        return b'"1970-01-01 00:00:00"'
    if col.type_code is TypeCode.BIT:
        text = d if isinstance(d, str) else str(d)
        return jstr(format(bit_default(text), "b"))  # the bit string, e.g. "101"
    if isinstance(d, bytes | bytearray):
        return jstr(bytes(d).decode("latin-1"))
    if isinstance(d, bool):
        return b"true" if d else b"false"
    if isinstance(d, int):
        return str(d).encode()
    if isinstance(d, float):
        return jfloat64(d)
    return jstr(str(d))


def column_object(col: Column, position: int) -> bytes:
    """One ``io.debezium.connector.schema.Column``, members in TiCDC's order."""
    tc = col.type_code
    name = type_name(tc, col.binary).upper()
    if tc not in NO_UNSIGNED_TYPES and col.unsigned:
        name += " UNSIGNED ZEROFILL" if col.zerofill else " UNSIGNED"
    expression = name
    if tc is TypeCode.DOUBLE and float_is_double(col) and col.decimal:
        expression += f"({col.length if col.length is not None else DEFAULT_FLEN[tc]},{col.decimal})"
    elif tc is TypeCode.VECTOR and col.length is not None:
        expression += f"({col.length})"
    enum_values = b"[" + b",".join(jstr(f"'{e}'") for e in col.elements) + b"]" if tc in ENUM_SET_TYPES else b"null"
    charset = jstr(col.charset) if (tc in STRING_TYPES or tc in ENUM_SET_TYPES) and not col.binary else b"null"
    return (
        b'{"name":'
        + jstr(col.name)
        + b',"jdbcType":'
        + str(_jdbc(col)).encode()
        + b',"nativeType":null,"comment":null,"defaultValueExpression":'
        + _default_expression(col)
        + b',"enumValues":'
        + enum_values
        + b',"typeName":'
        + jstr(name)
        + b',"typeExpression":'
        + jstr(expression)
        + b',"charsetName":'
        + charset
        + b',"length":'
        + _null_or(_length(col))
        + b',"scale":'
        + _scale(col)
        + b',"position":'
        + str(position).encode()
        + b',"optional":'
        + (b"true" if col.nullable else b"false")
        + b',"autoIncremented":false,"generated":false}'
    )
