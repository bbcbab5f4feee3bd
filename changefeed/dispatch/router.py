"""Dispatch rules: which topic and partition each table's rows go to (``[[sink.dispatchers]]``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, clip
from ..model import RowChange
from ..model.rowblock import TableRows
from ..model.tablefilter import TableFilter
from .partition import PartitionDispatcher, make_partition_dispatcher
from .topic import TopicDispatcher


@dataclass
class DispatchRule:
    """One ``[[sink.dispatchers]]`` entry: ``matcher`` patterns plus partition/topic choices."""

    matcher: Sequence[str]
    partition: str = "default"
    topic: str = ""
    index: str | None = None
    columns: Sequence[str] = field(default_factory=tuple)

    @classmethod
    def from_mapping(cls, obj: Mapping[str, Any]) -> DispatchRule:
        unknown = set(obj) - {"matcher", "partition", "topic", "index", "columns", "dispatcher"}
        if unknown:
            raise ConfigError(f"unknown dispatcher keys {sorted(unknown)}")
        matcher = obj.get("matcher")
        if not matcher or not _strings(matcher):
            raise ConfigError(
                f"a dispatcher rule needs a `matcher` list of strings such as ['db1.*'], got {clip(matcher)}"
            )
        TableFilter(matcher)  # a bad pattern fails with the config, not at the first routed row
        columns = obj.get("columns") or []
        if not _strings(columns):
            raise ConfigError(f"dispatcher `columns` must be a list of strings, got {clip(columns)}")
        for key in ("partition", "dispatcher", "topic", "index"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise ConfigError(f"dispatcher `{key}` must be a string, got {clip(obj[key])}")
        rule = cls(
            matcher=list(matcher),
            partition=obj.get("partition") or obj.get("dispatcher") or "default",
            topic=obj.get("topic") or "",
            index=obj.get("index"),
            columns=tuple(columns),
        )
        make_partition_dispatcher(rule.partition, index=rule.index, columns=rule.columns)  # an unknown name fails now
        return rule


def _strings(value: Any) -> bool:
    """A list of strings (TOML gives lists; a bare string or number is a user's mistake)."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


class EventRouter:
    """Rules in config order, with TiCDC's implicit final ``*.*`` -> default rule."""

    def __init__(
        self,
        default_topic: str,
        rules: Sequence[DispatchRule] = (),
        case_sensitive: bool = False,
        compat: str = "ticdc",
        require_schema_and_table: bool = False,
    ) -> None:
        self.default_topic = default_topic
        entries = [*rules, DispatchRule(matcher=["*.*"])]
        self._rules: list[tuple[TableFilter, PartitionDispatcher, TopicDispatcher]] = [
            (
                TableFilter(r.matcher, case_sensitive),
                make_partition_dispatcher(r.partition, index=r.index, columns=r.columns, compat=compat),
                TopicDispatcher(r.topic, default_topic, require_schema_and_table),
            )
            for r in entries
        ]
        self._cache: dict[tuple[str, str], tuple[PartitionDispatcher, TopicDispatcher]] = {}

    def _rule(self, schema: str, table: str) -> tuple[PartitionDispatcher, TopicDispatcher]:
        key = (schema, table)
        found = self._cache.get(key)
        if found is None:
            for flt, partition, topic in self._rules:
                if flt.match(schema, table):
                    found = (partition, topic)
                    break
            else:  # unreachable: the last rule matches everything
                raise ConfigError(f"no dispatch rule for {schema}.{table}")
            self._cache[key] = found
        return found

    def topic(self, schema: str, table: str = "") -> str:
        if not table:
            return self.default_topic
        return self._rule(schema, table)[1].topic(schema, table)

    def partition(self, row: RowChange, partitions: int) -> int:
        return self._rule(row.schema, row.table)[0].partition(row, partitions)[0]

    def partitions_of(self, rows: TableRows, partitions: int) -> np.ndarray | None:
        """Every row's partition at once, or None when the table's dispatcher works row by row."""
        ts = rows.table_schema
        return self._rule(ts.schema, ts.table)[0].partitions_of(rows, partitions)
