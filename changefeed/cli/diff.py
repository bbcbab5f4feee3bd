"""``changefeed diff``: compare tables of two MySQL/MariaDB servers, or of one and a lake; optionally fix-up SQL.

Exit codes (as sync-diff-inspector's spirit, and scripts need them): 0 equal, 1 different,
2 the comparison itself failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import ChangefeedError, ConfigError
from ..ops.progress import Progress, add_progress_option
from ..sink.lake import LAKE_SCHEMES
from ..sink.mysql.url import parse_mysql_url

if TYPE_CHECKING:
    from ..diff import DiffReport

log = logging.getLogger(__name__)

EXIT_EQUAL, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2


class ComparisonFailedError(ChangefeedError):
    """The comparison itself failed; ``changefeed`` prints it (masked) and exits with `EXIT_ERROR`."""

    exit_code = EXIT_ERROR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        help="compare tables of two MySQL/MariaDB servers (exit 0 equal, 1 different, 2 error)",
        description="Compare tables chunk by chunk with server-side checksums, drill into differing chunks, "
        "print differing rows and optionally write SQL that makes the target equal to the source.",
    )
    p.add_argument(
        "--source",
        required=True,
        help="mysql://user@host:port of the reference side (password: ?password-file=PATH, ?password-env=NAME "
        "or MYSQL_PWD)",
    )
    p.add_argument(
        "--target",
        required=True,
        help="mysql://user@host:port of the side to check (password: as --source), or the lake tables of "
        "delta://DIR | iceberg://DIR[?catalog-uri=URI] (their newest state; docs/lakehouse.md)",
    )
    p.add_argument(
        "--tables",
        action="append",
        default=None,
        metavar="PATTERN",
        help="table filter like 'db.*' or '!db.tmp*' (repeatable; default: every non-system table)",
    )
    p.add_argument("--chunk-size", type=int, default=10000, help="rows per checksummed chunk (default 10000)")
    p.add_argument("--fix-sql", metavar="FILE", help="write DELETE/REPLACE statements for the target to FILE")
    p.add_argument("--max-rows", type=int, default=20, help="differing rows printed per table (default 20)")
    add_progress_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..diff import SESSION_SQL_MODE, Differ  # noqa: PLC0415 - keep `changefeed --help` light

    out = out or sys.stdout
    fix_file: IO[str] | None = None
    try:
        source = parse_mysql_url(args.source)
        if urlsplit(args.target).scheme.lower() in LAKE_SCHEMES:
            if args.fix_sql:
                raise ConfigError("--fix-sql writes SQL for a MySQL target; a lake table is not written with SQL")
            from ..diff.lake import LakeDiffer  # noqa: PLC0415

            with Progress("diff", unit="tables", disabled=args.no_progress) as bar:
                report = LakeDiffer(source, args.target, max_samples=args.max_rows, progress=bar).run(args.tables)
            return _print_report(report, args, out)
        target = parse_mysql_url(args.target)
        if args.fix_sql:
            fix_file = open(args.fix_sql, "w", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
            fix_file.write(f"-- changefeed diff: statements that make {target.url} equal to {source.url}\n")
            # The statements escape with backslashes: the session must not have NO_BACKSLASH_ESCAPES.
            fix_file.write(
                f"SET NAMES utf8mb4;\nSET SESSION sql_mode='{SESSION_SQL_MODE}', foreign_key_checks=0, "
                "time_zone='+00:00';\n"
            )
        fix: Callable[[str], None] | None = None
        if fix_file is not None:
            out_sql = fix_file

            def fix(sql: str) -> None:
                out_sql.write(sql + "\n")

        with Progress("diff", unit="tables", disabled=args.no_progress) as bar:
            differ = Differ(
                source, target, chunk_size=args.chunk_size, max_samples=args.max_rows, fix=fix, progress=bar
            )
            report = differ.run(args.tables)
    except (ChangefeedError, OSError) as exc:
        raise ComparisonFailedError(f"error: {exc}") from exc
    finally:
        if fix_file is not None:
            fix_file.close()
    return _print_report(report, args, out)


def _print_report(report: DiffReport, args: argparse.Namespace, out: IO[str]) -> int:
    different = 0
    for t in report.tables:
        if t.status == "equal":
            print(f"{t.label}: equal ({t.rows_source} rows, {t.chunks} chunks)", file=out)
            continue
        different += 1
        if t.status == "columns_differ":
            print(f"{t.label}: COLUMNS DIFFER (names or types): rows not compared", file=out)
        elif t.status in ("missing_in_target", "missing_in_source"):
            print(f"{t.label}: {t.status.replace('_', ' ')} ({t.rows_source} source rows)", file=out)
        else:
            counts = ", ".join(f"{n} {kind}" for kind, n in sorted(t.counts.items()))
            key = f"key {t.key_name}" if t.key_name else "no key: whole-row comparison"
            print(
                f"{t.label}: DIFFERENT ({counts}; {t.rows_source} source / {t.rows_target} target rows; {key})",
                file=out,
            )
        for d in t.samples:
            if d.kind == "changed":
                print(f"  changed key={t.format_row(d.key)}\n    source {t.format_row(d.source)}", file=out)
                print(f"    target {t.format_row(d.target)}", file=out)
            else:
                row = d.source if d.kind == "missing" else d.target
                print(f"  {d.kind} key={t.format_row(d.key)} {t.format_row(row)}", file=out)
        shown = len(t.samples)
        total = sum(t.counts.values())
        if total > shown:
            print(f"  ... {total - shown} more", file=out)
    print(
        f"{len(report.tables)} tables compared, {different} different"
        + (f"; fix-up SQL in {args.fix_sql}" if args.fix_sql and different else ""),
        file=out,
    )
    return EXIT_DIFFERENT if different else EXIT_EQUAL
