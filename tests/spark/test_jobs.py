"""The streaming capture and apply jobs, end to end from the binlog fixtures to Parquet snapshots."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from py4j.java_gateway import JavaObject
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from changefeed.codec import CodecOptions
from changefeed.consume.storage import StorageReader
from changefeed.model import RowChange
from changefeed.sink.parquet import ParquetSnapshotSink
from changefeed.sink.storage.writer import StorageWriter
from changefeed.spark.jobs import storage_source
from changefeed.spark.session import CHECKPOINT_MANAGER, LOCAL_CHECKPOINT_MANAGER, checkpoint_conf

from .helpers import BINLOG, apply, capture, captured, read_snapshot, reference_snapshot

CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)


def _storage_rows(root: Path) -> list[tuple[object, ...]]:
    rows = [e for e in StorageReader(root, CODEC).poll() if isinstance(e, RowChange)]
    return sorted((r.table, r.commit_ts, r.op.value, repr(r.new), repr(r.old)) for r in rows)


def _expected_rows() -> list[tuple[object, ...]]:
    rows = [e for e in captured() if isinstance(e, RowChange)]
    return sorted((r.table, r.commit_ts, r.op.value, repr(r.new), repr(r.old)) for r in rows)


def test_capture_then_apply_equals_the_direct_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    storage, out = tmp_path / "storage", tmp_path / "parquet"
    sink = StorageWriter(storage, CODEC)
    stats = capture(spark, sink, tmp_path / "ck-capture", max_events=8, events_per_partition=3, available_now=True)
    assert stats.batches >= 3  # maxEventsPerTrigger cut the binlog into several micro-batches
    assert stats.rows == 23
    source = storage_source(storage, CODEC)
    applied = apply(spark, source, ParquetSnapshotSink(out), tmp_path / "ck-apply", available_now=True)
    assert applied.rows == 23
    snapshot = read_snapshot(out)
    assert snapshot == reference_snapshot(tmp_path / "reference")
    assert "cf.ints" not in snapshot and snapshot["cf.ints2"][1]  # RENAME TABLE moved the rows
    assert applied.checkpoint_ts == stats.checkpoint_ts == captured()[-1].commit_ts
    again = apply(spark, source, ParquetSnapshotSink(out), tmp_path / "ck-apply", available_now=True)
    assert again.batches == 0  # resumed from its checkpoint: nothing new
    # Written by the raw local file system through the FileSystem-based manager: no checksum
    # files, no temporary files left, every batch's offsets and commit in place.
    assert spark.conf.get(CHECKPOINT_MANAGER) == LOCAL_CHECKPOINT_MANAGER
    for ck in (tmp_path / "ck-capture", tmp_path / "ck-apply"):
        names = [p.name for p in ck.rglob("*") if p.is_file()]
        assert not [n for n in names if n.endswith((".crc", ".tmp"))], names
        offsets = sorted(int(p.name) for p in (ck / "offsets").iterdir() if p.name.isdigit())
        commits = sorted(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
        assert offsets == commits and offsets


def test_checkpoint_manager_follows_the_location_and_the_users_choice(spark: SparkSession) -> None:
    saved = spark.conf.get(CHECKPOINT_MANAGER, None)
    try:
        spark.conf.unset(CHECKPOINT_MANAGER)
        checkpoint_conf(spark, "hdfs://namenode/ck")  # elsewhere: Spark's own default stays
        assert spark.conf.get(CHECKPOINT_MANAGER, None) is None
        checkpoint_conf(spark, "/var/lib/changefeed/ck")
        assert spark.conf.get(CHECKPOINT_MANAGER) == LOCAL_CHECKPOINT_MANAGER
        mine = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        spark.conf.set(CHECKPOINT_MANAGER, mine)
        checkpoint_conf(spark, "file:///var/lib/changefeed/ck")
        assert spark.conf.get(CHECKPOINT_MANAGER) == mine  # --spark-conf wins
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER)
        if saved is not None:
            spark.conf.set(CHECKPOINT_MANAGER, saved)


def test_restart_after_a_failed_batch_replays_without_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    storage, out = tmp_path / "storage", tmp_path / "parquet"
    failed: list[tuple[int, str]] = []

    def fail_once(at: tuple[int, str]) -> Callable[[int, str], None]:
        def hook(batch_id: int, stage: str) -> None:
            if (batch_id, stage) == at and at not in failed:
                failed.append(at)
                raise RuntimeError(f"injected failure at batch {batch_id} ({stage})")

        return hook

    def capture_run(**kw: Any) -> Any:
        return capture(spark, StorageWriter(storage, CODEC), tmp_path / "ck-capture", max_events=8, **kw)

    def apply_run(**kw: Any) -> Any:
        return apply(spark, storage_source(storage, CODEC), ParquetSnapshotSink(out), tmp_path / "ck-apply", **kw)

    # Batch 1 fails after its data and checkpoint were published: the replay must add nothing.
    with pytest.raises(StreamingQueryException, match="injected failure"):
        capture_run(available_now=True, hook=fail_once((1, "flushed")))
    # The apply job fails before its first flush, on what the capture had published so far.
    with pytest.raises(StreamingQueryException, match="injected failure"):
        apply_run(available_now=True, hook=fail_once((0, "written")))
    resumed = capture_run(available_now=True)
    assert resumed.batch_ids[0] == 1  # the failed batch re-runs with its id and offsets
    assert _storage_rows(storage) == _expected_rows()  # nothing duplicated, nothing lost
    applied = apply_run(available_now=True)
    assert applied.batch_ids[0] == 0
    assert read_snapshot(out) == reference_snapshot(tmp_path / "reference")
    assert failed == [(1, "flushed"), (0, "written")]


def test_run_max_bytes_cuts_the_binlog_into_more_batches_with_the_same_output(
    spark: SparkSession, tmp_path: Path
) -> None:
    """`changefeed run --max-bytes` (maxBytesPerTrigger): smaller micro-batches, the same rows."""
    from changefeed.cli import main  # noqa: PLC0415

    def run(name: str, *extra: str) -> tuple[Path, int]:
        storage, config, checkpoint = tmp_path / name, tmp_path / f"{name}.toml", tmp_path / f"ck-{name}"
        config.write_text(
            f'changefeed-id = "{name}"\n'
            f'sink-uri = "file://{storage}?protocol=canal-json&enable-tidb-extension=true"\n'
            f'[source]\npath = "{BINLOG}"\n'
        )
        assert main(["run", str(config), "--checkpoint", str(checkpoint), "--available-now", *extra]) == 0
        commits = [p for d in checkpoint.rglob("commits") for p in d.iterdir() if p.name.isdigit()]
        return storage, len(commits)

    whole, whole_batches = run("whole")
    cut, cut_batches = run("cut", "--max-bytes", "1k")
    assert cut_batches > whole_batches >= 1
    assert _storage_rows(cut) == _storage_rows(whole) == _expected_rows()


def test_binlog_straight_to_parquet_equals_the_direct_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    """Any source into any sink: binlog ranges decoded on the driver into row blocks, no storage hop."""
    out, checkpoint = tmp_path / "parquet", tmp_path / "ck"
    failed: list[int] = []

    def fail_once(batch_id: int, stage: str) -> None:
        if (batch_id, stage) == (1, "written") and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected failure between write and flush")

    with pytest.raises(StreamingQueryException, match="injected failure"):
        capture(spark, ParquetSnapshotSink(out), checkpoint, max_events=8, available_now=True, hook=fail_once)
    resumed = capture(spark, ParquetSnapshotSink(out), checkpoint, max_events=8, available_now=True)
    assert resumed.batch_ids[0] == 1 and resumed.batches >= 2
    assert read_snapshot(out) == reference_snapshot(tmp_path / "reference")
    assert resumed.checkpoint_ts == captured()[-1].commit_ts


def test_batches_leave_no_jvm_objects_pinned_by_reference_cycles(spark: SparkSession, tmp_path: Path) -> None:
    """Collecting a batch leaves py4j proxies in reference cycles; each pins its JVM object (the collected
    result included) until Python's cyclic GC runs. The runner collects them after every batch, so a job
    whose GC seldom runs (ours: `quiet_gc`) does not keep every batch's result in the driver's JVM: what
    is left in cycles at the end (the query's own start and stop) does not grow with the batches."""

    def pinned_after(max_events: int, name: str) -> tuple[int, int]:
        gc.collect()
        gc.disable()  # only the runner's own collections run during the job
        try:
            sink = ParquetSnapshotSink(tmp_path / name)
            stats = capture(spark, sink, tmp_path / f"ck-{name}", max_events=max_events, available_now=True)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            return stats.batches, sum(isinstance(o, JavaObject) for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()

    one_batch, few = pinned_after(1000, "one")
    batches, many = pinned_after(3, "many")
    assert one_batch == 1 and batches >= 8
    assert many == few <= 4  # before: ~9 more proxies in cycles per batch


def test_two_jobs_register_the_data_source_at_once() -> None:
    """Spark's registration checks the name against every source it finds, a name being registered that
    moment included (`changefeed pipeline` starts two queries together): `register` takes turns."""
    import threading  # noqa: PLC0415

    from changefeed.spark.datasource import register  # noqa: PLC0415

    class Registry:  # Spark's rule: a name known to the manager may be registered again; one found elsewhere not
        def __init__(self) -> None:
            self.known: set[str] = set()
            self.pending: set[str] = set()

        def register(self, source: type) -> None:
            name = source.name()
            if name not in self.known and name in self.pending:
                raise RuntimeError("DATA_SOURCE_ALREADY_EXISTS")
            self.pending.add(name)
            time.sleep(0.05)  # the lookup of the other data sources
            self.known.add(name)

    session = type("Session", (), {})()
    session.dataSource = Registry()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def job() -> None:
        start.wait()
        try:
            register(session)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=job) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and session.dataSource.known == {"changefeed"}
