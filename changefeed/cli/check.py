"""``changefeed check``: preflight checks of a source and a broker, each finding with its fix.

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
        help="check that a source (and broker) is ready for a changefeed; print what to fix",
        description="Check binlog settings, replication privileges, the start position, broker reachability and "
        "topic partitions. Exit 0 when nothing is an error, 1 otherwise.",
    )
    p.add_argument("--from", dest="source", metavar="URL", help="mysql://user:pass@host:port of the source")
    p.add_argument("--start", metavar="FILE:POS", help="binlog position the changefeed will start or resume from")
    p.add_argument(
        "--no-schema-tracker",
        action="store_true",
        help="treat binlog_row_metadata other than FULL as an error (capture without the schema tracker)",
    )
    p.add_argument("--broker", metavar="HOST:PORT[,HOST:PORT]", help="Kafka bootstrap servers")
    p.add_argument("--topic", help="topic the changefeed writes to")
    p.add_argument("--partitions", type=int, metavar="N", help="the sink's partition-num")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per connection attempt (default 5)")
    p.add_argument("--json", action="store_true", help="print findings as a JSON array")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..ops.preflight import check_broker, check_source  # noqa: PLC0415 - keep `changefeed --help` light

    out = out or sys.stdout
    if not args.source and not args.broker:
        raise ConfigError("give --from URL and/or --broker HOST:PORT")
    if (args.topic or args.partitions) and not args.broker:
        raise ConfigError("--topic and --partitions need --broker")
    findings = []
    if args.source:
        findings += check_source(
            args.source, args.start, timeout=args.timeout, schema_tracker=not args.no_schema_tracker
        )
    if args.broker:
        findings += check_broker(args.broker, args.topic, args.partitions, timeout=args.timeout)
    if args.json:
        out.write(orjson.dumps([f.to_json() for f in findings], option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not findings:
        out.write("OK: no problems found\n")
    else:
        for f in findings:
            where = f" [{f.target}]" if f.target else ""
            out.write(f"{f.severity.upper()} {f.check}{where}\n  {f.message}\n  fix: {f.fix}\n")
    return 1 if any(f.severity == "error" for f in findings) else 0
