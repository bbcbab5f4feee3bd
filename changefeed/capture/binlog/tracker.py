"""Schema tracker for live captures: what the binlog's TABLE_MAP does not say, from information_schema.

TABLE_MAP metadata (even ``binlog_row_metadata=FULL``) has no unique keys, defaults, zerofill or
generated columns, and with MINIMAL/NONE it has no column names, ENUM/SET members or primary key
(NONE: not even signedness or charsets, which decoding needs). The tracker reads
``information_schema`` (all user tables at first use, one table again after each DDL naming it)
and checks every table map against it before a single row is decoded:

* map without names (MINIMAL/NONE): the columns must line up (same count, compatible types,
  same signedness where the map says); if not, the table is read again once, and a map that still
  disagrees is a `CaptureError` naming the table and binlog position: a row is never decoded
  against a schema of another shape (e.g. the server is ahead of the capture by a DDL).
* map with names (FULL): the binlog wins; information_schema only enriches a schema whose names
  and types agree with it, otherwise it is ignored for that map with a warning (stale or newer).

Limits: information_schema shows the server's *current* tables. A capture far behind the server
may see a shape from after a DDL it has not read yet; the checks above catch every change of
column count or types, not a rename that keeps them (with FULL metadata the binlog names win).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ...errors import CaptureError
from ...model.ddlschema import ColumnDef, DDLCatalog, TableDef
from ...model.schema import Column, Index, TableSchema
from ...model.types import CHAR_TYPES, FSP_TYPES, TypeCode
from .constants import ColumnType
from .tablemap import BLOB_TYPES, TableMap

log = logging.getLogger(__name__)

_SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

# information_schema DATA_TYPE -> the binlog real types a TABLE_MAP may give that column.
_TEXTS = frozenset(BLOB_TYPES)
_COMPATIBLE: dict[str, frozenset[int]] = {
    "tinyint": frozenset({ColumnType.TINY}),
    "bool": frozenset({ColumnType.TINY}),
    "boolean": frozenset({ColumnType.TINY}),
    "smallint": frozenset({ColumnType.SHORT}),
    "mediumint": frozenset({ColumnType.INT24}),
    "int": frozenset({ColumnType.LONG}),
    "integer": frozenset({ColumnType.LONG}),
    "bigint": frozenset({ColumnType.LONGLONG}),
    "float": frozenset({ColumnType.FLOAT}),
    "double": frozenset({ColumnType.DOUBLE}),
    "real": frozenset({ColumnType.DOUBLE}),
    "decimal": frozenset({ColumnType.NEWDECIMAL, ColumnType.DECIMAL}),
    "numeric": frozenset({ColumnType.NEWDECIMAL, ColumnType.DECIMAL}),
    "date": frozenset({ColumnType.DATE, ColumnType.NEWDATE}),
    "datetime": frozenset({ColumnType.DATETIME, ColumnType.DATETIME2}),
    "timestamp": frozenset({ColumnType.TIMESTAMP, ColumnType.TIMESTAMP2}),
    "time": frozenset({ColumnType.TIME, ColumnType.TIME2}),
    "year": frozenset({ColumnType.YEAR}),
    "char": frozenset({ColumnType.STRING}),
    "binary": frozenset({ColumnType.STRING}),
    "varchar": frozenset({ColumnType.VARCHAR, ColumnType.VAR_STRING}),
    "varbinary": frozenset({ColumnType.VARCHAR, ColumnType.VAR_STRING}),
    "tinytext": _TEXTS,
    "text": _TEXTS,
    "mediumtext": _TEXTS,
    "longtext": _TEXTS | {ColumnType.JSON},
    "tinyblob": _TEXTS,
    "blob": _TEXTS,
    "mediumblob": _TEXTS,
    "longblob": _TEXTS,
    "json": frozenset({ColumnType.JSON}) | _TEXTS,  # MariaDB JSON is LONGTEXT
    "enum": frozenset({ColumnType.ENUM}),
    "set": frozenset({ColumnType.SET}),
    "bit": frozenset({ColumnType.BIT}),
}
_GEOMETRY = frozenset(
    {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon"}
    | {"geometrycollection", "geomcollection"}
)
_TYPE_CODES: dict[str, TypeCode] = {
    "tinyint": TypeCode.TINYINT,
    "smallint": TypeCode.SMALLINT,
    "mediumint": TypeCode.MEDIUMINT,
    "int": TypeCode.INT,
    "integer": TypeCode.INT,
    "bigint": TypeCode.BIGINT,
    "float": TypeCode.FLOAT,
    "double": TypeCode.DOUBLE,
    "real": TypeCode.DOUBLE,
    "decimal": TypeCode.DECIMAL,
    "numeric": TypeCode.DECIMAL,
    "date": TypeCode.DATE,
    "datetime": TypeCode.DATETIME,
    "timestamp": TypeCode.TIMESTAMP,
    "time": TypeCode.TIME,
    "year": TypeCode.YEAR,
    "char": TypeCode.CHAR,
    "binary": TypeCode.CHAR,
    "varchar": TypeCode.VARCHAR,
    "varbinary": TypeCode.VARCHAR,
    "tinytext": TypeCode.TINYBLOB,
    "tinyblob": TypeCode.TINYBLOB,
    "text": TypeCode.BLOB,
    "blob": TypeCode.BLOB,
    "mediumtext": TypeCode.MEDIUMBLOB,
    "mediumblob": TypeCode.MEDIUMBLOB,
    "longtext": TypeCode.LONGBLOB,
    "longblob": TypeCode.LONGBLOB,
    "json": TypeCode.JSON,
    "enum": TypeCode.ENUM,
    "set": TypeCode.SET,
    "bit": TypeCode.BIT,
}
_ELEMENTS = re.compile(r"'((?:[^']|'')*)'")


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """One row of information_schema.COLUMNS, normalised."""

    name: str
    data_type: str
    column_type: str
    nullable: bool
    default: str | None
    charset: str | None
    collation: str | None
    char_length: int | None
    precision: int | None
    scale: int | None
    fsp: int | None
    generated: bool
    unsigned: bool
    zerofill: bool
    elements: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TableInfo:
    schema: str
    table: str
    columns: tuple[ColumnInfo, ...]
    indexes: tuple[Index, ...]


def _default(value: Any, mariadb: bool) -> str | None:
    """MariaDB 10.2.7+ quotes literal defaults and writes NULL as the word; MySQL gives the value."""
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    if not mariadb:
        return text
    if text == "NULL":
        return None
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return text


class SchemaTracker:
    """information_schema per table, re-read after DDL; checks and completes table maps (module docstring).

    ``connect`` opens a PyMySQL connection (kept open and reopened on failure).
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect_fn = connect
        self._conn: Any = None
        self._mariadb = False
        self._tables: dict[tuple[str, str], TableInfo | None] = {}
        self._generation: dict[tuple[str, str], int] = {}
        self._collation_ids: dict[str, int] = {}
        self._loaded = False
        self._warned: set[tuple[str, str, int]] = set()

    # ------------------------------------------------------------------ reading

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._conn = self._connect_fn()
                    with self._conn.cursor() as cur:
                        cur.execute("SELECT VERSION()")
                        self._mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
                with self._conn.cursor() as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall())
            except Exception as exc:  # a dropped connection: reopen once
                self.close()
                if attempt == 2:
                    raise CaptureError(f"schema tracker cannot read information_schema: {exc}") from None
        raise AssertionError("unreachable")

    def _load(self, schema: str | None = None, table: str | None = None) -> dict[tuple[str, str], TableInfo]:
        """information_schema rows of every user table, or of one table."""
        args: tuple[object, ...]
        if schema is None:
            where, args = "TABLE_SCHEMA NOT IN %s", (_SYSTEM_SCHEMAS,)
        else:
            where, args = "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table)
        rows = self._query(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT,"
            " CHARACTER_SET_NAME, COLLATION_NAME, CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE,"
            " DATETIME_PRECISION, EXTRA FROM information_schema.COLUMNS WHERE " + where + " ORDER BY TABLE_SCHEMA,"
            " TABLE_NAME, ORDINAL_POSITION",
            args,
        )
        columns: dict[tuple[str, str], list[ColumnInfo]] = {}
        for s, t, name, raw_dtype, raw_ctype, nullable, default, cs, coll, clen, prec, scale, fsp, raw_extra in rows:
            dtype, ctype, extra = str(raw_dtype).lower(), str(raw_ctype).lower(), str(raw_extra or "").lower()
            elements = tuple(e.replace("''", "'") for e in _ELEMENTS.findall(ctype)) if dtype in ("enum", "set") else ()
            columns.setdefault((str(s), str(t)), []).append(
                ColumnInfo(
                    name=str(name),
                    data_type=dtype,
                    column_type=ctype,
                    nullable=str(nullable).upper() == "YES",
                    default=_default(default, self._mariadb),
                    charset=str(cs) if cs else None,
                    collation=str(coll) if coll else None,
                    char_length=int(clen) if clen is not None else None,
                    precision=int(prec) if prec is not None else None,
                    scale=int(scale) if scale is not None else None,
                    fsp=int(fsp) if fsp is not None else None,
                    generated="generated" in extra or "virtual" in extra or "persistent" in extra,
                    unsigned="unsigned" in ctype,
                    zerofill="zerofill" in ctype,
                    elements=elements,
                )
            )
        rows = self._query(
            "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS"
            " WHERE " + where + " ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
            args,
        )
        index_cols: dict[tuple[str, str], dict[str, tuple[bool, list[str]]]] = {}
        for s, t, name, non_unique, col in rows:
            entry = index_cols.setdefault((str(s), str(t)), {}).setdefault(str(name), (not int(non_unique), []))
            entry[1].append(str(col))
        out = {}
        for key, cols in columns.items():
            names = {c.name for c in cols}
            indexes = tuple(
                Index(name, tuple(idx_cols), primary=name == "PRIMARY", unique=unique)
                for name, (unique, idx_cols) in sorted(
                    index_cols.get(key, {}).items(), key=lambda kv: (kv[0] != "PRIMARY", kv[0])
                )
                if set(idx_cols) <= names  # expression indexes (MySQL 8) name no column
            )
            out[key] = TableInfo(key[0], key[1], tuple(cols), indexes)
        return out

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._tables.update(self._load())
        if self._mariadb:
            rows = self._query(
                "SELECT full_collation_name, id FROM information_schema.collation_character_set_applicability"
                " WHERE id IS NOT NULL"
            )
        else:
            rows = self._query("SELECT collation_name, id FROM information_schema.collations")
        self._collation_ids = {str(name): int(i) for name, i in rows}
        self._loaded = True
        log.info("schema tracker read %d tables from information_schema", len(self._tables))

    def table(self, schema: str, table: str) -> TableInfo | None:
        """The table as last read (None if it does not exist)."""
        self._ensure_loaded()
        key = (schema, table)
        if key not in self._tables:
            self._tables[key] = self._load(schema, table).get(key)
        return self._tables[key]

    def reload(self, schema: str, table: str) -> TableInfo | None:
        """Read one table again (after a DDL naming it): its table maps are checked again."""
        self._ensure_loaded()
        key = (schema, table)
        self._tables[key] = self._load(schema, table).get(key)
        self._generation[key] = self._generation.get(key, 0) + 1
        return self._tables[key]

    def forget_schema(self, schema: str) -> None:
        """A DROP/CREATE DATABASE: read its tables again when they are next seen."""
        for key in [k for k in self._tables if k[0] == schema]:
            del self._tables[key]
            self._generation[key] = self._generation.get(key, 0) + 1

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing the schema tracker connection failed", exc_info=True)

    # ------------------------------------------------------------------ table maps

    @staticmethod
    def _mismatch(tm: TableMap, info: TableInfo, names: bool) -> str | None:
        """Why the map's columns do not line up with information_schema (None when they do)."""
        if len(tm.columns) != len(info.columns):
            return f"{len(tm.columns)} columns in the TABLE_MAP, {len(info.columns)} in information_schema"
        for col, ci in zip(tm.columns, info.columns, strict=True):
            allowed = _COMPATIBLE.get(ci.data_type)
            if ci.data_type in _GEOMETRY:
                allowed = frozenset({ColumnType.GEOMETRY})
            if allowed is not None and col.real_type not in allowed:
                return f"column {col.index + 1} ({ci.name}) is binlog type {col.real_type}, not {ci.column_type}"
            if col.unsigned is not None and ci.data_type in _TYPE_CODES and col.unsigned != ci.unsigned:
                return f"column {col.index + 1} ({ci.name}) signedness differs"
            if names and col.name is not None and col.name.lower() != ci.name.lower():
                return f"column {col.index + 1} is {col.name!r} in the TABLE_MAP, {ci.name!r} in information_schema"
        return None

    def effective(self, tm: TableMap, where: str) -> TableMap:
        """The table map to decode with: checked against information_schema and, without names, completed.

        Cached on the map per tracker generation of its table, so the check runs once per map and DDL.
        """
        key = (tm.schema, tm.table)
        generation = self._generation.get(key, 0)
        hit = tm.cache.get("tracked")
        if hit is not None and hit[0] == generation:
            return hit[1]
        info = self.table(*key)
        if tm.has_metadata:  # FULL: the binlog's names and types win; information_schema only enriches
            reason = "table not in information_schema" if info is None else self._mismatch(tm, info, names=True)
            if reason is not None:
                if (tm.schema, tm.table, generation) not in self._warned:
                    self._warned.add((tm.schema, tm.table, generation))
                    log.warning(
                        "information_schema does not match the binlog for %s (%s); using TABLE_MAP metadata only"
                        " where=%s",
                        tm.qualified_name,
                        reason,
                        where,
                    )
                info = None
            eff = replace(tm, cache={})
        else:
            reason = "table not in information_schema" if info is None else self._mismatch(tm, info, names=False)
            if reason is not None:  # maybe a DDL we did not see: read once more before giving up
                info = self.reload(*key)
                generation = self._generation[key]
                reason = "table not in information_schema" if info is None else self._mismatch(tm, info, names=False)
            if reason is not None or info is None:
                raise CaptureError(
                    f"rows of {tm.qualified_name} cannot be aligned with its schema: {reason}. The binlog has no"
                    " column names (binlog_row_metadata is not FULL) and information_schema shows another shape"
                    " (the table changed after this point); set binlog_row_metadata=FULL or start after the change",
                    where=where,
                )
            eff = self._annotated(tm, info)
        eff.cache["tracker_info"] = info
        tm.cache["tracked"] = (generation, eff)
        return eff

    def _annotated(self, tm: TableMap, info: TableInfo) -> TableMap:
        """A copy of ``tm`` with names, members, primary key and (NONE metadata) signedness/charsets filled in."""
        columns = []
        for binlog_col, ci in zip(tm.columns, info.columns, strict=True):
            col = replace(binlog_col, name=ci.name)
            if col.unsigned is None and ci.data_type in _TYPE_CODES:
                col.unsigned = ci.unsigned
            if col.collation_id is None and ci.collation:
                col.collation_id = self._collation_ids.get(ci.collation)
            if col.elements is None and ci.elements:
                col.elements = tuple(e.encode("utf-8") for e in ci.elements)
            columns.append(col)
        eff = replace(tm, columns=columns, has_metadata=True, primary_key=list(tm.primary_key), cache={})
        if not eff.primary_key:
            pk = next((i for i in info.indexes if i.primary), None)
            if pk is not None:
                positions = {c.name: i for i, c in enumerate(info.columns)}
                eff.primary_key = [positions[n] for n in pk.columns]
                eff.primary_key_prefixes = [0] * len(eff.primary_key)
        return eff

    # ------------------------------------------------------------------ model schemas

    @staticmethod
    def enrich(ts: TableSchema, info: TableInfo | None) -> TableSchema:
        """Add what information_schema knows and the binlog does not: keys, defaults, zerofill, generated."""
        if info is None:
            return ts
        columns = tuple(
            replace(c, default=ci.default, generated=ci.generated, zerofill=ci.zerofill or c.zerofill)
            for c, ci in zip(ts.columns, info.columns, strict=True)
        )
        return replace(ts, columns=columns, indexes=info.indexes or ts.indexes)

    @staticmethod
    def table_schema(info: TableInfo, version: int) -> TableSchema:
        """A model schema from information_schema alone (a DDL's shape before any TABLE_MAP shows it)."""
        columns = []
        for ci in info.columns:
            dtype = ci.data_type
            code = TypeCode.GEOMETRY if dtype in _GEOMETRY else _TYPE_CODES.get(dtype, TypeCode.VARCHAR)
            binary = dtype in ("binary", "varbinary") or dtype.endswith("blob") or dtype in _GEOMETRY
            length: int | None = None
            decimal: int | None = None
            if code in CHAR_TYPES:  # CHAR or VARCHAR: `_TYPE_CODES` has no VAR_STRING
                length = ci.char_length
            elif code is TypeCode.DECIMAL:
                length, decimal = ci.precision, ci.scale
            elif code is TypeCode.BIT:
                length = ci.precision
            elif code in FSP_TYPES:
                decimal = ci.fsp or 0
            charset, collation = ("binary", "binary") if binary or not ci.charset else (ci.charset, ci.collation)
            columns.append(
                Column(
                    name=ci.name,
                    type_code=code,
                    charset=charset,
                    collation=collation or "binary",
                    length=length,
                    decimal=decimal,
                    unsigned=ci.unsigned,
                    zerofill=ci.zerofill,
                    nullable=ci.nullable,
                    default=ci.default,
                    elements=ci.elements,
                    generated=ci.generated,
                )
            )
        return TableSchema(info.schema, info.table, tuple(columns), info.indexes, 0, version)


