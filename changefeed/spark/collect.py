"""A micro-batch's task output handed to the driver one Spark partition at a time, in partition order.

Why: ``toArrow`` returns once the last task has ended, so the driver (the capture job producing
to Kafka, the apply job decoding and merging Kafka messages) waited through the whole task phase
and the tasks' cores waited through the driver's: on 2 cores the two phases ran in series, and the
last wave of tasks often ran on one core. Spark's own result stream
cannot hand a partition over early: its Arrow collect writes each partition as its task ends, but
through a buffered socket that nothing flushes until the next partition's bytes (measured: a
partition done at 0.5 s reached Python at 6.3 s, when the last task ended).

So where the executors share the driver's machine (``local[...]``, ``local-cluster``), each task
writes its envelopes to one Arrow IPC file in a private directory of the driver's (written under a
temporary name and renamed: a file that exists is whole) and hands Spark only a marker; the driver
runs the job in a thread and reads partition k's file as soon as it and those before it exist,
while later tasks still run. The envelope bytes also skip the JVM (no conversion to rows and back).
A task attempt that is retried writes the same file again (its output is deterministic), so
reading either copy is the same. `partitions_in_order` waits for each partition in turn;
`Arrivals` also answers "is the next one here?" without waiting, for a driver with other work.
A killed driver's directory is removed by the next driver on the machine (its name holds the
process id). Elsewhere (a cluster, Spark Connect) the output is collected whole and handed over
partition by partition, as before.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CaptureError
from ..files.tempdirs import process_temp_dir
from .envelope import ENVELOPE_DDL, ENVELOPE_SCHEMA
from .ship import is_local_master

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Arrivals", "TaskOutput", "partitions_in_order"]

TaskOutput = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
"""A ``mapInArrow`` function whose output rows are envelopes (`ENVELOPE_SCHEMA`), ``part`` its partition."""

_POLL = (0.001, 0.02)  # seconds between looks for the next file: doubling from the first to the second


def partitions_in_order(df: DataFrame, fn: TaskOutput) -> Iterator[tuple[int, pa.Table]]:
    """``(part, envelopes)`` of ``df.mapInArrow(fn)``, one Spark partition at a time in partition order,
    each as soon as it and those before it are done (on this machine's executors; see the module doc).

    Leaving the iteration early is allowed: the job is waited for and its files removed."""
    arrivals = Arrivals(df, fn)
    try:
        while (item := arrivals.next()) is not None:
            yield item
    finally:
        arrivals.close()


class Arrivals:
    """`partitions_in_order` for a reader that has other work while it waits: `poll` never waits.

    ``close`` must follow (it waits for the job and removes its files), also after an error."""

    def __init__(self, df: DataFrame, fn: TaskOutput) -> None:
        self._part = 0
        self._ended = False
        self._job: _Job | None = None
        self._directory: Path | None = None
        self._whole: list[tuple[int, pa.Table]] = []
        context = getattr(df.sparkSession, "_sc", None)  # None: Spark Connect
        if context is None or not is_local_master(context.master or ""):
            self._whole = list(_split(df.mapInArrow(fn, ENVELOPE_DDL).toArrow()))
            return
        self._directory = Path(process_temp_dir(_PREFIX))
        self._job = _Job(df.mapInArrow(_to_file(fn, str(self._directory)), ENVELOPE_DDL))

    def poll(self) -> tuple[int, pa.Table] | None:
        """The next partition's output if it is there now; None if not (yet or any more)."""
        if self._ended:
            return None
        if self._job is None:
            return self._from_whole()
        assert self._directory is not None
        path = self._directory / _name(self._part)
        if not path.exists():
            return None
        self._part += 1
        return self._part - 1, _read(path, self._part - 1)

    def next(self) -> tuple[int, pa.Table] | None:
        """The next partition's output, waiting for it; None once every partition was handed over
        (the job's error, or markers that disagree with what was read, raised then)."""
        if self._job is None:
            item = self._from_whole()
            self._ended = item is None
            return item
        pause = _POLL[0]
        while not self._ended:
            finished = self._job.done()  # before the look: a job done by then wrote every file it will write
            item = self.poll()
            if item is not None:
                return item
            if finished:
                self._ended = True
                self._check(self._job)
                break
            time.sleep(pause)
            pause = min(pause * 2, _POLL[1])
        return None

    def _from_whole(self) -> tuple[int, pa.Table] | None:
        if self._part >= len(self._whole):
            return None
        self._part += 1
        return self._whole[self._part - 1]

    def _check(self, job: _Job) -> None:
        job.wait()
        if job.error is not None:
            raise job.error
        assert job.markers is not None
        parts = sorted(job.markers.column("part").to_pylist())
        if parts != list(range(len(parts))) or len(parts) != self._part:
            raise CaptureError(
                f"collect: the tasks reported partitions {parts[:5]}... ({len(parts)}), {self._part} were read",
                where="the collect",
            )

    def close(self) -> None:
        """Wait for the job (left early: its remaining tasks end first) and remove its files."""
        self._ended = True
        self._whole = []
        if self._job is not None:
            self._job.wait()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)


_PREFIX = "changefeed-collect-"


def _split(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    parts = table.column("part")
    for part in sorted(set(parts.to_pylist())):
        yield part, table.filter(pc.equal(parts, part))


def _name(part: int) -> str:
    return f"part-{part:06d}.arrow"


def _to_file(fn: TaskOutput, directory: str) -> TaskOutput:
    """``fn`` run in a task, its envelopes written to ``directory``; the task hands Spark one marker row."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        final = os.path.join(directory, _name(part))
        temporary = f"{final}.{context.attemptNumber() if context is not None else 0}.{os.getpid()}.tmp"
        rows = 0
        with pa.OSFile(temporary, "wb") as sink, pa.ipc.new_stream(sink, ENVELOPE_SCHEMA) as writer:
            for envelope in fn(batches):
                writer.write_batch(envelope)
                rows += envelope.num_rows
        os.replace(temporary, final)
        yield pa.RecordBatch.from_arrays(
            [pa.array([part], pa.int32()), pa.array([rows], pa.int32()), pa.array([b""], pa.binary())],
            schema=ENVELOPE_SCHEMA,
        )

    return task


class _Job:
    """The Spark job, run in a thread (its ``toArrow`` waits in the JVM, without the GIL): its markers or error."""

    _thread: threading.Thread

    def __init__(self, df: DataFrame) -> None:
        self.markers: pa.Table | None = None
        self.error: BaseException | None = None
        from pyspark.util import InheritableThread  # noqa: PLC0415

        # Inheritable: the batch's job group and properties (a query's stop cancels its jobs) come along.
        self._thread = InheritableThread(self._run, args=(df,), name="changefeed-collect", daemon=True)
        self._thread.start()

    def _run(self, df: DataFrame) -> None:
        try:
            self.markers = df.toArrow()
        except BaseException as exc:  # raised again by the driver's thread
            self.error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()


def _read(path: Path, part: int) -> pa.Table:
    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise CaptureError(f"collect: unreadable task output ({exc})", where=f"partition {part}") from None
    if table.schema != ENVELOPE_SCHEMA:
        raise CaptureError(f"collect: task output of {table.schema}, expected envelopes", where=f"partition {part}")
    return table
