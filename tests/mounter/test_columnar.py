"""The vectorised batch path (`decode_batch` -> columnar.py) gives exactly what the per-record path gives.

Events are compared by repr, so that Decimal exponents, -0.0 and int/bool/float types must match too.
Errors must match in message and in the record they name.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.capture.mounter import Catalog, KVRecord, Mounter, batch_records, decode_batch
from changefeed.errors import CaptureError
from changefeed.model import Column, Index, TableSchema, TypeCode
from tests.strategies import columns, values

from . import tidb_encoder as enc
from .util import TS, catalog_for, schema, utf8

_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_COLUMN = columns("c")
_ID = Column("id", TypeCode.BIGINT, nullable=False)
_ZONES = ["UTC", "+08:00", "Asia/Shanghai", "America/New_York"]


def _batch(records: list[KVRecord], regions: bool = False) -> pa.RecordBatch:
    data: dict[str, Any] = {
        "op": pa.array([r.op for r in records], pa.string()),
        "key": pa.array([r.key for r in records], pa.binary()),
        "value": pa.array([r.value for r in records], pa.binary()),
        "old_value": pa.array([r.old_value for r in records], pa.binary()),
        "start_ts": pa.array([r.start_ts for r in records], pa.uint64()),
        "commit_ts": pa.array([r.commit_ts for r in records], pa.uint64()),
    }
    if regions:
        data["region_id"] = pa.array([r.region_id for r in records], pa.int64())
    return pa.record_batch(data)


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "events", [repr(e) for e in run()]
    except CaptureError as exc:
        return "error", (exc.message, exc.where)


def _agree(batch: pa.RecordBatch, make: Any) -> Mounter:
    """decode_batch and the reference path give the same events or the same error; returns the fast mounter."""
    fast, ref = make(), make()
    want = _outcome(lambda: list(ref.mount_all(batch_records(batch, "batch"), where="batch row {loc}")))
    got = _outcome(lambda: decode_batch(batch, fast))
    assert got == want
    assert fast.skipped == ref.skipped or got[0] == "error"
    return fast


@st.composite
def _table(draw: st.DrawFn) -> TableSchema:
    """A BIGINT PK (the int handle) and 1..10 columns of any type; ids from 1, or above 255 (LARGE rows)."""
    cols = [_ID] + [replace(draw(_COLUMN), name=f"c{i}") for i in range(draw(st.integers(1, 10)))]
    base = draw(st.sampled_from([0, 300]))
    ids = [1] + [base + i + 1 for i in range(1, len(cols))]
    return TableSchema(
        "test",
        "t",
        tuple(replace(c, column_id=cid) for c, cid in zip(cols, ids, strict=True)),
        (Index("PRIMARY", ("id",), primary=True),),
        table_id=draw(st.integers(1, 1 << 40)),
    )


def _value(draw: st.DrawFn, ts: TableSchema, handle: int, key: bytes, v2_only: bool) -> bytes:
    image = (handle, *(draw(values(c)) for c in ts.columns[1:]))
    fmt = "v2" if v2_only else draw(st.sampled_from(["v2", "v2", "v2", "v1"]))
    if fmt == "v2" and draw(st.integers(0, 4)) == 0:  # a checksum trailer, as TiDB 7.1+ can write
        cells = {
            c.column_id: enc.cell_v2(c, v) if v is not None else None
            for c, v in zip(ts.columns[1:], image[1:], strict=True)
        }
        return enc.row_v2(cells, checksum=(draw(st.sampled_from([0, 1, 2])), key), extra=draw(st.booleans()))
    return enc.encode_image(ts, image, fmt, skip=[0])


@st.composite
def _records(draw: st.DrawFn, ts: TableSchema, v2_only: bool = False) -> list[KVRecord]:
    """Inserts, updates and deletes with old values of table ``ts``, in v2 (some v1, some with checksums)."""
    out = []
    for i in range(draw(st.integers(1, 12))):
        handle = draw(st.integers(-(1 << 63), (1 << 63) - 1))
        key = enc.record_key(ts.table_id, handle)
        op = draw(st.sampled_from(["insert", "update", "delete"]))
        new = _value(draw, ts, handle, key, v2_only) if op != "delete" else None
        old = _value(draw, ts, handle, key, v2_only) if op != "insert" else None
        region = draw(st.none() | st.integers(0, 9))
        out.append(KVRecord("put" if new else "delete", key, new, old, TS - 7 + i, TS + i, region))
    return out


@_SETTINGS
@given(data=st.data(), zone=st.sampled_from(_ZONES), verify=st.booleans())
def test_batches_agree_with_the_reference_path(data: st.DataObject, zone: str, verify: bool) -> None:
    ts = data.draw(_table())
    records = data.draw(_records(ts))
    catalog = catalog_for(ts, table_id=ts.table_id)
    fast = _agree(_batch(records, regions=True), lambda: Mounter(catalog, zone, verify_checksum=verify))
    assert fast.vector_decoders  # the vectorised path took part


def _corrupt(value: bytes, how: str, at: int, byte: int) -> bytes:
    if not value:
        return bytes([byte])
    at %= len(value)
    if how == "flip":
        return value[:at] + bytes([value[at] ^ byte or 1]) + value[at + 1 :]
    if how == "set":
        return value[:at] + bytes([byte]) + value[at + 1 :]
    if how == "cut":
        return value[:at]
    return value + bytes([byte])


@_SETTINGS
@given(
    data=st.data(),
    zone=st.sampled_from(_ZONES),
    hits=st.lists(
        st.tuples(
            st.integers(0, 11),
            st.sampled_from(["flip", "set", "cut", "append"]),
            st.integers(0, 1 << 16),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_corrupt_batches_agree_with_the_reference_path(data: st.DataObject, zone: str, hits: list) -> None:
    """Damaged values: the same error naming the same record, or the same events where both accept the bytes."""
    ts = data.draw(_table())
    records = data.draw(_records(ts, v2_only=True))
    for row, how, at, byte in hits:
        r = records[row % len(records)]
        if r.value:
            records[row % len(records)] = r._replace(value=_corrupt(r.value, how, at, byte))
        else:
            records[row % len(records)] = r._replace(old_value=_corrupt(r.old_value, how, at, byte))
    catalog = catalog_for(ts, table_id=ts.table_id)
    _agree(_batch(records), lambda: Mounter(catalog, zone))


TABLE = replace(
    schema(
        [
            Column("id", TypeCode.BIGINT, nullable=False),
            utf8("name", length=20),
            Column("n", TypeCode.INT),
            Column("d", TypeCode.DECIMAL, length=10, decimal=2),
            Column("t", TypeCode.DATETIME, decimal=3),
            Column("f", TypeCode.FLOAT),
        ]
    ),
    indexes=(Index("PRIMARY", ("id",), primary=True),),
)
GOOD = {2: b"abc", 3: enc.compact_int(-300), 4: bytes([10, 2]) + enc.decimal_bin(Decimal("-1.50"), 10, 2),
        5: enc.compact_uint(enc.pack_time(2020, 1, 2, 3, 4, 5, 678000)), 6: enc.cmp_float(0.1)}  # fmt: skip


def _good(n: int) -> list[KVRecord]:
    return [KVRecord("put", enc.record_key(104, i), enc.row_v2(GOOD), None, TS - 1, TS) for i in range(n)]


def test_a_plain_batch_never_takes_the_reference_path(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Mounter(catalog_for(TABLE))
    monkeypatch.setattr(m, "mount", lambda *a, **k: pytest.fail("reference path used"))
    events = decode_batch(_batch(_good(50)), m)
    assert len(events) == 50
    assert events[7].as_dict() == {"id": 7, "name": "abc", "n": -300, "d": Decimal("-1.50"),
                                   "t": "2020-01-02 03:04:05.678", "f": 0.10000000149011612}  # fmt: skip
    assert events[7].start_ts == TS - 1 and events[7].row_id == 7 and events[7].position is None


@pytest.mark.parametrize(
    ("cells", "match"),
    [
        ({**GOOD, 3: b"\x01\x02\x03"}, "compact int of 3 bytes"),
        ({**GOOD, 2: b"a\xffc"}, "malformed record.*utf-8"),
        ({**GOOD, 4: bytes([10, 2]) + b"\x80\x00\x00\x00\x00\x00"}, "stray bytes"),
        ({**GOOD, 4: bytes([10, 2]) + b"\xff\xff\xff\xff\xff"}, "digits|group"),
        ({**GOOD, 4: bytes([30, 2]) + b"\x80" * 14}, "digits|group|stray|decimal"),
        ({**GOOD, 5: enc.compact_uint(enc.pack_time(2020, 1, 2, 3, 4, 5) | 0xFFFFFF)}, "microseconds|impossible"),
        ({**GOOD, 5: enc.compact_uint(enc.pack_time(2020, 1, 2, 3, 4, 5) | 63 << 24)}, "impossible"),
        ({**GOOD, 6: b"\x00" * 7}, "float cell of 7 bytes"),
    ],
)
def test_a_bad_cell_fails_naming_its_record(cells: dict, match: str) -> None:
    records = _good(20)
    records[13] = records[13]._replace(value=enc.row_v2(cells))
    with pytest.raises(CaptureError, match=match) as info:
        decode_batch(_batch(records), Mounter(catalog_for(TABLE)), "part-7.parquet", 1000)
    assert info.value.where == f"part-7.parquet row 1013 key={records[13].key.hex()}"
    _agree(_batch(records), lambda: Mounter(catalog_for(TABLE)))


@pytest.mark.parametrize(
    "damage",
    [
        lambda v: v[:-1],  # truncated data
        lambda v: v + b"\x00",  # bytes after the data
        lambda v: v[:19] + b"\xff\xff" + v[21:],  # last end offset past the value
        lambda v: v[:13] + b"\x01\x00" + v[15:],  # end offsets not ascending
        lambda v: v[:10] + bytes([99]) + v[11:],  # a column id the table never had
        lambda v: b"\x81" + v[1:],  # not a row format
        lambda v: v[:4],  # truncated header
    ],
)
def test_a_bad_value_fails_naming_its_record(damage: Any) -> None:
    records = _good(10)
    records[4] = records[4]._replace(value=damage(records[4].value))
    _agree(_batch(records), lambda: Mounter(catalog_for(TABLE)))
    with pytest.raises(CaptureError) as info:
        decode_batch(_batch(records), Mounter(catalog_for(TABLE)))
    assert info.value.where == f"batch row 4 key={records[4].key.hex()}"


def test_mixed_batch_keeps_order_and_agrees() -> None:
    """Resolved markers, index/meta keys, v1, key-only deletes, keyspaces and odd ops go the reference way, in place."""
    good = _good(6)
    v1 = enc.row_v1([(2, enc.datum_v1(TABLE.columns[1], "v1"))])
    records = [
        good[0],
        KVRecord("resolved", commit_ts=TS),
        KVRecord("put", enc.index_key(104, 1, enc.key_int(5)), b"\x00", None, 0, TS + 1),
        good[1]._replace(old_value=enc.row_v2({2: None})),
        KVRecord("put", enc.record_key(104, 9), v1, None, 0, TS + 2),
        KVRecord("delete", enc.record_key(104, 10), None, None, 0, TS + 3),
        KVRecord("delete", enc.record_key(104, 11), None, enc.row_v2(GOOD), 0, TS + 3, 4),
        KVRecord("PUT", enc.record_key(104, 12), enc.row_v2(GOOD), None, 0, TS + 4),
        KVRecord("put", enc.record_key(104, 13, keyspace=b"\x00\x00\x01"), enc.row_v2(GOOD), None, 0, TS + 5),
        KVRecord("put", b"m" + b"\x00" * 18, b"\x01", None, 0, TS + 5),
        *good[2:],
    ]
    fast = _agree(_batch(records, regions=True), lambda: Mounter(catalog_for(TABLE)))
    assert fast.skipped["index"] == 1 and fast.skipped["meta"] == 1
    events = decode_batch(_batch(records), Mounter(catalog_for(TABLE)))
    assert [getattr(e, "row_id", "R") for e in events] == [0, "R", 1, 9, 10, 11, 12, 13, 2, 3, 4, 5]


def test_schema_versions_and_unknown_tables() -> None:
    """Records of one table under two schema versions in one batch, and of a table the catalog lacks."""
    newer = replace(TABLE, columns=(*TABLE.columns, Column("extra", TypeCode.INT, column_id=7)))
    catalog = Catalog.from_json(
        {
            "tables": [
                {"schema": "test", "version": TS + 2, "table": enc.table_info(TABLE, 104)},
                {"schema": "test", "version": TS + 5, "table": enc.table_info(newer, 104)},
            ]
        }
    )
    value = enc.row_v2(GOOD)
    records = [KVRecord("put", enc.record_key(104, i), value, None, 0, TS + 2 + i) for i in range(1, 8)]
    records.append(KVRecord("put", enc.record_key(999, 1), value, None, 0, TS + 9))
    _agree(_batch(records), lambda: Mounter(catalog, skip_unknown_tables=True))
    events = decode_batch(_batch(records), Mounter(catalog, skip_unknown_tables=True))
    assert [len(e.new) for e in events] == [6, 6, 6, 7, 7, 7, 7]
    with pytest.raises(CaptureError, match="not in the catalog") as info:
        decode_batch(_batch(records), Mounter(catalog))
    assert info.value.where.startswith("batch row 7 key=")


CATALOG = Path(__file__).resolve().parents[1] / "fixtures" / "mounter" / "catalog.json"


@pytest.mark.parametrize("variant", ["sliced", "large_binary", "int64_ts", "nulls"])
def test_arrow_variants_agree(variant: str) -> None:
    """Partitions, a common-handle table, empty and null values, in the Arrow shapes Parquet and Spark give."""
    t = 440000000000000300  # after the fixture's schema versions
    records = [
        KVRecord("put", enc.record_key(121 + i % 2, i), enc.row_v2({2: f"k{i}".encode()}), None, t, t + 5 + i, i)
        for i in range(12)
    ]
    records[3] = records[3]._replace(value=b"")  # a put without a value: skipped with a warning
    common = enc.record_key(130, enc.key_bytes(b"a") + enc.key_int(1))  # common handle: the reference path
    records[5] = KVRecord("put", common, enc.row_v2({1: b"a", 2: b"\x01", 3: b"v"}), None, 0, t + 9)
    batch = _batch(records, regions=True)
    if variant == "sliced":
        batch = pa.record_batch([*batch.columns], names=batch.schema.names).slice(2, 9)
    elif variant == "large_binary":
        batch = batch.cast(
            batch.schema.set(1, pa.field("key", pa.large_binary())).set(2, pa.field("value", pa.large_binary()))
        )
    elif variant == "int64_ts":
        batch = batch.cast(
            batch.schema.set(5, pa.field("commit_ts", pa.int64())).set(6, pa.field("region_id", pa.int32()))
        )
    else:
        batch = batch.set_column(3, "old_value", pa.nulls(batch.num_rows, pa.binary()))
        batch = batch.set_column(4, "start_ts", pa.array([None] * batch.num_rows, pa.uint64()))
    fast = _agree(batch, lambda: Mounter(Catalog.load(CATALOG)))
    assert fast.vector_decoders
    assert fast.skipped["empty"] == 1
    events = decode_batch(batch, Mounter(Catalog.load(CATALOG)))
    assert {e.partition_id for e in events if e.table_schema.table == "events"} == {121, 122}


def test_an_id_in_both_lists_reads_as_null() -> None:
    """A damaged layout naming one id as not-null and null: NULL, as the reference path reads it."""
    for ts, cid in ((TABLE, 3), (schema([utf8("v")]), 1)):  # with an int-handle PK, and with _tidb_rowid
        value = bytes([0x80, 0, 1, 0, 1, 0, cid, cid]) + (1).to_bytes(2, "little") + b"\x05"
        records = [KVRecord("put", enc.record_key(104, i), value, None, 0, TS) for i in range(3)]
        _agree(_batch(records), lambda ts=ts: Mounter(catalog_for(ts)))
        events = decode_batch(_batch(records), Mounter(catalog_for(ts)))
        assert [e.new[cid - 1] for e in events] == [None, None, None]
