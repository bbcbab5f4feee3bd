"""Preflight checks against real servers: each misconfiguration is detected and its finding says how to fix it."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Iterator

import orjson
import pytest

from changefeed.cli import main
from changefeed.cli.check import run as check_run
from changefeed.ops.preflight import Finding, PreflightError, check_broker, check_source, raise_for_errors
from changefeed.testing import Broker, MariaDBServer, free_port


def _checks(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def test_healthy_source_has_no_findings(mariadb: MariaDBServer) -> None:
    assert check_source(mariadb.url) == []
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        first = cur.fetchone()[0]
    assert check_source(mariadb.url, start=f"{first}:4") == []


def test_statement_binlog_format(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    server = mariadb_factory(extra_config={"binlog_format": "STATEMENT"})
    found = _checks(check_source(server.url))
    assert set(found) == {"binlog-format"}
    f = found["binlog-format"]
    assert f.severity == "error"
    assert "STATEMENT" in f.message
    assert "binlog_format=ROW" in f.fix and "my.cnf" in f.fix and "SET GLOBAL binlog_format=ROW" in f.fix
    with pytest.raises(PreflightError, match="binlog_format=STATEMENT"):
        raise_for_errors(check_source(server.url))


def test_minimal_row_image_and_metadata(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    server = mariadb_factory(extra_config={"binlog_row_image": "MINIMAL", "binlog_row_metadata": "MINIMAL"})
    found = _checks(check_source(server.url))
    assert set(found) == {"binlog-row-image", "binlog-row-metadata"}
    assert found["binlog-row-image"].severity == "error"
    assert "SET GLOBAL binlog_row_image=FULL" in found["binlog-row-image"].fix
    # The schema tracker can stand in for missing column names: a warning, unless it is not used.
    assert found["binlog-row-metadata"].severity == "warning"
    assert "binlog_row_metadata=FULL" in found["binlog-row-metadata"].fix
    strict = _checks(check_source(server.url, schema_tracker=False))
    assert strict["binlog-row-metadata"].severity == "error"
    assert raise_for_errors([found["binlog-row-metadata"]]) == [found["binlog-row-metadata"]]


def test_binlog_disabled(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    server = mariadb_factory(extra_config={"log_bin": False})
    found = _checks(check_source(server.url, start="binlog.000001:4"))
    assert "binlog-disabled" in found
    f = found["binlog-disabled"]
    assert f.severity == "error" and "log_bin" in f.fix and "restart" in f.fix
    assert "start-purged" not in found  # no binlog at all: the position check would only add noise


@pytest.fixture
def plain_user(mariadb: MariaDBServer) -> Iterator[tuple[str, str]]:
    """A user with a password and no privileges beyond USAGE; dropped afterwards."""
    name, password = f"u{uuid.uuid4().hex[:10]}", "s3cret-Pw"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
    try:
        yield name, password
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def test_missing_replication_privileges(mariadb: MariaDBServer, plain_user: tuple[str, str]) -> None:
    name, password = plain_user
    url = f"mysql://{name}:{password}@{mariadb.host}:{mariadb.port}"
    f = _checks(check_source(url))["source-privileges"]
    assert f.severity == "error"
    assert "REPLICATION SLAVE and REPLICATION CLIENT" in f.message
    assert f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'%'" in f.fix
    assert password not in str(f) and password not in f.target

    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"GRANT REPLICATION SLAVE ON *.* TO '{name}'@'%'")
    f = _checks(check_source(url))["source-privileges"]
    assert "REPLICATION SLAVE" not in f.message and "REPLICATION CLIENT" in f.message

    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"GRANT BINLOG MONITOR ON *.* TO '{name}'@'%'")  # MariaDB's name of REPLICATION CLIENT
    assert check_source(url) == []


def test_snapshot_needs_select_on_the_tables_it_reads(
    mariadb: MariaDBServer, plain_user: tuple[str, str], fresh_db: str
) -> None:
    """A snapshot reads each table the filter keeps with SELECT: one the user sees but may not read is an
    error naming it; without a global SELECT a warning says invisible tables are not copied."""
    name, password = plain_user
    url = f"mysql://{name}:{password}@{mariadb.host}:{mariadb.port}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        for table in ("readable", "write_only", "other"):
            cur.execute(f"CREATE TABLE `{fresh_db}`.{table} (id INT PRIMARY KEY)")
        cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{name}'@'%'")
        cur.execute(f"GRANT SELECT ON `{fresh_db}`.readable TO '{name}'@'%'")
        cur.execute(f"GRANT INSERT ON `{fresh_db}`.write_only TO '{name}'@'%'")  # listed, not readable
        cur.execute(f"GRANT INSERT ON `{fresh_db}`.other TO '{name}'@'%'")
    assert check_source(url) == []  # no snapshot: SELECT is not needed
    keeps = lambda schema, table: schema == fresh_db and table != "other"  # noqa: E731
    found = _checks(check_source(url, snapshot=keeps))
    denied = found["snapshot-privileges"]
    assert denied.severity == "error" and f"`{fresh_db}`.`write_only`" in denied.message
    assert "readable" not in denied.message and "other" not in denied.message
    assert f"GRANT SELECT ON `{fresh_db}`.`write_only` TO '{name}'@'%'" in denied.fix
    assert found["snapshot-tables"].severity == "warning" and "GRANT SELECT ON *.*" in found["snapshot-tables"].fix
    assert password not in str(denied)

    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"GRANT SELECT ON *.* TO '{name}'@'%'")
    assert check_source(url, snapshot=keeps) == []
    assert check_source(mariadb.url, snapshot=keeps) == []  # root: every privilege


def test_wrong_password(mariadb: MariaDBServer, plain_user: tuple[str, str]) -> None:
    name, _ = plain_user
    findings = check_source(f"mysql://{name}:wrong-pw@{mariadb.host}:{mariadb.port}")
    assert [f.check for f in findings] == ["source-auth"]
    assert "wrong-pw" not in str(findings[0])


def test_purged_start_position(mariadb_factory: Callable[..., MariaDBServer]) -> None:
    server = mariadb_factory()
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        first = cur.fetchone()[0]
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        names = [row[0] for row in cur.fetchall()]
        # MariaDB keeps a file until its binlog checkpoint is written (asynchronously after FLUSH): retry.
        deadline = time.monotonic() + 15
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{names[-1]}'")
            cur.execute("SHOW BINARY LOGS")
            if len(cur.fetchall()) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    f = _checks(check_source(server.url, start=f"{first}:4"))["start-purged"]
    assert f.severity == "error" and first in f.message and names[-1] in f.message
    assert "snapshot" in f.fix and "binlog_expire_logs_seconds" in f.fix
    assert check_source(server.url, start={"file": names[-1], "pos": 4}) == []
    past = _checks(check_source(server.url, start=f"{names[-1]}:99999999"))
    assert "past the end" in past["start-position"].message


def test_unreachable_source() -> None:
    port = free_port("127.0.0.1")
    findings = check_source(f"mysql://root:pw@127.0.0.1:{port}", timeout=2)
    assert [f.check for f in findings] == ["source-unreachable"]
    assert str(port) in findings[0].message and "bind_address" in findings[0].fix


def test_broker_checks(broker: Broker) -> None:
    topic = f"pre-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=1)
    assert check_broker(broker.bootstrap_servers) == []
    assert check_broker(broker.bootstrap_servers, topic, 1) == []
    f = _checks(check_broker(broker.bootstrap_servers, topic, 3))["topic-partitions"]
    assert f.severity == "error" and "1 partition(s)" in f.message
    assert f"--alter --topic {topic} --partitions 3" in f.fix
    missing = check_broker(broker.bootstrap_servers, f"{topic}-absent", 2)
    assert [(m.check, m.severity) for m in missing] == [("topic-missing", "warning")]


def test_unreachable_broker() -> None:
    port = free_port("127.0.0.1")
    findings = check_broker(f"127.0.0.1:{port}", "t", 3, timeout=1)
    assert [f.check for f in findings] == ["broker-unreachable"]
    assert "advertised.listeners" in findings[0].fix


def test_check_command(mariadb: MariaDBServer, broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--from", mariadb.url]) == 0
    assert "OK" in capsys.readouterr().out
    topic = f"pre-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=1)
    argv = ["check", "--from", mariadb.url, "--broker", broker.bootstrap_servers, "--topic", topic]
    assert main([*argv, "--partitions", "2"]) == 1
    out = capsys.readouterr().out
    assert "ERROR topic-partitions" in out and "fix: add partitions" in out
    buf = io.StringIO()
    args = _parse([*argv, "--partitions", "2", "--json"])
    assert check_run(args, buf) == 1
    assert [f["check"] for f in orjson.loads(buf.getvalue())] == ["topic-partitions"]
    assert main(["check"]) == 1  # neither --from nor --broker: a usage error, reported not raised


def _parse(argv: list[str]):  # type: ignore[no-untyped-def]
    from changefeed.cli import build_parser  # noqa: PLC0415

    return build_parser().parse_args(argv)
