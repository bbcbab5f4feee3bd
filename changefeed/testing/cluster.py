"""A Spark standalone cluster on this machine: a master and N workers from PySpark's own ``bin/spark-class``.

Why: ``local[*]`` runs every task in processes that share the driver's virtualenv, so it cannot show
that a job works where executors know nothing of the project. Here each worker runs in its own
mount namespace (``unshare --mount``; needs root) with empty tmpfs mounts over the driver's
``VENV/bin`` and over the ``changefeed`` package directory: the interpreter the driver would name
for executors (``VENV/bin/python``) does not exist there, nor does the project's source. The base
interpreter the virtualenv links to (``bin/python`` of a packed environment points at it) stays
visible, as a node's system Python would be. So a Python task runs on a worker only when the job
shipped its environment (`changefeed.spark.ship`). :meth:`SparkWorker.hides` checks the hiding
through ``/proc/PID/root``, the worker's own view of the file system.

Each worker has 1 core by default; executor logs land in ``WORKDIR/app-*/<executor>/stderr``,
which :meth:`StandaloneCluster.tasks_per_worker` reads to tell which worker ran how many tasks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from changefeed.testing import ServiceError
from changefeed.testing.ports import HOST, free_port, port_is_open
from changefeed.testing.process import ManagedProcess

__all__ = ["SparkMaster", "SparkWorker", "StandaloneCluster", "spark_home"]

#: Small daemons: C1 JIT and the serial GC start fastest on 2 cores; they only schedule.
_DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
#: An executor's log line of a task it started (``Running``) or finished (``Finished``).
_TASK_LINE = r"{state} task \S+ in stage \S+ \(TID \d+\)"


def spark_home() -> Path:
    """The installed ``pyspark`` package directory: a complete Spark distribution (bin/, jars/, sbin/)."""
    # Found, not imported: pyspark is imported only under changefeed/spark (tests/test_architecture.py).
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ServiceError("pyspark is not installed")
    home = Path(spec.origin).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise ServiceError(f"{home} has no bin/spark-class: PySpark is not the pip package")
    return home


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """Our environment without what points at the driver's virtualenv or Python (a node would not have it)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONHOME"}
        and not k.startswith("SPARK_")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=HOST, SPARK_DAEMON_JAVA_OPTS=_DAEMON_JAVA_OPTS)
    env.setdefault("SPARK_DAEMON_MEMORY", "256m")
    env.update(extra)
    return env


def _json(url: str) -> Any:
    """A status page's JSON; a page still being served by a starting daemon reads as an OSError, not a ValueError."""
    with urllib.request.urlopen(url, timeout=3) as resp:
        body = resp.read()
    try:
        return json.loads(body)
    except ValueError as exc:  # an empty or cut page under load: the probe retries
        raise OSError(f"{url} is not JSON yet ({len(body)} bytes): {exc}") from None


class SparkMaster(ManagedProcess):
    """``org.apache.spark.deploy.master.Master`` on a free port, its web UI (and JSON) on another."""

    program = "spark-class (Master)"

    def __init__(self, directory: Path, *, startup_timeout: float = 90.0) -> None:
        super().__init__(name="spark-master", port=None, startup_timeout=startup_timeout, shutdown_timeout=20)
        self._given = directory
        self.ui_port = 0

    @property
    def url(self) -> str:
        """``spark://127.0.0.1:PORT``: the ``--master`` of jobs."""
        return f"spark://{self.host}:{self.port}"

    def state(self) -> dict[str, Any]:
        """The master's ``/json/``: workers (with state and cores), active and completed applications."""
        return dict(_json(f"http://{self.host}:{self.ui_port}/json/"))

    def _make_dir(self) -> Path:
        self._given.mkdir(parents=True, exist_ok=True)
        return self._given

    def _prepare(self) -> None:
        self.ui_port = free_port(HOST)

    def _argv(self) -> list[str]:
        return [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.master.Master",
            *("--host", HOST, "--port", str(self.port), "--webui-port", str(self.ui_port)),
        ]

    def _process_env(self) -> Mapping[str, str]:
        return _clean_env({"SPARK_LOG_DIR": str(self._require_dir("directory"))})

    def _output_path(self) -> Path:
        return self._require_dir("directory") / "master.log"

    def _address(self) -> str:
        return self.url

    def _probe(self) -> bool | Exception:
        if not port_is_open(self.host, self.port):
            return False
        try:
            return self.state().get("status") == "ALIVE"
        except OSError as exc:
            return exc

    def _bind_failed(self) -> bool:
        return "BindException" in self._logs()


