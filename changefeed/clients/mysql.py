"""Opening PyMySQL connections: one place, with TLS modes and PyMySQL's TLS "preferred" context built once.

TLS modes (`TLSOptions`, the URL options ``ssl-mode``, ``ssl-ca``, ``ssl-cert``, ``ssl-key``) have
the MySQL client's meaning (``mysql --ssl-mode``): DISABLED (no TLS even when the server offers
it), PREFERRED (TLS when the server offers it, the server not verified), REQUIRED (TLS or no
connection, not verified), VERIFY_CA (TLS, the server's chain checked against ``ssl-ca``),
VERIFY_IDENTITY (that and the server's name: the host connected to must be in its certificate).
Without ``ssl-mode`` the mode is what the files say, as before there was one: ``ssl-ca`` gives
VERIFY_IDENTITY (PyMySQL's rule for a CA; MySQL's client would stop at VERIFY_CA), ``ssl-cert``/
``ssl-key`` alone give REQUIRED, nothing gives PREFERRED. For the three modes that need TLS, a
connection is checked after the handshake: one that is not encrypted (an older PyMySQL carrying
on in plain text) is closed and refused; a server without TLS, or a certificate that fails the
check, ends in a `ConfigError` that says which, not in an OperationalError a caller would retry.
A Unix-socket connection counts as secure (it never leaves the machine), as for the MySQL client.

Why the shared context: with no TLS options PyMySQL (>= 1.1) negotiates TLS when the server
offers it, without verifying the server, and builds a new `ssl.SSLContext` for every
connection, loading every system CA certificate into it although it never verifies with them:
~20-40 ms of CPU each. The capture job opens a replica connection per binlog range and
micro-batch, so that was half of its Python workers' CPU at 2,000 rows/s (bench/RESULTS.md). The
context of that mode holds no per-connection state, so one per process serves every PREFERRED
connection alike; connections of the other modes get PyMySQL's own context, built from their options.

``mysql://user:pass@host:port/db?opt=v`` URLs: parsing, connecting, and where the password comes from.

The sink, the diff tool, ``status`` and ``check`` take the same URL form (TiCDC's ``--sink-uri
mysql://...``). A URL or DSN that reaches a log line or an error message always goes through
`mask_url` (`changefeed.secrets.mask_secrets`) first.

The password is the URL's, or read from ``password-env=NAME`` / ``password-file=PATH``, else from
``MYSQL_PWD`` (`changefeed.secrets.resolve_password`): a command line then holds no secret.
``local_infile`` is refused in a URL: with PyMySQL's own handling, a ``LOAD DATA LOCAL INFILE``
request the server sends (in reply to any statement, or to a DDL text from the data) makes the
client upload any file it can read. Every connection made here answers such a request only with
the one file `load_local_infile` offers, during that one statement; any other request is refused
(`LocalFileRefusedError`), as libmysqlclient refuses one outside ``--local-infile-dir``. The MySQL
sink connects with ``local_infile=True`` itself for its ``LOAD DATA`` (`load_local_infile`).
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from socket import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pymysql.connections import Connection, MySQLResult
from pymysql.constants import CLIENT, COMMAND
from pymysql.converters import escape_string
from pymysql.cursors import Cursor
from pymysql.err import InterfaceError, InternalError, MySQLError, OperationalError, ProgrammingError, error_map
from pymysql.protocol import LoadLocalPacketWrapper

from ..errors import ConfigError
from ..secrets import mask_secrets, resolve_password

# PyMySQL stays behind this module: the rest of the package takes its names from here.
__all__ = [
    "CLIENT",
    "SSL_MODES",
    "TLS_OPTIONS",
    "Connection",
    "Cursor",
    "InterfaceError",
    "InternalError",
    "LoadResult",
    "LocalFileRefusedError",
    "MySQLError",
    "MySQLParams",
    "OperationalError",
    "ProgrammingError",
    "TLSOptions",
    "binary_logs",
    "binlog_status",
    "check_local_request",
    "connect",
    "escape_string",
    "load_local_infile",
    "mask_url",
    "parse_mysql_url",
    "split_mysql_url",
    "ssl_mode",
    "warning_error",
]

#: The MySQL client's ``--ssl-mode`` values, weakest first.
SSL_MODES = ("DISABLED", "PREFERRED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")
#: URL options (underscore form) that `TLSOptions.from_options` reads.
TLS_OPTIONS = ("ssl_mode", "ssl_ca", "ssl_cert", "ssl_key")
_NEEDS_TLS = frozenset({"REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"})
_CR_SSL_CONNECTION_ERROR = 2026  # PyMySQL: "SSL is required but the server doesn't support it"
# libmysqlclient's code for a LOCAL INFILE request it will not serve (outside --local-infile-dir).
CR_LOAD_DATA_LOCAL_INFILE_REJECTED = 2068
CR_COMMANDS_OUT_OF_SYNC = 2014  # the client library's error for a reply out of the protocol's order

log = logging.getLogger(__name__)
_lock = threading.Lock()
_preferred: list[ssl.SSLContext] = []  # the one TLS-preferred context, once built


def ssl_mode(value: str) -> str:
    """``verify-ca``, ``VERIFY_CA``, ``Verify_Ca`` -> ``VERIFY_CA``; anything else is a ConfigError."""
    mode = value.strip().upper().replace("-", "_")
    if mode not in SSL_MODES:
        names = ", ".join(m.lower().replace("_", "-") for m in SSL_MODES)
        raise ConfigError(f"ssl-mode must be one of {names}, got {value!r}")
    return mode


@dataclass(frozen=True)
class TLSOptions:
    """How one connection uses TLS: a mode (None: what the files imply) and PEM file paths."""

    mode: str | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if self.mode is not None:
            object.__setattr__(self, "mode", ssl_mode(self.mode))
        mode = self.mode
        if mode in ("DISABLED", "PREFERRED", "REQUIRED") and self.ca:
            raise ConfigError(
                f"ssl-ca is given with ssl-mode={mode.lower()}, which does not verify the server: "
                "use ssl-mode=verify-ca or verify-identity, or drop ssl-ca"
            )
        if mode == "DISABLED" and (self.cert or self.key):
            raise ConfigError("ssl-cert/ssl-key are given with ssl-mode=disabled: drop one or the other")
        if mode in ("VERIFY_CA", "VERIFY_IDENTITY") and not self.ca:
            raise ConfigError(
                f"ssl-mode={mode.lower().replace('_', '-')} needs ssl-ca=FILE, the CA certificate(s) to verify "
                "the server against (the system's: ssl-ca=/etc/ssl/certs/ca-certificates.crt)"
            )
        if self.key and not self.cert:
            raise ConfigError("ssl-key is given without ssl-cert (the client certificate it belongs to)")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TLSOptions:
        """From URL options in underscore form (``ssl_mode``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``)."""
        return cls(*(str(options[k]) if options.get(k) else None for k in TLS_OPTIONS))

    @property
    def effective_mode(self) -> str:
        """The mode in force: as given, else VERIFY_IDENTITY with a CA, REQUIRED with a client cert, or PREFERRED."""
        if self.mode is not None:
            return self.mode
        if self.ca:
            return "VERIFY_IDENTITY"
        return "REQUIRED" if self.cert else "PREFERRED"

    @property
    def required(self) -> bool:
        """Whether a connection without TLS must be refused."""
        return self.effective_mode in _NEEDS_TLS

    def options(self) -> dict[str, str]:
        """The URL options (underscore form) that give these settings back; empty for the default."""
        return {k: v for k, v in zip(TLS_OPTIONS, (self.mode, self.ca, self.cert, self.key), strict=True) if v}

    def query(self) -> str:
        """These settings as a URL query (``ssl-mode=VERIFY_CA&ssl-ca=...``), '' for the default."""
        from urllib.parse import urlencode  # noqa: PLC0415

        return urlencode({k.replace("_", "-"): v for k, v in self.options().items()})

    def pymysql_kwargs(self) -> dict[str, Any]:
        """PyMySQL's ``Connection`` arguments for this mode (nothing for PREFERRED without a client certificate)."""
        mode = self.effective_mode
        if mode == "DISABLED":
            return {"ssl_disabled": True}
        if mode == "PREFERRED":
            return {}  # PyMySQL's own preferred mode; a client certificate is added by _Connection
        if mode == "REQUIRED":
            # A truthy ssl dict makes PyMySQL require TLS; no CA and verify_mode False: not verified.
            sslp: dict[str, Any] = {"verify_mode": False, "check_hostname": False}
            if self.cert:
                sslp["cert"] = self.cert
            if self.key:
                sslp["key"] = self.key
            return {"ssl": sslp}
        kwargs: dict[str, Any] = {
            "ssl_ca": self.ca,
            "ssl_verify_cert": True,
            "ssl_verify_identity": mode == "VERIFY_IDENTITY",
        }
        if self.cert:
            kwargs["ssl_cert"] = self.cert
        if self.key:
            kwargs["ssl_key"] = self.key
        return kwargs


