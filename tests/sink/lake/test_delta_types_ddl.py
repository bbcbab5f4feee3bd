"""delta://: every MySQL type's values read back exactly, DDL evolution, real binlog row blocks."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from changefeed.capture.binlog import BinlogPosition
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.model import ActionType, Column, DDLEvent, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.rowblock import RowBlock, expand_blocks
from changefeed.sink.lake.common import LakeDDLError, LakeError, LakeOptions
from changefeed.sink.lake.delta import DeltaSink, read_delta

from .helpers import UTF8, T, ins, resolved, shape, ts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlog"
D65 = Decimal("12345678901234567890123456789012345.123456789012345678901234567891")

TYPES = TableSchema(
    "shop",
    "types",
    (
        Column("id", TypeCode.BIGINT, unsigned=True, nullable=False),
        Column("d65", TypeCode.DECIMAL, length=65, decimal=30),
        Column("d38", TypeCode.DECIMAL, length=38, decimal=10),
        Column("dt6", TypeCode.DATETIME, decimal=6),
        Column("ts", TypeCode.TIMESTAMP, decimal=3),
        Column("d", TypeCode.DATE),
        Column("t", TypeCode.TIME, decimal=6),
        Column("y", TypeCode.YEAR),
        Column("b1", TypeCode.BIT, length=1),
        Column("b64", TypeCode.BIT, length=64),
        Column("j", TypeCode.JSON),
        Column("e", TypeCode.ENUM, elements=("small", "large"), **UTF8),
        Column("s", TypeCode.SET, elements=("a", "b", "c"), **UTF8),
        Column("tu", TypeCode.TINYINT, unsigned=True),
        Column("f", TypeCode.FLOAT),
        Column("bin", TypeCode.VARCHAR, length=8),
        Column("txt", TypeCode.BLOB, **UTF8),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)
VALUES = (
    2**64 - 1,
    D65,
    Decimal("1234567890123456789012345678.0123456789"),
    "9999-12-31 23:59:59.999999",
    "2038-01-19 03:14:07.123",
    "1000-01-01",
    "-838:59:59.000000",
    2155,
    1,
    2**64 - 1,
    '{"k": [1, "文"]}',
    2,
    0b101,
    255,
    1.5,
    b"\x00\xff",
    "ünï 🎉",
)
EXPECTED = {
    "id": Decimal(2**64 - 1),
    "d65": format(D65, "f"),
    "d38": Decimal("1234567890123456789012345678.0123456789"),
    "dt6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 123000, tzinfo=dt.UTC),
    "d": dt.date(1000, 1, 1),
    "t": "-838:59:59.000000",
    "y": 2155,
    "b1": 1,
    "b64": Decimal(2**64 - 1),
    "j": '{"k": [1, "文"]}',
    "e": 2,
    "s": Decimal(5),
    "tu": 255,
    "f": 1.5,
    "bin": b"\x00\xff",
    "txt": "ünï 🎉",
}


def test_every_type_reads_back_exactly(tmp_path: Path) -> None:
    s = DeltaSink(tmp_path)
    s.open()
    s.write([RowChange(Op.INSERT, TYPES, ts(1), new=VALUES), resolved(1)])
    s.flush()
    table = read_delta(tmp_path / "shop/types")
    assert table.to_pylist() == [EXPECTED]
    assert table.schema.field("d38").type == pa.decimal128(38, 10)
    assert table.schema.field("dt6").type == pa.timestamp("us")
    assert table.schema.field("ts").type == pa.timestamp("us", "UTC")
    # the key is an unsigned BIGINT held as DECIMAL(20,0): an update finds the row by it
    s.write([RowChange(Op.UPDATE, TYPES, ts(2), new=(VALUES[0], *VALUES[1:-1], "new"), old=VALUES), resolved(2)])
    s.flush()
    assert [r["txt"] for r in read_delta(tmp_path / "shop/types").to_pylist()] == ["new"]


def test_zero_dates_become_null_and_bad_values_are_refused_naming_table_and_ts(tmp_path: Path) -> None:
    t = shape(extra=(Column("d", TypeCode.DATE), Column("at", TypeCode.DATETIME)))
    s = DeltaSink(tmp_path)
    s.open()
    s.write([ins(t, 1, 1, "a", "1.00", "0000-00-00", "2024-00-01 00:00:00"), resolved(1)])
    s.flush()
    assert read_delta(tmp_path / "shop/orders").to_pylist()[0] | {"note": "a"} == {
        "id": 1,
        "note": "a",
        "amount": Decimal("1.00"),
        "d": None,
        "at": None,
    }
    with pytest.raises(LakeError, match=r"'shop'\.'orders': column 'd' \(DATE\): a value '2024-13-01'.*commit ts \d+"):
        s.write([ins(t, 2, 2, "b", "1.00", "2024-13-01", None)])


def test_backtick_in_a_column_name_is_refused(tmp_path: Path) -> None:
    t = shape(extra=(Column("a`b", TypeCode.INT),))
    s = DeltaSink(tmp_path)
    s.open()
    s.write([ins(t, 1, 1, "a", "1.00", 5), resolved(1)])
    with pytest.raises(LakeError, match="backtick"):
        s.flush()


def _ddl(t: TableSchema, n: int, query: str, action: ActionType) -> DDLEvent:
    return DDLEvent(t.schema, t.table, query, action, ts(n), table_schema=t)


def test_add_drop_widen_truncate_drop(tmp_path: Path) -> None:
    path = tmp_path / "shop/orders"
    s = DeltaSink(tmp_path)
    s.open()
    s.write([_ddl(T, 1, "CREATE TABLE orders (...)", ActionType.CREATE_TABLE), resolved(1)])
    s.flush()
    assert read_delta(path).num_rows == 0  # created by its DDL, before any row
    added = shape(extra=(Column("qty", TypeCode.TINYINT),))
    widened = shape(extra=(Column("qty", TypeCode.INT),))
    dropped = TableSchema("shop", "orders", (T.columns[0], T.columns[2], widened.columns[3]), T.indexes)
    s.write(
        [
            ins(T, 2, 1, "a"),
            _ddl(added, 3, "ALTER TABLE orders ADD COLUMN qty TINYINT", ActionType.ADD_COLUMN),
            ins(added, 4, 2, "b", "2.00", 7),
            _ddl(widened, 5, "ALTER TABLE orders MODIFY qty INT", ActionType.MODIFY_COLUMN),
            RowChange(Op.INSERT, widened, ts(6), new=(3, "c", Decimal("3.00"), 100_000)),
            _ddl(dropped, 7, "ALTER TABLE orders DROP COLUMN note", ActionType.DROP_COLUMN),
            resolved(7),
        ]
    )
    s.flush()
    table = read_delta(path)
    assert table.schema.names == ["id", "amount", "qty"]
    assert table.schema.field("qty").type == pa.int32()
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "amount": Decimal("1.00"), "qty": None},
        {"id": 2, "amount": Decimal("2.00"), "qty": 7},
        {"id": 3, "amount": Decimal("3.00"), "qty": 100_000},
    ]
    before_truncate = DeltaTable(str(path)).version()
    s.write([_ddl(dropped, 8, "TRUNCATE TABLE orders", ActionType.TRUNCATE_TABLE), resolved(8)])
    s.flush()
    assert read_delta(path).num_rows == 0
    assert read_delta(path, before_truncate).num_rows == 3  # history stays
    s.write([RowChange(Op.INSERT, dropped, ts(9), new=(4, Decimal("4.00"), 1)), resolved(9)])
    s.write([_ddl(dropped, 10, "DROP TABLE orders", ActionType.DROP_TABLE), resolved(10)])
    s.flush()
    assert read_delta(path).num_rows == 0
    # replaying the whole stream after a restart changes nothing
    version = DeltaTable(str(path)).version()
    again = DeltaSink(tmp_path)
    assert again.open() == ts(10)
    again.write([ins(T, 2, 1, "a"), _ddl(dropped, 8, "TRUNCATE TABLE orders", ActionType.TRUNCATE_TABLE)])
    again.flush()
    assert DeltaTable(str(path)).version() == version


def test_narrowing_is_refused_naming_the_ddl(tmp_path: Path) -> None:
    s = DeltaSink(tmp_path)
    s.open()
    s.write([ins(T, 1, 1, "a"), resolved(1)])
    s.flush()
    narrowed = TableSchema("shop", "orders", (T.columns[0], Column("note", TypeCode.INT), T.columns[2]), T.indexes)
    s.write([_ddl(narrowed, 2, "ALTER TABLE orders MODIFY note INT", ActionType.MODIFY_COLUMN), resolved(2)])
    with pytest.raises(LakeDDLError, match=r"DDL 'ALTER TABLE orders MODIFY note INT' at commit ts \d+ changes column"):
        s.flush()


@pytest.mark.parametrize("mode", ["upsert", "changelog", "scd2"])
@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_column_renames_keep_their_data(tmp_path: Path, kind: str, mode: str) -> None:
    """RENAME COLUMN and CHANGE old new (with a widening) carry the stored values over, under the new names
    (changelog: its before-image column too); a replay after a restart changes nothing."""
    from changefeed.sink.lake.iceberg import IcebergSink  # noqa: PLC0415

    from .test_iceberg import catalog  # noqa: PLC0415

    def sink() -> Any:
        made = (DeltaSink if kind == "delta" else IcebergSink)(tmp_path, LakeOptions(mode=mode))
        made.open()
        return made

    def read() -> pa.Table:
        if kind == "delta":
            return read_delta(tmp_path / "shop/orders")
        return catalog(tmp_path).load_table(("shop", "orders")).scan().to_arrow()

    memo = Column("memo", TypeCode.VARCHAR, length=64, **UTF8)
    total = Column("total", TypeCode.DECIMAL, length=12, decimal=2)
    renamed = TableSchema("shop", "orders", (T.columns[0], memo, T.columns[2]), T.indexes)
    changed = TableSchema("shop", "orders", (T.columns[0], memo, total), T.indexes)
    stream = [
        ins(T, 1, 1, "a"),
        resolved(1),
        _ddl(renamed, 2, "ALTER TABLE orders RENAME COLUMN note TO memo", ActionType.MODIFY_COLUMN),
        ins(renamed, 3, 2, "b", "2.00"),
        _ddl(changed, 4, "ALTER TABLE orders CHANGE COLUMN amount total DECIMAL(12,2)", ActionType.MODIFY_COLUMN),
        RowChange(Op.INSERT, changed, ts(5), new=(3, "c", Decimal("12345678.90"))),
        resolved(5),
    ]
    s = sink()
    s.write(stream)
    s.flush()
    table = read()
    assert {"memo", "total"} <= set(table.schema.names) and not {"note", "amount"} & set(table.schema.names)
    if mode == "changelog":
        assert {"_cf_before_memo", "_cf_before_total"} <= set(table.schema.names)
    rows = sorted((r["id"], r["memo"], r["total"]) for r in table.to_pylist())
    assert rows == [(1, "a", Decimal("1.00")), (2, "b", Decimal("2.00")), (3, "c", Decimal("12345678.90"))]
    again = sink()
    again.write(stream)
    again.flush()
    assert read().num_rows == table.num_rows


def _binlog_events() -> list[Any]:
    """The binlog fixture's events as row blocks, its RENAME TABLE included."""
    path = FIXTURES / "full"
    opener = lambda at: BinlogFileReader(path, at.file or None, at.pos)  # noqa: E731
    out = []
    for event in BlockCapture(opener, BinlogPosition("binlog.000001", 4), block_rows=3).blocks():
        out.append(event)
    return out


