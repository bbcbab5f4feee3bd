"""Kafka TLS and SASL (issue 14, item 6): TiCDC's sink-uri parameters mapped onto librdkafka's settings
in one place (`changefeed.clients.kafkauri`), used by every client, and the SASL password never shown.

The test broker (tansu 0.6) cannot serve TLS (``--cert``/``--key`` leave the listener in plain
text) and its SASL SCRAM exchange does not complete with librdkafka 2.16, so no test here talks
TLS or SASL to a broker: the mapping is tested as data, and against the real (plain) broker only
that the settings reach the clients (a client told to speak TLS to it fails) and that the password
shows up nowhere when they fail.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from changefeed.cli.apply import kafka_source
from changefeed.clients.kafkauri import KafkaSecurity, KafkaURI
from changefeed.codec import CodecOptions
from changefeed.config import parse_config, parse_sink_uri
from changefeed.errors import ChangefeedError, ConfigError
from changefeed.ops.jobfile import STATUS_FILE, JobStatusWriter
from changefeed.ops.preflight import check_broker
from changefeed.secrets import mask_secrets
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.spark.datasource.kafka import KafkaInput
from changefeed.spark.datasource.options import SourceOptions
from changefeed.testing import Broker

SECRET = "Sasl-s3cret-Pw"
SASL = f"sasl-mechanism=scram-sha-512&sasl-user=cdc&sasl-password={SECRET}"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, {}),
        ({"enable-tls": "false"}, {}),
        ({"enable-tls": "true"}, {"security.protocol": "SSL"}),
        ({"ca": "/ca.pem"}, {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}),  # TiCDC: a CA turns TLS on
        (
            {"enable-tls": "true", "ca": "/ca.pem", "cert": "/c.pem", "key": "/k.pem"},
            {
                "security.protocol": "SSL",
                "ssl.ca.location": "/ca.pem",
                "ssl.certificate.location": "/c.pem",
                "ssl.key.location": "/k.pem",
            },
        ),
        (
            {"enable-tls": "true", "insecure-skip-verify": "true"},
            {
                "security.protocol": "SSL",
                "enable.ssl.certificate.verification": "false",
                "ssl.endpoint.identification.algorithm": "none",
            },
        ),
        (
            {"sasl-mechanism": "plain", "sasl-user": "u", "sasl-password": "p"},
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
            },
        ),
        (
            {"sasl-mechanism": "SCRAM-SHA-256", "sasl-user": "u", "sasl-password": "p", "enable-tls": "true"},
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "u",
                "sasl.password": "p",
            },
        ),
        (
            {"sasl-mechanism": "scram-sha-512", "sasl-user": "u", "sasl-password": "p", "ca": "/ca.pem"},
            {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": "/ca.pem",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "u",
                "sasl.password": "p",
            },
        ),
    ],
)
def test_ticdc_parameters_map_onto_librdkafka(params: dict[str, str], expected: dict[str, str]) -> None:
    security = KafkaSecurity.from_params(params)
    assert security.client_config() == expected
    assert KafkaSecurity.from_params(security.params()) == security  # what travels as data source options


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"enable-tls": "false", "ca": "/ca.pem"}, "enable-tls=false, but ca, cert or key"),
        ({"enable-tls": "yes"}, "enable-tls must be true or false"),
        ({"cert": "/c.pem"}, "cert and key go together"),
        ({"insecure-skip-verify": "true"}, "without TLS"),
        ({"sasl-mechanism": "GSSAPI", "sasl-user": "u", "sasl-password": "p"}, "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        ({"sasl-user": "u", "sasl-password": "p"}, "need sasl-mechanism"),
        ({"sasl-mechanism": "PLAIN", "sasl-user": "u"}, "needs sasl-user and a password"),
        ({"sasl-mechanism": "PLAIN", "sasl-password": "p"}, "needs sasl-user and a password"),
        (
            {"sasl-mechanism": "PLAIN", "sasl-user": "u", "sasl-password": "p", "sasl-password-env": "X"},
            "given by sasl-password and sasl-password-env",
        ),
        ({"sasl-mechanism": "PLAIN", "sasl-user": "u", "sasl-password-env": "CF_UNSET_SASL"}, "is not set"),
    ],
)
def test_bad_parameters_are_config_errors(params: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KafkaSecurity.from_params(params)


def test_password_from_env_or_owner_only_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CF_SASL_PW", SECRET)
    base = {"sasl-mechanism": "PLAIN", "sasl-user": "cdc"}
    assert KafkaSecurity.from_params({**base, "sasl-password-env": "CF_SASL_PW"}).sasl_password == SECRET
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    assert KafkaSecurity.from_params({**base, "sasl-password-file": str(path)}).sasl_password == SECRET
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by group or others"):
        KafkaSecurity.from_params({**base, "sasl-password-file": str(path)})


def test_the_password_is_in_no_repr_and_masked_in_text() -> None:
    security = KafkaSecurity.from_params({"sasl-mechanism": "PLAIN", "sasl-user": "u", "sasl-password": SECRET})
    config = KafkaSinkConfig("h:1", "t", CodecOptions(protocol="canal-json"), client_config=security.client_config())
    assert SECRET not in repr(security) and SECRET not in repr(config)
    uri = f"kafka://127.0.0.1:9092/cdc?protocol=canal-json&{SASL}&enable-tls=true"
    assert SECRET not in mask_secrets(uri) and "sasl-password=***&enable-tls=true" in mask_secrets(uri)
    assert SECRET not in mask_secrets(str(security.client_config()))  # a config dump: 'sasl.password': '***'


def test_sink_uri_and_apply_source_take_the_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CF_SASL_PW", SECRET)
    uri = "kafka://127.0.0.1:9092/cdc?protocol=open-protocol&enable-tls=true&ca=/ca.pem"
    uri += "&sasl-mechanism=scram-sha-256&sasl-user=cdc&sasl-password-env=CF_SASL_PW"
    config = parse_config(f'sink-uri = "{uri}"\n[source]\npath = "{tmp_path}"\n', tmp_path)
    expected = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "cdc",
        "sasl.password": SECRET,
    }
    assert config.kafka_sink_config().client_config == expected
    # `changefeed apply --from` the same URI: the password is read on the driver and travels as the
    # Spark-redacted sasl-password option; the input's consumers get the same settings.
    options = kafka_source(uri)
    assert options["sasl-password"] == SECRET and "sasl-password-env" not in options
    kafka_input = KafkaInput(SourceOptions.parse(options))
    assert kafka_input.client_config == expected and kafka_input.codec.protocol == "open-protocol"
    with pytest.raises(ConfigError, match="needs sasl-user"):
        parse_config(
            f'sink-uri = "kafka://h:1/t?sasl-mechanism=PLAIN&sasl-password={SECRET}"\n[source]\npath = "p"\n', tmp_path
        )


def test_the_password_lookup_is_the_mysql_one_under_kafka_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """`secrets.resolve_password` under the SASL names: one wording, and no MYSQL_PWD fallback."""
    monkeypatch.delenv("CF_UNSET_SASL", raising=False)
    monkeypatch.setenv("MYSQL_PWD", SECRET)
    base = {"sasl-mechanism": "PLAIN", "sasl-user": "u"}
    with pytest.raises(ConfigError) as info:
        KafkaSecurity.from_params({**base, "sasl-password-env": "CF_UNSET_SASL"}, where="kafka sink-uri")
    assert info.value.message == (
        "kafka sink-uri: sasl-password-env names 'CF_UNSET_SASL', but that environment variable is not set"
    )
    with pytest.raises(ConfigError, match="needs sasl-user and a password"):
        KafkaSecurity.from_params(base)  # MYSQL_PWD is a MySQL client's, never a SASL password
    assert KafkaSecurity.from_params({}).sasl_password is None


def test_one_parser_of_the_kafka_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    """`KafkaURI.parse`: the form and no parameter twice, for the sink, ``apply --from`` and ``check --broker``."""
    uri = KafkaURI.parse("kafka://b1:9092,b2:9092/cdc?protocol=canal-json&partition-num=3")
    assert (uri.servers, uri.topic, uri.params) == (
        "b1:9092,b2:9092",
        "cdc",
        {"protocol": "canal-json", "partition-num": "3"},
    )
    assert KafkaURI.parse("kafka://b:9092/", need_topic=False).topic == ""
    for bad in ("kafka://b:9092", "kafka:///t", "kafka://b:9092/a/b", "http://b:9092/t"):
        with pytest.raises(ConfigError, match=r"a kafka sink-uri is kafka://HOST:PORT\[,HOST:PORT\]/TOPIC"):
            KafkaURI.parse(bad)
    with pytest.raises(ConfigError) as info:
        KafkaURI.parse(f"kafka://b:9092/a/b?sasl-password={SECRET}")
    assert SECRET not in str(info.value) and SECRET not in repr(KafkaURI.parse(f"kafka://b:1/t?sasl-password={SECRET}"))
    twice = "kafka://b:9092/t?protocol=simple&protocol=canal-json"
    for read in (parse_sink_uri, kafka_source):  # the sink and the source read it alike
        with pytest.raises(ConfigError, match="sink-uri parameter 'protocol' given twice"):
            read(twice)
        with pytest.raises(ConfigError, match="TOPIC"):
            read("kafka://b:9092/a/b?protocol=canal-json")
    # the source ignores the sink's topic and writing parameters; the sink refuses what it does not know
    assert "partition-num" not in kafka_source("kafka://b:1/t?protocol=simple&partition-num=3&flush-interval=1s")
    with pytest.raises(ConfigError, match="unknown kafka sink-uri parameter"):
        parse_sink_uri("kafka://b:1/t?protocol=simple&table=a.b")


# ------------------------------------------------------------------ against the real (plain-text) broker


def test_the_settings_reach_the_client(broker: Broker) -> None:
    """The preflight's metadata client speaks TLS when told: to the plain-text broker, that fails."""
    assert check_broker(broker.bootstrap_servers, timeout=5) == []
    tls = KafkaSecurity.from_params({"enable-tls": "true"}).client_config()
    findings = check_broker(broker.bootstrap_servers, timeout=2, client_config=tls)
    assert [f.check for f in findings] == ["broker-unreachable"], findings


