"""Table schemas from TABLE_MAP metadata, and the table names DDL statements touch."""

from __future__ import annotations

from ...errors import CaptureError
from ...model.schema import Column, Index, TableSchema
from ...model.types import TypeCode
from .charsets import charset_maxlen, collation_info
from .constants import ColumnType
from .tablemap import ColumnMeta, TableMap

_TYPE_CODES: dict[int, TypeCode] = {
    ColumnType.TINY: TypeCode.TINYINT,
    ColumnType.SHORT: TypeCode.SMALLINT,
    ColumnType.INT24: TypeCode.MEDIUMINT,
    ColumnType.LONG: TypeCode.INT,
    ColumnType.LONGLONG: TypeCode.BIGINT,
    ColumnType.FLOAT: TypeCode.FLOAT,
    ColumnType.DOUBLE: TypeCode.DOUBLE,
    ColumnType.NEWDECIMAL: TypeCode.DECIMAL,
    ColumnType.DATE: TypeCode.DATE,
    ColumnType.NEWDATE: TypeCode.DATE,
    ColumnType.TIME: TypeCode.TIME,
    ColumnType.TIME2: TypeCode.TIME,
    ColumnType.DATETIME: TypeCode.DATETIME,
    ColumnType.DATETIME2: TypeCode.DATETIME,
    ColumnType.TIMESTAMP: TypeCode.TIMESTAMP,
    ColumnType.TIMESTAMP2: TypeCode.TIMESTAMP,
    ColumnType.YEAR: TypeCode.YEAR,
    ColumnType.VARCHAR: TypeCode.VARCHAR,
    ColumnType.VAR_STRING: TypeCode.VARCHAR,
    ColumnType.STRING: TypeCode.CHAR,
    ColumnType.ENUM: TypeCode.ENUM,
    ColumnType.SET: TypeCode.SET,
    ColumnType.TINY_BLOB: TypeCode.TINYBLOB,
    ColumnType.BLOB: TypeCode.BLOB,
    ColumnType.MEDIUM_BLOB: TypeCode.MEDIUMBLOB,
    ColumnType.LONG_BLOB: TypeCode.LONGBLOB,
    ColumnType.JSON: TypeCode.JSON,
    ColumnType.BIT: TypeCode.BIT,
    ColumnType.GEOMETRY: TypeCode.GEOMETRY,
}
_FSP_TYPES = (ColumnType.TIME2, ColumnType.DATETIME2, ColumnType.TIMESTAMP2)
_OLD_TEMPORAL = (ColumnType.TIME, ColumnType.DATETIME, ColumnType.TIMESTAMP)


def build_table_schema(
    tm: TableMap,
    version: int,
    table_id: int,
    collations: dict[int, tuple[str, str]] | None = None,
    where: str | None = None,
) -> TableSchema:
    """The model schema of a table map: names, types, unsigned, charsets, ENUM/SET members, primary key.

    Needs ``binlog_row_metadata=FULL`` (column names). Unique keys, defaults, zerofill and
    generated columns are not in the binlog and stay unknown.
    """
    if not tm.has_metadata:
        raise CaptureError(
            f"TABLE_MAP of {tm.qualified_name} has no column names: the server must run with"
            " binlog_row_metadata=FULL (MySQL 8.0.1+, MariaDB 10.5+)",
            where=where,
        )
    columns = tuple(model_column(c, collations) for c in tm.columns)
    indexes: tuple[Index, ...] = ()
    if tm.primary_key:
        indexes = (Index("PRIMARY", tuple(columns[i].name for i in tm.primary_key), primary=True),)
    return TableSchema(
        schema=tm.schema, table=tm.table, columns=columns, indexes=indexes, table_id=table_id, version=version
    )


def model_column(c: ColumnMeta, collations: dict[int, tuple[str, str]] | None) -> Column:
    """The model column of a TABLE_MAP column (type, unsigned, charset, length, fsp, members)."""
    tp = c.real_type
    code = _TYPE_CODES.get(tp)
    if code is None:
        raise CaptureError(f"column {c.name!r}: binlog type {tp} has no model type")
    charset, collation = "binary", "binary"
    if c.collation_id is not None:
        charset, collation = collation_info(c.collation_id, collations)
    length: int | None = None
    decimal: int | None = None
    if tp in (ColumnType.VARCHAR, ColumnType.VAR_STRING, ColumnType.STRING):
        length = c.length // charset_maxlen(charset)
    elif tp == ColumnType.NEWDECIMAL:
        length, decimal = c.precision, c.scale
    elif tp == ColumnType.BIT:
        length = c.length
    elif tp in _FSP_TYPES:
        decimal = c.meta
    elif tp in _OLD_TEMPORAL:
        decimal = 0
    elements: tuple[str, ...] = ()
    if c.elements:
        codec = "latin-1" if charset == "latin1" else "utf-8"
        elements = tuple(e.decode(codec, "replace") for e in c.elements)
    return Column(
        name=c.name or f"@{c.index + 1}",
        type_code=code,
        charset=charset,
        collation=collation,
        length=length,
        decimal=decimal,
        unsigned=bool(c.unsigned),
        nullable=c.nullable,
        elements=elements,
    )
