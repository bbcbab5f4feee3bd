"""A transaction that changes a row back and forth (A->B->A->B, as a MySQL source can) arrives whole
through the Kafka merge, for every protocol the Kafka path reads, while resends stay dropped.

Messages are built by our own encoders and read back by our own decoders (Open Protocol also by
the columnar block decoder the apply job uses), then fed to `PartitionMerger` at the offsets a
broker would give them. The resends are what a broker really delivers: the same batch twice, a
producer retry of one message (right away, or after a message of another row), a replay after a
capture restart (from a transaction boundary, re-batched), broadcast DDL and Resolved copies.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.codec import CodecOptions, Message, make_decoder, make_encoder
from changefeed.codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder
from changefeed.consume.merge import PartitionMerger
from changefeed.model import Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.rowblock import expand_blocks
from tests.consume.test_merge import TABLES, _through_data
from tests.consume.test_merge_blocks import Pair, block, position

TABLE = TableSchema(
    "db",
    "t",
    (Column("id", TypeCode.INT, nullable=False), Column("v", TypeCode.INT)),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=42,
)
A, B, C = 10, 20, 30  # the values row versions carry
T1, T2, T3 = 400_000_000_000_000_001, 400_000_000_000_000_100, 400_000_000_000_000_200


def ins(ts: int, ident: int, v: int) -> RowChange:
    return RowChange(Op.INSERT, TABLE, ts, new=(ident, v))


def upd(ts: int, ident: int, old: int, new: int) -> RowChange:
    return RowChange(Op.UPDATE, TABLE, ts, new=(ident, new), old=(ident, old))


# Row 1 goes A->B->A->B and row 2 A->B->A inside one transaction (T2), interleaved.
TXN1 = [ins(T1, 1, A), ins(T1, 2, A)]
TXN2 = [upd(T2, 1, A, B), upd(T2, 2, A, B), upd(T2, 1, B, A), upd(T2, 2, B, A), upd(T2, 1, A, B)]
TXN3 = [upd(T3, 2, A, C)]
DDL = DDLEvent("db", "t", "ALTER TABLE `db`.`t` COMMENT 'x'", 17, T2 + 50, table_schema=TABLE)

PROTOCOLS = [
    pytest.param(CodecOptions(protocol="open-protocol"), id="open-protocol"),
    pytest.param(CodecOptions(protocol="open-protocol", max_batch_size=1), id="open-protocol-1-row"),
    pytest.param(CodecOptions(protocol="open-protocol", max_batch_size=2), id="open-protocol-2-rows"),
    pytest.param(CodecOptions(protocol="canal-json", enable_tidb_extension=True), id="canal-json"),
    pytest.param(CodecOptions(protocol="simple"), id="simple-json"),
    pytest.param(CodecOptions(protocol="debezium", enable_tidb_extension=True), id="debezium"),
]


def key(row: RowChange) -> tuple[Any, ...]:
    return (row.commit_ts, row.op, row.new, row.old)


WANT = [key(r) for r in TXN1 + TXN2 + TXN3]


def rows_messages(codec: CodecOptions, rows: list[RowChange]) -> list[Message]:
    """The row messages a sink builds for ``rows`` (Open Protocol batches them)."""
    encoder = make_encoder(codec)
    for row in rows:
        encoder.append_row(row)
    return encoder.build()


class Stream:
    """Two partitions of one topic: the rows go to partition 0, DDL and Resolved to both."""

    def __init__(self, codec: CodecOptions) -> None:
        self.codec = codec
        self.encoder = make_encoder(codec)
        self.parts: list[list[Message]] = [[], []]
        if codec.protocol == "simple":
            for part in self.parts:
                boot = self.encoder.encode_bootstrap(TABLE)
                assert boot is not None
                part.append(boot)

    def rows(self, rows: list[RowChange]) -> list[Message]:
        messages = rows_messages(self.codec, rows)
        self.parts[0].extend(messages)
        return messages

    def resend(self, messages: list[Message]) -> None:
        self.parts[0].extend(messages)

    def ddl(self, ddl: DDLEvent) -> None:
        message = self.encoder.encode_ddl(ddl)
        for part in self.parts[:1] if self.codec.protocol == "canal-json" else self.parts:
            part.append(message)

    def resolved(self, ts: int) -> None:
        message = self.encoder.encode_resolved(Resolved(ts))
        assert message is not None
        for part in self.parts:
            part.append(message)


def decoded(codec: CodecOptions, messages: list[Message], columnar: bool) -> list[list[Event]]:
    """Each message's events, as the apply job (columnar) or `KafkaSource` (rows) decodes them."""
    if columnar:
        block_decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(codec))
        positions = [{"partition": 0, "offset": n} for n in range(len(messages))]
        return block_decoder.decode(messages, [f"p@{n}" for n in range(len(messages))], positions)
    decoder = make_decoder(codec)
    return [decoder.decode(m, f"p@{n}") for n, m in enumerate(messages)]


