"""Claim-check storage for large messages (spec §1.9, §2.10, §3.4), shared by every protocol.

An over-size message is written to ``<uuid>.json`` under ``claim-check-storage-uri`` and a small
reference naming that file is sent instead. What a file holds is the protocol's business: Open
Protocol stores ``{"key":b64,"value":b64}`` of the framed one-event message (`wrap_pair`),
canal-json and simple store ``{"key":null,"value":b64}`` (`wrap_value`) or, with
``claim-check-raw-value``, the value itself. A consumer reads the file named by the last path
element of the location from its own storage, as TiCDC's consumers do.

A location comes from a message, so reading is hostile-input code: only a regular file inside the
directory (after resolving symlinks) is read, never a FIFO or device, and at most `read_limit`
bytes of it; every refusal names the file and directory, never what lies outside.

Only local storage (``file://`` or a plain path) is implemented; S3/GCS/Azure URIs are refused.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

import orjson

from ..errors import ConfigError
from ..model.values import b64decode, b64encode

MAX_FILE_BYTES = 64 << 20
"""Default bound on a claim-check file read. A file holds one event over max-message-bytes; TiDB
bounds an event by txn-entry-size-limit (6 MiB by default), and the protocols' text plus the
file's base64 grow that at most ~8 times (canal-json's escaped binary), so 64 MiB holds any
default-sized event with room to spare."""
_READ_CHUNK = 1 << 20


def read_limit(max_message_bytes: int) -> int:
    """The claim-check read bound: `MAX_FILE_BYTES`, or 4 x max-message-bytes when that is larger
    (a deployment that raised max-message-bytes sends bigger events to claim-check too)."""
    return max(MAX_FILE_BYTES, 4 * max_message_bytes)


def reading_store(uri: str, max_message_bytes: int) -> ClaimCheckStore | None:
    """The store a decoder reads claim-check files from, bounded by `read_limit`; None without a URI
    (a decoder then refuses claim-check messages instead of opening what a message names)."""
    return ClaimCheckStore(uri, max_read_bytes=read_limit(max_message_bytes)) if uri else None


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

    def __init__(self, uri: str, *, absolute_file_uri: bool = False, max_read_bytes: int = MAX_FILE_BYTES) -> None:
        self.uri = uri
        self.dir = storage_dir(uri)
        self.max_read_bytes = max_read_bytes
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
        """The bytes of the regular file a location names inside this storage; ValueError says why not.

        The text of a refusal depends only on the name and what is inside the directory: a symlink
        leaving it is refused before anything outside is opened, whether its target exists or not.
        """
        name = file_name(location)
        if "\0" in name:
            raise self._refusal(name, "the name holds a NUL byte")
        base = os.path.realpath(self.dir)
        target = os.path.realpath(os.path.join(base, name))
        if os.path.commonpath([base, target]) != base:
            raise self._refusal(name, "it resolves outside the claim-check directory")
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: no symlink swapped in.
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            why = "not a regular file" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise self._refusal(name, why) from None
        try:
            return self._read_regular(fd, name)
        finally:
            os.close(fd)

    def _read_regular(self, fd: int, name: str) -> bytes:
        """At most `max_read_bytes` of an open file, refused unless it is a regular file (fstat, not
        the path: what was opened is what is checked)."""
        limit = self.max_read_bytes
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise self._refusal(name, "not a regular file")
        if st.st_size > limit:
            raise self._refusal(name, f"it has {st.st_size} bytes, over the {limit}-byte bound")
        chunks: list[bytes] = []
        total, want = 0, st.st_size + 1  # one byte more than its size: a file that grew is seen
        while True:
            try:
                chunk = os.read(fd, min(want, limit + 1 - total))
            except OSError as exc:
                raise self._refusal(name, exc.strerror or str(exc)) from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise self._refusal(name, f"it grew over the {limit}-byte bound while being read")
            want = _READ_CHUNK

    def _refusal(self, name: str, why: str) -> ValueError:
        return ValueError(f"cannot read claim-check file {name!r} from {self.dir}: {why}")


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
