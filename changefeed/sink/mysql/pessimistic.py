"""DM's pessimistic shard DDL mode in the MySQL sink: held rows, the lock's steps, the release.

DM (shard DDL in pessimistic mode): a merged table's DDL is run downstream once, after every shard of
it ran the same DDL upstream; meanwhile the rows of shards that already ran it are held and the other
shards' rows are applied. The decisions are `changefeed.dispatch.shardlock` (pure); the downstream
tables that keep the lock, the shard list and the held rows with the checkpoint are `shardlock.py`;
this module is the sink's side: which rows to hold, and each step's transactions through the sink's
own sessions (`MySQLSink` below), so a held row commits with the checkpoint it belongs to.

DM's pessimistic mode also holds a done shard's *later DDL*: its queue waits whole. The DDL is stored
in the held table after the shard's rows (with the checkpoint), and the release replays the queue in
order (`shardlock.replay`): rows applied, a queued DDL opening or joining the next lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from ...clients.mysql import Connection
from ...dispatch.route import ShardDDL
from ...dispatch.shardddl import ShardDDLConflictError
from ...dispatch.shardlock import (
    APPLYING,
    RELEASED,
    WAITING,
    Replay,
    ShardKey,
    ShardLock,
    conflict,
    describe,
    pessimistic,
    replay,
)
from ...errors import SinkError, clip
from ...model import ActionType, RowChange, TableSchema
from ...model.rowblock import Segment, TableRows
from ..observe import observer
from .checkpoint import Checkpoint
from .columns import BlockRows, expand
from .shard import read_columns, report_shard_ddl
from .shardlock import Held, ShardLockStore

if TYPE_CHECKING:
    from .sink import MySQLSink

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["PessimisticShards"]


class PessimisticShards:
    """One sink's side of the shard locks (module docstring): the locks as committed, and the rows held
    in the batch being built (stored with its checkpoint by `MySQLSink._apply`)."""

    def __init__(self, sink: MySQLSink, store: ShardLockStore) -> None:
        self.sink = sink
        self.store = store
        self.locks: dict[tuple[str, str], ShardLock] = {}
        self.held: list[tuple[ShardKey, RowChange]] = []

    def _coordinated(self, what: str, call: Callable[[Connection], T]) -> T:
        """``call`` on the sink's coordinator session, retried as the sink retries."""
        return self.sink._with_retry(self.sink._coordinator, what, call)

    def _shaped(self, row: RowChange) -> RowChange:
        """A held row under the merged table's shape as the sink knows it now (its keys read downstream)."""
        sink = self.sink
        return replace(row, table_schema=sink._keys.shape(row.table_schema, sink._read_unique_indexes))

    def open(self) -> None:
        """The lock tables created, this source's shard list registered, the locks loaded as committed."""
        store, source = self.store, self.sink.config.changefeed_id

        def setup(conn: Connection) -> dict[tuple[str, str], ShardLock]:
            store.ensure(conn)
            conn.begin()
            store.register(conn, source, self.sink.config.shard_members)
            conn.commit()
            return store.locks(conn)

        self.locks = self.sink._with_retry(self.sink._workers[0], "load shard DDL locks", setup)
        for lock in self.locks.values():
            log.info(
                "shard DDL lock pending changefeed=%s target=%s state=%s ddl=%s done=%s",
                source,
                ".".join(lock.target),
                lock.state,
                clip(lock.ddl),
                sorted(lock.done),
            )

    def held_shard(self, table: TableSchema) -> ShardKey | None:
        """The shard of rows a lock holds (DM: a shard that ran the pending DDL), None for rows to apply."""
        if table.origin is None:
            return None
        lock = self.locks.get((table.schema, table.table))
        if lock is None or lock.state == RELEASED:
            return None
        shard = (self.sink.config.changefeed_id, *table.origin)
        return shard if shard in lock.done else None

    def hold(self, row: RowChange) -> bool:
        """Hold ``row`` if its shard ran the pending DDL of its merged table (DM); False: apply it."""
        shard = self.held_shard(row.table_schema)
        if shard is None:
            return False
        self.held.append((shard, row))
        self.sink._count_pending(1, row.commit_ts, row.position)
        return True

    def hold_segment(self, rows: TableRows, start: int, seg: Segment) -> bool:
        """`hold` for a segment of a row block (one table, one shard): all its rows or none."""
        shard = self.held_shard(rows.table_schema)
        if shard is None:
            return False
        entry = BlockRows(rows, start, seg)
        self.held.extend((shard, row) for row in expand([entry]))
        self.sink._count_pending(seg.rows, seg.commit_ts, entry.last_position)
        return True

    def ddl(self, ddl: ShardDDL) -> bool:
        """A shard's DDL under DM's pessimistic mode; False: apply it as usual (a shard's CREATE TABLE)."""
        store = self.store
        target = (ddl.schema, ddl.table)
        shard = (self.sink.config.changefeed_id, *ddl.shard)
        action = ddl.action
        if action == ActionType.CREATE_TABLE:
            # DM: a shard created later joins its merged table's shard group (the lock waits for it).
            self._coordinated("register shard", lambda c: store.add_member(c, target, shard))
            return False
        checkpoint = self.sink._ddl_checkpoint(ddl)
        lock = self.locks.get(target)
        if action == ActionType.DROP_TABLE:
            self._drop_shard(store, ddl, shard, checkpoint)
        elif lock is not None and lock.state == WAITING and shard in lock.done:
            self._queue(store, lock, ddl, shard, checkpoint)
        else:
            self._shard_lock_step(store, ddl, shard, checkpoint)
        self.sink._checkpoint_saved(checkpoint, "the shard DDL")
        return True

    def _queue(
        self, store: ShardLockStore, lock: ShardLock, ddl: ShardDDL, shard: ShardKey, checkpoint: Checkpoint
    ) -> None:
        """DM: a shard that ran the pending DDL waits whole, its next DDL too: queued after its held rows
        (the held table, with the checkpoint), replayed in order at the release (`_replay_held`).

        One source only: the lock table keeps one lock a merged table, and another source's held rows of
        the released lock would share it with the next one; with several, the DDL is refused as before."""
        target, source = lock.target, self.sink.config.changefeed_id
        members: set[ShardKey] = set()

        def queue(conn: Connection) -> None:
            members.update(store.members(conn, target))
            others = sorted({s[0] for s in members} - {source})
            if others:
                why = (
                    "runs another DDL before the pending one was applied (it waits in the shard's queue only when "
                    f"one source feeds the merged table; other sources: {', '.join(others)})"
                )
                raise conflict(lock, members, shard, ddl.query, why)
            store.hold(conn, source, [(shard, ddl)])

        try:
            self.sink._apply_transaction(self.sink._workers[0], [], checkpoint, queue)
        except ShardDDLConflictError as exc:
            report_shard_ddl(ddl, f"conflict: {exc.message}")
            raise
        report_shard_ddl(ddl, f"queued: behind the pending DDL {clip(lock.ddl, 120)} ({describe(lock, members)})")
        self.sink._fault("shard-queued", {"commit_ts": ddl.commit_ts, "target": ".".join(target)})

    def _shard_lock_step(self, store: ShardLockStore, ddl: ShardDDL, shard: ShardKey, checkpoint: Checkpoint) -> None:
        """DM: the first shard opens the lock, the next ones join it, the last one releases it.

        Decided in one transaction on the stored lock, row-locked: the lock as every source left it."""
        target = (ddl.schema, ddl.table)
        decided: list[tuple[ShardLock, bool, set[ShardKey]]] = []

        def decide(conn: Connection) -> None:
            decided.clear()
            lock = store.lock_of(conn, target, for_update=True)
            members = store.members(conn, target) | {shard}
            stored = self.sink.checkpoint_table.load(conn, self.sink.config.changefeed_id)
            if lock is not None and stored is not None and stored.commit_ts >= ddl.commit_ts:
                decided.append((lock, False, members))  # a retry after the commit's answer was lost: held
                return
            step = pessimistic(lock, members, shard, ddl.query, target, ddl.commit_ts)
            lock = step.lock
            if step.release and lock.state != APPLYING:
                # Before the DDL (not transactional) runs: the columns it starts from, for a restart.
                lock = replace(lock, state=APPLYING, columns=read_columns(conn, *target))
            store.save(conn, lock)
            if not step.release:  # DM: not the last shard: the DDL waits, the shard's rows are held
                self.sink.checkpoint_table.save(conn, self.sink.config.changefeed_id, checkpoint)
            decided.append((lock, step.release, members))

        try:
            self.sink._apply_transaction(self.sink._workers[0], [], None, decide)
        except ShardDDLConflictError as exc:
            report_shard_ddl(ddl, f"conflict: {exc.message}")
            raise
        lock, release, members = decided[-1]
        self.locks[target] = lock
        if release:
            self._release(store, lock, ddl, checkpoint)
            return
        report_shard_ddl(ddl, f"held: {describe(lock, members)}")
        self.sink._fault("shard-held", {"commit_ts": ddl.commit_ts, "target": ".".join(target)})

    def take_released(self) -> None:
        """Several sources: another source ran the last shard's DDL (DM: the lock's owner executes it, the
        others are told); this source applies its held rows of that table now and stops holding them."""
        store = self.store
        source = self.sink.config.changefeed_id
        mine = [t for t, k in self.locks.items() if k.state != APPLYING and any(s[0] == source for s in k.done)]
        for target in mine:
            self._take_released_one(store, target)

    def _take_released_one(self, store: ShardLockStore, target: tuple[str, str]) -> None:
        source = self.sink.config.changefeed_id
        state = self._coordinated("read shard DDL lock", lambda c: store.state(c, target))
        if state not in (None, RELEASED):
            return
        self.sink._drain()  # the held rows of transactions in flight are stored first
        self.sink._keys.forget()
        held = self._coordinated("read held rows", lambda c: store.held_rows(c, target, source))
        rows = [self._shaped(r) for r in held]
        self.sink._apply_transaction(self.sink._workers[0], rows, None, lambda c: store.clear(c, target, source))
        lock = self.locks.pop(target)
        # Rows of this batch held for the table: all its shards had run the DDL, so none of its rows is in
        # the buffer; they go there now, in their order.
        keep: list[tuple[ShardKey, RowChange]] = []
        for shard, row in self.held:
            ts = row.table_schema
            if (ts.schema, ts.table) == target:
                self.sink._buffer.append(self._shaped(row))
            else:
                keep.append((shard, row))
        self.held = keep
        observer().shard_ddl(
            ".".join(target),
            ", ".join(".".join(s[1:]) for s in sorted(lock.done) if s[0] == source),
            lock.ddl,
            f"released: run by another source, {len(rows)} held rows of this source applied",
            lock.commit_ts,
        )

    def _drop_shard(self, store: ShardLockStore, ddl: ShardDDL, shard: ShardKey, checkpoint: Checkpoint) -> None:
        """DM: a shard's DROP TABLE is not run on the merged table; the shard leaves its shard group, and a
        lock that waited only for it is released."""
        target = (ddl.schema, ddl.table)
        decided: list[tuple[ShardLock | None, bool]] = []

        def leave(conn: Connection) -> None:
            """Decided on the row-locked lock, as `_shard_lock_step` does: a source joining or running the
            last shard's DDL at the same moment decides before or after this, never beside it."""
            decided.clear()
            lock = store.lock_of(conn, target, for_update=True)
            members = store.members(conn, target) - {shard}
            release = lock is not None and lock.state != RELEASED and bool(lock.done) and not lock.waiting(members)
            store.remove_member(conn, target, shard)
            if not release:  # released: the checkpoint moves with the release (a crash before it replays this DROP)
                self.sink.checkpoint_table.save(conn, self.sink.config.changefeed_id, checkpoint)
            decided.append((lock, release))

        self.sink._apply_transaction(self.sink._workers[0], [], None, leave)
        lock, release = decided[-1]
        report_shard_ddl(ddl, "skipped: a dropped shard leaves its merged table's shard list")
        if release and lock is not None:
            self._release(store, lock, replace(ddl, query=lock.ddl, ddl_type=int(ActionType.ADD_COLUMN)), checkpoint)

    def _release(self, store: ShardLockStore, lock: ShardLock, ddl: ShardDDL, checkpoint: Checkpoint) -> None:
        """DM: the last shard ran the DDL: run it once on the merged table, apply the held rows, clear the lock.

        The DDL is not transactional: the lock is first marked APPLYING with the merged table's columns,
        so a restart that finds the columns changed knows the DDL ran and does not run it twice.
        """
        target = lock.target
        session = self.sink._workers[0]
        read = "read merged table columns"
        if lock.state != APPLYING:
            columns = self._coordinated(read, lambda c: read_columns(c, *target))
            lock = replace(lock, state=APPLYING, columns=columns)
            marked = lock
            self.sink._apply_transaction(session, [], None, lambda c: store.save(c, marked))
            self.locks[target] = lock
        now = self._coordinated(read, lambda c: read_columns(c, *target))
        if lock.columns is not None and now != dict(lock.columns):
            skipped: str | None = "run before a restart (the merged table's columns had changed)"
        else:
            skipped = self.sink._execute_ddl(replace(ddl, query=lock.ddl))
        self.sink._log_ddl(ddl, skipped)
        self.sink._fault(
            "shard-ddl", {"commit_ts": ddl.commit_ts, "target": ".".join(target), "skipped": bool(skipped)}
        )
        self.sink._keys.forget()
        applied, queued = self._replay_held(store, lock, checkpoint)
        report_shard_ddl(
            ddl,
            f"released: the DDL ran once every shard had run it ({len(lock.done)} shards), "
            f"{applied} held rows applied" + (f"; DDL {skipped}" if skipped else ""),
        )
        nxt = self.locks.get(target)
        if nxt is not None:
            members = self._coordinated("read shard list", lambda c: store.members(c, target))
            for event in queued:  # DM: the shards' queued DDL opened (or joined) the next lock
                report_shard_ddl(event, f"held: {describe(nxt, members | nxt.done)}")

    def _replay_held(
        self, store: ShardLockStore, lock: ShardLock, checkpoint: Checkpoint
    ) -> tuple[int, list[ShardDDL]]:
        """DM: the lock resolved, each shard's held queue goes on in order (`shardlock.replay`): rows applied,
        a queued DDL opening or joining the next lock, its shard's later entries held for that lock.

        One transaction with the checkpoint: the rows applied, their entries deleted, the lock cleared and
        the next one saved; a crash before it commits replays the release whole. Returns the rows applied
        and the queued DDLs taken by the next lock."""
        target, source = lock.target, self.sink.config.changefeed_id
        entries = self._coordinated("read held rows", lambda c: store.held_events(c, target, source))
        plan = self._replay_plan(store, target, entries)
        taken = [entries[i] for i in plan.taken]
        rows = [self._shaped(e) for _, _, e in taken if isinstance(e, RowChange)]
        queued = [e for _, _, e in taken if not isinstance(e, RowChange)]
        nxt = plan.lock
        ids = None if nxt is None else [i for i, _, _ in taken]

        def clear(conn: Connection) -> None:
            gone = store.clear(conn, target, source, ids)
            if nxt is None:
                return
            if not gone:
                raise SinkError(
                    f"shard DDL lock of {'.'.join(target)}: another source still holds rows of the released DDL, "
                    f"the queued DDL {clip(nxt.ddl)} cannot open the next lock"
                )
            store.save(conn, nxt)

        self.sink._apply_transaction(self.sink._workers[0], rows, checkpoint, clear)
        # The held rows were counted in stats when they were held.
        if nxt is None:
            del self.locks[target]
        else:
            self.locks[target] = nxt
        return len(rows), queued

    def _replay_plan(
        self, store: ShardLockStore, target: tuple[str, str], entries: list[tuple[int, ShardKey, Held]]
    ) -> Replay:
        """`shardlock.replay` over the held queue (every entry taken when no DDL is queued)."""
        queue = [(shard, None if isinstance(e, RowChange) else e.query, e.commit_ts) for _, shard, e in entries]
        if all(q is None for _, q, _ in queue):
            return Replay(tuple(range(len(entries))), None)
        members = self._coordinated("read shard list", lambda c: store.members(c, target))
        try:
            plan = replay(queue, members, target)
        except ShardDDLConflictError as exc:  # reported on the queue's first DDL; the message names both
            for _, _, event in entries:
                if isinstance(event, ShardDDL):
                    report_shard_ddl(event, f"conflict: {exc.message}")
                    break
            raise
        if plan.release:
            # Only a dropped shard's release gets here: every remaining shard had queued the next DDL.
            raise SinkError(
                f"shard DDL lock of {'.'.join(target)}: the queued DDL {clip(plan.lock.ddl if plan.lock else '')} "
                "would be released at once by the replay of the held queue (every remaining shard queued it after "
                "a dropped shard released the previous lock); not supported yet: run it on the merged table by hand, "
                "clear the shard lock tables and restart from the checkpoint"
            )
        return plan
