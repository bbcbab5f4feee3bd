"""MySQL column types as TiDB and TiCDC name and number them.

Every protocol speaks about types through these tables: the type byte (Open Protocol ``"t"``),
the ``mysqlType`` base name (Canal-JSON, Simple), and the Java SQL type (Canal-JSON ``sqlType``).
"""

from __future__ import annotations

from enum import IntEnum, IntFlag


class TypeCode(IntEnum):
    """The MySQL type byte TiDB stores per column (TiCDC spec §0.2, seed 000's type table)."""

    TINYINT = 1
    SMALLINT = 2
    INT = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    BIGINT = 8
    MEDIUMINT = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15  # also VARBINARY (charset binary)
    BIT = 16
    VECTOR = 225  # TiDB VECTOR(FLOAT32)
    JSON = 245
    DECIMAL = 246
    ENUM = 247
    SET = 248
    TINYBLOB = 249  # also TINYTEXT
    MEDIUMBLOB = 250  # also MEDIUMTEXT
    LONGBLOB = 251  # also LONGTEXT
    BLOB = 252  # also TEXT
    VAR_STRING = 253
    CHAR = 254  # also BINARY (charset binary)
    GEOMETRY = 255


INTEGER_TYPES = frozenset({TypeCode.TINYINT, TypeCode.SMALLINT, TypeCode.MEDIUMINT, TypeCode.INT, TypeCode.BIGINT})
FLOAT_TYPES = frozenset({TypeCode.FLOAT, TypeCode.DOUBLE})
TEMPORAL_TYPES = frozenset({TypeCode.DATE, TypeCode.NEWDATE, TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.TIME})
BLOB_TYPES = frozenset({TypeCode.TINYBLOB, TypeCode.MEDIUMBLOB, TypeCode.LONGBLOB, TypeCode.BLOB})
CHAR_TYPES = frozenset({TypeCode.VARCHAR, TypeCode.VAR_STRING, TypeCode.CHAR})
STRING_TYPES = BLOB_TYPES | CHAR_TYPES
"""Types whose value is ``bytes`` (binary charset) or ``str`` (any other charset)."""


class ColumnFlag(IntFlag):
    """TiCDC's column flag bits (seed 000 "列标志位", spec §1.6): Open Protocol ``"f"``."""

    BINARY = 0x01
    HANDLE_KEY = 0x02
    GENERATED = 0x04
    PRIMARY_KEY = 0x08
    UNIQUE_KEY = 0x10
    MULTIPLE_KEY = 0x20
    NULLABLE = 0x40
    UNSIGNED = 0x80


# TiDB `types.TypeToStr(tp, charset)` base names; binary charset turns text->blob, char->binary.
_TYPE_NAMES: dict[TypeCode, str] = {
    TypeCode.TINYINT: "tinyint",
    TypeCode.SMALLINT: "smallint",
    TypeCode.MEDIUMINT: "mediumint",
    TypeCode.INT: "int",
    TypeCode.BIGINT: "bigint",
    TypeCode.FLOAT: "float",
    TypeCode.DOUBLE: "double",
    TypeCode.NULL: "null",
    TypeCode.DECIMAL: "decimal",
    TypeCode.DATE: "date",
    TypeCode.NEWDATE: "date",
    TypeCode.DATETIME: "datetime",
    TypeCode.TIMESTAMP: "timestamp",
    TypeCode.TIME: "time",
    TypeCode.YEAR: "year",
    TypeCode.CHAR: "char",
    TypeCode.VARCHAR: "varchar",
    TypeCode.VAR_STRING: "var_string",
    TypeCode.TINYBLOB: "tinytext",
    TypeCode.BLOB: "text",
    TypeCode.MEDIUMBLOB: "mediumtext",
    TypeCode.LONGBLOB: "longtext",
    TypeCode.BIT: "bit",
    TypeCode.ENUM: "enum",
    TypeCode.SET: "set",
    TypeCode.JSON: "json",
    TypeCode.VECTOR: "vector",
    TypeCode.GEOMETRY: "geometry",
}

_BINARY_NAMES: dict[TypeCode, str] = {
    TypeCode.TINYBLOB: "tinyblob",
    TypeCode.BLOB: "blob",
    TypeCode.MEDIUMBLOB: "mediumblob",
    TypeCode.LONGBLOB: "longblob",
    TypeCode.CHAR: "binary",
    TypeCode.VARCHAR: "varbinary",
}

_NAME_TO_TYPE: dict[str, tuple[TypeCode, bool]] = {
    **{name: (code, False) for code, name in _TYPE_NAMES.items() if code is not TypeCode.NEWDATE},
    **{name: (code, True) for code, name in _BINARY_NAMES.items()},
    "bool": (TypeCode.TINYINT, False),
    "boolean": (TypeCode.TINYINT, False),
    "integer": (TypeCode.INT, False),
    "real": (TypeCode.DOUBLE, False),
    "numeric": (TypeCode.DECIMAL, False),
}


