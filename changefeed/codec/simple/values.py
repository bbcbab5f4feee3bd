"""The Simple protocol's per-type rules for column attributes (spec §3.2), shared by JSON and Avro.

How a column's ``length`` and ``default`` are written: TiDB's ``flen`` with its per-type defaults,
and a BIT default as tiflow's ``MustBinaryLiteralToInt`` number. The value renderers and parsers
of each encoding are in `message` (JSON) and `avro`.
"""

from __future__ import annotations

import re
from typing import Any

from ...model import Column, TypeCode
from ...model.types import DEFAULT_FLEN, FSP_TYPES, UNSIGNED_DEFAULT_FLEN

_BIT_LITERAL = re.compile(r"[bB]'([01]+)'")


def column_length(col: Column) -> int:
    """TiDB's ``flen``: the stated length, else TiDB's default for the type (TiDB always has one).

    Datetime-like types with fsp > 0 widen by ``1 + fsp`` (``datetime(3)`` is 23), as TiDB does.
    Types without a fixed default (VARCHAR without length, ENUM, SET...) give 0 (omitted).
    """
    if col.length is not None:
        return col.length
    tc = col.type_code
    if col.unsigned and tc in UNSIGNED_DEFAULT_FLEN:
        return UNSIGNED_DEFAULT_FLEN[tc]
    flen = DEFAULT_FLEN.get(tc, 0)
    if tc in FSP_TYPES and col.decimal:
        flen += 1 + col.decimal
    return flen


def bit_default(value: Any) -> Any:
    """tiflow ``MustBinaryLiteralToInt``: a BIT default is printed as a uint64 number."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        literal = _BIT_LITERAL.fullmatch(value)
        if literal:  # MySQL's b'0101' form
            return int(literal.group(1), 2)
        value = value.encode("latin-1", "replace")  # TiDB keeps the raw bytes as a string
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big") if value else 0
    return value


def json_default(col: Column) -> Any:
    """The ``default`` member: TiDB's stored default (usually a string), BIT as a number."""
    value = col.default
    if col.type_code is TypeCode.BIT:
        return bit_default(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return str(value)
