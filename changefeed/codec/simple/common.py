"""What the JSON and Avro forms of the Simple protocol share.

Both encodings carry the same members (spec §3.1/§3.5); only the wire form differs. This module
holds the format-neutral pieces: the decoded message shape both formats parse into, TableSchema
<-> column attributes (the ``primary`` index name) and the DDL type mapping; the per-type
attributes (flen defaults, BIT defaults) are in `values`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import CodecError, clip
from ...model import Column, Index, Op, RowChange, TableSchema, TypeCode, ddl_kind, parse_type_name
from ...model.ddl import unquote_ident
from ...model.schemacache import PlanCache
from ...model.types import CHARSET_TYPES, FLOAT_TYPES
from ..ddlkind import ddl_action as _ddl_action
from ..options import CodecOptions
from ..values import U64_MAX

if TYPE_CHECKING:
    from .schema_cache import SchemaCache

AVRO_NAMESPACE = "com.pingcap.simple.avro"

DML_TYPES = ("INSERT", "UPDATE", "DELETE")
DDL_TYPES = ("CREATE", "RENAME", "CINDEX", "DINDEX", "ERASE", "TRUNCATE", "ALTER", "QUERY")

U64 = U64_MAX


class SimpleFormatError(CodecError):
    """A Simple protocol message is malformed (bad JSON/Avro, wrong member type, unknown column)."""


_PREFIX = "simple protocol: "


def fail(where: str, text: str) -> SimpleFormatError:
    return SimpleFormatError(_PREFIX + text, where=where or None)


def within(exc: SimpleFormatError, scope: str) -> SimpleFormatError:
    """The same error, its text prefixed with the part of the message it concerns."""
    text = exc.message.removeprefix(_PREFIX)
    return SimpleFormatError(f"{_PREFIX}{scope}: {text}", where=exc.where)


def to_int64(value: int) -> int:
    """Go's ``int64(uint64)``: TiCDC's Avro form stores commitTs/version/BIGINT UNSIGNED bits so."""
    return value - (1 << 64) if value >= 1 << 63 else value


def to_uint64(value: int) -> int:
    return value & U64


# ------------------------------------------------------------------ decoded message


@dataclass(slots=True)
class Parsed:
    """One decoded message in a format-neutral shape (values in ``data``/``old`` still raw)."""

    type: str  # WATERMARK | BOOTSTRAP | DDL kinds | INSERT/UPDATE/DELETE
    commit_ts: int = 0
    sql: str = ""
    table_schema: TableSchema | None = None
    pre_table_schema: TableSchema | None = None
    database: str = ""
    table: str = ""
    table_id: int = 0
    schema_version: int = 0
    claim_check_location: str = ""
    handle_key_only: bool = False
    data: Mapping[str, Any] | None = None
    old: Mapping[str, Any] | None = None
    size: int = 0  # bytes of the value parsed (inflated, or its claim-check file's): held-DML accounting

    @property
    def is_dml(self) -> bool:
        return self.type in DML_TYPES


# ------------------------------------------------------------------ per-table plans, format base

PlanColumn = tuple[str, int, Callable[[Any], Any] | None]  # (name, image position, value renderer)


class TablePlan:
    """Per-TableSchema encoding plan: columns in wire order, the handle-key subset, the schema document."""

    __slots__ = ("cols", "keys", "schema_doc")

    def __init__(self, ts: TableSchema, cols: list[PlanColumn], schema_doc: dict[str, Any]) -> None:
        self.cols = cols
        handle = set(ts.handle_key)
        self.keys = [c for c in cols if c[1] in handle]
        self.schema_doc = schema_doc


class FormatBase:
    """What `JSONFormat` and `AvroFormat` share: per-table plans, DML column choice, schema reading.

    Subclasses provide `_plan` (their wire order, renderers and schema document),
    `_table_schema` (their schema document back to a model) and `value_parser`.
    """

    def __init__(self, options: CodecOptions) -> None:
        self.options = options
        self.location = options.time_zone
        self._tables: PlanCache[TablePlan] = PlanCache(self._plan)

    def _plan(self, ts: TableSchema) -> TablePlan:
        raise NotImplementedError

    def _table_schema(self, where: str, obj: Any, cache: SchemaCache) -> TableSchema | None:
        raise NotImplementedError

    @staticmethod
    def value_parser(col: Column) -> Callable[[Any], Any]:
        raise NotImplementedError

    def dml_images(
        self, row: RowChange, handle_key_only: bool
    ) -> tuple[list[PlanColumn], tuple[Any, ...] | None, list[PlanColumn], tuple[Any, ...] | None]:
        """(data columns, data image, old columns, old image) of a DML; an image is None when not sent.

        ``only-output-updated-columns`` keeps in ``old`` the columns whose value changed.
        """
        plan = self._tables.get(row.table_schema)
        cols = plan.keys if handle_key_only else plan.cols
        op = row.op
        new = row.new if op is not Op.DELETE else None
        old = row.old if op is not Op.INSERT else None
        old_cols = cols
        if old is not None and op is Op.UPDATE and self.options.only_output_updated_columns and not handle_key_only:
            current = row.new or ()
            old_cols = [c for c in cols if current[c[1]] != old[c[1]]]
        return cols, new, old_cols, old

    def table_schema(self, where: str, obj: Any, cache: SchemaCache, what: str = "tableSchema") -> TableSchema | None:
        """TableSchema -> model, reusing the cached object for a known (schema, table, version)."""
        try:
            return self._table_schema(where, obj, cache)
        except SimpleFormatError as exc:
            raise within(exc, what) from None

    def parsers(self, ts: TableSchema) -> dict[str, tuple[int, Callable[[Any], Any]]]:
        """Column name -> (image position, value parser) for the decoder's ``data``/``old`` maps."""
        return {c.name: (i, self.value_parser(c)) for i, c in enumerate(ts.columns)}


