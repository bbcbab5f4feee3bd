"""The columnar Open Protocol decoder gives exactly the row decoder's events, errors included.

Reference: `OpenProtocolDecoder.decode` message by message, each event positioned at its message
(as the Kafka input does). The block decoder's `RowBlock`s are expanded to `RowChange`s for the
comparison. Streams come from the binlog fixtures (every MySQL type), from generated tables and
rows, from hand-written odd and hostile messages, and from random byte mutations.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.capture.binlog import BinlogPosition, file_capture
from changefeed.codec import CodecOptions, Message
from changefeed.codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder, OpenProtocolEncoder
from changefeed.errors import CodecError
from changefeed.model import DDLEvent, Event, Op, Resolved, RowChange
from changefeed.model.rowblock import RowBlock, Segment, expand_blocks
from tests.codec.test_open_protocol import BAD_EVENTS, GOOD_KEY, GOOD_VALUE, frame
from tests.strategies import row_changes, tables

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "binlog"
TOPIC, PARTITION = "t", 0


def opts(**kw: Any) -> CodecOptions:
    return CodecOptions(protocol="open-protocol", **kw)


def _where(i: int) -> str:
    return f"{TOPIC}[{PARTITION}]@{i}"


def _position(i: int) -> dict[str, Any]:
    return {"topic": TOPIC, "partition": PARTITION, "offset": i}


def by_rows(messages: list[Message], options: CodecOptions) -> list[Event] | CodecError:
    decoder = OpenProtocolDecoder(options)
    out: list[Event] = []
    for i, message in enumerate(messages):
        try:
            events = decoder.decode(message, _where(i))
        except CodecError as e:
            return e
        for ev in events:
            ev.position = _position(i)
        out.extend(events)
    return out


def by_blocks(messages: list[Message], options: CodecOptions) -> tuple[list[Event] | CodecError, int]:
    """(the events with blocks expanded, or the error; rows that came as blocks)."""
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(options))
    try:
        decoded = decoder.decode(
            messages, [_where(i) for i in range(len(messages))], [_position(i) for i in range(len(messages))]
        )
    except CodecError as e:
        return e, 0
    out: list[Event] = []
    columnar = 0
    for i, events in enumerate(decoded):
        for ev in events:
            if isinstance(ev, RowBlock):
                # A block of a run of messages sits at the run's first; each segment at its own message.
                columnar += ev.num_rows
                offsets = [s.position["offset"] for s in ev.segments]
                assert offsets[0] == i and offsets == sorted(offsets)
                assert all(s.position == _position(o) for s, o in zip(ev.segments, offsets, strict=True))
            else:
                assert ev.position == _position(i)
        out.extend(expand_blocks(events))
    return out, columnar


def assert_same(messages: list[Message], options: CodecOptions | None = None) -> int:
    """Both decoders agree; returns how many rows the block decoder took columnar."""
    options = options or opts()
    expected = by_rows(messages, options)
    got, columnar = by_blocks(messages, options)
    if isinstance(expected, CodecError):
        assert isinstance(got, CodecError), f"the row decoder raised {expected}, the block decoder did not"
        assert (got.message, got.where) == (expected.message, expected.where)
        return 0
    assert not isinstance(got, CodecError), got
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a == b
        if isinstance(a, RowChange):
            assert a.table_schema == b.table_schema and a.position == b.position
            for x, y in [*zip(a.new or (), b.new or (), strict=True), *zip(a.old or (), b.old or (), strict=True)]:
                assert type(x) is type(y)  # Decimal stays Decimal, bytes stay bytes
                if type(x) is float:
                    assert repr(x) == repr(y)  # -0.0 keeps its sign
    return columnar


def _fixture_events(name: str) -> list[Event]:
    out: list[Event] = []
    for ev in file_capture(FIXTURES / name, BinlogPosition("binlog.000001", 4)).events():
        if isinstance(ev, (RowChange, DDLEvent)):
            out.append(ev)
    last = max((e.commit_ts for e in out), default=1)
    return [*out, Resolved(last)]


@pytest.mark.parametrize("fixture", ["full"])
@pytest.mark.parametrize(
    "options",
    [
        opts(),
        opts(compat="tiflow"),
        opts(delete_only_output_handle_key_columns=True),
        opts(output_old_value=False),
        opts(only_output_updated_columns=True),
        opts(max_batch_size=1),
    ],
    ids=["ticdc", "tiflow", "delete-handle-only", "no-old-value", "only-updated", "one-per-message"],
)
def test_every_type_of_the_binlog_fixtures(fixture: str, options: CodecOptions) -> None:
    messages = OpenProtocolEncoder(options).encode(_fixture_events(fixture))
    columnar = assert_same(messages, options)
    if options.compat == "ticdc" and not options.only_output_updated_columns:
        assert columnar > 0  # the fast path takes ordinary rows


@given(st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_generated_tables_and_rows(data: st.DataObject) -> None:
    schemas = [data.draw(tables(max_columns=6)) for _ in range(data.draw(st.integers(1, 2)))]
    events: list[Event] = []
    ts = 1
    for _ in range(data.draw(st.integers(1, 25))):
        table = data.draw(st.sampled_from(schemas))
        row = data.draw(row_changes(table))
        ts += data.draw(st.integers(0, 1))
        events.append(RowChange(row.op, table, ts, new=row.new, old=row.old))
        if data.draw(st.integers(0, 9)) == 0:
            events.append(Resolved(ts))
    options = opts(max_batch_size=data.draw(st.sampled_from([1, 3, 16])))
    assert_same(OpenProtocolEncoder(options).encode(events), options)


def _row(value: bytes | str, key: bytes | str = GOOD_KEY) -> Message:
    return frame((key, value))


GOOD = _row(GOOD_VALUE)


@pytest.mark.parametrize("case", sorted(BAD_EVENTS))
@pytest.mark.parametrize("place", ["alone", "after good rows", "between good rows"])
def test_hostile_events_raise_the_row_decoders_error(case: str, place: str) -> None:
    (key, value), _ = BAD_EVENTS[case]
    bad = frame((GOOD_KEY, GOOD_VALUE), (key, value))
    messages = {"alone": [bad], "after good rows": [GOOD, GOOD, bad], "between good rows": [GOOD, bad, GOOD]}[place]
    assert_same(messages)


ODD_VALUES = {
    "float -0": '{"u":{"a":{"t":5,"f":65,"v":-0}}}',
    "float32 -0 among others": '{"u":{"a":{"t":4,"f":65,"v":1.5},"b":{"t":4,"f":65,"v":-0}}}',
    "int -0": '{"u":{"a":{"t":3,"f":65,"v":-0}}}',
    "float -0 in an update's old image": '{"u":{"a":{"t":5,"f":65,"v":1.5}},"p":{"a":{"t":5,"f":65,"v":-0}}}',
    "float 0 beside -0.0": '{"u":{"a":{"t":5,"f":65,"v":0},"b":{"t":5,"f":65,"v":-0.0}}}',
    "float -0 after a space": '{"u":{"a":{"t":5,"f":65,"v": -0}}}',
    "float 0 beside int -0": '{"u":{"a":{"t":5,"f":65,"v":0},"b":{"t":3,"f":65,"v":-0}}}',
    "float given an integer": '{"u":{"a":{"t":5,"f":65,"v":3}}}',
    "float32 rounding": '{"u":{"a":{"t":4,"f":65,"v":0.1}}}',
    "float32 max": '{"u":{"a":{"t":4,"f":65,"v":3.4028235e38}}}',
    "decimal as integer": '{"u":{"a":{"t":246,"f":65,"v":12}}}',
    "newline inside": '{"u":{"a":{"t":3,"f":65,\n"v":1}}}',
    "two documents": '{"u":{"a":{"t":3,"f":65,"v":1}}},{"u":{"a":{"t":3,"f":65,"v":2}}}',
    "duplicate column": '{"u":{"a":{"t":3,"f":65,"v":1},"a":{"t":3,"f":65,"v":2}}}',
    "duplicate value member": '{"u":{"a":{"t":3,"f":65,"v":1,"v":2}}}',
    "extra member in column": '{"u":{"a":{"t":3,"f":65,"v":1,"x":[1]}}}',
    "extra top-level member": '{"u":{"a":{"t":3,"f":65,"v":1}},"x":1}',
    "u null with d": '{"u":null,"d":{"a":{"t":3,"f":65,"v":1}}}',
    "h false": '{"u":{"a":{"t":3,"h":false,"f":65,"v":1}}}',
    "h null": '{"u":{"a":{"t":3,"h":null,"f":65,"v":1}}}',
    "no flags (v4.0)": '{"u":{"a":{"t":15,"v":"YWJj"}}}',
    "missing v": '{"u":{"a":{"t":3,"f":65}}}',
    "update": '{"u":{"a":{"t":3,"f":65,"v":2}},"p":{"a":{"t":3,"f":65,"v":1}}}',
    "delete": '{"d":{"a":{"t":3,"f":65,"v":2}}}',
    "partial delete": '{"d":{"a":{"t":3,"f":65,"v":2}}}',
    "unicode names": '{"u":{"ü \\"x\\"":{"t":15,"f":64,"v":"é\\u0000"}}}',
    "escaped binary": r'{"u":{"a":{"t":15,"f":65,"v":"\\x00\\xff\\u00e9\\n"}}}',
    "empty text blob": '{"u":{"a":{"t":252,"f":64,"v":""}}}',
    "surrogate pair in text": '{"u":{"a":{"t":15,"f":64,"v":"\\ud83d\\ude00"}}}',
    "year beyond int16": '{"u":{"a":{"t":13,"f":65,"v":70000}}}',
    "bit max": '{"u":{"a":{"t":16,"f":193,"v":18446744073709551615}}}',
    "mediumint out of range": '{"u":{"a":{"t":9,"f":65,"v":8388608}}}',
    "json text": '{"u":{"a":{"t":245,"f":64,"v":"{\\"k\\": [1, 2]}"}}}',
}


@pytest.mark.parametrize("case", sorted(ODD_VALUES))
def test_odd_values_take_the_row_decoders_meaning(case: str) -> None:
    value = ODD_VALUES[case]
    ordinary = '{"u":{"a":{"t":3,"f":65,"v":7}}}'
    assert_same([_row(value)])
    assert_same([_row(ordinary), _row(value), _row(ordinary)])
    assert_same([frame((GOOD_KEY, ordinary), (GOOD_KEY, value), (GOOD_KEY, ordinary))])


def test_shape_changes_follow_ddl_and_partial_images() -> None:
    wide = '{"u":{"a":{"t":3,"h":true,"f":11,"v":1},"b":{"t":15,"f":64,"v":"x"}}}'
    narrow = '{"u":{"a":{"t":3,"h":true,"f":11,"v":2}}}'
    handle_delete = '{"d":{"a":{"t":3,"h":true,"f":11,"v":1}}}'
    ddl = frame(('{"ts":2,"scm":"s","tbl":"t","t":2}', '{"q":"ALTER TABLE t DROP b","t":5}'))
    resolved = frame(('{"ts":3,"t":3}', ""))
    messages = [_row(wide), _row(handle_delete), _row(narrow), ddl, _row(narrow), resolved, _row(wide)]
    assert_same(messages)
    assert_same([frame((GOOD_KEY, wide), (GOOD_KEY, handle_delete), (GOOD_KEY, narrow), ('{"ts":3,"t":3}', ""))])


def test_tables_interleave_and_keep_their_order() -> None:
    def key(table: str, ts: int) -> str:
        return f'{{"ts":{ts},"scm":"s","tbl":"{table}","t":1}}'

    a = '{"u":{"a":{"t":3,"f":65,"v":1}}}'
    b = '{"u":{"b":{"t":15,"f":64,"v":"x"}}}'
    message = frame((key("x", 1), a), (key("y", 1), b), (key("x", 1), a), (key("x", 2), a), (key("y", 2), b))
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts()))
    (events,) = decoder.decode([message], [_where(0)], [_position(0)])
    (block,) = events
    assert isinstance(block, RowBlock)
    assert [(block.tables[s.table].table_schema.table, s.rows, s.commit_ts) for s in block.segments] == [
        ("x", 1, 1),
        ("y", 1, 1),
        ("x", 1, 1),
        ("x", 1, 2),
        ("y", 1, 2),
    ]
    assert_same([message, message])


def test_compressed_messages_take_the_row_decoder() -> None:
    options = opts(large_message_handle_compression="lz4")
    rows = [e for e in _fixture_events("full") if isinstance(e, RowChange)][:5]
    messages = OpenProtocolEncoder(options).encode(rows)
    assert assert_same(messages, options) == 0
    assert len(by_rows(messages, options)) == 5  # type: ignore[arg-type]


def _mutations() -> list[Message]:
    rows = [e for e in _fixture_events("full") if isinstance(e, RowChange)][:40]
    return OpenProtocolEncoder(opts()).encode(rows)


_BASE = _mutations()


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_mutated_messages_agree(data: st.DataObject) -> None:
    """One byte of one message of a stream changed: both decoders give the same events or error."""
    messages = list(_BASE[:4])
    i = data.draw(st.integers(0, len(messages) - 1))
    which = data.draw(st.sampled_from(["key", "value"]))
    blob = bytearray(getattr(messages[i], which) or b"")
    if not blob:
        return
    blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    key, value = messages[i].key, messages[i].value
    messages[i] = Message(bytes(blob), value) if which == "key" else Message(key, bytes(blob))
    assert_same(messages)


def test_big_unsigned_and_signed_edges() -> None:
    values = [
        '{"u":{"a":{"t":8,"f":193,"v":18446744073709551615}}}',
        '{"u":{"a":{"t":8,"f":65,"v":-9223372036854775808}}}',
        '{"u":{"a":{"t":1,"f":65,"v":-128}}}',
        '{"u":{"a":{"t":1,"f":193,"v":255}}}',
    ]
    for v in values:
        assert assert_same([_row(v), _row(v)]) == 2
    big_ts = frame((b'{"ts":18446744073709551615,"scm":"s","tbl":"t","t":1}', GOOD_VALUE))
    assert_same([big_ts])


def test_resolved_events_between_rows_keep_their_place() -> None:
    r = ('{"ts":1,"t":3}', "")
    message = frame((GOOD_KEY, GOOD_VALUE), r, (GOOD_KEY, GOOD_VALUE), r)
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts()))
    (events,) = decoder.decode([message], [_where(0)], [_position(0)])
    assert [type(e).__name__ for e in events] == ["RowBlock", "Resolved", "RowBlock", "Resolved"]
    assert_same([message])


def test_u64_frames_are_checked_first() -> None:
    broken = Message(struct.pack(">Q", 2) + b"x", b"")
    assert_same([GOOD, broken, GOOD])
    assert isinstance(by_rows([GOOD, broken], opts()), CodecError)


def test_operations_in_one_block() -> None:
    first = next(e for e in _fixture_events("full") if isinstance(e, RowChange) and e.new is not None)
    table, image = first.table_schema, first.new
    events: list[Event] = [
        RowChange(Op.INSERT, table, 5, new=image),
        RowChange(Op.UPDATE, table, 5, new=image, old=image),
        RowChange(Op.DELETE, table, 5, old=image),
    ]
    messages = OpenProtocolEncoder(opts()).encode(events)
    assert assert_same(messages) == 3


ORDINARY = '{"u":{"a":{"t":3,"f":65,"v":7}}}'
JOINED_VALUES = {
    # Texts that are not one document each, but whose plain comma join would read as one per text.
    "an object running on into the next value": [
        ORDINARY,
        '{"u":{"a":{"t":3,"f":65,"v":1}}},{"u":{"a":{"t":3,"f":65,"v":2}}',
        '"p":{"a":{"t":3,"f":65,"v":1}}}',
    ],
    "a string running on into the next value": [
        ORDINARY,
        '{"u":{"a":{"t":15,"f":64,"v":"x',
        'y"}}}',
        f"{ORDINARY},{ORDINARY}",
    ],
    "a value starting with a member": [ORDINARY, '{"u":{"a":{"t":3,"f":65,"v":1}}', ' "d":null}'],
    "a value with a leading space": [ORDINARY, f" {ORDINARY}"],
}


@pytest.mark.parametrize("case", sorted(JOINED_VALUES))
@pytest.mark.parametrize("framing", ["one message", "a message each"])
def test_values_that_only_join_into_documents_are_the_row_decoders(case: str, framing: str) -> None:
    values = JOINED_VALUES[case]
    if framing == "one message":
        assert_same([frame(*((GOOD_KEY, v) for v in values))])
    else:
        assert_same([_row(v) for v in values])


def _key_text(ts: int, **extra: Any) -> str:
    members = {"ts": ts, "scm": "s", "tbl": "t", "t": 1, **extra}
    return (
        "{"
        + ",".join(f'"{k}":{v if not isinstance(v, str) else chr(34) + v + chr(34)}' for k, v in members.items())
        + "}"
    )


ODD_KEYS = {
    "keys running on into each other": ['{"ts":1,"scm":"s","tbl":"t","t":1},{"ts":2', '"scm":"s","tbl":"t","t":1}'],
    "a string running on into the next key": ['{"ts":1,"scm":"s","tbl":"t","t":1,"x":"a', 'b"}'],
    "an unknown member": [_key_text(1, x=1)],
    "a partition": [_key_text(1, ptn=5)],
    "a row id": [_key_text(1, rid=5)],
    "a claim check": [_key_text(1, ccl="f")],
    "an empty claim check": [_key_text(1, ccl="")],
    "null members": ['{"ts":1,"scm":"s","tbl":"t","t":1,"rid":null,"ptn":null,"ccl":null}'],
    "ts beyond int64": [_key_text(1 << 63)],
    "negative ts": [_key_text(-1)],
    "a float ts": ['{"ts":1.0,"scm":"s","tbl":"t","t":1}'],
    "a DDL": ['{"ts":1,"scm":"s","tbl":"t","t":2}'],
    "an unknown kind": [_key_text(1, t=4)],
    "duplicate kind": ['{"ts":1,"t":3,"scm":"s","tbl":"t","t":1}'],
    "a leading space": [" " + _key_text(1)],
    "not an object": ["[1]"],
}


@pytest.mark.parametrize("case", sorted(ODD_KEYS))
def test_odd_keys_in_a_run_take_the_row_decoders_meaning(case: str) -> None:
    """A key the one-pass key parse does not take sends the call's keys through `_key`, one by one."""
    keys = ODD_KEYS[case]
    odd = frame(*((k, ORDINARY) for k in keys)) if len(keys) > 1 else _row(ORDINARY, keys[0])
    resolved = frame(('{"ts":3,"t":3}', ""))
    assert_same([GOOD, odd, GOOD, resolved])
    assert_same([GOOD, GOOD])
    assert_same([odd])


