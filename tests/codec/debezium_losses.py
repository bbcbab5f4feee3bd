"""What TiCDC's Debezium JSON keeps of a row (debezium.md §6), as the expectation of pipeline tests.

The protocol itself loses two things our other protocols keep, and nothing else may differ:
DECIMAL travels as a JSON double (``decimal.handling.mode=double``: digits beyond a float64 are
gone, the downstream column rounds to its scale), and a zero or invalid DATE/DATETIME (``0000-00-00``,
month or day 0) is written as ``null`` (``0`` when NOT NULL). Written independently of the codec:
a test compares the codec's output with this. (TiCDC also sends a NULL in a column with a DEFAULT as
the default; the every-type workload has no such NULL, so it is not modelled here.)
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Context, Decimal
from typing import Any

from changefeed.model import ABSENT, Column, Event, RowChange, TypeCode

_WIDE = Context(prec=100)  # DECIMAL(65, 30) needs more than the default 28 digits


def _is_zero_date(text: str) -> bool:
    year, month, day = text[:10].split("-")
    return int(month) == 0 or int(day) == 0 or int(year) == 0


def kept(col: Column, value: Any) -> Any:
    """The value a consumer of Debezium JSON gets back for ``value`` of ``col``."""
    if value is None or value is ABSENT:
        return value
    if col.type_code is TypeCode.DECIMAL:
        scale = Decimal(1).scaleb(-(col.decimal or 0))
        return Decimal(repr(float(value))).quantize(scale, context=_WIDE)
    if col.type_code in (TypeCode.DATE, TypeCode.DATETIME) and _is_zero_date(value):
        return None if col.nullable else ("1970-01-01" if col.type_code is TypeCode.DATE else "1970-01-01 00:00:00")
    return value


def _image(columns: tuple[Column, ...], image: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    return None if image is None else tuple(kept(c, v) for c, v in zip(columns, image, strict=True))


def through_debezium(events: Any) -> list[Event]:
    """``events`` with every row image as Debezium JSON carries it; other events as they are."""
    out: list[Event] = []
    for e in events:
        if isinstance(e, RowChange):
            cols = e.table_schema.columns
            out.append(replace(e, new=_image(cols, e.new), old=_image(cols, e.old)))
        else:
            out.append(e)
    return out
