"""The S3Server helper is a real, disk-backed S3 endpoint that tansu can use, and cleans up after itself."""

from __future__ import annotations

import http.client

from changefeed.testing.s3 import S3Server
from tests.services import service_unavailable


def test_s3rver_creates_buckets_idempotently_and_stops_cleanly() -> None:
    server = S3Server()
    try:
        server.start()
    except Exception as exc:
        service_unavailable(f"s3rver could not start: {type(exc).__name__}: {exc}")
    try:
        data_dir = server.log_file.parent
        server.create_bucket("tansu-probe")
        server.create_bucket("tansu-probe")  # already there: fine
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("PUT", "/tansu-probe/k", body=b"v")
        put = conn.getresponse()
        assert (put.status, put.read()) == (200, b"")
        conn.request("GET", "/tansu-probe/k")
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"v")
        conn.close()
        assert any(data_dir.rglob("*_S3rver_object")), "objects are stored on disk"
        env = server.tansu_env()
        assert env["AWS_ENDPOINT"] == server.endpoint and env["AWS_ALLOW_HTTP"] == "true"
    finally:
        server.stop()
    assert not server.is_running() and not data_dir.exists()
