"""Table comparison between two MySQL/MariaDB servers (``changefeed diff``)."""

from .compare import Differ, DiffError, DiffReport, RowDiff, TableReport

__all__ = ["DiffError", "DiffReport", "Differ", "RowDiff", "TableReport"]
