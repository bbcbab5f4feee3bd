"""`ChangelogRows.inserts_batch`: rows given as model Arrow columns become the record batch PySpark
itself makes of their changelog tuples (its own converter, `records_to_arrow_batches`), for every
type, typed and JSON images, any key shape. Pure Python: no JVM."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

from changefeed.model import Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.arrow import images_to_batch
from changefeed.spark.changelog import ChangelogRows, changelog_schema, image_struct

from ..strategies import columns, tables, values


def _pyspark_batch(changelog: ChangelogRows, table: TableSchema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    tuples = [changelog.row(RowChange(Op.INSERT, table, 7 << 18, new=r)) for r in rows]
    images = image_struct(changelog.typed.table) if changelog.typed is not None else None
    (batch,) = records_to_arrow_batches(iter(tuples), len(tuples) + 1, changelog_schema(images), None)  # type: ignore[arg-type]
    return batch


def _check(table: TableSchema, rows: list[tuple[Any, ...]]) -> None:
    arrays = images_to_batch(table, rows).columns
    for changelog in (ChangelogRows(), ChangelogRows(table=(table.schema, table.table), typed=table)):
        got = changelog.inserts_batch(table, 7 << 18, arrays)
        want = _pyspark_batch(changelog, table, rows)
        assert got is not None
        assert got.schema == want.schema
        assert got.to_pylist() == want.to_pylist()
        assert got.equals(want)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_inserts_batch_is_pysparks_batch_of_the_tuples(data: st.DataObject) -> None:
    table = data.draw(tables())
    rows = data.draw(st.lists(st.tuples(*(values(c) for c in table.columns)), min_size=1, max_size=6))
    _check(table, rows)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_keys_of_any_shape(data: st.DataObject) -> None:
    """Composite keys of integers (made a column at a time), of other types (per row), names that
    JSON must escape, and a keyless table."""
    key_count = data.draw(st.integers(0, 3))
    names = data.draw(
        st.lists(st.sampled_from(["id", 'q"uote', "ünï", "a\\b", "k2", "k3"]), min_size=3, max_size=3, unique=True)
    )
    cols = [data.draw(columns(n)) for n in names] + [Column("v", TypeCode.VARCHAR, charset="utf8mb4")]
    indexes = (Index("PRIMARY", tuple(names[:key_count]), primary=True),) if key_count else ()
    table = TableSchema("s", "t", tuple(cols), indexes=indexes)
    rows = data.draw(st.lists(st.tuples(*(values(c) for c in table.columns)), min_size=1, max_size=5))
    _check(table, rows)


def test_filtered_tables_and_the_event_column_have_no_batch() -> None:
    table = TableSchema("s", "t", (Column("id", TypeCode.INT),), indexes=(Index("PRIMARY", ("id",), primary=True),))
    arrays = images_to_batch(table, [(1,)]).columns
    assert ChangelogRows(rules=["other.*"]).inserts_batch(table, 1, arrays) is None
    assert ChangelogRows(with_event=True).inserts_batch(table, 1, arrays) is None
    assert ChangelogRows(rules=["s.*"]).inserts_batch(table, 1, arrays) is not None