def type_name(code: int, binary: bool) -> str:
    """TiDB ``TypeToStr``: the base ``mysqlType`` name, e.g. ``varbinary`` for binary VARCHAR."""
    tc = TypeCode(code)
    if binary and tc in _BINARY_NAMES:
        return _BINARY_NAMES[tc]
    return _TYPE_NAMES[tc]


def parse_type_name(name: str) -> tuple[TypeCode, bool, bool]:
    """Read a ``mysqlType`` string back into (type code, binary, unsigned).

    Accepts TiCDC's parameterless names and Canal's full forms (``decimal(10, 4)``,
    ``int(10) unsigned zerofill``), as TiCDC's canal-json decoder does: the base is the text
    before the first ``(`` or space.
    """
    text = name.strip().lower()
    base = text.split("(", 1)[0].split(" ", 1)[0]
    try:
        code, binary = _NAME_TO_TYPE[base]
    except KeyError:
        raise ValueError(f"unknown MySQL type name {name!r}") from None
    return code, binary, "unsigned" in text


def mysql_type_string(code: int, binary: bool, unsigned: bool, zerofill: bool = False) -> str:
    """Canal-JSON's default ``mysqlType``: base name, `` unsigned`` (not BIT/YEAR), `` zerofill``."""
    text = type_name(code, binary)
    if unsigned and text not in ("bit", "year"):
        text += " unsigned"
    if zerofill and not text.startswith("year"):
        text += " zerofill"
    return text


class JavaSQLType(IntEnum):
    """``java.sql.Types`` codes used by Canal-JSON's ``sqlType`` (seed 001)."""

    BIT = -7
    TINYINT = -6
    BIGINT = -5
    CHAR = 1
    DECIMAL = 3
    INTEGER = 4
    SMALLINT = 5
    REAL = 7
    DOUBLE = 8
    VARCHAR = 12
    DATE = 91
    TIME = 92
    TIMESTAMP = 93
    BLOB = 2004
    CLOB = 2005


_JAVA_BASE: dict[TypeCode, JavaSQLType] = {
    TypeCode.TINYINT: JavaSQLType.TINYINT,
    TypeCode.SMALLINT: JavaSQLType.SMALLINT,
    TypeCode.MEDIUMINT: JavaSQLType.INTEGER,
    TypeCode.INT: JavaSQLType.INTEGER,
    TypeCode.BIGINT: JavaSQLType.BIGINT,
    TypeCode.FLOAT: JavaSQLType.REAL,
    TypeCode.DOUBLE: JavaSQLType.DOUBLE,
    TypeCode.DECIMAL: JavaSQLType.DECIMAL,
    TypeCode.DATE: JavaSQLType.DATE,
    TypeCode.NEWDATE: JavaSQLType.DATE,
    TypeCode.DATETIME: JavaSQLType.TIMESTAMP,
    TypeCode.TIMESTAMP: JavaSQLType.TIMESTAMP,
    TypeCode.TIME: JavaSQLType.TIME,
    TypeCode.YEAR: JavaSQLType.VARCHAR,
    TypeCode.ENUM: JavaSQLType.INTEGER,
    TypeCode.SET: JavaSQLType.BIT,
    TypeCode.BIT: JavaSQLType.BIT,
    TypeCode.JSON: JavaSQLType.VARCHAR,
    TypeCode.VECTOR: JavaSQLType.VARCHAR,
    TypeCode.CHAR: JavaSQLType.CHAR,
    TypeCode.VARCHAR: JavaSQLType.VARCHAR,
    TypeCode.VAR_STRING: JavaSQLType.VARCHAR,
    TypeCode.TINYBLOB: JavaSQLType.CLOB,
    TypeCode.BLOB: JavaSQLType.CLOB,
    TypeCode.MEDIUMBLOB: JavaSQLType.CLOB,
    TypeCode.LONGBLOB: JavaSQLType.CLOB,
    TypeCode.GEOMETRY: JavaSQLType.BLOB,
    TypeCode.NULL: JavaSQLType.VARCHAR,
}

# Seed 001's integer table: an unsigned value above the signed range moves to the next wider
# Java type. MEDIUMINT UNSIGNED never moves (INTEGER already holds it).
_UNSIGNED_PROMOTION: dict[TypeCode, tuple[int, JavaSQLType]] = {
    TypeCode.TINYINT: (127, JavaSQLType.SMALLINT),
    TypeCode.SMALLINT: (32767, JavaSQLType.INTEGER),
    TypeCode.INT: (2147483647, JavaSQLType.BIGINT),
    TypeCode.BIGINT: (9223372036854775807, JavaSQLType.DECIMAL),
}


