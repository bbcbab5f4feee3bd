"""What the JSON and Avro forms of the Simple protocol share.

Both encodings carry the same members (spec §3.1/§3.5); only the wire form differs. This module
holds the format-neutral pieces: the decoded message shape both formats parse into, TableSchema
<-> column attributes (flen defaults, BIT defaults, the ``primary`` index name), the DDL type
mapping, compression and the claim-check file store.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import orjson

from ...errors import CodecError, ConfigError
from ...model import ActionType, Column, Index, TableSchema, TypeCode, classify_ddl, ddl_kind, parse_type_name
from ...model.types import DEFAULT_FLEN, STRING_TYPES, UNSIGNED_DEFAULT_FLEN
from ...model.values import b64decode, b64encode
from ..options import CodecOptions

AVRO_NAMESPACE = "com.pingcap.simple.avro"

DML_TYPES = ("INSERT", "UPDATE", "DELETE")
DDL_TYPES = ("CREATE", "RENAME", "CINDEX", "DINDEX", "ERASE", "TRUNCATE", "ALTER", "QUERY")

_CHARSET_TYPES = STRING_TYPES | {TypeCode.ENUM, TypeCode.SET}
_FSP_TYPES = (TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.TIME)
_BIT_LITERAL = re.compile(r"[bB]'([01]+)'")
U64 = (1 << 64) - 1


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

    @property
    def is_dml(self) -> bool:
        return self.type in DML_TYPES


# ------------------------------------------------------------------ TableSchema <-> attributes


def column_length(col: Column) -> int:
    """TiDB's ``flen``: the stated length, else TiDB's default for the type (TiDB always has one).

    Datetime-like types with fsp > 0 widen by ``1 + fsp`` (``datetime(3)`` is 23), as TiDB does.
    Types without a fixed default (VARCHAR without length, ENUM, SET...) give 0 (omitted).
    """
    if col.length is not None:
        return col.length
    tc = col.type_code
    if col.unsigned and tc in UNSIGNED_DEFAULT_FLEN:
        return UNSIGNED_DEFAULT_FLEN[tc]
    flen = DEFAULT_FLEN.get(tc, 0)
    if tc in _FSP_TYPES and col.decimal:
        flen += 1 + col.decimal
    return flen


def bit_default(value: Any) -> Any:
    """tiflow ``MustBinaryLiteralToInt``: a BIT default is printed as a uint64 number."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        literal = _BIT_LITERAL.fullmatch(value)
        if literal:  # MySQL's b'0101' form
            return int(literal.group(1), 2)
        value = value.encode("latin-1", "replace")  # TiDB keeps the raw bytes as a string
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big") if value else 0
    return value


