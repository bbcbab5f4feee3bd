"""TABLE_MAP events: column types, per-type metadata, nullability and the optional metadata TLVs.

A TABLE_MAP precedes the ROWS events of every statement; the same table maps to the same bytes
until its definition changes, so a parsed map (and its compiled row decoder) is cached by the
body bytes, its *signature*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import CaptureError
from .constants import ColumnType, OptionalMetadata
from .decoders import msb_bitmap_flags

# MySQL libbinlogevents ``is_numeric_type``: the columns the SIGNEDNESS bitmap covers.
NUMERIC_TYPES = frozenset(
    {
        ColumnType.TINY,
        ColumnType.SHORT,
        ColumnType.INT24,
        ColumnType.LONG,
        ColumnType.LONGLONG,
        ColumnType.FLOAT,
        ColumnType.DOUBLE,
        ColumnType.NEWDECIMAL,
        ColumnType.DECIMAL,
    }
)
BLOB_TYPES = frozenset({ColumnType.BLOB, ColumnType.TINY_BLOB, ColumnType.MEDIUM_BLOB, ColumnType.LONG_BLOB})
_ONE_BYTE_META = BLOB_TYPES | {
    ColumnType.FLOAT,
    ColumnType.DOUBLE,
    ColumnType.GEOMETRY,
    ColumnType.JSON,
    ColumnType.TIMESTAMP2,
    ColumnType.DATETIME2,
    ColumnType.TIME2,
}
_FSP_TYPES = frozenset({ColumnType.TIMESTAMP2, ColumnType.DATETIME2, ColumnType.TIME2})
MAX_FSP = 6
MAX_DECIMAL_PRECISION = 65
MAX_DECIMAL_SCALE = 30
MARIADB_MAX_DECIMAL_SCALE = 38  # since MariaDB 10.2.1 (38 fraction digits still fit 65 digits with a leading 0)
_TWO_BYTE_META = frozenset(
    {
        ColumnType.VARCHAR,
        ColumnType.VAR_STRING,
        ColumnType.NEWDECIMAL,
        ColumnType.BIT,
        ColumnType.STRING,
        ColumnType.ENUM,
        ColumnType.SET,
        ColumnType.DECIMAL,
    }
)


def read_lenenc(data: bytes, pos: int) -> tuple[int, int]:
    """Length-encoded integer (client/server protocol): <251 one byte; 0xfc/0xfd/0xfe prefix 2/3/8 bytes."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFC:
        return int.from_bytes(data[pos + 1 : pos + 3], "little"), pos + 3
    if first == 0xFD:
        return int.from_bytes(data[pos + 1 : pos + 4], "little"), pos + 4
    if first == 0xFE:
        return int.from_bytes(data[pos + 1 : pos + 9], "little"), pos + 9
    raise ValueError(f"invalid length-encoded integer prefix {first:#x}")


@dataclass(slots=True)
class ColumnMeta:
    """One column as the binlog describes it.

    ``binlog_type`` is the type byte of the TABLE_MAP; ``real_type`` undoes MySQL's packing of
    ENUM/SET/CHAR into STRING; ``length`` is the byte length (CHAR/VARCHAR/BINARY), the length
    bytes (BLOB family), the pack length (ENUM/SET) or the bit count (BIT).
    """

    index: int
    binlog_type: int
    real_type: int
    meta: int = 0
    length: int = 0
    precision: int = 0
    scale: int = 0
    nullable: bool = True
    name: str | None = None
    unsigned: bool | None = None
    collation_id: int | None = None
    elements: tuple[bytes, ...] | None = None
    geometry_type: int | None = None
    visible: bool = True

    @property
    def is_character(self) -> bool:
        """Covered by DEFAULT_CHARSET/COLUMN_CHARSET (libbinlogevents ``is_character_type``)."""
        return self.real_type in (ColumnType.STRING, ColumnType.VAR_STRING, ColumnType.VARCHAR) or (
            self.real_type in BLOB_TYPES
        )

    @property
    def is_enum_or_set(self) -> bool:
        return self.real_type in (ColumnType.ENUM, ColumnType.SET)


@dataclass(slots=True)
class TableMap:
    """A parsed TABLE_MAP body (everything after the table id and flags)."""

    schema: str
    table: str
    columns: list[ColumnMeta]
    signature: bytes
    has_metadata: bool = False
    primary_key: list[int] = field(default_factory=list)
    primary_key_prefixes: list[int] = field(default_factory=list)
    # Filled lazily by the capture layer: compiled row decoder and table schema per version.
    cache: dict[Any, Any] = field(default_factory=dict)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"


