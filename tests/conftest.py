"""Shared fixtures: real MariaDB (upstream and downstream), the tansu broker and one Spark session.

Services are session-scoped and start on first use. When one cannot start, the tests that need it
skip on a developer machine and fail under CI (``CI=true``): see ``require_service``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import pytest

from changefeed.testing import Broker, MariaDBServer
from changefeed.testing.iceberg_rest import IcebergRestServer, RestEnvironment
from changefeed.testing.s3 import S3Server
from tests.services import service_unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Marker name -> fixtures that imply it, so ``-m "not spark"`` deselects tests by what they use.
_FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "mariadb": ("mariadb", "mariadb_downstream", "mariadb_factory", "fresh_db", "replica_user"),
    "broker": ("broker",),
    "spark": ("spark",),
}
_MARKER_HELP = {
    "mariadb": "needs the MariaDB fixture",
    "broker": "needs the tansu broker fixture",
    "spark": "needs the Spark fixture",
}


#: The run's scratch directory for JVMs (see ``_spark_scratch``) and the variables it replaced, restored at the end.
_SPARK_SCRATCH = pytest.StashKey[tuple[Path, dict[str, str | None]]]()


def pytest_configure(config: pytest.Config) -> None:
    declared = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, help_text in _MARKER_HELP.items():
        if name not in declared:
            config.addinivalue_line("markers", f"{name}: {help_text}")
    _spark_scratch(config)


def _spark_scratch(config: pytest.Config) -> None:
    """Every JVM the run starts keeps its scratch under one directory, removed at the end.

    A JVM the tests SIGKILL (the kill tests' jobs) never runs its shutdown hook, so its scratch stayed
    in /tmp: hundreds of directories a run, 600 MB each where a shipped environment was unpacked or
    copied. Spark takes ``SPARK_LOCAL_DIRS`` over ``spark.local.dir`` in every mode; what a JVM puts
    in ``java.io.tmpdir`` (spark-submit's copies, native libraries, artifacts) follows
    ``JDK_JAVA_OPTIONS``, which the JDK's launcher reads. The children inherit both.
    """
    if os.environ.get("SPARK_LOCAL_DIRS"):
        return  # the caller chose a place
    scratch = Path(tempfile.mkdtemp(prefix="changefeed-tests-spark-"))
    (scratch / "java").mkdir()
    (scratch / "spark").mkdir()
    saved = {key: os.environ.get(key) for key in ("SPARK_LOCAL_DIRS", "JDK_JAVA_OPTIONS")}
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch / "spark")
    java = f"-Djava.io.tmpdir={scratch / 'java'}"
    os.environ["JDK_JAVA_OPTIONS"] = f"{saved['JDK_JAVA_OPTIONS']} {java}" if saved["JDK_JAVA_OPTIONS"] else java
    config.stash[_SPARK_SCRATCH] = (scratch, saved)


def pytest_unconfigure(config: pytest.Config) -> None:
    stashed = config.stash.get(_SPARK_SCRATCH, None)
    if stashed is not None:
        scratch, saved = stashed
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(scratch, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for marker, implied_by in _FIXTURE_MARKERS.items():
            if fixtures.intersection(implied_by) and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


def require_service(exc: BaseException, what: str) -> NoReturn:
    """A service failed to start: skip locally, fail under CI (the policy is service_unavailable)."""
    service_unavailable(f"{what} could not start: {type(exc).__name__}: {exc}")


def _start(what: str, start: Callable[[], T]) -> T:
    try:
        return start()
    except Exception as exc:
        log.exception("%s could not start", what)
        require_service(exc, what)


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDBServer]:
    """Upstream MariaDB (server_id 1) with a ROW binlog; shared by the whole session."""
    server = _start("MariaDB", MariaDBServer(server_id=1, name="mariadb-upstream").start)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mariadb_downstream() -> Iterator[MariaDBServer]:
    """A second, independent MariaDB (server_id 2) for replication targets; started only on demand."""
    server = _start("MariaDB (downstream)", MariaDBServer(server_id=2, name="mariadb-downstream").start)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mariadb_factory() -> Iterator[Callable[..., MariaDBServer]]:
    """Start extra, private MariaDB servers with custom settings; all are stopped after the test.

    ``mariadb_factory(extra_config={"binlog_format": "STATEMENT"})`` takes MariaDBServer's
    keyword arguments. Use it for tests that restart, kill or misconfigure a server, so the shared
    ``mariadb`` stays untouched.
    """
    started: list[MariaDBServer] = []

    def make(**kwargs: Any) -> MariaDBServer:
        kwargs.setdefault("server_id", 100 + len(started))
        server = _start("MariaDB (private)", MariaDBServer(**kwargs).start)
        started.append(server)
        return server

    try:
        yield make
    finally:
        for server in reversed(started):
            server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One s3rver (npm, disk-backed) for the session: tansu's storage, remote checkpoint stores."""
    server = _start("s3rver", S3Server().start)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def iceberg_rest_server() -> Iterator[IcebergRestServer]:
    """One Iceberg REST catalog server (lakana-server on SQLite) for the session; tests take `iceberg_rest`."""
    server = _start("Iceberg REST catalog (lakana-server)", IcebergRestServer().start)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def iceberg_rest(iceberg_rest_server: IcebergRestServer, monkeypatch: pytest.MonkeyPatch) -> RestEnvironment:
    """A fresh REST catalog (an environment of the server, its own warehouse directory); pyiceberg's
    configuration of the ``changefeed`` catalog (prefix, token) is set in this process's environment."""
    env = _start("Iceberg REST catalog environment", iceberg_rest_server.environment)
    for key, value in env.client_env().items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """The tansu Kafka-API broker with memory storage; use unique topic names per test."""
    server = _start("tansu broker", Broker().start)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for the whole run (each new one costs 4-8 s)."""

    def start() -> SparkSession:
        from changefeed.spark import spark_session  # noqa: PLC0415 - only tests that ask pay for pyspark

        # C1-only JIT and the serial GC: ~20% faster start and first jobs for short test runs on
        # 2 cores; benchmarks use spark_session() without them.
        jvm = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
        return spark_session(app_name="changefeed-tests", extra_conf={"spark.driver.extraJavaOptions": jvm})

    session = _start("Spark", start)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def fresh_db(mariadb: MariaDBServer) -> Iterator[str]:
    """A uniquely named, empty database on the upstream server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        # A new connection: the test may have restarted the server under any older one.
        if mariadb.is_running():
            with mariadb.connect() as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@dataclass(frozen=True)
class ReplicaUser:
    """A replication-only account on the upstream server: ``url`` has no password in it."""

    url: str
    password: str


@pytest.fixture
def replica_user(mariadb: MariaDBServer) -> Iterator[ReplicaUser]:
    """A user with only the replication grants (REPLICATION SLAVE, BINLOG MONITOR), dropped afterwards."""
    name = f"r{uuid.uuid4().hex[:10]}"
    password = "Pw-" + uuid.uuid4().hex[:12]
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{name}'@'%'")
    try:
        yield ReplicaUser(f"mysql://{name}@{mariadb.host}:{mariadb.port}", password)
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")
