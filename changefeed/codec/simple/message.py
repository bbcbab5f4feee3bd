"""The Simple protocol's JSON form (``encoding-format=json``, spec §3.1-§3.2).

TiCDC marshals one Go struct with ``encoding/json``: members in struct order with ``omitempty``,
map keys (``data``/``old``) sorted, std string escaping. We build the same member order in a
dict, let orjson write it, and patch in the few escapes std adds (``<>&`` and U+2028/9 as
``\\u003c``...): in orjson output those bytes can only occur inside strings, so one pass over the
whole message equals quoting every string with `quote_std`.
"""

from __future__ import annotations

import math
import re
from binascii import b2a_base64
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from ...errors import clip
from ...model import ABSENT, Column, DDLEvent, Op, RowChange, TableSchema, TypeCode
from ...model.gofloat import to_float32
from ...model.types import FLOAT_TYPES, INTEGER_TYPES, UINT_VALUE_TYPES
from ...model.values import b64decode
from ..gojson import dumps_std
from ..values import decimal_renderer, float32_text, float64_text, int_range, parse_decimal_text
from .common import (
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
    need_bool,
    need_int,
    need_str,
)
from .schema_cache import SchemaCache
from .values import column_length, json_default

_OP_TYPE = {Op.INSERT: "INSERT", Op.UPDATE: "UPDATE", Op.DELETE: "DELETE"}

INT_TEXT = re.compile(r"-?[0-9]+").fullmatch
NUMBER_TEXT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?").fullmatch


# ------------------------------------------------------------------ encoding


def _b64(v: bytes) -> str:
    return b2a_base64(v, newline=False).decode("ascii")


def value_renderer(col: Column, location: str) -> Callable[[Any], Any] | None:
    """Non-NULL model value -> the JSON value TiCDC writes in ``data``/``old`` (spec §3.1 table).

    None means the ``str`` value is written as it is (text, temporal, JSON, VECTOR); orjson then
    refuses anything that is not a str, so a wrong model value cannot slip through.
    """
    tc = col.type_code
    if tc is TypeCode.FLOAT:
        return float32_text  # strconv 'f', -1, 32; NaN/Inf print 0 as the mounter makes them 0
    if tc is TypeCode.DOUBLE:
        return float64_text
    if tc is TypeCode.DECIMAL:
        return decimal_renderer(col.decimal)
    if tc is TypeCode.TIMESTAMP:
        return lambda v: {"location": location, "value": v}  # Go time.Location.String() + value
    if col.is_bytes:
        return _b64  # MySQL BinaryFlag strings/blobs are base64 (std alphabet, padded)
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        return str  # integers, YEAR, ENUM index, SET bitmask, BIT uint64 -> decimal text
    return None


def data_type_json(col: Column) -> dict[str, Any]:
    """DataType with tiflow's omitempty members; ``decimal`` never for FLOAT/DOUBLE (spec §3.2)."""
    out: dict[str, Any] = {"mysqlType": col.type_name, "charset": col.charset, "collate": col.collation}
    length = column_length(col)
    if length:
        out["length"] = length
    if col.decimal and col.type_code not in FLOAT_TYPES:
        out["decimal"] = col.decimal
    if col.elements:
        out["elements"] = list(col.elements)
    if col.unsigned:
        out["unsigned"] = True
    if col.zerofill:
        out["zerofill"] = True
    return out


def table_schema_json(ts: TableSchema) -> dict[str, Any]:
    """TableSchema JSON (spec §3.2): first member ``schema``, not ``database``."""
    # tiflow appends a synthetic "primary" index when the PK is the int handle and not among
    # TiDB's indexes; in our model a primary key is always an Index, so it is already above.
    return {
        "schema": ts.schema,
        "table": ts.table,
        "tableID": ts.table_id,
        "version": ts.version,
        "columns": [
            {"name": c.name, "dataType": data_type_json(c), "nullable": c.nullable, "default": json_default(c)}
            for c in ts.columns
        ],
        "indexes": index_docs(ts),
    }


def _render(cols: list[PlanColumn], image: tuple[Any, ...]) -> dict[str, Any]:
    return {
        name: (v if v is None or render is None else render(v))
        for name, i, render in cols
        if (v := image[i]) is not ABSENT
    }


