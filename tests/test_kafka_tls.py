"""Kafka over TLS against a real broker (issue 14, item 6): the clients' TLS settings on the wire.

tansu (the test broker) has no TLS listener, so it runs behind `changefeed.testing.tlsproxy`: a
TLS-terminating proxy with a throw-away CA that requires a client certificate (mutual TLS), and
tansu advertises the proxy's address, so every connection of a client (bootstrap, partition
leader, coordinator) is TLS. The clients are changefeed's own: the sink (from a ``kafka://`` sink-uri),
the apply side's input, ``changefeed check --broker``. SASL is not tested here against a broker
(tansu's SCRAM does not complete with librdkafka); a SASL password only rides along in the failure
tests, to show it appears in no error.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from changefeed.capture.binlog import file_capture
from changefeed.cli import main
from changefeed.cli.apply import kafka_source
from changefeed.clients.kafkauri import KafkaSecurity, KafkaURI
from changefeed.codec import CodecOptions
from changefeed.config import parse_config
from changefeed.errors import ChangefeedError
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.testing import ServiceError
from changefeed.testing.tls import TLSFiles, make_certificates
from changefeed.testing.tlsproxy import TLSBroker

from .services import service_unavailable

pytestmark = pytest.mark.broker
log = logging.getLogger(__name__)

SECRET = "Tls-test-Sasl-pw"
#: Bound on a failing TLS connection: the clients' timeouts are 2 s here, the rest is slack.
FAIL_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[TLSFiles, TLSFiles]:
    """The proxy's CA, certificate (naming 127.0.0.1) and client certificate, and an unrelated CA."""
    directory = tmp_path_factory.mktemp("kafka-tls")
    return make_certificates(directory, names=("127.0.0.1",)), make_certificates(directory, prefix="other-")


@pytest.fixture(scope="module")
def tls_broker(certs: tuple[TLSFiles, TLSFiles]) -> Iterator[TLSBroker]:
    """tansu behind a mutual-TLS proxy; its ``bootstrap_servers`` is the proxy."""
    broker = TLSBroker(certs[0])
    try:
        broker.start()
    except ServiceError as exc:
        service_unavailable(f"tansu behind a TLS proxy could not start: {exc}")
    try:
        yield broker
    finally:
        broker.kill()  # memory storage: nothing to drain, so skip tansu's ~5 s graceful stop
        broker.stop()


def sink_uri(broker: TLSBroker, topic: str, **params: str | Path) -> str:
    query = urlencode({k.replace("_", "-"): str(v) for k, v in params.items()})
    return f"kafka://{broker.bootstrap_servers}/{topic}?{query}"


def mutual(tls: TLSFiles, ca: Path | None = None) -> dict[str, str | Path]:
    """The TLS parameters of a client that trusts ``ca`` (default: the right one) and presents its certificate."""
    return {"enable_tls": "true", "ca": ca or tls.ca, "cert": tls.client_cert, "key": tls.client_key}


#: Messages by partition, in offset order: (key, value).
Messages = dict[int, list[tuple[bytes | None, bytes | None]]]


