"""What every event goes through once, before any sink: online DDL, event filters, routing.

The order is DM's and TiCDC's: an online-DDL tool's statements become the ALTER they mean
(`onlineddl`), then the event filters (`eventfilter`, matching upstream names, as TiCDC's
``matcher`` does) drop what they ignore, then the router (`route`) renames. `EventPipeline` has
the router's interface (``route``, ``stream``), so the jobs apply it where they applied the router.

The online-DDL step remembers ALTERs between events, and a router merging shards for a storage or
lake sink remembers each merged table's shape (`shardmerge`), so a pipeline with either is
*stateful*: the job runs it on the driver (never in executor tasks, which would each start empty)
and keeps its state with the Spark checkpoint (`BatchState`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

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
        if filters is None and online_ddl is None and not (router is not None and router.stateful):
            return router
        return cls(router, filters, online_ddl)

    @property
    def stateful(self) -> bool:
        return self.online_ddl is not None or (self.router is not None and self.router.stateful)

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
        out: dict[str, Any] = {}
        if self.online_ddl is not None:
            out["online-ddl"] = self.online_ddl.state()
        if self.router is not None and self.router.stateful:
            out["merged-tables"] = self.router.state()
        return out

    def restore(self, state: dict[str, Any]) -> None:
        if self.online_ddl is not None:
            self.online_ddl.restore(state.get("online-ddl"))
        if self.router is not None and self.router.stateful:
            self.router.restore(state.get("merged-tables"))


__all__ = ["EventPipeline"]
