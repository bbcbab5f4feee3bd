"""The CSV dialect of ``[sink.csv]`` (spec §5.4-§5.6), compiled once: quoting, record splitting, unescaping.

Shared by the encoder and the decoder; the per-type value rules are in `values`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from ...errors import CodecError, ConfigError
from ..options import CodecOptions

HEADER_PREFIX = "ticdc-meta$"
# Lightning's MySQL-style unescapes (the parser TiCDC's CSV decoder uses): \0 \b \n \r \t \Z.
_LIGHTNING_UNESCAPES = {"0": "\x00", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


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
                        raise RecordError("unterminated quoted field", start)
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
                raise RecordError(self._why(rec, pos), start)
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


class RecordError(Exception):
    """The record splitter's complaint, with the record's start offset (turned into a line)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def _odd_backslashes(rec: str) -> bool:
    return (len(rec) - len(rec.rstrip("\\"))) & 1 == 1
