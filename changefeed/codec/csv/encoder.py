"""TiCDC's storage-sink CSV format (``protocol=csv``, spec §5.4-§5.6).

A CSV data file holds the row events of one table version: one line per row event, no DDL and no
watermark (DDL lives in the storage sink's schema files, the checkpoint in its ``metadata`` file).
The file carries no types, so the decoder needs the table's `TableSchema` (built by the storage
reader from the schema file) to turn the text back into model values.

Layout of a line (delimiter ``D``, terminator ``T``)::

    op D table D schema [D commitTs] [D is-updated] D value1 D value2 ... T

Strings (the op letter, names, every text-like value) are wrapped in the quote character with
inner quotes doubled, or, with an empty ``quote``, backslash-escaped ("escape mode"). Numbers,
``true``/``false`` and the null string are written bare.
"""

from __future__ import annotations

import binascii
import functools
import math
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from ..errors import CodecError, ConfigError, ascii_digits, clip
from ..model import ABSENT, Column, DDLEvent, Event, Op, Resolved, RowChange, TableSchema, TypeCode
from ..model.events import trusted_row
from ..model.gofloat import format_g, to_float32
from ..model.schemacache import PlanCache
from ..model.types import FLOAT_TYPES, INTEGER_TYPES
from ..model.values import decimal_text, enum_name, set_names
from .base import Decoder, Encoder, Message
from .decimaltext import RULE as DECIMAL_RULE
from .decimaltext import is_decimal_text
from .options import CodecOptions
from .textvalues import TEMPORAL_PATTERNS, float_g_text, int_range

__all__ = [
    "HEADER_PREFIX",
    "CSVDecoder",
    "CSVEncoder",
    "CSVFieldError",
    "CSVFormat",
    "format_csv_line",
    "format_csv_value",
]

HEADER_PREFIX = "ticdc-meta$"
_OP_LETTER = {Op.INSERT: "I", Op.UPDATE: "U", Op.DELETE: "D"}
# Go strconv.ParseBool, which TiCDC would use for is-updated.
_BOOLS = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}
# Lightning's MySQL-style unescapes (the parser TiCDC's CSV decoder uses): \0 \b \n \r \t \Z.
_LIGHTNING_UNESCAPES = {"0": "\x00", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}

_SIGNED_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")


class CSVFieldError(CodecError):
    """One field of a CSV line cannot be read (or a value cannot be written) for its column."""


