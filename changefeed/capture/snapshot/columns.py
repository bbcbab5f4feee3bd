"""A chunk read as columns: the server renders each row as one line of plain text, Arrow parses the lines.

Why: PyMySQL parses a result set value by value in Python (~8 µs a 10-column row) and the
row path's converters (`values.converter`) then ran once per value (~6 µs): most of what a
snapshot cost before the sink (bench/RESULTS.md, "Initial snapshot"). One value per row costs
PyMySQL ~1.7 µs, and pyarrow's CSV reader splits and parses the lines in C++ (~0.5 µs a row).

Each value is rendered so that a line needs no quoting or escaping (``,`` between values):

* integers and YEAR as digits, ENUM/SET/BIT as ``col+0`` (member index, bitmask, bits); FLOAT,
  DOUBLE, DECIMAL, DATE/DATETIME/TIME and TIMESTAMP through `values.select_sql`'s expressions,
  as the row path reads them (the same text, parsed to the same values);
* text (CHAR/VARCHAR/TEXT, MariaDB's JSON) as ``HEX`` of its utf8mb4 bytes, decoded a column at a
  time with numpy (the row path's connection charset is utf8mb4 too);
* binary strings as base64 (MySQL's ``TO_BASE64`` breaks lines every 76 characters: removed), which
  is what an ``inserts`` line writes for them (`model.jsonl`), decoded only when rows are needed;
* NULL as ``N``, which no rendering above produces (hex and digits have no ``N``; a base64 text
  has a multiple of 4 characters).

A value or line longer than the server's ``max_allowed_packet`` comes back NULL from ``HEX``,
``TO_BASE64`` or ``CONCAT_WS``, with a warning: a chunk whose read warned is read again by the row
path (`reader.SnapshotReader`), as is any chunk of a table with a column this module does not
render (GEOMETRY, MySQL's binary JSON, VECTOR).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from ...errors import CaptureError
from ...model.arrow import arrow_type
from ...model.ddl import quote_ident
from ...model.schema import Column, TableSchema
from ...model.types import ENUM_SET_TYPES, INTEGER_TYPES, STRING_TYPES, TEMPORAL_TYPES, TypeCode
from ...model.values import b64decode
from .chunks import Row
from .values import converter, select_sql

_NULL = "N"
_INT, _UINT, _FLOAT32, _FLOAT64, _TEXT, _HEX, _BASE64, _CONVERTED = range(8)

# "-12.50", "0.000": the text `format(Decimal(text), "f")` gives back unchanged (no ZEROFILL zeros).
_PLAIN_DECIMAL = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$"

_HEX_DIGITS = np.full(256, 255, dtype=np.uint8)  # an ASCII byte -> its hex digit's value; 255: not one
for _i, _c in enumerate("0123456789abcdef"):
    _HEX_DIGITS[ord(_c)] = _HEX_DIGITS[ord(_c.upper())] = _i


def _kind(column: Column) -> int | None:
    """How a column's values are rendered and parsed; None: not by this module."""
    tc = column.type_code
    if tc in INTEGER_TYPES or tc is TypeCode.YEAR:
        return _UINT if column.unsigned else _INT
    if tc in ENUM_SET_TYPES or tc is TypeCode.BIT:
        return _UINT
    if tc is TypeCode.FLOAT:
        return _FLOAT32
    if tc is TypeCode.DOUBLE:
        return _FLOAT64
    if tc is TypeCode.DECIMAL:
        return _TEXT
    if tc is TypeCode.TIMESTAMP:
        return _CONVERTED
    if tc in TEMPORAL_TYPES:
        return _TEXT
    if tc in STRING_TYPES:
        return _BASE64 if column.is_bytes else _HEX
    return None


def _expression(column: Column, kind: int) -> str:
    name = quote_ident(column.name)
    if kind == _HEX:
        text = f"HEX(CONVERT({name} USING utf8mb4))"
    elif kind == _BASE64:
        text = f"REPLACE(TO_BASE64({name}), CHAR(10 USING ascii), '')"
    elif column.type_code is TypeCode.BIT:
        text = f"{name}+0"
    else:
        text = select_sql(column)
    # Not IFNULL(text, 'N'): a value the function gives NULL for (longer than max_allowed_packet)
    # must not read as NULL; CONCAT_WS skips it instead, and the line has a value too few.
    return f"IF({name} IS NULL, '{_NULL}', {text})"


