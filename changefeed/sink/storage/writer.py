"""The storage sink: events -> a directory in TiCDC's storage-sink layout (spec §5).

Two halves. `StorageEncoder` turns events into `DataSegment`s: one data directory's encoded lines
(canal-json/CSV) with each line's commit ts. It is pure and picklable, so the Spark capture job runs
it in executors (changefeed/spark/encode.py). `StorageWriter` places segments: ``write_encoded``
buffers them per data directory and `flush` publishes them; its event-taking ``write`` is the
encoder followed by ``write_encoded``, so both paths share one layout.

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

import bisect
import datetime as dt
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from ...codec import CodecOptions, Encoder, make_encoder
from ...consume.storage import decode_data_file
from ...errors import ConfigError, SinkError, ascii_digits, typed
from ...files.layout import (
    EXTENSIONS,
    SchemaFile,
    data_dir,
    data_file_name,
    date_dir,
    index_file_name,
    metadata_json,
    read_checkpoint,
)
from ...files.paths import join_under, table_label
from ...model import DDLEvent, Event, Resolved, RowChange, TableSchema
from ...model.rowblock import OP_NAMES, RowBlock
from ..base import SinkContext
from ..replay import ResolvedGuard

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

    @classmethod
    def from_uri(cls, params: Mapping[str, str], defaults: StorageOptions | None = None) -> StorageOptions:
        """The ``file://DIR?...`` parameters (TiCDC's names) over ``defaults`` (the ``[sink]`` table)."""
        base = defaults or cls()
        return replace(
            base,
            date_separator=params.get("date-separator", base.date_separator),
            enable_partition_separator=typed(
                params.get("enable-partition-separator", base.enable_partition_separator),
                bool,
                "enable-partition-separator",
            ),
            file_index_width=typed(params.get("file-index-width", base.file_index_width), int, "file-index-width"),
            file_size=typed(params.get("file-size", base.file_size), int, "file-size"),
        )


def _roll(segments: list[DataSegment], file_size: int) -> Iterator[bytes]:
    """The data files' contents: lines in order, a new file whenever the next line would pass ``file_size``
    (a line longer than that gets a file of its own). Splits are found per file, not per line."""
    parts: list[bytes] = []
    size = 0
    for seg in segments:
        ends, start, i, n = seg.ends, 0, 0, len(seg.ends)
        while i < n:
            j = bisect.bisect_right(ends, start + file_size - size, i)
            if j == i:
                if size:  # line i does not fit into the file being filled
                    yield b"".join(parts)
                    parts, size = [], 0
                    continue
                j = i + 1
            parts.append(seg.data[start : ends[j - 1]])
            size += ends[j - 1] - start
            start, i = ends[j - 1], j
            if i < n:  # line j did not fit
                yield b"".join(parts)
                parts, size = [], 0
    if parts:
        yield b"".join(parts)


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


@dataclass(slots=True)
class DataSegment:
    """Encoded lines of one data directory, in commit order, as the writer buffers and publishes them.

    ``data`` is the lines back to back (terminators included); ``ends[i]`` is where line i ends and
    ``commit_ts[i]`` its row's commit ts. ``schema_file`` is the table's schema file without the
    DDL query (the writer adds it: only it knows which DDL preceded the version's first row).
    """

    base: str
    schema_file: SchemaFile
    table_id: int | None  # the schema file's directory is the table id (use-table-id-as-path)
    header: bytes
    data: bytes
    ends: list[int]
    commit_ts: list[int]
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (op, "schema.table") -> rows

    kind = "rows"

    @property
    def rows(self) -> int:
        return sum(self.counts.values())

    def select(self, keep: list[bool]) -> DataSegment:
        """The segment with only the lines where ``keep`` is true."""
        if all(keep):
            return self
        data: list[bytes] = []
        ends: list[int] = []
        commit_ts: list[int] = []
        start = size = 0
        for end, ts, kept in zip(self.ends, self.commit_ts, keep, strict=True):
            if kept:
                data.append(self.data[start:end])
                size += end - start
                ends.append(size)
                commit_ts.append(ts)
            start = end
        return replace(self, data=b"".join(data), ends=ends, commit_ts=commit_ts)


