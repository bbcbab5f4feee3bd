"""A small multi-table change stream for the Kafka tests and bench, and helpers to read topics raw."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Any

from changefeed.codec import CodecOptions, Message, make_decoder
from changefeed.dispatch import split_key_changing_update
from changefeed.model import (
    Column,
    DDLEvent,
    Event,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
    compose_tso,
)

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
BASE_MS = 1_700_000_000_000


def table(n: int, schema: str = "shop") -> TableSchema:
    return TableSchema(
        schema,
        f"t{n}",
        (
            Column("id", TypeCode.INT, nullable=False, length=11),
            Column("name", TypeCode.VARCHAR, length=64, **UTF8),
            Column("qty", TypeCode.BIGINT, length=20),
        ),
        (Index("PRIMARY", ("id",), primary=True),),
        table_id=100 + n,
        version=compose_tso(BASE_MS - 1000 + n),
    )


def workload(n_txns: int = 40, n_tables: int = 3, resolved_every: int = 5, seed: int = 7) -> list[Event]:
    """CREATE TABLEs, then transactions of inserts/updates (some changing the key)/deletes, and
    Resolved events every ``resolved_every`` transactions plus a last one. Each event's position
    is ``{"txn": n}``."""
    rnd = random.Random(seed)
    tables = [table(i) for i in range(n_tables)]
    ms = BASE_MS
    events: list[Event] = []
    for t in tables:
        ms += 1
        query = f"CREATE TABLE `{t.schema}`.`{t.table}` (id INT PRIMARY KEY, name VARCHAR(64), qty BIGINT)"
        events.append(DDLEvent(t.schema, t.table, query, 3, compose_tso(ms), table_schema=t, position={"txn": -1}))
    live: dict[str, dict[int, tuple[Any, ...]]] = {t.table: {} for t in tables}
    next_id = 1
    for n in range(n_txns):
        ms += 1
        ts = compose_tso(ms)
        touched: set[tuple[str, int]] = set()
        for _ in range(rnd.randint(1, 6)):
            t = rnd.choice(tables)
            rows = live[t.table]
            choice = rnd.random()
            candidates = [k for k in rows if (t.table, k) not in touched]
            if choice < 0.5 or not candidates:
                new = (next_id, f"item-{next_id}", rnd.choice([None, rnd.randint(0, 10**12)]))
                next_id += 1
                rows[new[0]] = new
                touched.add((t.table, new[0]))
                events.append(RowChange(Op.INSERT, t, ts, new=new, position={"txn": n}))
            elif choice < 0.85:
                key = rnd.choice(candidates)
                old = rows.pop(key)
                new_key = key
                if rnd.random() < 0.3:  # a key-changing update: the sink splits it into DELETE + INSERT
                    new_key = next_id
                    next_id += 1
                new = (new_key, f"{old[1]}'", rnd.randint(0, 10**6))
                rows[new_key] = new
                touched.update({(t.table, key), (t.table, new_key)})
                events.append(RowChange(Op.UPDATE, t, ts, new=new, old=old, position={"txn": n}))
            else:
                key = rnd.choice(candidates)
                old = rows.pop(key)
                touched.add((t.table, key))
                events.append(RowChange(Op.DELETE, t, ts, old=old, position={"txn": n}))
        if (n + 1) % resolved_every == 0:
            events.append(Resolved(ts, position={"txn": n}))
    events.append(Resolved(compose_tso(ms + 1), position={"txn": n_txns}))
    return events


def row_key(row: RowChange) -> tuple[Any, ...]:
    """Identity of a row event independent of column order (decoders may rebuild the schema)."""
    new = tuple(sorted(row.as_dict().items())) if row.new is not None else None
    old = tuple(sorted(row.as_dict(old=True).items())) if row.old is not None else None
    return (row.schema, row.table, row.op, row.commit_ts, new, old)


def sent_rows(events: list[Event]) -> list[RowChange]:
    """The rows a sink puts on the wire: key-changing updates split as TiCDC does."""
    out: list[RowChange] = []
    for e in events:
        if isinstance(e, RowChange):
            out.extend(split_key_changing_update(e))
    return out


def read_raw(bootstrap: str, topic: str, partitions: int, idle_s: float = 1.5, timeout_s: float = 30.0) -> dict:
    """Every message of every partition, in order: {partition: [(offset, key, value)]}."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes | None, bytes | None]]] = defaultdict(list)
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.2):
                if msg.error():
                    raise AssertionError(f"raw read {topic}: {msg.error()}")
                out[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
                last = time.monotonic()
    finally:
        consumer.close()
    return dict(out)


def decode_partition(codec: CodecOptions, messages: list[tuple[int, bytes | None, bytes | None]]) -> list:
    """(offset, event) for one partition decoded alone, from its first message."""
    decoder = make_decoder(codec)
    return [(off, e) for off, k, v in messages for e in decoder.decode(Message(key=k, value=v), f"@{off}")]
