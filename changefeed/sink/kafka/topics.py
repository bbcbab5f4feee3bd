"""Topic partition counts from broker metadata, topic creation, and the checks TiCDC makes.

TiCDC's Kafka topic manager: an existing topic with fewer partitions than ``partition-num`` is an
error; with more, only the first ``partition-num`` are used; a missing topic is created (with
``partition-num``, default 3) when auto-create is allowed, else it is an error. Beyond TiCDC, a
partition count that *changes* under a running sink is an error: rows of one key would start
landing on another partition (and a recreated topic means the broker lost what it acknowledged).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...errors import SinkError
from ...secrets import mask_secrets

if TYPE_CHECKING:
    from ...clients.kafka import AdminClient

log = logging.getLogger(__name__)

DEFAULT_PARTITION_NUM = 3  # TiCDC's partition-num for topics it creates


class TopicManager:
    def __init__(
        self,
        admin: AdminClient,
        *,
        auto_create: bool,
        partition_num: int | None,
        replication_factor: int = 1,
        timeout_s: float = 30.0,
        servers: str = "",
        reasons: Iterable[str] = (),
    ) -> None:
        if partition_num is not None and partition_num <= 0:
            raise SinkError(f"partition-num must be positive, not {partition_num}")
        self._admin = admin
        self.servers = servers  # named in errors: a metadata failure is about the brokers, not the topic
        # What the admin client's error_cb saw (TLS verification, a refused certificate): the reason
        # librdkafka gives nowhere else.
        self._reasons = reasons
        self.auto_create = auto_create
        self.partition_num = partition_num
        self.replication_factor = replication_factor
        self.timeout_s = timeout_s
        self._used: dict[str, int] = {}  # topic -> partitions we dispatch to
        self._actual: dict[str, int] = {}  # topic -> partition count seen when first used

    @property
    def topics(self) -> list[str]:
        return list(self._used)

    def partitions(self, topic: str) -> int:
        """Partitions to dispatch to for ``topic`` (looked up, maybe created, on first use)."""
        n = self._used.get(topic)
        if n is None:
            n = self._resolve(topic)
        return n

    def _metadata(self, topic: str) -> int | None:
        """Partition count from the broker, or None when the topic does not exist."""
        from ...clients.kafka import KafkaError, KafkaException  # noqa: PLC0415

        try:
            meta = self._admin.list_topics(topic=topic, timeout=self.timeout_s).topics.get(topic)
        except KafkaException as exc:
            self._admin.poll(0)  # serve the error callbacks
            reasons = "; ".join(dict.fromkeys(r for r in self._reasons if "brokers are down" not in r))
            why = f" ({mask_secrets(reasons)})" if reasons else ""
            where = self.servers or topic
            raise SinkError(
                f"kafka: cannot read metadata of topic {topic!r} from {where}: {exc}{why}", where=where
            ) from exc
        if meta is None:
            return None
        if meta.error is not None:
            if meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return None
            raise SinkError(f"kafka: metadata of topic {topic!r}: {meta.error}", where=topic)
        return len(meta.partitions) or None

    def _resolve(self, topic: str) -> int:
        actual = self._metadata(topic)
        if actual is None:
            if not self.auto_create:
                raise SinkError(
                    f"kafka: topic {topic!r} does not exist and auto-create-topic is off; create it with "
                    f"{self.partition_num or DEFAULT_PARTITION_NUM} partitions or set auto-create-topic=true",
                    where=topic,
                )
            actual = self._create(topic)
        wanted = self.partition_num
        if wanted is not None and wanted > actual:
            raise SinkError(
                f"kafka: topic {topic!r} has {actual} partitions, fewer than partition-num={wanted}; add partitions "
                f"to the topic (kafka-topics --alter --partitions {wanted}) or lower partition-num to {actual}",
                where=topic,
            )
        used = wanted if wanted is not None else actual
        if used < actual:
            log.warning(
                "topic has more partitions than partition-num; the rest get no messages",
                extra={"topic": topic, "partitions": actual, "partition_num": used},
            )
        self._actual[topic] = actual
        self._used[topic] = used
        return used

    def _create(self, topic: str) -> int:
        from ...clients.kafka import (  # noqa: PLC0415
            KafkaError,
            KafkaException,
            NewTopic,
        )

        n = self.partition_num or DEFAULT_PARTITION_NUM
        new = NewTopic(topic, num_partitions=n, replication_factor=self.replication_factor)
        future = self._admin.create_topics([new], operation_timeout=self.timeout_s, request_timeout=self.timeout_s)
        try:
            future[topic].result(timeout=self.timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise SinkError(f"kafka: cannot create topic {topic!r}: {exc}", where=topic) from exc
        log.info("topic created", extra={"topic": topic, "partitions": n})
        # Metadata is eventually consistent: wait until the new topic shows up.
        deadline = time.monotonic() + self.timeout_s
        while True:
            actual = self._metadata(topic)
            if actual is not None:
                return actual
            if time.monotonic() >= deadline:
                raise SinkError(f"kafka: topic {topic!r} not visible {self.timeout_s} s after creating it", where=topic)
            time.sleep(0.05)

    def check(self) -> None:
        """Fail if a topic in use vanished or its partition count changed since first use."""
        for topic, before in self._actual.items():
            now = self._metadata(topic)
            if now == before:
                continue
            state = "no longer exists" if now is None else f"now has {now} partitions (was {before})"
            raise SinkError(
                f"kafka: topic {topic!r} {state} since the sink started. Rows of one key would go to another "
                "partition, and a recreated topic means the broker lost acknowledged messages (e.g. a broker "
                "restarted with memory storage). Recreate the topic with the intended partition count, then "
                "restart the changefeed from its last flushed position (or from scratch if data was lost).",
                where=topic,
            )
