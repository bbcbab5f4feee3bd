"""Data source options and the `Input` contract every input implements."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pyspark.sql.datasource import InputPartition

from ...errors import ConfigError
from ...model import TableSchema
from ...timezones import zone
from ..changelog import ChangelogRows, parse_rules, parse_table

log = logging.getLogger(__name__)


NAME = "changefeed"
#: Options every input understands (Spark hands them over lower-cased).
_COMMON = frozenset(
    {"input", "path", "filter", "table", "events", "maxeventspertrigger", "maxbytespertrigger", "timezone"}
    | {"time-zone", "output"}
)
#: The public output: one changelog row per event (docs/spark.md). Other outputs are internal
#: hand-overs between a source and a job's next stage (`Input.OUTPUTS`), never per-row JSON.
CHANGELOG = "changelog"


def _truthy(value: str | None) -> bool:
    return str(value or "").lower() in ("1", "true", "yes", "on")


_SIZE = re.compile(r"(\d+)\s*([kmg]i?b?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(name: str, text: str) -> int:
    """A positive byte count: digits with an optional ``k``/``m``/``g`` (``KiB``, ``MB``, ... all binary)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ConfigError(f"{name} must be a byte count such as 67108864 or 64m, got {text[:40]!r}")
    value = int(m.group(1)) * _UNITS[(m.group(2) or "")[:1].lower()]
    if value <= 0:
        raise ConfigError(f"{name} must be positive")
    return value


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
    output: str = CHANGELOG
    max_bytes: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        # Without ``input``: a storage-sink directory, so the notebook one-liner
        # ``spark.read.format("changefeed").option("protocol", "canal-json").load(path)`` just works.
        kind = opts.get("input") or "storage"
        if kind not in INPUTS:
            known = ", ".join(sorted(INPUTS))
            raise ConfigError(f"option input must be one of {known}, got {kind!r}")
        if not opts.get("path") and INPUTS[kind].needs_path(opts):
            raise ConfigError(f"input {kind} needs a path: .option('path', DIR) or .load(DIR)")
        max_events = opts.get("maxeventspertrigger")
        try:
            limit = int(max_events) if max_events else None
        except ValueError:
            raise ConfigError(f"maxEventsPerTrigger must be an integer, got {max_events!r}") from None
        if limit is not None and limit <= 0:
            raise ConfigError("maxEventsPerTrigger must be positive")
        size = opts.get("maxbytespertrigger")
        max_bytes = parse_size("maxBytesPerTrigger", size) if size else None
        if max_bytes is not None and INPUTS[kind].NO_BYTES_LIMIT:
            raise ConfigError(f"maxBytesPerTrigger: input {kind} {INPUTS[kind].NO_BYTES_LIMIT}")
        tz = opts.get("timezone") or opts.get("time-zone") or "UTC"
        zone(tz)
        output = (opts.get("output") or CHANGELOG).lower()
        if output != CHANGELOG and output not in INPUTS[kind].OUTPUTS:
            known = ", ".join(sorted({CHANGELOG, *INPUTS[kind].OUTPUTS}))
            raise ConfigError(f"option output of input {kind} must be one of {known}, got {output!r}")
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
            output=output,
            max_bytes=max_bytes,
        )

    def changelog(self, typed: TableSchema | None) -> ChangelogRows:
        return ChangelogRows(self.rules, self.table, typed, self.with_event)


class Input:
    """One kind of source. Offsets are JSON dicts; `partitions` carry everything `rows` needs."""

    OPTIONS: ClassVar[frozenset[str]] = frozenset()
    ANY_CODEC_OPTION: ClassVar[bool] = False
    NO_PATH: ClassVar[bool] = False  # True: the input is not a directory (kafka)
    #: Outputs besides the changelog, name -> Spark DDL schema of its rows (see `CHANGELOG`).
    OUTPUTS: ClassVar[Mapping[str, str]] = {}
    #: The read limit per micro-batch without ``maxEventsPerTrigger`` (None: all available).
    DEFAULT_MAX_EVENTS: ClassVar[int | None] = None
    #: Why ``maxBytesPerTrigger`` cannot apply to this input ("": it does).
    NO_BYTES_LIMIT: ClassVar[str] = "cannot bound a micro-batch in bytes"
    #: Why this input cannot be read as a stream ("": it can).
    NOT_STREAMING: ClassVar[str] = ""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    @classmethod
    def needs_path(cls, options: Mapping[str, str]) -> bool:
        """Whether these (lower-cased) options must name a path; binlog reads a server instead when given a url."""
        return not cls.NO_PATH

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

    def batch_partitions(self, changelog: ChangelogRows) -> Sequence[InputPartition]:
        """A batch read's partitions: everything available now, from the first offset to the latest."""
        start = self.initial_offset()
        return self.partitions(start, self.latest_offset(start, None, None), changelog)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed the batch ending at ``end`` (late: at the next planning); nothing to do by default."""


INPUTS: dict[str, type[Input]] = {}
"""``input`` option -> its class (filled by the package: one entry per input module)."""
