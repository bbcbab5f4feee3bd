"""SELECTed values -> the model's values, exactly as the binlog decoder gives them for the same row.

The text protocol loses what the model keeps, so some columns are selected through an expression
(on a session with ``time_zone = '+00:00'``):

* FLOAT as ``CAST(col AS DOUBLE)``: the text of a FLOAT has 6 significant digits, the widened
  double is the exact float32 value (then `gofloat.to_float32`);
* DATE, DATETIME, TIME as ``CAST(col AS CHAR)``: MySQL's own text, zero dates and 838 hours
  included, with the column's fraction digits;
* TIMESTAMP as ``UNIX_TIMESTAMP(col)``: seconds since the epoch, as the binlog stores it, then
  shown in the changefeed's time zone like `binlog.decoders.timestamp_text`;
* ENUM and SET as ``col+0``: the member index and bitmask; BIT as its bytes, read big-endian.

Key values go back into SQL as parameters (`param_sql`): a TIMESTAMP key as ``FROM_UNIXTIME``
of its instant, everything else as the model value (MySQL converts a string to the column's
temporal type, and compares ENUM, SET and BIT with a number by their number).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, tzinfo
from decimal import Decimal
from typing import Any

from ...errors import CaptureError
from ...model.ddl import quote_ident
from ...model.gofloat import to_float32
from ...model.schema import Column
from ...model.types import (
    CALENDAR_TYPES,
    ENUM_SET_TYPES,
    INTEGER_TYPES,
    STRING_TYPES,
    TEMPORAL_TYPES,
    UINT_VALUE_TYPES,
    TypeCode,
)
from ..binlog.decoders import timestamp_text

_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def select_sql(column: Column) -> str:
    """The SELECT expression of a column (module docstring)."""
    name = quote_ident(column.name)
    tc = column.type_code
    if tc is TypeCode.FLOAT:
        return f"CAST({name} AS DOUBLE)"
    if tc is TypeCode.TIMESTAMP:
        return f"UNIX_TIMESTAMP({name})"
    if tc in TEMPORAL_TYPES:
        return f"CAST({name} AS CHAR)"
    if tc in ENUM_SET_TYPES:
        return f"{name}+0"
    return name


def converter(column: Column, tz: tzinfo) -> Callable[[Any], Any]:
    """SELECTed value (through `select_sql`) -> model value; None stays None."""
    tc = column.type_code
    where = column.name

    def fail(value: Any) -> Any:
        raise CaptureError(f"column {where!r} ({column.type_name}): unexpected value {value!r} in a snapshot")

    if tc is TypeCode.FLOAT:
        return lambda v: None if v is None else to_float32(float(v))
    if tc is TypeCode.DOUBLE:
        return lambda v: None if v is None else float(v)
    if tc is TypeCode.DECIMAL:
        return lambda v: None if v is None else (v if isinstance(v, Decimal) else Decimal(str(v)))
    if tc is TypeCode.BIT:
        return lambda v: None if v is None else (int.from_bytes(v, "big") if isinstance(v, bytes) else int(v))
    if tc in UINT_VALUE_TYPES or tc in INTEGER_TYPES:  # BIT went above
        return lambda v: None if v is None else int(v)
    if tc is TypeCode.TIMESTAMP:
        fsp = column.decimal or 0

        def ts(v: Any) -> Any:
            if v is None:
                return None
            d = Decimal(str(v))
            seconds = int(d)
            micro = int((d - seconds) * 1_000_000)
            return timestamp_text(seconds, micro, fsp, tz)

        return ts
    if tc in TEMPORAL_TYPES:  # TIMESTAMP went above
        return lambda v: None if v is None else (v.decode() if isinstance(v, bytes) else str(v))
    if column.is_bytes:
        return lambda v: None if v is None else (bytes(v) if isinstance(v, bytes | bytearray | memoryview) else fail(v))
    # Text (CHAR/VARCHAR/TEXT, MariaDB's JSON, VECTOR): the connection decodes them to str.
    return lambda v: (
        None if v is None else (v if isinstance(v, str) else v.decode("utf-8") if isinstance(v, bytes) else fail(v))
    )


def param_sql(column: Column) -> str:
    """The placeholder of a key value of this column in a WHERE clause (module docstring)."""
    return "FROM_UNIXTIME(%s)" if column.type_code is TypeCode.TIMESTAMP else "%s"


def param_value(column: Column, value: Any, tz: tzinfo) -> Any:
    """A model key value as the parameter `param_sql` takes."""
    if column.type_code is TypeCode.TIMESTAMP:
        return _instant(value, tz)
    return value


def order_sql(column: Column) -> str:
    """A literal of this column's type and order, for the database to rank keys by (`reader.DatabaseOrder`)."""
    tc = column.type_code
    if column.is_bytes:
        return "CAST(%s AS BINARY)"
    if tc is TypeCode.TIME:
        return "CAST(%s AS TIME(6))"
    if tc is TypeCode.TIMESTAMP:
        return "FROM_UNIXTIME(%s)"
    if tc in CALENDAR_TYPES:
        return "%s"  # DATE, DATETIME: fixed-width text, text order is time order
    if tc in STRING_TYPES:
        if not (_NAME.match(column.charset) and _NAME.match(column.collation)):
            raise CaptureError(f"column {column.name!r}: unexpected charset/collation {column.collation!r}")
        return f"CONVERT(%s USING {column.charset}) COLLATE {column.collation}"
    return "%s"


def _instant(text: Any, tz: tzinfo) -> Decimal:
    """A TIMESTAMP model value (text in ``tz``) -> seconds since the epoch."""
    s = str(text)
    if s.startswith("0000-00-00"):
        return Decimal(0)
    dt = datetime.fromisoformat(s).replace(tzinfo=tz)
    return Decimal(int(dt.timestamp())) + Decimal(dt.microsecond) / 1_000_000
