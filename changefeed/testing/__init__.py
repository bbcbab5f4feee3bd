"""Real services for tests, demos and benchmarks: MariaDB, the tansu Kafka-API broker, free ports.

No mocks: every class here starts the real server binary in its own temp directory on a free
127.0.0.1 port, in its own session (so Ctrl-C in a terminal reaches only us, and we stop the servers
in order), and registers an atexit hook so an interrupted run never leaves a server behind.

The skip-or-fail policy for tests lives here too (:func:`service_unavailable`): a developer machine
without a service skips, CI (``CI=true``) fails, because CI must never pass by skipping.
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

__all__ = [
    "Broker",
    "MariaDBServer",
    "ServiceError",
    "free_port",
    "in_ci",
    "service_unavailable",
]

log = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """A test service failed to start, stop or answer; the message carries the server's log tail."""


def in_ci() -> bool:
    """True when running under CI (``CI=true``, as GitHub Actions, GitLab and others set it)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def service_unavailable(reason: str) -> NoReturn:
    """Skip the current test locally, fail it under CI: the one place that decides."""
    import pytest  # noqa: PLC0415 - pytest is a dev dependency; the CLI must not need it

    if in_ci():
        pytest.fail(f"service unavailable under CI (CI=true never skips): {reason}", pytrace=False)
    pytest.skip(f"service unavailable: {reason}")


# --- process plumbing shared by the service classes -------------------------------------------------

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


from changefeed.testing.broker import Broker  # noqa: E402 - after ServiceError and helpers it imports
from changefeed.testing.mariadb import MariaDBServer  # noqa: E402
from changefeed.testing.ports import free_port  # noqa: E402
