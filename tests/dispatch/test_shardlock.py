"""DM's pessimistic shard DDL mode, the pure parts: the lock's steps, DDL normalising, the config's refusals,
and what routing gives the sink (each merged row's shard, a shard's DROP TABLE)."""

from __future__ import annotations

import pytest

from changefeed.config import parse_config
from changefeed.dispatch.route import Extract, Router, RouteRule, ShardDDL
from changefeed.dispatch.shardddl import ShardDDLConflictError
from changefeed.dispatch.shardlock import APPLYING, ShardLock, describe, normalise_ddl, pessimistic, replay
from changefeed.errors import CaptureError, ConfigError
from changefeed.model import ActionType, Column, DDLEvent, Index, Op, RowChange, TableSchema, TypeCode

TARGET = ("shop", "orders")
A, B, C = (("cf", "s1", "t"), ("cf", "s2", "t"), ("cf2", "s1", "t"))
DDL = "ALTER TABLE `shop`.`orders` DROP COLUMN note"


def test_normalised_ddl_ignores_case_spaces_quotes_and_comments() -> None:
    same = ["alter table shop.orders  drop column `note` /* from s2 */", "ALTER TABLE `shop`.`orders` DROP COLUMN note"]
    assert len({normalise_ddl(q) for q in same}) == 1
    assert normalise_ddl(DDL) != normalise_ddl("ALTER TABLE shop.orders DROP COLUMN amount")
    assert normalise_ddl("ALTER TABLE t ADD c INT DEFAULT 1") != normalise_ddl("ALTER TABLE t ADD c INT DEFAULT 2")


def test_the_lock_holds_until_every_shard_of_every_source_ran_the_ddl() -> None:
    members = {A, B, C}
    first = pessimistic(None, members, A, DDL, TARGET, 10)
    assert not first.release and first.waiting == (B, C) and first.lock.done == {A}
    assert first.lock.ddl == DDL and first.lock.commit_ts == 10
    second = pessimistic(first.lock, members, C, DDL.lower(), TARGET, 20)
    assert not second.release and second.waiting == (B,)
    assert describe(second.lock, members) == "done: s1.t (source cf), s1.t (source cf2); waiting: s2.t (source cf)"
    last = pessimistic(second.lock, members, B, DDL, TARGET, 30)
    assert last.release and last.waiting == () and last.lock.done == members
    assert last.lock.ddl == DDL and last.lock.commit_ts == 10  # the first shard's text runs


def test_one_shard_alone_releases_at_once_and_an_unlisted_shard_joins() -> None:
    assert pessimistic(None, {A}, A, DDL, TARGET, 10).release
    assert pessimistic(None, set(), A, DDL, TARGET, 10).release  # a shard not listed yet counts itself
    assert not pessimistic(None, {B}, A, DDL, TARGET, 10).release


DDL2 = "ALTER TABLE `shop`.`orders` ADD COLUMN extra INT NULL"


def test_a_released_queue_goes_on_in_order_and_a_queued_ddl_opens_the_next_lock() -> None:
    """DM: a done shard waits whole; on the release its queue continues: rows taken, its queued DDL opens
    the next lock, and from there that shard's entries stay held; other shards' rows are taken."""
    members = {A, B, C}
    queue = [(A, None, 11), (B, None, 12), (A, DDL2, 13), (A, None, 14), (B, DDL2.lower(), 15), (B, None, 16)]
    plan = replay(queue, members, TARGET)
    assert plan.taken == (0, 1, 2, 4) and not plan.release
    assert plan.lock is not None and plan.lock.done == {A, B} and plan.lock.ddl == DDL2 and plan.lock.commit_ts == 13
    assert replay([(A, None, 11), (B, None, 12)], members, TARGET).lock is None
    # Every shard queued it (a dropped shard released the previous lock): released at once, the replay stops.
    stops = replay([(A, DDL2, 13), (B, DDL2, 14), (A, None, 15)], {A, B}, TARGET)
    assert stops.release and stops.taken == (0, 1)
    with pytest.raises(ShardDDLConflictError, match="runs a different DDL"):
        replay([(A, DDL2, 13), (B, DDL, 14)], members, TARGET)


