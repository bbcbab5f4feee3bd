"""The block Debezium decoder gives exactly the row decoder's events, errors included.

Reference: `DebeziumDecoder.decode` message by message, each event positioned at its message (as
the Kafka input does). The block decoder's `RowBlock`s are expanded to `RowChange`s for the
comparison (start ts, positions and value types too). Streams come from the every-type binlog
fixture encoded in every option set, from generated tables and rows, and from hand-written and
mutated hostile messages, with watermarks, DDLs and tombstones between the rows.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.codec import CodecOptions, Message
from changefeed.codec.debezium import DebeziumDecoder, DebeziumEncoder
from changefeed.codec.debezium.blocks import DebeziumBlockDecoder, _doubles_as_decimals
from changefeed.codec.debezium.values import _decimal_parser
from changefeed.errors import CodecError
from changefeed.model import DDLEvent, Event, Op, Resolved, RowChange, TableSchema
from changefeed.model.events import trusted_row
from changefeed.model.rowblock import RowBlock, expand_blocks
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


def by_rows(messages: list[Message], options: CodecOptions, given: list[TableSchema]) -> list[Event] | CodecError:
    decoder = _decoder(options, given)
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


def by_blocks(
    messages: list[Message], options: CodecOptions, given: list[TableSchema], run: int
) -> tuple[list[Event] | CodecError, int]:
    """(the events with blocks expanded, or the error; rows that came as blocks), decoding runs of
    ``run`` messages with one long-lived decoder (as the Kafka input does)."""
    decoder = DebeziumBlockDecoder(_decoder(options, given))
    out: list[Event] = []
    columnar = 0
    for at in range(0, len(messages), run):
        part = range(at, min(at + run, len(messages)))
        try:
            decoded = decoder.decode(
                [messages[i] for i in part], [_where(i) for i in part], [_position(i) for i in part]
            )
        except CodecError as e:
            return e, columnar
        for i, events in zip(part, decoded, strict=True):
            for ev in events:
                if isinstance(ev, RowBlock):
                    columnar += ev.num_rows
                    assert all(s.position == _position(i) for s in ev.segments)
                else:
                    assert ev.position == _position(i)
            out.extend(expand_blocks(events))
    return out, columnar


def assert_same(
    messages: list[Message], options: CodecOptions, given: list[TableSchema] = (), runs: tuple[int, ...] = (4096, 3)
) -> int:
    """Both decoders agree (in any run length); returns how many rows came as blocks."""
    expected = by_rows(messages, options, list(given))
    columnar = 0
    for run in runs:
        got, columnar = by_blocks(messages, options, list(given), run)
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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
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


def test_mutated_messages_are_the_row_decoders() -> None:
    """Random byte edits of good messages: the same events, or the same first error."""
    rnd = random.Random(19)
    good = _good()
    alphabet = b'{}[]",:0123456789-.eEtrufalsn \\x\xff'
    for _ in range(300):
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
                assert ev.num_rows == 1
                (row,) = ev.rows()
                assert row.start_ts > 0
                rows = ev.tables[0]
                assert rows.batch.num_rows == 1 and rows.origin[0].num_rows >= 1


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
    assert [r.start_ts for r in want] == [r.start_ts for b in blocks if b.tables[0].origin[0] is root for r in b.rows()]
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
