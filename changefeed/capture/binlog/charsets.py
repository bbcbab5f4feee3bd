"""MySQL charsets and collations as Python codecs.

Column values arrive as raw bytes in the column's charset; the model wants ``str`` for every
charset but ``binary``, whose values stay ``bytes``.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

from ...errors import CaptureError
from ._collations import COLLATIONS

BINARY_COLLATION_ID = 63

# MySQL charset name -> (Python codec, bytes per character at most).
_CHARSETS: dict[str, tuple[str | None, int]] = {
    "binary": (None, 1),
    "utf8mb4": ("utf-8", 4),
    "utf8mb3": ("utf-8", 3),
    "utf8": ("utf-8", 3),
    "latin1": ("mysql-latin1", 1),
    "ascii": ("ascii", 1),
    "latin2": ("iso8859-2", 1),
    "latin5": ("iso8859-9", 1),
    "latin7": ("iso8859-13", 1),
    "greek": ("iso8859-7", 1),
    "hebrew": ("iso8859-8", 1),
    "cp1250": ("cp1250", 1),
    "cp1251": ("cp1251", 1),
    "cp1256": ("cp1256", 1),
    "cp1257": ("cp1257", 1),
    "cp850": ("cp850", 1),
    "cp852": ("cp852", 1),
    "cp866": ("cp866", 1),
    "koi8r": ("koi8-r", 1),
    "koi8u": ("koi8-u", 1),
    "macroman": ("mac-roman", 1),
    "macce": ("mac-latin2", 1),
    "tis620": ("tis-620", 1),
    "ucs2": ("utf-16-be", 2),
    "utf16": ("utf-16-be", 4),
    "utf16le": ("utf-16-le", 4),
    "utf32": ("utf-32-be", 4),
    "big5": ("big5", 2),
    "gbk": ("gbk", 2),
    "gb2312": ("gb2312", 2),
    "gb18030": ("gb18030", 4),
    "sjis": ("shift_jis", 2),
    "cp932": ("cp932", 2),
    "ujis": ("euc_jp", 3),
    "eucjpms": ("euc_jp", 3),
    "euckr": ("euc_kr", 2),
}

# MySQL's latin1 is Windows-1252, with the five bytes cp1252 leaves undefined mapped straight to
# the same code points (strings/ctype-latin1.cc), so every byte decodes.
_LATIN1_TABLE = "".join(
    bytes([b]).decode("cp1252") if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else chr(b) for b in range(256)
)


def _latin1_decode(data: bytes) -> str:
    return codecs.charmap_decode(data, "strict", _LATIN1_TABLE)[0]


def collation_info(collation_id: int, extra: dict[int, tuple[str, str]] | None = None) -> tuple[str, str]:
    """(charset, collation) of a collation id; ``extra`` (the live server's table) wins."""
    if extra and collation_id in extra:
        return extra[collation_id]
    try:
        return COLLATIONS[collation_id]
    except KeyError:
        raise CaptureError(f"unknown collation id {collation_id}") from None


def charset_maxlen(charset: str) -> int:
    return _CHARSETS.get(charset, (None, 1))[1]


def decoder_for(charset: str) -> Callable[[bytes], str] | None:
    """A ``bytes -> str`` function for a charset, or None for ``binary`` (values stay bytes)."""
    try:
        codec = _CHARSETS[charset][0]
    except KeyError:
        raise CaptureError(
            f"charset {charset!r} has no Python codec; values of its columns cannot be decoded"
        ) from None
    if codec is None:
        return None
    if codec == "mysql-latin1":
        return _latin1_decode
    info = codecs.lookup(codec)
    decode = info.decode

    def _decode(data: bytes) -> str:
        return decode(data)[0]

    if codec == "utf-8":
        return _utf8
    return _decode


def _utf8(data: bytes) -> str:
    return str(data, "utf-8")
