"""Real services for tests, demos and benchmarks: MariaDB, the tansu Kafka-API broker, free ports.

No mocks: every class here starts the real server binary in its own temp directory on a free
127.0.0.1 port, in its own session (so Ctrl-C in a terminal reaches only us, and we stop the servers
in order), and registers an atexit hook so an interrupted run never leaves a server behind. That
lifecycle is implemented once, in :class:`changefeed.testing.process.ManagedProcess`.

The skip-or-fail policy for tests lives here too (:func:`service_unavailable`): a developer machine
without a service skips, CI (``CI=true``) fails, because CI must never pass by skipping.
"""

from __future__ import annotations

import logging
import os
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


from changefeed.testing.broker import Broker  # noqa: E402 - after ServiceError, which it imports
from changefeed.testing.mariadb import MariaDBServer  # noqa: E402
from changefeed.testing.ports import free_port  # noqa: E402
