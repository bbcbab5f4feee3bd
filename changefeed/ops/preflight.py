"""Checks run before a changefeed starts, so a misconfigured source or broker fails in seconds.

Without them the same problems surface late and cryptically: a STATEMENT binlog as a capture
error after connecting, a purged start file as replication error 1236, a missing grant as
"Access denied" mid-setup, an unreachable broker as librdkafka retrying forever. Every `Finding`
says what is wrong *and* how to fix it; `check_source`, `check_broker` and `check_mysql_sink`
collect all findings rather than stopping at the first, so one run lists everything a person must
change. `check_all` is what both `changefeed check` and `changefeed run` (before Spark starts) call;
`binlog_settings` is the settings-only subset the Spark binlog input checks for itself.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..capture.binlog.position import BinlogPosition, file_key
from ..capture.snapshot.progress import SYSTEM_SCHEMAS
from ..clients.mysql import MySQLError, MySQLParams, OperationalError, binary_logs, parse_mysql_url
from ..errors import ChangefeedError
from ..model.ddl import quote_table
from ..secrets import mask_secrets

__all__ = [
    "Finding",
    "PreflightError",
    "binlog_settings",
    "check_all",
    "check_broker",
    "check_mysql_sink",
    "check_source",
    "raise_for_errors",
]

log = logging.getLogger(__name__)

Severity = Literal["error", "warning"]

# MySQL client errors meaning "nobody answered" as opposed to "the server said no".
_UNREACHABLE = frozenset({2002, 2003, 2005, 2006, 2013})
_ACCESS_DENIED = frozenset({1044, 1045, 1698})
_NO_PRIVILEGE = frozenset({1142, 1227})


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: ``check`` is a stable id for scripts, ``fix`` what a person should do."""

    check: str
    severity: Severity
    message: str
    fix: str
    target: str = ""

    def __str__(self) -> str:
        where = f" [{self.target}]" if self.target else ""
        return f"{self.severity.upper()} {self.check}{where}: {self.message}. Fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class PreflightError(ChangefeedError):
    """A preflight check found errors; ``findings`` holds all of them (warnings included)."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        errors = [f for f in findings if f.severity == "error"]
        super().__init__(f"{len(errors)} preflight error(s):\n" + "\n".join(f"  {f}" for f in errors))


def raise_for_errors(findings: list[Finding]) -> list[Finding]:
    """Raise `PreflightError` if any finding is an error; return the (warning-only) list otherwise."""
    if any(f.severity == "error" for f in findings):
        raise PreflightError(findings)
    return findings


# --- MySQL / MariaDB source ------------------------------------------------------------------------

_RESTART_HINT = "in the [mysqld] section of the server's my.cnf and restart the server"


def _setting_fix(name: str, value: str, dynamic: bool = True) -> str:
    fix = f"set {name}={value} {_RESTART_HINT}"
    if dynamic:
        fix += (
            f", or run SET GLOBAL {name}={value} (takes effect for new sessions; also put it in my.cnf so a restart"
            " keeps it)"
        )
    return fix


def _as_position(start: str | BinlogPosition | Mapping[str, Any] | None) -> BinlogPosition | None:
    if start is None or isinstance(start, BinlogPosition):
        return start
    if isinstance(start, str):
        return BinlogPosition.parse(start)
    return BinlogPosition.from_dict(start)


def check_source(
    url: str | MySQLParams,
    start: str | BinlogPosition | Mapping[str, Any] | None = None,
    *,
    timeout: float = 5.0,
    schema_tracker: bool = True,
    snapshot: Callable[[str, str], bool] | None = None,
    partial_images: bool = False,
) -> list[Finding]:
    """Everything binlog capture needs from a MySQL/MariaDB server, checked over one connection.

    ``start`` is the position capture will resume from (``FILE:POS``, a `BinlogPosition` or its
    dict); its file must still exist on the server. ``schema_tracker`` says whether capture may
    fall back to the schema tracker when ``binlog_row_metadata`` is not FULL (then it is a
    warning, otherwise an error). ``snapshot``: the tables a snapshot will read (schema, table ->
    kept), each of which must allow SELECT. ``partial_images``: the sink takes rows without their
    unchanged columns (a lake sink: binlog_row_image MINIMAL/NOBLOB is then a warning, not an error).
    Returns the findings; an empty list means ready to capture.
    """
    position = _as_position(start)
    findings = _source_findings(url, position, timeout, schema_tracker, True, snapshot, partial_images)
    return _logged(findings)


def binlog_settings(
    url: str | MySQLParams, *, timeout: float = 5.0, schema_tracker: bool = True, partial_images: bool = False
) -> list[Finding]:
    """Only the server's binlog settings (log_bin, format, row image, row metadata), not logged.

    For a reader that must refuse a binlog it cannot decode, without repeating the grant and
    position checks `check_source` does before a run.
    """
    return _source_findings(url, None, timeout, schema_tracker, False, partial_images=partial_images)


def _source_findings(
    url: str | MySQLParams,
    position: BinlogPosition | None,
    timeout: float,
    schema_tracker: bool,
    everything: bool,
    snapshot: Callable[[str, str], bool] | None = None,
    partial_images: bool = False,
) -> list[Finding]:
    params = parse_mysql_url(url) if isinstance(url, str) else url
    target = params.url
    try:
        conn = params.connect(connect_timeout=max(1, int(timeout)), read_timeout=int(timeout) + 5, autocommit=True)
    except MySQLError as exc:
        return [_connect_finding(exc, params)]
    findings: list[Finding] = []
    try:
        with conn.cursor() as cur:
            variables = _variables(cur)
            findings += _settings_findings(variables, target, schema_tracker, partial_images)
            if everything:
                findings += _grant_findings(cur, target)
            if everything and position is not None and position.file and _on(variables.get("log_bin", "OFF")):
                findings += _position_findings(cur, position, target)
            if everything and snapshot is not None:
                findings += _snapshot_findings(cur, snapshot, target)
    except MySQLError as exc:
        findings.append(Finding("query", "error", f"a check query failed: {exc}", "see the server's error log", target))
    finally:
        conn.close()
    return findings


def check_mysql_sink(url: str | MySQLParams, *, timeout: float = 5.0) -> list[Finding]:
    """Whether a MySQL/MariaDB/TiDB sink target accepts our connection (the sink creates what it needs)."""
    params = parse_mysql_url(url) if isinstance(url, str) else url
    try:
        conn = params.connect(connect_timeout=max(1, int(timeout)), read_timeout=int(timeout) + 5, autocommit=True)
    except MySQLError as exc:
        return _logged([_connect_finding(exc, params, role="sink")])
    conn.close()
    return []


def check_all(
    *,
    source: str | MySQLParams | None = None,
    start: str | BinlogPosition | Mapping[str, Any] | None = None,
    schema_tracker: bool = True,
    snapshot: Callable[[str, str], bool] | None = None,
    broker: str | None = None,
    topic: str | None = None,
    partitions: int | None = None,
    sink: str | MySQLParams | None = None,
    timeout: float = 5.0,
    broker_config: Mapping[str, Any] | None = None,
    partial_images: bool = False,
) -> list[Finding]:
    """Every check that applies to the parts given: what `changefeed check` and `changefeed run` both run.

    ``broker_config`` adds librdkafka settings (TLS, SASL: `changefeed.clients.kafkauri`) to the broker check's client.
    """
    findings: list[Finding] = []
    if source is not None:
        findings += check_source(
            source,
            start,
            timeout=timeout,
            schema_tracker=schema_tracker,
            snapshot=snapshot,
            partial_images=partial_images,
        )
    if broker is not None:
        findings += check_broker(broker, topic, partitions, timeout=timeout, client_config=broker_config)
    if sink is not None:
        findings += check_mysql_sink(sink, timeout=timeout)
    return findings


def _logged(findings: list[Finding]) -> list[Finding]:
    """Log each finding with its check id as a field (JSON logs make them queryable)."""
    for f in findings:
        level = logging.ERROR if f.severity == "error" else logging.WARNING
        log.log(level, "preflight %s", f, extra={"check": f.check, "severity": f.severity, "target": f.target})
    return findings


def _on(value: str) -> bool:
    return str(value).upper() in ("ON", "1", "YES", "TRUE")


def _connect_finding(exc: MySQLError, params: MySQLParams, role: str = "source") -> Finding:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    text = mask_secrets(str(exc.args[1] if len(exc.args) > 1 else exc))
    if code in _ACCESS_DENIED:
        return Finding(
            f"{role}-auth",
            "error",
            f"the server refused user {params.user!r}: {text}",
            "check the user and password in the URL (mysql://USER:PASSWORD@HOST:PORT), and that the user may "
            f"connect from this host: CREATE USER '{params.user}'@'%' IDENTIFIED BY '...'",
            params.url,
        )
    if code in _UNREACHABLE or isinstance(exc, OperationalError):
        return Finding(
            f"{role}-unreachable",
            "error",
            f"cannot connect to {params.host}:{params.port}: {text}",
            "check the host and port in the URL, that the server is running, that bind_address in its my.cnf "
            "allows remote connections (not 127.0.0.1 only), and that no firewall blocks the port",
            params.url,
        )
    return Finding(f"{role}-unreachable", "error", f"cannot connect: {text}", "see the server's error log", params.url)


def _variables(cur: Any) -> dict[str, str]:
    """Global settings by lower-case name; missing names are absent (older servers)."""
    cur.execute(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN"
        " ('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata', 'version', 'server_id')"
    )
    return {str(name).lower(): str(value) for name, value in cur.fetchall()}


def _settings_findings(
    variables: Mapping[str, str], target: str, schema_tracker: bool, partial_images: bool = False
) -> list[Finding]:
    out: list[Finding] = []
    if not _on(variables.get("log_bin", "OFF")):
        out.append(
            Finding(
                "binlog-disabled",
                "error",
                "the binary log is off (log_bin=OFF): there is nothing to capture",
                f"add log_bin=mysql-bin and a unique server_id (e.g. server_id=1) {_RESTART_HINT}; "
                "log_bin cannot be turned on without a restart",
                target,
            )
        )
    fmt = variables.get("binlog_format", "").upper()
    if fmt and fmt != "ROW":
        out.append(
            Finding(
                "binlog-format",
                "error",
                f"binlog_format={fmt}: capture reads row events, which only ROW format writes",
                _setting_fix("binlog_format", "ROW"),
                target,
            )
        )
    image = variables.get("binlog_row_image", "").upper()
    if image and image != "FULL" and partial_images:
        # The lake sinks fill a partial row from the row they hold (docs/lakehouse.md, "MINIMAL row images").
        out.append(
            Finding(
                "binlog-row-image",
                "warning",
                f"binlog_row_image={image}: row events lack the unchanged columns; the lake sink fills updates "
                "from the rows it holds and refuses an INSERT whose missing column has no constant default",
                _setting_fix("binlog_row_image", "FULL"),
                target,
            )
        )
    elif image and image != "FULL":
        out.append(
            Finding(
                "binlog-row-image",
                "error",
                f"binlog_row_image={image}: row events lack the unchanged columns, so updates and deletes "
                "cannot be encoded with their full before/after images (only a delta:// or iceberg:// sink "
                "takes such rows)",
                _setting_fix("binlog_row_image", "FULL"),
                target,
            )
        )
    metadata = variables.get("binlog_row_metadata", "").upper() or "NONE (not supported by this server)"
    if metadata != "FULL":
        out.append(
            Finding(
                "binlog-row-metadata",
                "warning" if schema_tracker else "error",
                f"binlog_row_metadata={metadata}: row events carry no column names, so capture relies on the "
                "schema tracker (it reads the table definitions at start and follows DDL; a DDL it cannot parse "
                "or a table changed before the start position gives wrong column names)"
                if schema_tracker
                else f"binlog_row_metadata={metadata}: row events carry no column names, and this capture decodes "
                "them from the binlog alone, without the schema tracker (the Spark binlog input: today's table "
                "definitions need not describe a past range)",
                _setting_fix("binlog_row_metadata", "FULL") + " (needs MySQL 8.0.1+ or MariaDB 10.5+)",
                target,
            )
        )
    return out


def _privileges(cur: Any) -> tuple[str, str, set[str], bool]:
    """The account (as the server names it, and quoted for a GRANT), its global privileges, and whether they are all."""
    cur.execute("SELECT CURRENT_USER()")
    account = str(cur.fetchone()[0])
    cur.execute("SHOW GRANTS FOR CURRENT_USER()")
    privileges: set[str] = set()
    for (grant,) in cur.fetchall():
        privileges |= _global_privileges(str(grant))
    user, _, host = account.rpartition("@")
    return account, f"'{user}'@'{host}'", privileges, "ALL PRIVILEGES" in privileges or "ALL" in privileges


def _grant_findings(cur: Any, target: str) -> list[Finding]:
    account, quoted, privileges, all_privileges = _privileges(cur)
    missing: list[str] = []
    if not all_privileges and not privileges & {"REPLICATION SLAVE", "REPLICA"}:
        missing.append("REPLICATION SLAVE")
    if not all_privileges and not privileges & {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}:
        missing.append("REPLICATION CLIENT")
    if not missing:
        return []
    what = {
        "REPLICATION SLAVE": "read the binlog stream",
        "REPLICATION CLIENT": "list binary logs and read the current position (SHOW BINARY LOGS)",
    }
    return [
        Finding(
            "source-privileges",
            "error",
            f"user {account} lacks {' and '.join(missing)} on *.*, needed to "
            + " and to ".join(what[m] for m in missing),
            f"as an administrator run GRANT {', '.join(missing)} ON *.* TO {quoted}; "
            "(MariaDB 10.5+ also names REPLICATION CLIENT 'BINLOG MONITOR'; grants given only through a role "
            "count when it is the user's default role: SET DEFAULT ROLE ... FOR the user)",
            target,
        )
    ]


def _snapshot_findings(cur: Any, keeps: Callable[[str, str], bool], target: str) -> list[Finding]:
    """A snapshot reads every table the filter keeps with SELECT (DM's dump and Debezium need the same grant).

    A table the user may not SELECT is an error naming it. Without a global SELECT that is all one
    can check: a table the user has no privilege on at all is not even listed in
    information_schema, so the snapshot would not see it (a warning says so).
    """
    account, quoted, privileges, all_privileges = _privileges(cur)
    if all_privileges or "SELECT" in privileges:
        return []
    cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'")
    tables = [(str(s), str(t)) for s, t in cur.fetchall()]
    denied: list[str] = []
    for schema, table in sorted(tables):
        if schema.lower() in SYSTEM_SCHEMAS or not keeps(schema, table):
            continue
        try:
            cur.execute(f"SELECT 1 FROM {quote_table(schema, table)} LIMIT 0")
            cur.fetchall()
        except MySQLError:  # 1142: SELECT command denied
            denied.append(quote_table(schema, table))
    findings = [
        Finding(
            "snapshot-tables",
            "warning",
            f"user {account} has no global SELECT: the snapshot copies only the tables it can see",
            f"to copy every table the filter selects, GRANT SELECT ON *.* TO {quoted}; (or per schema)",
            target,
        )
    ]
    if denied:
        shown = ", ".join(denied[:5]) + (f" and {len(denied) - 5} more" if len(denied) > 5 else "")
        findings.insert(
            0,
            Finding(
                "snapshot-privileges",
                "error",
                f"user {account} may not SELECT {shown}, which the snapshot reads",
                f"GRANT SELECT ON {denied[0]} TO {quoted}; (for each), or change [filter] rules, "
                'or snapshot = "never" with a start-position',
                target,
            ),
        )
    return findings


def _global_privileges(grant: str) -> set[str]:
    """Privileges a ``GRANT a, b ON *.* TO ...`` line gives globally (empty for other lines)."""
    text = grant.strip()
    upper = text.upper()
    if not upper.startswith("GRANT ") or " ON " not in upper:
        return set()
    head, _, rest = upper[6:].partition(" ON ")
    if not rest.lstrip().startswith("*.*"):
        return set()
    return {p.strip() for p in head.split(",") if p.strip()}


def _position_findings(cur: Any, position: BinlogPosition, target: str) -> list[Finding]:
    try:
        logs = binary_logs(cur)
    except MySQLError as exc:
        code = exc.args[0] if exc.args else 0
        if code in _NO_PRIVILEGE:
            return []  # reported by the grant check
        raise
    sizes = dict(logs)
    if position.file in sizes:
        if position.pos > sizes[position.file]:
            return [
                Finding(
                    "start-position",
                    "error",
                    f"start position {position} is past the end of {position.file} ({sizes[position.file]} bytes)",
                    "resume from a position the server has written: check the saved checkpoint, or start from "
                    "SHOW MASTER STATUS",
                    target,
                )
            ]
        return []
    oldest = min(logs, key=lambda entry: file_key(entry[0]))[0] if logs else "none"
    newest = max(logs, key=lambda entry: file_key(entry[0]))[0] if logs else "none"
    purged = bool(logs) and file_key(position.file) < file_key(oldest)
    reason = "was purged" if purged else "does not exist"
    return [
        Finding(
            "start-purged" if purged else "start-position",
            "error",
            f"the start file {position.file} {reason} on the server (it has {oldest} .. {newest}): changes between "
            "the start position and the oldest binlog are lost",
            "re-sync: take a fresh snapshot of the tables and start from the current position (SHOW MASTER STATUS); "
            "to prevent it, keep binlogs longer than the longest pause (binlog_expire_logs_seconds / "
            "expire_logs_days) and never PURGE BINARY LOGS past a running changefeed's checkpoint",
            target,
        )
    ]


# --- Kafka broker ----------------------------------------------------------------------------------


def _bootstrap_addresses(bootstrap: str) -> Iterator[tuple[str, int]]:
    for raw in bootstrap.split(","):
        item = raw.strip().split("://", 1)[-1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        try:
            yield host.strip("[]"), int(port)
        except ValueError:
            raise PreflightError(
                [
                    Finding(
                        "broker-address",
                        "error",
                        f"bad bootstrap server {item!r}",
                        "write HOST:PORT[,HOST:PORT...]",
                        bootstrap,
                    )
                ]
            ) from None


def check_broker(
    bootstrap: str,
    topic: str | None = None,
    partitions: int | None = None,
    *,
    timeout: float = 5.0,
    client_config: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Whether the bootstrap servers answer and ``topic`` has at least ``partitions`` partitions.

    A TCP connect to each bootstrap address comes first (``timeout`` seconds each), so an
    unreachable broker is reported at once instead of after librdkafka's retries.
    ``client_config`` adds librdkafka settings (TLS, SASL) to the metadata client.
    """
    return _logged(_check_broker(bootstrap, topic, partitions, timeout, client_config or {}))


def _check_broker(
    bootstrap: str, topic: str | None, partitions: int | None, timeout: float, client_config: Mapping[str, Any]
) -> list[Finding]:
    reachable: list[str] = []
    errors: list[str] = []
    for host, port in _bootstrap_addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                reachable.append(f"{host}:{port}")
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    if not reachable:
        return [
            Finding(
                "broker-unreachable",
                "error",
                f"no bootstrap server answers ({'; '.join(errors) or 'none given'})",
                "check the broker addresses (HOST:PORT of the Kafka listener), that the brokers run, and that no "
                "firewall blocks the port; the broker's advertised.listeners must be reachable from this host",
                bootstrap,
            )
        ]
    from ..clients.kafka import AdminClient, KafkaException  # noqa: PLC0415 - only a broker check pays for librdkafka

    # "logger" takes a logging.Logger, which confluent-kafka's config type leaves out. The reason a
    # connection failed (TLS verification, a missing client certificate) reaches only error_cb.
    seen: list[str] = []
    config: dict[str, Any] = {
        "bootstrap.servers": ",".join(reachable),
        "logger": log,
        "socket.connection.setup.timeout.ms": 1000,
        "error_cb": lambda err: seen.append(err.str()),
        **client_config,
    }
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        admin.poll(0)  # serve the error callbacks
        reasons = "; ".join(dict.fromkeys(x for x in seen if "brokers are down" not in x))
        why = f" ({mask_secrets(reasons)})" if reasons else ""
        return [
            Finding(
                "broker-unreachable",
                "error",
                f"the bootstrap servers accept connections but return no metadata within {timeout:g} s: {exc}{why}",
                "check that the port is a Kafka listener (not another service), the security protocol / SASL "
                "settings, and the brokers' advertised.listeners",
                bootstrap,
            )
        ]
    if topic is None:
        return []
    meta = metadata.topics.get(topic)
    if meta is None or meta.error is not None:
        want = partitions or 3
        return [
            Finding(
                "topic-missing",
                "warning",
                f"topic {topic!r} does not exist"
                + (f" ({meta.error})" if meta is not None and meta.error is not None else ""),
                f"create it: kafka-topics.sh --bootstrap-server {reachable[0]} --create --topic {topic} "
                f"--partitions {want}; or let the sink create it (auto-create-topic, the default)",
                bootstrap,
            )
        ]
    have = len(meta.partitions)
    if partitions is not None and have < partitions:
        return [
            Finding(
                "topic-partitions",
                "error",
                f"topic {topic!r} has {have} partition(s), fewer than partition-num={partitions}",
                f"add partitions: kafka-topics.sh --bootstrap-server {reachable[0]} --alter --topic {topic} "
                f"--partitions {partitions} (consumers then see keys in new partitions; do it before the changefeed "
                f"starts), or set partition-num={have} in the sink URI",
                bootstrap,
            )
        ]
    return []
