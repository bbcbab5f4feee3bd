"""MySQL/MariaDB sink: apply change events downstream exactly once (docs/mysql-sink.md)."""

from .checkpoint import CHECKPOINT_TABLE, Checkpoint, CheckpointTable
from .sink import DEFAULT_SQL_MODE, MySQLSink, MySQLSinkConfig

__all__ = [
    "CHECKPOINT_TABLE",
    "DEFAULT_SQL_MODE",
    "Checkpoint",
    "CheckpointTable",
    "MySQLSink",
    "MySQLSinkConfig",
]
