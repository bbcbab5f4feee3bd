"""Our own MySQL/MariaDB binlog reader: files on disk and the replica protocol, one event parser.

Layers, each usable alone: `files`/`replica` yield raw events, `events.EventParser` parses them,
`rows.RowDecoder` decodes row images, `capture.BinlogCapture` turns them into model events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any, TypeVar

from ...clients.mysql import connect as mysql_connect
from ...model.ddlschema import DDLCatalog
from .capture import BinlogCapture, ReconnectPolicy, SourceDisconnectedError
from .files import BinlogFileReader, RawEvent
from .filters import BlockAllowList
from .position import BinlogPosition

__all__ = [
    "BinlogCapture",
    "BinlogFileReader",
    "BinlogPosition",
    "BlockAllowList",
    "RawEvent",
    "ReconnectPolicy",
    "SourceDisconnectedError",
    "file_capture",
    "live_capture",
]

_S = TypeVar("_S")  # what an ``open_source`` opens


def file_capture(
    path: str | Path,
    start: BinlogPosition | None = None,
    *,
    follow: bool = False,
    poll_interval: float = 0.2,
    tz: tzinfo = UTC,
    table_filter: BlockAllowList | None = None,
    until: tuple[str, int] | None = None,
) -> BinlogCapture:
    """A capture over binlog files: a directory (in ``.index`` order) or a single file.

    Unique and other indexes, which TABLE_MAPs lack, are learned from the CREATE/ALTER TABLE text
    read since ``start`` (`model.ddlschema.DDLCatalog`).
    """
    path = Path(path)
    if start is None:
        files = BinlogFileReader(path).files()
        start = BinlogPosition(files[0] if files else "", 4)
    stop = threading.Event()

    def open_source(at: BinlogPosition) -> BinlogFileReader:
        return BinlogFileReader(path, at.file or None, at.pos, follow=follow, poll_interval=poll_interval, stop=stop)

    capture = BinlogCapture(open_source, start, tz=tz, table_filter=table_filter, until=until, catalog=DDLCatalog())
    capture._stop = stop  # one flag stops both the capture and a following reader
    return capture


def live_capture(
    url: str,
    start: BinlogPosition | None = None,
    *,
    server_id: int | None = None,
    blocking: bool = True,
    heartbeat: float = 1.0,
    tz: tzinfo = UTC,
    table_filter: BlockAllowList | None = None,
    until: tuple[str, int] | None = None,
    reconnect: ReconnectPolicy | None = None,
    track_schema: bool = True,
) -> BinlogCapture:
    """A capture over the replication protocol of ``mysql://USER[:PASS]@HOST:PORT[?ssl-mode=...&ssl-ca=...]``.

    Without ``start`` it begins at the oldest binlog the server has. ``blocking=False`` ends at
    the last event the server had when each connection was made. ``track_schema`` reads
    information_schema (`tracker.SchemaTracker`): unique keys, defaults, DDL shapes, and column
    names when the server's binlog_row_metadata is not FULL. Without it, keys come from one
    information_schema snapshot taken when the capture starts, updated by the DDL text in the
    stream (`tracker.snapshot_catalog`, `model.ddlschema.DDLCatalog`).
    """
    from .replica import ReplicaStream, ServerAddress, random_server_id  # noqa: PLC0415 - PyMySQL only here

    address = ServerAddress.from_url(url)
    sid = server_id if server_id is not None else random_server_id()
    stop = threading.Event()

    def open_replica(at: BinlogPosition) -> ReplicaStream:
        return ReplicaStream(
            address,
            at,
            server_id=sid,
            blocking=blocking,
            heartbeat=heartbeat,
            stop=stop,
            require_full_metadata=not track_schema,
        )

    open_source: Callable[[BinlogPosition], ReplicaStream] = open_replica

    def connect() -> Any:
        return mysql_connect(**address.connect_kwargs(), connect_timeout=10, charset="utf8mb4", autocommit=True)

    tracker = None
    catalog: DDLCatalog | None = None
    if track_schema:
        from .tracker import SchemaTracker  # noqa: PLC0415

        tracker = SchemaTracker(connect)
    else:  # no tracker: keys from one information_schema snapshot at start, then from the DDL text
        catalog = DDLCatalog()
        open_source = _seed_on_first_open(open_source, catalog, connect)

    capture = BinlogCapture(
        open_source,
        start or BinlogPosition(""),
        tz=tz,
        table_filter=table_filter,
        until=until,
        reconnect=reconnect if reconnect is not None else ReconnectPolicy(),
        tracker=tracker,
        catalog=catalog,
    )
    capture._stop = stop
    return capture


def _seed_on_first_open(
    open_source: Callable[[BinlogPosition], _S], catalog: DDLCatalog, connect: Callable[[], Any]
) -> Callable[[BinlogPosition], _S]:
    """``open_source`` that first fills ``catalog`` from information_schema, once, before any event is read."""
    seeded = threading.Event()

    def open_seeded(at: BinlogPosition) -> _S:
        if not seeded.is_set():
            seeded.set()
            from .tracker import snapshot_catalog  # noqa: PLC0415

            snapshot_catalog(connect, catalog)
        return open_source(at)

    return open_seeded
