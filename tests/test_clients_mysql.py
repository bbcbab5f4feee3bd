"""PyMySQL connections share one TLS-preferred context; explicit TLS settings keep their own."""

from __future__ import annotations

import ssl

from changefeed.clients.mysql import connect
from changefeed.testing.mariadb import MariaDBServer


def _open(server: MariaDBServer, **kw: object):  # type: ignore[no-untyped-def]
    return connect(host=server.host, port=server.port, user=server.user, connect_timeout=10, **kw)


def test_preferred_connections_share_one_context_and_work(mariadb: MariaDBServer) -> None:
    first, second = _open(mariadb), _open(mariadb)
    try:
        assert first.ctx is second.ctx  # built once, not per connection
        assert first.ctx.verify_mode == ssl.CERT_NONE and not first.ctx.check_hostname  # PyMySQL's preferred mode
        with second.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    finally:
        first.close()
        second.close()


def test_explicit_tls_settings_get_their_own_context(mariadb: MariaDBServer) -> None:
    shared = _open(mariadb)
    shared.close()
    own = _open(mariadb, ssl={"verify_mode": "none"}, defer_connect=True)
    assert own.ctx is not shared.ctx