def line_sql(table: TableSchema) -> str | None:
    """The SELECT list of a chunk read as lines (module docstring); None when a column has no line form."""
    exprs = []
    for column in table.columns:
        kind = _kind(column)
        if kind is None:
            return None
        exprs.append(_expression(column, kind))
    return f"CAST(CONCAT_WS(',', {', '.join(exprs)}) AS BINARY)"


@dataclass
class ChunkColumns:
    """A chunk's rows as one Arrow array per column, each in its line form (`parse_lines`)."""

    table: TableSchema
    kinds: list[int]
    arrays: list[pa.Array]
    tz: tzinfo
    _rows_json: orjson.Fragment | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.arrays[0]) if self.arrays else 0

    def rows(self) -> list[Row]:
        """The rows as the row path gives them (`values.converter`'s model values)."""
        return list(zip(*(self._values(i, json=False) for i in range(len(self.arrays))), strict=True))

    def json_rows(self) -> list[Row]:
        """The rows with each value as an ``inserts`` line writes it (`model.jsonl.dumps_inserts`):
        DECIMAL as fixed-point text, binary as base64, the rest as their model values."""
        return list(zip(*(self._values(i, json=True) for i in range(len(self.arrays))), strict=True))

    def rows_json(self) -> orjson.Fragment:
        """`json_rows` as the JSON array an ``inserts`` line holds, made once (a chunk read ahead
        makes it in the background, `progress.BatchReader`)."""
        if self._rows_json is None:
            self._rows_json = orjson.Fragment(orjson.dumps(self.json_rows()))
        return self._rows_json

    def model_arrays(self) -> list[pa.Array]:
        """The columns in the model's Arrow types (`model.arrow.arrow_type`): what
        `model.arrow.images_to_batch` makes of `rows`, by casts where the line form allows (a
        Spark batch read hands them on as they are, `spark.changelog`)."""
        return [self._model_array(i) for i in range(len(self.arrays))]

    def _model_array(self, i: int) -> pa.Array:
        kind, array, column = self.kinds[i], self.arrays[i], self.table.columns[i]
        target = arrow_type(column)
        if kind in (_INT, _UINT, _FLOAT32, _FLOAT64):
            return array.cast(target)  # the server's values fit their column's type; a misfit raises
        if kind == _HEX or (kind == _TEXT and column.type_code is not TypeCode.DECIMAL):
            return array  # text, and temporal values as the text the row path reads (`select_sql`)
        if kind == _TEXT and _plain_decimals(array):
            # DECIMAL: fixed-point text without ZEROFILL zeros is the decimal's exact value.
            return array if pa.types.is_string(target) else array.cast(target)
        values = self._values(i, json=False)
        if column.type_code is TypeCode.DECIMAL and pa.types.is_string(target):  # unknown precision: exact text
            values = [None if v is None else format(v, "f") for v in values]
        return pa.array(values, type=target)

    def _values(self, i: int, json: bool) -> list[Any]:
        kind, array, column = self.kinds[i], self.arrays[i], self.table.columns[i]
        if kind == _CONVERTED:
            convert = converter(column, self.tz)
            return [convert(v) for v in array.to_pylist()]
        values = array.to_pylist()
        if column.type_code is TypeCode.DECIMAL:
            if not json:
                return [None if v is None else Decimal(v) for v in values]
            if _plain_decimals(array):
                return values
            return [None if v is None else format(Decimal(v), "f") for v in values]
        if kind == _BASE64 and not json:
            return [None if v is None else b64decode(v) for v in values]
        return values


def _plain_decimals(array: pa.Array) -> bool:
    """Every DECIMAL text is the form `format(Decimal(text), "f")` gives back (NULLs aside)."""
    return pc.all(pc.match_substring_regex(array, _PLAIN_DECIMAL)).as_py() in (True, None)