StorageItem = DataSegment | DDLEvent | Resolved
"""What `StorageEncoder` produces and `StorageWriter.write_encoded` takes."""


class StorageEncoder:
    """Events -> `DataSegment`s (one per data directory between DDL/Resolved events); DDL and Resolved pass through.

    Picklable and without I/O: the Spark capture job runs one per partition in an executor.
    """

    def __init__(self, codec: CodecOptions, options: StorageOptions | None = None) -> None:
        if codec.protocol not in EXTENSIONS:
            raise ConfigError(f"the storage sink writes csv or canal-json, not {codec.protocol}")
        self.codec = codec
        self.options = options or StorageOptions()
        self.terminator = b"" if codec.protocol == "csv" else codec.terminator.encode()
        self._encoder: Encoder | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_encoder": None}  # compiled plans are rebuilt where it runs

    def encode(self, events: Iterable[Event | RowBlock], checkpoint_ts: int = 0) -> Iterator[StorageItem]:
        """Segments and pass-through events in order; rows at or below ``checkpoint_ts`` are skipped
        (replayed: pass the checkpoint stored when the writer started, `StorageWriter.replay_ts`)."""
        if self._encoder is None:
            self._encoder = make_encoder(self.codec)
        open_: dict[str, _SegmentBuilder] = {}
        for event in events:
            if isinstance(event, RowBlock):
                self._block(event, open_, checkpoint_ts)
            elif isinstance(event, RowChange):
                if event.commit_ts > checkpoint_ts:
                    self._row(event, open_)
            else:
                # A DDL or Resolved event closes the open segments: what follows may be a new table version.
                yield from (b.finish(self) for b in open_.values())
                open_.clear()
                yield event
        yield from (b.finish(self) for b in open_.values())

    def _block(self, block: RowBlock, open_: dict[str, _SegmentBuilder], checkpoint_ts: int) -> None:
        """A block's rows as `encode` takes them one by one, rendered a table at a time where the
        encoder can (`Encoder.render_table`); other rows go through `_row` in their place."""
        encoder = self._encoder
        assert encoder is not None
        plans = [encoder.render_table(rows) for rows in block.tables]
        for seg, start in block.walk():
            if seg.commit_ts <= checkpoint_ts:
                continue
            rows, plan = block.tables[seg.table], plans[seg.table]
            if plan is None or plan.per_row[start : start + seg.rows].any():
                for row in block.segment_rows(seg, start):
                    self._row(row, open_)
                continue
            schema, ts = rows.table_schema, seg.commit_ts
            builder = self._segment(open_, schema, self._base_of(schema, None, schema.table_id))
            for i in range(start, start + seg.rows):
                encoder.append_rendered(b"", plan.values[i], ts, partial(rows.row, i, ts))  # type: ignore[arg-type]
                self._take(builder, ts)
            key = (OP_NAMES[rows.ops[start]], f"{schema.schema}.{schema.table}")
            builder.counts[key] = builder.counts.get(key, 0) + seg.rows

    def _row(self, row: RowChange, open_: dict[str, _SegmentBuilder]) -> None:
        assert self._encoder is not None
        seg = self._segment(open_, row.table_schema, self._base(row))
        self._encoder.append_row(row)
        self._take(seg, row.commit_ts)
        key = (row.op.value, f"{row.schema}.{row.table}")
        seg.counts[key] = seg.counts.get(key, 0) + 1

    def _take(self, seg: _SegmentBuilder, commit_ts: int) -> None:
        """The encoder's messages for the row just appended, as lines of ``seg``."""
        assert self._encoder is not None
        for msg in self._encoder.build():
            if msg.value:
                seg.add(msg.value + self.terminator, commit_ts)

    @staticmethod
    def _segment(open_: dict[str, _SegmentBuilder], schema: TableSchema, base: str) -> _SegmentBuilder:
        seg = open_.get(base)
        if seg is None:
            seg = open_[base] = _SegmentBuilder(base, schema)
        seg.schema = schema
        return seg

    def _base(self, row: RowChange) -> str:
        return self._base_of(row.table_schema, row.physical_table_id, row.table_id)

    def _base_of(self, ts: TableSchema, physical_table_id: int | None, table_id: int) -> str:
        partition = physical_table_id if ts.partitioned and self.options.enable_partition_separator else None
        return data_dir(
            ts.schema,
            ts.table,
            ts.version,
            partition,
            table_id=table_id if self.options.use_table_id_as_path else None,
        )

    def header(self, ts: TableSchema) -> bytes:
        if self.codec.protocol == "csv" and self.codec.output_field_header:
            from ...codec.csv import CSVEncoder  # noqa: PLC0415 - loaded by make_encoder for csv anyway

            if self._encoder is None:
                self._encoder = make_encoder(self.codec)
            assert isinstance(self._encoder, CSVEncoder)  # make_encoder's encoder for protocol "csv"
            return self._encoder.header(ts)
        return b""


