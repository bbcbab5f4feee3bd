"""A job's own state files beside Spark's checkpoint, on a local disk or any filesystem pyarrow opens.

Spark keeps its offsets under ``checkpointLocation``; a changefeed job keeps a few files of its
own next to them (the Kafka merge state, a routed pipeline's state, snapshot chunks spilled until
their batch commits, the status document). They must live where the checkpoint lives: a job
resumed on another host (another working directory, the same checkpoint URI) finds them there.

`open_store` takes a path or a URI. A path or a ``file:`` URI is a `LocalStore` (writes are
fsynced and renamed, directories created ``0700``); another scheme (``hdfs://``, ``s3://``,
``gs://``, ``abfs://``, ...) is an `ArrowStore` over `pyarrow.fs` (``FileSystem.from_uri``: the
Hadoop client and credentials of the machine). An `ArrowStore` write goes to a temporary object
and is moved into place; on object stores a move is a copy, so a reader may find the temporary
one after a crash and the file missing: `read` then takes the complete temporary copy.

Names are ours (never from data), checked anyway: one path element, no ``..``.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..errors import ChangefeedError, ConfigError
from ..secrets import mask_secrets

__all__ = [
    "ArrowStore",
    "LocalStore",
    "StateStore",
    "checkpoint_location",
    "is_uri",
    "local_path",
    "open_store",
    "private_dir",
]

_TMP = ".tmp-"
_SCRATCH = re.compile(r"[0-9a-f]{32}")


def is_uri(location: str | Path) -> bool:
    """``scheme://...`` or ``scheme:/...`` with a scheme of two letters or more (not a Windows drive)."""
    if isinstance(location, Path):
        return False
    scheme = urlsplit(location).scheme
    return len(scheme) > 1 and location[len(scheme) : len(scheme) + 2] in (":/",)


def local_path(location: str | Path) -> Path | None:
    """The local directory of a path or ``file:`` URI; None for a remote URI."""
    if not is_uri(location):
        return Path(location)
    parts = urlsplit(str(location))
    if parts.scheme.lower() == "file" and parts.netloc in ("", "localhost"):
        return Path(parts.path)
    return None


def _check_name(name: str) -> str:
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"not a state file name: {name!r}")
    return name


class StateStore(Protocol):
    """A directory of small files that survive a crash."""

    #: Where it is, for messages (a URI's password never appears: stores are opened from paths and URIs without one).
    where: str
    #: The local directory, when the files are on this machine's disk (a reader on the same disk may open them).
    local: Path | None

    def child(self, name: str) -> StateStore: ...
    def exists(self) -> bool: ...
    def read(self, name: str) -> bytes | None: ...
    def write(self, name: str, data: bytes, durable: bool = True) -> None: ...
    def names(self) -> list[str]: ...
    def delete(self, name: str) -> None: ...


