"""DM's optimistic shard DDL rule (changefeed/dispatch/shardddl.py), against a merged table's columns."""

from __future__ import annotations

import pytest

from changefeed.dispatch.shardddl import ShardDDLConflictError, compare_types, optimistic

MERGED = {"id": "int(11)", "amount": "decimal(10,2)", "note": "varchar(20)", "c_table": "varchar(64)"}
SHARD = ("shop_02", "orders_00")
SHARDS = [("shop_01", "orders_00"), ("shop_02", "orders_00")]


@pytest.mark.parametrize(
    ("new", "current", "order"),
    [
        ("bigint", "int(11)", 1),
        ("int", "bigint(20)", -1),
        ("int(10)", "int(11)", 0),  # display width is not a type
        ("int unsigned", "int(11)", None),
        ("varchar(30)", "varchar(20)", 1),
        ("char(30)", "varchar(20)", None),
        ("decimal(12,2)", "decimal(10,2)", 1),
        ("decimal(10,4)", "decimal(10,2)", None),  # more scale, fewer integer digits
        ("mediumtext", "text", 1),
        ("double", "float", 1),
        ("varchar(10)", "int(11)", None),
        ("datetime(6)", "datetime(6)", 0),
    ],
)
def test_type_order(new: str, current: str, order: int | None) -> None:
    assert compare_types(new, current) == order


def test_compatible_changes_apply_once_and_are_skipped_after() -> None:
    add = "ALTER TABLE `shop`.`orders` ADD COLUMN flag TINYINT NULL"
    assert optimistic(add, MERGED, SHARD).apply
    after = {**MERGED, "flag": "tinyint(4)"}
    again = optimistic(add, after, SHARD)
    assert not again.apply and "already there" in again.reason
    widen = "ALTER TABLE `shop`.`orders` MODIFY COLUMN amount DECIMAL(14,2)"
    assert optimistic(widen, MERGED, SHARD).apply
    assert not optimistic(widen, {**MERGED, "amount": "decimal(14,2)"}, SHARD).apply
    narrower = "ALTER TABLE `shop`.`orders` MODIFY amount DECIMAL(12,2)"
    assert not optimistic(narrower, {**MERGED, "amount": "decimal(14,2)"}, SHARD).apply  # the widest stays
    assert optimistic("ALTER TABLE t ADD INDEX i (note)", MERGED, SHARD).apply
    assert optimistic("ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 0", MERGED, SHARD).apply


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("ALTER TABLE t ADD COLUMN note INT", "already varchar\\(20\\)"),
        ("ALTER TABLE t ADD COLUMN d INT NOT NULL", "NOT NULL without DEFAULT"),
        ("ALTER TABLE t MODIFY note INT", "across families"),
        ("ALTER TABLE t DROP COLUMN note", "DROP COLUMN"),
        ("ALTER TABLE t CHANGE note memo VARCHAR(20)", "renames note to memo"),
        ("ALTER TABLE t ADD COLUMN flag INT, ADD COLUMN note VARCHAR(20)", "split it"),
    ],
)
def test_incompatible_changes_stop_naming_shards_and_ddl(query: str, why: str) -> None:
    with pytest.raises(ShardDDLConflictError, match=why) as err:
        optimistic(query, MERGED, SHARD, SHARDS, target="shop.orders")
    text = str(err.value)
    assert "shop.orders" in text and "shop_02.orders_00" in text and "shop_01.orders_00" in text and query in text
