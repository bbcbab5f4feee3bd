"""Row values: format v2 (``rowcodec``) and the old datum-pair format v1 (spec §6.3-6.5).

A `RowDecoder` is compiled once per table version: column id -> (position, cell decoder), plus
the value every missing column takes. Each v2 column-id layout is then validated once and
compiled to straight-line code, so per row the work is one header parse and one generated call.
"""

from __future__ import annotations

import base64
import itertools
import logging
import struct
import zlib
from collections.abc import Callable
from datetime import tzinfo
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from ...errors import CaptureError
from ...model.gofloat import format_f, to_float32
from ...model.schema import Column
from ...model.types import (
    CALENDAR_TYPES,
    DATE_TYPES,
    DATETIME_TYPES,
    ENUM_SET_BIT_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    STRING_TYPES,
    UINT_VALUE_TYPES,
    TypeCode,
)
from ...model.values import format_datetime
from .catalog import TableVersion
from .codec import (
    BYTES_FLAG,
    COMPACT_BYTES_FLAG,
    DECIMAL_FLAG,
    DURATION_FLAG,
    FLOAT_FLAG,
    INT_FLAG,
    JSON_FLAG,
    NIL_FLAG,
    UINT_FLAG,
    UVARINT_FLAG,
    VARINT_FLAG,
    VECTOR_FLOAT32_FLAG,
    decode_decimal_bin,
)
from .datum import decode_datum
from .jsonbin import json_to_text
from .temporal import (
    ZoneConverter,
    date_text,
    datetime_text,
    duration_text,
    parse_datetime_text,
    parse_duration_text,
    utc_to_zone,
)

log = logging.getLogger(__name__)

CODEC_VER = 128
FLAG_LARGE = 0x01
FLAG_CHECKSUM = 0x02
_CHECKSUM_VERSION_MASK = 0x07
_CHECKSUM_EXTRA = 0x08

_MASK64 = (1 << 64) - 1
_INT64_MAX = (1 << 63) - 1
_U64 = struct.Struct(">Q")
_U64LE = struct.Struct("<Q")
_F64 = struct.Struct(">d")
_SIGN = 1 << 63
_HEADER = struct.Struct("<BBHH")
_U32 = struct.Struct("<I")
_DEC_CTX = Context(prec=100)

_INT_DATUMS = frozenset({INT_FLAG, UINT_FLAG, VARINT_FLAG, UVARINT_FLAG})
_DURATION_DATUMS = _INT_DATUMS | {DURATION_FLAG}
_BYTES_DATUMS = frozenset({BYTES_FLAG, COMPACT_BYTES_FLAG})

V2Cell = Callable[[bytes, int, int], Any]
"""Decode the cell ``buf[start:end]`` of a v2 row into the model value."""
V1Cell = Callable[[int, Any], Any]
"""Turn a (datum flag, raw datum value) of a v1 row or a key into the model value."""

_Fill = Callable[[bytes, int, tuple[int, ...], Any], Any]
_Plan = tuple[_Fill, struct.Struct]
"""(fills a row from the value's cells, reads the end offsets) for one column-id layout."""


def _offsets_out_of_order(offsets: tuple[int, ...]) -> None:
    for a, b in itertools.pairwise(offsets):
        if b < a:
            raise CaptureError(f"row value v2 offsets not ascending ({a}, {b})")


