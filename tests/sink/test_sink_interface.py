"""Every sink speaks one interface (changefeed/sink/base.py): ``open`` -> the stored checkpoint ts,
``write(batch)``, ``flush`` -> the durable checkpoint ts, ``close`` that never flushes, and a
``with`` block that flushes on a clean exit. Run against each sink's real destination."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from changefeed.codec import CodecOptions
from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.base import EncodedSink, Sink
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.sink.storage.writer import StorageWriter
from changefeed.testing import Broker, MariaDBServer


def _table(schema: str) -> TableSchema:
    return TableSchema(
        schema,
        "t",
        (Column("id", TypeCode.BIGINT, nullable=False), Column("v", TypeCode.BIGINT)),
        (Index("PRIMARY", ("id",), primary=True),),
        table_id=7,
    )


def _stream(table: TableSchema, *tss: int) -> list[RowChange | Resolved]:
    """A row per commit ts, each followed by its Resolved."""
    out: list[RowChange | Resolved] = []
    for ts in tss:
        out += [RowChange(Op.INSERT, table, ts, new=(ts, ts), position={"file": "b.000001", "pos": ts}), Resolved(ts)]
    return out


@dataclass
class Destination:
    """How to make a sink of one kind over one destination, and how many rows are visible there."""

    make: Callable[[], Any]
    rows: Callable[[], int]
    table: TableSchema
    encoded: bool


@pytest.fixture(params=["storage", "parquet", "mysql"])
def destination(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Destination]:
    kind = request.param
    if kind == "storage":
        codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)

        def storage_rows() -> int:
            files = list(tmp_path.rglob("CDC*.json"))
            return sum(len(f.read_text().splitlines()) for f in files)

        yield Destination(lambda: StorageWriter(tmp_path, codec), storage_rows, _table("db"), True)
    elif kind == "parquet":

        def snapshot_rows() -> int:
            files = list(tmp_path.glob("*/*/snapshot.parquet"))
            return sum(pq.read_table(f).num_rows for f in files)

        yield Destination(lambda: ParquetSnapshotSink(tmp_path), snapshot_rows, _table("db"), False)
    else:
        server: MariaDBServer = request.getfixturevalue("mariadb_downstream")
        db = f"iface_{uuid.uuid4().hex[:8]}"
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.t (id BIGINT NOT NULL PRIMARY KEY, v BIGINT)")

        def mysql_rows() -> int:
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {db}.t")
                return int(cur.fetchone()[0])

        def make() -> MySQLSink:
            return MySQLSink(server.url, changefeed_id="iface", checkpoint_schema=f"{db}_cp", safe_mode_duration=0)

        try:
            yield Destination(make, mysql_rows, _table(db), False)
        finally:
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {db}")
                cur.execute(f"DROP DATABASE IF EXISTS {db}_cp")


def test_open_write_flush_close_and_with(destination: Destination) -> None:
    table = destination.table
    sink = destination.make()
    assert isinstance(sink, Sink) and sink.kind in ("storage", "parquet", "mysql")
    assert isinstance(sink, EncodedSink) is destination.encoded
    assert sink.open() == 0  # nothing stored yet
    sink.write(_stream(table, 10, 20))
    assert sink.flush() == 20
    assert destination.rows() == 2
    sink.write(_stream(table, 30))
    sink.close()  # never flushes: ts 30 belonged to a batch that failed
    assert destination.rows() == 2

    again = destination.make()
    assert again.open() == 20  # the stored checkpoint, where the job resumes
    again.write(_stream(table, 10, 20, 30))  # the replay: 10 and 20 change nothing
    assert again.flush() == 30
    again.close()
    assert destination.rows() == 3

    with destination.make() as third:  # a clean exit flushes
        third.write(_stream(table, 40))
    with pytest.raises(RuntimeError, match="stop"), destination.make() as fourth:
        fourth.write(_stream(table, 50))
        raise RuntimeError("stop")  # an exception only closes
    assert destination.rows() == 4
    last = destination.make()
    assert last.open() == 40
    last.close()


def test_kafka_sink_speaks_the_interface(broker: Broker) -> None:
    topic = f"iface-{uuid.uuid4().hex[:8]}"
    config = KafkaSinkConfig(broker.bootstrap_servers, topic, CodecOptions(protocol="open-protocol"), partition_num=1)
    sink = KafkaSink(config)
    assert isinstance(sink, EncodedSink) and sink.kind == "kafka"
    assert sink.open() == 0  # a topic keeps no checkpoint of its writer; open made the topic
    assert topic in broker.admin().list_topics(timeout=10).topics
    sink.write(_stream(_table("db"), 10, 20))
    assert sink.flush() == 20
    assert sink.flushed is not None and sink.flushed.commit_ts == 20
    sink.close()
