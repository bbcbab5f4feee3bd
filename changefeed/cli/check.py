"""``changefeed check``: preflight checks of a source, a broker and a MySQL sink, each finding with its fix.

Exit codes: 0 ready (warnings allowed), 1 at least one error, so a deploy script can gate on it.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO

import orjson

from ..errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="check that a source, broker or MySQL sink is ready for a changefeed; print what to fix",
        description="Check binlog settings, replication privileges, the start position, broker reachability, "
        "topic partitions and a MySQL sink's reachability (`changefeed run` runs the same checks). "
        "Exit 0 when nothing is an error, 1 otherwise.",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="URL",
        help="mysql://user@host:port of the source (password: ?password-file=PATH, ?password-env=NAME or MYSQL_PWD)",
    )
    p.add_argument("--start", metavar="FILE:POS", help="binlog position the changefeed will start or resume from")
    p.add_argument(
        "--no-schema-tracker",
        action="store_true",
        help="treat binlog_row_metadata other than FULL as an error (capture without the schema tracker)",
    )
    p.add_argument("--broker", metavar="HOST:PORT[,HOST:PORT]", help="Kafka bootstrap servers")
    p.add_argument(
        "--to", dest="sink", metavar="URL", help="a mysql:// or tidb:// sink-uri: check that it accepts connections"
    )
    p.add_argument("--topic", help="topic the changefeed writes to")
    p.add_argument("--partitions", type=int, metavar="N", help="the sink's partition-num")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per connection attempt (default 5)")
    p.add_argument("--json", action="store_true", help="print findings as a JSON array")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..ops.preflight import check_all  # noqa: PLC0415 - keep `changefeed --help` light
    from .apply import mysql_target  # noqa: PLC0415

    out = out or sys.stdout
    if not args.source and not args.broker and not args.sink:
        raise ConfigError("give --from URL, --broker HOST:PORT and/or --to URL")
    if (args.topic or args.partitions) and not args.broker:
        raise ConfigError("--topic and --partitions need --broker")
    findings = check_all(
        source=args.source or None,
        start=args.start,
        schema_tracker=not args.no_schema_tracker,
        broker=args.broker or None,
        topic=args.topic,
        partitions=args.partitions,
        sink=mysql_target(args.sink, "check")[0] if args.sink else None,  # TiCDC's sink parameters split off
        timeout=args.timeout,
    )
    if args.json:
        out.write(orjson.dumps([f.to_json() for f in findings], option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not findings:
        out.write("OK: no problems found\n")
    else:
        for f in findings:
            where = f" [{f.target}]" if f.target else ""
            out.write(f"{f.severity.upper()} {f.check}{where}\n  {f.message}\n  fix: {f.fix}\n")
    return 1 if any(f.severity == "error" for f in findings) else 0
