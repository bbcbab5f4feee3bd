"""The streaming jobs: one runner (`run_job`) over a source and a `Sink`.

A job is a Structured Streaming query over the ``changefeed`` data source; Spark's checkpoint
location is the savepoint (source offsets). `plan` chooses, from the source's ``input`` and the
sink, how a micro-batch travels; no row travels between stages as a changelog row:

* binlog -> storage or Kafka: the source hands over ranges (``output=ranges``); the
  ``foreachBatch`` runs a ``mapInArrow`` stage (changefeed/spark/encode.py) that decodes each
  range, dispatches and encodes it in one executor task and hands back encoded bytes in source
  order; the driver only writes them (``write_encoded``);
* binlog -> MySQL or Parquet: the ranges are decoded on the driver into Arrow row blocks;
* Kafka: ranges the driver reads and decodes itself (``output=ranges``) or messages decoded in the
  range tasks (``output=decoded``), merged across partitions on the driver (changefeed/spark/merge.py);
* storage: range descriptions (``output=ranges``), read and decoded on the driver in commit order;
* any other input (the mounter's ``kv``): the changelog's JSONL events.

Every sink has the same contract (changefeed/sink/base.py): ``open`` gives the checkpoint it
holds, ``write`` buffers a batch, ``flush`` makes it durable before ``foreachBatch`` returns, and
``close`` never flushes. One exception: a Kafka merge over ranges the driver reads resumes from its
own saved state, so a batch may become durable while the next one starts (`LaterCommitted`,
changefeed/spark/merge.py; the MySQL sink's ``flush_async``). A sink makes a replayed micro-batch change nothing:

* storage: `StorageWriter` publishes data before its checkpoint, removes a crashed flush's files
  on start, and drops rows at or below its published checkpoint. Each batch ends with the
  source's resolved row, so the storage checkpoint advances every batch.
* Kafka: `KafkaSink.flush` waits for every acknowledgement; a replayed batch is sent again and
  the apply side's merge drops the copies.
* Parquet: `ParquetSnapshotSink` skips events at or below its checkpoint and publishes snapshots
  before the checkpoint.
* MySQL: `MySQLSink` commits rows and its checkpoint row in one transaction, skips commit ts at
  or below it, and starts in safe mode (idempotent statements).

So a batch that failed (or was interrupted) after writing is re-run from the same offsets on
restart and changes nothing twice. Encoding in executors keeps that: the replay rules live in the
sinks' byte-taking paths, and what an executor needs from the sink's history (checkpoint, last
resolved ts, topic partition counts) is read from the driver's sink when each batch starts.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from ..codec import CodecOptions
from ..dispatch.pipeline import EventPipeline
from ..dispatch.route import EventTransform, partition_events
from ..errors import ChangefeedError, ConfigError
from ..files.batchstate import BatchState
from ..files.store import StateStore, checkpoint_location, open_store
from ..model import Resolved
from ..model.jsonl import EventReader
from ..model.tso import tso_physical_ms
from ..ops.monitor import JobMonitor
from ..sink.base import Pending, PipelinedSink, Sink
from ..sink.kafka import KafkaSink
from ..sink.storage.writer import StorageWriter
from .datasource import NAME, KafkaInput, SourceOptions, register
from .datasource.binlog import RANGES as BINLOG_RANGES
from .datasource.binlog import RangeDecoder
from .datasource.storage import RANGES as STORAGE_RANGES
from .datasource.storage import StorageInput
from .encode import PartitionEvents, encode_kafka, encode_storage, event_order, in_commit_order, jsonl_events, row_count
from .merge import MergeStage, OrderedStage, Stage
from .pyworker import quiet_gc
from .session import checkpoint_conf
from .ship import is_local_master
from .warmup import warm_up

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
progress = logging.getLogger("changefeed.progress")
spark_log = logging.getLogger("changefeed.progress.spark")

#: How long the end of a stopped query waits for a micro-batch still running (`_BatchRunner.finish`).
FINISH_WAIT_S = 60.0

BatchHook = Callable[[int, str], None]
"""Called as ``hook(batch_id, stage)`` with stage ``written`` (before the sink's flush) and
``flushed`` (once the batch is durable: during the next batch where it became durable later,
`LaterCommitted`): tests inject failures here."""


@dataclass
class JobStats:
    """What a job run did, for the CLI summary and tests."""

    batches: int = 0
    rows: int = 0
    checkpoint_ts: int = 0
    position: str = ""
    seconds: float = 0.0
    batch_ids: list[int] = field(default_factory=list)


def _short_position(pos: Any) -> str:
    if not isinstance(pos, Mapping):
        return ""
    if "file" in pos and "pos" in pos:
        return f"{pos['file']}:{pos['pos']}"
    if "checkpoint" in pos:
        return f"checkpoint {pos['checkpoint']}"
    if "offsets" in pos:
        return f"{pos.get('topic', '')} offsets " + ",".join(f"{p}:{o}" for p, o in pos["offsets"].items())
    return orjson.dumps(dict(pos)).decode()


class Committed(Protocol):
    """State kept across batches (a `Stage`, a stateful pipeline's): told after each flush, closed at the end."""

    def commit(self, batch_id: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class LaterCommitted(Committed, Protocol):
    """State whose job resumes from it rather than from Spark's offsets (the Kafka merge over ranges
    the driver reads): a batch may become durable while the next one runs."""

    def durable_later(self, batch_id: int) -> bool:
        """Whether ``batch_id`` may be committed after foreachBatch returned (`MergeStage.durable_later`)."""
        ...


@dataclass
class _Written:
    """A batch written to the sink, until it is durable and reported."""

    batch_id: int
    events: list[Any]
    seconds: float  # its foreachBatch until handed over
    pending: Pending | None  # handed over without waiting (None: the sink's `flush` makes it durable)


@dataclass
class Plan:
    """How one job turns a micro-batch of its source into what its sink takes."""

    stream: DataFrame
    # Batch DataFrame, batch id -> the batch's events or encoded items, in pieces written as they
    # come: the sink applies one piece while the next is decoded (`Stage.chunks`).
    collect: Callable[[DataFrame, int], Iterable[list[Any]]]
    write: Callable[[list[Any]], None]  # the sink's `write`, or its `write_encoded` for encoded items
    stage: Committed | None = None  # state across batches (the Kafka merge): committed after each flush


class _BatchRunner:
    """The foreachBatch body of every job: collect, write, flush, commit the stage, report."""

    def __init__(self, name: str, sink: Sink, plan: Plan, hook: BatchHook | None) -> None:
        self.name = name
        self.sink = sink
        self.plan = plan
        self.hook = hook
        self.stats = JobStats()
        self.started = time.monotonic()
        self.monitor = JobMonitor(name, sink.kind)  # metrics, status file, log context (changefeed/ops)
        self.later: _Written | None = None  # the batch becoming durable while the next one runs
        self._busy = threading.Lock()  # a batch, or `idle` committing the one before (two threads)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        try:
            with self._busy, self.monitor.batch(batch_id):  # a raising batch counts as failed, its error kept
                self._batch(df, batch_id)
        finally:
            release_batch()

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        """Collect and write; then make the batch durable and commit the stage (`_done`), or, where the
        stage allows it (`LaterCommitted`), only hand it over: the server applies its last statements
        while Spark plans and starts the next batch, which waits for it as it ends (~0.1-0.2 s a
        160k-row batch of the apply job, bench/RESULTS.md)."""
        t0 = time.monotonic()
        events: list[Any] = []
        try:
            for piece in self.plan.collect(df, batch_id):
                self.plan.write(piece)
                events.extend(piece)
        finally:
            self.monitor.collected(batch_id, events)  # counted once per batch id, even if the batch fails later
        if self.hook is not None:
            self.hook(batch_id, "written")
        stage, pending = self.plan.stage, None
        if isinstance(self.sink, PipelinedSink) and isinstance(stage, LaterCommitted) and stage.durable_later(batch_id):
            pending = self.sink.flush_async()
        written = _Written(batch_id, events, time.monotonic() - t0, pending)
        earlier, self.later = self.later, None
        if earlier is not None:
            self._done(earlier)  # its statements went first: durable by now, as a rule
        if pending is not None:
            self.later = written
        else:
            self._done(written)  # the sink's flush waits for every batch before it too

    def idle(self) -> None:
        """Between batches (the query's poll loop): a batch handed over is committed and reported once
        it is durable, so an idle job's checkpoint and status are current. Raises what failed."""
        if self.later is None or not self._busy.acquire(blocking=False):
            return
        try:
            self._settle(only_if_done=True)
        finally:
            self._busy.release()

    def finish(self, timeout: float = FINISH_WAIT_S) -> None:
        """The query ended: the batch still becoming durable is waited for, committed and reported.

        A stopped query's last foreachBatch may still be running on Spark's callback thread: it is
        waited for up to ``timeout`` seconds, else nothing is committed (a restart re-reads it)."""
        if not self._busy.acquire(timeout=timeout):
            raise ChangefeedError(f"the last micro-batch did not end within {timeout:.0f} s of the query's stop")
        try:
            self._settle(only_if_done=False)
        finally:
            self._busy.release()

    def _settle(self, *, only_if_done: bool) -> None:
        """The batch handed over (if any, and if durable already where ``only_if_done``) committed and
        reported as a batch of its own; the caller holds `_busy`."""
        written = self.later
        if written is None or (only_if_done and written.pending is not None and not written.pending.done()):
            return
        self.later = None
        with self.monitor.batch(written.batch_id):
            self._done(written)

    def _done(self, written: _Written) -> None:
        """Wait until ``written`` is durable, commit the stage's state of it, report it."""
        started = time.monotonic()
        batch_id, events = written.batch_id, written.events
        checkpoint = written.pending.wait() if written.pending is not None else self.sink.flush()
        if self.hook is not None:
            self.hook(batch_id, "flushed")
        if self.plan.stage is not None:
            self.plan.stage.commit(batch_id)
        rows = row_count(events)
        last = next((e for e in reversed(events) if isinstance(e, Resolved)), None)
        elapsed = max(written.seconds + time.monotonic() - started, 1e-6)
        self.stats.batches += 1
        self.stats.rows += rows
        self.stats.checkpoint_ts = max(self.stats.checkpoint_ts, checkpoint)
        self.stats.batch_ids.append(batch_id)
        if last is not None:
            self.stats.position = _short_position(last.position)
        tables = self.monitor.batch_done(
            batch_id, events, checkpoint, last.position if last else None, last.commit_ts if last else 0, elapsed
        )
        lag = time.time() - tso_physical_ms(checkpoint) / 1000 if checkpoint else float("nan")
        progress.info(
            "%s batch=%d rows=%d rows/s=%.0f checkpoint_ts=%d position=%s lag=%.1fs",
            self.name,
            batch_id,
            rows,
            rows / elapsed,
            checkpoint,
            self.stats.position or "-",
            lag,
            extra={"rows": rows, "checkpoint_ts": checkpoint, "lag_seconds": round(lag, 3), "tables": tables},
        )


def release_batch() -> None:
    """Collect the micro-batch's reference cycles now, before the next batch.

    Why: collecting a batch (``toArrow``) leaves py4j proxies in reference cycles, and each pins
    its JVM object, the collected result included, until Python's cyclic GC frees it; our GC
    thresholds (`quiet_gc`) make full collections rare, so the driver's JVM kept every batch's
    result: a snapshot of 1M rows (~36 MB per batch) ran a 1 GB JVM out of heap after 15 batches
    (bench/RESULTS.md, "Snapshot batches bounded in bytes"). Only what is not frozen is walked.
    """
    started = time.perf_counter()
    found = gc.collect()
    log.debug("batch released: %d objects in cycles, %.1f ms", found, (time.perf_counter() - started) * 1000)


def _run_query(
    spark: SparkSession,
    source: DataFrame,
    runner: _BatchRunner,
    checkpoint: Path | str,
    trigger_interval: str | None,
    available_now: bool,
    query_name: str,
    stop: threading.Event | None = None,
) -> JobStats:
    checkpoint_conf(spark, checkpoint)
    writer = source.writeStream.foreachBatch(runner).option("checkpointLocation", str(checkpoint))
    writer = writer.queryName(query_name)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_interval:
        writer = writer.trigger(processingTime=trigger_interval)
    runner.monitor.start(checkpoint)
    # What the driver holds by now (pyspark, py4j, pyarrow, the stage and sink) lives as long as
    # the job: out of the cyclic GC's sight, its full collections during a micro-batch's decode
    # stop walking it (bench/apply_stage.py --freeze: ~10-20% of the driver's CPU per row).
    quiet_gc()
    warm_up(spark)  # the first micro-batch finds Spark's Python processes started
    try:
        query = writer.start()
    except BaseException as exc:
        runner.monitor.stop(exc)
        raise
    log.info(
        "job started",
        extra={
            **runner.monitor.log_fields,
            "checkpoint": str(checkpoint),
            "query_id": str(query.id),
            "master": spark.sparkContext.master,
        },
    )
    # Ctrl-C only sets a flag: PySpark's own SIGINT handler calls into the JVM while the main
    # thread is inside a py4j call and fails noisily. The loop stops the query between polls.
    interrupted = stop if stop is not None else threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    ended: BaseException | None = None
    try:
        # PySpark takes float seconds (it checks isinstance(timeout, (int, float))); its annotation says int.
        last_batch = -1
        while not query.awaitTermination(0.5):  # type: ignore[arg-type]
            last_batch = _log_spark_durations(query, runner.name, last_batch)
            try:
                runner.idle()
            except Exception:
                query.stop()  # the sink failed between batches: the job fails as a failed batch does
                raise
            if interrupted.is_set():
                progress.info("%s: interrupted; stopping (batches replay idempotently on restart)", runner.name)
                query.stop()
                _finish_stopped(runner)
                raise KeyboardInterrupt
        runner.finish()
    except BaseException as exc:
        ended = exc
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        runner.stats.seconds = time.monotonic() - runner.started
        runner.monitor.stop(ended)  # status file: stopped or failed; the metrics endpoint closes
    return runner.stats


def _finish_stopped(runner: _BatchRunner) -> None:
    """`_BatchRunner.finish` after the query was stopped: a failure is logged, not raised (the stop
    is what the caller asked for, and a restart re-reads whatever it left)."""
    try:
        runner.finish()
    except Exception as exc:
        log.warning("the last batch did not become durable before the stop: %s", exc, extra=runner.monitor.log_fields)


def _log_spark_durations(query: Any, name: str, last_batch: int) -> int:
    """A DEBUG line per finished micro-batch with Spark's own phase times (StreamingQueryProgress.durationMs).

    Where a batch's wall time goes outside our foreachBatch (offsets, planning, the WAL and commit
    logs) is what fixes the lag floor; `bench/e2e.py --detail` runs the jobs with these lines on.
    """
    if not spark_log.isEnabledFor(logging.DEBUG):
        return last_batch
    p = query.lastProgress
    if p is None or p.batchId == last_batch:
        return last_batch
    times = " ".join(f"{k}={v}" for k, v in sorted(p.durationMs.items()))
    spark_log.debug("%s spark batch=%d rows=%d %s", name, p.batchId, p.numInputRows, times)
    return int(p.batchId)


def _check_dirs(checkpoint: Path | str, sink: Sink) -> None:
    output = getattr(sink, "root", None)  # a storage directory or the snapshots' directory
    if isinstance(output, Path) and isinstance(checkpoint, Path) and checkpoint.resolve() == output.resolve():
        raise ConfigError(f"the Spark checkpoint directory must not be the output directory itself: {output}")


def source_options(
    source: str | Path | Mapping[str, str],
    *,
    rules: Sequence[str] | None = None,
    time_zone: str | None = None,
    max_events: int | None = None,
    events_per_partition: int | None = None,
) -> dict[str, str]:
    """Data source options for a job: a binlog directory (or file), or options as they are, plus
    the table filter (``rules``), the source's time zone and micro-batch bounds."""
    options = dict(source) if isinstance(source, Mapping) else {"input": "binlog", "path": str(source)}
    if time_zone:
        options["timeZone"] = time_zone
    if rules:
        options["filter"] = ",".join(rules)
    if max_events:
        options["maxEventsPerTrigger"] = str(max_events)
    if events_per_partition:
        options["eventsPerPartition"] = str(events_per_partition)
    return options


def storage_source(storage_root: str | Path, codec: CodecOptions) -> dict[str, str]:
    """The data source options that read a storage-sink directory written with ``codec``."""
    return {"input": "storage", "path": str(storage_root), **codec.to_mapping()}


#: Where the apply job decodes Kafka messages: ``tasks``, ``driver`` or ``auto`` (`decode_in_tasks`).
DECODE_CONF = "spark.changefeed.apply.decode"


def decode_in_tasks(spark: SparkSession) -> bool:
    """Does the apply job decode Kafka messages in its range tasks (else on the driver)?

    The driver is the one part of the job that does not scale out, and decoding was most of its
    work; but decoding in tasks costs more CPU in all (the decoded tables are handed over, ~7
    µs/row more at 10 columns, bench/RESULTS.md). So by default (``auto``) the tasks decode
    where they have cores of their own: on a cluster, or ``local[N]`` with N >= 4; with 2 or 3
    local cores, shared by every process of the job, the driver decodes. ``--spark-conf
    spark.changefeed.apply.decode=tasks|driver`` decides instead.
    """
    choice = (spark.conf.get(DECODE_CONF, "auto") or "auto").strip().lower()
    if choice not in ("auto", "tasks", "driver"):
        raise ConfigError(f"{DECODE_CONF} must be auto, tasks or driver, not {choice!r}")
    if choice != "auto":
        return choice == "tasks"
    context = spark.sparkContext
    master = context.master
    assert master is not None  # a running SparkContext has one (it does not start without)
    return not master.startswith("local") or context.defaultParallelism >= 4


def _stream(spark: SparkSession, source: Mapping[str, str], **extra: str) -> DataFrame:
    register(spark)
    reader = spark.readStream.format(NAME)
    for key, value in {**source, **extra}.items():
        reader = reader.option(key, value)
    return reader.load()


def _staged(spark: SparkSession, source: Mapping[str, str], stage: Stage, sink: Sink) -> Plan:
    """The source hands over its internal ``output``; the stage turns it into events here, on the driver."""
    stream = _stream(spark, source, output=stage.output)
    if isinstance(stage, MergeStage) and is_local_master(spark.sparkContext.master or ""):
        # Executors on this machine: partitions handed over as their tasks end (changefeed/spark/collect.py).
        return Plan(stream, stage.collect, sink.write, stage)
    return Plan(stream, lambda df, batch_id: stage.chunks(df.toArrow(), batch_id), sink.write, stage)


Encoder = tuple[Callable[["DataFrame", PartitionEvents], Iterable[list[Any]]], Callable[[list[Any]], None]]
"""How executors encode for a sink (its own encoder, per Spark partition: the batch's items in pieces, in
order), and how the driver writes the items."""


def _encoder(sink: Sink) -> Encoder | None:
    """Executors encode for storage and Kafka; None: the driver writes events (MySQL, Parquet)."""
    if isinstance(sink, StorageWriter):
        return (lambda df, events: encode_storage(df, sink, events)), sink.write_encoded
    if isinstance(sink, KafkaSink):
        return (lambda df, events: encode_kafka(df, sink, events)), sink.write_encoded
    return None


def plan(
    spark: SparkSession,
    source: Mapping[str, str],
    sink: Sink,
    checkpoint: Path | str,
    router: EventTransform | None = None,
) -> Plan:
    """The one choice of how data moves from a source to a sink (docs/spark.md, "Jobs"):

    * binlog -> storage or Kafka: the source hands over ranges; executors decode, dispatch and
      encode them (changefeed/spark/encode.py) and the driver only writes the bytes;
    * binlog -> MySQL or Parquet: the ranges are decoded on the driver into Arrow row blocks, in
      binlog (= commit) order, and written as they come;
    * Kafka: messages decoded (in the range tasks or here, `decode_in_tasks`) and merged across
      partitions here, with state saved beside the checkpoint (changefeed/spark/merge.py);
    * storage: ranges of files read and decoded here, in commit order;
    * any other input (the mounter's ``kv``): the changelog's JSONL events, encoded in executors
      for storage and Kafka, parsed here otherwise.

    ``router`` (table routing, docs/routing.md) is applied once to every event before any sink
    sees it: in the executors before they encode, or to each piece the driver writes (`_routed`).
    A stateful one (online DDL, `EventPipeline.stateful`) runs on the driver only, its state kept
    in the checkpoint directory (`BatchState`): executor tasks would each start without it.
    """
    options = dict(source)
    opts = SourceOptions.parse(options)
    store = open_store(checkpoint)  # the job's own files beside Spark's checkpoint (changefeed/files/store.py)
    encoder = _encoder(sink)
    if isinstance(router, EventPipeline) and router.stateful:
        encoder = None  # the driver decodes and hands events to the sink's own `write`
    if opts.input == "binlog":
        if not any(k.lower() == "snapshotdir" for k in options):  # a snapshot's chunks until their batch commits
            spill = store.child("changefeed-snapshot")
            options["snapshotDir"] = spill.where
            # In local mode every reader of the batch sees a local directory: partitions name the chunk files.
            shared = spill.local is not None and is_local_master(spark.sparkContext.master or "")
            options.setdefault("snapshotDirShared", str(shared).lower())
        decoder = RangeDecoder.from_options(options)
        if encoder is not None:
            encode, write = encoder
            stream = _stream(spark, options, output=BINLOG_RANGES)
            events_of = partition_events(router, decoder.events)  # routed in the executors, before encoding
            return Plan(stream, lambda df, batch_id: encode(df, events_of), write)
        # Ranges come in binlog order, each in commit order: no sort (a block may span commit ts).
        stage = OrderedStage(BINLOG_RANGES, lambda table: decoder.events(table.to_batches()), sort=False)
        return _routed(_staged(spark, options, stage, sink), router, store)
    if opts.input == "kafka":
        kafka = KafkaInput(opts)
        decoder_of = kafka.message_decoder(decode_in_tasks(spark))
        partitions = kafka.partition_ids()
        merge = MergeStage(store.child("changefeed-merge"), kafka.topic, partitions, decoder_of, store.child("offsets"))
        return _routed(_staged(spark, options, merge, sink), router, store)
    if opts.input == "storage":
        ranges = StorageInput(opts).range_decoder()
        stage = OrderedStage(STORAGE_RANGES, lambda t: ranges.events(t.to_batches()))
        return _routed(_staged(spark, options, stage, sink), router, store)
    if encoder is None:
        return _routed(changelog_plan(spark, options, sink), router, store)
    encode, write = encoder
    stream = _stream(spark, options, events="true")
    jsonl = partition_events(router, jsonl_events)
    return Plan(stream, lambda df, batch_id: encode(in_commit_order(df), jsonl), write)


def _routed(how: Plan, router: EventTransform | None, store: StateStore) -> Plan:
    """``how`` with every piece the driver writes routed (table routing, docs/routing.md).

    A stateful pipeline starts each batch from the state the last flushed batch left
    (`BatchState`, beside the checkpoint) and saves its own once the sink has flushed it.
    """
    if router is None:
        return how
    collect = how.collect
    pipeline = router if isinstance(router, EventPipeline) and router.stateful else None
    saved = BatchState(store) if pipeline is not None else None

    def routed(df: DataFrame, batch_id: int) -> Iterable[list[Any]]:
        if pipeline is not None and saved is not None:
            pipeline.restore(saved.for_batch(batch_id))
        return (router.route(piece) for piece in collect(df, batch_id))

    if pipeline is None or saved is None:
        return replace(how, collect=routed)
    return replace(how, collect=routed, stage=_StateStage(how.stage, pipeline, saved))


class _StateStage:
    """The plan's stage (if any), and after each flush the pipeline's state saved with the checkpoint."""

    def __init__(self, inner: Committed | None, pipeline: EventPipeline, saved: BatchState) -> None:
        self.inner = inner
        self.pipeline = pipeline
        self.saved = saved

    def commit(self, batch_id: int) -> None:
        if self.inner is not None:
            self.inner.commit(batch_id)
        self.saved.save(batch_id, self.pipeline.state())

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def changelog_plan(spark: SparkSession, source: Mapping[str, str], sink: Sink) -> Plan:
    """Any input read as its changelog with JSONL events, parsed here and sorted into commit order."""
    stream = _stream(spark, source, events="true")
    reader = EventReader(source="changelog batch")

    def parsed(df: DataFrame, batch_id: int) -> tuple[list[Any]]:
        lines = df.select("event").toArrow().column("event").to_pylist()
        events = [reader.parse(line, where=f"batch {batch_id}") for line in lines if line]
        events.sort(key=event_order)
        return (events,)

    return Plan(stream, parsed, sink.write)


def run_job(
    spark: SparkSession,
    source: Mapping[str, str],
    sink: Sink,
    checkpoint: str | Path,
    *,
    job: str = "apply",
    trigger_interval: str | None = "1 second",
    available_now: bool = False,
    hook: BatchHook | None = None,
    router: EventTransform | None = None,
    stop: threading.Event | None = None,
) -> JobStats:
    """Run a job from ``source`` (data source options, e.g. `source_options`) into ``sink`` until stopped.

    ``stop``: another thread sets it to stop the query as Ctrl-C does (`changefeed pipeline`).

    ``router``: table routing (docs/routing.md), applied to every event before ``sink`` sees it.

    ``job`` (``capture`` or ``apply``) names it in progress lines, metrics and the status file.
    Exactly once without two-phase commit: each micro-batch is written and flushed (`Sink`'s
    contract) before foreachBatch returns, so Spark commits a batch's offsets only after it is
    durable downstream (or, where the job resumes from its own state, `LaterCommitted`, that state
    is saved only once the batch is durable); a batch replayed after a crash changes nothing twice (the sinks' replay
    rule). The sink is opened here and closed at the end, also on failure: `close` never
    flushes, so nothing of a failed batch is made durable.
    """
    checkpoint = checkpoint_location(checkpoint)
    _check_dirs(checkpoint, sink)
    stored = sink.open()
    log.info("sink open", extra={"job": job, "sink": sink.kind, "checkpoint_ts": stored})
    staged: Committed | None = None
    try:
        how = plan(spark, source, sink, checkpoint, router)
        staged = how.stage
        runner = _BatchRunner(job, sink, how, hook)
        return _run_query(
            spark, how.stream, runner, checkpoint, trigger_interval, available_now, f"changefeed-{job}", stop
        )
    finally:
        try:
            if staged is not None:
                staged.close()
        finally:
            sink.close()


def streaming(call: Callable[[], JobStats]) -> JobStats:
    """Run a job; Spark's streaming failure becomes one `ChangefeedError` line (the Spark trace goes to the log)."""
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415

    try:
        return call()
    except StreamingQueryException as exc:
        log.debug("streaming query failed", exc_info=True)
        text = str(exc).strip().splitlines()
        # A batch that failed with one of our errors: its own line says what and where (a shard DDL
        # conflict, a refused DDL), not Spark's wrapper around the Python traceback.
        ours = next((line for line in reversed(text) if line.startswith("changefeed.") and "Error: " in line), None)
        first = text[0] if text else type(exc).__name__
        raise ChangefeedError(f"streaming query failed: {ours.split(': ', 1)[1] if ours else first}") from None
