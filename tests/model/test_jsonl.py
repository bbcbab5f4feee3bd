"""The JSONL interchange form: lossless round trips and clear errors (docs/events.md)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changefeed.errors import EventFormatError
from changefeed.model import (
    ABSENT,
    ActionType,
    Column,
    DDLEvent,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
)
from changefeed.model.jsonl import EventReader, dumps_event, dumps_inserts, table_schema_to_json
from changefeed.model.rowblock import RowBlock, expand_blocks
from tests.strategies import row_changes, tables

T1 = TableSchema(
    "test",
    "t1",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("val", TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin", length=16),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)


@settings(max_examples=300, deadline=None)
@given(row_changes())
def test_row_round_trip(event: RowChange) -> None:
    assert EventReader().parse(dumps_event(event)) == event


@settings(max_examples=200, deadline=None)
@given(row_changes())
def test_an_inserts_line_gives_the_rows_row_lines_give(event: RowChange) -> None:
    """``dumps_inserts`` (a snapshot chunk's rows: one table, one commit ts) reads back as row lines do."""
    if event.op is not Op.INSERT or event.new is None or ABSENT in event.new:
        return
    rows = [event, RowChange(Op.INSERT, event.table_schema, event.commit_ts, new=event.new)]
    line = dumps_inserts(event.table_schema, event.commit_ts, [r.new for r in rows if r.new is not None])
    got = list(EventReader().read([line]))
    assert got == [EventReader().parse(dumps_event(r)) for r in rows]
    assert len(line) < sum(len(dumps_event(r)) for r in rows)
    with pytest.raises(EventFormatError, match="not one"):
        EventReader().parse(line)


@settings(max_examples=100, deadline=None)
@given(
    row_changes(), st.lists(st.sampled_from([None, {"offset": 1}, {"offset": 2, "topic": "t"}]), min_size=1, max_size=5)
)
def test_an_inserts_line_keeps_each_rows_position(event: RowChange, positions: list[Any]) -> None:
    """Positions as row lines keep them: one ``position`` where all rows share it, else ``positions``."""
    if event.op is not Op.INSERT or event.new is None or ABSENT in event.new:
        return
    rows = [RowChange(Op.INSERT, event.table_schema, event.commit_ts, new=event.new, position=q) for q in positions]
    line = dumps_inserts(event.table_schema, event.commit_ts, [event.new] * len(rows), positions)
    assert list(EventReader().read([line])) == [EventReader().parse(dumps_event(r)) for r in rows]
    assert ("positions" in orjson.loads(line)) == (len(set(map(repr, positions))) > 1)
    assert list(expand_blocks(EventReader().read_blocks([line]))) == list(EventReader().read([line]))


@pytest.mark.parametrize("positions", ['[{"offset":1}]', '{"offset":1}', "[1,2]", '[null,"x"]'])
def test_an_inserts_line_with_bad_positions_is_an_error(positions: str) -> None:
    table = TableSchema("s", "t", (Column("i", TypeCode.BIGINT),))
    line = dumps_inserts(table, 7, [(1,), (2,)], [{"offset": 1}, {"offset": 2}])
    line = line.replace(b'"positions":[{"offset":1},{"offset":2}]', b'"positions":' + positions.encode())
    with pytest.raises(EventFormatError, match="'positions' must be 2 objects or nulls"):
        list(EventReader(source="f").read([line]))


@settings(max_examples=100, deadline=None)
@given(st.lists(row_changes(), min_size=1, max_size=6))
def test_an_inserts_line_as_a_block_is_the_rows_it_holds(events: list[RowChange]) -> None:
    """`read_blocks` gives an ``inserts`` line's rows as one `RowBlock` a column at a time (or, where a
    value is unusual, as `RowChange`s): expanded, exactly the rows `read` gives, in every type."""
    first = events[0]
    images = [e.new for e in events if e.table_schema == first.table_schema and e.new is not None]
    images = [i for i in images if ABSENT not in i]
    if not images:
        return
    line = dumps_inserts(first.table_schema, first.commit_ts, images)
    want = list(EventReader().read([line]))
    got = list(EventReader().read_blocks([line]))
    assert list(expand_blocks(got)) == want
    assert [type(g) for g in got] in ([RowBlock], [RowChange] * len(images))


def test_plain_inserts_lines_come_as_blocks() -> None:
    """The snapshot's usual chunk: every column type read column-wise (no row-path fallback)."""
    table = TableSchema(
        "s",
        "t",
        (
            Column("i", TypeCode.BIGINT),
            Column("m", TypeCode.MEDIUMINT, unsigned=True),
            Column("d", TypeCode.DECIMAL, length=10, decimal=2),
            Column("dt", TypeCode.DECIMAL),
            Column("f", TypeCode.FLOAT),
            Column("g", TypeCode.DOUBLE),
            Column("s", TypeCode.VARCHAR, length=10, charset="utf8mb4", collation="utf8mb4_bin"),
            Column("b", TypeCode.VARCHAR, length=10, charset="binary"),
            Column("t", TypeCode.DATETIME, decimal=3),
            Column("e", TypeCode.ENUM, elements=("a", "b")),
            Column("y", TypeCode.YEAR),
        ),
    )
    images = [
        (1, 16777215, Decimal("12.50"), Decimal("-0.001"), 0.5, 1e300, "日本", b"\x00", "2024-01-02 03:04", 2, 2024),
        (None,) * 11,
    ]
    line = dumps_inserts(table, 7, images)
    got = list(EventReader().read_blocks([line]))
    assert [type(g) for g in got] == [RowBlock]
    assert list(expand_blocks(got)) == list(EventReader().read([line]))


@pytest.mark.parametrize(
    ("column", "value"),
    [
        (Column("m", TypeCode.MEDIUMINT), 1 << 23),  # within int32, beyond MEDIUMINT
        (Column("i", TypeCode.INT), True),  # a JSON true is no int
        (Column("i", TypeCode.INT), 1.5),  # Arrow would truncate it
        (Column("f", TypeCode.FLOAT), 1e300),  # beyond float32
        (Column("d", TypeCode.DECIMAL, length=10, decimal=2), "1e-58"),  # Arrow misreads exponent forms
        (Column("d", TypeCode.DECIMAL, length=10, decimal=2), "1.234"),  # more digits than the scale
        (Column("b", TypeCode.BLOB, charset="binary"), "not base64!"),
    ],
)
def test_unusual_inserts_values_take_the_row_path(column: Column, value: object) -> None:
    """A value the column-wise read is not sure of leaves the line to `read`, errors included."""
    table = TableSchema("s", "t", (column,))
    line = orjson.dumps(
        {"kind": "inserts", "commit_ts": 1, "table_schema": table_schema_to_json(table), "rows": [[value]]}
    )
    try:
        want: object = list(EventReader().read([line]))
    except EventFormatError as exc:
        with pytest.raises(EventFormatError, match=re.escape(exc.message)):
            list(EventReader().read_blocks([line]))
        return
    got = list(EventReader().read_blocks([line]))
    assert [type(g) for g in got] == [RowChange] and got == want


@settings(max_examples=50, deadline=None)
@given(tables(), tables())
def test_ddl_round_trip(after: TableSchema, before: TableSchema) -> None:
    ddl = DDLEvent(after.schema, after.table, "ALTER TABLE t ADD c INT", ActionType.ADD_COLUMN, 7, after, before)
    assert EventReader().parse(dumps_event(ddl)) == ddl


def test_documented_insert_line() -> None:
    row = RowChange(Op.INSERT, T1, 415508878783938562, new=(1, "aa"), position={"file": "binlog.000001", "pos": 4})
    line = dumps_event(row)
    assert line == (
        b'{"kind":"row","op":"insert","schema":"test","table":"t1","table_id":0,"schema_version":0,'
        b'"commit_ts":415508878783938562,"columns":[{"name":"id","type":"int","flags":11,"value":1},'
        b'{"name":"val","type":"varchar","flags":64,"charset":"utf8mb4","collation":"utf8mb4_bin","length":16,'
        b'"value":"aa"}],"indexes":[{"name":"PRIMARY","columns":["id"],"primary":true,"unique":true}],'
        b'"position":{"file":"binlog.000001","pos":4}}\n'
    )
    assert EventReader().parse(line) == row


def test_delete_and_absent_columns() -> None:
    row = RowChange(Op.DELETE, T1, 5, old=(1, ABSENT))
    line = dumps_event(row)
    assert b'"old":[{"name":"id","value":1}]' in line and b'"value"' not in line.split(b'"old"')[0]
    assert EventReader().parse(line) == row


def test_update_without_old_image_is_allowed() -> None:
    row = RowChange(Op.UPDATE, T1, 5, new=(1, "x"))
    assert EventReader().parse(dumps_event(row)) == row


def test_resolved_and_reader_shares_schemas() -> None:
    reader = EventReader()
    lines = [
        dumps_event(RowChange(Op.INSERT, T1, 1, new=(1, "a"))),
        dumps_event(RowChange(Op.INSERT, T1, 2, new=(2, "b"))),
        dumps_event(Resolved(3)),
    ]
    a, b, r = list(reader.read(lines))
    assert a.table_schema is b.table_schema
    assert r == Resolved(3)


def test_values_are_typed_back() -> None:
    t = TableSchema(
        "s",
        "t",
        (
            Column("id", TypeCode.BIGINT, unsigned=True, nullable=False),
            Column("d", TypeCode.DECIMAL, length=65, decimal=30),
            Column("b", TypeCode.BLOB, charset="binary"),
            Column("f", TypeCode.FLOAT),
        ),
        (Index("PRIMARY", ("id",), primary=True),),
    )
    row = RowChange(Op.INSERT, t, 1, new=(2**64 - 1, Decimal("1." + "0" * 30), bytes(range(256)), 0.5))
    back = EventReader().parse(dumps_event(row))
    assert back.new == row.new and isinstance(back.new[1], Decimal)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1]", "must be a JSON object"),
        (b'{"kind":"nope"}', "unknown event kind"),
        (b'{"kind":"resolved","commit_ts":-1}', "non-negative integer"),
        (b'{"kind":"row","op":"insert","schema":"s","table":"t","commit_ts":1,"columns":[]}', "non-empty"),
        (
            b'{"kind":"row","op":"insert","schema":"s","table":"t","commit_ts":1,'
            b'"columns":[{"name":"a","type":"tinyint","flags":0,"value":300}]}',
            "out of range",
        ),
        (
            b'{"kind":"row","op":"insert","schema":"s","table":"t","commit_ts":1,'
            b'"columns":[{"name":"a","type":"nosuch","flags":0,"value":1}]}',
            "unknown MySQL type",
        ),
        (
            b'{"kind":"row","op":"update","schema":"s","table":"t","commit_ts":1,'
            b'"columns":[{"name":"a","type":"int","flags":0,"value":1}],"old":[{"name":"zz","value":1}]}',
            "unknown columns",
        ),
        (b'{"kind":"row","op":"insert","schema":"s","table":"t","commit_ts":1}', "missing member"),
        (
            b'{"kind":"inserts","commit_ts":1,"table_schema":{"schema":"s","table":"t",'
            b'"columns":[{"name":"a","type":"int","flags":0}]},"rows":[[1],[2,3]]}',
            "lists of 1 values",
        ),
        (
            b'{"kind":"inserts","commit_ts":1,"table_schema":{"schema":"s","table":"t",'
            b'"columns":[{"name":"a","type":"tinyint","flags":0}]},"rows":[[1],[300]]}',
            "out of range",
        ),
        (b'{"kind":"inserts","commit_ts":1,"rows":[]}', "missing member"),
    ],
)
def test_bad_lines_name_the_line(line: bytes, message: str) -> None:
    reader = EventReader("events.jsonl")
    with pytest.raises(EventFormatError, match=message) as info:
        list(reader.read([b"\n", line]))
    assert info.value.where == "events.jsonl:2"
