"""The `changefeed` data source in batch mode: storage directories (both protocols) and binlog files."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.consume.storage import StorageReader
from changefeed.model import RowChange
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.datasource import register

from .helpers import BINLOG, captured, expected_changes


@pytest.fixture(scope="module")
def cf(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def _changes(rows: list[Any], kind: str = "row") -> list[tuple[Any, ...]]:
    return [tuple(r)[1:8] for r in rows if r.kind == kind]


def test_binlog_batch_equals_file_capture(cf: SparkSession) -> None:
    df = cf.read.format("changefeed").option("input", "binlog").option("eventsPerPartition", "4").load(str(BINLOG))
    assert df.rdd.getNumPartitions() > 1  # split at transaction boundaries found by the driver-side scan
    rows = df.collect()
    assert _changes(rows) == expected_changes("row")
    assert len(_changes(rows)) == sum(1 for e in captured() if isinstance(e, RowChange)) == 23
    assert [r.ddl for r in rows if r.kind == "ddl"] == [e.query for e in captured() if e.kind == "ddl"]
    resolved = [r for r in rows if r.kind == "resolved"]
    assert resolved[-1].commit_ts == captured()[-1].commit_ts
    assert orjson.loads(resolved[-1].source_position)["pos"] == captured()[-1].position["pos"]
    big = next(r for r in rows if r.kind == "row" and r.table == "ints" and orjson.loads(r.key) == {"id": 2})
    assert orjson.loads(big.after)["bu"] == 18446744073709551615
    assert big.commit_ts > 0 and isinstance(big.commit_ts, int)


@pytest.mark.parametrize("protocol", ["canal-json", "csv"])
def test_storage_batch_equals_what_was_written(cf: SparkSession, tmp_path: Path, protocol: str) -> None:
    csv = protocol == "csv"
    codec = CodecOptions(protocol=protocol, enable_tidb_extension=True, include_commit_ts=csv, csv_output_old_value=csv)
    writer = StorageWriter(tmp_path, codec)
    writer.write(captured())
    checkpoint = writer.flush()
    reader = cf.read.format("changefeed").option("input", "storage").option("protocol", protocol)
    reader = reader.option("enable-tidb-extension", "true").option("include-commit-ts", str(csv))
    if csv:
        reader = reader.option("output-old-value", "true")  # csv carries UPDATE old images only when asked
    rows = reader.load(str(tmp_path)).collect()
    got = sorted(_changes(rows), key=lambda c: (c[3], repr(c)))
    # Same changes as the binlog: storage rows are ordered by commit ts, not binlog order inside one.
    assert got == sorted(expected_changes("row"), key=lambda c: (c[3], repr(c)))
    direct = [e for e in StorageReader(tmp_path, codec).poll() if isinstance(e, RowChange)]
    assert len(got) == len(direct) == 23
    assert [r.commit_ts for r in rows if r.kind == "resolved"] == [checkpoint]
    assert {r.ddl for r in rows if r.kind == "ddl"} <= {e.query for e in captured() if e.kind == "ddl"}


def test_notebook_one_liner_reads_a_storage_directory(cf: SparkSession, tmp_path: Path) -> None:
    codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    writer = StorageWriter(tmp_path, codec)
    writer.write(captured())
    writer.flush()
    df = cf.read.format("changefeed").option("protocol", "canal-json").load(str(tmp_path))  # no input option
    assert df.filter("kind = 'row'").count() == 23


def test_single_table_gives_typed_images(cf: SparkSession) -> None:
    df = cf.read.format("changefeed").option("input", "binlog").option("table", "cf.ints").load(str(BINLOG))
    after = dict((f.name, f.dataType.simpleString()) for f in df.schema["after"].dataType.fields)
    assert after["bu"] == "decimal(20,0)"  # BIGINT UNSIGNED
    assert after["iu"] == "bigint"  # INT UNSIGNED -> next wider signed
    assert after["tu"] == "smallint"  # TINYINT UNSIGNED
    assert after["ti"] == "smallint"  # the latest shape: ALTER TABLE ... MODIFY ti SMALLINT
    assert after["y"] == "smallint"
    rows = [r for r in df.collect() if r.kind == "row"]
    assert {r.table for r in rows} == {"ints"}
    two = next(r for r in rows if r.after is not None and r.after.id == 2)
    assert two.after.bu == Decimal(18446744073709551615)
    assert two.after.iu == 4294967295

    nums = cf.read.format("changefeed").option("input", "binlog").option("table", "cf.nums").load(str(BINLOG))
    types = {f.name: f.dataType.simpleString() for f in nums.schema["after"].dataType.fields}
    assert types == {
        "id": "int",
        "f": "float",
        "d": "double",
        "d65": "string",  # DECIMAL(65,30) does not fit Spark's 38 digits
        "d10": "decimal(10,0)",
        "d52": "decimal(5,2)",
        "d18": "decimal(18,9)",
    }
    first = next(r for r in nums.collect() if r.kind == "row" and r.after.id == 1)
    assert first.after.d65 == "12345678901234567890123456789012345.123456789012345678901234567890"
    assert first.after.d52 == Decimal("999.99")


def _function_env(spark: SparkSession) -> set[str]:
    """The keys of the registered data source function's environment map (the JVM's own object)."""
    source = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("changefeed")
    return set(source.dataSourceCls().envVars().keySet())


def test_a_streaming_start_never_grows_the_map_every_task_serializes(cf: SparkSession) -> None:
    """Spark's streaming source runner puts keys into the registered function's environment map, the map
    each task of the data source serializes: grown while another query's task was written, it failed
    `changefeed pipeline`'s tasks (OptionalDataException). The keys are there before any query starts."""
    register(cf)
    before = _function_env(cf)
    assert {"SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME"} <= before
    query = (
        cf.readStream.format("changefeed")
        .option("input", "binlog")
        .load(str(BINLOG))
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180) is not False
    assert query.exception() is None
    assert _function_env(cf) == before
