"""Routed names in every sink: three MariaDB shard tables merged by DM-style ``[[routes]]`` into
``route_sinks.orders`` (with ``c_table``/``c_schema`` in the key), written by `changefeed run` into a
storage directory, a Kafka topic, a Delta table and an Iceberg table. Each is read back by something
that is not the writer: the directory tree and `changefeed apply` into MariaDB (compared with the routed upstream by
`changefeed diff --routes`), the topic's Canal-JSON with confluent-kafka and orjson, the lake tables
with DuckDB over the Delta log and the Iceberg metadata read as files.

Shards add a column one after another (writes in between), then one widens a type. Kafka carries
every shard's DDL and rows under the target name (each message with its own shard's columns). A
storage directory or a lake table keeps one schema per table version: the router coordinates the
shards' DDL (DM's optimistic mode, changefeed/dispatch/shardmerge.py): one DDL per change on the
merged table, every shard's rows in the merged shape (NULL where a shard lacks a column yet); an
incompatible shard DDL stops the job naming the shard and the DDL. The storage run dies right after
saving the router's state and is restarted (the batch replayed), and is stopped between two shards' DDL.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from changefeed.cli import main
from changefeed.errors import ChangefeedError
from changefeed.files.batchstate import BatchState
from changefeed.testing import Broker, MariaDBServer
from tests.e2e.shards import run_sql
from tests.mariadb_client import client_rows
from tests.sink.lake.independent import read_delta_independently, read_iceberg_independently

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.broker, pytest.mark.timeout(600)]

TARGET = "route_sinks"
SHARDS = [("rs_01", "orders_00"), ("rs_01", "orders_01"), ("rs_02", "orders_00")]
#: (c_schema, c_table, id, amount, note) the merged table holds at the end ("-": NULL / no such column).
EXPECTED = sorted(
    [
        ("01", "00", 1, 10, "-"),
        ("01", "00", 2, 22, "-"),
        ("01", "00", 4, 40, "a"),
        ("01", "01", 1, 10, "-"),
        ("01", "01", 2, 20, "-"),
        ("01", "01", 3, 30, "-"),
        ("01", "01", 5, 50, "b"),
        ("02", "00", 2, 20, "-"),
        ("02", "00", 3, 30, "-"),
        ("02", "00", 6, 60, "c"),
        ("01", "00", 8, 80, "-"),
        ("01", "01", 8, 5000000000, "w"),
    ]
)


def _load(upstream: MariaDBServer, part: int = 0) -> None:
    """The shards' statements: all of them, or the first (up to the first shard's ADD COLUMN) or second part."""
    sql = ["CREATE DATABASE rs_01", "CREATE DATABASE rs_02"]
    for schema, table in SHARDS:
        sql += [
            f"CREATE TABLE {schema}.{table} (id INT NOT NULL PRIMARY KEY, amount INT) ENGINE=InnoDB",
            f"INSERT INTO {schema}.{table} VALUES (1, 10), (2, 20), (3, 30)",  # equal keys in every shard
        ]
    sql += [
        "UPDATE rs_01.orders_00 SET amount = 22 WHERE id = 2",
        "DELETE FROM rs_01.orders_00 WHERE id = 3",
        "DELETE FROM rs_02.orders_00 WHERE id = 1",
        "ALTER TABLE rs_01.orders_00 ADD COLUMN note VARCHAR(10) NULL",
        "INSERT INTO rs_01.orders_00 VALUES (4, 40, 'a')",
        "INSERT INTO rs_02.orders_00 VALUES (6, 60)",  # a shard not changed yet
    ]
    second = [
        "ALTER TABLE rs_01.orders_01 ADD COLUMN note VARCHAR(10) NULL",
        "INSERT INTO rs_01.orders_01 VALUES (5, 50, 'b')",
        "ALTER TABLE rs_02.orders_00 ADD COLUMN note VARCHAR(10) NULL",
        "UPDATE rs_02.orders_00 SET note = 'c' WHERE id = 6",
        "ALTER TABLE rs_01.orders_01 MODIFY amount BIGINT",  # a widening, at once on the merged table
        "INSERT INTO rs_01.orders_01 VALUES (8, 5000000000, 'w')",
        "INSERT INTO rs_01.orders_00 VALUES (8, 80, NULL)",  # a shard still INT: cast to BIGINT
        "ALTER TABLE rs_01.orders_00 MODIFY amount BIGINT",  # the same widening from the others: skipped
        "ALTER TABLE rs_02.orders_00 MODIFY amount BIGINT",
    ]
    sql = {0: sql + second, 1: sql, 2: second}[part]
    with upstream.connect() as conn, conn.cursor() as cur:
        for statement in sql:
            cur.execute(statement)


def _config(path: Path, upstream: MariaDBServer, sink_uri: str, extra: str = "", start: str = "") -> Path:
    path.write_text(
        f"""changefeed-id = "routed-sinks"
