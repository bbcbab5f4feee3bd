"""The Kafka sink's encoding half: events -> routed, encoded message groups, without a producer.

`KafkaEncoder` does what TiCDC's MQ sink does before producing: split key-changing UPDATEs,
route each row to (topic, partition) with the dispatch rules, and encode it with that partition's
encoder, so Open Protocol batches per partition (max-batch-size). Messages are built in groups,
at the points TiCDC's sink builds them: before a DDL, before a newer Resolved, every
``batch_rows`` rows, and at the end of the input. A `MessageGroup` carries what the producing
side needs to keep the sink's rules: the transactions completed inside it (acknowledged-position
marks) and, for the Simple protocol, the table of every row in order (BOOTSTRAP decisions depend
on the sink's clock and history, so they are taken where the messages are produced).

Row blocks (`RowBlock`, the Spark capture job's input) give the same groups: each table's rows
are dispatched and rendered a column at a time where the dispatcher and the encoder can, and
appended in commit order; what they cannot do goes through the per-row path in its place.

No I/O and picklable: the Spark capture job runs one per partition in an executor
(changefeed/spark/encode.py); `KafkaSink.write` runs one on the driver. Partition counts come
from a callable, so a caller without broker access passes what it already knows.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from ...codec import CodecOptions, Encoder, Message, make_encoder
from ...codec.base import Rendered
from ...dispatch import DispatchRule, EventRouter, key_changing_rows, split_key_changing_update
from ...errors import SinkError
from ...model import DDLEvent, Event, Resolved, RowChange, TableSchema
from ...model.rowblock import OP_NAMES, RowBlock, TableRows
from .progress import FlushedPosition


class UnknownTopicError(SinkError):
    """The partition count of a topic is not known where the encoder runs (the caller resolves it)."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"kafka: partition count of topic {topic!r} not known here", where=topic)
        self.topic = topic


@dataclass(slots=True)
class MessageGroup:
    """Messages built together, in produce order, plus the sink state their rows change.

    ``first_ts`` is the first row's commit ts (it completes a transaction left open before the
    group); ``complete`` is the last transaction that ended inside the group; ``last`` is the
    group's last transaction, complete only once a later commit ts, DDL or Resolved follows.
    """

    messages: list[tuple[str, int, Message]]
    first_ts: int
    complete: FlushedPosition | None
    last: FlushedPosition
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (op, "schema.table") -> source rows
    bootstrap: list[TableSchema] = field(default_factory=list)  # per dispatched row, when BOOTSTRAP is on

    kind = "rows"

    @property
    def rows(self) -> int:
        return sum(self.counts.values())


KafkaItem = MessageGroup | DDLEvent | Resolved
"""What `KafkaEncoder` produces and `KafkaSink.write_encoded` takes."""


