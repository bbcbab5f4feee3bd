"""Builders and comparisons the codec tests share (tables, columns, value identity)."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from changefeed.model import ABSENT, Column, Index, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
BIN = {"charset": "binary", "collation": "binary"}


def utf8(name: str, tc: TypeCode = TypeCode.VARCHAR, **kw: Any) -> Column:
    """A text column in utf8mb4_bin (TiDB's default charset)."""
    return Column(name, tc, **UTF8, **kw)


def pk_table(*columns: Column, schema: str = "test", table: str = "t", table_id: int = 104) -> TableSchema:
    """A table whose first column is the primary key."""
    return TableSchema(
        schema, table, columns, indexes=(Index("PRIMARY", (columns[0].name,), primary=True),), table_id=table_id
    )


def image(ts: TableSchema, values: dict[str, Any]) -> tuple[Any, ...]:
    """A row image from column name -> value; columns not named are ABSENT."""
    return tuple(values.get(c.name, ABSENT) for c in ts.columns)


def same_value(a: Any, b: Any) -> bool:
    """The same model value: same type, floats bit for bit (-0.0 is not 0.0), Decimals by their text."""
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return str(a) == str(b)
    return type(a) is type(b) and a == b


def same_image(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> bool:
    """`same_value` for every column of two images (or both None)."""
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))


# An every-type table and one row of it (the Simple golden tests and the conformance table use it).
ALL_TYPES = TableSchema(
    "db",
    "all_types",
    (
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("ti", TypeCode.TINYINT),
        Column("ubig", TypeCode.BIGINT, unsigned=True),
        Column("f", TypeCode.FLOAT),
        Column("d", TypeCode.DOUBLE),
        Column("dec", TypeCode.DECIMAL, length=10, decimal=2),
        Column("dt", TypeCode.DATE),
        Column("dtm", TypeCode.DATETIME, decimal=3),
        Column("tm", TypeCode.TIME),
        Column("ts", TypeCode.TIMESTAMP, decimal=6),
        Column("y", TypeCode.YEAR),
        Column("j", TypeCode.JSON),
        Column("e", TypeCode.ENUM, **UTF8, elements=("a", "b", "c")),
        Column("s", TypeCode.SET, **UTF8, elements=("a", "b", "c")),
        Column("bit", TypeCode.BIT, length=10, default=b"\x01\x02"),
        Column("vc", TypeCode.VARCHAR, **UTF8, length=20, default="x<y"),
        Column("vb", TypeCode.VARCHAR, length=20),
        Column("blob", TypeCode.BLOB),
        Column("txt", TypeCode.BLOB, **UTF8),
        Column("n", TypeCode.INT),
    ),
    (Index("PRIMARY", ("id",), primary=True), Index("uk", ("ti", "n"), unique=True)),
    table_id=7,
    version=99,
)
ALL_VALUES = (
    -9223372036854775808,
    -128,
    18446744073709551615,
    to_float32(3.14),
    1e-7,
    Decimal("-12.50"),
    "2024-02-29",
    "2024-02-29 12:34:56.789",
    "-838:59:59",
    "2024-02-29 12:34:56.000001",
    2024,
    '{"a": [1, 2.5], "k": "<v>"}',
    2,
    5,
    683,
    "日本<&>\u2028",
    b"\x00\xff",
    b"blob",
    "line\nbreak",
    None,
)
