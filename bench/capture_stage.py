"""The capture job's encode stage without Spark: binlog range -> Kafka messages, CPU per row, side by side.

    .venv/bin/python bench/capture_stage.py --rows 100000

Starts a private MariaDB, writes ``--rows`` row events of bench/binlog.py's 10-column workload
and runs what one Spark task of the capture job
runs for that range (`changefeed.spark.encode._kafka_rows` and its Arrow output batches), in this
process, timed with ``time.process_time`` (best of ``--repeat``):

* ``rows``: the range decoded into `RowChange`s (`range_events`) and encoded row by row;
* ``blocks``: the range decoded into Arrow row blocks (`BlockCapture`, what `RangeDecoder` does
  now) and encoded a table's columns at a time where the encoder can (Open Protocol,
  Canal-JSON), else row by row from the block.

``storage:PROTOCOL`` runs the storage sink's encode stage (`StorageEncoder`) instead of Kafka's.

Both must give the same bytes (checked). Also prints the decode alone for each path. ``--live``
reads the range through the replica protocol (as `changefeed run` with a mysql source does)
instead of the binlog files.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.binlog import SCHEMA, generate
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.replica import ServerAddress
from changefeed.codec import CodecOptions
from changefeed.sink.kafka.encode import KafkaEncoder
from changefeed.sink.storage.writer import StorageEncoder
from changefeed.spark.datasource.binlog import BinlogFiles, BinlogServer, _capture, range_events
from changefeed.spark.datasource.options import zone
from changefeed.spark.encode import KAFKA_SCHEMA, STORAGE_SCHEMA, _batches, _kafka_rows, _storage_rows
from changefeed.testing.mariadb import MariaDBServer


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--live", action="store_true", help="read the ranges through the replica protocol, not the files")
    p.add_argument("--protocols", default="open-protocol,canal-json,simple,storage:canal-json,storage:csv")
    args = p.parse_args()
    print("$ " + shlex.join(sys.orig_argv), flush=True)
    extra = {"innodb_buffer_pool_size": "512M", "max_binlog_size": "1G", "innodb_log_file_size": "256M"}
    with MariaDBServer(server_id=1, name="bench-stage", extra_config=extra) as server, tempfile.TemporaryDirectory():
        generate(server, args.rows, no_progress=True)
        server.connect().cursor().execute("FLUSH BINARY LOGS")
        files = BinlogFiles(server.binlog_dir)
        start, end = files.earliest().to_dict(), files.end()
        source = BinlogServer(ServerAddress.from_url(server.url)) if args.live else files
        keep = lambda schema, table: schema == SCHEMA  # noqa: E731

        def rows() -> list[Any]:
            events = range_events(source, start, end, "UTC")
            return [e for e in events if not hasattr(e, "schema") or e.schema == SCHEMA]

        def blocks() -> list[Any]:
            from changefeed.capture.binlog import BinlogPosition  # noqa: PLC0415

            begin, stop = BinlogPosition.from_dict(start), BinlogPosition.from_dict(end)
            capture = _capture(BlockCapture, source, begin, zone("UTC"), until=(stop.file, stop.pos), keep=keep)
            return list(capture.blocks())

        n = args.rows
        t_rows, row_events = _best(rows, args.repeat)
        t_blocks, block_events = _best(blocks, args.repeat)
        print(f"decode  rows (RowChange): {t_rows * 1e6 / n:6.2f} µs/row   blocks: {t_blocks * 1e6 / n:6.2f} µs/row")
        for protocol in args.protocols.split(","):
            storage = protocol.startswith("storage:")
            codec = CodecOptions(protocol=protocol.removeprefix("storage:"), clock=lambda: 0)
            results = {}
            for name, events in (("rows", row_events), ("blocks", block_events)):

                def stage(
                    events: list[Any] = events, codec: CodecOptions = codec, storage: bool = storage
                ) -> list[Any]:
                    if storage:
                        items = StorageEncoder(codec).encode(events)
                        return list(_batches(_storage_rows(items), STORAGE_SCHEMA))
                    out = _kafka_rows(KafkaEncoder(codec, "cdc"), events, {"cdc": 3}, -1)
                    return list(_batches(iter(out), KAFKA_SCHEMA))

                t_enc, out = _best(stage, args.repeat)
                total = (t_rows if name == "rows" else t_blocks) + t_enc
                results[name] = (total, out)
                print(
                    f"{protocol:14s} {name:6s}: decode+encode {total * 1e6 / n:6.2f} µs/row"
                    f" (encode {t_enc * 1e6 / n:6.2f})",
                    flush=True,
                )
            same = [b.to_pylist() for b in results["rows"][1]] == [b.to_pylist() for b in results["blocks"][1]]
            ratio = results["rows"][0] / results["blocks"][0]
            print(f"{protocol:14s} ratio rows/blocks {ratio:.2f}x, output identical: {same}", flush=True)
            if not same:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