if TYPE_CHECKING:

    class PyMySQLConnection(Connection[Cursor]):
        """A pymysql Connection with the internals used here and by the binlog replica (not in types-PyMySQL)."""

        _sock: socket | None
        _next_seq_id: int

        def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext: ...

        def _force_close(self) -> None: ...

        def _execute_command(self, command: int, sql: str) -> None: ...

        def write_packet(self, payload: bytes) -> None: ...

        def _write_bytes(self, data: bytes) -> None: ...

    class PyMySQLResult(MySQLResult):
        """PyMySQL's result reader with the LOCAL INFILE step (not in types-PyMySQL)."""

        def _read_load_local_packet(self, first_packet: Any) -> None: ...

        def _read_ok_packet(self, packet: Any) -> None: ...

else:
    PyMySQLConnection = Connection
    PyMySQLResult = MySQLResult


class LocalFileRefusedError(ProgrammingError):
    """The server asked for a client file that was not offered (CR_LOAD_DATA_LOCAL_INFILE_REJECTED)."""


def check_local_request(offered: bytes | None, requested: bytes) -> None:
    """Refuse a LOCAL INFILE request for anything but the one file offered for the running statement.

    Why: the MySQL protocol lets the server ask for any file in reply to any statement (the client
    names nothing); PyMySQL would open whatever it names. ``offered`` is None outside our LOAD DATA.
    """
    if offered is None or requested != offered:
        name = requested[:200].decode("utf-8", "replace")
        raise LocalFileRefusedError(
            CR_LOAD_DATA_LOCAL_INFILE_REJECTED,
            f"the server asked for client file {name!r}, which this client does not offer "
            "(only the file of its own LOAD DATA LOCAL INFILE statement is sent)",
        )


