"""A throwaway MariaDB server with a ROW binlog, started from the Debian binaries without systemd.

Each instance owns a temp directory (config, datadir, socket, logs) and a free 127.0.0.1 port, so
several can run side by side (upstream + downstream) and never touch a system MariaDB.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from changefeed.testing import ServiceError
from changefeed.testing.process import ManagedProcess, _log_tail, _signal_group
from changefeed.testing.tls import TLSFiles

from ..clients.mysql import Connection, MySQLError, connect

__all__ = ["ConfigValue", "MariaDBServer"]

log = logging.getLogger(__name__)

#: An option value in my.cnf: ``None`` or ``True`` writes a bare flag, ``False`` drops the option.
ConfigValue = str | int | float | bool | Path | None

_BIND_FAILURE_MARKERS = ("Address already in use", "Do you already have another server running")


def _key(option: str) -> str:
    """Normalise an option name the way the server does (``log-bin`` == ``log_bin``)."""
    return option.strip().replace("-", "_")


def _find(binary: str) -> str:
    """Locate a MariaDB binary on PATH or in sbin (mariadbd lives in /usr/sbin, often not on PATH)."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin:/sbin")
    if not found:
        raise ServiceError(f"{binary} not found: install the Debian packages mariadb-server and mariadb-client")
    return found


