"""The `storage` input: a TiCDC storage-sink directory, read between published checkpoints."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ...codec import CodecOptions
from ...consume.storage import StorageReader
from ...errors import CaptureError, ConfigError, ascii_digits
from ...files.layout import (
    DATA_FILE_RE,
    EXTENSIONS,
    SCHEMA_FILE_RE,
    SchemaFile,
    read_checkpoint,
    table_path,
)
from ...model import DDLEvent, Event, Resolved, TableSchema
from ...model.rowblock import RowBlock
from ..changelog import ChangelogRows, EventFilter
from .options import CHANGELOG, Input, SourceOptions

log = logging.getLogger(__name__)

#: ``output=ranges``: one row per range, describing it, for a job that reads ranges itself (apply).
RANGES = "ranges"
RANGE_SCHEMA = pa.schema([("range", pa.string())])


def _data_dir_version(rel: str) -> int | None:
    parts = rel.split("/")
    return int(parts[2]) if len(parts) >= 3 and ascii_digits(parts[2]) else None


@dataclass
class StorageRange(InputPartition):
    """Files of some data directories (and optionally the DDL of the range) between two checkpoints.

    ``output=changelog``: decoded in an executor, one changelog row per event. ``output=ranges``:
    one row describing the range (`RANGE_SCHEMA`), which the apply job decodes itself on the driver
    (`StorageRangeDecoder`), so no event crosses the Spark hand-over as per-row JSON.
    """

    root: str
    codec: CodecOptions
    low: int
    high: int
    files: list[tuple[str, int, int]]  # (data dir, first index exclusive, last index inclusive)
    changelog: ChangelogRows
    ddl_and_resolved: bool = False
    end_offset: dict[str, Any] | None = None
    output: str = CHANGELOG

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[Any]:
        if self.output == RANGES:
            return iter([pa.RecordBatch.from_pylist([{"range": self.describe()}], schema=RANGE_SCHEMA)])
        return self.changelog.batches(self.changelog.rows(self.events()))

    def describe(self) -> str:
        """The range as JSON, without what the reading side has itself (root, codec, filter rules)."""
        fields = {"low": self.low, "high": self.high, "files": self.files, "ddl_and_resolved": self.ddl_and_resolved}
        return orjson.dumps({**fields, "end_offset": self.end_offset}).decode()

    def events(self) -> Iterator[Event]:
        """The range's events: rows and DDL in commit order, then (the DDL range) its Resolved."""
        root = Path(self.root)
        reader = StorageReader(root, self.codec)
        # Schema files type CSV rows and re-type canal-json rows: the message's own mysqlType does not
        # carry DECIMAL precision, BIT width or ENUM members; the table's schema file does.
        ddls = reader._load_schema_files(self.high)
        schemas = reader._schemas
        has_ts = self.codec.protocol != "csv" or self.codec.include_commit_ts
        events: list[Event] = []
        for rel_dir, first, last in self.files:
            ddir = reader._parse_dir(tuple(rel_dir.split("/")))
            if ddir is None:
                continue
            directory = root / rel_dir
            index_name = (directory / "meta" / "CDC.index").read_text().strip()
            m = DATA_FILE_RE.match(index_name)
            if m is None:
                continue
            width = len(m.group("index"))
            typed = schemas.get((ddir.schema, ddir.table, ddir.table_version))
            for i in range(first + 1, last + 1):
                name = f"CDC{i:0{width}d}{EXTENSIONS[self.codec.protocol]}"
                rel = f"{rel_dir}/{name}"
                try:
                    data = (directory / name).read_bytes()
                except FileNotFoundError:
                    # A restarted writer removed a file of its unfinished flush (StorageWriter
                    # recovery). Such a file holds only rows above the checkpoint this range was
                    # planned at, so it contributes nothing here, and it lies beyond the offset's
                    # `safe` index, so the next range reads its re-published replacement.
                    log.info("storage data file vanished (writer recovery); nothing to read", extra={"file": rel})
                    continue
                for row in reader._decode_file(ddir, data, rel, self.high):
                    if has_ts and not self.low < row.commit_ts <= self.high:
                        continue
                    if not has_ts:
                        row.commit_ts = self.high
                    if typed is not None and len(typed.columns) == len(row.table_schema.columns):
                        row.table_schema = typed
                    row.position = {"file": rel}
                    events.append(row)
        if self.ddl_and_resolved:
            events.extend(d for d in ddls if self.low < d.commit_ts <= self.high)
        events.sort(key=lambda e: (e.commit_ts, 0 if isinstance(e, DDLEvent) else 1))
        yield from events
        if self.ddl_and_resolved:
            yield Resolved(self.high, position=self.end_offset)


