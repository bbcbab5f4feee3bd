"""The storage sink: events -> a directory in TiCDC's storage-sink layout (spec §5).

Rows are buffered per data directory and published by `flush`, but only rows a Resolved event
has covered: a published file never holds a row above the checkpoint published right after it.
Each data file is written under a temporary name, fsynced and renamed into place, then the
directory's ``meta/CDC.index`` names it, and last the root ``metadata`` advances the checkpoint.
A reader therefore never sees a partial file, and everything at or below the published
checkpoint is complete.

A crash between publishing data files and the checkpoint leaves files whose rows are all above
the checkpoint. On restart the writer removes exactly those (walking each directory back from
its index file) before anything is replayed, then drops replayed rows at or below the checkpoint:
the directory ends up as if the crashed flush never happened, so replays add no duplicates.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ...codec import CodecOptions, make_encoder
from ...errors import ConfigError, SinkError
from ...model import DDLEvent, Event, Resolved, RowChange, TableSchema
from .layout import (
    EXTENSIONS,
    SchemaFile,
    data_dir,
    data_file_name,
    date_dir,
    index_file_name,
    metadata_json,
    read_checkpoint,
)
from .reader import decode_data_file

log = logging.getLogger(__name__)


@dataclass
class StorageOptions:
    """``[sink]`` options of TiCDC's storage sink that shape the directory."""

    date_separator: str = "day"
    enable_partition_separator: bool = True
    file_index_width: int = 20
    use_table_id_as_path: bool = False
    file_size: int = 64 * 1024 * 1024  # roll to a new file past this many bytes

    def __post_init__(self) -> None:
        if self.date_separator not in ("none", "year", "month", "day"):
            raise ConfigError(f"date-separator must be none, year, month or day, not {self.date_separator!r}")


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` so readers see the old content or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class _DirState:
    date: str
    index: int


class StorageWriter:
    """Writes model events into ``root`` in TiCDC's storage-sink layout."""

    def __init__(
        self,
        root: str | Path,
        codec: CodecOptions,
        options: StorageOptions | None = None,
        now: Callable[[], dt.datetime] = dt.datetime.now,
    ) -> None:
        if codec.protocol not in EXTENSIONS:
            raise ConfigError(f"the storage sink writes csv or canal-json, not {codec.protocol}")
        self.root = Path(root)
        self.codec = codec
        self.options = options or StorageOptions()
        self.now = now
        self.ext = EXTENSIONS[codec.protocol]
        self.encoder = make_encoder(codec)
        self.terminator = b"" if codec.protocol == "csv" else codec.terminator.encode()
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoint_ts = read_checkpoint(self.root)
        self._pending_checkpoint = self.checkpoint_ts
        self._buffers: dict[str, list[tuple[int, bytes]]] = {}
        self._dir_schema: dict[str, TableSchema] = {}
        self._dirs: dict[str, _DirState] = {}
        self._schema_files: set[str] = set()
        self._ddl_without_schema: dict[tuple[str, str, int], DDLEvent] = {}
        self._recover()

    # ------------------------------------------------------------------ writing

    def write_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.write(event)

    def write(self, event: Event) -> None:
        if isinstance(event, RowChange):
            self._write_row(event)
        elif isinstance(event, DDLEvent):
            self._write_ddl(event)
        elif isinstance(event, Resolved):
            # Resolved(R) and TiCDC's checkpoint-ts both mean: every commit ts <= R is in.
            self._pending_checkpoint = max(self._pending_checkpoint, event.commit_ts)

    def _write_row(self, row: RowChange) -> None:
        if row.commit_ts <= self.checkpoint_ts:
            return  # replayed: already published (the checkpoint is only written after the data)
        ts = row.table_schema
        self._ensure_schema_file(ts)
        partition = row.physical_table_id if ts.partitioned and self.options.enable_partition_separator else None
        base = data_dir(
            ts.schema,
            ts.table,
            ts.version,
            partition,
            table_id=row.table_id if self.options.use_table_id_as_path else None,
        )
        self.encoder.append_row(row)
        self._dir_schema[base] = ts
        buf = self._buffers.setdefault(base, [])
        for msg in self.encoder.build():
            if msg.value:
                buf.append((row.commit_ts, msg.value + self.terminator))

    def _write_ddl(self, ddl: DDLEvent) -> None:
        if ddl.commit_ts <= self.checkpoint_ts:
            return
        ts = ddl.table_schema
        if ts is not None:
            self._publish_schema_file(
                SchemaFile.from_table(ts, ts.version or ddl.commit_ts, ddl.query, ddl.ddl_type), ts
            )
        elif not ddl.table:
            self._publish_schema_file(SchemaFile(ddl.schema, "", ddl.commit_ts, ddl.query, ddl.ddl_type), None)
        else:
            # The shape after the DDL is not known yet: the first row of the new version writes
            # the table's schema file with this query; `flush` writes a column-less one otherwise.
            self._ddl_without_schema[(ddl.schema, ddl.table, ddl.commit_ts)] = ddl

    def _ensure_schema_file(self, ts: TableSchema) -> None:
        ddl = self._ddl_without_schema.pop((ts.schema, ts.table, ts.version), None)
        sf = SchemaFile.from_table(ts, ts.version, ddl.query if ddl else "", ddl.ddl_type if ddl else 0)
        self._publish_schema_file(sf, ts)

    def _publish_schema_file(self, sf: SchemaFile, ts: TableSchema | None) -> None:
        rel = sf.path(ts.table_id if ts is not None and self.options.use_table_id_as_path else None)
        if rel in self._schema_files:
            return
        path = self.root / rel
        if not path.exists():
            write_atomically(path, sf.to_json().encode())
        self._schema_files.add(rel)

    # ------------------------------------------------------------------ publishing

    def flush(self) -> int:
        """Publish buffered rows, then the checkpoint; returns the published checkpoint ts."""
        for (schema, table, version), ddl in list(self._ddl_without_schema.items()):
            self._publish_schema_file(SchemaFile(schema, table, version, ddl.query, ddl.ddl_type), None)
            del self._ddl_without_schema[(schema, table, version)]
        date = date_dir(self.now(), self.options.date_separator)
        cutoff = self._pending_checkpoint
        for base, chunks in self._buffers.items():
            ready = [data for ts, data in chunks if ts <= cutoff]
            if ready:
                self._publish_data(base, date, ready)
                self._buffers[base] = [(ts, data) for ts, data in chunks if ts > cutoff]
        if self._pending_checkpoint > self.checkpoint_ts:
            write_atomically(self.root / "metadata", metadata_json(self._pending_checkpoint))
            self.checkpoint_ts = self._pending_checkpoint
        return self.checkpoint_ts

    def _publish_data(self, base: str, date: str, chunks: list[bytes]) -> None:
        directory = self.root / base / date if date else self.root / base
        state = self._dirs.get(base)
        if state is None or state.date != date:
            # A new date directory restarts numbering at 1 (TiCDC resets the index per date).
            state = _DirState(date, self._last_index(directory))
            self._dirs[base] = state
        header = b""
        if self.codec.protocol == "csv" and self.codec.output_field_header:
            header = self.encoder.header(self._dir_schema[base])  # type: ignore[attr-defined]
        files: list[list[bytes]] = [[]]
        size = 0
        for chunk in chunks:
            if size and size + len(chunk) > self.options.file_size:
                files.append([])
                size = 0
            files[-1].append(chunk)
            size += len(chunk)
        for parts in files:
            state.index += 1
            name = data_file_name(state.index, self.ext, self.options.file_index_width)
            data = header + b"".join(parts)
            write_atomically(directory / name, data)
            write_atomically(directory / index_file_name(), (name + "\n").encode())
            log.debug("storage file published", extra={"file": str(directory / name), "bytes": len(data)})

    def _recover(self) -> None:
        """Remove data files of a flush that crashed before publishing its checkpoint."""
        if self.codec.protocol == "csv" and not self.codec.include_commit_ts:
            log.warning("csv without include-commit-ts: a crashed flush cannot be told apart; replays may duplicate")
            return
        for index_path in self.root.rglob("meta/CDC.index"):
            directory = index_path.parent.parent
            last = self._last_index(directory)
            width = len(index_path.read_text().strip().split(".")[0]) - len("CDC")
            removed = 0
            while last > 0:
                path = directory / f"CDC{last:0{width}d}{self.ext}"
                rows = decode_data_file(self.root, path, self.codec) if path.exists() else []
                if path.exists() and (not rows or min(r.commit_ts for r in rows) <= self.checkpoint_ts):
                    break
                path.unlink(missing_ok=True)
                removed += 1
                last -= 1
            if removed:
                log.warning(
                    "removed data files of an unfinished flush", extra={"dir": str(directory), "files": removed}
                )
                if last:
                    write_atomically(index_path, (data_file_name(last, self.ext, width) + "\n").encode())
                else:
                    index_path.unlink()

    @staticmethod
    def _last_index(directory: Path) -> int:
        try:
            name = (directory / index_file_name()).read_text().strip()
        except FileNotFoundError:
            return 0
        digits = "".join(ch for ch in name.split(".")[0] if ch.isdigit())
        if not digits:
            raise SinkError(f"index file names no data file: {name!r}", where=str(directory / index_file_name()))
        return int(digits)
