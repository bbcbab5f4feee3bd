"""Numbers of the binlog format: event types, column types, flags.

From MySQL ``binlog_event.h`` and MariaDB ``log_event.h``.
"""

from __future__ import annotations

from enum import IntEnum

BINLOG_MAGIC = b"\xfebin"
HEADER_LEN = 19  # v4 common header: timestamp(4) type(1) server_id(4) event_size(4) log_pos(4) flags(2)
CHECKSUM_LEN = 4


class EventType(IntEnum):
    """``Log_event_type``: MySQL numbers below 50, MariaDB's own from 160."""

    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    SLAVE = 7
    APPEND_BLOCK = 9
    DELETE_FILE = 11
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    WRITE_ROWS_V0 = 20
    UPDATE_ROWS_V0 = 21
    DELETE_ROWS_V0 = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS_V2 = 30
    UPDATE_ROWS_V2 = 31
    DELETE_ROWS_V2 = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    # MariaDB
    ANNOTATE_ROWS = 160
    BINLOG_CHECKPOINT = 161
    MARIA_GTID = 162
    MARIA_GTID_LIST = 163
    START_ENCRYPTION = 164
    QUERY_COMPRESSED = 165
    WRITE_ROWS_COMPRESSED_V0 = 166
    UPDATE_ROWS_COMPRESSED_V0 = 167
    DELETE_ROWS_COMPRESSED_V0 = 168
    WRITE_ROWS_COMPRESSED_V1 = 169
    UPDATE_ROWS_COMPRESSED_V1 = 170
    DELETE_ROWS_COMPRESSED_V1 = 171


class RowsKind(IntEnum):
    INSERT = 0
    UPDATE = 1
    DELETE = 2


# event type -> (kind, rows-event version)
ROWS_EVENTS: dict[int, tuple[RowsKind, int]] = {
    EventType.WRITE_ROWS_V0: (RowsKind.INSERT, 0),
    EventType.UPDATE_ROWS_V0: (RowsKind.UPDATE, 0),
    EventType.DELETE_ROWS_V0: (RowsKind.DELETE, 0),
    EventType.WRITE_ROWS_V1: (RowsKind.INSERT, 1),
    EventType.UPDATE_ROWS_V1: (RowsKind.UPDATE, 1),
    EventType.DELETE_ROWS_V1: (RowsKind.DELETE, 1),
    EventType.WRITE_ROWS_V2: (RowsKind.INSERT, 2),
    EventType.UPDATE_ROWS_V2: (RowsKind.UPDATE, 2),
    EventType.DELETE_ROWS_V2: (RowsKind.DELETE, 2),
}

_COMPRESSED = "MariaDB compressed binlog events (log_bin_compress=ON) are not supported yet"
UNSUPPORTED_EVENTS: dict[int, str] = {
    EventType.QUERY_COMPRESSED: _COMPRESSED,
    EventType.WRITE_ROWS_COMPRESSED_V0: _COMPRESSED,
    EventType.UPDATE_ROWS_COMPRESSED_V0: _COMPRESSED,
    EventType.DELETE_ROWS_COMPRESSED_V0: _COMPRESSED,
    EventType.WRITE_ROWS_COMPRESSED_V1: _COMPRESSED,
    EventType.UPDATE_ROWS_COMPRESSED_V1: _COMPRESSED,
    EventType.DELETE_ROWS_COMPRESSED_V1: _COMPRESSED,
    EventType.START_ENCRYPTION: "encrypted binlogs (encrypt_binlog=ON) are not supported",
    EventType.TRANSACTION_PAYLOAD: "MySQL binlog transaction compression is not supported yet",
    EventType.PARTIAL_UPDATE_ROWS: "MySQL partial JSON updates (binlog_row_value_options=PARTIAL_JSON) are unsupported",
}


class ColumnType(IntEnum):
    """``enum_field_types`` as TABLE_MAP writes them (the binlog type, not always the SQL type)."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20
    VECTOR = 242
    INVALID = 243
    BOOL = 244
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


class OptionalMetadata(IntEnum):
    """``Table_map_event::Optional_metadata_field_type`` (binlog_row_metadata=FULL/MINIMAL)."""

    SIGNEDNESS = 1
    DEFAULT_CHARSET = 2
    COLUMN_CHARSET = 3
    COLUMN_NAME = 4
    SET_STR_VALUE = 5
    ENUM_STR_VALUE = 6
    GEOMETRY_TYPE = 7
    SIMPLE_PRIMARY_KEY = 8
    PRIMARY_KEY_WITH_PREFIX = 9
    ENUM_AND_SET_DEFAULT_CHARSET = 10
    ENUM_AND_SET_COLUMN_CHARSET = 11
    COLUMN_VISIBILITY = 12


# Event header flags
LOG_EVENT_BINLOG_IN_USE_F = 0x01  # set in the FDE of a binlog file the server still has open
LOG_EVENT_ARTIFICIAL_F = 0x20  # fake ROTATE / FDE a dump thread sends; its log_pos is not a position

# ROWS event flags
STMT_END_F = 0x0001

# MariaDB GTID event flags2 (log_event.h Gtid_log_event)
MARIA_FL_STANDALONE = 0x01
MARIA_FL_GROUP_COMMIT_ID = 0x02
MARIA_FL_TRANSACTIONAL = 0x04
MARIA_FL_DDL = 0x20
MARIA_FL_PREPARED_XA = 0x40
MARIA_FL_COMPLETED_XA = 0x80

# FORMAT_DESCRIPTION checksum algorithm byte
CHECKSUM_OFF = 0
CHECKSUM_CRC32 = 1
CHECKSUM_UNDEF = 255
