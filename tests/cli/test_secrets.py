"""Secrets: passwords from a variable or an owner-only file, masked errors, private directories, metrics exposure."""

from __future__ import annotations

import argparse
import os
import signal
import stat
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from changefeed.cli import build_parser, main
from changefeed.clients.mysql import parse_mysql_url
from changefeed.errors import ConfigError
from changefeed.files.store import private_dir
from changefeed.ops import metrics
from changefeed.ops.jobfile import STATUS_FILE, JobStatusWriter
from changefeed.ops.monitor import current_job_context, job_context, set_job_context
from changefeed.secrets import mask_secrets, url_passwords
from changefeed.testing import MariaDBServer
from tests.conftest import ReplicaUser

SECRET = "Sekr3t-" + uuid.uuid4().hex[:8]


def _password_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / f"pw-{uuid.uuid4().hex[:6]}"
    path.write_text(text)
    path.chmod(mode)
    return path


# ------------------------------------------------------------------ where a password comes from


def test_password_env_file_and_mysql_pwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MYSQL_PWD", raising=False)
    monkeypatch.setenv("CF_TEST_PW", "from env")
    assert parse_mysql_url("mysql://u@h/?password-env=CF_TEST_PW").password == "from env"
    path = _password_file(tmp_path, "p@ss:w/rd \n")  # one trailing newline stripped, the space kept
    params = parse_mysql_url(f"mysql://u@h:3307/db?password_file={path}&connect-timeout=3")
    assert (params.password, params.port, params.database, params.options) == (
        "p@ss:w/rd ",
        3307,
        "db",
        {"connect_timeout": 3},
    )
    assert "p@ss" not in repr(params) and params.url == "mysql://u:***@h:3307/db"
    assert (
        parse_mysql_url(f"mysql://u@h/?password-file={_password_file(tmp_path, 'crlf' + chr(13) + chr(10))}").password
        == "crlf"
    )
    assert parse_mysql_url("mysql://u@h/").password == ""
    monkeypatch.setenv("MYSQL_PWD", "from MYSQL_PWD")
    assert parse_mysql_url("mysql://u@h/").password == "from MYSQL_PWD"  # the MySQL client's convention
    assert parse_mysql_url("mysql://u:inline@h/").password == "inline"  # the URL's own wins over MYSQL_PWD
    assert parse_mysql_url("mysql://u@h/?password-env=CF_TEST_PW").password == "from env"


@pytest.mark.parametrize(
    ("query", "mode", "message"),
    [
        ("password-file={path}", 0o644, "readable by group or others (mode 0644); run: chmod 600"),
        ("password-file={path}", 0o640, "readable by group or others (mode 0640)"),
        ("password-file={missing}", 0o600, "cannot read password file"),
        ("password-env=CF_TEST_UNSET_PW", 0o600, "password-env names 'CF_TEST_UNSET_PW', but that environment"),
        ("password-env=CF_TEST_PW&password-file={path}", 0o600, "given by password-env and password-file"),
    ],
)
def test_password_sources_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str, mode: int, message: str
) -> None:
    monkeypatch.setenv("CF_TEST_PW", "x")
    monkeypatch.delenv("CF_TEST_UNSET_PW", raising=False)
    path = _password_file(tmp_path, SECRET, mode)
    url = f"mysql://u@h/?{query.format(path=path, missing=tmp_path / 'missing')}"
    with pytest.raises(ConfigError) as exc:
        parse_mysql_url(url)
    assert message in str(exc.value) and SECRET not in str(exc.value)


def test_a_password_in_two_places_is_refused(tmp_path: Path) -> None:
    path = _password_file(tmp_path, "other")
    with pytest.raises(ConfigError, match="given by the URL and password-file") as exc:
        parse_mysql_url(f"mysql://u:{SECRET}@h/?password-file={path}")
    assert SECRET not in str(exc.value)
    for empty in ("", "\n", "a\nb\n"):
        with pytest.raises(ConfigError, match="on one line"):
            parse_mysql_url(f"mysql://u@h/?password-file={_password_file(tmp_path, empty)}")


def test_toml_source_takes_password_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from changefeed.config import parse_config  # noqa: PLC0415

    path = _password_file(tmp_path, SECRET + "\n")
    base = 'sink-uri = "file:///x"\n[source]\ntype = "mysql"\n'
    for source in (
        f'url = "mysql://cdc@db:3306"\npassword-file = "{path}"',
        f'url = "mysql://cdc@db:3306?password-file={path}"',
    ):
        cfg = parse_config(base + source)
        assert cfg.source.data_source_options()["password"] == SECRET
        assert cfg.source.data_source_options()["url"] == "mysql://cdc@db:3306"
    with pytest.raises(ConfigError, match="both name a password"):
        parse_config(base + f'url = "mysql://cdc@db"\npassword-file = "{path}"\npassword-env = "X"')
    with pytest.raises(ConfigError, match="given twice"):
        parse_config(base + 'url = "mysql://cdc@db?password-env=X"\npassword-env = "Y"')
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        parse_config(base + f'url = "mysql://cdc@db"\npassword-file = "{path}"').source.data_source_options()
    monkeypatch.setenv("MYSQL_PWD", SECRET)
    assert parse_config(base + 'url = "mysql://cdc@db"').source.data_source_options()["password"] == SECRET


