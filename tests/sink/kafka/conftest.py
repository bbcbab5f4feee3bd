"""Kafka fixtures beyond the shared memory-storage ``broker``: a tansu broker whose data survives restarts."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from changefeed.testing import Broker
from changefeed.testing.s3 import S3Server
from tests.services import service_unavailable

log = logging.getLogger(__name__)


@pytest.fixture
def persistent_broker(s3_server: S3Server) -> Iterator[Broker]:
    """A private tansu broker with ``--storage-engine s3://<fresh bucket>/``: restart() keeps the data.

    Function-scoped because tests restart it. Restart only while no producer has messages in flight
    (see changefeed.testing.broker on the tansu watermark bug).
    """
    bucket = f"tansu-{uuid.uuid4().hex[:12]}"
    broker = Broker(storage_engine=f"s3://{bucket}/", env=s3_server.tansu_env(), name="tansu-s3")
    try:
        s3_server.create_bucket(bucket)
        broker.start()
    except Exception as exc:
        log.exception("tansu with s3 storage could not start")
        broker.stop()
        service_unavailable(f"tansu with s3 storage could not start: {type(exc).__name__}: {exc}")
    try:
        yield broker
    finally:
        broker.stop()
