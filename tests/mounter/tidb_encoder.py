"""A TiDB key / row-value ENCODER for tests only: the inverse of changefeed.capture.mounter.

Written from the rules in the spec (§6.1-6.4), independently of the decoder's code, so a round
trip checks both against the rules rather than against each other's helpers.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from decimal import Context, Decimal
from typing import Any, NamedTuple

from changefeed.model import Column, TableSchema, TypeCode

SIGN = 1 << 63
MASK64 = (1 << 64) - 1
CTX = Context(prec=200)

# ---------------------------------------------------------------- primitives


def cmp_int(v: int) -> bytes:
    return ((v & MASK64) ^ SIGN).to_bytes(8, "big")


def cmp_uint(v: int) -> bytes:
    return v.to_bytes(8, "big")


def mem_bytes(data: bytes) -> bytes:
    out = bytearray()
    for i in range(0, len(data) + 1, 8):
        group = data[i : i + 8]
        pad = 8 - len(group)
        out += group + b"\x00" * pad + bytes([0xFF - pad])
        if pad:
            break
    return bytes(out)


def cmp_float(f: float) -> bytes:
    u = struct.unpack(">Q", struct.pack(">d", f))[0]
    u = u | SIGN if f >= 0 else ~u & MASK64
    return u.to_bytes(8, "big")


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def varint(v: int) -> bytes:
    return uvarint((v << 1) ^ (v >> 63) if v >= 0 else ((v << 1) ^ -1) & MASK64)


def compact_int(v: int) -> bytes:
    for n in (1, 2, 4, 8):
        if -(1 << (8 * n - 1)) <= v < 1 << (8 * n - 1):
            return v.to_bytes(n, "little", signed=True)
    raise ValueError(v)


def compact_uint(v: int) -> bytes:
    for n in (1, 2, 4, 8):
        if v < 1 << (8 * n):
            return v.to_bytes(n, "little")
    raise ValueError(v)


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_bin(value: Decimal, precision: int, frac: int) -> bytes:
    intg = precision - frac
    unscaled = int(value.copy_abs().scaleb(frac, CTX).to_integral_value(context=CTX))
    ipart, fpart = divmod(unscaled, 10**frac)
    idigits = str(ipart).zfill(intg) if intg else ""
    if ipart and len(idigits) > intg:
        raise ValueError(f"{value} does not fit ({precision}, {frac})")
    fdigits = str(fpart).zfill(frac) if frac else ""
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(idigits[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(idigits[i : i + 9]).to_bytes(4, "big")
    for i in range(0, frac - frac % 9, 9):
        out += int(fdigits[i : i + 9]).to_bytes(4, "big")
    if frac % 9:
        out += int(fdigits[frac - frac % 9 :]).to_bytes(_DIG2BYTES[frac % 9], "big")
    if value < 0:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


# ---------------------------------------------------------------- keys


def record_key(table_id: int, handle: int | bytes, keyspace: bytes | None = None) -> bytes:
    tail = cmp_int(handle) if isinstance(handle, int) else handle
    key = b"t" + cmp_int(table_id) + b"_r" + tail
    return (b"x" + keyspace + key) if keyspace is not None else key


def index_key(table_id: int, index_id: int, datums: bytes) -> bytes:
    return b"t" + cmp_int(table_id) + b"_i" + cmp_int(index_id) + datums


def key_int(v: int) -> bytes:
    return b"\x03" + cmp_int(v)


def key_uint(v: int) -> bytes:
    return b"\x04" + cmp_uint(v)


def key_bytes(b: bytes) -> bytes:
    return b"\x01" + mem_bytes(b)


def key_float(f: float) -> bytes:
    return b"\x05" + cmp_float(f)


def key_decimal(d: Decimal, precision: int, frac: int) -> bytes:
    return b"\x06" + bytes([precision, frac]) + decimal_bin(d, precision, frac)


def key_duration(nanos: int) -> bytes:
    return b"\x07" + cmp_int(nanos)


# ---------------------------------------------------------------- temporal

_DT = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?)?$")
_TM = re.compile(r"^(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d+))?$")


def pack_time(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> int:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return (((ymd << 17) | hms) << 24) | us


def packed_from_text(text: str, tz: tzinfo | None = None) -> int:
    m = _DT.match(text)
    assert m, text
    y, mo, d = int(m[1]), int(m[2]), int(m[3])
    h, mi, s = (int(m[i]) if m[i] else 0 for i in (4, 5, 6))
    us = int((m[7] or "").ljust(6, "0"))
    if tz is not None and (y or mo or d):
        utc = datetime(y, mo, d, h, mi, s, us, tzinfo=tz).astimezone(UTC)
        y, mo, d, h, mi, s, us = utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond
    return pack_time(y, mo, d, h, mi, s, us)


def nanos_from_text(text: str) -> int:
    m = _TM.match(text)
    assert m, text
    n = ((int(m[2]) * 60 + int(m[3])) * 60 + int(m[4])) * 10**9 + int((m[5] or "").ljust(9, "0"))
    return -n if m[1] else n


# ---------------------------------------------------------------- binary JSON


class JUint(NamedTuple):
    value: int


class JTime(NamedTuple):
    code: int  # 0x0e date, 0x0f datetime, 0x10 timestamp
    packed: int


class JDuration(NamedTuple):
    nanos: int
    fsp: int


class JOpaque(NamedTuple):
    type_byte: int
    data: bytes


def json_binary(obj: Any) -> tuple[int, bytes]:
    """Python JSON value (dicts keep their order) -> (type code, TiDB binary JSON body)."""
    if obj is None:
        return 0x04, b"\x00"
    if obj is True:
        return 0x04, b"\x01"
    if obj is False:
        return 0x04, b"\x02"
    if isinstance(obj, JUint):
        return 0x0A, struct.pack("<Q", obj.value)
    if isinstance(obj, JTime):
        return obj.code, struct.pack("<Q", obj.packed)
    if isinstance(obj, JDuration):
        return 0x11, struct.pack("<qI", obj.nanos, obj.fsp)
    if isinstance(obj, JOpaque):
        return 0x0D, bytes([obj.type_byte]) + uvarint(len(obj.data)) + obj.data
    if isinstance(obj, int):
        if -(1 << 63) <= obj < 1 << 63:
            return 0x09, struct.pack("<q", obj)
        return 0x0A, struct.pack("<Q", obj)
    if isinstance(obj, float):
        return 0x0B, struct.pack("<d", obj)
    if isinstance(obj, str):
        raw = obj.encode("utf-8")
        return 0x0C, uvarint(len(raw)) + raw
    if isinstance(obj, Mapping):
        return 0x01, _container([k.encode("utf-8") for k in obj], list(obj.values()))
    if isinstance(obj, list | tuple):
        return 0x03, _container(None, list(obj))
    raise TypeError(obj)


def _container(keys: list[bytes] | None, values: list[Any]) -> bytes:
    n = len(values)
    head = 8 + (6 * n if keys is not None else 0) + 5 * n
    key_area = b"".join(keys or [])
    offset = head + len(key_area)
    key_entries = bytearray()
    pos = head
    for k in keys or []:
        key_entries += struct.pack("<IH", pos, len(k))
        pos += len(k)
    value_entries = bytearray()
    value_area = bytearray()
    for v in values:
        code, body = json_binary(v)
        if code == 0x04:
            value_entries += bytes([code]) + struct.pack("<I", body[0])
        else:
            value_entries += bytes([code]) + struct.pack("<I", offset + len(value_area))
            value_area += body
    size = offset + len(value_area)
    return struct.pack("<II", n, size) + bytes(key_entries) + bytes(value_entries) + key_area + bytes(value_area)


# ---------------------------------------------------------------- cells and rows

INT_TYPES = {TypeCode.TINYINT, TypeCode.SMALLINT, TypeCode.MEDIUMINT, TypeCode.INT, TypeCode.BIGINT}


def _flat(col: Column, value: Any, tz: tzinfo | None) -> tuple[str, Any]:
    """Flatten a model value the way TiDB does before encoding: (kind, flat value)."""
    tc = col.type_code
    if tc in INT_TYPES:
        return ("uint" if col.unsigned else "int"), value
    if tc is TypeCode.YEAR:
        return "int", value
    if tc in (TypeCode.FLOAT, TypeCode.DOUBLE):
        return "float", float(value)
    if tc is TypeCode.DECIMAL:
        return "decimal", value
    if tc in (TypeCode.DATE, TypeCode.DATETIME):
        return "uint", packed_from_text(value)
    if tc is TypeCode.TIMESTAMP:
        return "uint", packed_from_text(value, tz)  # stored in UTC
    if tc is TypeCode.TIME:
        return "int", nanos_from_text(value)
    if tc in (TypeCode.ENUM, TypeCode.SET, TypeCode.BIT):
        return "uint", value
    if tc is TypeCode.JSON:
        return "json", json_binary(json.loads(value))
    if isinstance(value, str):
        return "bytes", value.encode("utf-8")
    return "bytes", bytes(value)


def cell_v2(col: Column, value: Any, tz: tzinfo | None = None) -> bytes:
    kind, flat = _flat(col, value, tz)
    if kind == "int":
        return compact_int(flat)
    if kind == "uint":
        return compact_uint(flat)
    if kind == "float":
        return cmp_float(flat)
    if kind == "decimal":
        p, s = col.length or 10, col.decimal or 0
        return bytes([p, s]) + decimal_bin(flat, p, s)
    if kind == "json":
        return bytes([flat[0]]) + flat[1]
    return flat


def datum_v1(col: Column, value: Any, tz: tzinfo | None = None) -> bytes:
    if value is None:
        return b"\x00"
    kind, flat = _flat(col, value, tz)
    if kind == "int":
        return b"\x08" + varint(flat)
    if kind == "uint":
        return b"\x09" + uvarint(flat)
    if kind == "float":
        return b"\x05" + cmp_float(flat)
    if kind == "decimal":
        p, s = col.length or 10, col.decimal or 0
        return b"\x06" + bytes([p, s]) + decimal_bin(flat, p, s)
    if kind == "json":
        return b"\x0a" + bytes([flat[0]]) + flat[1]
    return b"\x02" + varint(len(flat)) + flat


def row_v2(cells: Mapping[int, bytes | None], checksum: tuple[int, bytes] | None = None, extra: bool = False) -> bytes:
    """cells: column id -> cell bytes (None = NULL). checksum: (version, key) appends a trailer."""
    notnull = sorted(i for i, c in cells.items() if c is not None)
    null = sorted(i for i, c in cells.items() if c is None)
    data = b""
    offsets = []
    for i in notnull:
        data += cells[i]  # type: ignore[operator]
        offsets.append(len(data))
    large = any(i > 255 for i in cells) or len(data) > 0xFFFF
    flags = (1 if large else 0) | (2 if checksum else 0)
    out = bytearray([128, flags]) + struct.pack("<HH", len(notnull), len(null))
    idfmt, offfmt = ("<I", "<I") if large else ("<B", "<H")
    for i in notnull + null:
        out += struct.pack(idfmt, i)
    for o in offsets:
        out += struct.pack(offfmt, o)
    out += data
    if checksum:
        version, key = checksum
        header = version | (0x08 if extra else 0)
        crc = zlib.crc32(bytes(out) + bytes([header]))
        crc = zlib.crc32(key if version == 1 else key[11:], crc)
        out += bytes([header]) + struct.pack("<I", crc) + (struct.pack("<I", 0xDEADBEEF) if extra else b"")
    return bytes(out)


def row_v1(datums: Iterable[tuple[int, bytes]]) -> bytes:
    out = b"".join(b"\x08" + varint(cid) + d for cid, d in datums)
    return out or b"\x00"


def encode_image(
    schema: TableSchema, image: tuple[Any, ...], fmt: str, skip: Iterable[int] = (), tz: tzinfo | None = None
) -> bytes:
    """A whole row image in format "v2" or "v1"; positions in ``skip`` (the int handle) are left out."""
    skipped = set(skip)
    cols = [(i, c) for i, c in enumerate(schema.columns) if i not in skipped]
    if fmt == "v2":
        return row_v2({c.column_id: None if image[i] is None else cell_v2(c, image[i], tz) for i, c in cols})
    return row_v1((c.column_id, datum_v1(c, image[i], tz)) for i, c in cols)


# ---------------------------------------------------------------- table info JSON


def table_info(
    schema: TableSchema,
    table_id: int,
    *,
    common_handle: bool = False,
    partitions: Iterable[int] = (),
    origin_defaults: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """TiDB table info JSON for a model schema (column ids from ``Column.column_id``)."""
    primary = next((i for i in schema.indexes if i.primary), None)
    pk_cols = set(primary.columns) if primary else set()
    pk_is_handle = (
        not common_handle
        and primary is not None
        and len(primary.columns) == 1
        and schema.column(primary.columns[0]).type_code in INT_TYPES
    )
    cols = []
    for off, c in enumerate(schema.columns):
        flag = 0
        if not c.nullable:
            flag |= 1
        if c.name in pk_cols:
            flag |= 2
        if c.unsigned:
            flag |= 32
        if c.zerofill:
            flag |= 64
        if c.charset == "binary":
            flag |= 128
        cols.append(
            {
                "id": c.column_id,
                "name": {"O": c.name, "L": c.name.lower()},
                "offset": off,
                "origin_default": (origin_defaults or {}).get(c.name),
                "default": None,
                "generated_expr_string": "",
                "generated_stored": False,
                "type": {
                    "Tp": int(c.type_code),
                    "Flag": flag,
                    "Flen": -1 if c.length is None else c.length,
                    "Decimal": -1 if c.decimal is None else c.decimal,
                    "Charset": c.charset,
                    "Collate": c.collation,
                    "Elems": list(c.elements) or None,
                },
                "state": 5,
            }
        )
    indexes = []
    for n, idx in enumerate(schema.indexes, 1):
        if idx.primary and pk_is_handle:
            continue
        indexes.append(
            {
                "id": n,
                "idx_name": {"O": idx.name, "L": idx.name.lower()},
                "idx_cols": [
                    {"name": {"O": c, "L": c.lower()}, "offset": schema.column_index[c], "length": -1}
                    for c in idx.columns
                ],
                "is_unique": idx.unique,
                "is_primary": idx.primary,
                "state": 5,
            }
        )
    info: dict[str, Any] = {
        "id": table_id,
        "name": {"O": schema.table, "L": schema.table.lower()},
        "cols": cols,
        "index_info": indexes,
        "pk_is_handle": pk_is_handle,
        "is_common_handle": common_handle,
        "max_col_id": max(c.column_id or 0 for c in schema.columns),
        "partition": {"definitions": [{"id": p, "name": {"O": f"p{p}", "L": f"p{p}"}} for p in partitions]}
        if partitions
        else None,
    }
    info.update(extra or {})
    return info


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
