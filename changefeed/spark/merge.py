"""The cross-partition merge of a ``kafka`` input, run in the apply job's foreachBatch.

Why here and not in the data source: resolved-ts gating needs every partition's resolved ts, and
rows read in one micro-batch may only be releasable in a later one (a partition whose watermark
has not arrived yet). So the merge needs state that outlives a batch. The data source's offsets
are plain per-partition Kafka offsets. Its rows are messages its range tasks decoded
(``output=decoded``, protocols with a columnar decoder: `DecodedReader` only unpacks them), or
only the ranges' offsets, whose messages the driver reads itself (``output=ranges``,
`DriverReads`) and decodes once (`MessageDecoder`, one long-lived decoder per partition, which
Simple's schema cache needs); either way they are fed to a `PartitionMerger`. The merger's state
is saved as data after every batch, keyed by batch id, into the job's checkpoint directory
(`state_bytes` / `load_state`).

State file ``merge-<batch id>.jsonl``: line 1 is a JSON header (format, version, batch, topic,
partitions and `PartitionMerger.snapshot`'s numbers); the further lines are the unreleased events
in the project's JSONL form (`model.jsonl.dumps_events`): one event a line, or a run of plain
INSERTs of one table at one commit ts as one ``inserts`` line (version 3: the table's definition
once, ~3 µs a 10-column row to write against ~30 for a row line; a batch ends with up to a
resolved interval of rows waiting, and the file is written every batch). Only pending events are
there (rows waiting for other partitions' resolved ts, DDLs waiting for every partition): released
rows are never saved. Written to a temporary file, fsynced and renamed, so a crash leaves either the old
or the new file.

Exactly once: Spark re-runs a failed batch with the same id and offsets. `MergeStage.merge` starts
from the state saved by the newest batch before it, so the replay releases exactly what the first
try released; the sink skips commit ts at or below its own checkpoint (and applies idempotently).
The state of batch N is saved only once the sink made batch N durable. Where the driver reads its
ranges (``output=ranges``) that may come after foreachBatch returned, while batch N+1 runs
(`MergeStage.durable_later`: the server's last statements of N overlap N+1's start), so Spark's
offset log may hold batches past the newest state. The state then names where it ends in each
partition (header ``ends``, version 4), and a batch starting later than that re-reads the messages
between (`MergeStage.read`): the job resumes from its own state, not from Spark's offsets. Every
other output saves the state before foreachBatch returns.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

import orjson
import pyarrow as pa

from ..consume import PartitionMerger
from ..errors import ChangefeedError, ascii_digits
from ..files.offsetlog import read_offsets
from ..files.store import StateStore, open_store
from ..model import Event, Resolved, RowChange, TableSchema
from ..model.jsonl import EventReader, dumps_events
from ..model.rowblock import RowBlock
from .collect import Arrivals
from .datasource.decoded import DECODED, DECODED_SCHEMA
from .datasource.driverreads import DriverReads
from .datasource.kafka import RANGE_MESSAGES, RANGES, MessageDecoder
from .encode import event_order
from .envelope import ENVELOPE_SCHEMA, wrap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .datasource.decoded import DecodedReader

log = logging.getLogger(__name__)

_KEEP = 3  # state files kept (the newest is what the next batch needs; older ones help debugging)
# Version 2 adds undecided replays (``replays`` per partition, changefeed/consume/merge.py), version
# 3 ``inserts`` lines, version 4 the header's ``ends``; this changefeed reads versions 1 to 3 too. An
# older reader refuses a newer one.
_FORMAT, _VERSION = "changefeed-merge-state", 4
_READS = (1, 2, 3, 4)
_PREFIX, _SUFFIX = "merge-", ".jsonl"

Decoded = Iterable[tuple[int, int, Sequence[Event | RowBlock]] | tuple[int, int, Sequence[Event | RowBlock], int]]
"""Decoded messages: (partition, offset, events of that message[, its bytes]), in offset order per partition."""
#: Rows per piece of a batch handed to the sink while the next is decoded (`Stage.chunks`).
CHUNK_ROWS = 16384
#: Messages of a batch from which the next is handed over as its tasks end (`MergeStage.collect`):
#: one range's worth at the kafka input's default ``eventsPerPartition``.
STREAM_MESSAGES = RANGE_MESSAGES
#: What the merge may hold for partitions waiting on a slower one, in message bytes, at least.
MIN_PENDING_BYTES = 512 << 20


def _envelopes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's ``output=messages`` rows as they are: envelopes already (`Arrivals`' task function for a
    batch of that output, e.g. a notebook's; the jobs read ``ranges`` or ``decoded``)."""
    for batch in batches:
        yield pa.RecordBatch.from_arrays(batch.columns, schema=ENVELOPE_SCHEMA)


