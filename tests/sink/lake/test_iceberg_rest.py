"""iceberg://DIR?catalog-uri=http://... against a real Iceberg REST catalog (lakana-server on SQLite: conftest.py).

The sink talks to the catalog only through the REST protocol; what it committed is read back through a
second REST client of its own and, without pyiceberg, from the files the catalog's metadata names
(independent.py). Lakana holds tables only under ``bronze``/``silver``/``gold``: ``catalog-namespace=bronze``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
import pytest

from changefeed.cli import main
from changefeed.errors import ConfigError
from changefeed.model import ActionType, Column, DDLEvent, Op, RowChange, TypeCode
from changefeed.sink.lake.common import LakeError, LakeOptions
from changefeed.sink.lake.iceberg import CHECKPOINT_KEY, EXPIRED_KEY, MAINTENANCE_KEY, IcebergSink
from changefeed.sink.lake.reader import as_of, open_lake, tables, versions
from changefeed.testing.iceberg_rest import RestEnvironment

from .helpers import T, dele, ins, resolved, shape, ts, upd
from .independent import read_iceberg_independently
from .test_delta_modes import SCD2_BATCHES, SCD2_VERSIONS, scd2_versions

D = Decimal
ORDERS = ("bronze", "shop", "orders")
FIRST = [
    ins(T, 1, 1, "a"),
    ins(T, 1, 2, "b"),
    upd(T, 2, (1, "a", D("1.00")), (1, "a2", D("2.00"))),
    dele(T, 3, (2, "b", D("1.00"))),
    upd(T, 3, (1, "a2", D("2.00")), (10, "moved", D("2.00"))),  # the key moves
    ins(T, 4, 3, "c"),
    resolved(4),
]
SECOND = [
    upd(T, 5, (3, "c", D("1.00")), (3, "c2", D("1.00"))),
    dele(T, 5, (10, None, None)),
    ins(T, 5, 4, "d"),
    resolved(5),
]


def target(root: Path, env: RestEnvironment, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"iceberg://{root}?catalog-uri={env.uri}&catalog-namespace=bronze" + (f"&{query}" if query else "")


def rest_sink(root: Path, env: RestEnvironment, **kw: Any) -> IcebergSink:
    s = IcebergSink(root, LakeOptions(catalog_uri=env.uri, catalog_namespace=("bronze",), **kw))
    s.open()
    return s


def location(table: Any) -> Path:
    return Path(unquote(urlsplit(table.location()).path))


def rows_of(table: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in table.to_pylist())


def test_upsert_replay_and_add_column(tmp_path: Path, iceberg_rest: RestEnvironment) -> None:
    root = tmp_path / "lake"
    s = rest_sink(root, iceberg_rest)
    s.write(FIRST)
    assert s.flush() == ts(4)
    s.write(SECOND)
    assert s.flush() == ts(5)
    s.close()

    reader = iceberg_rest.catalog()  # a client of its own: what the catalog serves
    table = reader.load_table(ORDERS)
    summary = table.current_snapshot().summary
    assert summary.additional_properties[CHECKPOINT_KEY] == str(ts(5))
    want = [(3, "c2", D("1.00")), (4, "d", D("1.00"))]
    assert rows_of(table.scan().to_arrow(), "id", "note", "amount") == want
    # The catalog chose the location, in its warehouse; DIR holds only the root checkpoint.
    assert location(table).is_relative_to(iceberg_rest.warehouse)
    assert sorted(p.name for p in root.iterdir()) == ["_checkpoint.json"]
    assert rows_of(read_iceberg_independently(location(table)), "id", "note", "amount") == want

    snapshots = len(table.snapshots())
    again = IcebergSink(root, LakeOptions(catalog_uri=iceberg_rest.uri, catalog_namespace=("bronze",)))
    assert again.open() == ts(5)  # each table's checkpoint, read back through the catalog
    again.write([*FIRST, *SECOND])  # a replay after a restart: skipped
    again.flush()
    assert len(reader.load_table(ORDERS).snapshots()) == snapshots

    added = shape(extra=(Column("qty", TypeCode.INT),))
    again.write(
        [
            DDLEvent("shop", "orders", "ALTER TABLE orders ADD qty INT", ActionType.ADD_COLUMN, ts(6), added),
            RowChange(Op.INSERT, added, ts(7), new=(5, "e", D("3.00"), 7)),
            upd(added, 7, (3, "c2", D("1.00"), None), (3, "c3", D("1.00"), 8)),
            resolved(7),
        ]
    )
    assert again.flush() == ts(7)
    table = reader.load_table(ORDERS)
    assert [f.name for f in table.schema().fields] == ["id", "note", "amount", "qty"]
    want = [(3, "c3", 8), (4, "d", None), (5, "e", 7)]
    assert rows_of(table.scan().to_arrow(), "id", "note", "qty") == want
    assert rows_of(read_iceberg_independently(location(table)), "id", "note", "qty") == want


def test_modes_and_time_travel_through_the_catalog(
    tmp_path: Path, iceberg_rest: RestEnvironment, capsys: pytest.CaptureFixture[str]
) -> None:
    """scd2 and changelog commit through the REST catalog; `lake as-of` / `versions` read it by commit ts."""
    for batch in SCD2_BATCHES:
        s = rest_sink(tmp_path / "scd2", iceberg_rest, mode="scd2")
        s.write(batch)
        s.flush()
    scd2 = iceberg_rest.catalog().load_table(ORDERS)
    assert scd2_versions(scd2.scan().to_arrow().to_pylist()) == SCD2_VERSIONS

    lake = target(tmp_path / "scd2", iceberg_rest, mode="scd2")
    assert tables(open_lake(lake)) == [("shop", "orders")]
    assert [v.checkpoint_ts for v in versions(open_lake(lake), ("shop", "orders"))] == [ts(2), ts(5)]
    assert main(["lake", "as-of", "--to", lake, "--table", "shop.orders", "--ts", str(ts(2))]) == 0
    out = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["id"], r["note"]) for r in out) == [(1, "b"), (2, "x")]  # the open versions then

    log = tmp_path / "changelog"
    s = IcebergSink(log, LakeOptions(mode="changelog", catalog_uri=iceberg_rest.uri, catalog_namespace=("silver",)))
    s.open()
    s.write(FIRST)
    s.flush()
    changes = iceberg_rest.catalog().load_table(("silver", "shop", "orders")).scan().to_arrow()
    assert sorted((r["_cf_op"], r["_cf_commit_ts"]) for r in changes.to_pylist()) == sorted(
        [("insert", ts(1))] * 2 + [("update", ts(2)), ("delete", ts(3)), ("update", ts(3)), ("insert", ts(4))]
    )
    got = as_of(
        open_lake(f"iceberg://{log}?catalog-uri={iceberg_rest.uri}&catalog-namespace=silver"), ("shop", "orders")
    )
    assert rows_of(got.rows, "id", "note") == [(3, "c"), (10, "moved")]


def test_compaction_commits_and_a_refused_expiry_is_logged(
    tmp_path: Path, iceberg_rest: RestEnvironment, caplog: pytest.LogCaptureFixture
) -> None:
    """optimize-every: compaction snapshots the catalog accepts. retain-versions: Lakana's catalog refuses a
    client's snapshot removal (403, its own maintenance does it), which is logged and leaves every batch in."""
    s = rest_sink(tmp_path, iceberg_rest, optimize_every=3, retain_versions=2)
    for n in range(1, 7):
        s.write([ins(T, n, n, f"n{n}"), resolved(n)])
        assert s.flush() == ts(n)
    table = iceberg_rest.catalog().load_table(ORDERS)
    kinds = [x.summary.additional_properties.get(MAINTENANCE_KEY) for x in table.snapshots()]
    assert kinds.count("compaction") == 2 and EXPIRED_KEY not in table.properties
    assert "maintenance failed" in caplog.text and "cannot remove snapshots" in caplog.text
    live = {Path(unquote(urlsplit(t.file.file_path).path)) for t in table.scan().plan_files()}
    assert len(live) == 1  # one compacted file holds the rows
    assert rows_of(table.scan().to_arrow(), "id") == [(n,) for n in range(1, 7)]
    assert rows_of(read_iceberg_independently(location(table)), "id") == [(n,) for n in range(1, 7)]
    assert table.current_snapshot().summary.additional_properties[CHECKPOINT_KEY] == str(ts(6))