def test_binlog_blocks_and_rows_give_the_same_tables(tmp_path: Path) -> None:
    events = _binlog_events()
    assert any(isinstance(e, RowBlock) for e in events)
    last = max(e.commit_ts for e in expand_blocks(events))
    for root, batch in (("blocks", events), ("rows", list(expand_blocks(events)))):
        s = DeltaSink(tmp_path / root, LakeOptions(time_zone="UTC"))
        s.open()
        s.write([*batch, Resolved(last)])
        s.flush()
    names = sorted(p.relative_to(tmp_path / "blocks") for p in (tmp_path / "blocks").glob("*/*") if p.is_dir())
    assert [str(n) for n in names] == ["cf/ints2", "cf/nums", "cf/strs", "cf/times"]  # ints renamed by the binlog
    for name in names:
        by_blocks = read_delta(tmp_path / "blocks" / name).sort_by("id")
        assert by_blocks.num_rows > 0
        assert by_blocks.equals(read_delta(tmp_path / "rows" / name).sort_by("id")), name
    ints = read_delta(tmp_path / "blocks/cf/ints2")
    assert ints.schema.field("ti").type == pa.int16()  # MODIFY ti SMALLINT widened the stored column
    assert "extra" not in ints.schema.names  # ADD then DROP COLUMN
    nums = read_delta(tmp_path / "blocks/cf/nums")
    assert nums.schema.field("d65").type == pa.string() and nums.schema.field("d18").type == pa.decimal128(18, 9)


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_column_swap_through_a_temporary_name(tmp_path: Path, kind: str) -> None:
    """``RENAME COLUMN a TO t, RENAME COLUMN b TO a, RENAME COLUMN t TO b``: the values follow their columns."""
    from changefeed.sink.lake.iceberg import IcebergSink  # noqa: PLC0415

    from .test_iceberg import catalog  # noqa: PLC0415

    a = Column("a", TypeCode.VARCHAR, length=8, **UTF8)
    b = Column("b", TypeCode.VARCHAR, length=8, **UTF8)
    before = TableSchema("shop", "orders", (T.columns[0], a, b), T.indexes)
    after = TableSchema("shop", "orders", (T.columns[0], b, a), T.indexes)  # the stored order stays, names swap
    query = "ALTER TABLE orders RENAME COLUMN a TO t, RENAME COLUMN b TO a, RENAME COLUMN t TO b"
    s = (DeltaSink if kind == "delta" else IcebergSink)(tmp_path)
    s.open()
    s.write([RowChange(Op.INSERT, before, ts(1), new=(1, "was a", "was b")), resolved(1)])
    s.flush()
    s.write([_ddl(after, 2, query, ActionType.MODIFY_COLUMN), resolved(2)])
    s.flush()
    if kind == "delta":
        table = read_delta(tmp_path / "shop/orders")
    else:
        table = catalog(tmp_path).load_table(("shop", "orders")).scan().to_arrow()
    assert table.to_pylist() == [{"id": 1, "a": "was b", "b": "was a"}]


