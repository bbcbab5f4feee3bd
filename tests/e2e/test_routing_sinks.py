"""Routed names in every sink: three MariaDB shard tables merged by DM-style ``[[routes]]`` into
``route_sinks.orders`` (with ``c_table``/``c_schema`` in the key), written by `changefeed run` into a
storage directory, a Kafka topic and a Delta table. Each is read back by something that is not the
writer: the directory tree and `changefeed apply` into MariaDB (read with its client), the topic's
Canal-JSON with confluent-kafka and orjson, the Delta table with DuckDB over its log.

Shards add a column one after another (writes in between). Kafka carries every shard's DDL and
rows under the target name (each message with its own shard's columns). A storage directory or a
Delta table keeps one schema per table version: a merged table's shard DDL stops the job with the
reason, and merged rows written after the shards' DDL go in under the target names.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from changefeed.cli import main
from changefeed.testing import Broker, MariaDBServer
from tests.mariadb_client import client_rows
from tests.sink.lake.independent import read_delta_independently

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
        ("02", "00", 6, 60, "-"),
    ]
)


def _load(upstream: MariaDBServer) -> None:
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
        "ALTER TABLE rs_01.orders_01 ADD COLUMN note VARCHAR(10) NULL",
        "INSERT INTO rs_01.orders_01 VALUES (5, 50, 'b')",
        "ALTER TABLE rs_02.orders_00 ADD COLUMN note VARCHAR(10) NULL",
    ]
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


def test_routed_names_in_storage(
    spark: object,
    upstream: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Shard DDL into a storage directory: refused with the reason (one schema timeline per table).
    storage = tmp_path / "storage"
    uri = f"{storage.as_uri()}?protocol=canal-json"
    _refused(_config(tmp_path / "storage.toml", upstream, uri), capsys)
    # Merged rows without shard DDL (the capture starts after the shards' DDL): the directory tree has
    # the target names only, and `changefeed apply` reads it back into MariaDB.
    shutil.rmtree(storage)
    start = _more_rows(upstream)
    _run(_config(tmp_path / "storage.toml", upstream, uri, start=start), capsys)
    assert sorted(p.name for p in storage.iterdir() if p.is_dir() and not p.name.startswith("_")) == [TARGET]
    assert [p.name for p in (storage / TARGET).iterdir() if p.is_dir()] == ["orders"]
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{TARGET}`")
        cur.execute(f"CREATE DATABASE `{TARGET}`")
        cur.execute(MERGED_TABLE)  # the merged table as the shards' DDL would have made it
    apply = ["apply", "--from", storage.as_uri(), "--to", f"{mariadb_downstream.url}/", "--available-now"]
    assert main([*apply, "--changefeed-id", "routed-sinks", "--master", "local[2]"]) == 0, capsys.readouterr().err
    rows = client_rows(
        mariadb_downstream,
        f"SELECT c_schema, c_table, id, amount, IFNULL(note, '-') FROM `{TARGET}`.orders ORDER BY 1, 2, 3",
    )
    assert [(s, t, int(i), int(a), n) for s, t, i, a, n in rows] == LATER


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


def test_routed_names_in_delta(
    spark: object, upstream: MariaDBServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Shard DDL into a Delta table: refused with the reason, as for storage.
    lake = tmp_path / "lake"
    _refused(_config(tmp_path / "delta.toml", upstream, f"delta://{lake}"), capsys)
    # Merged rows without shard DDL: one table under the target names, read by DuckDB over its log.
    shutil.rmtree(lake, ignore_errors=True)
    start = _more_rows(upstream)
    _run(_config(tmp_path / "delta.toml", upstream, f"delta://{lake}", start=start), capsys)
    assert sorted(p.name for p in lake.iterdir() if p.is_dir() and not p.name.startswith("_")) == [TARGET]
    table = read_delta_independently(lake / TARGET / "orders").to_pylist()
    got = sorted((r["c_schema"], r["c_table"], int(r["id"]), int(r["amount"]), r.get("note") or "-") for r in table)
    assert got == LATER


MERGED_TABLE = (
    f"CREATE TABLE `{TARGET}`.orders (id INT NOT NULL, amount INT, c_table VARCHAR(255) NOT NULL, "
    "c_schema VARCHAR(255) NOT NULL, note VARCHAR(10) NULL, PRIMARY KEY (id, c_table, c_schema))"
)
#: What the writes after the shards' DDL leave in the merged table (the capture starts after the DDL).
LATER = [("01", "00", 7, 70, "x"), ("01", "01", 7, 71, "-"), ("02", "00", 2, 200, "y"), ("02", "00", 7, 72, "z")]


def _more_rows(upstream: MariaDBServer) -> str:
    """Rows written to every shard after their DDL; returns the binlog position before them."""
    with upstream.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        for sql in (
            "INSERT INTO rs_01.orders_00 VALUES (7, 70, 'x')",
            "INSERT INTO rs_01.orders_01 VALUES (7, 71, NULL)",
            "INSERT INTO rs_02.orders_00 VALUES (7, 72, 'z')",
            "UPDATE rs_02.orders_00 SET amount = 200, note = 'y' WHERE id = 2",
        ):
            cur.execute(sql)
    return f"{file}:{pos}"


def _refused(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", str(config), "--available-now", "--master", "local[2]", "--skip-preflight"]
    capsys.readouterr()
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "takes no shard DDL" in err and "merged into route_sinks.orders" in err, err


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
