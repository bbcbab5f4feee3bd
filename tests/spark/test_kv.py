"""The ``kv`` input: TiKV change records mounted in Spark tasks equal `changefeed mount`'s output."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from changefeed.cli import main
from changefeed.errors import ConfigError
from changefeed.spark.datasource import KVInput, SourceOptions, register
from tests.mounter import tidb_encoder as enc

CATALOG = Path(__file__).resolve().parents[1] / "fixtures" / "mounter" / "catalog.json"
T = 440000000000000300


def _records(n: int = 120) -> list[dict]:
    """Inserts, updates and deletes of shop.events (physical table 122), resolved markers in between."""
    out: list[dict] = []
    for i in range(n):
        key = enc.record_key(122, i % 40)
        ts = T + 10 * i
        new, old = enc.row_v2({2: f"v{i}".encode()}), enc.row_v2({2: f"v{i - 40}".encode()})
        if i < 40:
            out.append({"op": "put", "key": key.hex(), "value": new.hex(), "start_ts": ts - 1, "commit_ts": ts})
        elif i < 100:
            out.append({"op": "put", "key": enc.b64(key), "value": enc.b64(new), "old_value": enc.b64(old),
                        "commit_ts": ts, "region_id": i % 3})  # fmt: skip
        else:
            out.append({"op": "delete", "key": key.hex(), "old_value": old.hex(), "commit_ts": ts})
        if i % 25 == 24:
            out.append({"op": "resolved", "ts": ts + 1})
    return out


def _mount_cli(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert main(["mount", "--catalog", str(CATALOG), str(path)]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line]


def _spark_events(spark: SparkSession, path: Path, **options: str) -> list[dict]:
    register(spark)
    df = (
        spark.read.format("changefeed")
        .option("input", "kv")
        .option("catalog", str(CATALOG))
        .option("events", "true")
        .options(**options)
        .load(str(path))
    )
    assert df.rdd.getNumPartitions() > 1  # split into several mounter tasks
    rows = df.select("event").collect()
    return [orjson.loads(r["event"]) for r in rows]


def test_kv_jsonl_and_parquet_equal_changefeed_mount(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_bytes(b"\n".join(orjson.dumps(r) for r in _records()) + b"\n")
    expected = _mount_cli(jsonl, capsys)
    assert len(expected) == 124
    assert _spark_events(spark, jsonl, bytesPerPartition="1000") == expected

    raw = [r for r in _records() if r["op"] != "resolved"]

    def col(name: str) -> list[bytes | None]:
        out = []
        for r in raw:
            text = r.get(name)
            hexed = "region_id" not in r
            out.append(None if text is None else bytes.fromhex(text) if hexed else enc.base64.b64decode(text))
        return out

    table = pa.table(
        {
            "op": [r["op"] for r in raw],
            "key": col("key"),
            "value": col("value"),
            "old_value": col("old_value"),
            "start_ts": pa.array([r.get("start_ts", 0) for r in raw], pa.uint64()),
            "commit_ts": pa.array([r["commit_ts"] for r in raw], pa.uint64()),
            "region_id": pa.array([r.get("region_id") for r in raw], pa.int64()),
        }
    )
    parquet = tmp_path / "records.parquet"
    pq.write_table(table, parquet, row_group_size=30)
    expected = _mount_cli(parquet, capsys)
    assert len(expected) == 120
    assert _spark_events(spark, parquet) == expected


def test_kv_option_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs option catalog"):
        KVInput(SourceOptions.parse({"input": "kv", "path": str(tmp_path)}))
    with pytest.raises(ConfigError, match="encoding must be"):
        KVInput(SourceOptions.parse({"input": "kv", "path": str(tmp_path), "catalog": str(CATALOG), "encoding": "b"}))


def test_run_kv_source_into_storage_equals_changefeed_mount(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[source] type = "kv"`` in `changefeed run`: mounted in Spark tasks, encoded to a storage directory."""
    from changefeed.codec import CodecOptions  # noqa: PLC0415
    from changefeed.consume.storage import StorageReader  # noqa: PLC0415
    from changefeed.model import RowChange  # noqa: PLC0415

    records = tmp_path / "records.jsonl"
    records.write_bytes(b"\n".join(orjson.dumps(r) for r in _records()))
    resolved = max(r["ts"] for r in _records() if r["op"] == "resolved")
    # Readers see what the storage checkpoint covers: rows up to the last resolved marker.
    expected = [e for e in _mount_cli(records, capsys) if e["kind"] == "row" and e["commit_ts"] <= resolved]
    assert 0 < len(expected) < 120
    config = tmp_path / "kv.toml"
    config.write_text(
        'changefeed-id = "kv"\nsink-uri = "file://out?protocol=canal-json&enable-tidb-extension=true"\n'
        f'[source]\ntype = "kv"\npath = "records.jsonl"\ncatalog = "{CATALOG}"\n'
    )
    assert main(["run", str(config), "--available-now", "--master", "local[2]"]) == 0
    assert "120 rows" in capsys.readouterr().out
    codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    got = [e for e in StorageReader(tmp_path / "out", codec).poll() if isinstance(e, RowChange)]
    assert [(r.commit_ts, r.op.value, r.table) for r in got] == [
        (e["commit_ts"], e["op"], e["table"]) for e in expected
    ]