def table_def(info: TableInfo) -> TableDef:
    """What the DDL catalog keeps of an information_schema table: columns, NOT NULL, DECIMAL(p,s), indexes."""
    columns = tuple(
        ColumnDef(
            ci.name,
            ci.nullable,
            (ci.precision, ci.scale or 0) if ci.data_type in ("decimal", "numeric") and ci.precision else None,
        )
        for ci in info.columns
    )
    return TableDef(info.schema, info.table, columns, info.indexes)


def snapshot_catalog(connect: Callable[[], Any], catalog: DDLCatalog | None = None) -> DDLCatalog:
    """A DDL catalog seeded with every user table's keys from information_schema (COLUMNS, STATISTICS), once.

    For a live capture without the schema tracker: the TABLE_MAPs carry no unique keys, and the
    DDL seen later in the stream updates what this snapshot says. A server that cannot be read
    leaves the catalog empty (one warning): capture goes on with TABLE_MAP keys only.
    """
    catalog = catalog if catalog is not None else DDLCatalog()
    tracker = SchemaTracker(connect)
    try:
        tables = tracker._load()
    except CaptureError as exc:
        log.warning("no information_schema snapshot of the keys: %s", exc.message, extra={"error": exc.message})
        return catalog
    finally:
        tracker.close()
    for info in tables.values():
        catalog.put(table_def(info))
    log.info("key snapshot read %d tables from information_schema", len(tables))
    return catalog


__all__ = ["ColumnInfo", "SchemaTracker", "TableInfo", "snapshot_catalog", "table_def"]
