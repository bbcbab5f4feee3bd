"""A Kafka batch decoded and merged in pieces (`MessageDecoder.chunks`, `MergeStage.chunks`).

The apply job hands the sink each piece the merge releases while it decodes the next; the pieces
must add up to what one piece gives: the same rows in the same order, the same saved state.
No Spark or broker needed: the messages are encoded here, as the capture job's sink would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from changefeed.codec import CodecOptions, make_encoder
from changefeed.files.store import LocalStore
from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.rowblock import RowBlock, expand_blocks
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource.decoded import DECODED
from changefeed.spark.datasource.kafka import MESSAGE_SCHEMA, RANGES, MessageDecoder
from changefeed.spark.envelope import wrap
from changefeed.spark.merge import STREAM_MESSAGES, MergeStage, load_state, state_bytes

TOPIC = "cf"
PARTITIONS = 3
CODEC = CodecOptions(protocol="open-protocol")
TABLE = TableSchema(
    "shop",
    "orders",
    (
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("note", TypeCode.VARCHAR, length=32, charset="utf8mb4", collation="utf8mb4_bin"),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)


def messages(txns: int, rows: int, resolved_every: int) -> pa.Table:
    """Transactions of ``rows`` inserts dispatched by id over the partitions, a resolved ts to every
    partition every ``resolved_every`` transactions and at the end."""
    encoder = make_encoder(CODEC)
    per: list[list[tuple[bytes, bytes]]] = [[] for _ in range(PARTITIONS)]
    ident = 0
    ts = 1 << 30
    for t in range(txns):
        ts += 1000
        by_partition: list[list[RowChange]] = [[] for _ in range(PARTITIONS)]
        for _ in range(rows):
            ident += 1
            by_partition[ident % PARTITIONS].append(RowChange(Op.INSERT, TABLE, ts, new=(ident, f"n{ident}")))
        for p, changes in enumerate(by_partition):
            per[p].extend((m.key or b"", m.value or b"") for m in encoder.encode(changes))
        if (t + 1) % resolved_every == 0 or t == txns - 1:
            mark = encoder.encode_resolved(Resolved(ts + 1))
            for sent in per:
                sent.append((mark.key or b"", mark.value or b""))
    flat = [(p, o, k, v) for p, sent in enumerate(per) for o, (k, v) in enumerate(sent)]
    columns = list(zip(*flat, strict=True))
    return pa.table(
        [
            pa.array(columns[0], pa.int32()),
            pa.array(columns[1], pa.int64()),
            *(pa.array(c, pa.binary()) for c in columns[2:]),
        ],
        schema=MESSAGE_SCHEMA,
    )


def rows_of(events: list) -> list[tuple]:
    rows = expand_blocks([e for e in events if isinstance(e, (RowChange, RowBlock))])
    return [(r.commit_ts, r.new) for r in rows]


def rows_at(events: list) -> list[tuple]:
    """Each row's commit ts, image and the offset of its message (a block of a run of messages
    sits in the run's first message's events, each segment at its own message)."""
    rows = expand_blocks([e for e in events if isinstance(e, (RowChange, RowBlock))])
    return [(r.commit_ts, r.new, (r.position or {}).get("offset")) for r in rows]


def test_decoder_pieces_take_each_partition_in_turn_and_add_up_to_decode() -> None:
    table = messages(txns=40, rows=20, resolved_every=5)
    whole = MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).decode(table)
    pieces = list(MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).chunks(table, per_partition=3))
    assert len(pieces) > 3
    for piece in pieces:
        counts = [sum(1 for m in piece if m[0] == p) for p in range(PARTITIONS)]
        assert max(counts) <= 3
    joined = sorted((m for piece in pieces for m in piece), key=lambda m: (m[0], m[1]))
    assert [(m[0], m[1], m[3]) for m in joined] == [(m[0], m[1], m[3]) for m in whole]
    assert rows_at([e for m in joined for e in m[2]]) == rows_at([e for m in whole for e in m[2]])


def _stage(path: Path) -> MergeStage:
    return MergeStage(path, TOPIC, range(PARTITIONS), MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()))


def test_merge_pieces_release_early_and_add_up_to_one_piece(tmp_path: Path) -> None:
    table = messages(txns=60, rows=12, resolved_every=4)
    one = _stage(tmp_path / "one")
    whole = [one.merge(MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).decode(table), 1)]
    one.commit(1)

    many = _stage(tmp_path / "many")
    pieces = MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).chunks(table, per_partition=4)
    released = list(many._merged(lambda _: pieces, 1))
    many.commit(1)
    assert len(released) > 5  # released piece by piece, before the batch is fully decoded
    flat = [e for piece in released for e in piece]
    # The same rows in commit order (rows of one transaction from different partitions have
    # different keys: their order among themselves follows arrival, as in TiCDC's consumer).
    assert sorted(rows_of(flat)) == sorted(rows_of(whole[0]))
    assert [ts for ts, _ in rows_of(flat)] == [ts for ts, _ in rows_of(whole[0])]
    resolved = [e.commit_ts for e in flat if isinstance(e, Resolved)]
    assert (
        resolved == sorted(resolved) and resolved[-1] == [e for e in whole[0] if isinstance(e, Resolved)][-1].commit_ts
    )
    # The state the next batch starts from is the same either way.
    a = load_state(LocalStore(tmp_path / "one"), "merge-000000000001.jsonl", TOPIC, range(PARTITIONS))
    b = load_state(LocalStore(tmp_path / "many"), "merge-000000000001.jsonl", TOPIC, range(PARTITIONS))
    assert a.snapshot() == b.snapshot()


class _Recording(MessageDecoder):
    """Small pieces (3 messages), and the partition of each piece in the order they were decoded."""

    def __init__(self) -> None:
        super().__init__("unused:1", TOPIC, CODEC, ChangelogRows())
        self.decoded: list[int] = []

    def chunks(self, messages: pa.Table, per_partition: int = 3) -> Iterator[list[Any]]:
        for piece in super().chunks(messages, per_partition=3):
            self.decoded.append(piece[0][0])
            yield piece


class _Arriving:
    """Envelope tables in order; table i can be polled once ``delays[i]`` polls have passed since
    the one before it arrived. ``next`` always has it (the wait), and is recorded."""

    def __init__(self, tables: list[pa.Table], delays: list[int], decoder: _Recording) -> None:
        self.tables, self.delays, self.decoder = tables, delays, decoder
        self.polls = 0
        self.waits: list[int] = []  # pieces decoded when each wait began

    def poll(self) -> tuple[int, pa.Table] | None:
        if not self.tables:
            return None
        self.polls += 1
        return self._take() if self.polls > self.delays[0] else None

    def next(self) -> tuple[int, pa.Table] | None:
        if not self.tables:
            return None
        self.waits.append(len(self.decoder.decoded))
        return self._take()

    def _take(self) -> tuple[int, pa.Table]:
        table, self.tables, self.delays, self.polls = self.tables[0], self.tables[1:], self.delays[1:], 0
        return -1, table


def _ranges(table: pa.Table, per_partition: int) -> list[pa.Table]:
    """The batch as the source hands it over: ranges of each partition's messages as envelopes,
    each partition's first range, then each one's second... (`KafkaInput.partitions`)."""
    out = []
    for p in range(PARTITIONS):
        mine = table.filter(pc.equal(table.column("partition"), p))
        for n, at in enumerate(range(0, mine.num_rows, per_partition)):
            batch = mine.slice(at, per_partition).combine_chunks().to_batches()[0]
            out.append((n, p, pa.Table.from_batches([wrap(batch, p)])))
    return [t for _, _, t in sorted(out, key=lambda x: x[:2])]


def test_partitions_merged_as_they_arrive_release_what_the_whole_batch_does(tmp_path: Path) -> None:
    table = messages(txns=60, rows=12, resolved_every=4)
    one = _stage(tmp_path / "one")
    whole = one.merge(MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).decode(table), 1)
    one.commit(1)

    decoder = _Recording()
    stage = MergeStage(tmp_path / "arriving", TOPIC, range(PARTITIONS), decoder)
    ranges = _ranges(table, per_partition=25)
    arriving = _Arriving(ranges, [0] + [4] * (len(ranges) - 1), decoder)
    released = list(stage.merge_arrivals(arriving, 1))
    stage.commit(1)
    assert len(released) > 5  # released piece by piece while later ranges were still to come
    flat = [e for piece in released for e in piece]
    assert [ts for ts, _ in rows_of(flat)] == [ts for ts, _ in rows_of(whole)]
    assert sorted(rows_of(flat)) == sorted(rows_of(whole))
    assert [e.commit_ts for e in flat if isinstance(e, Resolved)][-1] == whole[-1].commit_ts
    a = load_state(LocalStore(tmp_path / "one"), "merge-000000000001.jsonl", TOPIC, range(PARTITIONS))
    b = load_state(LocalStore(tmp_path / "arriving"), "merge-000000000001.jsonl", TOPIC, range(PARTITIONS))
    assert a.snapshot()[0] == b.snapshot()[0]


def test_the_partition_holding_the_merge_back_is_decoded_first(tmp_path: Path) -> None:
    """Partition 0 arrives whole first; once the others are here, their pieces go first until their
    watermarks catch up: rows are released early instead of waiting behind partition 0's backlog."""
    table = messages(txns=60, rows=12, resolved_every=2)
    decoder = _Recording()
    stage = MergeStage(tmp_path, TOPIC, range(PARTITIONS), decoder)
    ranges = _ranges(table, per_partition=10_000)  # one range a partition
    arriving = _Arriving(ranges, [0, 6, 0], decoder)
    released = list(stage.merge_arrivals(arriving, 1))
    order = decoder.decoded
    ahead = order.index(1)  # partition 0's pieces decoded while waiting for partition 1
    assert ahead >= 5 and set(order[:ahead]) == {0}
    # Then the late ones catch up before partition 0 gets another turn.
    assert order[ahead : ahead + 2 * ahead - 2].count(0) <= 2
    assert len(released) > 3 and arriving.waits == []