def merged(stream: Stream, columnar: bool = False, interleave: Callable[[int], int] | None = None) -> list[Any]:
    """Feed both partitions (partition 0 first, or interleaved) and return what the merge releases."""
    merger = PartitionMerger([0, 1])
    per_part = [decoded(stream.codec, msgs, columnar and p == 0) for p, msgs in enumerate(stream.parts)]
    cursors = [0, 0]
    out: list[Any] = []
    step = 0
    while any(cursors[p] < len(per_part[p]) for p in (0, 1)):
        p = 0 if cursors[0] < len(per_part[0]) else 1
        if interleave is not None and cursors[1] < len(per_part[1]) and interleave(step):
            p = 1
        merger.feed(p, per_part[p][cursors[p]], cursors[p])
        cursors[p] += 1
        step += 1
        out.extend(merger.ready())
    assert merger.buffered() == 0
    return out


def released_rows(out: list[Any]) -> list[tuple[Any, ...]]:
    return [key(e) for e in expand_blocks(out) if isinstance(e, RowChange)]


def columnar_modes(codec: CodecOptions) -> list[bool]:
    return [False, True] if codec.protocol == "open-protocol" else [False]


@pytest.mark.parametrize("codec", PROTOCOLS)
def test_a_row_changed_back_and_forth_in_one_transaction_arrives_whole(codec: CodecOptions) -> None:
    stream = Stream(codec)
    stream.rows(TXN1)
    stream.resolved(T1)
    stream.rows(TXN2)
    stream.ddl(DDL)
    stream.resolved(DDL.commit_ts)
    stream.rows(TXN3)
    stream.resolved(T3)
    for columnar in columnar_modes(codec):
        for interleave in (None, lambda step: step % 2 == 1):
            out = merged(stream, columnar, interleave)
            assert released_rows(out) == WANT
            assert [e.query for e in out if isinstance(e, DDLEvent)] == [DDL.query]  # the broadcast copy dropped


def _resend_cases(codec: CodecOptions) -> list[tuple[str, Callable[[Stream], None]]]:
    """Ways TXN2 is delivered more than once before its Resolved."""

    def batch_twice(s: Stream) -> None:
        s.resend(s.rows(TXN2))

    def retry_last(s: Stream) -> None:
        s.resend(s.rows(TXN2)[-1:])

    def retry_first_later(s: Stream) -> None:
        # the first message again after the others: fine only when no later message touches its rows
        messages = s.rows(TXN2[:2])
        s.resend(messages[:1])
        s.rows(TXN2[2:])

    def replay_rebatched(s: Stream) -> None:
        # a capture restart before the Resolved: the whole transaction again, batched anew
        s.rows(TXN2[:3])  # the first delivery stopped (crash) after three rows
        s.rows(TXN2)

    def replay_twice(s: Stream) -> None:
        # a replay cut short by a second restart
        s.rows(TXN2)
        s.rows(TXN2[:2])
        s.rows(TXN2)

    return [
        ("batch_twice", batch_twice),
        ("retry_last", retry_last),
        ("retry_first_later", retry_first_later),
        ("replay_rebatched", replay_rebatched),
        ("replay_twice", replay_twice),
    ]


@pytest.mark.parametrize("codec", PROTOCOLS)
def test_resends_of_that_transaction_are_still_dropped(codec: CodecOptions) -> None:
    for name, deliver in _resend_cases(codec):
        stream = Stream(codec)
        stream.rows(TXN1)
        stream.resend(stream.parts[0][-1:])  # a retry of an earlier transaction's message
        stream.resolved(T1)
        deliver(stream)
        stream.ddl(DDL)
        stream.resolved(DDL.commit_ts)
        stream.resend(rows_messages(codec, TXN2))  # a replay after the Resolved: behind it
        stream.rows(TXN3)
        stream.resolved(T3)
        stream.resolved(T1)  # an old Resolved again
        for columnar in columnar_modes(codec):
            out = merged(stream, columnar)
            assert released_rows(out) == WANT, (name, columnar)
            assert [e.query for e in out if isinstance(e, DDLEvent)] == [DDL.query]


