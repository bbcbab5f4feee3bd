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
import tempfile
from pathlib import Path

from changefeed.testing import ServiceError
from changefeed.testing.ports import port_is_open
from changefeed.testing.process import ManagedProcess

__all__ = ["S3Server", "s3rver_binary"]

log = logging.getLogger(__name__)

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


class S3Server(ManagedProcess):
    """s3rver on a free 127.0.0.1 port, storing objects in a temp directory removed by :meth:`stop`.

    Ready once the port accepts connections; stopped with SIGTERM, SIGKILL after ``shutdown_timeout``.
    """

    program = "s3rver"

    def __init__(
        self,
        *,
        binary: str | None = None,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 10.0,
        name: str = "s3rver",
    ) -> None:
        """Configure (not start) a server."""
        super().__init__(name=name, port=None, startup_timeout=startup_timeout, shutdown_timeout=shutdown_timeout)
        self._binary = binary

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the S3 endpoint URL (path-style)."""
        return f"http://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self._require_dir("log") / "s3rver.log"

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
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
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

    # --- lifecycle hooks (ManagedProcess) ------------------------------------------------------------

    def _make_dir(self) -> Path:
        path = Path(tempfile.mkdtemp(prefix="changefeed-s3rver-"))
        (path / "data").mkdir()
        return path

    def _argv(self) -> list[str]:
        binary = self._binary or s3rver_binary()
        data = self._require_dir("directory") / "data"
        return [binary, "--directory", str(data), "--address", self.host, "--port", str(self.port)]

    def _output_path(self) -> Path:
        return self.log_file

    def _address(self) -> str:
        return self.endpoint

    def _probe(self) -> bool:
        return port_is_open(self.host, self.port, timeout=0.5)
