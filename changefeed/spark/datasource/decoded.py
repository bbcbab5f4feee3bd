"""The kafka input's ``output=decoded``: messages decoded in executors, handed to the driver as columns.

Why: the apply job's merge must run on the driver (it needs every partition and state across
batches), but decoding need not. With ``output=messages`` the driver decoded every message itself
and was the critical path of a catch-up (~10-13 µs/row of a 32 µs/row driver on one core). Here
each range's task decodes its messages with the columnar decoder (Open Protocol's
`OpenProtocolBlockDecoder`) and hands over what came out in a form the driver rebuilds without
per-value work: every decoded table once, as an LZ4-compressed Arrow IPC stream, and for each
message only references into those tables.

One row of `DECODED_SCHEMA` per run of up to 4096 messages of one partition:

* ``part``, ``offset``: the Kafka partition and the run's first offset (the driver's order);
* ``tables``: one IPC stream per decoded table (the `TableRows` batch, plus a ``raw`` column with
  a digest of each row's bytes as received when the decoder kept them: the merge recognises a
  resent row by its bytes, and only compares them);
* ``meta``: JSON with each message's offset, size (key + value bytes, for the merge's memory
  bound) and events: a `RowBlock` as slices of those tables and its segments (a segment of a later
  message's rows, as a block of a run of messages holds them, with that message's offset), any
  other event (DDL, Resolved, a row the slow path decoded) as its JSONL line; and each table's
  schema and image runs.

A decoding error in a task comes back as a row whose ``meta`` is the error (class, message,
where) and is raised on the driver as that `ChangefeedError`, so the job ends with the same
message and position as when the driver decoded (instead of a Spark task failure).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from hashlib import blake2b
from typing import Any

import orjson
import pyarrow as pa

from ... import errors
from ...codec import CodecOptions
from ...codec.debezium.blocks import DebeziumRows
from ...errors import CaptureError, ChangefeedError
from ...model import Event
from ...model.jsonl import EventReader, dumps_event, table_schema_from_json, table_schema_to_json
from ...model.rowblock import RowBlock, Runs, Segment, TableRows
from ...model.schema import TableSchema
from ..envelope import ipc_bytes, unwrap

#: ``output=decoded``: a range's messages decoded in its task (see the module docstring).
DECODED = "decoded"
DECODED_SCHEMA = pa.schema(
    [("part", pa.int32()), ("offset", pa.int64()), ("meta", pa.binary()), ("tables", pa.list_(pa.binary()))]
)
DECODED_DDL = "part int, offset long, meta binary, tables array<binary>"
_RAW = "raw"
_START_TS = "start_ts"

Decoded = tuple[int, int, Sequence[Event | RowBlock], int]
"""(partition, offset, events of that message, its bytes)."""


def columnar(codec: CodecOptions) -> bool:
    """Does ``codec`` decode to columns (else the driver decodes: rows as JSON would cost more than they save)?"""
    return codec.protocol in ("open-protocol", "debezium") and codec.large_message_handle_compression == "none"


# ---------------------------------------------------------------------------------------------- executor side


def _runs_json(runs: Runs | None) -> list[list[Any]] | None:
    # A bitmap has a bit per column: past 63 columns it is wider than JSON's integers.
    return None if runs is None else [[str(present), rows] for present, rows in runs]


def _table_ipc(rows: TableRows) -> bytes:
    batch = rows.batch
    if rows.raw is not None:
        # The merge only compares a row's bytes with other rows' (a resend is byte-identical): a
        # 128-bit digest tells the same apart at a 25th of the hand-over's bytes.
        digests = [None if v is None else blake2b(v, digest_size=16).digest() for v in rows.raw]
        batch = batch.append_column(_RAW, pa.array(digests, pa.binary(16)))
    start_ts = getattr(rows, "start_ts", None)  # Debezium's rows: each row's source.start_ts (last column)
    if start_ts is not None:
        batch = batch.append_column(_START_TS, pa.array(start_ts, pa.uint64()))
    return ipc_bytes(batch)


def pack(
    partition: int, offsets: Sequence[int], sizes: Sequence[int], decoded: Sequence[Sequence[Event | RowBlock]]
) -> pa.RecordBatch:
    """One run of a partition's decoded messages as a `DECODED_SCHEMA` row."""
    roots: dict[int, int] = {}  # id of a decoded table -> its index in ``tables``
    tables: list[bytes] = []
    infos: list[dict[str, Any]] = []
    messages: list[list[Any]] = []
    for offset, events in zip(offsets, decoded, strict=True):
        items: list[Any] = []
        for ev in events:
            if not isinstance(ev, RowBlock):
                items.append(dumps_event(ev).decode())
                continue
            slices = []
            for rows in ev.tables:
                root, at = rows.origin
                index = roots.get(id(root))
                if index is None:
                    index = roots[id(root)] = len(tables)
                    tables.append(_table_ipc(root))
                    infos.append(
                        {
                            "schema": table_schema_to_json(root.table_schema),
                            "main": _runs_json(root.main_runs),
                            "before": _runs_json(root.before_runs),
                            "raw": root.raw is not None,
                            "start_ts": getattr(root, "start_ts", None) is not None,
                        }
                    )
                slices.append([index, at, rows.num_rows])
            segments = [_segment_json(s, offset) for s in ev.segments]
            items.append([slices, segments])
        messages.append(items)
    meta = {"offsets": list(offsets), "sizes": list(sizes), "tables": infos, "messages": messages}
    return _row(partition, offsets[0] if offsets else 0, orjson.dumps(meta), tables)


