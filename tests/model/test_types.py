"""Type code, type name and Java SQL type tables (seed 000 and seed 001), and column flags."""

from __future__ import annotations

import pytest

from changefeed.model import Column, ColumnFlag, Index, JavaSQLType, TableSchema, TypeCode
from changefeed.model.types import java_sql_type, mysql_type_string, parse_type_name, type_name


def test_seed000_flag_examples() -> None:
    # Seed 000: 85 = Nullable | UniqueKey | Generated | Binary; 46 = MultipleKey | PrimaryKey | Generated | HandleKey
    assert ColumnFlag(85) == ColumnFlag.NULLABLE | ColumnFlag.UNIQUE_KEY | ColumnFlag.GENERATED | ColumnFlag.BINARY
    assert ColumnFlag(46) == (
        ColumnFlag.MULTIPLE_KEY | ColumnFlag.PRIMARY_KEY | ColumnFlag.GENERATED | ColumnFlag.HANDLE_KEY
    )


def test_flag_85_from_a_column() -> None:
    # A nullable generated VARBINARY with a single-column unique index.
    t = TableSchema(
        "s",
        "t",
        (
            Column("id", TypeCode.INT, nullable=False),
            Column("g", TypeCode.VARCHAR, charset="binary", generated=True),
        ),
        (Index("PRIMARY", ("id",), primary=True), Index("u", ("g",), unique=True)),
    )
    assert int(t.column("g").flags) == 85


