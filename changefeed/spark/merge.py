"""The cross-partition merge of a ``kafka`` input, run in the apply job's foreachBatch.

Why here and not in the data source: resolved-ts gating needs every partition's resolved ts, and
rows read in one micro-batch may only be releasable in a later one (a partition whose watermark
has not arrived yet). So the merge needs state that outlives a batch. The data source's offsets
are plain per-partition Kafka offsets (each message is read exactly once, decoded in executors);
the `PartitionMerger` holding the unreleased rows is pickled after every batch, keyed by batch id,
into the job's checkpoint directory.

Exactly once: Spark re-runs a failed batch with the same id and offsets. `MergeStage.merge` starts
from the state saved after the previous batch, so the replay releases exactly what the first try
released; the sink skips commit ts at or below its own checkpoint (and applies idempotently).
The state of batch N is saved after the sink's flush and before foreachBatch returns, so Spark
never commits batch N's offsets without the rows it left pending being saved.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..consume import PartitionMerger
from ..errors import ChangefeedError
from ..model import Event, Resolved

log = logging.getLogger(__name__)

_KEEP = 3  # state files kept (the newest is what the next batch needs; older ones help debugging)


class MergeStage:
    """Feeds a batch's per-message events to a `PartitionMerger` restored for that batch id."""

    def __init__(self, state_dir: str | Path, topic: str, partitions: Sequence[int]) -> None:
        self.dir = Path(state_dir)
        self.topic = topic
        self.partitions = sorted(partitions)
        self._merger: PartitionMerger | None = None

    def _file(self, batch_id: int) -> Path:
        return self.dir / f"merger-{batch_id:012d}.pkl"

    def _restore(self, batch_id: int) -> PartitionMerger:
        """The state saved by the newest batch before ``batch_id`` (a fresh merger before the first)."""
        older = sorted(p for p in self.dir.glob("merger-*.pkl") if int(p.stem.split("-")[1]) < batch_id)
        if not older:
            return PartitionMerger(self.partitions)
        merger = pickle.loads(older[-1].read_bytes())  # our own file, in our checkpoint directory
        if not isinstance(merger, PartitionMerger):
            raise ChangefeedError(f"not a merge state: {older[-1]}")
        if sorted(merger.partitions) != self.partitions:  # type: ignore[type-var]
            raise ChangefeedError(
                f"kafka topic {self.topic!r} has partitions {self.partitions}, the saved merge state "
                f"{merger.partitions}: the topic was recreated or repartitioned; start a new checkpoint"
            )
        return merger

    def merge(self, events: list[Event], batch_id: int) -> list[Event]:
        """The events now released in commit-ts order, ending with a Resolved when the global ts advanced."""
        merger = self._restore(batch_id)
        keyed = [(int(ev.position["partition"]), int(ev.position["offset"]), ev) for ev in events if ev.position]
        keyed.sort(key=lambda item: item[:2])  # stable: a message's events keep their order
        i = 0
        while i < len(keyed):
            partition, offset, _ = keyed[i]
            j = i
            while j < len(keyed) and keyed[j][:2] == (partition, offset):
                j += 1
            if partition not in self.partitions:
                raise ChangefeedError(f"kafka topic {self.topic!r}: partition {partition} appeared mid-stream")
            merger.feed(partition, [e for _, _, e in keyed[i:j]], offset)
            i = j
        out = merger.ready()
        if out and isinstance(out[-1], Resolved):
            checkpoint: dict[Any, int] = merger.checkpoint()
            offsets = {str(p): o for p, o in checkpoint.items()}
            out[-1] = Resolved(out[-1].commit_ts, position={"topic": self.topic, "offsets": offsets})
        self._merger = merger
        log.debug(
            "kafka merge batch=%d released=%d buffered=%d global_resolved=%d",
            batch_id,
            len(out),
            merger.buffered(),
            merger.global_resolved,
        )
        return out

    def commit(self, batch_id: int) -> None:
        """Save the state after ``batch_id`` (atomically), once the sink made the batch durable."""
        if self._merger is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self._file(batch_id)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self._merger, protocol=pickle.HIGHEST_PROTOCOL))
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        tmp.replace(target)
        for old in sorted(self.dir.glob("merger-*.pkl"))[:-_KEEP]:
            old.unlink(missing_ok=True)
        self._merger = None
