"""``changefeed status``: where a changefeed stands, from its storage directory, checkpoint table or Spark checkpoint.

Reads only what the changefeed leaves on disk or in the downstream, so it works whether the job
runs or not (a Spark job's status file says whether its process is still alive). A human table
by default; ``--json`` for scripts and monitoring.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any

import orjson

from ..errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show checkpoint, lag and position of a changefeed (storage dir, MySQL checkpoint, Spark checkpoint)",
        description="Show where a changefeed stands. Give one or more of --storage, --mysql, --checkpoint, "
        "--changefeed.",
    )
    p.add_argument("--storage", metavar="DIR", help="a storage-sink directory: checkpoint, lag, files per table")
    p.add_argument(
        "--mysql",
        metavar="URL",
        help="a MySQL sink's downstream: its checkpoint table (password: ?password-file=PATH, ?password-env=NAME "
        "or MYSQL_PWD)",
    )
    p.add_argument(
        "--changefeed",
        metavar="ID",
        help="the Spark jobs of this changefeed in their default checkpoints (./.changefeed/run-ID, "
        "./.changefeed/apply-ID, OUTPUT/_spark_checkpoint of --storage/--output); with --mysql: only its row",
    )
    p.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="DIR",
        help="with --changefeed: an output directory (storage, parquet) whose _spark_checkpoint to look in",
    )
    p.add_argument("--checkpoint-schema", default="changefeed", help="with --mysql: the checkpoint table's schema")
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="a Spark job's checkpoint directory or URI: state, rate, tables, last error, offsets",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..ops.status import (  # noqa: PLC0415 - keep --help light
        StatusError,
        find_job_checkpoints,
        mysql_status,
        storage_status,
    )

    out = out or sys.stdout
    if not (args.storage or args.mysql or args.checkpoint or args.changefeed):
        raise ConfigError("give --storage DIR, --mysql URL, --checkpoint DIR and/or --changefeed ID")
    if args.output and not args.changefeed:
        raise ConfigError("--output needs --changefeed")
    report: dict[str, Any] = {}
    if args.storage:
        report["storage"] = storage_status(args.storage).to_json()
    if args.mysql:
        rows = mysql_status(args.mysql, args.changefeed, schema=args.checkpoint_schema)
        report["mysql"] = [r.to_json() for r in rows]
    if args.checkpoint:
        report.update(_checkpoint(args.checkpoint))
    if args.changefeed:
        outputs = tuple(args.output) + ((args.storage,) if args.storage else ())
        found = find_job_checkpoints(args.changefeed, Path.cwd(), outputs)
        if not found and not args.mysql:
            raise StatusError(
                f"no Spark checkpoint of changefeed {args.changefeed!r} in ./.changefeed/run-{args.changefeed}, "
                f"./.changefeed/apply-{args.changefeed} or OUTPUT/_spark_checkpoint (give --output DIR or --checkpoint)"
            )
        report["jobs"] = [_checkpoint(d) for d in found]
    if args.json:
        out.write(orjson.dumps(report, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(render(report))
    return 0


def _checkpoint(directory: str | Path) -> dict[str, Any]:
    """A Spark checkpoint directory: the job's status file (None before any job wrote one) and Spark's logs."""
    from ..files.batchstate import pending_alters  # noqa: PLC0415
    from ..files.store import open_store  # noqa: PLC0415
    from ..ops.status import job_status, spark_status  # noqa: PLC0415

    job = job_status(directory)
    out: dict[str, Any] = {"job": job.to_json() if job is not None else None}
    out["spark"] = spark_status(directory).to_json()
    # online-ddl: ALTERs of a gh-ost/pt-osc migration awaiting its cut-over
    pending = pending_alters(open_store(directory))
    if pending:
        out["online_ddl"] = pending
    return out


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
    for entry in [report, *report.get("jobs", [])]:
        if entry.get("job"):
            lines += _render_job(entry["job"])
        if "spark" in entry:
            lines += _render_spark(entry["spark"])
        for waiting in entry.get("online_ddl", []):
            lines += [f"online DDL of {waiting['table']} waiting for its cut-over:"]
            lines += [f"  {alter}" for alter in waiting["alters"]] + [""]
    return "\n".join(lines)


_STATE = {
    "running": "running",
    "stopped": "stopped",
    "failed": "FAILED (see last error)",
    "dead": "NOT running: its process is gone (killed?); the last batch re-runs on restart",
}


def _render_job(j: dict[str, Any]) -> list[str]:
    state = _STATE.get(j["state"], j["state"])
    if j["state"] == "running" and j["running"] is None:
        state = f"running on {j['host']} (not checked from here)"
    error = j["last_error"]
    lines = [f"{j['job']} job of changefeed {j['changefeed_id']} ({j['directory']})"]
    lines += _pairs(
        [
            ("state", state),
            ("source / sink", f"{j['source'] or '-'} -> {j['sink'] or '-'}"),
            ("pid", f"{j['pid']} on {j['host']}"),
            ("started at", j["started_at"]),
            ("updated at", j["updated_at"]),
            ("last batch", j["last_batch"]),
            ("source position", _json(j["position"]) if j["position"] is not None else None),
            ("checkpoint ts", j["checkpoint_ts"]),
            ("checkpoint time", j["checkpoint_time"]),
            ("lag", _lag(j["lag_seconds"])),
            ("resolved ts", j["resolved_ts"]),
            ("resolved time", j["resolved_time"]),
            ("rows/s (1 min)", f"{j['rows_per_second']:.1f} ({j['rows_last_minute']} rows)"),
            ("rows (all runs)", j["rows"]),
            ("last error", f"{error['time']} batch {error['batch']}: {error['text']}" if error else None),
        ]
    )
    if j["tables"]:
        width = max(len("table"), *(len(t["table"]) for t in j["tables"]))
        lines.append(f"  {'table'.ljust(width)}  {'inserts':>10}  {'updates':>10}  {'deletes':>10}  {'total':>10}")
        for t in j["tables"]:
            counts = "  ".join(f"{t[k]:>10}" for k in ("insert", "update", "delete", "total"))
            lines.append(f"  {t['table'].ljust(width)}  {counts}")
    if j.get("shard_ddl"):
        lines.append("  shard DDL on merged tables (newest last):")
        for d in j["shard_ddl"]:
            lines.append(f"    {d['time']}  {d['table']} <- {d['shard']}: {d['outcome']}")
            lines.append(f"      {d['ddl']}")
        pending = pending_locks(j["shard_ddl"])
        if pending:
            lines.append("  pending shard DDL locks (pessimistic mode; rows of the shards done are held):")
            for d in pending:
                lines.append(f"    {d['table']}: {d['outcome'].split(':', 1)[1].strip()}")
                lines.append(f"      {d['ddl']}")
    lines.append("")
    return lines


def pending_locks(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merged tables whose newest shard DDL decision is "held" (DM's pessimistic lock, not released yet); a
    "queued" DDL (a done shard's next one, DM: waiting behind the lock) leaves the pending lock as it was."""
    newest: dict[str, dict[str, Any]] = {}
    for d in decisions:
        if not str(d["outcome"]).startswith("queued:"):
            newest[d["table"]] = d
    return [d for d in newest.values() if str(d["outcome"]).startswith("held:")]


def _render_spark(s: dict[str, Any]) -> list[str]:
    """Spark's own logs: the last planned batch and whether it committed."""
    lines: list[str] = []
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
    return lines