def _compile_fill(
    cells: list[tuple[int, V2Cell | None]], nulls: list[int], direct: tuple[list[Any], int | None] | None
) -> _Fill:
    """Straight-line code for one layout: unpack the offsets, check they ascend, decode each cell.

    Generated (like dataclasses' __init__) so the per-row work has no loop, zip or tuple unpacking;
    the common cells are inlined as expressions. With ``direct`` = (template, handle position) the
    code returns the finished image tuple (``h`` = the int handle); without, it fills ``row``.
    """
    env: dict[str, Any] = {
        "_order": _offsets_out_of_order,
        "_int": int.from_bytes,
        "_LENS": _COMPACT_LENGTHS,
        "_cint": _compact_int,
        "_cuint": _compact_uint,
    }
    ends = [f"o{i}" for i in range(len(cells))]
    body = []
    if ends:
        body.append(f"{', '.join(ends)}, = offsets")
        if len(ends) > 1:
            body.append(f"if not ({' <= '.join(ends)}): _order(offsets)")
    exprs: dict[int, str] = {}
    prev = "ds"
    for i, (pos, cell) in enumerate(cells):
        body.append(f"e{i} = ds + o{i}")
        if cell is not None:  # (None: an id of a dropped column, its bytes are skipped)
            inline = _INLINE.get(cell)
            if inline is None:
                env[f"c{i}"] = cell
                inline = f"c{i}(value, {{a}}, {{b}})"
            exprs[pos] = inline.format(a=prev, b=f"e{i}")
        prev = f"e{i}"
    for pos in nulls:
        exprs[pos] = "None"
    if direct is None:
        body += [f"row[{pos}] = {expr}" for pos, expr in exprs.items()]
        src = "def fill(value, ds, offsets, row):\n    " + "\n    ".join(body or ["pass"]) + "\n"
    else:
        template, handle_pos = direct
        items = []
        for pos, default in enumerate(template):
            if pos == handle_pos:
                items.append("h")  # PKIsHandle: the key's handle wins over anything stored
            elif pos in exprs:
                items.append(exprs[pos])
            else:
                env[f"k{pos}"] = default  # a missing column: its default
                items.append(f"k{pos}")
        body.append(f"return ({', '.join(items)},)")
        src = "def fill(value, ds, offsets, h):\n    " + "\n    ".join(body) + "\n"
    exec(src, env)  # the source holds only integers and fixed names
    return env["fill"]


MISSING: Any = object()
"""Marks a common-handle PK column the row value did not carry (filled from the key)."""


def _utf8_cell(buf: bytes, start: int, end: int) -> str:
    return buf[start:end].decode("utf-8")


def _bytes_cell(buf: bytes, start: int, end: int) -> bytes:
    return buf[start:end]


# ---------------------------------------------------------------- compact ints


def _compact_int(buf: bytes, start: int, end: int) -> int:
    # rowcodec encodeInt: the smallest of 1/2/4/8 little-endian bytes.
    n = end - start
    if n == 1:
        v = buf[start]
        return v - 256 if v > 127 else v
    if n not in (2, 4, 8):
        raise CaptureError(f"compact int of {n} bytes (expected 1, 2, 4 or 8)")
    return int.from_bytes(buf[start:end], "little", signed=True)


def _compact_uint(buf: bytes, start: int, end: int) -> int:
    n = end - start
    if n == 1:
        return buf[start]
    if n not in (2, 4, 8):
        raise CaptureError(f"compact uint of {n} bytes (expected 1, 2, 4 or 8)")
    return int.from_bytes(buf[start:end], "little")


_COMPACT_LENGTHS = frozenset({1, 2, 4, 8})
_INLINE: dict[Callable[..., Any], str] = {
    _compact_int: '_int(value[{a}:{b}], "little", signed=True) if {b} - {a} in _LENS else _cint(value, {a}, {b})',
    _compact_uint: '_int(value[{a}:{b}], "little") if {b} - {a} in _LENS else _cuint(value, {a}, {b})',
    _utf8_cell: "value[{a}:{b}].decode()",
    _bytes_cell: "value[{a}:{b}]",
}


def _int_datum(flag: int, raw: Any, what: str) -> int:
    if flag not in _INT_DATUMS:
        raise CaptureError(f"bad datum flag {flag} for {what} (expected an integer datum)")
    return raw


# ---------------------------------------------------------------- per-type cell decoders


