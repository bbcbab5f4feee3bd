"""Reading Kafka: the one consumer factory of the read side, and a partition's messages between two offsets.

Every consumer that reads a TiCDC-protocol topic is built by `new_consumer`: `source.KafkaSource`
(a plain consumer, committing to its group only when told) and the Spark ``kafka`` input
(`changefeed.spark.datasource.kafka`: ``assign()`` only, offsets live in Spark). The settings are the
strictest both need: nothing is committed or stored on its own, an offset the broker no longer has
is an error rather than a silent skip, and reading never creates a topic.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CaptureError

if TYPE_CHECKING:
    from ..clients.kafka import Consumer

log = logging.getLogger(__name__)

#: Seconds a range read waits for its next message.
KAFKA_TIMEOUT_S = 30.0
#: ``group.id`` of a consumer that names no group: librdkafka needs one, and with ``assign()`` it
#: never joins it nor commits to it.
NO_GROUP = "changefeed-unused"


def new_consumer(
    servers: str,
    client_config: Mapping[str, Any] | None = None,
    *,
    group_id: str | None = None,
) -> Consumer:
    """A consumer of ``servers``; ``client_config`` (TLS, SASL: `changefeed.clients.kafkauri`; tuning) comes last.

    Offsets are committed only by an explicit ``commit`` (``KafkaSource.commit``), never automatically.
    """
    from ..clients.kafka import Consumer  # noqa: PLC0415 - only kafka reads need it

    return Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group_id or NO_GROUP,
            "enable.auto.commit": False,  # commit only what the caller made durable
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",  # an offset the broker no longer has is an error, not a skip
            "allow.auto.create.topics": False,
            "logger": log,
            **(client_config or {}),
        }
    )


#: Settings of a consumer that reads offset ranges: after a range it is unassigned while a fetch
#: past the range's end may be in flight, and that fetch, at the log's end, is held by the broker
#: for ``fetch.wait.max.ms`` (500 ms by default) before the consumer can fetch for its next range.
#: Inside a range every offset is there already, so a short wait costs nothing. A backlog's range
#: fills librdkafka's local queue (``queued.max.messages.kbytes``) past the range's end, and a full
#: queue postpones the partition's next fetch by ``fetch.queue.backoff.ms`` (1000 ms by default),
#: a timer the partition keeps through unassign: the next range's first fetch then waited up to 1 s.
RANGE_SETTINGS = {"fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10, "queued.max.messages.kbytes": 16384}
#: Idle range consumers kept per (brokers, settings) in one process.
POOL_SIZE = 4


class ConsumerPool:
    """Range consumers kept across reads in one process (a Spark Python worker runs task after task).

    Why: a new consumer per range and micro-batch costs ~3 ms of CPU and 6-16 ms of wall time
    (connections, metadata) per partition and batch; a pooled one is only assigned its partition.
    A consumer is unassigned after each range, so an idle one fetches nothing and holds no
    messages; one whose read failed is closed, not kept. Like Spark's own Kafka source (its
    per-executor consumer cache), this keys consumers by what they connect with.
    """

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._idle: dict[tuple[str, tuple[tuple[str, str], ...]], list[Consumer]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def consumer(self, servers: str, client_config: Mapping[str, Any] | None = None) -> Iterator[Consumer]:
        """A consumer of ``servers`` with ``client_config`` for one range read; back to the pool after it."""
        config = {**RANGE_SETTINGS, **(client_config or {})}
        key = (servers, tuple(sorted((k, str(v)) for k, v in config.items())))
        with self._lock:
            idle = self._idle.get(key)
            consumer = idle.pop() if idle else None
        if consumer is None:
            consumer = new_consumer(servers, config)
        try:
            yield consumer
            consumer.unassign()
        except BaseException:
            consumer.close()
            raise
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.size:
                idle.append(consumer)
                return
        consumer.close()

    def close(self) -> None:
        """Close every idle consumer (at exit; a Spark worker that ends with ``os._exit`` skips this harmlessly)."""
        with self._lock:
            idle = [c for consumers in self._idle.values() for c in consumers]
            self._idle.clear()
        for consumer in idle:
            consumer.close()

    def idle(self) -> int:
        with self._lock:
            return sum(len(c) for c in self._idle.values())


#: The process's pool (`ConsumerPool`).
RANGE_CONSUMERS = ConsumerPool()
atexit.register(RANGE_CONSUMERS.close)


def read_range(consumer: Any, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    """The messages at offsets [start, end) of one partition, in order (``consumer`` is assigned here)."""
    from ..clients.kafka import KafkaError, TopicPartition  # noqa: PLC0415

    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + KAFKA_TIMEOUT_S
    at = start
    while at < end:
        # consume() waits for the full count or the timeout: ask for no more than the range holds.
        batch = consumer.consume(min(1000, end - at), 1.0)
        if not batch:
            # Offsets without a deliverable message (transaction markers) end a range early.
            if consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                return
            if time.monotonic() > deadline:
                raise CaptureError(
                    f"kafka: no message at offset {at} of [{start}, {end}) within {KAFKA_TIMEOUT_S:.0f} s",
                    where=f"{topic}[{partition}]",
                )
            continue
        deadline = time.monotonic() + KAFKA_TIMEOUT_S
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise CaptureError(f"kafka: {err.str()}", where=f"{topic}[{partition}]@{at}")
            if msg.offset() >= end:
                return
            at = msg.offset() + 1
            yield msg


def wait_for_topic(
    consumer: Any,
    topic: str,
    servers: str,
    *,
    every_s: float = 1.0,
    timeout_s: float | None = None,
    cancel: threading.Event | None = None,
) -> list[int]:
    """Wait until ``topic`` exists with partitions (logging once what it waits for); its partitions.

    Why: an apply job started before its capture job has created the topic (its first send, or
    TiCDC's ``auto-create-topic``) should wait for it, as a consumer of a changefeed being set up,
    rather than exit with "Unknown topic or partition". Only a missing topic is waited for (Kafka's
    ``UNKNOWN_TOPIC_OR_PART``, or ``LEADER_NOT_AVAILABLE`` while it is being created); an
    unreachable broker or a refused authorization is an error at once. ``timeout_s`` (None: no
    limit) ends the wait with an error naming the topic; so does ``cancel`` once set (the capture
    that would create it stopped: `changefeed pipeline`).
    """
    from ..clients.kafka import KafkaError, KafkaException  # noqa: PLC0415

    waiting = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE)
    started = time.monotonic()
    said = False
    while True:
        try:
            meta = consumer.list_topics(topic, timeout=KAFKA_TIMEOUT_S).topics.get(topic)
        except KafkaException as exc:
            raise CaptureError(f"kafka: cannot read metadata of topic {topic!r} at {servers}: {exc}") from exc
        if meta is not None and meta.error is None and meta.partitions:
            if said:
                log.warning("kafka: topic %r at %s is there (%d partitions)", topic, servers, len(meta.partitions))
            return sorted(meta.partitions)
        if meta is not None and meta.error is not None and meta.error.code() not in waiting:
            raise CaptureError(f"kafka: topic {topic!r} at {servers} is not readable: {meta.error.str()}")
        waited = time.monotonic() - started
        if timeout_s is not None and waited >= timeout_s:
            raise CaptureError(f"kafka: topic {topic!r} did not appear at {servers} within {timeout_s:.0f} s")
        if cancel is not None and cancel.is_set():
            raise CaptureError(f"kafka: stopped waiting for topic {topic!r} at {servers}")
        if not said:
            said = True
            log.warning(
                "kafka: waiting for topic %r at %s to be created (by the capture job's first send), every %.0f s",
                topic,
                servers,
                every_s,
                extra={"topic": topic},
            )
        if cancel is not None:
            cancel.wait(every_s)
        else:
            time.sleep(every_s)
