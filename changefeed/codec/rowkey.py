"""The integer row handle and TiKV record key of a row (canal-json ``_tidb.rowkey``, tiflow ``rid``).

TiDB clusters a single-column integer primary key by default (PKIsHandle): the key's value is
then the row handle. We cannot see a NONCLUSTERED override, so such a table is assumed to use
its primary key as the handle; other tables carry ``_tidb_rowid`` as ``RowChange.row_id``.
"""

from __future__ import annotations

import struct
from typing import Any

from ..model import Op, RowChange, TableSchema
from ..model.types import INTEGER_TYPES

_KEY = struct.Struct(">cQ2sQ")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1


def int_handle_position(ts: TableSchema) -> int | None:
    """Position of the integer primary key that TiDB uses as the row handle, if there is one."""
    pk = ts.primary_key
    if len(pk) == 1 and ts.columns[pk[0]].type_code in INTEGER_TYPES:
        return pk[0]
    return None


def record_key(table_id: int, handle: int) -> bytes:
    """``t`` + EncodeInt(tableID) + ``_r`` + EncodeInt(handle): sign bit flipped, big-endian (spec §6.2)."""
    return _KEY.pack(b"t", (table_id & _MASK) ^ _SIGN, b"_r", (handle & _MASK) ^ _SIGN)


def row_key(row: RowChange, handle_pos: int | None) -> bytes | None:
    """The TiKV record key of ``row``, or None when it has no int handle we can see."""
    table_id = row.physical_table_id
    if table_id <= 0:
        return None
    handle: Any = None
    if handle_pos is not None:
        image = row.old if row.op is Op.DELETE else row.new
        if image is not None:
            handle = image[handle_pos]
    elif row.row_id is not None:
        handle = row.row_id  # _tidb_rowid of a table without an int PK handle
    if type(handle) is not int:
        return None
    return record_key(table_id, handle)
