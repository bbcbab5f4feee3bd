"""The kafka input's ``output=ranges`` and `DriverReads`: the apply job's driver reads the batch's
ranges itself, on the tansu broker.

Spark's tasks only name each range; the driver's readers must hand over exactly the range's
messages, each partition's in offset order, and the merge over them must release what it
releases over the messages the tasks read (``output=messages``).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from changefeed.consume import kafka as consume_kafka
from changefeed.errors import CaptureError, ChangefeedError
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource import KafkaInput, SourceOptions, register
from changefeed.spark.datasource.driverreads import DriverReads
from changefeed.spark.datasource.kafka import MESSAGE_SCHEMA, RANGES, MessageDecoder
from changefeed.spark.merge import MergeStage
from changefeed.spark.merge import _ranges_table as _ranges
from changefeed.testing import Broker

from .test_kafka_messages import PROTOCOLS, _captured_topic, _ends, _lines, _produce, _source, assert_same_release


def _drain(reads: DriverReads, poll_first: bool = False) -> list[tuple[int, pa.Table]]:
    out = []
    try:
        while True:
            item = reads.poll() if poll_first else None
            item = item or reads.next()
            if item is None:
                return out
            out.append(item)
    finally:
        reads.close()


def test_ranges_output_names_each_partitions_range_unsplit(spark: SparkSession, broker: Broker) -> None:
    topic = f"cf-rng-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic)
    register(spark)
    df = spark.read.format("changefeed").options(**_source(broker, topic, output=RANGES, eventsPerPartition="4")).load()
    assert df.schema.simpleString() == "struct<partition:int,start:bigint,end:bigint>"
    assert sorted(map(tuple, df.collect())) == [(0, 0, 30), (1, 0, 30)]  # a task per partition: nothing to split
    # A partition with nothing new is named too: the merge state keeps where every partition ended.
    starting = orjson.dumps({topic: {"0": 10, "1": 30}}).decode()
    source = _source(broker, topic, output=RANGES, startingOffsets=starting)
    df = spark.read.format("changefeed").options(**source).load()
    assert sorted(map(tuple, df.collect())) == [(0, 10, 30), (1, 30, 30)]


def test_driver_reads_hand_over_exactly_the_ranges_messages(broker: Broker) -> None:
    topic = f"cf-rng-{uuid.uuid4().hex[:8]}"
    sent = _produce(broker, topic)
    ranges = _ranges([(1, 3, 26), (0, 0, 30), (0, 30, 30)])  # an empty range is nothing to read
    for poll_first in (False, True):
        got = _drain(DriverReads(broker.bootstrap_servers, topic, ranges, chunk=7), poll_first)
        assert all(t.schema == MESSAGE_SCHEMA for _, t in got)
        assert [t.num_rows for p, t in got if p == 1] == [7, 7, 7, 2]
        assert [t.num_rows for p, t in got if p == 0] == [7, 7, 7, 7, 2]
        for partition, (start, end) in ((0, (0, 30)), (1, (3, 26))):
            tables = [t for p, t in got if p == partition]
            assert all(t.column("partition").to_pylist() == [partition] * t.num_rows for t in tables)
            whole = pa.concat_tables(tables)
            assert whole.column("offset").to_pylist() == list(range(start, end))
            pairs = list(zip(whole.column("key").to_pylist(), whole.column("value").to_pylist(), strict=True))
            assert pairs == sent[partition][start:end]
    # Turns: of what is here, the partition handed over least goes first (ties: the lower one), so
    # neither runs far ahead of the other in the merge.
    reads = DriverReads(broker.bootstrap_servers, topic, ranges, chunk=7)
    for thread in reads._threads:
        thread.join()
    assert [p for p, _ in _drain(reads, poll_first=True)] == [0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert _drain(DriverReads(broker.bootstrap_servers, topic, _ranges([]))) == []


def test_closing_early_stops_the_readers(broker: Broker) -> None:
    topic = f"cf-rng-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic)
    reads = DriverReads(broker.bootstrap_servers, topic, _ranges([(0, 0, 30), (1, 0, 30)]), chunk=2)
    assert reads.next() is not None
    started = time.monotonic()
    reads.close()
    assert time.monotonic() - started < 5
    assert not any(t.is_alive() for t in reads._threads)


def test_a_range_past_the_end_is_an_error_naming_where(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = f"cf-rng-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic)
    monkeypatch.setattr(consume_kafka, "KAFKA_TIMEOUT_S", 1.0)
    reads = DriverReads(broker.bootstrap_servers, topic, _ranges([(0, 25, 40)]))
    with pytest.raises(CaptureError, match="no message at offset 30 of \\[25, 40\\)") as caught:
        _drain(reads)
    assert caught.value.where == f"{topic}[0]"


def test_merge_over_ranges_read_here_releases_what_task_output_does(broker: Broker, tmp_path: Path) -> None:
    """`MergeStage.read` (the driver reads) against `MergeStage.chunks` over the same messages read
    by the tasks' path (``output=messages``), on a topic the capture side wrote."""
    codec = PROTOCOLS["open-protocol"]
    topic = _captured_topic(broker, codec, "ranges", partitions=3)
    ends = _ends(broker, topic)
    released = {}
    for how in ("read", "messages"):
        kafka = KafkaInput(SourceOptions.parse(_source(broker, topic)))
        decoder = MessageDecoder(broker.bootstrap_servers, topic, codec, ChangelogRows())
        stage = MergeStage(tmp_path / how, topic, kafka.partition_ids(), decoder)
        assert stage.output == RANGES
        ranges = _ranges([(p, 0, end) for p, end in ends.items()])
        if how == "read":
            pieces = stage.chunks(ranges, 0)  # a ranges table: read here
        else:
            from .test_kafka_messages import _raw  # noqa: PLC0415

            messages = pa.concat_tables([_raw(broker, topic, p, 0, end, codec) for p, end in ends.items()])
            pieces = stage.chunks(messages, 0)
        released[how] = _lines([e for piece in pieces for e in piece])
        stage.commit(0)
        stage.close()
        kafka.close()
    assert_same_release(released["read"], released["messages"])