sink-uri = "{sink_uri}"

[source]
type = "binlog-files"
path = "{upstream.binlog_dir}"
{f'start-position = "{start}"' if start else ""}

[filter]
rules = ["rs_0*.*"]

[[routes]]
schema-pattern = "rs_*"
table-pattern = "orders_*"
target-schema = "{TARGET}"
target-table = "orders"
extract-table = {{ table-regexp = "orders_(.*)", target-column = "c_table" }}
extract-schema = {{ schema-regexp = "rs_(.*)", target-column = "c_schema" }}

[[routes]]
schema-pattern = "rs_*"
target-schema = "{TARGET}"
{extra}"""
    )
    return path


def _run(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", str(config), "--available-now", "--master", "local[2]", "--skip-preflight"]
    assert main(args) == 0, capsys.readouterr().err


def _final(changes: list[tuple[str, str, int, int | None, str, str]]) -> list[tuple[str, str, int, int, str]]:
    """Replay (op, c_schema, c_table, id, amount, note) in order: the merged table's rows at the end."""
    rows: dict[tuple[str, str, int], tuple[str, str, int, int, str]] = {}
    for op, schema, table, key, amount, note in changes:
        if op == "DELETE":
            rows.pop((schema, table, key), None)
        else:
            assert amount is not None
            rows[(schema, table, key)] = (schema, table, key, amount, note)
    return sorted(rows.values())


