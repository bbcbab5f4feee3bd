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
import time
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
from ..errors import CaptureError, ConfigError
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
            raise ConfigError(f"option input must be one of {known}, got {kind!r}")
        if not opts.get("path") and not INPUTS[kind].NO_PATH:
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
            path=Path(opts.get("path", "").removeprefix("file://")),
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
    NO_PATH: ClassVar[bool] = False  # True: the input is not a directory (kafka)

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
        yield from self.changelog.rows(events)
        if self.ddl_and_resolved:
            resolved = self.changelog.row(Resolved(self.high, position=self.end_offset))
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


# ---------------------------------------------------------------------------------------- kafka

#: Kafka options of the data source (the rest are codec options).
_KAFKA_KEYS = frozenset({"bootstrap.servers", "kafka.bootstrap.servers", "topic", "startingoffsets"})
_KAFKA_TIMEOUT_S = 30.0
_WATERMARK_FETCH_S = 5.0


def _consumer(servers: str) -> Any:
    from confluent_kafka import Consumer  # noqa: PLC0415 - only kafka reads need it

    return Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "changefeed-spark",  # never joins or commits: assign() only, offsets live in Spark
            "enable.auto.commit": False,
            "auto.offset.reset": "error",  # an offset the broker no longer has is an error, not a skip
            "allow.auto.create.topics": False,
            "logger": log,
        }
    )


@dataclass
class KafkaRange(InputPartition):
    """Messages [start, end) of one Kafka partition, decoded in an executor, one changelog row per event.

    Rows are per message and unmerged: resends and broadcast copies are all here, and each
    partition's resolved events come out as ``resolved`` rows. The cross-partition merge
    (resolved gating, dedupe) needs every partition and state across batches: it runs in the
    apply job (`changefeed.spark.merge`), not here.
    """

    servers: str
    topic: str
    partition: int
    start: int
    end: int
    codec: CodecOptions
    changelog: ChangelogRows

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        from confluent_kafka import KafkaError, TopicPartition  # noqa: PLC0415

        from ..codec import Message, make_decoder  # noqa: PLC0415

        decoder = make_decoder(self.codec)
        consumer = _consumer(self.servers)
        try:
            consumer.assign([TopicPartition(self.topic, self.partition, self.start)])
            deadline = time.monotonic() + _KAFKA_TIMEOUT_S
            at = self.start
            while at < self.end:
                batch = consumer.consume(1000, 1.0)
                if not batch:
                    # Offsets without a deliverable message (transaction markers) end a range early.
                    pos = consumer.position([TopicPartition(self.topic, self.partition)])[0].offset
                    if pos >= self.end:
                        break
                    if time.monotonic() > deadline:
                        raise CaptureError(
                            f"kafka: no message at offset {at} of [{self.start}, {self.end}) within "
                            f"{_KAFKA_TIMEOUT_S:.0f} s",
                            where=f"{self.topic}[{self.partition}]",
                        )
                    continue
                deadline = time.monotonic() + _KAFKA_TIMEOUT_S
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise CaptureError(f"kafka: {err.str()}", where=f"{self.topic}[{self.partition}]@{at}")
                    offset = msg.offset()
                    if offset >= self.end:
                        at = offset
                        break
                    at = offset + 1
                    where = f"{self.topic}[{self.partition}]@{offset}"
                    message = Message(key=msg.key(), value=msg.value(), partition=self.partition, topic=self.topic)
                    for ev in decoder.decode(message, where):
                        ev.position = {"topic": self.topic, "partition": self.partition, "offset": offset}
                        row = self.changelog.row(ev)
                        if row is not None:
                            yield row
        finally:
            consumer.close()