def joined_sql(line: str) -> str:
    """A `line_sql` SELECT list as one value for the whole chunk: its row count and its lines joined
    by line breaks (none occurs in a line). PyMySQL then parses one row, not one a table row (~1.6
    µs each); the server's work is the same. A join longer than ``group_concat_max_len`` or
    ``max_allowed_packet`` is cut or NULL with a warning: such a chunk is read line by line."""
    return f"COUNT(*), GROUP_CONCAT({line} SEPARATOR X'0A')"


def parse_lines(table: TableSchema, lines: Sequence[bytes | None], tz: tzinfo, where: str) -> ChunkColumns | None:
    """The lines a `line_sql` SELECT returned, as columns; None if a line came back NULL (too long)."""
    if any(line is None for line in lines):
        return None
    return parse_joined(table, b"\n".join(lines), len(lines), tz, where)  # type: ignore[arg-type]


def parse_joined(table: TableSchema, joined: bytes | None, count: int, tz: tzinfo, where: str) -> ChunkColumns:
    """``count`` lines joined by line breaks (a `joined_sql` value) as columns."""
    kinds = [_kind(c) for c in table.columns]
    if any(k is None for k in kinds):
        raise CaptureError(f"{table.qualified_name}: a column has no line form ({where})")
    if not count:
        if joined:
            raise CaptureError(f"{table.qualified_name}: snapshot lines of no rows ({where})")
        return ChunkColumns(table, kinds, [pa.array([], _read_type(k)) for k in kinds], tz)  # type: ignore[arg-type]
    if joined is None:
        raise CaptureError(f"{table.qualified_name}: no snapshot lines for {count} rows ({where})")
    data = joined + b"\n"  # a last empty line is a row too
    names = [f"c{i}" for i in range(len(kinds))]
    try:
        parsed = pcsv.read_csv(
            pa.py_buffer(data),
            read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + 1),
            parse_options=pcsv.ParseOptions(quote_char=False, escape_char=False, ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(
                column_types={n: _read_type(k) for n, k in zip(names, kinds, strict=True)},  # type: ignore[arg-type]
                null_values=[_NULL],
                strings_can_be_null=True,
                check_utf8=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CaptureError(f"{table.qualified_name}: a snapshot line does not parse ({where}): {exc}") from None
    if parsed.num_rows != count:
        raise CaptureError(f"{table.qualified_name}: {count} snapshot lines gave {parsed.num_rows} rows ({where})")
    arrays = []
    for column, kind, chunked in zip(table.columns, kinds, parsed.columns, strict=True):
        array = chunked.combine_chunks()
        if kind == _FLOAT32:
            array = pc.cast(array, pa.float32(), safe=False)  # the FLOAT's own value (`gofloat.to_float32`)
        elif kind == _HEX:
            array = _unhex(array, column, table, where)
        arrays.append(array)
    return ChunkColumns(table, kinds, arrays, tz)  # type: ignore[arg-type]


def _read_type(kind: int) -> pa.DataType:
    return {_INT: pa.int64(), _UINT: pa.uint64(), _FLOAT32: pa.float64(), _FLOAT64: pa.float64()}.get(kind, pa.string())


def _unhex(array: pa.Array, column: Column, table: TableSchema, where: str) -> pa.Array:
    """Hex text -> the utf8 text it encodes, the whole column at once."""
    if array.offset:
        array = pa.concat_arrays([array])
    n = len(array)
    validity, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1)
    raw = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    nibbles = _HEX_DIGITS[raw[offsets[0] : offsets[-1]]]
    if np.any(np.diff(offsets) & 1) or np.any(nibbles == 255):
        raise CaptureError(f"{table.qualified_name}: column {column.name!r}: a snapshot value is not hex ({where})")
    data = (nibbles[0::2] << 4) | nibbles[1::2]
    half = (offsets - offsets[0]) // 2
    out = pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(half), pa.py_buffer(data)])
    try:
        return out.cast(pa.string())
    except pa.ArrowInvalid:
        raise CaptureError(
            f"{table.qualified_name}: column {column.name!r}: a snapshot value is not utf8mb4 text ({where})"
        ) from None
