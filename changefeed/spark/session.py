"""The one way this project builds a SparkSession: local mode tuned for small machines and tests.

pyspark is imported inside :func:`spark_session` so ``import changefeed.spark`` stays cheap and the
rest of the package never needs a JVM.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .classarchive import with_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MARIADB_JDBC_DRIVER", "MARIADB_JDBC_JAR", "jdbc_url", "spark_session"]

#: MariaDB Connector/J from the Debian package ``libmariadb-java`` (Maven is not reachable here).
MARIADB_JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"
#: Driver class to pass as the JDBC ``driver`` option together with a ``jdbc:mysql://`` URL.
MARIADB_JDBC_DRIVER = "org.mariadb.jdbc.Driver"


def jdbc_url(host: str, port: int, db: str) -> str:
    """``jdbc:mysql://HOST:PORT/DB`` for use with :data:`MARIADB_JDBC_DRIVER`.

    Not ``jdbc:mariadb://``: Spark picks its SQL dialect from the URL prefix, and with ``mariadb``
    it falls back to the generic dialect that quotes identifiers with ``"``, which MariaDB reads as
    string literals.
    """
    return f"jdbc:mysql://{host}:{port}/{db}"


#: Hadoop's local file system without its native library (PySpark ships none) starts a process
#: for every ``chmod`` of a file created with a permission and every ``readlink`` of a
#: ``FileContext`` rename, and ``LocalFileSystem`` writes a ``.crc`` file beside each file: a
#: streaming checkpoint cost 10-16 child processes per micro-batch, ~40 ms of ``walCommit`` and
#: ~45 ms of ``commitOffsets`` per batch and job (bench/RESULTS.md, "Checkpoint writes without
#: forks"). The raw local file system creates files without ``chmod`` and without checksum files;
#: other schemes (hdfs, s3a, ...) are not affected by ``fs.file.impl``.
LOCAL_FILES_WITHOUT_FORKS = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}

#: The checkpoint file manager for a checkpoint on a local disk: Spark's ``FileSystem``-based one
#: writes a temporary file and renames it, which on a local disk is ``rename(2)``: atomic, so a
#: kill -9 leaves the old file or the new one, never a torn one, as the default ``FileContext``
#: manager does, without its ``readlink`` per rename. Elsewhere Spark's default stays (its
#: ``FileContext`` rename is the atomic one on HDFS).
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def checkpoint_conf(spark: SparkSession, location: str | os.PathLike[str]) -> None:
    """Choose the checkpoint file manager for a query checkpointing at ``location``, unless the user chose one."""
    text = os.fspath(location)
    scheme = text.partition("://")[0] if "://" in text else "file"
    # Set once: a second query of the session (`changefeed pipeline`) must not write the session's
    # conf while the first one's tasks are serialized (a java.io.OptionalDataException in a task, seen in CI).
    if scheme == "file" and spark.conf.get(CHECKPOINT_MANAGER, None) is None:
        spark.conf.set(CHECKPOINT_MANAGER, LOCAL_CHECKPOINT_MANAGER)


#: Task attempts in local mode, as Spark's default ``spark.task.maxFailures`` on a cluster.
LOCAL_TASK_ATTEMPTS = 4
_LOCAL = re.compile(r"^local(?:\[(\*|\d+)\])?$")


def local_with_retries(master: str) -> str:
    """``local`` / ``local[N]`` / ``local[*]`` as ``local[N,4]``: a failed task is retried, as on a cluster.

    Why: Spark's local mode runs each task once (``spark.task.maxFailures`` applies only to
    ``local[N,F]``), so one transient task failure ends the job. Two queries of one session
    (`changefeed pipeline`) hit one: Spark's Python streaming source runner writes its data
    source's environment map (``PythonStreamingSourceRunner``: ``envVars.put`` on the function's own
    map, read from Spark 4.3's bytecode) while the other query's task holding that function is
    serialized, and the task fails to deserialize (``java.io.OptionalDataException``). Our tasks
    only read (ranges, files, messages), so running one again changes nothing. Any other master,
    and ``local[N,F]`` as given, is left alone.
    """
    m = _LOCAL.match(master.strip())
    if m is None:
        return master
    return f"local[{m.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


def _conf_value(value: Any) -> str:
    """Spark wants ``true``/``false``, not Python's ``True``/``False``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def spark_session(
    master: str = "local[2]",
    app_name: str = "changefeed",
    extra_conf: Mapping[str, Any] | None = None,
    jars: Iterable[str | os.PathLike[str]] | None = None,
) -> SparkSession:
    """Build (or return the running) SparkSession for local work.

    Sets ``PYSPARK_PYTHON`` to this interpreter so Python workers see the venv (pyarrow, our
    package) even when it is not activated, binds to 127.0.0.1, turns the UI and console progress
    bar off, keeps shuffles small, uses UTC as the session time zone (same rendering on every
    machine), starts Python workers through `changefeed.spark.pyworker` (PySpark's daemon without
    the per-task cost of importing from pyspark.zip), and puts the MariaDB JDBC jar on the
    classpath when installed.
    ``extra_conf`` wins over these defaults. JVM-level settings (memory, jars) only take effect
    when no session is running yet: getOrCreate() returns an existing one unchanged.
    """
    # py4j logs every command it sends to the JVM at DEBUG, option values included: a data
    # source's ``password`` option would land in any DEBUG log; its INFO lines are gateway chatter.
    py4j = logging.getLogger("py4j")
    if py4j.level == logging.NOTSET or py4j.level < logging.WARNING:
        py4j.setLevel(logging.WARNING)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from pyspark.sql import SparkSession  # noqa: PLC0415 - keep the JVM stack out of plain imports

    jar_list = [str(j) for j in jars or ()]
    if Path(MARIADB_JDBC_JAR).is_file() and MARIADB_JDBC_JAR not in jar_list:
        jar_list.append(MARIADB_JDBC_JAR)

    conf: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        # Workers import PySpark from the installed package, not pyspark.zip (see pyworker.py).
        "spark.python.daemon.module": "changefeed.spark.pyworker",
        # The JVM only moves Arrow buffers between Python processes here: C2's optimising compiles
        # cost more CPU than they save (bench/RESULTS.md, "JIT"); C1 alone compiles fast and early.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC",
        **LOCAL_FILES_WITHOUT_FORKS,
    }
    if jar_list:
        conf["spark.jars"] = ",".join(jar_list)
    conf.update(extra_conf or {})
    # The driver JVM's Spark classes mapped from a class-data-sharing archive, when scripts/setup built one.
    conf["spark.driver.extraJavaOptions"] = with_archive(str(conf.get("spark.driver.extraJavaOptions") or ""))

    builder = SparkSession.builder.master(local_with_retries(master)).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, _conf_value(value))
    return builder.getOrCreate()


