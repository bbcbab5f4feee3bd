"""Kafka sink: model events in commit order -> TiCDC-compatible messages on Kafka partitions.

Follows TiCDC's MQ sink (spec §1.2, §1.8, §3.3, §4): rows are split when they change a key,
routed to (topic, partition) by the dispatch rules, encoded by one encoder per partition (Open
Protocol batches per partition) -- all of that is `KafkaEncoder` (encode.py), which may run
elsewhere (Spark executors) -- and the resulting message groups are produced in order with an
idempotent producer (acks=all), so each partition keeps commit-ts order. ``write(events)`` is
the encoder followed by ``write_encoded``, the one producing path. A DDL is written only after
every earlier message is acknowledged, then broadcast; resolved events become checkpoint/watermark
messages on every partition of every topic in use plus the default topic. `flushed` reports the
position up to which the broker acknowledged everything: the only thing a job may checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...clients.kafkauri import KafkaSecurity
from ...codec import CodecOptions, Message, make_encoder, require_transport
from ...dispatch import DispatchRule
from ...errors import ConfigError, SinkError, typed
from ...model import DDLEvent, Event, Resolved, TableSchema
from ...model.rowblock import RowBlock
from ..base import SinkContext
from ..observe import observer
from .bootstrap import BootstrapPolicy
from .encode import KafkaEncoder, KafkaItem, MessageGroup
from .progress import AckTracker, FlushedPosition
from .topics import TopicManager

if TYPE_CHECKING:
    from ...clients.kafka import KafkaError, Producer
    from ...clients.kafka import Message as KafkaMessage

log = logging.getLogger(__name__)

_POLL_EVERY = 1000  # serve delivery callbacks every N produced messages


@dataclass(slots=True)
class KafkaSinkConfig:
    """TiCDC's Kafka sink-uri/``[sink]`` settings that matter here.

    ``producer_config`` is passed to librdkafka after our defaults (it may tune batching; it may
    not turn idempotence off). ``max_message_bytes`` of the codec is lowered to the producer's
    ``message.max.bytes`` when that is set lower.
    """

    bootstrap_servers: str
    topic: str
    codec: CodecOptions
    rules: Sequence[DispatchRule] = ()
    case_sensitive: bool = False
    auto_create_topic: bool = True
    partition_num: int | None = None
    replication_factor: int = 1
    output_raw_change_event: bool = False  # False: split key-changing UPDATEs (TiCDC's default)
    delivery_timeout_s: float = 30.0  # librdkafka message.timeout.ms
    flush_timeout_s: float = 60.0
    metadata_check_interval_s: float = 10.0  # how often partition counts are re-checked
    batch_rows: int = 8192  # rows encoded before messages are built and produced
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    #: librdkafka settings of every client of the sink, producer and admin: TLS and SASL
    #: (`changefeed.clients.kafkauri.KafkaSecurity.client_config`). Holds the SASL password: no repr.
    client_config: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        require_transport(self.codec.protocol, "kafka", "the Kafka sink speaks")
        if not self.topic:
            raise ConfigError("the Kafka sink needs a default topic")

    @classmethod
    def from_uri(
        cls, location: str, params: Mapping[str, str], codec: CodecOptions, rules: Sequence[DispatchRule] = ()
    ) -> KafkaSinkConfig:
        """``kafka://HOST:PORT[,HOST:PORT]/TOPIC?...`` (``location`` is what follows ``kafka://``): the
        URI's Kafka parameters (TiCDC's names) over ``codec``, TLS/SASL through `KafkaSecurity`."""
        codec = replace(codec)
        if "max-message-bytes" in params:
            codec.max_message_bytes = typed(params["max-message-bytes"], int, "max-message-bytes")
        if "max-batch-size" in params:
            codec.max_batch_size = typed(params["max-batch-size"], int, "max-batch-size")
        for name in ("debezium-disable-schema", "debezium-include-start-ts"):
            if name in params:
                setattr(codec, name.replace("-", "_"), typed(params[name], bool, name))
        if codec.debezium_include_start_ts and codec.protocol != "debezium":
            raise ConfigError("debezium-include-start-ts needs protocol=debezium")
        servers, _, topic = location.partition("/")
        security = KafkaSecurity.from_params(params, where="kafka sink-uri")
        partitions = params.get("partition-num")
        return cls(
            bootstrap_servers=servers,
            topic=topic,
            codec=codec,
            rules=rules,
            auto_create_topic=typed(params.get("auto-create-topic", "true"), bool, "auto-create-topic"),
            partition_num=typed(partitions, int, "partition-num") if partitions is not None else None,
            replication_factor=typed(params.get("replication-factor", "1"), int, "replication-factor"),
            client_config=security.client_config(),
        )


def _never(ddl: DDLEvent) -> bool:
    return False


_REBUILD_HINT = "the sink stays failed: create a new KafkaSink and re-send every event after its `flushed` position"


class KafkaSink(SinkContext):
    """One changefeed's Kafka writer (a `Sink`: changefeed/sink/base.py).

    Recovery is the caller's job, by design: after any delivery failure (a broker restart that
    lost data, a stalled or fatal idempotent producer) the sink raises SinkError and stays failed,
    because only the caller still holds the events after ``flushed``. It builds a new sink and
    re-sends from there; the consumer drops the overlap (docs/kafka.md, "Broker restarts").
    """

    kind = "kafka"

    def __init__(self, config: KafkaSinkConfig) -> None:
        from ...clients.kafka import AdminClient, Producer  # noqa: PLC0415 - only Kafka sinks load librdkafka

        self.config = config
        producer_conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "message.timeout.ms": int(config.delivery_timeout_s * 1000),
            "allow.auto.create.topics": False,  # topics are created (or refused) by TopicManager
            "logger": log,
            "error_cb": self._on_error,
            **config.client_config,
            **config.producer_config,
            # TiCDC's producer: idempotent, acks from all in-sync replicas; not negotiable here.
            "enable.idempotence": True,
            "acks": "all",
        }
        limit = config.codec.max_message_bytes
        if "message.max.bytes" in config.producer_config:
            limit = min(limit, int(config.producer_config["message.max.bytes"]))
        producer_conf["message.max.bytes"] = limit
        self.codec = replace(config.codec, max_message_bytes=limit)
        self._producer: Producer = Producer(producer_conf)
        admin_reasons: deque[str] = deque(maxlen=16)
        admin_conf: dict[str, Any] = {  # "logger" is a Logger: beyond the stubs' str | int | float | bool
            "bootstrap.servers": config.bootstrap_servers,
            "logger": log,
            "allow.auto.create.topics": False,
            "error_cb": lambda err: admin_reasons.append(err.str()),
            **config.client_config,
        }
        self._admin = AdminClient(admin_conf)
        self.topics = TopicManager(
            self._admin,
            auto_create=config.auto_create_topic,
            partition_num=config.partition_num,
            replication_factor=config.replication_factor,
            servers=config.bootstrap_servers,
            reasons=admin_reasons,
        )
        self.encoder = KafkaEncoder(
            self.codec,
            config.topic,
            config.rules,
            case_sensitive=config.case_sensitive,
            output_raw_change_event=config.output_raw_change_event,
            batch_rows=config.batch_rows,
        )
        self.router = self.encoder.router
        self._control = make_encoder(self.codec)  # DDL, resolved, BOOTSTRAP messages
        self._acks = AckTracker()
        self._inflight: dict[tuple[str, int], deque[int]] = {}
        self._errors: list[str] = []
        self._failed: SinkError | None = None
        self._bootstrap = (
            BootstrapPolicy(self.codec.send_bootstrap_interval_in_sec, self.codec.send_bootstrap_in_msg_count)
            if self.codec.protocol == "simple"
            else None
        )
        self._topics_seen: dict[str, None] = {config.topic: None}
        self._open: tuple[int, Any] | None = None  # (commit ts, position) of the transaction being written
        self._complete: list[FlushedPosition] = []  # transactions complete but not yet marked
        self._last_resolved = -1
        self._since_poll = 0
        self._last_check = time.monotonic()
        self.messages_sent = 0

    # ------------------------------------------------------------------ public

    def open(self) -> int:
        """Look up (or create) the default topic, so a missing one fails now; returns 0.

        The topic keeps no checkpoint of this writer: each consumer keeps its own, and drops what
        a replayed batch sends again (docs/kafka.md).
        """
        self.topic_partitions(self.config.topic)
        return 0

    def write(self, batch: Iterable[Event | RowBlock]) -> None:
        """Send ``batch`` (commit order). Raises SinkError on any earlier delivery failure."""
        self._raise_if_failed()
        self.write_encoded(self.encoder.encode(batch, self.topic_partitions, self._last_resolved))

    def write_encoded(self, items: Iterable[KafkaItem]) -> None:
        """Send what `KafkaEncoder.encode` made (here or in an executor), in its order.

        The groups must have been dispatched with this sink's partition counts (`topic_partitions`).
        """
        self._raise_if_failed()
        for item in items:
            if isinstance(item, MessageGroup):
                self._group(item)
            elif isinstance(item, DDLEvent):
                self._ddl(item)
            elif isinstance(item, Resolved):
                self._resolved(item)
            else:
                raise TypeError(f"kafka sink: unexpected {type(item).__name__}")
        self._build()
        self._maybe_check_metadata()
        self._raise_if_failed()

    def topic_partitions(self, topic: str) -> int:
        """Partitions rows of ``topic`` are dispatched to (looked up, maybe created, on first use)."""
        n = self.topics.partitions(topic)
        self._topics_seen.setdefault(topic, None)
        return n

    @property
    def last_resolved(self) -> int:
        """The newest Resolved ts written (-1: none); an encoder elsewhere starts from it."""
        return self._last_resolved

    def flush(self, timeout_s: float | None = None) -> int:
        """Wait until every message sent is acknowledged (or fail with SinkError).

        Returns the commit ts of `flushed` (0: no transaction complete yet).
        """
        self._build()
        self._wait_acks(timeout_s)
        self._maybe_check_metadata(force=False)
        flushed = self.flushed
        return flushed.commit_ts if flushed is not None else 0

    @property
    def flushed(self) -> FlushedPosition | None:
        """Highest complete commit ts (and its source position) the broker acknowledged entirely.

        A transaction counts as complete once a later commit ts, a DDL or a covering Resolved
        event has been written after it.
        """
        self._producer.poll(0)
        return self._acks.flushed()

    def close(self) -> None:
        """Release the producer without waiting: what was not flushed is not promised (`Sink`)."""
        self._producer.flush(0)

    # ------------------------------------------------------------------ events

    def _group(self, group: MessageGroup) -> None:
        self._advance(group.first_ts)
        if group.complete is not None:
            self._complete.append(group.complete)
        if self._bootstrap is not None:
            # BOOTSTRAP goes out before the rows it describes, decided with this sink's clock and history.
            for table in group.bootstrap:
                schema = self._bootstrap.before(table)
                if schema is not None:
                    self._send_bootstrap(self.router.topic(schema.schema, schema.table), schema)
        for topic, partition, msg in group.messages:
            if topic not in self._topics_seen:
                self.topic_partitions(topic)
            self._produce(topic, partition, msg)
        self._open = (group.last.commit_ts, group.last.position)
        self._build()

    def _ddl(self, ddl: DDLEvent) -> None:
        # TiCDC writes a DDL only after every earlier DML is acknowledged (seed 002 "DDL").
        self._advance(ddl.commit_ts)
        self._close_open()
        self._build()
        self._wait_acks(None)
        topic = self.router.topic(ddl.schema, ddl.table)
        n = self.topics.partitions(topic)
        self._topics_seen.setdefault(topic, None)
        # canal/canal-json: partition 0 only; every other protocol broadcasts (spec §1.8; debezium.md
        # §2). Debezium sends nothing for a DDL action it does not classify (debezium.md §7).
        targets: range | list[int] = [0] if self.codec.protocol == "canal-json" else range(n)
        if getattr(self._control, "skips_ddl", _never)(ddl):
            targets = []
        if targets:
            msg = self._control.encode_ddl(ddl)
            for p in targets:
                self._produce(topic, p, msg)
        self._acks.mark(FlushedPosition(ddl.commit_ts, ddl.position))
        self._wait_acks(None)
        log.info("ddl sent", extra={"topic": topic, "commit_ts": ddl.commit_ts, "partitions": len(targets)})

    def _resolved(self, resolved: Resolved) -> None:
        ts = resolved.commit_ts
        if self._open is not None and self._open[0] <= ts:
            self._close_open()
        if ts <= self._last_resolved:
            return
        self._build()
        if self._bootstrap is not None:
            for schema in self._bootstrap.due():
                self._send_bootstrap(self.router.topic(schema.schema, schema.table), schema)
        # The checkpoint promises everything before it was delivered: TiCDC emits it only after
        # the DMLs are acknowledged.
        self._wait_acks(None)
        msg = self._control.encode_resolved(resolved)
        if msg is not None:
            # Every partition of every topic in use plus the default topic (spec §1.8, §4.3).
            for topic in self._topics_seen:
                for p in range(self.topics.partitions(topic)):
                    self._produce(topic, p, msg)
        self._acks.mark(FlushedPosition(ts, resolved.position))
        self._last_resolved = ts

    def _send_bootstrap(self, topic: str, schema: TableSchema) -> None:
        msg = self._control.encode_bootstrap(schema)
        if msg is None:  # pragma: no cover - only simple has BOOTSTRAP
            return
        n = self.topics.partitions(topic)
        targets = range(n) if self.codec.send_bootstrap_to_all_partition else [0]
        for p in targets:
            self._produce(topic, p, msg)
        log.debug("bootstrap sent", extra={"topic": topic, "table": schema.qualified_name, "partitions": len(targets)})

    def _advance(self, commit_ts: int) -> None:
        """A later commit ts completes the transaction written so far."""
        if self._open is not None and commit_ts > self._open[0]:
            self._close_open()

    def _close_open(self) -> None:
        if self._open is not None:
            self._complete.append(FlushedPosition(*self._open))
            self._open = None

    # ------------------------------------------------------------------ producing

    def _build(self) -> None:
        """Mark the transactions completed by what was produced so far (rows are built by the encoder)."""
        if self._complete:
            for position in self._complete:
                self._acks.mark(position)
            self._complete.clear()

    def _produce(self, topic: str, partition: int, msg: Message) -> None:
        if not msg.value:
            # Kafka consumers (and tansu) may never see an empty value; no protocol here needs one.
            raise SinkError(f"kafka: refusing to send a message with an empty value to {topic}[{partition}]")
        seq = self._acks.sent()
        queue = self._inflight.get((topic, partition))
        if queue is None:
            queue = self._inflight[(topic, partition)] = deque()
        queue.append(seq)
        producer = self._producer
        while True:
            try:
                producer.produce(topic, msg.value, msg.key, partition=partition, on_delivery=self._on_delivery)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: serve callbacks, then retry
            except Exception as exc:  # KafkaException, e.g. MSG_SIZE_TOO_LARGE or a fatal producer
                queue.pop()
                raise SinkError(f"kafka: cannot produce to {topic}[{partition}]: {exc}", where=topic) from exc
        self.messages_sent += 1
        self._since_poll += 1
        if self._since_poll >= _POLL_EVERY:
            self._since_poll = 0
            producer.poll(0)

    def _on_delivery(self, err: KafkaError | None, msg: KafkaMessage) -> None:
        # The idempotent producer reports a partition's messages in the order they were produced.
        topic, partition = msg.topic(), msg.partition()
        assert topic is not None and partition is not None  # a delivery report names its partition
        key = (topic, partition)
        seq = self._inflight[key].popleft()
        if err is None:
            self._acks.acked(seq)
            observer().kafka_delivered(msg.latency())
        else:
            self._errors.append(f"{key[0]}[{key[1]}]: {err.str()}")
            observer().sink_error("kafka", retried=False)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._errors.append(f"fatal producer error: {err.str()}")
        else:
            log.warning("kafka client error", extra={"error": err.str()})
            observer().sink_error("kafka", retried=True)  # librdkafka retries it on its own

    def _wait_acks(self, timeout_s: float | None) -> None:
        timeout = self.config.flush_timeout_s if timeout_s is None else timeout_s
        left = self._producer.flush(timeout)
        self._raise_if_failed()
        if left:
            self._fail(
                SinkError(
                    f"kafka: {left} messages not acknowledged within {timeout} s (broker down or unreachable?); "
                    f"{_REBUILD_HINT}",
                    where=self.config.bootstrap_servers,
                )
            )

    def _maybe_check_metadata(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_check >= self.config.metadata_check_interval_s:
            self._last_check = now
            try:
                self.topics.check()
            except SinkError as exc:
                self._fail(exc)

    def _raise_if_failed(self) -> None:
        if self._failed is None and self._errors:
            first, count = self._errors[0], len(self._errors)
            more = f" (and {count - 1} more)" if count > 1 else ""
            message, where = f"kafka: delivery failed: {first}{more}", self.config.bootstrap_servers
            try:  # a lost or recreated topic explains a stalled producer better than a timeout
                self.topics.check()
            except SinkError as cause:
                message, where = f"{message}; {cause.message}", cause.where or where
            message = f"{message}; {_REBUILD_HINT}"
            self._failed = SinkError(message, where=where)
            log.error("kafka sink failed", extra={"error": message})
        if self._failed is not None:
            raise self._failed

    def _fail(self, exc: SinkError) -> None:
        self._failed = exc
        observer().sink_error("kafka", retried=False)
        log.error("kafka sink failed", extra={"error": str(exc)})
        raise exc
