"""Task output handed to the driver partition by partition, in order, as it completes (changefeed/spark/collect.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from changefeed.files import tempdirs
from changefeed.spark import collect
from changefeed.spark.collect import partitions_in_order
from changefeed.spark.envelope import ENVELOPE_SCHEMA


def _envelope(part: int, count: int, payload: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([part], pa.int32()), pa.array([count], pa.int32()), pa.array([payload], pa.binary())],
        schema=ENVELOPE_SCHEMA,
    )


def _part() -> int:
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    assert context is not None
    return context.partitionId()


def test_the_first_partition_is_handed_over_while_the_last_task_still_runs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partition 3's task waits until the driver has received partition 0: with a collect that returns only
    after the last task, it would wait in vain (and say so after 60 s). Every partition comes whole, in order,
    its envelopes in the order the task yielded them, and none of the files is left behind."""
    flag = str(tmp_path / "got-partition-0")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the driver's directory goes

    def tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = _part()
        for _ in batches:
            pass
        waited = b"-"
        if part == 3:
            deadline = time.monotonic() + 60
            while not Path(flag).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            waited = b"seen" if Path(flag).exists() else b"timed out"
        for i in range(part + 1):  # partition k yields k + 1 envelopes, the last one saying how it waited
            yield _envelope(part, i, waited if i == part else b"x" * 1000)

    seen = []
    for part, table in partitions_in_order(spark.range(0, 40, numPartitions=4), tasks):
        if part == 0:
            Path(flag).touch()
        seen.append((part, table.column("count").to_pylist(), table.column("ipc").to_pylist()[-1]))
    assert seen == [(0, [0], b"-"), (1, [0, 1], b"-"), (2, [0, 1, 2], b"-"), (3, [0, 1, 2, 3], b"seen")]
    assert not list(tmp_path.glob("changefeed-collect-*"))


def test_an_empty_partition_leaving_early_and_a_failing_task(spark: SparkSession) -> None:
    def tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = _part()
        for _ in batches:
            pass
        if part == 2 and fail:
            raise ValueError("task 2 breaks")
        if part != 1:  # partition 1 yields nothing: still handed over, empty
            yield _envelope(part, 1, b"x" * 100_000)

    fail = False
    rows = spark.range(0, 40, numPartitions=4)
    for part, _ in partitions_in_order(rows, tasks):
        assert part == 0
        break  # the job is waited for; the session stays usable
    assert [(p, t.num_rows) for p, t in partitions_in_order(rows, tasks)] == [(0, 1), (1, 0), (2, 1), (3, 1)]
    fail = True
    with pytest.raises(Exception, match="task 2 breaks"):
        list(partitions_in_order(rows, tasks))
    assert spark.range(3).count() == 3


def test_elsewhere_the_output_is_collected_whole_and_split(
    monkeypatch: pytest.MonkeyPatch, spark: SparkSession
) -> None:
    monkeypatch.setattr(collect, "is_local_master", lambda master: False)

    def tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = _part()
        for _ in batches:
            pass
        yield from (_envelope(part, i, b"y") for i in range(2))

    out = [
        (p, t.column("count").to_pylist()) for p, t in partitions_in_order(spark.range(0, 30, numPartitions=3), tasks)
    ]
    assert out == [(0, [0, 1]), (1, [0, 1]), (2, [0, 1])]


def test_unreadable_task_output_names_the_partition(tmp_path: Path) -> None:
    (tmp_path / "part-000000.arrow").write_bytes(b"not arrow")
    with pytest.raises(collect.CaptureError, match="unreadable task output") as raised:
        collect._read(tmp_path / "part-000000.arrow", 0)
    assert "partition 0" in str(raised.value)


def test_a_killed_drivers_directory_is_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tempdirs, "_swept", set())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"changefeed-collect-{gone.pid}-abc"
    alive = tmp_path / "changefeed-collect-1-abc"  # init runs
    mine = tmp_path / f"changefeed-collect-{os.getpid()}-abc"
    other = tmp_path / "changefeed-collect-x-abc"
    for path in (dead, alive, mine, other):
        path.mkdir()
        (path / "part-000000.arrow").write_bytes(b"x")
    tempdirs.sweep_dead(collect._PREFIX)
    assert not dead.exists() and alive.exists() and mine.exists() and other.exists()
