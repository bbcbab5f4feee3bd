"""Lake table maintenance shared by the formats: when it runs, what a failed run does, its error.

Why: a table fed every micro-batch gains small files and history with every commit. Compaction
(``optimize-every``) and retention (``retain-versions``) keep it readable (docs/lakehouse.md,
"Maintenance"). Both run after a table's commits of a flush once the table has gained
`LakeOptions.maintenance_every` versions (Delta versions, Iceberg snapshots) since the end of the
previous run, so maintenance's own commits do not count. Where the previous run ended is kept in
the table (Delta: the newest maintenance commit; Iceberg: a table property), so a job restarted
often (``--available-now`` runs) gets there too. Every maintenance commit records the table's
current checkpoint ts like a data commit does, so resume (`LakeSink.open`) and time travel by
commit ts see it as one more version of the same rows. A failed run leaves what the batch
committed as it is: it is logged and tried again at the next interval, never failing the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ...files.paths import table_label
from .common import LakeError, Name

log = logging.getLogger(__name__)


class ExpiredVersionError(LakeError):
    """Time travel to a commit ts older than the versions a table keeps (``retain-versions`` dropped them)."""


class Cadence:
    """When a table's maintenance is due: ``every`` versions since the previous run ended."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._ran: dict[Name, int] = {}

    def due(self, name: Name, count: int, last_run: Callable[[], int]) -> bool:
        """Whether to run at the table's version count ``count``; ``last_run`` reads from the table
        where the previous run ended (once per table and process; 0: never ran)."""
        if self.every <= 0:
            return False
        if name not in self._ran or count < self._ran[name]:  # first look, or another table by that name now
            self._ran[name] = last_run()
        return count - self._ran[name] >= self.every

    def ran(self, name: Name, count: int) -> None:
        """The count after a run (also one that committed nothing or failed: the next try is ``every`` on)."""
        self._ran[name] = count


@contextmanager
def best_effort(kind: str, name: Name, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Run maintenance; a format error is logged, not raised: the data commits before it stand."""
    try:
        yield
    except errors as exc:
        log.warning(
            "%s %s: maintenance failed, tried again at the next interval: %s",
            kind,
            table_label(*name),
            exc,
            extra={"sink": kind, "table": f"{name[0]}.{name[1]}", "error": str(exc)},
        )


__all__ = ["Cadence", "ExpiredVersionError", "best_effort"]