def json_default(col: Column) -> Any:
    """The ``default`` member: TiDB's stored default (usually a string), BIT as a number."""
    value = col.default
    if col.type_code is TypeCode.BIT:
        return bit_default(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return str(value)


def index_name(idx: Index) -> str:
    # TiDB names the PK index "PRIMARY"; TiCDC's synthetic int-handle PK index and the docs print
    # "primary" (seed 002). We print every primary index as "primary" and read it back as "PRIMARY".
    return "primary" if idx.primary else idx.name


def index_nullable(ts: TableSchema, idx: Index) -> bool:
    """IndexSchema.nullable: true if any member column is nullable (spec §3.2)."""
    return any(ts.column(n).nullable for n in idx.columns)


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
    elif code in _CHARSET_TYPES and not charset:
        charset, collate = "utf8mb4", collate or "utf8mb4_bin"
    length_v = opt_int(where, f"{ctx} length", length)
    decimal_v = opt_int(where, f"{ctx} decimal", decimal)
    if elements is None:
        elems: tuple[str, ...] = ()
    elif isinstance(elements, list) and all(isinstance(e, str) for e in elements):
        elems = tuple(elements)
    else:
        raise fail(where, f"{ctx} elements must be a list of strings, got {elements!r}")
    if default is not None and not isinstance(default, str | int | float | bool):
        raise fail(where, f"{ctx} default must be a scalar, got {default!r}")
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
        decimal=(decimal_v or None) if code not in (TypeCode.FLOAT, TypeCode.DOUBLE) else None,
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
        raise fail(where, f"index {name!r} columns must be a list of strings, got {columns!r}")
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
        raise fail(where, f"{what} must be a string, got {value!r}")
    return value


def need_int(where: str, what: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(where, f"{what} must be an integer, got {value!r}")
    return value


def need_bool(where: str, what: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(where, f"{what} must be a boolean, got {value!r}")
    return value


def opt_int(where: str, what: str, value: Any) -> int | None:
    return None if value is None else need_int(where, what, value)


def opt_bool(where: str, what: str, value: Any) -> bool | None:
    return None if value is None else need_bool(where, what, value)


# ------------------------------------------------------------------ DDL kinds

_KIND_FALLBACK: dict[str, ActionType] = {
    "CREATE": ActionType.CREATE_TABLE,
    "RENAME": ActionType.RENAME_TABLE,
    "CINDEX": ActionType.ADD_INDEX,
    "DINDEX": ActionType.DROP_INDEX,
    "ERASE": ActionType.DROP_TABLE,
    "TRUNCATE": ActionType.TRUNCATE_TABLE,
    "ALTER": ActionType.MODIFY_COLUMN,
    "QUERY": ActionType.NONE,
}
_SCHEMA_DDL = re.compile(
    r"\s*(?:create|drop|alter)\s+(?:database|schema)\s+(?:if\s+(?:not\s+)?exists\s+)?(`(?:[^`]|``)*`|[\w$]+)",
    re.I,
)


def ddl_type_name(action: int) -> str:
    """The Simple ``type`` of a DDL: canal's mapping with exchange partition as ALTER (spec §3.1)."""
    return ddl_kind(action, simple=True)


def ddl_action(kind: str, sql: str) -> int:
    """An ActionType for a decoded DDL: the SQL's, when it agrees with ``type``; else the kind's."""
    try:
        action = classify_ddl(sql)
    except Exception:  # classify_ddl is a best-effort keyword reader; the type member decides
        action = ActionType.NONE
    if ddl_kind(action, simple=True) == kind:
        return int(action)
    return int(_KIND_FALLBACK[kind])


def schema_of_sql(sql: str) -> str:
    """The database named by CREATE/DROP/ALTER DATABASE (those DDL messages carry no tableSchema)."""
    m = _SCHEMA_DDL.match(sql)
    if not m:
        return ""
    name = m.group(1)
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


# ------------------------------------------------------------------ compression

_MAX_INFLATED = 1 << 28  # refuse to inflate hostile input beyond 256 MiB
_SNAPPY_MAX_RATIO = 32  # a Snappy block cannot expand much beyond ~21:1


def _pyarrow(method: str) -> Any:
    try:
        import pyarrow as pa  # noqa: PLC0415 - heavy import, only when compression is configured
    except ImportError:  # pragma: no cover - pyarrow is a declared dependency
        raise ConfigError(f"large-message-handle-compression={method} needs pyarrow, which is not installed") from None
    if not pa.Codec.is_available(method):  # pragma: no cover - depends on the pyarrow build
        raise ConfigError(f"large-message-handle-compression={method}: this pyarrow build lacks the codec")
    return pa


def compressor(options: CodecOptions) -> tuple[Callable[[bytes], bytes] | None, Callable[[bytes], bytes] | None]:
    """(compress, decompress) for ``large-message-handle-compression`` (spec §0.7), or (None, None).

    TiCDC compresses every Simple value (DML, DDL, watermark, bootstrap) with the raw Snappy
    *block* format or the LZ4 *frame* format; pyarrow (a project dependency) has both. Nothing
    in a message says it is compressed: the decoder must be given the same option. The
    decompressor raises ValueError on corrupt or absurdly inflating input.
    """
    method = options.large_message_handle_compression
    if method == "none":
        return None, None
    pa = _pyarrow(method)
    codec = pa.Codec(method)  # "snappy": raw block; "lz4": LZ4 frame

    def compress(data: bytes) -> bytes:
        return codec.compress(data, asbytes=True)

    failures = (pa.lib.ArrowException, OSError, ValueError, EOFError)

    def unsnappy(data: bytes) -> bytes:
        size, shift, pos = 0, 0, 0
        while True:  # the block starts with the uncompressed length as a base-128 varint
            if pos >= len(data) or shift > 35:
                raise ValueError("snappy block without a valid length header")
            byte = data[pos]
            size |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if byte < 0x80:
                break
        if size > len(data) * _SNAPPY_MAX_RATIO + 64 or size > _MAX_INFLATED:
            raise ValueError(f"snappy block claims {size} bytes from {len(data)}")
        try:
            out = codec.decompress(data, decompressed_size=size, asbytes=True)
        except failures as exc:
            raise ValueError(f"snappy block does not decompress: {exc}") from None
        if len(out) != size:
            raise ValueError(f"snappy block gave {len(out)} bytes, its header said {size}")
        return out

    def unlz4(data: bytes) -> bytes:
        try:
            out = pa.input_stream(pa.py_buffer(data), compression="lz4").read(_MAX_INFLATED + 1)
        except failures as exc:
            raise ValueError(f"lz4 frame does not decompress: {exc}") from None
        if len(out) > _MAX_INFLATED:
            raise ValueError(f"lz4 frame inflates beyond {_MAX_INFLATED} bytes")
        return out

    return compress, unsnappy if method == "snappy" else unlz4


# ------------------------------------------------------------------ claim check


def claim_check_dir(uri: str) -> Path:
    """The local directory of ``claim-check-storage-uri`` (``file:///path`` or a plain path)."""
    if not uri:
        raise ConfigError("large-message-handle-option=claim-check needs claim-check-storage-uri")
    if "://" in uri:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise ConfigError(f"claim-check-storage-uri {uri!r}: only file:// (local) storage is supported")
        return Path(unquote(parsed.path))
    return Path(uri)


class ClaimCheckStore:
    """Writes/reads claim-check files: ``<uuid>.json`` holding the full message value.

    The value is wrapped as ``{"key":null,"value":"<base64>"}`` (Go encoding/json of TiCDC's
    ClaimCheckMessage) or written raw with ``claim-check-raw-value``. The reader takes only the
    file name from a location (as TiCDC's consumer does) and looks in its own directory, and
    recognises both forms.
    """

    def __init__(self, options: CodecOptions) -> None:
        self.uri = options.claim_check_storage_uri
        self.dir = claim_check_dir(self.uri)
        self.raw = options.claim_check_raw_value

    def write(self, value: bytes) -> str:
        name = f"{uuid.uuid4()}.json"
        self.dir.mkdir(parents=True, exist_ok=True)
        data = value if self.raw else b'{"key":null,"value":"' + b64encode(value).encode() + b'"}'
        (self.dir / name).write_bytes(data)
        return self.uri.rstrip("/") + "/" + name

    def read(self, location: str, where: str) -> bytes:
        name = location.rstrip("/").rsplit("/", 1)[-1]
        if not name or name in (".", ".."):
            raise fail(where, f"claimCheckLocation {location!r} names no file")
        try:
            data = (self.dir / name).read_bytes()
        except OSError as exc:
            raise fail(where, f"claim-check file {location!r}: {exc.strerror or exc}") from None
        if data[:1] == b"{":
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and set(obj) == {"key", "value"}:
                try:
                    return b64decode(need_str(where, "claim-check value", obj["value"]))
                except ValueError:
                    raise fail(where, f"claim-check file {location!r}: value is not base64") from None
        return data