def test_past_half_the_bound_the_driver_waits_for_the_missing_partitions(tmp_path: Path) -> None:
    table = messages(txns=60, rows=12, resolved_every=2)
    decoder = _Recording()
    stage = MergeStage(tmp_path, TOPIC, range(PARTITIONS), decoder)
    stage.max_pending_bytes = 2 * 3_000  # ~6 pieces of partition 0 held: then it waits for partition 1
    ranges = _ranges(table, per_partition=10_000)
    arriving = _Arriving(ranges, [0, 10_000, 10_000], decoder)
    list(stage.merge_arrivals(arriving, 1))
    pieces_of_0 = decoder.decoded.count(0)
    assert arriving.waits and 0 < arriving.waits[0] < pieces_of_0  # waited before decoding all of partition 0


def test_batches_go_as_they_arrive_while_they_are_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`MergeStage.collect` of messages decoded in tasks: the first batch and those after a large one
    go as their ranges arrive; after a small one (steady load) the batch is collected whole (the
    hand-over's costs showed as lag). Ranges the driver reads itself are always read as they come."""
    stage = _stage(tmp_path)
    assert stage.output == RANGES  # the driver's decoder: its tasks only name the ranges
    chose: list[str] = []
    monkeypatch.setattr(stage, "stream", lambda batch, batch_id: chose.append("stream") or iter(()))
    monkeypatch.setattr(stage, "chunks", lambda table, batch_id: chose.append("whole") or iter(()))
    monkeypatch.setattr(stage, "read", lambda table, batch_id: chose.append("read") or iter(()))

    class Batch:
        def toArrow(self) -> pa.Table:  # noqa: N802 - PySpark's name
            return pa.table({})

    sizes = (None, STREAM_MESSAGES, STREAM_MESSAGES - 1, 0, 10 * STREAM_MESSAGES)
    for messages_before in sizes:
        stage.last_messages = messages_before
        stage.collect(Batch(), 1)  # type: ignore[arg-type]
    assert chose == ["read"] * len(sizes)
    chose.clear()
    stage.output = DECODED
    for messages_before in sizes:
        stage.last_messages = messages_before
        stage.collect(Batch(), 1)  # type: ignore[arg-type]
    assert chose == ["stream", "stream", "whole", "whole", "stream"]
    # What `_merged` counts: the messages fed in the batch.
    stage.merge(MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).decode(messages(4, 3, 2)), 2)
    assert stage.last_messages == messages(4, 3, 2).num_rows