def test_a_different_ddl_or_a_second_one_from_a_shard_done_is_a_conflict() -> None:
    lock = pessimistic(None, {A, B}, A, DDL, TARGET, 10).lock
    with pytest.raises(ShardDDLConflictError) as caught:
        pessimistic(lock, {A, B}, B, "ALTER TABLE shop.orders DROP COLUMN amount", TARGET, 20)
    text = str(caught.value)
    assert "pessimistic mode" in text and "shop.orders" in text and "s2.t" in text, text
    assert "DROP COLUMN note" in text and "DROP COLUMN amount" in text, text
    assert "shards done: s1.t (source cf)" in text and "shards waiting: s2.t (source cf)" in text, text
    with pytest.raises(ShardDDLConflictError, match="another DDL before the pending one"):
        pessimistic(lock, {A, B}, A, DDL, TARGET, 20)
    # Replayed after a crash while the DDL was being run: the last shard is already done, no conflict.
    applying = ShardLock(TARGET, DDL, normalise_ddl(DDL), 10, frozenset({A, B}), APPLYING)
    assert pessimistic(applying, {A, B}, B, DDL, TARGET, 30).release


_ROUTES = """
[[routes]]
schema-pattern = "s*"
table-pattern = "t"
target-schema = "shop"
target-table = "orders"
extract-schema = { schema-regexp = "s(.*)", target-column = "c_schema" }
"""


def test_config_takes_pessimistic_only_for_a_live_source_and_a_mysql_sink() -> None:
    live = '[source]\ntype = "mysql"\nurl = "mysql://root@127.0.0.1:3306"\n'
    files = '[source]\ntype = "binlog-files"\npath = "/tmp/x"\n'
    head = 'shard-mode = "pessimistic"\n'
    config = parse_config(head + 'sink-uri = "mysql://root@127.0.0.1:3307/"\n' + _ROUTES + live)
    assert config.shard_mode == "pessimistic" and config.mysql_sink()[1].shard_mode == "pessimistic"
    router = config.router()
    assert isinstance(router, Router) and router.shard_drops
    with pytest.raises(ConfigError, match=r"needs a live source.*binlog-files"):
        parse_config(head + 'sink-uri = "mysql://root@127.0.0.1:3307/"\n' + _ROUTES + files)
    with pytest.raises(ConfigError, match="needs a mysql:// sink"):
        parse_config(head + 'sink-uri = "kafka://127.0.0.1:9092/t"\n' + _ROUTES + live)
    with pytest.raises(ConfigError, match="optimistic or pessimistic"):
        parse_config('shard-mode = "eager"\nsink-uri = "mysql://root@127.0.0.1:3307/"\n' + _ROUTES + live)
    with pytest.raises(ConfigError, match="worker-count=1"):
        parse_config(head + 'sink-uri = "mysql://root@127.0.0.1:3307/?worker-count=4"\n' + _ROUTES + live)


def test_routed_rows_name_their_shard_and_a_shards_drop_reaches_the_sink_when_asked() -> None:
    rule = RouteRule("s*", "t", "shop", "orders", extract_schema=Extract("c_schema", "s(.*)"))
    router = Router([rule], "cf")
    ts = TableSchema("s1", "t", (Column("id", TypeCode.INT, nullable=False),), (Index("PRIMARY", ("id",), True),))
    row = RowChange(Op.INSERT, ts, 5, new=(1,))
    router.route([row])
    assert row.table_schema.origin == ("s1", "t") and row.table_schema.table == "orders"
    drop = DDLEvent("s1", "t", "DROP TABLE t", int(ActionType.DROP_TABLE), 6)
    assert router.route([drop]) == []  # DM: a shard's DROP TABLE never reaches the merged table
    router.shard_drops = True
    (routed,) = router.route([drop])
    assert isinstance(routed, ShardDDL) and routed.shard == ("s1", "t") and routed.table == "orders"
    assert routed.action == ActionType.DROP_TABLE


def test_the_shard_list_read_fails_with_the_source_named_and_no_password() -> None:
    config = parse_config(
        'shard-mode = "pessimistic"\nsink-uri = "mysql://root@127.0.0.1:3307/"\n'
        + _ROUTES
        + '[source]\ntype = "mysql"\nurl = "mysql://root:s3cret@127.0.0.1:1"\n'
    )
    with pytest.raises(CaptureError) as caught:
        config.shard_members()
    assert "reading the shard list" in str(caught.value) and "127.0.0.1:1" in str(caught.value)
    assert "s3cret" not in str(caught.value)