class _GuardedResult(PyMySQLResult):
    """PyMySQL's result reader, with LOCAL INFILE requests checked by `check_local_request`."""

    def _read_load_local_packet(self, first_packet: Any) -> None:
        conn: Any = self.connection
        requested = LoadLocalPacketWrapper(first_packet).filename
        try:
            check_local_request(getattr(conn, "_cf_offered", None), requested)
        except LocalFileRefusedError:
            # Protocol: an empty packet ends the (empty) upload; the server then answers OK or an error.
            conn.write_packet(b"")
            try:
                conn._read_packet()
            except MySQLError:
                log.debug("server answer to a refused LOCAL INFILE request", exc_info=True)
            raise
        data = getattr(conn, "_cf_data", None)
        if data is None:
            super()._read_load_local_packet(first_packet)
            return
        _send_local_data(conn, data)
        ok_packet = conn._read_packet()  # raises the statement's error (a duplicate key, ...)
        if not ok_packet.is_ok_packet():
            raise OperationalError(CR_COMMANDS_OUT_OF_SYNC, "Commands Out of Sync")
        self._read_ok_packet(ok_packet)


#: Bytes of file data per LOCAL INFILE packet: PyMySQL's (and the C client's) size, which every
#: server's ``max_allowed_packet`` admits.
_LOCAL_PACKET = 16 * 1024