class KafkaEncoder:
    """Routing and encoding of row events for one changefeed's Kafka sink (see the module docstring)."""

    def __init__(
        self,
        codec: CodecOptions,
        default_topic: str,
        rules: Sequence[DispatchRule] = (),
        *,
        case_sensitive: bool = False,
        output_raw_change_event: bool = False,
        batch_rows: int = 8192,
    ) -> None:
        self.codec = codec
        self.default_topic = default_topic
        self.rules = list(rules)
        self.case_sensitive = case_sensitive
        self.output_raw_change_event = output_raw_change_event
        self.batch_rows = batch_rows
        # Simple's BOOTSTRAP rules ([sink] send-bootstrap-*); both 0 turns it off (TiCDC).
        self.bootstrap = codec.protocol == "simple" and bool(
            codec.send_bootstrap_interval_in_sec or codec.send_bootstrap_in_msg_count
        )
        self.router = self._router()
        self._encoders: dict[tuple[str, int], Encoder] = {}
        self._columns: Encoder | None = None

    def _router(self) -> EventRouter:
        return EventRouter(
            self.default_topic,
            self.rules,
            case_sensitive=self.case_sensitive,
            compat=self.codec.compat,
            require_schema_and_table=self.codec.protocol == "simple" and self.codec.encoding_format == "avro",
        )

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("router", "_encoders", "_columns")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.router = self._router()  # compiled matchers and encoder plans are rebuilt where it runs
        self._encoders = {}
        self._columns = None

    def topics(self, events: Iterable[Event | RowBlock]) -> set[str]:
        """The topics the rows of ``events`` go to."""
        out = {self.router.topic(e.schema, e.table) for e in events if isinstance(e, RowChange)}
        for e in events:
            if isinstance(e, RowBlock):
                out.update(self.router.topic(t.table_schema.schema, t.table_schema.table) for t in e.tables)
        return out

    def encode(
        self, events: Iterable[Event | RowBlock], partitions: Callable[[str], int], last_resolved: int = -1
    ) -> Iterator[KafkaItem]:
        """Message groups, with DDL and Resolved events passed through in place; ``events`` in commit order.

        ``partitions(topic)`` is the topic's partition count (it may raise `UnknownTopicError`);
        ``last_resolved`` is the newest Resolved ts the sink already wrote (an older one builds nothing).
        """
        group: _Group | None = None
        for event in events:
            if isinstance(event, RowBlock):
                group = yield from self._block(group, event, partitions)
                continue
            if isinstance(event, RowChange):
                if group is None:
                    group = _Group(event.commit_ts)
                self._row(group, event, partitions)
                if group.rows >= self.batch_rows:
                    yield self._build(group)
                    group = None
                continue
            if isinstance(event, Resolved) and event.commit_ts <= last_resolved:
                yield event  # TiCDC's sink ignores a resolved ts that does not advance
                continue
            if group is not None:
                yield self._build(group)
                group = None
            if isinstance(event, Resolved):
                last_resolved = event.commit_ts
            yield event
        if group is not None:
            yield self._build(group)

    def _row(self, group: _Group, row: RowChange, partitions: Callable[[str], int]) -> None:
        if group.last is not None and row.commit_ts > group.last.commit_ts:
            group.complete = group.last
        rows = [row] if self.output_raw_change_event else split_key_changing_update(row)
        for r in rows:
            topic = self.router.topic(r.schema, r.table)
            partition = self.router.partition(r, partitions(topic))
            self._encoder(topic, partition).append_row(r)
            group.targets.setdefault((topic, partition), None)
            if self.bootstrap:
                group.bootstrap.append(r.table_schema)
        group.last = FlushedPosition(row.commit_ts, row.position)
        key = (row.op.value, f"{row.schema}.{row.table}")
        group.counts[key] = group.counts.get(key, 0) + 1
        group.rows += 1

    def _encoder(self, topic: str, partition: int) -> Encoder:
        encoder = self._encoders.get((topic, partition))
        if encoder is None:
            encoder = self._encoders[(topic, partition)] = make_encoder(self.codec)
        return encoder

    def _block(
        self, group: _Group | None, block: RowBlock, partitions: Callable[[str], int]
    ) -> Generator[MessageGroup, None, _Group | None]:
        """A block's rows as `_row` would take them one by one, rendered a table at a time.

        Rows the columnar path does not cover (images without every column, key-changing
        UPDATEs, row-by-row dispatchers, values or options the encoder renders only per row)
        go through `_row` as `RowChange`s, in their place.
        """
        plans = [self._plan(rows, partitions) for rows in block.tables]
        for seg, start in block.walk():
            plan = plans[seg.table]
            if plan.per_row[start : start + seg.rows].any():
                for row in block.segment_rows(seg, start):
                    if group is None:
                        group = _Group(seg.commit_ts)
                    self._row(group, row, partitions)
                    if group.rows >= self.batch_rows:
                        yield self._build(group)
                        group = None
                continue
            op = OP_NAMES[plan.rows.ops[start]]
            j = 0
            while j < seg.rows:
                if group is None:
                    group = _Group(seg.commit_ts)
                take = min(seg.rows - j, self.batch_rows - group.rows)
                self._append_rendered(group, plan, start + j, take, seg.commit_ts)
                if group.last is not None and seg.commit_ts > group.last.commit_ts:
                    group.complete = group.last
                group.last = FlushedPosition(seg.commit_ts, seg.row_position(j + take - 1))
                key = (op, plan.name)
                group.counts[key] = group.counts.get(key, 0) + take
                group.rows += take
                j += take
                if group.rows >= self.batch_rows:
                    yield self._build(group)
                    group = None
        return group

    def _append_rendered(self, group: _Group, plan: _TablePlan, start: int, take: int, commit_ts: int) -> None:
        assert plan.rendered is not None
        keys, values = plan.rendered.keys, plan.rendered.values
        parts, topic, targets, encoders = plan.parts, plan.topic, group.targets, plan.encoders
        for i in range(start, start + take):
            p = parts[i]
            encoder = encoders.get(p)
            if encoder is None:
                encoder = encoders[p] = self._encoder(topic, p)
            if (topic, p) not in targets:
                targets[(topic, p)] = None
            encoder.append_rendered(keys[i], values[i], commit_ts, partial(plan.rows.row, i, commit_ts))  # type: ignore[arg-type]

    def _plan(self, rows: TableRows, partitions: Callable[[str], int]) -> _TablePlan:
        schema = rows.table_schema
        plan = _TablePlan(rows, self.router.topic(schema.schema, schema.table), f"{schema.schema}.{schema.table}")
        parts = self.router.partitions_of(rows, partitions(plan.topic))
        rendered = None if parts is None or self.bootstrap else self._renderer().render_table(rows)
        if parts is None or rendered is None:
            plan.per_row = np.ones(rows.num_rows, bool)
            return plan
        plan.parts, plan.rendered = parts.tolist(), rendered
        plan.per_row = rendered.per_row if self.output_raw_change_event else rendered.per_row | key_changing_rows(rows)
        return plan

    def _renderer(self) -> Encoder:
        """An encoder used only for its column renderers (its per-table plans are kept)."""
        if self._columns is None:
            self._columns = make_encoder(self.codec)
        return self._columns

    def _build(self, group: _Group) -> MessageGroup:
        messages = [
            (topic, partition, msg)
            for (topic, partition) in group.targets
            for msg in self._encoders[(topic, partition)].build()
        ]
        last = group.last or FlushedPosition(group.first_ts)
        return MessageGroup(messages, group.first_ts, group.complete, last, group.counts, group.bootstrap)


@dataclass(slots=True)
class _TablePlan:
    """One table of a block: where its rows go, their rendered keys and values, and which rows
    go through the per-row path instead."""

    rows: TableRows
    topic: str
    name: str
    parts: list[int] = field(default_factory=list)
    rendered: Rendered | None = None
    per_row: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    encoders: dict[int, Encoder] = field(default_factory=dict)


@dataclass(slots=True)
class _Group:
    first_ts: int
    last: FlushedPosition | None = None
    complete: FlushedPosition | None = None
    targets: dict[tuple[str, int], None] = field(default_factory=dict)  # (topic, partition) in first-use order
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    bootstrap: list[TableSchema] = field(default_factory=list)
    rows: int = 0