def _as_envelopes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's ``output=decoded`` rows, each Arrow batch as one envelope (`Arrivals`' task function)."""
    for batch in batches:
        if batch.num_rows:
            part = batch.column(0)[0].as_py()
            yield wrap(pa.RecordBatch.from_arrays(batch.columns, schema=DECODED_SCHEMA), part)


class Arriving(Protocol):
    """Task outputs handed over one Spark partition at a time (`Arrivals`)."""

    def poll(self) -> tuple[int, pa.Table] | None:
        """The next partition's envelopes if here now, else None."""
        ...

    def next(self) -> tuple[int, pa.Table] | None:
        """The next partition's envelopes, waiting for them; None when every one was handed over."""
        ...


class SchemaInterner:
    """One `TableSchema` object per table version, whichever decoder or state file made the row.

    Each partition's decoder (and a restored state file) builds its own TableSchema objects; the
    MySQL sink batches rows into one multi-row statement only while they share the object (its
    per-table SQL cache is keyed by identity), so rows of one transaction spread over partitions
    would otherwise cost a statement each. A lookup is by ``id`` first, by value on a miss.
    """

    _LIMIT = 4096

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[TableSchema, TableSchema]] = {}
        self._by_value: dict[TableSchema, TableSchema] = {}

    def __call__(self, events: list[Event | RowBlock]) -> list[Event | RowBlock]:
        """``events`` with every row's schema replaced by the shared object (in place, for a block's
        tables too: an equal schema, so a table the decoder still holds is not changed in meaning)."""
        by_id = self._by_id
        for ev in events:
            if isinstance(ev, RowChange):
                ts = ev.table_schema
                hit = by_id.get(id(ts))
                ev.table_schema = hit[1] if hit is not None and hit[0] is ts else self._miss(ts)
            elif isinstance(ev, RowBlock):
                for rows in ev.tables:
                    ts = rows.table_schema
                    hit = by_id.get(id(ts))
                    rows.table_schema = hit[1] if hit is not None and hit[0] is ts else self._miss(ts)
        return events

    def _miss(self, ts: TableSchema) -> TableSchema:
        if len(self._by_id) >= self._LIMIT:
            self._by_id.clear()
            self._by_value.clear()
        try:
            canonical = self._by_value.setdefault(ts, ts)
        except TypeError:  # an unhashable column default: keep the object as it is
            canonical = ts
        self._by_id[id(ts)] = (ts, canonical)  # holding ts keeps its id from being reused
        return canonical


class Stage(Protocol):
    """What the apply jobs' foreachBatch runs on a source's internal ``output``: its rows -> events to write."""

    output: str  # the data source's ``output`` option this stage reads

    def run(self, rows: pa.Table, batch_id: int) -> list[Event | RowBlock]:
        """The events to hand to the sink for this batch, in commit order (rows may come in `RowBlock`s)."""
        ...

    def chunks(self, rows: pa.Table, batch_id: int) -> Iterator[list[Event | RowBlock]]:
        """`run`'s events in pieces, each ready for the sink while the next is decoded."""
        ...

    def commit(self, batch_id: int) -> None:
        """The sink made the batch durable."""
        ...

    def close(self) -> None: ...


