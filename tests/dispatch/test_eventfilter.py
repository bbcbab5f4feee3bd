"""TiCDC's event filters (changefeed/dispatch/eventfilter.py): kinds, DDL text, row value expressions."""

from __future__ import annotations

import pickle
import re
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.config import parse_config
from changefeed.dispatch.eventfilter import EventFilter, EventFilterError, EventFilterRule, Expression
from changefeed.dispatch.pipeline import EventPipeline
from changefeed.errors import ConfigError
from changefeed.model import Column, DDLEvent, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.ddl import classify_ddl
from changefeed.model.rowblock import RowBlock, Segment, TableRows

CONFIG = 'sink-uri = "file:///tmp/ef-x"\n[source]\npath = "/tmp/ef-binlogs"\n'

WORKER = TableSchema(
    "test",
    "worker",
    (Column("id", TypeCode.INT, nullable=False), Column("name", TypeCode.VARCHAR), Column("age", TypeCode.INT)),
    (Index("PRIMARY", ("id",), primary=True),),
)
OTHER = WORKER.renamed("test", "other")


#: One expression per row event kind (TiCDC's keys); DM's expression-filter says the same in other words.
VALUE_EXPRS = {
    "ignore-insert-value-expr": "id >= 100",
    "ignore-delete-value-expr": "name = 'john'",
    "ignore-update-old-value-expr": "age < 18 or name = 'lili'",
    "ignore-update-new-value-expr": "name = 'male' and age > 18",
}


def rule(**kw: Any) -> EventFilterRule:
    return EventFilterRule.from_mapping({"matcher": ["test.worker"], **kw})


def ddl(query: str, schema: str = "test", table: str = "worker") -> DDLEvent:
    return DDLEvent(schema, table, query, int(classify_ddl(query)), commit_ts=10)


def ins(key: int, name: str | None, age: int | None, ts: TableSchema = WORKER) -> RowChange:
    return RowChange(Op.INSERT, ts, 5, new=(key, name, age))


def upd(key: int, old: tuple[Any, ...], new: tuple[Any, ...]) -> RowChange:
    return RowChange(Op.UPDATE, WORKER, 5, new=(key, *new), old=(key, *old))


def dele(key: int, name: str, age: int) -> RowChange:
    return RowChange(Op.DELETE, WORKER, 5, old=(key, name, age))


def test_ignore_event_kinds() -> None:
    f = EventFilter([rule(**{"ignore-event": ["insert", "drop table"]})])
    events = [ins(1, "a", 1), ins(1, "a", 1, OTHER), dele(2, "b", 2), ddl("DROP TABLE worker"), ddl("TRUNCATE worker")]
    assert f.apply(events) == events[1:3] + events[4:]
    f = EventFilter([rule(**{"ignore-event": ["all dml"]})])
    assert f.apply([ins(1, "a", 1), upd(1, ("a", 1), ("b", 2)), dele(1, "b", 2), Resolved(5)]) == [Resolved(5)]
    f = EventFilter([rule(**{"ignore-event": ["alter table"]})])
    kept = f.apply(
        [ddl("ALTER TABLE worker ADD c INT"), ddl("ALTER TABLE worker ADD INDEX (age)"), ddl("DROP TABLE worker")]
    )
    assert [d.query for d in kept] == ["DROP TABLE worker"]
    f = EventFilter([rule(**{"ignore-event": ["all ddl"]})])
    assert f.apply([ddl("CREATE TABLE worker (id INT)"), ins(1, "a", 1)]) == [ins(1, "a", 1)]


def test_ignore_sql_regexps_and_schema_statements() -> None:
    f = EventFilter([rule(**{"ignore-sql": ["^drop", "add column"]})])
    events = [
        ddl("DROP TABLE worker"),
        ddl("ALTER TABLE worker ADD COLUMN c INT"),
        ddl("ALTER TABLE worker ADD INDEX i (age)"),
        ddl("DROP DATABASE test", table=""),  # TiCDC: the matcher names the schema, so this is concerned too
        ddl("DROP TABLE other", table="other"),
    ]
    assert [d.query for d in f.apply(events)] == ["ALTER TABLE worker ADD INDEX i (age)", "DROP TABLE other"]