class CSVFormat:
    """The ``[sink.csv]`` dialect, compiled once: field formatting, record splitting, unescaping.

    Shared by encoder and decoder so both sides agree byte for byte on one option set.
    """

    def __init__(self, options: CodecOptions) -> None:
        d, q, t, null = options.delimiter, options.quote, options.terminator, options.null
        if not d:
            raise ConfigError("csv delimiter must not be empty")
        if not t:
            raise ConfigError("csv terminator must not be empty")
        if len(q) > 1:
            raise ConfigError(f"csv quote must be one character or empty, not {q!r}")
        if q and (q in d or q in t):
            raise ConfigError(f"csv quote {q!r} must not occur in the delimiter or the terminator")
        self.delimiter, self.quote, self.terminator, self.null = d, q, t, null
        self.include_commit_ts = options.include_commit_ts
        self.output_old_value = options.csv_output_old_value
        self.hex = options.binary_encoding_method == "hex"
        self.meta_fields = 3 + int(self.include_commit_ts) + int(self.output_old_value)
        ed = re.escape(d)
        if q:
            eq = re.escape(q)
            self._qq = q + q
            not_d = f"[^{eq}{ed}]" if len(d) == 1 else f"(?:(?!{ed})[^{eq}])"
            # A record whose quoted fields hold no delimiter and no doubled quote: str.split is exact.
            field = f"(?:{eq}{not_d}*+{eq}|{not_d}*+)"
            self._simple_record = re.compile(f"{field}(?:{ed}{field})*+")
            self._field = re.compile(f"({eq}(?:[^{eq}]|{eq}{eq})*+{eq}|{not_d}*+)(?:({ed})|\\Z)")
        else:
            # tiflow/ticdc formatWithEscapes: at each position the delimiter is tried first (its first
            # char mapped like CR/LF, every further char prefixed by a backslash), then \r \n \\.
            first = {"\r": "r", "\n": "n"}.get(d[0], d[0])
            escaped_d = "\\" + first + "".join("\\" + c for c in d[1:])
            table = {"\\": "\\\\", "\r": "\\r", "\n": "\\n", d: escaped_d}
            self._escape_re = re.compile(f"{ed}|\\\\|\\r|\\n")
            self._escape_sub: Callable[[re.Match[str]], str] = lambda m: table[m.group()]
            not_d = f"[^\\\\{ed}]" if len(d) == 1 else f"(?:(?!{ed})[^\\\\])"
            null_alt = f"{re.escape(null)}(?={ed}|\\Z)|" if "\\" in null else ""
            field = f"(?:{null_alt}{not_d}*+)"
            self._simple_record = re.compile(f"{field}(?:{ed}{field})*+")
            self._field = re.compile(f"((?:\\\\.|{not_d})*+)(?:({ed})|\\Z)", re.DOTALL)
            # A delimiter character keeps its literal meaning after a backslash (that is how the
            # encoder escaped it); other letters follow Lightning.
            unesc = {k: v for k, v in _LIGHTNING_UNESCAPES.items() if k not in d or k in "nr"}
            self._unescape_re = re.compile(r"\\(.)", re.DOTALL)
            self._unescape_sub: Callable[[re.Match[str]], str] = lambda m: unesc.get(m.group(1), m.group(1))

    # -- writing ---------------------------------------------------------------------------------

    def text(self, value: str) -> str:
        """A string field: quoted with doubled inner quotes, or escaped when quote is empty."""
        if self.quote:
            q = self.quote
            return q + value.replace(q, self._qq) + q
        return self._escape_re.sub(self._escape_sub, value)

    def header(self, names: list[str]) -> str:
        # TiCDC encodeHeader: names written bare (neither quoted nor escaped).
        meta = [HEADER_PREFIX + "operation", HEADER_PREFIX + "table", HEADER_PREFIX + "schema"]
        if self.include_commit_ts:
            meta.append(HEADER_PREFIX + "commit-ts")
        if self.output_old_value:
            meta.append(HEADER_PREFIX + "is-update")
        return self.delimiter.join(meta + names) + self.terminator

    # -- reading ---------------------------------------------------------------------------------

    def content(self, token: str) -> str:
        """The string a non-NULL raw field stands for (unquoted/unescaped)."""
        if self.quote:
            if token[:1] == self.quote:
                token = token[1:-1]
                if self._qq in token:
                    token = token.replace(self._qq, self.quote)
            return token
        if "\\" in token:
            return self._unescape_re.sub(self._unescape_sub, token)
        return token

    def records(self, text: str) -> Iterator[tuple[int, list[str]]]:
        """(start offset, raw fields) per record; raw fields keep their quotes/escapes.

        Splits on the terminator first; a piece with an odd number of quotes (quote mode) or
        ending in an unpaired backslash (escape mode) continues into the next piece.
        """
        t, d = self.terminator, self.delimiter
        pieces = text.split(t)
        if pieces[-1] == "":
            pieces.pop()
        n, lt, i, off = len(pieces), len(t), 0, 0
        q = self.quote
        simple = self._simple_record.fullmatch
        while i < n:
            rec = pieces[i]
            start = off
            off += len(rec) + lt
            i += 1
            if q:
                if q in rec and rec.count(q) & 1:
                    # A quoted field holds the terminator: join pieces until the quotes pair up.
                    parts = [rec]
                    odd = 1
                    while odd and i < n:
                        nxt = pieces[i]
                        parts.append(nxt)
                        odd ^= nxt.count(q) & 1
                        off += len(nxt) + lt
                        i += 1
                    if odd:
                        raise _RecordError("unterminated quoted field", start)
                    rec = t.join(parts)
                if simple(rec):
                    yield start, rec.split(d)
                else:
                    yield start, self._tokens(rec, start)
            else:
                if "\\" not in rec:
                    yield start, rec.split(d)
                    continue
                while _odd_backslashes(rec) and i < n:
                    nxt = pieces[i]
                    rec = rec + t + nxt
                    off += len(nxt) + lt
                    i += 1
                if simple(rec):
                    yield start, rec.split(d)
                else:
                    yield start, self._tokens(rec, start)

    def _tokens(self, rec: str, start: int) -> list[str]:
        """The general tokenizer, for records the fast path cannot split with str.split."""
        out: list[str] = []
        pos = 0
        match = self._field.match
        while True:
            m = match(rec, pos)
            if m is None:
                raise _RecordError(self._why(rec, pos), start)
            out.append(m.group(1))
            if m.group(2) is None:
                return out
            pos = m.end()

    def _why(self, rec: str, pos: int) -> str:
        field_no = rec.count(self.delimiter, 0, pos) + 1  # approximate: for the message only
        if not self.quote:
            return f"field {field_no}: backslash escape at the end of the record"
        q = self.quote
        if rec[pos : pos + 1] != q:
            return f"field {field_no}: quote character {q!r} inside an unquoted field"
        # Walk the quoted field to tell an unterminated quote from junk after the closing quote.
        j = pos + 1
        while True:
            k = rec.find(q, j)
            if k < 0:
                return f"field {field_no}: unterminated quoted field"
            if rec[k + 1 : k + 2] == q:
                j = k + 2
                continue
            return f"field {field_no}: unexpected {rec[k + 1 : k + 11]!r} after the closing quote"


