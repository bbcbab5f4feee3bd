"""Shard DDL coordination, DM's pessimistic mode: a merged table's DDL waits for every shard.

DM's rules (``shard-mode = "pessimistic"``), which this module decides and the MySQL sink applies
(`changefeed.sink.mysql.shardlock` keeps the state downstream):

* the first shard of a merged table to run a DDL opens a *lock* on the table: the DDL is not run
  downstream yet, and from then on that shard's rows (already in the new shape) are held;
* shards that have not run it go on applying their rows (old shape, which the merged table has);
* each next shard running the *same* DDL (the routed text, normalised by sqlglot) joins the lock;
* when the last shard of the table (of every source feeding it) runs it, the DDL runs once on the
  merged table, then the held rows are applied in commit order and the lock is cleared;
* a different DDL from a shard while the lock is pending stops the job, naming the table, the
  shards and both DDLs (DM: "detect inconsistent DDL sequence");
* a shard that ran the pending DDL waits whole: its later DDL is queued with its held rows, and on
  the release its queue goes on in order (`replay`): rows applied, a queued DDL opening or joining
  the next lock, after which that shard's later entries stay held for it.

The functions here are pure: the lock and the shard list are passed in, the decision comes out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..errors import clip
from .shardddl import ShardDDLConflictError

TableName = tuple[str, str]
ShardKey = tuple[str, str, str]  # (source: the changefeed id, schema, table) of one upstream shard

WAITING = "waiting"  # the lock collects shards; their rows are held
APPLYING = "applying"  # every shard ran the DDL: it is being run downstream, then the rows released
RELEASED = "released"  # run downstream; other sources still have held rows to apply


@dataclass(frozen=True)
class ShardLock:
    """A pending DDL of one merged table (DM's shard DDL lock)."""

    target: TableName
    ddl: str  # the routed DDL text of the first shard (what runs downstream)
    norm: str  # its normalised form: what the other shards' DDL must equal
    commit_ts: int  # the first shard's DDL
    done: frozenset[ShardKey] = frozenset()  # shards that ran it (rows held)
    state: str = WAITING
    #: The merged table's columns when the DDL was about to run (state APPLYING): a restart finds
    #: the DDL done when the columns differ, and does not run it twice.
    columns: Mapping[str, str] | None = field(default=None, compare=False)

    def waiting(self, members: Collection[ShardKey]) -> tuple[ShardKey, ...]:
        """The shards still to run the DDL."""
        return tuple(sorted(set(members) - self.done))


@dataclass(frozen=True)
class Step:
    """What a shard's DDL does under a lock: ``release`` (run it now, every shard ran it) or hold."""

    lock: ShardLock
    release: bool
    waiting: tuple[ShardKey, ...] = ()


def normalise_ddl(query: str) -> str:
    """What the shards' DDLs are compared by (DM compares the routed DDL of each shard with the lock's): the
    DDL text sqlglot renders back (case, spaces, quoting and comments do not count); the text
    itself, spaces collapsed, for a statement sqlglot cannot read."""
    from .ddlrewrite import parse_statement  # noqa: PLC0415 - sqlglot only when DDL is coordinated

    tree = parse_statement(query)
    if tree is None:
        return " ".join(query.split()).lower()
    return str(tree.sql(dialect="mysql", normalize=True, identify=True, comments=False)).lower()


def shard_name(shard: ShardKey) -> str:
    source, schema, table = shard
    return f"{schema}.{table}" + (f" (source {source})" if source else "")


def pessimistic(
    lock: ShardLock | None,
    members: Collection[ShardKey],
    shard: ShardKey,
    query: str,
    target: TableName,
    commit_ts: int,
) -> Step:
    """The lock after ``shard`` ran ``query`` (routed) on ``target``; ``members``: every shard of the target.

    Raises `ShardDDLConflictError` for a DDL other than the pending one (DM stops the task there too), and
    for a second DDL from a shard done while the lock waits: the sink queues that one instead (`replay`).
    """
    norm = normalise_ddl(query)
    if lock is None:
        lock = ShardLock(target, query, norm, commit_ts)  # DM: the first shard's DDL opens the lock
    elif lock.norm != norm or (shard in lock.done and lock.state == WAITING):
        raise conflict(lock, members, shard, query)
    done = lock.done | {shard}
    lock = replace(lock, done=done)
    waiting = lock.waiting({*members, shard})
    return Step(lock, release=not waiting, waiting=waiting)


@dataclass(frozen=True)
class Replay:
    """A released lock's held queue, replayed: the entries that leave it (rows to apply, DDLs taken by
    the next lock), in order; the next lock its DDLs opened; whether that lock is released at once."""

    taken: tuple[int, ...]
    lock: ShardLock | None
    release: bool = False


def replay(
    queue: Sequence[tuple[ShardKey, str | None, int]], members: Collection[ShardKey], target: TableName
) -> Replay:
    """DM: once a lock is resolved, each shard's held queue goes on in order. ``queue``: (shard, DDL text or
    None for a row, commit ts) in commit order. A queued DDL goes through `pessimistic` (opens or joins
    the next lock; `ShardDDLConflictError` as live); from then on its shard's later entries stay held.
    Stops at a DDL that releases the next lock at once (``release``: that DDL is the last entry taken)."""
    lock: ShardLock | None = None
    taken: list[int] = []
    for i, (shard, query, commit_ts) in enumerate(queue):
        if lock is not None and shard in lock.done:
            continue  # DM: behind the next lock, held for it
        taken.append(i)
        if query is None:
            continue
        step = pessimistic(lock, members, shard, query, target, commit_ts)
        lock = step.lock
        if step.release:
            return Replay(tuple(taken), lock, release=True)
    return Replay(tuple(taken), lock)


def conflict(
    lock: ShardLock, members: Collection[ShardKey], shard: ShardKey, query: str, why: str | None = None
) -> ShardDDLConflictError:
    """DM's "inconsistent DDL": the error that stops the job, with everything an operator needs."""
    target = ".".join(lock.target)
    if why is None:
        again = shard in lock.done
        why = "runs another DDL before the pending one was applied" if again else "runs a different DDL"
    return ShardDDLConflictError(
        f"shard DDL conflict (pessimistic mode) on merged table {target}: shard {shard_name(shard)} {why}; "
        f"pending DDL: {clip(lock.ddl)}; this DDL: {clip(query)}; "
        f"shards done: {', '.join(shard_name(s) for s in sorted(lock.done)) or '-'}; "
        f"shards waiting: {', '.join(shard_name(s) for s in lock.waiting(members)) or '-'}. "
        f"Every shard of a merged table must run the same DDL, in the same order"
    )


def describe(lock: ShardLock, members: Collection[ShardKey]) -> str:
    """A lock for status and logs: the shards done and those waiting."""
    done = ", ".join(shard_name(s) for s in sorted(lock.done)) or "-"
    waiting = ", ".join(shard_name(s) for s in lock.waiting(members)) or "-"
    return f"done: {done}; waiting: {waiting}"


__all__ = [
    "APPLYING",
    "RELEASED",
    "WAITING",
    "Replay",
    "ShardKey",
    "ShardLock",
    "Step",
    "conflict",
    "describe",
    "normalise_ddl",
    "pessimistic",
    "replay",
    "shard_name",
]
