"""``mysql://user:pass@host:port/db?opt=v`` URLs: parsing, connecting, and masking the password.

The sink and the diff tool take the same URL form (TiCDC's ``--sink-uri mysql://...``). A URL or
DSN that reaches a log line or an error message always goes through `mask_url` first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pymysql
import pymysql.connections

from ...errors import ConfigError

__all__ = ["MySQLParams", "mask_url", "parse_mysql_url"]

_SCHEMES = ("mysql", "mariadb", "tidb")
_INT_OPTIONS = ("connect_timeout", "read_timeout", "write_timeout")
_BOOL_OPTIONS = ("local_infile",)
_STR_OPTIONS = ("charset", "ssl_ca", "ssl_cert", "ssl_key", "unix_socket")
_TRUE = ("1", "true", "yes", "on")
# user:password@ in any scheme://; the password ends at the last '@' before the host.
_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^\s]*)(?P<tail>@[^@\s]*)", re.I)


def mask_url(text: str) -> str:
    """Replace every ``scheme://user:PASSWORD@`` password in ``text`` by ``***``."""
    return _PASSWORD.sub(lambda m: m.group("head") + "***" + m.group("tail"), text)


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
    def url(self) -> str:
        """The URL with the password masked (for logs, errors and CLI output)."""
        auth = self.user + (":***" if self.password else "")
        return f"mysql://{auth}@{self.host}:{self.port}/{self.database or ''}"

    def __str__(self) -> str:
        return self.url

    def connect(self, **overrides: Any) -> pymysql.connections.Connection:
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
        }
        ssl = {k[4:]: self.options[k] for k in ("ssl_ca", "ssl_cert", "ssl_key") if k in self.options}
        kwargs.update({k: v for k, v in self.options.items() if not k.startswith("ssl_")})
        if ssl:
            kwargs["ssl"] = ssl
        kwargs.update(overrides)
        return pymysql.connect(**kwargs)


def parse_mysql_url(url: str) -> MySQLParams:
    """Read ``mysql://[user[:password]@]host[:port][/database][?option=value&...]``.

    Options: ``connect_timeout``, ``read_timeout``, ``write_timeout`` (seconds), ``charset``,
    ``local_infile``, ``ssl_ca``/``ssl_cert``/``ssl_key``, ``unix_socket``; dashes are accepted
    for underscores (``ssl-ca``). User and password are percent-decoded.
    """
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
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        name = key.replace("-", "_").lower()
        if name in _INT_OPTIONS:
            try:
                options[name] = int(float(value))
            except ValueError:
                raise ConfigError(f"MySQL URL option {key}={value!r} is not a number") from None
        elif name in _BOOL_OPTIONS:
            options[name] = value.lower() in _TRUE
        elif name in _STR_OPTIONS:
            options[name] = value
        else:
            raise ConfigError(f"unknown MySQL URL option {key!r} in {mask_url(url)!r}")
    database = unquote(parts.path.lstrip("/")) or None
    return MySQLParams(
        host=parts.hostname,
        port=port or 3306,
        user=unquote(parts.username) if parts.username else "root",
        password=unquote(parts.password) if parts.password else "",
        database=database,
        options=options,
    )
