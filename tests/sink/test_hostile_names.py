"""Hostile schema/table names through the storage writer, its reader and the Parquet sink.

MariaDB accepts ``CREATE DATABASE `../../esc``` and ``CREATE TABLE `../../esc`.`../../../pwn```:
nothing such names touch may lie outside the output root, no two names may share a directory,
and what is read back carries the original names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from changefeed.codec import CodecOptions
from changefeed.consume.storage import StorageReader
from changefeed.files.layout import SchemaFile
from changefeed.files.paths import PathEscapeError, UnsafeNameError, encode_name
from changefeed.model import ActionType, Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.parquet import ROOT_ENTRIES as PARQUET_ROOT_ENTRIES
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.sink.storage.writer import StorageOptions, StorageWriter

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
ESC, PWN = "../../esc", "../../../pwn"


def _table(schema: str, table: str, version: int = 1) -> TableSchema:
    columns = (Column("id", TypeCode.INT, nullable=False), Column("v", TypeCode.VARCHAR, length=20, **UTF8))
    return TableSchema(schema, table, columns, (Index("PRIMARY", ("id",), primary=True),), version=version)


def _names(tmp_path: Path) -> list[tuple[str, str]]:
    """The hostile pairs: climbing out, an absolute path (inside tmp_path, so a failure stays visible here),
    two names that split the same way, dot names, a reserved root entry, NUL and an escape character."""
    absolute = str(tmp_path / "abs")
    return [
        (ESC, PWN),
        (absolute, "t"),
        ("s", absolute),
        ("a/b", "c"),
        ("a", "b/c"),
        (".", ".."),
        ("..", "."),
        ("metadata", "t"),
        ("_spark_checkpoint", "offsets"),
        ("n\x00ul", "x@0041y"),
    ]


def _events(names: list[tuple[str, str]]) -> Iterator[Event]:
    ts = 10
    for i, (schema, table) in enumerate(names):
        shape = _table(schema, table, version=ts)
        yield DDLEvent(schema, "", f"CREATE DATABASE `{schema}`", ActionType.CREATE_SCHEMA, ts)
        yield DDLEvent(schema, table, "CREATE TABLE ...", ActionType.CREATE_TABLE, ts + 1, shape)
        yield RowChange(Op.INSERT, shape, ts + 2, new=(i, f"{schema}|{table}"))
        ts += 10
    yield Resolved(ts)


def _layout(tmp_path: Path) -> tuple[Path, set[Path]]:
    """A root deep enough that ``../../..`` from it stays inside tmp_path, and what exists before."""
    root = tmp_path / "l1" / "l2" / "l3" / "root"
    root.mkdir(parents=True)
    return root, set(tmp_path.rglob("*"))


def _assert_contained(tmp_path: Path, root: Path, before: set[Path]) -> None:
    """Everything created since `_layout` is under the root, and no link leads out of it."""
    created = set(tmp_path.rglob("*")) - before
    outside = sorted(str(p) for p in created if not p.is_relative_to(root))
    assert not outside, outside
    assert all(p.resolve().is_relative_to(root.resolve()) for p in created)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l1"]  # the parent of every climb: untouched


def _read_back(root: Path, codec: CodecOptions) -> list[Event]:
    return StorageReader(root, codec).poll()


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_storage_round_trip_stays_inside_the_root(tmp_path: Path, protocol: str) -> None:
    root, before = _layout(tmp_path)
    names = _names(tmp_path)
    codec = CodecOptions(protocol=protocol, enable_tidb_extension=True, include_commit_ts=protocol == "csv")
    writer = StorageWriter(root, codec, StorageOptions(date_separator="none"))
    writer.write(_events(names))
    writer.flush()
    _assert_contained(tmp_path, root, before)

    events = _read_back(root, codec)
    rows = sorted((r.schema, r.table, r.new) for r in events if isinstance(r, RowChange))
    expected = sorted((s, t, (i, f"{s}|{t}")) for i, (s, t) in enumerate(names))
    assert rows == expected  # original names back, each table its own rows: a/b.c and a.b/c did not meet
    ddl_names = {(d.schema, d.table) for d in events if isinstance(d, DDLEvent)}
    assert ddl_names == {(s, "") for s, _ in names} | set(names)
    assert (root / "metadata").is_file()  # the schema named `metadata` did not take the checkpoint's place
    assert {p.name for p in root.iterdir()} >= {"@002e.@002f..@002fesc", "a@002fb", "a", "@002e", "@006detadata"}
    assert (root / "a@002fb" / "c").is_dir() and (root / "a" / "b@002fc").is_dir()


def test_storage_writer_restart_recovers_hostile_directories(tmp_path: Path) -> None:
    """A restarted writer walks (and may trim) every data directory: it decodes hostile names, stays inside."""
    root, before = _layout(tmp_path)
    codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    writer = StorageWriter(root, codec, StorageOptions(date_separator="none"))
    writer.write(_events(_names(tmp_path)))
    writer.flush()
    again = StorageWriter(root, codec, StorageOptions(date_separator="none"))
    shape = _table(ESC, PWN, version=11)
    again.write([RowChange(Op.INSERT, shape, 500, new=(99, "late")), Resolved(500)])
    again.flush()
    _assert_contained(tmp_path, root, before)
    rows = [e for e in _read_back(root, codec) if isinstance(e, RowChange) and e.table == PWN]
    assert sorted(r.new[0] for r in rows) == [0, 99]


def test_storage_reader_refuses_a_malformed_directory_name(tmp_path: Path) -> None:
    codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    writer = StorageWriter(tmp_path, codec, StorageOptions(date_separator="none"))
    writer.write(_events([("s", "t")]))
    writer.flush()
    (tmp_path / "s").rename(tmp_path / "s@zz")
    with pytest.raises(UnsafeNameError, match="'s@zz' is not an encoded"):
        _read_back(tmp_path, codec)


def test_storage_writer_refuses_a_link_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    (root / "db").symlink_to(outside)
    writer = StorageWriter(root, CodecOptions(protocol="canal-json"), StorageOptions(date_separator="none"))
    with pytest.raises(PathEscapeError, match=r"schema 'db': .* outside"):
        writer.write(_events([("db", "t")]))
        writer.flush()
    assert not any(outside.iterdir())


def test_storage_writer_refuses_an_empty_schema(tmp_path: Path) -> None:
    # Checked first without I/O: unencoded, this schema file's path is the absolute /meta/schema_5_....json.
    with pytest.raises(UnsafeNameError, match="empty name"):
        SchemaFile("", "", 5).path()
    writer = StorageWriter(tmp_path, CodecOptions(protocol="canal-json"))
    with pytest.raises(UnsafeNameError, match="empty name"):
        writer.write([DDLEvent("", "", "CREATE DATABASE ``", ActionType.CREATE_SCHEMA, 5)])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- parquet


def _snapshot(root: Path, schema: str, table: str) -> list[dict[str, object]]:
    path = root / encode_name(schema, PARQUET_ROOT_ENTRIES) / encode_name(table)
    return sorted(pq.read_table(path / "snapshot.parquet").to_pylist(), key=lambda r: r["id"])


def test_parquet_snapshots_stay_inside_the_root(tmp_path: Path) -> None:
    root, before = _layout(tmp_path)
    names = [*_names(tmp_path), ("_checkpoint.json", "t")]
    sink = ParquetSnapshotSink(root)
    sink.write(list(_events(names)))
    sink.flush()
    _assert_contained(tmp_path, root, before)
    assert (root / "_checkpoint.json").is_file()
    for i, (schema, table) in enumerate(names):
        assert _snapshot(root, schema, table) == [{"id": i, "v": f"{schema}|{table}"}]


def test_parquet_rename_and_drop_of_hostile_tables_stay_inside(tmp_path: Path) -> None:
    root, before = _layout(tmp_path)
    # A decoy where the raw names `..`.`..` would have put a snapshot: the rename must neither read nor remove it.
    decoy = root.parent.parent / "snapshot.parquet"
    decoy.write_bytes(b"not ours")
    before.add(decoy)
    sink = ParquetSnapshotSink(root)
    sink.write(list(_events([(ESC, PWN), ("..", ".."), ("a/b", "c")])))
    sink.flush()
    moved = _table(ESC, "../moved")
    rename = "RENAME TABLE `../../esc`.`../../../pwn` TO `../../esc`.`../moved`"
    sink.write(
        [
            DDLEvent(ESC, "../moved", rename, ActionType.RENAME_TABLE, 100, moved),
            DDLEvent("a/b", "c", "DROP TABLE `a/b`.`c`", ActionType.DROP_TABLE, 101, _table("a/b", "c")),
            DDLEvent(ESC, "", "DROP DATABASE `../../esc`", ActionType.DROP_SCHEMA, 102),
            Resolved(103),
        ]
    )
    sink.flush()
    _assert_contained(tmp_path, root, before)
    assert decoy.read_bytes() == b"not ours"
    assert _snapshot(root, ESC, "../moved") == [{"id": 0, "v": f"{ESC}|{PWN}"}]
    assert not (root / "@002e.@002f..@002fesc" / "@002e.@002f..@002f..@002fpwn" / "snapshot.parquet").exists()
    assert _snapshot(root, "a/b", "c") == []
    assert _snapshot(root, "..", "..") == [{"id": 1, "v": "..|.."}]

    # A restart finishes removals the checkpoint lists (hostile names included) inside the root only.
    again = ParquetSnapshotSink(root)
    assert again.checkpoint_ts == 103
    _assert_contained(tmp_path, root, before)
    assert decoy.read_bytes() == b"not ours"


def test_parquet_rename_from_a_raw_climbing_name_reads_nothing_outside(tmp_path: Path) -> None:
    root, before = _layout(tmp_path)
    decoy = root.parent / "x" / "snapshot.parquet"
    decoy.parent.mkdir()
    decoy.write_bytes(b"not ours")
    before |= {decoy, decoy.parent}
    sink = ParquetSnapshotSink(root)
    sink.write([DDLEvent("s", "t", "RENAME TABLE `..`.`x` TO `s`.`t`", ActionType.RENAME_TABLE, 5), Resolved(5)])
    sink.flush()
    _assert_contained(tmp_path, root, before)
    assert decoy.read_bytes() == b"not ours"
