"""Kafka source: a topic's partitions -> decoded, deduplicated, resolved-gated events in commit order.

Like TiCDC's ``cmd/kafka-consumer``: one decoder per partition, the merge rules of `merge`, and
offsets committed only when the caller says the downstream write is durable
(``enable.auto.commit=false``). Two ways to read: ``assign`` (explicit partitions and offsets; the
default) or consumer-group ``subscribe``. Offsets the broker no longer has, a topic that vanished or
whose partition count changed are errors, never silently skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

from ..codec import CodecOptions, Decoder, Message, make_decoder, require_transport
from ..codec.base import BufferingDecoder
from ..errors import CaptureError, ConfigError
from ..model import DDLEvent, Event, Resolved, RowChange
from .kafka import new_consumer
from .merge import MergeStats, PartitionMerger

if TYPE_CHECKING:
    from ..clients.kafka import Consumer, TopicPartition
    from ..clients.kafka import Message as KafkaMessage

log = logging.getLogger(__name__)


class KafkaSourceError(CaptureError):
    """The topic cannot be read as it was: data gone, topic recreated, partitions changed."""


@dataclass(slots=True)
class KafkaSourceConfig:
    """Where to read and how.

    ``start_offsets`` (partition -> offset) wins; otherwise the group's committed offset when a
    ``group_id`` is set; otherwise the beginning of the partition.
    """

    bootstrap_servers: str
    topic: str
    codec: CodecOptions
    group_id: str | None = None
    subscribe: bool = False  # consumer-group mode: the group decides which partitions we read
    partitions: Sequence[int] | None = None  # assign mode: default every partition of the topic
    start_offsets: Mapping[int, int] | None = None
    metadata_check_interval_s: float = 5.0
    metadata_timeout_s: float = 10.0
    consumer_config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_transport(self.codec.protocol, "kafka", "the Kafka source reads")
        if self.codec.protocol == "canal-json" and not self.codec.enable_tidb_extension:
            # Without `_tidb` there is no commit ts and no TIDB_WATERMARK: nothing to order or gate by.
            raise ConfigError("reading canal-json needs enable-tidb-extension=true (commit ts and watermarks)")
        if self.codec.protocol == "debezium" and not self.codec.enable_tidb_extension:
            # TiCDC sends Debezium watermarks (op "m") only with the extension: nothing to gate by.
            raise ConfigError("reading debezium needs enable-tidb-extension=true (watermarks)")
        if self.subscribe and not self.group_id:
            raise ConfigError("consumer-group mode (subscribe) needs a group_id")


class KafkaSource:
    def __init__(self, config: KafkaSourceConfig) -> None:
        self.config = config
        self.topic = config.topic
        # commit only what the caller made durable; a lost offset is an error (`kafka.new_consumer`)
        self._consumer: Consumer = new_consumer(
            config.bootstrap_servers, config.consumer_config, group_id=config.group_id
        )
        self._decoders: dict[int, Decoder] = {}
        self._hold_start: dict[int, int] = {}  # Simple: partition -> first offset of DMLs held for a schema
        self._schemas: Any = None  # Simple: one schema cache shared by every partition's decoder
        self.merger = PartitionMerger()
        self._partition_count = self._metadata_partitions()
        self._last_check = time.monotonic()
        self._closed = False
        if config.subscribe:
            self._consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        else:
            wanted = list(config.partitions) if config.partitions is not None else list(range(self._partition_count))
            missing = [p for p in wanted if not 0 <= p < self._partition_count]
            if missing:
                raise KafkaSourceError(
                    f"kafka: topic {self.topic!r} has {self._partition_count} partitions, no {missing}",
                    where=self.topic,
                )
            from ..clients.kafka import TopicPartition  # noqa: PLC0415

            self._consumer.assign(self._starting([TopicPartition(self.topic, p) for p in wanted]))

    # ------------------------------------------------------------------ partitions

    def _starting(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        """Set each partition's start offset and register it with the merger."""
        from ..clients.kafka import OFFSET_BEGINNING, KafkaException  # noqa: PLC0415

        explicit = dict(self.config.start_offsets or {})
        committed: dict[int, int] = {}
        if self.config.group_id and any(tp.partition not in explicit for tp in parts):
            try:
                for tp in self._consumer.committed(parts, timeout=self.config.metadata_timeout_s):
                    if tp.error is None and tp.offset >= 0:
                        committed[tp.partition] = tp.offset
            except KafkaException as exc:
                raise KafkaSourceError(f"kafka: cannot read committed offsets: {exc}", where=self.topic) from exc
        for tp in parts:
            p = tp.partition
            tp.offset = explicit.get(p, committed.get(p, OFFSET_BEGINNING))
            self._decoders[p] = self._new_decoder()
            self.merger.add_partition(p, tp.offset if tp.offset >= 0 else None)
        log.info(
            "kafka source assigned",
            extra={"topic": self.topic, "offsets": {tp.partition: tp.offset for tp in parts}},
        )
        return parts

    def _new_decoder(self) -> Decoder:
        decoder = make_decoder(self.config.codec)
        if self.config.codec.protocol == "simple":
            # BOOTSTRAP may reach partition 0 only (send-bootstrap-to-all-partition=false): share schemas.
            if self._schemas is None:
                self._schemas = cast(BufferingDecoder, decoder).schemas
            cast(BufferingDecoder, decoder).schemas = self._schemas
        return decoder

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        consumer.assign(self._starting(parts))

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        for tp in parts:
            self._decoders.pop(tp.partition, None)
            self._hold_start.pop(tp.partition, None)
            self.merger.remove_partition(tp.partition)
        log.info("kafka source revoked", extra={"topic": self.topic, "partitions": [tp.partition for tp in parts]})

    # ------------------------------------------------------------------ reading

    def poll(self, timeout_s: float = 1.0, max_messages: int = 10_000) -> list[Event]:
        """Read what is available (up to ``max_messages``) and return the events now released.

        Each released batch ends with ``Resolved(global ts)`` whose ``position`` is the offsets to
        commit once everything before it is durable downstream.
        """
        self._maybe_check_metadata()
        batch = self._consumer.consume(max_messages, timeout_s)
        for msg in batch:
            err = msg.error()
            if err is not None:
                self._kafka_error(msg)
                continue
            self._decode(msg)
        # only decoded events are fed to the merger here (never RowBlocks), so only events come out
        out = cast(list[Event], self.merger.ready())
        if out:
            out[-1] = Resolved(out[-1].commit_ts, position=self.checkpoint())
        return out

    def read_until(self, resolved_ts: int, timeout_s: float = 30.0) -> list[Event]:
        """Poll until the global resolved ts reaches ``resolved_ts``; KafkaSourceError on timeout."""
        deadline = time.monotonic() + timeout_s
        out: list[Event] = []
        while self.merger.global_resolved < resolved_ts:
            if time.monotonic() >= deadline:
                raise KafkaSourceError(
                    f"kafka: global resolved ts {self.merger.global_resolved} did not reach {resolved_ts} "
                    f"within {timeout_s} s (per partition: {self.resolved_by_partition()})",
                    where=self.topic,
                )
            out.extend(self.poll(0.2))
        return out

    def _decode(self, msg: KafkaMessage) -> None:
        p = msg.partition()
        offset = msg.offset()
        assert p is not None and offset is not None  # set on every consumed message without an error
        where = f"{self.topic}[{p}]@{offset}"
        decoder = self._decoders[p]
        before = len(self._schemas) if self._schemas is not None else 0
        events = decoder.decode(Message(key=msg.key(), value=msg.value(), partition=p, topic=self.topic), where)
        self._feed(p, decoder, events, offset)
        if self._schemas is not None and len(self._schemas) != before:
            self._release_other_partitions(p)

    def _feed(self, p: int, decoder: Decoder, events: list[Event], offset: int) -> None:
        # Simple holds DMLs until their schema arrives and releases them with a later message:
        # attribute released events to the first held offset, so the checkpoint never passes them.
        held_from = self._hold_start.get(p)
        attributed = offset if held_from is None else held_from
        if self._schemas is not None:
            if cast(BufferingDecoder, decoder).pending():
                self._hold_start.setdefault(p, offset)
            else:
                self._hold_start.pop(p, None)
        for event in events:
            if isinstance(event, RowChange | DDLEvent):
                event.position = {"topic": self.topic, "partition": p, "offset": attributed}
        self.merger.feed(p, events, attributed)

    def _release_other_partitions(self, source: int) -> None:
        """A schema learnt on one partition releases DMLs another partition holds for it."""
        for p, decoder in self._decoders.items():
            if p == source or not cast(BufferingDecoder, decoder).pending():
                continue
            held_from = self._hold_start.get(p, 0)
            # Held watermarks are dropped with them; the next watermark restores progress.
            for message, where in cast(BufferingDecoder, decoder).take_pending():
                self._feed(p, decoder, decoder.decode(message, where), held_from)

    def _kafka_error(self, msg: KafkaMessage) -> None:
        from ..clients.kafka import KafkaError  # noqa: PLC0415

        err = msg.error()
        assert err is not None  # called only for messages with an error
        code = err.code()
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        if code == KafkaError._PARTITION_EOF:
            return
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            raise KafkaSourceError(
                f"kafka: the broker no longer has the offset we read from ({err.str()}): retention deleted it or "
                "the broker lost the topic (e.g. restarted with memory storage). Restart from a valid position.",
                where=where,
            )
        if err.fatal() or code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise KafkaSourceError(f"kafka: {err.str()}", where=where)
        log.warning("kafka consumer error", extra={"where": where, "error": err.str()})

    # ------------------------------------------------------------------ metadata

    def _metadata_partitions(self) -> int:
        from ..clients.kafka import KafkaException  # noqa: PLC0415

        try:
            meta = self._consumer.list_topics(self.topic, timeout=self.config.metadata_timeout_s).topics.get(self.topic)
        except KafkaException as exc:
            raise KafkaSourceError(f"kafka: cannot read metadata of {self.topic!r}: {exc}", where=self.topic) from exc
        if meta is None or meta.error is not None or not meta.partitions:
            why = meta.error.str() if meta is not None and meta.error is not None else "no partitions"
            raise KafkaSourceError(f"kafka: topic {self.topic!r} is not readable: {why}", where=self.topic)
        return len(meta.partitions)

    def _maybe_check_metadata(self) -> None:
        now = time.monotonic()
        if now - self._last_check < self.config.metadata_check_interval_s:
            return
        self._last_check = now
        n = self._metadata_partitions()
        if n != self._partition_count:
            raise KafkaSourceError(
                f"kafka: topic {self.topic!r} now has {n} partitions (had {self._partition_count} when reading "
                "started): it was recreated (the broker lost it, e.g. a restart with memory storage) or "
                "repartitioned, so offsets and per-key ordering no longer hold. Check the producer side, then "
                "restart reading from a known-good position.",
                where=self.topic,
            )

    # ------------------------------------------------------------------ positions

    def checkpoint(self) -> dict[int, int]:
        """Partition -> next offset to read such that every earlier message was fully released."""
        out = cast(dict[int, int], self.merger.checkpoint())  # this source's partition keys are ints
        for p, held in self._hold_start.items():
            if p in out:
                out[p] = min(out[p], held)
        return out

    def resolved_by_partition(self) -> dict[int, int]:
        return self.merger.resolved()  # type: ignore[return-value]

    @property
    def stats(self) -> MergeStats:
        return self.merger.stats

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit ``offsets`` (a released Resolved's ``position``) to the consumer group, synchronously.

        Call only once everything released before that Resolved is durable downstream.
        """
        from ..clients.kafka import KafkaException, TopicPartition  # noqa: PLC0415

        if not self.config.group_id:
            raise ConfigError("commit needs a group_id (assign mode without a group keeps offsets in the job)")
        parts = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        try:
            result = self._consumer.commit(offsets=parts, asynchronous=False) or []
        except KafkaException as exc:
            raise KafkaSourceError(f"kafka: commit of {dict(offsets)} failed: {exc}", where=self.topic) from exc
        failed = [f"{tp.partition}: {tp.error}" for tp in result if tp.error is not None]
        if failed:
            raise KafkaSourceError(f"kafka: commit failed for partitions {failed}", where=self.topic)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
