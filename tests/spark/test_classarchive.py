"""The Spark driver JVM's class-data-sharing archive (changefeed/spark/classarchive.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from changefeed.spark import classarchive


def test_sessions_map_the_archive_only_when_it_was_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHANGEFEED_CACHE_DIR", str(tmp_path))
    path = classarchive.archive_path()
    assert path is not None and path.parent == tmp_path / "cds" and path.suffix == ".jsa"
    assert classarchive.with_archive("-Xmx1g") == "-Xmx1g"  # none built: as before
    path.parent.mkdir()
    path.write_bytes(b"archive")
    assert (
        classarchive.with_archive("-Xmx1g")
        == f"-Xmx1g -XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    )
    given = "-XX:SharedArchiveFile=/elsewhere.jsa"
    assert classarchive.with_archive(given) == given  # the user's own archive wins
    # Another JDK or Spark is another archive: the name depends on the java found.
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "other-jdk"))
    (tmp_path / "other-jdk" / "bin").mkdir(parents=True)
    (tmp_path / "other-jdk" / "bin" / "java").write_text("")
    assert classarchive.archive_path() != path


def test_the_test_session_starts_with_the_archive_setup_built(spark: SparkSession) -> None:
    """scripts/setup builds it (CI runs setup first): the session's driver JVM was started with it."""
    path = classarchive.archive_path()
    if os.environ.get("CI") == "true":
        assert path is not None and path.is_file(), "scripts/setup built no Spark class archive"
    if path is None or not path.is_file():
        pytest.skip("no class archive built here (run scripts/setup)")
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions") or ""
    assert f"-XX:SharedArchiveFile={path}" in options
