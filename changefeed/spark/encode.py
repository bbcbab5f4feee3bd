"""The capture job's encode stage: dispatch and encoding in Spark executors over Arrow batches.

Per micro-batch, ``foreachBatch`` runs `encode_storage` or `encode_kafka` on the batch's
DataFrame: a ``mapInArrow`` task per Spark partition parses that partition's events, orders them
(commit ts; a DDL before the rows of its commit ts, a Resolved after them) and runs the sink's own
encoder on them (`StorageEncoder`, `KafkaEncoder`). Out come a few Arrow rows per partition:
encoded data lines per data directory, or Kafka messages with their topic and partition, plus
the DDL and Resolved events passed through. Every row carries (Spark partition index, sequence),
and the driver puts them back in that order before the sink writes the bytes (``write_encoded``),
a partition at a time as the partitions complete (changefeed/spark/collect.py).

Why the order is the source's: a binlog range is split into partitions at transaction boundaries,
so partition i holds commit ts below partition i+1's and concatenating them in index order is
commit order. Any other input is first range-partitioned by commit ts (``orderBy``), which gives
the same property. The encoder state that spans partitions in TiCDC's sink (per-partition Open
Protocol batches, file rolling, acknowledged marks, BOOTSTRAP decisions) never crosses a
partition boundary here: a binlog partition ends with its Resolved, which closes every batch,
and what depends on the sink's history (checkpoint, last resolved ts, topic partition counts)
is captured from the driver's sink when the batch starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa

from ..errors import ChangefeedError, SinkError
from ..files.layout import SchemaFile
from ..model import DDLEvent, Event, Resolved, RowChange
from ..model.jsonl import EventReader, dumps_event, table_schema_from_json, table_schema_to_json
from ..model.rowblock import RowBlock
from ..sink.kafka.encode import KafkaEncoder, KafkaItem, MessageGroup, UnknownTopicError
from ..sink.kafka.progress import FlushedPosition
from ..sink.storage.writer import DataSegment, StorageItem
from .collect import partitions_in_order
from .envelope import unwrap, wrap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..sink.kafka import KafkaSink
    from ..sink.storage.writer import StorageWriter

_BATCH_ITEMS = 4096  # output rows per envelope ...
_BATCH_BYTES = 64 << 20  # ... or this many payload bytes (binary columns have 32-bit offsets)

STORAGE_SCHEMA = pa.schema(
    [
        ("part", pa.int32()),
        ("seq", pa.int64()),
        ("kind", pa.string()),  # event | rows
        ("event", pa.binary()),  # the JSONL line of a DDL or Resolved event
        ("base", pa.string()),
        ("schema_file", pa.string()),
        ("table_id", pa.int64()),
        ("header", pa.binary()),
        ("data", pa.binary()),
        ("ends", pa.list_(pa.int64())),
        ("commit_ts", pa.list_(pa.int64())),
        ("counts", pa.string()),
    ]
)

KAFKA_SCHEMA = pa.schema(
    [
        ("part", pa.int32()),
        ("seq", pa.int64()),
        ("kind", pa.string()),  # event | group | message | topic (a topic whose partition count is needed)
        ("event", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("group", pa.binary()),  # the group's transactions, counts and BOOTSTRAP schemas (JSON)
    ]
)


def event_order(event: Event | RowBlock) -> tuple[int, int]:
    """Commit order: a DDL precedes rows of its commit ts; a resolved row follows everything it covers."""
    rank = 0 if isinstance(event, DDLEvent) else 2 if isinstance(event, Resolved) else 1
    return (event.commit_ts, rank)


def row_count(items: Iterable[Any]) -> int:
    """Source row events in a batch of events or encoded items."""
    return sum(
        1 if isinstance(i, RowChange) else i.num_rows if isinstance(i, RowBlock) else getattr(i, "rows", 0)
        for i in items
    )


PartitionEvents = Callable[[Iterator[pa.RecordBatch]], Iterable[Event | RowBlock]]
"""What the encode stage reads one Spark partition's input with: a binlog input's ranges decoded in
place into row blocks (`changefeed.spark.datasource.binlog.RangeDecoder`), or the changelog's JSONL
``event`` column."""


def jsonl_events(batches: Iterator[pa.RecordBatch]) -> list[Event]:
    """The events of a changelog DataFrame's ``event`` column (any input's ``events=true`` output)."""
    where = f"capture partition {_partition_id()}"
    reader = EventReader(source=where)
    return [reader.parse(line, where) for batch in batches for line in batch.column("event").to_pylist() if line]


def _partition_events(batches: Iterator[pa.RecordBatch], events_of: PartitionEvents) -> list[Event | RowBlock]:
    """One Spark partition's events in commit order (a stable sort: ties keep source order)."""
    events = list(events_of(batches))
    events.sort(key=event_order)
    return events


