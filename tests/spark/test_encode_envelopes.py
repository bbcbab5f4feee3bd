"""The encode stage's output rows and their hand-over order, without Spark (`_batches`, `_in_order`)."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from changefeed.spark import encode
from changefeed.spark.encode import KAFKA_SCHEMA, STORAGE_SCHEMA, _batches, _in_order
from changefeed.spark.envelope import ENVELOPE_SCHEMA, unwrap


def _kafka_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(n):
        kind = rng.choice(["message", "message", "group", "event", "topic"])
        if kind == "message":
            rows.append(
                {"kind": kind, "topic": "t", "partition": i % 3, "key": rng.randbytes(9), "value": rng.randbytes(40)}
            )
        elif kind == "group":
            rows.append({"kind": kind, "group": b'{"first_ts":1}'})
        elif kind == "event":
            rows.append({"kind": kind, "event": b'{"type":"resolved"}'})
        else:
            rows.append({"kind": kind, "topic": f"t{i}"})
    return rows


def _reference(rows: list[dict[str, Any]], schema: pa.Schema, part: int) -> list[dict[str, Any]]:
    """What `_batches` wrote before it built columns itself: ``from_pylist`` of each row plus part/seq."""
    full = [{**row, "part": part, "seq": seq} for seq, row in enumerate(rows)]
    return pa.RecordBatch.from_pylist(full, schema=schema).to_pylist() if full else []


@pytest.mark.parametrize("items", [1, 7, 10_000])
def test_batches_hold_the_rows_in_sequence(monkeypatch: pytest.MonkeyPatch, items: int) -> None:
    monkeypatch.setattr(encode, "_BATCH_ITEMS", items)
    monkeypatch.setattr(encode, "_partition_id", lambda: 4)
    rows = _kafka_rows(random.Random(items), 50)
    envelopes = list(_batches(iter(rows), KAFKA_SCHEMA))
    assert len(envelopes) == -(-50 // items)
    table = unwrap(pa.Table.from_batches(envelopes, ENVELOPE_SCHEMA), KAFKA_SCHEMA, "test")
    assert table.to_pylist() == _reference(rows, KAFKA_SCHEMA, 4)


def test_batches_of_storage_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encode, "_partition_id", lambda: 0)
    rows: list[dict[str, Any]] = [
        {"kind": "event", "event": b"{}"},
        {"kind": "rows", "base": "b", "schema_file": "{}", "table_id": 3, "header": b"h", "data": b"d"}
        | {"ends": [1, 2], "commit_ts": [5, 6], "counts": "[]"},
    ]
    envelopes = list(_batches(iter(rows), STORAGE_SCHEMA))
    table = unwrap(pa.Table.from_batches(envelopes, ENVELOPE_SCHEMA), STORAGE_SCHEMA, "test")
    assert table.to_pylist() == _reference(rows, STORAGE_SCHEMA, 0)
    assert list(_batches(iter([]), STORAGE_SCHEMA)) == []


def _envelopes(monkeypatch: pytest.MonkeyPatch, rng: random.Random, parts: int) -> list[pa.RecordBatch]:
    """Several envelopes per partition, as each partition's task yields them."""
    monkeypatch.setattr(encode, "_BATCH_ITEMS", 5)
    out = []
    for part in range(parts):
        monkeypatch.setattr(encode, "_partition_id", lambda part=part: part)
        out += list(_batches(iter(_kafka_rows(rng, rng.randrange(0, 23))), KAFKA_SCHEMA))
    return out


def _sorted(envelopes: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    table = unwrap(pa.Table.from_batches(envelopes, ENVELOPE_SCHEMA), KAFKA_SCHEMA, "test")
    return table.sort_by([("part", "ascending"), ("seq", "ascending")]).to_pylist()


@pytest.mark.parametrize("seed", range(5))
def test_envelopes_in_any_partition_order_give_the_rows_in_order(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    envelopes = _envelopes(monkeypatch, rng, 6)
    want = _sorted(envelopes)
    # Partitions arrive in any order; a partition's envelopes keep theirs.
    by_part: dict[int, list[pa.RecordBatch]] = {}
    for e in envelopes:
        by_part.setdefault(e.column("part")[0].as_py(), []).append(e)
    order = list(by_part)
    rng.shuffle(order)
    shuffled = [e for p in order for e in by_part[p]]
    for batches in (envelopes, shuffled):
        got = _in_order(pa.Table.from_batches(batches, ENVELOPE_SCHEMA), KAFKA_SCHEMA)
        assert got.to_pylist() == want


def test_envelopes_out_of_sequence_are_still_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    envelopes = _envelopes(monkeypatch, random.Random(9), 3)
    want = _sorted(envelopes)
    assert len(envelopes) > 2
    swapped = [envelopes[1], envelopes[0], *envelopes[2:]]  # not expected from Spark: the fallback sorts rows
    assert _in_order(pa.Table.from_batches(swapped, ENVELOPE_SCHEMA), KAFKA_SCHEMA).to_pylist() == want
    assert _in_order(ENVELOPE_SCHEMA.empty_table(), KAFKA_SCHEMA).num_rows == 0
