"""``changefeed check --broker``: the kafka sink-uri's TLS/SASL parameters reach the broker check's client.

tansu (the test broker) has no TLS or SASL listener, so the mapping is checked on the librdkafka
settings handed to the check; the real broker shows that a plaintext check still passes and that
TLS settings do reach librdkafka (a TLS client gets no metadata from a plaintext listener).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from changefeed.cli import main
from changefeed.ops import preflight
from changefeed.testing import Broker

SECRET = "kafka-Secret-pw"


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `changefeed check` hands to `check_all` (which then finds nothing)."""
    seen: dict[str, Any] = {}

    def fake_check_all(**kwargs: Any) -> list[preflight.Finding]:
        seen.update(kwargs)
        return []

    monkeypatch.setattr(preflight, "check_all", fake_check_all)
    return seen


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "sasl.pw"
    path.write_text(SECRET + "\n")
    os.chmod(path, 0o600)
    return path


def test_options_map_onto_librdkafka_settings(
    handed: dict[str, Any], password_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ca, cert, key = (str(tmp_path / n) for n in ("ca.pem", "client.pem", "client.key"))
    argv = ["check", "--broker", "b1:9093,b2:9093", "--topic", "t", "--ca", ca, "--cert", cert, "--key", key]
    argv += ["--sasl-mechanism", "scram-sha-512", "--sasl-user", "cdc", "--sasl-password-file", str(password_file)]
    assert main(argv) == 0
    assert (handed["broker"], handed["topic"], handed["partitions"]) == ("b1:9093,b2:9093", "t", None)
    assert handed["broker_config"] == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca,
        "ssl.certificate.location": cert,
        "ssl.key.location": key,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "cdc",
        "sasl.password": SECRET,
    }

    monkeypatch.setenv("CDC_KAFKA_PW", SECRET)
    argv = ["check", "--broker", "b1:9092", "--sasl-mechanism", "PLAIN", "--sasl-user", "cdc"]
    assert main([*argv, "--sasl-password-env", "CDC_KAFKA_PW"]) == 0
    assert handed["broker_config"] == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "cdc",
        "sasl.password": SECRET,
    }

    assert main(["check", "--broker", "b1:9093", "--enable-tls", "--insecure-skip-verify"]) == 0
    assert handed["broker_config"] == {
        "security.protocol": "SSL",
        "enable.ssl.certificate.verification": "false",
        "ssl.endpoint.identification.algorithm": "none",
    }

    assert main(["check", "--broker", "b1:9092"]) == 0  # no option: librdkafka's PLAINTEXT, nothing added
    assert handed["broker_config"] == {}


def test_the_sink_uri_itself(handed: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_KAFKA_PW", SECRET)
    uri = (
        "kafka://b1:9093,b2:9093/orders?protocol=canal-json&partition-num=6&ca=/etc/cdc/ca.pem"
        "&sasl-mechanism=SCRAM-SHA-256&sasl-user=cdc&sasl-password-env=CDC_KAFKA_PW"
    )
    assert main(["check", "--broker", uri]) == 0
    assert (handed["broker"], handed["topic"], handed["partitions"]) == ("b1:9093,b2:9093", "orders", 6)
    assert handed["broker_config"] == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/etc/cdc/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "cdc",
        "sasl.password": SECRET,
    }
    # the options name the topic and partitions over the URI's
    assert (
        main(["check", "--broker", "kafka://b1:9092/orders?partition-num=6", "--topic", "x", "--partitions", "2"]) == 0
    )
    assert (handed["topic"], handed["partitions"], handed["broker_config"]) == ("x", 2, {})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--broker", f"kafka://b1:9092/t?sasl-mechanism=PLAIN&sasl-user=u&sasl-password={SECRET}"],
            "sasl-password-env",
        ),
        (["--from", "mysql://u@h", "--ca", "/etc/ca.pem"], "--ca need --broker"),
        (["--to", "mysql://u@h", "--sasl-password-env", "X", "--topic", "t"], "--topic, --sasl-password-env need"),
        (["--broker", "b:9092", "--cert", "/c.pem"], "cert and key go together"),
        (["--broker", "b:9092", "--sasl-mechanism", "GSSAPI"], "sasl-mechanism must be one of"),
        (["--broker", "b:9092", "--sasl-mechanism", "PLAIN", "--sasl-user", "u"], "needs sasl-user and a password"),
        (["--broker", "b:9092", "--sasl-user", "u", "--sasl-password-env", "CDC_UNSET_PW"], "not set"),
        (["--broker", "b:9092", "--insecure-skip-verify"], "without TLS"),
        (["--broker", "kafka://b:9092/t?ca=/a.pem", "--ca", "/b.pem"], "give it in one place"),
        (["--broker", "kafka://b:9092/t?partition-num=0"], "partition-num must be a positive integer"),
        (["--broker", "http://b:9092/t"], "kafka://HOST:PORT/TOPIC"),
        (["--broker", "kafka://b:9092/t?ca=/a.pem&ca=/b.pem"], "sink-uri parameter 'ca' given twice"),
        (
            ["--broker", f"kafka://b:9092/a/b?sasl-password={SECRET}"],
            "--broker takes HOST:PORT[,HOST:PORT] or kafka://",
        ),
    ],
)
def test_refused(
    argv: list[str],
    message: str,
    handed: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("CDC_UNSET_PW", raising=False)
    assert main(["check", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and SECRET not in err
    assert not handed  # nothing was checked


def test_no_password_option_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["check", "--broker", "b:9092", "--sasl-password", SECRET])
    assert exit_.value.code == 2
    assert SECRET not in capsys.readouterr().err


def test_world_readable_password_file_is_refused(
    handed: dict[str, Any], password_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.chmod(password_file, 0o644)
    argv = ["check", "--broker", "b:9092", "--sasl-mechanism", "PLAIN", "--sasl-user", "u"]
    assert main([*argv, "--sasl-password-file", str(password_file)]) == 1
    assert "readable by group or others" in capsys.readouterr().err
    assert not handed


def test_real_broker_plaintext_and_tls(broker: Broker, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"chk-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=2)
    assert main(["check", "--broker", f"kafka://{broker.bootstrap_servers}/{topic}?partition-num=2"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["check", "--broker", broker.bootstrap_servers, "--topic", topic, "--partitions", "3"]) == 1
    assert "ERROR topic-partitions" in capsys.readouterr().out
    # TLS against tansu's plaintext listener: the setting reached librdkafka, so no metadata comes back.
    argv = ["check", "--broker", broker.bootstrap_servers, "--enable-tls", "--insecure-skip-verify", "--timeout", "2"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "ERROR broker-unreachable" in out and "security protocol" in out