def test_a_run_of_one_table_takes_the_one_table_path() -> None:
    """Messages of one table's rows, some commit ts shared: one block for the run, at its first
    message, with a segment per commit ts of each message at that message's position."""
    rows = [(f'{{"ts":{ts},"scm":"s","tbl":"t","t":1}}', ORDINARY) for ts in (1, 1, 2, 3, 3, 3)]
    messages = [frame(*rows[:4]), frame(), frame(*rows[4:]), frame(rows[0])]
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts()))
    decoded = decoder.decode(messages, [_where(i) for i in range(4)], [_position(i) for i in range(4)])
    assert [[type(e).__name__ for e in events] for events in decoded] == [["RowBlock"], [], [], []]
    ((block,),) = decoded[0:1]
    assert [t.num_rows for t in block.tables] == [7]
    shapes = [(s.table, s.rows, s.commit_ts, s.position["offset"]) for s in block.segments]
    assert shapes == [(0, 2, 1, 0), (0, 1, 2, 0), (0, 1, 3, 0), (0, 2, 3, 2), (0, 1, 1, 3)]
    assert assert_same(messages) == 7


def test_a_run_of_one_table_starting_with_an_empty_message() -> None:
    """The run's block goes to its first message that holds rows; the empty one before it keeps none."""
    rows = [(f'{{"ts":{ts},"scm":"s","tbl":"t","t":1}}', ORDINARY) for ts in (1, 2)]
    messages = [frame(), frame(rows[0]), frame(), frame(rows[1])]
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts()))
    decoded = decoder.decode(messages, [_where(i) for i in range(4)], [_position(i) for i in range(4)])
    assert [[type(e).__name__ for e in events] for events in decoded] == [[], ["RowBlock"], [], []]
    assert [s.position["offset"] for s in decoded[1][0].segments] == [1, 3]
    assert assert_same(messages) == 2


