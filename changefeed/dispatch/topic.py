"""Topic dispatcher: TiCDC's topic expressions (spec §4.3)."""

from __future__ import annotations

import re

from ..errors import ConfigError

_HARD_CODED = re.compile(r"^[A-Za-z0-9._-]+$")
_EXPRESSION = re.compile(r"^[A-Za-z0-9._-]*(\{schema\})?([A-Za-z0-9._-]*\{table\})?[A-Za-z0-9._-]*$")
_INVALID = re.compile(r"[^a-zA-Z0-9._-]")
_MAX_TOPIC_BYTES = 249


class TopicDispatcher:
    """Topic for a table: a fixed name, or an expression with ``{schema}``/``{table}``."""

    def __init__(self, expression: str, default_topic: str, require_schema_and_table: bool = False) -> None:
        self.expression = expression or ""
        self.default_topic = default_topic
        if not self.expression:
            return
        if not (_HARD_CODED.match(self.expression) or _EXPRESSION.match(self.expression)):
            raise ConfigError(
                f"invalid topic expression {expression!r}: use letters, digits, '.', '_', '-' and "
                "optionally {schema} then {table}"
            )
        if require_schema_and_table and not ("{schema}" in self.expression and "{table}" in self.expression):
            # TiCDC requires both placeholders when the protocol is Avro.
            raise ConfigError(f"topic expression {expression!r} must contain both {{schema}} and {{table}}")

    def topic(self, schema: str, table: str = "") -> str:
        if not self.expression:
            return self.default_topic
        if "{" not in self.expression:
            return self.expression
        if "{table}" in self.expression and not table:
            return self.default_topic  # schema-level DDL goes to the default topic
        out = self.expression.replace("{schema}", _sanitize(schema)).replace("{table}", _sanitize(table))
        out = out.encode()[:_MAX_TOPIC_BYTES].decode("utf-8", "ignore")
        return {".": "_", "..": "__"}.get(out, out)


def _sanitize(name: str) -> str:
    # One '_' per Unicode character outside [a-zA-Z0-9._-] (TiCDC's topic name rule).
    return _INVALID.sub("_", name)