@pytest.mark.parametrize("codec", PROTOCOLS)
def test_state_saved_with_an_undecided_replay(codec: CodecOptions) -> None:
    """The apply job saves the merge between batches; a replay held across the save is decided the same."""
    stream = Stream(codec)
    stream.rows(TXN1)
    stream.resolved(T1)
    stream.rows(TXN2)
    stream.rows(TXN2[:3])  # a replay begun...
    stream.rows(TXN2[3:])  # ...and finished (the restart re-sent everything since the transaction began)
    stream.resolved(T3)
    want = released_rows(merged(stream))
    assert want == [key(r) for r in TXN1 + TXN2]
    messages = [decoded(codec, msgs, False) for msgs in stream.parts]
    for cut in range(len(messages[0]) + 1):
        merger = PartitionMerger([0, 1])
        for offset, events in enumerate(messages[1]):
            merger.feed(1, events, offset)
        out: list[Any] = []
        for offset, events in enumerate(messages[0]):
            if offset == cut:
                merger = _through_data(merger)
            merger.feed(0, events, offset)
            out.extend(merger.ready())
        assert released_rows(out) == want, cut


# ---------------------------------------------------------------- random transactions with repeats


def _split(draw: st.DrawFn, rows: list[RowChange]) -> list[list[RowChange]]:
    """``rows`` batched into messages of 1-3 rows."""
    out, at = [], 0
    while at < len(rows):
        n = draw(st.integers(1, 3))
        out.append(rows[at : at + n])
        at += n
    return out


@st.composite
def repeat_streams(draw: st.DrawFn) -> tuple[list[list[RowChange] | Resolved], list[RowChange]]:
    """One partition: transactions that change rows back and forth (up to three changes of a row per
    transaction, values from a small set, so repeats are common), delivered with resends.

    Returns the deliveries (messages of rows, and Resolved events) and the rows as first sent.
    """
    state: dict[int, int | None] = {1: None, 2: None, 3: None}
    deliveries: list[list[RowChange] | Resolved] = []
    want: list[RowChange] = []
    for i in range(draw(st.integers(1, 3))):
        ts = 10 * (i + 1)
        changes = dict.fromkeys(state, 0)
        rows: list[RowChange] = []
        for _ in range(draw(st.integers(1, 9))):
            k = draw(st.sampled_from(sorted(state)))
            if changes[k] == 3:
                continue
            changes[k] += 1
            cur = state[k]
            if cur is None:
                state[k] = draw(st.integers(0, 2))
                rows.append(RowChange(Op.INSERT, TABLES[0], ts, new=(k, state[k])))
            elif draw(st.integers(0, 3)) == 0:
                state[k] = None
                rows.append(RowChange(Op.DELETE, TABLES[0], ts, old=(k, cur)))
            else:
                state[k] = draw(st.sampled_from([v for v in (0, 1, 2) if v != cur]))
                rows.append(RowChange(Op.UPDATE, TABLES[0], ts, new=(k, state[k]), old=(k, cur)))
        if not rows:
            continue
        want.extend(rows)
        messages = _split(draw, rows)
        mode = draw(st.integers(0, 5))
        if mode == 1:  # the producer retried the last messages
            messages += messages[draw(st.integers(0, len(messages) - 1)) :]
        elif mode == 2:  # a capture restart: the transaction again from its start, batched anew
            messages = messages[: draw(st.integers(1, len(messages)))] + _split(draw, rows)
        elif mode == 3:  # two restarts, the first cut short
            cut = draw(st.integers(1, len(messages)))
            again = _split(draw, rows)
            messages = messages[:cut] + again[: draw(st.integers(1, len(again)))] + _split(draw, rows)
        elif mode == 4:  # one message retried later, no later message touching its rows
            # (and none of its rows changed twice in it: such a retry is only known as a resend
            # while nothing newer came after it, see the merge's known limits)
            j = draw(st.integers(0, len(messages) - 1))
            keys = [r.image[0] for r in messages[j]]
            if len(set(keys)) < len(keys):
                j = len(messages) - 1  # the last message: retried right away
            later = [n for n in range(j + 1, len(messages) + 1) if not any(
                r.image[0] in keys for m in messages[j + 1 : n] for r in m)]  # fmt: skip
            at = draw(st.sampled_from(later))
            messages = [*messages[:at], messages[j], *messages[at:]]
        deliveries.extend(messages)
        deliveries.append(Resolved(ts))
        if mode == 5:  # a replay after the Resolved: behind it
            deliveries.extend(_split(draw, rows))
    return deliveries, want


