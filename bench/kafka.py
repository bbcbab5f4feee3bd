"""Rows/s through Kafka sink -> tansu broker -> Kafka source, per protocol, beside raw confluent-kafka.

    .venv/bin/python bench/kafka.py                      # 50k rows, 3 partitions, all protocols
    .venv/bin/python bench/kafka.py --rows 100000 --protocols open-protocol,simple-avro

For each protocol: our sink writes the rows (10 per transaction, a resolved event every 1000
rows) to a fresh topic and waits for every acknowledgement; our source reads the topic back until
the last resolved ts (decode, dedupe, gating, commit-ts merge). The raw peer, in the same run and
on the same broker, produces *the exact messages our sink wrote* (same keys, values, partitions)
to another topic with a bare confluent-kafka Producer (idempotent, acks=all, same batching
settings) and reads them back with a bare Consumer. Ratio = our rows/s / raw rows/s end to end:
the cost of our layer (encode, routing, tracking, decode, merge) over the transport itself.
Columns "codec s" (encode + decode alone, no Kafka), "layer s" (our end-to-end time minus codec
and raw transport time: routing, acknowledgement tracking, merge) and "raw s" split the cost.
Wall-clock figures on a shared machine: run it twice.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import shlex
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.orders import order_image, orders_table
from changefeed.codec import CodecOptions, make_decoder, make_encoder
from changefeed.consume import KafkaSource, KafkaSourceConfig
from changefeed.dispatch import DispatchRule
from changefeed.model import Event, Op, Resolved, RowChange
from changefeed.sink.kafka import KafkaSink, KafkaSinkConfig
from changefeed.testing import Broker

TABLE = orders_table()
PROTOCOLS = {
    "open-protocol": {"protocol": "open-protocol"},
    "canal-json": {"protocol": "canal-json", "enable_tidb_extension": True},
    "simple-json": {"protocol": "simple"},
    "simple-avro": {"protocol": "simple", "encoding_format": "avro"},
}
PRODUCER = {"linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000}


def make_events(n: int) -> list[Event]:
    rnd = random.Random(7)
    base = 1_700_000_000_000 << 18
    out: list[Event] = []
    for i in range(n):
        ts = base + (i // 10 + 1) * 1000
        image = order_image(rnd, i)
        out.append(RowChange(Op.INSERT, TABLE, ts, new=image, position={"row": i}))
        if (i + 1) % 1000 == 0:
            out.append(Resolved(ts, position={"row": i}))
    out.append(Resolved(base + (n // 10 + 2) * 1000, position={"row": n}))
    return out


def ours(broker: Broker, codec: CodecOptions, events: list[Event], partitions: int) -> tuple[float, float, str]:
    topic = f"bench-{codec.protocol}-{uuid.uuid4().hex[:8]}"
    config = KafkaSinkConfig(
        broker.bootstrap_servers,
        topic,
        codec,
        rules=[DispatchRule(matcher=["*.*"], partition="index-value")],
        partition_num=partitions,
        producer_config=PRODUCER,
    )
    gc.collect()
    t0 = time.perf_counter()
    with KafkaSink(config) as sink:
        sink.write(events)
        sink.flush()
    t1 = time.perf_counter()
    source = KafkaSource(KafkaSourceConfig(broker.bootstrap_servers, topic, codec, metadata_check_interval_s=5.0))
    rows = 0
    try:
        t2 = time.perf_counter()
        for e in source.read_until(events[-1].commit_ts, timeout_s=300):
            rows += isinstance(e, RowChange)
        t3 = time.perf_counter()
    finally:
        source.close()
    expected = sum(isinstance(e, RowChange) for e in events)
    if rows != expected:
        raise SystemExit(f"{codec.protocol}: read {rows} rows, wrote {expected}")
    return t1 - t0, t3 - t2, topic


def codec_only(codec: CodecOptions, events: list[Event]) -> float:
    """Seconds to encode the rows and decode the messages with one encoder/decoder, no Kafka."""
    rows = [e for e in events if isinstance(e, RowChange)]
    gc.collect()
    t0 = time.perf_counter()
    encoder = make_encoder(codec)
    messages = [m for m in [encoder.encode_bootstrap(TABLE)] if m is not None] + encoder.encode(rows)
    decoder = make_decoder(codec)
    n = sum(isinstance(e, RowChange) for m in messages for e in decoder.decode(m))
    if n != len(rows):
        raise SystemExit(f"{codec.protocol}: codec-only decoded {n} of {len(rows)} rows")
    return time.perf_counter() - t0


def raw(broker: Broker, topic: str, partitions: int) -> tuple[float, float, int]:
    """Re-send our topic's exact messages with bare confluent-kafka, then read them back."""
    messages = read_all(broker, topic, partitions, None)
    copy = f"{topic}-raw"
    broker.create_topic(copy, partitions=partitions)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "acks": "all", **PRODUCER}
    )
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    gc.collect()
    t0 = time.perf_counter()
    for p, key, value in messages:
        while True:
            try:
                producer.produce(copy, value, key, partition=p, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    t1 = time.perf_counter()
    if errors:
        raise SystemExit(f"raw producer: {errors[:3]}")
    t2 = time.perf_counter()
    got = read_all(broker, copy, partitions, len(messages))
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2, len(got)


def read_all(broker: Broker, topic: str, partitions: int, count: int | None) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "bench-raw", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, bytes, bytes]] = []
    last = time.perf_counter()
    try:
        while (count is None and time.perf_counter() - last < 1.0) or (count is not None and len(out) < count):
            for msg in consumer.consume(10000, 0.1):
                if msg.error():
                    raise SystemExit(f"raw consumer: {msg.error()}")
                out.append((msg.partition(), msg.key(), msg.value()))
                last = time.perf_counter()
    finally:
        consumer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    args = parser.parse_args()
    print("command:", shlex.join([".venv/bin/python", "bench/kafka.py", *sys.argv[1:]]))
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} cpus, python {platform.python_version()}")
    events = make_events(args.rows)
    print(f"rows: {args.rows} inserts into a 10-column table, 10 per transaction, {args.partitions} partitions")
    header = f"{'protocol':<14} {'msgs':>7} {'sink r/s':>9} {'source r/s':>10} {'e2e r/s':>9} | "
    header += f"{'raw prod r/s':>12} {'raw cons r/s':>12} {'raw e2e r/s':>11} | {'ratio':>6} | "
    header += f"{'codec s':>7} {'layer s':>7} {'raw s':>6}"
    with Broker() as broker:
        print(header)
        for name in args.protocols.split(","):
            codec = CodecOptions(**PROTOCOLS[name])
            sink_s, source_s, topic = ours(broker, codec, events, args.partitions)
            raw_prod_s, raw_cons_s, n_msgs = raw(broker, topic, args.partitions)
            codec_s = codec_only(codec, events)
            n = args.rows
            e2e, raw_e2e = n / (sink_s + source_s), n / (raw_prod_s + raw_cons_s)
            # layer s: our end-to-end time minus encode/decode and minus the raw transport time.
            layer_s = sink_s + source_s - codec_s - (raw_prod_s + raw_cons_s)
            print(
                f"{name:<14} {n_msgs:>7} {n / sink_s:>9.0f} {n / source_s:>10.0f} {e2e:>9.0f} | "
                f"{n / raw_prod_s:>12.0f} {n / raw_cons_s:>12.0f} {raw_e2e:>11.0f} | {e2e / raw_e2e:>6.1%} | "
                f"{codec_s:>7.2f} {layer_s:>7.2f} {raw_prod_s + raw_cons_s:>6.2f}"
            )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
