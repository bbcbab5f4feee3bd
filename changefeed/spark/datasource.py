"""The ``changefeed`` Spark Python Data Source: change streams as a changelog DataFrame.

``spark.read.format("changefeed").option("input", "storage").option("protocol", "canal-json")
.load(path)`` (batch) or ``spark.readStream...`` (streaming). The ``input`` option picks an
`Input`: an input knows its offsets (JSON dicts, planned on the driver from metadata only) and
turns a range between two offsets into picklable partitions whose ``rows()`` decode in an
executor. Adding a source is adding one `Input` class to `INPUTS`; the readers below are shared.

Why offsets look the way they do (docs/spark.md has the user's view):

* storage: ``{"checkpoint", "files", "safe"}``. ``files`` is each data directory's last file index,
  read right *after* the published checkpoint, so every row at or below the checkpoint is in a
  listed file. A range reads files above the start's ``safe`` index and keeps rows with
  start.checkpoint < commit ts <= end.checkpoint: every row is emitted exactly once, and files
  that were published ahead of their checkpoint are simply read again by the next range.
  ``safe`` (the previous offset's ``files``) trails by one checkpoint advance: the storage writer
  publishes a flush's files before its checkpoint and flushes one at a time, so once the
  checkpoint has moved on, those files hold nothing above it.
* binlog: a `BinlogPosition` dict at a transaction boundary (the position of a ``Resolved``), plus
  ``splits``: intermediate boundaries found while scanning, one partition between each pair.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..capture.binlog import BinlogCapture, BinlogFileReader, BinlogPosition
from ..capture.binlog.position import reached
from ..codec import CodecOptions
from ..errors import ConfigError
from ..model import DDLEvent, Event, Resolved, RowChange, TableSchema
from ..sink.storage.layout import DATA_FILE_RE, EXTENSIONS, SCHEMA_FILE_RE, SchemaFile, read_checkpoint
from ..sink.storage.reader import StorageReader
from .changelog import ChangelogRows, changelog_schema, image_struct, parse_rules, parse_table

log = logging.getLogger(__name__)

NAME = "changefeed"
#: Options every input understands (Spark hands them over lower-cased).
_COMMON = frozenset({"input", "path", "filter", "table", "events", "maxeventspertrigger", "timezone", "time-zone"})


def _truthy(value: str | None) -> bool:
    return str(value or "").lower() in ("1", "true", "yes", "on")


def zone(name: str) -> tzinfo:
    if name.upper() in ("UTC", "Z", "+00:00", ""):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r}") from None


@dataclass
class SourceOptions:
    """The data source options, parsed once on the driver (and pickled into partitions)."""

    input: str
    path: Path
    rules: list[str]
    table: tuple[str, str] | None
    with_event: bool
    max_events: int | None
    time_zone: str
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        kind = opts.get("input", "")
        if kind not in INPUTS:
            known = ", ".join(sorted(INPUTS))
            raise ConfigError(f"option input must be one of {known} (kafka and kv are not built yet), got {kind!r}")
        if not opts.get("path"):
            raise ConfigError(f"input {kind} needs a path: .option('path', DIR) or .load(DIR)")
        max_events = opts.get("maxeventspertrigger")
        try:
            limit = int(max_events) if max_events else None
        except ValueError:
            raise ConfigError(f"maxEventsPerTrigger must be an integer, got {max_events!r}") from None
        if limit is not None and limit <= 0:
            raise ConfigError("maxEventsPerTrigger must be positive")
        tz = opts.get("timezone") or opts.get("time-zone") or "UTC"
        zone(tz)
        extra = {k: v for k, v in opts.items() if k not in _COMMON}
        unknown = set(extra) - INPUTS[kind].OPTIONS
        if unknown and not INPUTS[kind].ANY_CODEC_OPTION:
            raise ConfigError(f"unknown option(s) for input {kind}: {', '.join(sorted(unknown))}")
        return cls(
            input=kind,
            path=Path(opts["path"].removeprefix("file://")),
            rules=parse_rules(opts.get("filter")),
            table=parse_table(opts.get("table")),
            with_event=_truthy(opts.get("events")),
            max_events=limit,
            time_zone=tz,
            extra=extra,
        )

    def changelog(self, typed: TableSchema | None) -> ChangelogRows:
        return ChangelogRows(self.rules, self.table, typed, self.with_event)


class Input:
    """One kind of source. Offsets are JSON dicts; `partitions` carry everything `rows` needs."""

    OPTIONS: ClassVar[frozenset[str]] = frozenset()
    ANY_CODEC_OPTION: ClassVar[bool] = False

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def table_schema(self) -> TableSchema | None:
        """The selected table's current shape (for typed ``after``/``before``)."""
        raise NotImplementedError

    def initial_offset(self) -> dict[str, Any]:
        raise NotImplementedError

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        raise NotImplementedError

    def available_now_target(self) -> dict[str, Any]:
        raise NotImplementedError

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------- storage


