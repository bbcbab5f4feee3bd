"""DM-style block-allow lists: which tables' changes a capture keeps, decided before any value is decoded."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from ...model.events import Op


def _pattern(text: str) -> re.Pattern[str]:
    """DM wildcards: ``*`` any run, ``?`` one character; case-insensitive, as DM matches by default."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text) + r"\Z", re.I)


def _table_rule(text: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    schema, sep, table = text.partition(".")
    return _pattern(schema), _pattern(table if sep else "*")


@dataclass
class BlockAllowList:
    """``do_dbs``/``ignore_dbs`` (schema patterns) and ``do_tables``/``ignore_tables`` (``schema.table`` patterns).

    DM's order: a schema must match ``do_dbs`` when given and not match ``ignore_dbs``; then a
    table must match ``do_tables`` when given and not match ``ignore_tables``. ``ignore_ops``
    drops row changes of those kinds; ``ignore_ddl`` drops DDL events (schema tracking still
    sees them).
    """

    do_dbs: list[str] = field(default_factory=list)
    ignore_dbs: list[str] = field(default_factory=list)
    do_tables: list[str] = field(default_factory=list)
    ignore_tables: list[str] = field(default_factory=list)
    ignore_ops: frozenset[Op] = frozenset()
    ignore_ddl: bool = False

    def __post_init__(self) -> None:
        self._do_dbs = [_pattern(p) for p in self.do_dbs]
        self._ignore_dbs = [_pattern(p) for p in self.ignore_dbs]
        self._do_tables = [_table_rule(p) for p in self.do_tables]
        self._ignore_tables = [_table_rule(p) for p in self.ignore_tables]
        self.allows = lru_cache(maxsize=65536)(self._allows)  # type: ignore[method-assign]

    @classmethod
    def build(
        cls,
        do_dbs: Iterable[str] = (),
        ignore_dbs: Iterable[str] = (),
        do_tables: Iterable[str] = (),
        ignore_tables: Iterable[str] = (),
        ignore_ops: Iterable[str] = (),
        ignore_ddl: bool = False,
    ) -> BlockAllowList | None:
        """A filter, or None when every argument is empty (no filtering at all)."""
        ops = frozenset(Op(o.lower()) for o in ignore_ops)
        lists = (list(do_dbs), list(ignore_dbs), list(do_tables), list(ignore_tables))
        if not any(lists) and not ops and not ignore_ddl:
            return None
        return cls(*lists, ignore_ops=ops, ignore_ddl=ignore_ddl)

    def allows(self, schema: str, table: str) -> bool:  # replaced per instance by a cached version
        return self._allows(schema, table)

    def _allows(self, schema: str, table: str) -> bool:
        if self._do_dbs and not any(p.match(schema) for p in self._do_dbs):
            return False
        if any(p.match(schema) for p in self._ignore_dbs):
            return False
        if not table:
            return True
        if self._do_tables and not any(s.match(schema) and t.match(table) for s, t in self._do_tables):
            return False
        return not any(s.match(schema) and t.match(table) for s, t in self._ignore_tables)
