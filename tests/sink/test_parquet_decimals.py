"""DECIMAL precision for Parquet snapshots fed by protocols that do not carry it (Open Protocol).

The precision comes from the CREATE/ALTER TABLE text of the DDL events in the stream; without
such a DDL the column stays exact text (docs/spark.md, "DECIMAL precision").
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changefeed.codec import CodecOptions, make_decoder, make_encoder
from changefeed.model import ActionType, Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.parquet import ParquetSnapshotSink

CREATE = "CREATE TABLE `s`.`t` (`id` INT PRIMARY KEY, `d` DECIMAL(12,3) NOT NULL, `n` NUMERIC(5) NULL)"
SHAPE = TableSchema(
    "s",
    "t",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("d", TypeCode.DECIMAL, length=12, decimal=3, nullable=False),
        Column("n", TypeCode.DECIMAL, length=5, decimal=0),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)
VALUES = [
    (1, Decimal("123456789.123"), Decimal("99999")),
    (2, Decimal("-0.001"), None),
    (3, Decimal("-999999999.999"), Decimal("-1")),
]


def _through(protocol: str | CodecOptions, events: list[Event]) -> list[Event]:
    """``events`` encoded with ``protocol`` and decoded back, as `changefeed apply` reads a topic."""
    opts = protocol if isinstance(protocol, CodecOptions) else CodecOptions(protocol=protocol)
    enc, dec = make_encoder(opts), make_decoder(opts)
    out: list[Event] = []
    for ev in events:
        if isinstance(ev, RowChange):
            enc.append_row(ev)
            msgs = enc.build()
        elif isinstance(ev, DDLEvent):
            msgs = [enc.encode_ddl(ev)]
        else:
            msg = enc.encode_resolved(ev)
            msgs = [msg] if msg is not None else []
        for msg in msgs:
            out.extend(dec.decode(msg))
    return out


def _stream(with_ddl: bool) -> list[Event]:
    events: list[Event] = []
    if with_ddl:
        events.append(DDLEvent("s", "t", CREATE, int(ActionType.CREATE_TABLE), 5, table_schema=SHAPE))
    events += [RowChange(Op.INSERT, SHAPE, 10 + i, new=v) for i, v in enumerate(VALUES)]
    events.append(Resolved(20))
    return events


def _snapshot(root: Path) -> pa.Table:
    return pq.read_table(root / "s/t/snapshot.parquet")


def _applied(root: Path, events: list[Event]) -> pa.Table:
    """The snapshot a fresh sink at ``root`` publishes after ``events``."""
    sink = ParquetSnapshotSink(root)
    sink.write(events)
    sink.flush()
    return _snapshot(root)


def _assert_precise(table: pa.Table) -> None:
    """DECIMAL(12,3) typed from what the stream told, and every value exact."""
    assert table.schema.field("d").type == pa.decimal128(12, 3)
    assert [(r["id"], r["d"], r["n"]) for r in sorted(table.to_pylist(), key=lambda r: r["id"])] == VALUES


def test_open_protocol_decimal_precision_from_the_create_table(tmp_path: Path) -> None:
    events = _through("open-protocol", _stream(with_ddl=True))
    rows = [e for e in events if isinstance(e, RowChange)]
    assert rows and rows[0].table_schema.column("d").length is None  # the protocol does not carry it
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(events)
    sink.flush()
    table = _snapshot(tmp_path)
    assert table.schema.field("d").type == pa.decimal128(12, 3)
    assert table.schema.field("n").type == pa.decimal128(5, 0)
    got = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["d"], r["n"]) for r in got] == VALUES
    assert [str(r["d"]) for r in got] == ["123456789.123", "-0.001", "-999999999.999"]  # exact, scale 3

    # A restart without the DDL (Kafka resumes after it): the snapshot's own shape keeps the precision.
    again = ParquetSnapshotSink(tmp_path)
    bare = [e for e in _through("open-protocol", _stream(with_ddl=False)) if isinstance(e, RowChange)]
    update = RowChange(Op.UPDATE, bare[0].table_schema, 30, new=(2, Decimal("5.500"), Decimal("7")), old=bare[1].new)
    again.write([update, Resolved(31)])
    again.flush()
    table = _snapshot(tmp_path)
    assert table.schema.field("d").type == pa.decimal128(12, 3)
    assert sorted(table.to_pylist(), key=lambda r: r["id"])[1] == {"id": 2, "d": Decimal("5.500"), "n": Decimal("7")}


def test_alter_table_changes_the_learned_precision(tmp_path: Path) -> None:
    events = _through("open-protocol", _stream(with_ddl=True))
    wider = TableSchema(
        "s",
        "t",
        (*SHAPE.columns[:1], Column("d", TypeCode.DECIMAL, length=14, decimal=4), SHAPE.columns[2]),
        SHAPE.indexes,
    )
    alter = "ALTER TABLE t MODIFY COLUMN d DECIMAL(14,4) NOT NULL"
    events += _through(
        "open-protocol",
        [
            DDLEvent("s", "t", alter, int(ActionType.MODIFY_COLUMN), 40, table_schema=wider),
            RowChange(Op.INSERT, wider, 41, new=(4, Decimal("1.2345"), None)),
            Resolved(42),
        ],
    )
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(events)
    sink.flush()
    table = _snapshot(tmp_path)
    assert table.schema.field("d").type == pa.decimal128(14, 4)
    assert sorted(table.to_pylist(), key=lambda r: r["id"])[-1]["d"] == Decimal("1.2345")


def test_open_protocol_without_the_ddl_keeps_exact_text(tmp_path: Path) -> None:
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(_through("open-protocol", _stream(with_ddl=False)))
    sink.flush()
    table = _snapshot(tmp_path)
    assert table.schema.field("d").type == pa.string() and table.schema.field("n").type == pa.string()
    got = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert [(r["d"], r["n"]) for r in got] == [("123456789.123", "99999"), ("-0.001", None), ("-999999999.999", "-1")]


def test_a_value_that_does_not_fit_stale_precision_falls_back_to_text(tmp_path: Path) -> None:
    # The DDL seen says DECIMAL(12,3) but the rows carry 4 fraction digits (a change not seen).
    events = _through("open-protocol", _stream(with_ddl=True))
    bare = next(e for e in events if isinstance(e, RowChange)).table_schema
    events.append(RowChange(Op.INSERT, bare, 21, new=(9, Decimal("1.2345"), None)))
    events.append(Resolved(22))
    sink = ParquetSnapshotSink(tmp_path)
    sink.write(events)
    sink.flush()
    table = _snapshot(tmp_path)
    assert table.schema.field("d").type == pa.string()
    assert sorted(table.to_pylist(), key=lambda r: r["id"])[-1]["d"] == "1.2345"


@pytest.mark.parametrize(
    ("content_compatible", "with_ddl"),
    [(True, False), (False, True)],
    ids=["mysqlType-carries-it", "default-mysqlType-learns-from-ddl"],
)
def test_canal_json_decimals(tmp_path: Path, content_compatible: bool, with_ddl: bool) -> None:
    # TiCDC's default mysqlType is the bare "decimal"; content-compatible=true writes "decimal(12,3)".
    opts = CodecOptions(protocol="canal-json", enable_tidb_extension=True, content_compatible=content_compatible)
    events = _through(opts, _stream(with_ddl=with_ddl))
    rows = [e for e in events if isinstance(e, RowChange)]
    carried = (rows[0].table_schema.column("d").length, rows[0].table_schema.column("d").decimal)
    assert carried == ((12, 3) if content_compatible else (None, None))
    _assert_precise(_applied(tmp_path, events))


def test_open_protocol_columnar_blocks_get_the_precision_too(tmp_path: Path) -> None:
    # The apply job's columnar Kafka path: rows arrive as RowBlocks from the block decoder.
    from changefeed.codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder  # noqa: PLC0415

    opts = CodecOptions(protocol="open-protocol")
    enc = make_encoder(opts)
    messages = [enc.encode_ddl(_stream(with_ddl=True)[0])]  # type: ignore[arg-type]
    for ev in _stream(with_ddl=False)[:-1]:
        enc.append_row(ev)  # type: ignore[arg-type]
    messages += enc.build()
    decoded = OpenProtocolBlockDecoder(OpenProtocolDecoder(opts)).decode(
        messages, ["w"] * len(messages), [{}] * len(messages)
    )
    events = [ev for evs in decoded for ev in evs] + [Resolved(20)]
    assert any(type(ev).__name__ == "RowBlock" for ev in events)
    _assert_precise(_applied(tmp_path, events))
