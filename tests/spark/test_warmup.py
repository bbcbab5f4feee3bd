"""The warm-up read a job starts beside its query (changefeed/spark/warmup.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from changefeed.spark.warmup import NAME, warm_up


def test_warm_up_reads_one_row_on_each_task_slot(spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="changefeed.spark.warmup"):
        thread = warm_up(spark)
        thread.join(120)
    assert not thread.is_alive()
    assert any("python workers warmed" in r.getMessage() for r in caplog.records), caplog.text
    # What the thread read: one row per slot of the local[2] session, each from its own task.
    rows = spark.read.format(NAME).option("partitions", str(spark.sparkContext.defaultParallelism)).load().collect()
    assert sorted(r.part for r in rows) == list(range(spark.sparkContext.defaultParallelism))


class _Broken:
    """A session whose data source registry fails, as a stopped or foreign one would."""

    class dataSource:  # noqa: N801 - the attribute name SparkSession has
        @staticmethod
        def register(_: object) -> None:
            raise RuntimeError("session stopped")


def test_a_failed_warm_up_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="changefeed.spark.warmup"):
        thread = warm_up(_Broken())  # type: ignore[arg-type]
        thread.join(10)
    assert not thread.is_alive()
    assert [r.getMessage() for r in caplog.records] == ["python workers not warmed: session stopped"]
