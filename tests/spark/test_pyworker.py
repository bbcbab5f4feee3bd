"""Python workers import PySpark from the installed package, not from pyspark.zip (see pyworker.py)."""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark

from changefeed.spark.pyworker import PRELOAD, archives_to_drop, preload

SPARK_HOME = Path(pyspark.__file__).resolve().parent
ZIPS = sorted(str(p) for p in (SPARK_HOME / "python" / "lib").glob("*.zip"))
CORE_JAR = next(str(p) for p in (SPARK_HOME / "jars").glob("spark-core_*.jar"))


def test_only_archives_inside_the_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    other = tmp_path / "mine.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("mine.py", "X = 1\n")
    path = [*ZIPS, CORE_JAR, str(other), *sys.path]
    assert sorted(archives_to_drop(path)) == sorted([*ZIPS, CORE_JAR])
    # Without an installed pyspark (only the archives), nothing is dropped: they are all there is.
    assert archives_to_drop([*ZIPS, CORE_JAR, str(other)]) == []


def _worker_path(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyspark as worker_pyspark  # noqa: PLC0415 - what the worker imported

    for _ in batches:
        yield pa.RecordBatch.from_pydict({"path": [sys.path], "pyspark": [worker_pyspark.__file__]})


def test_workers_run_without_the_archives(spark: Any) -> None:
    assert spark.conf.get("spark.python.daemon.module") == "changefeed.spark.pyworker"
    (row,) = spark.range(0, 1, 1, 1).mapInArrow(_worker_path, "path array<string>, pyspark string").collect()
    assert not set(row.path) & {*ZIPS, CORE_JAR}
    assert Path(row.pyspark).resolve().is_relative_to(SPARK_HOME)  # the installed package's files
    assert ".zip" not in row.pyspark


def test_preload_imports_what_it_can() -> None:
    assert preload(("json", "changefeed.spark.encode", "no_such_module_here")) == ["no_such_module_here"]
    assert "changefeed.spark.encode" in sys.modules


def _worker_modules(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"loaded": [sorted(set(PRELOAD) & set(sys.modules))]})


def test_workers_start_with_the_preloaded_modules(spark: Any) -> None:
    (row,) = spark.range(0, 1, 1, 1).mapInArrow(_worker_modules, "loaded array<string>").collect()
    assert sorted(row.loaded) == sorted(PRELOAD)