def test_value_expressions_on_rows() -> None:
    f = EventFilter([rule(**VALUE_EXPRS)])
    events = [
        ins(1, "a", 1),
        ins(100, "b", 2),  # dropped
        ins(101, None, None, OTHER),  # another table: kept
        dele(3, "john", 30),  # dropped
        dele(4, "jane", 30),
        upd(5, ("x", 10), ("x", 30)),  # old age < 18: dropped
        upd(6, ("lili", 30), ("y", 30)),  # old name: dropped
        upd(7, ("z", 30), ("male", 40)),  # new value: dropped
        upd(8, ("z", 30), ("male", 10)),
        upd(9, ("z", None), ("z", None)),  # NULL comparisons are not TRUE: kept
    ]
    kept = f.apply(events)
    assert [(e.op.value, e.image[0]) for e in kept] == [
        ("insert", 1),
        ("insert", 101),
        ("delete", 4),
        ("update", 8),
        ("update", 9),
    ]


def _rows(ts: TableSchema, rows: list[tuple[str, tuple[Any, ...] | None, tuple[Any, ...] | None]]) -> TableRows:
    main = [old if op == "delete" else new for op, new, old in rows]
    before = [old if op == "update" else None for op, _, old in rows]
    types = [pa.int32(), pa.string(), pa.int32()]
    arrays = [pa.array([m[i] for m in main], types[i]) for i in range(3)]
    arrays += [pa.array([op for op, _, _ in rows]), pa.array([5] * len(rows), pa.int64())]
    arrays += [pa.array([None if b is None else b[i] for b in before], types[i]) for i in range(3)]
    names = ["id", "name", "age", "op", "ts", "b_id", "b_name", "b_age"]
    return TableRows(ts, pa.RecordBatch.from_arrays(arrays, names))


def test_row_blocks_filtered_vectorised_like_the_rows_path() -> None:
    f = EventFilter(
        [
            rule(
                **{
                    "ignore-insert-value-expr": "age > 50",
                    "ignore-update-old-value-expr": "name = 'old'",
                    "ignore-event": ["delete"],
                }
            )
        ]
    )
    a = _rows(
        WORKER,
        [
            ("insert", (1, "a", 60), None),
            ("insert", (2, "b", 20), None),
            ("update", (2, "c", 20), (2, "old", 20)),
            ("delete", None, (2, "c", 20)),
            ("insert", (3, "d", 70), None),
            ("insert", (4, "e", 10), None),
        ],
    )
    b = _rows(OTHER, [("insert", (9, "z", 99), None)])
    pos = {"file": "binlog.000001", "pos": 4}
    block = RowBlock([a, b], [Segment(0, 4, 5, pos, 0), Segment(1, 1, 6, pos, 4), Segment(0, 2, 7, pos, 5)])
    expected = f.apply(list(block.rows()))
    (out,) = f.apply([block])
    got = list(out.rows())
    assert [(r.op, r.table, r.new, r.old, r.position) for r in got] == [
        (r.op, r.table, r.new, r.old, r.position) for r in expected
    ]
    assert [(r.table, r.image[0]) for r in got] == [("worker", 2), ("other", 9), ("worker", 4)]
    assert [r.position["skip"] for r in got] == [1, 4, 6]  # each kept row keeps its own position
    everything = EventFilter([rule(**{"ignore-event": ["all dml"]})])
    assert everything.apply([RowBlock([a], [Segment(0, 6, 5)])]) == []


