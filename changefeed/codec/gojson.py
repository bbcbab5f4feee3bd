"""JSON text exactly as TiCDC's Go JSON writers produce it (spec §0.5/§0.6), and Go's string quoting.

One home for every Go-JSON rule the codecs follow:

* string literals of the three Go JSON writers (`quote_std`: encoding/json; `quote_easyjson`:
  mailru/easyjson; `quote_jsoniter`: json-iterator with EscapeHTML off), and the same fixes applied
  to whole orjson documents (`std_fix`, `easyjson_fix`, `dumps_std`);
* json-iterator's bytes as TiCDC's Debezium codec writes them (`jstr`, `jbytes`, `jfloat64`,
  `jfloat32`: compact, EscapeHTML off, bytes >= 0x80 copied verbatim);
* Go's ``strconv.Quote`` / ``strconv.Unquote`` (`go_quote`, `go_unquote`, and `go_quote_json`,
  the two composed), which Open Protocol uses for binary CHAR/VARCHAR values.

orjson already writes the shared core (``\\"``, ``\\\\``, short ``\\b \\f \\n \\r \\t``, other
controls as lowercase ``\\u00XX``, UTF-8 passed through); each variant then patches the few
characters it treats differently, and only when they occur.
"""

from __future__ import annotations

import codecs
import functools
import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import orjson

from ..model.gofloat import format_json, to_float32
from .values import float32_text, float64_text

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


# ------------------------------------------------------------------ whole orjson documents
# orjson writes the common core; these passes patch what each Go writer does differently, on
# the finished bytes (only strings can contain these bytes, so structure is never touched).
_HTML_BYTES = {
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    b"\xe2\x80\xa8": b"\\u2028",
    b"\xe2\x80\xa9": b"\\u2029",
}
_EASY = {**_HTML_BYTES, b"\\\\": b"\\\\", b"\\b": b"\\u0008", b"\\f": b"\\u000c"}
_EASY_RE = re.compile(rb"\\\\|\\b|\\f|[<>&]|\xe2\x80[\xa8\xa9]")
_STD_RE = re.compile(rb"[<>&]|\xe2\x80[\xa8\xa9]")


def _easy_sub(m: re.Match[bytes]) -> bytes:
    return _EASY[m.group()]


def _std_sub(m: re.Match[bytes]) -> bytes:
    return _HTML_BYTES[m.group()]


def easyjson_fix(out: bytes) -> bytes:
    """orjson output -> mailru/easyjson: HTML-escaped, U+2028/9 escaped, ``\\u0008``/``\\u000c``."""
    # Single-byte probes are memchr-fast; the two-byte ones run only when a backslash exists.
    if (
        b"<" in out
        or b">" in out
        or b"&" in out
        or b"\xe2" in out
        or (b"\\" in out and (b"\\b" in out or b"\\f" in out))
    ):
        return _EASY_RE.sub(_easy_sub, out)
    return out


def dumps_std(obj: Any) -> bytes:
    """Go ``encoding/json.Marshal`` bytes of a dict built in struct-member order: `std_fix` of orjson's."""
    out = orjson.dumps(obj)
    # int membership is a memchr; far cheaper than a regex scan when (as usual) nothing matches
    if 0x3C in out or 0x3E in out or 0x26 in out or 0xE2 in out:
        out = _STD_RE.sub(_std_sub, out)
    return out


def std_fix(out: bytes) -> bytes:
    """orjson output -> Go encoding/json (Go >= 1.22): HTML-escaped, U+2028/9 escaped."""
    if b"<" in out or b">" in out or b"&" in out or b"\xe2\x80" in out:
        return _STD_RE.sub(_std_sub, out)
    return out


# ------------------------------------------------------------------ json-iterator bytes (Debezium)

_SHORT_BF_BYTES = re.compile(rb"\\\\|\\b|\\f")
_BF_BYTES = {b"\\\\": b"\\\\", b"\\b": b"\\u0008", b"\\f": b"\\u000c"}
_JSONITER_ESCAPES = {0x22: b'\\"', 0x5C: b"\\\\", 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}
_F32_1E_6 = to_float32(1e-6)


def _bf_bytes(m: re.Match[bytes]) -> bytes:
    return _BF_BYTES[m.group()]


def jstr(text: str) -> bytes:
    """A JSON string literal as json-iterator writes it (``\\b``/``\\f`` as ``\\u0008``/``\\u000c``)."""
    try:
        out = orjson.dumps(text)
    except orjson.JSONEncodeError:
        # Lone surrogates carry bytes that are not UTF-8: json-iterator copies such bytes as they are.
        return jbytes(text.encode("utf-8", "surrogateescape"))
    if b"\\b" in out or b"\\f" in out:
        return _SHORT_BF_BYTES.sub(_bf_bytes, out)
    return out


def jbytes(raw: bytes) -> bytes:
    """A JSON string literal of raw bytes, escaped byte by byte (no UTF-8 validation)."""
    out = bytearray(b'"')
    for b in raw:
        if b in _JSONITER_ESCAPES:
            out += _JSONITER_ESCAPES[b]
        elif b < 0x20:
            out += b"\\u%04x" % b
        else:
            out.append(b)
    out += b'"'
    return bytes(out)


def jfloat64(v: float) -> bytes:
    """A float64 as a JSON number; NaN/±Inf as ``0`` (TiDB's mounter maps them to 0)."""
    a = abs(v)
    if a == 0 or 1e-6 <= a < 1e21:
        return float64_text(v).encode()
    if not math.isfinite(v):
        return b"0"
    return format_json(v).encode()


def jfloat32(v: float) -> bytes:
    """A float32 value as a JSON number with the shortest float32 digits."""
    a = abs(v)
    if a == 0 or _F32_1E_6 <= a < 1e21:
        return float32_text(v).encode()
    if not math.isfinite(v):
        return b"0"
    return format_json(v, float32=True).encode()


# ------------------------------------------------------------------ Go strconv.Quote / Unquote (Open Protocol)

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
