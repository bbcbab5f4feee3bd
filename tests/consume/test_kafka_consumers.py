"""The read side's Kafka consumers against tansu: waiting for a topic, and the pooled range consumers."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from changefeed.cli.apply import kafka_source, wait_for_kafka_topic
from changefeed.consume.kafka import ConsumerPool, new_consumer, read_range, wait_for_topic
from changefeed.errors import CaptureError
from changefeed.testing import Broker


def test_waits_for_the_topic_then_returns_its_partitions(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"late-{uuid.uuid4().hex[:8]}"
    created = threading.Timer(2.0, broker.create_topic, (topic, 3))
    consumer = new_consumer(broker.bootstrap_servers)
    caplog.set_level(logging.INFO, logger="changefeed.consume.kafka")
    started = time.monotonic()
    created.start()
    try:
        partitions = wait_for_topic(consumer, topic, broker.bootstrap_servers, every_s=0.2, timeout_s=60)
    finally:
        created.join()
        consumer.close()
    assert partitions == [0, 1, 2]
    assert time.monotonic() - started >= 1.5  # it did wait for the creation
    waits = [r.getMessage() for r in caplog.records if "waiting for topic" in r.getMessage()]
    assert len(waits) == 1 and topic in waits[0] and broker.bootstrap_servers in waits[0]  # said once, not per poll
    # Waiting created nothing: the topic is the one the producer side made, with its partition count.
    assert broker.admin().list_topics(topic, timeout=10).topics[topic].partitions.keys() == {0, 1, 2}


def test_an_existing_topic_is_returned_at_once(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"there-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    caplog.set_level(logging.INFO, logger="changefeed.consume.kafka")
    wait_for_kafka_topic(kafka_source(f"kafka://{broker.bootstrap_servers}/{topic}?protocol=open-protocol"))
    assert not [r for r in caplog.records if "waiting" in r.getMessage()]


def test_the_wait_ends_with_an_error_naming_the_topic(broker: Broker) -> None:
    consumer = new_consumer(broker.bootstrap_servers)
    try:
        with pytest.raises(CaptureError, match=r"topic 'never' did not appear at .* within 1 s"):
            wait_for_topic(consumer, "never", broker.bootstrap_servers, every_s=0.2, timeout_s=1)
    finally:
        consumer.close()
    # Polling for it did not create it (the consumer never asks for auto-creation).
    assert "never" not in broker.admin().list_topics(timeout=10).topics


def _produce(broker: Broker, topic: str, partitions: int, per_partition: int) -> None:
    broker.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}:{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def test_pooled_consumer_reads_range_after_range_of_any_partition(broker: Broker) -> None:
    topic = f"pool-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic, 3, 50)
    pool = ConsumerPool(size=2)
    seen: list[object] = []
    reads = [(0, 0, 20), (0, 20, 50), (2, 5, 9), (1, 0, 50), (0, 10, 12)]  # forward, another partition, back
    for partition, start, end in reads:
        with pool.consumer(broker.bootstrap_servers) as consumer:
            seen.append(consumer)
            values = [m.value().decode() for m in read_range(consumer, topic, partition, start, end)]
        assert values == [f"{partition}:{i}" for i in range(start, end)]
        assert pool.idle() == 1
    assert all(c is seen[0] for c in seen)  # one consumer for every range of the process
    pool.close()
    assert pool.idle() == 0


def test_a_failed_or_abandoned_read_does_not_return_its_consumer(broker: Broker) -> None:
    topic = f"pool-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic, 1, 20)
    pool = ConsumerPool()
    with pytest.raises(RuntimeError, match="mid-range"), pool.consumer(broker.bootstrap_servers) as consumer:
        for msg in read_range(consumer, topic, 0, 0, 20):
            if msg.offset() == 3:
                raise RuntimeError("mid-range")
    assert pool.idle() == 0  # closed: its position and fetches are the failed read's

    def partial() -> Iterator[Any]:
        with pool.consumer(broker.bootstrap_servers) as consumer:
            yield from read_range(consumer, topic, 0, 0, 20)

    reader = partial()
    next(reader)
    reader.close()  # a task stopped while reading (GeneratorExit at the yield)
    assert pool.idle() == 0
    with pool.consumer(broker.bootstrap_servers) as consumer:  # a fresh one reads the whole range
        assert [m.offset() for m in read_range(consumer, topic, 0, 0, 20)] == list(range(20))
    assert pool.idle() == 1
    pool.close()


def test_the_pool_keeps_a_bounded_number_per_settings(broker: Broker) -> None:
    pool = ConsumerPool(size=1)
    with pool.consumer(broker.bootstrap_servers) as a, pool.consumer(broker.bootstrap_servers) as b:
        assert a is not b  # both in use: two consumers
    assert pool.idle() == 1  # one kept, the other closed
    with pool.consumer(broker.bootstrap_servers, {"client.id": "other"}) as c:
        assert c is not a and c is not b  # other settings (TLS, SASL, tuning): another consumer
    assert pool.idle() == 2
    pool.close()
