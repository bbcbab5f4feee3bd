"""Envelopes: a Python task's Arrow rows handed to the driver as a few compressed IPC values.

Why: the JVM converts every row and value a Python task hands it (worker -> Spark rows -> the
driver's Arrow) and copies each byte twice on the way: ~13 µs of JVM CPU per 600-byte Kafka
message handed over as a row, ~7 µs per row of the capture job's encoded messages; the same
bytes as a few large LZ4-compressed values cost it ~2-3 (bench/RESULTS.md). So an internal
hand-over (the kafka input's ``output=messages``, the capture job's encoded output) sends
envelopes: each row one Arrow IPC stream of one record batch of the real schema.
"""

from __future__ import annotations

import pyarrow as pa

from ..errors import CaptureError

ENVELOPE_SCHEMA = pa.schema([("part", pa.int32()), ("count", pa.int32()), ("ipc", pa.binary())])
#: Spark's DDL of `ENVELOPE_SCHEMA` (nullable columns: PySpark compares the batches' schema exactly).
ENVELOPE_DDL = "part int, count int, ipc binary"
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    """``batch`` as an LZ4-compressed Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=_IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def wrap(batch: pa.RecordBatch, part: int) -> pa.RecordBatch:
    """``batch`` as one envelope row; ``part`` names where it came from (a Kafka or a Spark partition)."""
    columns = [
        pa.array([part], pa.int32()),
        pa.array([batch.num_rows], pa.int32()),
        pa.array([ipc_bytes(batch)], pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ENVELOPE_SCHEMA)


def unwrap(envelopes: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """The ``schema`` rows inside ``envelopes``, in envelope order; ``what`` names the hand-over in errors."""
    tables = []
    for part, count, ipc in zip(*(envelopes.column(n).to_pylist() for n in ENVELOPE_SCHEMA.names), strict=True):
        try:
            table = pa.ipc.open_stream(ipc).read_all()
        except (pa.ArrowInvalid, OSError, TypeError) as exc:
            raise CaptureError(f"{what} hand-over: unreadable envelope ({exc})", where=f"partition {part}") from None
        if table.schema != schema or table.num_rows != count:
            raise CaptureError(
                f"{what} hand-over: envelope of {table.num_rows} rows {table.schema}, expected {count}",
                where=f"partition {part}",
            )
        tables.append(table)
    return pa.concat_tables(tables) if tables else schema.empty_table()