# ------------------------------------------------------------------ TableSchema <-> attributes


def index_name(idx: Index) -> str:
    # TiDB names the PK index "PRIMARY"; TiCDC's synthetic int-handle PK index and the docs print
    # "primary" (seed 002). We print every primary index as "primary" and read it back as "PRIMARY".
    return "primary" if idx.primary else idx.name


def index_docs(ts: TableSchema) -> list[dict[str, Any]]:
    """IndexSchema members (both encodings); ``nullable``: any member column is nullable (spec §3.2)."""
    return [
        {
            "name": index_name(idx),
            "unique": idx.unique,
            "primary": idx.primary,
            "nullable": any(ts.column(n).nullable for n in idx.columns),
            "columns": list(idx.columns),
        }
        for idx in ts.indexes
    ]


def build_column(
    where: str,
    *,
    name: Any,
    mysql_type: Any,
    charset: Any,
    collate: Any,
    length: Any,
    decimal: Any,
    elements: Any,
    unsigned: Any,
    zerofill: Any,
    nullable: Any,
    default: Any,
    bit_default_text: bool = False,
) -> Column:
    """A model Column from ColumnSchema/DataType members (JSON or Avro), validated."""
    name = need_str(where, "column name", name)
    ctx = f"column {name!r}"
    try:
        code, binary, unsigned_in_name = parse_type_name(need_str(where, f"{ctx} mysqlType", mysql_type))
    except ValueError as exc:
        raise fail(where, f"{ctx}: {exc}") from None
    charset = need_str(where, f"{ctx} charset", charset or "")
    collate = need_str(where, f"{ctx} collate", collate or "")
    if binary or charset == "binary":
        charset, collate = "binary", "binary"
    elif code in CHARSET_TYPES and not charset:
        charset, collate = "utf8mb4", collate or "utf8mb4_bin"
    length_v = opt_int(where, f"{ctx} length", length)
    decimal_v = opt_int(where, f"{ctx} decimal", decimal)
    if elements is None:
        elems: tuple[str, ...] = ()
    elif isinstance(elements, list) and all(isinstance(e, str) for e in elements):
        elems = tuple(elements)
    else:
        raise fail(where, f"{ctx} elements must be a list of strings, got {clip(elements)}")
    if default is not None and not isinstance(default, str | int | float | bool):
        raise fail(where, f"{ctx} default must be a scalar, got {clip(default)}")
    if (
        bit_default_text
        and code is TypeCode.BIT
        and isinstance(default, str)
        and default.isascii()
        and default.isdigit()
    ):
        default = int(default)  # Avro carries the uint64 default as text
    return Column(
        name=name,
        type_code=code,
        charset=charset or "binary",
        collation=collate or "binary",
        length=length_v or None,
        decimal=(decimal_v or None) if code not in FLOAT_TYPES else None,
        unsigned=bool(opt_bool(where, f"{ctx} unsigned", unsigned)) or unsigned_in_name,
        zerofill=bool(opt_bool(where, f"{ctx} zerofill", zerofill)),
        nullable=bool(need_bool(where, f"{ctx} nullable", nullable)),
        default=default,
        elements=elems,
    )


