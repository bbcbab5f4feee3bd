"""Table shape: columns, indexes, and the key flags every protocol derives from them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from .types import ALWAYS_UNSIGNED_TYPES, CHARSET_TYPES, STRING_TYPES, ColumnFlag, TypeCode, type_name

KEY_FLAGS = ColumnFlag.HANDLE_KEY | ColumnFlag.PRIMARY_KEY | ColumnFlag.UNIQUE_KEY | ColumnFlag.MULTIPLE_KEY


@dataclass(frozen=True, slots=True)
class Column:
    """One column as the protocols need it.

    Normalised the way TiDB stores column info (spec §0.3), so a MySQL source and TiDB give the
    same flags: non-string types have charset ``binary``; BIT and YEAR are unsigned; YEAR is
    zerofill. ``key_flags`` holds the index-derived bits and is filled in by `TableSchema`.
    """

    name: str
    type_code: TypeCode
    charset: str = "binary"
    collation: str = "binary"
    length: int | None = None
    decimal: int | None = None
    unsigned: bool = False
    zerofill: bool = False
    nullable: bool = True
    default: Any = None
    elements: tuple[str, ...] = ()
    generated: bool = False
    column_id: int | None = None
    key_flags: ColumnFlag = ColumnFlag(0)

    def __post_init__(self) -> None:
        tc = TypeCode(self.type_code)
        object.__setattr__(self, "type_code", tc)
        if tc not in CHARSET_TYPES:
            object.__setattr__(self, "charset", "binary")
            object.__setattr__(self, "collation", "binary")
        if tc in ALWAYS_UNSIGNED_TYPES or self.zerofill:
            object.__setattr__(self, "unsigned", True)
        if tc is TypeCode.YEAR:
            object.__setattr__(self, "zerofill", True)
        if not isinstance(self.elements, tuple):
            object.__setattr__(self, "elements", tuple(self.elements))
        object.__setattr__(self, "key_flags", ColumnFlag(self.key_flags & KEY_FLAGS))

    @property
    def binary(self) -> bool:
        """Charset ``binary``: BINARY/VARBINARY/BLOB values are bytes (and every numeric type)."""
        return self.charset == "binary"

    @property
    def is_bytes(self) -> bool:
        """The model value is ``bytes`` (binary string types, GEOMETRY), not ``str``."""
        return (self.binary and self.type_code in STRING_TYPES) or self.type_code is TypeCode.GEOMETRY

    @property
    def flags(self) -> ColumnFlag:
        """TiCDC's column flag bitset (seed 000): attribute bits plus the table's key bits."""
        f = self.key_flags
        if self.binary:
            f |= ColumnFlag.BINARY
        if self.generated:
            f |= ColumnFlag.GENERATED
        if self.nullable:
            f |= ColumnFlag.NULLABLE
        if self.unsigned:
            f |= ColumnFlag.UNSIGNED
        return f

    @property
    def type_name(self) -> str:
        """The ``mysqlType`` base name (Simple protocol table): ``int``, ``varbinary``, ``blob``."""
        return type_name(self.type_code, self.binary)

    @classmethod
    def from_flags(cls, name: str, type_code: int, flags: int, **attrs: Any) -> Column:
        """Rebuild a column from a protocol that carries only type code and flags (Open Protocol)."""
        f = ColumnFlag(flags)
        tc = TypeCode(type_code)
        if tc in CHARSET_TYPES and "charset" not in attrs:
            attrs["charset"], attrs["collation"] = (
                ("binary", "binary") if f & ColumnFlag.BINARY else ("utf8mb4", "utf8mb4_bin")
            )
        return cls(
            name=name,
            type_code=tc,
            nullable=bool(f & ColumnFlag.NULLABLE),
            unsigned=bool(f & ColumnFlag.UNSIGNED),
            generated=bool(f & ColumnFlag.GENERATED),
            key_flags=f & KEY_FLAGS,
            **attrs,
        )


@dataclass(frozen=True, slots=True)
class Index:
    """An index by column names; ``primary`` implies ``unique``."""

    name: str
    columns: tuple[str, ...]
    primary: bool = False
    unique: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.columns, tuple):
            object.__setattr__(self, "columns", tuple(self.columns))
        if self.primary:
            object.__setattr__(self, "unique", True)


@dataclass(frozen=True)
class TableSchema:
    """A table at one schema version, shared by every row change of that version.

    Key flags come from ``indexes`` when given (binlog metadata, TiDB table info, Simple
    protocol); a decoder that only sees per-column flags (Open Protocol) passes columns with
    ``key_flags`` and no indexes, and the primary/handle indexes are rebuilt from the flags.
    """

    schema: str
    table: str
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()
    table_id: int = 0
    version: int = 0
    partitioned: bool = False
    #: The upstream shard a routed shape of a merged table comes from (`dispatch.route`): the MySQL
    #: sink's pessimistic shard DDL mode holds rows by shard. Not part of the table's identity.
    origin: tuple[str, str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        columns = tuple(self.columns)
        indexes = tuple(self.indexes)
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate column names in {self.schema}.{self.table}: {names}")
        if indexes:
            for idx in indexes:
                missing = [n for n in idx.columns if n not in names]
                if missing:
                    raise ValueError(
                        f"index {idx.name!r} of {self.schema}.{self.table} names unknown columns {missing}"
                    )
            columns = _apply_key_flags(columns, indexes)
        else:
            indexes = _indexes_from_flags(columns)
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "indexes", indexes)

    @cached_property
    def column_index(self) -> dict[str, int]:
        """Position of each column by name."""
        return {c.name: i for i, c in enumerate(self.columns)}

    @cached_property
    def handle_key(self) -> tuple[int, ...]:
        """Positions of the handle-key columns (spec §0.3), or () for a table without one."""
        return tuple(i for i, c in enumerate(self.columns) if c.key_flags & ColumnFlag.HANDLE_KEY)

    @cached_property
    def primary_key(self) -> tuple[int, ...]:
        """Positions of the primary-key columns in table order (Canal-JSON ``pkNames``)."""
        return tuple(i for i, c in enumerate(self.columns) if c.key_flags & ColumnFlag.PRIMARY_KEY)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    def column(self, name: str) -> Column:
        try:
            return self.columns[self.column_index[name]]
        except KeyError:
            raise KeyError(f"{self.qualified_name} has no column {name!r}") from None

    def renamed(self, schema: str, table: str) -> TableSchema:
        return replace(self, schema=schema, table=table)


def _handle_index(columns: Sequence[Column], indexes: Iterable[Index]) -> Index | None:
    """TiCDC's handle-key choice: the primary key, else the best NOT NULL unique index.

    "Best" = fewest columns, then earliest index (TiDB orders by index id); indexes over
    nullable or virtual columns never qualify (spec §0.3).
    """
    by_name = {c.name: c for c in columns}
    best: Index | None = None
    for idx in indexes:
        if idx.primary:
            return idx
        if not idx.unique or any(by_name[n].nullable for n in idx.columns):
            continue
        if best is None or len(idx.columns) < len(best.columns):
            best = idx
    return best


def _apply_key_flags(columns: tuple[Column, ...], indexes: tuple[Index, ...]) -> tuple[Column, ...]:
    # TiDB sets PRI on primary columns, UNI on single-column unique keys and MUL on the first
    # column of other indexes; tiflow's initColumnsFlag adds UniqueKey for every column of a
    # unique index and MultipleKey for every column of a multi-column index.
    flags = {c.name: ColumnFlag(0) for c in columns}
    for idx in indexes:
        if idx.primary:
            for n in idx.columns:
                flags[n] |= ColumnFlag.PRIMARY_KEY
        if idx.unique and not idx.primary:
            for n in idx.columns:
                flags[n] |= ColumnFlag.UNIQUE_KEY
        if len(idx.columns) > 1:
            for n in idx.columns:
                flags[n] |= ColumnFlag.MULTIPLE_KEY
        elif not idx.unique:
            flags[idx.columns[0]] |= ColumnFlag.MULTIPLE_KEY
    handle = _handle_index(columns, indexes)
    if handle is not None:
        for n in handle.columns:
            flags[n] |= ColumnFlag.HANDLE_KEY
    return tuple(replace(c, key_flags=flags[c.name]) if c.key_flags != flags[c.name] else c for c in columns)


def _indexes_from_flags(columns: tuple[Column, ...]) -> tuple[Index, ...]:
    pk = tuple(c.name for c in columns if c.key_flags & ColumnFlag.PRIMARY_KEY)
    if pk:
        return (Index("PRIMARY", pk, primary=True),)
    handle = tuple(c.name for c in columns if c.key_flags & ColumnFlag.HANDLE_KEY)
    if handle:
        return (Index("handle_key", handle, unique=True),)
    return ()
