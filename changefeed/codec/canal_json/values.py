"""Canal-JSON's per-type rules: ``mysqlType`` strings, writing both TiCDC forms, reading TiCDC's and Canal's.

TiCDC writes the bare base name by default (``int unsigned``) and TiDB's full column type text
(``ColumnInfo.GetTypeDesc``: ``int(10) unsigned zerofill``) with ``content-compatible=true``.
Official Canal writes MySQL's ``COLUMN_TYPE`` (``decimal(10, 4)``). The reader takes all three and
keeps whatever parameters the text carries.

Then the value text of each type (`value_renderer`, spec §2.5: everything a JSON string, numbers
and ENUM/SET/BIT as decimal text) and its inverse (`value_parser`), which refuses text TiCDC or
Canal would not write.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from ...errors import ascii_digits, clip
from ...model.gofloat import to_float32
from ...model.schema import Column
from ...model.types import (
    ALWAYS_UNSIGNED_TYPES,
    CHAR_TYPES,
    DEFAULT_FLEN,
    ENUM_SET_TYPES,
    FLOAT_TYPES,
    FSP_TYPES,
    INTEGER_BITS,
    INTEGER_TYPES,
    UINT_VALUE_TYPES,
    UNSIGNED_DEFAULT_FLEN,
    TypeCode,
    mysql_type_string,
    parse_type_name,
    type_name,
)
from ..values import DECIMAL_RULE, TEMPORAL_PATTERNS, decimal_renderer, float32_text, float64_text, is_decimal_text

# GetTypeDesc prints these with their display length ``(M)`` when the column has one.
_LENGTH_TYPES = CHAR_TYPES | {TypeCode.BIT}
# MySQL's NOT_FIXED_DEC: a FLOAT/DOUBLE decimal of 31 or more means "not given".
_NOT_FIXED_DEC = 31

# TiDB parser `format.OutputFormat`, used by CompactStr on ENUM/SET members: only these four
# characters are rewritten (a backslash itself is not).
_OUTPUT_FORMAT = {"\x00": "\\0", "'": "''", "\n": "\\n", "\r": "\\r"}
_OUTPUT_FORMAT_RE = re.compile("[\x00'\n\r]")


def _output_format(member: str) -> str:
    return _OUTPUT_FORMAT_RE.sub(lambda m: _OUTPUT_FORMAT[m.group()], member)


def default_mysql_type(column: Column) -> str:
    """TiCDC's default ``mysqlType``: base name + `` unsigned`` (not BIT/YEAR) + `` zerofill`` (not YEAR)."""
    return mysql_type_string(column.type_code, column.binary, column.unsigned, column.zerofill)


def full_mysql_type(column: Column) -> str:  # noqa: C901  (per-type switch: TiDB ColumnInfo.GetTypeDesc)
    """TiDB ``ColumnInfo.GetTypeDesc()`` (``content-compatible=true``), spec §2.3.

    ``CompactStr`` with TiDB's default display widths filled in where the model has no length
    (``TiDBStrictIntegerDisplayWidth`` off, TiDB's default), then `` unsigned``/`` zerofill``.
    """
    tc = column.type_code
    text = type_name(tc, column.binary)
    length, decimal = column.length, column.decimal
    suffix = ""
    if tc in ENUM_SET_TYPES:
        suffix = "('" + "','".join(_output_format(e) for e in column.elements) + "')"
    elif tc in FSP_TYPES:
        if decimal:  # fsp 0 is the default and is not printed
            suffix = f"({decimal})"
    elif tc in FLOAT_TYPES:
        # FLOAT/DOUBLE print (M,D) only when D was given and is not 0; float(10) stays float.
        if decimal and 0 < decimal < _NOT_FIXED_DEC:
            suffix = f"({length if length is not None else DEFAULT_FLEN[tc]},{decimal})"
    elif tc is TypeCode.DECIMAL:
        suffix = f"({length if length is not None else 10},{decimal or 0})"
    elif tc in _LENGTH_TYPES:
        if length is not None:
            suffix = f"({length})"
        elif tc in (TypeCode.BIT, TypeCode.CHAR):
            suffix = "(1)"  # TiDB's default length; VARCHAR has none (we print no parameter)
    elif tc in INTEGER_TYPES:
        if length is None:
            length = (UNSIGNED_DEFAULT_FLEN if column.unsigned else DEFAULT_FLEN)[tc]
        suffix = f"({length})"
    elif tc is TypeCode.YEAR:
        suffix = f"({length or 4})"
    elif tc is TypeCode.VECTOR:
        if length is not None:
            suffix = f"({length})"
    elif tc is TypeCode.NULL:
        suffix = "(0)"
    text += suffix
    if column.unsigned and tc not in ALWAYS_UNSIGNED_TYPES:
        text += " unsigned"
    if column.zerofill and tc is not TypeCode.YEAR:
        text += " zerofill"
    return text


