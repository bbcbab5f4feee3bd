"""Routing rows to parallel workers without reordering conflicting rows (DM/TiCDC causality).

A row's keys are its table plus the values of the handle key and of every unique index, taken
from both the old and the new image (TiCDC ``genKeyList``; DM ``causality``). Two rows conflict
when they share a key; conflicting rows must be applied in upstream order, so they go to the
same worker. A row whose keys are held by two different workers cannot be placed: the caller
ends the round (every worker commits what it has), `reset` clears the holders, and routing
starts afresh, exactly DM's "causality conflict -> flush all jobs".

Key values are compared the way a unique index compares them: NULLs never conflict, and text in
a case-/accent-insensitive collation is folded so 'a' and 'Á' collide (folding too much only costs
parallelism; folding too little would reorder rows).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from ...model import ABSENT, RowChange, TableSchema
from ...model.schemacache import PlanCache

__all__ = ["Causality", "row_keys"]


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold().rstrip(" ")


def _build_unique_indexes(table: TableSchema) -> tuple[tuple[str, tuple[int, ...], tuple[bool, ...]], ...]:
    out = []
    for idx in table.indexes:
        if not idx.unique:
            continue
        positions = tuple(table.column_index[n] for n in idx.columns)
        fold = tuple(not table.columns[i].binary and not table.columns[i].collation.endswith("_bin") for i in positions)
        out.append((idx.name, positions, fold))
    if not out and table.handle_key:  # a handle from column flags only (Open Protocol)
        out.append(("handle", table.handle_key, tuple(not table.columns[i].binary for i in table.handle_key)))
    return tuple(out)


_unique_indexes = PlanCache(_build_unique_indexes).get


def _norm(value: Any, fold: bool) -> Any:
    if fold and isinstance(value, str):
        return _fold(value)
    return value


def row_keys(row: RowChange) -> list[int]:
    """Hashes of the keys a row touches (see the module doc); never empty."""
    table = row.table_schema
    name = table.qualified_name
    keys: list[int] = []
    indexes = _unique_indexes(table)
    images = [im for im in (row.new, row.old) if im is not None]
    for image in images:
        for idx_name, positions, fold in indexes:
            values = tuple(image[i] for i in positions)
            if None in values or ABSENT in values:
                continue  # NULLs never conflict in a unique index
            if True in fold:
                values = tuple(_norm(v, f) for v, f in zip(values, fold, strict=True))
            keys.append(hash((name, idx_name, values)))
    if not keys:
        # No complete unique key: identical rows are the only ones that can interfere.
        for image in images:
            keys.append(hash((name, "*row*", tuple(_norm(v, True) for v in image if v is not ABSENT))))
    return keys


class Causality:
    """Key -> worker holding it, for the current round."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self._holder: dict[int, int] = {}
        self._load = [0] * workers

    def route(self, keys: Sequence[int]) -> int | None:
        """The worker for a row with ``keys``, or None when two workers hold its keys (end the round)."""
        holders = {self._holder[k] for k in keys if k in self._holder}
        if len(holders) > 1:
            return None
        if holders:
            worker = holders.pop()
        else:
            # No conflict: spread by the first key, like DM; fall back to the lightest worker
            # when that one already has twice its share, so a hot hash does not serialise.
            worker = keys[0] % self.workers
            if self._load[worker] > 2 * (sum(self._load) // self.workers + 1):
                worker = min(range(self.workers), key=self._load.__getitem__)
        for k in keys:
            self._holder[k] = worker
        self._load[worker] += 1
        return worker

    def reset(self) -> None:
        self._holder.clear()
        self._load = [0] * self.workers
