"""``changefeed snapshot CONFIG --tables PATTERNS``: ask the running changefeed to snapshot tables again.

Writes one ``execute-snapshot`` row into the source's signal table (``[source] signal-table``,
created if missing, Debezium's shape); the running ``changefeed run`` meets it in the binlog and
reads the tables chunk by chunk between its micro-batches, without stopping (docs/snapshot.md,
"On demand"). For a table added to ``[filter] rules`` (restart the run first), or a re-sync of a
downstream that lost or changed rows.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO

from ..errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="snapshot tables again in a running changefeed (writes a signal row into the source)",
        description="Ask a running changefeed (changefeed run CONFIG) to snapshot tables: a row in its signal "
        "table, which the run meets in the binlog.",
    )
    p.add_argument("config", help="the changefeed's TOML file (its [source] is a live MySQL/MariaDB server)")
    p.add_argument(
        "--tables",
        required=True,
        help="table-filter patterns separated by commas: shop.orders,crm.* (only tables [filter] rules keep are read)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..capture.snapshot import signal  # noqa: PLC0415 - keep --help light
    from ..config import load_config  # noqa: PLC0415
    from ..model.ddl import quote_ident, quote_table  # noqa: PLC0415
    from ..model.tablefilter import TableFilter  # noqa: PLC0415

    out = out or sys.stdout
    config = load_config(args.config)
    if not config.source.is_live:
        raise ConfigError('changefeed snapshot needs a live source: [source] type = "mysql"')
    if config.source.signal_table == "":
        raise ConfigError('[source] signal-table = "" turns snapshot signals off: name a table')
    patterns = [p.strip() for p in args.tables.split(",") if p.strip()]
    if not patterns:
        raise ConfigError("--tables names no table")
    TableFilter(patterns)  # the run would ignore a bad pattern: refuse it here
    schema, table = signal.parse_signal_table(config.source.signal_table or ".".join(signal.DEFAULT_SIGNAL_TABLE))
    a = config.source.server()
    params = a.sql_params()
    row = signal.signal_row(config.changefeed_id, patterns)
    conn = params.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_ident(schema)}")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {quote_table(schema, table)} ({signal.SIGNAL_COLUMNS})")
            cur.execute(f"INSERT INTO {quote_table(schema, table)} (id, type, data) VALUES (%s, %s, %s)", row)
    finally:
        conn.close()
    out.write(
        f"signal {row[0]} written to {schema}.{table} on {a}: changefeed {config.changefeed_id} snapshots "
        f"{', '.join(patterns)}\n"
    )
    return 0
