"""What the sinks report as they work (errors, retries, Kafka delivery latency), to whoever listens.

Why an interface here: the sinks sit below the operations layer (`changefeed.ops`), which shows
these figures as Prometheus metrics; a sink that imported `ops.metrics` would tie the two layers
into a loop. `ops.metrics` registers itself with `set_observer` when it is imported (every job
imports it); until then reports go nowhere.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SinkObserver", "observer", "set_observer"]


class SinkObserver(Protocol):
    def sink_error(self, sink: str, *, retried: bool) -> None:
        """A sink failed an operation: ``retried`` if it will try again, else it gave up."""

    def kafka_delivered(self, seconds: float | None) -> None:
        """One message acknowledged by the broker after ``seconds`` (None: unknown)."""

    def shard_ddl(self, target: str, shard: str, query: str, outcome: str, commit_ts: int) -> None:
        """A shard's DDL decided on its merged table: ``outcome`` is ``applied``, ``skipped: why`` or
        ``conflict: why`` (DM's optimistic mode; the job stops on a conflict)."""


class _Nobody:
    def sink_error(self, sink: str, *, retried: bool) -> None:
        """No one listens."""

    def kafka_delivered(self, seconds: float | None) -> None:
        """No one listens."""

    def shard_ddl(self, target: str, shard: str, query: str, outcome: str, commit_ts: int) -> None:
        """No one listens."""


_observer: SinkObserver = _Nobody()


def observer() -> SinkObserver:
    """The registered observer (a no-op one when none is)."""
    return _observer


def set_observer(new: SinkObserver) -> None:
    global _observer  # noqa: PLW0603 - one process-wide listener, as Prometheus' registry is
    _observer = new