def test_one_table_segments_are_the_dataclass() -> None:
    """`_blocks` builds segments without their ``__init__``, assigning every field: none may be added unseen."""
    assert [f.name for f in dataclasses.fields(Segment)] == ["table", "rows", "commit_ts", "position", "skip"]
    rows = [(f'{{"ts":{ts},"scm":"s","tbl":"t","t":1}}', ORDINARY) for ts in (1, 2)]
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts()))
    ((block,),) = decoder.decode([frame(*rows)], [_where(0)], [_position(0)])
    assert isinstance(block, RowBlock)
    assert block.segments == [Segment(0, 1, 1, _position(0), None), Segment(0, 1, 2, _position(0), None)]


def test_a_ddl_in_a_run_of_one_table() -> None:
    """A DDL's key sends the call's keys through `_key`; the rows around it still take the fast path."""
    ddl = frame(('{"ts":2,"scm":"s","tbl":"t","t":2}', '{"q":"ALTER TABLE t ADD b int","t":5}'))
    wide = '{"u":{"a":{"t":3,"f":65,"v":7},"b":{"t":3,"f":65,"v":8}}}'
    messages = [_row(ORDINARY), frame((GOOD_KEY, ORDINARY), (GOOD_KEY, ORDINARY)), ddl, _row(wide), _row(wide)]
    assert assert_same(messages) == 5