class _RecordError(Exception):
    """The record splitter's complaint, with the record's start offset (turned into a line)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def _odd_backslashes(rec: str) -> bool:
    return (len(rec) - len(rec.rstrip("\\"))) & 1 == 1


# ---------------------------------------------------------------------------------------------
# Low-level formatting (TiCDC's csvMessage.formatValue over already converted values)


def format_csv_value(value: Any, fmt: CSVFormat) -> str:
    """One field from a converted CSV value: str -> quoted/escaped, None -> null, else Go %v."""
    if value is None:
        return fmt.null
    if isinstance(value, str):
        return fmt.text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_g(value)
    return str(value)


def format_csv_line(
    fmt: CSVFormat,
    op: str,
    table: str,
    schema: str,
    values: list[Any],
    commit_ts: int = 0,
    is_updated: bool = False,
) -> str:
    """One record (with terminator) from converted values: the csvMessage layout of spec §5.5."""
    fields = [fmt.text(op), fmt.text(table), fmt.text(schema)]
    if fmt.include_commit_ts:
        fields.append(str(commit_ts))
    if fmt.output_old_value:
        fields.append("true" if is_updated else "false")
    fields.extend(format_csv_value(v, fmt) for v in values)
    return fmt.delimiter.join(fields) + fmt.terminator


# ---------------------------------------------------------------------------------------------
# Encoder


def _value_writer(col: Column, fmt: CSVFormat) -> Callable[[Any], str]:
    """model value -> field text for one column (NULL is handled by the caller)."""
    tc = col.type_code
    text = fmt.text

    def bad(v: Any, why: str = "") -> CSVFieldError:
        if v is ABSENT:
            return CSVFieldError(f"column {col.name!r} is absent from the image; CSV lines carry every column")
        return CSVFieldError(f"column {col.name!r} ({col.type_name}): cannot write {clip(v)}{why}")

    if tc in INTEGER_TYPES or tc in (TypeCode.YEAR, TypeCode.BIT):
        # Go %v of int64/uint64 (BIT is its uint64): bare digits.
        def write_int(v: Any) -> str:
            if type(v) is int:
                return str(v)
            raise bad(v)

        return write_int
    if tc in FLOAT_TYPES:
        f32 = tc is TypeCode.FLOAT

        def write_float(v: Any) -> str:
            if type(v) is not float:
                if type(v) is not int:
                    raise bad(v)
                v = float(v)
            return float_g_text(v, f32)  # Go %v of float32/float64; NaN/Inf print 0 (spec §0.4)

        return write_float
    if tc is TypeCode.DECIMAL:
        scale = col.decimal

        def write_decimal(v: Any) -> str:
            if type(v) is not Decimal:
                raise bad(v)
            try:
                return text(decimal_text(v, scale))  # tiflow mounter: a string, so quoted
            except ArithmeticError as e:  # NaN/Inf, or a rescale beyond the decimal context
                raise bad(v, f": {e!r}") from None

        return write_decimal
    if tc in (TypeCode.ENUM, TypeCode.SET):
        # Member names, quoted (ticdc ParseEnumValue / ParseSetValue: "a,c"); index 0 is "".
        names = enum_name if tc is TypeCode.ENUM else set_names
        cache: dict[int, str] = {}

        def write_member(v: Any) -> str:
            hit = cache.get(v) if type(v) is int else None
            if hit is not None:
                return hit
            if type(v) is not int:
                raise bad(v)
            try:
                field = text(names(col, v))
            except ValueError as e:
                raise bad(v, f": {e}") from None
            if len(cache) < 1024:
                cache[v] = field
            return field

        return write_member
    if col.is_bytes:
        # Binary-flag string/blob types: base64 or hex text, quoted (binary-encoding-method).
        def encode(b: bytes) -> str:
            return b.hex() if fmt.hex else binascii.b2a_base64(b, newline=False).decode("ascii")

        def write_bytes(v: Any) -> str:
            if type(v) is not bytes:
                if not isinstance(v, bytearray | memoryview):
                    raise bad(v)
                v = bytes(v)
            return text(encode(v))

        return write_bytes

    # Text and the types TiCDC hands over as strings: DATE/DATETIME/TIMESTAMP/TIME, JSON, VECTOR.
    if fmt.quote:
        q, qq = fmt.quote, fmt.quote * 2

        def write_quoted(v: Any) -> str:
            if type(v) is str:
                return q + v.replace(q, qq) + q
            raise bad(v)

        return write_quoted

    def write_text(v: Any) -> str:
        if type(v) is str:
            return text(v)
        raise bad(v)

    return write_text


class _Renderer:
    """Per-TableSchema precompiled line writer."""

    __slots__ = ("meta", "null", "writers")

    def __init__(self, ts: TableSchema, fmt: CSVFormat) -> None:
        d = fmt.delimiter
        names = d + fmt.text(ts.table) + d + fmt.text(ts.schema)
        self.meta = {letter: fmt.text(letter) + names for letter in "IUD"}
        self.writers = tuple(_value_writer(c, fmt) for c in ts.columns)
        self.null = fmt.null

    def values(self, image: tuple[Any, ...]) -> list[str]:
        null = self.null
        # RowChange guarantees the image width.
        return [null if v is None else w(v) for w, v in zip(self.writers, image, strict=False)]


class CSVEncoder(Encoder):
    """Row events -> CSV lines, one `Message` per row event (key None, value = the line bytes).

    An UPDATE with ``csv_output_old_value`` is one message holding both lines (``D`` old, then
    ``I`` new) as TiCDC's csvMessage.encode writes them as one unit: a file rollover can never
    separate the pair. ``header(table)`` gives the ``output-field-header`` line the storage sink
    writes at the top of each file.
    """

    protocol = "csv"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        self.format = CSVFormat(self.options)
        self._renderers = PlanCache(lambda ts: _Renderer(ts, self.format))
        self._pending: list[Message] = []

    def header(self, table_schema: TableSchema) -> bytes:
        """The header line (with terminator), or b"" when ``output_field_header`` is off."""
        if not self.options.output_field_header:
            return b""
        return self.format.header([c.name for c in table_schema.columns]).encode("utf-8")

    def encode_row(self, row: RowChange) -> bytes:
        """The line(s) for one row event, terminator included."""
        fmt = self.format
        r = self._renderers.get(row.table_schema)
        d, t = fmt.delimiter, fmt.terminator
        ts_field = [str(row.commit_ts)] if fmt.include_commit_ts else []
        op = row.op
        try:
            if op is Op.UPDATE and fmt.output_old_value and row.old is not None:
                # Old image as a D line, new image as an I line, both is-updated=true.
                upd = [*ts_field, "true"]
                old = d.join([r.meta["D"], *upd, *r.values(row.old)])
                new = d.join([r.meta["I"], *upd, *r.values(row.new)])  # type: ignore[arg-type]
                text = old + t + new + t
            else:
                meta = [r.meta[_OP_LETTER[op]], *ts_field]
                if fmt.output_old_value:
                    meta.append("true" if op is Op.UPDATE else "false")
                image = row.old if op is Op.DELETE else row.new
                text = d.join([*meta, *r.values(image)]) + t  # type: ignore[arg-type]
            return text.encode("utf-8")
        except CSVFieldError as e:
            raise CSVFieldError(
                f"{row.table_schema.qualified_name} at commit ts {row.commit_ts}: {e.message}"
            ) from None
        except UnicodeEncodeError as e:
            raise CodecError(
                f"{row.table_schema.qualified_name}: text is not encodable as UTF-8 ({e.reason})"
            ) from None

    def append_row(self, row: RowChange) -> None:
        self._pending.append(Message(key=None, value=self.encode_row(row), rows=1, commit_ts=row.commit_ts))

    def build(self) -> list[Message]:
        out, self._pending = self._pending, []
        return out

    def encode_ddl(self, ddl: DDLEvent) -> Message:
        """An empty message: CSV data files hold no DDL (the storage sink writes schema files).

        Empty rather than an error so `Encoder.encode` works on a mixed stream; a writer that
        appends message values appends nothing.
        """
        return Message(key=None, value=b"", rows=0, commit_ts=ddl.commit_ts)

    def encode_resolved(self, resolved: Resolved) -> Message | None:
        return None  # the storage sink's `metadata` file carries the checkpoint


# ---------------------------------------------------------------------------------------------
# Decoder


class _BadField(ValueError):  # noqa: N818 (internal, never escapes)
    """A field that does not read as its column's type; message is the reason."""


