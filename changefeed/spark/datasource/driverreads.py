"""A micro-batch's Kafka ranges read on the driver itself (the kafka input's ``output=ranges``).

Why: where the apply job decodes on the driver (`MessageDecoder`, local masters with few cores),
the range tasks only carried bytes: each message went librdkafka -> a Python worker -> an
LZ4-compressed Arrow envelope -> a file (through the JVM and a second Python stage) -> the
driver, ~11 µs of CPU a row of Open Protocol in the JVM and the workers (bench/RESULTS.md) on
cores the MariaDB server and the broker need too: as much as decoding, merging and rendering
together. Spark still plans each batch's ranges (offsets, the commit log, exactly-once); its
tasks hand over only (partition, start, end), and the driver reads those offsets here, one
thread per Kafka partition (librdkafka fetches without the GIL), while it decodes what came.

`DriverReads` hands the messages over as `MESSAGE_SCHEMA` tables of up to ``chunk`` messages,
each partition's in offset order, the partition handed the fewest first (`Arriving`: ``poll``
never waits, ``next`` does), so the apply job's merge (`MergeStage.merge_arrivals`) takes them
as it takes task output. A batch holds at most the batch's messages (``maxEventsPerTrigger``),
as the whole-batch collect did, and each reader stops `READ_AHEAD` tables ahead of the merge.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence

import pyarrow as pa

from ...consume.kafka import RANGE_CONSUMERS, read_range
from ...errors import CaptureError
from .kafka import MESSAGE_SCHEMA

#: Messages per table handed over: ~8k rows of Open Protocol, so decoding starts early.
READ_MESSAGES = 512
#: Tables a reader may have read ahead of the merge: a reader waits past it (memory stays bounded
#: whatever ``maxEventsPerTrigger`` allows; the merge takes any partition's tables, so none waits forever).
READ_AHEAD = 16
_WAIT_S = 0.05  # how long `next` sleeps between looks when nothing came (a reader also wakes it)


class DriverReads:
    """The messages of ``ranges`` ((partition, start, end) rows of a batch), read here by threads.

    ``close`` must follow (it stops the readers and waits for them), also after an error."""

    def __init__(
        self,
        servers: str,
        topic: str,
        ranges: pa.Table,
        client_config: Mapping[str, str] | None = None,
        chunk: int = READ_MESSAGES,
        ahead: int = READ_AHEAD,
    ) -> None:
        self.topic = topic
        self._chunk = chunk
        self._ahead = ahead
        per: dict[int, list[tuple[int, int]]] = {}
        columns = (ranges.column(n).to_pylist() for n in ("partition", "start", "end"))
        for partition, start, end in sorted(zip(*columns, strict=True)):
            if end > start:
                per.setdefault(partition, []).append((start, end))
        self._ready: dict[int, deque[pa.Table]] = {p: deque() for p in per}
        self._handed: dict[int, int] = dict.fromkeys(per, 0)
        self._reading = set(per)  # partitions whose reader has not ended
        self._error: BaseException | None = None
        self._stop = False
        self._woken = threading.Condition()
        self._threads = [
            threading.Thread(
                target=self._read,
                args=(servers, dict(client_config or {}), p, spans),
                name=f"changefeed-read-{topic}[{p}]",
                daemon=True,
            )
            for p, spans in per.items()
        ]
        for thread in self._threads:
            thread.start()

    def _read(
        self, servers: str, client_config: dict[str, str], partition: int, spans: Sequence[tuple[int, int]]
    ) -> None:
        try:
            with RANGE_CONSUMERS.consumer(servers, client_config) as consumer:
                for start, end in spans:
                    offsets: list[int] = []
                    keys: list[bytes | None] = []
                    values: list[bytes | None] = []
                    for msg in read_range(consumer, self.topic, partition, start, end):
                        offsets.append(msg.offset())
                        keys.append(msg.key())
                        values.append(msg.value())
                        if len(offsets) >= self._chunk:
                            if not self._put(partition, offsets, keys, values):
                                return
                            offsets, keys, values = [], [], []
                    if offsets and not self._put(partition, offsets, keys, values):
                        return
        except BaseException as exc:  # raised on the driver's thread by `poll`/`next`
            with self._woken:
                if self._error is None:
                    self._error = exc
                self._woken.notify_all()
        finally:
            with self._woken:
                self._reading.discard(partition)
                self._woken.notify_all()

    def _put(self, partition: int, offsets: list[int], keys: list[bytes | None], values: list[bytes | None]) -> bool:
        """Hand a table over once the merge is fewer than ``ahead`` behind; False: stop reading."""
        table = pa.Table.from_arrays(
            [
                pa.array([partition] * len(offsets), pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
            ],
            schema=MESSAGE_SCHEMA,
        )
        with self._woken:
            while len(self._ready[partition]) >= self._ahead and not self._stop:
                self._woken.wait()
            if self._stop:
                return False
            self._ready[partition].append(table)
            self._woken.notify_all()
        return True

    def _raise(self) -> None:
        """A reader's error, on the driver's thread (caller holds the lock)."""
        if self._error is not None:
            error, self._error = self._error, None
            self._stop = True
            if isinstance(error, CaptureError):
                raise error
            raise CaptureError(f"kafka: reading the batch's ranges failed: {error}", where=self.topic) from error

    def _hand(self, partition: int) -> tuple[int, pa.Table]:
        self._handed[partition] += 1
        self._woken.notify_all()  # its reader may wait for room
        return partition, self._ready[partition].popleft()

    def poll(self) -> tuple[int, pa.Table] | None:
        """A table that is here now (of the partition handed over least), or None (none yet, or none any more)."""
        with self._woken:
            self._raise()
            ready = [p for p, tables in self._ready.items() if tables]
            return self._hand(min(ready, key=lambda p: (self._handed[p], p))) if ready else None

    def next(self) -> tuple[int, pa.Table] | None:
        """The next table of the partition handed over least of those with more to come, waiting for it
        (as a batch's tasks end in order: no partition runs ahead while the merge waits for another);
        None once every range was read and handed over."""
        with self._woken:
            while True:
                self._raise()
                more = [p for p, tables in self._ready.items() if tables or p in self._reading]
                if not more:
                    return None
                partition = min(more, key=lambda p: (self._handed[p], p))
                if self._ready[partition]:
                    return self._hand(partition)
                self._woken.wait(_WAIT_S)

    def close(self) -> None:
        """Stop the readers (left early: each ends at its next chunk) and wait for them."""
        with self._woken:
            self._stop = True
            self._woken.notify_all()
        for thread in self._threads:
            thread.join()
        with self._woken:
            self._ready.clear()
