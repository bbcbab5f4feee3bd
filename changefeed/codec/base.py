"""The small interface every protocol codec implements, and the message it produces.

Encoders mirror TiCDC's RowEventEncoder: rows are appended (Open Protocol batches several into
one message) and collected with `build`; DDL and resolved events become messages at once.
Decoders take one message and return the events in it, in order.

Beyond `Decoder`, the readers rely on a few capabilities some decoders have, declared here as
Protocols: decoding a storage-sink data file (`LineDecoder`, `TableFileDecoder`) and holding
messages until what they need arrives (`BufferingDecoder`). Each protocol package declares itself
with a `CodecSpec` (its ``__init__.py``), which the registry in ``codec/__init__.py`` collects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

from ..errors import CodecError, clip
from ..model import DDLEvent, Event, Resolved, RowChange, TableSchema
from ..model.rowblock import TableRows
from ..model.tso import MAX_TSO
from .options import CodecOptions

if TYPE_CHECKING:
    from .simple.schema_cache import SchemaCache, SchemaKey


@dataclass(slots=True)
class Message:
    """A message as a broker or file carries it: key/value bytes plus routing hints.

    ``partition``/``topic`` are where the message is meant to go (None: not decided here).
    ``rows`` counts the row events inside and ``commit_ts`` is the largest commit ts they cover,
    so a sink can report what an acknowledged message made durable.
    """

    key: bytes | None
    value: bytes | None
    partition: int | None = None
    topic: str | None = None
    rows: int = 0
    commit_ts: int = 0

    @property
    def size(self) -> int:
        """Kafka's size accounting: key + value + 36 bytes of record overhead (spec §0.7)."""
        return len(self.key or b"") + len(self.value or b"") + 36


@dataclass(slots=True)
class Rendered:
    """One table's rows rendered column-wise (`Encoder.render_table`)."""

    keys: list[bytes | None]
    values: list[bytes | None]
    per_row: np.ndarray  # bool: rows to encode one by one instead


class Encoder(ABC):
    """Model events -> messages for one protocol."""

    protocol: str

    def __init__(self, options: CodecOptions | None = None) -> None:
        self.options = options or CodecOptions(protocol=self.protocol)

    @abstractmethod
    def append_row(self, row: RowChange) -> None:
        """Queue a row event; messages come out of `build`."""

    def render_rows(self, rows: TableRows) -> tuple[list[bytes | None], list[bytes | None]] | None:
        """Every row's event key and value (uncompressed) rendered column-wise, or None: not columnar.

        Rendering whole columns is much cheaper than one row at a time. A None entry is a row the
        caller must give to `append_row` instead.
        """
        return None

    def render_table(self, rows: TableRows) -> Rendered | None:
        """`render_rows` plus which rows the caller must still give to `append_row`: those not
        rendered and those whose images leave columns out (MINIMAL); None: none rendered."""
        if rows.table_schema.partitioned:  # a partition's physical id is per row, not in TableRows
            return None
        rendered = self.render_rows(rows)
        if rendered is None:
            return None
        keys, values = rendered
        per_row = ~rows.full() | np.fromiter((k is None for k in keys), bool, len(keys))
        return Rendered(keys, values, per_row)

    def append_rendered(self, key: bytes, value: bytes, commit_ts: int, row: Callable[[], RowChange]) -> None:
        """Queue a row rendered by `render_rows`, as `append_row` would; ``row()`` gives the
        `RowChange` for what only the per-row path handles (e.g. a message over the size limit)."""
        raise NotImplementedError(f"{type(self).__name__} does not render rows column-wise")

    @abstractmethod
    def build(self) -> list[Message]:
        """Messages for every row appended since the last call."""

    @abstractmethod
    def encode_ddl(self, ddl: DDLEvent) -> Message:
        """One DDL message (the sink decides which partitions it goes to)."""

    @abstractmethod
    def encode_resolved(self, resolved: Resolved) -> Message | None:
        """The resolved/watermark message, or None when the protocol sends none."""

    def encode_bootstrap(self, table: TableSchema) -> Message | None:
        """Simple protocol BOOTSTRAP; other protocols have none."""
        return None

    def encode(self, events: Iterable[Event]) -> list[Message]:
        """Encode a stream in order: rows are batched until a DDL/resolved event closes them."""
        out: list[Message] = []
        for event in events:
            if isinstance(event, RowChange):
                self.append_row(event)
                continue
            out.extend(self.build())
            msg = self.encode_ddl(event) if isinstance(event, DDLEvent) else self.encode_resolved(event)
            if msg is not None:
                out.append(msg)
        out.extend(self.build())
        return out