@dataclass
class _SegmentBuilder:
    base: str
    schema: TableSchema
    parts: list[bytes] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    commit_ts: list[int] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    size: int = 0

    def add(self, line: bytes, commit_ts: int) -> None:
        self.parts.append(line)
        self.size += len(line)
        self.ends.append(self.size)
        self.commit_ts.append(commit_ts)

    def finish(self, owner: StorageEncoder) -> DataSegment:
        ts = self.schema
        return DataSegment(
            base=self.base,
            schema_file=SchemaFile.from_table(ts, ts.version),
            table_id=ts.table_id if owner.options.use_table_id_as_path else None,
            header=owner.header(ts),
            data=b"".join(self.parts),
            ends=self.ends,
            commit_ts=self.commit_ts,
            counts=self.counts,
        )


class StorageWriter(SinkContext):
    """Writes model events (or pre-encoded `DataSegment`s) into ``root`` in TiCDC's storage-sink layout.

    A `Sink` (changefeed/sink/base.py); constructing it already recovers a crashed flush.
    """

    kind = "storage"

    def __init__(
        self,
        root: str | Path,
        codec: CodecOptions,
        options: StorageOptions | None = None,
        now: Callable[[], dt.datetime] = dt.datetime.now,
    ) -> None:
        self.root = Path(root)
        self.codec = codec
        self.options = options or StorageOptions()
        self.encoder = StorageEncoder(codec, self.options)  # validates the protocol
        self.now = now
        self.ext = EXTENSIONS[codec.protocol]
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoint_ts = read_checkpoint(self.root)
        self._pending_checkpoint = self.checkpoint_ts
        self._guard = ResolvedGuard("storage writer", self.checkpoint_ts)  # replays end at the stored one
        self._buffers: dict[str, list[DataSegment]] = {}
        self._headers: dict[str, bytes] = {}
        self._dirs: dict[str, _DirState] = {}
        self._schema_files: set[str] = set()
        self._ddl_without_schema: dict[tuple[str, str, int], DDLEvent] = {}
        self._recover()

    # ------------------------------------------------------------------ writing

    def open(self) -> int:
        """The published checkpoint ts (the crashed flush was recovered when the writer was made)."""
        return self.checkpoint_ts

    def close(self) -> None:
        """Drop what was written and not flushed (a failed batch's rows); files stay as published."""
        self._buffers.clear()
        self._ddl_without_schema.clear()
        self._pending_checkpoint = self.checkpoint_ts

    @property
    def replay_ts(self) -> int:
        """The checkpoint stored when this writer started: rows at or below it are a restart's
        replay and skipped (an encoder may drop them before they reach `write_encoded`)."""
        return self._guard.stored

    def write(self, batch: Iterable[Event | RowBlock]) -> None:
        """Encode ``batch`` (commit order) and buffer it: `StorageEncoder` then `write_encoded`."""
        self.write_encoded(self.encoder.encode(batch, self.replay_ts))

    def write_encoded(self, items: Iterable[StorageItem]) -> None:
        """Buffer what `StorageEncoder.encode` made (here or in an executor), in its (commit) order."""
        for item in items:
            self._write_item(item)

    def _write_item(self, item: StorageItem) -> None:
        if isinstance(item, DataSegment):
            self._write_segment(item)
        elif isinstance(item, DDLEvent):
            self._write_ddl(item)
        elif isinstance(item, Resolved):
            # Resolved(R) and TiCDC's checkpoint-ts both mean: every commit ts <= R is in.
            self._pending_checkpoint = max(self._pending_checkpoint, item.commit_ts)
            self._guard.saw(item.commit_ts)
        else:
            raise TypeError(f"storage writer: unexpected {type(item).__name__}")

    def _write_segment(self, seg: DataSegment) -> None:
        # Replayed rows (at or below the checkpoint stored when the writer started) are already
        # published: the checkpoint is only written after the data. Rows at or below a Resolved of
        # this run are a broken stream: ResolvedContradictionError.
        if seg.commit_ts and min(seg.commit_ts) <= self.replay_ts:
            seg = seg.select([ts > self.replay_ts for ts in seg.commit_ts])
        if not seg.commit_ts:
            return
        self._guard.skip(min(seg.commit_ts), seg.schema_file.schema, seg.schema_file.table)  # raises if contradicted
        self._ensure_schema_file(seg.schema_file, seg.table_id)
        self._headers[seg.base] = seg.header
        self._buffers.setdefault(seg.base, []).append(seg)

    def _write_ddl(self, ddl: DDLEvent) -> None:
        if ddl.commit_ts <= self.checkpoint_ts:
            return
        ts = ddl.table_schema
        if ts is not None:
            self._publish_schema_file(
                SchemaFile.from_table(ts, ts.version or ddl.commit_ts, ddl.query, ddl.ddl_type),
                ts.table_id if self.options.use_table_id_as_path else None,
            )
        elif not ddl.table:
            self._publish_schema_file(SchemaFile(ddl.schema, "", ddl.commit_ts, ddl.query, ddl.ddl_type), None)
        else:
            # The shape after the DDL is not known yet: the first row of the new version writes
            # the table's schema file with this query; `flush` writes a column-less one otherwise.
            self._ddl_without_schema[(ddl.schema, ddl.table, ddl.commit_ts)] = ddl

    def _ensure_schema_file(self, sf: SchemaFile, table_id: int | None) -> None:
        ddl = self._ddl_without_schema.pop((sf.schema, sf.table, sf.table_version), None)
        if ddl is not None:
            sf = replace(sf, query=ddl.query, ddl_type=ddl.ddl_type)
        self._publish_schema_file(sf, table_id)

    def _publish_schema_file(self, sf: SchemaFile, table_id: int | None) -> None:
        rel = sf.path(table_id)
        if rel in self._schema_files:
            return
        path = join_under(self.root, *rel.split("/"), what=table_label(sf.schema, sf.table))
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
        for base, segments in self._buffers.items():
            ready: list[DataSegment] = []
            waiting: list[DataSegment] = []
            for seg in segments:
                if max(seg.commit_ts) <= cutoff:  # the usual case: a batch ends with its Resolved
                    ready.append(seg)
                    continue
                covered = [ts <= cutoff for ts in seg.commit_ts]
                if any(covered):
                    ready.append(seg.select(covered))
                if not all(covered):
                    waiting.append(seg.select([not c for c in covered]))
            if ready:
                self._publish_data(base, date, ready)
                self._buffers[base] = waiting
        if self._pending_checkpoint > self.checkpoint_ts:
            write_atomically(self.root / "metadata", metadata_json(self._pending_checkpoint))
            self.checkpoint_ts = self._pending_checkpoint
            self._guard.saw(self.checkpoint_ts, "the checkpoint published")
        return self.checkpoint_ts

    def _publish_data(self, base: str, date: str, segments: list[DataSegment]) -> None:
        sf = segments[0].schema_file
        elements = [*base.split("/"), date] if date else base.split("/")
        directory = join_under(self.root, *elements, what=table_label(sf.schema, sf.table))
        state = self._dirs.get(base)
        if state is None or state.date != date:
            # A new date directory restarts numbering at 1 (TiCDC resets the index per date).
            state = _DirState(date, self._last_index(directory))
            self._dirs[base] = state
        header = self._headers.get(base, b"")
        for body in _roll(segments, self.options.file_size):
            state.index += 1
            name = data_file_name(state.index, self.ext, self.options.file_index_width)
            data = header + body
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
        digits = "".join(ch for ch in name.split(".")[0] if ascii_digits(ch))
        if not digits:
            raise SinkError(f"index file names no data file: {name!r}", where=str(directory / index_file_name()))
        return int(digits)
