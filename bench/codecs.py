"""Encode/decode throughput per protocol on a realistic 10-column table, one core.

    .venv/bin/python bench/codecs.py                 # 100k rows, best of 3 runs
    .venv/bin/python bench/codecs.py --rows 50000 --repeat 5 --protocols canal-json,csv
    .venv/bin/python bench/codecs.py --protocols debezium,debezium:blocks

``PROTOCOL:blocks`` encodes the same rows from an Arrow row block (`TableRows`, as the capture
hands them to the Kafka sink) with the encoder's column renderers (`render_rows` +
`append_rendered`) instead of `append_row`; building the block is not timed. Where the protocol
has a block decoder (open-protocol, debezium: what the apply job's Kafka input decodes with), it
also decodes through it, in runs of 4096 messages as the Kafka input hands them over (the
messages' names and positions are made before the clock starts, as the input makes them).

Prints rows/s per protocol and direction, the ratio to the targets (encode 150k rows/s, decode
200k rows/s for the JSON protocols) and the ratio to the side-by-side peer: plain ``orjson``
dumping/loading the same rows as dicts of strings, measured in the same run (the floor any JSON
codec in Python pays).

Fairness on a shared machine: rates are rows per second of *process CPU time* (another job's load
does not count against us; wall-clock rates are printed too) and each figure is the best of
``--repeat`` runs. Each run has rows with other values, so value caches (float texts) are never
warm from an earlier run. Before each run the garbage collector is run and everything alive (the
input rows, earlier output) is frozen, so a run pays only for the collections its own
allocations cause, as a streaming pipeline would.
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
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orders import order_image, orders_table
from changefeed.codec import CodecOptions, Message, make_decoder, make_encoder
from changefeed.model import Op, RowChange
from changefeed.model.arrow import arrow_type
from changefeed.model.rowblock import TableRows

TARGET_ENCODE = 150_000
TARGET_DECODE = 200_000
_RUN = 4096  # messages per block decoder call: the Kafka input's run (spark/datasource/kafka.py)
TABLE = orders_table()


def make_rows(n: int, seed: int = 7) -> list[RowChange]:
    rnd = random.Random(seed)
    return [RowChange(Op.INSERT, TABLE, (1_700_000_000_000 << 18) + i, new=order_image(rnd, i)) for i in range(n)]


def table_rows(rows: list[RowChange]) -> TableRows:
    """Inserts of one table as a row block's `TableRows` (the layout of changefeed/model/rowblock.py)."""
    cols = TABLE.columns
    arrays = [pa.array([r.new[i] for r in rows if r.new is not None], arrow_type(c)) for i, c in enumerate(cols)]
    arrays += [pa.array(["insert"] * len(rows)), pa.array([r.commit_ts for r in rows], pa.int64())]
    arrays += [pa.nulls(len(rows), arrow_type(c)) for c in cols]
    names = [c.name for c in cols]
    return TableRows(
        TABLE, pa.RecordBatch.from_arrays(arrays, [*names, "op", "commit_ts", *(f"old_{n}" for n in names)])
    )


def _same(row: RowChange) -> RowChange:
    return row


class Rate:
    """Best-of-N rows/s by CPU time and by wall time."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0

    def measure(self, fn: Callable[[], object], rows: int) -> None:
        gc.collect()
        gc.freeze()  # inputs and earlier output are long-lived: not this run's garbage
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.unfreeze()
        self.cpu = max(self.cpu, rows / max(cpu, 1e-9))
        self.wall = max(self.wall, rows / max(wall, 1e-9))


def bench_protocol(
    protocol: str, row_sets: list[list[RowChange]], blocks: bool = False, **extra: object
) -> tuple[Rate, Rate]:
    """Encode then decode each row set (fresh values each run, so no value cache is warm);
    ``blocks``: encode from the rows' `TableRows` a column at a time."""
    options = CodecOptions(protocol=protocol, enable_tidb_extension=True, clock=lambda: 0, **extra)  # type: ignore[arg-type]
    encoder = make_encoder(options)
    enc, dec = Rate(), Rate()
    for rows in row_sets:
        messages: list[Message] = []

        def encode(rows: list[RowChange] = rows, messages: list[Message] = messages) -> None:
            for row in rows:
                encoder.append_row(row)
            messages.extend(encoder.build())

        def encode_block(
            rows: list[RowChange] = rows, messages: list[Message] = messages, block: TableRows | None = None
        ) -> None:
            assert block is not None
            rendered = encoder.render_rows(block)
            assert rendered is not None, f"{protocol} renders no rows column-wise"
            for row, key, value in zip(rows, *rendered, strict=True):
                if key is None or value is None:
                    encoder.append_row(row)
                else:
                    encoder.append_rendered(key, value, row.commit_ts, partial(_same, row))
            messages.extend(encoder.build())

        if blocks:
            enc.measure(partial(encode_block, block=table_rows(rows)), len(rows))
        else:
            enc.measure(encode, len(rows))
        decoder = _fresh_decoder(options, encoder)
        out: list[object] = []

        def decode(messages: list[Message] = messages, out: list[object] = out, decoder: Any = decoder) -> None:
            for msg in messages:
                out.extend(decoder.decode(msg))

        block_decoder = _block_decoder(decoder) if blocks else None
        if block_decoder is not None:
            wheres = [f"bench[0]@{i}" for i in range(len(messages))]
            positions = [{"topic": "bench", "partition": 0, "offset": i} for i in range(len(messages))]

            def decode_blocks(
                messages: list[Message] = messages,
                out: list[object] = out,
                decoder: Any = block_decoder,
                wheres: list[str] = wheres,
                positions: list[dict[str, Any]] = positions,
            ) -> None:
                for at in range(0, len(messages), _RUN):
                    end = at + _RUN
                    for events in decoder.decode(messages[at:end], wheres[at:end], positions[at:end]):
                        out.extend(events)

            dec.measure(decode_blocks, len(rows))
            assert sum(getattr(ev, "num_rows", 1) for ev in out) == len(rows)
        else:
            dec.measure(decode, len(rows))
            assert len(out) == len(rows)
    return enc, dec