@pytest.fixture
def upstream(
    mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> MariaDBServer:
    server = mariadb_factory()  # private: its binlog holds only this test's statements
    _load(server)
    monkeypatch.chdir(tmp_path)
    return server


def test_shard_ddl_merged_into_storage_across_a_restart(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = mariadb_factory()
    monkeypatch.chdir(tmp_path)
    storage = tmp_path / "storage"
    uri = f"{storage.as_uri()}?protocol=canal-json&enable-tidb-extension=true"  # rows with their commit ts
    config = _config(tmp_path / "storage.toml", upstream, uri)
    # The first shard's ADD COLUMN, and the job dies right after saving the router's state, before Spark
    # commits the batch (a kill -9 there): the restart replays the batch from the state before it and
    # decides the same (the directory skips what it has). Then the others' ADD COLUMN in a later run: the
    # merged shapes come back with the checkpoint, so theirs is a repeat and no second DDL is written.
    _load(upstream, 1)
    save = BatchState.save

    def dies_after_saving(self: BatchState, batch_id: int, state: dict[str, Any]) -> None:
        save(self, batch_id, state)
        raise ChangefeedError("killed after the pipeline state was saved")

    monkeypatch.setattr(BatchState, "save", dies_after_saving)
    capsys.readouterr()
    assert main(["run", str(config), "--available-now", "--master", "local[2]", "--skip-preflight"]) != 0
    assert "killed after the pipeline state was saved" in capsys.readouterr().err
    monkeypatch.setattr(BatchState, "save", save)
    _run(config, capsys)
    _load(upstream, 2)
    _run(config, capsys)
    assert sorted(p.name for p in storage.iterdir() if p.is_dir() and not p.name.startswith("_")) == [TARGET]
    table = storage / TARGET / "orders"
    versions = sorted(int(p.name) for p in table.iterdir() if p.name.isdigit())
    schemas = sorted((table / "meta").glob("schema_*.json"), key=lambda p: int(p.name.split("_")[1]))
    assert [int(p.name.split("_")[1]) for p in schemas] == versions and len(versions) == 3, schemas
    docs = [orjson.loads(p.read_bytes()) for p in schemas]  # CREATE TABLE, the one ADD COLUMN, the one MODIFY
    assert ["ADD COLUMN" in d["Query"].upper() for d in docs] == [False, True, False], docs
    last = {c["ColumnName"]: c["ColumnType"] for c in docs[-1]["TableColumns"]}
    assert list(last) == ["id", "amount", "c_table", "c_schema", "note"] and last["amount"].upper() == "BIGINT", last
    # `changefeed status` shows the router's decisions, as the MySQL sink's.
    capsys.readouterr()
    assert main(["status", "--checkpoint", str(storage / "_spark_checkpoint")]) == 0
    lines = capsys.readouterr().out.splitlines()
    decisions = [(a.split(" <- ", 1)[1], b.strip()) for a, b in pairwise(lines) if " <- " in a]  # (outcome, DDL)
    adds = [":".join(outcome.split(":")[:2]) for outcome, ddl in decisions if "ADD COLUMN note" in ddl]
    assert adds == ["rs_01.orders_00: applied", "rs_01.orders_01: skipped", "rs_02.orders_00: skipped"], decisions
    assert ("rs_01.orders_01: applied", "ALTER TABLE rs_01.orders_01 MODIFY amount BIGINT") in decisions, decisions

    # `changefeed apply` reads the directory back into MariaDB; `changefeed diff --routes` compares it with
    # the routed upstream.
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{TARGET}`")
    apply = ["apply", "--from", uri, "--to", f"{mariadb_downstream.url}/", "--available-now"]
    assert main([*apply, "--changefeed-id", "routed-sinks", "--master", "local[2]"]) == 0, capsys.readouterr().err
    rows = client_rows(
        mariadb_downstream,
        f"SELECT c_schema, c_table, id, amount, IFNULL(note, '-') FROM `{TARGET}`.orders ORDER BY 1, 2, 3",
    )
    assert sorted((s, t, int(i), int(a), n) for s, t, i, a, n in rows) == EXPECTED
    capsys.readouterr()
    diff = ["diff", "--target", mariadb_downstream.url, "--tables", f"{TARGET}.*", "--no-progress"]
    assert main([*diff, "--source", upstream.url, "--routes", str(config)]) == 0, capsys.readouterr().out
    assert f"{TARGET}.orders: equal" in capsys.readouterr().out

    # An incompatible shard DDL stops the job with the reason, naming the shard and the DDL.
    run_sql(upstream, ["ALTER TABLE rs_02.orders_00 ADD COLUMN extra INT NULL",
                    "INSERT INTO rs_02.orders_00 VALUES (9, 90, NULL, 9)",
                    "ALTER TABLE rs_01.orders_00 ADD COLUMN extra VARCHAR(5) NULL",
                    "INSERT INTO rs_01.orders_00 VALUES (9, 90, NULL, 'x')"])  # fmt: skip
    capsys.readouterr()
    assert main(["run", str(config), "--available-now", "--master", "local[2]", "--skip-preflight"]) != 0
    err = capsys.readouterr().err
    assert "shard DDL conflict" in err and "rs_01.orders_00" in err and "ADD COLUMN extra VARCHAR(5)" in err, err


def test_routed_names_in_kafka(
    spark: object, upstream: MariaDBServer, broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kafka: one topic per table by a dispatcher over the target names; every message names the target.
    topic_rule = '\n[[sink.dispatchers]]\nmatcher = ["route_sinks.*"]\ntopic = "rt_{schema}_{table}"\n'
    kafka = f"kafka://{broker.bootstrap_servers}/rt-default?protocol=canal-json&enable-tidb-extension=true"
    _run(_config(tmp_path / "kafka.toml", upstream, kafka, topic_rule), capsys)
    changes = []
    for message in _messages(broker, f"rt_{TARGET}_orders"):
        doc = orjson.loads(message)
        if doc.get("type") not in ("INSERT", "UPDATE", "DELETE"):
            continue
        assert (doc["database"], doc["table"]) == (TARGET, "orders"), doc
        for row in doc["data"]:
            amount = None if row.get("amount") is None else int(row["amount"])
            note = row.get("note") or "-"
            changes.append((doc["type"], row["c_schema"], row["c_table"], int(row["id"]), amount, note))
    assert _final(changes) == EXPECTED


@pytest.mark.parametrize(
    ("scheme", "read"), [("delta", read_delta_independently), ("iceberg", read_iceberg_independently)]
)
def test_shard_ddl_merged_into_a_lake_table(
    spark: object,
    upstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scheme: str,
    read: Callable[[Path], pa.Table],
) -> None:
    # One lake table under the target names, evolved once per merged change; read without the sink's
    # libraries (DuckDB over the Delta log, the Iceberg metadata and manifests as files).
    lake = tmp_path / "lake"
    _run(_config(tmp_path / f"{scheme}.toml", upstream, f"{scheme}://{lake}"), capsys)
    assert sorted(p.name for p in lake.iterdir() if p.is_dir() and not p.name.startswith("_")) == [TARGET]
    table = read(lake / TARGET / "orders")
    assert table.schema.field("amount").type == pa.int64() and table.schema.field("note").type == pa.string()
    got = sorted(
        (r["c_schema"], r["c_table"], int(r["id"]), int(r["amount"]), r.get("note") or "-") for r in table.to_pylist()
    )
    assert got == EXPECTED


def _messages(broker: Broker, topic: str) -> list[bytes]:
    """Every message value of ``topic`` (partition 0 then the others), read with a plain consumer."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "routing-test", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        assert meta.error is None, meta.error
        out: list[bytes] = []
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            while low < high:
                msg = consumer.poll(10)
                assert msg is not None and msg.error() is None, msg
                out.append(msg.value())
                low = msg.offset() + 1
        return out
    finally:
        consumer.close()
