"""Table schemas by physical table id and version, read from TiDB table-info JSON (docs/mounter.md).

TiCDC keeps a schema snapshot per ts and decodes a record with the snapshot at ``commit_ts - 1``
(spec §6.5), so a DML committed together with a DDL still sees the old shape. The catalog is a
list of ``(schema name, table info, version ts)`` entries; each entry is valid from its version
ts until the next entry of the same table.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ...errors import CaptureError
from ...model.schema import Column, Index, TableSchema
from ...model.types import CHARSET_TYPES, FSP_TYPES, INTEGER_TYPES, TypeCode

log = logging.getLogger(__name__)

# TiDB `mysql.*Flag` bits of FieldType.Flag.
NOT_NULL_FLAG = 1
PRI_KEY_FLAG = 2
UNIQUE_KEY_FLAG = 4
MULTIPLE_KEY_FLAG = 8
BLOB_FLAG = 16
UNSIGNED_FLAG = 32
ZEROFILL_FLAG = 64
BINARY_FLAG = 128

STATE_PUBLIC = 5  # model.StatePublic: only public columns and indexes are part of the snapshot
_UNSPECIFIED = -1  # types.UnspecifiedLength


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """What the decoder needs per visible column beyond the model `Column`."""

    column_id: int
    position: int
    origin_default: Any = None
    origin_default_bit: str | None = None
    has_origin_default: bool = False


@dataclass(eq=False, slots=True)
class TableVersion:
    """One table at one schema version: the model schema plus the storage facts of TiDB."""

    schema: TableSchema
    version_ts: int
    physical_ids: tuple[int, ...]
    columns: tuple[ColumnInfo, ...]
    pk_is_handle: bool
    is_common_handle: bool
    handle_position: int | None  # the int PK column filled from an int handle
    common_handle_positions: tuple[int, ...]  # PK columns in index order, for common handles
    max_column_id: int  # ids up to this that no emitted column has are skipped (dropped, virtual)

    @property
    def partitioned(self) -> bool:
        return self.schema.partitioned


def _name(value: Any, what: str) -> str:
    """TiDB model.CIStr ``{"O": "Orig", "L": "orig"}`` or a plain string."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("O"), str):
        return value["O"]
    raise ValueError(f"{what} must be a string or {{'O': ..., 'L': ...}}, got {value!r}")


def _int(obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key!r} must be an integer, got {value!r}")
    return value


def parse_table_info(schema_name: str, info: Mapping[str, Any], version_ts: int) -> TableVersion:
    """Build a `TableVersion` from TiDB's ``model.TableInfo`` JSON (``cols`` or ``columns``)."""
    table_id = _int(info, "id")
    table_name = _name(info.get("name"), "table name")
    raw_cols = info.get("cols", info.get("columns"))
    if not isinstance(raw_cols, list) or not raw_cols:
        raise ValueError(f"table {table_name!r} has no 'cols'/'columns' list")
    raw_cols = sorted(raw_cols, key=lambda c: c.get("offset", 0)) if all("offset" in c for c in raw_cols) else raw_cols
    columns: list[Column] = []
    infos: list[ColumnInfo] = []
    all_ids: list[int] = []
    pk_flag_names: list[str] = []
    key_flags: dict[str, int] = {}
    for raw in raw_cols:
        col_id = _int(raw, "id")
        if col_id <= 0 or col_id in all_ids:
            raise ValueError(f"column id {col_id} of table {table_name!r} is not positive or repeats")
        all_ids.append(col_id)
        name = _name(raw.get("name"), "column name")
        generated = bool(raw.get("generated_expr_string"))
        state = raw.get("state", STATE_PUBLIC)
        # TiCDC never emits virtual generated columns; columns still being added/dropped are not
        # part of the snapshot either (their ids may still appear in row values).
        if (generated and not raw.get("generated_stored")) or state != STATE_PUBLIC:
            continue
        column = _column(name, raw.get("type"), col_id, generated, raw.get("default"))
        key_flags[name] = _int(raw.get("type") or {}, "Flag", 0)
        if key_flags[name] & PRI_KEY_FLAG:
            pk_flag_names.append(name)
        infos.append(
            ColumnInfo(
                column_id=col_id,
                position=len(columns),
                origin_default=raw.get("origin_default"),
                origin_default_bit=raw.get("origin_default_bit"),
                has_origin_default=raw.get("origin_default") is not None or raw.get("origin_default_bit") is not None,
            )
        )
        columns.append(column)
    names = {c.name for c in columns}

    pk_is_handle = bool(info.get("pk_is_handle"))
    is_common_handle = bool(info.get("is_common_handle"))
    if pk_is_handle and is_common_handle:
        raise ValueError(f"table {table_name!r} cannot be both pk_is_handle and is_common_handle")
    indexes = _indexes(info, names, pk_flag_names, pk_is_handle, key_flags)
    primary = next((i for i in indexes if i.primary), None)
    handle_position = None
    common_positions: tuple[int, ...] = ()
    by_name = {c.name: i for i, c in enumerate(columns)}
    if pk_is_handle:
        if len(pk_flag_names) != 1:
            raise ValueError(f"table {table_name!r} is pk_is_handle but has {len(pk_flag_names)} PriKey columns")
        handle_position = by_name[pk_flag_names[0]]
        if columns[handle_position].type_code not in INTEGER_TYPES:
            raise ValueError(f"table {table_name!r}: pk_is_handle column {pk_flag_names[0]!r} is not an integer")
    elif is_common_handle:
        if primary is None:
            raise ValueError(f"table {table_name!r} is_common_handle but has no primary index in index_info")
        common_positions = tuple(by_name[n] for n in primary.columns)

    partition = info.get("partition") or None
    if partition:
        defs = partition.get("definitions") or []
        physical_ids = tuple(_int(d, "id") for d in defs)
        if not physical_ids:
            raise ValueError(f"partitioned table {table_name!r} has no partition definitions")
    else:
        physical_ids = (table_id,)
    max_id = info.get("max_col_id")
    max_column_id = max(all_ids) if not isinstance(max_id, int) else max(max_id, *all_ids)
    schema = TableSchema(
        schema=schema_name,
        table=table_name,
        columns=tuple(columns),
        indexes=tuple(indexes),
        table_id=table_id,
        # Simple protocol's schemaVersion is TiDB's table UpdateTS; fall back to the entry's ts.
        version=int(info.get("update_timestamp") or version_ts),
        partitioned=bool(partition),
    )
    return TableVersion(
        schema=schema,
        version_ts=version_ts,
        physical_ids=physical_ids,
        columns=tuple(infos),
        pk_is_handle=pk_is_handle,
        is_common_handle=is_common_handle,
        handle_position=handle_position,
        common_handle_positions=common_positions,
        max_column_id=max_column_id,
    )