class LocalStore:
    """Files in a local directory: temporary file, fsync, rename, fsync of the directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.local: Path | None = self.root
        self.where = str(self.root)

    def child(self, name: str) -> LocalStore:
        return LocalStore(self.root / _check_name(name))

    def exists(self) -> bool:
        return self.root.is_dir()

    def read(self, name: str) -> bytes | None:
        path = self.root / _check_name(name)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ChangefeedError(f"cannot read {name}: {exc.strerror or exc}", where=str(path)) from None

    def write(self, name: str, data: bytes, durable: bool = True) -> None:
        """Readers see the old content or the new, never a part; ``durable``: also after a power loss (fsync)."""
        path = self.root / _check_name(name)
        private_dir(self.root)
        tmp = self.root / f"{_TMP}{os.getpid()}-{name}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
            if durable:
                fd = os.open(self.root, os.O_RDONLY)
                try:
                    os.fsync(fd)  # the rename itself survives a crash
                finally:
                    os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise ChangefeedError(f"cannot write {name}: {exc.strerror or exc}", where=str(path)) from None

    def names(self) -> list[str]:
        try:
            return sorted(p.name for p in self.root.iterdir() if not p.name.startswith(_TMP))
        except FileNotFoundError:
            return []

    def delete(self, name: str) -> None:
        (self.root / _check_name(name)).unlink(missing_ok=True)


class ArrowStore:
    """Files under a URI, through `pyarrow.fs` (HDFS, S3, GCS, Azure, ...)."""

    def __init__(self, uri: str, filesystem: Any = None, base: str | None = None) -> None:
        if filesystem is None:
            from pyarrow import fs as pafs  # noqa: PLC0415 - only remote checkpoints need it

            try:
                filesystem, base = pafs.FileSystem.from_uri(_arrow_uri(uri))
            except (ValueError, OSError) as exc:
                raise ConfigError(f"checkpoint location {mask_secrets(uri)!r}: cannot open it ({exc})") from None
        self.fs = filesystem
        self.base = (base or "").rstrip("/")
        self.uri = uri.rstrip("/")
        self.where = mask_secrets(self.uri)  # s3://KEY:SECRET@bucket/... carries a secret
        self.local: Path | None = None

    def child(self, name: str) -> ArrowStore:
        return ArrowStore(f"{self.uri}/{_check_name(name)}", self.fs, f"{self.base}/{name}")

    def exists(self) -> bool:
        """Whether the directory holds anything (object stores have no empty directories)."""
        return bool(self.names())

    def _path(self, name: str) -> str:
        return f"{self.base}/{_check_name(name)}"

    def read(self, name: str) -> bytes | None:
        for path in (self._path(name), self._path(_TMP + name)):
            try:
                with self.fs.open_input_stream(path) as fh:
                    data: bytes = fh.read()
                    return data
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise ChangefeedError(f"cannot read {name}: {exc}", where=f"{self.where}/{name}") from None
        return None

    def write(self, name: str, data: bytes, durable: bool = True) -> None:
        # The remote filesystem decides durability (a closed HDFS file or S3 object is on the servers).
        # A fixed temporary name per file: a crash between the copy and the delete of a move leaves
        # at most one complete temporary copy, which `read` takes while the file itself is missing.
        tmp = self._path(_TMP + name)
        try:
            self.fs.create_dir(self.base, recursive=True)
            scratch = self._path(f"{_TMP}{uuid.uuid4().hex}")
            with self.fs.open_output_stream(scratch) as fh:
                fh.write(data)
            self.fs.move(scratch, tmp)
            self.fs.move(tmp, self._path(name))
        except OSError as exc:
            raise ChangefeedError(f"cannot write {name}: {exc}", where=f"{self.where}/{name}") from None

    def names(self) -> list[str]:
        from pyarrow import fs as pafs  # noqa: PLC0415

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.base, allow_not_found=True))
        except OSError as exc:
            raise ChangefeedError(f"cannot list the state files: {exc}", where=self.where) from None
        finals = {i.base_name for i in infos if not i.base_name.startswith(_TMP)}
        # A file whose move was cut short exists only as its complete temporary copy (see `read`).
        moved = {i.base_name[len(_TMP) :] for i in infos if i.base_name.startswith(_TMP)}
        return sorted(finals | {n for n in moved if not _SCRATCH.fullmatch(n)})

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self._path(name))


def _arrow_uri(uri: str) -> str:
    """Hadoop's names for S3 (``s3a://``, ``s3n://``) are ``s3://`` to pyarrow: one URI serves Spark and us."""
    scheme, sep, rest = uri.partition("://")
    return f"s3://{rest}" if sep and scheme.lower() in ("s3a", "s3n") else uri


def open_store(location: str | Path | StateStore) -> StateStore:
    """The store of a checkpoint location: a path or ``file:`` URI is local, another URI goes through pyarrow."""
    if not isinstance(location, str | Path):
        return location
    path = local_path(location)
    return LocalStore(path) if path is not None else ArrowStore(str(location))


def checkpoint_location(text: str | Path) -> Path | str:
    """A ``--checkpoint`` value: a local directory (absolute: the driver's JVM may run elsewhere) or a URI."""
    path = local_path(text)
    return path.absolute() if path is not None else str(text).rstrip("/")


def private_dir(path: str | Path) -> Path:
    """``path`` as a directory, created mode 0700 when missing (an existing one is left as it is).

    Checkpoint and status directories hold source positions, offsets and error texts: only the
    user running the job needs them. Missing parents are created with default permissions (a
    checkpoint inside a storage-sink directory must not close that directory to its readers).
    """
    path = Path(path)
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        return path
    os.chmod(path, 0o700)  # exactly 0700, whatever the umask
    return path
