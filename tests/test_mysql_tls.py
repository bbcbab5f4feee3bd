"""TLS on MySQL connections (issue 14, item 6): ssl-mode with the MySQL client's meaning, against a real
MariaDB that offers TLS with a throw-away CA, for the sink/diff URLs and the live replica connection."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from changefeed.capture.binlog import BinlogPosition, BlockAllowList, live_capture
from changefeed.capture.binlog.replica import ServerAddress
from changefeed.cli import main
from changefeed.clients.mysql import TLSOptions, connect, parse_mysql_url, ssl_mode
from changefeed.config import parse_config
from changefeed.errors import ConfigError
from changefeed.model.events import RowChange
from changefeed.model.jsonl import EventReader
from changefeed.spark.datasource.binlog import _source, range_events
from changefeed.spark.datasource.options import SourceOptions
from changefeed.testing import MariaDBServer, ServiceError
from changefeed.testing.tls import TLSFiles, make_certificates

from .services import service_unavailable

# ------------------------------------------------------------------ parsing (no server)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("disabled", "DISABLED"),
        ("PREFERRED", "PREFERRED"),
        ("required", "REQUIRED"),
        ("verify-ca", "VERIFY_CA"),
        ("VERIFY_CA", "VERIFY_CA"),
        ("Verify-Identity", "VERIFY_IDENTITY"),
    ],
)
def test_ssl_mode_names(text: str, mode: str) -> None:
    assert ssl_mode(text) == mode


def test_ssl_mode_mapping_onto_pymysql() -> None:
    assert TLSOptions().effective_mode == "PREFERRED" and TLSOptions().pymysql_kwargs() == {}
    assert TLSOptions("disabled").pymysql_kwargs() == {"ssl_disabled": True}
    assert TLSOptions("required").pymysql_kwargs() == {"ssl": {"verify_mode": False, "check_hostname": False}}
    assert TLSOptions("verify-ca", ca="/ca.pem").pymysql_kwargs() == {
        "ssl_ca": "/ca.pem",
        "ssl_verify_cert": True,
        "ssl_verify_identity": False,
    }
    full = TLSOptions("verify_identity", ca="/ca.pem", cert="/c.pem", key="/k.pem").pymysql_kwargs()
    assert full["ssl_verify_identity"] is True and full["ssl_cert"] == "/c.pem" and full["ssl_key"] == "/k.pem"
    # Without ssl-mode, the files decide, as before ssl-mode existed.
    assert TLSOptions(ca="/ca.pem").effective_mode == "VERIFY_IDENTITY"
    assert TLSOptions(cert="/c.pem", key="/k.pem").effective_mode == "REQUIRED"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("ssl-mode=sometimes", "ssl-mode must be one of disabled, preferred, required, verify-ca, verify-identity"),
        ("ssl-mode=verify-ca", "needs ssl-ca=FILE"),
        ("ssl-mode=verify-identity", "needs ssl-ca=FILE"),
        ("ssl-mode=required&ssl-ca=/ca.pem", "does not verify the server"),
        ("ssl-mode=disabled&ssl-cert=/c.pem", "ssl-mode=disabled"),
        ("ssl-key=/k.pem", "without ssl-cert"),
    ],
)
def test_bad_tls_options_fail_when_the_url_is_read(query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_mysql_url(f"mysql://u:pw@db:3306/?{query}")
    with pytest.raises(ConfigError, match=message):
        ServerAddress.from_url(f"mysql://u:pw@db:3306?{query}")


def test_replica_url_takes_only_tls_options() -> None:
    address = ServerAddress.from_url("mysql://cdc:pw@db:3307?ssl_mode=VERIFY-CA&ssl-ca=/etc/ca.pem")
    assert address.tls == TLSOptions("VERIFY_CA", ca="/etc/ca.pem")
    assert address.url() == "mysql://cdc@db:3307?ssl-mode=VERIFY_CA&ssl-ca=%2Fetc%2Fca.pem"
    assert ServerAddress.from_url(address.url(password=True)) == address
    with pytest.raises(ConfigError, match="no URL option but ssl-mode") as info:
        ServerAddress.from_url("mysql://cdc:hunter22@db?charset=latin1")
    assert "hunter22" not in str(info.value)


def test_config_source_url_keeps_tls_options_for_the_data_source(tmp_path: Path) -> None:
    config = parse_config(
        'sink-uri = "file:///tmp/x"\n[source]\ntype = "mysql"\n'
        'url = "mysql://cdc@db:3306?ssl-mode=verify-ca&ssl-ca=/etc/ca.pem&password-env=CDC_PW"\n',
        tmp_path,
    )
    assert config.source.password_env == "CDC_PW"
    assert config.source.url == "mysql://cdc@db:3306?ssl-mode=verify-ca&ssl-ca=%2Fetc%2Fca.pem"
    with pytest.raises(ConfigError, match="takes no parameters but password-env"):
        parse_config('sink-uri = "file:///tmp/x"\n[source]\ntype = "mysql"\nurl = "mysql://cdc@db?x=1"\n', tmp_path)


# ------------------------------------------------------------------ a real server


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[TLSFiles, TLSFiles]:
    """The server's CA and certificate (naming 127.0.0.1 only), and an unrelated CA."""
    directory = tmp_path_factory.mktemp("tls")
    return make_certificates(directory, names=("127.0.0.1",)), make_certificates(directory, prefix="other-")


