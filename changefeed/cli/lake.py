"""``changefeed lake``: read the Delta / Iceberg tables a changefeed keeps, by source commit ts.

``lake as-of`` gives a table as the source had it at a TSO or a time (docs/lakehouse.md, "Time
travel by commit ts"); ``lake versions`` lists a table's versions with the checkpoint ts each is
exact at. Both only read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO

from ..errors import ConfigError

#: ``--output`` suffixes and what they write; anything else (or no --output) is JSON lines.
_FORMATS = (".parquet", ".csv", ".jsonl")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lake",
        help="read delta:// and iceberg:// tables by source commit ts (as-of, versions)",
        description="Read the lake tables `changefeed apply --to delta://|iceberg://` (or run's sink-uri) keeps.",
    )
    lake_sub = p.add_subparsers(dest="lake_command", metavar="SUBCOMMAND", required=True)
    as_of = lake_sub.add_parser(
        "as-of",
        help="a table as the source had it at a commit ts or time",
        description="Print (or write to --output) a lake table's source rows as they were upstream at --ts. "
        "upsert and scd2 tables: the newest table version at or before --ts (exact at its checkpoint ts, "
        "printed; one micro-batch's granularity). changelog tables: exact at --ts.",
    )
    _common(as_of)
    as_of.add_argument(
        "--ts",
        help="a TSO, or an ISO time (2026-12-04T10:00:00Z; no offset means UTC); default: the newest the lake has",
    )
    as_of.add_argument(
        "--output",
        metavar="FILE",
        help="write the rows to FILE: .parquet, .csv or .jsonl by its suffix (default: JSON lines on stdout)",
    )
    as_of.set_defaults(func=run_as_of)
    listing = lake_sub.add_parser(
        "versions", help="a table's versions and the checkpoint ts each is exact at", description="List versions."
    )
    _common(listing)
    listing.set_defaults(func=run_versions)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", required=True, metavar="URI", help="delta://DIR or iceberg://DIR[?catalog-uri=URI]")
    p.add_argument("--table", required=True, metavar="SCHEMA.TABLE", help="the source table's name")


def _table_name(text: str) -> tuple[str, str]:
    schema, dot, table = text.partition(".")
    if not dot or not schema or not table:
        raise ConfigError(f"--table must be SCHEMA.TABLE, got {text!r}")
    return schema, table


def run_as_of(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..sink.lake.reader import as_of, open_lake, parse_ts, ts_text  # noqa: PLC0415

    out = out or sys.stdout
    ts = parse_ts(args.ts) if args.ts else None
    result = as_of(open_lake(args.to), _table_name(args.table), ts)
    rows = result.rows
    if args.output:
        _write(rows, Path(args.output))
    else:
        _print_jsonl(rows, out)
    asked = "" if ts is None else f" asked {ts_text(ts)};"
    print(
        f"{args.table} ({result.mode}):{asked} exact at {ts_text(result.exact_ts)}, table version "
        f"{result.version.handle}: {rows.num_rows} rows" + (f" -> {args.output}" if args.output else ""),
        file=sys.stderr,
    )
    return 0


def run_versions(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..sink.lake.reader import open_lake, ts_text, versions  # noqa: PLC0415

    out = out or sys.stdout
    for version in versions(open_lake(args.to), _table_name(args.table)):
        print(f"{version.handle}\t{ts_text(version.checkpoint_ts)}", file=out)
    return 0


def _print_jsonl(rows: object, out: IO[str]) -> None:
    import orjson  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    assert isinstance(rows, pa.Table)
    for batch in rows.to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            out.write(orjson.dumps(row, default=_jsonable, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")


def _jsonable(value: object) -> object:
    """DECIMAL as its exact text, binary as hex: what orjson leaves to us."""
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _write(rows: object, path: Path) -> None:
    import pyarrow as pa  # noqa: PLC0415

    assert isinstance(rows, pa.Table)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415

        pq.write_table(rows, path)
    elif suffix == ".csv":
        import pyarrow.csv as pacsv  # noqa: PLC0415

        pacsv.write_csv(rows, path)
    elif suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as f:
            _print_jsonl(rows, f)
    else:
        raise ConfigError(f"--output must end in {', '.join(_FORMATS)}, got {path.name!r}")