def test_a_run_of_one_table_with_resolved_events() -> None:
    """Resolved events between one table's rows (as TiCDC sends them to every partition): each run of
    messages of rows only still comes as one block, the others event by event in their order."""

    def row(ts: int, value: str = ORDINARY) -> tuple[str, str]:
        return (f'{{"ts":{ts},"scm":"s","tbl":"t","t":1}}', value)

    resolved = ('{"ts":2,"t":3}', "")
    other_resolved = ('{"ts":2,"scm":"x","tbl":"y","t":3}', "")
    messages = [
        frame(resolved),
        frame(row(1), row(1), row(2)),
        frame(row(3), resolved, other_resolved, row(3), row(4)),
        frame(),
        frame(row(5)),
        frame(resolved, row(6)),
        frame(row(7)),
        frame(row(7), row(8)),
    ]
    decoder = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts()))
    decoded = decoder.decode(messages, [_where(i) for i in range(8)], [_position(i) for i in range(8)])
    kinds = [[type(e).__name__ for e in events] for events in decoded]
    assert kinds == [
        ["Resolved"],
        ["RowBlock"],
        ["RowBlock", "Resolved", "Resolved", "RowBlock"],
        [],
        ["RowBlock"],
        ["Resolved", "RowBlock"],
        ["RowBlock"],
        [],
    ]
    assert [s.commit_ts for s in decoded[2][3].segments] == [3, 4]
    assert [(s.commit_ts, s.position["offset"]) for s in decoded[6][0].segments] == [(7, 6), (7, 7), (8, 7)]
    assert assert_same(messages) == 11
    negative = '{"u":{"a":{"t":5,"f":65,"v":-0}}}'  # the row decoder's alone: the group goes its way
    assert assert_same([frame(row(1, negative), resolved, row(2, negative)), frame(resolved, row(3, negative))]) == 0
    bad = '{"u":{"a":{"t":3,"f":65,"v":"x"}}}'
    assert_same([frame(row(1), resolved, row(2)), frame(resolved, row(3, bad), row(4))])