class SparkWorker(ManagedProcess):
    """``org.apache.spark.deploy.worker.Worker`` in its own mount namespace that hides ``hide``."""

    program = "spark-class (Worker)"

    def __init__(
        self,
        master: SparkMaster,
        directory: Path,
        *,
        index: int,
        cores: int = 1,
        memory: str = "1g",
        hide: tuple[Path, ...] = (),
        startup_timeout: float = 90.0,
    ) -> None:
        super().__init__(name=f"spark-worker-{index}", port=None, startup_timeout=startup_timeout, shutdown_timeout=20)
        self.master, self._given, self.cores, self.memory, self.hide = master, directory, cores, memory, hide
        self.ui_port = 0

    @property
    def work_dir(self) -> Path:
        """Where executors run: ``app-*/<executor id>/`` with their stderr and the unpacked archives."""
        return self._require_dir("directory") / "work"

    @property
    def worker_id(self) -> str | None:
        """The id the master knows this worker by (``worker-...-127.0.0.1-PORT``)."""
        for w in self.master.state().get("workers", []):
            if w.get("port") == self.port and w.get("state") == "ALIVE":
                return str(w["id"])
        return None

    def hides(self, path: Path) -> bool:
        """True when ``path`` (a file or directory seen by us) is absent or empty in the worker's namespace."""
        pid = self.pid
        if pid is None:
            raise ServiceError(f"{self.name} is not running")
        inside = Path(f"/proc/{pid}/root") / Path(os.path.abspath(path)).relative_to("/")  # links stay links
        return not inside.exists() or (inside.is_dir() and not any(inside.iterdir()))

    def _make_dir(self) -> Path:
        self._given.mkdir(parents=True, exist_ok=True)
        return self._given

    def _prepare(self) -> None:
        self.ui_port = free_port(HOST)
        self.work_dir.mkdir(exist_ok=True)

    def _argv(self) -> list[str]:
        worker = [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            self.master.url,
            *("--host", HOST, "--port", str(self.port), "--webui-port", str(self.ui_port)),
            *("--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(self.work_dir)),
        ]
        if not self.hide:
            return worker
        unshare, mount = shutil.which("unshare"), shutil.which("mount")
        if unshare is None or mount is None or os.geteuid() != 0:
            raise ServiceError(f"{self.name}: hiding {self.hide} needs root with unshare and mount (util-linux)")
        # unshare execs (no fork) into a private mount namespace; the mounts stay in it.
        mounts = " && ".join(f'{mount} -t tmpfs -o size=1m,mode=0755 tmpfs "${i + 1}"' for i in range(len(self.hide)))
        script = f'{mounts} && shift {len(self.hide)} && exec "$@"'
        hidden = [str(p) for p in self.hide]
        return [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *hidden, *worker]

    def _process_env(self) -> Mapping[str, str]:
        return _clean_env({"SPARK_LOG_DIR": str(self._require_dir("directory"))})

    def _output_path(self) -> Path:
        return self._require_dir("directory") / "worker.log"

    def _address(self) -> str:
        return f"{self.host}:{self.port}"

    def _probe(self) -> bool | Exception:
        try:
            return self.worker_id is not None
        except OSError as exc:
            return exc

    def _after_ready(self) -> None:
        for path in self.hide:
            if not self.hides(path):
                raise ServiceError(f"{self.name}: {path} is still visible in the worker's mount namespace")

    def _bind_failed(self) -> bool:
        return "BindException" in self._logs()


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` each), the driver's environment hidden from the workers.

    ``hide`` defaults to this interpreter's ``VENV/bin`` and the ``changefeed`` package directory;
    ``hide=()`` gives plain workers that share the driver's environment.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        hide: tuple[Path, ...] | None = None,
        directory: Path | None = None,
        keep: bool = False,
    ) -> None:
        if hide is None:
            import changefeed  # noqa: PLC0415

            hide = (Path(sys.prefix) / "bin", Path(changefeed.__file__).resolve().parent)
        self._given = directory
        self._keep = keep
        self.directory = directory or Path(tempfile.mkdtemp(prefix="changefeed-spark-cluster-"))
        self.master = SparkMaster(self.directory / "master")
        self.workers = [
            SparkWorker(self.master, self.directory / f"worker-{i}", index=i, cores=cores, memory=memory, hide=hide)
            for i in range(workers)
        ]

    @property
    def url(self) -> str:
        return self.master.url

    def start(self, timeout: float = 120.0) -> Self:
        """Start the master, then the workers together; return once all registered as ALIVE."""
        try:
            self.master.start()
            for worker in self.workers:  # the probe waits per worker; their JVMs start while we wait
                worker.start()
            deadline = time.monotonic() + timeout
            while self._alive_workers() < len(self.workers):
                if time.monotonic() > deadline:
                    raise ServiceError(f"not all {len(self.workers)} workers registered with {self.url}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def _alive_workers(self) -> int:
        try:
            return sum(w.get("state") == "ALIVE" for w in self.master.state().get("workers", []))
        except OSError:
            return 0  # the master's page is not answering yet

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until every worker is alive with none of its cores in use.

        Why: an application that ended frees its workers' cores only once each executor has exited;
        the master hands a new application's cores to the workers free at that moment, so an
        application started right after another may get every core on one worker.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                workers = self.master.state().get("workers", [])
            except OSError:
                workers = []
            alive = [w for w in workers if w.get("state") == "ALIVE"]
            if len(alive) >= len(self.workers) and all(w.get("coresused", 0) == 0 for w in alive):
                return
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.url}: workers still busy after {timeout:.0f} s: {workers}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the workers (their executors with them), then the master; remove the directory unless kept."""
        try:
            for worker in self.workers:
                worker.stop()
            self.master.stop()
        finally:
            if not self._keep and self._given is None:
                shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def applications(self) -> list[str]:
        """Ids of every application the workers ran an executor for (their ``work/app-*`` directories)."""
        return sorted({p.name for w in self.workers if w.work_dir.is_dir() for p in w.work_dir.glob("app-*")})

    def tasks_per_worker(self, app_id: str | None = None, state: str = "Finished") -> dict[str, int]:
        """Worker name -> how many tasks its executors finished (or, ``state="Running"``, started): the
        ``<state> task`` lines of their stderr."""
        line = re.compile(_TASK_LINE.format(state=re.escape(state)))
        counts: dict[str, int] = {}
        for worker in self.workers:
            pattern = f"{app_id or 'app-*'}/*/stderr"
            logs = list(worker.work_dir.glob(pattern)) if worker.work_dir.is_dir() else []
            counts[worker.name] = sum(len(line.findall(p.read_text(errors="replace"))) for p in logs)
        return counts

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The executors' working directories of ``app_id`` on every worker."""
        dirs = (p for w in self.workers if w.work_dir.is_dir() for p in w.work_dir.glob(f"{app_id}/*"))
        return sorted(p for p in dirs if p.is_dir())