def _data_dir_version(rel: str) -> int | None:
    parts = rel.split("/")
    return int(parts[2]) if len(parts) >= 3 and parts[2].isdigit() else None


@dataclass
class StorageRange(InputPartition):
    """Files of some data directories (and optionally the DDL of the range) between two checkpoints."""

    root: str
    codec: CodecOptions
    low: int
    high: int
    files: list[tuple[str, int, int]]  # (data dir, first index exclusive, last index inclusive)
    changelog: ChangelogRows
    ddl_and_resolved: bool = False
    end_offset: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[tuple[Any, ...]]:
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
                for row in reader._decode_file(ddir, (directory / name).read_bytes(), rel, self.high):
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
        yield from self.changelog.rows(events)
        if self.ddl_and_resolved:
            resolved = self.changelog.row(Resolved(self.high + 1, position=self.end_offset))
            if resolved is not None:
                yield resolved


class StorageInput(Input):
    """A TiCDC storage-sink directory (ours or TiCDC's), csv or canal-json."""

    OPTIONS = frozenset({"protocol"})
    ANY_CODEC_OPTION = True

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
        for path in (self.root / schema / table / "meta").glob("schema_*.json"):
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
        parts: list[InputPartition] = [StorageRange(*args, [], changelog, True, end)]
        parts.extend(StorageRange(*args, files, changelog) for files in by_table.values())
        return parts


# ---------------------------------------------------------------------------------------- binlog


