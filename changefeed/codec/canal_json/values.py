"""Canal-JSON ``mysqlType`` strings: writing both TiCDC forms, reading TiCDC's and Canal's.

TiCDC writes the bare base name by default (``int unsigned``) and TiDB's full column type text
(``ColumnInfo.GetTypeDesc``: ``int(10) unsigned zerofill``) with ``content-compatible=true``.
Official Canal writes MySQL's ``COLUMN_TYPE`` (``decimal(10, 4)``). The reader takes all three and
keeps whatever parameters the text carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import ascii_digits, clip
from ...model.schema import Column
from ...model.types import DEFAULT_FLEN, UNSIGNED_DEFAULT_FLEN, TypeCode, mysql_type_string, parse_type_name, type_name

_INT_TYPES = (TypeCode.TINYINT, TypeCode.SMALLINT, TypeCode.MEDIUMINT, TypeCode.INT, TypeCode.BIGINT)
_FSP_TYPES = (TypeCode.TIMESTAMP, TypeCode.DATETIME, TypeCode.TIME)
_LENGTH_TYPES = (TypeCode.BIT, TypeCode.VARCHAR, TypeCode.CHAR, TypeCode.VAR_STRING)
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


def full_mysql_type(column: Column) -> str:
    """TiDB ``ColumnInfo.GetTypeDesc()`` (``content-compatible=true``), spec §2.3.

    ``CompactStr`` with TiDB's default display widths filled in where the model has no length
    (``TiDBStrictIntegerDisplayWidth`` off, TiDB's default), then `` unsigned``/`` zerofill``.
    """
    tc = column.type_code
    text = type_name(tc, column.binary)
    length, decimal = column.length, column.decimal
    suffix = ""
    if tc in (TypeCode.ENUM, TypeCode.SET):
        suffix = "('" + "','".join(_output_format(e) for e in column.elements) + "')"
    elif tc in _FSP_TYPES:
        if decimal:  # fsp 0 is the default and is not printed
            suffix = f"({decimal})"
    elif tc in (TypeCode.FLOAT, TypeCode.DOUBLE):
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
    elif tc in _INT_TYPES:
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
    if column.unsigned and tc not in (TypeCode.BIT, TypeCode.YEAR):
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
        close = _closing_paren(rest, code in (TypeCode.ENUM, TypeCode.SET))
        params, rest = rest[1:close], rest[close + 1 :]
    words = rest.lower().split()
    if not set(words) <= _TAIL_WORDS:
        raise ValueError(f"unknown words {' '.join(words)!r} in mysqlType {clip(text)}")
    unsigned = "unsigned" in words
    zerofill = "zerofill" in words
    length: int | None = None
    decimal: int | None = None
    elements: tuple[str, ...] = ()
    if code in (TypeCode.ENUM, TypeCode.SET):
        if params.strip():
            elements = _parse_members(params, text)
    elif params.strip():
        nums = _parse_numbers(params, text)
        if code in _FSP_TYPES:
            if len(nums) != 1 or nums[0] > 6:
                raise ValueError(f"bad fractional-seconds precision in mysqlType {clip(text)}")
            decimal = nums[0]
        elif len(nums) == 2:
            if code not in (TypeCode.DECIMAL, TypeCode.FLOAT, TypeCode.DOUBLE):
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