def build_index(where: str, *, name: Any, unique: Any, primary: Any, columns: Any) -> Index:
    name = need_str(where, "index name", name)
    primary_v = bool(need_bool(where, f"index {name!r} primary", primary))
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise fail(where, f"index {name!r} columns must be a list of strings, got {clip(columns)}")
    if primary_v and name.lower() == "primary":
        name = "PRIMARY"
    return Index(
        name, tuple(columns), primary=primary_v, unique=bool(need_bool(where, f"index {name!r} unique", unique))
    )


def build_table_schema(
    where: str, *, schema: Any, table: Any, table_id: Any, version: Any, columns: list[Column], indexes: list[Index]
) -> TableSchema:
    version = need_int(where, "version", version)
    if not 0 <= version <= U64:
        raise fail(where, f"version {version} is not a uint64")
    try:
        return TableSchema(
            schema=need_str(where, "schema", schema),
            table=need_str(where, "table", table),
            columns=tuple(columns),
            indexes=tuple(indexes),
            table_id=need_int(where, "tableID", table_id),
            version=version,
        )
    except ValueError as exc:
        raise fail(where, str(exc)) from None


# ------------------------------------------------------------------ member checks


def need_str(where: str, what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise fail(where, f"{what} must be a string, got {clip(value)}")
    return value


def need_int(where: str, what: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(where, f"{what} must be an integer, got {clip(value)}")
    return value


def need_bool(where: str, what: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(where, f"{what} must be a boolean, got {clip(value)}")
    return value


def opt_int(where: str, what: str, value: Any) -> int | None:
    return None if value is None else need_int(where, what, value)


def opt_bool(where: str, what: str, value: Any) -> bool | None:
    return None if value is None else need_bool(where, what, value)


# ------------------------------------------------------------------ DDL kinds

_SCHEMA_DDL = re.compile(
    r"\s*(?:create|drop|alter)\s+(?:database|schema)\s+(?:if\s+(?:not\s+)?exists\s+)?(`(?:[^`]|``)*`|[\w$]+)",
    re.I,
)


def ddl_type_name(action: int) -> str:
    """The Simple ``type`` of a DDL: canal's mapping with exchange partition as ALTER (spec §3.1)."""
    return ddl_kind(action, simple=True)


def ddl_action(kind: str, sql: str) -> int:
    """An ActionType for a decoded DDL: the SQL's, when it agrees with ``type``; else the kind's."""
    return _ddl_action(kind, sql, simple=True)


def schema_of_sql(sql: str) -> str:
    """The database named by CREATE/DROP/ALTER DATABASE (those DDL messages carry no tableSchema)."""
    m = _SCHEMA_DDL.match(sql)
    if not m:
        return ""
    return unquote_ident(m.group(1))