@dataclass(frozen=True, slots=True)
class ParsedType:
    """What a ``mysqlType`` string says about a column (parameters only when printed)."""

    type_code: TypeCode
    binary: bool
    unsigned: bool
    zerofill: bool
    length: int | None = None
    decimal: int | None = None
    elements: tuple[str, ...] = ()


_MAX_PARAM = 1 << 32
_TAIL_WORDS = frozenset({"unsigned", "signed", "zerofill"})


def parse_mysql_type(text: str) -> ParsedType:
    """Read a ``mysqlType`` (TiCDC bare, TiCDC content-compatible, or Canal's full form).

    The base is the text before the first ``(`` or space, as TiCDC's decoder takes it
    (``ExtractBasicMySQLType``); ``unsigned``/``zerofill`` are read from the words after the
    parameters, so an ENUM member called 'unsigned' cannot fool it. Raises ``ValueError``.
    """
    if not isinstance(text, str):
        raise ValueError(f"mysqlType must be a string, not {type(text).__name__}")
    stripped = text.strip()
    code, binary, _ = parse_type_name(stripped)  # ValueError on an unknown base name
    base_end = len(stripped.split("(", 1)[0].split(" ", 1)[0])
    rest = stripped[base_end:].lstrip()
    params = ""
    if rest.startswith("("):
        close = _closing_paren(rest, code in ENUM_SET_TYPES)
        params, rest = rest[1:close], rest[close + 1 :]
    words = rest.lower().split()
    if not set(words) <= _TAIL_WORDS:
        raise ValueError(f"unknown words {' '.join(words)!r} in mysqlType {clip(text)}")
    unsigned = "unsigned" in words
    zerofill = "zerofill" in words
    length: int | None = None
    decimal: int | None = None
    elements: tuple[str, ...] = ()
    if code in ENUM_SET_TYPES:
        if params.strip():
            elements = _parse_members(params, text)
    elif params.strip():
        nums = _parse_numbers(params, text)
        if code in FSP_TYPES:
            if len(nums) != 1 or nums[0] > 6:
                raise ValueError(f"bad fractional-seconds precision in mysqlType {clip(text)}")
            decimal = nums[0]
        elif len(nums) == 2:
            if code is not TypeCode.DECIMAL and code not in FLOAT_TYPES:
                raise ValueError(f"mysqlType {clip(text)} has two parameters")
            length, decimal = nums
        elif len(nums) == 1:
            length = nums[0]
            if code is TypeCode.DECIMAL:
                decimal = 0  # DECIMAL(M) is DECIMAL(M,0)
        else:
            raise ValueError(f"too many parameters in mysqlType {clip(text)}")
    return ParsedType(code, binary, unsigned or zerofill, zerofill, length, decimal, elements)


def _closing_paren(rest: str, quoted: bool) -> int:
    if not quoted:
        close = rest.find(")")
    else:
        close, in_quote, i = -1, False, 1
        while i < len(rest):
            ch = rest[i]
            if in_quote:
                if ch == "'":
                    if rest[i + 1 : i + 2] == "'":
                        i += 1
                    else:
                        in_quote = False
            elif ch == "'":
                in_quote = True
            elif ch == ")":
                close = i
                break
            i += 1
    if close < 0:
        raise ValueError(f"unbalanced parenthesis in mysqlType {clip(rest)}")
    return close


def _parse_numbers(params: str, text: str) -> list[int]:
    nums = []
    for raw in params.split(","):
        part = raw.strip()
        if not ascii_digits(part) or int(part) >= _MAX_PARAM:
            raise ValueError(f"bad parameter {clip(part)} in mysqlType {clip(text)}")
        nums.append(int(part))
    return nums


_UNESCAPE = {"0": "\x00", "n": "\n", "r": "\r"}


