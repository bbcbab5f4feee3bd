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

from .schema import Column, TableSchema
from .types import TypeCode
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
    if tc in (TypeCode.ENUM, TypeCode.SET, TypeCode.BIT):
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
