"""TiCDC's Debezium protocol through the real jobs on the tansu broker.

``changefeed run`` (sink-uri ``protocol=debezium``) feeds a topic, ``changefeed apply --from
kafka://...?protocol=debezium`` applies it to MariaDB, and the data source reads it as a stream.
Debezium JSON drops what debezium.md §6 says (DECIMAL as a double, zero dates as null): the
expectation is the binlog fixture's events with exactly those losses (`through_debezium`).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from changefeed.cli import main
from changefeed.dispatch.split import split_key_changing_update
from changefeed.model import Op, RowChange
from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import register
from changefeed.testing import Broker, MariaDBServer
from tests.codec.debezium_losses import through_debezium

from .conftest import SCHEMA, drop, dump
from .helpers import BINLOG, captured

PARAMS = "protocol=debezium&enable-tidb-extension=true"
CLUSTER = "prod-1"


@pytest.fixture(scope="module")
def topic(spark: SparkSession, broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The binlog fixture through `changefeed run` into a 3-partition Debezium topic (micro-batches of ~8 rows),
    with the server's cluster-id and ``[sink.debezium] output-old-value = false`` from the config file."""
    name = f"cf-dbz-{uuid.uuid4().hex[:8]}"
    work = tmp_path_factory.mktemp("dbz-run")
    uri = f"kafka://{broker.bootstrap_servers}/{name}?{PARAMS}&partition-num=3"
    config = work / "changefeed.toml"
    config.write_text(
        f'changefeed-id = "dbz"\ncluster-id = "{CLUSTER}"\nsink-uri = "{uri}"\n[source]\npath = "{BINLOG}"\n'
        "[sink.debezium]\noutput-old-value = false\n"
    )
    argv = ["run", str(config), "--checkpoint", str(work / "ck"), "--available-now", "--max-events", "8"]
    assert main(argv) == 0
    return name


def _messages(broker: Broker, topic: str) -> list[tuple[int, bytes | None, bytes]]:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "dbz-peek", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        out = []
        while (msg := consumer.poll(3.0)) is not None:
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def test_run_writes_ticdc_debezium_messages(broker: Broker, topic: str) -> None:
    messages = _messages(broker, topic)
    values = [json.loads(v) for _, _, v in messages]
    ops = [v["payload"].get("op") for v in values]
    rows = sum(isinstance(e, RowChange) for e in captured()) + 1  # the key-changing UPDATE is DELETE + INSERT
    assert sum(op in ("c", "u", "d") for op in ops) == rows
    # DDLs (no op) and watermarks ("m") go to every partition (debezium.md §2).
    for kind in (None, "m"):
        assert {p for (p, _, _), op in zip(messages, ops, strict=True) if op == kind} == {0, 1, 2}
    ddls = [v for v in values if "op" not in v["payload"]]
    assert len(ddls) % 3 == 0 and all(v["schema"]["name"].endswith("SchemaChangeValue") for v in ddls)
    # The config file's cluster-id names the source and the schemas (sanitised: "prod_1").
    row = next(v for v in values if v["payload"].get("op") == "c")
    source = row["payload"]["source"]
    assert (source["connector"], source["name"], source["cluster_id"]) == ("TiCDC", CLUSTER, CLUSTER)
    assert row["schema"]["name"] == f"prod_1.{SCHEMA}.{source['table']}.Envelope"
    # [sink.debezium] output-old-value = false: UPDATEs carry no "before" member; DELETEs keep theirs.
    updates = [v["payload"] for v in values if v["payload"].get("op") == "u"]
    assert updates and all("before" not in u and u["after"] for u in updates)
    assert all(v["payload"]["before"] for v in values if v["payload"].get("op") == "d")


