"""The block Debezium decoder gives exactly the row decoder's events, errors included.

Reference: `DebeziumDecoder.decode` message by message, each event positioned at its message (as
the Kafka input does). The block decoder's `RowBlock`s are expanded to `RowChange`s for the
comparison (start ts, positions and value types too). Streams come from the every-type binlog
fixture encoded in every option set, from generated tables and rows, and from hand-written and
mutated hostile messages, with watermarks, DDLs and tombstones between the rows.
"""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec import CodecOptions, Message
from changefeed.codec.debezium import DebeziumDecoder, DebeziumEncoder
from changefeed.codec.debezium.blocks import (
    DebeziumBlockDecoder,
    DebeziumRows,
    _doubles_as_decimals,
    _doubles_as_text,
    _run_blocks,
    _Slice,
)
from changefeed.codec.debezium.values import _decimal_parser
from changefeed.errors import CodecError
from changefeed.model import DDLEvent, Event, Op, Resolved, RowChange, TableSchema
from changefeed.model.events import trusted_row
from changefeed.model.rowblock import RowBlock, Segment, expand_blocks
from tests.codec.test_debezium_columnar import OPTION_SETS, blocks_of, opts, table_changes

TOPIC, PARTITION = "t", 3


def _where(i: int) -> str:
    return f"{TOPIC}[{PARTITION}]@{i}"


def _position(i: int) -> dict[str, Any]:
    return {"topic": TOPIC, "partition": PARTITION, "offset": i}


def _decoder(options: CodecOptions, given: list[TableSchema]) -> DebeziumDecoder:
    dec = DebeziumDecoder(options)
    for ts in given:
        dec.set_table_schema(ts)
    return dec


Told = tuple[int, TableSchema] | None
"""A table the decoder is told (`set_table_schema`) before that message, if any."""


def by_rows(
    messages: list[Message], options: CodecOptions, given: list[TableSchema], told: Told = None
) -> list[Event] | CodecError:
    decoder = _decoder(options, given)
    out: list[Event] = []
    for i, message in enumerate(messages):
        if told is not None and told[0] == i:
            decoder.set_table_schema(told[1])
        try:
            events = decoder.decode(message, _where(i))
        except CodecError as e:
            return e
        for ev in events:
            ev.position = _position(i)
        out.extend(events)
    return out


def by_blocks(
    messages: list[Message], options: CodecOptions, given: list[TableSchema], run: int, told: Told = None
) -> tuple[list[Event] | CodecError, int]:
    """(the events with blocks expanded, or the error; rows that came as blocks), decoding runs of
    ``run`` messages with one long-lived decoder (as the Kafka input does)."""
    decoder = DebeziumBlockDecoder(_decoder(options, given))
    out: list[Event] = []
    columnar = 0
    for at in range(0, len(messages), run):
        if told is not None and at <= told[0] < at + run:
            assert told[0] == at, "told between runs only"
            decoder.decoder.set_table_schema(told[1])
        part = range(at, min(at + run, len(messages)))
        try:
            decoded = decoder.decode(
                [messages[i] for i in part], [_where(i) for i in part], [_position(i) for i in part]
            )
        except CodecError as e:
            return e, columnar
        covered = -1  # the last message whose row an earlier message's block holds
        for i, events in zip(part, decoded, strict=True):
            assert i > covered or not events, "a message whose row is in an earlier message's block has no events"
            for ev in events:
                if isinstance(ev, RowBlock):
                    columnar += ev.num_rows
                    # A run's block: a one-row segment per message from this one on, each at its message.
                    assert [s.position for s in ev.segments] == [_position(j) for j in range(i, i + ev.num_rows)]
                    assert all(s.rows == 1 and s.skip is None for s in ev.segments)
                    assert len(events) == 1
                    covered = i + ev.num_rows - 1
                else:
                    assert ev.position == _position(i)
            out.extend(expand_blocks(events))
    return out, columnar


