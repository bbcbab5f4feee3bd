"""``python -m changefeed.testing mariadb|broker|all``: run test services for demos and benchmarks.

Prints one JSON line with the connection details on stdout, then runs until Ctrl-C or SIGTERM and
stops everything cleanly. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from changefeed.testing import Broker, MariaDBServer, ServiceError

log = logging.getLogger("changefeed.testing")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m changefeed.testing",
        description="Start a private MariaDB (ROW binlog) and/or tansu Kafka-API broker on 127.0.0.1.",
    )
    p.add_argument("service", choices=["mariadb", "broker", "all"])
    p.add_argument("--port", type=int, help="port for the single service (default: a free port)")
    p.add_argument("--mariadb-port", type=int, help="MariaDB port with 'all'")
    p.add_argument("--broker-port", type=int, help="broker port with 'all'")
    p.add_argument("--server-id", type=int, default=1, help="MariaDB server_id (default 1)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="OPTION=VALUE",
        help="extra my.cnf option for MariaDB, repeatable (e.g. --set binlog_format=STATEMENT)",
    )
    p.add_argument("--keep", action="store_true", help="keep the MariaDB datadir and logs after stopping")
    p.add_argument("--storage-engine", default="memory://tansu/", help="tansu storage engine URL")
    p.add_argument("--log-level", default="INFO", help="logging level for stderr (default INFO)")
    return p


def _extra_config(items: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for item in items:
        key, sep, value = item.partition("=")
        out[key.strip()] = value.strip() if sep else None
    return out


def main(argv: list[str] | None = None) -> int:
    """Start the services, print their details, wait for a stop signal, stop them in reverse order."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.service == "all" and args.port is not None:
        _parser().error("--port is for a single service; with 'all' use --mariadb-port/--broker-port")
    stop_requested = threading.Event()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with contextlib.suppress(AttributeError):
        signal.signal(signal.SIGHUP, _on_signal)

    services: list[MariaDBServer | Broker] = []
    details: dict[str, Any] = {}
    try:
        if args.service in {"mariadb", "all"}:
            db = MariaDBServer(
                port=args.port if args.service == "mariadb" else args.mariadb_port,
                server_id=args.server_id,
                extra_config=_extra_config(args.set),
                keep=args.keep,
            )
            services.append(db.start())
            details["mariadb"] = db.info()
        if args.service in {"broker", "all"} and not stop_requested.is_set():
            broker = Broker(
                port=args.port if args.service == "broker" else args.broker_port,
                storage_engine=args.storage_engine,
            )
            services.append(broker.start())
            details["broker"] = broker.info()
        if not stop_requested.is_set():
            sys.stdout.write(json.dumps(details) + "\n")
            sys.stdout.flush()
        while not stop_requested.wait(1.0):
            dead = [s for s in services if not s.is_running()]
            if dead:
                log.error("%s exited unexpectedly; stopping the rest", ", ".join(s.name for s in dead))
                return 1
        return 0
    except ServiceError as exc:
        log.error("%s", exc)
        return 1
    finally:
        for service in reversed(services):
            try:
                service.stop()
            except Exception:
                log.exception("stopping %s failed", service.name)


if __name__ == "__main__":
    sys.exit(main())