@pytest.fixture(scope="module")
def tls_server(certs: tuple[TLSFiles, TLSFiles]) -> Iterator[MariaDBServer]:
    """A private MariaDB offering TLS, with a user ``cdc`` that may log in over TLS only."""
    server = MariaDBServer(server_id=61, name="mariadb-tls", tls=certs[0])
    try:
        server.start()
    except ServiceError as exc:
        service_unavailable(f"MariaDB with TLS could not start: {exc}")
    try:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER cdc@'%' IDENTIFIED BY 'cdc-pw' REQUIRE SSL")
            cur.execute("GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO cdc@'%'")
            cur.execute("CREATE DATABASE tlsdb")
            cur.execute("CREATE TABLE tlsdb.t (id INT PRIMARY KEY, v VARCHAR(20))")
        yield server
    finally:
        server.stop()


def _cipher(server: MariaDBServer, host: str = "127.0.0.1", user: str = "root", **tls: Any) -> str:
    """The session's Ssl_cipher ('' for a plain connection) over a connection with these TLS settings."""
    password = "cdc-pw" if user == "cdc" else ""
    conn = connect(host=host, port=server.port, user=user, password=password, connect_timeout=10, tls=TLSOptions(**tls))
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW STATUS LIKE 'Ssl_cipher'")
            return str(cur.fetchone()[1])
    finally:
        conn.close()


@pytest.mark.mariadb
def test_modes_against_a_tls_server(tls_server: MariaDBServer, certs: tuple[TLSFiles, TLSFiles]) -> None:
    ca = str(certs[0].ca)
    assert _cipher(tls_server, mode="required")
    assert _cipher(tls_server, mode="verify-ca", ca=ca)
    assert _cipher(tls_server, mode="verify-identity", ca=ca)
    assert _cipher(tls_server, mode="verify-ca", ca=ca, cert=str(certs[0].client_cert), key=str(certs[0].client_key))
    assert _cipher(tls_server)  # PREFERRED (the default): encrypted when offered
    assert _cipher(tls_server, mode="disabled") == ""  # not even when offered
    assert _cipher(tls_server, user="cdc", mode="verify-ca", ca=ca)  # a REQUIRE SSL user logs in
    with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
        _cipher(tls_server, user="cdc", mode="disabled")


@pytest.mark.mariadb
def test_verification_failures_are_clear_config_errors(
    tls_server: MariaDBServer, certs: tuple[TLSFiles, TLSFiles]
) -> None:
    with pytest.raises(ConfigError, match="does not verify against ssl-ca") as wrong_ca:
        _cipher(tls_server, mode="verify-ca", ca=str(certs[1].ca))
    assert wrong_ca.value.where == f"127.0.0.1:{tls_server.port}"
    # The certificate names 127.0.0.1 only: "localhost" is the same server under a name it lacks.
    with pytest.raises(ConfigError, match="does not name 'localhost'"):
        _cipher(tls_server, host="localhost", mode="verify-identity", ca=str(certs[0].ca))
    assert _cipher(tls_server, host="localhost", mode="verify-ca", ca=str(certs[0].ca))  # no name check


@pytest.mark.mariadb
def test_required_modes_refuse_a_server_without_tls(mariadb: MariaDBServer, certs: tuple[TLSFiles, TLSFiles]) -> None:
    for mode, ca in (("required", None), ("verify-ca", str(certs[0].ca)), ("verify-identity", str(certs[0].ca))):
        with pytest.raises(ConfigError, match=f"ssl-mode={mode}.*does not offer TLS"):
            _cipher(mariadb, mode=mode, ca=ca)
    assert _cipher(mariadb) == ""  # PREFERRED goes on in plain text
    assert _cipher(mariadb, mode="disabled") == ""


