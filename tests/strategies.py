"""Hypothesis strategies for the model: every MySQL type with its edge values.

Shared by the model, codec and sink tests so each round-trips the same universe of rows.
"""

from __future__ import annotations

from decimal import Context, Decimal
from typing import Any

from hypothesis import strategies as st

from changefeed.model import ABSENT, Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32
from changefeed.model.values import format_date, format_datetime, format_time

_INT_BITS = {
    TypeCode.TINYINT: 8,
    TypeCode.SMALLINT: 16,
    TypeCode.MEDIUMINT: 24,
    TypeCode.INT: 32,
    TypeCode.BIGINT: 64,
}

# 4-byte UTF-8, combining marks, controls, HTML specials, U+2028: everything an escaper can get wrong.
text_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x10FFFF), max_size=24
) | st.sampled_from(["", " ", "<a&b>", "\u2028\u2029", "😀𝄞", "\x00\x08\x0c\x1f\x7f", "line\nbreak\r\t", '"\\'])


def columns(name: str = "c") -> st.SearchStrategy[Column]:
    """A column of any type the protocols carry, with realistic attributes."""
    ints = st.builds(
        lambda tc, unsigned, nullable: Column(name, tc, unsigned=unsigned, nullable=nullable, length=None),
        st.sampled_from(list(_INT_BITS)),
        st.booleans(),
        st.booleans(),
    )
    simple = st.builds(
        lambda tc, nullable: Column(name, tc, nullable=nullable),
        st.sampled_from([TypeCode.FLOAT, TypeCode.DOUBLE, TypeCode.DATE, TypeCode.YEAR, TypeCode.JSON]),
        st.booleans(),
    )
    temporal = st.builds(
        lambda tc, fsp, nullable: Column(name, tc, decimal=fsp, nullable=nullable),
        st.sampled_from([TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.TIME]),
        st.integers(0, 6),
        st.booleans(),
    )
    decimal = st.integers(1, 65).flatmap(
        lambda p: st.integers(0, min(p, 30)).map(lambda s: Column(name, TypeCode.DECIMAL, length=p, decimal=s))
    )
    strings = st.builds(
        lambda tc, binary, nullable: Column(
            name,
            tc,
            charset="binary" if binary else "utf8mb4",
            collation="binary" if binary else "utf8mb4_bin",
            length=255 if tc in (TypeCode.VARCHAR, TypeCode.CHAR) else None,
            nullable=nullable,
        ),
        st.sampled_from(
            [TypeCode.VARCHAR, TypeCode.CHAR, TypeCode.TINYBLOB, TypeCode.BLOB, TypeCode.MEDIUMBLOB, TypeCode.LONGBLOB]
        ),
        st.booleans(),
        st.booleans(),
    )
    enums = st.builds(
        lambda tc, n: Column(
            name, tc, charset="utf8mb4", collation="utf8mb4_bin", elements=tuple(f"m{i}" for i in range(n))
        ),
        st.sampled_from([TypeCode.ENUM, TypeCode.SET]),
        st.integers(1, 8),
    )
    bits = st.integers(1, 64).map(lambda n: Column(name, TypeCode.BIT, length=n))
    return st.one_of(ints, simple, temporal, decimal, strings, enums, bits)


def _datetime(fsp: int) -> st.SearchStrategy[str]:
    zero = format_datetime(0, 0, 0, 0, 0, 0, 0, fsp)
    real = st.builds(
        lambda y, mo, d, h, mi, s, us: format_datetime(y, mo, d, h, mi, s, us, fsp),
        st.integers(1000, 9999),
        st.integers(1, 12),
        st.integers(1, 28),
        st.integers(0, 23),
        st.integers(0, 59),
        st.integers(0, 59),
        st.integers(0, 999999).map(lambda us: us - us % 10 ** (6 - fsp)),
    )
    return st.one_of(st.just(zero), real)


