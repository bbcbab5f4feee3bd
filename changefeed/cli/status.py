"""``changefeed status``: where a changefeed stands, from its storage directory, checkpoint table or Spark checkpoint.

Reads only what the changefeed leaves on disk or in the downstream, so it works whether the job
runs or not. A human table by default; ``--json`` for scripts and monitoring.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

import orjson

from ..errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show checkpoint, lag and position of a changefeed (storage dir, MySQL checkpoint, Spark checkpoint)",
        description="Show where a changefeed stands. Give one or more of --storage, --mysql, --checkpoint.",
    )
    p.add_argument("--storage", metavar="DIR", help="a storage-sink directory: checkpoint, lag, files per table")
    p.add_argument("--mysql", metavar="URL", help="a MySQL sink's downstream: its checkpoint table")
    p.add_argument("--changefeed", metavar="ID", help="with --mysql: only this changefeed (default: all)")
    p.add_argument("--checkpoint-schema", default="changefeed", help="with --mysql: the checkpoint table's schema")
    p.add_argument("--checkpoint", metavar="DIR", help="a Spark streaming checkpoint directory: last batch, offsets")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..ops.status import mysql_status, spark_status, storage_status  # noqa: PLC0415 - keep --help light

    out = out or sys.stdout
    if not (args.storage or args.mysql or args.checkpoint):
        raise ConfigError("give --storage DIR, --mysql URL [--changefeed ID] and/or --checkpoint DIR")
    if args.changefeed and not args.mysql:
        raise ConfigError("--changefeed needs --mysql")
    report: dict[str, Any] = {}
    if args.storage:
        report["storage"] = storage_status(args.storage).to_json()
    if args.mysql:
        rows = mysql_status(args.mysql, args.changefeed, schema=args.checkpoint_schema)
        report["mysql"] = [r.to_json() for r in rows]
    if args.checkpoint:
        report["spark"] = spark_status(args.checkpoint).to_json()
    if args.json:
        out.write(orjson.dumps(report, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(render(report))
    return 0


def _lag(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _pairs(pairs: list[tuple[str, Any]]) -> list[str]:
    width = max(len(k) for k, _ in pairs)
    return [f"  {k.ljust(width)}  {'-' if v is None else v}" for k, v in pairs]


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def render(report: dict[str, Any]) -> str:
    """The human form: one block per source, a table of files per storage table."""
    lines: list[str] = []
    if "storage" in report:
        s = report["storage"]
        lines.append(f"storage {s['root']}")
        lines += _pairs(
            [
                ("checkpoint ts", s["checkpoint_ts"]),
                ("checkpoint time", s["checkpoint_time"]),
                ("lag", _lag(s["lag_seconds"])),
                ("tables", len(s["tables"])),
            ]
        )
        if s["tables"]:
            width = max(len("table"), *(len(t["table"]) for t in s["tables"]))
            lines.append(f"  {'table'.ljust(width)}  {'files':>6}  {'versions':>8}  newest version")
            for t in s["tables"]:
                newest = "-" if t["newest_version"] is None else t["newest_version"]
                lines.append(f"  {t['table'].ljust(width)}  {t['files']:>6}  {t['versions']:>8}  {newest}")
        lines.append("")
    for row in report.get("mysql", []):
        lines.append(f"mysql changefeed {row['changefeed_id']}")
        lines += _pairs(
            [
                ("commit ts", row["commit_ts"]),
                ("checkpoint time", row["checkpoint_time"]),
                ("lag", _lag(row["lag_seconds"])),
                ("source position", _json(row["position"]) if row["position"] is not None else None),
                ("updated at", row["updated_at"]),
            ]
        )
        lines.append("")
    if "mysql" in report and not report["mysql"]:
        lines += ["mysql: no changefeed has a checkpoint yet", ""]
    if "spark" in report:
        s = report["spark"]
        state = "committed" if s["last_batch_committed"] else "NOT committed (re-runs with these offsets on restart)"
        lines.append(f"spark checkpoint {s['directory']}")
        lines += _pairs(
            [
                ("query id", s["query_id"]),
                ("last batch", s["last_batch_id"]),
                ("last batch state", state if s["last_batch_id"] is not None else "no batch yet"),
                ("last committed batch", s["last_committed_batch_id"]),
                ("batch time", s["batch_time"]),
                ("offsets", _json(s["offsets"])),
                ("committed offsets", _json(s["committed_offsets"])),
            ]
        )
        lines.append("")
    return "\n".join(lines)
