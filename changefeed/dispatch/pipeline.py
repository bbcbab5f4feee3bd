"""What every event goes through once, before any sink: online DDL, event filters, routing.

The order is DM's and TiCDC's: an online-DDL tool's statements become the ALTER they mean
(`onlineddl`), then the event filters (`eventfilter`, matching upstream names, as TiCDC's
``matcher`` does) drop what they ignore, then the router (`route`) renames. `EventPipeline` has
the router's interface (``route``, ``stream``), so the jobs apply it where they applied the router.

The online-DDL step remembers ALTERs between events, so a pipeline with it is *stateful*: the job
runs it on the driver (never in executor tasks, which would each start empty) and keeps its state
with the Spark checkpoint (`BatchState`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import ChangefeedError
from .eventfilter import EventFilter
from .onlineddl import OnlineDDL
from .route import Router


class EventPipeline:
    """Online DDL -> event filters -> routing; any of them may be absent."""

    def __init__(
        self, router: Router | None = None, filters: EventFilter | None = None, online_ddl: OnlineDDL | None = None
    ) -> None:
        self.router = router
        self.filters = filters
        self.online_ddl = online_ddl

    @classmethod
    def of(
        cls, router: Router | None, filters: EventFilter | None = None, online_ddl: OnlineDDL | None = None
    ) -> EventPipeline | Router | None:
        """The cheapest form: the router alone when it is the only step, None when there is nothing to do."""
        if filters is None and online_ddl is None:
            return router
        return cls(router, filters, online_ddl)

    @property
    def stateful(self) -> bool:
        return self.online_ddl is not None

    def route(self, events: Iterable[Any]) -> list[Any]:
        out: list[Any] = list(events) if not isinstance(events, list) else events
        if self.online_ddl is not None:
            out = self.online_ddl.apply(out)
        if self.filters is not None:
            out = self.filters.apply(out)
        if self.router is not None:
            out = self.router.route(out)
        return out

    def stream(self, events: Iterable[Any]) -> Iterator[Any]:
        for event in events:
            yield from self.route([event])

    def state(self) -> dict[str, Any]:
        return {"online-ddl": self.online_ddl.state()} if self.online_ddl is not None else {}

    def restore(self, state: dict[str, Any]) -> None:
        if self.online_ddl is not None:
            self.online_ddl.restore(state.get("online-ddl"))


#: The file of a stateful pipeline's state in a Spark checkpoint directory.
STATE_FILE = "changefeed-pipeline.json"


def pending_alters(checkpoint: str | Path) -> list[dict[str, Any]]:
    """The online-DDL ALTERs waiting for their cut-over in a job's checkpoint directory (for ``status``)."""
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        return []
    state = BatchState(path).for_batch(-2)  # the state after the last flushed batch
    pending = state.get("online-ddl", {}).get("pending", [])
    return [{"table": f"{s}.{t}", "alters": list(q)} for s, t, q in pending]


class BatchState:
    """A stateful pipeline's state in a JSON file next to the Spark checkpoint, consistent with its batches.

    The file holds the state after the last flushed batch ``N`` and the state before it. Spark
    replays batch ``N`` after a crash between our save and its own commit: that replay starts from
    the state before ``N``; any later batch from the state after it. So a batch always runs from
    the state the previous committed batch left, and a replay changes nothing twice.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._doc: dict[str, Any] = {"batch": -1, "state": {}, "before": {}}
        try:
            text = path.read_text()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ChangefeedError(f"cannot read the pipeline state {path}: {exc.strerror}") from None
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or not isinstance(doc.get("batch"), int):
                raise ValueError("not a state document")
        except ValueError as exc:
            raise ChangefeedError(
                f"the pipeline state {path} is corrupt ({exc}); it is kept with the checkpoint"
            ) from None
        self._doc = doc

    def for_batch(self, batch_id: int) -> dict[str, Any]:
        """The state batch ``batch_id`` starts from."""
        key = "before" if batch_id == self._doc["batch"] else "state"
        state: dict[str, Any] = self._doc[key]
        return state

    def save(self, batch_id: int, state: dict[str, Any]) -> None:
        """Batch ``batch_id`` is flushed and left ``state``: written atomically (temp file, fsync, rename)."""
        if state == self._doc["state"] and batch_id >= self._doc["batch"]:
            return  # unchanged: every later batch starts from it as the file says
        doc = {"batch": batch_id, "state": state, "before": self.for_batch(batch_id)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self._doc = doc


__all__ = ["STATE_FILE", "BatchState", "EventPipeline", "pending_alters"]
