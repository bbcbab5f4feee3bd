"""``scripts/soak``: the exactly-once scenario for many kills (default 100), then a verdict.

Starts its own services (two MariaDB servers, and the tansu broker with ``--via kafka``) in a work
directory, runs `tests.e2e.exactly_once` with one line of progress per kill, and prints
the diff's verdict. Exit status: 0 diff equal, 1 diff different, 2 the scenario itself failed (a
job exited on its own, did not catch up or stop). On failure the work directory (job logs per run,
checkpoints) is kept and printed.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from changefeed.testing import Broker, MariaDBServer, ServiceError
from tests.e2e.exactly_once import Scenario, ScenarioError, describe, run_scenario


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/soak",
        description="Kill -9 the capture and apply jobs N times under a live workload, then diff upstream/downstream.",
    )
    p.add_argument(
        "--kills",
        type=int,
        default=100,
        help="SIGKILLs in total over both jobs (default 100); 0 runs the live path once and diffs",
    )
    p.add_argument(
        "--source",
        choices=["files", "server"],
        default="files",
        help="capture from the upstream's binlog directory or through the replica protocol (default files)",
    )
    p.add_argument("--via", choices=["storage", "kafka"], default="storage", help="what connects the two jobs")
    p.add_argument(
        "--protocol",
        choices=["open-protocol", "canal-json", "simple", "debezium"],
        default="open-protocol",
        help="wire protocol with --via kafka (default open-protocol)",
    )
    p.add_argument("--worker-count", type=int, default=2, help="MySQL sink workers of the apply job (default 2)")
    p.add_argument("--seed", type=int, help="random seed (kill points, workload); default: a new one, printed")
    p.add_argument("--pause", type=float, default=0.2, help="mean seconds between workload transactions")
    p.add_argument(
        "--seconds", type=float, default=0.0, help="run the workload at least this long (e.g. with --kills 0)"
    )
    p.add_argument("--workdir", type=Path, help="keep job logs and checkpoints here (default: a temp dir)")
    return p


def _replay(args: argparse.Namespace, seed: int) -> str:
    protocol = f" --protocol {args.protocol}" if args.via == "kafka" else ""
    workers = f" --worker-count {args.worker_count}" if args.worker_count != 2 else ""
    pause = f" --pause {args.pause}" if args.pause != 0.2 else ""
    source = f" --source {args.source}" if args.source != "files" else ""
    source += f" --seconds {args.seconds:g}" if args.seconds else ""
    return f"scripts/soak --via {args.via}{source}{protocol}{workers}{pause} --kills {args.kills} --seed {seed}"


def _say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.kills < 0:
        _parser().error("--kills must not be negative")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="changefeed-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    services: list[MariaDBServer | Broker] = []
    ok = False
    try:
        upstream = MariaDBServer(server_id=1, name="soak-upstream").start()
        services.append(upstream)
        downstream = MariaDBServer(server_id=2, name="soak-downstream").start()
        services.append(downstream)
        broker = None
        if args.via == "kafka":
            broker = Broker().start()
            services.append(broker)
        scenario = Scenario(
            upstream,
            downstream,
            workdir,
            args.via,
            broker,
            args.kills,
            seed,
            args.pause,
            _say,
            args.protocol,
            args.worker_count,
            args.source,
            args.seconds,
        )
        outcome = run_scenario(scenario)
        _say(describe(outcome.report))
        ok = outcome.report.equal
        _say(f"{'PASS' if ok else 'FAIL'}: replay with {_replay(args, seed)}")
        return 0 if ok else 1
    except (ScenarioError, ServiceError) as exc:
        _say(f"FAIL: {exc}")
        _say(f"replay with {_replay(args, seed)}")
        return 2
    finally:
        for service in reversed(services):
            try:
                service.stop()
            except Exception as exc:  # stopping the rest matters more
                _say(f"stopping {service.name} failed: {exc}")
        if ok and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not ok:
            _say(f"job logs and checkpoints kept in {workdir}")


if __name__ == "__main__":
    sys.exit(main())
