"""The `kafka` input: a TiCDC-compatible topic, one range per partition between two offsets."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from ...clients.kafkauri import KAFKA_SECURITY_PARAMS, KafkaSecurity
from ...codec import CodecOptions, Message, require_transport
from ...consume.kafka import KAFKA_TIMEOUT_S, RANGE_CONSUMERS, RANGE_SETTINGS, new_consumer, read_range
from ...errors import ChangefeedError, ConfigError, UnknownSchemaError
from ...model import Event, TableSchema
from ...model.rowblock import RowBlock
from ..changelog import ChangelogRows, EventFilter
from ..envelope import ENVELOPE_DDL, unwrap, wrap
from .decoded import DECODED, DECODED_DDL, Decoded, DecodedReader, columnar, pack, pack_error
from .options import CHANGELOG, Input, SourceOptions

if TYPE_CHECKING:
    from ...codec.base import BufferingDecoder
    from ...codec.simple.schema_cache import SchemaKey

log = logging.getLogger(__name__)

#: Kafka options of the data source (the rest are codec options).
_KAFKA_KEYS = (
    frozenset({"bootstrap.servers", "kafka.bootstrap.servers", "topic", "startingoffsets", "eventsperpartition"})
    | KAFKA_SECURITY_PARAMS
)
#: Messages per Spark partition by default (``eventsPerPartition``): a partition's range is split so
#: that its messages are read on every core and the apply driver starts on the first piece while
#: the rest are read (~32k rows of Open Protocol; a range costs a consumer, ~3 ms).
RANGE_MESSAGES = 2048
_WATERMARK_FETCH_S = 5.0
#: Simple protocol: messages read per step when looking back for a schema before a range's start.
_LOOKBACK_CHUNK = 2000
#: Messages of each partition per piece of a decoded batch (`MessageDecoder.chunks`): ~8k rows at
#: TiCDC's 16 rows per Open Protocol message, so the sink starts on the first piece early.
CHUNK_MESSAGES = 512
#: ``output=messages``: a range's raw messages (the apply job used it before ``output=ranges``; kept for readers).
MESSAGES = "messages"
#: ``output=ranges``: only each range, ``(partition, start, end)``; the apply job's driver reads the
#: messages itself (`DriverReads`, changefeed/spark/datasource/driverreads.py).
RANGES = "ranges"
RANGE_DDL = "partition int, start long, end long"
MESSAGE_SCHEMA = pa.schema(
    [("partition", pa.int32()), ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())]
)
#: Messages per envelope row of the messages output (changefeed/spark/envelope.py).
_MESSAGES_PER_BATCH = 4096


@dataclass
class KafkaRange(InputPartition):
    """Messages [start, end) of one Kafka partition.

    ``output=changelog``: decoded in an executor, one changelog row per event. Rows are per message
    and unmerged: resends and broadcast copies are all here, and each partition's resolved events
    come out as ``resolved`` rows. The cross-partition merge (resolved gating, dedupe) needs every
    partition and state across batches: it runs in the apply job (`changefeed.spark.merge`).

    ``output=messages``: the raw messages, not decoded, in compressed Arrow envelopes (changefeed/spark/envelope.py):
    the apply job decodes each message once, on the driver (`MessageDecoder`), instead of
    decoding here and handing the events over as JSON.

    ``output=ranges``: only ``(partition, start, end)``; the apply job's driver reads the messages
    itself (`DriverReads`, changefeed/spark/datasource/driverreads.py).
    """

    servers: str
    topic: str
    partition: int
    start: int
    end: int
    codec: CodecOptions
    changelog: ChangelogRows
    output: str = CHANGELOG
    client_config: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold a SASL password

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[Any]:
        if self.output == RANGES:
            return iter([(self.partition, self.start, self.end)])
        if self.output == MESSAGES:
            return self._raw()
        return self._decoded() if self.output == DECODED else self._changelog()

    def _changelog(self) -> Iterator[pa.RecordBatch]:
        return self.changelog.batches(self.changelog.rows(self._events()))

    def _events(self) -> Iterator[Event]:
        decoder = _PartitionDecoder(self.servers, self.topic, self.partition, self.codec, client=self.client_config)
        try:
            with RANGE_CONSUMERS.consumer(self.servers, self.client_config) as consumer:
                for msg in read_range(consumer, self.topic, self.partition, self.start, self.end):
                    yield from decoder.decode(msg.offset(), msg.key(), msg.value())
            decoder.finish(self.end)
        finally:
            decoder.close()

    def _runs(self, consumer: Any) -> Iterator[tuple[list[int], list[bytes | None], list[bytes | None]]]:
        """The range's messages as runs of up to `_MESSAGES_PER_BATCH` (offsets, keys, values)."""
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for msg in read_range(consumer, self.topic, self.partition, self.start, self.end):
            offsets.append(msg.offset())
            keys.append(msg.key())
            values.append(msg.value())
            if len(offsets) >= _MESSAGES_PER_BATCH:
                yield offsets, keys, values
                offsets, keys, values = [], [], []
        if offsets:
            yield offsets, keys, values

    def _raw(self) -> Iterator[pa.RecordBatch]:
        with RANGE_CONSUMERS.consumer(self.servers, self.client_config) as consumer:
            for offsets, keys, values in self._runs(consumer):
                yield self._batch(offsets, keys, values)

    def _decoded(self) -> Iterator[pa.RecordBatch]:
        decoder = _PartitionDecoder(
            self.servers, self.topic, self.partition, self.codec, columnar=True, client=self.client_config
        )
        keep = EventFilter.of(self.changelog)
        at = self.start  # the first offset of the run in hand
        try:
            with RANGE_CONSUMERS.consumer(self.servers, self.client_config) as consumer:
                for offsets, keys, values in self._runs(consumer):
                    at = offsets[0]
                    decoded = decoder.decode_run(offsets, keys, values)
                    if keep is not None:
                        decoded = [keep.events(events) for events in decoded]
                    sizes = [len(k or b"") + len(v or b"") for k, v in zip(keys, values, strict=True)]
                    yield pack(self.partition, offsets, sizes, decoded)
                    at = offsets[-1] + 1
        except ChangefeedError as exc:  # the driver raises it as it would have decoding there
            yield pack_error(self.partition, at, exc)
        finally:
            decoder.close()

    def _batch(self, offsets: list[int], keys: list[bytes | None], values: list[bytes | None]) -> pa.RecordBatch:
        columns = [
            pa.array([self.partition] * len(offsets), pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
        ]
        return wrap(pa.RecordBatch.from_arrays(columns, schema=MESSAGE_SCHEMA), self.partition)


def unwrap_messages(envelopes: pa.Table) -> pa.Table:
    """The `MESSAGE_SCHEMA` table inside ``output=messages`` rows (`ENVELOPE_SCHEMA`)."""
    return unwrap(envelopes, MESSAGE_SCHEMA, "kafka messages")


class _PartitionDecoder:
    """One partition's messages decoded in offset order, events positioned at their message.

    The protocol decoder lives as long as this object: Simple's schema cache (learned from
    BOOTSTRAP/DDL messages) carries over from one call to the next, and a DML whose schema came
    before the first message this object saw is resolved by looking back (`_SchemaLookback`).
    """

    def __init__(
        self,
        servers: str,
        topic: str,
        partition: int,
        codec: CodecOptions,
        columnar: bool = False,
        client: Mapping[str, str] | None = None,
    ) -> None:
        from ...codec import make_decoder  # noqa: PLC0415
        from ...codec.debezium import DebeziumDecoder  # noqa: PLC0415
        from ...codec.debezium.blocks import DebeziumBlockDecoder  # noqa: PLC0415
        from ...codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder  # noqa: PLC0415

        self.topic = topic
        self.partition = partition
        self.decoder = make_decoder(codec)
        simple = codec.protocol == "simple"
        self.lookback = _SchemaLookback(servers, topic, partition, client or {}) if simple else None
        decoder = self.decoder
        self.blocks: OpenProtocolBlockDecoder | DebeziumBlockDecoder | None = None
        if columnar and isinstance(decoder, OpenProtocolDecoder):
            self.blocks = OpenProtocolBlockDecoder(decoder)
        elif columnar and isinstance(decoder, DebeziumDecoder):
            self.blocks = DebeziumBlockDecoder(decoder)  # its rows' start ts travel in output=decoded too

    def decode_run(
        self, offsets: Sequence[int], keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> Sequence[Sequence[Event | RowBlock]]:
        """The events of consecutive messages of this partition (rows as `RowBlock`s where the
        protocol has a columnar decoder), positioned at their message."""
        if self.blocks is None:
            return [self.decode(*message) for message in zip(offsets, keys, values, strict=True)]
        messages = [
            Message(key=k, value=v, partition=self.partition, topic=self.topic)
            for k, v in zip(keys, values, strict=True)
        ]
        wheres = [f"{self.topic}[{self.partition}]@{offset}" for offset in offsets]
        positions = [{"topic": self.topic, "partition": self.partition, "offset": offset} for offset in offsets]
        return self.blocks.decode(messages, wheres, positions)

    def decode(self, offset: int, key: bytes | None, value: bytes | None) -> list[Event]:
        where = f"{self.topic}[{self.partition}]@{offset}"
        message = Message(key=key, value=value, partition=self.partition, topic=self.topic)
        events = self.decoder.decode(message, where)
        if self.lookback is not None:
            events.extend(self.lookback.resolve(cast("BufferingDecoder", self.decoder), offset))
        for ev in events:
            ev.position = {"topic": self.topic, "partition": self.partition, "offset": offset}
        return events

    def finish(self, end: int) -> None:
        """At the end of a range or batch: DMLs still held for a schema must not vanish silently."""
        if self.lookback is not None and cast("BufferingDecoder", self.decoder).pending():
            raise self.lookback.missing(cast("BufferingDecoder", self.decoder), end)

    def close(self) -> None:
        if self.lookback is not None:
            self.lookback.close()


class MessageDecoder:
    """The apply job's side of ``output=ranges`` (the driver reads them, `DriverReads`) and of
    ``output=messages``: every message decoded once, on the driver.

    One long-lived `_PartitionDecoder` per Kafka partition across micro-batches (so Simple's schema
    cache survives batches and a look-back happens once per job run, not once per range), the
    ``filter`` rules applied as the changelog output applies them. After any error the decoders
    are dropped: a replayed batch starts from fresh ones, as after a restart.
    """

    output = RANGES

    def __init__(
        self,
        servers: str,
        topic: str,
        codec: CodecOptions,
        changelog: ChangelogRows,
        client_config: Mapping[str, str] | None = None,
    ) -> None:
        self.servers = servers
        self.client_config = client_config or {}
        self.topic = topic
        self.codec = codec
        self.changelog = changelog
        self._keep = EventFilter.of(changelog)
        self._decoders: dict[int, _PartitionDecoder] = {}
        self.columnar = True  # rows as RowBlocks where the protocol has a columnar decoder

    def decode(self, messages: pa.Table) -> list[Decoded]:
        """``(partition, offset, events, bytes)`` per message of a `MESSAGE_SCHEMA` table (or of the
        ``output=messages`` rows that carry one, `ENVELOPE_SCHEMA`), in (partition, offset) order."""
        # One piece holding every message: each partition's run whole, in partition order.
        return [message for piece in self.chunks(messages, per_partition=messages.num_rows) for message in piece]

    def chunks(self, messages: pa.Table, per_partition: int = CHUNK_MESSAGES) -> Iterator[list[Decoded]]:
        """`decode`'s messages in pieces: up to ``per_partition`` messages of each partition in turn
        (each partition's in offset order), so a merge fed piece by piece can release rows early."""
        if "ipc" in messages.schema.names:
            messages = unwrap_messages(messages)
        if messages.num_rows == 0:
            return
        by = [("partition", "ascending"), ("offset", "ascending")]
        order = pc.sort_indices(messages.select(["partition", "offset"]), by)
        if not np.array_equal(order.to_numpy(), np.arange(messages.num_rows)):  # envelopes mostly come in order
            messages = messages.take(order)  # copies every message: only when needed
        partitions = messages.column("partition").to_pylist()
        offsets = messages.column("offset").to_pylist()
        keys = messages.column("key").to_pylist()
        values = messages.column("value").to_pylist()
        keep = self._keep
        key_bytes, value_bytes = (pc.binary_length(messages.column(c)).fill_null(0) for c in ("key", "value"))
        sizes = pc.add(key_bytes, value_bytes).to_pylist()
        runs: list[list[int]] = []  # [next message, end] of each partition's run
        start = 0
        while start < len(partitions):
            end = start
            while end < len(partitions) and partitions[end] == partitions[start]:
                end += 1
            runs.append([start, end])
            start = end
        try:
            while runs:
                piece: list[Decoded] = []
                for run in runs:
                    start, end = run[0], min(run[1], run[0] + per_partition)
                    partition = partitions[start]
                    current = self._decoders.get(partition)
                    if current is None:
                        current = self._decoders[partition] = _PartitionDecoder(
                            self.servers, self.topic, partition, self.codec, self.columnar, self.client_config
                        )
                    at = offsets[start:end]
                    decoded = current.decode_run(at, keys[start:end], values[start:end])
                    for offset, events, size in zip(at, decoded, sizes[start:end], strict=True):
                        piece.append((partition, offset, events if keep is None else keep.events(events), size))
                    run[0] = end
                    if end == run[1]:
                        current.finish(at[-1] + 1)
                runs = [run for run in runs if run[0] < run[1]]
                yield piece
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for decoder in self._decoders.values():
            decoder.close()
        self._decoders.clear()


class _SchemaLookback:
    """Simple protocol: the schemas of DMLs whose BOOTSTRAP/DDL came before the first message decoded.

    TiCDC's Simple DMLs carry only (database, table, schemaVersion); the schema travels in BOOTSTRAP
    messages (before a table's first DML, then every send-bootstrap-interval-in-sec /
    send-bootstrap-in-msg-count) and in DDL messages. A reader that starts mid-partition (a range,
    or the apply job after a restart) begins with an empty cache, so for a held DML this reads the
    partition backwards in chunks before its first offset, down to the low watermark, and caches
    every schema message it meets until the wanted (table, version) is known. Each key is searched
    once.
    """

    def __init__(self, servers: str, topic: str, partition: int, client_config: Mapping[str, str]) -> None:
        self.servers = servers
        self.client_config = client_config
        self.topic = topic
        self.partition = partition
        self.start: int | None = None  # the first offset decoded: everything from here on was seen
        self.searched: set[SchemaKey] = set()
        self.first_held: int | None = None  # offset of the first DML held for a schema
        self.low: int | None = None
        self._consumer: Any = None

    def resolve(self, decoder: BufferingDecoder, offset: int) -> list[Event]:
        """After ``decoder`` read the message at ``offset``: look back for the schemas its held DMLs wait for."""
        if self.start is None or offset < self.start:
            self.start = offset
        if not decoder.pending():
            self.first_held = None
            return []
        if self.first_held is None:
            self.first_held = offset
        # pending_tables() also names known versions (DMLs queued behind an earlier one of their table).
        wanted = {key for key in decoder.pending_tables() if key not in decoder.schemas} - self.searched
        if not wanted:
            return []  # searched already: a BOOTSTRAP later in the partition may still bring it
        self.searched |= wanted
        if self._consumer is None:
            from ...clients.kafka import TopicPartition  # noqa: PLC0415

            # It re-assigns backwards chunk by chunk; a new assignment waits for the fetch in flight,
            # which at the log's end is held for fetch.wait.max.ms (500 ms by default).
            self._consumer = new_consumer(self.servers, {**RANGE_SETTINGS, **self.client_config})
            tp = TopicPartition(self.topic, self.partition)
            self.low = int(self._consumer.get_watermark_offsets(tp, timeout=KAFKA_TIMEOUT_S)[0])
        high, low = self.start, self.low or 0
        while wanted and high > low:
            begin = max(low, high - _LOOKBACK_CHUNK)
            for msg in read_range(self._consumer, self.topic, self.partition, begin, high):
                where = f"{self.topic}[{self.partition}]@{msg.offset()}"
                decoder.learn(Message(key=msg.key(), value=msg.value(), partition=self.partition), where)
            wanted = {key for key in wanted if key not in decoder.schemas}
            high = begin
        log.info(
            "simple schemas looked back",
            extra={"where": f"{self.topic}[{self.partition}]@{offset}", "from": high, "missing": sorted(wanted)},
        )
        events = decoder.release()
        if not decoder.pending():
            self.first_held = None
        return events

    def missing(self, decoder: BufferingDecoder, end: int) -> UnknownSchemaError:
        tables = ", ".join(f"{db}.{table} schemaVersion {version}" for db, table, version in decoder.pending_tables())
        return UnknownSchemaError(
            f"simple protocol: no schema for {tables}: partition {self.partition} of topic {self.topic!r} has no "
            f"BOOTSTRAP or DDL message of it at offsets [{self.low}, {end}) ({decoder.pending()} DMLs "
            "held). TiCDC sends a table's schema in BOOTSTRAP messages every send-bootstrap-interval-in-sec / "
            "send-bootstrap-in-msg-count (both 0 disables them) and to every partition only with "
            "send-bootstrap-to-all-partition=true: enable them on the changefeed's sink-uri, then read from an "
            "offset at or before a BOOTSTRAP of each table",
            where=f"{self.topic}[{self.partition}]@{self.first_held}",
        )

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _offset_pieces(low: int, high: int, every: int | None) -> list[tuple[int, int]]:
    """[low, high) in consecutive pieces of about ``every`` offsets (equal sizes; None: one piece)."""
    if high <= low:
        return []
    pieces = 1 if every is None else -(-(high - low) // every)
    bounds = [low + (high - low) * i // pieces for i in range(pieces + 1)]
    return list(itertools.pairwise(bounds))


def fair_shares(backlog: Mapping[str, int], limit: int) -> dict[str, int]:
    """How many messages of each partition's backlog one micro-batch takes: at most ``limit`` in
    all, split evenly, and what a short partition leaves goes to the others (the table dispatcher
    puts a table on one partition, so an even split alone would read it at a fraction of the limit)."""
    take = dict.fromkeys(backlog, 0)
    left = max(1, limit)
    waiting = sorted((p for p, n in backlog.items() if n), key=lambda p: backlog[p])
    while waiting and left:
        share = max(1, left // len(waiting))
        for p in list(waiting):
            step = min(share, backlog[p] - take[p], left)
            take[p] += step
            left -= step
            if take[p] == backlog[p]:
                waiting.remove(p)
            if not left:
                break
    return take


class KafkaInput(Input):
    """A Kafka topic written by our KafkaSink or by TiCDC. Offsets: ``{"topic", "offsets": {partition: next}}``."""

    OPTIONS = _KAFKA_KEYS
    ANY_CODEC_OPTION = True
    NO_PATH = True
    OUTPUTS: ClassVar[Mapping[str, str]] = {MESSAGES: ENVELOPE_DDL, DECODED: DECODED_DDL, RANGES: RANGE_DDL}
    # Messages per micro-batch by default: a backlog read at once is collected on the apply
    # driver whole (a 1M-row Open Protocol backlog, ~40k messages in one batch, ran a 1 GB JVM
    # out of heap); 10,000 messages are up to 160k rows of Open Protocol, 10k of the others.
    DEFAULT_MAX_EVENTS: ClassVar[int | None] = 10_000
    NO_BYTES_LIMIT: ClassVar[str] = (
        "plans a micro-batch from offsets before any message is read, so its bytes are unknown: bound it in"
        " messages with maxEventsPerTrigger (each at most max-message-bytes)"
    )

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        extra = opts.extra
        servers = extra.get("kafka.bootstrap.servers") or extra.get("bootstrap.servers") or ""
        self.topic = extra.get("topic") or (str(opts.path) if str(opts.path) not in ("", ".") else "")
        if not servers or not self.topic:
            raise ConfigError("input kafka needs options bootstrap.servers (or kafka.bootstrap.servers) and topic")
        self.servers = servers
        # TLS and SASL (TiCDC's sink-uri names); the password is read here, on the driver.
        self.client_config = KafkaSecurity.from_params(extra, where="input kafka").client_config()
        mapping = {k: v for k, v in extra.items() if k not in _KAFKA_KEYS}
        mapping.setdefault("protocol", "canal-json")
        mapping.setdefault("time-zone", opts.time_zone)
        self.codec = CodecOptions.from_mapping(mapping)
        require_transport(self.codec.protocol, "kafka", "input kafka reads")
        if self.codec.protocol == "debezium" and not self.codec.enable_tidb_extension:
            raise ConfigError("input kafka with debezium needs enable-tidb-extension=true (watermarks)")
        if self.codec.protocol == "canal-json" and not self.codec.enable_tidb_extension:
            raise ConfigError("input kafka with canal-json needs enable-tidb-extension=true (commit ts, watermarks)")
        if opts.table is not None:
            raise ConfigError("input kafka has no typed images: the table option is not supported")
        self.starting = extra.get("startingoffsets", "earliest").strip()
        try:
            self.split_every = int(extra.get("eventsperpartition", RANGE_MESSAGES))
        except ValueError:
            raise ConfigError("eventsPerPartition must be an integer") from None
        if self.split_every < 1:
            raise ConfigError("eventsPerPartition must be positive")
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled into executors; a librdkafka handle is not picklable (nor needed there).
        return {**self.__dict__, "_client": None}

    def _consumer(self) -> Any:
        if self._client is None:
            # Tuned as a range consumer: `watermarks` fetches each partition's last message, and the
            # broker then holds the fetch at the log's end for fetch.wait.max.ms (500 ms by default),
            # which a metadata request behind it on the same connection waited out: a query's first
            # latestOffset took 0.5 s (bench/RESULTS.md).
            self._client = new_consumer(self.servers, {**RANGE_SETTINGS, **self.client_config})
        return self._client

    def _partitions(self) -> list[int]:
        from ...clients.kafka import KafkaException  # noqa: PLC0415

        try:
            meta = self._consumer().list_topics(self.topic, timeout=KAFKA_TIMEOUT_S).topics.get(self.topic)
        except KafkaException as exc:
            raise ConfigError(f"kafka: cannot read metadata of topic {self.topic!r}: {exc}") from exc
        if meta is None or meta.error is not None or not meta.partitions:
            why = meta.error.str() if meta is not None and meta.error is not None else "no partitions"
            raise ConfigError(f"kafka: topic {self.topic!r} at {self.servers} is not readable: {why}")
        return sorted(meta.partitions)

    def message_decoder(self, in_tasks: bool = True) -> MessageDecoder | DecodedReader:
        """What the apply job's driver reads this topic with: with ``in_tasks``, a protocol with a
        columnar decoder is decoded in the range tasks (``output=decoded``); any other, or without
        ``in_tasks``, on the driver, which reads the ranges itself (``output=ranges``)."""
        if in_tasks and columnar(self.codec):
            return DecodedReader(self.topic, self.codec)
        return MessageDecoder(self.servers, self.topic, self.codec, self.opts.changelog(None), self.client_config)

    def partition_ids(self) -> list[int]:
        """The topic's partitions (driver side; for the apply job's merge)."""
        try:
            return self._partitions()
        finally:
            self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def watermarks(self) -> dict[int, tuple[int, int]]:
        """Partition -> (low, high) offsets; high is the next offset to be written.

        tansu (the test broker) answers a ListOffsets request with the last batch's first offset
        + 1, not the end. Fetching from (reported - 1) returns the true high watermark with the
        fetch response, read by ``cached=True``; on Kafka both answers are the same.
        """
        from ...clients.kafka import TopicPartition  # noqa: PLC0415

        consumer = self._consumer()
        out: dict[int, tuple[int, int]] = {}
        fetch: list[TopicPartition] = []
        for p in self._partitions():
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=KAFKA_TIMEOUT_S)
            out[p] = (low, high)
            if high > low:
                fetch.append(TopicPartition(self.topic, p, high - 1))
        if fetch:
            consumer.assign(fetch)
            waiting = {tp.partition for tp in fetch}
            # Bounded: on Kafka the first answer is already right, and a partition whose last offset
            # holds nothing deliverable (a transaction marker) keeps the reported value.
            deadline = time.monotonic() + _WATERMARK_FETCH_S
            while waiting and time.monotonic() < deadline:
                # consume() waits for the full count or the timeout: one message per waiting partition.
                for msg in consumer.consume(len(waiting), 0.5):
                    waiting.discard(msg.partition())
            consumer.unassign()
            for tp in fetch:
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, tp.partition), cached=True)
                if high is not None and high >= 0:
                    out[tp.partition] = (out[tp.partition][0], max(out[tp.partition][1], high))
        return out

    def table_schema(self) -> TableSchema | None:
        return None

    def initial_offset(self) -> dict[str, Any]:
        marks = self.watermarks()
        if self.starting.lower() == "earliest":
            return {"topic": self.topic, "offsets": {str(p): low for p, (low, _) in marks.items()}}
        if self.starting.lower() == "latest":
            return {"topic": self.topic, "offsets": {str(p): high for p, (_, high) in marks.items()}}
        try:
            given = orjson.loads(self.starting)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"startingOffsets must be earliest, latest or JSON: {exc}") from None
        if isinstance(given, dict) and isinstance(given.get(self.topic), dict):
            given = given[self.topic]  # Spark's Kafka form {"topic": {"0": 23}}
        if not isinstance(given, dict):
            raise ConfigError(f'startingOffsets JSON must be {{"{self.topic}": {{"0": offset}}}}, got {self.starting}')
        offsets: dict[str, int] = {}
        for p, (low, high) in marks.items():
            value = int(given.get(str(p), -2))
            offsets[str(p)] = low if value == -2 else high if value == -1 else value
        return {"topic": self.topic, "offsets": offsets}

    def available_now_target(self) -> dict[str, Any]:
        return {"topic": self.topic, "offsets": {str(p): high for p, (_, high) in self.watermarks().items()}}

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        seen = target if target is not None else self.available_now_target()
        begin = {str(k): int(v) for k, v in start.get("offsets", {}).items()}
        backlog = {p: max(0, int(high) - begin.get(p, 0)) for p, high in seen["offsets"].items()}
        take = backlog if not max_events else fair_shares(backlog, max_events)
        offsets = {
            p: begin.get(p, 0) + take[p] if backlog[p] else max(begin.get(p, 0), int(high))
            for p, high in seen["offsets"].items()
        }
        return {"topic": self.topic, "offsets": offsets}

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        begin = start.get("offsets", {})
        output = self.opts.output
        # Simple's decoder may hold a DML for a schema a later message brings: a range ends where a batch does.
        # A range the driver reads itself needs no splitting: its task only names it.
        every = self.split_every if self.codec.protocol != "simple" and output != RANGES else None
        pieces = [
            (n, int(p), low, high)
            for p, end_offset in end["offsets"].items()
            for n, (low, high) in enumerate(_offset_pieces(int(begin.get(p, 0)), int(end_offset), every))
        ]
        if output == RANGES:  # every partition named, empty ones too: the merge state keeps where each ended
            named = {p for _, p, _, _ in pieces}
            pieces += [
                (0, int(p), int(begin.get(p, 0)), int(begin.get(p, 0))) for p in end["offsets"] if int(p) not in named
            ]
        # Each partition's first piece, then each one's second...: the apply job merges partitions as
        # their pieces arrive in this order, and rows wait until every partition's watermark has come.
        return [
            KafkaRange(self.servers, self.topic, p, low, high, self.codec, changelog, output, self.client_config)
            for _, p, low, high in sorted(pieces)
        ]
