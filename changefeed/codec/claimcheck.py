"""Claim-check storage for large messages (spec §1.9, §2.10, §3.4), shared by every protocol.

An over-size message is written to ``<uuid>.json`` under ``claim-check-storage-uri`` and a small
reference naming that file is sent instead. What a file holds is the protocol's business: Open
Protocol stores ``{"key":b64,"value":b64}`` of the framed one-event message (`wrap_pair`),
canal-json and simple store ``{"key":null,"value":b64}`` (`wrap_value`) or, with
``claim-check-raw-value``, the value itself. A consumer reads the file named by the last path
element of the location from its own storage, as TiCDC's consumers do.

Only local storage (``file://`` or a plain path) is implemented; S3/GCS/Azure URIs are refused.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

import orjson

from ..errors import ConfigError
from ..model.values import b64decode, b64encode


def storage_dir(uri: str) -> Path:
    """The local directory behind ``claim-check-storage-uri``: ``file:///path`` or a plain path."""
    if not uri:
        raise ConfigError("large-message-handle-option=claim-check needs claim-check-storage-uri")
    if "://" not in uri:
        return Path(uri)
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise ConfigError(f"claim-check-storage-uri {uri!r}: only local (file:// or plain path) storage is supported")
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise ConfigError(f"claim-check-storage-uri {uri!r}: file:// URIs need a local absolute path")
    return Path(unquote(parts.path))


def file_name(location: str) -> str:
    """The file a location names (its last path element); ValueError when it names none."""
    name = location.rstrip("/").rsplit("/", 1)[-1]
    if name in ("", ".", ".."):
        raise ValueError(f"claimCheckLocation {location!r} names no file")
    return name


class ClaimCheckStore:
    """One storage directory: writes named files atomically, reads them back by location.

    ``absolute_file_uri`` spells a plain-path storage as an absolute ``file://`` URI in the
    locations it hands out (canal-json's choice); otherwise a location is the configured URI with
    its trailing ``/`` trimmed, ``/`` and the file name (spec §1.9).
    """

    def __init__(self, uri: str, *, absolute_file_uri: bool = False) -> None:
        self.uri = uri
        self.dir = storage_dir(uri)
        prefix = uri
        if absolute_file_uri and "://" not in uri:
            prefix = "file://" + os.path.abspath(uri)
        self._prefix = prefix.removesuffix("/") + "/"

    @staticmethod
    def new_name() -> str:
        """A fresh object name, as TiCDC names them (a random UUID)."""
        return f"{uuid.uuid4()}.json"

    def location(self, name: str) -> str:
        return self._prefix + name

    def write(self, name: str, data: bytes) -> str:
        """Store ``data`` as ``name`` (write then rename: a reader never sees half a file); the location.

        Raises OSError; callers name the row in their own error.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.dir / name)
        return self.location(name)

    def path(self, location: str) -> Path:
        """Where the file a location names is in this storage (whatever the location's prefix)."""
        return self.dir / file_name(location)

    def read(self, location: str) -> bytes:
        """The bytes of the file a location names; ValueError/OSError when it cannot be read."""
        return self.path(location).read_bytes()


def wrap_value(value: bytes) -> bytes:
    """``json.Marshal(ClaimCheckMessage{Key: nil, Value: value})``: []byte as base64, nil as null."""
    return b'{"key":null,"value":"' + b64encode(value).encode() + b'"}'


def unwrap_value(data: bytes, *, raw_allowed: bool = False) -> bytes:
    """The value of a `wrap_value` file; ValueError says what is wrong.

    With ``raw_allowed`` a file that is not such an object is taken as the raw value (a reader
    that recognises both forms whatever ``claim-check-raw-value`` says).
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if raw_allowed:
            return data
        raise ValueError(f"claim-check file is not JSON: {exc}") from None
    if raw_allowed and (type(obj) is not dict or set(obj) != {"key", "value"}):
        return data
    value = obj.get("value") if type(obj) is dict else None
    if type(value) is not str:
        raise ValueError('claim-check file lacks a base64 "value" member')
    try:
        return b64decode(value)
    except ValueError as exc:
        raise ValueError(f"claim-check value is not base64: {exc}") from None


def wrap_pair(key: bytes, value: bytes) -> bytes:
    """Open Protocol's file: ``{"key":base64,"value":base64}`` of a framed one-event message."""
    return orjson.dumps({"key": b64encode(key), "value": b64encode(value)})


def unwrap_pair(data: bytes) -> tuple[bytes, bytes]:
    """The framed key and value of a `wrap_pair` file; ValueError when it is not one."""
    doc = orjson.loads(data)
    if type(doc) is not dict or type(doc.get("key")) is not str or type(doc.get("value")) is not str:
        raise ValueError("not a {'key','value'} object of base64 strings")
    return b64decode(doc["key"]), b64decode(doc["value"])
