"""Online-DDL tools (changefeed/dispatch/onlineddl.py, pipeline.py): gh-ost and pt-osc sequences replayed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from changefeed.config import parse_config
from changefeed.dispatch.onlineddl import OnlineDDL, OnlineDDLError, classify
from changefeed.dispatch.pipeline import EventPipeline
from changefeed.dispatch.route import Router, RouteRule
from changefeed.files.batchstate import BatchState
from changefeed.files.store import LocalStore
from changefeed.model import Column, DDLEvent, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.ddl import classify_ddl
from changefeed.model.rowblock import RowBlock, Segment

CONFIG = 'sink-uri = "file:///tmp/osc-x"\n[source]\npath = "/tmp/osc-binlogs"\n'


def shape(table: str, extra: bool = False) -> TableSchema:
    cols = [Column("id", TypeCode.INT, nullable=False), Column("v", TypeCode.VARCHAR)]
    if extra:
        cols.append(Column("n", TypeCode.INT))
    return TableSchema("shop", table, tuple(cols), (Index("PRIMARY", ("id",), primary=True),))


def ddl(query: str, table: str, ts: int) -> DDLEvent:
    return DDLEvent("shop", table, query, int(classify_ddl(query)), commit_ts=ts)


def row(table: str, ts: int, key: int, extra: bool = False) -> RowChange:
    return RowChange(Op.INSERT, shape(table, extra), ts, new=(key, "x", 7) if extra else (key, "x"))


def gh_ost() -> list[object]:
    """What gh-ost writes to the binlog for ``ALTER TABLE orders ADD COLUMN n INT`` (DM's docs list it)."""
    return [
        row("orders", 1, 1),
        ddl(
            "create /* gh-ost */ table `shop`.`_orders_ghc` (id bigint auto_increment, last_update timestamp, "
            "hint varchar(64), value varchar(4096), primary key(id), unique key hint_uidx(hint))",
            "_orders_ghc",
            2,
        ),
        ddl("create /* gh-ost */ table `shop`.`_orders_gho` like `shop`.`orders`", "_orders_gho", 3),
        ddl("alter /* gh-ost */ table `shop`.`_orders_gho` add column `n` int", "_orders_gho", 4),
        RowChange(Op.INSERT, shape("_orders_ghc"), 5, new=(1, "state")),  # the tool's changelog
        row("_orders_gho", 6, 1, extra=True),  # the row copy
        row("orders", 7, 2),  # the application keeps writing
        row("_orders_gho", 7, 2, extra=True),  # gh-ost applies it to the ghost from the binlog
        ddl(
            "rename /* gh-ost */ table `shop`.`orders` to `shop`.`_orders_del`, "
            "`shop`.`_orders_gho` to `shop`.`orders`",
            "orders",
            8,
        ),
        ddl("drop /* gh-ost */ table if exists `shop`.`_orders_ghc`", "_orders_ghc", 9),
        ddl("drop /* gh-ost */ table if exists `shop`.`_orders_del`", "_orders_del", 10),
        row("orders", 11, 3, extra=True),
        Resolved(11),
    ]


def pt_osc() -> list[object]:
    """pt-online-schema-change's statements for ``--alter 'ADD COLUMN n INT'`` (triggers never reach us)."""
    return [
        ddl(
            "CREATE TABLE `shop`.`_orders_new` (`id` int NOT NULL, `v` varchar(10), PRIMARY KEY (`id`))",
            "_orders_new",
            2,
        ),
        ddl("ALTER TABLE `shop`.`_orders_new` ADD COLUMN n INT", "_orders_new", 3),
        ddl("ALTER TABLE `shop`.`_orders_new` ADD INDEX nidx (n)", "_orders_new", 4),
        row("_orders_new", 5, 1, extra=True),  # INSERT LOW_PRIORITY IGNORE INTO _orders_new SELECT ...
        row("orders", 6, 2),
        row("_orders_new", 6, 2, extra=True),  # the trigger's copy, in the same transaction
        ddl(
            "RENAME TABLE `shop`.`orders` TO `shop`.`_orders_old`, `shop`.`_orders_new` TO `shop`.`orders`", "orders", 7
        ),
        ddl("DROP TABLE IF EXISTS `shop`.`_orders_old`", "_orders_old", 8),
        Resolved(8),
    ]


def test_names_as_dm_reads_them() -> None:
    assert classify("_orders_gho").role == "ghost" and classify("_orders_gho").real == "orders"
    assert classify("_orders_new").real == "orders" and classify("_a_b_old").real == "a_b"
    assert [classify(t).role for t in ("_t_ghc", "_t_del", "_t_old", "t", "t_new", "_t_x")] == [
        "trash",
        "trash",
        "trash",
        "real",
        "real",
        "real",
    ]


def test_gh_ost_sequence_becomes_the_alter_of_the_real_table() -> None:
    osc = OnlineDDL()
    out = osc.apply(gh_ost())
    ddls = [e for e in out if isinstance(e, DDLEvent)]
    assert [(d.schema, d.table, d.query, d.commit_ts) for d in ddls] == [
        ("shop", "orders", "alter /* gh-ost */ table `shop`.`orders` add column `n` int", 8)
    ]
    assert ddls[0].table_schema is None or ddls[0].table_schema.table == "orders"
    rows = [e for e in out if isinstance(e, RowChange)]
    assert [(r.table, r.new[0]) for r in rows] == [("orders", 1), ("orders", 2), ("orders", 3)]
    assert isinstance(out[-1], Resolved) and osc.pending == {}


def test_pt_osc_sequence_emits_every_alter_in_order_as_one_statement() -> None:
    osc = OnlineDDL()
    out = osc.apply(pt_osc())
    ddls = [e for e in out if isinstance(e, DDLEvent)]
    assert [(e.query, e.commit_ts) for e in ddls] == [
        ("ALTER TABLE `shop`.`orders` ADD COLUMN n INT, ADD INDEX nidx (n)", 7)
    ]
    assert ddls[0].ddl_type == int(classify_ddl(ddls[0].query))
    assert [e.table for e in out if isinstance(e, RowChange)] == ["orders"]


def test_state_survives_a_restart_between_alter_and_cut_over() -> None:
    events = gh_ost()
    first = OnlineDDL()
    first.apply(events[:5])
    assert first.pending == {("shop", "orders"): ["alter /* gh-ost */ table `shop`.`orders` add column `n` int"]}
    state = json.loads(json.dumps(first.state()))
    second = OnlineDDL()
    second.restore(state)
    out = second.apply(events[5:])
    assert [e.query for e in out if isinstance(e, DDLEvent)] == [
        "alter /* gh-ost */ table `shop`.`orders` add column `n` int"
    ]
    lost = OnlineDDL().apply(events[5:])  # without the state: DM's behaviour, the cut-over alone is dropped
    assert not [e for e in lost if isinstance(e, DDLEvent)]


def test_a_new_ghost_table_forgets_an_aborted_migration() -> None:
    osc = OnlineDDL()
    osc.apply([ddl("ALTER TABLE `shop`.`_orders_gho` ADD COLUMN a INT", "_orders_gho", 1)])
    osc.apply([ddl("CREATE TABLE `shop`.`_orders_gho` LIKE `shop`.`orders`", "_orders_gho", 2)])
    assert osc.pending == {}


def test_row_blocks_lose_the_tools_tables() -> None:
    from tests.dispatch.test_route import _block, orders  # noqa: PLC0415

    real = _block(orders("shop", "orders"), [("insert", (1, 10), None)])
    ghost = _block(orders("shop", "_orders_gho"), [("insert", (1, 10), None)])
    block = RowBlock([real, ghost], [Segment(0, 1, 5), Segment(1, 1, 5)])
    (out,) = OnlineDDL().apply([block])
    assert out.tables == [real] and out.num_rows == 1
    assert OnlineDDL().apply([RowBlock([ghost], [Segment(0, 1, 5)])]) == []


def test_renames_mixing_tool_and_other_tables_are_refused() -> None:
    with pytest.raises(OnlineDDLError, match="mixes"):
        OnlineDDL().apply(
            [ddl("RENAME TABLE `shop`.`_orders_gho` TO `shop`.`orders`, `shop`.`a` TO `shop`.`b`", "b", 1)]
        )
    with pytest.raises(OnlineDDLError, match="not to its real table"):
        OnlineDDL().apply([ddl("RENAME TABLE `shop`.`_orders_gho` TO `shop`.`other`", "other", 1)])


def test_other_tables_pass_untouched() -> None:
    events = [row("orders", 1, 1), ddl("ALTER TABLE orders ADD x INT", "orders", 2), Resolved(2)]
    assert OnlineDDL().apply(list(events)) == events


def test_pipeline_runs_online_ddl_before_routing() -> None:
    router = Router([RouteRule(schema_pattern="shop", table_pattern="orders", target_schema="dw", target_table="o")])
    pipeline = EventPipeline(router, None, OnlineDDL())
    out = pipeline.route(gh_ost())
    assert [e.query for e in out if isinstance(e, DDLEvent)] == ["alter /* gh-ost */ table `dw`.`o` add column `n` int"]
    assert {e.table for e in out if isinstance(e, RowChange)} == {"o"}


def test_config_switch(tmp_path: Path) -> None:
    config = parse_config("online-ddl = true\n" + CONFIG)
    pipeline = config.router()
    assert isinstance(pipeline, EventPipeline) and pipeline.stateful and pipeline.router is None
    assert parse_config(CONFIG).router() is None


def test_batch_state_replays_a_batch_from_the_state_before_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    saved = BatchState(LocalStore(tmp_path), "state.json")
    assert saved.for_batch(0) == {}
    saved.save(0, {"a": 1})
    saved.save(1, {"a": 2})
    again = BatchState(LocalStore(tmp_path), "state.json")  # a restart
    assert again.for_batch(1) == {"a": 1}  # batch 1 replayed (Spark had not committed it)
    assert again.for_batch(2) == {"a": 2}
    again.save(2, {"a": 2})  # unchanged: not rewritten
    assert BatchState(LocalStore(tmp_path), "state.json").for_batch(2) == {"a": 2}
    path.write_text("{")
    with pytest.raises(Exception, match="corrupt"):
        BatchState(LocalStore(tmp_path), "state.json")


def test_status_shows_the_alters_waiting_for_their_cut_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from changefeed.cli import main  # noqa: PLC0415

    osc = OnlineDDL()
    osc.apply(gh_ost()[:4])
    BatchState(LocalStore(tmp_path)).save(0, EventPipeline(None, None, osc).state())
    (tmp_path / "offsets").mkdir()  # a Spark checkpoint that planned no batch yet
    assert main(["status", "--checkpoint", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "online DDL of shop.orders waiting for its cut-over:" in out
    assert "alter /* gh-ost */ table `shop`.`orders` add column `n` int" in out
    assert main(["status", "--checkpoint", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["online_ddl"] == [
        {"table": "shop.orders", "alters": ["alter /* gh-ost */ table `shop`.`orders` add column `n` int"]}
    ]
