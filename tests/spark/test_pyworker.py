"""Python workers import PySpark from the installed package, not from pyspark.zip (see pyworker.py
and changefeed/sparkpath.py): the task workers through our daemon, every other Python process
Spark starts (a data source's planners) through the ``.pth`` file scripts/setup installs."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark

from changefeed.spark.pyworker import PRELOAD, preload
from changefeed.sparkpath import PTH_LINE, archives_to_drop, drop_shadowing_archives

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


def test_any_python_started_with_the_archives_first_imports_the_installed_pyspark() -> None:
    """What Spark does for a data source's planners (``python -m pyspark.daemon
    pyspark.sql.worker.plan_data_source_read``, the streaming source runner): the archives first on
    ``PYTHONPATH``. The ``.pth`` scripts/setup installs drops them at the interpreter's start."""
    pth = Path(sysconfig.get_paths()["purelib"]) / "changefeed-sparkpath.pth"
    assert pth.read_text() == PTH_LINE  # scripts/setup wrote it (the README's test command runs setup)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*ZIPS, CORE_JAR])}
    probe = "import sys, pyspark, py4j; print(pyspark.__file__); print(py4j.__file__); print(sys.path)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    pyspark_file, py4j_file, path = out.stdout.splitlines()
    assert Path(pyspark_file).resolve().is_relative_to(SPARK_HOME) and ".zip" not in pyspark_file + py4j_file
    assert not any(archive in path for archive in [*ZIPS, CORE_JAR])
    assert out.stderr == ""  # the .pth line raised nothing


def test_dropping_never_raises_and_keeps_other_archives(monkeypatch: Any, tmp_path: Path) -> None:
    other = str(tmp_path / "mine.zip")
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("mine.py", "X = 1\n")
    monkeypatch.setattr(sys, "path", [*ZIPS, other, *sys.path])
    drop_shadowing_archives()
    assert other in sys.path and not set(ZIPS) & set(sys.path)
    monkeypatch.setattr(sys, "path", [None, *ZIPS])  # a path no scan expects: left as it is
    drop_shadowing_archives()
    assert sys.path == [None, *ZIPS]
