"""CSVEncoder: row events -> CSV lines (spec §5.4-§5.6), one `Message` per row event; the line
layout is described in the package docstring.
"""

from __future__ import annotations

from typing import Any

from ...errors import CodecError
from ...model import DDLEvent, Op, Resolved, RowChange, TableSchema
from ...model.gofloat import format_g
from ...model.schemacache import PlanCache
from ..base import Encoder, Message
from ..options import CodecOptions
from .dialect import CSVFieldError, CSVFormat
from .values import value_writer

_OP_LETTER = {Op.INSERT: "I", Op.UPDATE: "U", Op.DELETE: "D"}

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


class _Renderer:
    """Per-TableSchema precompiled line writer."""

    __slots__ = ("meta", "null", "writers")

    def __init__(self, ts: TableSchema, fmt: CSVFormat) -> None:
        d = fmt.delimiter
        names = d + fmt.text(ts.table) + d + fmt.text(ts.schema)
        self.meta = {letter: fmt.text(letter) + names for letter in "IUD"}
        self.writers = tuple(value_writer(c, fmt) for c in ts.columns)
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