def test_rename_table_into_a_new_schema(tmp_path: Path, iceberg_rest: RestEnvironment) -> None:
    """RENAME TABLE to another schema: the catalog's rename into a namespace created for it; a replay after a
    restart does not bring the old name back."""
    moved = shape("archive", "orders_old")
    rename = DDLEvent("shop", "", "RENAME TABLE shop.orders TO archive.orders_old", ActionType.RENAME_TABLE, ts(2))
    stream = [ins(T, 1, 1, "a"), resolved(1), rename, ins(moved, 3, 2, "b"), resolved(3)]
    for _ in range(2):  # the second run is a replay
        s = rest_sink(tmp_path, iceberg_rest)
        s.write(stream)
        assert s.flush() == ts(3)
    reader = iceberg_rest.catalog()
    assert reader.list_tables(("bronze", "shop")) == []
    table = reader.load_table(("bronze", "archive", "orders_old"))
    assert rows_of(table.scan().to_arrow(), "id", "note") == [(1, "a"), (2, "b")]
    assert tables(rest_sink(tmp_path, iceberg_rest)) == [("archive", "orders_old")]


def test_hostile_names_and_refusals(tmp_path: Path, iceberg_rest: RestEnvironment) -> None:
    """Names from data reach the catalog encoded (one identifier part each) and the catalog's locations stay
    in its warehouse; a table the catalog refuses is an error naming the table and the catalog's reason."""
    names = [("../../esc", "../../../pwn"), ("a.b", "c"), ("店", "表/ü")]
    s = rest_sink(tmp_path / "lake", iceberg_rest)
    s.write([*(ins(shape(sch, tab), 1, 1, f"{sch}|{tab}") for sch, tab in names), resolved(1)])
    s.flush()
    reopened = rest_sink(tmp_path / "lake", iceberg_rest)
    assert sorted(tables(reopened)) == sorted(names)
    for name in names:
        table = reopened._load(name)
        assert table is not None and location(table).is_relative_to(iceberg_rest.warehouse)
        assert table.scan().to_arrow().column("note").to_pylist() == ["|".join(name)]

    bare = IcebergSink(tmp_path / "bare", LakeOptions(catalog_uri=iceberg_rest.uri))  # no catalog-namespace
    bare.open()
    bare.write([ins(T, 1, 1, "a"), resolved(1)])
    with pytest.raises(LakeError, match=r"'shop'\.'orders'.*refused to create 'shop\.orders'.*bronze, silver, or gold"):
        bare.flush()