class OrderedStage:
    """A source whose micro-batch is complete by itself (storage or binlog ranges): decoded here, in commit order."""

    def __init__(
        self, output: str, decode: Callable[[pa.Table], Iterable[Event | RowBlock]], *, sort: bool = True
    ) -> None:
        self.output = output
        self.decode = decode
        self.sort = sort  # False: the decoder gives commit order already (binlog ranges, in binlog order)
        self.intern = SchemaInterner()

    def run(self, rows: pa.Table, batch_id: int) -> list[Event | RowBlock]:
        return [event for chunk in self.chunks(rows, batch_id) for event in chunk]

    def chunks(self, rows: pa.Table, batch_id: int) -> Iterator[list[Event | RowBlock]]:
        """Sorted: the whole batch at once; else pieces of about `CHUNK_ROWS` rows, as decoded."""
        if self.sort:
            events = list(self.decode(rows))
            events.sort(key=event_order)  # a DDL precedes rows of its commit ts; a resolved row follows them
            yield self.intern(events)
            return
        piece: list[Event | RowBlock] = []
        size = 0
        for event in self.decode(rows):
            piece.append(event)
            size += event.num_rows if isinstance(event, RowBlock) else 1
            if size >= CHUNK_ROWS:
                yield self.intern(piece)
                piece, size = [], 0
        if piece:
            yield self.intern(piece)

    def commit(self, batch_id: int) -> None:
        """Nothing to save: the sink's checkpoint makes a replay skip what it applied."""

    def close(self) -> None:
        """Nothing held."""


Ends = dict[int, int]
"""Kafka partition -> the offset a merge state's batch read up to (its ranges' end), every partition."""


def state_bytes(
    merger: PartitionMerger,
    *,
    batch_id: int,
    topic: str,
    partitions: Sequence[int],
    ends: Mapping[int, int] | None = None,
) -> bytes:
    """``merger``'s state file: the header line, then its unreleased events (written by `MergeStage.commit`
    with `StateStore.write`: atomically and durably). ``ends``: where the batch's ranges ended (known
    where the driver read them)."""
    state, events = merger.snapshot()
    header: dict[str, Any] = {
        "format": _FORMAT,
        "version": _VERSION,
        "batch": batch_id,
        "topic": topic,
        "partitions": list(partitions),
        "merger": state,
    }
    if ends is not None:
        header["ends"] = {str(p): o for p, o in sorted(ends.items())}
    parts = [orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)]
    parts.append(dumps_events(events))
    return b"".join(parts)


def load_state(store: StateStore, name: str, topic: str, partitions: Sequence[int]) -> PartitionMerger:
    """The merger saved as ``name``; any damage is a ChangefeedError naming the file (the file may be hostile)."""
    return load_saved(store, name, topic, partitions)[0]


def load_saved(
    store: StateStore, name: str, topic: str, partitions: Sequence[int]
) -> tuple[PartitionMerger, Ends | None]:
    """`load_state`, and the state's ``ends`` (None: a state that names none, of version 3 or older or
    of a batch whose ranges were not read on the driver)."""
    path = f"{store.where}/{name}"
    try:
        raw = store.read(name)
    except ChangefeedError as exc:
        raise ChangefeedError(f"cannot read the kafka merge state: {exc.message}", where=path) from None
    if raw is None:
        raise ChangefeedError("the kafka merge state is gone", where=path)
    lines = raw.splitlines()
    try:
        header = orjson.loads(lines[0]) if lines else None
        if not isinstance(header, dict) or header.get("format") != _FORMAT:
            raise ValueError("not a changefeed merge state (the first line is not its header)")
        if header.get("version") not in _READS:
            raise ValueError(
                f"version {header.get('version')!r}, this changefeed reads versions {', '.join(map(str, _READS))}"
            )
        reader = EventReader(source=str(path))
        events = [
            e for n, line in enumerate(lines[1:], 2) if line.strip() for e in reader.parse_all(line, f"{path}:{n}")
        ]
        merger = PartitionMerger.restore(header["merger"], events)
        if sorted(merger.partitions) != header["partitions"]:  # type: ignore[type-var]
            raise ValueError(f"the header names partitions {header['partitions']}, the state {merger.partitions}")
        ends = _ends(header.get("ends"), header["partitions"])
    except ChangefeedError as exc:  # an event line: EventFormatError names the line
        raise ChangefeedError(f"kafka merge state is corrupt: {exc.message}", where=exc.where or str(path)) from None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        detail = f"missing member {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ChangefeedError(f"kafka merge state is corrupt: {detail}", where=str(path)) from None
    if header.get("topic") != topic or header["partitions"] != list(partitions):
        raise ChangefeedError(
            f"kafka topic {topic!r} has partitions {list(partitions)}, the saved merge state is of topic "
            f"{header.get('topic')!r} with {header['partitions']}: the topic was recreated or "
            "repartitioned, or the checkpoint belongs to another job; start a new checkpoint",
            where=str(path),
        )
    return merger, ends


