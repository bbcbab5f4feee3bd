"""Prove each fixture is the real service: data goes in, comes back, and settings are what we claim."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from changefeed.spark import MARIADB_JDBC_DRIVER, MARIADB_JDBC_JAR, jdbc_url
from changefeed.testing import Broker, MariaDBServer
from tests.services import service_unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _query(server: MariaDBServer, sql: str, database: str | None = None) -> list[tuple[object, ...]]:
    with server.connect(database) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_mariadb_round_trip_and_binlog_settings(mariadb: MariaDBServer, fresh_db: str) -> None:
    with mariadb.connect(fresh_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(32), blob_col VARBINARY(8))")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(1, "ascii", b"\x00\xff"), (2, "中文 🐬", b"\x01")])
        cur.execute("SELECT id, name, blob_col FROM t ORDER BY id")
        assert cur.fetchall() == ((1, "ascii", b"\x00\xff"), (2, "中文 🐬", b"\x01"))

    variables = dict(
        _query(
            mariadb,
            "SHOW VARIABLES WHERE Variable_name IN ('binlog_format', 'binlog_row_image', "
            "'binlog_row_metadata', 'log_bin', 'server_id', 'character_set_server', 'port')",
        )
    )
    assert variables == {
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "log_bin": "ON",
        "server_id": "1",
        "character_set_server": "utf8mb4",
        "port": str(mariadb.port),
    }

    binlogs = [str(row[0]) for row in _query(mariadb, "SHOW BINARY LOGS")]
    assert binlogs, "SHOW BINARY LOGS is empty"
    assert all((mariadb.binlog_dir / name).is_file() for name in binlogs)
    assert mariadb.url == f"mysql://root@127.0.0.1:{mariadb.port}"


def test_second_mariadb_is_independent(mariadb: MariaDBServer, mariadb_downstream: MariaDBServer) -> None:
    assert mariadb.port != mariadb_downstream.port
    assert mariadb.datadir != mariadb_downstream.datadir
    assert _query(mariadb_downstream, "SELECT @@server_id") == [(2,)]

    db = f"indep_{uuid.uuid4().hex[:8]}"
    try:
        for server, value in ((mariadb, "upstream"), (mariadb_downstream, "downstream")):
            with server.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{db}`")
                cur.execute(f"CREATE TABLE `{db}`.t (v VARCHAR(16))")
                cur.execute(f"INSERT INTO `{db}`.t VALUES (%s)", (value,))
        assert _query(mariadb, "SELECT v FROM t", db) == [("upstream",)]
        assert _query(mariadb_downstream, "SELECT v FROM t", db) == [("downstream",)]
    finally:
        for server in (mariadb, mariadb_downstream):
            _query(server, f"DROP DATABASE IF EXISTS `{db}`")


def test_mariadb_restart_and_crash_keep_data(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    server = mariadb_factory()
    port, pid = server.port, server.pid
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE r")
        cur.execute("CREATE TABLE r.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO r.t VALUES (1), (2)")
    logs_before = {str(row[0]) for row in _query(server, "SHOW BINARY LOGS")}

    server.restart()
    assert server.port == port and server.pid != pid
    assert _query(server, "SELECT id FROM r.t ORDER BY id") == [(1,), (2,)]
    logs_after = {str(row[0]) for row in _query(server, "SHOW BINARY LOGS")}
    assert logs_before < logs_after, "a restart should rotate to a new binlog file"

    _query(server, "INSERT INTO r.t VALUES (3)")
    server.kill()
    assert not server.is_running()
    server.start()  # crash recovery on the same datadir and port
    assert server.port == port
    assert _query(server, "SELECT id FROM r.t ORDER BY id") == [(1,), (2,), (3,)]


def test_broker_keyed_produce_and_assign_consume(broker: Broker) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: PLC0415

    topic = f"services-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=3)
    metadata = broker.admin().list_topics(topic, timeout=10)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]

    payload = bytes(range(256)) * 4  # every byte value, binary-exact
    sent = {(p, i): (f"key-{p}-{i}".encode(), payload + bytes([p, i])) for p in range(3) for i in range(5)}
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for (partition, _i), (key, value) in sent.items():
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=[("origin", b"test")],
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(15) == 0
    assert errors == []

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
        received: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + 20
        while len(received) < len(sent) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None, msg.error()
                key, value = msg.key(), msg.value()
                assert key is not None and value is not None
                assert msg.headers() == [("origin", b"test")]
                index = int(key.decode().rsplit("-", 1)[1])
                received[(msg.partition(), index)] = (key, value)
    finally:
        consumer.close()
    assert received == sent


def test_spark_range_aggregate(spark: SparkSession) -> None:
    row = spark.range(0, 10_000, numPartitions=4).selectExpr("count(*) AS n", "sum(id) AS total").first()
    assert row is not None
    assert (row["n"], row["total"]) == (10_000, 10_000 * 9_999 // 2)


def test_spark_jdbc_round_trip(spark: SparkSession, mariadb: MariaDBServer, fresh_db: str) -> None:
    if not Path(MARIADB_JDBC_JAR).is_file():
        service_unavailable("the MariaDB JDBC jar (Debian libmariadb-java) is not installed")  # fails under CI
    assert MARIADB_JDBC_JAR in spark.conf.get("spark.jars", "")
    options = {
        "url": jdbc_url(mariadb.host, mariadb.port, fresh_db),
        "driver": MARIADB_JDBC_DRIVER,
        "user": mariadb.user,
        "password": mariadb.password,
        "dbtable": "spark_rows",
    }
    rows = [(1, "one"), (2, "два"), (3, "三")]
    spark.createDataFrame(rows, "id INT, name STRING").write.format("jdbc").options(**options).mode("overwrite").save()

    assert _query(mariadb, "SELECT id, name FROM spark_rows ORDER BY id", fresh_db) == rows
    back = spark.read.format("jdbc").options(**options).load().orderBy("id").collect()
    assert [(r["id"], r["name"]) for r in back] == rows
