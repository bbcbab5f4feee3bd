"""A throwaway, disk-backed S3 server (npm ``s3rver``) so tansu's ``s3://`` storage survives broker restarts.

No MinIO or AWS here; ``scripts/setup`` installs s3rver from the repo's package-lock.json into
``.venv/node`` (ignored by git). s3rver accepts any well-formed signature for its fixed key pair
``S3RVER``/``S3RVER`` and anonymous requests, so creating a bucket is a plain HTTP PUT.
"""

from __future__ import annotations

import http.client
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from changefeed.testing import (
    ServiceError,
    _log_tail,
    _register_cleanup,
    _signal_group,
    _spawn,
    _unregister_cleanup,
    _wait_or_kill,
)
from changefeed.testing.ports import free_port, port_is_open

__all__ = ["S3Server", "s3rver_binary"]

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_REPO = Path(__file__).resolve().parents[2]
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
ACCESS_KEY = "S3RVER"  # s3rver's built-in credentials
SECRET_KEY = "S3RVER"
REGION = "us-east-1"


def s3rver_binary() -> str:
    """``$S3RVER_BIN``, the copy ``scripts/setup`` installs in ``.venv/node``, or ``s3rver`` on PATH."""
    override = os.environ.get("S3RVER_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise ServiceError(f"S3RVER_BIN={override!r} is not an executable file")
        return override
    local = _REPO / ".venv" / "node" / "node_modules" / ".bin" / "s3rver"
    if os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("s3rver")
    if found:
        return found
    raise ServiceError(f"s3rver is not installed (expected {local}): run scripts/setup (needs node and npm)")


class S3Server:
    """s3rver on a free 127.0.0.1 port, storing objects in a temp directory removed by :meth:`stop`."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 10.0,
        name: str = "s3rver",
    ) -> None:
        """Configure (not start) a server."""
        self.name = name
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._binary = binary
        self._port: int | None = None
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError(f"{self.name} has no port yet: call start()")
        return self._port

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the S3 endpoint URL (path-style)."""
        return f"http://{_HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        if self._dir is None:
            raise ServiceError(f"{self.name} has no log yet: call start()")
        return self._dir / "s3rver.log"

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def tansu_env(self) -> dict[str, str]:
        """Environment for a tansu broker with ``--storage-engine s3://BUCKET/`` on this server.

        tansu builds its S3 client from the standard AWS_* variables; plain HTTP must be allowed
        explicitly (``AWS_ALLOW_HTTP``).
        """
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (an existing one is fine): tansu expects its bucket to exist."""
        if not _BUCKET_NAME.match(bucket):
            raise ValueError(f"invalid S3 bucket name {bucket!r}")
        conn = http.client.HTTPConnection(_HOST, self.port, timeout=10)
        try:
            conn.request("PUT", f"/{bucket}", headers={"Content-Length": "0"})
            response = conn.getresponse()
            body = response.read()
        except OSError as exc:
            raise ServiceError(f"{self.name}: creating bucket {bucket!r} failed: {exc}") from exc
        finally:
            conn.close()
        if response.status != 200 and b"<Code>BucketAlreadyExists</Code>" not in body:
            raise ServiceError(f"{self.name}: creating bucket {bucket!r} failed: HTTP {response.status} {body[:300]!r}")

    # --- lifecycle ----------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start s3rver and wait until it answers HTTP."""
        if self.is_running():
            return self
        binary = self._binary or s3rver_binary()
        self._dir = Path(tempfile.mkdtemp(prefix="changefeed-s3rver-"))
        data = self._dir / "data"
        data.mkdir()
        self._port = free_port(_HOST)
        argv = [binary, "--directory", str(data), "--address", _HOST, "--port", str(self._port)]
        started = time.monotonic()
        try:
            self._proc = _spawn(argv, log_path=self.log_file)
            _register_cleanup(self, self.stop)
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        log.info(
            "%s ready on %s (pid %d) in %.2f s", self.name, self.endpoint, self._proc.pid, time.monotonic() - started
        )
        return self

    def stop(self) -> None:
        """SIGTERM, wait (SIGKILL after the timeout), remove the data directory."""
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
                _wait_or_kill(proc, self.shutdown_timeout, self.name)
                log.info("%s stopped (pid %d)", self.name, proc.pid)
        finally:
            self._proc = None
            _unregister_cleanup(self)
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
            self._port = None

    def _wait_ready(self, started: float) -> None:
        assert self._proc is not None
        deadline = started + self.startup_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServiceError(
                    f"{self.name}: exited with code {code} during startup (port {self._port}). "
                    f"Log tail:\n{_log_tail(self.log_file)}"
                )
            if port_is_open(_HOST, self.port, timeout=0.5):
                return
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{self.name}: not listening on {self.endpoint} within {self.startup_timeout:.0f} s. "
                    f"Log tail:\n{_log_tail(self.log_file)}"
                )
            time.sleep(0.05)
