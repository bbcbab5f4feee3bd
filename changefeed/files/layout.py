"""TiCDC's storage-sink directory layout: paths, schema files and their checksums (spec §5.2-5.3).

<root>/metadata                                              {"checkpoint-ts":N}
<root>/<schema>/meta/schema_<tableVersion>_<checksum10>.json   database-level schema file
<root>/<schema>/<table>/meta/schema_<tableVersion>_<checksum10>.json
<root>/<schema>/<table>/<tableVersion>/[<partitionID>/][<date>/]CDC<index>.<ext>
<root>/<schema>/<table>/<tableVersion>/[<partitionID>/][<date>/]meta/CDC.index

<schema> and <table> are the names as `changefeed.files.paths.encode_name` writes them: TiCDC's raw
names unless a name is unsafe as a path element (``..``, ``/``, ...), or the schema is named like
an entry of the root (`ROOT_ENTRIES`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ChangefeedError, SinkError, ascii_digits, clip
from ..model import Column, ColumnFlag, Index, TableSchema, TypeCode, parse_type_name, type_name
from ..model.types import (
    ALWAYS_UNSIGNED_TYPES,
    DEFAULT_FLEN,
    ENUM_SET_TYPES,
    FLOAT_TYPES,
    FSP_TYPES,
    NUMBER_TYPES,
    STRING_TYPES,
    UNSIGNED_DEFAULT_FLEN,
)
from .paths import decode_name, encode_name

SCHEMA_FILE_RE = re.compile(r"^schema_(\d+)_(\d{10})\.json$")
DATA_FILE_RE = re.compile(r"^CDC(?:_(?P<dispatcher>[^_]+)_)?(?P<index>\d+)\.(?P<ext>csv|json)$")
DATE_FORMATS = {"none": "", "year": "%Y", "month": "%Y-%m", "day": "%Y-%m-%d"}
EXTENSIONS = {"csv": ".csv", "canal-json": ".json"}
#: Entries of the root beside the schema directories: TiCDC's checkpoint file and the default Spark
#: checkpoint of `changefeed run`. A schema with one of these names is escaped, not merged into it.
ROOT_ENTRIES = frozenset({"metadata", "_spark_checkpoint"})

# TiCDC's schema file: which types print ColumnPrecision, and which print a scale only when set.
_PRECISION_TYPES = NUMBER_TYPES | STRING_TYPES | ALWAYS_UNSIGNED_TYPES
_SCALE_WHEN_SET = FLOAT_TYPES | FSP_TYPES


class LayoutError(ChangefeedError):
    """A storage directory entry does not follow TiCDC's layout."""


def go_marshal_indent(value: Any) -> str:
    """Go ``json.MarshalIndent(v, "", "    ")`` with std escaping (HTML-escaped ``<>&``)."""
    text = json.dumps(value, indent=4, ensure_ascii=False, separators=(",", ": "))
    # < > & U+2028 U+2029 can only occur inside strings, where Go escapes them.
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def table_col(column: Column, with_elems: bool = True) -> dict[str, Any]:
    """A ``TableCol`` of the schema file, members in TiCDC's order with omitempty applied."""
    tc = column.type_code
    out: dict[str, Any] = {"ColumnName": column.name}
    ctype = type_name(tc, column.binary).upper()
    if column.unsigned and tc not in ALWAYS_UNSIGNED_TYPES:
        ctype += " UNSIGNED"
    out["ColumnType"] = ctype
    if column.default is not None:
        out["ColumnDefault"] = column.default
    if tc in _PRECISION_TYPES:
        flen = column.length
        if flen is None or flen < 0:
            table = UNSIGNED_DEFAULT_FLEN if column.unsigned and tc in UNSIGNED_DEFAULT_FLEN else DEFAULT_FLEN
            flen = table.get(tc)
        if flen is not None:
            out["ColumnPrecision"] = str(flen)
    if tc is TypeCode.DECIMAL:
        out["ColumnScale"] = str(column.decimal or 0)
    elif tc in _SCALE_WHEN_SET and column.decimal not in (None, 0, -1):
        out["ColumnScale"] = str(column.decimal)
    if not column.nullable:
        out["ColumnNullable"] = "false"
    if column.key_flags & ColumnFlag.PRIMARY_KEY:
        out["ColumnIsPk"] = "true"
    # [ticdc] adds ColumnElems for ENUM/SET; [tiflow] has no such member (spec §5.3).
    if with_elems and column.elements:
        out["ColumnElems"] = list(column.elements)
    return out


