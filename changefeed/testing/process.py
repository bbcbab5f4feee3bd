"""The one process lifecycle behind every test service: spawn, clean up at exit, wait until ready, stop.

:class:`ManagedProcess` owns the parts that must behave the same for every server: the child runs in
its own session (SIGKILL on our death where possible), an atexit hook stops whatever a run forgot,
startup polls the child until a readiness probe passes (failing fast when it exits, with its log
tail in the error), a first start retries on another free port when the bind failed, and stopping
is a polite step, a bounded wait, then SIGKILL. A service overrides only what differs: its command
line and environment, its probe, its graceful-stop step and its log tail.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from changefeed.testing import ServiceError
from changefeed.testing.ports import HOST, Endpoint, free_port

__all__ = ["ManagedProcess"]

log = logging.getLogger(__name__)

_BIND_RETRIES = 3

# --- process plumbing ---------------------------------------------------------------------------------

_registry_lock = threading.Lock()
_live: dict[int, Callable[[], None]] = {}


def _register_cleanup(owner: object, stop: Callable[[], None]) -> None:
    """Remember ``stop`` so the atexit hook can run it if the owner is never stopped."""
    with _registry_lock:
        _live[id(owner)] = stop


def _unregister_cleanup(owner: object) -> None:
    with _registry_lock:
        _live.pop(id(owner), None)


@atexit.register
def _stop_all_at_exit() -> None:
    with _registry_lock:
        pending = list(_live.values())
        _live.clear()
    for stop in reversed(pending):
        try:
            stop()
        except Exception:
            log.exception("atexit: stopping a test service failed")


def _spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a server in its own session with stdin closed and output appended to ``log_path``.

    From the main thread on Linux the child also gets SIGKILL when we die (``setpriv --pdeathsig``),
    which covers the one case atexit cannot: our own SIGKILL. Not from other threads, because the
    signal fires when the *thread* that forked exits.
    """
    prefix: list[str] = []
    setpriv = shutil.which("setpriv")
    if setpriv and sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread():
        prefix = [setpriv, "--pdeathsig", "KILL", "--"]
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [*prefix, *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the child's whole session (it is the group leader); ignore one that already exited."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def _wait_or_kill(proc: subprocess.Popen[bytes], timeout: float, name: str) -> None:
    """Wait for ``proc`` to exit; SIGKILL its group after ``timeout`` so nothing is left running."""
    try:
        proc.wait(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        log.warning("%s (pid %d) still running after %.0f s: sending SIGKILL", name, proc.pid, timeout)
    _signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - only an unkillable (D-state) process
        raise ServiceError(f"{name} (pid {proc.pid}) survived SIGKILL") from exc


def _log_tail(path: Path, lines: int = 40) -> str:
    """Last ``lines`` lines of a server log, for error messages; never raises."""
    try:
        data = path.read_bytes()[-64 * 1024 :]
    except OSError as exc:
        return f"<no log at {path}: {exc}>"
    text = data.decode("utf-8", errors="replace").splitlines()[-lines:]
    return "\n".join(text) if text else f"<{path} is empty>"


# --- the lifecycle ------------------------------------------------------------------------------------


class ManagedProcess(Endpoint):
    """A server process on ``127.0.0.1`` with its own directory, started and stopped the same way for all.

    Subclasses set :attr:`program` and :attr:`not_ready` and implement :meth:`_make_dir`, :meth:`_argv`,
    :meth:`_output_path`, :meth:`_address` and :meth:`_probe`; they may override the other ``_`` hooks
    (environment, preparation before each spawn, graceful stop, log tail, bind-failure detection).

    :meth:`start` makes the directory (if there is none), picks a free port unless one was given and
    retries on another when the bind failed; :meth:`stop` stops the process and removes the directory
    unless kept; :meth:`restart` keeps directory and port; :meth:`kill` simulates a crash.
    """

    #: Executable name for error messages ("mariadbd exited with code 1 ...").
    program: ClassVar[str]
    #: What a startup timeout reports before the address, e.g. "no root login on".
    not_ready: ClassVar[str] = "not listening on"
    #: Heading of the log excerpt in error messages.
    log_heading: ClassVar[str] = "Log tail"
    #: Seconds between readiness probes.
    poll_interval: ClassVar[float] = 0.05

    def __init__(
        self,
        *,
        name: str,
        port: int | None,
        startup_timeout: float,
        shutdown_timeout: float,
        keep: bool = False,
    ) -> None:
        self.name = name
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._fixed_port = port is not None
        self._port = port
        self._keep = keep
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = logging.getLogger(type(self).__module__)

    # --- hooks ----------------------------------------------------------------------------------------

    def _make_dir(self) -> Path:
        """Create and return the directory for config, data and logs (called once per :meth:`start`)."""
        raise NotImplementedError

    def _argv(self) -> list[str]:
        """The command line to spawn (run after :meth:`_prepare`)."""
        raise NotImplementedError

    def _process_env(self) -> Mapping[str, str] | None:
        """The child's whole environment; ``None`` inherits ours."""
        return None

    def _output_path(self) -> Path:
        """Where the child's stdout and stderr are appended."""
        raise NotImplementedError

    def _address(self) -> str:
        """Where clients reach the server, for log lines and error messages."""
        raise NotImplementedError

    def _ready_note(self) -> str:
        """Extra detail for the "ready" log line, after the pid."""
        return ""

    def _prepare(self) -> None:
        """Runs before every spawn, with the directory and port known (write config, note log offsets)."""

    def _probe(self) -> bool | Exception:
        """One readiness check: ``True`` when ready; ``False`` or the error seen when not yet.

        The last error goes into the timeout message. Raise :class:`ServiceError` for a failure
        that waiting cannot fix.
        """
        raise NotImplementedError

    def _after_ready(self) -> None:
        """Runs once the probe passed, before (re)start returns; a failure stops the process."""

    def _graceful_stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Ask the running process to exit; the caller waits (then SIGKILLs after ``shutdown_timeout``)."""
        _signal_group(proc, signal.SIGTERM)

    def _logs(self) -> str:
        """The log excerpt for error messages."""
        return _log_tail(self._output_path())

    def _bind_failed(self) -> bool:
        """Did the failed launch fail because the port was taken? (Then a first start tries another.)"""
        return False

    def _startup_context(self) -> str:
        return f"port {self._port}"

    # --- common surface -------------------------------------------------------------------------------

    def _require_dir(self, what: str) -> Path:
        """The service's directory; before :meth:`start` an error saying it has no ``what`` yet."""
        if self._dir is None:
            raise ServiceError(f"{self.name} has no {what} yet: call start()")
        return self._dir

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def is_running(self) -> bool:
        return self.pid is not None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the server and wait until its readiness probe passes; a no-op while it runs."""
        if self.is_running():
            return self
        if self._dir is None:
            self._dir = self._make_dir()
        try:
            self._start_with_port_retry()
        except BaseException:
            self._discard_files()
            raise
        return self

    def stop(self) -> None:
        """Stop politely (SIGKILL after ``shutdown_timeout``) and remove the directory unless kept."""
        try:
            self._shutdown()
        finally:
            self._discard_files()

    def restart(self) -> Self:
        """Stop and start again on the same directory and port."""
        self._shutdown()
        self._launch()
        return self

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; its directory stays and :meth:`start` brings it back."""
        proc = self._proc
        if proc is None:
            return
        _signal_group(proc, signal.SIGKILL)
        _wait_or_kill(proc, 10, self.name)
        self._proc = None
        self._log.info("%s killed (pid %d)", self.name, proc.pid)

    # --- internals ------------------------------------------------------------------------------------

    def _start_with_port_retry(self) -> None:
        """First start: a free port can be taken by someone else before we bind, so pick another."""
        for attempt in range(1, _BIND_RETRIES + 1):
            if self._port is None:
                self._port = free_port(HOST)
            try:
                self._launch()
                return
            except ServiceError as exc:
                if self._fixed_port or attempt == _BIND_RETRIES or not self._bind_failed():
                    raise
                self._log.warning("%s: port %d was taken, retrying on another (%s)", self.name, self._port, exc)
                self._port = None

    def _launch(self) -> None:
        self._prepare()
        argv = self._argv()
        env = self._process_env()
        started = time.monotonic()
        proc = self._proc = _spawn(argv, log_path=self._output_path(), env=env)
        _register_cleanup(self, self.stop)
        try:
            self._wait_ready(proc, started)
            self._after_ready()
        except BaseException:
            self._shutdown()
            raise
        self._log.info(
            "%s ready on %s (pid %d%s) in %.2f s",
            self.name,
            self._address(),
            proc.pid,
            self._ready_note(),
            time.monotonic() - started,
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], started: float) -> None:
        deadline = started + self.startup_timeout
        last_error: Exception | None = None
        while True:
            code = proc.poll()
            if code is not None:
                raise ServiceError(
                    f"{self.name}: {self.program} exited with code {code} during startup "
                    f"({self._startup_context()}). {self.log_heading}:\n{self._logs()}"
                )
            result = self._probe()
            if result is True:
                return
            if isinstance(result, Exception):
                last_error = result
            if time.monotonic() >= deadline:
                seen = f" (last error: {last_error!r})" if last_error is not None else ""
                raise ServiceError(
                    f"{self.name}: {self.not_ready} {self._address()} within {self.startup_timeout:.0f} s{seen}. "
                    f"{self.log_heading}:\n{self._logs()}"
                )
            time.sleep(self.poll_interval)

    def _shutdown(self) -> None:
        """Stop the process (graceful step, bounded wait, SIGKILL) but keep its directory and port."""
        proc = self._proc
        if proc is None:
            _unregister_cleanup(self)
            return
        try:
            if proc.poll() is None:
                self._graceful_stop(proc)
                _wait_or_kill(proc, self.shutdown_timeout, self.name)
                self._log.info("%s stopped (pid %d)", self.name, proc.pid)
        finally:
            if proc.poll() is None:  # pragma: no cover - belt and braces for an interrupted wait
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=30)
            self._proc = None
            _unregister_cleanup(self)

    def _discard_files(self) -> None:
        """Forget the directory (removing it unless kept) and a port that was picked, not given."""
        if self._dir is not None and not self._keep and not self.is_running():
            shutil.rmtree(self._dir, ignore_errors=True)
            self._log.debug("%s: removed %s", self.name, self._dir)
        if not self._keep:
            self._dir = None
            if not self._fixed_port:
                self._port = None
