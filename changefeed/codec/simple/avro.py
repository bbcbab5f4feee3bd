"""The Simple protocol's Avro form (``encoding-format=avro``, spec §3.5).

The Kafka value is the raw Avro binary of one datum of ``message.avsc``: a top-level union of 12
records of which TiCDC always writes branch 11 (Message), so every value starts with 0x16. No
magic byte, schema id or registry. fastavro picks union branches by Python type unless told, so
every union value here is written in fastavro's ``(type name, value)`` tuple notation: ``long``
vs ``float`` vs ``double``, ``string`` vs ``bytes`` and the Timestamp/UnsignedBigint records are
exactly the branches TiCDC writes.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from ...errors import ascii_digits, clip
from ...model import ABSENT, Column, DDLEvent, Op, RowChange, TableSchema, TypeCode
from ...model.gofloat import to_float32
from ...model.types import ALWAYS_UNSIGNED_TYPES, ENUM_SET_TYPES, FLOAT_TYPES, INTEGER_TYPES, NUMBER_TYPES
from ..values import decimal_renderer, int_range
from .common import (
    AVRO_NAMESPACE,
    DDL_TYPES,
    DML_TYPES,
    U64,
    FormatBase,
    Parsed,
    PlanColumn,
    TablePlan,
    build_column,
    build_index,
    build_table_schema,
    ddl_type_name,
    fail,
    index_docs,
    to_int64,
    to_uint64,
)
from .message import INT_TEXT, parse_decimal
from .schema_cache import SchemaCache
from .values import column_length, json_default

SCHEMA_PATH = Path(__file__).with_name("message.avsc")
SCHEMA = cast(list[dict[str, Any]], parse_schema(json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))))
"""The parsed top-level union (parsed once: fastavro re-parses an unparsed schema per call)."""

MESSAGE_BRANCH = 11
_MESSAGE_SCHEMA = SCHEMA[MESSAGE_BRANCH]
_MESSAGE_PREFIX = b"\x16"  # zigzag(11): the top-level union branch of Message

_NS = AVRO_NAMESPACE + "."
WATERMARK, BOOTSTRAP, DDL, DML = (_NS + n for n in ("Watermark", "Bootstrap", "DDL", "DML"))
TIMESTAMP, UNSIGNED_BIGINT, TABLE_SCHEMA = _NS + "Timestamp", _NS + "UnsignedBigint", _NS + "TableSchema"
_PAYLOAD = {"WATERMARK": WATERMARK, "BOOTSTRAP": BOOTSTRAP, "DDL": DDL, "DML": DML}
_OP_TYPE = {Op.INSERT: "INSERT", Op.UPDATE: "UPDATE", Op.DELETE: "DELETE"}
# TiCDC's Avro DataType carries unsigned/zerofill for numbers and the always-unsigned BIT/YEAR.
_SIGNEDNESS_TYPES = NUMBER_TYPES | ALWAYS_UNSIGNED_TYPES


def write_message(datum: dict[str, Any]) -> bytes:
    """Avro binary of ``Message`` as a datum of the top-level union: 0x16 then the record.

    Byte-identical to writing ``(Message name, datum)`` against the whole union; writing the
    record directly skips fastavro's per-call union resolution over 12 candidates.
    """
    out = io.BytesIO()
    out.write(_MESSAGE_PREFIX)
    schemaless_writer(out, _MESSAGE_SCHEMA, datum)
    return out.getvalue()


# ------------------------------------------------------------------ encoding


def _float(v: float) -> tuple[str, float]:
    return ("float", v if math.isfinite(v) else 0.0)  # mounter: NaN/Inf become 0 (spec §0.4)


def _double(v: float) -> tuple[str, float]:
    return ("double", v if math.isfinite(v) else 0.0)


def value_renderer(col: Column, location: str) -> Callable[[Any], Any]:
    """Non-NULL model value -> the map-value union branch TiCDC writes (spec §3.5)."""
    tc = col.type_code
    if tc in INTEGER_TYPES:
        if tc is TypeCode.BIGINT and col.unsigned:
            # every BIGINT UNSIGNED: UnsignedBigint{value: int64(uint64)}; 2**64-1 -> -1
            return lambda v: (UNSIGNED_BIGINT, {"value": to_int64(v)})
        return lambda v: ("long", v)
    if tc is TypeCode.YEAR or tc in ENUM_SET_TYPES:
        return lambda v: ("long", v)
    if tc is TypeCode.BIT:
        return lambda v: ("string", str(v))  # the code writes BIT as decimal text (docs say long)
    if tc is TypeCode.FLOAT:
        return _float
    if tc is TypeCode.DOUBLE:
        return _double
    if tc is TypeCode.DECIMAL:
        render = decimal_renderer(col.decimal)
        return lambda v: ("string", render(v))
    if tc is TypeCode.TIMESTAMP:
        return lambda v: (TIMESTAMP, {"location": location, "value": v})
    if col.is_bytes:
        return lambda v: ("bytes", v)
    return lambda v: ("string", v)


def data_type_avro(col: Column) -> dict[str, Any]:
    """DataType: optional members set by type, as TiCDC's Avro marshaller does (spec §3.5)."""
    tc = col.type_code
    return {
        "mysqlType": col.type_name,
        "charset": col.charset,
        "collate": col.collation,
        "length": column_length(col),
        "decimal": ("int", col.decimal or 0) if tc in (TypeCode.DECIMAL, TypeCode.TIMESTAMP) else None,
        "elements": ("array", list(col.elements)) if tc in ENUM_SET_TYPES else None,
        "unsigned": ("boolean", col.unsigned) if tc in _SIGNEDNESS_TYPES else None,
        "zerofill": ("boolean", col.zerofill) if tc in _SIGNEDNESS_TYPES else None,
    }


