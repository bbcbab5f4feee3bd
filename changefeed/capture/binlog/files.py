"""Reading raw events from binlog files: one file, or a directory in ``.index`` order, optionally following.

A reader yields `RawEvent` (file name, start offset, the event's bytes) and ``None`` when it has
caught up and is waiting (follow mode), so the caller can check its stop conditions.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import NamedTuple

from ...errors import CaptureError, ascii_digits
from .constants import BINLOG_MAGIC, HEADER_LEN, EventType
from .position import file_key

log = logging.getLogger(__name__)


class RawEvent(NamedTuple):
    file: str
    pos: int  # offset of the event's first byte in ``file``
    data: bytes


def list_binlogs(directory: Path) -> list[str]:
    """Binlog file names in server order: from the ``.index`` file the server keeps, else by sequence number."""
    indexes = sorted(directory.glob("*.index"))
    if len(indexes) == 1:
        names = [Path(line.strip()).name for line in indexes[0].read_text().splitlines() if line.strip()]
        return [n for n in names if (directory / n).exists()]
    candidates = [p.name for p in directory.iterdir() if p.is_file() and ascii_digits(p.suffix[1:])]
    return sorted(candidates, key=file_key)


class BinlogFileReader:
    """Events of binlog files from a start (file, pos), in order, across ROTATEs.

    ``path`` is a directory (all its binlogs) or one file (that file only). With ``follow`` the
    reader waits at the end of the newest file for it to grow or for the next file, and a file
    that ends mid-event is waited on rather than reported as truncated (the server is writing it).
    """

    def __init__(
        self,
        path: str | Path,
        start_file: str | None = None,
        start_pos: int = 4,
        *,
        follow: bool = False,
        poll_interval: float = 0.2,
        stop: threading.Event | None = None,
    ) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise CaptureError(f"no such binlog file or directory: {self.path}")
        self.single = self.path.is_file()
        self.directory = self.path.parent if self.single else self.path
        self.start_file = start_file
        self.start_pos = start_pos
        self.follow = follow
        self.poll_interval = poll_interval
        self.stop = stop or threading.Event()

    def files(self) -> list[str]:
        if self.single:
            return [self.path.name]
        return list_binlogs(self.directory)

    def __iter__(self) -> Iterator[RawEvent | None]:
        files = self.files()
        if not files:
            raise CaptureError(f"no binlog files in {self.directory}")
        name = Path(self.start_file).name if self.start_file else files[0]
        if not (self.directory / name).exists():
            raise CaptureError(f"binlog file {name} not found in {self.directory}")
        pos = self.start_pos
        while True:
            yield from self._read_file(name, pos)
            next_name = yield from self._next_file(name)
            if next_name is None:
                return
            name, pos = next_name, 4

    def _next_file(self, name: str) -> Generator[None, None, str | None]:
        """The file after ``name`` in index order; following, wait until the server creates it."""
        while True:
            if self.single:
                return None
            later = [f for f in self.files() if file_key(f) > file_key(name)]
            if later:
                return min(later, key=file_key)
            if not self.follow or self.stop.is_set():
                return None
            yield None
            self.stop.wait(self.poll_interval)

    def _read_file(self, name: str, pos: int) -> Iterator[RawEvent | None]:
        """Yield the FORMAT_DESCRIPTION, then the events from ``pos`` to the end of the file."""
        path = self.directory / name
        where = f"{name}:0"
        with open(path, "rb", buffering=1 << 20) as f:
            magic = f.read(4)
            if magic != BINLOG_MAGIC:
                if len(magic) < 4 and self.follow:
                    return  # just created: nothing in it yet
                raise CaptureError(f"not a binlog file (magic {magic!r}, expected {BINLOG_MAGIC!r})", where=where)
            fde = self._read_event(f, name, 4)
            if fde is None and not self.follow:  # not following, nothing will be written: waiting would hang
                raise CaptureError("no FORMAT_DESCRIPTION event: the file ends after its magic", where=f"{name}:4")
            while fde is None:  # follow mode: the file was just created
                if self.stop.is_set():
                    return
                yield None
                self.stop.wait(self.poll_interval)
                f.seek(4)
                fde = self._read_event(f, name, 4)
            if fde[4] != EventType.FORMAT_DESCRIPTION:
                raise CaptureError(f"first event is type {fde[4]}, not FORMAT_DESCRIPTION", where=f"{name}:4")
            yield RawEvent(name, 4, fde)
            pos = max(pos, 4 + len(fde))
            f.seek(pos)
            last_type: int = EventType.FORMAT_DESCRIPTION
            while True:
                data = self._read_event(f, name, pos)
                if data is None:
                    if last_type in (EventType.ROTATE, EventType.STOP) or not self.follow or self.stop.is_set():
                        return
                    if not self.single and any(file_key(x) > file_key(name) for x in self.files()):
                        f.seek(pos)
                        if self._read_event(f, name, pos) is None:
                            return  # a newer file exists and this one stopped growing (server crash)
                    yield None
                    self.stop.wait(self.poll_interval)
                    f.seek(pos)
                    continue
                yield RawEvent(name, pos, data)
                last_type = data[4]
                pos += len(data)

    def _read_event(self, f, name: str, pos: int) -> bytes | None:
        """The whole event at ``pos``; None at a clean end (or, following, a partial event being written)."""
        # read, not peek: peek returns what the buffer still holds, which can be less than a header while
        # the file has more, and never reads on (following, the reader waited for that header for ever)
        head = f.read(HEADER_LEN)
        f.seek(pos)
        if not head:
            return None
        if len(head) < HEADER_LEN:
            if self.follow:
                return None
            raise CaptureError(
                f"truncated event: {len(head)} bytes at the end of the file, a header needs {HEADER_LEN}",
                where=f"{name}:{pos}",
            )
        size = int.from_bytes(head[9:13], "little")
        if size < HEADER_LEN:
            raise CaptureError(f"corrupt event header: event size {size}", where=f"{name}:{pos}")
        left = os.fstat(f.fileno()).st_size - pos
        if size > left:  # checked before reading: read(size) would allocate a corrupt header's 4 GiB first
            if self.follow:
                f.seek(pos)
                return None
            raise CaptureError(
                f"truncated event: header says {size} bytes, the file has {left} left", where=f"{name}:{pos}"
            )
        data = f.read(size)
        if len(data) < size:
            if self.follow:
                f.seek(pos)
                return None
            raise CaptureError(
                f"truncated event: header says {size} bytes, the file has {len(data)} left", where=f"{name}:{pos}"
            )
        return data
