"""Shared expectations for the Spark tests: what file_capture emits, as changelog rows and snapshots."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from changefeed.capture.binlog import file_capture
from changefeed.model import Event
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.spark.changelog import ChangelogRows

BINLOG = Path(__file__).resolve().parents[1] / "fixtures/binlog/full"


def changelog_tuples(batches: Any) -> list[tuple[Any, ...]]:
    """A changelog output's record batches as its rows' tuples (typed images as dicts)."""
    return [tuple(row.values()) for batch in batches for row in batch.to_pylist()]


@cache
def captured() -> tuple[Event, ...]:
    return tuple(file_capture(BINLOG).events())


def expected_changes(kind: str = "row") -> list[tuple[Any, ...]]:
    """(op, schema, table, commit_ts, key, after, before) of every row file_capture emits, in order."""
    return [r[1:8] for r in ChangelogRows().rows(captured()) if r[0] == kind]


def reference_snapshot(root: Path) -> dict[str, list[dict[str, Any]]]:
    """The snapshot ParquetSnapshotSink makes straight from file_capture's events."""
    sink = ParquetSnapshotSink(root)
    sink.write(list(captured()))
    sink.flush()
    return read_snapshot(root)


def read_snapshot(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(root.glob("*/*/snapshot.parquet")):
        table = pq.read_table(path)
        rows = sorted(table.to_pylist(), key=lambda r: repr(sorted(r.items())))
        out[f"{path.parent.parent.name}.{path.parent.name}"] = (str(table.schema.remove_metadata()), rows)
    return out


# The jobs the tests run: `run_job` over a source and a fresh sink (a sink object lives for one run).


def capture(
    spark: Any,
    sink: Any,
    checkpoint: Path,
    *,
    source: Any = BINLOG,
    max_events: int | None = None,
    events_per_partition: int | None = None,
    **job: Any,
) -> Any:
    """A capture run: ``source`` (default the full binlog fixture) into ``sink``."""
    from changefeed.spark.jobs import run_job, source_options  # noqa: PLC0415 - pyspark only where a test runs it

    options = source_options(source, max_events=max_events, events_per_partition=events_per_partition)
    return run_job(spark, options, sink, checkpoint, job="capture", **job)


def apply(spark: Any, source: dict[str, str], sink: Any, checkpoint: Path, **job: Any) -> Any:
    """An apply run: data source options (storage, kafka) into ``sink``."""
    from changefeed.spark.jobs import run_job  # noqa: PLC0415

    return run_job(spark, source, sink, checkpoint, **job)
