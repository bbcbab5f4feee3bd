"""The streaming jobs: capture (binlog -> storage directory or Kafka) and apply (storage or Kafka -> Parquet or MySQL).

Both are Structured Streaming queries over the ``changefeed`` data source; Spark's checkpoint
location is the savepoint (source offsets). No row travels between stages as a changelog row:

* capture from a binlog: the source hands over ranges (``output=ranges``); the ``foreachBatch``
  runs a ``mapInArrow`` stage (changefeed/spark/encode.py) that decodes each range, dispatches
  and encodes it in one executor task and hands back encoded bytes in source order; the driver
  only writes them (``write_encoded``);
* apply: the source hands over raw Kafka messages (``output=messages``) or storage ranges
  (``output=ranges``) and the driver decodes each once, in its stage (changefeed/spark/merge.py:
  the cross-partition merge for Kafka, commit order for storage), right before the sink.

The durable write runs in ``foreachBatch`` on the driver through a sink that makes a replayed
micro-batch change nothing:

* capture: `StorageWriter` publishes data before its checkpoint, removes a crashed flush's files
  on start, and drops rows at or below its published checkpoint. Each batch ends with the
  source's resolved row, so the storage checkpoint advances every batch.
* capture to Kafka: `KafkaSink.flush` waits for every acknowledgement before foreachBatch returns;
  a replayed batch is sent again and the apply side's merge drops the copies.
* apply: `ParquetSnapshotSink` skips events at or below its checkpoint and publishes snapshots
  before the checkpoint; `MySQLSink` commits rows and its checkpoint row in one transaction,
  skips commit ts at or below it, and starts in safe mode (idempotent statements).

So a batch that failed (or was interrupted) after writing is re-run from the same offsets on
restart and changes nothing twice. Encoding in executors keeps that: the replay rules live in the
sinks' byte-taking paths, and what an executor needs from the sink's history (checkpoint, last
resolved ts, topic partition counts) is read from the driver's sink when each batch starts.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ..codec import CodecOptions
from ..errors import ChangefeedError, ConfigError
from ..model import Resolved
from ..model.jsonl import EventReader
from ..model.tso import tso_physical_ms
from ..ops.monitor import JobMonitor, sink_kind
from ..sink.kafka import KafkaSink, KafkaSinkConfig
from ..sink.mysql import MySQLParams, MySQLSink, MySQLSinkConfig
from ..sink.parquet import ParquetSnapshotSink
from ..sink.storage.writer import StorageOptions, StorageWriter
from .datasource import NAME, KafkaInput, SourceOptions, register
from .datasource.binlog import RANGES, RangeDecoder
from .datasource.storage import RANGES as STORAGE_RANGES
from .datasource.storage import StorageInput
from .encode import PartitionEvents, encode_kafka, encode_storage, event_order, in_commit_order, jsonl_events, row_count
from .merge import MergeStage, OrderedStage, Stage
from .pyworker import quiet_gc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
progress = logging.getLogger("changefeed.progress")

BatchHook = Callable[[int, str], None]
"""Called as ``hook(batch_id, stage)`` with stage ``written`` (before the sink's flush) and
``flushed`` (after it): tests inject failures here."""


@dataclass
class JobStats:
    """What a job run did, for the CLI summary and tests."""

    batches: int = 0
    rows: int = 0
    checkpoint_ts: int = 0
    position: str = ""
    seconds: float = 0.0
    batch_ids: list[int] = field(default_factory=list)


_order = event_order  # a DDL precedes rows of its commit ts; a resolved row follows everything it covers


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


class _BatchRunner:
    """The foreachBatch body shared by both jobs: collect events, write, flush, report."""

    def __init__(
        self,
        name: str,
        write: Callable[[list[Any]], None],
        flush: Callable[[], int],
        hook: BatchHook | None,
        stage: Stage | None = None,
        collect: Callable[[DataFrame, int], list[Any]] | None = None,
    ) -> None:
        self.name = name
        self.collect = collect  # capture: encoded in executors, in source order (changefeed/spark/encode.py)
        self.write = write
        self.flush = flush
        self.hook = hook
        self.stage = stage
        self.reader = EventReader(source=f"{name} batch")
        self.stats = JobStats()
        self.started = time.monotonic()
        self.monitor = JobMonitor(name, sink_kind(write))  # metrics, status file, log context (changefeed/ops)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self.monitor.batch(batch_id):  # a raising batch is counted as failed and kept as the last error
            self._batch(df, batch_id)

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        if self.collect is not None:
            events = self.collect(df, batch_id)
        elif self.stage is not None:
            # kafka: raw messages decoded once here and merged; storage: ranges read and decoded here
            events = self.stage.run(df.toArrow(), batch_id)
        else:
            lines = df.select("event").toArrow().column("event").to_pylist()
            events = [self.reader.parse(line, where=f"batch {batch_id}") for line in lines if line]
            events.sort(key=_order)
        self.monitor.collected(batch_id, events)  # counted once per batch id, even if the batch fails later
        rows = row_count(events)
        self.write(events)
        if self.hook is not None:
            self.hook(batch_id, "written")
        checkpoint = self.flush()
        if self.hook is not None:
            self.hook(batch_id, "flushed")
        if self.stage is not None:
            self.stage.commit(batch_id)
        last = next((e for e in reversed(events) if isinstance(e, Resolved)), None)
        elapsed = max(time.monotonic() - t0, 1e-6)
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


def _run_query(
    spark: SparkSession,
    source: DataFrame,
    runner: _BatchRunner,
    checkpoint: Path,
    trigger_interval: str | None,
    available_now: bool,
    query_name: str,
) -> JobStats:
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
    try:
        query = writer.start()
    except BaseException as exc:
        runner.monitor.stop(exc)
        raise
    log.info(
        "job started", extra={**runner.monitor.log_fields, "checkpoint": str(checkpoint), "query_id": str(query.id)}
    )
    # Ctrl-C only sets a flag: PySpark's own SIGINT handler calls into the JVM while the main
    # thread is inside a py4j call and fails noisily. The loop stops the query between polls.
    interrupted = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    ended: BaseException | None = None
    try:
        while not query.awaitTermination(0.5):
            if interrupted.is_set():
                progress.info("%s: interrupted; stopping (batches replay idempotently on restart)", runner.name)
                query.stop()
                raise KeyboardInterrupt
    except BaseException as exc:
        ended = exc
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        runner.stats.seconds = time.monotonic() - runner.started
        runner.monitor.stop(ended)  # status file: stopped or failed; the metrics endpoint closes
    return runner.stats


def _check_dirs(checkpoint: Path, output: Path) -> None:
    if checkpoint.resolve() == output.resolve():
        raise ConfigError(f"the Spark checkpoint directory must not be the output directory itself: {output}")


CaptureSource = str | Path | Mapping[str, str]
"""What a capture job reads: a binlog directory, or data source options (e.g. another ``input``)."""


class CaptureInput(NamedTuple):
    """The capture job's stream, how a micro-batch is put in commit order, and how a partition is read."""

    stream: DataFrame
    ordered: Callable[[DataFrame], DataFrame]
    events: PartitionEvents


def _capture_stream(
    spark: SparkSession,
    source: CaptureSource,
    rules: list[str] | None,
    time_zone: str,
    max_events: int | None,
    events_per_partition: int | None,
) -> CaptureInput:
    """The capture job's input, and how its encode stage reads a partition of it.

    A binlog input hands over ranges (``output=ranges``): the encode stage decodes each range
    itself, in binlog order, so rows never travel as changelog rows. Any other input is read as
    a changelog with its JSONL events, range-partitioned into commit order first.
    """
    register(spark)
    options = dict(source) if isinstance(source, Mapping) else {"input": "binlog", "path": str(source)}
    options["timeZone"] = time_zone
    if rules:
        options["filter"] = ",".join(rules)
    if max_events:
        options["maxEventsPerTrigger"] = str(max_events)
    if events_per_partition:
        options["eventsPerPartition"] = str(events_per_partition)
    binlog = options.get("input") == "binlog"
    options["output" if binlog else "events"] = RANGES if binlog else "true"
    reader = spark.readStream.format(NAME)
    for key, value in options.items():
        reader = reader.option(key, value)
    if binlog:
        return CaptureInput(reader.load(), lambda df: df, RangeDecoder.from_options(options).events)
    return CaptureInput(reader.load(), in_commit_order, jsonl_events)


def run_capture(
    spark: SparkSession,
    source: CaptureSource,
    storage_root: str | Path,
    codec: CodecOptions,
    checkpoint: str | Path,
    *,
    storage: StorageOptions | None = None,
    rules: list[str] | None = None,
    time_zone: str = "UTC",
    max_events: int | None = None,
    events_per_partition: int | None = None,
    trigger_interval: str | None = "1 second",
    available_now: bool = False,
    hook: BatchHook | None = None,
) -> JobStats:
    """Binlog -> TiCDC storage-sink directory: lines encoded in executors, one StorageWriter flush per micro-batch."""
    checkpoint, storage_root = Path(checkpoint), Path(storage_root)
    _check_dirs(checkpoint, storage_root)
    writer = StorageWriter(storage_root, codec, storage)  # recovers a crashed flush before anything runs
    capture = _capture_stream(spark, source, rules, time_zone, max_events, events_per_partition)

    def collect(df: DataFrame, batch_id: int) -> list[Any]:
        return encode_storage(capture.ordered(df), writer, capture.events)

    runner = _BatchRunner("capture", writer.write_encoded, writer.flush, hook, collect=collect)
    return _run_query(spark, capture.stream, runner, checkpoint, trigger_interval, available_now, "changefeed-capture")


def run_capture_kafka(
    spark: SparkSession,
    source: CaptureSource,
    sink_config: KafkaSinkConfig,
    checkpoint: str | Path,
    *,
    rules: list[str] | None = None,
    time_zone: str = "UTC",
    max_events: int | None = None,
    events_per_partition: int | None = None,
    trigger_interval: str | None = "1 second",
    available_now: bool = False,
    hook: BatchHook | None = None,
) -> JobStats:
    """Binlog -> Kafka topic through `KafkaSink`, every micro-batch acknowledged before it ends.

    Rows are routed and encoded in executors; the driver produces the messages in source order.
    At least once on the wire, exactly once downstream: foreachBatch returns only after
    ``flush()`` saw every message acknowledged (acks=all), so Spark commits the binlog offsets of
    acknowledged batches only. A replayed batch sends its messages again; consumers drop them
    (rows at or below their partition's resolved ts, or identical to rows already received).
    """
    sink = KafkaSink(sink_config)
    capture = _capture_stream(spark, source, rules, time_zone, max_events, events_per_partition)

    def flush() -> int:
        flushed = sink.flush()
        return flushed.commit_ts if flushed is not None else 0

    def collect(df: DataFrame, batch_id: int) -> list[Any]:
        return encode_kafka(capture.ordered(df), sink, capture.events)

    runner = _BatchRunner("capture", sink.write_encoded, flush, hook, collect=collect)
    try:
        return _run_query(
            spark, capture.stream, runner, Path(checkpoint), trigger_interval, available_now, "changefeed-capture"
        )
    finally:
        try:
            sink.close()  # every batch flushed itself; this only releases the producer
        except ChangefeedError as exc:
            log.warning("kafka sink close failed", extra={"error": str(exc)})


def storage_source(storage_root: str | Path, codec: CodecOptions) -> dict[str, str]:
    """The data source options that read a storage-sink directory written with ``codec``."""
    return {"input": "storage", "path": str(storage_root), **_codec_options(codec)}


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
    return not context.master.startswith("local") or context.defaultParallelism >= 4


def _merge_stage(source: Mapping[str, str], checkpoint: Path, in_tasks: bool) -> Stage | None:
    """How the driver turns the source's rows into events (changefeed/spark/merge.py), None: JSONL events.

    kafka: messages decoded in the range tasks (``in_tasks``, protocols with a columnar decoder)
    or here, and merged here across partitions (state across batches); storage: range
    descriptions, read and decoded here (a range is complete and in commit order).
    """
    opts = SourceOptions.parse(source)
    if opts.input == "kafka":
        kafka = KafkaInput(opts)
        partitions = kafka.partition_ids()
        decoder = kafka.message_decoder(in_tasks)
        return MergeStage(checkpoint / "changefeed-merge", kafka.topic, partitions, decoder)
    if opts.input == "storage":
        ranges = StorageInput(opts).range_decoder()
        return OrderedStage(STORAGE_RANGES, lambda table: ranges.events(table.to_batches()))
    return None


def _apply_stream(spark: SparkSession, source: Mapping[str, str], stage: Stage | None) -> DataFrame:
    """The source's rows: the stage's internal ``output``, or changelog rows with JSONL events."""
    register(spark)
    reader = spark.readStream.format(NAME)
    for key, value in source.items():
        reader = reader.option(key, value)
    if stage is not None:
        return reader.option("output", stage.output).load()
    return reader.option("events", "true").load()


def run_apply(
    spark: SparkSession,
    storage_root: str | Path,
    codec: CodecOptions,
    output: str | Path,
    checkpoint: str | Path,
    *,
    source: Mapping[str, str] | None = None,
    trigger_interval: str | None = "1 second",
    available_now: bool = False,
    hook: BatchHook | None = None,
) -> JobStats:
    """TiCDC storage-sink directory (or ``source`` options) -> Parquet snapshot per table, flushed every micro-batch."""
    checkpoint, output = Path(checkpoint), Path(output)
    _check_dirs(checkpoint, output)
    source = source if source is not None else storage_source(storage_root, codec)
    sink = ParquetSnapshotSink(output)
    stage = _merge_stage(source, checkpoint, decode_in_tasks(spark))
    runner = _BatchRunner("apply", sink.write_all, sink.flush, hook, stage)
    try:
        stream = _apply_stream(spark, source, stage)
        return _run_query(spark, stream, runner, checkpoint, trigger_interval, available_now, "changefeed-apply")
    finally:
        if stage is not None:
            stage.close()


def run_apply_mysql(
    spark: SparkSession,
    source: Mapping[str, str],
    target: str | MySQLParams,
    checkpoint: str | Path,
    *,
    sink_config: MySQLSinkConfig | None = None,
    trigger_interval: str | None = "1 second",
    available_now: bool = False,
    hook: BatchHook | None = None,
    job: str = "apply",
) -> JobStats:
    """Data source (``source`` options, e.g. `storage_source`) -> MySQL/MariaDB through `MySQLSink`.

    ``job`` names it in progress lines, metrics and the status file: ``capture`` when `changefeed
    run` reads a binlog straight into a database.

    Exactly once without two-phase commit: each micro-batch is written and flushed (rows and the
    sink's checkpoint row in one downstream transaction) before foreachBatch returns, so Spark
    commits a batch's offsets only after it is durable downstream. A batch replayed after a crash
    between the two commits carries commit ts at or below the sink's checkpoint and is skipped;
    the sink starts in safe mode (REPLACE / DELETE by key), so a partial replay converges too.
    """
    sink = MySQLSink(target, sink_config or MySQLSinkConfig())
    loaded = sink.load_checkpoint()  # connects, creates the checkpoint table, starts safe mode
    log.info(
        "apply to mysql: downstream checkpoint loaded",
        extra={
            "changefeed": sink.config.changefeed_id,
            "target": sink.params.url,
            "checkpoint_ts": loaded.commit_ts if loaded else 0,
        },
    )

    def flush() -> int:
        sink.flush()
        return sink.checkpoint.commit_ts if sink.checkpoint else 0

    stage = _merge_stage(source, Path(checkpoint), decode_in_tasks(spark))
    runner = _BatchRunner(job, sink.write, flush, hook, stage)
    try:
        stream = _apply_stream(spark, source, stage)
        return _run_query(spark, stream, runner, Path(checkpoint), trigger_interval, available_now, f"changefeed-{job}")
    finally:
        sink.abort()  # every batch flushed itself; anything still buffered belongs to a failed batch
        if stage is not None:
            stage.close()


def _codec_options(codec: CodecOptions) -> dict[str, str]:
    """The codec options that differ from the defaults, as data source options."""
    defaults = CodecOptions()
    out: dict[str, str] = {"protocol": codec.protocol}
    for name in (
        "enable_tidb_extension",
        "include_commit_ts",
        "delimiter",
        "quote",
        "null",
        "terminator",
        "binary_encoding_method",
        "csv_output_old_value",
        "output_field_header",
        "time_zone",
        "compat",
    ):
        value = getattr(codec, name)
        if value != getattr(defaults, name):
            key = "output-old-value" if name == "csv_output_old_value" else name.replace("_", "-")
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def failed_batch_error(exc: BaseException) -> ChangefeedError:
    """A streaming failure as one error naming the job (the Spark trace stays in the log)."""
    text = str(exc).strip().splitlines()
    return ChangefeedError(f"streaming query failed: {text[0] if text else type(exc).__name__}")
