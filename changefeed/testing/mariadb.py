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
from types import TracebackType
from typing import Any, Self

import pymysql
import pymysql.connections

from changefeed.testing import (
    ServiceError,
    _log_tail,
    _register_cleanup,
    _signal_group,
    _spawn,
    _unregister_cleanup,
    _wait_or_kill,
)
from changefeed.testing.ports import free_port

__all__ = ["ConfigValue", "MariaDBServer"]

log = logging.getLogger(__name__)

#: An option value in my.cnf: ``None`` or ``True`` writes a bare flag, ``False`` drops the option.
ConfigValue = str | int | float | bool | None

_HOST = "127.0.0.1"
_BIND_FAILURE_MARKERS = ("Address already in use", "Do you already have another server running")
_BIND_RETRIES = 3


def _key(option: str) -> str:
    """Normalise an option name the way the server does (``log-bin`` == ``log_bin``)."""
    return option.strip().replace("-", "_")


def _find(binary: str) -> str:
    """Locate a MariaDB binary on PATH or in sbin (mariadbd lives in /usr/sbin, often not on PATH)."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin:/sbin")
    if not found:
        raise ServiceError(f"{binary} not found: install the Debian packages mariadb-server and mariadb-client")
    return found


class MariaDBServer:
    """A private ``mariadbd`` for tests and demos: ROW binlog with full images and metadata.

    Use as a context manager or call :meth:`start`/:meth:`stop`. :meth:`restart` keeps the datadir
    and port (for "server restarted mid-stream" tests); :meth:`kill` simulates a crash.
    """

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
    ) -> None:
        """Configure (not start) a server.

        ``extra_config`` entries override or extend the defaults (``False`` removes one), e.g.
        ``{"binlog_format": "STATEMENT"}``. With ``basedir`` the files go there and are kept;
        otherwise a temp dir is used and removed on :meth:`stop` unless ``keep``.
        """
        self.server_id = server_id
        self.extra_config: dict[str, ConfigValue] = dict(extra_config or {})
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self.name = name or f"mariadb[server_id={server_id}]"
        self._fixed_port = port is not None
        self._port = port
        self._given_basedir = Path(basedir).resolve() if basedir is not None else None
        self._keep = keep or basedir is not None
        self._basedir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # --- connection details -------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return _HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError(f"{self.name} has no port yet: call start()")
        return self._port

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
        if self._basedir is None:
            raise ServiceError(f"{self.name} has no directory yet: call start()")
        return self._basedir

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

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def is_running(self) -> bool:
        return self.pid is not None

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:
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
        return pymysql.connect(**params)

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

    # --- lifecycle ----------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Initialise the datadir if needed, start ``mariadbd`` and wait until root can log in over TCP."""
        if self.is_running():
            return self
        if self._basedir is None:
            if self._given_basedir is not None:
                self._given_basedir.mkdir(parents=True, exist_ok=True)
                self._basedir = self._given_basedir
            else:
                self._basedir = Path(tempfile.mkdtemp(prefix=f"changefeed-mariadb{self.server_id}-"))
        try:
            self._start_with_port_retry()
        except BaseException:
            self._discard_files()
            raise
        return self

    def stop(self) -> None:
        """Shut down cleanly (SIGKILL after ``shutdown_timeout``) and remove the temp dir unless kept."""
        try:
            self._shutdown()
        finally:
            self._discard_files()

    def restart(self) -> Self:
        """Stop and start again on the same datadir and port (binlog continues in a new file)."""
        self._shutdown()
        self._launch()
        return self

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; the datadir stays, :meth:`start` recovers it."""
        proc = self._proc
        if proc is None:
            return
        _signal_group(proc, signal.SIGKILL)
        _wait_or_kill(proc, 10, self.name)
        self._proc = None
        log.info("%s killed (pid %d)", self.name, proc.pid)

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
            "bind_address": _HOST,
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

    def _start_with_port_retry(self) -> None:
        """First start: a free port can be taken by someone else before we bind, so pick another."""
        for attempt in range(1, _BIND_RETRIES + 1):
            if self._port is None:
                self._port = free_port(_HOST)
            try:
                self._launch()
                return
            except ServiceError as exc:
                bind_failed = any(m in _log_tail(self.error_log, 15) for m in _BIND_FAILURE_MARKERS)
                if self._fixed_port or not bind_failed or attempt == _BIND_RETRIES:
                    raise
                log.warning("%s: port %d was taken, retrying on another (%s)", self.name, self._port, exc)
                self._port = None

    def _launch(self) -> None:
        self._write_config()
        if not self._initialised():
            self._install_db()
        argv = [_find("mariadbd"), f"--defaults-file={self.config_file}"]  # defaults-file must be first
        started = time.monotonic()
        self._proc = _spawn(argv, log_path=self.basedir / "stdout.log")
        _register_cleanup(self, self.stop)
        try:
            self._wait_ready(started)
        except BaseException:
            self._shutdown()
            raise
        log.info(
            "%s ready on %s:%d (pid %d, %s) in %.1f s",
            self.name,
            self.host,
            self.port,
            self._proc.pid,
            self.basedir,
            time.monotonic() - started,
        )

    def _wait_ready(self, started: float) -> None:
        assert self._proc is not None
        deadline = started + self.startup_timeout
        last_error: Exception | None = None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServiceError(
                    f"{self.name}: mariadbd exited with code {code} during startup "
                    f"(port {self._port}, {self.basedir}). Error log tail:\n{self._logs()}"
                )
            try:
                # read_timeout too: a foreign listener on the port may accept and never greet us.
                conn = self.connect(connect_timeout=2, read_timeout=2, write_timeout=2)
            except pymysql.err.MySQLError as exc:
                last_error = exc
            else:
                conn.close()
                return
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{self.name}: no root login on {self.host}:{self._port} within "
                    f"{self.startup_timeout:.0f} s (last error: {last_error!r}). Error log tail:\n{self._logs()}"
                )
            time.sleep(0.1)

    def _logs(self) -> str:
        text = _log_tail(self.error_log)
        stdout = self.basedir / "stdout.log"
        if stdout.exists() and stdout.stat().st_size:
            text += "\n--- stdout/stderr ---\n" + _log_tail(stdout, 15)
        return text

    def _shutdown(self) -> None:
        """Clean shutdown via mariadb-admin; SIGTERM if that fails; SIGKILL after the timeout."""
        proc = self._proc
        if proc is None:
            _unregister_cleanup(self)
            return
        try:
            if proc.poll() is None:
                if not self._admin_shutdown():
                    _signal_group(proc, signal.SIGTERM)
                _wait_or_kill(proc, self.shutdown_timeout, self.name)
                log.info("%s stopped (pid %d)", self.name, proc.pid)
        finally:
            if proc.poll() is None:  # pragma: no cover - belt and braces for an interrupted wait
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=30)
            self._proc = None
            _unregister_cleanup(self)

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

    def _discard_files(self) -> None:
        if self._basedir is not None and not self._keep and not self.is_running():
            shutil.rmtree(self._basedir, ignore_errors=True)
            log.debug("%s: removed %s", self.name, self._basedir)
        if not self._keep:
            self._basedir = None
            if not self._fixed_port:
                self._port = None
