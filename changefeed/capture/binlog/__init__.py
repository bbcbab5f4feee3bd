"""Our own MySQL/MariaDB binlog reader: files on disk and the replica protocol, one event parser.

Layers, each usable alone: `files`/`replica` yield raw events, `events.EventParser` parses them,
`rows.RowDecoder` decodes row images, `capture.BinlogCapture` turns them into model events.
"""

from __future__ import annotations

import threading
from datetime import UTC, tzinfo
from pathlib import Path

from ...mysqlclient import connect as mysql_connect
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
    """A capture over binlog files: a directory (in ``.index`` order) or a single file."""
    path = Path(path)
    if start is None:
        files = BinlogFileReader(path).files()
        start = BinlogPosition(files[0] if files else "", 4)
    stop = threading.Event()

    def open_source(at: BinlogPosition) -> BinlogFileReader:
        return BinlogFileReader(path, at.file or None, at.pos, follow=follow, poll_interval=poll_interval, stop=stop)

    capture = BinlogCapture(open_source, start, tz=tz, table_filter=table_filter, until=until)
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
    """A capture over the replication protocol of ``mysql://USER[:PASS]@HOST:PORT``.

    Without ``start`` it begins at the oldest binlog the server has. ``blocking=False`` ends at
    the last event the server had when each connection was made. ``track_schema`` reads
    information_schema (`tracker.SchemaTracker`): unique keys, defaults, DDL shapes, and column
    names when the server's binlog_row_metadata is not FULL.
    """
    from .replica import ReplicaStream, ServerAddress, random_server_id  # noqa: PLC0415 - PyMySQL only here

    address = ServerAddress.from_url(url)
    sid = server_id if server_id is not None else random_server_id()
    stop = threading.Event()

    def open_source(at: BinlogPosition) -> ReplicaStream:
        return ReplicaStream(
            address,
            at,
            server_id=sid,
            blocking=blocking,
            heartbeat=heartbeat,
            stop=stop,
            require_full_metadata=not track_schema,
        )

    tracker = None
    if track_schema:
        import pymysql  # noqa: PLC0415

        from .tracker import SchemaTracker  # noqa: PLC0415

        def connect() -> pymysql.connections.Connection:
            return mysql_connect(
                host=address.host,
                port=address.port,
                user=address.user,
                password=address.password,
                connect_timeout=10,
                charset="utf8mb4",
                autocommit=True,
            )

        tracker = SchemaTracker(connect)

    capture = BinlogCapture(
        open_source,
        start or BinlogPosition(""),
        tz=tz,
        table_filter=table_filter,
        until=until,
        reconnect=reconnect if reconnect is not None else ReconnectPolicy(),
        tracker=tracker,
    )
    capture._stop = stop
    return capture
