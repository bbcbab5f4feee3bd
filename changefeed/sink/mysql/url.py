"""``mysql://user:pass@host:port/db?opt=v`` URLs: parsing, connecting, and where the password comes from.

The sink, the diff tool, ``status`` and ``check`` take the same URL form (TiCDC's ``--sink-uri
mysql://...``). A URL or DSN that reaches a log line or an error message always goes through
`mask_url` (`changefeed.secrets.mask_secrets`) first.

The password is the URL's, or read from ``password-env=NAME`` / ``password-file=PATH``, else from
``MYSQL_PWD`` (`changefeed.secrets.resolve_password`): a command line then holds no secret.
``local_infile`` is refused: with it, a ``LOAD DATA LOCAL INFILE`` the server sends (or a DDL text
from the data smuggles in) makes the client upload any file it can read.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ...errors import ConfigError
from ...mysqlclient import Connection, TLSOptions, connect
from ...secrets import mask_secrets, resolve_password

if TYPE_CHECKING:
    from ...capture.binlog.replica import ServerAddress

__all__ = ["MySQLParams", "mask_url", "parse_mysql_url", "split_mysql_url"]

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

    @classmethod
    def of_replica(cls, address: ServerAddress) -> MySQLParams:
        """The SQL connection to a replica-protocol source address (its user, password and TLS options)."""
        a = address
        return cls(host=a.host, port=a.port, user=a.user, password=a.password, options=a.tls.options())

    @property
    def tls(self) -> TLSOptions:
        """The TLS mode and files of the ``ssl-*`` options (`changefeed.mysqlclient.TLSOptions`)."""
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
