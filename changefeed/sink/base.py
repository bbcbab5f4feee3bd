"""What a sink is: the one interface every destination implements and every job drives.

A job runs ``open()`` once, then per micro-batch ``write(batch)`` and ``flush()``, and ``close()``
at the end, also after a failure. The contract that makes a job exactly once with nothing lost:

* ``open() -> int``: connect or recover (a storage writer removes a crashed flush's files) and
  return the checkpoint ts this destination already holds (0: none, or the destination keeps
  none, as a Kafka topic does: its consumers keep theirs).
* ``write(batch)``: events of whole transactions in commit order (a `Resolved` closes what it
  covers); nothing is durable yet. Events at or below the checkpoint are a restart's replay:
  skipped, or written idempotently, so a replayed batch changes nothing twice.
* ``flush() -> int``: make everything written durable and return the checkpoint ts that is now
  durable. A job commits its source offsets only after this returns.
* ``flush_async() -> Pending`` (`PipelinedSink`, sinks whose server applies in the background):
  hand everything written over as ``flush`` does without waiting; its ``wait()`` returns the
  checkpoint ts once it is durable. A job whose source can resume from its own saved position (the Kafka merge
  state) overlaps a batch's last statements with the next batch this way.
* ``close()``: release connections and buffers. It never flushes: what was written and not
  flushed belongs to a batch that failed, and is not made durable (a Kafka producer drops its
  queue). A clean ``with`` block flushes before it closes.

Sinks whose rows can be encoded elsewhere (in Spark executors) also take pre-encoded items
(`EncodedSink`); the replay rule then lives in their item-taking path too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from ..model import Event
from ..model.rowblock import RowBlock

Batch = Iterable[Event | RowBlock]
"""A micro-batch's events in commit order: row changes (or blocks of them), DDL, resolved ts."""


@runtime_checkable
class Sink(Protocol):
    """A destination of change events: storage directory, Kafka topic, MySQL database, Parquet snapshots."""

    #: ``storage``, ``kafka``, ``mysql`` or ``parquet``: metrics labels and the status file name it.
    kind: str

    def open(self) -> int: ...

    def write(self, batch: Batch) -> None: ...

    def flush(self) -> int: ...

    def close(self) -> None: ...


class Pending(Protocol):
    """What `PipelinedSink.flush_async` handed over, on its way to being durable."""

    def done(self) -> bool:
        """Whether it ended (durable, or failed): `wait` returns or raises at once."""
        ...

    def wait(self) -> int:
        """Until it is durable; the checkpoint ts it reached (raises what failed)."""
        ...


@runtime_checkable
class PipelinedSink(Sink, Protocol):
    """A sink that makes a batch durable in the background (`MySQLSink`'s applier thread)."""

    def flush_async(self) -> Pending:
        """`flush` without waiting for it."""
        ...


@runtime_checkable
class EncodedSink(Sink, Protocol):
    """A sink that also takes items its encoder made elsewhere (`StorageEncoder`, `KafkaEncoder`)."""

    def write_encoded(self, items: Iterable[Any]) -> None: ...


class SinkContext(ABC):
    """``with sink:`` opens it, flushes on a clean exit and closes it either way (`Sink`'s contract)."""

    @abstractmethod
    def open(self) -> int: ...

    @abstractmethod
    def flush(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()
