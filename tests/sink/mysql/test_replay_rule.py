"""MySQLSink's replay rule: a restart's replay below the stored checkpoint is skipped; a row at or
below a Resolved (or a checkpoint) of the same run raises `ResolvedContradictionError`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from changefeed.model import Op, Resolved, RowChange, TableSchema
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.mysql.sql import quote_table
from changefeed.sink.replay import ResolvedContradictionError
from changefeed.testing import MariaDBServer

from .helpers import KV_DDL, execute, kv_table, read_kv

SinkFactory = Callable[..., MySQLSink]


def row(table: TableSchema, ts: int, ident: int) -> RowChange:
    return RowChange(Op.INSERT, table, ts, new=(ident, f"u{ident}", ts, None), position={"gtid": f"g:{ts}"})


def stream(table: TableSchema, *tss: int) -> list[RowChange | Resolved]:
    out: list[RowChange | Resolved] = []
    for ts in tss:
        out += [row(table, ts, ts), Resolved(ts)]
    return out


def test_in_run_contradiction_raises_and_restart_replay_is_skipped(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    execute(mariadb_downstream, KV_DDL.format(name=quote_table(db, "kv")))
    table = kv_table(db)
    sink = make_sink(mariadb_downstream)
    sink.write(stream(table, 10, 20))
    with pytest.raises(ResolvedContradictionError) as caught:
        sink.write([row(table, 15, 15)])  # buffered, not flushed yet: the Resolved alone says 15 is past
    err = caught.value
    assert err.where is not None and "kv commit ts 15" in err.where and "gtid=g:15" in err.where
    assert "Resolved 20" in err.where and "same run" in err.message
    sink.flush()
    with pytest.raises(ResolvedContradictionError, match="after Resolved 20"):
        sink.write([row(table, 20, 21)])
    sink.close()

    # A restart (a new run): everything replayed from the start; at or below the stored checkpoint is skipped.
    with make_sink(mariadb_downstream) as again:
        assert again.load_checkpoint().commit_ts == 20  # type: ignore[union-attr]
        again.write(stream(table, 10, 20, 30))
        assert again.stats["skipped"] == 2
    assert sorted(read_kv(mariadb_downstream, table)) == [10, 20, 30]

    # The same sink object after close() + open(): a new run too (what a job does after a failed batch).
    sink.open()
    sink.write(stream(table, 20, 30, 40))
    sink.flush()
    assert sink.stats["skipped"] == 2
    with pytest.raises(ResolvedContradictionError, match=r"after (the checkpoint committed|Resolved) 40"):
        sink.write([row(table, 35, 35)])