class Decoder(ABC):
    """Messages -> model events for one protocol. Keeps whatever state the protocol needs."""

    protocol: str

    def __init__(self, options: CodecOptions | None = None) -> None:
        self.options = options or CodecOptions(protocol=self.protocol)

    @abstractmethod
    def decode(self, message: Message, where: str = "") -> list[Event]:
        """Events carried by ``message``; ``where`` (topic/partition/offset, file:line) goes into
        every error so a person can find the bad message."""


def checked_tso(v: Any, what: str, where: str) -> int:
    """``v`` when it is a TSO (an unsigned 64-bit integer, as TiDB's), else a CodecError naming ``what``."""
    if type(v) is not int or not 0 <= v <= MAX_TSO:
        raise CodecError(f"{what} is {clip(v)}, expected an unsigned 64-bit TSO", where=where)
    return v


# ------------------------------------------------------------------ what readers need beyond Decoder


@runtime_checkable
class LineDecoder(Protocol):
    """Decodes a storage-sink data file of one message per line (Canal-JSON's ``.json`` files)."""

    def decode_lines(self, blob: bytes, where: str = "") -> list[Event]:
        """Every event of the file, in order; ``where`` names the file in errors."""
        ...


@runtime_checkable
class TableFileDecoder(Protocol):
    """Decodes a storage-sink data file whose lines carry no types (CSV): the table's schema comes
    from the storage sink's schema file."""

    def decode_file(
        self,
        data: bytes | str,
        table_schema: TableSchema | None = None,
        *,
        commit_ts: int | None = None,
        where: str = "",
    ) -> list[RowChange]:
        """Every row of the file; ``commit_ts`` for rows whose lines carry none."""
        ...


@runtime_checkable
class BufferingDecoder(Protocol):
    """A decoder that holds messages it cannot decode yet and releases them later (Simple: DMLs
    wait for their table's schema, which a BOOTSTRAP or DDL message brings). ``schemas`` may be
    shared by the decoders of several partitions (a BOOTSTRAP may reach partition 0 only)."""

    schemas: SchemaCache

    def pending(self) -> int:
        """How many messages are held."""
        ...

    def pending_tables(self) -> list[SchemaKey]:
        """The tables (schema, table, version) the held messages wait for."""
        ...

    def take_pending(self) -> list[tuple[Message, str]]:
        """Remove and return the held messages with their ``where``, to decode them again."""
        ...

    def learn(self, message: Message, where: str = "") -> bool:
        """Learn from ``message`` what held messages wait for, without decoding it as events."""
        ...

    def release(self) -> list[Event]:
        """The held events that may go out now (e.g. after `learn`)."""
        ...


# ------------------------------------------------------------------ the declaration of a codec

Transport = Literal["kafka", "storage"]
"""Where a protocol's messages travel: Kafka topics, or the storage sink's data files."""


@dataclass(frozen=True, slots=True)
class CodecSpec:
    """What a protocol package declares in its ``__init__.py`` as ``SPEC``: its name (the
    ``protocol=`` value), its encoder and decoder classes and the transports it supports."""

    name: str
    encoder: type[Encoder]
    decoder: type[Decoder]
    transports: frozenset[Transport]

    def supports(self, transport: Transport) -> bool:
        return transport in self.transports
