"""JSON string literals exactly as TiCDC's three Go JSON writers produce them (spec §0.6).

orjson already writes the shared core (``\\"``, ``\\\\``, short ``\\b \\f \\n \\r \\t``, other
controls as lowercase ``\\u00XX``, UTF-8 passed through); each variant then patches the few
characters it treats differently, and only when they occur.
"""

from __future__ import annotations

import re

import orjson

_HTML = re.compile(r"[<>&\u2028\u2029]")
_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_NEEDS_STD = re.compile(r"[<>&\u2028\u2029]")
_NEEDS_EASYJSON = re.compile(r"[<>&\u2028\u2029\x08\x0c]")


def _html(match: re.Match[str]) -> str:
    return _HTML_ESCAPES[match.group()]


def quote_std(text: str) -> str:
    """Go ``encoding/json`` (Go >= 1.22): HTML-escaped ``<>&``, U+2028/9 escaped, short ``\\b\\f``."""
    out = orjson.dumps(text).decode()
    return _HTML.sub(_html, out) if _NEEDS_STD.search(text) else out


def quote_easyjson(text: str) -> str:
    """mailru/easyjson: like std, but ``\\b`` and ``\\f`` as ``\\u0008``/``\\u000c`` (canal-json DML)."""
    out = orjson.dumps(text).decode()
    if not _NEEDS_EASYJSON.search(text):
        return out
    out = _HTML.sub(_html, out)
    if "\x08" in text or "\x0c" in text:
        out = _fix_short_bf(out)
    return out


def quote_jsoniter(text: str) -> str:
    """json-iterator with EscapeHTML off (ticdc Open Protocol): no HTML or U+2028/9 escaping."""
    out = orjson.dumps(text).decode()
    if "\x08" in text or "\x0c" in text:
        out = _fix_short_bf(out)
    return out


_SHORT_BF = re.compile(r"\\\\|\\b|\\f")
_BF = {"\\\\": "\\\\", "\\b": "\\u0008", "\\f": "\\u000c"}


def _fix_short_bf(out: str) -> str:
    # Walk escapes pairwise so an escaped backslash followed by 'b' is left alone.
    return _SHORT_BF.sub(lambda m: _BF[m.group()], out)
