"""Secrets: the one function that masks them in text, and where a password may come from.

A leaf module (only `errors` below it), so every layer can mask text without an import cycle:
the capture, the sinks, ``ops`` (the log filter, the status file) and the CLI's error exit.

Passwords for MySQL connections come from exactly one of: the URL (``mysql://u:PW@h``), the
environment variable a ``password-env=NAME`` option names, the file a ``password-file=PATH``
option names, or, when none is given, ``MYSQL_PWD`` (the MySQL client's convention). A Kafka SASL
password comes from one of ``sasl-password``, ``sasl-password-env`` and ``sasl-password-file``, by the
same function (`resolve_password`) under those names. A password file must not be readable by group
or others (ssh refuses private keys the same way).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .errors import ConfigError

__all__ = [
    "MASK",
    "MYSQL_PWD",
    "SECRET_WORDS",
    "is_secret_key",
    "mask_secrets",
    "password_from_env",
    "password_from_file",
    "resolve_password",
    "url_passwords",
]

MASK = "***"
#: The MySQL client's environment variable for a password the command line does not give.
MYSQL_PWD = "MYSQL_PWD"
# user:password@ in any scheme://; the password ends at the last '@' before the host.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^\s]*)(?P<tail>@[^@\s]*)", re.I)
# A bare http(s)://TOKEN@host: HTTP services (REST catalogs, object stores, git hosts) take a token
# there as the basic-auth user. Other schemes keep a bare user (mysql://root@h): it is a name.
_URL_TOKEN = re.compile(r"(?P<head>\bhttps?://)(?P<pw>[^:/@\s]+)(?P<tail>@[^@\s]*)", re.I)
#: The words that name a secret: one vocabulary for text (``password=xxx``, below) and for the keys
#: of structured data (a log record's ``extra``, a mapping argument: `is_secret_key`).
SECRET_WORDS = r"pass(?:word|wd)?|pwd|secret|token|credentials?|api[_-]?key"
# A key holding a secret word anywhere: password, sasl.password, MYSQL_PWD, X-Api-Key, credential_file.
_SECRET_KEY = re.compile(SECRET_WORDS, re.I)
# password=xxx, "password": "xxx", passwd: xxx, sasl.password=xxx, MYSQL_PWD=xxx, api_key=xxx, credential=xxx
# (DSNs, config dumps, reprs): the key ends with a secret word, so password-file=PATH stays readable.
_SECRET_FIELD = re.compile(
    rf"""(?P<key>\b[\w.-]*(?:{SECRET_WORDS})["']?\s*[=:]\s*)(?P<q>["']?)(?P<value>[^\s"',;&}}]+)""",
    re.I,
)
# Known secrets shorter than this are not replaced literally: masking every "ab" would garble the
# text, and such a password is no secret anyway.
_MIN_LITERAL = 3


def mask_secrets(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with URL passwords (and http(s) tokens), ``password=`` style values and each ``known``
    secret replaced by ``***``."""
    for secret in sorted(known, key=len, reverse=True):
        if len(secret) >= _MIN_LITERAL:
            text = text.replace(secret, MASK)
    for pattern in (_URL_PASSWORD, _URL_TOKEN):
        text = pattern.sub(lambda m: m.group("head") + MASK + m.group("tail"), text)
    return _SECRET_FIELD.sub(lambda m: m.group("key") + m.group("q") + MASK, text)


def is_secret_key(key: str) -> bool:
    """Whether a field named ``key`` holds a secret (its value is masked whole, whatever it is)."""
    return _SECRET_KEY.search(key) is not None


def url_passwords(texts: Iterable[str]) -> set[str]:
    """The passwords of the URLs in ``texts`` (as written and percent-decoded): what an error exit masks.

    ``texts`` are command-line arguments: a URL may be the whole argument or follow ``--opt=``, and
    its password may hold characters (a space) that the pattern `mask_secrets` uses stops at.
    """
    found: set[str] = set()
    for text in texts:
        raw = [m.group("pw") for m in _URL_PASSWORD.finditer(text)]
        for candidate in (text, text.partition("=")[2]):
            with contextlib.suppress(ValueError):  # not a URL at all
                parts = urlsplit(candidate.strip())
                if parts.scheme and "@" in parts.netloc:
                    raw.append(parts.netloc.rpartition("@")[0].partition(":")[2])
        found.update(p for pw in raw for p in (pw, unquote(pw)))
    found.discard("")
    return found


def password_from_env(
    name: str, where: str, environ: Mapping[str, str] | None = None, option: str = "password-env"
) -> str:
    """The value of environment variable ``name`` (given by ``option``); a variable that is not set is an error."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None:
        raise ConfigError(f"{where}: {option} names {name!r}, but that environment variable is not set")
    return value


def password_from_file(path: str | Path, where: str) -> str:
    """The first line of a file only its owner may read (one trailing newline stripped)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if mode & (stat.S_IRGRP | stat.S_IROTH):
                raise ConfigError(
                    f"{where}: password file {path} is readable by group or others "
                    f"(mode {stat.S_IMODE(mode):04o}); run: chmod 600 {path}"
                )
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read password file {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: password file {path} is not UTF-8 text") from None
    password = text.removesuffix("\n").removesuffix("\r")
    if not password or "\n" in password:
        raise ConfigError(f"{where}: password file {path} must hold the password on one line")
    return password


#: What `resolve_password` calls its three places by default: a MySQL URL's.
_MYSQL_SOURCES = ("the URL", "password-env", "password-file")


def resolve_password(
    inline: str | None,
    *,
    env: str | None = None,
    file: str | Path | None = None,
    where: str,
    environ: Mapping[str, str] | None = None,
    names: tuple[str, str, str] = _MYSQL_SOURCES,
    what: str = "password",
    fallback: str | None = MYSQL_PWD,
) -> str:
    """The password from the one place that gives it: inline (the URL), ``env``, ``file``, else ``fallback``.

    Two places at once is an error rather than a precedence rule: a stale password in one of
    them would otherwise be used silently. Without any, the result is the ``fallback`` variable's
    value (``MYSQL_PWD``; none for Kafka SASL), else ``''`` (no password). ``names`` are the three
    places as the caller's user writes them, ``what`` the password's name, both for errors; no
    error ever shows the password itself.
    """
    given = [n for n, v in zip(names, (inline, env, file), strict=True) if v]
    if len(given) > 1:
        raise ConfigError(f"{where}: the {what} is given by {' and '.join(given)}; give it in one place")
    if inline:
        return inline
    if env:
        return password_from_env(env, where, environ, option=names[1])
    if file:
        return password_from_file(file, where)
    if fallback is None:
        return ""
    return (os.environ if environ is None else environ).get(fallback, "")
