"""Real services for tests, demos and benchmarks: MariaDB, the tansu Kafka-API broker, free ports.

No mocks: every class here starts the real server binary in its own temp directory on a free
127.0.0.1 port, in its own session (so Ctrl-C in a terminal reaches only us, and we stop the servers
in order), and registers an atexit hook so an interrupted run never leaves a server behind. That
lifecycle is implemented once, in :class:`changefeed.testing.process.ManagedProcess`.

A service that cannot start raises :class:`ServiceError`; whether a test then skips or fails is
the tests' own policy (``tests/services.py``), so the shipped package never imports pytest.
"""

from __future__ import annotations

import logging

__all__ = [
    "Broker",
    "MariaDBServer",
    "ServiceError",
    "free_port",
]

log = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """A test service failed to start, stop or answer; the message carries the server's log tail."""


from changefeed.testing.broker import Broker  # noqa: E402 - after ServiceError, which it imports
from changefeed.testing.mariadb import MariaDBServer  # noqa: E402
from changefeed.testing.ports import free_port  # noqa: E402
