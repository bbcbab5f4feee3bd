"""Opening PyMySQL connections: one place, with PyMySQL's TLS "preferred" context built once.

Why: with no TLS options PyMySQL (>= 1.1) negotiates TLS when the server offers it, without
verifying the server, and builds a new `ssl.SSLContext` for every connection, loading every
system CA certificate into it although it never verifies with them: ~20-40 ms of CPU each. The
capture job opens a replica connection per binlog range and micro-batch, so that was half of
its Python workers' CPU at 2,000 rows/s (bench/RESULTS.md). The context of that mode holds no
per-connection state, so one per process serves every connection alike; connections given TLS
options still get PyMySQL's own context, built from them.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

from pymysql.connections import Connection

__all__ = ["connect"]

_lock = threading.Lock()
_preferred: list[ssl.SSLContext] = []  # the one TLS-preferred context, once built


class _Connection(Connection):  # type: ignore[misc]
    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp:  # the caller's own TLS settings
            return super()._create_ssl_ctx(sslp)  # type: ignore[no-any-return]
        with _lock:
            if not _preferred:
                _preferred.append(super()._create_ssl_ctx(sslp))
            return _preferred[0]


def connect(**kwargs: Any) -> Connection:
    """``pymysql.connect(**kwargs)``, sharing the TLS-preferred context (see the module docstring)."""
    return _Connection(**kwargs)