def _column(name: str, ftype: Any, col_id: int, generated: bool, default: Any) -> Column:
    if not isinstance(ftype, Mapping):
        raise ValueError(f"column {name!r} needs a 'type' object with Tp, Flag, Flen, Decimal...")
    tp = _int(ftype, "Tp")
    try:
        code = TypeCode(tp)
    except ValueError:
        raise ValueError(f"column {name!r} has unsupported type code Tp={tp}") from None
    flag = _int(ftype, "Flag", 0)
    flen = _int(ftype, "Flen", _UNSPECIFIED)
    dec = _int(ftype, "Decimal", _UNSPECIFIED)
    charset = ftype.get("Charset") or ""
    collation = ftype.get("Collate") or ""
    if code in CHARSET_TYPES:
        # An empty charset with the BinaryFlag is charset binary (MySQL field flag 128).
        if not charset:
            charset = "binary" if flag & BINARY_FLAG else "utf8mb4"
        if not collation:
            collation = "binary" if charset == "binary" else f"{charset}_bin"
    else:
        charset = collation = "binary"
    if code in FSP_TYPES:
        dec = max(dec, 0)  # fsp; UnspecifiedFsp behaves as 0
    elems = ftype.get("Elems") or ()
    if not all(isinstance(e, str) for e in elems):
        raise ValueError(f"column {name!r}: Elems must be strings")
    return Column(
        name=name,
        type_code=code,
        charset=charset,
        collation=collation,
        length=None if flen < 0 else flen,
        decimal=None if dec < 0 else dec,
        unsigned=bool(flag & UNSIGNED_FLAG),
        zerofill=bool(flag & ZEROFILL_FLAG),
        nullable=not flag & NOT_NULL_FLAG,
        default=default if isinstance(default, str | int | float) and not isinstance(default, bool) else None,
        elements=tuple(elems),
        generated=generated,
        column_id=col_id,
    )


