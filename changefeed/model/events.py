"""The canonical change events every source produces and every codec and sink consumes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from .ddl import ActionType
from .schema import TableSchema
from .values import ABSENT

Position = Mapping[Any, Any]
"""Where in its source an event ends (binlog file/pos/GTID + clock, topic/partition/offset...).

Opaque to everything but the source that made it; JSON-serialisable so jobs can checkpoint it.
Keys are mostly str; a Kafka source's resolved position maps partition -> offset."""


class Op(StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(slots=True)
class RowChange:
    """One row version: an insert (``new``), update (``new`` + ``old``) or delete (``old``).

    Images are tuples aligned with ``table_schema.columns``; ``None`` is SQL NULL and ``ABSENT``
    marks a column the image does not carry (MINIMAL binlog images, handle-key-only deletes,
    UPDATE old values reduced to the changed columns).
    """

    kind: ClassVar[str] = "row"
    op: Op
    table_schema: TableSchema
    commit_ts: int
    new: tuple[Any, ...] | None = None
    old: tuple[Any, ...] | None = None
    start_ts: int = 0
    partition_id: int | None = None
    row_id: int | None = None
    position: Position | None = None

    def __post_init__(self) -> None:
        width = len(self.table_schema.columns)
        needs_new = self.op is not Op.DELETE
        needs_old = self.op is not Op.INSERT
        for label, image, required in (("new", self.new, needs_new), ("old", self.old, needs_old)):
            if image is None:
                if required and not (label == "old" and self.op is Op.UPDATE):
                    raise ValueError(f"{self.op} row of {self.table_schema.qualified_name} needs a {label} image")
            elif len(image) != width:
                raise ValueError(
                    f"{label} image of {self.table_schema.qualified_name} has {len(image)} values for {width} columns"
                )

    @property
    def schema(self) -> str:
        return self.table_schema.schema

    @property
    def table(self) -> str:
        return self.table_schema.table

    @property
    def table_id(self) -> int:
        return self.table_schema.table_id

    @property
    def physical_table_id(self) -> int:
        """The partition id for a partitioned table, else the table id (TiDB's physical id)."""
        return self.partition_id if self.partition_id is not None else self.table_schema.table_id

    @property
    def image(self) -> tuple[Any, ...]:
        """The row as it now identifies itself: the new image, or the old one for a delete."""
        return self.old if self.op is Op.DELETE else self.new  # type: ignore[return-value]

    def as_dict(self, old: bool = False) -> dict[str, Any]:
        """Column name -> value of one image, without absent columns (for people and tests)."""
        image = self.old if old else self.new
        if image is None:
            return {}
        return {c.name: v for c, v in zip(self.table_schema.columns, image, strict=True) if v is not ABSENT}

    def handle_key_values(self) -> tuple[Any, ...]:
        """Values of the handle-key columns in the identifying image."""
        image = self.image
        return tuple(image[i] for i in self.table_schema.handle_key)


_new_object = object.__new__


def trusted_row(
    op: Op,
    table_schema: TableSchema,
    commit_ts: int,
    new: tuple[Any, ...] | None = None,
    old: tuple[Any, ...] | None = None,
    partition_id: int | None = None,
    row_id: int | None = None,
) -> RowChange:
    """A RowChange built without `RowChange.__post_init__`'s checks (about 3x cheaper).

    Only for decoders whose images come from the table's own compiled reader, so that their
    width and the op's images are right by construction; everything else uses the constructor.
    """
    row = _new_object(RowChange)
    row.op = op
    row.table_schema = table_schema
    row.commit_ts = commit_ts
    row.new = new
    row.old = old
    row.start_ts = 0
    row.partition_id = partition_id
    row.row_id = row_id
    row.position = None
    return row


@dataclass(slots=True)
class DDLEvent:
    """A schema change at ``commit_ts``; ``pre_table_schema`` is the shape before it, if any."""

    kind: ClassVar[str] = "ddl"
    schema: str
    table: str
    query: str
    ddl_type: int
    commit_ts: int
    table_schema: TableSchema | None = None
    pre_table_schema: TableSchema | None = None
    start_ts: int = 0
    position: Position | None = None

    @property
    def action(self) -> ActionType | int:
        try:
            return ActionType(self.ddl_type)
        except ValueError:
            return self.ddl_type


@dataclass(slots=True)
class Resolved:
    """Every change with commit_ts <= ``commit_ts`` has been emitted (a watermark).

    TiCDC's resolved ts and checkpoint ts mean exactly this (its consumers drop a row whose commit
    ts is at or below a partition's resolved ts as a fallback), so the value goes on the wire as is.
    """

    kind: ClassVar[str] = "resolved"
    commit_ts: int
    position: Position | None = field(default=None)


Event = RowChange | DDLEvent | Resolved
