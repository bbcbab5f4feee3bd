"""The storage input's ``output=ranges``: the apply job reads and decodes each range on the driver.

It must give exactly the events the changelog path (``events=true``, decoded in executors) gives.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.errors import CaptureError
from changefeed.model import Event
from changefeed.model.jsonl import EventReader, dumps_event
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.datasource import SourceOptions, StorageInput, register
from changefeed.spark.datasource.storage import RANGE_SCHEMA
from changefeed.spark.encode import event_order

from .helpers import captured


def _sorted(events: list[Event]) -> list[bytes]:
    return [dumps_event(e) for e in sorted(events, key=lambda e: (*event_order(e), dumps_event(e)))]


@pytest.mark.parametrize(("protocol", "rules"), [("canal-json", ""), ("csv", ""), ("canal-json", "*.*,!cf.nums")])
def test_ranges_output_decoded_on_the_driver_equals_the_changelog_path(
    spark: SparkSession, tmp_path: Path, protocol: str, rules: str
) -> None:
    csv = protocol == "csv"
    codec = CodecOptions(protocol=protocol, enable_tidb_extension=True, include_commit_ts=csv, csv_output_old_value=csv)
    writer = StorageWriter(tmp_path, codec)
    events = list(captured())
    writer.write(events[: len(events) // 2])
    writer.flush()
    writer.write(events[len(events) // 2 :])
    writer.flush()
    options = {"input": "storage", "path": str(tmp_path), "protocol": protocol, "enable-tidb-extension": "true"}
    options.update({"include-commit-ts": str(csv).lower(), "output-old-value": str(csv).lower(), "filter": rules})
    register(spark)
    read = spark.read.format("changefeed").options(**options)

    reader = EventReader()
    old = [reader.parse(line) for line in read.option("events", "true").load().toArrow().column("event").to_pylist()]
    ranges = read.option("output", "ranges").load()
    assert ranges.schema.simpleString() == "struct<range:string>"
    table = ranges.toArrow()
    assert table.num_rows > 1  # the DDL/resolved range and one per table
    new = StorageInput(SourceOptions.parse(options)).range_decoder().events(table.to_batches())
    assert len(new) > 20
    assert _sorted(new) == _sorted(old)


def test_a_bad_range_description_is_a_clear_error(tmp_path: Path) -> None:
    decoder = StorageInput(SourceOptions.parse({"input": "storage", "path": str(tmp_path)})).range_decoder()
    for text in ("{not json", '{"low": 1}', '{"low": 0, "high": 1, "files": [[1]], "ddl_and_resolved": 0}'):
        batch = pa.RecordBatch.from_pylist([{"range": text}], schema=RANGE_SCHEMA)
        with pytest.raises(CaptureError, match="not a range description") as caught:
            decoder.events([batch])
        assert str(tmp_path) in str(caught.value)
