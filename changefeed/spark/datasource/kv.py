"""The `kv` input: TiDB KV change records mounted into rows in executors."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ...errors import CaptureError, ConfigError
from ...model import Event, TableSchema
from ..changelog import ChangelogRows
from .options import Input, SourceOptions, _truthy

log = logging.getLogger(__name__)

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

    def rows(self) -> Iterator[pa.RecordBatch]:
        yield from self.changelog.batches(self.changelog.rows(self.events()))

    def events(self) -> Iterator[Event]:
        from ...capture.mounter import decode_batch  # noqa: PLC0415

        if self.row_groups is not None:
            import pyarrow.parquet as pq  # noqa: PLC0415

            first = self.first_row
            for batch in pq.ParquetFile(self.path).iter_batches(batch_size=8192, row_groups=self.row_groups):
                yield from decode_batch(batch, self.mounter, self.path, first)
                first += batch.num_rows
            return
        yield from self.mounter.mount_all(self._jsonl(), where=self.path + ":@{loc}")

    def _jsonl(self) -> Iterator[tuple[Any, int]]:
        from ...capture.mounter import record_from_object  # noqa: PLC0415

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

    NO_BYTES_LIMIT: ClassVar[str] = "reads every new change file per micro-batch"
    OPTIONS = frozenset({"catalog", "encoding", "skip-unknown-tables", "verify-checksum", "bytesperpartition"})

    def __init__(self, opts: SourceOptions) -> None:
        super().__init__(opts)
        from ...capture.mounter import Catalog, Mounter  # noqa: PLC0415

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
