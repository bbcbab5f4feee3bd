"""The apply job's driver path for Open Protocol stays columnar from the messages to the SQL.

What `MergeStage.run` and the MySQL sink do with one micro-batch of messages (without Spark,
whose hand-over is `df.toArrow()` of the same envelopes): decoded into row blocks, merged by
segment, and applied with statements rendered from Arrow columns; the row path (the columnar
decoder switched off) leaves the same table. A silent fall back to the row path fails here.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from changefeed.codec import CodecOptions, make_encoder
from changefeed.dispatch import DispatchRule
from changefeed.model import Column, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.jsonl import EventReader
from changefeed.model.rowblock import RowBlock
from changefeed.sink.kafka.encode import KafkaEncoder
from changefeed.sink.mysql import MySQLSink
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource.kafka import KafkaRange, MessageDecoder
from changefeed.spark.encode import _kafka_rows
from changefeed.spark.envelope import ENVELOPE_SCHEMA
from changefeed.spark.merge import MergeStage
from changefeed.testing import MariaDBServer

PARTITIONS = 3
CODEC = CodecOptions(protocol="open-protocol")
U8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}


def _table(db: str) -> TableSchema:
    return TableSchema(
        db,
        "orders",
        (
            Column("id", TypeCode.BIGINT, nullable=False),
            Column("qty", TypeCode.INT, unsigned=True),
            Column("note", TypeCode.VARCHAR, length=64, **U8),
            Column("amount", TypeCode.DECIMAL, length=12, decimal=2),
            Column("ratio", TypeCode.DOUBLE),
            Column("raw", TypeCode.VARCHAR, length=16, charset="binary", collation="binary"),  # VARBINARY
        ),
        (Index("PRIMARY", ("id",), primary=True),),
    )


def _events(table: TableSchema, n: int) -> list[Event]:
    rnd = random.Random(5)
    out: list[Event] = []
    for i in range(n):
        ts = 1000 + i // 25  # 25-row transactions across messages
        amount = Decimal(f"{rnd.randrange(10**6)}.{i % 100:02d}")
        image = (
            i,
            rnd.randrange(1 << 32),
            f"n'o\\te {i} ü",
            amount,
            rnd.random() * 1e6,
            rnd.randbytes(rnd.randrange(17)),
        )
        out.append(RowChange(Op.INSERT, table, ts, new=image))
        if (i + 1) % 100 == 0:
            out.append(Resolved(ts))
    out.append(Resolved(1000 + n))
    return out


def _envelopes(events: list[Event]) -> pa.Table:
    """The topic's messages as the ``messages`` output hands them to the driver."""
    encoder = KafkaEncoder(CODEC, "cdc", rules=[DispatchRule(matcher=["*.*"], partition="index-value")])
    control = make_encoder(CODEC)
    per: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for item in _kafka_rows(encoder, events, {"cdc": PARTITIONS}, -1):
        if item["kind"] == "message":
            per[item["partition"]].append((item["key"], item["value"]))
        elif item["kind"] == "event":
            message = control.encode_resolved(EventReader().parse(item["event"]))  # type: ignore[arg-type]
            for sent in per.values():
                sent.append((message.key, message.value))
    batches = []
    for p, messages in per.items():
        rng = KafkaRange("unused:1", "cdc", p, 0, len(messages), CODEC, ChangelogRows(), "messages")
        batches.append(rng._batch(list(range(len(messages))), [k for k, _ in messages], [v for _, v in messages]))
    return pa.Table.from_batches(batches, ENVELOPE_SCHEMA)


@pytest.fixture
def db(mariadb_downstream: MariaDBServer) -> Iterator[str]:
    name = f"apply_{uuid.uuid4().hex[:8]}"
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        for suffix in ("rows", "blocks"):
            cur.execute(f"CREATE DATABASE `{name}_{suffix}`")
            cur.execute(
                f"CREATE TABLE `{name}_{suffix}`.orders (id BIGINT NOT NULL PRIMARY KEY, qty INT UNSIGNED,"
                " note VARCHAR(64) CHARACTER SET utf8mb4, amount DECIMAL(12,2), ratio DOUBLE, raw VARBINARY(16))"
            )
    yield name
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        for suffix in ("rows", "blocks"):
            cur.execute(f"DROP DATABASE IF EXISTS `{name}_{suffix}`")


@pytest.mark.parametrize("safe_mode", [True, False])
def test_open_protocol_batch_is_applied_from_columns(
    mariadb_downstream: MariaDBServer, db: str, tmp_path: Path, safe_mode: bool
) -> None:
    n = 1000
    contents = {}
    for variant in ("rows", "blocks"):
        envelopes = _envelopes(_events(_table(f"{db}_{variant}"), n))
        decoder = MessageDecoder("unused:1", "cdc", CODEC, ChangelogRows())
        decoder.columnar = variant == "blocks"
        stage = MergeStage(tmp_path / variant, "cdc", list(range(PARTITIONS)), decoder)
        released = stage.run(envelopes, 0)
        assert any(isinstance(e, RowBlock) for e in released) == (variant == "blocks")
        sink = MySQLSink(
            mariadb_downstream.url,
            changefeed_id=f"{db}-{variant}",
            checkpoint_schema=f"{db}_{variant}",
            safe_mode=safe_mode,
            safe_mode_duration=60.0 if safe_mode else 0.0,  # normal mode from the first batch on
        )
        try:
            sink.write(released)
            sink.flush()
            assert sink.stats["rows"] == n
            assert sink.stats["columnar_rows"] == (n if variant == "blocks" else 0)
        finally:
            sink.close()
        with mariadb_downstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, qty, note, amount, ratio, raw FROM `{db}_{variant}`.orders ORDER BY id")
            contents[variant] = cur.fetchall()
    assert len(contents["rows"]) == n
    assert contents["blocks"] == contents["rows"]