def test_expression_errors() -> None:
    with pytest.raises(ConfigError, match="not supported"):
        Expression("id = (SELECT 1)")
    with pytest.raises(ConfigError, match="does not parse"):
        Expression("id = = 1")
    f = EventFilter([rule(**{"ignore-insert-value-expr": "missing = 1"})])
    with pytest.raises(EventFilterError, match="missing"):
        f.apply([ins(1, "a", 1)])
    with pytest.raises(ConfigError, match="ignore-event"):
        rule(**{"ignore-event": ["inserts"]})
    with pytest.raises(ConfigError, match="unknown key"):
        EventFilterRule.from_mapping({"matcher": ["a.b"], "ignore-dml": ["x"]})


def test_config_and_pickling() -> None:
    config = parse_config(
        CONFIG + '[[filter.event-filters]]\nmatcher = ["test.worker"]\nignore-event = ["delete"]\n'
        'ignore-insert-value-expr = "age >= 18"\n'
    )
    pipeline = config.router()
    assert isinstance(pipeline, EventPipeline) and not pipeline.stateful
    shipped = pickle.loads(pickle.dumps(pipeline))  # to executors
    assert shipped.route([ins(1, "a", 20), ins(2, "b", 3), dele(3, "c", 3)]) == [ins(2, "b", 3)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(st.none(), st.integers(-5, 5)), st.sampled_from(["a", "b", None])), max_size=12),
    st.sampled_from(["age > 0", "age <= 1 or name = 'a'", "not (age = 2)", "age in (1, -1)", "name is null"]),
)
def test_vectorised_agrees_with_python(rows: list[tuple[int | None, str | None]], text: str) -> None:
    expr = Expression(text)
    cols = {"age": pa.array([a for a, _ in rows], pa.int32()), "name": pa.array([n for _, n in rows], pa.string())}
    got = expr.mask(cols.__getitem__, len(rows)).tolist()

    def python(age: int | None, name: str | None) -> bool:
        if text == "age > 0":
            return age is not None and age > 0
        if text == "age <= 1 or name = 'a'":
            return (age is not None and age <= 1) or name == "a"
        if text == "not (age = 2)":
            return age is not None and age != 2
        if text == "age in (1, -1)":
            return age in (1, -1)
        return name is None

    assert got == [python(a, n) for a, n in rows]


def test_dm_expression_filters_are_ticdc_value_expressions_under_other_names() -> None:
    """DM's ``expression-filter`` (schema, table, insert-/update-before-/update-after-/delete-value-expr) in
    ``[[filter.expression-filters]]`` drops the same rows as the TiCDC rule with ``ignore-*-value-expr``."""
    dm = parse_config(
        CONFIG + '[[filter.expression-filters]]\nschema = "test"\ntable = "worker"\ninsert-value-expr = "id >= 100"\n'
        "delete-value-expr = \"name = 'john'\"\nupdate-before-value-expr = \"age < 18 or name = 'lili'\"\n"
        "update-after-value-expr = \"name = 'male' and age > 18\"\n"
    ).router()
    ticdc = EventFilter([rule(**VALUE_EXPRS)])
    events = [
        ins(1, "a", 1),
        ins(100, "b", 2),
        ins(101, None, None, OTHER),
        dele(3, "john", 30),
        dele(4, "jane", 30),
        upd(5, ("x", 10), ("x", 30)),
        upd(7, ("z", 30), ("male", 40)),
        upd(8, ("z", 30), ("male", 10)),
    ]
    assert dm is not None
    kept = dm.route(events)
    assert kept == ticdc.apply(events)
    assert [(e.op.value, e.image[0]) for e in kept] == [("insert", 1), ("insert", 101), ("delete", 4), ("update", 8)]
    for bad, message in [
        ('schema = "test"\ntable = "w*"\ninsert-value-expr = "id > 1"\n', "is a pattern"),
        ('schema = "test"\ninsert-value-expr = "id > 1"\n', "needs schema and table"),
        ('schema = "test"\ntable = "worker"\ninsert-value-exp = "id > 1"\n', "unknown key(s) insert-value-exp"),
        ('schema = "test"\ntable = "worker"\ninsert-value-expr = "id >"\n', "expression-filters]] #1"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse_config(CONFIG + "[[filter.expression-filters]]\n" + bad)