def _send_local_data(conn: Any, data: bytes | memoryview) -> None:
    """``data`` as LOCAL INFILE packets and the empty packet that ends them (the MySQL protocol's
    file transfer), in one socket write.

    Why one write: the sink's applier thread shares the GIL with the thread that decodes the next
    rows, and every socket write gives the GIL up and waits to get it back (up to the 5 ms switch
    interval); PyMySQL's own transfer writes each 16 KB packet by itself.
    """
    size = min(conn.max_allowed_packet, _LOCAL_PACKET)
    seq = conn._next_seq_id
    view = memoryview(data)
    parts: list[bytes] = []
    for at in range(0, len(data), size):
        chunk = view[at : at + size]
        parts.append(len(chunk).to_bytes(3, "little") + bytes((seq,)))
        parts.append(chunk.tobytes())
        seq = (seq + 1) % 256
    parts.append(b"\0\0\0" + bytes((seq,)))  # the empty packet: the file ends
    conn._write_bytes(b"".join(parts))
    conn._next_seq_id = (seq + 1) % 256


class _Connection(PyMySQLConnection):
    _cf_tls: TLSOptions | None = None
    _cf_offered: bytes | None = None  # the file `load_local_infile` offers while its statement runs
    _cf_data: bytes | memoryview | None = None  # its contents, sent from memory (None: read from the file)

    def _read_query_result(self, unbuffered: bool = False) -> Any:
        # PyMySQL's own, with the guarded result reader (every statement's reply may be a LOCAL request).
        self._result = None
        result = _GuardedResult(self)
        if unbuffered:
            result.init_unbuffered_query()
        else:
            result.read()
        self._result = result
        if result.server_status is not None:
            self.server_status = result.server_status
        return result.affected_rows

    def show_warnings(self) -> Any:
        self._execute_command(COMMAND.COM_QUERY, "SHOW WARNINGS")
        result = _GuardedResult(self)
        result.read()
        return result.rows

    def __init__(self, *, tls: TLSOptions | None = None, **kwargs: Any) -> None:
        self._cf_tls = tls  # before Connection.__init__: it builds the context and connects
        super().__init__(**kwargs)

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp:  # the caller's own TLS settings
            return super()._create_ssl_ctx(sslp)
        tls = self._cf_tls
        if tls is not None and tls.cert:  # PREFERRED with a client certificate: its own context
            ctx = super()._create_ssl_ctx({"cert": tls.cert, "key": tls.key} if tls.key else {"cert": tls.cert})
            return ctx
        with _lock:
            if not _preferred:
                _preferred.append(super()._create_ssl_ctx(sslp))
            return _preferred[0]

    def connect(self, sock: Any = None) -> None:
        tls = self._cf_tls
        if tls is None or not tls.required:
            super().connect(sock)
            return
        where = f"{self.host}:{self.port}"
        mode = tls.effective_mode.lower().replace("_", "-")
        try:
            super().connect(sock)
        except OperationalError as exc:
            reason = _tls_failure(exc, self.host)
            if reason is None:
                raise
            raise ConfigError(f"TLS connection (ssl-mode={mode}) refused: {reason}", where=where) from None
        if not (isinstance(self._sock, ssl.SSLSocket) or self.unix_socket):
            self._force_close()
            raise ConfigError(
                f"TLS connection (ssl-mode={mode}) refused: the session is not encrypted "
                "(the server does not offer TLS)",
                where=where,
            )


@dataclass(frozen=True)
class LoadResult:
    """What the server reports for a LOAD DATA (its info string "Records: Deleted: Skipped: Warnings:")."""

    records: int
    deleted: int
    skipped: int
    warnings: int


_LOAD_INFO = re.compile(rb"Records: *(\d+) +Deleted: *(\d+) +Skipped: *(\d+) +Warnings: *(\d+)")


