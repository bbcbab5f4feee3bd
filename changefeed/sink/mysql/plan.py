"""Rows of one downstream transaction -> the statements that apply them.

Safe mode (DM's safe mode, Syncer's "REPLACE INTO for re-entrancy"): rows are compacted per
handle key to the key's last state in the batch, then applied as chunked ``DELETE ... IN`` of the
keys that end deleted followed by multi-row ``REPLACE`` of the rows that end present. Replaying a
batch any number of times from any intermediate state gives the same result, and the order of
the REPLACEs does not matter: REPLACE removes whatever row holds a conflicting unique value, and
the final images of one batch never conflict with each other (they coexisted upstream).

Normal mode: INSERT, UPDATE ... WHERE key, DELETE. For a table whose only unique index is the
handle key, rows of different keys commute: each key's changes are folded (DM's compactor) and
emitted as multi-row INSERTs, ``DELETE ... IN`` and batched ``UPDATE ... CASE`` (TiCDC's batch
DML). A table with other unique indexes gets its statements in upstream order (a unique value
can pass from row to row), consecutive inserts/deletes merged. Different tables are independent
(the sink disables foreign_key_checks, as DM does), so rows are grouped per table.

Tables without a handle key: INSERT (REPLACE in safe mode), and ``UPDATE/DELETE ... WHERE every
column <=> value LIMIT 1`` in order; not idempotent on replay (see docs/mysql-sink.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...model import ABSENT, Op, RowChange
from .columns import BlockRows, Entry, expand, pieces
from .sql import Literal, TableSQL, table_sql

__all__ = ["PlannedOp", "plan_rows", "render_ops"]


@dataclass(slots=True)
class PlannedOp:
    """One statement shape over one table: ``kind`` is insert/replace/delete_keys/update/delete_row/update_row."""

    kind: str
    tsql: TableSQL
    positions: tuple[int, ...] = ()
    items: Any = field(default_factory=list)  # per kind: row images, keys, pairs; a `Gather` for *_columns

    def render(self, literal: Literal, max_rows: int, max_bytes: int) -> Iterator[tuple[str, int]]:
        t = self.tsql
        if self.kind in ("insert", "replace"):
            yield from t.insert(self.items, self.positions, self.kind == "replace", literal, max_rows, max_bytes)
        elif self.kind in ("insert_columns", "replace_columns"):
            replace = self.kind == "replace_columns"
            yield from t.insert_columns(self.items, self.positions, replace, literal, max_rows, max_bytes)
        elif self.kind == "delete_keys":
            yield from t.delete_keys(self.items, literal, max_rows, max_bytes)
        elif self.kind == "update":
            for new, key in self.items:
                yield t.update(new, key, literal), 1
        elif self.kind == "update_batch":
            yield from t.update_batch(self.items, self.positions, literal, max(1, min(max_rows, 64)))
        elif self.kind == "delete_row":
            for old in self.items:
                yield t.delete_row(old, literal), 1
        elif self.kind == "update_row":
            for old, new in self.items:
                yield t.update_row(old, new, literal), 1
        else:  # pragma: no cover - kinds are ours
            raise ValueError(self.kind)


def render_ops(
    ops: Sequence[PlannedOp], literal: Literal, max_rows: int = 1000, max_bytes: int = 1 << 21
) -> Iterator[tuple[str, int]]:
    """(sql, rows) for every statement of a plan, in order."""
    for op in ops:
        yield from op.render(literal, max_rows, max_bytes)


def _key(tsql: TableSQL, image: Sequence[Any] | None) -> tuple[Any, ...] | None:
    if image is None:
        return None
    key = tsql.key_of(image)
    return None if ABSENT in key else key


def _full(tsql: TableSQL, image: Sequence[Any]) -> bool:
    return tsql.full(image)


def _new(row: RowChange) -> tuple[Any, ...]:
    """The new image of an INSERT or UPDATE (`RowChange` requires one)."""
    assert row.new is not None
    return row.new


class _Appender:
    """Appends ops, extending the last one when it has the same shape (multi-row statements)."""

    def __init__(self) -> None:
        self.ops: list[PlannedOp] = []

    def add(self, kind: str, tsql: TableSQL, item: Any, positions: tuple[int, ...] = ()) -> None:
        last = self.ops[-1] if self.ops else None
        if last is not None and last.kind == kind and last.tsql is tsql and last.positions == positions:
            last.items.append(item)
        else:
            self.ops.append(PlannedOp(kind, tsql, positions, [item]))


def _where(row: RowChange) -> str:
    return f"{row.table_schema.qualified_name} commit_ts {row.commit_ts}"


def _block_inserts(entries: list[Entry], safe: bool, mysql_json: bool) -> PlannedOp | None:
    """One table's rows as one multi-row statement rendered from Arrow columns, where they are
    all whole-image block inserts of one shape and the row path would give them one statement."""
    if not all(isinstance(e, BlockRows) for e in entries):
        return None
    blocks: list[BlockRows] = entries  # type: ignore[assignment]
    schema = blocks[0].table.table_schema
    tsql = table_sql(schema, mysql_json)
    if not (safe or tsql.batch_updates) or any(e.table.table_schema is not schema for e in blocks):
        return None
    rows = pieces(blocks)
    if not rows.inserts_full(tsql.writable):
        return None
    return PlannedOp("replace_columns" if safe else "insert_columns", tsql, tsql.writable, rows)


def plan_rows(rows: Sequence[Entry], safe: bool, mysql_json: bool = False) -> list[PlannedOp]:
    """The statements applying ``rows`` (in upstream order) in one transaction.

    Rows are `RowChange`s or buffered block segments (`BlockRows`): a table whose rows are all
    whole-image block inserts gets its multi-row statement rendered from the Arrow columns; any
    other table's block rows are expanded to `RowChange`s in place, so both give the same SQL.

    Raises ``ValueError`` for rows that cannot be applied (no key columns in the image of a
    keyed table, an UPDATE without old image on a table without a key).
    """
    per_table: dict[tuple[str, str], list[Entry]] = {}
    for entry in rows:
        schema = entry.table.table_schema if isinstance(entry, BlockRows) else entry.table_schema
        per_table.setdefault((schema.schema, schema.table), []).append(entry)
    out = _Appender()
    for entries in per_table.values():
        columnar = _block_inserts(entries, safe, mysql_json)
        if columnar is not None:
            out.ops.append(columnar)
            continue
        trows = expand(entries)
        tsql = table_sql(trows[0].table_schema, mysql_json)
        if (safe or tsql.batch_updates) and all(
            r.op is Op.INSERT and r.table_schema is tsql.table and tsql.full(_new(r)) for r in trows
        ):
            # Only whole-row inserts (initial loads, append-only tables): one multi-row statement
            # in upstream order is exactly the row-by-row result, duplicates and replays included.
            op = PlannedOp("replace" if safe else "insert", tsql, tsql.writable, [r.new for r in trows])
            out.ops.append(op)
        elif safe:
            _plan_safe(trows, out, mysql_json)
        elif tsql.batch_updates:
            _plan_compact(trows, out, mysql_json)
        else:
            _plan_ordered(trows, out, mysql_json)
    return out.ops


def _plan_ordered(rows: list[RowChange], out: _Appender, mysql_json: bool, replace: bool = False) -> None:
    for row in rows:
        tsql = table_sql(row.table_schema, mysql_json)
        if row.op is Op.INSERT:
            new = row.new
            assert new is not None  # an INSERT carries its new image
            out.add("replace" if replace else "insert", tsql, new, tsql.present(new))
            continue
        if not tsql.handle:
            if row.op is Op.DELETE:
                out.add("delete_row", tsql, row.old)
            elif row.old is None:
                raise ValueError(f"UPDATE without old image on {_where(row)}: the table has no key to find the row")
            else:
                out.add("update_row", tsql, (row.old, row.new))
            continue
        old_key = _key(tsql, row.old)
        if row.op is Op.DELETE:
            if old_key is None:
                raise ValueError(f"DELETE without handle key values on {_where(row)}")
            out.add("delete_keys", tsql, old_key)
        else:
            new = row.new
            assert new is not None  # an UPDATE carries its new image
            new_key = _key(tsql, new)
            key = old_key or new_key
            if key is None:
                raise ValueError(f"UPDATE without handle key values on {_where(row)}")
            if tsql.batch_updates and key == new_key:
                out.add("update_batch", tsql, (new, key), tsql.present(new))
            else:
                out.add("update", tsql, (new, key))


def _plan_safe(rows: list[RowChange], out: _Appender, mysql_json: bool) -> None:
    if not table_sql(rows[0].table_schema, mysql_json).handle:
        _plan_ordered(rows, out, mysql_json, replace=True)
        return
    # key -> (tsql, final image or None when the key ends deleted), for one compactable segment.
    state: dict[tuple[Any, ...], tuple[TableSQL, tuple[Any, ...] | None]] = {}
    for row in rows:
        tsql = table_sql(row.table_schema, mysql_json)
        if not tsql.handle:  # the table lost its key mid-stream (DDL): order matters again
            _close_safe_segment(state, out)
            _plan_ordered([row], out, mysql_json, replace=True)
            continue
        if row.op is Op.DELETE:
            key = _key(tsql, row.old)
            if key is None:
                raise ValueError(f"DELETE without handle key values on {_where(row)}")
            state[key] = (tsql, None)
            continue
        new = row.new
        assert new is not None  # an INSERT or UPDATE carries its new image
        new_key = _key(tsql, new)
        old_key = _key(tsql, row.old) if row.op is Op.UPDATE else None
        if not _full(tsql, new):
            found = old_key or new_key
            base = state.get(found) if found is not None else None
            if base is not None and base[1] is not None and row.op is Op.UPDATE:
                # A partial image (MINIMAL binlog) over a full one seen earlier in the batch.
                new = tuple(b if v is ABSENT else v for v, b in zip(new, base[1], strict=True))
                new_key = _key(tsql, new)
            else:
                # Unknown columns: only an in-order UPDATE / INSERT of the present columns can apply it.
                _close_safe_segment(state, out)
                if row.op is Op.INSERT:
                    out.add("replace", tsql, new, tsql.present(new))
                else:
                    key = old_key or new_key
                    if key is None:
                        raise ValueError(f"UPDATE without handle key values on {_where(row)}")
                    out.add("update", tsql, (new, key))
                continue
        if new_key is None:
            raise ValueError(f"{row.op} without handle key values on {_where(row)}")
        if old_key is not None and old_key != new_key:
            # Key-changing UPDATE: delete the old key, replace the new row (DM safe mode).
            state[old_key] = (tsql, None)
        state[new_key] = (tsql, new)
    _close_safe_segment(state, out)


def _close_safe_segment(state: dict[tuple[Any, ...], tuple[TableSQL, tuple[Any, ...] | None]], out: _Appender) -> None:
    """The keys that end deleted, then the rows that end present; the segment starts anew."""
    for key, (tsql, image) in state.items():
        if image is None:
            out.add("delete_keys", tsql, key)
    for tsql, image in state.values():
        if image is not None:
            out.add("replace", tsql, image, tsql.present(image))
    state.clear()


def _plan_compact(rows: list[RowChange], out: _Appender, mysql_json: bool) -> None:
    """Normal mode for tables whose only unique index is the handle key: rows of different keys
    commute, so each key's changes fold into one statement kind (DM's compactor: INSERT+UPDATE is
    an INSERT, INSERT+DELETE is nothing, DELETE+INSERT a REPLACE) and the kinds are batched.

    A sequence the upstream cannot produce (a second INSERT of a live key...) closes the segment,
    so it reaches the server in order and fails there as it would row by row.
    """
    segment = _CompactSegment(out)
    state = segment.state
    close_segment, delete, insert, update = segment.close, segment.delete, segment.insert, segment.update
    for row in rows:
        tsql = table_sql(row.table_schema, mysql_json)
        if not tsql.batch_updates:  # the table's keys changed mid-stream (DDL): order matters again
            close_segment()
            _plan_ordered([row], out, mysql_json)
            continue
        if row.op is Op.DELETE:
            key = _key(tsql, row.old)
            if key is None:
                raise ValueError(f"DELETE without handle key values on {_where(row)}")
            delete(key, tsql)
            continue
        new = row.new
        assert new is not None  # an INSERT or UPDATE carries its new image
        old_key = _key(tsql, row.old) if row.op is Op.UPDATE else None
        if not _full(tsql, new):
            base = state.get(old_key or _key(tsql, new) or ())
            if row.op is Op.UPDATE and base is not None and base[2] is not None:
                new = tuple(b if v is ABSENT else v for v, b in zip(new, base[2], strict=True))
            else:  # columns unknown: apply this row on its own, in order
                close_segment()
                _plan_ordered([row], out, mysql_json)
                continue
        new_key = _key(tsql, new)
        if new_key is None:
            raise ValueError(f"{row.op} without handle key values on {_where(row)}")
        if row.op is Op.INSERT:
            insert(new_key, tsql, new)
        elif old_key is not None and old_key != new_key:
            delete(old_key, tsql)  # a key-changing UPDATE is DELETE old + INSERT new
            insert(new_key, tsql, new)
        else:
            update(new_key, tsql, new)
    close_segment()


class _CompactSegment:
    """DM's compactor over one segment: each key's changes folded into one statement kind."""

    __slots__ = ("out", "state")

    def __init__(self, out: _Appender) -> None:
        self.out = out
        # key -> (ins | upd | del | rep, tsql, final image)
        self.state: dict[tuple[Any, ...], tuple[str, TableSQL, tuple[Any, ...] | None]] = {}

    def close(self) -> None:
        """Emit the folded kinds, deletes first, and start a new segment."""
        state, out = self.state, self.out
        for kind in ("del", "upd", "ins", "rep"):
            for key, (k, tsql, image) in state.items():
                if k != kind:
                    continue
                if kind == "del":
                    out.add("delete_keys", tsql, key)
                    continue
                assert image is not None  # only a "del" has no image
                if kind == "upd":
                    out.add("update_batch", tsql, (image, key), tsql.present(image))
                else:
                    out.add("insert" if kind == "ins" else "replace", tsql, image, tsql.present(image))
        state.clear()

    def delete(self, key: tuple[Any, ...], tsql: TableSQL) -> None:
        state = self.state
        prev = state.get(key)
        if prev is None or prev[0] in ("upd", "rep"):
            state[key] = ("del", tsql, None)
        elif prev[0] == "ins":
            del state[key]  # born and gone inside the batch
        else:
            self.close()
            state[key] = ("del", tsql, None)

    def insert(self, key: tuple[Any, ...], tsql: TableSQL, image: tuple[Any, ...]) -> None:
        state = self.state
        prev = state.get(key)
        if prev is None:
            state[key] = ("ins", tsql, image)
        elif prev[0] == "del":
            state[key] = ("rep", tsql, image)
        else:
            self.close()
            state[key] = ("ins", tsql, image)

    def update(self, key: tuple[Any, ...], tsql: TableSQL, image: tuple[Any, ...]) -> None:
        state = self.state
        prev = state.get(key)
        if prev is None:
            state[key] = ("upd", tsql, image)
        elif prev[0] == "del":
            self.close()
            state[key] = ("upd", tsql, image)
        else:
            state[key] = (prev[0], tsql, image)