def assert_same(
    messages: list[Message],
    options: CodecOptions,
    given: list[TableSchema] = (),
    runs: tuple[int, ...] = (4096, 3),
    told: Told = None,
) -> int:
    """Both decoders agree (in any run length); returns how many rows came as blocks."""
    expected = by_rows(messages, options, list(given), told)
    columnar = 0
    for run in runs:
        got, columnar = by_blocks(messages, options, list(given), run, told)
        if isinstance(expected, CodecError):
            assert isinstance(got, CodecError), f"the row decoder raised {expected}, the block decoder did not"
            assert (got.message, got.where) == (expected.message, expected.where)
            continue
        assert not isinstance(got, CodecError), got
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert a == b
            if isinstance(a, RowChange):
                assert isinstance(b, RowChange)
                assert a.table_schema == b.table_schema and a.position == b.position and a.start_ts == b.start_ts
                for x, y in zip((*(a.new or ()), *(a.old or ())), (*(b.new or ()), *(b.old or ())), strict=True):
                    assert type(x) is type(y) and repr(x) == repr(y)  # Decimal stays Decimal, bytes stay bytes
    return columnar


def fixture_messages(options: CodecOptions) -> tuple[list[Message], list[TableSchema]]:
    """The every-type fixture's rows, DDLs and a watermark as messages (plus a tombstone after each
    delete, as a genuine connector sends), and the fixture's tables. Schema-less messages are
    typed by a given table: there, only the rows of each table's last version."""
    enc = DebeziumEncoder(options)
    rows = [row for block in blocks_of() for row in block.rows()]
    tables = {(row.schema, row.table): row.table_schema for row in rows}
    if options.debezium_disable_schema:
        rows = [row for row in rows if row.table_schema == tables[(row.schema, row.table)]]
    out: list[Message] = []
    last = 1
    for row in rows:
        enc.append_row(row)
        for msg in enc.build():
            out.append(msg)
            if row.op is Op.DELETE:
                out.append(Message(msg.key, None))
        last = max(last, row.commit_ts)
    out.append(enc.encode_ddl(DDLEvent("test", "t1", "ALTER TABLE t1 ADD COLUMN z INT", 5, last)))
    resolved = enc.encode_resolved(Resolved(last))
    if resolved is not None:
        out.append(resolved)
    return out, list(tables.values())


@pytest.mark.parametrize("option_set", list(OPTION_SETS))
def test_fixture_decodes_as_the_row_decoder(option_set: str) -> None:
    options = opts(**OPTION_SETS[option_set])
    messages, tables = fixture_messages(options)
    given: list[TableSchema] = tables if options.debezium_disable_schema else []
    columnar = assert_same(messages, options, given)
    if options.large_message_handle_compression == "none":
        assert columnar > 0  # the fast path took rows
    # The stream twice (a long-lived decoder, remembered tails), and with an op "r" snapshot read.
    assert_same(messages + messages, options, given)
    snapshot = [Message(m.key, m.value.replace(b'"op":"c"', b'"op":"r"')) if m.value else m for m in messages]
    assert_same(snapshot, options, given)


def test_schema_less_without_a_given_table_is_the_row_decoders_error() -> None:
    options = opts(**OPTION_SETS["no-schema"])
    messages, _ = fixture_messages(options)
    assert_same(messages, options)


def test_given_tables_win_over_the_messages_schema() -> None:
    options = opts(enable_tidb_extension=True)
    messages, tables = fixture_messages(options)
    assert assert_same(messages, options, tables) > 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table_changes(), st.sampled_from(list(OPTION_SETS)), st.integers(1, 5), st.booleans())
def test_generated_rows_of_every_type(data: Any, option_set: str, run: int, given_table: bool) -> None:
    ts, changes = data
    options = opts(**OPTION_SETS[option_set])
    enc = DebeziumEncoder(options)
    messages: list[Message] = []
    for k, (op, main, old) in enumerate(changes):
        commit_ts = (7 + k) << 18
        if op is Op.DELETE:
            row = trusted_row(op, ts, commit_ts, old=main)
        else:
            row = trusted_row(op, ts, commit_ts, new=main, old=old)
        try:
            messages.append(enc.encode_row(row))
        except Exception:  # a value the encoder refuses: not this test's subject
            continue
    given = [ts] if given_table or options.debezium_disable_schema else []
    assert_same(messages, options, given, runs=(4096, run))


# ------------------------------------------------------------------ hostile input

GOOD = opts(enable_tidb_extension=True)


def _good() -> list[Message]:
    return [m for m in fixture_messages(GOOD)[0] if m.value]


def _replace(msg: Message, old: bytes, new: bytes) -> Message:
    assert msg.value is not None and old in msg.value
    return Message(msg.key, msg.value.replace(old, new, 1))


