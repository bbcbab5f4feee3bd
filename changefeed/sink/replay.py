"""The sinks' replay rule, and what is not a replay.

A sink skips rows at or below the checkpoint it *stored* when the run began: a restart resumes
the source from that checkpoint's position or earlier, so those rows are already downstream.
Within one run a Resolved(R) event promises that every commit ts <= R was delivered; a row at or
below a Resolved the sink already received in the same run contradicts that promise. It is a
broken stream (a lost, reordered or merged-twice message upstream), not a replay: skipping it
would drop a row silently, so the sinks raise `ResolvedContradictionError` instead.

A run ends where the sink's in-memory state ends: a new sink object (the Spark jobs build one per
query and stop the query on any failed micro-batch; Spark never re-runs a batch in the same query),
or `MySQLSink.close` followed by a new ``open`` (which reads the stored checkpoint again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import SinkError


class ResolvedContradictionError(SinkError):
    """A row at or below a Resolved ts the sink already received in the same run."""


class ResolvedGuard:
    """The highest Resolved ts received in this run, and the check every row goes through.

    ``stored`` is the checkpoint the sink read when the run began: rows at or below it are a
    restart's replay (`skip` is True); rows above it and at or below a Resolved of this run raise.
    """

    __slots__ = ("resolved", "sink", "stored", "what")

    def __init__(self, sink: str, stored: int) -> None:
        self.sink = sink
        self.stored = stored
        self.resolved = -1  # none received yet in this run
        self.what = "Resolved"

    def saw(self, resolved_ts: int, what: str = "Resolved") -> None:
        """A Resolved event, or (``what``) another promise of this run that every commit ts up to
        ``resolved_ts`` is in, such as a checkpoint it committed."""
        if resolved_ts > self.resolved:
            self.resolved = resolved_ts
            self.what = what

    def skip(self, commit_ts: int, schema: str, table: str, position: Mapping[str, Any] | None = None) -> bool:
        """True: a replayed row (at or below the stored checkpoint); raises for a contradicted one.

        Every row goes through here: the table's name is only put together for the error."""
        if commit_ts <= self.stored:
            return True
        if commit_ts <= self.resolved:
            raise _contradiction(self.sink, f"{schema}.{table}", commit_ts, position, self.resolved, self.what)
        return False


def _contradiction(
    sink: str,
    table: str,
    commit_ts: int,
    position: Mapping[str, Any] | None,
    resolved: int,
    what: str = "Resolved",
) -> ResolvedContradictionError:
    at = f"{table} commit ts {commit_ts}"
    if position:
        at += " position " + ",".join(f"{k}={v}" for k, v in position.items())
    return ResolvedContradictionError(
        f"{sink}: a row of {table} at commit ts {commit_ts} arrived after {what} {resolved} in the same run, "
        f"which promised every commit ts <= {resolved} was already delivered: the input stream is broken "
        "(not a restart's replay, which only repeats rows at or below the checkpoint stored when the run began)",
        where=f"{at}; contradicts {what} {resolved}",
    )
