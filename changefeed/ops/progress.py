"""Progress bars for long one-shot work (capture from files, mount, diff, the benchmarks), on stderr.

A bar is drawn only when it helps a person: stderr is a terminal and ``--no-progress`` was not
given. Piped or redirected (CI, a log shipper, ``2> file``) nothing is written, so stderr stays
logs only; stdout (the data: JSONL events, diff reports) is never touched. ``CHANGEFEED_PROGRESS=1``
forces bars on (and ``=0`` off) for terminals that are not detected, and for tests.

`Progress` wraps tqdm so callers make the same three calls whether a bar is shown or not:
``update(n)`` (relative), ``advance_to(value)`` (absolute, e.g. bytes read from a position) and
``note(text)`` (what is being worked on).
"""

from __future__ import annotations

import argparse
import os
import sys
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["ENV", "Progress", "add_progress_option", "progress_enabled"]

ENV = "CHANGEFEED_PROGRESS"


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` on a command that draws bars."""
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr (default: one when stderr is a terminal)"
    )


def progress_enabled(stream: IO[str] | None = None, *, disabled: bool = False) -> bool:
    """Draw bars? Never with ``disabled`` (--no-progress); else ``CHANGEFEED_PROGRESS``, else a TTY check."""
    if disabled:
        return False
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """One bar (or nothing when disabled): ``with Progress("capture", total=n, unit="B") as bar: bar.update(k)``."""

    def __init__(
        self,
        desc: str,
        total: float | None = None,
        unit: str = "it",
        *,
        unit_scale: bool = False,
        enabled: bool | None = None,
        disabled: bool = False,
        stream: IO[str] | None = None,
    ) -> None:
        stream = stream if stream is not None else sys.stderr
        self.enabled = progress_enabled(stream, disabled=disabled) if enabled is None else enabled
        self.value: float = 0  # stays an int while updates are ints (tqdm prints 10/10, not 10.0/10)
        self._bar: tqdm[Any] | None = None
        if self.enabled:
            from tqdm import tqdm  # noqa: PLC0415 - only a drawn bar pays for the import

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                unit_scale=unit_scale,
                file=stream,
                dynamic_ncols=True,
                mininterval=0.25,
                leave=True,
            )

    def update(self, n: float = 1) -> None:
        self.value += n
        if self._bar is not None:
            self._bar.update(n)

    def advance_to(self, value: float) -> None:
        """Move to an absolute value (never backwards)."""
        if value > self.value:
            self.update(value - self.value)

    def set_total(self, total: float | None) -> None:
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def note(self, text: str) -> None:
        """Show what is being worked on (a table, a file) after the counts."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