class JSONFormat(FormatBase):
    """Encodes model events to Simple JSON and parses Simple JSON into `Parsed`."""

    def _plan(self, ts: TableSchema) -> TablePlan:
        # Columns sorted by name: Go's encoding/json writes the data/old maps with sorted keys.
        order = sorted(range(len(ts.columns)), key=lambda i: ts.columns[i].name)
        cols = [(ts.columns[i].name, i, value_renderer(ts.columns[i], self.location)) for i in order]
        return TablePlan(ts, cols, table_schema_json(ts))

    # -------------------------------------------------------------- encode

    def dml(self, row: RowChange, handle_key_only: bool, location: str, build_ts: int) -> bytes:
        ts = row.table_schema
        cols, new, old_cols, old = self.dml_images(row, handle_key_only)
        m: dict[str, Any] = {"version": 1}
        if ts.schema:
            m["database"] = ts.schema
        if ts.table:
            m["table"] = ts.table
        table_id = row.physical_table_id  # the partition id for partitioned tables (spec §3.1)
        if table_id:
            m["tableID"] = table_id
        m["type"] = _OP_TYPE[row.op]
        m["commitTs"] = row.commit_ts
        m["buildTs"] = build_ts
        if ts.version:
            m["schemaVersion"] = ts.version
        if location:
            m["claimCheckLocation"] = location
        if handle_key_only:
            m["handleKeyOnly"] = True
        # The model has no row checksum, so the `checksum` member is never written.
        if new is not None:
            data = _render(cols, new)
            if data:
                m["data"] = data
        if old is not None:
            before = _render(old_cols, old)
            if before:
                m["old"] = before
        return dumps_std(m)

    def ddl(self, ddl: DDLEvent, build_ts: int) -> bytes:
        kind = ddl_type_name(ddl.ddl_type)
        m: dict[str, Any] = {"version": 1, "type": kind}
        if ddl.query:
            m["sql"] = ddl.query
        m["commitTs"] = ddl.commit_ts
        m["buildTs"] = build_ts
        if ddl.table_schema is not None:
            m["tableSchema"] = self._tables.get(ddl.table_schema).schema_doc
        if ddl.pre_table_schema is not None and kind != "CREATE":
            m["preTableSchema"] = self._tables.get(ddl.pre_table_schema).schema_doc
        return dumps_std(m)

    def watermark(self, commit_ts: int, build_ts: int) -> bytes:
        return dumps_std({"version": 1, "type": "WATERMARK", "commitTs": commit_ts, "buildTs": build_ts})

    def bootstrap(self, ts: TableSchema, build_ts: int) -> bytes:
        return dumps_std(
            {
                "version": 1,
                "type": "BOOTSTRAP",
                "commitTs": 0,
                "buildTs": build_ts,
                "tableSchema": self._tables.get(ts).schema_doc,
            }
        )

    # -------------------------------------------------------------- decode

    def parse(self, value: bytes, where: str, cache: SchemaCache) -> Parsed:
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise fail(where, f"invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise fail(where, f"message must be a JSON object, got {type(obj).__name__}")
        version = obj.get("version")
        if version != 1 or isinstance(version, bool):
            raise fail(where, f"unsupported protocol version {clip(version)} (expected 1)")
        kind = need_str(where, "type", obj.get("type"))
        commit_ts = need_int(where, "commitTs", obj.get("commitTs"))
        if not 0 <= commit_ts <= U64:
            raise fail(where, f"commitTs {commit_ts} is not a uint64")
        if kind in DML_TYPES:
            get = obj.get
            database, table, table_id = get("database", ""), get("table", ""), get("tableID", 0)
            version, data, old = get("schemaVersion", 0), get("data"), get("old")
            if (
                type(database) is str
                and type(table) is str
                and type(table_id) is int
                and type(version) is int
                and (data is None or type(data) is dict)
                and (old is None or type(old) is dict)
                and "claimCheckLocation" not in obj
                and "handleKeyOnly" not in obj
                and "checksum" not in obj
            ):
                return Parsed(kind, commit_ts, "", None, None, database, table, table_id, version, "", False, data, old)
            p = Parsed(
                type=kind,
                commit_ts=commit_ts,
                database=need_str(where, "database", obj.get("database", "")),
                table=need_str(where, "table", obj.get("table", "")),
                table_id=need_int(where, "tableID", obj.get("tableID", 0)),
                schema_version=need_int(where, "schemaVersion", obj.get("schemaVersion", 0)),
                claim_check_location=need_str(where, "claimCheckLocation", obj.get("claimCheckLocation", "")),
                handle_key_only=need_bool(where, "handleKeyOnly", obj.get("handleKeyOnly", False)),
                data=_map(where, "data", obj.get("data")),
                old=_map(where, "old", obj.get("old")),
            )
            checksum = obj.get("checksum")
            if checksum is not None and not isinstance(checksum, dict):
                raise fail(where, f"checksum must be an object, got {clip(checksum)}")
            return p  # checksum: read and ignored (the model has no place for it)
        if kind == "WATERMARK":
            return Parsed(type=kind, commit_ts=commit_ts)
        if kind == "BOOTSTRAP":
            ts = self.table_schema(where, obj.get("tableSchema"), cache)
            if ts is None:
                raise fail(where, "BOOTSTRAP message without tableSchema")
            return Parsed(type=kind, commit_ts=commit_ts, table_schema=ts)
        if kind in DDL_TYPES:
            return Parsed(
                type=kind,
                commit_ts=commit_ts,
                sql=need_str(where, "sql", obj.get("sql", "")),
                table_schema=self.table_schema(where, obj.get("tableSchema"), cache),
                pre_table_schema=self.table_schema(where, obj.get("preTableSchema"), cache, "preTableSchema"),
            )
        raise fail(where, f"unknown message type {clip(kind)}")

    def _table_schema(self, where: str, obj: Any, cache: SchemaCache) -> TableSchema | None:
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise fail(where, f"must be an object, got {clip(obj)}")
        schema = need_str(where, "schema", obj.get("schema"))
        table = need_str(where, "table", obj.get("table"))
        version = need_int(where, "version", obj.get("version"))
        cached = cache.get((schema, table, version))
        if cached is not None:
            return cached
        columns = obj.get("columns") or []
        indexes = obj.get("indexes") or []
        if not isinstance(columns, list) or not isinstance(indexes, list):
            raise fail(where, "columns/indexes must be arrays")
        cols = []
        for c in columns:
            if not isinstance(c, dict) or not isinstance(c.get("dataType"), dict):
                raise fail(where, f"column must be an object with a dataType object, got {clip(c)}")
            dt = c["dataType"]
            cols.append(
                build_column(
                    where,
                    name=c.get("name"),
                    mysql_type=dt.get("mysqlType"),
                    charset=dt.get("charset"),
                    collate=dt.get("collate"),
                    length=dt.get("length"),
                    decimal=dt.get("decimal"),
                    elements=dt.get("elements"),
                    unsigned=dt.get("unsigned"),
                    zerofill=dt.get("zerofill"),
                    nullable=c.get("nullable", True),
                    default=c.get("default"),
                )
            )
        idxs = []
        for i in indexes:
            if not isinstance(i, dict):
                raise fail(where, f"index must be an object, got {clip(i)}")
            idxs.append(
                build_index(
                    where,
                    name=i.get("name"),
                    unique=i.get("unique", False),
                    primary=i.get("primary", False),
                    columns=i.get("columns"),
                )
            )
        return build_table_schema(
            where,
            schema=schema,
            table=table,
            table_id=obj.get("tableID", 0),
            version=version,
            columns=cols,
            indexes=idxs,
        )

    @staticmethod
    def value_parser(col: Column) -> Callable[[Any], Any]:
        return value_parser(col)


def _map(where: str, what: str, value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    raise fail(where, f"{what} must be an object, got {clip(value)}")


# ------------------------------------------------------------------ value parsing


def value_parser(col: Column) -> Callable[[Any], Any]:
    """JSON value (not null) -> model value; raises ValueError/TypeError with the reason."""
    tc = col.type_code
    if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:
        lo, hi = int_range(col)

        def parse_int(raw: Any) -> int:
            if type(raw) is str and INT_TEXT(raw):
                v = int(raw)
                if lo <= v <= hi:
                    return v
                raise ValueError(f"out of range [{lo}, {hi}]")
            raise ValueError("expected a decimal integer string")

        return parse_int
    if tc in FLOAT_TYPES:
        f32 = tc is TypeCode.FLOAT

        def parse_float(raw: Any) -> float:
            if type(raw) is not str or not NUMBER_TEXT(raw):
                raise ValueError("expected a decimal number string")
            v = float(raw)
            if not math.isfinite(v):
                raise ValueError("not a finite number")
            return to_float32(v) if f32 else v

        return parse_float
    if tc is TypeCode.DECIMAL:
        return parse_decimal
    if tc is TypeCode.TIMESTAMP:
        return parse_timestamp
    if col.is_bytes:
        return parse_base64
    return parse_text


def parse_decimal(raw: Any) -> Decimal:
    """MyDecimal text by the rule every decoder shares: no exponent, at most 65 digits."""
    if type(raw) is not str:
        raise ValueError("expected a decimal number string")
    return parse_decimal_text(raw)


def parse_timestamp(raw: Any) -> str:
    # {"location": tz, "value": text}; the text is already in the changefeed zone, which the model
    # keeps as is (codecs never convert time zones). A plain string is accepted too.
    if type(raw) is dict:
        value = raw.get("value")
        if type(value) is str and type(raw.get("location", "")) is str:
            return value
        raise ValueError("expected {location: string, value: string}")
    if type(raw) is str:
        return raw
    raise ValueError("expected a timestamp object")


def parse_base64(raw: Any) -> bytes:
    if type(raw) is not str:
        raise ValueError("expected a base64 string")
    return b64decode(raw)


def parse_text(raw: Any) -> str:
    if type(raw) is not str:
        raise ValueError("expected a string")
    return raw
