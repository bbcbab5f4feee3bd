"""Table comparison between two MySQL/MariaDB servers (``changefeed diff``)."""

from .compare import SESSION_SQL_MODE, Differ, DiffError, DiffReport, RowDiff, TableReport

__all__ = ["SESSION_SQL_MODE", "DiffError", "DiffReport", "Differ", "RowDiff", "TableReport"]
