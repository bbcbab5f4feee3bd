"""A Kafka batch decoded and merged in pieces (`MessageDecoder.chunks`, `MergeStage.chunks`).

The apply job hands the sink each piece the merge releases while it decodes the next; the pieces
must add up to what one piece gives: the same rows in the same order, the same saved state.
No Spark or broker needed: the messages are encoded here, as the capture job's sink would.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from changefeed.codec import CodecOptions, make_encoder
from changefeed.files.store import LocalStore
from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.rowblock import RowBlock, expand_blocks
from changefeed.spark.changelog import ChangelogRows
from changefeed.spark.datasource.kafka import MESSAGE_SCHEMA, MessageDecoder
from changefeed.spark.merge import MergeStage, load_state

TOPIC = "cf"
PARTITIONS = 3
CODEC = CodecOptions(protocol="open-protocol")
TABLE = TableSchema(
    "shop",
    "orders",
    (
        Column("id", TypeCode.BIGINT, nullable=False),
        Column("note", TypeCode.VARCHAR, length=32, charset="utf8mb4", collation="utf8mb4_bin"),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)


def messages(txns: int, rows: int, resolved_every: int) -> pa.Table:
    """Transactions of ``rows`` inserts dispatched by id over the partitions, a resolved ts to every
    partition every ``resolved_every`` transactions and at the end."""
    encoder = make_encoder(CODEC)
    per: list[list[tuple[bytes, bytes]]] = [[] for _ in range(PARTITIONS)]
    ident = 0
    ts = 1 << 30
    for t in range(txns):
        ts += 1000
        by_partition: list[list[RowChange]] = [[] for _ in range(PARTITIONS)]
        for _ in range(rows):
            ident += 1
            by_partition[ident % PARTITIONS].append(RowChange(Op.INSERT, TABLE, ts, new=(ident, f"n{ident}")))
        for p, changes in enumerate(by_partition):
            per[p].extend((m.key or b"", m.value or b"") for m in encoder.encode(changes))
        if (t + 1) % resolved_every == 0 or t == txns - 1:
            mark = encoder.encode_resolved(Resolved(ts + 1))
            for sent in per:
                sent.append((mark.key or b"", mark.value or b""))
    flat = [(p, o, k, v) for p, sent in enumerate(per) for o, (k, v) in enumerate(sent)]
    columns = list(zip(*flat, strict=True))
    return pa.table(
        [
            pa.array(columns[0], pa.int32()),
            pa.array(columns[1], pa.int64()),
            *(pa.array(c, pa.binary()) for c in columns[2:]),
        ],
        schema=MESSAGE_SCHEMA,
    )


def rows_of(events: list) -> list[tuple]:
    rows = expand_blocks([e for e in events if isinstance(e, (RowChange, RowBlock))])
    return [(r.commit_ts, r.new) for r in rows]


def test_decoder_pieces_take_each_partition_in_turn_and_add_up_to_decode() -> None:
    table = messages(txns=40, rows=20, resolved_every=5)
    whole = MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).decode(table)
    pieces = list(MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).chunks(table, per_partition=3))
    assert len(pieces) > 3
    for piece in pieces:
        counts = [sum(1 for m in piece if m[0] == p) for p in range(PARTITIONS)]
        assert max(counts) <= 3
    joined = sorted((m for piece in pieces for m in piece), key=lambda m: (m[0], m[1]))
    assert [(m[0], m[1], m[3]) for m in joined] == [(m[0], m[1], m[3]) for m in whole]
    assert [rows_of(list(m[2])) for m in joined] == [rows_of(list(m[2])) for m in whole]


def _stage(path: Path) -> MergeStage:
    return MergeStage(path, TOPIC, range(PARTITIONS), MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()))


def test_merge_pieces_release_early_and_add_up_to_one_piece(tmp_path: Path) -> None:
    table = messages(txns=60, rows=12, resolved_every=4)
    one = _stage(tmp_path / "one")
    whole = [one.merge(MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).decode(table), 1)]
    one.commit(1)

    many = _stage(tmp_path / "many")
    pieces = MessageDecoder("unused:1", TOPIC, CODEC, ChangelogRows()).chunks(table, per_partition=4)
    released = list(many._merged(pieces, 1))
    many.commit(1)
    assert len(released) > 5  # released piece by piece, before the batch is fully decoded
    flat = [e for piece in released for e in piece]
    # The same rows in commit order (rows of one transaction from different partitions have
    # different keys: their order among themselves follows arrival, as in TiCDC's consumer).
    assert sorted(rows_of(flat)) == sorted(rows_of(whole[0]))
    assert [ts for ts, _ in rows_of(flat)] == [ts for ts, _ in rows_of(whole[0])]
    resolved = [e.commit_ts for e in flat if isinstance(e, Resolved)]
    assert (
        resolved == sorted(resolved) and resolved[-1] == [e for e in whole[0] if isinstance(e, Resolved)][-1].commit_ts
    )
    # The state the next batch starts from is the same either way.
    a = load_state(LocalStore(tmp_path / "one"), "merge-000000000001.jsonl", TOPIC, range(PARTITIONS))
    b = load_state(LocalStore(tmp_path / "many"), "merge-000000000001.jsonl", TOPIC, range(PARTITIONS))
    assert a.snapshot() == b.snapshot()