def _cells(col: Column, tz: tzinfo | None) -> tuple[V2Cell, V1Cell]:  # noqa: C901  (per-type switch: TiDB rowcodec decoders per column type)
    """The v2 and v1 decoders of one column (TiDB ``rowcodec`` encodeValueDatum / unflatten)."""
    tc = col.type_code
    name = col.name

    if tc in INTEGER_TYPES or tc is TypeCode.YEAR:
        if col.unsigned and tc is not TypeCode.YEAR:

            def v1_uint(flag: int, raw: Any) -> int:
                return _int_datum(flag, raw, name) & _MASK64  # an int datum in an unsigned column

            return _compact_uint, v1_uint

        def v1_int(flag: int, raw: Any) -> int:
            v = _int_datum(flag, raw, name)
            return v - (1 << 64) if v > _INT64_MAX else v

        return _compact_int, v1_int

    if tc in FLOAT_TYPES:
        narrow = tc is TypeCode.FLOAT

        def finish_float(v: float) -> float:
            if v - v != 0.0:  # NaN or +-Inf: TiCDC maps them to 0
                return 0.0
            return to_float32(v) if narrow else v

        def v2_float(buf: bytes, start: int, end: int) -> float:
            # EncodeFloat of the float64 (FLOAT is widened when written)
            if end - start != 8:
                raise CaptureError(f"float cell of {end - start} bytes (expected 8)")
            u = _U64.unpack_from(buf, start)[0]
            v = _F64.unpack(_U64.pack(u ^ _SIGN if u & _SIGN else u ^ _MASK64))[0]
            if v - v != 0.0:
                return 0.0
            return to_float32(v) if narrow else v

        def v1_float(flag: int, raw: Any) -> float:
            if flag != FLOAT_FLAG:
                raise CaptureError(f"bad datum flag {flag} for float column {name!r}")
            return finish_float(raw)

        return v2_float, v1_float

    if tc is TypeCode.DECIMAL:
        scale = col.decimal

        def finish_dec(value: Decimal, frac: int) -> Decimal:
            if scale is not None and frac != scale:
                try:
                    return value.quantize(Decimal(1).scaleb(-scale), context=_DEC_CTX)
                except InvalidOperation:
                    raise CaptureError(f"decimal {value} does not fit scale {scale} of column {name!r}") from None
            return value

        def v2_dec(buf: bytes, start: int, end: int) -> Decimal:
            if end - start < 2:
                raise CaptureError(f"decimal cell of {end - start} bytes")
            frac = buf[start + 1]
            value, stop = decode_decimal_bin(buf, start + 2, buf[start], frac)
            if stop != end:
                raise CaptureError(f"decimal cell has {end - stop} stray bytes")
            return finish_dec(value, frac)

        def v1_dec(flag: int, raw: Any) -> Decimal:
            if flag != DECIMAL_FLAG:
                raise CaptureError(f"bad datum flag {flag} for decimal column {name!r}")
            return finish_dec(raw[0], raw[2])

        return v2_dec, v1_dec

    if tc in CALENDAR_TYPES:
        fsp = col.decimal or 0
        if tc in DATE_TYPES:
            render: Callable[[int], str] = date_text
        elif tc is TypeCode.DATETIME or tz is None:

            def render(packed: int) -> str:
                return datetime_text(packed, fsp)
        else:
            zone = ZoneConverter(tz)

            def render(packed: int) -> str:
                return zone.text(packed, fsp)

        def v2_time(buf: bytes, start: int, end: int) -> str:
            # packed time as a compact uint; a non-zero time always takes 8 bytes
            if end - start == 8:
                return render(_U64LE.unpack_from(buf, start)[0])
            return render(_compact_uint(buf, start, end))

        def v1_time(flag: int, raw: Any) -> str:
            return render(_int_datum(flag, raw, name) & _MASK64)

        return v2_time, v1_time

    if tc is TypeCode.TIME:
        fsp = col.decimal or 0

        def v2_dur(buf: bytes, start: int, end: int) -> str:
            return duration_text(_compact_int(buf, start, end), fsp)

        def v1_dur(flag: int, raw: Any) -> str:
            if flag not in _DURATION_DATUMS:
                raise CaptureError(f"bad datum flag {flag} for time column {name!r}")
            return duration_text(raw, fsp)

        return v2_dur, v1_dur

    if tc in ENUM_SET_BIT_TYPES:

        def v1_enum(flag: int, raw: Any) -> int:
            return _int_datum(flag, raw, name) & _MASK64

        return _compact_uint, v1_enum

    if tc in STRING_TYPES or tc is TypeCode.GEOMETRY:
        as_bytes = col.is_bytes
        # TiDB keeps every non-binary charset as UTF-8 bytes in storage.
        v2_str = _bytes_cell if as_bytes else _utf8_cell

        def v1_str(flag: int, raw: Any) -> Any:
            if flag not in _BYTES_DATUMS:
                raise CaptureError(f"bad datum flag {flag} for string column {name!r}")
            return raw if as_bytes else raw.decode("utf-8")

        return v2_str, v1_str

    if tc is TypeCode.JSON:

        def v2_json(buf: bytes, start: int, end: int) -> str:
            if end <= start:
                raise CaptureError(f"empty JSON cell in column {name!r}")
            return json_to_text(buf[start], buf, start + 1, end)

        def v1_json(flag: int, raw: Any) -> str:
            if flag != JSON_FLAG:
                raise CaptureError(f"bad datum flag {flag} for JSON column {name!r}")
            return json_to_text(raw[0], raw[1])

        return v2_json, v1_json

    if tc is TypeCode.VECTOR:

        def v2_vec(buf: bytes, start: int, end: int) -> str:
            return vector_text(buf[start:end])

        def v1_vec(flag: int, raw: Any) -> str:
            if flag != VECTOR_FLOAT32_FLAG:
                raise CaptureError(f"bad datum flag {flag} for vector column {name!r}")
            return vector_text(raw)

        return v2_vec, v1_vec

    if tc is TypeCode.NULL:

        def v2_null(buf: bytes, start: int, end: int) -> None:
            raise CaptureError(f"column {name!r} of type NULL holds a value")

        def v1_null(flag: int, raw: Any) -> None:
            raise CaptureError(f"column {name!r} of type NULL holds a value")

        return v2_null, v1_null

    raise CaptureError(f"column {name!r}: type {tc.name} cannot be decoded")


