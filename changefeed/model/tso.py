"""TiDB TSOs, and the TSO-shaped commit timestamps we derive for MySQL/MariaDB sources.

A TSO is ``(physical milliseconds << 18) | logical`` (spec §0.1). MySQL has no TSO, so a binlog
source derives one per transaction from the commit time: ``(commit_ms << 18) | logical``, where
``logical`` counts transactions that share (or would go backwards from) the previous physical
millisecond. The result is strictly increasing along the binlog, so every consumer's ordering,
dedupe and resolved-ts logic keeps working. The clock's last value is part of the source position,
so a capture resumed from a savepoint derives exactly the same timestamps again.
"""

from __future__ import annotations

from dataclasses import dataclass

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
MAX_TSO = (1 << 64) - 1


def compose_tso(physical_ms: int, logical: int = 0) -> int:
    if not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"logical part {logical} does not fit in {LOGICAL_BITS} bits")
    if physical_ms < 0 or physical_ms >> (64 - LOGICAL_BITS):
        raise ValueError(f"physical time {physical_ms} ms does not fit a TSO")
    return (physical_ms << LOGICAL_BITS) | logical


def tso_physical_ms(tso: int) -> int:
    """Milliseconds since the epoch (canal-json ``es`` is exactly this)."""
    return tso >> LOGICAL_BITS


def tso_logical(tso: int) -> int:
    return tso & LOGICAL_MASK


@dataclass(slots=True)
class CommitClock:
    """Derives strictly increasing TSO-shaped commit timestamps from binlog commit times.

    ``last`` is the previous timestamp handed out; persist it with the position and pass it back
    on resume.
    """

    last: int = 0

    def next(self, commit_time_ms: int) -> int:
        candidate = compose_tso(max(commit_time_ms, 0))
        ts = candidate if candidate > self.last else self.last + 1
        self.last = ts
        return ts