@pytest.mark.mariadb
def test_a_connection_that_stays_plain_is_refused(mariadb: MariaDBServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older PyMySQL carries on in plain text when the server offers no TLS: the check after connect refuses it."""
    monkeypatch.setattr(TLSOptions, "pymysql_kwargs", lambda self: {})  # PyMySQL left in its preferred mode
    with pytest.raises(ConfigError, match="the session is not encrypted"):
        _cipher(mariadb, mode="required")


@pytest.mark.mariadb
def test_sink_url_with_ssl_mode(tls_server: MariaDBServer, certs: tuple[TLSFiles, TLSFiles]) -> None:
    url = f"mysql://cdc:cdc-pw@127.0.0.1:{tls_server.port}/tlsdb?ssl-mode=verify-identity&ssl-ca={certs[0].ca}"
    params = parse_mysql_url(url)
    with params.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1]
        assert isinstance(conn._sock, ssl.SSLSocket)
    plain = parse_mysql_url(url.replace("verify-identity", "required").partition("&ssl-ca")[0])
    with plain.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")


def _rows_in(server: MariaDBServer, first: int) -> tuple[BinlogPosition, BinlogPosition]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.executemany("INSERT INTO tlsdb.t VALUES (%s, %s)", [(first + i, f"row {i}") for i in range(3)])
        cur.execute("SHOW MASTER STATUS")
        end_file, end_pos = cur.fetchone()[:2]
    return BinlogPosition(str(file), int(pos)), BinlogPosition(str(end_file), int(end_pos))


@pytest.mark.mariadb
def test_live_capture_over_verify_ca(tls_server: MariaDBServer, certs: tuple[TLSFiles, TLSFiles]) -> None:
    """The replica connection and the schema tracker's, as user cdc, who may log in over TLS only."""
    start, end = _rows_in(tls_server, 100)
    url = f"mysql://cdc:cdc-pw@127.0.0.1:{tls_server.port}?ssl-mode=verify-ca&ssl-ca={certs[0].ca}"
    capture = live_capture(
        url, start, blocking=False, table_filter=BlockAllowList.build(do_dbs=["tlsdb"]), until=(end.file, end.pos)
    )
    rows = [e for e in capture.events() if isinstance(e, RowChange)]
    assert [r.new for r in rows] == [(100, "row 0"), (101, "row 1"), (102, "row 2")]
    wrong = url.replace(str(certs[0].ca), str(certs[1].ca))
    with pytest.raises(ConfigError, match="does not verify against ssl-ca"):  # at once, not retried
        list(live_capture(wrong, start, blocking=False, until=(end.file, end.pos), track_schema=False).events())


@pytest.mark.mariadb
def test_capture_cli_over_verify_identity(
    tls_server: MariaDBServer, certs: tuple[TLSFiles, TLSFiles], capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    start, end = _rows_in(tls_server, 200)
    url = f"mysql://cdc:cdc-pw@127.0.0.1:{tls_server.port}?ssl-mode=verify-identity&ssl-ca={certs[0].ca}"
    args = ["capture", "--from", url, "--start", f"{start.file}:{start.pos}", "--until", f"{end.file}:{end.pos}"]
    assert main([*args, "--do-db", "tlsdb"]) == 0
    events = list(EventReader().read(capsysbinary.readouterr().out.splitlines()))
    assert [e.new[0] for e in events if isinstance(e, RowChange)] == [200, 201, 202]


@pytest.mark.mariadb
def test_spark_binlog_input_reads_a_range_over_tls(
    tls_server: MariaDBServer, certs: tuple[TLSFiles, TLSFiles], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `[source]` URL's TLS options travel in the data source's ``url`` option to the executor's reader."""
    start, end = _rows_in(tls_server, 300)
    monkeypatch.setenv("CDC_PW", "cdc-pw")
    config = parse_config(
        'sink-uri = "file:///tmp/x"\n[source]\ntype = "mysql"\npassword-env = "CDC_PW"\n'
        f'url = "mysql://cdc@127.0.0.1:{tls_server.port}?ssl-mode=verify-ca&ssl-ca={certs[0].ca}"\n',
        tmp_path,
    )
    options = config.source.data_source_options()
    assert "cdc-pw" not in options["url"] and "ssl-mode=VERIFY_CA" in options["url"]
    source = _source(SourceOptions.parse(options))
    source.check()  # the preflight's connection, over TLS too
    assert source.latest().file
    events = list(range_events(source, start.to_dict(), end.to_dict(), "UTC"))
    assert [e.new[0] for e in events if isinstance(e, RowChange) and e.table == "t"] == [300, 301, 302]


@pytest.mark.mariadb
def test_preferred_urls_keep_the_shared_context(mariadb: MariaDBServer) -> None:
    """The fast path: URLs without TLS options (PREFERRED) share one context per process."""
    first = parse_mysql_url(f"mysql://root@127.0.0.1:{mariadb.port}/").connect()
    second = parse_mysql_url(f"mysql://root@127.0.0.1:{mariadb.port}/?ssl-mode=preferred").connect()
    try:
        assert first.ctx is second.ctx
    finally:
        first.close()
        second.close()
