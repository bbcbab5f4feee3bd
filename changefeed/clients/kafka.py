"""confluent-kafka (librdkafka) behind one module: the client classes and constants the project uses.

Why one module: the Kafka client is a native library that only Kafka paths should load, so every
user imports this module lazily, inside the function that talks to a broker (or under
``TYPE_CHECKING``), and this file is the one list of what of it the project depends on, as
`changefeed.clients.mysql` is for PyMySQL. Client settings (TLS, SASL) come from `changefeed.clients.kafkauri`.
"""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = [
    "OFFSET_BEGINNING",
    "AdminClient",
    "Consumer",
    "KafkaError",
    "KafkaException",
    "Message",
    "NewTopic",
    "Producer",
    "TopicPartition",
]