def _parse_members(params: str, text: str) -> tuple[str, ...]:
    """``'a','b''c'`` -> ('a', "b'c"); undoes ``OutputFormat`` (``''``, ``\\0``, ``\\n``, ``\\r``)."""
    members: list[str] = []
    i, n = 0, len(params)
    while True:
        while i < n and params[i] == " ":
            i += 1
        if i >= n or params[i] != "'":
            raise ValueError(f"bad member list in mysqlType {clip(text)}")
        i += 1
        buf: list[str] = []
        while True:
            if i >= n:
                raise ValueError(f"unterminated member in mysqlType {clip(text)}")
            ch = params[i]
            if ch == "'":
                if params[i + 1 : i + 2] == "'":
                    buf.append("'")
                    i += 2
                    continue
                i += 1
                break
            if ch == "\\" and params[i + 1 : i + 2] in _UNESCAPE:
                buf.append(_UNESCAPE[params[i + 1]])
                i += 2
                continue
            buf.append(ch)
            i += 1
        members.append("".join(buf))
        while i < n and params[i] == " ":
            i += 1
        if i >= n:
            return tuple(members)
        if params[i] != ",":
            raise ValueError(f"bad member list in mysqlType {clip(text)}")
        i += 1


# ------------------------------------------------------------------ value text (spec §2.5)

Renderer = Callable[[Any], str] | None


def _render_bytes(v: Any) -> str:
    # ISO-8859-1 trick: byte 0xNN becomes code point U+00NN.
    return str(v, "latin-1")


# int.__repr__ also prints a bool as 1/0 and refuses anything that is not an int.
_render_int: Callable[[Any], str] = int.__repr__

# Written as decimal integers: ENUM its 1-based index (not the member name), SET its bitmask, BIT its uint64.
INTEGER_LIKE = INTEGER_TYPES | UINT_VALUE_TYPES


def value_renderer(column: Column) -> Renderer:
    """None means "the model value is already the string to write"."""
    tc = column.type_code
    if column.is_bytes:
        return _render_bytes
    if tc is TypeCode.FLOAT:
        return float32_text  # strconv 'f', -1, 32; the mounter maps NaN/Inf to 0
    if tc is TypeCode.DOUBLE:
        return float64_text
    if tc is TypeCode.DECIMAL:
        return decimal_renderer(column.decimal)  # a value not at the column's scale is requantized
    if tc in INTEGER_LIKE:
        return _render_int
    return None


# ------------------------------------------------------------------ value parsers (inverse of §2.5)

Parser = Callable[[str], Any] | None


class BadValueError(ValueError):
    """A value that does not parse for its column type (becomes a CodecError with context)."""


# What Go's ParseFloat takes from TiCDC/Canal output; no NaN/Inf spellings, "_", spaces or "+".
_FLOAT_RE = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII).fullmatch


def _uint_text(text: str) -> int:
    if ascii_digits(text) and len(text) <= 40:
        return int(text)
    raise BadValueError(f"{clip(text)} is not an unsigned integer")


def _int_parser(lo: int, hi: int) -> Callable[[str], int]:
    def parse_int(text: str) -> int:
        # ASCII digits with an optional "-": int() alone would also take " 1", "1_0", "+1", "١".
        if text.isascii() and len(text) <= 40 and (text.isdigit() or (text[:1] == "-" and text[1:].isdigit())):
            v = int(text)
            if lo <= v <= hi:
                return v
            raise BadValueError(f"{text} is out of range [{lo}, {hi}]")
        raise BadValueError(f"{clip(text)} is not an integer")

    return parse_int


def _bounded_uint(hi: int, what: str) -> Callable[[str], int]:
    def parse_uint(text: str) -> int:
        if ascii_digits(text) and len(text) <= 40:
            v = int(text)
            if v <= hi:
                return v
            raise BadValueError(f"{what} {text} is out of range [0, {hi}]")
        raise BadValueError(f"{clip(text)} is not an unsigned integer")

    return parse_uint


def _parse_year(text: str) -> int:
    v = _uint_text(text)
    if v and not 1901 <= v <= 2155:
        raise BadValueError(f"year {text} is out of range (0 or 1901..2155)")
    return v


def _parse_float32(text: str) -> float:
    # Go ParseFloat(text, 32): reject NaN/Inf spellings and values beyond float32.
    if not _FLOAT_RE(text):
        raise BadValueError(f"{clip(text)} is not a number")
    try:
        return to_float32(float(text))
    except OverflowError:
        raise BadValueError(f"{text} overflows a FLOAT") from None