def test_catalog_namespace_is_checked() -> None:
    options = LakeOptions.from_params("iceberg", {"catalog-namespace": "bronze.cdc"})
    assert options.catalog_namespace == ("bronze", "cdc")
    for bad in ("a..b", ".a", "a ", "a\tb"):
        with pytest.raises(ConfigError, match="catalog-namespace"):
            LakeOptions.from_params("iceberg", {"catalog-namespace": bad})
    with pytest.raises(ConfigError, match="unknown: catalog-namespace"):
        LakeOptions.from_params("delta", {"catalog-namespace": "bronze"})


def test_bad_token_is_an_error_with_context(
    tmp_path: Path, iceberg_rest: RestEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__CHANGEFEED__TOKEN", "lakana_pat_0000000000000000_wrong")
    with pytest.raises(
        LakeError, match=r"iceberg REST catalog http://127\.0\.0\.1:\d+: listing its tables: Unauthorized"
    ) as raised:
        rest_sink(tmp_path, iceberg_rest)
    assert "wrong" not in str(raised.value)
    # A token written into the URI as its user (``http://TOKEN@host``) never shows either.
    monkeypatch.delenv("PYICEBERG_CATALOG__CHANGEFEED__TOKEN")
    uri = iceberg_rest.uri.replace("http://", "http://lakana_pat_1111111111111111_inuri@")
    with pytest.raises(LakeError, match=r"iceberg REST catalog http://\*\*\*@127\.0\.0\.1:\d+") as raised:
        IcebergSink(tmp_path / "other", LakeOptions(catalog_uri=uri, catalog_namespace=("bronze",))).open()
    assert "inuri" not in str(raised.value)
