"""Builders and comparisons the codec tests share (tables, columns, value identity)."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from changefeed.model import ABSENT, Column, Index, TableSchema, TypeCode

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
