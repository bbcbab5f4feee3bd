"""Row blocks through `KafkaEncoder` give the messages and group state of the same rows one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changefeed.capture.binlog import BinlogPosition
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.codec import CodecOptions
from changefeed.dispatch import DispatchRule
from changefeed.model.rowblock import RowBlock, expand_blocks
from changefeed.sink.kafka.encode import KafkaEncoder, MessageGroup
from changefeed.testing import MariaDBServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlog"


def _blocks(path: Path, start: BinlogPosition, end: BinlogPosition | None = None, block_rows: int = 65536) -> list[Any]:
    until = (end.file, end.pos) if end is not None else None
    opener = lambda at: BinlogFileReader(path, at.file or None, at.pos)  # noqa: E731
    return list(BlockCapture(opener, start, until=until, block_rows=block_rows).blocks())


def _groups(encoder: KafkaEncoder, events: list[Any]) -> list[Any]:
    out = []
    for item in encoder.encode(events, lambda topic: 3):
        if isinstance(item, MessageGroup):
            messages = [(t, p, m.key, m.value, m.rows, m.commit_ts) for t, p, m in item.messages]
            out.append((messages, item.first_ts, item.complete, item.last, item.counts, item.bootstrap))
        else:
            out.append(item)
    return out


def assert_same_messages(blocks: list[Any], codec: CodecOptions, **kw: Any) -> int:
    rows = list(expand_blocks(blocks))
    want = _groups(KafkaEncoder(codec, "cdc", **kw), rows)
    got = _groups(KafkaEncoder(codec, "cdc", **kw), blocks)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        assert b == a, f"item {i}"
    return sum(len(g[0]) for g in got if isinstance(g, tuple))


RULES = {
    "default": [],
    "ts": [DispatchRule(matcher=["*.*"], partition="ts")],
    "index-value": [DispatchRule(matcher=["*.*"], partition="index-value")],
}


@pytest.mark.parametrize("protocol", ["open-protocol", "canal-json", "simple", "debezium"])
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("batch_rows", [2, 8192])
def test_fixture_blocks_encode_like_rows(protocol: str, rule: str, batch_rows: int) -> None:
    codec = CodecOptions(protocol=protocol, clock=lambda: 0)
    for variant in ("full", "nocrc"):
        for block_rows in (3, 65536):
            blocks = _blocks(FIXTURES / variant, BinlogPosition("binlog.000001", 4), block_rows=block_rows)
            assert assert_same_messages(blocks, codec, rules=RULES[rule], batch_rows=batch_rows) > 0


@pytest.mark.mariadb
@pytest.mark.parametrize("raw", [False, True])
def test_interleaved_tables_and_key_changing_updates(mariadb: MariaDBServer, fresh_db: str, raw: bool) -> None:
    db = fresh_db
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = BinlogPosition(*cur.fetchone()[:2])
        cur.execute(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(10,2), f FLOAT)")
        cur.execute(f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, n BIGINT UNSIGNED, t TEXT)")
        cur.execute("BEGIN")
        for k in range(40):
            cur.execute(
                f"INSERT INTO `{db}`.a VALUES ({k}, 'a\"{k}\\\\', -{k}.5, {k}.1), ({k + 100}, NULL, NULL, NULL)"
            )
            cur.execute(f"INSERT INTO `{db}`.b VALUES ({k}, {2**64 - 1 - k}, 'é{k}')")
        cur.execute("COMMIT")
        cur.execute(f"UPDATE `{db}`.a SET id = id + 1000 WHERE id % 5 = 0")  # key-changing: split
        cur.execute(f"UPDATE `{db}`.a SET v = 'x' WHERE id % 5 = 1")
        cur.execute(f"DELETE FROM `{db}`.b WHERE id < 30")
        cur.execute("SHOW MASTER STATUS")
        end = BinlogPosition(*cur.fetchone()[:2])
    codec = CodecOptions(protocol="open-protocol")
    for block_rows in (7, 65536):
        blocks = _blocks(mariadb.binlog_dir, start, end, block_rows=block_rows)
        assert any(isinstance(b, RowBlock) for b in blocks)
        for batch_rows in (13, 8192):
            for rule in RULES.values():
                kw = {"rules": rule, "batch_rows": batch_rows, "output_raw_change_event": raw}
                assert assert_same_messages(blocks, codec, **kw) > 0
