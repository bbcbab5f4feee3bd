"""The one schema-keyed cache: per-table plans (renderers, readers, key lists, SQL) built once per `TableSchema`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from .schema import TableSchema

T = TypeVar("T")


class PlanCache(Generic[T]):
    """``build(ts)`` once per TableSchema, looked up by identity.

    Every row of a table version shares one TableSchema object, so identity is the cheapest key
    that is also exact (equal-but-distinct schemas just build twice). The schema is kept in the
    entry so a recycled ``id`` can never return another table's plan. Past ``limit`` entries the
    cache starts over (schemas of dropped table versions are not kept alive forever).
    """

    __slots__ = ("_build", "_limit", "_plans")

    def __init__(self, build: Callable[[TableSchema], T], limit: int = 4096) -> None:
        self._build = build
        self._limit = limit
        self._plans: dict[int, tuple[TableSchema, T]] = {}

    def get(self, ts: TableSchema) -> T:
        hit = self._plans.get(id(ts))
        if hit is not None and hit[0] is ts:
            return hit[1]
        if len(self._plans) >= self._limit:
            self._plans.clear()
        plan = self._build(ts)
        self._plans[id(ts)] = (ts, plan)
        return plan

    def __len__(self) -> int:
        return len(self._plans)
