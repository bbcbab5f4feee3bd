"""The jobs' foreachBatch body (`_BatchRunner`): when a batch is made durable and its stage committed.

No Spark: the runner takes any DataFrame-like object; a sink and a stage that record what they are told.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from changefeed.errors import ChangefeedError
from changefeed.model import Resolved
from changefeed.spark.jobs import Plan, _BatchRunner


class _Pending:
    def __init__(self, ts: int) -> None:
        self.ts = ts
        self.ready = False
        self.error: Exception | None = None
        self.waited = 0

    def done(self) -> bool:
        return self.ready

    def wait(self) -> int:
        self.waited += 1
        if self.error is not None:
            raise self.error
        return self.ts


class _Sink:
    kind = "mysql"

    def __init__(self) -> None:
        self.log: list[str] = []
        self.ts = 0
        self.handed: list[_Pending] = []

    def open(self) -> int:
        return 0

    def write(self, batch: Any) -> None:
        for event in batch:
            self.ts = max(self.ts, event.commit_ts)

    def flush(self) -> int:
        self.log.append("flush")
        for pending in self.handed:
            pending.ready = True
        return self.ts

    def flush_async(self) -> _Pending:
        self.log.append("flush_async")
        self.handed.append(_Pending(self.ts))
        return self.handed[-1]

    def close(self) -> None:
        pass


class _Stage:
    def __init__(self, later: set[int]) -> None:
        self.later = later
        self.committed: list[int] = []

    def durable_later(self, batch_id: int) -> bool:
        return batch_id in self.later

    def commit(self, batch_id: int) -> None:
        self.committed.append(batch_id)

    def close(self) -> None:
        pass


def _runner(later: set[int]) -> tuple[_BatchRunner, _Sink, _Stage]:
    sink, stage = _Sink(), _Stage(later)
    plan = Plan(None, lambda df, batch_id: [[Resolved(100 * (batch_id + 1))]], sink.write, stage)  # type: ignore[arg-type]
    return _BatchRunner("apply", sink, plan, None), sink, stage


def test_a_batch_the_stage_allows_is_committed_by_the_next_batch_the_poll_loop_or_the_end() -> None:
    runner, sink, stage = _runner(later={1, 2, 3})
    runner(None, 0)  # type: ignore[arg-type]
    assert sink.log == ["flush"] and stage.committed == [0]
    runner(None, 1)  # type: ignore[arg-type]
    assert sink.log[-1] == "flush_async" and stage.committed == [0] and runner.stats.batches == 1
    runner.idle()  # still in flight: nothing waits
    assert stage.committed == [0] and sink.handed[0].waited == 0
    sink.handed[0].ready = True
    runner.idle()  # between batches, once durable
    assert stage.committed == [0, 1] and runner.stats.checkpoint_ts == 200 and runner.later is None
    runner(None, 2)  # type: ignore[arg-type]
    runner(None, 3)  # type: ignore[arg-type]  # batch 2 committed as 3 ends, whatever its state
    assert stage.committed == [0, 1, 2] and runner.stats.checkpoint_ts == 300
    runner.finish()  # the query ended: the last one waited for
    assert stage.committed == [0, 1, 2, 3] and runner.stats.checkpoint_ts == 400
    assert runner.stats.batch_ids == [0, 1, 2, 3]


def test_a_batch_waiting_is_made_durable_by_a_full_flush_first() -> None:
    runner, sink, stage = _runner(later={1})
    runner(None, 0)  # type: ignore[arg-type]
    runner(None, 1)  # type: ignore[arg-type]
    runner(None, 2)  # type: ignore[arg-type]  # not allowed later: its flush covers batch 1 too
    assert sink.log == ["flush", "flush_async", "flush"] and stage.committed == [0, 1, 2]


def test_a_failure_found_between_batches_is_raised_and_nothing_is_committed() -> None:
    runner, sink, stage = _runner(later={1})
    runner(None, 0)  # type: ignore[arg-type]
    runner(None, 1)  # type: ignore[arg-type]
    sink.handed[0].ready = True
    sink.handed[0].error = RuntimeError("the server refused batch 1")
    with pytest.raises(RuntimeError, match="refused batch 1"):
        runner.idle()
    assert stage.committed == [0] and runner.stats.batches == 1


def test_the_end_waits_for_a_batch_still_running_and_gives_up_after_its_timeout() -> None:
    """A stopped query's last foreachBatch may still run on Spark's callback thread: `finish` never
    commits beside it."""
    runner, sink, stage = _runner(later={1})
    runner(None, 0)  # type: ignore[arg-type]
    runner(None, 1)  # type: ignore[arg-type]
    sink.handed[0].ready = True
    runner._busy.acquire()  # a batch in progress elsewhere
    with pytest.raises(ChangefeedError, match="did not end within 0 s"):
        runner.finish(timeout=0.05)
    assert stage.committed == [0]
    threading.Timer(0.2, runner._busy.release).start()
    runner.finish(timeout=5)  # the batch ended: the one handed over is committed
    assert stage.committed == [0, 1]
