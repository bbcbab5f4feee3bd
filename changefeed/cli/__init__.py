"""The ``changefeed`` command: one module per subcommand, each registering itself here.

A subcommand module defines ``register(subparsers)`` which adds its parser and sets
``func=run`` (``run(args) -> int``). Modules are imported lazily by name so a command that needs
Spark does not make ``changefeed --help`` start a JVM.
"""

from __future__ import annotations

import argparse
import contextvars
import sys
from importlib import import_module

from ..errors import ChangefeedError
from ..ops.logging import setup_logging

# Subcommand modules under changefeed.cli, in the order --help lists them.
COMMANDS: tuple[str, ...] = ("capture", "mount", "codec", "diff", "run", "apply", "check", "status")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="changefeed",
        description="Change data capture for MySQL/MariaDB and TiDB, speaking TiCDC's protocols, on Spark.",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or JSON lines with every structured field (default text); credentials are masked",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        # A copied context: what a command sets for its jobs (changefeed id, sink kind, metrics
        # port) ends with it, also when main() is called in-process (tests, embedding programs).
        return int(contextvars.copy_context().run(args.func, args) or 0)
    except ChangefeedError as exc:
        print(f"changefeed {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
