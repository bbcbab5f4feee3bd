"""An apply job started before its capture job waits for the topic (consume/kafka.wait_for_topic), against tansu."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest

from changefeed.cli.apply import kafka_source, wait_for_kafka_topic
from changefeed.consume.kafka import new_consumer, wait_for_topic
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
        with pytest.raises(CaptureError, match="topic 'never' did not appear at .* within 1 s"):
            wait_for_topic(consumer, "never", broker.bootstrap_servers, every_s=0.2, timeout_s=1)
    finally:
        consumer.close()
    # Polling for it did not create it (the consumer never asks for auto-creation).
    assert "never" not in broker.admin().list_topics(timeout=10).topics