def _lake(kind: str, root: Path) -> Any:
    from changefeed.sink.lake.iceberg import IcebergSink  # noqa: PLC0415

    made = (DeltaSink if kind == "delta" else IcebergSink)(root)
    made.open()
    return made


def _rows(kind: str, root: Path, table: str) -> list[dict[str, Any]] | None:
    """The stored rows of shop.<table>, sorted by id; None when the lake has no such table."""
    from .test_iceberg import catalog  # noqa: PLC0415

    if kind == "delta":
        path = root / "shop" / table
        return sorted(read_delta(path).to_pylist(), key=lambda r: r["id"]) if path.exists() else None
    cat = catalog(root)
    if not cat.table_exists(("shop", table)):
        return None
    return sorted(cat.load_table(("shop", table)).scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def _rename(n: int, query: str) -> DDLEvent:
    return DDLEvent("shop", "", query, ActionType.RENAME_TABLE, ts(n))


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_rename_table_moves_the_table_and_a_replay_does_not_bring_it_back(tmp_path: Path, kind: str) -> None:
    """RENAME TABLE mid-batch (rows before it under the old name, after it under the new one); a swap through a
    temporary name in one statement; a restart replaying everything changes nothing."""
    other = shape(table="other")
    v2 = shape(table="orders_v2")
    stream = [
        ins(T, 1, 1, "a"),
        ins(other, 1, 9, "o"),
        resolved(1),
        ins(T, 2, 2, "b"),
        _rename(3, "RENAME TABLE shop.orders TO shop.orders_v2"),
        ins(v2, 4, 3, "c"),
        resolved(4),
        # swap orders_v2 and other: the rows follow their tables
        _rename(5, "RENAME TABLE shop.orders_v2 TO shop.tmp, shop.other TO shop.orders_v2, shop.tmp TO shop.other"),
        ins(shape(table="other"), 6, 4, "d"),
        resolved(6),
    ]
    s = _lake(kind, tmp_path)
    s.write(stream)
    s.flush()
    assert _rows(kind, tmp_path, "orders") is None and _rows(kind, tmp_path, "tmp") is None
    assert [r["note"] for r in _rows(kind, tmp_path, "other") or []] == ["a", "b", "c", "d"]
    assert [r["note"] for r in _rows(kind, tmp_path, "orders_v2") or []] == ["o"]
    again = _lake(kind, tmp_path)
    assert again.open() == ts(6)
    again.write(stream)  # a replay: every event at or below the tables' checkpoints
    again.flush()
    assert _rows(kind, tmp_path, "orders") is None
    assert [r["note"] for r in _rows(kind, tmp_path, "other") or []] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_crash_inside_rename_table_is_finished_at_open(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move is done, the renamed table's checkpoint is not (the process dies): the next open finishes it
    from the journal in the root checkpoint file, and the batch's replay lands once."""
    v2 = shape(table="orders_v2")
    first = [ins(T, 1, 1, "a"), resolved(1)]
    second = [ins(T, 2, 2, "b"), _rename(3, "RENAME TABLE orders TO orders_v2"), ins(v2, 4, 3, "c"), resolved(4)]
    s = _lake(kind, tmp_path)
    s.write(first)
    s.flush()

    def die(self: Any, name: Any, version: int) -> None:
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as m:
        m.setattr(type(s), "_mark", die)
        with pytest.raises(KeyboardInterrupt):
            s.write(second)
    journal = orjson.loads((tmp_path / "_checkpoint.json").read_bytes())
    assert journal["renames"][0]["done"] is False
    again = _lake(kind, tmp_path)  # finishes the rename
    assert [r["done"] for r in orjson.loads((tmp_path / "_checkpoint.json").read_bytes())["renames"]] == [True]
    again.write(second)
    again.flush()
    assert _rows(kind, tmp_path, "orders") is None
    assert [r["note"] for r in _rows(kind, tmp_path, "orders_v2") or []] == ["a", "b", "c"]
    assert "renames" not in orjson.loads((tmp_path / "_checkpoint.json").read_bytes())  # covered by the checkpoint