def java_sql_type(code: int, binary: bool, unsigned: bool = False, value: object = None) -> JavaSQLType:
    """Canal-JSON ``sqlType`` for a column, given the (non-NULL) value being written.

    Binary string/blob types are BLOB (2004); unsigned integers above their signed range are
    promoted per seed 001 (TiCDC applies this per value, so one table's messages may differ).
    """
    tc = TypeCode(code)
    if binary and tc in STRING_TYPES:
        return JavaSQLType.BLOB
    base = _JAVA_BASE[tc]
    if unsigned and isinstance(value, int) and tc in _UNSIGNED_PROMOTION:
        limit, promoted = _UNSIGNED_PROMOTION[tc]
        if value > limit:
            return promoted
    return base


# Default display widths/lengths TiDB gives when a DDL leaves them out (`mysql.GetDefaultFieldLength`),
# used where a protocol prints a length the source did not state.
DEFAULT_FLEN: dict[TypeCode, int] = {
    TypeCode.TINYINT: 4,
    TypeCode.SMALLINT: 6,
    TypeCode.MEDIUMINT: 9,
    TypeCode.INT: 11,
    TypeCode.BIGINT: 20,
    TypeCode.FLOAT: 12,
    TypeCode.DOUBLE: 22,
    TypeCode.DECIMAL: 10,
    TypeCode.DATE: 10,
    TypeCode.DATETIME: 19,
    TypeCode.TIMESTAMP: 19,
    TypeCode.TIME: 10,
    TypeCode.YEAR: 4,
    TypeCode.BIT: 1,
    TypeCode.CHAR: 1,
    TypeCode.TINYBLOB: 255,
    TypeCode.BLOB: 65535,
    TypeCode.MEDIUMBLOB: 16777215,
    TypeCode.LONGBLOB: 4294967295,
    TypeCode.JSON: 4294967295,
}
UNSIGNED_DEFAULT_FLEN: dict[TypeCode, int] = {
    TypeCode.TINYINT: 3,
    TypeCode.SMALLINT: 5,
    TypeCode.MEDIUMINT: 8,
    TypeCode.INT: 10,
    TypeCode.BIGINT: 20,
}


# ------------------------------------------------------------------ more named type sets (issue #15)
# The sets capture, the sinks, files/ and the snapshot reader test types against, so that no stage
# spells members out at a call site. Built from the sets above; each is a frozenset.

NUMBER_TYPES = INTEGER_TYPES | FLOAT_TYPES | {TypeCode.DECIMAL}  # values are int, float or Decimal numbers
DATE_TYPES = frozenset({TypeCode.DATE, TypeCode.NEWDATE})  # a date alone (NEWDATE: the binlog's DATE)
DATETIME_TYPES = frozenset({TypeCode.DATETIME, TypeCode.TIMESTAMP})  # a date and a time of day
CALENDAR_TYPES = DATE_TYPES | DATETIME_TYPES  # temporal types with a calendar date: all but TIME
FSP_TYPES = DATETIME_TYPES | {TypeCode.TIME}  # temporal types with fractional seconds (their `decimal`)
ENUM_SET_TYPES = frozenset({TypeCode.ENUM, TypeCode.SET})  # a member index or a member bitmask
ENUM_SET_BIT_TYPES = ENUM_SET_TYPES | {TypeCode.BIT}  # an unsigned 64-bit int that is not a number
UINT_VALUE_TYPES = ENUM_SET_BIT_TYPES | {TypeCode.YEAR}  # non-integer types whose value is an int >= 0
ALWAYS_UNSIGNED_TYPES = frozenset({TypeCode.BIT, TypeCode.YEAR})  # unsigned by definition, never print it
BOOLEAN_TYPES = frozenset({TypeCode.TINYINT, TypeCode.BIT})  # where a bool lands (BOOLEAN, BIT(1)) as 1/0
CHARSET_TYPES = STRING_TYPES | ENUM_SET_TYPES  # types with a charset and collation; the rest are binary
TEXT_VALUE_TYPES = STRING_TYPES | TEMPORAL_TYPES | {TypeCode.JSON, TypeCode.VECTOR}  # values are str (or bytes)

# ------------------------------------------------------------------ the codecs' type sets (issue #15)

JSON_VECTOR_TYPES = frozenset({TypeCode.JSON, TypeCode.VECTOR})  # text values with no charset: a document, a vector
INTEGER_BITS: dict[TypeCode, int] = {  # the width of each integer type (its value range with `unsigned`)
    TypeCode.TINYINT: 8,
    TypeCode.SMALLINT: 16,
    TypeCode.MEDIUMINT: 24,
    TypeCode.INT: 32,
    TypeCode.BIGINT: 64,
}