class StorageRangeDecoder:
    """The apply job's side of ``output=ranges``: reads and decodes each described range on the driver.

    The driver plans this directory's offsets already (it reads the checkpoint and the file
    indexes), so it can read the data files too; the ``filter``/``table`` options apply as in the
    changelog output.
    """

    def __init__(self, root: str, codec: CodecOptions, changelog: ChangelogRows) -> None:
        self.root = root
        self.codec = codec
        self.changelog = changelog

    def events(self, batches: Iterable[pa.RecordBatch]) -> list[Event | RowBlock]:
        """Every event of the ranges described in ``batches`` (`RANGE_SCHEMA`), range after range."""
        keep = EventFilter(self.changelog)
        out: list[Event | RowBlock] = []  # an `OrderedStage` batch: this decoder gives no blocks
        for batch in batches:
            for text in batch.column("range").to_pylist():
                out.extend(e for e in self._range(text).events() if keep(e))
        return out

    def _range(self, text: str) -> StorageRange:
        try:
            obj = orjson.loads(text)
            files = [(str(rel), int(first), int(last)) for rel, first, last in obj["files"]]
            low, high, end = int(obj["low"]), int(obj["high"]), obj["end_offset"]
            ddl_and_resolved = bool(obj["ddl_and_resolved"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CaptureError(f"storage: not a range description: {exc}", where=self.root) from None
        return StorageRange(self.root, self.codec, low, high, files, self.changelog, ddl_and_resolved, end)


class StorageInput(Input):
    """A TiCDC storage-sink directory (ours or TiCDC's), csv or canal-json."""

    NO_BYTES_LIMIT: ClassVar[str] = "reads a whole checkpoint advance per micro-batch (the layout cannot be cut finer)"
    OPTIONS = frozenset({"protocol"})
    ANY_CODEC_OPTION = True
    OUTPUTS: ClassVar[Mapping[str, str]] = {RANGES: "range string"}

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        mapping = dict(opts.extra)
        mapping.setdefault("protocol", "canal-json")
        if mapping["protocol"] not in EXTENSIONS:
            raise ConfigError(f"input storage reads protocol csv or canal-json, not {mapping['protocol']!r}")
        if "time-zone" not in mapping:
            mapping["time-zone"] = opts.time_zone
        self.codec = CodecOptions.from_mapping(mapping)
        self.root = opts.path

    def observe(self) -> dict[str, Any]:
        """The published checkpoint, then each data directory's last file (in that order: see module doc)."""
        checkpoint = read_checkpoint(self.root)
        files: dict[str, int] = {}
        for index in sorted(self.root.rglob("meta/CDC.index")):
            rel = index.parent.parent.relative_to(self.root).as_posix()
            version = _data_dir_version(rel)
            if version is None or version > checkpoint:
                continue
            m = DATA_FILE_RE.match(index.read_text().strip())
            if m is not None:
                files[rel] = int(m.group("index"))
        return {"checkpoint": checkpoint, "files": files, "safe": {}}

    def table_schema(self) -> TableSchema | None:
        if self.opts.table is None:
            return None
        schema, table = self.opts.table
        best: tuple[int, Path] | None = None
        for path in (self.root / table_path(schema, table) / "meta").glob("schema_*.json"):
            m = SCHEMA_FILE_RE.match(path.name)
            if m and (best is None or int(m.group(1)) > best[0]):
                best = (int(m.group(1)), path)
        if best is None:
            raise ConfigError(f"table {schema}.{table} has no schema file under {self.root}")
        sf = SchemaFile.parse(best[1].read_bytes(), where=str(best[1]))
        if sf.columns is None:
            raise ConfigError(f"the schema file of {schema}.{table} has no columns", where=str(best[1]))
        return sf.to_table_schema()

    def initial_offset(self) -> dict[str, Any]:
        return {"checkpoint": 0, "files": {}, "safe": {}}

    def available_now_target(self) -> dict[str, Any]:
        return self.observe()

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        # A whole checkpoint advance per batch: the storage layout cannot be cut finer without
        # decoding files on the driver, so maxEventsPerTrigger does not apply here.
        seen = target if target is not None else self.observe()
        if seen["checkpoint"] <= start["checkpoint"]:
            return start
        return {"checkpoint": seen["checkpoint"], "files": seen["files"], "safe": dict(start["files"])}

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        if end["checkpoint"] <= start["checkpoint"]:
            return []
        has_ts = self.codec.protocol != "csv" or self.codec.include_commit_ts
        from_files = start["safe"] if has_ts else start["files"]
        by_table: dict[str, list[tuple[str, int, int]]] = {}
        for rel, last in sorted(end["files"].items()):
            first = int(from_files.get(rel, 0))
            if last > first:
                by_table.setdefault("/".join(rel.split("/")[:2]), []).append((rel, first, int(last)))
        args = (str(self.root), self.codec, int(start["checkpoint"]), int(end["checkpoint"]))
        output = self.opts.output
        parts: list[InputPartition] = [StorageRange(*args, [], changelog, True, end, output)]
        parts.extend(StorageRange(*args, files, changelog, False, None, output) for files in by_table.values())
        return parts

    def range_decoder(self) -> StorageRangeDecoder:
        """The driver-side reader of this directory's ``output=ranges`` rows (with the ``filter`` rules)."""
        return StorageRangeDecoder(str(self.root), self.codec, self.opts.changelog(None))
