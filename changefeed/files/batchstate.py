"""A stateful pipeline's state saved with the job's checkpoint: online-DDL ALTERs awaiting their cut-over,
the merged tables' shapes of a router feeding a storage or lake sink (`dispatch.shardmerge`)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ChangefeedError
from .store import StateStore

__all__ = ["STATE_FILE", "BatchState", "pending_alters"]

#: The file of a stateful pipeline's state beside a Spark checkpoint.
STATE_FILE = "changefeed-pipeline.json"


def pending_alters(store: StateStore) -> list[dict[str, Any]]:
    """The online-DDL ALTERs waiting for their cut-over in a job's checkpoint (for ``status``)."""
    if store.read(STATE_FILE) is None:
        return []
    state = BatchState(store).for_batch(-2)  # the state after the last flushed batch
    pending = state.get("online-ddl", {}).get("pending", [])
    return [{"table": f"{s}.{t}", "alters": list(q)} for s, t, q in pending]


class BatchState:
    """A stateful pipeline's state in a JSON file next to the Spark checkpoint, consistent with its batches.

    The file holds the state after the last flushed batch ``N`` and the state before it. Spark
    replays batch ``N`` after a crash between our save and its own commit: that replay starts from
    the state before ``N``; any later batch from the state after it. So a batch always runs from
    the state the previous committed batch left, and a replay changes nothing twice.
    """

    def __init__(self, store: StateStore, name: str = STATE_FILE) -> None:
        self.store = store
        self.name = name
        self._doc: dict[str, Any] = {"batch": -1, "state": {}, "before": {}}
        where = f"{store.where}/{name}"
        try:
            raw = store.read(name)
        except ChangefeedError as exc:
            raise ChangefeedError(f"cannot read the pipeline state: {exc.message}", where=where) from None
        if raw is None:
            return
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("batch"), int):
                raise ValueError("not a state document")
        except ValueError as exc:
            raise ChangefeedError(
                f"the pipeline state {where} is corrupt ({exc}); it is kept with the checkpoint"
            ) from None
        self._doc = doc

    def for_batch(self, batch_id: int) -> dict[str, Any]:
        """The state batch ``batch_id`` starts from."""
        key = "before" if batch_id == self._doc["batch"] else "state"
        state: dict[str, Any] = self._doc[key]
        return state

    def save(self, batch_id: int, state: dict[str, Any]) -> None:
        """Batch ``batch_id`` is flushed and left ``state``: written atomically."""
        if state == self._doc["state"] and batch_id >= self._doc["batch"]:
            return  # unchanged: every later batch starts from it as the file says
        doc = {"batch": batch_id, "state": state, "before": self.for_batch(batch_id)}
        self.store.write(self.name, json.dumps(doc, sort_keys=True).encode())
        self._doc = doc
