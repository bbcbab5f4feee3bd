"""``changefeed diff``: compare tables of two MySQL/MariaDB servers, or of one and a lake; optionally fix-up SQL.

Exit codes (as sync-diff-inspector's spirit, and scripts need them): 0 equal, 1 different,
2 the comparison itself failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

from ..clients.mysql import parse_mysql_url
from ..errors import ChangefeedError, ConfigError
from ..ops.progress import Progress, add_progress_option
from ..sink.lake import LAKE_SCHEMES

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
        action="append",
        help="mysql://user@host:port of the reference side (password: ?password-file=PATH, ?password-env=NAME "
        "or MYSQL_PWD); repeated with --routes: several sources merged into the target",
    )
    p.add_argument(
        "--routes",
        action="append",
        type=Path,
        metavar="CONFIG.toml",
        help="compare through the [[routes]] of this changefeed config (its changefeed-id is extract-source's "
        "value): each target table against the union of the source tables routed into it; give one per --source, "
        "in the same order (docs/routing.md)",
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
    out = out or sys.stdout
    try:
        with ExitStack() as stack:
            if args.routes:
                report = _routed(args, stack)
            elif len(args.source) > 1:
                raise ConfigError("several --source need --routes (one per source): the tables they merge into")
            elif urlsplit(args.target).scheme.lower() in LAKE_SCHEMES:
                report = _lake(args)
            else:
                report = _servers(args, stack)
    except (ChangefeedError, OSError) as exc:
        raise ComparisonFailedError(f"error: {exc}") from exc
    return _print_report(report, args, out)


def _servers(args: argparse.Namespace, stack: ExitStack) -> DiffReport:
    from ..diff import Differ  # noqa: PLC0415 - keep `changefeed --help` light

    source, target = parse_mysql_url(args.source[0]), parse_mysql_url(args.target)
    fix = _fix_file(args, stack, target.url, source.url)
    with Progress("diff", unit="tables", disabled=args.no_progress) as bar:
        differ = Differ(source, target, chunk_size=args.chunk_size, max_samples=args.max_rows, fix=fix, progress=bar)
        return differ.run(args.tables)


def _lake(args: argparse.Namespace) -> DiffReport:
    """``--target delta://|iceberg://``: the source against the lake tables' newest state (`LakeDiffer`)."""
    from ..diff.lake import LakeDiffer  # noqa: PLC0415

    if args.fix_sql:
        raise ConfigError("--fix-sql writes SQL for a MySQL target; a lake table is not written with SQL")
    source = parse_mysql_url(args.source[0])
    with Progress("diff", unit="tables", disabled=args.no_progress) as bar:
        return LakeDiffer(source, args.target, max_samples=args.max_rows, progress=bar).run(args.tables)


def _routed(args: argparse.Namespace, stack: ExitStack) -> DiffReport:
    """``--routes``: the sources through their changefeeds' routes into one target (`RoutedDiffer`)."""
    import tomllib  # noqa: PLC0415

    from ..config import load_routes  # noqa: PLC0415
    from ..diff.routed import RoutedDiffer, RoutedSource  # noqa: PLC0415
    from ..dispatch.route import Router  # noqa: PLC0415

    if len(args.routes) != len(args.source):
        raise ConfigError(f"give one --routes per --source ({len(args.source)} sources, {len(args.routes)} routes)")
    sources = []
    for url, path in zip(args.source, args.routes, strict=True):
        routes = load_routes(path)  # reads and checks the file
        name = str(tomllib.loads(path.read_text()).get("changefeed-id", "default"))  # extract-source's value
        sources.append(RoutedSource(parse_mysql_url(url), Router.of(routes, source=name)))
    target = parse_mysql_url(args.target)
    fix = _fix_file(args, stack, target.url, " + ".join(s.params.url for s in sources) + " through their routes")
    with Progress("diff", unit="tables", disabled=args.no_progress) as bar:
        return RoutedDiffer(sources, target, max_samples=args.max_rows, fix=fix, progress=bar).run(args.tables)


def _fix_file(args: argparse.Namespace, stack: ExitStack, target: str, source: str) -> Callable[[str], None] | None:
    """``--fix-sql FILE``: a writer of its statements (None without it), the file closed with ``stack``."""
    from ..diff import SESSION_SQL_MODE  # noqa: PLC0415

    if not args.fix_sql:
        return None
    out = stack.enter_context(open(args.fix_sql, "w", encoding="utf-8", errors="surrogateescape"))  # noqa: SIM115
    out.write(f"-- changefeed diff: statements that make {target} equal to {source}\n")
    # The statements escape with backslashes: the session must not have NO_BACKSLASH_ESCAPES.
    out.write(
        f"SET NAMES utf8mb4;\nSET SESSION sql_mode='{SESSION_SQL_MODE}', foreign_key_checks=0, time_zone='+00:00';\n"
    )

    def fix(sql: str) -> None:
        out.write(sql + "\n")

    return fix


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