def _value_reader(col: Column, fmt: CSVFormat) -> Callable[[str], Any]:
    """field content (already unquoted/unescaped) -> model value for one column."""
    tc = col.type_code
    name = col.name

    def bad(text: str, what: str) -> _BadField:
        return _BadField(f"column {name!r} ({col.type_name}): {clip(text)} is not {what}")

    if tc in INTEGER_TYPES or tc in (TypeCode.YEAR, TypeCode.BIT):
        if tc in INTEGER_TYPES:
            lo, hi = int_range(col)
            signed = not col.unsigned
        else:
            lo, hi = 0, (1 << ((col.length or 64) if tc is TypeCode.BIT else 64)) - 1
            signed = False

        def read_int(text: str) -> int:
            # Go ParseInt takes a sign, ParseUint does not; int() alone would take "1_0" and " 1".
            if not ((text.isascii() and text.isdigit()) or (signed and _SIGNED_RE.fullmatch(text))):
                raise bad(text, "an integer")
            v = int(text)
            if not lo <= v <= hi:
                raise bad(text, f"in range [{lo}, {hi}]")
            return v

        return read_int
    if tc in FLOAT_TYPES:
        f32 = tc is TypeCode.FLOAT

        def read_float(text: str) -> float:
            if not _FLOAT_RE.fullmatch(text):
                raise bad(text, "a decimal floating-point number")
            v = float(text)
            if f32 and not math.isinf(v):
                try:
                    v = to_float32(v)  # Go ParseFloat(s, 32)
                except OverflowError:
                    v = math.inf
            if math.isinf(v):
                raise bad(text, "in the float32 range" if f32 else "in the float64 range")
            return v

        return read_float
    if tc is TypeCode.DECIMAL:

        def read_decimal(text: str) -> Decimal:
            # TiCDC writes MyDecimal.String() text: the rule every decoder shares (codec/decimaltext.py).
            if not is_decimal_text(text):
                raise bad(text, f"a decimal number ({DECIMAL_RULE})")
            return Decimal(text)

        return read_decimal
    if tc in TEMPORAL_PATTERNS:
        pattern = TEMPORAL_PATTERNS[tc]

        def read_temporal(text: str) -> str:
            if not pattern.fullmatch(text):
                raise bad(text, f"a {col.type_name.upper()} value")
            return text

        return read_temporal
    if tc in (TypeCode.ENUM, TypeCode.SET):
        return _member_reader(col, bad)
    if col.is_bytes:
        if fmt.hex:

            def read_hex(text: str) -> bytes:
                if not _HEX_RE.fullmatch(text):
                    raise bad(text, "hex")
                return bytes.fromhex(text)

            return read_hex

        def read_b64(text: str) -> bytes:
            try:
                # Go base64.StdEncoding: alphabet +/, padding required.
                return binascii.a2b_base64(text, strict_mode=True)
            except (binascii.Error, ValueError):
                raise bad(text, "base64") from None

        return read_b64
    return str  # text, JSON, VECTOR: the string itself