def vector_text(raw: bytes) -> str:
    """TiDB VectorFloat32: u32 LE count + float32 LE values, printed ``[1,2.5]``."""
    if len(raw) < 4:
        raise CaptureError("truncated vector value")
    count = _U32.unpack_from(raw, 0)[0]
    if len(raw) != 4 + 4 * count:
        raise CaptureError(f"vector of {count} elements has {len(raw) - 4} payload bytes")
    values = struct.unpack_from(f"<{count}f", raw, 4)
    return "[" + ",".join(format_f(v, float32=True) for v in values) + "]"


# ---------------------------------------------------------------- missing columns


def zero_value(col: Column) -> Any:
    """TiDB ``table.GetZeroValue``: what a NOT NULL column without origin default reads as."""
    tc = col.type_code
    if tc is TypeCode.ENUM:
        return 1 if col.elements else 0  # the first member
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        return 0
    if tc in FLOAT_TYPES:
        return 0.0
    if tc is TypeCode.DECIMAL:
        return Decimal(0).scaleb(-(col.decimal or 0))
    if tc in DATE_TYPES:
        return "0000-00-00"
    if tc in DATETIME_TYPES:
        return format_datetime(0, 0, 0, 0, 0, 0, 0, col.decimal or 0)
    if tc is TypeCode.TIME:
        return duration_text(0, col.decimal or 0)
    if tc is TypeCode.JSON:
        return "null"
    if tc is TypeCode.VECTOR:
        return "[]"
    if tc is TypeCode.NULL:
        return None
    if col.is_bytes:
        # BINARY(n) reads as n zero bytes, like the padded values TiDB stores.
        return bytes(col.length or 0) if tc is TypeCode.CHAR else b""
    return ""


def origin_default(col: Column, raw: Any, raw_bit: str | None, tz: tzinfo | None) -> Any:  # noqa: C901  (per-type switch: TiDB OriginDefaultValue text per column type)
    """The model value of TiDB's ``OriginDefaultValue`` (a string in table info JSON)."""
    tc = col.type_code
    if tc is TypeCode.BIT:
        if raw_bit is not None:
            return int.from_bytes(base64.b64decode(raw_bit), "big")
        return raw if isinstance(raw, int) else int.from_bytes(str(raw).encode("latin-1"), "big")
    text = raw if isinstance(raw, str) else str(raw)
    if tc in INTEGER_TYPES or tc is TypeCode.YEAR:
        return int(float(text)) if "." in text or "e" in text.lower() else int(text)
    if tc in FLOAT_TYPES:
        v = float(text)
        return to_float32(v) if tc is TypeCode.FLOAT else v
    if tc is TypeCode.DECIMAL:
        dec = Decimal(text)
        return dec if col.decimal is None else dec.quantize(Decimal(1).scaleb(-col.decimal), context=_DEC_CTX)
    if tc in DATE_TYPES:
        y, mo, d, *_ = parse_datetime_text(text)
        return f"{y:04d}-{mo:02d}-{d:02d}"
    if tc in DATETIME_TYPES:
        fields = parse_datetime_text(text)
        if tc is TypeCode.TIMESTAMP:
            fields = utc_to_zone(fields, tz)  # origin defaults of TIMESTAMP are kept in UTC
        return format_datetime(*fields, col.decimal or 0)
    if tc is TypeCode.TIME:
        return duration_text(parse_duration_text(text), col.decimal or 0)
    if tc is TypeCode.ENUM:
        if text == "":
            return 0
        try:
            return col.elements.index(text) + 1
        except ValueError:
            raise ValueError(f"default {text!r} is not a member") from None
    if tc is TypeCode.SET:
        bits = 0
        for member in filter(None, text.split(",")):
            if member not in col.elements:
                raise ValueError(f"default member {member!r} is not in the set")
            bits |= 1 << col.elements.index(member)
        return bits
    if col.is_bytes:
        return text.encode("utf-8")
    return text