def _default_text(col: Column) -> Any:
    value = json_default(col)
    if value is None:
        return None
    if isinstance(value, bool):
        return ("string", "1" if value else "0")
    return ("string", value if isinstance(value, str) else str(value))


def table_schema_avro(ts: TableSchema) -> dict[str, Any]:
    return {
        "database": ts.schema,  # Avro TableSchema says `database` where JSON says `schema`
        "table": ts.table,
        "tableID": ts.table_id,
        "version": to_int64(ts.version),
        "columns": [
            {"name": c.name, "dataType": data_type_avro(c), "nullable": c.nullable, "default": _default_text(c)}
            for c in ts.columns
        ],
        "indexes": index_docs(ts),
    }


def _render(cols: list[PlanColumn], image: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    # AvroFormat._plan gives every column a renderer (value_renderer never returns None here)
    rendered = cast(list[tuple[str, int, Callable[[Any], Any]]], cols)
    return (
        "map",
        {name: (None if v is None else render(v)) for name, i, render in rendered if (v := image[i]) is not ABSENT},
    )


class AvroFormat(FormatBase):
    """Encodes model events to Simple Avro and parses Simple Avro into `Parsed`."""

    def _plan(self, ts: TableSchema) -> TablePlan:
        # Columns in table order (TiCDC's Go map order is random; Avro maps carry no order rule).
        cols: list[PlanColumn] = [(c.name, i, value_renderer(c, self.location)) for i, c in enumerate(ts.columns)]
        return TablePlan(ts, cols, table_schema_avro(ts))

    # -------------------------------------------------------------- encode

    def dml(self, row: RowChange, handle_key_only: bool, location: str, build_ts: int) -> bytes:
        ts = row.table_schema
        cols, new, old_cols, old = self.dml_images(row, handle_key_only)
        payload = {
            "version": 1,
            "database": ts.schema,
            "table": ts.table,
            "tableID": row.physical_table_id,
            "type": _OP_TYPE[row.op],
            "commitTs": to_int64(row.commit_ts),
            "buildTs": build_ts,
            "schemaVersion": to_int64(ts.version),
            "claimCheckLocation": ("string", location) if location else None,
            "handleKeyOnly": ("boolean", True) if handle_key_only else None,
            "checksum": None,  # the model carries no row checksum
            "data": _render(cols, new) if new is not None else None,
            "old": _render(old_cols, old) if old is not None else None,
        }
        return write_message({"type": "DML", "payload": (DML, payload)})

    def ddl(self, ddl: DDLEvent, build_ts: int) -> bytes:
        kind = ddl_type_name(ddl.ddl_type)
        pre = ddl.pre_table_schema if kind != "CREATE" else None
        payload = {
            "version": 1,
            "type": kind,
            "sql": ddl.query,
            "commitTs": to_int64(ddl.commit_ts),
            "buildTs": build_ts,
            "tableSchema": (TABLE_SCHEMA, self._tables.get(ddl.table_schema).schema_doc) if ddl.table_schema else None,
            "preTableSchema": (TABLE_SCHEMA, self._tables.get(pre).schema_doc) if pre is not None else None,
        }
        return write_message({"type": "DDL", "payload": (DDL, payload)})

    def watermark(self, commit_ts: int, build_ts: int) -> bytes:
        payload = {"version": 1, "commitTs": to_int64(commit_ts), "buildTs": build_ts}
        return write_message({"type": "WATERMARK", "payload": (WATERMARK, payload)})

    def bootstrap(self, ts: TableSchema, build_ts: int) -> bytes:
        payload = {"version": 1, "buildTs": build_ts, "tableSchema": self._tables.get(ts).schema_doc}
        return write_message({"type": "BOOTSTRAP", "payload": (BOOTSTRAP, payload)})

    # -------------------------------------------------------------- decode

    def parse(self, value: bytes, where: str, cache: SchemaCache) -> Parsed:
        if value[:1] != _MESSAGE_PREFIX:
            raise fail(where, f"Avro value must start with 0x16 (union branch 11, Message), got {value[:1].hex()!r}")
        buf = io.BytesIO(value)
        buf.seek(1)
        try:
            # the Message schema is a record: fastavro reads it as a dict
            msg = cast(dict[str, Any], schemaless_reader(buf, _MESSAGE_SCHEMA, None, return_record_name=True))
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, UnicodeDecodeError...
            raise fail(where, f"invalid Avro data: {type(exc).__name__}: {exc}") from None
        if buf.tell() != len(value):
            raise fail(where, f"{len(value) - buf.tell()} trailing bytes after the Avro datum")
        mtype = msg["type"]
        name, payload = msg["payload"]
        if _PAYLOAD[mtype] != name:
            raise fail(where, f"message type {mtype} carries a {name.rsplit('.', 1)[-1]} payload")
        if payload["version"] != 1:
            raise fail(where, f"unsupported protocol version {clip(payload['version'])} (expected 1)")
        if mtype == "WATERMARK":
            return Parsed(type="WATERMARK", commit_ts=to_uint64(payload["commitTs"]))
        if mtype == "BOOTSTRAP":
            return Parsed(type="BOOTSTRAP", table_schema=self.table_schema(where, payload["tableSchema"], cache))
        if mtype == "DDL":
            kind = payload["type"]
            if kind not in DDL_TYPES:  # pragma: no cover - the enum admits nothing else
                raise fail(where, f"unknown DDL type {clip(kind)}")
            return Parsed(
                type=kind,
                commit_ts=to_uint64(payload["commitTs"]),
                sql=payload["sql"],
                table_schema=self.table_schema(where, payload["tableSchema"], cache),
                pre_table_schema=self.table_schema(where, payload["preTableSchema"], cache, "preTableSchema"),
            )
        kind = payload["type"]
        if kind not in DML_TYPES:  # pragma: no cover
            raise fail(where, f"unknown DML type {clip(kind)}")
        # checksum: read by fastavro and ignored (the model has no place for it)
        return Parsed(
            type=kind,
            commit_ts=to_uint64(payload["commitTs"]),
            database=payload["database"],
            table=payload["table"],
            table_id=payload["tableID"],
            schema_version=to_uint64(payload["schemaVersion"]),
            claim_check_location=payload["claimCheckLocation"] or "",
            handle_key_only=bool(payload["handleKeyOnly"]),
            data=payload["data"],
            old=payload["old"],
        )

    def _table_schema(self, where: str, obj: Any, cache: SchemaCache) -> TableSchema | None:
        if obj is None:
            return None
        if isinstance(obj, tuple):  # [null, TableSchema] read with return_record_name
            obj = obj[1]
        version = to_uint64(obj["version"])
        cached = cache.get((obj["database"], obj["table"], version))
        if cached is not None:
            return cached
        cols = []
        for c in obj["columns"]:
            dt = c["dataType"]
            cols.append(
                build_column(
                    where,
                    name=c["name"],
                    mysql_type=dt["mysqlType"],
                    charset=dt["charset"],
                    collate=dt["collate"],
                    length=dt["length"],
                    decimal=dt["decimal"],
                    elements=dt["elements"],
                    unsigned=dt["unsigned"],
                    zerofill=dt["zerofill"],
                    nullable=c["nullable"],
                    default=c["default"],
                    bit_default_text=True,
                )
            )
        idxs = [
            build_index(where, name=i["name"], unique=i["unique"], primary=i["primary"], columns=i["columns"])
            for i in obj["indexes"]
        ]
        return build_table_schema(
            where,
            schema=obj["database"],
            table=obj["table"],
            table_id=obj["tableID"],
            version=version,
            columns=cols,
            indexes=idxs,
        )

    @staticmethod
    def value_parser(col: Column) -> Callable[[Any], Any]:
        return value_parser(col)


# ------------------------------------------------------------------ value parsing


def _branch(raw: Any) -> str:
    if isinstance(raw, tuple):
        record_name: str = raw[0]
        return record_name.rsplit(".", 1)[-1]
    return {bool: "boolean", int: "long", float: "float/double", str: "string", bytes: "bytes"}.get(
        type(raw), type(raw).__name__
    )


def value_parser(col: Column) -> Callable[[Any], Any]:  # noqa: C901  (per-type switch: TiCDC Simple Avro value union)
    """Avro map value (not null) -> model value; a wrong union branch is a ValueError.

    fastavro hands back ``float`` and ``double`` both as a Python float, so those two branches
    cannot be told apart; everything else is checked. Older documented forms are accepted too:
    BIT as long, BIGINT UNSIGNED as long or (above 2**63-1) as string, TIMESTAMP as string.
    """
    tc = col.type_code
    lo, hi = int_range(col)

    def bad(raw: Any, want: str) -> ValueError:
        return ValueError(f"union branch {_branch(raw)} where {want} was expected")

    if tc is TypeCode.BIGINT and col.unsigned:

        def parse_ubigint(raw: Any) -> int:
            if type(raw) is tuple and raw[0] == UNSIGNED_BIGINT:
                return to_uint64(raw[1]["value"])
            if type(raw) is int and raw >= 0:
                return raw
            if type(raw) is str and ascii_digits(raw) and int(raw) <= U64:
                return int(raw)
            raise bad(raw, "UnsignedBigint")

        return parse_ubigint
    if tc in INTEGER_TYPES or tc is TypeCode.YEAR or tc in ENUM_SET_TYPES:

        def parse_long(raw: Any) -> int:
            if type(raw) is int:
                if lo <= raw <= hi:
                    return raw
                raise ValueError(f"{raw} out of range [{lo}, {hi}]")
            raise bad(raw, "long")

        return parse_long
    if tc is TypeCode.BIT:

        def parse_bit(raw: Any) -> int:
            if type(raw) is str and INT_TEXT(raw) and 0 <= int(raw) <= U64:
                return int(raw)
            if type(raw) is int and raw >= 0:
                return raw
            raise bad(raw, "string (BIT as decimal text)")

        return parse_bit
    if tc in FLOAT_TYPES:
        f32 = tc is TypeCode.FLOAT

        def parse_float(raw: Any) -> float:
            if type(raw) is not float:
                raise bad(raw, "float" if f32 else "double")
            if not math.isfinite(raw):
                raise ValueError("not a finite number")
            return to_float32(raw) if f32 else raw

        return parse_float
    if tc is TypeCode.DECIMAL:

        def parse_dec(raw: Any) -> Decimal:
            if type(raw) is not str:
                raise bad(raw, "string (decimal text)")
            return parse_decimal(raw)  # the JSON form's rule: no exponent, at most 65 digits

        return parse_dec
    if tc is TypeCode.TIMESTAMP:

        def parse_ts(raw: Any) -> str:
            if type(raw) is tuple and raw[0] == TIMESTAMP:
                text: str = raw[1]["value"]
                return text
            if type(raw) is str:
                return raw
            raise bad(raw, "Timestamp")

        return parse_ts
    if col.is_bytes:

        def parse_bytes(raw: Any) -> bytes:
            if type(raw) is bytes:
                return raw
            raise bad(raw, "bytes")

        return parse_bytes

    def parse_string(raw: Any) -> str:
        if type(raw) is str:
            return raw
        raise bad(raw, "string")

    return parse_string