def _partition_id() -> int:
    from pyspark import TaskContext  # noqa: PLC0415

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _record_batch(rows: list[dict[str, Any]], schema: pa.Schema, part: int, seq: int) -> pa.RecordBatch:
    """``rows`` (without ``part``/``seq``; missing keys are NULL) as one batch, numbered from ``seq``."""
    n = len(rows)
    columns = [
        pa.array(np.full(n, part, np.int32), f.type)
        if f.name == "part"
        else pa.array(np.arange(seq, seq + n, dtype=np.int64), f.type)
        if f.name == "seq"
        else pa.array([r.get(f.name) for r in rows], f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _batches(rows: Iterator[dict[str, Any]], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Output rows as envelopes (changefeed/spark/envelope.py) of Arrow batches cut by count and payload size.

    Every row gets ``schema``'s ``part`` (this partition's index) and ``seq`` (its number in the
    partition).
    """
    part = _partition_id()
    pending: list[dict[str, Any]] = []
    size = seq = 0
    for row in rows:
        pending.append(row)
        size += sum([len(v) for v in row.values() if isinstance(v, bytes)])
        if len(pending) >= _BATCH_ITEMS or size >= _BATCH_BYTES:
            yield wrap(_record_batch(pending, schema, part, seq), part)
            seq += len(pending)
            pending, size = [], 0
    if pending:
        yield wrap(_record_batch(pending, schema, part, seq), part)


def in_commit_order(df: DataFrame) -> DataFrame:
    """A changelog ``df`` range-partitioned by commit order (see the module docstring), ``event`` only."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    rank = F.when(F.col("kind") == "ddl", 0).when(F.col("kind") == "resolved", 2).otherwise(1)
    arrival = F.monotonically_increasing_id()
    return (
        df.select("event", "commit_ts", rank.alias("_rank"), arrival.alias("_arrival"))
        .orderBy("commit_ts", "_rank", "_arrival")
        .select("event")
    )


def _in_order(envelopes: pa.Table, schema: pa.Schema) -> pa.Table:
    """The rows of `_batches`' envelopes (one partition's, or several) in (partition, sequence) order.

    An envelope is one partition's rows in sequence order, and a partition's envelopes come in
    the order it yielded them, so a stable sort of the few envelopes by partition orders the rows
    without copying each payload. The row order is checked on the two number columns; rows
    out of order (not expected) are sorted one by one.
    """
    parts = envelopes.column("part").to_numpy()
    if len(parts) > 1 and (np.diff(parts) < 0).any():
        envelopes = envelopes.take(pa.array(np.argsort(parts, kind="stable")))
    table = unwrap(envelopes, schema, "encode stage")
    part, seq = (table.column(name).to_numpy() for name in ("part", "seq"))
    ordered = (part[1:] > part[:-1]) | ((part[1:] == part[:-1]) & (seq[1:] > seq[:-1]))
    if not ordered.all():
        return table.sort_by([("part", "ascending"), ("seq", "ascending")])
    return table


# ---------------------------------------------------------------------------------------------- storage


def _storage_rows(items: Iterable[StorageItem]) -> Iterator[dict[str, Any]]:
    for item in items:
        if isinstance(item, DataSegment):
            yield {
                "kind": "rows",
                "base": item.base,
                "schema_file": orjson.dumps(asdict(item.schema_file)).decode(),
                "table_id": item.table_id,
                "header": item.header,
                "data": item.data,
                "ends": item.ends,
                "commit_ts": item.commit_ts,
                "counts": orjson.dumps([[op, table, n] for (op, table), n in item.counts.items()]).decode(),
            }
        else:
            yield {"kind": "event", "event": dumps_event(item)}


def _passed_event(reader: EventReader, line: bytes) -> DDLEvent | Resolved:
    event = reader.parse(line, where="capture batch")
    if isinstance(event, RowChange):
        raise ChangefeedError("encode stage: a row event was passed through unencoded", where="capture batch")
    return event


def _storage_items(table: pa.Table) -> list[StorageItem]:
    reader = EventReader(source="capture batch")
    out: list[StorageItem] = []
    for row in table.to_pylist():
        if row["kind"] == "event":
            out.append(_passed_event(reader, row["event"]))
            continue
        out.append(
            DataSegment(
                base=row["base"],
                schema_file=SchemaFile(**orjson.loads(row["schema_file"])),
                table_id=row["table_id"],
                header=row["header"],
                data=row["data"],
                ends=row["ends"],
                commit_ts=row["commit_ts"],
                counts={(op, t): n for op, t, n in orjson.loads(row["counts"])},
            )
        )
    return out


def encode_storage(df: DataFrame, writer: StorageWriter, events_of: PartitionEvents) -> Iterator[list[StorageItem]]:
    """One micro-batch encoded in executors for ``writer``, in source order (rows the writer published are
    skipped): one piece per Spark partition, handed out as soon as it and those before it are encoded.

    ``df``'s partitions must be in commit order (a binlog input's ranges, or `in_commit_order`).
    """
    encoder, checkpoint_ts = writer.encoder, writer.replay_ts  # in-run contradictions reach the writer

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        events = _partition_events(batches, events_of)
        yield from _batches(_storage_rows(encoder.encode(events, checkpoint_ts)), STORAGE_SCHEMA)

    for _, envelopes in partitions_in_order(df, encode):
        yield _storage_items(_in_order(envelopes, STORAGE_SCHEMA))


# ---------------------------------------------------------------------------------------------- kafka


def _kafka_rows(
    encoder: KafkaEncoder, events: list[Event | RowBlock], known: dict[str, int], last_resolved: int
) -> list[dict[str, Any]]:
    def partitions(topic: str) -> int:
        n = known.get(topic)
        if n is None:
            raise UnknownTopicError(topic)
        return n

    out: list[dict[str, Any]] = []
    try:
        for item in encoder.encode(events, partitions, last_resolved):
            if isinstance(item, MessageGroup):
                out.append({"kind": "group", "group": _group_state(item)})
                out.extend(
                    {"kind": "message", "topic": t, "partition": p, "key": m.key, "value": m.value}
                    for t, p, m in item.messages
                )
            else:
                out.append({"kind": "event", "event": dumps_event(item)})
    except UnknownTopicError:
        # The driver resolves (maybe creates) these topics and runs the batch again.
        return [{"kind": "topic", "topic": t} for t in sorted(encoder.topics(events) - set(known))]
    return out


def _flushed_json(mark: FlushedPosition | None) -> Any:
    return None if mark is None else [mark.commit_ts, dict(mark.position) if mark.position is not None else None]


def _flushed(obj: Any) -> FlushedPosition | None:
    return None if obj is None else FlushedPosition(int(obj[0]), obj[1])


def _group_state(group: MessageGroup) -> bytes:
    """A group's sink state as JSON (BOOTSTRAP schemas once each, then an index per dispatched row)."""
    tables: dict[int, int] = {}
    schemas: list[dict[str, Any]] = []
    order: list[int] = []
    for table in group.bootstrap:
        at = tables.get(id(table))
        if at is None:
            at = tables[id(table)] = len(schemas)
            schemas.append(table_schema_to_json(table))
        order.append(at)
    state = {
        "first_ts": group.first_ts,
        "complete": _flushed_json(group.complete),
        "last": _flushed_json(group.last),
        "counts": [[op, table, n] for (op, table), n in group.counts.items()],
        "schemas": schemas,
        "bootstrap": order,
    }
    return orjson.dumps(state)


def _group(state: bytes) -> MessageGroup:
    """The group `_group_state` wrote (in our own executors, for this batch)."""
    obj = orjson.loads(state)
    schemas = [table_schema_from_json(t) for t in obj["schemas"]]
    last = _flushed(obj["last"])
    assert last is not None
    return MessageGroup(
        [],
        int(obj["first_ts"]),
        _flushed(obj["complete"]),
        last,
        {(op, table): int(n) for op, table, n in obj["counts"]},
        [schemas[i] for i in obj["bootstrap"]],
    )


def _kafka_items(table: pa.Table) -> tuple[list[KafkaItem], list[str]]:
    from ..codec import Message  # noqa: PLC0415

    reader = EventReader(source="capture batch")
    out: list[KafkaItem] = []
    unknown: list[str] = []
    group: MessageGroup | None = None
    cols = {name: table.column(name).to_pylist() for name in ("kind", "event", "topic", "partition", "key", "value")}
    states = table.column("group").to_pylist()
    for i, kind in enumerate(cols["kind"]):
        if kind == "message":
            if group is None:
                raise ChangefeedError("encode stage: a message before its group", where="capture batch")
            group.messages.append((cols["topic"][i], cols["partition"][i], Message(cols["key"][i], cols["value"][i])))
        elif kind == "group":
            group = _group(states[i])
            out.append(group)
        elif kind == "topic":
            unknown.append(cols["topic"][i])
        else:
            out.append(_passed_event(reader, cols["event"][i]))
    return out, unknown


def encode_kafka(df: DataFrame, sink: KafkaSink, events_of: PartitionEvents) -> Iterator[list[KafkaItem]]:
    """One micro-batch routed and encoded in executors for ``sink``, in source order: one piece per
    Spark partition, each handed out as soon as it and those before it are encoded, so the driver
    produces while later partitions still encode (`changefeed.spark.collect`).

    ``df``'s partitions must be in commit order, as for `encode_storage`. Partition counts come
    from the sink; a topic it has not used yet is resolved (created when allowed) on the driver
    and the batch is encoded again, from the partition that needed it (encoding is deterministic:
    the partitions before it came out the same and were handed out already).
    """
    encoder, last_resolved = sink.encoder, sink.last_resolved
    known = {topic: sink.topic_partitions(topic) for topic in (sink.config.topic, *sink.topics.topics)}
    handed = 0  # partitions handed out
    for _ in range(3):
        frozen = dict(known)

        def encode(batches: Iterator[pa.RecordBatch], frozen: dict[str, int] = frozen) -> Iterator[pa.RecordBatch]:
            events = _partition_events(batches, events_of)
            yield from _batches(iter(_kafka_rows(encoder, events, frozen, last_resolved)), KAFKA_SCHEMA)

        unknown: list[str] = []
        for part, envelopes in partitions_in_order(df, encode):
            if part < handed:
                continue
            items, unknown = _kafka_items(_in_order(envelopes, KAFKA_SCHEMA))
            if unknown:
                break
            handed = part + 1
            yield items
        if not unknown:
            return
        for topic in unknown:
            known[topic] = sink.topic_partitions(topic)
    raise SinkError(f"kafka: topics still unresolved after resolving them: {sorted(set(unknown))}")


__all__ = ["encode_kafka", "encode_storage", "event_order", "in_commit_order", "jsonl_events", "row_count"]
