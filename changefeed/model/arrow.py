"""Arrow types for model columns: how row images become columnar batches (Spark, Parquet).

One mapping for every columnar consumer. Values keep the model's meaning: temporal types stay
text (MySQL zero dates have no Arrow timestamp), ENUM/SET stay their index/bitmask, DECIMAL is
exact (decimal128 up to 38 digits, decimal256 beyond). A DECIMAL whose precision is unknown (Open
Protocol and the simple protocol's legacy shape carry only the type code) is exact decimal text:
no fixed Arrow decimal holds every MySQL DECIMAL(65, 0..30) value, and guessing would round.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import clip
from .schema import Column, TableSchema
from .types import CALENDAR_TYPES, DATE_TYPES, ENUM_SET_BIT_TYPES, FLOAT_TYPES, TypeCode
from .values import ABSENT

_INT_TYPES = {
    TypeCode.TINYINT: (pa.int8(), pa.uint8()),
    TypeCode.SMALLINT: (pa.int16(), pa.uint16()),
    TypeCode.MEDIUMINT: (pa.int32(), pa.uint32()),
    TypeCode.INT: (pa.int32(), pa.uint32()),
    TypeCode.BIGINT: (pa.int64(), pa.uint64()),
}


def arrow_type(column: Column) -> pa.DataType:
    tc = column.type_code
    if tc in _INT_TYPES:
        signed, unsigned = _INT_TYPES[tc]
        return unsigned if column.unsigned else signed
    if tc is TypeCode.YEAR:
        return pa.int16()
    if tc in ENUM_SET_BIT_TYPES:
        return pa.uint64()
    if tc is TypeCode.FLOAT:
        return pa.float32()
    if tc is TypeCode.DOUBLE:
        return pa.float64()
    if tc is TypeCode.DECIMAL:
        if column.length is None:
            return pa.string()
        precision = max(column.length, 1)
        scale = column.decimal or 0
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(min(precision, 76), scale)
    if column.is_bytes:
        return pa.binary()
    return pa.string()


def _decimal_text(column: Column) -> bool:
    return column.type_code is TypeCode.DECIMAL and column.length is None


def arrow_schema(table: TableSchema, extra: list[pa.Field] | None = None) -> pa.Schema:
    fields = [pa.field(c.name, arrow_type(c), nullable=True) for c in table.columns]
    return pa.schema([*(extra or []), *fields])


def images_to_batch(
    table: TableSchema, images: list[tuple[Any, ...]], extra: dict[str, pa.Array] | None = None
) -> pa.RecordBatch:
    """Row images (model tuples) -> one record batch with the table's columns (+ extra columns)."""
    arrays: list[pa.Array] = []
    names: list[str] = []
    for name, arr in (extra or {}).items():
        names.append(name)
        arrays.append(arr)
    for i, col in enumerate(table.columns):
        values = [None if img[i] is ABSENT else img[i] for img in images]
        if _decimal_text(col):
            values = [None if v is None else format(v, "f") for v in values]
        arrays.append(pa.array(values, type=arrow_type(col)))
        names.append(col.name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def batch_to_images(table: TableSchema, batch: pa.RecordBatch | pa.Table) -> list[tuple[Any, ...]]:
    """The inverse of `images_to_batch` for the table's columns (by name; missing -> None)."""
    columns = []
    for col in table.columns:
        if col.name in batch.schema.names:
            values = batch.column(col.name).to_pylist()
            # DECIMAL text (precision unknown when it was written) comes back exact, whatever the
            # precision known now; decimal128/256 columns read back as Decimal already.
            if col.type_code is TypeCode.DECIMAL and pa.types.is_string(batch.schema.field(col.name).type):
                values = [None if v is None else Decimal(v) for v in values]
            columns.append(values)
        else:
            columns.append([None] * batch.num_rows)
    return list(zip(*columns, strict=True)) if columns else []


# Lake tables (Delta, Iceberg): signed types only, decimals up to 38 digits, real temporal types.
# The model's value meanings hold (ENUM index, SET/BIT bits); what a lake format cannot hold
# exactly stays text (docs/lakehouse.md, "Types").
_LAKE_INT_TYPES = {
    TypeCode.TINYINT: (pa.int8(), pa.int16()),
    TypeCode.SMALLINT: (pa.int16(), pa.int32()),
    TypeCode.MEDIUMINT: (pa.int32(), pa.int32()),  # MEDIUMINT UNSIGNED tops at 2**24 - 1
    TypeCode.INT: (pa.int32(), pa.int64()),
    TypeCode.BIGINT: (pa.int64(), pa.decimal128(20, 0)),
}
#: DECIMAL precision a lake decimal holds (Delta and Iceberg both stop at 38).
LAKE_MAX_PRECISION = 38
#: The zone lake timestamps are stored in (a TIMESTAMP column's instant).
LAKE_TIME_ZONE = "UTC"


def lake_arrow_type(column: Column) -> pa.DataType:
    """The Arrow type of a column in a Delta or Iceberg table (exact for every value the type admits)."""
    tc = column.type_code
    if tc in _LAKE_INT_TYPES:
        signed, unsigned = _LAKE_INT_TYPES[tc]
        return unsigned if column.unsigned else signed
    if tc is TypeCode.YEAR:
        return pa.int16()
    if tc is TypeCode.ENUM:
        return pa.int32()  # 1-based member index (0: MySQL's error value), up to 65535 members
    if tc is TypeCode.SET:
        return pa.decimal128(20, 0)  # member bitmask: up to 64 bits
    if tc is TypeCode.BIT:
        return pa.int64() if column.length is not None and column.length < 64 else pa.decimal128(20, 0)
    if tc is TypeCode.DECIMAL:
        if column.length is None or column.length > LAKE_MAX_PRECISION:
            return pa.string()  # exact decimal text: no lake decimal holds DECIMAL(65, 30)
        return pa.decimal128(max(column.length, 1), column.decimal or 0)
    if tc in DATE_TYPES:
        return pa.date32()
    if tc is TypeCode.DATETIME:
        return pa.timestamp("us")  # wall-clock time, no zone (Delta timestamp_ntz, Iceberg timestamp)
    if tc is TypeCode.TIMESTAMP:
        return pa.timestamp("us", LAKE_TIME_ZONE)  # an instant (Delta timestamp, Iceberg timestamptz)
    if tc in FLOAT_TYPES:
        return arrow_type(column)
    if column.is_bytes:
        return pa.binary()
    return pa.string()  # strings, JSON, TIME ([-]838:59:59 fits no lake time type), VECTOR


def lake_array(
    column: Column, values: pa.Array, time_zone: str = LAKE_TIME_ZONE, *, zero: pa.Array | None = None
) -> pa.Array:
    """A column's values (in any Arrow type a decoder gives: `arrow_type`, text) as `lake_arrow_type`.

    Temporal text is parsed: DATETIME keeps its wall-clock value, TIMESTAMP text (in ``time_zone``,
    the changefeed's) becomes its UTC instant. MySQL's zero and partial dates (``0000-00-00``,
    ``2024-00-10``) name no day: they become NULL, as Debezium and Connector/J's
    ``zeroDateTimeBehavior=CONVERT_TO_NULL`` make them (``zero``: their `zero_dates` mask, when the
    caller has it already). Any other value the lake type cannot hold raises ValueError naming the
    column and the value.
    """
    target = lake_arrow_type(column)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.type == target:
        return values
    if column.type_code in CALENDAR_TYPES and pa.types.is_string(values.type):
        zero = zero_dates(values) if zero is None else zero
        if zero.true_count:
            values = pc.if_else(zero, pa.nulls(len(values), values.type), values)
    try:
        if column.type_code is TypeCode.TIMESTAMP and pa.types.is_string(values.type):
            wall = pc.cast(values, pa.timestamp("us"))
            if time_zone.upper() not in ("UTC", "Z", "+00:00", ""):
                wall = pc.assume_timezone(wall, time_zone, ambiguous="earliest", nonexistent="raise")
            return pc.cast(wall, target)
        if pa.types.is_decimal(values.type) and pa.types.is_string(target):
            return pc.cast(values, target)
        return pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ArithmeticError) as exc:
        raise ValueError(
            f"column {column.name!r} ({column.type_code.name}): a value {_first_bad(values, target)} "
            f"does not fit the lake type {target} ({exc})"
        ) from None


def zero_dates(values: pa.Array) -> pa.Array:
    """Per value of temporal text: a zero or partial date (year, month or day 0), which no lake type holds."""
    mask = pc.match_substring_regex(values, r"^(0000|\d{4}-00|\d{4}-\d{2}-00)")
    return pc.fill_null(mask, False)


def _first_bad(values: pa.Array, target: pa.DataType) -> str:
    """The first value of ``values`` that does not cast to ``target`` (for the error), as repr."""
    for value in values:
        try:
            pc.cast(pa.array([value.as_py()], type=values.type), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ArithmeticError):
            return clip(value.as_py())
    return "(unknown)"