def start_spark(
    master: str,
    settings: Iterable[str] | None = None,
    *,
    py_env: str | None = None,
    ship: bool = True,
) -> SparkSession:
    """The CLI's session: ``--master`` and ``--spark-conf KEY=VALUE`` settings, Spark's own logging quiet.

    A non-local master gets the project shipped to its executors (`changefeed.spark.ship`): the
    packed virtualenv (built once per content hash), ``py_env`` (``--py-env``) instead, or nothing
    when ``ship`` is False (``--no-ship``: the nodes have changefeed installed).
    """
    from ..errors import ConfigError  # noqa: PLC0415
    from .ship import pack_environment, plan_shipping  # noqa: PLC0415

    conf: dict[str, str] = {}
    for item in settings or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--spark-conf needs KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    shipping = plan_shipping(master, py_env=py_env, no_ship=not ship, user_conf=conf, build=pack_environment)
    logging.getLogger(__name__).info("executors' Python: %s", shipping.reason)
    conf.update(shipping.conf)
    if shipping.python is None:
        spark = spark_session(master=master, app_name="changefeed", extra_conf=conf)
    else:
        # PySpark hands executors the PYSPARK_PYTHON the driver had when its SparkContext started.
        os.environ["PYSPARK_PYTHON"] = shipping.python
        with _driver_jvm_directory(shipping.python):
            spark = spark_session(master=master, app_name="changefeed", extra_conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def _driver_jvm_directory(python: str) -> Iterator[None]:
    """Start the driver's JVM in a private directory where ``python`` (``./environment/bin/python``) is this venv.

    Why: Spark runs the Python of a Python data source's planning (schema, partitions, a streaming
    reader's offsets) in processes the driver's JVM starts with the same interpreter path it hands
    executors (``PythonPlannerRunner`` uses the function's ``pythonExec``). Relative to the JVM's
    working directory, ``./environment`` exists on executors (the unpacked archive) but not on the
    driver. The JVM keeps the directory it was started in; ours is given back right after, so
    relative paths of this process still mean the user's directory (the CLI passes the JVM
    absolute paths).
    """
    alias = Path(python).parts[0] if python.startswith("./") else None
    if alias is None:
        yield
        return
    directory = Path(tempfile.mkdtemp(prefix="changefeed-driver-"))
    atexit.register(shutil.rmtree, directory, True)
    (directory / alias).symlink_to(sys.prefix, target_is_directory=True)
    here = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(here)


def submitted_conf() -> dict[str, str]:
    """Under ``spark-submit``: the settings of the submission (its ``--master``, ``--conf``s) as the JVM holds them."""
    # spark-submit starts the JVM first and hands its gateway to this process in
    # PYSPARK_GATEWAY_PORT; SparkConf() only sees the JVM's settings once PySpark has connected to
    # it (before, it is an empty Python-side conf, and --master would fall back to local[*]).
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}  # not under spark-submit: nothing was submitted
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415 - the JVM spark-submit started

    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())
