"""Start Spark's Python processes while a streaming query starts, not inside its first micro-batch.

Why: a job's first micro-batch waits for two process pools the JVM starts on first use: the daemon
that plans a Python data source's read (``pyspark.sql.worker.plan_data_source_read``) and the
task workers' daemon with what `changefeed.spark.pyworker` preloads. Each costs ~0.5-1 s of wall
time that the query's own start (the source runner's first offsets, the offset log) does not
overlap by itself. A batch read of a one-row Python data source, run in a thread beside the
query's start, starts both; the micro-batches then fork warm workers from them (the apply job's
first batch 0.5-1 s sooner, bench/RESULTS.md). It only warms: any failure is left to the query.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

# The planner process that unpickles the warm-up source imports this module; Spark reuses it to
# plan the job's own reads, which then find the changefeed data source imported.
from .datasource import register

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

NAME = "changefeed-warmup"


class _Reader(DataSourceReader):
    def __init__(self, partitions: int) -> None:
        self.count = partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        yield (partition.value,)


class WarmupDataSource(DataSource):
    """One row per partition; ``partitions`` (default 1) as many as task slots are to be warmed."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "part int"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(max(1, int(self.options.get("partitions", "1"))))


def _slots(spark: SparkSession) -> int:
    """The session's task slots (local[N]: N), 1 where a Spark Connect session has no context."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect: no SparkContext on the client
        return 1


def warm_up(spark: SparkSession) -> threading.Thread:
    """Read the warm-up source on every task slot in a daemon thread; returns the started thread.

    Call it after the job's own data source is registered (`datasource.register`): the task workers
    are shared by functions whose environment matches, which registration sets up.
    """

    def run() -> None:
        started = time.perf_counter()
        try:
            register(spark, WarmupDataSource)  # under the lock two queries starting together need
            spark.read.format(NAME).option("partitions", str(_slots(spark))).load().collect()
        except Exception as exc:  # the query reports what is wrong with Spark, where it matters
            log.debug("python workers not warmed: %s", exc)
            return
        log.debug("python workers warmed in %.2f s", time.perf_counter() - started)

    thread = threading.Thread(target=run, name="changefeed-warmup", daemon=True)
    thread.start()
    return thread
