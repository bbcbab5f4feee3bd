"""Where each event goes: TiCDC's partition and topic dispatchers, and update splitting."""

from .partition import (
    ColumnsDispatcher,
    IndexValueDispatcher,
    PartitionDispatcher,
    TableDispatcher,
    TsDispatcher,
    make_partition_dispatcher,
)
from .router import DispatchRule, EventRouter
from .split import key_changing_rows, split_key_changing_update
from .topic import TopicDispatcher

__all__ = [
    "ColumnsDispatcher",
    "DispatchRule",
    "EventRouter",
    "IndexValueDispatcher",
    "PartitionDispatcher",
    "TableDispatcher",
    "TopicDispatcher",
    "TsDispatcher",
    "key_changing_rows",
    "make_partition_dispatcher",
    "split_key_changing_update",
]