class _ScanCapture(BinlogCapture):
    """A capture that finds transaction boundaries without decoding rows (driver-side planning).

    Counts ROWS events instead of decoding them; optionally remembers one table's schema.
    """

    def __init__(self, *args: Any, want: tuple[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.want = want
        self.found: TableSchema | None = None
        self.row_events = 0

    def _rows(self, ev: Any, ts: int, where: str) -> Iterator[RowChange]:  # type: ignore[override]
        self.row_events += 1
        tm = ev.table_map
        if self.want is not None and (tm.schema, tm.table) == self.want:
            self.found = self.table_schema_for(tm, where)
        return iter(())


def _open_files(path: Path) -> Any:
    """A raw-event source over binlog files that ends at the last complete event.

    Following with the stop flag already set: a partial event at the end (a server still writing)
    ends the read instead of raising "truncated".
    """
    stop = threading.Event()
    stop.set()

    def open_source(at: BinlogPosition) -> BinlogFileReader:
        return BinlogFileReader(path, at.file or None, at.pos, follow=True, poll_interval=0.01, stop=stop)

    return open_source


def _capture(cls: type[BinlogCapture], path: Path, start: BinlogPosition, tz: tzinfo, **kw: Any) -> BinlogCapture:
    return cls(_open_files(path), start, tz=tz, **kw)


@dataclass
class BinlogRange(InputPartition):
    """The transactions between two boundaries of a binlog directory, decoded in an executor."""

    path: str
    start: dict[str, Any]
    end: dict[str, Any]
    time_zone: str
    changelog: ChangelogRows

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        # TODO(spark): for typed single-table reads, `changefeed.capture.binlog.arrow.read_range_arrow`
        # builds Arrow batches without RowChange objects; wiring it needs per-row positions and the
        # DDL/resolved rows it does not produce, so this path still decodes through RowChange.
        end = BinlogPosition.from_dict(self.end)
        start = BinlogPosition.from_dict(self.start)
        capture = _capture(BinlogCapture, Path(self.path), start, zone(self.time_zone), until=(end.file, end.pos))
        last: Resolved | None = None
        for ev in capture.events():
            if isinstance(ev, Resolved):
                last = ev  # one resolved row per partition, not one per transaction
                continue
            row = self.changelog.row(ev)
            if row is not None:
                yield row
        if last is not None:
            row = self.changelog.row(last)
            if row is not None:
                yield row


class BinlogInput(Input):
    """A directory of MySQL/MariaDB binlog files (offline or relay-log mode)."""

    OPTIONS = frozenset({"startposition", "eventsperpartition"})

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        self.path = opts.path
        if not self.path.exists():
            raise ConfigError(f"no such binlog directory or file: {self.path}")
        self.tz = zone(opts.time_zone)
        try:
            self.split_every = int(opts.extra.get("eventsperpartition", "20000"))
        except ValueError:
            raise ConfigError("eventsPerPartition must be an integer") from None
        self.start_text = opts.extra.get("startposition", "")

    def _first(self) -> BinlogPosition:
        if self.start_text:
            text = self.start_text.strip()
            if text.startswith("{"):
                try:
                    return BinlogPosition.from_dict(orjson.loads(text))
                except orjson.JSONDecodeError as exc:
                    raise ConfigError(f"startPosition is not a JSON position: {exc}") from None
            return BinlogPosition.parse(text)
        files = BinlogFileReader(self.path).files()
        return BinlogPosition(files[0] if files else "", 4)

    def initial_offset(self) -> dict[str, Any]:
        return self._first().to_dict()

    def available_now_target(self) -> dict[str, Any]:
        files = BinlogFileReader(self.path).files()
        if not files:
            return {"file": "", "pos": 4}
        directory = self.path if self.path.is_dir() else self.path.parent
        return {"file": files[-1], "pos": os.path.getsize(directory / files[-1])}

    def scan(
        self, start: BinlogPosition, max_events: int | None = None, until: tuple[str, int] | None = None
    ) -> tuple[BinlogPosition | None, list[dict[str, Any]], TableSchema | None]:
        """The last transaction boundary after ``start`` (within the limits), split points, and the table's schema."""
        capture = _capture(_ScanCapture, self.path, start, self.tz, until=until, want=self.opts.table)
        assert isinstance(capture, _ScanCapture)
        end: BinlogPosition | None = None
        splits: list[dict[str, Any]] = []
        ddls = 0
        since_split = 0
        events = capture.events()
        try:
            for ev in events:
                if isinstance(ev, DDLEvent):
                    ddls += 1
                    continue
                if not isinstance(ev, Resolved) or ev.position is None:
                    continue
                end = BinlogPosition.from_dict(ev.position)
                count = capture.row_events + ddls
                if count - since_split >= self.split_every:
                    splits.append(end.to_dict())
                    since_split = count
                if max_events is not None and count >= max_events:
                    break
        finally:
            events.close()
        if splits and end is not None and splits[-1] == end.to_dict():
            splits.pop()
        return end, splits, capture.found

    def table_schema(self) -> TableSchema | None:
        if self.opts.table is None:
            return None
        _, _, found = self.scan(self._first())
        if found is None:
            schema, table = self.opts.table
            raise ConfigError(f"table {schema}.{table} has no rows in the binlog under {self.path}: shape unknown")
        return found

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        begin = BinlogPosition.from_dict(start)
        until = (str(target["file"]), int(target["pos"])) if target and target.get("file") else None
        if until is not None and begin.file and reached(begin.file, begin.pos, until):
            return start
        end, splits, _ = self.scan(begin, max_events, until)
        if end is None or (end.file, end.pos) == (begin.file, begin.pos):
            return start
        return {**end.to_dict(), "splits": splits}

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        bounds = [{k: v for k, v in start.items() if k != "splits"}, *end.get("splits", ())]
        bounds.append({k: v for k, v in end.items() if k != "splits"})
        return [
            BinlogRange(str(self.path), a, b, self.opts.time_zone, changelog)
            for a, b in itertools.pairwise(bounds)
            if (a.get("file"), a.get("pos")) != (b.get("file"), b.get("pos"))
        ]


INPUTS: dict[str, type[Input]] = {"storage": StorageInput, "binlog": BinlogInput}
"""``input`` option -> its class. Kafka and the TiKV mounter (``kv``) are not built yet."""


# ---------------------------------------------------------------------------------------- Spark API


class _BatchReader(DataSourceReader):
    """Everything available now: storage up to the published checkpoint, binlog to its last transaction."""

    def __init__(self, source: Input, changelog: ChangelogRows) -> None:
        self.source = source
        self.changelog = changelog

    def partitions(self) -> Sequence[InputPartition]:
        start = self.source.initial_offset()
        end = self.source.latest_offset(start, None, None)
        return self.source.partitions(start, end, self.changelog)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return partition.rows()  # type: ignore[attr-defined, no-any-return]


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are planned on the driver; `read` runs on a pickled copy in an executor."""

    def __init__(self, source: Input, changelog: ChangelogRows, max_events: int | None) -> None:
        self.source = source
        self.changelog = changelog
        self.max_events = max_events
        self.target: dict[str, Any] | None = None

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        return self.source.initial_offset()

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        return ReadMaxRows(self.max_events) if self.max_events else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = self.source.available_now_target()

    def latestOffset(self, start: dict, limit: Any = None) -> dict:  # noqa: N802
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if max_events is None and not isinstance(limit, ReadAllAvailable):
            max_events = self.max_events
        return self.source.latest_offset(start, max_events, self.target)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.source.partitions(start, end, self.changelog)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return partition.rows()  # type: ignore[attr-defined, no-any-return]

    def commit(self, end: dict) -> None:
        """Nothing to do: the sink's own checkpoint, not this call, makes a batch durable."""


class ChangefeedDataSource(DataSource):
    """``format("changefeed")``: options in docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        self.opts = SourceOptions.parse(options)
        self.source = INPUTS[self.opts.input](self.opts)
        self._typed: TableSchema | None = None
        self._resolved = False

    def _table(self) -> TableSchema | None:
        if not self._resolved:
            self._typed = self.source.table_schema()
            self._resolved = True
        return self._typed

    def schema(self) -> StructType:
        typed = self._table()
        return changelog_schema(image_struct(typed) if typed is not None else None, self.opts.with_event)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(self.source, self.opts.changelog(self._table()))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return _StreamReader(self.source, self.opts.changelog(self._table()), self.opts.max_events)


def register(spark: Any) -> None:
    """Make ``format("changefeed")`` available in this session (idempotent)."""
    spark.dataSource.register(ChangefeedDataSource)
