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

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ...errors import ConfigError
from ...model import TableSchema
from ..changelog import ChangelogRows, changelog_schema, image_struct
from .binlog import BinlogInput
from .kafka import KafkaInput
from .kv import KVInput
from .options import CHANGELOG, INPUTS, NAME, Input, SourceOptions
from .storage import StorageInput
from .tables import SnapshotInput

INPUTS.update(
    {"storage": StorageInput, "binlog": BinlogInput, "kafka": KafkaInput, "kv": KVInput, "snapshot": SnapshotInput}
)

__all__ = [
    "INPUTS",
    "NAME",
    "BinlogInput",
    "ChangefeedDataSource",
    "Input",
    "KVInput",
    "KafkaInput",
    "SnapshotInput",
    "SourceOptions",
    "StorageInput",
    "register",
]


class _BatchReader(DataSourceReader):
    """Everything available now: storage up to the published checkpoint, binlog to its last transaction."""

    def __init__(self, source: Input, changelog: ChangelogRows) -> None:
        self.source = source
        self.changelog = changelog

    def partitions(self) -> Sequence[InputPartition]:
        return self.source.batch_partitions(self.changelog)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return partition.rows()  # type: ignore[attr-defined]


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
        return partition.rows()  # type: ignore[attr-defined]

    def commit(self, end: dict) -> None:
        """The sink's own checkpoint, not this call, makes a batch durable; the input may drop what the batch needed."""
        self.source.commit(end)


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

    def schema(self) -> StructType | str:
        if self.opts.output != CHANGELOG:
            return self.source.OUTPUTS[self.opts.output]  # an internal hand-over: its partitions yield Arrow batches
        typed = self._table()
        return changelog_schema(image_struct(typed) if typed is not None else None, self.opts.with_event)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(self.source, self.opts.changelog(self._table()))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        if self.source.NOT_STREAMING:
            raise ConfigError(f"input {self.opts.input} {self.source.NOT_STREAMING}")
        limit = self.opts.max_events or self.source.DEFAULT_MAX_EVENTS
        return _StreamReader(self.source, self.opts.changelog(self._table()), limit)


#: Spark checks a new name against every data source it can find, and a name another thread is
#: registering that moment counts as one: two queries starting together (`changefeed pipeline`)
#: failed with DATA_SOURCE_ALREADY_EXISTS. Registering again after a registration is allowed.
_REGISTERING = threading.Lock()


#: Spark 4's PythonStreamingSourceRunner, when a streaming query's source starts, ``put``s these keys
#: into the environment map of the registered data source's function: the very map every task of
#: that data source serializes (each function made from one registration shares it). A HashMap that
#: grows while another query's task is being written arrives as ``java.io.OptionalDataException``,
#: and since the stage's task bytes are made once, every retry fails the same way (`changefeed
#: pipeline`, two queries in one session). Present from the start, the keys are only ever replaced,
#: so the map keeps its shape. The values are placeholders: every Python runner sets its own.
_STREAMING_RUNNER_KEYS = {
    "SPARK_LOCAL_DIRS": "",
    "SPARK_AUTH_SOCKET_TIMEOUT": "15",
    "SPARK_BUFFER_SIZE": "65536",
    "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER",
}


def register(spark: Any, source: type[DataSource] | None = None) -> None:
    """Make ``format("changefeed")`` (or ``source``'s format) available in this session (idempotent, thread-safe)."""
    with _REGISTERING:
        context = getattr(spark, "_sc", None)  # a classic session's; Spark Connect makes the function on its server
        if context is not None:
            for key, value in _STREAMING_RUNNER_KEYS.items():
                context.environment.setdefault(key, value)
        spark.dataSource.register(source or ChangefeedDataSource)
