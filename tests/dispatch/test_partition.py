"""Partition choice matches TiCDC's own dispatcher tests (fixtures/dispatch/partition_dispatch.json)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changefeed.dispatch import (
    ColumnsDispatcher,
    DispatchRule,
    EventRouter,
    IndexValueDispatcher,
    TableDispatcher,
    TopicDispatcher,
    TsDispatcher,
    make_partition_dispatcher,
    split_key_changing_update,
)
from changefeed.errors import ConfigError
from changefeed.model import Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.model.tablefilter import TableFilter

CASES = json.loads((Path(__file__).parents[1] / "fixtures/dispatch/partition_dispatch.json").read_text())["cases"]
UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}


def _row(schema: str, table: str, values: list[dict[str, Any]], index: Index | None = None) -> RowChange:
    cols = tuple(Column(v["column"], TypeCode.INT, nullable=False) for v in values) or (
        Column("id", TypeCode.INT, nullable=False),
    )
    image = tuple(int(v["value_string"]) for v in values) or (1,)
    idx = index or Index("PRIMARY", tuple(c.name for c in cols), primary=True)
    ts = TableSchema(schema, table, cols, (idx,))
    return RowChange(Op.INSERT, ts, 1, new=image)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_ticdc_vectors(case: dict[str, Any]) -> None:
    inp, expected = case["input"], case["expected"]
    n = inp.get("partition_num", 16)
    rule = inp["rule"]
    if rule == "ts":
        row = _row("test", "t", [])
        row.commit_ts = inp["commit_ts"]
        assert TsDispatcher().partition(row, n) == (expected["partition"], expected["partition_key"])
        return
    if rule in ("table", "default"):
        row = _row(inp["schema"], inp["table"], [])
        part, key = make_partition_dispatcher(rule).partition(row, n)
        assert part == expected["partition"]
        assert zlib.crc32(f"{inp['schema']}{inp['table']}".encode()) == expected["hash_uint32"]
        if "partition_key" in expected:
            assert key == expected["partition_key"]
        return
    if rule == "columns":
        values = inp["column_values"]
        row = _row(inp["schema"], inp["table"], values)
        disp = ColumnsDispatcher([v["column"].lower() for v in values])  # config case does not matter
        part, key = disp.partition(row, n)
        assert (part, key) == (expected["partition"], expected["partition_key"])
        return
    assert rule == "index-value"
    if "index" in inp:
        values = inp["index_values"]
        row = _row(
            inp["schema"], inp["table"], values, Index(inp["index"], tuple(v["column"] for v in values), unique=True)
        )
        disp = IndexValueDispatcher(index=inp["index"].upper())
    else:
        values = inp["handle_key_values"]
        row = _row(inp["schema"], inp["table"], values)
        disp = IndexValueDispatcher()
    assert disp.hash(row) == expected["hash_uint32"]
    assert disp.partition(row, n)[0] == expected["partition"]


def _table(**kw: Any) -> TableSchema:
    return TableSchema(
        "db",
        "t",
        (
            Column("id", TypeCode.BIGINT, nullable=False),
            Column("u", TypeCode.VARCHAR, nullable=False, length=10, **UTF8),
            Column("b", TypeCode.VARCHAR, charset="binary"),
            Column("f", TypeCode.FLOAT),
        ),
        (Index("PRIMARY", ("id",), primary=True), Index("uk", ("u",), unique=True)),
        **kw,
    )


def test_value_strings_fed_to_the_hash() -> None:
    # Binary bytes are hashed raw; floats with shortest float32 'f' digits (spec §4.2 valueString).
    t = _table()
    row = RowChange(Op.INSERT, t, 1, new=(5, "é", b"\xff\x00", 0.5))
    disp = ColumnsDispatcher(["b", "f", "u"])
    expect = zlib.crc32(b"dbt") ^ zlib.crc32(b"b\xff\x00") ^ zlib.crc32(b"f0.5") ^ zlib.crc32("ué".encode())
    assert disp.hash(row) == expect


def test_null_handling_differs_by_line() -> None:
    t = _table()
    row = RowChange(Op.INSERT, t, 1, new=(5, "x", None, None))
    base = zlib.crc32(b"dbt") ^ zlib.crc32(b"ux")
    assert ColumnsDispatcher(["u", "b"]).hash(row) == base  # [ticdc] skips NULL
    assert ColumnsDispatcher(["u", "b"], null_as_text=True).hash(row) == base ^ zlib.crc32(b"bnull")  # [tiflow]


def test_delete_hashes_the_old_row() -> None:
    t = _table()
    ins = RowChange(Op.INSERT, t, 1, new=(7, "k", None, None))
    dele = RowChange(Op.DELETE, t, 2, old=(7, "k", None, None))
    assert IndexValueDispatcher().partition(ins, 8) == IndexValueDispatcher().partition(dele, 8)


def test_unknown_columns_and_rules_are_config_errors() -> None:
    row = RowChange(Op.INSERT, _table(), 1, new=(1, "a", None, None))
    with pytest.raises(ConfigError, match="no column"):
        ColumnsDispatcher(["nope"]).partition(row, 4)
    with pytest.raises(ConfigError, match="no index named"):
        IndexValueDispatcher(index="nope").partition(row, 4)
    with pytest.raises(ConfigError, match="unknown partition dispatcher"):
        make_partition_dispatcher("random")


@given(st.integers(1, 64), st.integers(-(2**63), 2**63 - 1))
def test_partition_is_always_in_range(n: int, key: int) -> None:
    row = RowChange(Op.INSERT, _table(), 1, new=(key, "a", None, None))
    for disp in (TableDispatcher(), TsDispatcher(), IndexValueDispatcher()):
        assert 0 <= disp.partition(row, n)[0] < n


def test_topic_expressions() -> None:
    d = TopicDispatcher("cdc_{schema}_{table}", "default-topic")
    assert d.topic("db", "orders") == "cdc_db_orders"
    assert d.topic("dé b", "t/1") == "cdc_d__b_t_1"  # one '_' per invalid character
    assert d.topic("db") == "default-topic"
    assert TopicDispatcher("fixed.topic", "x").topic("a", "b") == "fixed.topic"
    assert TopicDispatcher("", "dflt").topic("a", "b") == "dflt"
    assert TopicDispatcher("{schema}", "x").topic(".", "t") == "_"
    assert len(TopicDispatcher("{schema}", "x").topic("a" * 300, "t")) == 249
    with pytest.raises(ConfigError, match="invalid topic expression"):
        TopicDispatcher("bad topic!", "x")
    with pytest.raises(ConfigError, match="both"):
        TopicDispatcher("{schema}", "x", require_schema_and_table=True)


def test_table_filter_rules() -> None:
    f = TableFilter(["db1.*", "!db1.tmp_*", "`a.b`.c"])
    assert f.match("db1", "t") and f.match("DB1", "T")
    assert not f.match("db1", "tmp_x")
    assert f.match("a.b", "c") and not f.match("aXb", "c")
    assert not TableFilter(["db1.*"], case_sensitive=True).match("DB1", "t")
    with pytest.raises(ConfigError, match=r"schema\.table"):
        TableFilter(["justaname"])


def test_router_first_matching_rule_wins_with_implicit_default() -> None:
    router = EventRouter(
        "dflt",
        [
            DispatchRule.from_mapping({"matcher": ["db.orders"], "partition": "ts", "topic": "orders"}),
            DispatchRule.from_mapping({"matcher": ["db.*"], "partition": "index-value", "topic": "{schema}_{table}"}),
        ],
    )
    t = _table()
    row = RowChange(Op.INSERT, t, 21, new=(3, "a", None, None))
    assert router.topic("db", "t") == "db_t"
    assert router.partition(row, 16) == IndexValueDispatcher().partition(row, 16)[0]
    orders = RowChange(Op.INSERT, TableSchema("db", "orders", t.columns, t.indexes), 21, new=(3, "a", None, None))
    assert router.topic("db", "orders") == "orders" and router.partition(orders, 16) == 21 % 16
    other = RowChange(Op.INSERT, TableSchema("x", "y", t.columns, t.indexes), 21, new=(3, "a", None, None))
    assert router.topic("x", "y") == "dflt"
    assert router.partition(other, 16) == TableDispatcher().partition(other, 16)[0]
    with pytest.raises(ConfigError, match="matcher"):
        DispatchRule.from_mapping({"partition": "ts"})


def test_update_changing_a_key_is_split() -> None:
    t = _table()
    same = RowChange(Op.UPDATE, t, 3, new=(1, "a", b"x", None), old=(1, "a", b"y", None))
    assert split_key_changing_update(same) == [same]
    pk = RowChange(Op.UPDATE, t, 3, new=(2, "a", None, None), old=(1, "a", None, None))
    d, i = split_key_changing_update(pk)
    assert (d.op, d.old, i.op, i.new) == (Op.DELETE, pk.old, Op.INSERT, pk.new)
    uk = RowChange(Op.UPDATE, t, 3, new=(1, "b", None, None), old=(1, "a", None, None))
    assert [r.op for r in split_key_changing_update(uk)] == [Op.DELETE, Op.INSERT]