class MariaDBServer(ManagedProcess):
    """A private ``mariadbd`` for tests and demos: ROW binlog with full images and metadata.

    Use as a context manager or call :meth:`start`/:meth:`stop`. :meth:`restart` keeps the datadir
    and port (for "server restarted mid-stream" tests); :meth:`kill` simulates a crash.
    """

    program = "mariadbd"
    not_ready = "no root login on"
    log_heading = "Error log tail"
    poll_interval = 0.1

    def __init__(
        self,
        *,
        server_id: int = 1,
        port: int | None = None,
        extra_config: Mapping[str, ConfigValue] | None = None,
        basedir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        startup_timeout: float = 60.0,
        shutdown_timeout: float = 30.0,
        name: str | None = None,
        tls: TLSFiles | None = None,
    ) -> None:
        """Configure (not start) a server.

        ``extra_config`` entries override or extend the defaults (``False`` removes one), e.g.
        ``{"binlog_format": "STATEMENT"}``. With ``basedir`` the files go there and are kept;
        otherwise a temp dir is used and removed on :meth:`stop` unless ``keep``. With ``tls``
        (`changefeed.testing.tls.make_certificates`) the server offers TLS with that CA, certificate
        and key (``ssl_ca``/``ssl_cert``/``ssl_key``); without it, none (MariaDB 10.11 has no
        certificate of its own).
        """
        super().__init__(
            name=name or f"mariadb[server_id={server_id}]",
            port=port,
            startup_timeout=startup_timeout,
            shutdown_timeout=shutdown_timeout,
            keep=keep or basedir is not None,
        )
        self.server_id = server_id
        self.extra_config: dict[str, ConfigValue] = dict(extra_config or {})
        self.tls = tls
        self._given_basedir = Path(basedir).resolve() if basedir is not None else None

    # --- connection details -------------------------------------------------------------------------

    @property
    def user(self) -> str:
        return "root"

    @property
    def password(self) -> str:
        return ""

    @property
    def url(self) -> str:
        """``mysql://root@127.0.0.1:PORT``: the form the changefeed CLI and configs take."""
        return f"mysql://{self.user}@{self.host}:{self.port}"

    @property
    def basedir(self) -> Path:
        return self._require_dir("directory")

    @property
    def datadir(self) -> Path:
        return self.basedir / "data"

    @property
    def binlog_dir(self) -> Path:
        """Where the binlog files and index live (the datadir, as ``log_bin=<datadir>/binlog``)."""
        return self.datadir

    @property
    def config_file(self) -> Path:
        return self.basedir / "my.cnf"

    @property
    def socket(self) -> Path:
        return self.basedir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.basedir / "error.log"

    def connect(self, database: str | None = None, **kwargs: Any) -> Connection:
        """A PyMySQL connection as root over TCP, autocommit on (override with ``autocommit=False``)."""
        params: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": database,
            "charset": "utf8mb4",
            "autocommit": True,
            "connect_timeout": 10,
        }
        params.update(kwargs)
        return connect(**params)

    def info(self) -> dict[str, Any]:
        """Connection details as plain JSON-able data (for the CLI and for logs)."""
        return {
            "url": self.url,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "pid": self.pid,
            "server_id": self.server_id,
            "datadir": str(self.datadir),
            "binlog_dir": str(self.binlog_dir),
            "socket": str(self.socket),
            "error_log": str(self.error_log),
        }

    # --- lifecycle hooks (ManagedProcess) ------------------------------------------------------------

    def _make_dir(self) -> Path:
        if self._given_basedir is not None:
            self._given_basedir.mkdir(parents=True, exist_ok=True)
            return self._given_basedir
        return Path(tempfile.mkdtemp(prefix=f"changefeed-mariadb{self.server_id}-"))

    def _prepare(self) -> None:
        """Write my.cnf for the current port and initialise the datadir on first use."""
        self._write_config()
        if not self._initialised():
            self._install_db()

    def _argv(self) -> list[str]:
        return [_find("mariadbd"), f"--defaults-file={self.config_file}"]  # defaults-file must be first

    def _output_path(self) -> Path:
        return self.basedir / "stdout.log"

    def _address(self) -> str:
        return f"{self.host}:{self.port}"

    def _ready_note(self) -> str:
        return f", {self.basedir}"

    def _startup_context(self) -> str:
        return f"port {self._port}, {self.basedir}"

    def _probe(self) -> bool | Exception:
        """Root can log in over TCP."""
        try:
            # read_timeout too: a foreign listener on the port may accept and never greet us.
            conn = self.connect(connect_timeout=2, read_timeout=2, write_timeout=2)
        except MySQLError as exc:
            return exc
        conn.close()
        return True

    def _logs(self) -> str:
        text = _log_tail(self.error_log)
        stdout = self.basedir / "stdout.log"
        if stdout.exists() and stdout.stat().st_size:
            text += "\n--- stdout/stderr ---\n" + _log_tail(stdout, 15)
        return text

    def _bind_failed(self) -> bool:
        return any(m in _log_tail(self.error_log, 15) for m in _BIND_FAILURE_MARKERS)

    def _graceful_stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Clean shutdown via mariadb-admin; SIGTERM if that fails."""
        if not self._admin_shutdown():
            _signal_group(proc, signal.SIGTERM)

    # --- internals ----------------------------------------------------------------------------------

    def _config(self) -> dict[str, ConfigValue]:
        base = self.basedir
        options: dict[str, ConfigValue] = {
            "datadir": base / "data",
            "socket": base / "mysqld.sock",
            "pid_file": base / "mysqld.pid",
            "log_error": base / "error.log",
            "tmpdir": base / "tmp",
            "port": self.port,
            "bind_address": self.host,
            "skip_name_resolve": None,
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_unicode_ci",
            "server_id": self.server_id,
            "log_bin": base / "data" / "binlog",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL",
            "innodb_flush_log_at_trx_commit": 2,
            "sync_binlog": 0,
            "max_allowed_packet": "64M",
            # Small footprint: two or three instances plus Spark must fit a 2-core CI box.
            "innodb_buffer_pool_size": "64M",
            "innodb_log_file_size": "32M",
            "innodb_log_buffer_size": "8M",
            "key_buffer_size": "8M",
            "aria_pagecache_buffer_size": "8M",
            "performance_schema": "OFF",
            "table_open_cache": 400,
        }
        if os.geteuid() == 0:
            options["user"] = "root"  # mariadbd refuses to run as root without it
        if self.tls is not None:
            options.update(ssl_ca=str(self.tls.ca), ssl_cert=str(self.tls.cert), ssl_key=str(self.tls.key))
        for option, value in self.extra_config.items():
            options[_key(option)] = value
        return {k: v for k, v in options.items() if v is not False}

    def _write_config(self) -> None:
        lines = ["# written by changefeed.testing.MariaDBServer", "[mariadbd]"]
        for option, value in self._config().items():
            lines.append(option if value is None or value is True else f"{option}={value}")
        self.config_file.write_text("\n".join(lines) + "\n")
        (self.basedir / "tmp").mkdir(exist_ok=True)

    def _initialised(self) -> bool:
        return (self.datadir / "mysql").is_dir()

    def _install_db(self) -> None:
        argv = [
            _find("mariadb-install-db"),
            f"--defaults-file={self.config_file}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        if os.geteuid() == 0:
            argv.append("--user=root")
        started = time.monotonic()
        try:
            result = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.startup_timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(f"{self.name}: mariadb-install-db timed out after {exc.timeout} s") from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")[-4000:]
            raise ServiceError(
                f"{self.name}: mariadb-install-db failed with exit code {result.returncode} in "
                f"{self.basedir}:\n{output}\n--- error log ---\n{_log_tail(self.error_log)}"
            )
        log.debug("%s: datadir initialised in %.1f s", self.name, time.monotonic() - started)

    def _admin_shutdown(self) -> bool:
        argv = [
            _find("mariadb-admin"),
            "--no-defaults",
            "--protocol=tcp",
            f"-h{self.host}",
            f"-P{self.port}",
            f"-u{self.user}",
            "--connect-timeout=5",
            "shutdown",
        ]
        try:
            result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired, ServiceError) as exc:
            log.warning("%s: mariadb-admin shutdown failed (%s); sending SIGTERM", self.name, exc)
            return False
        if result.returncode != 0:
            log.warning(
                "%s: mariadb-admin shutdown exited %d: %s; sending SIGTERM",
                self.name,
                result.returncode,
                result.stderr.decode("utf-8", errors="replace").strip(),
            )
            return False
        return True