def _fresh_decoder(options: CodecOptions, encoder: Any) -> Any:
    """A fresh decoder per run (its first row compiles the table's reader), told the table as its protocol needs."""
    decoder = make_decoder(options)
    if options.protocol == "simple":
        bootstrap = encoder.encode_bootstrap(TABLE)
        assert bootstrap is not None
        decoder.decode(bootstrap)
    if options.protocol == "csv":
        decoder.set_table_schema(TABLE)
    return decoder


def _block_decoder(decoder: Any) -> Any:
    """The protocol's block decoder (the apply job's Kafka input decodes with it), if it has one."""
    from changefeed.codec.debezium import DebeziumDecoder  # noqa: PLC0415
    from changefeed.codec.debezium.blocks import DebeziumBlockDecoder  # noqa: PLC0415
    from changefeed.codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder  # noqa: PLC0415

    if isinstance(decoder, DebeziumDecoder):
        return DebeziumBlockDecoder(decoder)
    if isinstance(decoder, OpenProtocolDecoder):
        return OpenProtocolBlockDecoder(decoder)
    return None


def bench_orjson(row_sets: list[list[RowChange]]) -> tuple[Rate, Rate]:
    enc, dec = Rate(), Rate()
    dumps, loads = orjson.dumps, orjson.loads
    for rows in row_sets:
        dicts = [
            {
                c.name: (str(v) if not isinstance(v, bytes) else v.hex())
                for c, v in zip(TABLE.columns, r.new, strict=True)
            }
            for r in rows
        ]
        blobs: list[bytes] = []

        def encode(dicts: list[dict[str, str]] = dicts, blobs: list[bytes] = blobs) -> None:
            blobs.extend([dumps(d) for d in dicts])

        enc.measure(encode, len(rows))
        dec.measure(lambda blobs=blobs: [loads(b) for b in blobs], len(rows))
    return enc, dec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    parser.add_argument("--protocols", default="open-protocol,canal-json,simple,simple-avro,csv,debezium")
    parser.add_argument(
        "--job-gc",
        action="store_true",
        help="the cyclic GC's thresholds the jobs' drivers and Python workers run with (GC_THRESHOLDS), "
        "not Python's defaults",
    )
    args = parser.parse_args()
    if args.job_gc:
        from changefeed.spark.pyworker import GC_THRESHOLDS  # noqa: PLC0415

        gc.set_threshold(*GC_THRESHOLDS)
    print("command:", shlex.join([".venv/bin/python", "bench/codecs.py", *sys.argv[1:]]))
    print(
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}; python {platform.python_version()}; "
        f"{os.cpu_count()} cores (shared); load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"gc thresholds {gc.get_threshold()}"
    )
    row_sets = [make_rows(args.rows, seed) for seed in range(7, 7 + args.repeat)]
    print(
        f"rows={args.rows} repeat={args.repeat} table=10 columns (bigint, int unsigned, varchar, decimal, double, "
        "float, datetime(3), text, tinyint, varbinary); one core; rows/s of CPU time (wall in brackets)"
    )
    peer_enc, peer_dec = bench_orjson(row_sets)
    print(
        f"{'protocol':<16}{'encode rows/s':>14}{'(wall)':>10}{'/target':>9}{'/orjson':>9}"
        f"{'decode rows/s':>15}{'(wall)':>10}{'/target':>9}{'/orjson':>9}"
    )
    print(
        f"{'orjson (peer)':<16}{peer_enc.cpu:>14,.0f}{peer_enc.wall:>10,.0f}{'':>18}{peer_dec.cpu:>15,.0f}"
        f"{peer_dec.wall:>10,.0f}"
    )
    for name in args.protocols.split(","):
        base, _, mode = name.partition(":")
        protocol, extra = ("simple", {"encoding_format": "avro"}) if base == "simple-avro" else (base, {})
        enc, dec = bench_protocol(protocol, row_sets, blocks=mode == "blocks", **extra)
        print(
            f"{name:<16}{enc.cpu:>14,.0f}{enc.wall:>10,.0f}"
            f"{enc.cpu / TARGET_ENCODE:>8.2f}x{enc.cpu / peer_enc.cpu:>8.2f}x"
            f"{dec.cpu:>15,.0f}{dec.wall:>10,.0f}"
            f"{dec.cpu / TARGET_DECODE:>8.2f}x{dec.cpu / peer_dec.cpu:>8.2f}x"
        )
    if any(name.endswith(":blocks") for name in args.protocols.split(",")):
        print(
            "PROTOCOL:blocks: encoded from the rows' Arrow block (render_rows + append_rendered); decoded by the"
            " protocol's block decoder (open-protocol, debezium) in runs of 4096 messages, else as above"
        )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
