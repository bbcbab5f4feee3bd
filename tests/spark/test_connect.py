"""Spark Connect (issue 18, item 3), against the Connect server PySpark ships (`changefeed.testing.connect`).

What works: the `changefeed` Python data source, registered from a Connect client, reads binlog
files in batch and as a stream through the server. What does not fit: `foreachBatch` runs in a
Python process of the server, not in the client (shown by its process id), so `changefeed run` /
`apply` — whose sinks, Kafka merge state and exactly-once commits live in foreachBatch — refuse
``--remote`` before connecting anywhere, with the reason (docs/deploy.md, "Spark Connect").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing.connect import SparkConnectServer
from tests.conftest import _start

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "binlog" / "full"


@pytest.fixture(scope="module")
def connect() -> Iterator[SparkConnectServer]:
    server = _start("Spark Connect server", SparkConnectServer(cores=1).start)
    try:
        yield server
    finally:
        server.stop()


#: The Connect client runs in its own interpreter: a Connect session in the test process changes PySpark's
#: process-wide session state, and the local sessions of the tests after it fail.
CLIENT = """
import json, os, sys
from pyspark.sql import SparkSession
from changefeed.spark.datasource import register

url, fixture, work = sys.argv[1:4]
spark = SparkSession.builder.remote(url).create()
register(spark)
df = spark.read.format("changefeed").option("input", "binlog").option("path", fixture).load()
rows = sorted(map(list, df.select("kind", "schema", "table", "commit_ts").collect()))
seen = os.path.join(work, "batches.txt")

def batch(frame, batch_id):  # pickled to the server and run there
    with open(seen, "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()} {batch_id} {frame.count()}\\n")

stream = spark.readStream.format("changefeed").option("input", "binlog").option("path", fixture).load()
query = (
    stream.writeStream.foreachBatch(batch)
    .option("checkpointLocation", os.path.join(work, "ck"))
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(120)
spark.stop()
print(json.dumps({"pid": os.getpid(), "rows": rows}))
"""


def test_the_data_source_reads_through_connect_and_foreach_batch_runs_on_the_server(
    connect: SparkConnectServer, spark: object, tmp_path: Path
) -> None:
    from changefeed.spark.datasource import register  # noqa: PLC0415

    register(spark)
    local = spark.read.format("changefeed").option("input", "binlog").option("path", str(FIXTURE)).load()  # type: ignore[attr-defined]
    expected = sorted(map(list, local.select("kind", "schema", "table", "commit_ts").collect()))
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, connect.url, str(FIXTURE), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == expected
    lines = [line.split() for line in (tmp_path / "batches.txt").read_text().splitlines()]
    assert sum(int(n) for _, _, n in lines) == len(expected)
    assert {int(pid) for pid, _, _ in lines}.isdisjoint({result["pid"], os.getpid()}), "foreachBatch ran in a client"


def test_run_and_apply_refuse_remote_before_connecting(
    connect: SparkConnectServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "cf.toml"
    config.write_text(f'sink-uri = "file://{tmp_path}/out"\n[source]\npath = "{FIXTURE}"\n')
    assert main(["run", str(config), "--remote", connect.url]) != 0
    err = capsys.readouterr().err
    assert "Spark Connect cannot run these jobs" in err and "foreachBatch" in err
    assert not (tmp_path / "out").exists()
    assert (
        main(["apply", "--from", f"file://{tmp_path}", "--to", f"parquet://{tmp_path}/p", "--remote", connect.url]) != 0
    )
    assert "Spark Connect cannot run these jobs" in capsys.readouterr().err
