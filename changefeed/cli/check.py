"""``changefeed check``: preflight checks of a source, a broker and a MySQL sink, each finding with its fix.

Exit codes: 0 ready (warnings allowed), 1 at least one error, so a deploy script can gate on it.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO

import orjson

from ..errors import ConfigError, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="check that a source, broker or MySQL sink is ready for a changefeed; print what to fix",
        description="Check binlog settings, replication privileges, the start position, broker reachability, "
        "topic partitions and a MySQL sink's reachability (`changefeed run` runs the same checks). "
        "Exit 0 when nothing is an error, 1 otherwise.",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="URL",
        help="mysql://user@host:port of the source (password: ?password-file=PATH, ?password-env=NAME or MYSQL_PWD)",
    )
    p.add_argument("--start", metavar="FILE:POS", help="binlog position the changefeed will start or resume from")
    p.add_argument(
        "--no-schema-tracker",
        action="store_true",
        help="treat binlog_row_metadata other than FULL as an error (capture without the schema tracker)",
    )
    p.add_argument(
        "--broker",
        metavar="HOST:PORT[,HOST:PORT]",
        help="Kafka bootstrap servers, or the kafka:// sink-uri itself (its topic, partition-num and TLS/SASL "
        "parameters are used; its SASL password must come from sasl-password-env or sasl-password-file)",
    )
    p.add_argument(
        "--to", dest="sink", metavar="URL", help="a mysql:// or tidb:// sink-uri: check that it accepts connections"
    )
    p.add_argument("--topic", help="topic the changefeed writes to")
    p.add_argument("--partitions", type=int, metavar="N", help="the sink's partition-num")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per connection attempt (default 5)")
    p.add_argument("--json", action="store_true", help="print findings as a JSON array")
    sec = p.add_argument_group(
        "broker TLS and SASL",
        "the kafka sink-uri's parameters of the same names (docs/configuration.md#kafka-parameters); the SASL "
        "password never on the command line: --sasl-password-env or --sasl-password-file",
    )
    sec.add_argument("--enable-tls", action="store_true", help="connect to the broker with TLS (the system's CAs)")
    sec.add_argument("--ca", metavar="FILE", help="CA certificate of the broker (turns TLS on)")
    sec.add_argument("--cert", metavar="FILE", help="client certificate for the broker (with --key)")
    sec.add_argument("--key", metavar="FILE", help="private key of the client certificate")
    sec.add_argument(
        "--insecure-skip-verify", action="store_true", help="do not verify the broker's certificate (tests only)"
    )
    sec.add_argument("--sasl-mechanism", metavar="MECH", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    sec.add_argument("--sasl-user", metavar="USER", help="SASL user name")
    sec.add_argument("--sasl-password-env", metavar="NAME", help="environment variable holding the SASL password")
    sec.add_argument(
        "--sasl-password-file", metavar="PATH", help="file holding the SASL password (readable by its owner only)"
    )
    p.set_defaults(func=run)


#: `--enable-tls`... : the kafka sink-uri parameter each security option gives (`changefeed.clients.kafkauri`).
_SECURITY_OPTIONS = {
    "enable_tls": "enable-tls",
    "ca": "ca",
    "cert": "cert",
    "key": "key",
    "insecure_skip_verify": "insecure-skip-verify",
    "sasl_mechanism": "sasl-mechanism",
    "sasl_user": "sasl-user",
    "sasl_password_env": "sasl-password-env",
    "sasl_password_file": "sasl-password-file",
}


_BROKER_FORM = "--broker takes HOST:PORT[,HOST:PORT] or kafka://HOST:PORT/TOPIC"


def broker_target(args: argparse.Namespace) -> tuple[str, str | None, int | None, dict[str, str]]:
    """``--broker`` and the security options -> bootstrap servers, topic, partitions and librdkafka settings.

    ``--broker`` is ``HOST:PORT[,...]`` or a ``kafka://`` sink-uri, whose path gives the topic and
    whose ``partition-num`` the partitions when ``--topic``/``--partitions`` do not. TLS and SASL come
    from the options or the URI's parameters (not both for one setting), read by `KafkaSecurity`
    as the sink reads them; a SASL password written on the command line is refused.
    """
    from ..clients.kafkauri import KAFKA_SECURITY_PARAMS, KafkaSecurity, KafkaURI  # noqa: PLC0415

    broker: str = args.broker
    topic: str | None = args.topic
    partitions: int | None = args.partitions
    params: dict[str, str] = {}
    if "://" in broker:
        kafka = KafkaURI.parse(broker, need_topic=False, form=_BROKER_FORM)
        params = {k: v for k, v in kafka.params.items() if k in KAFKA_SECURITY_PARAMS}
        if "sasl-password" in params:
            raise ConfigError(
                "--broker: the URI writes the SASL password (sasl-password=...), and a command line is visible to "
                "every user of the host (ps); give sasl-password-env=NAME or sasl-password-file=PATH instead"
            )
        broker = kafka.servers
        topic = topic or kafka.topic or None
        num = kafka.params.get("partition-num")
        if partitions is None and num is not None:
            partitions = positive_int(num, "--broker: partition-num")
    for attr, name in _SECURITY_OPTIONS.items():
        value = getattr(args, attr, None)
        if value in (None, False):
            continue
        if name in params:
            raise ConfigError(f"{name} is given by --broker's URI and by --{name}; give it in one place")
        params[name] = "true" if value is True else value
    security = KafkaSecurity.from_params(params, where="check --broker")
    return broker, topic, partitions, security.client_config()


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from ..ops.preflight import check_all  # noqa: PLC0415 - keep `changefeed --help` light
    from ..sink.mysql import MySQLSinkConfig  # noqa: PLC0415

    out = out or sys.stdout
    if not args.source and not args.broker and not args.sink:
        raise ConfigError("give --from URL, --broker HOST:PORT and/or --to URL")
    options = {"topic": "topic", "partitions": "partitions", **_SECURITY_OPTIONS}
    given = [f"--{name}" for attr, name in options.items() if getattr(args, attr, None) not in (None, False)]
    if given and not args.broker:
        raise ConfigError(f"{', '.join(given)} need --broker")
    broker, topic, partitions, broker_config = broker_target(args) if args.broker else (None, None, None, {})
    findings = check_all(
        source=args.source or None,
        start=args.start,
        schema_tracker=not args.no_schema_tracker,
        broker=broker,
        topic=topic,
        partitions=partitions,
        sink=MySQLSinkConfig.from_uri(args.sink, "check")[0]
        if args.sink
        else None,  # the connection; sink settings checked
        timeout=args.timeout,
        broker_config=broker_config,
    )
    if args.json:
        out.write(orjson.dumps([f.to_json() for f in findings], option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not findings:
        out.write("OK: no problems found\n")
    else:
        for f in findings:
            where = f" [{f.target}]" if f.target else ""
            out.write(f"{f.severity.upper()} {f.check}{where}\n  {f.message}\n  fix: {f.fix}\n")
    return 1 if any(f.severity == "error" for f in findings) else 0
