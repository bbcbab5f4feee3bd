"""JSON log lines carry every extra field, and no credential survives in any part of a record."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from changefeed.ops.logging import bind_log_context, current_log_context, log_context, mask_secrets, setup_logging
from changefeed.testing import free_port

SECRET = "hunter2-Secret"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = setup_logging("DEBUG", "json", stream)
    root = logging.getLogger()
    level = root.level
    try:
        yield stream
    finally:
        root.removeHandler(handler)  # type: ignore[arg-type]
        root.setLevel(level)


class _Dsn:
    """An object whose str() leaks a password, as a careless config class might."""

    def __str__(self) -> str:
        return f"Dsn(host=db1 password={SECRET})"


def _lines(stream: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_extra_fields(json_log: io.StringIO) -> None:
    log = logging.getLogger("changefeed.progress")
    log.info(
        "batch %d done",
        7,
        extra={"changefeed": "cf-1", "position": {"file": "binlog.000003", "pos": 1234}, "table": "shop.orders"},
    )
    (entry,) = _lines(json_log)
    assert entry["level"] == "INFO" and entry["logger"] == "changefeed.progress"
    assert entry["message"] == "batch 7 done"
    assert entry["changefeed"] == "cf-1" and entry["table"] == "shop.orders"
    assert entry["position"] == {"file": "binlog.000003", "pos": 1234}
    assert entry["time"].endswith("+00:00")


def test_passwords_never_reach_the_output(json_log: io.StringIO) -> None:
    log = logging.getLogger("changefeed.test")
    url = f"mysql://repl:{SECRET}@db1:3306/shop"
    log.warning(f"connecting to {url}")  # in the message itself
    log.warning("connecting to %s via %r", url, _Dsn())  # in the arguments
    log.warning("config %s", {"sink": url, "password": SECRET, "sasl.password": SECRET})  # a mapping argument
    log.warning(
        "extra fields",
        extra={
            "url": url,
            "password": SECRET,
            "dsn": f"host=db1 user=repl password={SECRET}",
            "options": {"source": [url], "token": SECRET},
        },
    )
    try:
        raise ConnectionError(f"lost {url}")
    except ConnectionError:
        log.exception("failed with password=%s", SECRET)
    out = json_log.getvalue()
    assert SECRET not in out
    entries = _lines(json_log)
    assert len(entries) == 5
    assert entries[0]["message"] == "connecting to mysql://repl:***@db1:3306/shop"
    assert entries[3]["password"] == "***" and entries[3]["url"] == "mysql://repl:***@db1:3306/shop"
    assert entries[3]["options"]["token"] == "***"
    assert "mysql://repl:***@db1" in entries[4]["exception"]


def test_mask_secrets_forms() -> None:
    assert mask_secrets(f"kafka://u:{SECRET}@b:9092 and password={SECRET}") == "kafka://u:***@b:9092 and password=***"
    assert mask_secrets(f'{{"password": "{SECRET}"}}') == '{"password": "***"}'
    assert mask_secrets("mysql://root@h:3306") == "mysql://root@h:3306"


def test_one_secret_vocabulary_for_text_and_keys(json_log: io.StringIO) -> None:
    """The words that mask ``word=value`` in text are the ones that mask an ``extra`` key's value."""
    from changefeed import secrets  # noqa: PLC0415

    for key in ["credential", "credentials", "api_key", "api-key", "X-Api-Key", "apikey", "sasl.password", "pass"]:
        assert mask_secrets(f"{key}={SECRET} next") == f"{key}=*** next", key
        assert mask_secrets(f'{{"{key}": "{SECRET}"}}') == f'{{"{key}": "***"}}', key
        assert secrets.is_secret_key(key), key
    for key in ["password", "passwd", "pwd", "MYSQL_PWD", "secret", "token", "sasl_password"]:
        assert secrets.is_secret_key(key) and mask_secrets(f"{key}: {SECRET}") == f"{key}: ***", key
    # names of where a secret is, not the secret: readable in text
    assert mask_secrets("password-file=/etc/cf/pw password-env=CF_PW") == "password-file=/etc/cf/pw password-env=CF_PW"
    assert not secrets.is_secret_key("changefeed") and not secrets.is_secret_key("position")

    log = logging.getLogger("changefeed.test")
    log.warning(f"kafka login credential={SECRET} api_key={SECRET}")
    log.warning("%s", {"api_key": SECRET, "credential": SECRET})
    log.warning("x", extra={"password": SECRET, "credential": SECRET, "api_key": SECRET, "note": f"apikey={SECRET}"})
    assert SECRET not in json_log.getvalue()
    first, second, third = _lines(json_log)
    assert first["message"] == "kafka login credential=*** api_key=***"
    assert second["message"] == "{'api_key': '***', 'credential': '***'}"
    assert third["password"] == third["credential"] == third["api_key"] == "***"
    assert third["note"] == "apikey=***"


def test_cli_log_format_json(tmp_path: Path) -> None:
    """End to end: the flag gives JSON lines on stderr, with the URL's password masked."""
    port = free_port("127.0.0.1")
    argv = [sys.executable, "-m", "changefeed", "--log-format", "json", "--log-level", "INFO", "check"]
    argv += ["--from", f"mysql://root:{SECRET}@127.0.0.1:{port}", "--timeout", "1"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert "source-unreachable" in result.stdout
    assert SECRET not in result.stdout + result.stderr
    lines = [orjson.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert any(e.get("check") == "source-unreachable" and e["logger"] == "changefeed.ops.preflight" for e in lines)


def test_bound_context_reaches_every_record_of_its_thread(json_log: io.StringIO) -> None:
    log = logging.getLogger("changefeed.sink.test")
    with log_context(changefeed="cf-9", job="capture", batch=3, source=f"mysql://repl:{SECRET}@db1:3306"):
        log.info("inside")
        bind_log_context(position={"file": "binlog.000002", "pos": 99})
        log.info("explicit wins", extra={"batch": 4})
        other = threading.Thread(target=lambda: log.info("another thread"))
        other.start()
        other.join()
        assert current_log_context()["position"] == {"file": "binlog.000002", "pos": 99}
    log.info("outside")
    inside, explicit, thread, outside = _lines(json_log)
    assert (inside["changefeed"], inside["job"], inside["batch"]) == ("cf-9", "capture", 3) and "position" not in inside
    assert explicit["batch"] == 4 and explicit["position"] == {"file": "binlog.000002", "pos": 99}
    assert inside["source"] == "mysql://repl:***@db1:3306" and SECRET not in json_log.getvalue()
    assert "changefeed" not in thread and "changefeed" not in outside


def test_log_level_names_loggers_after_the_root_level() -> None:
    """``--log-level warning,changefeed.progress.spark=debug``: the root stays at WARNING, one logger opens."""
    stream = io.StringIO()
    root = logging.getLogger()
    named = logging.getLogger("changefeed.test.named")
    level = root.level
    handler = setup_logging("warning, changefeed.test.named=debug", "json", stream)
    try:
        assert root.level == logging.WARNING
        assert named.level == logging.DEBUG
        named.debug("shown")
        logging.getLogger("changefeed.test.other").info("hidden")
        assert [r["message"] for r in _lines(stream)] == ["shown"]
    finally:
        root.removeHandler(handler)  # type: ignore[arg-type]
        root.setLevel(level)
        named.setLevel(logging.NOTSET)