@dataclass
class SchemaFile:
    """The content of ``schema_<tableVersion>_<checksum>.json``."""

    schema: str
    table: str
    table_version: int
    query: str = ""
    ddl_type: int = 0
    columns: list[dict[str, Any]] | None = field(default=None)

    @classmethod
    def from_table(
        cls, ts: TableSchema, table_version: int, query: str = "", ddl_type: int = 0, with_elems: bool = True
    ) -> SchemaFile:
        return cls(ts.schema, ts.table, table_version, query, ddl_type, [table_col(c, with_elems) for c in ts.columns])

    def to_json(self) -> str:
        return go_marshal_indent(
            {
                "Table": self.table,
                "Schema": self.schema,
                "Version": 1,
                "TableVersion": self.table_version,
                "Query": self.query,
                "Type": self.ddl_type,
                "TableColumns": self.columns,
                "TableColumnsTotal": len(self.columns or ()),
            }
        )

    @property
    def checksum(self) -> int:
        """CRC32 of the payload TiCDC hashes: Version 0, columns sorted by name (spec §5.3)."""
        cols = sorted(self.columns or (), key=lambda c: c["ColumnName"])
        payload = {
            "Table": self.table,
            "Schema": self.schema,
            "Version": 0,
            "TableColumns": cols,
            "TableColumnsTotal": len(self.columns or ()),
        }
        return zlib.crc32(go_marshal_indent(payload).encode())

    def path(self, table_id: int | None = None) -> str:
        """The file's path under the root, ``/``-separated, names encoded (an empty table: database-level)."""
        name = f"schema_{self.table_version}_{self.checksum:010d}.json"
        if table_id is not None:
            return f"{table_id}/meta/{name}"
        if not self.table:
            return f"{schema_element(self.schema)}/meta/{name}"
        return f"{table_path(self.schema, self.table)}/meta/{name}"

    @classmethod
    def parse(cls, text: str | bytes, where: str = "") -> SchemaFile:
        try:
            obj = json.loads(text)
            return cls(
                schema=obj["Schema"],
                table=obj.get("Table", ""),
                table_version=int(obj["TableVersion"]),
                query=obj.get("Query", ""),
                ddl_type=int(obj.get("Type", 0)),
                columns=_checked_columns(obj.get("TableColumns"), where),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LayoutError(f"bad schema file: {exc}", where=where) from None

    def to_table_schema(self, table_id: int = 0) -> TableSchema:
        """The model schema a CSV/canal reader decodes with (charsets beyond binary are not kept)."""
        columns = []
        pk = []
        for col in self.columns or ():
            code, binary, unsigned = parse_type_name(col["ColumnType"])
            precision = col.get("ColumnPrecision")
            scale = col.get("ColumnScale")
            string_like = code in ENUM_SET_TYPES or (not binary and code in STRING_TYPES)
            columns.append(
                Column(
                    name=col["ColumnName"],
                    type_code=code,
                    charset="utf8mb4" if string_like else "binary",
                    collation="utf8mb4_bin" if string_like else "binary",
                    length=int(precision) if precision is not None else None,
                    decimal=int(scale) if scale is not None else None,
                    unsigned=unsigned,
                    nullable=col.get("ColumnNullable") != "false",
                    default=col.get("ColumnDefault"),
                    elements=tuple(col.get("ColumnElems") or ()),
                )
            )
            if col.get("ColumnIsPk") == "true":
                pk.append(col["ColumnName"])
        indexes = (Index("PRIMARY", tuple(pk), primary=True),) if pk else ()
        return TableSchema(self.schema, self.table, tuple(columns), indexes, table_id, self.table_version)


def _checked_columns(columns: Any, where: str) -> list[dict[str, Any]] | None:
    """``TableColumns`` as `SchemaFile.to_table_schema` needs them, checked now so a hand-edited
    file fails here naming the column, not later with a traceback inside the decoder."""
    if columns is None:
        return None
    if not isinstance(columns, list):
        raise LayoutError(f"bad schema file: TableColumns must be a list, got {clip(columns)}", where=where)
    names: set[str] = set()
    for n, col in enumerate(columns):
        name = _checked_column(col, n, where)
        if name in names:
            raise LayoutError(f"bad schema file: column {name!r} appears twice", where=where)
        names.add(name)
    return columns


def _checked_column(col: Any, n: int, where: str) -> str:
    """One ``TableColumns`` entry checked; its name returned."""
    if not isinstance(col, dict):
        raise LayoutError(f"bad schema file: TableColumns[{n}] must be an object, got {clip(col)}", where=where)
    name = col.get("ColumnName")
    if not isinstance(name, str):
        raise LayoutError(f"bad schema file: TableColumns[{n}] ColumnName must be a string", where=where)
    ctx = f"bad schema file: column {clip(name, 80)}"
    ctype = col.get("ColumnType")
    if not isinstance(ctype, str):
        raise LayoutError(f"{ctx}: ColumnType must be a string, got {clip(ctype)}", where=where)
    try:
        parse_type_name(ctype)
    except ValueError:
        raise LayoutError(f"{ctx}: unknown ColumnType {clip(ctype)}", where=where) from None
    for key in ("ColumnPrecision", "ColumnScale"):
        value = col.get(key)
        if value is not None and not _non_negative_int(value):
            raise LayoutError(f"{ctx}: {key} must be a non-negative integer, got {clip(value)}", where=where)
    elems = col.get("ColumnElems")
    if elems is not None and not (isinstance(elems, list) and all(isinstance(e, str) for e in elems)):
        raise LayoutError(f"{ctx}: ColumnElems must be a list of strings, got {clip(elems)}", where=where)
    return name


def _non_negative_int(value: Any) -> bool:
    """TiCDC writes precision and scale as digit strings; a JSON number is read as well."""
    if isinstance(value, str):
        return ascii_digits(value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def date_dir(when: dt.datetime, separator: str) -> str:
    """The date directory for ``date-separator`` (formatted in the writer's local time zone)."""
    try:
        fmt = DATE_FORMATS[separator]
    except KeyError:
        raise LayoutError(f"date-separator must be one of {', '.join(DATE_FORMATS)}, not {separator!r}") from None
    return when.strftime(fmt) if fmt else ""


def schema_element(schema: str) -> str:
    """The schema's directory name (TiCDC's raw name where safe; see changefeed/files/paths.py)."""
    return encode_name(schema, ROOT_ENTRIES)


@lru_cache(maxsize=8192)
def table_path(schema: str, table: str) -> str:
    """``<schema>/<table>`` relative to the root, names encoded (cached: the encoder asks once per row)."""
    return f"{schema_element(schema)}/{encode_name(table)}"


def parse_table_path(schema: str, table: str, where: str | None = None) -> tuple[str, str]:
    """The names two directory names (as `table_path` wrote them) stand for; UnsafeNameError if malformed."""
    return decode_name(schema, ROOT_ENTRIES, where=where), decode_name(table, where=where)


def data_dir(
    schema: str,
    table: str,
    table_version: int,
    partition_id: int | None = None,
    date: str = "",
    table_id: int | None = None,
) -> str:
    parts = [str(table_id) if table_id is not None else table_path(schema, table), str(table_version)]
    if partition_id is not None:
        parts.append(str(partition_id))
    if date:
        parts.append(date)
    return "/".join(parts)


def data_file_name(index: int, ext: str, width: int = 20, dispatcher: str | None = None) -> str:
    # file-index-width outside 6..20 falls back to 20, as TiCDC does.
    width = width if 6 <= width <= 20 else 20
    prefix = f"CDC_{dispatcher}_" if dispatcher else "CDC"
    return f"{prefix}{index:0{width}d}{ext}"


def index_file_name(dispatcher: str | None = None) -> str:
    return f"meta/CDC_{dispatcher}.index" if dispatcher else "meta/CDC.index"


def metadata_json(checkpoint_ts: int) -> bytes:
    return json.dumps({"checkpoint-ts": checkpoint_ts}, separators=(",", ":")).encode()


def read_checkpoint(root: Path) -> int:
    """The published ``checkpoint-ts`` (0 when nothing was published yet)."""
    try:
        return int(json.loads((root / "metadata").read_bytes())["checkpoint-ts"])
    except FileNotFoundError:
        return 0
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SinkError(f"unreadable storage metadata: {exc}", where=str(root / "metadata")) from None
