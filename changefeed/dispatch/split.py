"""Splitting an UPDATE that changes a key into DELETE + INSERT, as TiCDC's MQ/storage sinks do.

With ``output-raw-change-event = false`` (TiCDC's default) an UPDATE that modifies the primary key
or a NOT NULL unique key is emitted as a DELETE of the old row followed by an INSERT of the new
one, so per-key consumers (and key-hashing dispatchers) see each key's history in one place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.compute as pc

from ..model import ABSENT, Op, RowChange, TableSchema
from ..model.rowblock import TableRows
from ..model.schemacache import PlanCache


def _build_key_positions(table: TableSchema) -> tuple[int, ...]:
    """The positions of the columns of the primary key and of every NOT NULL unique key."""
    nullable = {c.name for c in table.columns if c.nullable}
    names: set[str] = set()
    for idx in table.indexes:
        if idx.primary or (idx.unique and not nullable.intersection(idx.columns)):
            names.update(idx.columns)
    return tuple(sorted(table.column_index[n] for n in names))


_key_positions = PlanCache(_build_key_positions).get


def split_key_changing_update(row: RowChange) -> list[RowChange]:
    """[row], or [DELETE(old), INSERT(new)] when the update changes a PK/NOT NULL UK column."""
    if row.op is not Op.UPDATE or row.old is None or row.new is None:
        return [row]
    old, new = row.old, row.new
    changed = any(old[i] is not ABSENT and old[i] != new[i] for i in _key_positions(row.table_schema))
    if not changed:
        return [row]
    common: dict[str, Any] = {
        "table_schema": row.table_schema,
        "commit_ts": row.commit_ts,
        "start_ts": row.start_ts,
        "partition_id": row.partition_id,
        "position": row.position,
    }
    return [RowChange(Op.DELETE, old=old, row_id=row.row_id, **common), RowChange(Op.INSERT, new=new, **common)]


def key_changing_rows(rows: TableRows) -> np.ndarray:
    """Per row of one table: an UPDATE that `split_key_changing_update` would split."""
    out = np.zeros(rows.num_rows, bool)
    updates = rows.ops == 1
    if not updates.any():
        return out
    for i in _key_positions(rows.table_schema):
        new, old = rows.column(i), rows.before(i)
        differ = pc.fill_null(pc.not_equal(new, old), False).to_numpy(zero_copy_only=False)
        one_null = (new.is_null().to_numpy(zero_copy_only=False)) != (old.is_null().to_numpy(zero_copy_only=False))
        out |= differ | one_null
    splits: np.ndarray = out & updates
    return splits
