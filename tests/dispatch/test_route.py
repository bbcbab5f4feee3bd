"""Table routing (changefeed/dispatch/route.py, ddlrewrite.py): DM's and TiCDC's rules, events, DDL text."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from changefeed.config import parse_config
from changefeed.dispatch.ddlrewrite import add_shard_columns, rename_tables, table_spans
from changefeed.dispatch.pipeline import EventPipeline
from changefeed.dispatch.route import Extract, RouteError, Router, RouteRule, ShardDDL, dm_pattern
from changefeed.errors import ConfigError
from changefeed.model import Column, DDLEvent, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.ddl import classify_ddl
from changefeed.model.rowblock import RowBlock, Segment, TableRows

CONFIG = 'sink-uri = "file:///tmp/route-x"\n[source]\npath = "/tmp/route-binlogs"\n'

SHARD_RULES = [
    RouteRule(
        schema_pattern="shop_*",
        table_pattern="orders_*",
        target_schema="shop",
        target_table="orders",
        extract_table=Extract("c_table", "orders_(.*)"),
        extract_schema=Extract("c_schema", "shop_(.*)"),
        extract_source=Extract("c_source", "(.*)"),
    ),
    RouteRule(schema_pattern="shop_*", target_schema="shop"),
]


def orders(schema: str = "shop_01", table: str = "orders_00") -> TableSchema:
    return TableSchema(
        schema,
        table,
        (Column("id", TypeCode.INT, nullable=False), Column("amount", TypeCode.INT)),
        (Index("PRIMARY", ("id",), primary=True),),
    )


def ddl(query: str, schema: str, table: str = "") -> DDLEvent:
    return DDLEvent(schema, table, query, int(classify_ddl(query)), commit_ts=10)


# ---------------------------------------------------------------------------------------------- patterns


def test_dm_wildcards_and_regexps() -> None:
    assert dm_pattern("shop_*").search("SHOP_01")  # case-insensitive, as DM by default
    assert not dm_pattern("shop_*").search("xshop_01")
    assert dm_pattern("t_?").search("t_1") and not dm_pattern("t_?").search("t_12")
    assert dm_pattern("t_[12]").search("t_2") and not dm_pattern("t_[!12]").search("t_2")
    assert dm_pattern("~^t_\\d+$").search("t_42") and not dm_pattern("~^t_\\d+$").search("t_x")
    with pytest.raises(ConfigError, match="one \\* and only at the end"):
        dm_pattern("a*b")
    with pytest.raises(ConfigError, match="one \\*"):
        dm_pattern("a**")


def test_table_rules_before_schema_rules_and_one_table_rule_only() -> None:
    router = Router(SHARD_RULES, source="src-1")
    t = router.target("shop_01", "orders_07")
    assert t is not None and t.name == ("shop", "orders") and t.merge
    assert t.extras == (("c_table", "07"), ("c_schema", "01"), ("c_source", "src-1"))
    other = router.target("shop_02", "users")  # the schema rule: the table keeps its name
    assert other is not None and other.name == ("shop", "users") and not other.extras and not other.merge
    assert router.target("billing", "orders_00") is None
    assert router.target_schema("shop_03") == "shop" and router.target_schema("billing") == "billing"
    twice = Router([*SHARD_RULES, RouteRule(schema_pattern="shop_01", table_pattern="orders_0*", target_schema="x")])
    with pytest.raises(RouteError, match="matches 2 table routes"):
        twice.target("shop_01", "orders_00")


def test_ticdc_dispatcher_targets_with_placeholders() -> None:
    config = parse_config(
        CONFIG + '[[sink.dispatchers]]\nmatcher = ["sales.*", "!sales.tmp*"]\n'
        'target-schema = "archive"\ntarget-table = "{schema}_{table}"\n'
        '[[sink.dispatchers]]\nmatcher = ["ops.*"]\ntarget-schema = "ops_mirror"\npartition = "ts"\n'
    )
    router = config.router()
    assert router is not None
    hit = router.target("sales", "orders")
    assert hit is not None and hit.name == ("archive", "sales_orders") and not hit.merge
    assert router.target("sales", "tmp1") is None
    assert router.target("ops", "jobs").name == ("ops_mirror", "jobs")  # type: ignore[union-attr]
    assert [d.matcher for d in config.sink.dispatchers] == [["ops.*"]]  # the one with a partition rule stays
    with pytest.raises(ConfigError, match="unknown placeholder"):
        parse_config(CONFIG + '[[sink.dispatchers]]\nmatcher = ["a.*"]\ntarget-table = "{db}"\n')


def test_config_routes_are_checked() -> None:
    config = parse_config(
        'changefeed-id = "cf1"\n'
        + CONFIG
        + '[[routes]]\nschema-pattern = "shop_*"\ntable-pattern = "orders_*"\ntarget-schema = "shop"\n'
        'target-table = "orders"\nextract-table = { table-regexp = "orders_(.*)", target-column = "c_table" }\n'
    )
    pipeline = config.router()  # a storage sink: the router keeps merged shapes, so it comes in a stateful pipeline
    assert isinstance(pipeline, EventPipeline) and pipeline.stateful
    router = pipeline.router
    assert router is not None and router.source == "cf1"
    assert router.target("shop_9", "orders_3").extras == (("c_table", "3"),)  # type: ignore[union-attr]
    for bad, message in [
        ('[[routes]]\nschema-pattern = "a"\n', "target-schema is required"),
        ('[[routes]]\nschema-pattern = "a"\ntarget-schema = "b"\ntable-patern = "x"\n', "unknown key"),
        ('[[routes]]\nschema-pattern = "a"\ntarget-schema = "b"\ntable-pattern = "t"\n'
         'extract-table = { table-regexp = "~x", target-column = "c" }\n', "must not start with ~"),
        ('shard-mode = "pessimistic"\n', "shard-mode"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            parse_config('sink-uri = "file:///tmp/x"\n' + bad + '[source]\npath = "/tmp/x"\n')
    assert parse_config(CONFIG).router() is None


# ---------------------------------------------------------------------------------------------- rows


def test_row_changes_get_target_names_shard_columns_and_keys() -> None:
    router = Router(SHARD_RULES, source="s1")
    ts = orders()
    rows = [
        RowChange(Op.INSERT, ts, 5, new=(1, 10)),
        RowChange(Op.UPDATE, ts, 6, new=(1, 11), old=(1, 10)),
        RowChange(Op.DELETE, ts, 7, old=(1, 11)),
        Resolved(7),
    ]
    out = router.route(rows)
    assert [type(e) for e in out] == [RowChange, RowChange, RowChange, Resolved]
    shape = out[0].table_schema
    assert (shape.schema, shape.table) == ("shop", "orders")
    assert [c.name for c in shape.columns] == ["id", "amount", "c_table", "c_schema", "c_source"]
    assert [shape.columns[i].name for i in shape.primary_key] == ["id", "c_table", "c_schema", "c_source"]
    assert out[0].new == (1, 10, "00", "01", "s1")
    assert out[1].old == (1, 10, "00", "01", "s1") and out[2].old == (1, 11, "00", "01", "s1")
    assert all(e.table_schema is shape for e in out[:3])  # one routed shape per table shape
    assert router.route(out) == out and out[0].new == (1, 10, "00", "01", "s1")  # never routed twice


def _block(ts: TableSchema, rows: list[tuple[str, tuple[Any, ...] | None, tuple[Any, ...] | None]]) -> TableRows:
    main = [old if op == "delete" else new for op, new, old in rows]
    before = [old if op == "update" else None for op, _, old in rows]
    arrays = [pa.array([m[i] for m in main], pa.int32()) for i in range(2)]
    arrays += [pa.array([op for op, _, _ in rows]), pa.array([5] * len(rows), pa.int64())]
    arrays += [pa.array([None if b is None else b[i] for b in before], pa.int32()) for i in range(2)]
    return TableRows(ts, pa.RecordBatch.from_arrays(arrays, ["id", "amount", "op", "ts", "b_id", "b_amount"]))


def test_row_blocks_routed_per_table_with_the_rows_path_s_result() -> None:
    router = Router(SHARD_RULES, source="s1")
    a = _block(orders(), [("insert", (1, 10), None), ("update", (1, 11), (1, 10)), ("delete", None, (1, 11))])
    b = _block(orders("billing", "orders_00"), [("insert", (2, 20), None)])
    block = RowBlock([a, b], [Segment(0, 2, 5), Segment(1, 1, 5), Segment(0, 1, 5)])
    expected = router.route(list(block.rows()))
    routed = router.route([block])[0]
    assert isinstance(routed, RowBlock) and routed.tables[1] is b  # an unrouted table is left as it is
    got = list(routed.rows())
    assert [(r.op, r.schema, r.table, r.new, r.old) for r in got] == [
        (r.op, r.schema, r.table, r.new, r.old) for r in expected
    ]
    assert got[1].old == (1, 10, "00", "01", "s1")
    # Slices of one origin (one per Kafka message) are extended once and stay slices of it.
    sliced = RowBlock([a.slice(0, 1), a.slice(1, 2)], [Segment(0, 1, 5), Segment(1, 2, 5)])
    first, second = router.route([sliced])[0].tables
    assert first.origin[0] is second.origin[0] and second.origin[1] == 1
    plain = Router([RouteRule(schema_pattern="shop_01", table_pattern="orders_00", target_schema="x")])
    renamed = plain.route([RowBlock([a], [Segment(0, 3, 5)])])[0].tables[0]
    assert renamed.batch is a.batch and renamed.table_schema.qualified_name == "x.orders_00"  # zero-copy


def test_router_pickles_without_its_caches() -> None:
    router = Router(SHARD_RULES, source="s1")
    router.route([RowChange(Op.INSERT, orders(), 5, new=(1, 1))])
    copy = pickle.loads(pickle.dumps(router))
    assert copy.target("shop_01", "orders_00") == router.target("shop_01", "orders_00")


# ---------------------------------------------------------------------------------------------- DDL


def test_ddl_names_rewritten_and_shard_create_gets_columns() -> None:
    router = Router(SHARD_RULES, source="s1")
    create = router.route_ddl(
        ddl(
            "CREATE TABLE orders_00 (id INT NOT NULL, amount INT, PRIMARY KEY (id)) ENGINE=InnoDB",
            "shop_01",
            "orders_00",
        )
    )
    assert isinstance(create, ShardDDL) and (create.schema, create.table) == ("shop", "orders")
    assert create.shard == ("shop_01", "orders_00")
    assert create.query.startswith("CREATE TABLE `shop`.`orders` (id INT NOT NULL, amount INT, PRIMARY KEY (id, ")
    assert create.query.endswith(") ENGINE=InnoDB")
    tree = sqlglot.parse_one(create.query, read="mysql")
    names = [c.name for c in tree.find_all(exp.ColumnDef)]
    assert names == ["id", "amount", "c_table", "c_schema", "c_source"]
    alter = router.route_ddl(ddl("ALTER TABLE shop_02.orders_01 ADD COLUMN note TEXT NULL", "shop_01", "orders_01"))
    assert alter is not None and alter.query == "ALTER TABLE `shop`.`orders` ADD COLUMN note TEXT NULL"
    db = router.route_ddl(ddl("CREATE DATABASE IF NOT EXISTS `shop_01` CHARSET utf8mb4", "shop_01"))
    assert db is not None and db.schema == "shop" and db.query == "CREATE DATABASE IF NOT EXISTS `shop` CHARSET utf8mb4"
    # DM in shard mode: a shard's DROP/TRUNCATE never reaches the merged table; RENAME is refused.
    assert router.route_ddl(ddl("DROP TABLE orders_00", "shop_01", "orders_00")) is None
    assert router.route_ddl(ddl("TRUNCATE TABLE orders_00", "shop_01", "orders_00")) is None
    with pytest.raises(RouteError, match="RENAME TABLE"):
        router.route_ddl(ddl("RENAME TABLE orders_00 TO orders_old", "shop_01", "orders_old"))
    # Not merged: every statement kind gets the names, qualified and unqualified, in the event's schema.
    plain = Router([RouteRule(schema_pattern="src", table_pattern="t*", target_schema="dst", target_table="")])
    for query, table, expected in [
        ("DROP TABLE IF EXISTS t1, other.t2, u", "t1", "DROP TABLE IF EXISTS `dst`.`t1`, other.t2, u"),
        ("TRUNCATE TABLE `t1`", "t1", "TRUNCATE TABLE `dst`.`t1`"),
        ("RENAME TABLE t1 TO t2, src.u TO src.t3", "t3", "RENAME TABLE `dst`.`t1` TO `dst`.`t2`, src.u TO `dst`.`t3`"),
        ("ALTER TABLE t1 RENAME TO t9", "t9", "ALTER TABLE `dst`.`t1` RENAME TO `dst`.`t9`"),
        ("CREATE INDEX i ON t1 (a)", "t1", "CREATE INDEX i ON `dst`.`t1` (a)"),
        ("DROP INDEX t5 ON t1", "t1", "DROP INDEX t5 ON `dst`.`t1`"),
        ("CREATE TABLE t1 LIKE src.t0", "t1", "CREATE TABLE `dst`.`t1` LIKE `dst`.`t0`"),
        (
            "create table t1 (a int) /*!50100 PARTITION BY HASH (a) */",
            "t1",
            "create table `dst`.`t1` (a int) /*!50100 PARTITION BY HASH (a) */",
        ),
        ("create table t1 (a int) partition by hash(a) partitions 4", "t1", None),
    ]:
        routed = plain.route_ddl(ddl(query, "src", table))
        assert routed is not None and routed.schema == "dst" and not isinstance(routed, ShardDDL)
        if expected is not None:
            assert routed.query == expected, query
        else:
            assert routed.query.startswith("create table `dst`.`t1` (a int) partition by"), routed.query


def test_column_level_keys_become_table_keys_with_shard_columns() -> None:
    query = "CREATE TABLE t (id INT PRIMARY KEY, code VARCHAR(8) UNIQUE KEY COMMENT 'primary key', n INT, KEY k (n))"
    out = add_shard_columns(query, "s", ["c_table"])
    tree = sqlglot.parse_one(out, read="mysql")
    keys = [(type(k).__name__, [c.name for c in k.find_all(exp.Identifier, exp.Column)]) for k in tree.this.expressions]
    assert ("PrimaryKey", ["id", "c_table"]) in keys
    assert "COMMENT 'primary key'" in out and "KEY k (n)" in out
    assert out.count("PRIMARY KEY") == 1 and "UNIQUE KEY (`code`, `c_table`)" in out
    with pytest.raises(Exception, match="already has a column"):
        add_shard_columns("CREATE TABLE t (c_table INT)", "s", ["c_table"])


def test_unroutable_ddl_of_a_routed_table_is_an_error_of_an_unrouted_one_passes() -> None:
    router = Router([RouteRule(schema_pattern="src", table_pattern="t1", target_schema="dst")])
    bad = ddl("ALTER TABLE t1 ADD COLUMN `x INT", "src", "t1")
    with pytest.raises(RouteError, match="cannot route"):
        router.route_ddl(bad)
    other = ddl("ALTER TABLE u ADD COLUMN `x INT", "src", "u")
    assert router.route_ddl(other) is other


# ---------------------------------------------------------------------------------------------- properties

NAMES = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00"), min_size=1, max_size=12
).filter(lambda s: s.strip() == s and not s.endswith(" "))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@settings(max_examples=60, deadline=None)
@given(schema=NAMES, table=NAMES, target=st.tuples(NAMES, NAMES), qualified=st.booleans())
def test_any_name_is_found_and_replaced(schema: str, table: str, target: tuple[str, str], qualified: bool) -> None:
    assume(target != (schema, table))
    name = f"{_q(schema)}.{_q(table)}" if qualified else _q(table)
    for query in (
        f"CREATE TABLE {name} (id INT PRIMARY KEY)",
        f"ALTER TABLE {name} ADD COLUMN x INT",
        f"DROP TABLE IF EXISTS {name}",
        f"TRUNCATE TABLE {name}",
        f"RENAME TABLE {name} TO {name}",
    ):
        spans = table_spans(query, schema)
        assert {s.name for s in spans} == {(schema, table)}, query
        out, _ = rename_tables(query, schema, lambda s, t: target)
        assert {s.name for s in table_spans(out, "elsewhere")} == {target}, out
    routed = Router(
        [RouteRule(schema_pattern="~.", table_pattern="~.", target_schema=target[0], target_table=target[1])]
    )
    row = routed.route([RowChange(Op.INSERT, orders(schema, table), 1, new=(1, 2))])[0]
    assert (row.schema, row.table) == target


@settings(max_examples=60, deadline=None)
@given(schema=NAMES, table=NAMES)
def test_a_pattern_that_does_not_match_passes_events_unchanged(schema: str, table: str) -> None:
    router = Router([RouteRule(schema_pattern="no_such_db_*", table_pattern="*", target_schema="x", target_table="y")])
    ts = orders(schema, table)
    row = RowChange(Op.INSERT, ts, 1, new=(1, 2))
    block = RowBlock([_block(ts, [("insert", (1, 2), None)])], [Segment(0, 1, 1)])
    event = ddl(f"ALTER TABLE {_q(schema)}.{_q(table)} ADD c INT", schema, table)
    out = router.route([row, block, event, Resolved(2)])
    assert out[0] is row and row.table_schema is ts and row.new == (1, 2)
    assert out[1] is block and out[2] is event and isinstance(out[3], Resolved)


def test_capture_command_routes_with_routes_file(tmp_path: Any, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from changefeed.cli import main  # noqa: PLC0415
    from changefeed.model.jsonl import EventReader  # noqa: PLC0415

    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nschema-pattern = "cf"\ntable-pattern = "ints*"\ntarget-schema = "merged"\n'
        '[[routes]]\nschema-pattern = "cf"\ntarget-schema = "other"\n'
    )
    assert main(["capture", "--from", "file://tests/fixtures/binlog/full", "--routes", str(routes)]) == 0
    events = list(EventReader().read(capsysbinary.readouterr().out.splitlines()))
    names = {(e.schema, e.table) for e in events if isinstance(e, RowChange | DDLEvent)}
    assert names == {
        ("other", ""),
        ("merged", "ints"),
        ("merged", "ints2"),
        *(("other", t) for t in ("nums", "strs", "times")),
    }
    assert "RENAME TABLE `merged`.`ints` TO `merged`.`ints2`" in [e.query for e in events if isinstance(e, DDLEvent)]
    # Merging the two tables (one target) meets the fixture's RENAME of a shard: refused, as DM does.
    routes.write_text(
        '[[routes]]\nschema-pattern = "cf"\ntable-pattern = "ints*"\ntarget-schema = "m"\ntarget-table = "all"\n'
    )
    assert main(["capture", "--from", "file://tests/fixtures/binlog/full", "--routes", str(routes)]) == 1
    assert b"DM does not support RENAME TABLE in shard merge" in capsysbinary.readouterr().err
