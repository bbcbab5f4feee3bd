"""`changefeed run` and `apply` on a real Spark standalone cluster whose workers lack the project.

One master and two workers (1 core each) from PySpark's own ``spark-class``
(`changefeed.testing.cluster`); each worker's mount namespace hides the driver's ``.venv/bin`` and
the ``changefeed`` source, so a Python task can only run from the environment the job ships
(`changefeed.spark.ship`). Capture (live MariaDB -> Kafka) then apply (Kafka -> MariaDB) run as
separate applications (a standalone app takes every free core, so they run one after the other,
``--available-now``); downstream must equal upstream as MariaDB's own client prints them, and
both workers' executors must have finished tasks of each application.

Cost: ~20 s for the cluster, the packed environment once per source change (~20 s), then each
application's JVM, executors and their unpacking of the archive (~1 min each on 2 loaded cores).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from changefeed.clients.mysql import MySQLError
from changefeed.testing import Broker, MariaDBServer
from changefeed.testing.cluster import StandaloneCluster
from tests.mariadb_client import client_output
from tests.services import service_unavailable

if TYPE_CHECKING:
    from tests.conftest import ReplicaUser

pytestmark = [pytest.mark.mariadb, pytest.mark.broker, pytest.mark.spark, pytest.mark.timeout(900)]

#: Small executors (a worker offers 1g) and fast-starting JVMs, as the other Spark tests use. The
#: driver waits for both workers' cores before its first task (standalone's default waits for
#: none: on a loaded machine one executor could register late and another run every task).
JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
SPARK = [
    *("--spark-conf", "spark.executor.memory=512m"),
    *("--spark-conf", f"spark.driver.extraJavaOptions={JVM}"),
    *("--spark-conf", f"spark.executor.extraJavaOptions={JVM}"),
    *("--spark-conf", "spark.cores.max=2"),
    *("--spark-conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"),
    *("--spark-conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=240s"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    try:
        started = StandaloneCluster(workers=2, cores=1).start()
    except Exception as exc:
        service_unavailable(f"Spark standalone cluster could not start: {type(exc).__name__}: {exc}")
    try:
        yield started
    finally:
        started.stop()


def _changefeed(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run the CLI as a separate driver process (a fresh JVM with the cluster as master); its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "changefeed", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"changefeed {argv[0]} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-6000:]}"
    return done.stdout


def _has_row(server: MariaDBServer, sql: str) -> bool:
    """Whether ``sql`` returns a row (False while its table does not exist yet)."""
    try:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone() is not None
    except MySQLError:
        return False


def _new_app(cluster: StandaloneCluster, before: list[str]) -> str:
    apps = [a for a in cluster.applications() if a not in before]
    assert len(apps) == 1, f"expected one new application on the workers, found {apps}"
    return apps[0]


def test_capture_and_apply_run_on_both_workers_without_the_project_installed(
    cluster: StandaloneCluster,
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    replica_user: ReplicaUser,
    broker: Broker,
    tmp_path: Path,
) -> None:
    import changefeed  # noqa: PLC0415

    for worker in cluster.workers:  # the premise: the workers cannot use the driver's environment
        assert worker.hides(Path(sys.prefix) / "bin" / "python")
        assert worker.hides(Path(changefeed.__file__))
    schema, cid = f"cl_{uuid.uuid4().hex[:8]}", f"cluster-{uuid.uuid4().hex[:6]}"
    topic = cid
    broker.create_topic(topic, 2)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        status = cur.fetchone()
        assert status is not None, "the upstream has no binlog"
        file, pos = status[:2]
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(f"CREATE TABLE `{schema}`.acct (id INT PRIMARY KEY, name VARCHAR(20), bal DECIMAL(10,2))")
        for start in range(0, 120, 10):  # 12 transactions of 10 rows
            values = ", ".join(f"({i}, 'n{i}', {i}.25)" for i in range(start, start + 10))
            cur.execute(f"INSERT INTO `{schema}`.acct VALUES {values}")
            conn.commit()
        cur.execute(f"UPDATE `{schema}`.acct SET bal = bal * 2, name = CONCAT(name, 'x') WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM `{schema}`.acct WHERE id % 7 = 0")
        conn.commit()
    kafka = f"kafka://{broker.bootstrap_servers}/{topic}?protocol=open-protocol&partition-num=2"
    config = tmp_path / "cluster.toml"
    config.write_text(
        f'changefeed-id = "{cid}"\nsink-uri = "{kafka}"\n[source]\ntype = "mysql"\n'
        f'url = "{replica_user.url}"\npassword-env = "CF_CLUSTER_PW"\nstart-position = "{file}:{pos}"\n'
        f'[filter]\nrules = ["{schema}.*"]\n'
    )
    env = {**os.environ, "CF_CLUSTER_PW": replica_user.password}
    master = ["--master", cluster.url, "--available-now", *SPARK]
    try:
        before = cluster.applications()
        out = _changefeed(
            "run",
            str(config),
            *master,
            "--max-events",
            "15",
            "--checkpoint",
            str(tmp_path / "ck-run"),
            cwd=tmp_path,
            env=env,
        )
        assert f"changefeed {cid}: " in out, out
        capture_app = _new_app(cluster, before)

        cluster.wait_idle()  # else the apply may get both cores on the worker the capture freed first
        before = cluster.applications()
        target = f"{mariadb_downstream.url}/?worker-count=1"
        apply_argv = ["apply", "--from", kafka, "--to", target, "--changefeed-id", cid]
        out = _changefeed(*apply_argv, *master, "--checkpoint", str(tmp_path / "ck-apply"), cwd=tmp_path)
        assert "apply: " in out, out
        apply_app = _new_app(cluster, before)

        query = f"SELECT id, name, bal FROM `{schema}`.acct ORDER BY id"
        upstream = client_output(mariadb, query)
        assert upstream.count("\n") == 120 - len(range(0, 120, 7))
        assert client_output(mariadb_downstream, query) == upstream

        # The capture's tasks finished on both workers. The apply ends within seconds (available now):
        # its warm-up read (changefeed/spark/warmup.py) may still hold one worker's core, starting that
        # executor's Python, when the batch's tasks are placed, so they can all go to the other worker
        # and the warm-up task is stopped with the app: for it, a task started on each worker.
        for app, state in ((capture_app, "Finished"), (apply_app, "Running")):
            tasks = cluster.tasks_per_worker(app, state)
            assert all(n > 0 for n in tasks.values()), f"{app}: tasks {state.lower()} per worker {tasks}"
            # Their Python ran from the shipped archive, unpacked in each executor's directory.
            executors = cluster.executor_dirs(app)
            assert executors and all((d / "environment" / "bin" / "python").exists() for d in executors)
        assert sum(cluster.tasks_per_worker(apply_app).values()) > 0  # and the apply's tasks finished
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        with mariadb_downstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
            cur.execute("DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = %s", (cid,))


def test_run_into_mariadb_survives_a_killed_worker_and_a_killed_driver(
    cluster: StandaloneCluster,
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    replica_user: ReplicaUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A streaming `changefeed run` (live MariaDB -> MariaDB, exactly once) on the cluster under a writer:
    SIGKILL one worker with its executor (the driver re-runs the lost tasks on the other; the worker comes
    back), then SIGKILL the driver and start it again. The downstream ends equal, as MariaDB's client prints it."""
    from tests.e2e.exactly_once import Job  # noqa: PLC0415

    schema, cid = f"clk_{uuid.uuid4().hex[:8]}", f"cluster-kill-{uuid.uuid4().hex[:6]}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(f"CREATE TABLE `{schema}`.acct (id INT PRIMARY KEY, name VARCHAR(20), bal DECIMAL(10,2))")
        conn.commit()
    stop = threading.Event()
    written = [0]

    def write() -> None:
        rng = random.Random(3)
        with mariadb.connect(database=schema) as conn, conn.cursor() as cur:
            while not stop.is_set():
                base = written[0] * 5
                cur.execute(
                    "INSERT INTO acct VALUES " + ", ".join(f"({i}, 'n{i}', {i}.5)" for i in range(base, base + 5))
                )
                cur.execute("UPDATE acct SET bal = bal + 1, name = 'u' WHERE id = %s", (rng.randrange(base + 5),))
                if rng.random() < 0.3:
                    cur.execute("DELETE FROM acct WHERE id = %s", (rng.randrange(base + 5),))
                conn.commit()
                written[0] += 1
                time.sleep(0.05)

    config = tmp_path / "cluster-kill.toml"
    config.write_text(
        f'changefeed-id = "{cid}"\nsink-uri = "{mariadb_downstream.url}/?worker-count=1"\n[source]\ntype = "mysql"\n'
        f'url = "{replica_user.url}"\npassword-env = "CF_CLUSTER_PW"\nstart-position = "{file}:{pos}"\n'
        f'[filter]\nrules = ["{schema}.*"]\n'
    )
    monkeypatch.setenv("CF_CLUSTER_PW", replica_user.password)
    argv = ["run", str(config), "--master", cluster.url, "--trigger-interval", "1s", "--max-events", "200", *SPARK]
    job = Job("run", [*argv, "--checkpoint", str(tmp_path / "ck")], tmp_path)

    def batches_after(seen: int, more: int, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while job.batches() < seen + more:
            job.check_alive()
            assert time.monotonic() < deadline, job.tail()
            time.sleep(0.5)

    writer = threading.Thread(target=write, name="writer", daemon=True)
    try:
        writer.start()
        job.start()
        batches_after(0, 2)
        cluster.workers[0].kill()  # its executor and Python workers die with it (one process group)
        batches_after(job.batches(), 3)  # the lost tasks ran again on the other worker
        lost = [line for line in job.log.read_text(errors="replace").splitlines() if "executor" in line.lower()]
        print("\n".join(lost[-10:]))
        assert any("Lost executor" in line or "Executor lost" in line for line in lost), job.tail()
        cluster.workers[0].start()
        job.kill()
        job.start()
        batches_after(0, 3)
        stop.set()
        writer.join(30)
        with mariadb.connect(database=schema) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO acct VALUES (-1, 'marker', 0)")
            conn.commit()
        deadline = time.monotonic() + 240
        query = f"SELECT id, name, bal FROM `{schema}`.acct ORDER BY id"
        while not _has_row(mariadb_downstream, f"SELECT 1 FROM `{schema}`.acct WHERE id = -1"):
            job.check_alive()
            assert time.monotonic() < deadline, job.tail()
            time.sleep(0.5)
        job.interrupt()
        job.finish(120)
        assert written[0] > 20
        assert client_output(mariadb_downstream, query) == client_output(mariadb, query)
    finally:
        stop.set()
        job.stop()
        cluster.workers[0].start()  # the next test gets two workers again
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        with mariadb_downstream.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
            cur.execute("DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = %s", (cid,))
