"""CSVDecoder: CSV lines (one, or a whole data file) -> row events of one table (spec §5.4-§5.6).

The file carries no types: the decoder needs the table's `TableSchema` (built by the storage
reader from the schema file) to turn the text back into model values.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import CodecError, ascii_digits
from ...model import Column, Event, Op, RowChange, TableSchema
from ...model.events import trusted_row
from ...model.schemacache import PlanCache
from ...model.types import INTEGER_TYPES
from ..base import Decoder, Message
from ..options import CodecOptions
from ..values import int_range
from .dialect import HEADER_PREFIX, CSVFieldError, CSVFormat, RecordError
from .values import BadField, value_reader

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
    read = value_reader(col, fmt)
    field = _quoted_field(read, fmt.null, fmt.quote) if fmt.quote else _escaped_field(read, fmt.null, fmt.content)
    if read is str or col.type_code not in INTEGER_TYPES:
        return field
    # Integers come bare and unsigned-looking most of the time: skip the general path.
    hi = int_range(col)[1]

    def int_field(tok: str) -> Any:
        if ascii_digits(tok):
            v = int(tok)
            if v <= hi:
                return v
        return field(tok)

    return int_field


def _quoted_field(read: Callable[[str], Any], null: str, q: str) -> Callable[[str], Any]:
    """`_token_reader` with a quote character: a quoted token is unquoted, never NULL."""
    qq = q * 2
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

    return typed_field


def _escaped_field(read: Callable[[str], Any], null: str, content: Callable[[str], str]) -> Callable[[str], Any]:
    """`_token_reader` in escape mode (no quote character): NULL is compared before unescaping."""
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
        except RecordError as e:
            raise CSVFieldError(e.message, where=_at(where, text.count("\n", 0, e.offset) + 1)) from None

    def _decode_text(self, text: str, ts: TableSchema, default_ts: int, where: str) -> list[RowChange]:
        fmt = self.format
        reader = self._readers.get(ts)
        content = fmt.content
        null = fmt.null
        expected = reader.expected
        convs = reader.convs
        n_meta = fmt.meta_fields
        with_meta = fmt.include_commit_ts or fmt.output_old_value
        ops, raw_names = reader.ops, reader.raw_names
        out: list[RowChange] = []
        pending: tuple[int, tuple[Any, ...]] | None = None  # an is-updated D waiting for its I
        cts, updated = default_ts, False

        fail = functools.partial(_line_error, text, where)
        for start, toks in self._records(text, ts, fail):
            if len(toks) != expected:
                raise fail(
                    start,
                    f"{len(toks)} fields, expected {expected} ({n_meta} meta + {len(convs)} columns of "
                    f"{ts.qualified_name})",
                )
            op = ops.get(toks[0])
            if op is None:
                op = _operation(toks[0], null, content, functools.partial(fail, start))
            if (toks[1], toks[2]) != raw_names and (content(toks[1]), content(toks[2])) != reader.names:
                raise fail(
                    start,
                    f"line is for {content(toks[2])!r}.{content(toks[1])!r} but the schema is {ts.qualified_name}",
                )
            if with_meta:
                cts, updated = self._meta_fields(toks, default_ts, fail, start)
            try:
                values = tuple([c(t) for c, t in zip(convs, toks[n_meta:], strict=False)])
            except BadField as e:
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

    def _records(
        self, text: str, ts: TableSchema, fail: Callable[[int, str], CodecError]
    ) -> Iterator[tuple[int, list[str]]]:
        """The records of ``text``, a header line first checked (against ``ts``) and left out."""
        records = self.format.records(text)
        head = next(records, None)
        if head is None:
            return records
        if head[1] and head[1][0] == HEADER_PREFIX + "operation":
            self._check_header(head[1], ts, functools.partial(fail, head[0]))
            return records
        return itertools.chain((head,), records)

    def _meta_fields(
        self, toks: list[str], default_ts: int, fail: Callable[[int, str], CodecError], start: int
    ) -> tuple[int, bool]:
        """(commit ts, is-updated) of a line, from the meta fields the options add after op/table/schema."""
        content = self.format.content
        cts = default_ts
        idx = 3
        if self.format.include_commit_ts:
            raw = toks[3]
            if not ascii_digits(raw):
                raw = content(raw)
            if not ascii_digits(raw) or int(raw) >= 1 << 64:
                raise fail(start, f"commit ts {raw[:30]!r} is not an unsigned 64-bit integer")
            cts = int(raw)
            idx = 4
        updated = False
        if self.format.output_old_value:
            raw = content(toks[idx])
            if raw not in _BOOLS:
                raise fail(start, f"is-updated {raw[:30]!r} is not true/false")
            updated = _BOOLS[raw]
        return cts, updated

    def _check_header(self, toks: list[str], ts: TableSchema, fail: Callable[[str], CodecError]) -> None:
        names = [self.format.content(t) for t in toks]
        want = [c.name for c in ts.columns]
        got = names[len(names) - len(want) :] if len(names) >= len(want) else names
        # TiCDC checks the trailing names against the table's columns (it compares lower-cased).
        if len(names) != self.format.meta_fields + len(want) or [g.lower() for g in got] != [w.lower() for w in want]:
            raise fail(f"header names {names[self.format.meta_fields :]!r} do not match the columns {want!r}")


def _operation(raw: str, null: str, content: Callable[[str], str], fail: Callable[[str], CodecError]) -> str:
    """The op letter of a field not written as our encoder writes it (another quoting), or the error."""
    if raw == null:
        raise fail("operation is NULL")
    op = content(raw)
    if op not in ("I", "U", "D"):
        raise fail(f"unknown operation {op[:20]!r} (expected I, U or D)")
    return op


def _line_error(text: str, where: str, start: int, msg: str) -> CodecError:
    """The error of the line at offset ``start`` of ``text``, which names its line number."""
    return CSVFieldError(msg, where=_at(where, text.count("\n", 0, start) + 1))


def _at(where: str, line: int) -> str:
    return f"{where}:{line}" if where else f"line {line}"
