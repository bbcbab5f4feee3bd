"""A Spark Connect server from PySpark's own distribution, for tests (``sc://127.0.0.1:PORT``).

``bin/spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` in the
foreground (what ``sbin/start-connect-server.sh`` runs as a daemon), local master, gRPC on a free
port. Its Python workers use this interpreter, so the `changefeed` data source is importable there
(a Connect server that serves changefeed's data source needs the project installed, as docs/deploy.md says).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .cluster import spark_home
from .ports import HOST, port_is_open
from .process import ManagedProcess

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnectServer(ManagedProcess):
    """A Spark Connect server on a free port of 127.0.0.1 (local master with ``cores`` threads)."""

    program = "spark-submit (SparkConnectServer)"

    def __init__(self, *, cores: int = 2, startup_timeout: float = 120.0) -> None:
        super().__init__(name="spark-connect", port=None, startup_timeout=startup_timeout, shutdown_timeout=20)
        self.cores = cores

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:PORT``: what ``SparkSession.builder.remote`` and ``--remote`` take."""
        return f"sc://{self.host}:{self.port}"

    def _make_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="changefeed-connect-"))

    def _argv(self) -> list[str]:
        work = self._require_dir("directory")
        return [
            str(spark_home() / "bin" / "spark-submit"),
            *("--class", CONNECT_SERVER, "--master", f"local[{self.cores}]"),
            *("--conf", f"spark.connect.grpc.binding.port={self.port}"),
            *("--conf", f"spark.connect.grpc.binding.address={HOST}"),
            *("--conf", "spark.ui.enabled=false", "--conf", f"spark.local.dir={work}"),
            *("--conf", f"spark.driver.extraJavaOptions=-Djava.io.tmpdir={work}"),
            "spark-internal",
        ]

    def _process_env(self) -> Mapping[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_") and k != "PYSPARK_DRIVER_PYTHON"}
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=HOST, PYSPARK_PYTHON=sys.executable)
        return env

    def _output_path(self) -> Path:
        return self._require_dir("directory") / "connect.log"

    def _address(self) -> str:
        return self.url

    def _probe(self) -> bool | Exception:
        return port_is_open(self.host, self.port)

    def _bind_failed(self) -> bool:
        logs = self._logs()
        return "BindException" in logs or "Address already in use" in logs


__all__ = ["CONNECT_SERVER", "SparkConnectServer"]
