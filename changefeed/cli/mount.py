"""``changefeed mount``: decode TiKV change records into JSONL model events (docs/mounter.md).

Streams: each record is decoded and written as it is read, so a large file or a pipe never sits
in memory.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ..capture.mounter import Catalog, Mounter, read_file
from ..model.jsonl import dumps_event
from ..ops.progress import Progress, add_progress_option

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mount",
        help="decode TiKV KV change records (JSONL or Parquet) into JSONL events",
        description="Decode TiDB record keys and row values (format v2/v1) with table schemas from a "
        "catalog file, writing one JSONL event per row change or resolved marker to stdout.",
    )
    parser.add_argument("--catalog", required=True, help="catalog JSON: TiDB table infos with versions")
    parser.add_argument("--time-zone", default="UTC", help="zone TIMESTAMP values are rendered in (default UTC)")
    parser.add_argument(
        "--encoding",
        choices=("base64", "hex"),
        default=None,
        help="encoding of keys/values in JSONL records without an 'encoding' member (default: detect)",
    )
    parser.add_argument("--skip-unknown-tables", action="store_true", help="drop records of tables not in the catalog")
    parser.add_argument("--verify-checksum", action="store_true", help="check row checksums (v1/v2) when present")
    parser.add_argument("records", help="records file: *.jsonl (or - for stdin) or *.parquet")
    add_progress_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    mounter = Mounter(
        Catalog.load(args.catalog),
        args.time_zone,
        skip_unknown_tables=args.skip_unknown_tables,
        verify_checksum=args.verify_checksum,
    )
    out = sys.stdout.buffer
    count = 0
    # One event per record (skipped records aside): a Parquet file's row count is the bar's total.
    with Progress("mount", _record_count(args.records), "records", disabled=args.no_progress) as bar:
        for event in read_file(args.records, mounter, args.encoding):
            out.write(dumps_event(event))
            count += 1
            bar.update()
    out.flush()
    log.info("mounted %d events; skipped %s", count, mounter.skipped)
    return 0


def _record_count(name: str) -> int | None:
    """Records in a Parquet file (from its footer, no data read); None for JSONL and stdin."""
    if not name.endswith(".parquet"):
        return None
    import pyarrow.parquet as pq  # noqa: PLC0415

    try:
        return pq.ParquetFile(name).metadata.num_rows
    except (OSError, ValueError):
        return None  # read_file reports the error with its context