def _member_reader(col: Column, bad: Callable[[str, str], _BadField]) -> Callable[[str], int]:
    """ENUM/SET member names -> 1-based index / bitmask, as TiDB's ParseEnum/ParseSet read them.

    Exact name first; then, for case-insensitive collations, a case-folded match; then TiDB's
    numeric fallback (an index or bitmask written as digits).
    """
    elems = col.elements
    exact = {e: i for i, e in enumerate(elems)}
    ci = not (col.collation.endswith("_bin") or col.collation == "binary")
    folded: dict[str, int] = {}
    if ci:
        for i, e in enumerate(elems):
            folded.setdefault(e.rstrip(" ").casefold(), i)

    def lookup(name: str) -> int | None:
        i = exact.get(name)
        if i is None and ci:
            i = folded.get(name.rstrip(" ").casefold())
        return i

    if col.type_code is TypeCode.ENUM:

        def read_enum(text: str) -> int:
            i = lookup(text)
            if i is not None:
                return i + 1
            if text == "":
                return 0  # MySQL's empty "error" member
            if text.isascii() and text.isdigit() and 0 < int(text) <= len(elems):
                return int(text)
            raise bad(text, f"a member of ENUM{elems!r}")

        return read_enum

    def read_set(text: str) -> int:
        if text == "":
            return 0
        bits = 0
        for part in text.split(","):
            i = lookup(part)
            if i is None:
                if text.isascii() and text.isdigit() and int(text) >> len(elems) == 0:
                    return int(text)
                raise bad(text, f"made of members of SET{elems!r}")
            bits |= 1 << i
        return bits

    return read_set


