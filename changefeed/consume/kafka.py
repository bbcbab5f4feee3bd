"""Reading Kafka: the one consumer factory of the read side, and a partition's messages between two offsets.

Every consumer that reads a TiCDC-protocol topic is built by `new_consumer`: `source.KafkaSource`
(a plain consumer, committing to its group only when told) and the Spark ``kafka`` input
(`changefeed.spark.datasource.kafka`: ``assign()`` only, offsets live in Spark). The settings are the
strictest both need: nothing is committed or stored on its own, an offset the broker no longer has
is an error rather than a silent skip, and reading never creates a topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CaptureError

if TYPE_CHECKING:
    from confluent_kafka import Consumer

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
    """A consumer of ``servers``; ``client_config`` (TLS, SASL: `changefeed.kafkasecurity`; tuning) comes last.

    Offsets are committed only by an explicit ``commit`` (``KafkaSource.commit``), never automatically.
    """
    from confluent_kafka import Consumer  # noqa: PLC0415 - only kafka reads need it

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


def read_range(consumer: Any, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    """The messages at offsets [start, end) of one partition, in order (``consumer`` is assigned here)."""
    from confluent_kafka import KafkaError, TopicPartition  # noqa: PLC0415

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