def _indexes(
    info: Mapping[str, Any], names: set[str], pk_flag_names: list[str], pk_is_handle: bool, flags: dict[str, int]
) -> list[Index]:
    out: list[Index] = []
    raw_indexes = info.get("index_info")
    for raw in raw_indexes or ():
        if raw.get("state", STATE_PUBLIC) != STATE_PUBLIC:
            continue
        idx_name = _name(raw.get("idx_name"), "index name")
        cols = tuple(_name(c.get("name"), "index column name") for c in raw.get("idx_cols") or ())
        if not cols or any(c not in names for c in cols):
            log.debug("index %s skipped: it covers columns that are not emitted", idx_name)
            continue
        out.append(Index(idx_name, cols, primary=bool(raw.get("is_primary")), unique=bool(raw.get("is_unique"))))
    # An int PK that is the handle has no entry in index_info: TiDB marks it with PriKeyFlag only.
    if pk_is_handle and pk_flag_names and not any(i.primary for i in out):
        out.insert(0, Index("PRIMARY", (pk_flag_names[0],), primary=True))
    if raw_indexes is None:
        # No index_info at all (a hand-written catalog): fall back to the column flags, as MySQL
        # sets them: PriKey on PK columns, UniqueKey on single-column unique keys, MultipleKey
        # on the first column of a non-unique index.
        if pk_flag_names and not any(i.primary for i in out):
            out.append(Index("PRIMARY", tuple(pk_flag_names), primary=True))
        for name, flag in flags.items():
            if flag & UNIQUE_KEY_FLAG and not flag & PRI_KEY_FLAG:
                out.append(Index(f"uk_{name}", (name,), unique=True))
            elif flag & MULTIPLE_KEY_FLAG:
                out.append(Index(f"idx_{name}", (name,)))
    return out


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    schema: str
    table_info: Mapping[str, Any]
    version_ts: int = 0


class Catalog:
    """Table versions by physical table id; `lookup` returns the version valid at a ts."""

    def __init__(self, entries: Iterable[CatalogEntry | TableVersion], source: str = "<catalog>") -> None:
        self.source = source
        versions: list[TableVersion] = []
        for i, entry in enumerate(entries):
            if isinstance(entry, TableVersion):
                versions.append(entry)
                continue
            try:
                versions.append(parse_table_info(entry.schema, entry.table_info, entry.version_ts))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise CaptureError(f"bad table info: {exc}", where=f"{source} entry {i}") from None
        # A row value may carry ids of columns dropped since: accept ids up to the largest id any
        # version of the table has used (TiDB's MaxColumnID only grows).
        max_ids: dict[int, int] = {}
        for v in versions:
            max_ids[v.schema.table_id] = max(max_ids.get(v.schema.table_id, 0), v.max_column_id)
        self._by_id: dict[int, tuple[list[int], list[TableVersion]]] = {}
        for v in sorted(versions, key=lambda v: v.version_ts):
            v.max_column_id = max_ids[v.schema.table_id]
            for pid in v.physical_ids:
                tss, vs = self._by_id.setdefault(pid, ([], []))
                if tss and tss[-1] == v.version_ts:
                    raise CaptureError(f"two versions of physical table {pid} at ts {v.version_ts}", where=self.source)
                tss.append(v.version_ts)
                vs.append(v)
        self.versions = versions

    @classmethod
    def from_json(cls, obj: Any, source: str = "<catalog>") -> Catalog:
        """``{"tables": [entry...]}`` or a bare list; entry = ``{schema, table, version}``."""
        raw = obj.get("tables") if isinstance(obj, Mapping) else obj
        if not isinstance(raw, list):
            raise CaptureError("a catalog is a list of entries or {'tables': [...]}", where=source)
        entries = []
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping):
                raise CaptureError("a catalog entry must be an object", where=f"{source} entry {i}")
            info = item.get("table", item.get("table_info"))
            try:
                schema = _name(item.get("schema", item.get("db")), "schema")
                version = item.get("version", 0)
                if not isinstance(version, int) or isinstance(version, bool) or version < 0:
                    raise ValueError(f"version must be a non-negative integer ts, got {version!r}")
                if not isinstance(info, Mapping):
                    raise ValueError("needs a 'table' object (TiDB table info)")
            except ValueError as exc:
                raise CaptureError(f"bad catalog entry: {exc}", where=f"{source} entry {i}") from None
            entries.append(CatalogEntry(schema, info, version))
        return cls(entries, source=source)

    @classmethod
    def load(cls, path: str | Path) -> Catalog:
        try:
            obj = orjson.loads(Path(path).read_bytes())
        except OSError as exc:
            raise CaptureError(f"cannot read catalog: {exc.strerror}", where=str(path)) from None
        except orjson.JSONDecodeError as exc:
            raise CaptureError(f"catalog is not JSON: {exc}", where=str(path)) from None
        return cls.from_json(obj, source=str(path))

    def knows(self, physical_id: int) -> bool:
        return physical_id in self._by_id

    def lookup(self, physical_id: int, ts: int) -> TableVersion | None:
        """The version of ``physical_id`` in force at ``ts`` (its version ts <= ts), or None."""
        found = self._by_id.get(physical_id)
        if found is None:
            return None
        tss, vs = found
        i = bisect.bisect_right(tss, ts) - 1
        return vs[i] if i >= 0 else None

    def validity(self, physical_id: int, ts: int) -> tuple[int, int]:
        """``[from, until)`` ts range of the version `lookup` returns (for caching)."""
        tss, _ = self._by_id[physical_id]
        i = bisect.bisect_right(tss, ts)
        return (tss[i - 1] if i else -1), (tss[i] if i < len(tss) else 1 << 64)
