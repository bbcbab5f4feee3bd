"""A class-data-sharing archive of the driver JVM's Spark classes: Spark sessions start in half the time.

Why: every ``changefeed run``/``apply``/``pipeline`` starts a driver JVM that loads and verifies
thousands of Spark classes before its first micro-batch (7.5-10 s to a first job on 2 cores); with
the JDK's dynamic AppCDS archive of those classes mapped in, 3.7-3.9 s (bench/RESULTS.md). A
restart after a crash, the CLI's one-shot commands and the test suite's many jobs all start that
way.

`build` (run by ``scripts/setup``) builds it once: a child
process starts a session with ``-XX:ArchiveClassesAtExit``, runs a small job and exits, and the
archive is moved into the cache under a name made of what it depends on (the JDK, PySpark's jars),
so a changed JDK or Spark never meets an old archive. Sessions then add ``-XX:SharedArchiveFile``
when that archive exists; without it (never built, or deleted) they start as before. CDS logging
is off either way: a refused archive costs only the speed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["archive_path", "build", "with_archive"]

#: Bumped when what goes into an archive changes.
_VERSION = 1
#: Archives of other environments kept besides the one built.
_KEEP = 2
#: A refused archive (another JDK build, a changed classpath) is a warning on the JVM's stdout: not ours.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _cache_dir() -> Path:
    from .ship import default_cache_dir  # noqa: PLC0415

    return default_cache_dir().parent / "cds"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(java).resolve() if java else None


def archive_path() -> Path | None:
    """Where this JDK's and this PySpark's archive is (whether built or not); None without a ``java``."""
    java = _java()
    if java is None:
        return None
    import pyspark  # noqa: PLC0415

    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256()
    # The JVM checks the archive against its class path (where each jar is, and its size and time).
    key.update(f"{_VERSION}\n{java}\n{pyspark.__version__}\n{jars.resolve()}\n".encode())
    release = java.parent.parent / "release"
    if release.is_file():
        key.update(release.read_bytes())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        key.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return _cache_dir() / f"spark-driver-{key.hexdigest()[:16]}.jsa"


def with_archive(java_options: str) -> str:
    """``java_options`` with the archive mapped in, when it was built (see the module doc)."""
    path = archive_path()
    if (
        path is None
        or not path.is_file()
        or "SharedArchiveFile" in java_options
        or "ArchiveClassesAtExit" in java_options
    ):
        return java_options
    return f"{java_options} -XX:SharedArchiveFile={path} {_QUIET}".strip()


_WARM_UP = """
import sys
from changefeed.spark.session import spark_session
spark = spark_session(app_name="changefeed-class-archive", extra_conf={"spark.driver.extraJavaOptions": sys.argv[1]})
df = spark.range(0, 1000, numPartitions=2)
df.selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
df.toArrow()
spark.stop()
"""


def build(force: bool = False) -> Path | None:
    """Build the archive unless it exists; its path, or None when no JDK is found or the JVM made none."""
    path = archive_path()
    if path is None or (path.is_file() and not force):
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    options = f"-XX:TieredStopAtLevel=1 -XX:+UseParallelGC -XX:ArchiveClassesAtExit={temporary} {_QUIET}"
    # A child process: the JVM writes the archive when it exits, which is when its Python exits.
    subprocess.run([sys.executable, "-c", _WARM_UP, options], check=False, capture_output=True, timeout=600)
    if not temporary.is_file():
        return None
    os.replace(temporary, path)
    # Older archives (other virtualenvs, JDKs, PySpark versions): the newest few stay, ~160 MB each.
    others = sorted((p for p in path.parent.glob("spark-driver-*.jsa") if p != path), key=lambda p: p.stat().st_mtime)
    for old in others[:-_KEEP]:
        old.unlink(missing_ok=True)
    return path