@settings(max_examples=400, deadline=None)
@given(repeat_streams(), st.data())
def test_random_repeats_arrive_whole_and_resends_do_not(data, draw) -> None:
    deliveries, want = data
    pair = Pair([0])
    out: list[Any] = []
    for offset, delivery in enumerate(deliveries):
        if isinstance(delivery, Resolved):
            events: list[Any] = [delivery]
        elif draw.draw(st.booleans()):
            events = [block(delivery, position(0, offset), raw=draw.draw(st.booleans()))]
        else:
            events = [replace(r, position=position(0, offset)) for r in delivery]
        pair.feed(0, events, offset)
        if draw.draw(st.integers(0, 3)) == 0:
            pair.restore()
        out.extend(pair.ready())
    got = [(r.commit_ts, r.op, r.new, r.old) for r in expand_blocks(out) if isinstance(r, RowChange)]
    assert got == [(r.commit_ts, r.op, r.new, r.old) for r in want], _compact(deliveries)
    assert pair.blocks.buffered() == 0


def _compact(deliveries: list[list[RowChange] | Resolved]) -> str:
    """The deliveries in a line: ``i1=0`` insert of row 1 with v 0, ``u1:0>2``, ``d1``; ``|`` between messages."""

    def one(r: RowChange) -> str:
        k = r.image[0]
        if r.op is Op.INSERT:
            return f"i{k}={r.new[1]}"  # type: ignore[index]
        if r.op is Op.DELETE:
            return f"d{k}={r.old[1]}"  # type: ignore[index]
        return f"u{k}:{r.old[1]}>{r.new[1]}"  # type: ignore[index]

    return " | ".join(f"R{d.commit_ts}" if isinstance(d, Resolved) else " ".join(map(one, d)) for d in deliveries)


# ---------------------------------------------------------------- through the real broker


@pytest.mark.parametrize(
    "codec",
    [
        CodecOptions(protocol="open-protocol", max_batch_size=2),
        CodecOptions(protocol="canal-json", enable_tidb_extension=True),
        CodecOptions(protocol="simple"),
        CodecOptions(protocol="debezium", enable_tidb_extension=True),
    ],
    ids=["open-protocol", "canal-json", "simple-json", "debezium"],
)
def test_through_the_broker_with_a_restarted_sink(broker, codec: CodecOptions) -> None:
    """KafkaSink -> tansu -> KafkaSource: the transaction whole, its re-send after a sink restart dropped."""
    from changefeed.consume import KafkaSource, KafkaSourceConfig  # noqa: PLC0415 - broker tests only
    from changefeed.dispatch import DispatchRule  # noqa: PLC0415
    from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig  # noqa: PLC0415

    topic = f"repeats-{uuid.uuid4().hex[:10]}"
    by_key = [DispatchRule(matcher=["*.*"], partition="index-value")]

    def sink() -> KafkaSink:
        return KafkaSink(KafkaSinkConfig(broker.bootstrap_servers, topic, codec, partition_num=2, rules=by_key))

    with sink() as first:
        first.write([*TXN1, Resolved(T1), *TXN2[:3]])  # stops inside the transaction
        first.flush()
    with sink() as again:  # resumes from the last Resolved: TXN2 again, whole
        again.write([*TXN2, DDL, Resolved(DDL.commit_ts), *TXN3, Resolved(T3)])
    with KafkaSource(KafkaSourceConfig(broker.bootstrap_servers, topic, codec)) as source:
        out = source.read_until(T3)
    assert released_rows(out) == WANT
    assert [e.query for e in out if isinstance(e, DDLEvent)] == [DDL.query]
