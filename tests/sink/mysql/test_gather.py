"""`Gather` (the MySQL sink's rows of many slices) gives each column's rows in span order.

Pure: no server. Against the plain reading (every span's rows, one after another), over bases
that are slices of one another, interleaved spans, one base, whole bases, and bases whose Arrow
types differ (None, so the run takes the INSERT path).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.model import Column, Op, TableSchema, TypeCode
from changefeed.model.rowblock import TableRows
from changefeed.sink.mysql.columns import Gather

from .helpers import UTF8
from .test_blocks import table_rows

TABLE = TableSchema(
    "d", "t", (Column("id", TypeCode.BIGINT, nullable=False), Column("s", TypeCode.VARCHAR, length=32, **UTF8))
)


def _base(first: int, n: int) -> TableRows:
    return table_rows(TABLE, [(Op.INSERT, (first + j, f"v{first + j}" if j % 3 else None), None) for j in range(n)])


@st.composite
def _spans(draw: st.DrawFn) -> tuple[list[tuple[TableRows, int, int]], list[Any]]:
    bases = [_base(1000 * k, draw(st.integers(1, 40))) for k in range(draw(st.integers(1, 4)))]
    tables = list(bases)
    for base in bases:  # a decoder's per-message slices of a chunk: their origin is the chunk
        at = draw(st.integers(0, base.num_rows - 1))
        tables.append(base.slice(at, draw(st.integers(1, base.num_rows - at))))
    spans, want = [], []
    for _ in range(draw(st.integers(1, 12))):
        table = draw(st.sampled_from(tables))
        start = draw(st.integers(0, table.num_rows - 1))
        rows = draw(st.integers(1, table.num_rows - start))
        spans.append((table, start, rows))
        want += table.column(0).slice(start, rows).to_pylist()
    return spans, want


@settings(max_examples=200, deadline=None)
@given(_spans())
def test_columns_are_the_spans_rows_in_order(case: tuple[list[tuple[TableRows, int, int]], list[Any]]) -> None:
    spans, want = case
    gather = Gather(spans)
    assert gather.num_rows == len(want)
    ids = gather.column(0)
    assert ids is not None and ids.to_pylist() == want
    texts = gather.column(1)
    assert texts is not None
    assert texts.to_pylist() == [None if i % 1000 % 3 == 0 else f"v{i}" for i in want]


def test_a_whole_base_is_its_own_column() -> None:
    base = _base(0, 5)
    gather = Gather.of([base])
    assert gather.whole and gather.column(0).equals(base.column(0))


def test_bases_of_other_arrow_types_give_none() -> None:
    a = _base(0, 3)
    b = table_rows(TABLE, [(Op.INSERT, (7, "x"), None)], types=[pa.int32(), pa.string()])
    gather = Gather([(a, 0, 2), (b, 0, 1), (a, 2, 1)])
    assert gather.column(0) is None
    assert gather.column(1) is not None and gather.column(1).to_pylist() == [None, "v1", "x", "v2"]
