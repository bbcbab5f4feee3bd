"""A Parquet snapshot per table: the latest row per key as of the last flushed resolved ts.

The columnar destination of the apply path (and the embedded default's output). State is the
current row per handle key; `flush` rewrites each changed table's ``snapshot.parquet`` atomically
and then ``_checkpoint.json`` with the commit ts it covers. On restart the snapshots and the
checkpoint are read back and replayed events at or below the checkpoint are skipped, so a
replayed batch changes nothing; a row at or below a Resolved received earlier in the same run is a
broken stream and raises (changefeed/sink/replay.py). Tables without a handle key keep every row (a multiset); a
delete removes one identical row.

A snapshot lives at ``<root>/<schema>/<table>/snapshot.parquet`` with the names encoded as the
storage sink encodes them (changefeed/files/paths.py: raw unless unsafe), and every path is checked
to resolve under the root: no name, rename or drop reaches a file outside it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import SinkError
from ..files.paths import encode_name, join_under, table_label
from ..model import ABSENT, ActionType, DDLEvent, Event, Op, Resolved, TableSchema, TypeCode
from ..model.arrow import arrow_schema, batch_to_images, images_to_batch
from ..model.ddl import ddl_tables
from ..model.ddlschema import ColumnDef, DDLCatalog, TableDef, decimals_for
from ..model.jsonl import table_schema_from_json, table_schema_to_json
from ..model.rowblock import RowBlock, expand_blocks
from .base import SinkContext
from .replay import ResolvedGuard
from .storage.writer import write_atomically

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "_checkpoint.json"
#: Parquet key-value metadata holding the table's model shape, so a snapshot can be reloaded (a
#: rename of a table not touched since a restart) without the events that created it.
SHAPE_KEY = b"changefeed.table_schema"
#: Entries of the root beside the schema directories (the default Spark checkpoint of `apply` too):
#: a schema with one of these names is escaped rather than merged into it.
ROOT_ENTRIES = frozenset({CHECKPOINT_FILE, "_spark_checkpoint"})


class _TableState:
    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.keyed = bool(schema.handle_key)
        self.rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.multiset: Counter[tuple[Any, ...]] = Counter()
        self.dirty = False

    def key(self, image: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(image[i] for i in self.schema.handle_key)

    def reshape(self, schema: TableSchema) -> None:
        """Carry rows over to a new table shape by column name (new columns NULL)."""
        old = self.schema
        if schema is old or [c.name for c in schema.columns] == [c.name for c in old.columns]:
            self.schema = schema
            return
        positions = [old.column_index.get(c.name) for c in schema.columns]
        convert = [lambda img, p=p: None if p is None else img[p] for p in positions]
        images = list(self.rows.values()) if self.keyed else list(self.multiset.elements())
        self.__init__(schema)  # type: ignore[misc]
        for img in images:
            self.put(tuple(f(img) for f in convert))
        self.dirty = True

    def put(self, image: tuple[Any, ...]) -> None:
        if self.keyed:
            self.rows[self.key(image)] = image
        else:
            self.multiset[image] += 1

    def remove(self, image: tuple[Any, ...]) -> None:
        if self.keyed:
            self.rows.pop(self.key(image), None)
        elif self.multiset[image] > 0:
            self.multiset[image] -= 1
            if not self.multiset[image]:
                del self.multiset[image]

    def images(self) -> list[tuple[Any, ...]]:
        return list(self.rows.values()) if self.keyed else list(self.multiset.elements())


class ParquetSnapshotSink(SinkContext):
    """Applies events to in-memory table states and publishes Parquet snapshots (a `Sink`)."""

    kind = "parquet"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoint_ts = self._read_checkpoint()
        self._pending_checkpoint = self.checkpoint_ts
        self._guard = ResolvedGuard("parquet snapshot sink", self.checkpoint_ts)  # replays end at the stored one
        self._tables: dict[tuple[str, str], _TableState] = {}
        self._renamed_away: set[tuple[str, str]] = set()
        # DECIMAL (precision, scale) learned from the CREATE/ALTER TABLE text of DDL events, for
        # protocols whose rows do not carry it (Open Protocol); see docs/spark.md.
        self._catalog = DDLCatalog()
        self._precise_cache: dict[int, tuple[TableSchema, int, TableSchema]] = {}
        self._learned: set[tuple[str, str]] = set()  # tables whose DECIMAL precision came from DDL text

    def _read_checkpoint(self) -> int:
        path = self.root / CHECKPOINT_FILE
        try:
            doc = orjson.loads(path.read_bytes())
            ts = int(doc["checkpoint_ts"])
            removed = [(str(s), str(t)) for s, t in doc.get("removed", ())]
        except FileNotFoundError:
            return 0
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SinkError(f"unreadable snapshot checkpoint: {exc}", where=str(path)) from None
        for schema, table in removed:  # renamed away by the last flush, which may have stopped before unlinking
            self._path(schema, table).unlink(missing_ok=True)
        return ts

    def _path(self, schema: str, table: str) -> Path:
        """The table's snapshot file, which always resolves under the root (PathEscapeError otherwise)."""
        elements = (encode_name(schema, ROOT_ENTRIES), encode_name(table), "snapshot.parquet")
        return join_under(self.root, *elements, what=table_label(schema, table))

    def _precise(self, ts: TableSchema) -> TableSchema:
        """``ts`` with the precision and scale of DECIMAL columns it lacks, when DDL seen in the stream gives them."""
        hit = self._precise_cache.get(id(ts))  # every row comes here: the column scan runs once per schema
        if hit is not None and hit[0] is ts and hit[1] == self._catalog.generation:
            return hit[2]
        precise = ts
        if any(c.type_code is TypeCode.DECIMAL and c.length is None for c in ts.columns):
            precise = decimals_for(ts, self._catalog.table(ts.schema, ts.table))
        if precise is not ts:
            self._learned.add((ts.schema, ts.table))
        if len(self._precise_cache) > 4096:
            self._precise_cache.clear()
        self._precise_cache[id(ts)] = (ts, self._catalog.generation, precise)
        return precise

    def _learn_stored(self, ts: TableSchema, path: Path) -> TableSchema:
        """A restart: the precision the snapshot was written with, unless DDL seen since says otherwise."""
        if (ts.schema, ts.table) in self._catalog:
            return ts
        meta = pq.read_schema(path).metadata or {}
        if SHAPE_KEY not in meta:
            return ts
        stored = table_schema_from_json(orjson.loads(meta[SHAPE_KEY]))
        columns = tuple(
            ColumnDef(
                c.name,
                c.nullable,
                (c.length, c.decimal or 0) if c.type_code is TypeCode.DECIMAL and c.length is not None else None,
            )
            for c in stored.columns
        )
        self._catalog.put(TableDef(ts.schema, ts.table, columns, stored.indexes))
        return self._precise(ts)

    def _state(self, ts: TableSchema) -> _TableState:
        ts = self._precise(ts)
        key = (ts.schema, ts.table)
        state = self._tables.get(key)
        if state is None:
            path = self._path(ts.schema, ts.table)
            if key not in self._renamed_away and path.exists():
                ts = self._learn_stored(ts, path)
            state = _TableState(ts)
            if key in self._renamed_away:  # a new table under a name renamed away in this batch
                self._renamed_away.discard(key)
            elif path.exists():
                for img in batch_to_images(ts, pq.read_table(path)):
                    state.put(img)
            self._tables[key] = state
        elif state.schema is not ts:
            state.reshape(ts)
        return state

    def open(self) -> int:
        """The published checkpoint ts (read, and a crashed flush's renames finished, when the sink was made)."""
        return self.checkpoint_ts

    def close(self) -> None:
        """Drop what was written and not flushed: table states are read again from the snapshots."""
        self._tables.clear()
        self._renamed_away.clear()
        self._pending_checkpoint = self.checkpoint_ts

    def write(self, batch: Iterable[Event | RowBlock]) -> None:
        for event in expand_blocks(batch):  # the snapshot keeps rows by key: one at a time
            self.write_event(event)

    def write_event(self, event: Event) -> None:
        if isinstance(event, Resolved):
            self._pending_checkpoint = max(self._pending_checkpoint, event.commit_ts)
            self._guard.saw(event.commit_ts)
            return
        if isinstance(event, DDLEvent):
            if event.query:  # also a replayed one: the definitions it sets still hold
                self._catalog.apply(event.query, event.schema, where=f"DDL at commit ts {event.commit_ts}")
            if event.commit_ts > self.checkpoint_ts:  # else already in the published snapshot
                self._apply_ddl(event)
            return
        # A replay below the stored checkpoint is already in the published snapshot; a row below a
        # Resolved of this run is a broken stream (ResolvedContradictionError).
        if self._guard.skip(event.commit_ts, event.schema, event.table, event.position):
            return
        state = self._state(event.table_schema)
        image = event.new
        if image is not None and state.keyed and any(v is ABSENT for v in image):
            # A MINIMAL image: columns it lacks keep the values the row had.
            source = event.old if event.old is not None else image
            prior = state.rows.get(state.key(source)) or (None,) * len(image)
            image = tuple(p if v is ABSENT else v for v, p in zip(image, prior, strict=True))
        if event.op is not Op.INSERT and event.old is not None:
            state.remove(event.old)
        if event.op is not Op.DELETE:
            assert image is not None
            state.put(image)
        state.dirty = True

    def _apply_ddl(self, ddl: DDLEvent) -> None:
        post, pre = ddl.table_schema, ddl.pre_table_schema
        if post is not None or pre is not None:  # a copy: the event itself stays as it came
            ddl = replace(
                ddl,
                table_schema=None if post is None else self._precise(post),
                pre_table_schema=None if pre is None else self._precise(pre),
            )
        if ddl.ddl_type in (ActionType.RENAME_TABLE, ActionType.RENAME_TABLES):
            self._rename(ddl)
            return
        if ddl.table and ddl.ddl_type in (ActionType.DROP_TABLE, ActionType.TRUNCATE_TABLE):
            state = self._tables.get((ddl.schema, ddl.table))
            if state is not None:
                state.rows.clear()
                state.multiset.clear()
                state.dirty = True
            elif self._path(ddl.schema, ddl.table).exists() and ddl.table_schema is not None:
                self._tables[(ddl.schema, ddl.table)] = _TableState(ddl.table_schema)
                self._tables[(ddl.schema, ddl.table)].dirty = True
        elif ddl.table_schema is not None and (ddl.schema, ddl.table) in self._tables:
            self._tables[(ddl.schema, ddl.table)].reshape(ddl.table_schema)

    def _rename(self, ddl: DDLEvent) -> None:
        """MySQL's RENAME TABLE (and ALTER TABLE ... RENAME) moves the rows with the table.

        The old names come from the statement itself: a storage-sink schema file and a Canal-JSON
        DDL message name only the new table, so the event's shape before the DDL may be missing.
        """
        _, pairs = ddl_tables(ddl.query, ddl.schema)
        for old, new in pairs:
            if old == new:
                continue
            state = self._tables.pop(old, None)
            if state is None and old not in self._renamed_away and self._path(*old).exists():
                state = self._state(self._stored_shape(old, ddl))
                del self._tables[old]
            if state is None:
                continue  # nothing was ever written under the old name
            post = ddl.table_schema if ddl.table_schema is not None and new == (ddl.schema, ddl.table) else None
            state.reshape(post or state.schema.renamed(*new))
            state.dirty = True
            self._tables[new] = state
            self._renamed_away.add(old)
            self._renamed_away.discard(new)

    def _stored_shape(self, name: tuple[str, str], ddl: DDLEvent) -> TableSchema:
        """The shape a snapshot was written with (its metadata; the DDL's shapes for older files)."""
        path = self._path(*name)
        meta = pq.read_schema(path).metadata or {}
        if SHAPE_KEY in meta:
            return table_schema_from_json(orjson.loads(meta[SHAPE_KEY]))
        pre, post = ddl.pre_table_schema, ddl.table_schema
        if pre is not None and (pre.schema, pre.table) == name:
            return pre
        if post is not None:
            return post.renamed(*name)
        raise SinkError(f"cannot move {name[0]}.{name[1]}: its snapshot records no table shape", where=str(path))

    def flush(self) -> int:
        """Rewrite changed snapshots, then the checkpoint; returns the published checkpoint."""
        for (schema, table), state in self._tables.items():
            if not state.dirty:
                continue
            try:
                batch = images_to_batch(state.schema, state.images())
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                if (schema, table) not in self._learned:
                    raise
                # A value that does not fit the precision the DDL gave: that knowledge is stale
                # (a change we did not see); the table goes back to exact text until its next DDL.
                log.warning(
                    "%s: a DECIMAL value does not fit the precision learned from DDL (%s); writing DECIMAL as text",
                    table_label(schema, table),
                    exc,
                    extra={"table": f"{schema}.{table}", "error": str(exc)},
                )
                self._catalog.forget(schema, table)
                self._learned.discard((schema, table))
                state.schema = self._imprecise(state.schema)
                batch = images_to_batch(state.schema, state.images())
            sink = pa.BufferOutputStream()
            shape = orjson.dumps(table_schema_to_json(state.schema))
            arrow_shape = arrow_schema(state.schema).with_metadata({SHAPE_KEY: shape})
            pq.write_table(pa.Table.from_batches([batch], schema=arrow_shape), sink)
            write_atomically(self._path(schema, table), sink.getvalue().to_pybytes())
            state.dirty = False
        if self._pending_checkpoint > self.checkpoint_ts:
            # Snapshots renamed away are removed only once the checkpoint covering the rename is
            # published, and the checkpoint lists them: a crash before it replays the rename from
            # the old snapshot; a crash after it finishes the removal on restart.
            removed = sorted(self._renamed_away)
            doc = {"checkpoint_ts": self._pending_checkpoint, "removed": removed}
            write_atomically(self.root / CHECKPOINT_FILE, orjson.dumps(doc))
            self.checkpoint_ts = self._pending_checkpoint
            self._guard.saw(self.checkpoint_ts, "the checkpoint published")
            for schema, table in removed:
                self._path(schema, table).unlink(missing_ok=True)
            self._renamed_away.clear()
        return self.checkpoint_ts

    @staticmethod
    def _imprecise(ts: TableSchema) -> TableSchema:
        """``ts`` with every DECIMAL column's precision forgotten (written as exact text)."""
        columns = tuple(
            replace(c, length=None, decimal=None) if c.type_code is TypeCode.DECIMAL and c.length is not None else c
            for c in ts.columns
        )
        return ts if columns == ts.columns else replace(ts, columns=columns)

    def table_rows(self, schema: str, table: str) -> int:
        state = self._tables.get((schema, table))
        return len(state.images()) if state else 0