def values(column: Column) -> st.SearchStrategy[Any]:
    """Valid model values for ``column`` (NULL included when nullable)."""
    tc = column.type_code
    if tc in _INT_BITS:
        bits = _INT_BITS[tc]
        lo, hi = (0, (1 << bits) - 1) if column.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        base: st.SearchStrategy[Any] = st.integers(lo, hi) | st.sampled_from([lo, hi, 0])
    elif tc is TypeCode.FLOAT:
        base = st.floats(width=32, allow_nan=False, allow_infinity=False).map(to_float32)
    elif tc is TypeCode.DOUBLE:
        base = st.floats(allow_nan=False, allow_infinity=False)
    elif tc is TypeCode.DECIMAL:
        p, s = column.length or 10, column.decimal or 0
        # scaleb rounds to the context precision (28 digits by default): DECIMAL(65,s) needs more.
        base = st.integers(-(10**p) + 1, 10**p - 1).map(lambda n: Decimal(n).scaleb(-s, Context(prec=65)))
    elif tc is TypeCode.DATE:
        base = st.one_of(
            st.just("0000-00-00"),
            st.builds(format_date, st.integers(1000, 9999), st.integers(1, 12), st.integers(1, 28)),
        )
    elif tc in (TypeCode.DATETIME, TypeCode.TIMESTAMP):
        base = _datetime(column.decimal or 0)
    elif tc is TypeCode.TIME:
        fsp = column.decimal or 0
        base = st.builds(
            lambda neg, h, m, s, us: format_time(neg and (h or m or s or us) > 0, h, m, s, us, fsp),
            st.booleans(),
            st.integers(0, 838),
            st.integers(0, 59),
            st.integers(0, 59),
            st.integers(0, 999999).map(lambda us: us - us % 10 ** (6 - fsp)),
        )
    elif tc is TypeCode.YEAR:
        base = st.sampled_from([0, 1901, 2155]) | st.integers(1901, 2155)
    elif tc is TypeCode.JSON:
        base = st.sampled_from(
            ['{"a": 1, "b": [1, 2.5, "x"]}', "null", "[]", '"ünï ☃ 😀"', '{"k": {"n": null, "t": true}}', "3.0"]
        )
    elif tc is TypeCode.ENUM:
        base = st.integers(1, len(column.elements))
    elif tc is TypeCode.SET:
        base = st.integers(0, (1 << len(column.elements)) - 1)
    elif tc is TypeCode.BIT:
        base = st.integers(0, (1 << (column.length or 1)) - 1)
    elif column.is_bytes:
        base = st.binary(max_size=32) | st.just(bytes(range(256)))
    else:
        base = text_values
    return st.one_of(st.none(), base) if column.nullable else base


@st.composite
def tables(draw: st.DrawFn, max_columns: int = 8) -> TableSchema:
    """A table with an INT primary key and a mix of other columns."""
    n = draw(st.integers(1, max_columns))
    cols = [Column("id", TypeCode.BIGINT, nullable=False)]
    cols += [draw(columns(f"c{i}")) for i in range(n)]
    return TableSchema(
        schema=draw(st.sampled_from(["test", "db_ü", "Sch"])),
        table=draw(st.sampled_from(["t", "orders", "T_2"])),
        columns=tuple(cols),
        indexes=(Index("PRIMARY", ("id",), primary=True),),
        table_id=draw(st.integers(1, 10_000)),
        version=draw(st.integers(0, 1 << 62)),
    )


@st.composite
def row_changes(draw: st.DrawFn, table: TableSchema | None = None) -> RowChange:
    """An insert, update or delete with full images of ``table`` (or a drawn table)."""
    ts = table if table is not None else draw(tables())
    op = draw(st.sampled_from(list(Op)))

    def image() -> tuple[Any, ...]:
        return tuple(draw(values(c)) for c in ts.columns)

    return RowChange(
        op=op,
        table_schema=ts,
        commit_ts=draw(st.integers(1, (1 << 63) - 1)),
        new=image() if op is not Op.DELETE else None,
        old=image() if op is not Op.INSERT else None,
    )


__all__ = ["ABSENT", "columns", "row_changes", "tables", "text_values", "values"]