class RecordingProducer:
    """The sink's producer, noting every message it is given: what must come back byte for byte."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: Messages = {}

    def produce(self, topic: str, value: bytes, key: bytes | None = None, **kwargs: Any) -> None:
        self.sent.setdefault(kwargs["partition"], []).append((key, value))
        self.inner.produce(topic, value, key, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def read_back(servers: str, topic: str, client_config: dict[str, str], counts: dict[int, int]) -> Messages:
    """Every message of ``topic``'s partitions, ``counts[p]`` of partition ``p``, from offset 0."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    conf: dict[str, Any] = {"bootstrap.servers": servers, "group.id": "tls-read-back", "logger": log, **client_config}
    consumer = Consumer(conf)
    got: Messages = {p: [] for p in counts}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in counts])
        deadline = time.monotonic() + 20
        while any(len(got[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                partition = msg.partition()
                assert msg.error() is None and partition is not None, msg.error()
                got[partition].append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


# ------------------------------------------------------------------ 1. the sink and the reader over mutual TLS


def test_sink_writes_over_mutual_tls_and_the_messages_come_back_byte_identical(
    tls_broker: TLSBroker, certs: tuple[TLSFiles, TLSFiles], tmp_path: Path
) -> None:
    tls = certs[0]
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    uri = sink_uri(
        tls_broker, topic, protocol="canal-json", enable_tidb_extension="true", partition_num="2", **mutual(tls)
    )
    config = parse_config(f'sink-uri = "{uri}"\n[source]\npath = "{tmp_path}"\n', tmp_path).kafka_sink_config()
    assert config.client_config["security.protocol"] == "SSL"
    events = list(file_capture(Path(__file__).parent / "fixtures" / "binlog" / "full").events())
    before = tls_broker.proxy.accepted

    with KafkaSink(config) as sink:  # opening creates the topic: the admin client over TLS
        recorder = RecordingProducer(sink._producer)
        sink._producer = recorder  # type: ignore[assignment]  # what the sink hands librdkafka, to compare
        sink.write(events)
        sink.flush(timeout_s=20)
    sent = recorder.sent
    assert sum(map(len, sent.values())) == sink.messages_sent > len(events) // 2

    # the apply side reads the same URI: its metadata and offsets come over TLS
    from changefeed.spark.datasource.kafka import KafkaInput  # noqa: PLC0415 - pyspark only here
    from changefeed.spark.datasource.options import SourceOptions  # noqa: PLC0415

    kafka_input = KafkaInput(SourceOptions.parse(kafka_source(uri)))
    try:
        assert kafka_input.client_config == config.client_config
        assert kafka_input.watermarks() == {p: (0, len(sent.get(p, []))) for p in (0, 1)}
    finally:
        kafka_input.close()

    parsed = KafkaURI.parse(uri)
    client = KafkaSecurity.from_params(parsed.params).client_config()
    got = read_back(parsed.servers, topic, client, {p: len(m) for p, m in sent.items()})
    assert got == sent  # byte-identical, in order, per partition

    # every connection went through the proxy: tansu advertises it, nothing else
    metadata = tls_broker.admin().list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [(tls_broker.proxy.host, tls_broker.proxy.port)]
    assert tls_broker.proxy.accepted > before


# ------------------------------------------------------------------ 2. and 3. refused connections


def check(broker: str, tls: dict[str, str | Path], *, sasl: bool = True, timeout: float = 2) -> int:
    """``changefeed check --broker URI``, with a SASL password from the environment unless ``sasl`` is false."""
    params = dict(tls)
    if sasl:
        params |= {"sasl_mechanism": "PLAIN", "sasl_user": "cdc", "sasl_password_env": "CF_TLS_TEST_PW"}
    query = urlencode({k.replace("_", "-"): str(v) for k, v in params.items()})
    return main(["check", "--broker", f"kafka://{broker}/?{query}", "--timeout", str(timeout)])


def wrong_ca_sink(broker: TLSBroker, certs: tuple[TLSFiles, TLSFiles], timeout: float) -> KafkaSink:
    """A sink trusting the unrelated CA, with a SASL password (never reached: TLS fails first)."""
    tls, other = certs
    security = KafkaSecurity.from_params(
        {
            "enable-tls": "true",
            "ca": str(other.ca),
            "cert": str(tls.client_cert),
            "key": str(tls.client_key),
            "sasl-mechanism": "PLAIN",
            "sasl-user": "cdc",
            "sasl-password": SECRET,
        }
    )
    config = KafkaSinkConfig(
        broker.bootstrap_servers,
        f"tls-{uuid.uuid4().hex[:8]}",
        CodecOptions(protocol="canal-json"),
        partition_num=1,
        client_config=security.client_config(),
    )
    sink = KafkaSink(config)
    sink.topics.timeout_s = timeout  # 30 s by default: bounded either way
    return sink


def open_fails(sink: KafkaSink) -> ChangefeedError:
    try:
        with pytest.raises(ChangefeedError) as failure:
            sink.open()
    finally:
        sink.close()
    return failure.value


def test_a_wrong_ca_fails_fast_naming_the_broker_and_no_secret(
    tls_broker: TLSBroker,
    certs: tuple[TLSFiles, TLSFiles],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The client is told to trust an unrelated CA: it refuses the proxy's certificate (unknown CA)."""
    tls, other = certs
    monkeypatch.setenv("CF_TLS_TEST_PW", SECRET)
    caplog.set_level(logging.DEBUG)
    failures = len(tls_broker.proxy.failures)
    started = time.monotonic()
    code = check(tls_broker.bootstrap_servers, mutual(tls, ca=other.ca))
    assert time.monotonic() - started < FAIL_WITHIN_S
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert code == 1
    assert f"ERROR broker-unreachable [{tls_broker.bootstrap_servers}]" in out, out
    assert "security protocol" in out  # the hint: TLS settings
    assert any("UNKNOWN_CA" in f for f in tls_broker.proxy.failures[failures:]), tls_broker.proxy.failures

    # the sink: a bounded failure (its admin client's metadata timeout)
    started = time.monotonic()
    error = open_fails(wrong_ca_sink(tls_broker, certs, timeout=2))
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert "cannot read metadata" in str(error)
    assert SECRET not in out + str(error) + caplog.text


def test_a_tls_failure_says_why_and_where(
    tls_broker: TLSBroker,
    certs: tuple[TLSFiles, TLSFiles],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """librdkafka gives the TLS reason only to error_cb: `check` and the sink serve it and name the broker."""
    monkeypatch.setenv("CF_TLS_TEST_PW", SECRET)
    assert check(tls_broker.bootstrap_servers, mutual(certs[0], ca=certs[1].ca), timeout=1) == 1
    error = open_fails(wrong_ca_sink(tls_broker, certs, timeout=1))
    assert "certificate verify failed" in capsys.readouterr().out
    assert "certificate verify failed" in str(error) and tls_broker.bootstrap_servers in str(error)


def test_no_client_certificate_is_refused(
    tls_broker: TLSBroker, certs: tuple[TLSFiles, TLSFiles], capsys: pytest.CaptureFixture[str]
) -> None:
    """The right CA, no client certificate: the proxy requires one and ends the handshake with TLS 1.3's
    ``certificate_required`` alert, which librdkafka reports naming the broker."""
    tls = certs[0]
    failures = len(tls_broker.proxy.failures)
    started = time.monotonic()
    code = check(tls_broker.bootstrap_servers, {"enable_tls": "true", "ca": tls.ca}, sasl=False)
    assert time.monotonic() - started < FAIL_WITHIN_S
    out = capsys.readouterr().out
    assert code == 1 and f"ERROR broker-unreachable [{tls_broker.bootstrap_servers}]" in out, out
    assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in f for f in tls_broker.proxy.failures[failures:])

    # What the client hears, from a client that serves its callbacks (the error_cb).
    from confluent_kafka import Producer  # noqa: PLC0415

    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": tls_broker.bootstrap_servers,
            "error_cb": lambda err: errors.append(err.str()),
            "logger": log,
            **tls_broker.client_config(client_cert=False),
        }
    )
    deadline = time.monotonic() + FAIL_WITHIN_S
    while not any("certificate required" in e for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.flush(0)
    required = [e for e in errors if "certificate required" in e]
    assert required and f"ssl://{tls_broker.bootstrap_servers}" in required[0], errors

    # with the certificate, metadata comes back
    assert tls_broker.admin().list_topics(timeout=10).brokers


# ------------------------------------------------------------------ 4. changefeed check --broker over TLS


def test_check_broker_reports_the_broker_reachable_over_tls(
    tls_broker: TLSBroker, certs: tuple[TLSFiles, TLSFiles], capsys: pytest.CaptureFixture[str]
) -> None:
    tls = certs[0]
    topic = f"chk-{uuid.uuid4().hex[:8]}"
    tls_broker.create_topic(topic, partitions=2)
    uri = sink_uri(tls_broker, topic, partition_num="2", **mutual(tls))
    assert main(["check", "--broker", uri, "--timeout", "5"]) == 0
    assert "OK: no problems found" in capsys.readouterr().out
    # the metadata really came over TLS: the partition count is read from it
    assert main(["check", "--broker", uri, "--partitions", "3", "--timeout", "5"]) == 1
    assert f"ERROR topic-partitions [{tls_broker.bootstrap_servers}]" in capsys.readouterr().out