class KafkaInput(Input):
    """A Kafka topic written by our KafkaSink or by TiCDC. Offsets: ``{"topic", "offsets": {partition: next}}``."""

    OPTIONS = _KAFKA_KEYS
    ANY_CODEC_OPTION = True
    NO_PATH = True

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        extra = opts.extra
        servers = extra.get("kafka.bootstrap.servers") or extra.get("bootstrap.servers") or ""
        self.topic = extra.get("topic") or (str(opts.path) if str(opts.path) not in ("", ".") else "")
        if not servers or not self.topic:
            raise ConfigError("input kafka needs options bootstrap.servers (or kafka.bootstrap.servers) and topic")
        self.servers = servers
        mapping = {k: v for k, v in extra.items() if k not in _KAFKA_KEYS}
        mapping.setdefault("protocol", "canal-json")
        mapping.setdefault("time-zone", opts.time_zone)
        self.codec = CodecOptions.from_mapping(mapping)
        if self.codec.protocol not in ("canal-json", "open-protocol"):
            # Simple's decoder keeps schemas across messages (BOOTSTRAP): a range read cannot start midway.
            raise ConfigError(f"input kafka reads canal-json or open-protocol, not {self.codec.protocol!r}")
        if self.codec.protocol == "canal-json" and not self.codec.enable_tidb_extension:
            raise ConfigError("input kafka with canal-json needs enable-tidb-extension=true (commit ts, watermarks)")
        if opts.table is not None:
            raise ConfigError("input kafka has no typed images: the table option is not supported")
        self.starting = extra.get("startingoffsets", "earliest").strip()
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled into executors; a librdkafka handle is not picklable (nor needed there).
        return {**self.__dict__, "_client": None}

    def _consumer(self) -> Any:
        if self._client is None:
            self._client = _consumer(self.servers)
        return self._client

    def _partitions(self) -> list[int]:
        from confluent_kafka import KafkaException  # noqa: PLC0415

        try:
            meta = self._consumer().list_topics(self.topic, timeout=_KAFKA_TIMEOUT_S).topics.get(self.topic)
        except KafkaException as exc:
            raise ConfigError(f"kafka: cannot read metadata of topic {self.topic!r}: {exc}") from exc
        if meta is None or meta.error is not None or not meta.partitions:
            why = meta.error.str() if meta is not None and meta.error is not None else "no partitions"
            raise ConfigError(f"kafka: topic {self.topic!r} at {self.servers} is not readable: {why}")
        return sorted(meta.partitions)

    def partition_ids(self) -> list[int]:
        """The topic's partitions (driver side; for the apply job's merge)."""
        try:
            return self._partitions()
        finally:
            self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def watermarks(self) -> dict[int, tuple[int, int]]:
        """Partition -> (low, high) offsets; high is the next offset to be written.

        tansu (the test broker) answers a ListOffsets request with the last batch's first offset
        + 1, not the end. Fetching from (reported - 1) returns the true high watermark with the
        fetch response, read by ``cached=True``; on Kafka both answers are the same.
        """
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        consumer = self._consumer()
        out: dict[int, tuple[int, int]] = {}
        fetch: list[TopicPartition] = []
        for p in self._partitions():
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=_KAFKA_TIMEOUT_S)
            out[p] = (low, high)
            if high > low:
                fetch.append(TopicPartition(self.topic, p, high - 1))
        if fetch:
            consumer.assign(fetch)
            waiting = {tp.partition for tp in fetch}
            # Bounded: on Kafka the first answer is already right, and a partition whose last offset
            # holds nothing deliverable (a transaction marker) keeps the reported value.
            deadline = time.monotonic() + _WATERMARK_FETCH_S
            while waiting and time.monotonic() < deadline:
                for msg in consumer.consume(len(waiting) * 10, 0.5):
                    waiting.discard(msg.partition())
            consumer.unassign()
            for tp in fetch:
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, tp.partition), cached=True)
                if high is not None and high >= 0:
                    out[tp.partition] = (out[tp.partition][0], max(out[tp.partition][1], high))
        return out

    def table_schema(self) -> TableSchema | None:
        return None

    def initial_offset(self) -> dict[str, Any]:
        marks = self.watermarks()
        if self.starting.lower() == "earliest":
            return {"topic": self.topic, "offsets": {str(p): low for p, (low, _) in marks.items()}}
        if self.starting.lower() == "latest":
            return {"topic": self.topic, "offsets": {str(p): high for p, (_, high) in marks.items()}}
        try:
            given = orjson.loads(self.starting)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"startingOffsets must be earliest, latest or JSON: {exc}") from None
        if isinstance(given, dict) and isinstance(given.get(self.topic), dict):
            given = given[self.topic]  # Spark's Kafka form {"topic": {"0": 23}}
        if not isinstance(given, dict):
            raise ConfigError(f'startingOffsets JSON must be {{"{self.topic}": {{"0": offset}}}}, got {self.starting}')
        offsets: dict[str, int] = {}
        for p, (low, high) in marks.items():
            value = int(given.get(str(p), -2))
            offsets[str(p)] = low if value == -2 else high if value == -1 else value
        return {"topic": self.topic, "offsets": offsets}

    def available_now_target(self) -> dict[str, Any]:
        return {"topic": self.topic, "offsets": {str(p): high for p, (_, high) in self.watermarks().items()}}

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        seen = target if target is not None else self.available_now_target()
        begin = {str(k): int(v) for k, v in start.get("offsets", {}).items()}
        share = max(1, max_events // max(1, len(seen["offsets"]))) if max_events else None
        offsets: dict[str, int] = {}
        for p, high in seen["offsets"].items():
            first = begin.get(p, 0)
            offsets[p] = max(first, min(int(high), first + share) if share else int(high))
        return {"topic": self.topic, "offsets": offsets}

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        begin = start.get("offsets", {})
        return [
            KafkaRange(self.servers, self.topic, int(p), int(begin.get(p, 0)), int(high), self.codec, changelog)
            for p, high in sorted(end["offsets"].items(), key=lambda kv: int(kv[0]))
            if int(high) > int(begin.get(p, 0))
        ]


# ---------------------------------------------------------------------------------------- kv

_KV_SUFFIXES = (".jsonl", ".parquet")
_KV_DEFAULT_BYTES = 32 << 20


def _kv_files(root: Path) -> list[Path]:
    """The records files under ``root`` (or ``root`` itself), in name order: new files sort after old ones."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise ConfigError(f"no such kv records file or directory: {root}")
    return sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(_KV_SUFFIXES))


@dataclass
class KVSplit(InputPartition):
    """One piece of a records file, mounted in an executor: Parquet row groups, or a JSONL byte range.

    A JSONL range owns the lines that *start* inside [start, end), so splitting needs no reading on
    the driver and every line is mounted by exactly one partition.
    """

    path: str
    mounter: Any  # Mounter: picklable, recompiles its decoders on first use
    changelog: ChangelogRows
    encoding: str | None
    row_groups: list[int] | None = None
    first_row: int = 0
    start: int = 0
    end: int = 0

    def __post_init__(self) -> None:
        InputPartition.__init__(self, None)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        yield from self.changelog.rows(self.events())

    def events(self) -> Iterator[Event]:
        from ..capture.mounter import decode_batch  # noqa: PLC0415

        if self.row_groups is not None:
            import pyarrow.parquet as pq  # noqa: PLC0415

            first = self.first_row
            for batch in pq.ParquetFile(self.path).iter_batches(batch_size=8192, row_groups=self.row_groups):
                yield from decode_batch(batch, self.mounter, self.path, first)
                first += batch.num_rows
            return
        yield from self.mounter.mount_all(self._jsonl(), where=self.path + ":@{loc}")

    def _jsonl(self) -> Iterator[tuple[Any, int]]:
        from ..capture.mounter import record_from_object  # noqa: PLC0415

        with open(self.path, "rb") as fh:
            at = self.start
            if at > 0:
                fh.seek(at - 1)
                if fh.read(1) != b"\n":
                    at += len(fh.readline())  # the line that straddles `start` belongs to the previous range
            fh.seek(at)
            while at < self.end:
                line = fh.readline()
                if not line:
                    break
                where = at
                at += len(line)
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                    yield record_from_object(obj, self.encoding), where
                except orjson.JSONDecodeError as exc:
                    raise CaptureError(f"invalid JSON: {exc}", where=f"{self.path}:@{where}") from None
                except CaptureError as exc:
                    raise CaptureError(exc.message, where=f"{self.path}:@{where}") from None


class KVInput(Input):
    """TiKV change records (JSONL or Parquet, docs/mounter.md) mounted into rows with a catalog.

    The seed's mounter workers become Spark tasks: each Parquet row group and each
    ``bytesPerPartition`` slice of a JSONL file is one partition. Offsets: ``{"files": N}``, the
    number of records files (in name order) read so far, so a directory can be followed as
    files are added; a file is read once, whole (add files, do not append to them).
    """

    OPTIONS = frozenset({"catalog", "encoding", "skip-unknown-tables", "verify-checksum", "bytesperpartition"})

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        from ..capture.mounter import Catalog, Mounter  # noqa: PLC0415

        extra = opts.extra
        if not extra.get("catalog"):
            raise ConfigError("input kv needs option catalog: the catalog JSON of TiDB table infos")
        self.encoding = extra.get("encoding") or None
        if self.encoding not in (None, "base64", "hex"):
            raise ConfigError(f"encoding must be base64 or hex, got {self.encoding!r}")
        try:
            self.split_bytes = int(extra.get("bytesperpartition", str(_KV_DEFAULT_BYTES)))
        except ValueError:
            raise ConfigError("bytesPerPartition must be an integer") from None
        if self.split_bytes <= 0:
            raise ConfigError("bytesPerPartition must be positive")
        self.mounter = Mounter(
            Catalog.load(extra["catalog"]),
            opts.time_zone,
            skip_unknown_tables=_truthy(extra.get("skip-unknown-tables")),
            verify_checksum=_truthy(extra.get("verify-checksum")),
        )
        _kv_files(opts.path)  # fail now on a missing path

    def table_schema(self) -> TableSchema | None:
        if self.opts.table is not None:
            raise ConfigError("input kv has no typed images yet: the table option is not supported")
        return None

    def initial_offset(self) -> dict[str, Any]:
        return {"files": 0}

    def available_now_target(self) -> dict[str, Any]:
        return {"files": len(_kv_files(self.opts.path))}

    def latest_offset(self, start: dict[str, Any], max_events: int | None, target: dict[str, Any] | None) -> dict:
        seen = target if target is not None else self.available_now_target()
        return {"files": max(int(start["files"]), int(seen["files"]))}

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any], changelog: ChangelogRows
    ) -> Sequence[InputPartition]:
        import pyarrow.parquet as pq  # noqa: PLC0415

        parts: list[InputPartition] = []
        for path in _kv_files(self.opts.path)[int(start["files"]) : int(end["files"])]:
            name = str(path)
            if name.endswith(".parquet"):
                meta = pq.ParquetFile(name).metadata
                first = 0
                for i in range(meta.num_row_groups):
                    parts.append(KVSplit(name, self.mounter, changelog, self.encoding, [i], first))
                    first += meta.row_group(i).num_rows
            else:
                size = path.stat().st_size
                step = self.split_bytes
                for at in range(0, max(size, 1), step):
                    parts.append(KVSplit(name, self.mounter, changelog, self.encoding, None, 0, at, at + step))
        return parts


INPUTS: dict[str, type[Input]] = {"storage": StorageInput, "binlog": BinlogInput, "kafka": KafkaInput, "kv": KVInput}
"""``input`` option -> its class."""


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
