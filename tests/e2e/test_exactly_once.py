"""Exactly once under crashes, through storage and through Kafka: 10 SIGKILLs each, then diff equal.

The scenario lives in `tests.e2e.exactly_once` (shared with ``scripts/soak``, which runs
it for hundreds of kills). Replay a failure with ``CHANGEFEED_EO_SEED=<seed printed by the test>``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from changefeed.testing import Broker, MariaDBServer
from tests.e2e.exactly_once import Outcome, Scenario, describe, run_scenario

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(540)]

SEED = int(os.environ.get("CHANGEFEED_EO_SEED", "20261122"))
#: The issue's floor: at least 10 kills per CI run for each variant.
KILLS = 10
#: A light workload (~2.5 transactions/s): each restart's backlog, which its first batch must apply, stays small.
PAUSE = 0.4


def _check(outcome: Outcome, kills: int = KILLS) -> None:
    print(outcome.summary())
    assert {t.table for t in outcome.report.tables} == {"accounts", "orders", "tags"}
    assert outcome.report.equal, describe(outcome.report)
    assert sum(t.rows_source for t in outcome.report.tables) > 50
    # Every kill hit a running job (Job.kill checks), both jobs were killed, and mid-stream too.
    assert len(outcome.kills) == kills
    for job in ("capture", "apply"):
        assert sum(k.job == job and k.batches > 0 for k in outcome.kills) >= 1, outcome.summary()
    assert outcome.rows_during_chaos > 0, "nothing reached downstream while the jobs were being killed"


@pytest.fixture
def upstream(mariadb_factory: Callable[..., MariaDBServer]) -> Iterator[MariaDBServer]:
    """A private upstream: its binlog directory holds only this test's changes."""
    yield mariadb_factory()


def test_exactly_once_through_storage(
    upstream: MariaDBServer, mariadb_downstream: MariaDBServer, tmp_path: Path
) -> None:
    _check(run_scenario(Scenario(upstream, mariadb_downstream, tmp_path, "storage", None, KILLS, SEED, PAUSE, print)))


def test_exactly_once_through_kafka(
    upstream: MariaDBServer, mariadb_downstream: MariaDBServer, broker: Broker, tmp_path: Path
) -> None:
    # Through the replica protocol here (the storage variant reads the binlog directory).
    scenario = Scenario(upstream, mariadb_downstream, tmp_path, "kafka", broker, KILLS, SEED, PAUSE, print)
    scenario.source = "server"
    _check(run_scenario(scenario))


#: Fewer kills for the second Kafka protocol: the kill points are the jobs', not the protocol's; what
#: differs is the decoding (DDLs and watermarks on every partition, merged across restarts).
DEBEZIUM_KILLS = 4


def test_exactly_once_through_kafka_debezium(
    upstream: MariaDBServer, mariadb_downstream: MariaDBServer, broker: Broker, tmp_path: Path
) -> None:
    # The workload's types (INT, BIGINT, VARCHAR, DECIMAL(12,2), DATETIME(6)) lose nothing in Debezium JSON.
    scenario = Scenario(upstream, mariadb_downstream, tmp_path, "kafka", broker, DEBEZIUM_KILLS, SEED, PAUSE, print)
    scenario.protocol = "debezium"
    # The sink's default, one worker: its thread applies a batch's last statements while the job
    # starts the next batch, and kills land between (the merge state saved a batch late).
    scenario.worker_count = 1
    _check(run_scenario(scenario), DEBEZIUM_KILLS)


def test_exactly_once_resumed_on_another_host_from_checkpoint_uris(
    upstream: MariaDBServer, mariadb_downstream: MariaDBServer, broker: Broker, tmp_path: Path
) -> None:
    """Every restart in another working directory (its own HOME and TMPDIR), the checkpoints given as
    ``file://`` URIs of one shared directory: what a job keeps of its own (the Kafka merge state, the
    status file) lives beside Spark's checkpoint there, so a job resumed elsewhere goes on exactly once."""
    scenario = Scenario(upstream, mariadb_downstream, tmp_path, "kafka", broker, DEBEZIUM_KILLS, SEED, PAUSE, print)
    scenario.elsewhere = True
    _check(run_scenario(scenario), DEBEZIUM_KILLS)
    shared = tmp_path / "shared"
    for job in ("ck-run", "ck-apply"):
        assert (shared / job / "offsets").is_dir() and (shared / job / "changefeed-status.json").is_file()
    assert any((shared / "ck-apply" / "changefeed-merge").iterdir())  # the merge state is with the checkpoint
    for host in ("host-a", "host-b"):  # the runs there left nothing a resumed job would need
        assert not (tmp_path / host / ".changefeed").exists()
