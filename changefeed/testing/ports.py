"""Free TCP ports on 127.0.0.1 for the services that tests, demos and benchmarks start.

Ports come from below the kernel's ephemeral range, so an outgoing connection (Spark, Kafka clients,
another test run on the same machine) cannot grab the port between our probe and the service's bind.
A small race with other processes that pick ports the same way remains: services that own their port
retry on a bind failure.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

from changefeed.testing import ServiceError

__all__ = ["HOST", "Endpoint", "free_port", "port_is_open"]

HOST = "127.0.0.1"
_FALLBACK_EPHEMERAL_LOW = 32768
_LOW = 15000
_lock = threading.Lock()
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """Lowest port the kernel hands out for outgoing connections (Linux), else the IANA default."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_LOW


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port on ``host`` that is free now and was not returned before in this process."""
    high = _ephemeral_low()
    low = _LOW if high - _LOW >= 1000 else 1024
    with _lock:
        for _ in range(200):
            port = random.randrange(low, high)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
        # Crowded low range: let the kernel choose, still never repeating a port.
        for _ in range(50):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise OSError(f"no free TCP port found on {host}")


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Endpoint:
    """``host`` and ``port`` of a service listening on `HOST` (the port is known once it started)."""

    name: str
    _port: int | None

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError(f"{self.name} has no port yet: call start()")
        return self._port