# ------------------------------------------------------------------ masking, once, at the error exit


def test_one_masking_function() -> None:
    from changefeed.clients import mysql as mysql_url  # noqa: PLC0415
    from changefeed.ops import logging as ops_logging  # noqa: PLC0415

    assert ops_logging.mask_secrets is mask_secrets and mysql_url.mask_url is mask_secrets
    argv = ["--to", "mariadb://root:has space@h/", f"--x=mysql://u:{SECRET}%21@h:1/", "plain", "file:///tmp/x"]
    assert url_passwords(argv) == {"has space", f"{SECRET}%21", f"{SECRET}!"}
    text = f"bad 'mariadb://root:has space@h/' and {SECRET}! and MYSQL_PWD={SECRET}"
    assert mask_secrets(text, url_passwords(argv)) == "bad 'mariadb://root:***@h/' and *** and MYSQL_PWD=***"


def test_a_bare_http_token_is_masked_and_a_bare_user_name_is_not() -> None:
    """HTTP services take a token as the basic-auth user (``https://TOKEN@host``); mysql://root@h names a user."""
    text = "catalog https://s3cr3tT0ken@cat.example/v1 and HTTP://tok@h:8181 via mysql://root@h:3306/db"
    assert mask_secrets(text) == "catalog https://***@cat.example/v1 and HTTP://***@h:8181 via mysql://root@h:3306/db"
    assert mask_secrets("https://cat.example/v1/a@b") == "https://cat.example/v1/a@b"  # an @ in the path is no user


@pytest.fixture
def storage_dir(tmp_path: Path) -> Path:
    path = tmp_path / "storage"
    path.mkdir()
    return path


def _error_cases(storage: Path, tmp_path: Path) -> list[list[str]]:
    config = tmp_path / "cf.toml"
    config.write_text(f'sink-uri = "s3://key:{SECRET}@bucket/x"\n[source]\npath = "{storage}"\n')
    return [
        ["apply", "--from", f"file://{storage}", "--to", f"mariadb://root:{SECRET}@127.0.0.1:1/"],
        ["apply", "--from", f"file://{storage}", "--to", f"mysqlx://root:{SECRET}@127.0.0.1:1/"],
        ["apply", "--from", f"kafka://u:{SECRET}@127.0.0.1:9092", "--to", f"parquet://{tmp_path}/out"],
        ["apply", "--from", f"file://{storage}", "--to", f"mysql://root@127.0.0.1:1/?password={SECRET}"],
        ["apply", "--from", f"file://{storage}", "--to", f"mariadb://root:{SECRET} x@127.0.0.1:1/"],
        ["diff", "--source", f"mysql://root:{SECRET}@h:1", "--target", "mysql://h:2", f"mysql://root:{SECRET}@h"],
        ["check", "--partitions", f"mysql://u:{SECRET}@h"],
        ["--log-level", "DEBUG", "run", str(config)],
    ]


