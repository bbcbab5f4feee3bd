"""``changefeed capture``: binlog (files or a live server) -> JSONL model events on stdout."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..ops.progress import Progress, add_progress_option
from ..secrets import mask_secrets
from ..timezones import zone
from .run import add_routes_option

if TYPE_CHECKING:
    from ..capture.binlog import BinlogPosition

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "capture",
        help="read a MySQL/MariaDB ROW binlog and write change events as JSONL",
        description="Read a ROW binlog from a server (replica protocol) or from binlog files and write one "
        "JSON event per line (rows, DDL, resolved) to stdout, flushed per transaction. Every event carries "
        "the position to resume from.",
    )
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        help="mysql://USER@HOST:PORT (password: ?password-file=PATH, ?password-env=NAME or MYSQL_PWD) "
        "or file://DIR_OR_FILE",
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument("--start", metavar="FILE:POS", help="start at this binlog position (default: the oldest)")
    start.add_argument("--start-gtid", metavar="SET", help="start after this GTID state (MariaDB, live only)")
    start.add_argument("--resume", metavar="JSON", help="resume from an event's 'position' object")
    end = p.add_mutually_exclusive_group()
    end.add_argument("--stop-never", action="store_true", help="keep waiting for new events (follow files)")
    end.add_argument("--until", metavar="FILE:POS", help="stop at the first transaction boundary at or after this")
    p.add_argument("--server-id", type=int, help="replica server id to register with (default: random)")
    p.add_argument("--time-zone", default="UTC", help="zone TIMESTAMP values are rendered in (default UTC)")
    p.add_argument("--do-db", action="append", default=[], metavar="PATTERN", help="keep only these schemas")
    p.add_argument("--ignore-db", action="append", default=[], metavar="PATTERN", help="drop these schemas")
    p.add_argument("--do-table", action="append", default=[], metavar="DB.TABLE", help="keep only these tables")
    p.add_argument("--ignore-table", action="append", default=[], metavar="DB.TABLE", help="drop these tables")
    p.add_argument("--ignore-op", action="append", default=[], choices=["insert", "update", "delete"])
    p.add_argument("--ignore-ddl", action="store_true", help="do not emit DDL events")
    add_progress_option(p)
    add_routes_option(p)
    p.add_argument(
        "--no-schema-tracker",
        dest="track_schema",
        action="store_false",
        help="live: do not read information_schema (keys, defaults, DDL shapes; needs binlog_row_metadata=FULL)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import orjson  # noqa: PLC0415 - keep `changefeed --help` light

    from ..capture.binlog import BinlogPosition, BlockAllowList, file_capture, live_capture  # noqa: PLC0415
    from ..model.events import Resolved  # noqa: PLC0415
    from ..model.jsonl import dumps_event  # noqa: PLC0415

    tz = zone(args.time_zone)
    table_filter = BlockAllowList.build(
        args.do_db, args.ignore_db, args.do_table, args.ignore_table, args.ignore_op, args.ignore_ddl
    )
    until = None
    if args.until:
        u = BinlogPosition.parse(args.until)
        until = (u.file, u.pos)
    start: BinlogPosition | None = None
    if args.start:
        start = BinlogPosition.parse(args.start)
    elif args.start_gtid:
        start = BinlogPosition("", 4, gtid=args.start_gtid)
    elif args.resume:
        try:
            start = BinlogPosition.from_dict(orjson.loads(args.resume))
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"--resume needs a JSON position object: {exc}") from None
    source: str = args.source
    if source.startswith("file://"):
        if args.start_gtid:
            raise ConfigError("--start-gtid needs a live source; give --start FILE:POS for files")
        path = Path(source[len("file://") :])
        capture = file_capture(path, start, follow=args.stop_never, tz=tz, table_filter=table_filter, until=until)
    elif source.startswith(("mysql://", "mariadb://")):
        log.info("capturing from %s", mask_secrets(source))
        capture = live_capture(
            _live_url(source),
            start,
            server_id=args.server_id,
            blocking=args.stop_never,
            tz=tz,
            table_filter=table_filter,
            until=until,
            track_schema=args.track_schema,
        )
    else:
        raise ConfigError(f"--from must be mysql://... or file://..., got {mask_secrets(source)!r}")
    events = capture.events()
    if args.routes is not None:
        from ..config import load_pipeline  # noqa: PLC0415

        pipeline = load_pipeline(args.routes, source="capture")
        if pipeline is not None:
            events = pipeline.stream(events)
    out = sys.stdout.buffer
    meter = _FileMeter(path, start) if source.startswith("file://") and not args.stop_never else None
    with Progress(
        "capture", meter.total if meter else None, "B" if meter else "txn", unit_scale=True, disabled=args.no_progress
    ) as bar:
        for event in events:
            out.write(dumps_event(event))
            if isinstance(event, Resolved):  # the last event of every transaction
                out.flush()
                if meter is not None:
                    bar.advance_to(meter.done(event.position))
                else:
                    bar.update()
        if meter is not None:
            bar.advance_to(meter.total)
    out.flush()
    return 0


def _live_url(source: str) -> str:
    """``--from`` with its password resolved (password-env, password-file, MYSQL_PWD) into the URL.

    The URL stays in this process: the command line holds only the option naming the password.
    The replica connection takes no other URL option but the TLS ones (ssl-mode, ssl-ca, ssl-cert, ssl-key).
    """
    from ..capture.binlog.replica import ServerAddress  # noqa: PLC0415
    from ..clients.mysql import TLS_OPTIONS, parse_mysql_url  # noqa: PLC0415

    params = parse_mysql_url(source)
    other = sorted(set(params.options) - set(TLS_OPTIONS))
    if other or params.database:
        raise ConfigError(
            f"--from {mask_secrets(source)!r}: the replica connection takes no database and no URL option "
            "but password-env, password-file, ssl-mode, ssl-ca, ssl-cert and ssl-key"
        )
    address = ServerAddress(params.host, params.port, params.user, params.password, params.tls)
    return address.url(password=True)


class _FileMeter:
    """Bytes of binlog files read so far, from an event's position: whole files before it plus its offset."""

    def __init__(self, path: Path, start: BinlogPosition | None) -> None:
        from ..capture.binlog.files import BinlogFileReader  # noqa: PLC0415

        reader = BinlogFileReader(path)
        directory = reader.directory
        names = reader.files()
        first = (start.file if start else "") or (names[0] if names else "")
        names = names[names.index(first) :] if first in names else names
        self.before: dict[str, int] = {}
        offset = 0
        for name in names:
            self.before[name] = offset
            offset += (directory / name).stat().st_size
        self.skip = (start.pos if start else 4) if first in self.before else 0
        self.total = max(offset - self.skip, 0)

    def done(self, position: Mapping[str, Any] | None) -> int:
        if not position or position.get("file") not in self.before:
            return 0
        return max(self.before[position["file"]] + int(position.get("pos", 0)) - self.skip, 0)
