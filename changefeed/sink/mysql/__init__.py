"""MySQL/MariaDB sink: apply change events downstream exactly once (docs/mysql-sink.md)."""

from .checkpoint import CHECKPOINT_TABLE, Checkpoint, CheckpointTable
from .sink import DEFAULT_SQL_MODE, MySQLSink, MySQLSinkConfig
from .url import MySQLParams, mask_url, parse_mysql_url

__all__ = [
    "CHECKPOINT_TABLE",
    "DEFAULT_SQL_MODE",
    "Checkpoint",
    "CheckpointTable",
    "MySQLParams",
    "MySQLSink",
    "MySQLSinkConfig",
    "mask_url",
    "parse_mysql_url",
]
