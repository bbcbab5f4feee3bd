"""SQL text for the MySQL sink: quoting, model value -> SQL parameter, DML statement rendering.

Pure functions over `TableSchema`s, so every statement shape is unit-tested without a server.
Identifiers are always backquoted (backquotes doubled); values never reach SQL text except
through `make_literal`, PyMySQL's own escaping, the way PyMySQL renders bound ``%s`` parameters
(one round trip per multi-row statement instead of a server-side prepare per row).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from ...clients.mysql import escape_string
from ...model import ABSENT, Column, TableSchema, TypeCode
from ...model.ddl import quote_ident, quote_table
from ...model.rowblock import TableRows
from ...model.schemacache import PlanCache
from ...model.types import BOOLEAN_TYPES, FLOAT_TYPES, INTEGER_TYPES, TEXT_VALUE_TYPES, UINT_VALUE_TYPES
from .columns import UNHEX, UNSIGNED, Gather, ImageColumns, LoadFile, load_rows, render_inserts

# PyMySQL's escape_string is str.translate with a private 128-entry table (ASCII code -> text); the
# same table built from the public function lets the hot path translate without a call per value.
_ESCAPE_TABLE: list[str] = [escape_string(chr(c)) for c in range(128)]

__all__ = [
    "Literal",
    "TableSQL",
    "make_literal",
    "param_converter",
    "quote_ident",
    "quote_table",
    "table_sql",
    "to_param",
]


class Literal:
    """Value -> SQL literal with PyMySQL's escaping rules (``make_literal`` builds one).

    Strings are backslash-escaped unless the session runs with NO_BACKSLASH_ESCAPES (then quotes
    are doubled); bytes become ``X'hex'`` so no byte sequence can be misread in any charset.
    `column_renderer` gives a per-column fast path (the sink renders millions of values).
    """

    def __init__(self, no_backslash_escapes: bool = False) -> None:
        self.no_backslash_escapes = no_backslash_escapes

    def text(self, value: str) -> str:
        if self.no_backslash_escapes:
            return "'" + value.replace("'", "''") + "'"
        return "'" + escape_string(value) + "'"

    def __call__(self, value: Any) -> str:
        if value is None:
            return "NULL"
        t = type(value)
        if t is str:
            return self.text(value)
        if t is int:
            return str(value)
        if t is bytes or t is bytearray or t is memoryview:
            return "X'" + bytes(value).hex() + "'"
        if t is float:
            text = repr(value)
            if text in ("nan", "inf", "-inf"):
                raise ValueError(f"{text} has no MySQL literal")
            return text if "e" in text else text + "e0"
        if t is Decimal:
            return format(value, "f")
        if t is bool:
            return "1" if value else "0"
        if value is ABSENT:
            raise ValueError("a column absent from the row image cannot be written")
        raise TypeError(f"no SQL literal for {t.__name__} value {value!r}")

    def column_renderer(self, column: Column) -> Callable[[Any], str]:
        """``model value -> literal`` for one column: `param_converter` then the literal, fast paths first."""
        generic = self.__call__
        tc = column.type_code
        if tc is TypeCode.ENUM:
            convert = _enum_param(column)
            return lambda v: "NULL" if v is None else generic(convert(v))
        if tc in INTEGER_TYPES or tc in UINT_VALUE_TYPES:  # ENUM went above
            return lambda v: str(v) if type(v) is int else generic(v)  # bool goes the generic way: 1/0
        if column.is_bytes:
            return lambda v: "X'" + v.hex() + "'" if type(v) is bytes else generic(v)
        if tc in TEXT_VALUE_TYPES:
            if not self.no_backslash_escapes:
                table = _ESCAPE_TABLE
                return lambda v: "'" + v.translate(table) + "'" if type(v) is str else generic(v)
            text = self.text
            return lambda v: text(v) if type(v) is str else generic(v)
        if tc is TypeCode.DECIMAL:
            return lambda v: format(v, "f") if type(v) is Decimal else generic(v)
        if tc in FLOAT_TYPES:

            def render_float(v: Any) -> str:
                if type(v) is not float:
                    return generic(v)
                text = repr(v)  # the shortest round-trip digits; 'e0' keeps it a float literal
                return text if "e" in text else generic(v) if "n" in text else text + "e0"

            return render_float
        return generic


def make_literal(no_backslash_escapes: bool = False) -> Literal:
    """A `Literal` for a session with (or without) NO_BACKSLASH_ESCAPES."""
    return Literal(no_backslash_escapes)


def _enum_param(column: Column) -> Callable[[Any], Any]:
    elements = column.elements

    def convert(value: Any) -> Any:
        # ENUM: the member name when the members are known (index 0 is MySQL's '' error value,
        # stored as 0 outside strict mode), else the 1-based index, which MySQL reads as a number.
        if not elements or not isinstance(value, int):
            return value
        if value == 0:
            return ""
        return elements[value - 1] if value <= len(elements) else value

    return convert


def _bool_to_int(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value


def param_converter(column: Column) -> Callable[[Any], Any] | None:
    """How a model value of ``column`` becomes a SQL parameter (None: use it as is).

    SET bitmasks and BIT values stay ints (MySQL reads a number as the bitmask / the bits), YEAR
    stays an int (the number 0 is year 0000, the string '0' would be 2000), temporal values stay
    text (zero dates and TIME beyond 24 h included), DECIMAL stays Decimal, JSON stays text.
    """
    tc = column.type_code
    if tc is TypeCode.ENUM:
        return _enum_param(column)
    if tc in BOOLEAN_TYPES:
        return _bool_to_int
    return None


def to_param(column: Column, value: Any) -> Any:
    """One model value as a SQL parameter (see `param_converter`)."""
    if value is None or value is ABSENT:
        return value
    convert = param_converter(column)
    return convert(value) if convert else value


class TableSQL:
    """Statement renderers for one table shape (cached per `TableSchema` object by `table_sql`).

    Generated columns are never written (MySQL rejects values for them) and are left out of
    WHERE clauses too, since they follow from the other columns.
    """

    def __init__(self, table: TableSchema, mysql_json: bool = False) -> None:
        self.table = table
        self.name = quote_table(table.schema, table.table)
        self.writable: tuple[int, ...] = tuple(i for i, c in enumerate(table.columns) if not c.generated)
        self.handle: tuple[int, ...] = table.handle_key
        self.all_writable = len(self.writable) == len(table.columns)
        if len(self.handle) == 1:
            h = self.handle[0]
            self.key_of: Callable[[Sequence[Any]], tuple[Any, ...]] = lambda image: (image[h],)
        else:
            self.key_of = lambda image: tuple(image[i] for i in self.handle)
        # Several UPDATEs may share one statement only when no other unique index exists: with
        # one, the rows' order inside the statement could matter (value hand-overs).
        handle_names = {table.columns[i].name for i in self.handle}
        self.batch_updates = bool(self.handle) and all(
            set(idx.columns) == handle_names for idx in table.indexes if idx.unique
        )
        self.converters = tuple(param_converter(c) for c in table.columns)
        self.quoted = tuple(quote_ident(c.name) for c in table.columns)
        # MySQL's JSON type equals a string only through CAST(.. AS JSON); MariaDB's JSON is text.
        self.json_cast = tuple(mysql_json and c.type_code is TypeCode.JSON for c in table.columns)
        self._renderers: dict[bool, tuple[Callable[[Any], str], ...]] = {}

    # --- values ------------------------------------------------------------------------------------

    def renderers(self, literal: Literal) -> tuple[Callable[[Any], str], ...]:
        fns = self._renderers.get(literal.no_backslash_escapes)
        if fns is None:
            fns = tuple(literal.column_renderer(c) for c in self.table.columns)
            self._renderers[literal.no_backslash_escapes] = fns
        return fns

    def values(self, image: Sequence[Any], positions: Sequence[int], literal: Literal) -> list[str]:
        fns = self.renderers(literal)
        try:
            if positions is self.writable and self.all_writable:
                return [f(v) for f, v in zip(fns, image, strict=True)]
            return [fns[i](image[i]) for i in positions]
        except ValueError as exc:
            names = [self.table.columns[i].name for i in positions if image[i] is ABSENT]
            raise ValueError(f"{self.name}: {exc} (columns {names})") from None

    def present(self, image: Sequence[Any]) -> tuple[int, ...]:
        """Writable positions the image carries (ABSENT columns are left to the server)."""
        if ABSENT not in image:
            return self.writable
        return tuple(i for i in self.writable if image[i] is not ABSENT)

    def full(self, image: Sequence[Any]) -> bool:
        """Whether the image carries every writable column."""
        if self.all_writable:
            return ABSENT not in image
        return all(image[i] is not ABSENT for i in self.writable)

    def key_values(self, key: Sequence[Any], literal: Literal) -> list[str]:
        """Literals of a handle-key tuple (position j is column ``handle[j]``)."""
        fns = self.renderers(literal)
        return [fns[i](v) for v, i in zip(key, self.handle, strict=True)]

    def _key_cond(self, key: Sequence[Any], literal: Literal) -> str:
        vals = self.key_values(key, literal)
        return " AND ".join(f"{self.quoted[i]}={v}" for i, v in zip(self.handle, vals, strict=True))

    def _match_all(self, image: Sequence[Any], literal: Literal) -> str:
        # NULL-safe equality over every column the image carries: the only identity a row of a
        # table without a handle key has (TiCDC matches such rows the same way).
        positions = self.present(image)
        vals = self.values(image, positions, literal)
        parts = []
        for i, v in zip(positions, vals, strict=True):
            parts.append(f"{self.quoted[i]}<=>CAST({v} AS JSON)" if self.json_cast[i] else f"{self.quoted[i]}<=>{v}")
        return " AND ".join(parts)

    # --- statements -------------------------------------------------------------------------------

    def _insert_prefix(self, positions: Sequence[int], replace: bool) -> str:
        verb = "REPLACE" if replace else "INSERT"
        return f"{verb} INTO {self.name} (" + ",".join(self.quoted[i] for i in positions) + ") VALUES "

    def insert(
        self,
        images: Sequence[Sequence[Any]],
        positions: Sequence[int],
        replace: bool,
        literal: Literal,
        max_rows: int = 1000,
        max_bytes: int = 1 << 21,
    ) -> Iterator[tuple[str, int]]:
        """Multi-row ``INSERT``/``REPLACE INTO t (cols) VALUES (..),(..)``: (sql, rows) per statement.

        All images must carry ``positions``; statements are cut at ``max_rows`` rows or about
        ``max_bytes`` of SQL text, so no statement nears max_allowed_packet.
        """
        prefix = self._insert_prefix(positions, replace)
        yield from _chunked(
            prefix,
            ("(" + ",".join(self.values(im, positions, literal)) + ")" for im in images),
            "",
            max_rows,
            max_bytes,
        )

    def insert_columns(
        self,
        tables: Sequence[TableRows] | Gather,
        positions: Sequence[int],
        replace: bool,
        literal: Literal,
        max_rows: int = 1000,
        max_bytes: int = 1 << 21,
    ) -> Iterator[tuple[str, int]]:
        """`insert` over block rows, rendered from their Arrow columns: the same statements, byte
        for byte, as `insert` over the rows' images (``TableRows.images``) in order.

        Every row must be an INSERT carrying ``positions`` (`Gather.inserts_full`). A value
        without a literal (NaN, a type with no rule) raises what `insert` raises, at the statement
        where `insert` raises it: the rows are then rendered from their images.
        """
        prefix = self._insert_prefix(positions, replace)
        rows = tables if isinstance(tables, Gather) else Gather.of(tables)
        try:
            statements = list(
                render_inserts(
                    self.table.columns, rows, positions, self.renderers(literal), literal, prefix, max_rows, max_bytes
                )
            )
        except (ValueError, TypeError, ArithmeticError):
            images: list[tuple[Any, ...]] = []
            for t in rows.tables():
                for new, _ in t.images():
                    assert new is not None  # every row is an INSERT: its new image is present
                    images.append(new)
            yield from self.insert(images, positions, replace, literal, max_rows, max_bytes)
            return
        yield from statements

    def load_data(
        self,
        rows: Gather | Sequence[Sequence[Any]],
        positions: Sequence[int],
        replace: bool,
        literal: Literal,
        path: str,
    ) -> tuple[str, LoadFile] | None:
        """``LOAD DATA LOCAL INFILE path [REPLACE] INTO TABLE t`` and its file: what `insert_columns`
        over block rows, or `insert` over row images, stores (``REPLACE`` for `replace`); None when
        a column has no LOAD DATA rule (`load_rows`, `ImageColumns`).

        The file is UTF-8 (``CHARACTER SET utf8mb4``, as the INSERT text is); separators are hex
        literals so the statement reads the same with or without NO_BACKSLASH_ESCAPES. Without
        REPLACE, MySQL turns duplicate keys of a LOCAL load into skipped rows with warnings: the
        caller must check the reply (`clients.mysql.LoadResult`).
        """
        columns = rows if isinstance(rows, Gather) else ImageColumns(self.table.columns, rows)
        loaded = load_rows(self.table.columns, columns, positions)
        if loaded is None:
            return None
        targets: list[str] = []
        sets: list[str] = []
        for i, kind in zip(positions, loaded.kinds, strict=True):
            if kind == UNHEX:
                targets.append(f"@cf{i}")
                sets.append(f"{self.quoted[i]}=UNHEX(@cf{i})")
            elif kind == UNSIGNED:
                targets.append(f"@cf{i}")
                sets.append(f"{self.quoted[i]}=CAST(@cf{i} AS UNSIGNED)")
            else:
                targets.append(self.quoted[i])
        sql = (
            f"LOAD DATA LOCAL INFILE {literal.text(path)} {'REPLACE ' if replace else ''}INTO TABLE {self.name} "
            "CHARACTER SET utf8mb4 FIELDS TERMINATED BY X'09' ENCLOSED BY '' ESCAPED BY X'5c' "
            f"LINES TERMINATED BY X'0a' ({','.join(targets)})"
        )
        if sets:
            sql += " SET " + ",".join(sets)
        return sql, loaded

    def delete_keys(
        self, keys: Sequence[Sequence[Any]], literal: Literal, max_rows: int = 1000, max_bytes: int = 1 << 21
    ) -> Iterator[tuple[str, int]]:
        """``DELETE FROM t WHERE (k1,k2) IN ((..),(..))`` over handle-key value tuples, chunked."""
        if len(self.handle) == 1:
            prefix = f"DELETE FROM {self.name} WHERE {self.quoted[self.handle[0]]} IN ("
            items = (self.key_values(k, literal)[0] for k in keys)
        else:
            cols = ",".join(self.quoted[i] for i in self.handle)
            prefix = f"DELETE FROM {self.name} WHERE ({cols}) IN ("
            items = ("(" + ",".join(self.key_values(k, literal)) + ")" for k in keys)
        yield from _chunked(prefix, items, ")", max_rows, max_bytes)

    def update(self, new: Sequence[Any], key: Sequence[Any], literal: Literal) -> str:
        """``UPDATE t SET <columns new carries> WHERE <handle key> = key`` (one row, key may change)."""
        positions = self.present(new)
        sets = ",".join(
            f"{self.quoted[i]}={v}" for i, v in zip(positions, self.values(new, positions, literal), strict=True)
        )
        return f"UPDATE {self.name} SET {sets} WHERE {self._key_cond(key, literal)}"

    def update_batch(
        self,
        items: Sequence[tuple[Sequence[Any], Sequence[Any]]],
        positions: Sequence[int],
        literal: Literal,
        max_rows: int = 64,
    ) -> Iterator[tuple[str, int]]:
        """Key-preserving UPDATEs of distinct rows as ``UPDATE t SET c = CASE key WHEN .. THEN .. END
        .. WHERE key IN (..)`` (TiCDC's batch-dml form); a repeated key starts a new statement so
        the updates of one row stay in order. Only for tables where `batch_updates` holds.
        """
        handle = set(self.handle)
        sets = [i for i in positions if i not in handle]
        if not sets:  # nothing but the key: a no-op, like the single UPDATE would be
            return
        single = len(self.handle) == 1
        key_expr = self.quoted[self.handle[0]] if single else "(" + ",".join(self.quoted[i] for i in self.handle) + ")"
        batch: list[tuple[str, list[str]]] = []
        seen: set[tuple[Any, ...]] = set()

        def statement() -> str:
            cases = []
            for n, i in enumerate(sets):
                if single:
                    whens = " ".join(f"WHEN {k} THEN {vals[n]}" for k, vals in batch)
                    cases.append(f"{self.quoted[i]}=CASE {key_expr} {whens} END")
                else:
                    whens = " ".join(f"WHEN {key_expr}={k} THEN {vals[n]}" for k, vals in batch)
                    cases.append(f"{self.quoted[i]}=CASE {whens} END")
            keys = ",".join(k for k, _ in batch)
            return f"UPDATE {self.name} SET {','.join(cases)} WHERE {key_expr} IN ({keys})"

        for new, key in items:
            if batch and (key in seen or len(batch) >= max_rows):
                yield statement(), len(batch)
                batch, seen = [], set()
            seen.add(tuple(key))
            kv = self.key_values(key, literal)
            batch.append((kv[0] if single else "(" + ",".join(kv) + ")", self.values(new, sets, literal)))
        if batch:
            yield statement(), len(batch)

    def delete_row(self, old: Sequence[Any], literal: Literal) -> str:
        """``DELETE ... WHERE every column <=> old LIMIT 1``: one copy of a row of a keyless table."""
        return f"DELETE FROM {self.name} WHERE {self._match_all(old, literal)} LIMIT 1"

    def update_row(self, old: Sequence[Any], new: Sequence[Any], literal: Literal) -> str:
        """``UPDATE ... SET new WHERE every column <=> old LIMIT 1`` for a table without a key."""
        positions = self.present(new)
        sets = ",".join(
            f"{self.quoted[i]}={v}" for i, v in zip(positions, self.values(new, positions, literal), strict=True)
        )
        return f"UPDATE {self.name} SET {sets} WHERE {self._match_all(old, literal)} LIMIT 1"


def _chunked(
    prefix: str, items: Iterator[str], suffix: str, max_rows: int, max_bytes: int
) -> Iterator[tuple[str, int]]:
    parts: list[str] = []
    size = len(prefix)
    for item in items:
        if parts and (len(parts) >= max_rows or size + len(item) > max_bytes):
            yield prefix + ",".join(parts) + suffix, len(parts)
            parts, size = [], len(prefix)
        parts.append(item)
        size += len(item) + 1
    if parts:
        yield prefix + ",".join(parts) + suffix, len(parts)


_CACHES: dict[bool, PlanCache[TableSQL]] = {
    False: PlanCache(lambda table: TableSQL(table, False)),
    True: PlanCache(lambda table: TableSQL(table, True)),
}


def table_sql(table: TableSchema, mysql_json: bool = False) -> TableSQL:
    """The cached renderers for a table shape (TableSchema objects are shared per version)."""
    return _CACHES[mysql_json].get(table)
