"""The ``changefeed`` command: one module per subcommand, each registering itself here.

A subcommand module defines ``register(subparsers)`` which adds its parser and sets
``func=run`` (``run(args) -> int``). Modules are imported lazily by name so a command that needs
Spark does not make ``changefeed --help`` start a JVM.

Every error leaves through `main` (or argparse's ``error``, overridden here), and that is where
its text is masked, once: URL passwords, ``password=`` fields, and each password written in a URL
on this command line, however the error quotes it.
"""

from __future__ import annotations

import argparse
import contextvars
import sys
import traceback
from collections.abc import Sequence
from importlib import import_module
from typing import NoReturn

from ..errors import ChangefeedError
from ..ops.logging import setup_logging
from ..secrets import mask_secrets, url_passwords

# Subcommand modules under changefeed.cli, in the order --help lists them.
COMMANDS: tuple[str, ...] = (
    "capture",
    "mount",
    "codec",
    "diff",
    "run",
    "apply",
    "pipeline",
    "snapshot",
    "check",
    "status",
    "lake",
)


# The passwords of the URLs on the command line being run, masked wherever an error shows them.
_ARGV_SECRETS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("argv_secrets", default=frozenset())


def masked(text: str) -> str:
    """``text`` fit for stderr: every secret masked, those of this command line included."""
    return mask_secrets(text, _ARGV_SECRETS.get())


class MaskingParser(argparse.ArgumentParser):
    """argparse with its error message masked ("unrecognized arguments: mysql://u:PW@h" and the like).

    Subcommand parsers are of the same class (``add_subparsers`` uses the parent's type).
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {masked(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = MaskingParser(
        prog="changefeed",
        description="Change data capture for MySQL/MariaDB and TiDB, speaking TiCDC's protocols, on Spark.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="logging level (default WARNING); LEVEL,LOGGER=LEVEL,... also sets named loggers",
    )
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    token = _ARGV_SECRETS.set(frozenset(url_passwords(argv)))
    try:
        return _main(argv)
    finally:
        _ARGV_SECRETS.reset(token)


def _main(argv: list[str]) -> int:
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
        print(masked(f"changefeed {args.command}: {exc}"), file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception:  # a bug: its traceback still goes to stderr, masked like every other error
        print(masked(f"changefeed {args.command}: unexpected error\n{traceback.format_exc()}"), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
