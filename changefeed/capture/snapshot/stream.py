"""Existing rows first, then the binlog: the whole hand-over as one event stream.

`snapshot_then_binlog` reads every chunk of the given tables (``parallelism`` chunks at a time,
each with its own watermarks, `reader.SnapshotReader`), emits each chunk's rows as INSERTs at the
chunk's commit ts followed by a `Resolved`, then opens the binlog at the earliest low watermark
and lets `handover.Handover` drop or halve the changes a chunk already holds, until the stream
passes the last high watermark.

Commit timestamps: a chunk's rows carry the TSO of the moment its high watermark was read (made
strictly increasing along the emitted chunks); the binlog capture then starts its `CommitClock`
at the last of them, so every binlog change after the snapshot sorts after every snapshot row and
no sink's "at or below my checkpoint" replay rule can drop one (TiCDC's resolved-ts meaning).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from ...model.events import Event, Op, Resolved, RowChange
from ...model.tso import CommitClock
from ..binlog.position import BinlogPosition
from .handover import Handover, TableCut
from .reader import ChunkResult, DatabaseOrder, SnapshotReader, TablePlan, position_key

log = logging.getLogger(__name__)

OpenCapture = Callable[[BinlogPosition], Iterable[Event]]
"""The binlog capture's events from a start position (e.g. `binlog.live_capture(url, start).events()`)."""


def read_chunks(reader: SnapshotReader, plans: Sequence[TablePlan], parallelism: int = 1) -> Iterator[ChunkResult]:
    """Every chunk of ``plans`` in plan order, ``parallelism`` read at a time (each a short read of its own)."""
    jobs = [(plan, i) for plan in plans for i in range(len(plan.ranges))]
    if parallelism <= 1:
        for plan, i in jobs:
            yield reader.read_chunk(plan, i)
        return
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="snapshot") as pool:
        yield from pool.map(lambda job: reader.read_chunk(*job), jobs)


def snapshot_events(results: Iterable[tuple[TablePlan, ChunkResult]], clock: CommitClock) -> Iterator[Event]:
    """Each chunk's rows as INSERTs at the chunk's commit ts (strictly increasing), then a `Resolved`."""
    for plan, chunk in results:
        ts = clock.next(chunk.commit_ts >> 18)
        chunk.commit_ts = ts
        for row in chunk.rows:
            yield RowChange(Op.INSERT, plan.schema, ts, new=row)
        yield Resolved(ts, position={"snapshot": {"table": list(plan.name), "chunk": chunk.index}})


def snapshot_then_binlog(
    reader: SnapshotReader,
    tables: Sequence[tuple[str, str]],
    open_capture: OpenCapture,
    *,
    parallelism: int = 1,
    binlog: bool = True,
) -> Iterator[Event]:
    """The tables' rows, then the binlog from the earliest low watermark through the hand-over (module docstring).

    ``binlog=False`` is Debezium's ``initial_only``: the snapshot alone, ending with its `Resolved`.
    """
    plans = [reader.plan(schema, table) for schema, table in tables]
    clock = CommitClock()
    done: dict[tuple[str, str], list[ChunkResult]] = {p.name: [] for p in plans}
    by_name = {p.name: p for p in plans}

    def results() -> Iterator[tuple[TablePlan, ChunkResult]]:
        for chunk in read_chunks(reader, plans, parallelism):
            done[chunk.table].append(chunk)
            yield by_name[chunk.table], chunk

    yield from snapshot_events(results(), clock)
    if not binlog or not plans:
        return
    chunks = [c for cs in done.values() for c in cs]
    start = min((c.low for c in chunks), key=position_key)
    log.info("snapshot done: %d chunks of %d tables; binlog from %s", len(chunks), len(plans), start)
    cuts = {
        name: TableCut(
            by_name[name].key,
            by_name[name].boundaries,
            [position_key(c.high) for c in sorted(cs, key=lambda c: c.index)],
            reader.order(by_name[name].schema, by_name[name].key),
        )
        for name, cs in done.items()
    }
    handover = Handover(cuts)
    try:
        yield from _binlog(handover, open_capture, replace(start, clock=clock.last))
    finally:
        for cut in cuts.values():
            if isinstance(cut.order, DatabaseOrder):
                cut.order.close()


def _binlog(handover: Handover, open_capture: OpenCapture, start: BinlogPosition) -> Iterator[Event]:
    """The binlog from ``start``, through the hand-over until it has passed every high watermark."""
    return handed_over(handover, open_capture(start))


def handed_over(handover: Handover, events: Iterable[Event]) -> Iterator[Event]:
    """A binlog capture's ``events`` (a `Resolved` after each transaction), through ``handover``
    until they pass its last high watermark."""
    pending: list[Event] = []
    for ev in events:
        if handover.until is None:
            yield ev
            continue
        pending.append(ev)
        if isinstance(ev, Resolved):  # whole transactions at a time: one rank query per table each
            yield from _handed_over(handover, pending)
            pending = []
            if ev.position is not None and handover.passed(position_key(ev.position)):
                handover.until = None  # past every high watermark: nothing left to check
    yield from _handed_over(handover, pending)


def _handed_over(handover: Handover, events: list[Event]) -> Iterator[Event]:
    """``events`` in order, each row change replaced by what the hand-over makes of it."""
    rows = [e for e in events if isinstance(e, RowChange)]
    fate = iter(handover.outcomes(rows, lambda e: position_key(e.position or {})))
    for e in events:
        out = next(fate) if isinstance(e, RowChange) else e
        if out is not None:
            yield out
