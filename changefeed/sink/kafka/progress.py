"""What the broker has acknowledged, as a position a job may checkpoint.

TiCDC advances a table's checkpoint only when Kafka acknowledged every message up to it (the
callbacks chained on the last message of a batch, spec §1.2). Here every produced message gets a
sequence number; a *mark* (commit ts + source position) is placed after the messages that carry a
complete transaction; the flushed position is the last mark whose messages, and all earlier
ones, are acknowledged. Pure: no broker, testable alone.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...model import Position


@dataclass(frozen=True, slots=True)
class FlushedPosition:
    """Everything with commit ts <= ``commit_ts`` is acknowledged; ``position`` is the source
    position of the last such event (what a job checkpoints to resume after it)."""

    commit_ts: int
    position: Position | None = None


class AckTracker:
    """Sequence numbers for sent messages, their acknowledgements, and marks between them."""

    def __init__(self) -> None:
        self._next = 0
        self._acked_upto = -1  # every seq <= this is acknowledged
        self._early: set[int] = set()  # acknowledged out of order (another partition was faster)
        self._marks: deque[tuple[int, FlushedPosition]] = deque()
        self._flushed: FlushedPosition | None = None

    def sent(self) -> int:
        seq = self._next
        self._next += 1
        return seq

    def acked(self, seq: int) -> None:
        if seq != self._acked_upto + 1:
            self._early.add(seq)
            return
        self._acked_upto = seq
        early = self._early
        while early and self._acked_upto + 1 in early:
            self._acked_upto += 1
            early.remove(self._acked_upto)

    def mark(self, position: FlushedPosition) -> None:
        """``position`` is complete once every message sent so far is acknowledged."""
        if self._marks and self._marks[-1][0] == self._next - 1:
            self._marks[-1] = (self._next - 1, position)
        else:
            self._marks.append((self._next - 1, position))

    @property
    def in_flight(self) -> int:
        return self._next - 1 - self._acked_upto

    def flushed(self) -> FlushedPosition | None:
        marks = self._marks
        while marks and marks[0][0] <= self._acked_upto:
            self._flushed = marks.popleft()[1]
        return self._flushed
