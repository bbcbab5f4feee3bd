"""Shapes and events the lake sink tests share."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode, compose_tso

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}


def ts(n: int) -> int:
    """A TSO whose physical part is 2024-01-01 + n seconds (scd2 validity is readable)."""
    return compose_tso(1_704_067_200_000 + n * 1000, 0)


def shape(schema: str = "shop", table: str = "orders", extra: tuple[Column, ...] = ()) -> TableSchema:
    return TableSchema(
        schema,
        table,
        (
            Column("id", TypeCode.BIGINT, nullable=False),
            Column("note", TypeCode.VARCHAR, length=64, **UTF8),
            Column("amount", TypeCode.DECIMAL, length=10, decimal=2),
            *extra,
        ),
        (Index("PRIMARY", ("id",), primary=True),),
    )


T = shape()


def ins(t: TableSchema, n: int, i: int, note: str, amount: str = "1.00", *rest: Any) -> RowChange:
    return RowChange(Op.INSERT, t, ts(n), new=(i, note, Decimal(amount), *rest))


def upd(t: TableSchema, n: int, old: tuple[Any, ...], new: tuple[Any, ...]) -> RowChange:
    return RowChange(Op.UPDATE, t, ts(n), new=new, old=old)


def dele(t: TableSchema, n: int, old: tuple[Any, ...]) -> RowChange:
    return RowChange(Op.DELETE, t, ts(n), old=old)


def resolved(n: int) -> Resolved:
    return Resolved(ts(n))
