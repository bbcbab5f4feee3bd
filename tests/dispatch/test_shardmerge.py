"""A merged table's one shape for storage and lake sinks (changefeed/dispatch/shardmerge.py, Router.shard_ddl=False):
union and widening, DM's optimistic rule against the merged shape, rows and row blocks projected, state."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.dispatch.pipeline import EventPipeline
from changefeed.dispatch.route import Extract, RouteError, Router, RouteRule
from changefeed.dispatch.shardddl import ShardDDLConflictError
from changefeed.dispatch.shardmerge import MergedShapes, Projection, shape_after, sql_type, union
from changefeed.model import Column, DDLEvent, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.arrow import arrow_type, images_to_batch
from changefeed.model.ddl import classify_ddl
from changefeed.model.rowblock import RowBlock, Segment, TableRows
from changefeed.model.values import ABSENT

RULES = [
    RouteRule(
        schema_pattern="shop_*",
        table_pattern="orders_*",
        target_schema="shop",
        target_table="orders",
        extract_table=Extract("c_table", "orders_(.*)"),
    ),
]
NOTE = Column("note", TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin", length=10)


def shard(table: str, *extra: Column, amount: TypeCode = TypeCode.INT, version: int = 1) -> TableSchema:
    return TableSchema(
        "shop_01",
        table,
        (Column("id", TypeCode.INT, nullable=False), Column("amount", amount), *extra),
        (Index("PRIMARY", ("id",), primary=True),),
        version=version,
    )


def alter(query: str, table: str, before: TableSchema | None, after: TableSchema | None, ts: int) -> DDLEvent:
    return DDLEvent("shop_01", table, query, int(classify_ddl(query)), ts, table_schema=after, pre_table_schema=before)


def insert(ts: TableSchema, image: tuple[Any, ...], commit_ts: int = 5) -> RowChange:
    return RowChange(Op.INSERT, ts, commit_ts, new=image)


def router() -> tuple[Router, list[tuple[str, str, str]]]:
    r = Router(RULES, source="s1", shard_ddl=False)
    told: list[tuple[str, str, str]] = []
    r.report = lambda target, shard_, query, outcome, ts: told.append((target, shard_, outcome))
    return r, told


def test_sql_types_and_union_widens_and_appends() -> None:
    assert sql_type(Column("a", TypeCode.BIGINT, unsigned=True)) == "bigint unsigned"
    assert sql_type(NOTE) == "varchar(10)"
    assert sql_type(Column("d", TypeCode.DECIMAL, length=12, decimal=2)) == "decimal(12,2)"
    base = shard("orders_00")
    wide = shard("orders_01", NOTE, amount=TypeCode.BIGINT, version=9)
    merged, changed = union(base, wide, ("shop_01", "orders_01"), "shop.orders", 20)
    assert changed and merged.version == 20
    assert [(c.name, sql_type(c), c.nullable) for c in merged.columns] == [
        ("id", "int", False),
        ("amount", "bigint", True),
        ("note", "varchar(10)", True),
    ]
    same, changed = union(merged, base, ("shop_01", "orders_00"), "shop.orders", 30)  # narrower: the widest stays
    assert same is merged and not changed
    text = shard("orders_02", amount=TypeCode.VARCHAR)
    with pytest.raises(ShardDDLConflictError, match="neither holds the other"):
        union(merged, text, ("shop_01", "orders_02"), "shop.orders", 40)


def test_shape_after_an_alter_without_the_source_s_shape() -> None:
    base = shard("orders_00")
    after = shape_after(base, "ALTER TABLE `shop`.`orders` ADD COLUMN note VARCHAR(10) NULL, MODIFY amount BIGINT")
    assert [(c.name, sql_type(c)) for c in after.columns] == [
        ("id", "int"),
        ("amount", "bigint"),
        ("note", "varchar(10)"),
    ]


def test_shard_ddl_coordinated_once_rows_projected_and_conflicts_stop() -> None:
    r, told = router()
    s0, s1 = shard("orders_00"), shard("orders_01")
    first = r.route([insert(s0, (1, 10)), insert(s1, (1, 11))])
    merged = first[0].table_schema
    assert first[1].table_schema is merged and merged.qualified_name == "shop.orders"  # one shape, one version
    # The first shard adds a column: ONE DDL on the target, its shape the new merged one.
    s0b = shard("orders_00", NOTE, version=100)
    out = r.route([alter("ALTER TABLE orders_00 ADD COLUMN note VARCHAR(10) NULL", "orders_00", s0, s0b, 100)])
    assert len(out) == 1 and isinstance(out[0], DDLEvent)
    ddl = out[0]
    assert (ddl.schema, ddl.table) == ("shop", "orders") and "`shop`.`orders`" in ddl.query
    assert ddl.pre_table_schema is not None and ddl.table_schema is not None
    assert [c.name for c in ddl.pre_table_schema.columns] == ["id", "amount", "c_table"]
    assert [c.name for c in ddl.table_schema.columns] == ["id", "amount", "c_table", "note"]
    assert ddl.table_schema.version == 100
    # Rows of both shapes go into the merged one: the shard not changed yet holds NULL.
    rows = r.route([insert(s0b, (2, 20, "a")), insert(s1, (2, 21))])
    assert [(x.table_schema is ddl.table_schema, x.new) for x in rows] == [
        (True, (2, 20, "00", "a")),
        (True, (2, 21, "01", None)),
    ]
    # The same change from the next shard: nothing emitted, reported as done by another shard.
    s1b = shard("orders_01", NOTE, version=110)
    assert r.route([alter("ALTER TABLE orders_01 ADD COLUMN note VARCHAR(10)", "orders_01", s1, s1b, 110)]) == []
    # A widening, without the shape after it (a binlog file with no row of the table after the DDL).
    widen = r.route([alter("ALTER TABLE orders_01 MODIFY amount BIGINT", "orders_01", s1b, None, 120)])
    assert [sql_type(c) for c in widen[0].table_schema.columns][1] == "bigint"
    assert r.route([insert(s0b, (3, 30, None))])[0].table_schema is widen[0].table_schema
    with pytest.raises(ShardDDLConflictError, match="already varchar"):
        r.route([alter("ALTER TABLE orders_00 ADD COLUMN note INT", "orders_00", s0b, None, 130)])
    assert [o for _, _, o in told][:3] == [
        "applied",
        "skipped: done by another shard: column note already there as varchar(10)",
        "applied",
    ]
    assert told[-1][2].startswith("conflict:") and told[-1][1] == "shop_01.orders_00"


def test_a_shard_first_met_already_changed_grows_the_merged_shape() -> None:
    r, _ = router()
    first = r.route([insert(shard("orders_00"), (1, 10))])[0].table_schema
    wide = shard("orders_01", NOTE, amount=TypeCode.BIGINT, version=500)
    row = r.route([insert(wide, (1, 2**40, "n"))])[0]
    assert row.table_schema.version == 500 and row.new == (1, 2**40, "01", "n")  # no DDL: a new version
    assert [sql_type(c) for c in row.table_schema.columns] == ["int", "bigint", "varchar(64)", "varchar(10)"]
    again = r.route([insert(shard("orders_00"), (2, 20))])[0]
    assert again.table_schema is row.table_schema and again.new == (2, 20, "00", None) and first.version == 1
    assert r.route([again]) == [again] and again.new == (2, 20, "00", None)  # a routed event is never routed again


def test_rename_of_a_shard_is_still_refused() -> None:
    r, _ = router()
    r.route([insert(shard("orders_00"), (1, 10))])
    with pytest.raises(RouteError, match="does not support RENAME"):
        r.route([alter("RENAME TABLE orders_00 TO orders_x", "orders_00", None, None, 50)])


def _rows(ts: TableSchema, images: list[tuple[str, tuple[Any, ...] | None, tuple[Any, ...] | None]]) -> TableRows:
    main = [old if op == "delete" else new for op, new, old in images]
    before = [old if op == "update" else tuple(None for _ in ts.columns) for op, _, old in images]
    a = images_to_batch(ts, main)  # type: ignore[arg-type]
    b = images_to_batch(ts, before)  # type: ignore[arg-type]
    arrays = [*a.columns, pa.array([op for op, _, _ in images]), pa.array([5] * len(images), pa.int64()), *b.columns]
    names = [*a.schema.names, "op", "ts", *(f"b{i}" for i in range(len(ts.columns)))]
    return TableRows(ts, pa.RecordBatch.from_arrays(arrays, names))


def test_row_blocks_projected_as_rows_are() -> None:
    r, _ = router()
    s0, s1 = shard("orders_00", NOTE, version=100), shard("orders_01", amount=TypeCode.SMALLINT)
    a = _rows(s0, [("insert", (1, 10, "x"), None), ("update", (1, 11, "y"), (1, 10, "x"))])
    b = _rows(s1, [("insert", (2, 20), None), ("delete", None, (2, 20))])
    block = RowBlock([a, b], [Segment(0, 2, 5), Segment(1, 2, 5)])
    expected = [(x.op, x.new, x.old) for x in r.route(list(block.rows()))]
    routed = r.route([block])[0]
    assert isinstance(routed, RowBlock)
    got = list(routed.rows())
    assert [(x.op, x.new, x.old) for x in got] == expected
    assert expected[2] == (Op.INSERT, (2, 20, None, "01"), None)  # columns in the order first seen
    one = routed.tables[0].table_schema
    assert routed.tables[1].table_schema is one and routed.tables[1].batch.column(1).type == pa.int32()


_TYPES = [
    (Column("i", TypeCode.INT), st.integers(-(2**31), 2**31 - 1)),
    (Column("b", TypeCode.BIGINT, unsigned=True), st.integers(0, 2**64 - 1)),
    (Column("s", TypeCode.VARCHAR, charset="utf8mb4", length=20), st.text(max_size=20)),
    (Column("d", TypeCode.DECIMAL, length=12, decimal=2), st.decimals(-(10**9), 10**9, places=2)),
    (Column("f", TypeCode.DOUBLE), st.floats(allow_nan=False)),
    (Column("t", TypeCode.DATETIME, decimal=0), st.just("2024-01-02 03:04:05")),
    (Column("y", TypeCode.BLOB), st.binary(max_size=8)),
    (Column("e", TypeCode.ENUM, charset="utf8mb4", elements=("a", "b")), st.integers(1, 2)),
]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_projection_keeps_every_value_by_name(data: st.DataObject) -> None:
    picks = data.draw(st.lists(st.sampled_from(range(len(_TYPES))), min_size=1, unique=True))
    source = TableSchema("shop", "orders", tuple(_TYPES[i][0] for i in picks))
    merged = TableSchema("shop", "orders", tuple(c for c, _ in _TYPES))
    image = tuple(data.draw(_TYPES[i][1]) for i in picks)
    projection = Projection.of(source, merged)
    row = insert(source, image)
    projection.row(row)
    by_name = dict(zip((c.name for c in source.columns), image, strict=True))
    assert row.new == tuple(by_name.get(c.name) for c in merged.columns)
    rows = projection.rows(_rows(source, [("insert", image, None)]))
    assert [rows.column(j).type for j in range(len(merged.columns))] == [arrow_type(c) for c in merged.columns]
    got = rows.row(0).new
    assert got is not None
    assert tuple(Decimal(v) if isinstance(v, Decimal) else v for v in got) == row.new


def test_state_round_trip_decides_the_same_after_a_restart() -> None:
    r, _ = router()
    pipeline = EventPipeline.of(r)
    assert isinstance(pipeline, EventPipeline) and pipeline.stateful  # runs on the driver, state with the checkpoint
    s0, s0b, s1 = shard("orders_00"), shard("orders_00", NOTE, version=100), shard("orders_01")
    pipeline.route([insert(s0, (1, 10)), insert(s1, (1, 11))])
    saved = json.loads(json.dumps(pipeline.state()))
    assert len(pipeline.route([alter("ALTER TABLE orders_00 ADD note VARCHAR(10)", "orders_00", s0, s0b, 100)])) == 1
    after = json.loads(json.dumps(pipeline.state()))
    # Restarted from the state before the DDL (the batch replayed): the same DDL, once.
    again, _ = router()
    replay = EventPipeline.of(again)
    assert isinstance(replay, EventPipeline)
    replay.restore(saved)
    out = replay.route([alter("ALTER TABLE orders_00 ADD note VARCHAR(10)", "orders_00", s0, s0b, 100)])
    assert len(out) == 1 and out[0].table_schema.columns[-1].name == "note"
    # Restarted from the state after it: the next shard's same DDL is a repeat, and its rows get NULL.
    later, _ = router()
    resumed = EventPipeline.of(later)
    assert isinstance(resumed, EventPipeline)
    resumed.restore(after)
    assert resumed.state() == after
    s1b = shard("orders_01", NOTE, version=110)
    assert resumed.route([alter("ALTER TABLE orders_01 ADD note VARCHAR(10)", "orders_01", s1, s1b, 110)]) == []
    assert resumed.route([insert(s1, (5, 50))])[0].new == (5, 50, "01", None)
    shapes = MergedShapes()
    shapes.restore(after["merged-tables"])
    assert shapes.get(("shop", "orders")) == later.merged.get(("shop", "orders"))  # type: ignore[union-attr]


def test_a_sink_that_coordinates_itself_keeps_the_stateless_router() -> None:
    r = Router(RULES, source="s1")
    assert not r.stateful and EventPipeline.of(r) is r


def test_partial_images_keep_their_absent_columns_after_projection() -> None:
    # binlog_row_image=MINIMAL: a column a shard's image leaves out stays ABSENT; one the shard lacks is NULL.
    a, b = Column("a", TypeCode.INT), Column("b", TypeCode.INT)
    source = TableSchema("shop", "orders", (a, b))
    merged = TableSchema("shop", "orders", (b, Column("x", TypeCode.INT), a))
    rows = _rows(source, [("insert", (1, None), None), ("delete", None, (2, 3))])
    rows = TableRows(source, rows.batch, [(0b01, 1), (0b11, 1)], None)
    projected = Projection.of(source, merged).rows(rows)
    assert projected.main_runs == [(0b110, 1), (0b111, 1)]
    assert [x.image for x in (projected.row(0), projected.row(1))] == [(ABSENT, None, 1), (3, None, 2)]