@pytest.mark.parametrize("case", range(8))
def test_cli_errors_never_show_the_password(
    case: int, storage_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _error_cases(storage_dir, tmp_path)[case]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    captured = capsys.readouterr()
    assert code in (1, 2), captured
    assert captured.err.strip(), "an error is reported"
    assert SECRET not in captured.err + captured.out, captured.err
    assert "***" in captured.err, captured.err


def test_error_exit_of_a_real_process(storage_dir: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "changefeed",
            "apply",
            "--from",
            f"file://{storage_dir}",
            "--to",
            f"mysqlx://root:{SECRET}@h/",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "mysqlx://root:***@h/" in proc.stderr, proc.stderr
    assert SECRET not in proc.stderr + proc.stdout


# ------------------------------------------------------------------ a password-protected user, for real


@pytest.fixture
def app_user(mariadb: MariaDBServer, fresh_db: str) -> Iterator[tuple[str, str]]:
    """(user, password) with every right on ``fresh_db`` and on the ``changefeed`` checkpoint schema."""
    name = f"a{uuid.uuid4().hex[:10]}"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{SECRET}'")
        cur.execute(f"GRANT ALL ON `{fresh_db}`.* TO '{name}'@'%'")
        cur.execute(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, s VARCHAR(20))")
        cur.execute(f"INSERT INTO `{fresh_db}`.t VALUES (1, 'a\\\\b''c')")
    try:
        yield name, SECRET
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("MYSQL_PWD", "CF_TEST_PW")}
    return subprocess.run(
        [sys.executable, "-m", "changefeed", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, **(env or {})},
    )


def test_commands_connect_with_password_env_file_and_mysql_pwd(
    mariadb: MariaDBServer, fresh_db: str, app_user: tuple[str, str], tmp_path: Path
) -> None:
    user, password = app_user
    base = f"mysql://{user}@{mariadb.host}:{mariadb.port}/"
    path = _password_file(tmp_path, password + "\n")
    ok = _cli(["check", "--to", f"{base}?password-file={path}"])
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stderr
    diff = _cli(
        ["diff", "--source", f"{base}?password-env=CF_TEST_PW", "--target", f"{base}?password-file={path}",
         "--tables", f"{fresh_db}.*"],
        env={"CF_TEST_PW": password},
    )  # fmt: skip
    assert diff.returncode == 0 and "equal (1 rows" in diff.stdout, diff.stdout + diff.stderr
    assert _cli(["check", "--to", base], env={"MYSQL_PWD": password}).returncode == 0
    denied = _cli(["check", "--to", base], env={"MYSQL_PWD": "wrong-" + password})
    assert denied.returncode == 1 and "sink-auth" in denied.stdout and password not in denied.stdout + denied.stderr
    path.chmod(0o644)
    refused = _cli(["check", "--to", f"{base}?password-file={path}"])
    assert refused.returncode == 1 and "chmod 600" in refused.stderr, refused.stderr


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def test_running_process_shows_no_password_in_its_arguments(
    mariadb: MariaDBServer, fresh_db: str, replica_user: ReplicaUser
) -> None:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO `{fresh_db}`.t VALUES (1)")
    clean = {k: v for k, v in os.environ.items() if k != "MYSQL_PWD"}
    argv = [sys.executable, "-m", "changefeed", "capture", "--from", f"{replica_user.url}?password-env=CF_TEST_PW",
            "--stop-never", "--no-schema-tracker", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**clean, "CF_TEST_PW": replica_user.password},
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # an event: the capture is connected and streaming
        assert first.startswith(b"{"), proc.stderr.read() if proc.poll() is not None and proc.stderr else first
        for pid in _tree(proc.pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert replica_user.password.encode() not in f.read()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.stderr is not None and replica_user.password.encode() not in proc.stderr.read()


# ------------------------------------------------------------------ private directories


def test_checkpoint_and_status_directories_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "out"
        checkpoint = private_dir(out / "_spark_checkpoint")
        assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o700
        assert stat.S_IMODE(out.stat().st_mode) == 0o755  # a storage directory stays readable to its consumers
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        assert stat.S_IMODE(private_dir(shared).stat().st_mode) == 0o755  # an existing directory is left alone
        JobStatusWriter(tmp_path / "status" / "ck", "cf", "capture")
        assert (tmp_path / "status" / "ck" / STATUS_FILE).is_file()
        assert stat.S_IMODE((tmp_path / "status" / "ck").stat().st_mode) == 0o700
        monkeypatch.chdir(tmp_path)
        from changefeed.cli.run import default_checkpoint, prepare_checkpoint  # noqa: PLC0415

        job = prepare_checkpoint(default_checkpoint("apply", "cf"))
        assert job == tmp_path / ".changefeed" / "apply-cf"
        assert stat.S_IMODE((tmp_path / ".changefeed").stat().st_mode) == 0o700
        assert stat.S_IMODE(job.stat().st_mode) == 0o700
    finally:
        os.umask(old)


# ------------------------------------------------------------------ metrics exposure


def test_metrics_listen_on_loopback_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    server = metrics.start_metrics_server(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            assert response.status == 200
    finally:
        server.shutdown()
        server.server_close()
    assert current_job_context().metrics_addr == "127.0.0.1"
    parser = build_parser()
    args = parser.parse_args(["apply", "--from", "file:///x", "--to", "parquet:///y", "--metrics-port", "0"])
    assert args.metrics_addr == "127.0.0.1"
    args = parser.parse_args(["run", "cf.toml", "--metrics-port", "9464", "--metrics-addr", "0.0.0.0"])
    with job_context():
        context = set_job_context(args, "cf")
        assert (context.metrics_port, context.metrics_addr) == (9464, "0.0.0.0")
        assert set_job_context(argparse.Namespace(), "cf").metrics_addr == "127.0.0.1"


def test_table_label_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "TABLE_LABEL_LIMIT", 3)
    monkeypatch.setattr(metrics, "_TABLES", set())
    before = _events_by_table()
    tally = metrics.tally_events([])
    for i in range(10):
        tally[("insert", f"bound_{SECRET[-4:]}.t{i}")] += 1
    tally[("resolved", "")] += 1
    metrics.record_tally(tally)
    metrics.record_tally(tally)  # the same tables again: still within the bound
    grown = {k: v - before.get(k, 0) for k, v in _events_by_table().items() if v != before.get(k, 0)}
    tables = {table for (_, table) in grown}
    assert len(tables - {"", metrics.OTHER_TABLES}) == 3
    assert grown[("insert", metrics.OTHER_TABLES)] == 14 and grown[("resolved", "")] == 2
    assert metrics.table_label("") == ""


def _events_by_table() -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics.scrape()):
        for s in family.samples:
            if s.name == "changefeed_events_total":
                out[(s.labels["kind"], s.labels["table"])] = s.value
    return out