def test_flag_46_from_a_column() -> None:
    # A NOT NULL generated utf8 column in a two-column primary key.
    t = TableSchema(
        "s",
        "t",
        (
            Column("a", TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin", nullable=False, generated=True),
            Column("b", TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin", nullable=False),
        ),
        (Index("PRIMARY", ("a", "b"), primary=True),),
    )
    assert int(t.column("a").flags) == 46
    assert t.handle_key == (0, 1)


@pytest.mark.parametrize(
    ("column", "flags"),
    [
        (Column("id", TypeCode.INT, nullable=False), 11),  # with the PK below: binary|handle|pk
        (Column("n", TypeCode.INT), 65),
        (Column("v", TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin"), 64),
        (Column("vb", TypeCode.VARCHAR, charset="binary"), 65),
        (Column("u", TypeCode.BIGINT, unsigned=True), 193),
        (Column("bit", TypeCode.BIT, length=3), 193),
        (Column("y", TypeCode.YEAR), 193),
        (Column("e", TypeCode.ENUM, charset="utf8mb4", collation="utf8mb4_bin", elements=("a",)), 64),
        (Column("s", TypeCode.SET, charset="utf8mb4", collation="utf8mb4_bin", elements=("a",)), 64),
    ],
)
def test_spec_flag_examples(column: Column, flags: int) -> None:
    cols = (column,) if column.name == "id" else (Column("id", TypeCode.INT, nullable=False), column)
    t = TableSchema("s", "t", cols, (Index("PRIMARY", ("id",), primary=True),))
    assert int(t.column(column.name).flags) == flags


def test_handle_key_prefers_primary_then_smallest_not_null_unique() -> None:
    cols = (
        Column("a", TypeCode.INT, nullable=False),
        Column("b", TypeCode.INT, nullable=False),
        Column("c", TypeCode.INT),
    )
    t = TableSchema("s", "t", cols, (Index("u2", ("a", "b"), unique=True), Index("u1", ("b",), unique=True)))
    assert t.handle_key == (1,)
    assert t.primary_key == ()
    nullable_only = TableSchema("s", "t", cols, (Index("uc", ("c",), unique=True),))
    assert nullable_only.handle_key == ()
    with_pk = TableSchema("s", "t", cols, (Index("u1", ("b",), unique=True), Index("PRIMARY", ("a",), primary=True)))
    assert with_pk.handle_key == (0,)


def test_multiple_key_flag_rules() -> None:
    cols = tuple(Column(n, TypeCode.INT) for n in "abcd")
    t = TableSchema("s", "t", cols, (Index("i1", ("a",)), Index("i2", ("b", "c"), unique=True)))
    assert t.column("a").flags & ColumnFlag.MULTIPLE_KEY  # first column of a non-unique index (TiDB MUL)
    assert t.column("b").flags & ColumnFlag.MULTIPLE_KEY and t.column("c").flags & ColumnFlag.MULTIPLE_KEY
    assert t.column("b").flags & ColumnFlag.UNIQUE_KEY and t.column("c").flags & ColumnFlag.UNIQUE_KEY
    assert not t.column("d").flags & (ColumnFlag.MULTIPLE_KEY | ColumnFlag.UNIQUE_KEY)


def test_indexes_rebuilt_from_flags() -> None:
    cols = (
        Column.from_flags("id", 3, 11),
        Column.from_flags("v", 15, 64),
    )
    t = TableSchema("s", "t", cols)
    assert [i.name for i in t.indexes] == ["PRIMARY"] and t.handle_key == (0,)
    assert [int(c.flags) for c in t.columns] == [11, 64]
    assert t.column("v").charset == "utf8mb4" and not t.column("v").is_bytes


@pytest.mark.parametrize(
    ("code", "binary", "name"),
    [
        (TypeCode.TINYINT, False, "tinyint"),
        (TypeCode.MEDIUMINT, False, "mediumint"),
        (TypeCode.VARCHAR, False, "varchar"),
        (TypeCode.VARCHAR, True, "varbinary"),
        (TypeCode.CHAR, False, "char"),
        (TypeCode.CHAR, True, "binary"),
        (TypeCode.TINYBLOB, False, "tinytext"),
        (TypeCode.TINYBLOB, True, "tinyblob"),
        (TypeCode.BLOB, False, "text"),
        (TypeCode.BLOB, True, "blob"),
        (TypeCode.MEDIUMBLOB, True, "mediumblob"),
        (TypeCode.LONGBLOB, False, "longtext"),
        (TypeCode.DECIMAL, False, "decimal"),
        (TypeCode.JSON, False, "json"),
        (TypeCode.BIT, False, "bit"),
        (TypeCode.YEAR, False, "year"),
    ],
)
def test_type_name_round_trip(code: TypeCode, binary: bool, name: str) -> None:
    assert type_name(code, binary) == name
    assert parse_type_name(name)[:2] == (code, binary)


def test_parse_canal_full_type_forms() -> None:
    assert parse_type_name("decimal(10, 4)") == (TypeCode.DECIMAL, False, False)
    assert parse_type_name("int(10) unsigned zerofill") == (TypeCode.INT, False, True)
    assert parse_type_name("enum('a','b','c')") == (TypeCode.ENUM, False, False)
    assert parse_type_name("BIGINT UNSIGNED") == (TypeCode.BIGINT, False, True)
    with pytest.raises(ValueError, match="unknown MySQL type"):
        parse_type_name("nosuchtype")


def test_mysql_type_string_skips_unsigned_for_bit_and_year() -> None:
    assert mysql_type_string(TypeCode.INT, False, True) == "int unsigned"
    assert mysql_type_string(TypeCode.INT, False, True, zerofill=True) == "int unsigned zerofill"
    assert mysql_type_string(TypeCode.BIT, False, True) == "bit"
    assert mysql_type_string(TypeCode.YEAR, False, True, zerofill=True) == "year"


# Seed 001's Java SQL type table (type -> code) and its integer ranges table.
SEED001_JAVA = [
    (TypeCode.TINYINT, False, -6),  # Boolean
    (TypeCode.FLOAT, False, 7),
    (TypeCode.DOUBLE, False, 8),
    (TypeCode.DECIMAL, False, 3),
    (TypeCode.CHAR, False, 1),
    (TypeCode.VARCHAR, False, 12),
    (TypeCode.CHAR, True, 2004),  # Binary
    (TypeCode.VARCHAR, True, 2004),  # Varbinary
    (TypeCode.TINYBLOB, False, 2005),
    (TypeCode.BLOB, False, 2005),
    (TypeCode.MEDIUMBLOB, False, 2005),
    (TypeCode.LONGBLOB, False, 2005),
    (TypeCode.TINYBLOB, True, 2004),
    (TypeCode.BLOB, True, 2004),
    (TypeCode.MEDIUMBLOB, True, 2004),
    (TypeCode.LONGBLOB, True, 2004),
    (TypeCode.DATE, False, 91),
    (TypeCode.DATETIME, False, 93),
    (TypeCode.TIMESTAMP, False, 93),
    (TypeCode.TIME, False, 92),
    (TypeCode.YEAR, False, 12),
    (TypeCode.ENUM, False, 4),
    (TypeCode.SET, False, -7),
    (TypeCode.BIT, False, -7),
    (TypeCode.JSON, False, 12),
]


@pytest.mark.parametrize(("code", "binary", "java"), SEED001_JAVA)
def test_seed001_java_sql_types(code: TypeCode, binary: bool, java: int) -> None:
    assert java_sql_type(code, binary) == java


SEED001_INT_RANGES = [
    (TypeCode.TINYINT, False, -128, -6),
    (TypeCode.TINYINT, False, 127, -6),
    (TypeCode.TINYINT, True, 0, -6),
    (TypeCode.TINYINT, True, 127, -6),
    (TypeCode.TINYINT, True, 128, 5),
    (TypeCode.TINYINT, True, 255, 5),
    (TypeCode.SMALLINT, False, -32768, 5),
    (TypeCode.SMALLINT, True, 32767, 5),
    (TypeCode.SMALLINT, True, 32768, 4),
    (TypeCode.SMALLINT, True, 65535, 4),
    (TypeCode.MEDIUMINT, False, 8388607, 4),
    (TypeCode.MEDIUMINT, True, 8388607, 4),
    (TypeCode.MEDIUMINT, True, 8388608, 4),
    (TypeCode.MEDIUMINT, True, 16777215, 4),
    (TypeCode.INT, False, -2147483648, 4),
    (TypeCode.INT, True, 2147483647, 4),
    (TypeCode.INT, True, 2147483648, -5),
    (TypeCode.INT, True, 4294967295, -5),
    (TypeCode.BIGINT, False, -9223372036854775808, -5),
    (TypeCode.BIGINT, True, 9223372036854775807, -5),
    (TypeCode.BIGINT, True, 9223372036854775808, 3),
    (TypeCode.BIGINT, True, 18446744073709551615, 3),
]


@pytest.mark.parametrize(("code", "unsigned", "value", "java"), SEED001_INT_RANGES)
def test_seed001_integer_ranges(code: TypeCode, unsigned: bool, value: int, java: int) -> None:
    assert java_sql_type(code, False, unsigned, value) == java
    assert JavaSQLType(java).value == java


def test_column_normalisation_follows_tidb() -> None:
    assert Column("i", TypeCode.INT, charset="utf8mb4").charset == "binary"
    bit = Column("b", TypeCode.BIT)
    assert bit.unsigned and not bit.zerofill
    year = Column("y", TypeCode.YEAR)
    assert year.unsigned and year.zerofill
    assert Column("z", TypeCode.INT, zerofill=True).unsigned
