"""TiCDC's storage-sink CSV format (``protocol=csv``, spec §5.4-§5.6); see docs/protocols/csv.md.

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

from ..base import CodecSpec
from .decoder import CSVDecoder
from .dialect import HEADER_PREFIX, CSVFieldError, CSVFormat
from .encoder import CSVEncoder, format_csv_line, format_csv_value

SPEC = CodecSpec("csv", CSVEncoder, CSVDecoder, frozenset({"storage"}))

__all__ = [
    "HEADER_PREFIX",
    "SPEC",
    "CSVDecoder",
    "CSVEncoder",
    "CSVFieldError",
    "CSVFormat",
    "format_csv_line",
    "format_csv_value",
]