def test_the_state_file_is_made_when_the_merge_ends_and_written_at_commit(tmp_path: Path) -> None:
    """The state is serialized as the batch's last piece goes to the sink (overlapping its apply) and
    only written at commit: the same bytes as made at commit, also after the next batch changed the
    merger (a batch committed while the next one runs); a replay makes its own."""
    table = messages(6, 5, 2)
    decoder = MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows())
    stage = _stage(tmp_path / "a")
    stage.merge(decoder.decode(table.slice(0, table.num_rows - 3)), 1)  # rows left waiting for a watermark
    assert stage._last is not None and stage._last[0] == 1
    made = stage._unsaved[1]
    assert made == state_bytes(stage._last[1], batch_id=1, topic=TOPIC, partitions=range(PARTITIONS))
    assert b'"kind":"inserts"' in made
    stage.merge(decoder.decode(table.slice(table.num_rows - 3)), 2)  # batch 2 starts from batch 1's merger
    assert not (tmp_path / "a" / MergeStage._file(1)).exists()
    stage.commit(1)
    assert (tmp_path / "a" / MergeStage._file(1)).read_bytes() == made and 1 not in stage._unsaved
    # Batch 2 replayed (its first try failed before commit): made anew from batch 1's saved state.
    first = stage._unsaved[2]
    stage.merge(decoder.decode(table.slice(table.num_rows - 3)), 2)
    assert stage._last is not None
    expected = state_bytes(stage._last[1], batch_id=2, topic=TOPIC, partitions=range(PARTITIONS))
    assert stage._unsaved[2] == expected == first
    stage.commit(2)
    assert (tmp_path / "a" / MergeStage._file(2)).read_bytes() == expected and not stage._unsaved