class _Reader:
    """Per-TableSchema precompiled field converters (raw token -> model value)."""

    __slots__ = ("columns", "convs", "expected", "names", "ops", "raw_names")

    def __init__(self, ts: TableSchema, fmt: CSVFormat) -> None:
        self.columns = ts.columns
        self.convs = tuple(_token_reader(c, fmt) for c in ts.columns)
        self.expected = fmt.meta_fields + len(ts.columns)
        self.names = (ts.table, ts.schema)
        # The meta fields as our encoder writes them: compared raw before the general path.
        self.raw_names = (fmt.text(ts.table), fmt.text(ts.schema))
        self.ops = {fmt.text(letter): letter for letter in "IUD"}


def _token_reader(col: Column, fmt: CSVFormat) -> Callable[[str], Any]:
    """raw token -> model value: NULL check on the raw token, then unquote/unescape, then parse.

    An unquoted token equal to the null string is NULL; a quoted one is text (``"\\N"`` is the
    two-character string). In escape mode the raw token is compared before unescaping, so the
    text ``\\N`` (written ``\\\\N``) stays text.
    """
    read = _value_reader(col, fmt)
    null = fmt.null
    content = fmt.content
    q = fmt.quote
    qq = q * 2
    if q:
        if read is str:

            def text_field(tok: str) -> Any:
                if tok[:1] == q:
                    tok = tok[1:-1]
                    return tok.replace(qq, q) if qq in tok else tok
                return None if tok == null else tok

            return text_field

        def typed_field(tok: str) -> Any:
            if tok[:1] == q:
                tok = tok[1:-1]
                if qq in tok:
                    tok = tok.replace(qq, q)
            elif tok == null:
                return None
            return read(tok)

    else:
        if read is str:

            def text_field_esc(tok: str) -> Any:
                if tok == null:
                    return None
                return content(tok) if "\\" in tok else tok

            return text_field_esc

        def typed_field(tok: str) -> Any:
            if tok == null:
                return None
            return read(content(tok) if "\\" in tok else tok)

    if col.type_code in INTEGER_TYPES:
        # Integers come bare and unsigned-looking most of the time: skip the general path.
        hi = int_range(col)[1]

        def int_field(tok: str) -> Any:
            if ascii_digits(tok):
                v = int(tok)
                if v <= hi:
                    return v
            return typed_field(tok)

        return int_field
    return typed_field