def _ends(value: Any, partitions: Sequence[int]) -> Ends | None:
    """A header's ``ends``: offsets (non-negative integers) of the header's partitions only."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("ends must be an object")
    known = {str(p): p for p in partitions}
    ends: Ends = {}
    for key, offset in value.items():
        if key not in known:
            raise ValueError(f"ends names partition {key!r}, not one of the header's partitions")
        if not _is_offset(offset):
            raise ValueError(f"ends of partition {key} must be an offset (a non-negative integer), got {offset!r}")
        ends[known[key]] = offset
    return ends


def _is_offset(value: object) -> TypeGuard[int]:
    """A Kafka offset as JSON holds it: a non-negative integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _ranges_table(rows: Sequence[tuple[int, int, int]]) -> pa.Table:
    """(partition, start, end) rows as the kafka input's ``output=ranges`` table."""
    columns = list(zip(*rows, strict=True)) if rows else [(), (), ()]
    types = (pa.int32(), pa.int64(), pa.int64())
    return pa.table([pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=["partition", "start", "end"])


class MergeStage:
    """Decodes a batch's messages and feeds them to a `PartitionMerger` restored for that batch id."""

    def __init__(
        self,
        state: StateStore | str | Path,
        topic: str,
        partitions: Sequence[int],
        decoder: MessageDecoder | DecodedReader | None = None,
        offset_log: StateStore | None = None,
    ) -> None:
        # The kafka input's raw messages, or messages its tasks decoded (changefeed/spark/datasource/).
        self.output = decoder.output if decoder is not None else "messages"
        self.store = open_store(state)
        self.offset_log = offset_log  # the query's Spark offset log, where `read` takes its ranges
        self.topic = topic
        self.partitions = sorted(partitions)
        self.decoder = decoder
        # At least 16 of the largest messages the producer may send (TiCDC's max-message-bytes).
        largest = decoder.codec.max_message_bytes if decoder is not None else 0
        self.max_pending_bytes = max(MIN_PENDING_BYTES, 16 * largest)
        # The last batch merged in this process, committed or not: (batch id, merger, its ends).
        self._last: tuple[int, PartitionMerger, Ends | None] | None = None
        self._unsaved: dict[int, bytes] = {}  # batch id -> its state file, made as its merge ended
        self._later: int | None = None  # the batch whose state may be saved after the next one ran
        self.last_messages: int | None = None  # messages of the last batch merged (None: none yet)
        self.intern = SchemaInterner()

    @staticmethod
    def _file(batch_id: int) -> str:
        return f"{_PREFIX}{batch_id:012d}{_SUFFIX}"

    def _saved_ids(self) -> list[int]:
        ids = []
        for name in self.store.names():
            number = name[len(_PREFIX) : -len(_SUFFIX)]
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and ascii_digits(number):
                ids.append(int(number))
        return sorted(ids)

    def _restore(self, batch_id: int) -> tuple[PartitionMerger, Ends | None]:
        """The state after the newest batch before ``batch_id`` and where its ranges ended (None: not
        known): the one this process merged last, saved or not yet (`durable_later`), else the newest
        saved; a fresh merger before the first."""
        older = [i for i in self._saved_ids() if i < batch_id]
        last, self._last = self._last, None  # merge() changes it in place: a failed batch leaves none
        for replayed in [i for i in self._unsaved if i >= batch_id]:
            del self._unsaved[replayed]
        if last is not None and last[0] < batch_id and (not older or last[0] >= older[-1]):
            return last[1], last[2]  # the state its file holds (or will), without reading it back
        if not older:
            if any(n.startswith("merger-") and n.endswith(".pkl") for n in self.store.names()):
                raise ChangefeedError(
                    "the kafka merge state was saved in the pickle form of an older changefeed, which this "
                    "version does not read: finish the stream with the older version, or start a new checkpoint "
                    "(the MySQL sink skips what it already applied)",
                    where=self.store.where,
                )
            return PartitionMerger(self.partitions), None
        merger, ends = load_saved(self.store, self._file(older[-1]), self.topic, self.partitions)
        if ends is not None and older[-1] < batch_id - 1 and self.output != RANGES:
            # Batches after it may have been handed to the sink without their state: only ranges
            # read on the driver can re-read their messages (`read`).
            raise ChangefeedError(
                f"the kafka merge state of batch {older[-1]} was saved by a job that read its ranges on the "
                f"driver, and batch {batch_id} starts later: run it again with spark.changefeed.apply.decode=driver "
                "until it is past this batch",
                where=self.store.where,
            )
        return merger, ends

    def run(self, messages: pa.Table, batch_id: int) -> list[Event | RowBlock]:
        """A batch of the input's rows: decoded (or unpacked) once, then merged (see `merge`)."""
        return [event for chunk in self.chunks(messages, batch_id) for event in chunk]

    def chunks(self, messages: pa.Table, batch_id: int) -> Iterator[list[Event | RowBlock]]:
        """`run` in pieces: the partitions' messages decoded a few at a time, round robin, and what
        each piece lets the merge release handed on at once, so the sink applies it while the next
        piece is decoded."""
        if self.output == RANGES and "start" in messages.schema.names:
            return self.read(messages, batch_id)
        decoder = self._decoder()
        return self._merged(lambda _: decoder.chunks(messages), batch_id)

    def collect(self, batch: DataFrame, batch_id: int) -> Iterator[list[Event | RowBlock]]:
        """The batch on executors of this machine: ranges the driver reads itself (``output=ranges``)
        are read as they come (`read`); task output (``output=decoded``) is handed over as its tasks
        end (`stream`) where the batch is likely large (the last one had at least `STREAM_MESSAGES`
        messages, or none came yet: a job starts on its backlog), else collected whole (`chunks`).

        Why: handing partitions over as they end pays off where a batch's tasks take a while (a
        backlog); a small batch (steady load, ~10k rows a second) is read in a blink and the
        hand-over's own costs (a second Python stage per task, files, a thread) showed as lag:
        `bench/e2e.py --modes steady` at 10k rows/s, p50 0.68 -> 0.86 s (bench/RESULTS.md).
        """
        if self.output == RANGES:
            return self.read(batch.toArrow, batch_id)  # tasks only name the ranges: nothing to stream
        if self.last_messages is None or self.last_messages >= STREAM_MESSAGES:
            return self.stream(batch, batch_id)
        return self.chunks(batch.toArrow(), batch_id)

    def read(self, ranges: pa.Table | Callable[[], pa.Table], batch_id: int) -> Iterator[list[Event | RowBlock]]:
        """`chunks` of a batch whose Kafka ranges (``output=ranges``) are read here, on the driver,
        while what came is decoded and merged (`DriverReads`; the turns of `merge_arrivals`).
        ``ranges``: the table, or how to collect it from Spark's tasks where the offset log cannot
        give it (`_logged`)."""
        decoder = self._decoder()
        if not isinstance(decoder, MessageDecoder):
            raise ChangefeedError("kafka ranges need the driver's message decoder", where=self.topic)
        merger, ends = self._restore(batch_id)
        if not isinstance(ranges, pa.Table):
            logged = self._logged(batch_id) if ends is not None else None
            ranges = logged if logged is not None else ranges()
        ranges, after = self._from_state(ranges, ends, batch_id)
        # A state naming where every partition ended: a restart can re-read what came after it.
        self._later = batch_id if ends is not None and ends.keys() >= set(self.partitions) else None
        reads = DriverReads(decoder.servers, self.topic, ranges, decoder.client_config)
        try:
            yield from self.merge_arrivals(reads, batch_id, (merger, after))
        finally:
            reads.close()

    def _logged(self, batch_id: int) -> pa.Table | None:
        """The batch's ranges as its tasks would name them (`KafkaInput.partitions`: every partition,
        from the previous batch's offsets to this one's), from Spark's offset log, which Spark wrote
        before the batch ran: no Spark job of range tasks (~0.08 s a batch, bench/RESULTS.md). None
        where the log cannot tell (the first batch, a log purged or of another form)."""
        if self.offset_log is None or batch_id < 1:
            return None
        stops = self._logged_offsets(batch_id)
        begins = self._logged_offsets(batch_id - 1) if stops is not None else None
        if stops is None or begins is None:
            return None
        rows = [(p, begins[p], stops[p]) for p in self.partitions]
        if any(start > end for _, start, end in rows):
            raise ChangefeedError(
                f"kafka topic {self.topic!r}: Spark's offset log goes back from batch {batch_id - 1} to {batch_id}",
                where=self.offset_log.where,
            )
        return _ranges_table(rows)

    def _logged_offsets(self, batch_id: int) -> dict[int, int] | None:
        """Batch ``batch_id``'s end offsets in the offset log: this input's form (``{"topic", "offsets"}``,
        every partition), else None."""
        assert self.offset_log is not None
        found = read_offsets(self.offset_log, batch_id)
        sources = found[1] if found is not None else None
        if not sources or len(sources) != 1 or not isinstance(sources[0], dict):
            return None
        offset = sources[0]
        logged = offset.get("offsets")
        if offset.get("topic") != self.topic or not isinstance(logged, dict):
            return None
        out: dict[int, int] = {}
        for p in self.partitions:
            value = logged.get(str(p))
            if not _is_offset(value):
                return None
            out[p] = value
        return out

    def _from_state(self, ranges: pa.Table, ends: Ends | None, batch_id: int) -> tuple[pa.Table, Ends]:
        """The batch's ranges, each partition's first one starting where the restored state ended, and
        where they end. A later start is a batch that a stopped run handed to the sink and whose state
        it never saved (`durable_later`): its messages are read again, and the sink skips what it holds."""
        rows = sorted(zip(*(ranges.column(n).to_pylist() for n in ("partition", "start", "end")), strict=True))
        after: Ends = dict(ends or {})
        seen: set[int] = set()
        out = []
        for partition, start, end in rows:
            begin = start
            if ends is not None and partition in ends and partition not in seen:
                were = ends[partition]
                if were > start:
                    raise ChangefeedError(
                        f"kafka topic {self.topic!r} partition {partition}: batch {batch_id} starts at offset "
                        f"{start}, before offset {were} where the saved merge state ends: the checkpoint "
                        "was altered or belongs to another job",
                        where=self.store.where,
                    )
                if were < start:
                    log.info(
                        "kafka merge: batch %d reads partition %d from offset %d, not %d (the rows between "
                        "were not durable when the job stopped)",
                        batch_id,
                        partition,
                        were,
                        start,
                    )
                    begin = were
            seen.add(partition)
            after[partition] = max(end, after.get(partition, end))
            out.append((partition, begin, end))
        return _ranges_table(out), after

    def durable_later(self, batch_id: int) -> bool:
        """Whether batch ``batch_id``'s state may be saved after the next batch ran (`jobs` then overlaps
        the sink's last statements of this batch with the next one's start): its ranges were read here
        from a state that names where every partition ended, so a restart re-reads what Spark's
        offsets passed and no state covers (`read`)."""
        return self._later == batch_id

    def stream(self, batch: DataFrame, batch_id: int) -> Iterator[list[Event | RowBlock]]:
        """`chunks` of a batch DataFrame whose Spark partitions are handed over one at a time as
        their tasks end (`Arrivals`, changefeed/spark/collect.py; see `merge_arrivals`)."""
        arrivals = Arrivals(batch, _as_envelopes if self.output == DECODED else _envelopes)
        try:
            yield from self.merge_arrivals(arrivals, batch_id)
        finally:
            arrivals.close()

    def merge_arrivals(
        self, arrivals: Arriving, batch_id: int, restored: tuple[PartitionMerger, Ends | None] | None = None
    ) -> Iterator[list[Event | RowBlock]]:
        """`chunks` of a batch whose Spark partitions (a range of one Kafka partition's messages each,
        a partition's ranges in offset order) come one at a time: those already here are decoded
        while later ones are still read, a few messages at a time, the Kafka partition that holds
        the global resolved ts back first (a turn of one far ahead only adds to what waits; ties
        take turns). Unreleased rows wait in the merger for the partitions not yet here; past half
        of `max_pending_bytes` the driver waits for them instead of decoding further, so it never
        holds more than when the batch came whole. ``restored``: the merger to start from and the ends
        this batch reaches (`read`), else `_restore`'s."""
        decoder = self._decoder()
        bound = self.max_pending_bytes // 2

        def pieces(merger: PartitionMerger) -> Iterator[Decoded]:
            turns: dict[int, Iterator[Decoded]] = {}  # Kafka partition -> its pieces still to decode
            last: dict[int, int] = {}  # Kafka partition -> when it last had a turn
            clock = itertools.count()

            def take(item: tuple[int, pa.Table] | None) -> bool:
                if item is not None and item[1].num_rows:
                    table = item[1]  # envelopes of a task (``part``), or messages read here (``partition``)
                    key = table.column("part" if "part" in table.schema.names else "partition")[0].as_py()
                    more = iter(decoder.chunks(table))
                    turns[key] = itertools.chain(turns[key], more) if key in turns else more
                return item is not None

            waiting = True  # partitions still to come
            while waiting or turns:
                while waiting and take(arrivals.poll()):
                    pass
                if waiting and (not turns or merger.held_bytes > bound):
                    waiting = take(arrivals.next())
                    continue
                resolved = merger.resolved()
                key = min(turns, key=lambda k: (resolved.get(k, 0), last.get(k, -1)))
                piece = next(turns[key], None)
                if piece is None:
                    del turns[key]
                    continue
                last[key] = next(clock)
                yield piece

        return self._merged(pieces, batch_id, restored)

    def _decoder(self) -> MessageDecoder | DecodedReader:
        if self.decoder is None:
            raise ChangefeedError("the merge stage has no message decoder")
        return self.decoder

    def merge(self, messages: Decoded, batch_id: int) -> list[Event | RowBlock]:
        """The events now released in commit-ts order, ending with a Resolved when the global ts advanced."""
        return [event for chunk in self._merged(lambda _: (messages,), batch_id) for event in chunk]

    def _merged(
        self,
        pieces_of: Callable[[PartitionMerger], Iterable[Decoded]],
        batch_id: int,
        restored: tuple[PartitionMerger, Ends | None] | None = None,
    ) -> Iterator[list[Event | RowBlock]]:
        """What each piece of decoded messages releases; the state file is made once all are fed, for
        `commit`. ``pieces_of`` gives the pieces; it may look at how much the merger holds. ``restored``:
        the merger to start from and the ends the batch reaches (None: `_restore`'s, ends unknown)."""
        merger, ends = restored if restored is not None else (self._restore(batch_id)[0], None)
        known = set(self.partitions)
        merger.max_pending_bytes = self.max_pending_bytes
        released = messages = 0
        for piece in pieces_of(merger):
            for message in piece:
                messages += 1
                partition, offset, events = message[:3]
                if partition not in known:
                    raise ChangefeedError(f"kafka topic {self.topic!r}: partition {partition} appeared mid-stream")
                merger.feed(partition, events, offset, message[3] if len(message) > 3 else 0)
            out = self.intern(merger.ready())
            if out and isinstance(out[-1], Resolved):
                checkpoint: dict[Any, int] = merger.checkpoint()
                offsets = {str(p): o for p, o in checkpoint.items()}
                out[-1] = Resolved(out[-1].commit_ts, position={"topic": self.topic, "offsets": offsets})
            released += len(out)
            if out:
                yield out
        self.last_messages = messages
        # The state written once the sink flushed, made now: while the sink applies the last piece
        # (the driver would wait for it) rather than after (~0.2 s a 160k-row backlog batch), and
        # before the next batch changes the merger (`durable_later`).
        self._unsaved[batch_id] = self._state(batch_id, merger, ends)
        self._last = (batch_id, merger, ends)
        log.debug(
            "kafka merge batch=%d released=%d buffered=%d global_resolved=%d",
            batch_id,
            released,
            merger.buffered(),
            merger.global_resolved,
        )

    def commit(self, batch_id: int) -> None:
        """Save the state after ``batch_id``, once the sink made the batch durable."""
        data = self._unsaved.pop(batch_id, None)
        if data is None:
            return  # not merged in this process
        self.store.write(self._file(batch_id), data)
        for older in [i for i in self._unsaved if i < batch_id]:
            del self._unsaved[older]
        for old in self._saved_ids()[:-_KEEP]:
            self.store.delete(self._file(old))

    def _state(self, batch_id: int, merger: PartitionMerger, ends: Ends | None) -> bytes:
        return state_bytes(merger, batch_id=batch_id, topic=self.topic, partitions=self.partitions, ends=ends)

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()
