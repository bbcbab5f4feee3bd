"""Go's ``strconv.Quote``/``strconv.Unquote`` for the binary CHAR/VARCHAR values of Open Protocol.

TiCDC renders a BINARY/VARBINARY value as ``strconv.Quote(string(bytes))`` with the surrounding
quotes cut off (spec §1.7); its decoder reverses that with ``strconv.Unquote("\\"" + s + "\\"")``.
Both are re-implemented here from Go's documented rules, so the bytes are identical.
"""

from __future__ import annotations

import codecs
import functools
import re
import unicodedata
from collections.abc import Callable

# Printable ASCII except '"' and '\': the common case that Quote returns unchanged.
_NEEDS_QUOTING = re.compile(rb"[^\x20\x21\x23-\x5b\x5d-\x7e]")
# Go's appendEscapedRune short forms for the C escapes.
_SHORT = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
_PRINT_CATEGORIES = frozenset("LMNPS")


class _QuoteTable(dict[int, str]):
    """``str.translate`` table: code point -> Go's rendering; non-ASCII runes filled in on first sight."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd invalid UTF-8 byte: one \xHH per byte
            out = f"\\x{code - 0xDC00:02x}"
        elif unicodedata.category(ch)[0] in _PRINT_CATEGORIES:  # Go IsPrint: L, M, N, P, S
            out = ch
        elif code < 0x10000:
            out = f"\\u{code:04x}"
        else:
            out = f"\\U{code:08x}"
        self[code] = out
        return out


_QUOTE_TABLE = _QuoteTable(
    {c: _SHORT.get(chr(c)) or f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}
    | {c: chr(c) for c in range(0x20, 0x7F)}
    | {ord('"'): '\\"', ord("\\"): "\\\\"}
)


def go_quote(data: bytes) -> str:
    """``strconv.Quote(string(data))`` without the surrounding quotes.

    Go walks the bytes as UTF-8: an invalid byte becomes ``\\xHH``; a printable rune is kept;
    ``"`` and ``\\`` are backslashed; ``\\a\\b\\f\\n\\r\\t\\v`` use short forms; other runes below
    U+0020 and U+007F become ``\\xHH``; any other non-printable rune ``\\uHHHH`` or ``\\UHHHHHHHH``.
    """
    if not _NEEDS_QUOTING.search(data):
        return data.decode("ascii")
    # surrogateescape maps exactly the bytes Go's decoder rejects (one RuneError per byte) to
    # U+DC80..U+DCFF, which valid UTF-8 can never produce.
    return data.decode("utf-8", "surrogateescape").translate(_QUOTE_TABLE)


class _JSONQuoteTable(dict[int, str]):
    """Go's quoting composed with a JSON string escaper: one ``str.translate`` pass for both."""

    def __init__(self, json_quote: Callable[[str], str]) -> None:
        super().__init__()
        self._json_quote = json_quote

    def __missing__(self, code: int) -> str:
        out = self[code] = self._json_quote(_QUOTE_TABLE[code])[1:-1]
        return out


@functools.cache
def _json_quote_table(json_quote: Callable[[str], str]) -> _JSONQuoteTable:
    return _JSONQuoteTable(json_quote)  # shared by every encoder using this escaper


def go_quote_json(json_quote: Callable[[str], str]) -> Callable[[bytes], str]:
    """A function equal to ``json_quote(go_quote(data))`` for one JSON escaper, in one pass.

    Both steps map one character at a time (Go's rune, then the JSON escaper's character), so
    their composition is again a per-character table.
    """
    table = _json_quote_table(json_quote)
    kept = _kept_bytes(json_quote)

    def quote(data: bytes) -> str:
        # Printable ASCII that neither Go nor the JSON escaper changes: the common text case.
        if data.isascii() and not data.translate(None, kept):
            return '"' + data.decode("ascii") + '"'
        return '"' + data.decode("utf-8", "surrogateescape").translate(table) + '"'

    return quote


