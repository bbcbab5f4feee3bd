"""``input=snapshot``: a live server's tables as a batch DataFrame, read chunk by chunk in Spark's tasks.

``spark.read.format("changefeed").option("input", "snapshot").option("url", URL).load()`` gives the
changelog of a snapshot (DDL, then INSERT rows, per table; ``table=`` types the images), the same
rows a stream with ``input=binlog`` and ``snapshot=initial-only`` emits, so a user can bootstrap a
lake table from Spark directly. It is a batch read only: a stream takes the binlog input, whose
snapshot hands over to the binlog (docs/snapshot.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pyspark.sql.datasource import InputPartition

from ...capture.snapshot.reader import DEFAULT_CHUNK_SIZE
from ...errors import ConfigError, positive_int
from ...model import TableSchema
from ..changelog import ChangelogRows
from .binlog import BinlogServer, _source
from .options import Input, SourceOptions
from .snapshot import snapshot_partitions, snapshot_reader


class SnapshotInput(Input):
    """Options: ``url`` (and ``password``), ``snapshotChunkSize``, plus the common ``filter``/``table``."""

    OPTIONS = frozenset({"url", "password", "snapshotchunksize"})
    NO_PATH = True
    NOT_STREAMING: ClassVar[str] = (
        "is a batch read (spark.read); a stream takes input binlog with snapshot initial or initial-only"
    )

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        if not opts.extra.get("url"):
            raise ConfigError("input snapshot reads a live server: give option url")
        source = _source(opts)
        assert isinstance(source, BinlogServer)
        source.check()  # each chunk reads the binlog between its watermarks
        self.server = source
        size = opts.extra.get("snapshotchunksize")
        self.chunk_size = positive_int(size, "snapshotChunkSize") if size else DEFAULT_CHUNK_SIZE

    def table_schema(self) -> TableSchema | None:
        if self.opts.table is None:
            return None
        return snapshot_reader(self.server, self.opts.time_zone, self.chunk_size).table_schema(*self.opts.table)

    def batch_partitions(self, changelog: ChangelogRows) -> Sequence[InputPartition]:
        return snapshot_partitions(self.server, self.opts.time_zone, self.chunk_size, changelog)

    def initial_offset(self) -> dict[str, Any]:
        raise ConfigError(f"input snapshot {self.NOT_STREAMING}")