def load_local_infile(conn: Connection, sql: str, path: str, data: bytes | memoryview | None = None) -> LoadResult:
    """Run ``sql`` (a ``LOAD DATA LOCAL INFILE`` naming ``path``) offering the file at ``path`` only.

    ``data``: the file's contents, sent from memory (``path`` is then only the name the statement
    and the server's request carry; nothing is read from or written to disk). The connection must
    have been opened with ``local_infile=True``. Raises the statement's error,
    `LocalFileRefusedError` for a request of any other file, and InternalError when the server's
    reply has no LOAD DATA info.
    """
    if not isinstance(conn, _Connection):
        raise TypeError("load_local_infile needs a connection made by changefeed.clients.mysql.connect")
    conn._cf_offered = os.fsencode(path)
    conn._cf_data = data
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
        result = conn._result
    finally:
        conn._cf_offered = None
        conn._cf_data = None
    message = bytes(getattr(result, "message", b"") or b"")
    found = _LOAD_INFO.search(message)
    if found is None:
        raise InternalError(f"LOAD DATA reply without its info string: {message[:200]!r}")
    return LoadResult(*(int(g) for g in found.groups()))


def warning_error(conn: Connection) -> MySQLError | None:
    """The first warning of the last statement (``SHOW WARNINGS``) as the error PyMySQL raises for its code."""
    with conn.cursor() as cur:
        cur.execute("SHOW WARNINGS LIMIT 1")
        row = cur.fetchone()
    if row is None:
        return None
    code, message = int(row[1]), str(row[2])
    cls = error_map.get(code) or (InternalError if code < 1000 else OperationalError)
    return cls(code, message)


def _tls_failure(exc: OperationalError, host: str) -> str | None:
    """Why a connection failed, if it is TLS's fault that no retry can fix; None otherwise."""
    code = exc.args[0] if exc.args else None
    if code == _CR_SSL_CONNECTION_ERROR:
        return "the server does not offer TLS (start it with ssl-ca/ssl-cert/ssl-key, or use ssl-mode=preferred)"
    cause = getattr(exc, "original_exception", None)
    if isinstance(cause, ssl.SSLCertVerificationError):
        detail = cause.verify_message or str(cause)
        if "hostname" in detail.lower() or "ip address mismatch" in detail.lower():
            return (
                f"the server's certificate does not name {host!r} ({detail}); ssl-mode=verify-identity checks "
                "the name, verify-ca only the chain"
            )
        return f"the server's certificate does not verify against ssl-ca ({detail})"
    if isinstance(cause, ssl.SSLError) and not isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return f"TLS handshake failed ({cause.reason or cause})"
    return None


def connect(*, tls: TLSOptions | None = None, **kwargs: Any) -> PyMySQLConnection:
    """``pymysql.connect(**kwargs)`` with ``tls``'s mode (see the module docstring).

    Without ``tls`` (or in PREFERRED mode) connections share the TLS-preferred context.
    """
    if tls is not None:
        kwargs.update(tls.pymysql_kwargs())
    return _Connection(tls=tls, **kwargs)


_SCHEMES = ("mysql", "mariadb", "tidb")
_INT_OPTIONS = ("connect_timeout", "read_timeout", "write_timeout")
_STR_OPTIONS = ("charset", "ssl_mode", "ssl_ca", "ssl_cert", "ssl_key", "unix_socket")
_PASSWORD_OPTIONS = ("password_env", "password_file")
_REFUSED = {
    "local_infile": "LOAD DATA LOCAL INFILE would let the server read any file this process can read",
}

#: The one masking function (`changefeed.secrets.mask_secrets`), under the name this module always had.
mask_url = mask_secrets