# ---------------------------------------------------------------- the compiled decoder


class RowDecoder:
    """Decodes row values of one table version into lists aligned with its columns."""

    __slots__ = (
        "_by_id",
        "_max_id",
        "_plans",
        "_template",
        "direct",
        "handle_position",
        "handle_unsigned",
        "table",
        "v1",
        "verify_checksum",
        "width",
    )

    def __init__(self, table: TableVersion, tz: tzinfo | None, verify_checksum: bool = False) -> None:
        self.table = table
        self.verify_checksum = verify_checksum
        columns = table.schema.columns
        self.width = len(columns)
        template: list[Any] = [None] * self.width
        by_id: dict[int, tuple[int, V2Cell]] = {}
        v1: dict[int, tuple[int, V1Cell]] = {}
        for info in table.columns:
            col = columns[info.position]
            v2_cell, v1_cell = _cells(col, tz)
            by_id[info.column_id] = (info.position, v2_cell)
            v1[info.column_id] = (info.position, v1_cell)
            try:
                if info.has_origin_default:
                    template[info.position] = origin_default(col, info.origin_default, info.origin_default_bit, tz)
                elif not col.nullable:
                    template[info.position] = zero_value(col)
            except (ValueError, TypeError, ArithmeticError) as exc:
                raise CaptureError(
                    f"column {col.name!r} of {table.schema.qualified_name}: bad origin default "
                    f"{info.origin_default!r}: {exc}"
                ) from None
        for pos in table.common_handle_positions:
            template[pos] = MISSING
        self._by_id = by_id
        self.v1 = v1
        self._template = template
        self._max_id = table.max_column_id
        self._plans: dict[bytes, _Plan] = {}
        self.handle_position = table.handle_position
        self.handle_unsigned = table.handle_position is not None and columns[table.handle_position].unsigned
        self.direct = not table.is_common_handle

    @property
    def defaults(self) -> tuple[Any, ...]:
        """The value each column takes when a row value does not mention it (MISSING: from the key)."""
        return tuple(self._template)

    def decode(self, value: bytes, key: bytes | None = None) -> list[Any]:
        """A row value of either format as a list; missing columns take their default."""
        first = value[0]
        if first == CODEC_VER:
            if self.direct:
                pos = self.handle_position
                return list(self.decode_v2(value, key, None if pos is None else self._template[pos]))
            return self.decode_v2(value, key)
        if first in (VARINT_FLAG, NIL_FLAG):
            return self.decode_v1(value)
        raise CaptureError(f"unknown row format: first byte {first:#04x} (v2 is 0x80, v1 starts 0x08 or 0x00)")

    def _unknown(self, col_id: int) -> None:
        # TiDB skips ids it was not asked for (dropped columns); an id the table never had means
        # the catalog does not describe this data.
        if col_id > self._max_id:
            raise CaptureError(
                f"column id {col_id} not in schema of {self.table.schema.qualified_name} "
                f"(version {self.table.version_ts}, max column id {self._max_id})"
            )

    def decode_v2(self, value: bytes, key: bytes | None = None, handle: Any = None) -> Any:
        """Row format v2: header, sorted column ids, end offsets, data, optional checksum.

        Returns the image tuple with ``handle`` in the int-handle column when `direct` (tables
        without a common handle), else a list to finish (common-handle columns may be MISSING).
        """
        size = len(value)
        if size < 6:
            raise CaptureError(f"row value v2 truncated: {size} bytes")
        _, flags, n_notnull, n_null = _HEADER.unpack_from(value, 0)
        large = flags & FLAG_LARGE
        ids_end = 6 + (4 if large else 1) * (n_notnull + n_null)
        data_start = ids_end + (4 if large else 2) * n_notnull
        if data_start > size:
            raise CaptureError(f"row value v2 truncated in its column ids/offsets ({size} bytes)")
        layout = value[1:ids_end]  # flags, counts and ids: rows of one table mostly share it
        plan = self._plans.get(layout)
        if plan is None:
            plan = self._plan(layout, n_notnull, large)
        offsets = plan[1].unpack_from(value, ids_end)
        data_end = data_start + (offsets[-1] if n_notnull else 0)
        if data_end > size:
            raise CaptureError(f"row value v2 data ends at {data_end}, past the value's {size} bytes")
        if flags & FLAG_CHECKSUM:
            self._checksum(value, data_end, key)
        elif data_end != size:
            raise CaptureError(f"row value v2 has {size - data_end} bytes after its data")
        if self.direct:
            return plan[0](value, data_start, offsets, handle)
        row = self._template.copy()
        plan[0](value, data_start, offsets, row)
        return row

    def _plan(self, layout: bytes, n_notnull: int, large: int) -> _Plan:
        """Validate a column-id list once and cache what to do with each id."""
        cells, nulls = self.layout_cells(layout, n_notnull, large)
        direct = (self._template, self.handle_position) if self.direct else None
        plan = (_compile_fill(cells, nulls, direct), struct.Struct(f"<{n_notnull}{'I' if large else 'H'}"))
        if len(self._plans) >= 1024:
            self._plans.clear()
        self._plans[layout] = plan
        return plan

    def layout_cells(
        self, layout: bytes, n_notnull: int, large: int
    ) -> tuple[list[tuple[int, V2Cell | None]], list[int]]:
        """A v2 layout (flags, counts, ids) -> (position, cell) per not-null id, positions of null ids.

        Raises for ids that do not ascend or that the table never had; a position of -1 (cell None)
        is a dropped column whose bytes are skipped.
        """
        ids = layout[5:]
        col_ids = struct.unpack(f"<{len(ids) // 4}I", ids) if large else tuple(ids)
        cells: list[tuple[int, V2Cell | None]] = []
        nulls: list[int] = []
        for part, (lo, hi) in (("", (0, n_notnull)), ("null ", (n_notnull, len(col_ids)))):
            prev = -1
            for col_id in col_ids[lo:hi]:
                if col_id <= prev:
                    raise CaptureError(f"row value v2 {part}column ids not ascending ({prev}, {col_id})")
                prev = col_id
                entry = self._by_id.get(col_id)
                if entry is None:
                    self._unknown(col_id)  # raises for ids the table never had
                if part:
                    if entry is not None:
                        nulls.append(entry[0])
                else:
                    cells.append(entry if entry is not None else (-1, None))
        return cells, nulls

    def _checksum(self, value: bytes, data_end: int, key: bytes | None) -> None:
        # Trailer: header byte (bits 0-2 version, bit 3 extra) + u32 LE CRC32 [+ u32 extra].
        size = len(value)
        if data_end >= size:
            raise CaptureError("row value v2 flags a checksum but has none")
        header = value[data_end]
        version = header & _CHECKSUM_VERSION_MASK
        if version > 2:
            raise CaptureError(f"row value v2 checksum version {version} unknown")
        need = 1 + 4 + (4 if header & _CHECKSUM_EXTRA else 0)
        if data_end + need != size:
            raise CaptureError(f"row value v2 checksum trailer is {size - data_end} bytes, expected {need}")
        if not self.verify_checksum or version == 0 or key is None:
            return  # v0 is a column-level checksum over rendered values; TiCDC recomputes it
        expected = _U32.unpack_from(value, data_end + 1)[0]
        crc = zlib.crc32(value[: data_end + 1])  # row bytes followed by the header byte
        # v1 adds the record key, v2 the encoded handle (the key after `t{id}_r`).
        crc = zlib.crc32(key if version == 1 else key[11:], crc)
        if crc != expected:
            raise CaptureError(f"row checksum mismatch: stored {expected:#010x}, computed {crc:#010x}")

    def decode_v1(self, value: bytes) -> list[Any]:
        """Old row format: (column id varint datum, value datum) pairs; ``00`` is the empty row."""
        row = self._template.copy()
        if value == b"\x00":
            return row
        v1 = self.v1
        pos = 0
        size = len(value)
        while pos < size:
            flag, col_id, pos = decode_datum(value, pos)
            if flag != VARINT_FLAG:
                raise CaptureError(f"row value v1: column id datum has flag {flag}, expected varint (8)")
            if pos >= size:
                raise CaptureError(f"row value v1: column {col_id} has no value")
            vflag, raw, pos = decode_datum(value, pos)
            entry = v1.get(col_id)
            if entry is None:
                if col_id <= 0:
                    raise CaptureError(f"row value v1: bad column id {col_id}")
                self._unknown(col_id)
                continue
            row[entry[0]] = None if vflag == NIL_FLAG else entry[1](vflag, raw)
        return row

    def key_value(self, position: int, flag: int, raw: Any) -> Any:
        """A common-handle key datum as the model value of the column at ``position``."""
        col = self.table.schema.columns[position]
        return self.v1[col.column_id][1](flag, raw)  # type: ignore[index]
