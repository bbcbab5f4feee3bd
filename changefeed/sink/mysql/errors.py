"""Which MySQL errors are worth a retry, and which DDL errors mean "already done".

Syncer (seed 003) decides whether a DDL must be re-run from the standard MySQL error it returns;
DM keeps the same list (``isDDLExistsErr``-style checks). A DDL replayed after a crash between
running it and saving the checkpoint fails with exactly these codes, so they are logged and
skipped; any other error stops the sink.
"""

from __future__ import annotations

from ...clients.mysql import InterfaceError, InternalError, MySQLError, OperationalError
from ...model import ActionType

__all__ = ["TRANSIENT_CODES", "ddl_already_done", "error_code", "is_transient"]

# Lost connection / gone away / can't connect / killed / shutdown, deadlock, lock wait timeout,
# too many connections, query interrupted (a KILL QUERY from an operator).
TRANSIENT_CODES = frozenset({2002, 2003, 2006, 2013, 2055, 1927, 1053, 1213, 1205, 1040, 1317})

_ALWAYS_DONE = {
    1007: "database exists",
    1050: "table exists",
    1060: "duplicate column name",
    1061: "duplicate key name",
    1068: "multiple primary key defined",
    1826: "duplicate foreign key constraint name",
    1022: "duplicate key (constraint already there)",
}
_DROP_DONE = {
    1008: "database doesn't exist",
    1051: "unknown table",
    1091: "can't drop: column or key doesn't exist",
    1146: "table doesn't exist",
    1049: "unknown database",
    4092: "unknown view",
}
_DROPS = frozenset(
    {
        ActionType.DROP_SCHEMA,
        ActionType.DROP_TABLE,
        ActionType.DROP_VIEW,
        ActionType.DROP_COLUMN,
        ActionType.DROP_INDEX,
        ActionType.DROP_PRIMARY_KEY,
        ActionType.DROP_FOREIGN_KEY,
        ActionType.DROP_SEQUENCE,
        ActionType.DROP_TABLE_PARTITION,
        ActionType.RENAME_TABLE,
        ActionType.RENAME_TABLES,
    }
)


def error_code(exc: BaseException) -> int | None:
    if isinstance(exc, MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def is_transient(exc: BaseException) -> bool:
    """Errors after which reconnecting and re-running the whole transaction can succeed."""
    if isinstance(exc, InterfaceError | ConnectionError | TimeoutError):
        return True  # the socket is gone (PyMySQL raises InterfaceError on a closed connection)
    code = error_code(exc)
    if code is None:
        # PyMySQL's protocol-level errors ("Packet sequence number wrong" after an unsolicited
        # kill packet) carry no MySQL code: the connection is unusable, a new one may work.
        return isinstance(exc, InternalError | OperationalError)
    return code in TRANSIENT_CODES


def ddl_already_done(code: int | None, action: int) -> str | None:
    """Why a DDL error means the DDL already ran (to log), or None when it is a real failure.

    "Doesn't exist" errors count only for DDLs that remove or rename things (a replayed DROP or
    RENAME); an ALTER of a missing table is a real problem.
    """
    if code is None:
        return None
    if code in _ALWAYS_DONE:
        return _ALWAYS_DONE[code]
    if code in _DROP_DONE and action in _DROPS:
        return _DROP_DONE[code]
    if code == 1054 and action == ActionType.MODIFY_COLUMN:
        return "unknown column (a replayed CHANGE/RENAME COLUMN)"
    return None
