"""End to end on Spark: a storage-sink directory -> `changefeed apply --to delta://DIR` -> Delta tables."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.codec import CodecOptions
from changefeed.sink.storage.writer import StorageWriter

from .helpers import T, dele, ins, resolved, shape, upd

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]
CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
D = Decimal


def test_apply_storage_directory_into_delta(spark: object, tmp_path: Path) -> None:
    storage, lake = tmp_path / "storage", tmp_path / "lake"
    items = shape("shop", "a/b")  # a name that must be escaped in the path
    with StorageWriter(storage, CODEC) as writer:
        writer.write([ins(T, 1, 1, "a"), ins(T, 1, 2, "b"), ins(items, 1, 1, "i"), resolved(1)])
        writer.flush()
        writer.write(
            [upd(T, 2, (1, "a", D("1.00")), (1, "a2", D("5.50"))), dele(T, 2, (2, "b", D("1.00"))), resolved(2)]
        )
    source = f"file://{storage}?protocol=canal-json&enable-tidb-extension=true"
    args = ["apply", "--from", source, "--to", f"delta://{lake}?mode=upsert", "--available-now", "--master", "local[2]"]
    assert main(args) == 0
    from changefeed.sink.lake.delta import read_delta  # noqa: PLC0415

    assert read_delta(lake / "shop/orders").to_pylist() == [{"id": 1, "note": "a2", "amount": D("5.50")}]
    assert read_delta(lake / "shop/a@002fb").column("note").to_pylist() == ["i"]
    assert main(args) == 0  # a second run over the same directory changes nothing
    assert read_delta(lake / "shop/orders").num_rows == 1


def test_lake_target_parameters_are_checked(tmp_path: Path) -> None:
    from changefeed.errors import ConfigError  # noqa: PLC0415
    from changefeed.sink.lake import lake_sink  # noqa: PLC0415

    with pytest.raises(ConfigError, match="unknown: bogus"):
        lake_sink("delta", tmp_path, {"bogus": "1"}, "UTC")
    with pytest.raises(ConfigError, match="unknown: catalog-uri"):
        lake_sink("delta", tmp_path, {"catalog-uri": "sqlite://"}, "UTC")
    with pytest.raises(ConfigError, match="mode must be one of"):
        lake_sink("iceberg", tmp_path, {"mode": "merge"}, "UTC")
    assert (
        lake_sink("iceberg", tmp_path, {"mode": "changelog", "catalog-uri": f"sqlite:///{tmp_path}/c.db"}, "UTC")().kind
        == "iceberg"
    )