def _parse_float64(text: str) -> float:
    if not _FLOAT_RE(text):
        raise BadValueError(f"{clip(text)} is not a number")
    v = float(text)
    if v in (_INF, -_INF):
        raise BadValueError(f"{text} overflows a DOUBLE")
    return v


_INF = float("inf")


def _decimal_parser(scale: int | None) -> Callable[[str], Decimal]:
    def parse_decimal(text: str) -> Decimal:
        if not is_decimal_text(text):  # MyDecimal.String() text, the rule every decoder shares
            raise BadValueError(f"{text[:80]!r} is not a decimal ({DECIMAL_RULE})")
        v = Decimal(text)
        if scale is not None:
            frac = text.partition(".")[2]
            if len(frac) > scale:
                raise BadValueError(f"{text} has {len(frac)} fraction digits, the column's scale is {scale}")
            if len(frac) < scale:
                v = Decimal(f"{v:.{scale}f}")  # pad to the column's scale (only adds zeros)
        return v

    return parse_decimal


def _regex_parser(regex: re.Pattern[str], what: str) -> Callable[[str], str]:
    def parse_text(text: str) -> str:
        if not regex.fullmatch(text):
            raise BadValueError(f"{clip(text)} is not a {what} value")
        return text

    return parse_text


def _parse_json(text: str) -> str:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadValueError(f"{text[:40]!r} is not JSON text") from None
    return text


def _parse_binary(text: str) -> bytes:
    # Undo the ISO-8859-1 trick: every code point must be one byte.
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise BadValueError(f"binary value has code point U+{ord(text[exc.start]):04X} above U+00FF") from None


def _enum_parser(elements: tuple[str, ...]) -> Callable[[str], int]:
    """TiCDC writes the 1-based index; official Canal writes the member name (accepted when the
    full ``enum(...)`` type told us the members)."""
    names = {e: i for i, e in enumerate(elements, 1)}
    index = _bounded_uint(len(elements) if elements else 65535, "ENUM index")

    def parse_enum(text: str) -> int:
        if text.isascii() and text.isdigit():
            return index(text)
        if text in names:
            return names[text]
        if text == "":
            return 0
        raise BadValueError(f"{clip(text)} is neither an ENUM index nor a member name")

    return parse_enum


def _set_parser(elements: tuple[str, ...]) -> Callable[[str], int]:
    bits = {e: 1 << i for i, e in enumerate(elements)}
    bitmask = _bounded_uint((1 << len(elements)) - 1 if elements else (1 << 64) - 1, "SET bitmask")

    def parse_set(text: str) -> int:
        if text.isascii() and text.isdigit():
            return bitmask(text)
        if not elements:
            raise BadValueError(f"{clip(text)} is not a SET bitmask")
        mask = 0
        for name in text.split(",") if text else ():
            if name not in bits:
                raise BadValueError(f"{name!r} is not a member of the SET")
            mask |= bits[name]
        return mask

    return parse_set


def value_parser(col: Column) -> Parser:
    """The parser of one column's value strings; None: the string is the model value."""
    tc = col.type_code
    if col.is_bytes:
        return _parse_binary
    if tc in INTEGER_TYPES:
        bits = INTEGER_BITS[tc]
        if col.unsigned:
            return _bounded_uint((1 << bits) - 1, col.type_name + " unsigned")
        return _int_parser(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if tc is TypeCode.YEAR:
        return _parse_year
    if tc is TypeCode.BIT:
        return _bounded_uint((1 << min(col.length or 64, 64)) - 1, "BIT value")
    if tc is TypeCode.ENUM:
        return _enum_parser(col.elements)
    if tc is TypeCode.SET:
        return _set_parser(col.elements)
    if tc is TypeCode.FLOAT:
        return _parse_float32
    if tc is TypeCode.DOUBLE:
        return _parse_float64
    if tc is TypeCode.DECIMAL:
        return _decimal_parser(col.decimal)
    if tc in TEMPORAL_PATTERNS:
        return _regex_parser(TEMPORAL_PATTERNS[tc], "DATE" if tc is TypeCode.NEWDATE else col.type_name.upper())
    if tc is TypeCode.JSON:
        return _parse_json
    return None  # text types, VECTOR