def parse_table_map_body(body: bytes, mariadb: bool = False) -> TableMap:
    """Parse a TABLE_MAP body (``Table_map_log_event`` in MySQL's and MariaDB's log_event.cc).

    ``mariadb``: MariaDB's optional metadata also counts YEAR as numeric (SIGNEDNESS) and
    GEOMETRY as a character column (charsets), as its ``Binlog_type_info`` does.
    """
    pos = 0
    n = body[pos]
    schema = body[pos + 1 : pos + 1 + n].decode("utf-8")
    pos += n + 2  # name, NUL
    n = body[pos]
    table = body[pos + 1 : pos + 1 + n].decode("utf-8")
    pos += n + 2
    count, pos = read_lenenc(body, pos)
    types = body[pos : pos + count]
    pos += count
    meta_len, pos = read_lenenc(body, pos)
    meta_end = pos + meta_len
    columns: list[ColumnMeta] = []
    for i, tp in enumerate(types):
        col = ColumnMeta(index=i, binlog_type=tp, real_type=tp)
        if tp in _ONE_BYTE_META:
            col.meta = body[pos]
            pos += 1
        elif tp in _TWO_BYTE_META:
            b0, b1 = body[pos], body[pos + 1]
            pos += 2
            _two_byte_meta(col, tp, b0, b1)
        bad = _out_of_range(col, mariadb)
        if bad:
            raise ValueError(f"{schema}.{table} column {i + 1}: {bad}")
        if tp in BLOB_TYPES:
            col.real_type = (ColumnType.TINY_BLOB, ColumnType.BLOB, ColumnType.MEDIUM_BLOB, ColumnType.LONG_BLOB)[
                max(1, min(col.meta, 4)) - 1
            ]
            col.length = col.meta
        columns.append(col)
    if pos != meta_end:
        raise ValueError(f"column metadata is {meta_len} bytes but the column types use {pos - (meta_end - meta_len)}")
    null_bytes = (count + 7) // 8
    nulls = int.from_bytes(body[pos : pos + null_bytes], "little")
    for col in columns:
        col.nullable = bool(nulls >> col.index & 1)
    pos += null_bytes
    tm = TableMap(schema=schema, table=table, columns=columns, signature=bytes(body))
    if pos < len(body):
        _parse_optional_metadata(tm, body, pos, mariadb)
    return tm


def _out_of_range(col: ColumnMeta, mariadb: bool) -> str | None:
    """Why a column's metadata is outside what the server writes, for the types whose decoders trust it.

    A fractional seconds precision above 6 or a DECIMAL beyond 65 digits would index past the
    decoders' tables or decode a wrong value (digits no codec accepts, a misread row image).
    """
    tp = col.binlog_type
    if tp in _FSP_TYPES and col.meta > MAX_FSP:
        return f"{ColumnType(tp).name} of fractional seconds precision {col.meta}; fsp is 0 to {MAX_FSP}"
    max_scale = MARIADB_MAX_DECIMAL_SCALE if mariadb else MAX_DECIMAL_SCALE
    if tp == ColumnType.NEWDECIMAL and not (
        0 < col.precision <= MAX_DECIMAL_PRECISION and col.scale <= min(col.precision, max_scale)
    ):
        return (
            f"DECIMAL({col.precision}, {col.scale}); {'MariaDB' if mariadb else 'MySQL'}'s DECIMAL(M, D) has "
            f"1 <= M <= {MAX_DECIMAL_PRECISION}, D <= {max_scale} and D <= M"
        )
    return None


def _two_byte_meta(col: ColumnMeta, tp: int, b0: int, b1: int) -> None:
    if tp in (ColumnType.VARCHAR, ColumnType.VAR_STRING):
        col.meta = col.length = b0 | b1 << 8  # max length in bytes, little-endian
    elif tp in (ColumnType.NEWDECIMAL, ColumnType.DECIMAL):
        col.precision, col.scale = b0, b1
        col.meta = b0 << 8 | b1
    elif tp == ColumnType.BIT:
        col.meta = b1 << 8 | b0
        col.length = b1 * 8 + b0  # bytes(b1) * 8 + bits(b0)
        if b0 > 7 or not 0 < col.length <= 64:  # MySQL's BIT(M) has 1 <= M <= 64 (a wider one: found by fuzzing)
            raise ValueError(f"BIT column of {col.length} bits (metadata {b0}, {b1}); BIT holds 1 to 64")
    else:  # STRING/ENUM/SET: real type with the high length bits xor-ed in (Field_string::save_field_metadata)
        col.meta = b0 << 8 | b1
        if b0 & 0x30 != 0x30:
            col.real_type = b0 | 0x30
            col.length = b1 | ((b0 & 0x30) ^ 0x30) << 4
        else:
            col.real_type = b0
            col.length = b1
        if tp in (ColumnType.ENUM, ColumnType.SET):
            col.real_type = tp