def _segment_json(seg: Segment, offset: int) -> list[int]:
    """[table, rows, commit ts], and the offset of the message whose rows these are when it is not
    ``offset`` (the message whose events hold the block)."""
    at = seg.position.get("offset") if seg.skip is None and seg.position is not None else None
    if type(at) is int and at != offset:
        return [seg.table, seg.rows, seg.commit_ts, at]
    return [seg.table, seg.rows, seg.commit_ts]


def pack_error(partition: int, offset: int, exc: ChangefeedError) -> pa.RecordBatch:
    """A task's decoding error as a `DECODED_SCHEMA` row (raised again on the driver by `unpack`)."""
    meta = {"error": {"class": type(exc).__name__, "message": exc.message, "where": exc.where}}
    return _row(partition, offset, orjson.dumps(meta), [])


def _row(partition: int, offset: int, meta: bytes, tables: list[bytes]) -> pa.RecordBatch:
    columns = [
        pa.array([partition], pa.int32()),
        pa.array([offset], pa.int64()),
        pa.array([meta], pa.binary()),
        pa.array([tables], pa.list_(pa.binary())),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=DECODED_SCHEMA)


# ---------------------------------------------------------------------------------------------- driver side


def _error(obj: dict[str, Any]) -> ChangefeedError:
    cls = getattr(errors, str(obj.get("class")), None)
    if not (isinstance(cls, type) and issubclass(cls, ChangefeedError)):
        cls = ChangefeedError
    return cls(str(obj.get("message")), where=obj.get("where"))


def _runs(obj: Any) -> Runs | None:
    return None if obj is None else [(int(present), int(rows)) for present, rows in obj]


def _table(ipc: bytes, info: dict[str, Any], schema: TableSchema) -> TableRows:
    batch = pa.ipc.open_stream(ipc).read_next_batch()  # ipc_bytes writes one batch
    raw = start_ts = None
    # The extra columns by position, last first: column names come from data and may repeat.
    if info.get("start_ts"):
        start_ts = batch.column(batch.num_columns - 1).to_numpy()
        batch = _without_last(batch)
    if info["raw"]:
        raw = batch.column(batch.num_columns - 1).to_pylist()
        batch = _without_last(batch)
    main, before = _runs(info["main"]), _runs(info["before"])
    if start_ts is not None:
        return DebeziumRows(schema, batch, main, before, raw=raw, start_ts=start_ts)
    return TableRows(schema, batch, main, before, raw=raw)


def _without_last(batch: pa.RecordBatch) -> pa.RecordBatch:
    last = batch.num_columns - 1
    return pa.RecordBatch.from_arrays(batch.columns[:last], schema=batch.schema.remove(last))


def _unpack_run(topic: str, partition: int, meta: dict[str, Any], ipcs: list[bytes], out: list[Decoded]) -> None:
    reader = EventReader(source=f"{topic}[{partition}]")
    roots = [
        _table(ipc, info, table_schema_from_json(info["schema"]))
        for ipc, info in zip(ipcs, meta["tables"], strict=True)
    ]
    for offset, size, items in zip(meta["offsets"], meta["sizes"], meta["messages"], strict=True):
        position = {"topic": topic, "partition": partition, "offset": offset}
        events: list[Event | RowBlock] = []
        for item in items:
            if isinstance(item, str):
                ev = reader.parse(item.encode(), where=f"{topic}[{partition}]@{offset}")
                ev.position = dict(position)
                events.append(ev)
                continue
            slices, segments = item
            tables = [roots[index].slice(at, n) for index, at, n in slices]
            segs = [
                Segment(seg[0], seg[1], seg[2], position if len(seg) < 4 else {**position, "offset": seg[3]}, None)
                for seg in segments
            ]
            events.append(RowBlock(tables, segs))
        out.append((partition, offset, events, size))


def unpack(rows: pa.Table, topic: str) -> list[Decoded]:
    """Every message of ``output=decoded`` rows, in (partition, offset) order; a task's error raised here."""
    parts = rows.column("part").to_pylist()
    firsts = rows.column("offset").to_pylist()
    metas = rows.column("meta").to_pylist()
    tables = rows.column("tables").to_pylist()
    out: list[Decoded] = []
    for i in sorted(range(len(parts)), key=lambda i: (parts[i], firsts[i])):
        where = f"{topic}[{parts[i]}]@{firsts[i]}"
        try:
            meta = orjson.loads(metas[i])
            if "error" in meta:
                raise _error(meta["error"])
            _unpack_run(topic, parts[i], meta, tables[i] or [], out)
        except ChangefeedError:
            raise
        except (orjson.JSONDecodeError, pa.ArrowInvalid, OSError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise CaptureError(f"kafka decoded hand-over: unreadable run ({exc})", where=where) from None
    return out


class DecodedReader:
    """The apply job's side of ``output=decoded``: what `MessageDecoder` is for ``output=ranges``."""

    output = DECODED

    def __init__(self, topic: str, codec: CodecOptions) -> None:
        self.topic = topic
        self.codec = codec

    def decode(self, rows: pa.Table) -> list[Decoded]:
        """The messages of ``output=decoded`` rows, or of envelopes holding them (`ENVELOPE_SCHEMA`)."""
        if "ipc" in rows.schema.names:
            rows = unwrap(rows, DECODED_SCHEMA, "kafka decoded")
        return unpack(rows, self.topic)

    def chunks(self, rows: pa.Table) -> Iterator[list[Decoded]]:
        """One piece: the tasks decoded the whole batch already."""
        yield self.decode(rows)

    def close(self) -> None:
        """Nothing held: every task's decoder ended with its range."""