def test_apply_from_the_debezium_topic_equals_the_source_less_the_protocols_losses(
    spark: SparkSession, broker: Broker, topic: str, downstream: tuple[MariaDBServer, str], tmp_path: Path
) -> None:
    server, ck_schema = downstream
    with MySQLSink(server.url, MySQLSinkConfig(changefeed_id="direct", checkpoint_schema=ck_schema)) as sink:
        sink.write(through_debezium(captured()))
    expected = dump(server)
    drop(server, SCHEMA)

    changefeed_id = f"dbz-{uuid.uuid4().hex[:6]}"
    source = f"kafka://{broker.bootstrap_servers}/{topic}?{PARAMS}"
    argv = ["apply", "--from", source, "--to", f"{server.url}/", "--changefeed-id", changefeed_id]
    argv += ["--checkpoint", str(tmp_path / "ck-apply"), "--available-now"]
    assert main(argv) == 0
    got = dump(server)
    assert got == expected
    assert set(got) == {"ints2", "nums", "times", "strs"} and sum(len(rows) for _, rows in got.values()) >= 10
    drop(server, "changefeed")  # the apply's checkpoint row


def _expected_changelog() -> list[tuple[Any, ...]]:
    """(op, schema, table, commit_ts, key, after, before) of each row message, as the Kafka sink splits them."""
    events = [r for e in through_debezium(captured()) if isinstance(e, RowChange) for r in split_key_changing_update(e)]
    # output-old-value = false: an UPDATE without its old image.
    events = [replace(e, old=None) if e.op is Op.UPDATE else e for e in events]
    return [r[1:8] for r in ChangelogRows().rows(events) if r[0] == "row"]


_FRACTION = re.compile(r"(.*\d:\d\d:\d\d)\.(\d+)")


def _value(v: Any) -> Any:
    """The value, not its text: the decoder cannot know a DECIMAL's scale or a DATETIME/TIME/TIMESTAMP's fsp
    from a Debezium schema (docs/protocols/debezium.md): ``0.50`` == ``0.5``, ``12:00:00.100`` == ``12:00:00.1``."""
    if not isinstance(v, str):
        return v
    m = _FRACTION.fullmatch(v)
    if m:
        fraction = m.group(2).rstrip("0")
        return m.group(1) + ("." + fraction if fraction else "")
    try:
        return Decimal(v).normalize()
    except InvalidOperation:
        return v


def _semantic(row: tuple[Any, ...]) -> tuple[Any, ...]:
    images = tuple(None if i is None else {k: _value(v) for k, v in json.loads(i).items()} for i in row[5:7])
    return (*row[:5], *images)


def test_read_stream_with_protocol_debezium(spark: SparkSession, broker: Broker, topic: str, tmp_path: Path) -> None:
    register(spark)
    rows: dict[int, list[tuple[Any, ...]]] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        rows[batch_id] = [tuple(r) for r in df.collect()]

    def run() -> None:
        reader = (
            spark.readStream.format("changefeed")
            .option("input", "kafka")
            .option("bootstrap.servers", broker.bootstrap_servers)
            .option("topic", topic)
            .option("protocol", "debezium")
            .option("enable-tidb-extension", "true")
            .option("maxEventsPerTrigger", "12")
        )
        query = reader.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
        query.trigger(availableNow=True).start().awaitTermination()

    run()
    assert len(rows) > 3  # several micro-batches
    got = [_semantic(r[1:8]) for b in sorted(rows) for r in rows[b] if r[0] == "row"]
    expected = [_semantic(r) for r in _expected_changelog()]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    # The values as written, where Debezium JSON carries the text of the value (no DECIMAL, temporal).
    exact = {("cf", t) for t in ("ints", "ints2", "strs")}
    assert sorted(r[1:8] for b in rows for r in rows[b] if r[0] == "row" and r[2:4] in exact) == sorted(
        r for r in _expected_changelog() if r[1:3] in exact
    )
    kinds = {r[0] for b in rows for r in rows[b]}
    assert kinds == {"row", "ddl", "resolved"}
    # Resumed from its checkpoint: nothing is read twice.
    seen = len(rows)
    run()
    assert all(not rows[b] for b in rows if b >= seen)