def _hostile() -> list[tuple[str, Any]]:
    good = _good()
    first = good[0]
    assert first.value is not None
    cut = first.value.rfind(b',"schema":')
    tail = first.value[cut:]
    return [
        ("missing payload", Message(first.key, b'{"nothing":{}' + tail)),
        ("payload not an object", Message(first.key, b'{"payload":[1]' + tail)),
        ("unknown op", _replace(first, b'"op":"c"', b'"op":"x"')),
        ("op a number", _replace(first, b'"op":"c"', b'"op":1')),
        ("truncated", Message(first.key, first.value[: len(first.value) // 2])),
        ("truncated head", Message(first.key, first.value[: cut // 2] + tail)),
        ("source missing", _replace(first, b'"source":{', b'"sourcex":{')),
        ("db a number", _replace(first, b'"db":"', b'"db":1,"x":"')),
        ("commit_ts null", _replace(first, b'"commit_ts":', b'"commit_ts":null,"x":')),
        ("commit_ts huge", _replace(first, b'"commit_ts":', b'"commit_ts":18446744073709551616,"x":')),
        ("commit_ts negative", _replace(first, b'"commit_ts":', b'"commit_ts":-1,"x":')),
        ("insert with before", _replace(first, b'"before":null', b'"before":{}')),
        ("after not an object", _replace(first, b'"after":{', b'"after":[{')),
        ("after null", _replace(first, b'"after":{', b'"after":null,"x":{')),
        ("invalid utf-8 in a skipped member", _replace(first, b'"version":"', b'"version":"\xff')),
        ("invalid utf-8 in a value", _replace(first, b'"op":"c"', b'"op":"c","x":"\xc3"')),
        ("not JSON", Message(first.key, b"\x00\x01garbage")),
        ("an array", Message(first.key, b"[]")),
        ("key not JSON", Message(b"{nope", first.value)),
        ("key payload an array", Message(b'{"payload":[]}', first.value)),
        ("key names an unknown column", Message(b'{"payload":{"nope":1}}', first.value)),
        ("schema in the head", Message(first.key, first.value[:cut] + b',"schema":[]' + tail)),
        ("start_ts huge", _replace(first, b'"commit_ts":', b'"start_ts":18446744073709551617,"commit_ts":')),
        ("start_ts a string", _replace(first, b'"commit_ts":', b'"start_ts":"5","commit_ts":')),
        ("no commit_ts, ts_ms", _replace(first, b'"commit_ts":', b'"commit_tz":')),
    ]


@pytest.mark.parametrize(("name", "bad"), _hostile(), ids=[n for n, _ in _hostile()])
def test_hostile_messages_are_the_row_decoders(name: str, bad: Message) -> None:
    good = _good()
    for at in (0, 5, len(good)):
        assert_same([*good[:at], bad, *good[at:]], GOOD, runs=(4096, 2))


def _one_table_run() -> list[Message]:
    """One table's inserts, updates and deletes, every message with the same schema tail: the run
    the block decoder checks a list at a time (`DebeziumBlockDecoder._run_group`)."""
    enc = DebeziumEncoder(GOOD)
    rows = [row for block in blocks_of() for row in block.rows() if row.table == "ints"]
    rows = [row for row in rows if row.table_schema is rows[0].table_schema]  # its first version's
    rows += [trusted_row(Op.DELETE, row.table_schema, row.commit_ts + 1, old=row.new) for row in rows[:3]]
    messages = [enc.encode_row(row) for row in rows]
    tails = {m.value[m.value.rfind(b',"schema":') :] for m in messages if m.value is not None}
    assert len(tails) == 1
    return messages


def _one_table_hostile(first: Message, delete: Message) -> list[tuple[str, Message]]:
    return [
        ("unknown op", _replace(first, b'"op":"c"', b'"op":"x"')),
        ("source missing", _replace(first, b'"source":{', b'"sourcex":{')),
        ("db null", _replace(first, b'"db":"cf"', b'"db":null')),
        ("another db", _replace(first, b'"db":"cf"', b'"db":"cg"')),
        ("table null", _replace(first, b'"table":"ints"', b'"table":null')),
        ("commit_ts huge", _replace(first, b'"commit_ts":', b'"commit_ts":18446744073709551616,"x":')),
        ("commit_ts beyond int64", _replace(first, b'"commit_ts":', b'"commit_ts":9223372036854775808,"x":')),
        ("commit_ts negative", _replace(first, b'"commit_ts":', b'"commit_ts":-1,"x":')),
        ("no commit_ts, ts_ms", _replace(first, b'"commit_ts":', b'"commit_tz":')),
        ("insert with before", _replace(first, b'"before":null', b'"before":{}')),
        ("after null", _replace(first, b'"after":{', b'"after":null,"x":{')),
        ("an insert as an update", _replace(first, b'"op":"c"', b'"op":"u"')),
        ("an insert as a delete", _replace(first, b'"op":"c"', b'"op":"d"')),
        ("a delete as an insert", _replace(delete, b'"op":"d"', b'"op":"c"')),
        ("a delete as an update", _replace(delete, b'"op":"d"', b'"op":"u"')),
        ("start_ts a string", _replace(first, b'"commit_ts":', b'"start_ts":"5","commit_ts":')),
        ("start_ts zero", _replace(first, b'"commit_ts":', b'"start_ts":0,"commit_ts":')),
        ("a wrong value", _replace(first, b'"after":{', b'"after":{"nope":1,')),
        ("another key name", Message(first.key.replace(b'"payload":{"id"', b'"payload":{"ID"'), first.value)),  # type: ignore[union-attr]
        ("no key", Message(None, first.value)),
    ]


_TAKEN_WHOLE = {"a wrong value", "commit_ts beyond int64", "start_ts a string", "start_ts zero"}


@pytest.mark.parametrize("inserts_only", [False, True])
def test_one_table_runs_are_the_row_decoders(monkeypatch: pytest.MonkeyPatch, inserts_only: bool) -> None:
    """A run of one table's messages is checked a list at a time (inserts only, or any ops); a
    message any check refuses sends the run through the message-by-message loop, with the row
    decoder's events."""
    taken: list[bool] = []
    run_group = DebeziumBlockDecoder._run_group

    def spy(self: DebeziumBlockDecoder, *args: Any) -> Any:
        group = run_group(self, *args)
        taken.append(group is not None)
        return group

    monkeypatch.setattr(DebeziumBlockDecoder, "_run_group", spy)
    run = _one_table_run()
    delete = next(m for m in run if m.value is not None and b'"op":"d"' in m.value)
    good = [m for m in run if not inserts_only or (m.value is not None and b'"op":"c"' in m.value)] * 3
    assert assert_same(good, GOOD, runs=(3, 5, 4096)) == len(good)  # every row as a block
    taken.clear()
    assert_same(good, GOOD, runs=(3, 5))
    clean = taken.count(True)
    assert clean > 0
    for name, bad in _one_table_hostile(good[0], delete):
        for at in (3, 7, len(good) - 1):
            taken.clear()
            assert_same([*good[:at], bad, *good[at + 1 :]], GOOD, runs=(3, 5))
            # The run holding it is not taken whole, but for a start ts the row decoder reads as
            # the commit ts and what `_build` finds row by row.
            assert taken.count(True) < clean or name in _TAKEN_WHOLE, name


def _spy_typed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per one-table run: was it taken whole with its images read with its heads?"""
    typed: list[bool] = []
    whole_run = DebeziumBlockDecoder._whole_run

    def spy(self: DebeziumBlockDecoder, *args: Any) -> Any:
        whole, envelopes = whole_run(self, *args)
        typed.append(whole is not None and whole.parsed)
        return whole, envelopes

    monkeypatch.setattr(DebeziumBlockDecoder, "_whole_run", spy)
    return typed


@pytest.mark.parametrize("renamed", [False, True])
def test_a_table_told_between_runs_reads_the_next(monkeypatch: pytest.MonkeyPatch, renamed: bool) -> None:
    """A run's images are read with its heads by the reader of its first row's table; told a
    table in between (the same columns, or one renamed, which the messages' images do not fit),
    the next run is read by that table's, with the row decoder's events or error."""
    typed = _spy_typed(monkeypatch)
    messages = _one_table_run() * 3
    ts = next(row.table_schema for block in blocks_of() for row in block.rows() if row.table == "ints")
    if renamed:
        ts = replace(ts, columns=[ts.columns[0], replace(ts.columns[1], name="renamed"), *ts.columns[2:]])
    # Renamed: the message after it is the row decoder's error (an unknown column), the rows before blocks.
    assert assert_same(messages, GOOD, runs=(3,), told=(12, ts)) == (12 if renamed else len(messages))
    # Every run read with its heads; renamed, not the one after it: its images fit no reader.
    assert typed == ([True] * 4 + [False] if renamed else [True] * (len(messages) // 3))


def test_a_guessed_reader_of_another_table_is_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row decoder's table cache emptied between the guess and the run's check (its size
    limit): the run's table is another object than the guessed reader's, and the run is read
    again as any run."""
    typed = _spy_typed(monkeypatch)
    table_of = DebeziumBlockDecoder._table_of

    def forgetful(self: DebeziumBlockDecoder, *args: Any) -> Any:
        self.decoder._tables.clear()
        return table_of(self, *args)

    monkeypatch.setattr(DebeziumBlockDecoder, "_table_of", forgetful)
    messages = _one_table_run() * 3
    assert assert_same(messages, GOOD, runs=(3,)) == len(messages)
    assert typed and not any(typed)


def _decoded_root(options: CodecOptions) -> DebeziumRows:
    messages, _ = fixture_messages(options)
    decoded = DebeziumBlockDecoder(DebeziumDecoder(options)).decode(
        messages, [_where(i) for i in range(len(messages))], [_position(i) for i in range(len(messages))]
    )
    root = next(ev for events in decoded for ev in events if isinstance(ev, RowBlock)).tables[0].origin[0]
    assert isinstance(root, DebeziumRows)
    return root


def test_run_blocks_are_the_dataclasses() -> None:
    """`_run_blocks` builds `Segment`s without their constructor: each is the one the constructor
    gives, and every slot is set. Two tables' rows interleaved, with a message between that is
    not theirs: a block per run of consecutive messages, each table's rows of the run a slice."""
    root = _decoded_root(opts(enable_tidb_extension=True))
    n = root.num_rows
    assert n >= 4
    other = root.slice(0, n)  # another table object, as a second table of the run would be
    assert isinstance(other, DebeziumRows)
    # Messages 0..n-1 alternate between the tables, message n is the row decoder's, n+1.. the first table's again.
    a = [k for k in range(n) if k % 2 == 0]
    b = [k for k in range(n) if k % 2]
    tail = list(range(n + 1, n + 4))
    a_rows = root.slice(0, len(a) + len(tail))
    assert isinstance(a_rows, DebeziumRows)
    positions = [_position(i) for i in range(n + 4)]
    out: list[list[Event | RowBlock]] = [[] for _ in range(n + 4)]
    commits = [100 + k for k in range(n + 4)]
    taken = [(a_rows, [*a, *tail], [commits[k] for k in [*a, *tail]]), (other, b, [commits[k] for k in b])]
    _run_blocks(taken, positions, out)
    assert [len(events) for events in out] == [1] + [0] * n + [1, 0, 0]
    first, second = out[0][0], out[n + 1][0]
    assert type(first) is RowBlock and type(second) is RowBlock
    assert first.segments == [Segment(k % 2, 1, commits[k], positions[k], None) for k in range(n)]
    assert second.segments == [Segment(0, 1, commits[k], positions[k], None) for k in tail]
    assert [t.origin for t in first.tables] == [(a_rows.origin[0], 0), (root, 0)]
    assert [t.num_rows for t in first.tables] == [len(a), len(b)]
    assert [t.origin for t in second.tables] == [(root, len(a))] and second.tables[0].num_rows == len(tail)
    assert type(second.tables[0]) is _Slice  # lazy: no Arrow slice until asked for
    for block in (first, second):
        for obj in block.segments:
            for slot in Segment.__slots__:
                getattr(obj, slot)  # unset: AttributeError
    # The block's rows are the tables' rows in message order.
    want = [a_rows.row(a.index(k)) if k in a else other.row(b.index(k)) for k in range(n)]
    assert [(r.new, r.old, r.commit_ts) for r in first.rows()] == [
        (w.new, w.old, c) for w, c in zip(want, commits, strict=False)
    ]
    # One table's rows of consecutive messages: one block holding that table whole.
    out = [[] for _ in range(n + 4)]
    _run_blocks([(root, list(range(2, n + 2)), commits[2 : n + 2])], positions, out)
    assert [len(events) for events in out] == [0, 0, 1] + [0] * (n + 1)
    (block,) = out[2]
    assert block.tables == [root] and block.segments == [
        Segment(0, 1, commits[k], positions[k], None) for k in range(2, n + 2)
    ]


def test_a_run_broken_by_other_messages_is_a_block_per_piece() -> None:
    """Rows of one table with a DDL, a tombstone and a row the fast path leaves to the row decoder
    between them: a block per run of rows the fast path took, at its first message, each
    row at its own message; the events are the row decoder's, in order (`assert_same`)."""
    run = _one_table_run()  # 9 messages
    # The row decoder's row (a commit ts beyond int64, which a block's int64 column cannot hold).
    bad = _replace(run[1], b'"commit_ts":', b'"commit_ts":9223372036854775808,"x":')
    others = [m for m in fixture_messages(GOOD)[0] if not m.value or b'"op":"c"' not in m.value]
    tombstone = next(m for m in others if not m.value)
    ddl = next(m for m in others if m.value and b'"ddl"' in m.value)
    messages = [*run[:3], tombstone, *run[3:6], ddl, *run[6:8], bad, run[8]]
    assert assert_same(messages, GOOD, runs=(4096, 5)) == 9
    decoded = DebeziumBlockDecoder(DebeziumDecoder(GOOD)).decode(
        messages, [_where(i) for i in range(len(messages))], [_position(i) for i in range(len(messages))]
    )
    firsts = [i for i, events in enumerate(decoded) if any(isinstance(ev, RowBlock) for ev in events)]
    assert firsts == [0, 4, 8, 11]
    sizes = [ev.num_rows for events in decoded for ev in events if isinstance(ev, RowBlock)]
    assert sizes == [3, 3, 2, 1]
    roots = {id(t.origin[0]) for events in decoded for ev in events if isinstance(ev, RowBlock) for t in ev.tables}
    assert len(roots) == 1  # slices of the one decoded table


def test_mutated_messages_are_the_row_decoders() -> None:
    """Random byte edits of good messages: the same events, or the same first error."""
    rnd = random.Random(19)
    good = _good()
    alphabet = b'{}[]",:0123456789-.eEtrufalsn \\x\xff'
    for _ in range(120):
        messages = list(good)
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(len(messages))
            value = messages[i].value
            assert value is not None
            data = bytearray(value)
            for _ in range(rnd.randint(1, 4)):
                pos = rnd.randrange(len(data))
                choice = rnd.random()
                if choice < 0.4:
                    data[pos] = rnd.choice(alphabet)
                elif choice < 0.7:
                    del data[pos]
                else:
                    data.insert(pos, rnd.choice(alphabet))
            messages[i] = Message(messages[i].key, bytes(data))
        assert_same(messages, GOOD, runs=(4096,))


def test_blocks_give_one_row_per_message_with_its_start_ts() -> None:
    options = opts(enable_tidb_extension=True, debezium_include_start_ts=True)
    messages, _ = fixture_messages(options)
    assert assert_same(messages, options) > 0
    decoded = DebeziumBlockDecoder(DebeziumDecoder(options)).decode(
        messages, [_where(i) for i in range(len(messages))], [_position(i) for i in range(len(messages))]
    )
    for events in decoded:
        for ev in events:
            if isinstance(ev, RowBlock):
                assert all(seg.rows == 1 for seg in ev.segments)
                rows = list(ev.rows())
                assert len(rows) == len(ev.segments) and all(row.start_ts > 0 for row in rows)
                assert sum(t.batch.num_rows for t in ev.tables) == len(rows)


def test_slices_and_reschemed_rows_keep_their_rows() -> None:
    """What the merge and the sinks do with a block's tables (slice, `with_schema`, images) gives the
    same rows, start ts included."""
    options = opts(enable_tidb_extension=True)
    messages, _ = fixture_messages(options)
    decoded = DebeziumBlockDecoder(DebeziumDecoder(options)).decode(
        messages, [_where(i) for i in range(len(messages))], [_position(i) for i in range(len(messages))]
    )
    blocks = [ev for events in decoded for ev in events if isinstance(ev, RowBlock)]
    root = blocks[0].tables[0].origin[0]
    want = [root.row(i) for i in range(root.num_rows)]
    got = [
        r.start_ts
        for b in blocks
        for seg, start in b.walk()
        if b.tables[seg.table].origin[0] is root
        for r in b.segment_rows(seg, start)
    ]
    assert [r.start_ts for r in want] == got
    for rows in (root, root.slice(1, root.num_rows - 1), root.slice(1, root.num_rows - 1).slice(1, 2)):
        first = rows.origin[1]
        again = rows.with_schema(rows.table_schema.__class__(**{**vars_of(rows.table_schema), "table_id": 99}))
        for i in range(rows.num_rows):
            for got in (rows.row(i), again.row(i), again.slice(i, 1).row(0)):
                assert (got.op, got.new, got.old, got.commit_ts, got.start_ts) == (
                    want[first + i].op,
                    want[first + i].new,
                    want[first + i].old,
                    want[first + i].commit_ts,
                    want[first + i].start_ts,
                )
        assert again.slice(0, 1).table_schema.table_id == 99
        assert rows.images() == [(w.new, w.old) for w in want[first : first + rows.num_rows]]


def vars_of(ts: TableSchema) -> dict[str, Any]:
    return {f: getattr(ts, f) for f in ts.__dataclass_fields__}


_DECIMAL_TYPES = st.tuples(st.integers(1, 38), st.integers(0, 12)).filter(lambda ps: ps[1] <= ps[0])
_DOUBLES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(10**12), 10**12).flatmap(lambda n: st.integers(0, 8).map(lambda s: n / 10**s)),
    st.integers(-(1 << 60), 1 << 60),
    st.none(),
)


@settings(max_examples=400, deadline=None)
@given(_DECIMAL_TYPES, st.lists(_DOUBLES, max_size=8))
def test_decimal_doubles_a_column_at_a_time_are_the_per_value_parse(ps: tuple[int, int], values: list[Any]) -> None:
    """DECIMAL as a double read a column at a time is exactly `Decimal(repr(v))` at the column's
    scale, or left to the per-value parse (which may round or refuse it)."""
    typ = pa.decimal128(*ps)
    got = _doubles_as_decimals(values, typ)
    if got is None:
        return
    parse = _decimal_parser(ps[1], None)
    assert got.equals(pa.array([None if v is None else parse(v) for v in values], typ))


def test_decimal_doubles_in_exponent_form_take_the_per_value_parse() -> None:
    """Arrow misreads tiny exponent forms ('-1.69e-58' into digits): never taken column-wise."""
    assert _doubles_as_decimals([-1.6945776206927196e-58], pa.decimal128(20, 6)) is None
    assert _doubles_as_decimals([1e10], pa.decimal128(20, 2)) is None
    got = _doubles_as_decimals([12.5, 3], pa.decimal128(20, 2))
    assert got is not None and got.to_pylist() == [Decimal("12.50"), Decimal("3.00")]


_TEXT_DOUBLES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(1e-4, 1e10, exclude_max=True).flatmap(lambda v: st.sampled_from([v, -v])),
    st.integers(-(10**12), 10**12).flatmap(lambda n: st.integers(0, 8).map(lambda s: n / 10**s)),
    st.integers(-(10**12), 10**12).map(float),
    st.sampled_from([0.0, -0.0, 1e-4, -1e-4, 9999999999.999998, 1e10, 5e-5, 0.1, 0.30000000000000004]),
    st.integers(-(10**12), 10**12),
    st.sampled_from([0, -1, (1 << 63) - 1, -(1 << 63), 1 << 63, (1 << 64) - 1, 1 << 70]),
    st.none(),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_TEXT_DOUBLES, max_size=12))
def test_decimal_doubles_as_text_a_column_at_a_time_are_repr(values: list[Any]) -> None:
    """DECIMAL of unknown precision as a double, as text a column at a time, is each value's text
    in the per-value path (``repr`` of a float, ``str`` of an int), or left to that path."""
    got = _doubles_as_text(values)
    if got is None:
        assert not all(
            v is None
            or (type(v) is float and (v == 0 or 1e-4 <= abs(v) < 1e10))
            or (type(v) is int and abs(v) < 10**10)
            for v in values
        )
        return
    assert got.type == pa.string()
    assert got.to_pylist() == [None if v is None else repr(v) if type(v) is float else str(v) for v in values]


def test_decimal_doubles_as_text_take_the_per_value_path_where_the_forms_differ() -> None:
    """Arrow's exponent forms (from 1e10, below ~1e-6, ints too) and other types: per value."""
    for values in ([1e10], [5e-5], [1e-7], [1e300], [12.5, 10**10], [1 << 63], [True], ["1.5"], [Decimal(1)]):
        assert _doubles_as_text(values) is None
    got = _doubles_as_text([100.0, -0.0, 0.0, None, 12.5, 1e-4, 3, 0, -(10**10 - 1)])
    want = ["100.0", "-0.0", "0.0", None, "12.5", "0.0001", "3", "0", str(-(10**10 - 1))]
    assert got is not None and got.to_pylist() == want
