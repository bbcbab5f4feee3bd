"""TiDB table-filter matching (``db.*``, ``!db.tmp*``, ``*.*``), as dispatch rules and DM use it.

Patterns are ``schema.table`` with shell wildcards (``*``, ``?``, ``[...]``); a leading ``!``
excludes. The LAST matching pattern decides, as in TiDB's table filter; case-insensitive unless
asked otherwise.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from ..errors import ConfigError


class TableFilter:
    def __init__(self, patterns: Sequence[str], case_sensitive: bool = False) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        self.patterns = tuple(patterns)
        flags = 0 if case_sensitive else re.IGNORECASE
        self._rules: list[tuple[bool, re.Pattern[str], re.Pattern[str]]] = []
        for raw in self.patterns:
            text = raw.strip()
            negate = text.startswith("!")
            text = text.lstrip("!")
            schema, sep, table = _split(text)
            if not sep or not schema or not table:
                raise ConfigError(f"table filter {raw!r} must look like schema.table (wildcards allowed)")
            self._rules.append(
                (
                    not negate,
                    re.compile(_part_regex(schema), flags),
                    re.compile(_part_regex(table), flags),
                )
            )

    def match(self, schema: str, table: str) -> bool:
        verdict = False
        for include, s, t in self._rules:
            if s.match(schema) and t.match(table):
                verdict = include
        return verdict

    def match_schema(self, schema: str) -> bool:
        """Whether any table of ``schema`` could match (for schema-level DDL routing)."""
        return any(include and s.match(schema) for include, s, _ in self._rules)


def _split(text: str) -> tuple[str, str, str]:
    # The dot separates schema and table unless it is inside backquotes.
    in_quote = False
    for i, ch in enumerate(text):
        if ch == "`":
            in_quote = not in_quote
        elif ch == "." and not in_quote:
            return text[:i], ".", text[i + 1 :]
    return text, "", ""


def _part_regex(part: str) -> str:
    """A backquoted name matches literally; otherwise shell wildcards apply."""
    if len(part) >= 2 and part[0] == part[-1] == "`":
        return re.escape(part[1:-1].replace("``", "`")) + r"\Z"
    return fnmatch.translate(part)
