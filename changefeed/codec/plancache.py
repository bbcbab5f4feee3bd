"""Per-table compiled plans (renderers, readers), built once per `TableSchema` object, and a reader generator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from ..model import TableSchema

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


class SlowPathError(Exception):
    """A generated fast path met something unusual; the caller's careful path decides (and explains)."""


def _null_or_slow(v: object) -> None:
    if v is None:
        return None
    raise SlowPathError


def compile_object_reader(
    names: tuple[str, ...], parsers: tuple[Callable[[Any], Any] | None, ...], *, strings_only: bool
) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """Generate ``{name: value} -> image`` for one table, with each column's parser inlined.

    For the common case only: the object has exactly these columns and every value parses.
    Anything else raises (SlowPathError, KeyError, or the parser's error) and the caller's careful
    loop reports what is wrong. ``strings_only``: every non-null value must be a str (canal-json;
    a None parser keeps the str); otherwise a None parser keeps the value as it is. Names and
    parsers are referred to by index, so message text never becomes source code.
    """
    env: dict[str, Any] = {"_Slow": SlowPathError, "_null": _null_or_slow, "_str": str}
    fetch, items = [], []
    for i, (name, parse) in enumerate(zip(names, parsers, strict=True)):
        env[f"n{i}"] = name
        fetch.append(f"    v{i} = row[n{i}]\n")
        if parse is not None:
            env[f"p{i}"] = parse
        if strings_only:
            value = f"p{i}(v{i})" if parse is not None else f"v{i}"
            items.append(f"{value} if type(v{i}) is _str else _null(v{i})")
        else:
            items.append(f"None if v{i} is None else p{i}(v{i})" if parse is not None else f"v{i}")
    src = (
        "def read(row):\n"
        f"    if len(row) != {len(names)}:\n"
        "        raise _Slow\n" + "".join(fetch) + f"    return ({''.join(item + ', ' for item in items)})\n"
    )
    exec(compile(src, f"<reader of {len(names)} columns>", "exec"), env)
    return cast(Callable[[dict[str, Any]], tuple[Any, ...]], env["read"])  # exec-generated above