class CSVDecoder(Decoder):
    """CSV lines (one, or a whole data file) -> row events of one table.

    The file has no types: give the table's schema (from the storage sink's schema file) with
    the constructor or `set_table_schema`, or pass it to `decode_file`. ``commit_ts`` is the
    commit ts given to rows when the lines carry none (``include_commit_ts`` off): the storage
    reader passes the file's table version or the checkpoint.
    """

    protocol = "csv"

    def __init__(
        self, options: CodecOptions | None = None, table_schema: TableSchema | None = None, commit_ts: int = 0
    ) -> None:
        super().__init__(options)
        self.format = CSVFormat(self.options)
        self.table_schema = table_schema
        self.commit_ts = commit_ts
        self._readers = PlanCache(lambda ts: _Reader(ts, self.format))

    def set_table_schema(self, table_schema: TableSchema, commit_ts: int | None = None) -> None:
        """Schema (and default commit ts) for the next files/messages."""
        self.table_schema = table_schema
        if commit_ts is not None:
            self.commit_ts = commit_ts

    def decode(self, message: Message, where: str = "") -> list[Event]:
        """The rows in ``message.value`` (one or more records); ``message.commit_ts``, when set,
        is the default commit ts."""
        if message.value is None:
            raise CodecError("csv message has no value", where=where or None)
        return list(self.decode_file(message.value, commit_ts=message.commit_ts or None, where=where))

    def decode_file(
        self,
        data: bytes | str,
        table_schema: TableSchema | None = None,
        *,
        commit_ts: int | None = None,
        where: str = "",
    ) -> list[RowChange]:
        """Every row of a data file (or of a single line). A header line first is checked and skipped."""
        ts = table_schema or self.table_schema
        if ts is None:
            raise CodecError("csv decoder has no table schema; CSV files carry no types", where=where or None)
        default_ts = self.commit_ts if commit_ts is None else commit_ts
        if isinstance(data, str):
            text = data
        else:
            try:
                text = bytes(data).decode("utf-8")
            except UnicodeDecodeError as e:
                line = bytes(data).count(b"\n", 0, e.start) + 1
                raise CodecError(f"byte {e.start} is not UTF-8 ({e.reason})", where=_at(where, line)) from None
        if not text:
            return []
        try:
            return self._decode_text(text, ts, default_ts, where)
        except _RecordError as e:
            raise CSVFieldError(e.message, where=_at(where, text.count("\n", 0, e.offset) + 1)) from None

    def _decode_text(self, text: str, ts: TableSchema, default_ts: int, where: str) -> list[RowChange]:
        fmt = self.format
        reader = self._readers.get(ts)
        content = fmt.content
        null = fmt.null
        expected = reader.expected
        convs = reader.convs
        n_meta = fmt.meta_fields
        with_ts, with_upd = fmt.include_commit_ts, fmt.output_old_value
        ops, raw_names = reader.ops, reader.raw_names
        out: list[RowChange] = []
        pending: tuple[int, tuple[Any, ...]] | None = None  # an is-updated D waiting for its I
        first = True

        def fail(start: int, msg: str) -> CodecError:
            return CSVFieldError(msg, where=_at(where, text.count("\n", 0, start) + 1))

        for start, toks in fmt.records(text):
            if first:
                first = False
                if toks and toks[0] == HEADER_PREFIX + "operation":
                    self._check_header(toks, ts, functools.partial(fail, start))
                    continue
            if len(toks) != expected:
                raise fail(
                    start,
                    f"{len(toks)} fields, expected {expected} ({n_meta} meta + {len(convs)} columns of "
                    f"{ts.qualified_name})",
                )
            op = ops.get(toks[0])
            if op is None:
                if toks[0] == null:
                    raise fail(start, "operation is NULL")
                op = content(toks[0])
                if op not in ("I", "U", "D"):
                    raise fail(start, f"unknown operation {op[:20]!r} (expected I, U or D)")
            if (toks[1], toks[2]) != raw_names and (content(toks[1]), content(toks[2])) != reader.names:
                raise fail(
                    start,
                    f"line is for {content(toks[2])!r}.{content(toks[1])!r} but the schema is {ts.qualified_name}",
                )
            cts = default_ts
            idx = 3
            if with_ts:
                raw = toks[3]
                if not ascii_digits(raw):
                    raw = content(raw)
                if not ascii_digits(raw) or int(raw) >= 1 << 64:
                    raise fail(start, f"commit ts {raw[:30]!r} is not an unsigned 64-bit integer")
                cts = int(raw)
                idx = 4
            updated = False
            if with_upd:
                raw = content(toks[idx])
                if raw not in _BOOLS:
                    raise fail(start, f"is-updated {raw[:30]!r} is not true/false")
                updated = _BOOLS[raw]
            try:
                values = tuple([c(t) for c, t in zip(convs, toks[n_meta:], strict=False)])
            except _BadField as e:
                raise fail(start, str(e)) from None
            except (ValueError, TypeError, OverflowError) as e:  # defensive: never leak a raw error
                raise fail(start, f"cannot read a field: {e}") from None

            if pending is not None:
                if op == "I" and updated and pending[0] == cts:
                    out.append(trusted_row(Op.UPDATE, ts, cts, new=values, old=pending[1]))
                    pending = None
                    continue
                out.append(trusted_row(Op.DELETE, ts, pending[0], old=pending[1]))
                pending = None
            if op == "I":
                out.append(trusted_row(Op.INSERT, ts, cts, new=values))
            elif op == "U":
                out.append(trusted_row(Op.UPDATE, ts, cts, new=values))
            elif updated:
                pending = (cts, values)  # old half of an UPDATE split by output-old-value
            else:
                out.append(trusted_row(Op.DELETE, ts, cts, old=values))
        if pending is not None:
            out.append(trusted_row(Op.DELETE, ts, pending[0], old=pending[1]))
        return out

    def _check_header(self, toks: list[str], ts: TableSchema, fail: Callable[[str], CodecError]) -> None:
        names = [self.format.content(t) for t in toks]
        want = [c.name for c in ts.columns]
        got = names[len(names) - len(want) :] if len(names) >= len(want) else names
        # TiCDC checks the trailing names against the table's columns (it compares lower-cased).
        if len(names) != self.format.meta_fields + len(want) or [g.lower() for g in got] != [w.lower() for w in want]:
            raise fail(f"header names {names[self.format.meta_fields :]!r} do not match the columns {want!r}")


def _at(where: str, line: int) -> str:
    return f"{where}:{line}" if where else f"line {line}"
