"""A real Iceberg REST catalog for tests: Lakana's server (PyPI ``lakana-server``) on SQLite and a local directory.

``lakana-server`` serves the Iceberg REST catalog API (``/v1/...``) over a metadata database that may be
SQLite, and writes table metadata to an environment's storage, which may be a ``file://`` directory: no
Postgres, no object store. What it asks of a client:

* a bearer token: the server creates its first administrator at start with the key id and secret given
  in ``LAKANA_BOOTSTRAP_PAT_*`` (environment variables, never arguments), random per server here;
* the REST ``prefix``: the name of one of its environments (its ``GET /v1/config`` returns no prefix), each
  with its own storage root, so `IcebergRestServer.environment` gives every test a catalog of its own;
* tables under a top-level namespace ``bronze``, ``silver`` or ``gold`` (its own rule), at a location it
  assigns (``<root>/managed/<namespace>/<table>-<uuid>``; it refuses one from the client).

``scripts/setup`` installs it with the project's test dependencies.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from changefeed.testing import ServiceError
from changefeed.testing.process import ManagedProcess

__all__ = ["IcebergRestServer", "RestEnvironment"]

#: The catalog name changefeed's Iceberg sink reads pyiceberg's configuration of (changefeed.sink.lake.iceberg).
_CATALOG_ENV = "PYICEBERG_CATALOG__CHANGEFEED__"


@dataclass(frozen=True)
class RestEnvironment:
    """One Lakana environment: a catalog of its own (REST ``prefix``) over its own warehouse directory."""

    uri: str
    prefix: str
    token: str
    warehouse: Path

    def client_env(self) -> dict[str, str]:
        """pyiceberg's configuration of the ``changefeed`` catalog as environment variables (token included)."""
        return {f"{_CATALOG_ENV}PREFIX": self.prefix, f"{_CATALOG_ENV}TOKEN": self.token}

    def catalog(self) -> Any:
        """A pyiceberg RestCatalog client of its own (not the sink's), for reading back."""
        from pyiceberg.catalog.rest import RestCatalog  # noqa: PLC0415 - pyiceberg only where used

        return RestCatalog("reader", uri=self.uri, prefix=self.prefix, token=self.token)


class IcebergRestServer(ManagedProcess):
    """``lakana-server`` on a free 127.0.0.1 port, its SQLite database and warehouses in a temp directory.

    Ready once ``/healthz`` answers 200; the database is migrated before the first start.
    """

    program = "lakana-server"

    def __init__(self, *, startup_timeout: float = 60.0, shutdown_timeout: float = 10.0, name: str = "lakana") -> None:
        """Configure (not start) a server."""
        super().__init__(name=name, port=None, startup_timeout=startup_timeout, shutdown_timeout=shutdown_timeout)
        self._key_id = secrets.token_hex(8)
        self._secret = secrets.token_urlsafe(32)
        self._environments = 0

    @property
    def uri(self) -> str:
        """``http://127.0.0.1:PORT``: the catalog's base URI (pyiceberg appends ``/v1/...``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def token(self) -> str:
        """The administrator's bearer token (a secret: keep it out of arguments and logs)."""
        return f"lakana_pat_{self._key_id}_{self._secret}"

    def environment(self, name: str | None = None) -> RestEnvironment:
        """A new environment (a catalog of its own) whose warehouse is a fresh directory under the server's."""
        self._environments += 1
        name = name or f"env{self._environments}"
        warehouse = self._require_dir("warehouse") / "warehouses" / name
        warehouse.mkdir(parents=True)
        body = {"name": name, "storage": {"scheme": "file", "root": warehouse.as_uri()}}
        status, answer = self._request("POST", "/api/v1/environments", body)
        if status != 201:
            raise ServiceError(f"{self.name}: creating environment {name!r} failed: HTTP {status} {answer[:300]!r}")
        return RestEnvironment(self.uri, name, self.token, warehouse)

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except OSError as exc:
            raise ServiceError(f"{self.name}: {method} {path} failed: {exc}") from exc
        finally:
            conn.close()

    # --- lifecycle hooks (ManagedProcess) ------------------------------------------------------------

    def _make_dir(self) -> Path:
        path = Path(tempfile.mkdtemp(prefix="changefeed-iceberg-rest-"))  # mode 0700
        (path / "warehouses").mkdir()
        return path

    @property
    def log_file(self) -> Path:
        return self._require_dir("log") / "lakana-server.log"

    def _database_url(self) -> str:
        return f"sqlite:///{self._require_dir('database') / 'catalog.db'}"

    def _process_env(self) -> Mapping[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKANA_", "PYICEBERG_"))}
        env |= {
            "LAKANA_DATABASE__URL": self._database_url(),
            "LAKANA_HOST": self.host,
            "LAKANA_PORT": str(self.port),
            "LAKANA_BOOTSTRAP_PAT_KEY_ID": self._key_id,
            "LAKANA_BOOTSTRAP_PAT_SECRET": self._secret,
            "LAKANA_LOG__LEVEL": "WARNING",
            "LAKANA_LOG__ACCESS": "false",
        }
        return env

    def _prepare(self) -> None:
        """Create the metadata database's tables (``lakana-server migrate``) once."""
        if importlib.util.find_spec("lakana_server") is None:
            raise ServiceError("lakana-server is not installed in this environment: run scripts/setup")
        if (self._require_dir("database") / "catalog.db").exists():
            return
        try:
            done = subprocess.run(
                [sys.executable, "-m", "lakana_server", "migrate"],
                env=dict(self._process_env()),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(f"{self.name}: migrating its database failed: {exc}") from exc
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).decode("utf-8", "replace")[-3000:]
            raise ServiceError(f"{self.name}: migrating its database failed (exit {done.returncode}):\n{tail}")

    def _argv(self) -> list[str]:
        return [sys.executable, "-m", "lakana_server"]

    def _output_path(self) -> Path:
        return self.log_file

    def _address(self) -> str:
        return self.uri

    def _bind_failed(self) -> bool:
        try:
            return "address already in use" in self.log_file.read_text(errors="replace").lower()
        except OSError:
            return False

    def _probe(self) -> bool | Exception:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError as exc:
            return exc
        finally:
            conn.close()