@dataclass(frozen=True)
class MySQLParams:
    """Where and how to connect; ``repr`` never shows the password."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def tls(self) -> TLSOptions:
        """The TLS mode and files of the ``ssl-*`` options (`TLSOptions`)."""
        return TLSOptions.from_options(self.options)

    @property
    def url(self) -> str:
        """The URL with the password masked (for logs, errors and CLI output)."""
        auth = self.user + (":***" if self.password else "")
        return f"mysql://{auth}@{self.host}:{self.port}/{self.database or ''}"

    def __str__(self) -> str:
        return self.url

    def connect(self, **overrides: Any) -> Connection:
        """A PyMySQL connection (utf8mb4, autocommit off unless overridden).

        Connection failures are re-raised with the masked URL: PyMySQL's own message never
        contains the password, but ours names the target so the operator knows which side failed.
        """
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": self.database,
            "charset": "utf8mb4",
            "autocommit": False,
            "connect_timeout": 10,
            "local_infile": False,  # never from a URL: see the module doc
        }
        kwargs.update({k: v for k, v in self.options.items() if not k.startswith("ssl_")})
        kwargs.update(overrides)
        return connect(tls=self.tls, **kwargs)


def parse_mysql_url(url: str) -> MySQLParams:
    """Read ``mysql://[user[:password]@]host[:port][/database][?option=value&...]``.

    Options: ``connect_timeout``, ``read_timeout``, ``write_timeout`` (seconds), ``charset``,
    ``ssl_mode`` (disabled, preferred, required, verify-ca, verify-identity: `TLSOptions`) with
    ``ssl_ca``/``ssl_cert``/``ssl_key``, ``unix_socket``, and where the password comes from when
    the URL has none: ``password_env`` (a variable's name) or ``password_file`` (a path; owner-only);
    without either, ``MYSQL_PWD``. Dashes are accepted for underscores (``ssl-ca``). User and
    password are percent-decoded. The password is read now: a missing variable or an unsafe file
    fails here, not at the first connection.
    """
    return split_mysql_url(url, ())[0]


def split_mysql_url(url: str, taken: Collection[str]) -> tuple[MySQLParams, dict[str, str]]:
    """`parse_mysql_url`, handing back the query parameters named in ``taken`` (as written) instead of
    refusing them as unknown options: a sink-uri's settings (``worker-count``...) next to its connection."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"bad MySQL URL {mask_url(url)!r}: {exc}") from None
    if parts.scheme.lower() not in _SCHEMES:
        raise ConfigError(f"MySQL URL {mask_url(url)!r} must start with mysql://")
    if not parts.hostname:
        raise ConfigError(f"MySQL URL {mask_url(url)!r} has no host")
    options: dict[str, Any] = {}
    sources: dict[str, str] = {}
    given: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        name = key.replace("-", "_").lower()
        if key in taken:
            given[key] = value
        elif name in _INT_OPTIONS:
            try:
                options[name] = int(float(value))
            except ValueError:
                raise ConfigError(f"MySQL URL option {key}={value!r} is not a number") from None
        elif name in _STR_OPTIONS:
            options[name] = value
        elif name in _PASSWORD_OPTIONS:
            sources[name] = value
        elif name in _REFUSED:
            raise ConfigError(f"MySQL URL option {key!r} is not accepted: {_REFUSED[name]}")
        else:
            raise ConfigError(f"unknown MySQL URL option {key!r} in {mask_url(url)!r}")
    try:
        TLSOptions.from_options(options)  # a bad ssl-mode or a contradicting file fails here
    except ConfigError as exc:
        raise ConfigError(f"MySQL URL {mask_url(url)!r}: {exc.message}") from None
    password = resolve_password(
        unquote(parts.password) if parts.password else None,
        env=sources.get("password_env"),
        file=sources.get("password_file"),
        where=f"MySQL URL {mask_url(url)!r}",
    )
    connection = MySQLParams(
        host=parts.hostname,
        port=port or 3306,
        user=unquote(parts.username) if parts.username else "root",
        password=password,
        database=unquote(parts.path.lstrip("/")) or None,
        options=options,
    )
    return connection, given


def binlog_status(cur: Any) -> tuple[Any, ...] | None:
    """The server's binlog status row (file, position, ..., MySQL's Executed_Gtid_Set); None with log_bin off.

    MySQL 8.4 removed ``SHOW MASTER STATUS`` in favour of ``SHOW BINARY LOG STATUS``; MariaDB has only the first.
    """
    try:
        cur.execute("SHOW MASTER STATUS")
    except ProgrammingError:
        cur.execute("SHOW BINARY LOG STATUS")
    row = cur.fetchone()
    return tuple(row) if row else None


def binary_logs(cur: Any) -> list[tuple[str, int]]:
    """``SHOW BINARY LOGS``: each binlog file the server keeps and its size, oldest first."""
    cur.execute("SHOW BINARY LOGS")
    return [(str(row[0]), int(row[1])) for row in cur.fetchall()]