def _parse_optional_metadata(tm: TableMap, body: bytes, pos: int, mariadb: bool) -> None:  # noqa: C901  (table-driven decoder: one branch per MySQL optional-metadata TLV kind)
    """The TLV block MySQL 8.0.1+ and MariaDB 10.5+ append (binlog_row_metadata=MINIMAL or FULL)."""
    columns = tm.columns
    numeric_types = NUMERIC_TYPES | {ColumnType.YEAR} if mariadb else NUMERIC_TYPES
    numeric = [c for c in columns if c.real_type in numeric_types]
    character = [c for c in columns if c.is_character or (mariadb and c.real_type == ColumnType.GEOMETRY)]
    enum_set = [c for c in columns if c.is_enum_or_set]
    end = len(body)
    while pos < end:
        kind = body[pos]
        length, pos = read_lenenc(body, pos + 1)
        value = body[pos : pos + length]
        pos += length
        if kind == OptionalMetadata.SIGNEDNESS:
            for col, flag in zip(numeric, msb_bitmap_flags(value, len(numeric)), strict=True):
                col.unsigned = flag
        elif kind in (OptionalMetadata.DEFAULT_CHARSET, OptionalMetadata.ENUM_AND_SET_DEFAULT_CHARSET):
            targets = character if kind == OptionalMetadata.DEFAULT_CHARSET else enum_set
            default, p = read_lenenc(value, 0)
            for col in targets:
                col.collation_id = default
            while p < len(value):
                idx, p = read_lenenc(value, p)
                coll, p = read_lenenc(value, p)
                targets[idx].collation_id = coll
        elif kind in (OptionalMetadata.COLUMN_CHARSET, OptionalMetadata.ENUM_AND_SET_COLUMN_CHARSET):
            targets = character if kind == OptionalMetadata.COLUMN_CHARSET else enum_set
            p = 0
            for col in targets:
                col.collation_id, p = read_lenenc(value, p)
        elif kind == OptionalMetadata.COLUMN_NAME:
            p = 0
            for col in columns:
                n, p = read_lenenc(value, p)
                col.name = value[p : p + n].decode("utf-8")
                p += n
            tm.has_metadata = True
        elif kind in (OptionalMetadata.SET_STR_VALUE, OptionalMetadata.ENUM_STR_VALUE):
            real = ColumnType.SET if kind == OptionalMetadata.SET_STR_VALUE else ColumnType.ENUM
            p = 0
            for col in (c for c in columns if c.real_type == real):
                count, p = read_lenenc(value, p)
                items = []
                for _ in range(count):
                    n, p = read_lenenc(value, p)
                    items.append(bytes(value[p : p + n]))
                    p += n
                col.elements = tuple(items)
        elif kind == OptionalMetadata.GEOMETRY_TYPE:
            p = 0
            for col in (c for c in columns if c.real_type == ColumnType.GEOMETRY):
                col.geometry_type, p = read_lenenc(value, p)
        elif kind == OptionalMetadata.SIMPLE_PRIMARY_KEY:
            p = 0
            while p < len(value):
                idx, p = read_lenenc(value, p)
                tm.primary_key.append(idx)
                tm.primary_key_prefixes.append(0)
        elif kind == OptionalMetadata.PRIMARY_KEY_WITH_PREFIX:
            p = 0
            while p < len(value):
                idx, p = read_lenenc(value, p)
                prefix, p = read_lenenc(value, p)
                tm.primary_key.append(idx)
                tm.primary_key_prefixes.append(prefix)
        elif kind == OptionalMetadata.COLUMN_VISIBILITY:
            for col, flag in zip(columns, msb_bitmap_flags(value, len(columns)), strict=True):
                col.visible = flag
        # Unknown TLVs are skipped by length: newer servers add kinds (MySQL's rule for readers).


def check_table_map(tm: TableMap, where: str) -> None:
    """Raise a CaptureError when a column type cannot be decoded at all."""
    for col in tm.columns:
        if col.binlog_type == ColumnType.DECIMAL:
            raise CaptureError(
                f"{tm.qualified_name} column {col.index + 1}: pre-5.0 DECIMAL is not supported", where=where
            )