def test_ranges_need_the_drivers_decoder(tmp_path: Path) -> None:
    stage = MergeStage(tmp_path, "t", [0])
    stage.output = RANGES
    with pytest.raises(ChangefeedError, match="message decoder"):
        list(stage.read(_ranges([(0, 0, 1)]), 0))


def test_a_reader_stops_its_read_ahead_bound_ahead_of_the_merge(broker: Broker) -> None:
    topic = f"cf-rng-{uuid.uuid4().hex[:8]}"
    sent = _produce(broker, topic)
    reads = DriverReads(broker.bootstrap_servers, topic, _ranges([(0, 0, 30)]), chunk=2, ahead=3)
    deadline = time.monotonic() + 20
    while len(reads._ready[0]) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert len(reads._ready[0]) == 3 and 0 in reads._reading  # waiting for room, not reading on
    got = _drain(reads)
    assert len(got) == 15
    offsets = [o for _, t in got for o in t.column("offset").to_pylist()]
    assert offsets == list(range(30)) and len(sent[0]) == 30


def test_a_batch_past_the_saved_state_reads_the_messages_between_again(broker: Broker, tmp_path: Path) -> None:
    """A batch handed to the sink while the next one ran (`MergeStage.durable_later`) whose state was
    never saved: after a restart Spark's offsets start past the newest saved state, whose ``ends``
    say where to read from; what the restart releases is what the batch released."""
    codec = PROTOCOLS["open-protocol"]
    topic = _captured_topic(broker, codec, "gap", partitions=3)
    ends = _ends(broker, topic)
    mid = {p: end // 2 for p, end in ends.items()}
    kafka = KafkaInput(SourceOptions.parse(_source(broker, topic)))
    ids = kafka.partition_ids()
    kafka.close()

    def stage() -> MergeStage:
        return MergeStage(tmp_path, topic, ids, MessageDecoder(broker.bootstrap_servers, topic, codec, ChangelogRows()))

    def release(on: MergeStage, rows: list[tuple[int, int, int]], batch_id: int) -> list[bytes]:
        return _lines([e for piece in on.chunks(_ranges(rows), batch_id) for e in piece])

    run = stage()
    assert release(run, [(p, 0, m) for p, m in mid.items()], 0)
    assert not run.durable_later(0)  # a fresh state names no ends: batch 0 is saved before it returns
    run.commit(0)
    second = release(run, [(p, mid[p], end) for p, end in ends.items()], 1)
    assert run.durable_later(1) and len(second) > 10
    run.close()  # stopped before batch 1 was durable: its state is not saved, Spark's offsets are

    again = stage()
    third = release(again, [(p, end, end) for p, end in ends.items()], 2)

    # The same rows in the same order and the same last watermark (resolved events between come as
    # the partitions' reads arrive; a DDL's position is that of the copy the merge met first).
    def rows(lines: list[bytes]) -> list[dict]:
        objs = [orjson.loads(line) for line in lines]
        return [
            {k: v for k, v in o.items() if k != "position" or o["kind"] != "ddl"}
            for o in objs
            if o["kind"] != "resolved"
        ]

    assert rows(third) == rows(second)
    assert third[-1] == second[-1] and b'"resolved"' in third[-1]
    assert again.durable_later(2)
    again.commit(2)
    saved = (tmp_path / MergeStage._file(2)).read_bytes().partition(b"\n")[0]
    assert orjson.loads(saved)["ends"] == {str(p): end for p, end in ends.items()}
    with pytest.raises(ChangefeedError, match=r"before offset \d+ where the saved merge state ends"):
        release(again, [(p, mid[p], end) for p, end in ends.items()], 3)  # a checkpoint of another run
    again.close()
