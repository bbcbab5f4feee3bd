"""Reading a storage-sink directory back as events, following it while it grows (spec §5.6).

Each `poll` is one round of TiCDC's storage consumer: read the published checkpoint; load the
schema files and new data files of table versions at or below it; decode them; and return the
new events ordered by commit ts (a DDL before the rows of its version), followed by
``Resolved(checkpoint)``. A round emits exactly the rows with previous checkpoint < commit ts
<= checkpoint: rows above it (published before their transaction was complete) wait for a later
round, and rows at or below the previous checkpoint are replays of a writer that crashed between
publishing data and its checkpoint, so they are dropped. A reader may run while the writer is
still writing, and its position (files it is done with) only moves past a file once every row
of it was emitted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..codec import CodecOptions
from ..codec.canal_json import CanalJSONDecoder
from ..codec.csv import CSVDecoder
from ..errors import ConfigError, ascii_digits
from ..files.layout import (
    DATA_FILE_RE,
    EXTENSIONS,
    SCHEMA_FILE_RE,
    LayoutError,
    SchemaFile,
    index_file_name,
    parse_table_path,
    read_checkpoint,
)
from ..files.paths import join_under, table_label
from ..model import DDLEvent, Event, Resolved, RowChange, TableSchema

log = logging.getLogger(__name__)


@dataclass
class ReaderPosition:
    """What a reader has consumed: the checkpoint it reached and the last file per directory."""

    checkpoint: int = 0
    files: dict[str, int] = field(default_factory=dict)
    schema_files: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "files": dict(self.files), "schema_files": list(self.schema_files)}

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> ReaderPosition:
        if not obj:
            return cls()
        return cls(int(obj.get("checkpoint", 0)), dict(obj.get("files", {})), list(obj.get("schema_files", [])))


@dataclass(order=True)
class _DataDir:
    table_version: int
    partition: int
    date: str
    schema: str
    table: str
    path: str = field(compare=False)


class StorageReader:
    """Follows a TiCDC storage-sink directory (written by us or by TiCDC)."""

    def __init__(self, root: str | Path, codec: CodecOptions, position: ReaderPosition | None = None) -> None:
        if codec.protocol not in EXTENSIONS:
            raise ConfigError(f"a storage directory holds csv or canal-json files, not {codec.protocol}")
        self.root = Path(root)
        self.codec = codec
        self.ext = EXTENSIONS[codec.protocol]
        self.position = position or ReaderPosition()
        self._canal = CanalJSONDecoder(codec) if codec.protocol == "canal-json" else None
        self._csv = CSVDecoder(codec) if codec.protocol == "csv" else None
        self._schemas: dict[tuple[str, str, int], TableSchema] = {}
        self._seen_schema_files = set(self.position.schema_files)
        self._rows_have_ts = codec.protocol != "csv" or codec.include_commit_ts

    def poll(self) -> list[Event]:
        """New events up to the published checkpoint (empty when nothing new was published)."""
        checkpoint = read_checkpoint(self.root)
        if checkpoint <= self.position.checkpoint:
            return []
        ddls = self._load_schema_files(checkpoint)
        rows: list[RowChange] = []
        for ddir in sorted(self._data_dirs(checkpoint)):
            rows.extend(self._read_new_files(ddir, self.position.checkpoint, checkpoint))
        events: list[Event] = [*ddls, *rows]
        # Stable sort: a DDL (at its table version) precedes the rows of that version.
        events.sort(key=lambda e: e.commit_ts)
        self.position.checkpoint = checkpoint
        events.append(Resolved(checkpoint, position=self.position.to_json()))
        return events

    # ------------------------------------------------------------------ schema files

    def _load_schema_files(self, checkpoint: int) -> list[DDLEvent]:
        ddls: list[DDLEvent] = []
        for path in self._walk():
            m = SCHEMA_FILE_RE.match(path.name)
            if not m or path.parent.name != "meta":
                continue
            version = int(m.group(1))
            rel = str(path.relative_to(self.root))
            if version > checkpoint:
                continue
            sf = SchemaFile.parse(path.read_bytes(), where=rel)
            if f"{sf.checksum:010d}" != m.group(2):
                raise LayoutError("schema file checksum does not match its name", where=rel)
            if sf.table and sf.columns is not None:
                self._schemas[(sf.schema, sf.table, sf.table_version)] = sf.to_table_schema()
            if rel in self._seen_schema_files:
                continue
            self._seen_schema_files.add(rel)
            self.position.schema_files.append(rel)
            if sf.query:
                ts = self._schemas.get((sf.schema, sf.table, sf.table_version)) if sf.table else None
                ddls.append(DDLEvent(sf.schema, sf.table, sf.query, sf.ddl_type, sf.table_version, table_schema=ts))
        return ddls

    # ------------------------------------------------------------------ data files

    def _walk(self) -> Iterator[Path]:
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            for name in sorted(filenames):
                yield Path(dirpath) / name

    def _data_dirs(self, checkpoint: int) -> Iterator[_DataDir]:
        for path in self._walk():
            if path.name != "CDC.index" or path.parent.name != "meta":
                continue
            directory = path.parent.parent
            rel = directory.relative_to(self.root).parts
            ddir = self._parse_dir(rel)
            if ddir is not None and ddir.table_version <= checkpoint:
                yield ddir

    def _parse_dir(self, parts: tuple[str, ...]) -> _DataDir | None:
        # <schema>/<table>/<version>[/<partition>][/<date>], the names encoded (changefeed/files/paths.py)
        if len(parts) < 3 or not ascii_digits(parts[2]):
            log.warning("skipping a directory outside the storage layout", extra={"dir": "/".join(parts)})
            return None
        schema, table = parse_table_path(parts[0], parts[1], where="/".join(parts))
        version = int(parts[2])
        rest = list(parts[3:])
        partition = int(rest.pop(0)) if rest and ascii_digits(rest[0]) else -1
        date = rest.pop(0) if rest else ""
        return _DataDir(version, partition, date, schema, table, "/".join(parts))

    def _read_new_files(self, ddir: _DataDir, low: int, high: int) -> list[RowChange]:
        directory = join_under(self.root, *ddir.path.split("/"), what=table_label(ddir.schema, ddir.table))
        index_name = (directory / index_file_name()).read_text().strip()
        m = DATA_FILE_RE.match(index_name)
        if not m:
            raise LayoutError(f"index file names {index_name!r}, not a data file", where=f"{ddir.path}/meta/CDC.index")
        current = int(m.group("index"))
        width = len(m.group("index"))
        done = self.position.files.get(ddir.path, 0)
        complete = True
        rows: list[RowChange] = []
        for i in range(done + 1, current + 1):
            rel = f"{ddir.path}/CDC{i:0{width}d}{self.ext}"
            try:
                data = (directory / rel.rsplit("/", 1)[1]).read_bytes()
            except FileNotFoundError:
                # Removed by a restarted writer's recovery (its rows were all above the checkpoint):
                # stop here and read its replacement in a later round.
                break
            decoded = self._decode_file(ddir, data, rel, high)
            if not self._rows_have_ts:
                # CSV without include-commit-ts: rows carry the round's checkpoint and only file
                # positions say what is new (TiCDC's consumer has no more to go on either).
                rows.extend(decoded)
                self.position.files[ddir.path] = i
                continue
            rows.extend(r for r in decoded if low < r.commit_ts <= high)
            if complete and all(r.commit_ts <= high for r in decoded):
                self.position.files[ddir.path] = i
            else:
                complete = False  # re-read from here next round; emitted rows are then <= low
        return rows

    def _decode_file(self, ddir: _DataDir, data: bytes, rel: str, checkpoint: int) -> list[RowChange]:
        if self._canal is not None:
            events = self._canal.decode_lines(data, where=rel)
            return [e for e in events if isinstance(e, RowChange)]
        assert self._csv is not None
        ts = self._schemas.get((ddir.schema, ddir.table, ddir.table_version))
        if ts is None:
            raise LayoutError(
                f"no schema file for {ddir.schema}.{ddir.table} version {ddir.table_version}: CSV cannot be typed",
                where=rel,
            )
        return self._csv.decode_file(data, ts, commit_ts=checkpoint, where=rel)


def decode_data_file(root: Path, path: Path, codec: CodecOptions) -> list[RowChange]:
    """Rows of one data file, typed from the table's schema file for CSV (writer recovery)."""
    reader = StorageReader(root, codec)
    rel = path.relative_to(root)
    ddir = reader._parse_dir(rel.parent.parts)
    if ddir is None:
        return []
    if reader._csv is not None:
        reader._load_schema_files(1 << 64)
    return reader._decode_file(ddir, path.read_bytes(), str(rel), 0)