def test_a_failing_sasl_sink_shows_the_password_nowhere(
    broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SASL producer and admin client against a broker that does not speak SASL: the sink fails, and
    neither its error, nor the logs, nor the status file that records the error holds the password."""
    security = KafkaSecurity.from_params({"sasl-mechanism": "PLAIN", "sasl-user": "cdc", "sasl-password": SECRET})
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    config = KafkaSinkConfig(
        broker.bootstrap_servers,
        topic,
        CodecOptions(protocol="canal-json", enable_tidb_extension=True),
        partition_num=1,
        delivery_timeout_s=3,
        flush_timeout_s=5,
        client_config={**security.client_config(), "debug": "security,conf"},
    )
    caplog.set_level(logging.DEBUG)
    from changefeed.capture.binlog import file_capture  # noqa: PLC0415

    events = list(file_capture(Path(__file__).parent / "fixtures" / "binlog" / "full").events())[:20]
    sink = KafkaSink(config)
    sink.topics.timeout_s = 3  # before `open` looks the topic up: the SASL handshake cannot succeed; 3 s, not 30
    with pytest.raises(ChangefeedError) as failure, sink:
        sink.write(events)
        sink.flush()
    text = str(failure.value)
    status = JobStatusWriter(tmp_path / "status", "cf", "capture")
    status.error(f"{text}; sink-uri kafka://{broker.bootstrap_servers}/{topic}?{SASL}; conf {config.client_config}")
    written = (tmp_path / "status" / STATUS_FILE).read_text()
    assert orjson.loads(written)["last_error"]["text"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Broker transport failure" in text
    assert SECRET not in text and SECRET not in written and SECRET not in logged


def test_run_cli_with_a_sasl_sink_uri_shows_no_password(broker: Broker, tmp_path: Path) -> None:
    """``changefeed run`` at DEBUG: its preflight SASL client fails against the plain broker; no password on stderr."""
    config = tmp_path / "cf.toml"
    sink_uri = f"kafka://{broker.bootstrap_servers}/cdc-{uuid.uuid4().hex[:6]}?protocol=canal-json&{SASL}"
    config.write_text(f'sink-uri = "{sink_uri}"\n[source]\npath = "{Path(__file__).parent / "fixtures"}"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "changefeed", "--log-level", "DEBUG", "run", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "broker-unreachable" in proc.stderr and SECRET not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    status = list(tmp_path.rglob(STATUS_FILE))
    assert all(SECRET not in p.read_text() for p in status)