@functools.cache
def _kept_bytes(json_quote: Callable[[str], str]) -> bytes:
    """The bytes ``json_quote(go_quote(data))`` writes as they are, learnt from the two quoters.

    Printable ASCII bytes Go keeps (not ``"`` or ``\\``) whose JSON text is the byte itself
    (encoding/json escapes ``<``, ``>`` and ``&``; ticdc's json-iterator does not).
    """
    return bytes(c for c in range(0x20, 0x7F) if json_quote(_QUOTE_TABLE[c]) == '"' + chr(c) + '"')


_UNQUOTE_TOKEN = re.compile(
    r'\\(?:x([0-9a-fA-F]{2})|([0-7]{3})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([abfnrtv\\"]))|(["\\\n])'
)
# Go syntax without \u/\U escapes: what Python's bytes-literal decoder reads identically.
_BYTE_ESCAPES_ONLY = re.compile(r'(?:[^\\"\n]|\\(?:x[0-9a-fA-F]{2}|[0-3][0-7]{2}|[abfnrtv\\"]))*')
_SIMPLE = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34}


# A \\ pair (kept, so the backslash it escapes starts nothing) or a \u / \U escape.
_RUNE_ESCAPE = re.compile(r"\\\\|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})")


def _rune_as_bytes(m: re.Match[str]) -> str:
    hex_rune = m.group(1) or m.group(2)
    if hex_rune is None:
        return m.group()
    code = int(hex_rune, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise ValueError(m.group())
    return "".join(f"\\x{b:02x}" for b in chr(code).encode("utf-8"))


def go_unquote(text: str) -> bytes:
    """``strconv.Unquote("\\"" + text + "\\"")`` as bytes; ValueError where Go returns ErrSyntax.

    Accepted escapes inside double quotes: ``\\xHH`` and ``\\ooo`` (one byte each, octal at most
    255), ``\\uHHHH``/``\\UHHHHHHHH`` (a valid non-surrogate rune, written as UTF-8), and
    ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\"``. A bare ``"``, a lone backslash and a raw newline
    are syntax errors.
    """
    if "\\" not in text and '"' not in text and "\n" not in text:
        return text.encode("utf-8")
    if _BYTE_ESCAPES_ONLY.fullmatch(text):
        return codecs.escape_decode(text.encode("utf-8"))[0]
    if "\\u" in text or "\\U" in text:  # runes rewritten as the \xHH escapes of their UTF-8 bytes
        try:
            bytes_only = _RUNE_ESCAPE.sub(_rune_as_bytes, text)
        except ValueError:
            bytes_only = ""  # the token walk below says where
        if bytes_only and _BYTE_ESCAPES_ONLY.fullmatch(bytes_only):
            return codecs.escape_decode(bytes_only.encode("utf-8"))[0]
    return _unquote_tokens(text)


def _unquote_tokens(text: str) -> bytes:
    """`go_unquote` token by token: the rule itself, and the errors' wording."""
    out = bytearray()
    pos = 0
    for m in _UNQUOTE_TOKEN.finditer(text):
        if m.start() > pos:
            out += text[pos : m.start()].encode("utf-8")
        pos = m.end()
        hex2, octal, u4, u8, simple, bad = m.groups()
        if bad is not None:
            raise ValueError(f"invalid Go quoted string: unexpected {bad!r} at offset {m.start()}")
        if hex2 is not None:
            out.append(int(hex2, 16))
        elif octal is not None:
            code = int(octal, 8)
            if code > 255:
                raise ValueError(f"invalid Go quoted string: octal escape \\{octal} above 255")
            out.append(code)
        elif simple is not None:
            out.append(_SIMPLE[simple])
        else:
            code = int(u4 or u8, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise ValueError(f"invalid Go quoted string: escape {m.group()} is not a valid rune")
            out += chr(code).encode("utf-8")
    out += text[pos:].encode("utf-8")
    return bytes(out)
