"""Applying streams: replays, crashes, parallel workers, checkpoints, retries, credentials."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pymysql.err
import pytest

from changefeed.errors import SinkError
from changefeed.model import Column, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.mysql.sink import APPLIER_QUEUE
from changefeed.sink.mysql.sql import quote_table
from changefeed.testing import MariaDBServer

from .helpers import KV_DDL, UTF8, diff, execute, fetch, kv_stream, kv_table, read_kv

SinkFactory = Callable[..., MySQLSink]


class CrashError(Exception):
    """Stands for the process dying at a chosen point."""


def crash_at(
    point: str, after: int = 0, when: Callable[[Mapping[str, Any]], bool] | None = None
) -> Callable[[str, Mapping[str, Any]], None]:
    """A fault hook raising CrashError the ``after+1``-th time ``point`` is reached (and ``when`` holds)."""
    seen = {"n": 0}
    lock = threading.Lock()

    def hook(name: str, info: Mapping[str, Any]) -> None:
        if name != point or (when is not None and not when(info)):
            return
        with lock:
            seen["n"] += 1
            hit = seen["n"] == after + 1
        if hit:
            raise CrashError(f"crash at {point} #{after + 1}")

    return hook


def setup_kv(servers: tuple[MariaDBServer, ...], db: str) -> None:
    for server in servers:
        execute(server, KV_DDL.format(name=quote_table(db, "kv")))


def build_upstream(mariadb: MariaDBServer, make_sink: SinkFactory, db: str, events: list) -> None:
    """The reference: the stream applied once, serially, without faults."""
    with make_sink(mariadb, changefeed_id="reference", checkpoint_schema=f"{db}_cp") as sink:
        sink.write(events)


def resume(make_sink: SinkFactory, server: MariaDBServer, events: list, **options: Any) -> MySQLSink:
    """Restart after a crash: load the checkpoint and replay the stream from where it says."""
    with make_sink(server, **options) as sink:
        checkpoint = sink.load_checkpoint()
        start = checkpoint.commit_ts if checkpoint else 0
        # A real source would seek to checkpoint.position; replaying a little more is harmless.
        replay = [e for e in events if e.commit_ts > start - 5]
        sink.write(replay)
    return sink


def test_duplicates_and_replays_converge(mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory) -> None:
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=1, txns=300)
    events = stream.events
    half = len(events) // 2
    with make_sink(mariadb_downstream, batch_rows=50) as sink:
        sink.write(events[:half])
    # The source re-delivers everything from the start: rows at or below the checkpoint are skipped.
    with make_sink(mariadb_downstream, batch_rows=50) as sink:
        assert sink.load_checkpoint() is not None
        sink.write(events)
        assert sink.stats["skipped"] > 0
    assert read_kv(mariadb_downstream, table) == stream.final
    # Even without the checkpoint (lost, or a new changefeed id), safe mode makes a full replay harmless,
    # also with every event delivered twice in a row.
    doubled = [e for e in events for _ in range(2 if isinstance(e, RowChange) else 1)]
    with make_sink(mariadb_downstream, changefeed_id="other", safe_mode=True, workers=3) as sink:
        sink.write(doubled)
    assert read_kv(mariadb_downstream, table) == stream.final


@pytest.mark.parametrize(
    ("workers", "point", "after"),
    [
        (1, "statement", 6),  # between two batches: nothing of the next batch was sent
        (1, "commit", 3),  # inside a batch: statements sent, COMMIT never reached
        (1, "committed", 4),  # after COMMIT, before the next batch
        (4, "committed", 5),  # some workers committed their share of a batch, others did not
        (4, "checkpoint", 2),  # every worker committed, the checkpoint was not written
    ],
)
def test_crash_then_resume_from_checkpoint(
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    db: str,
    make_sink: SinkFactory,
    workers: int,
    point: str,
    after: int,
) -> None:
    setup_kv((mariadb, mariadb_downstream), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=7 + after, txns=150)
    build_upstream(mariadb, make_sink, db, stream.events)

    sink = make_sink(
        mariadb_downstream, workers=workers, batch_rows=40, safe_mode_duration=0, fault_hook=crash_at(point, after)
    )
    with pytest.raises(CrashError), sink:
        sink.write(stream.events)
    before = sink.checkpoint.commit_ts if sink.checkpoint else 0
    assert before < stream.events[-1].commit_ts  # it really died before the end

    # Restarted: safe mode is on for the first safe_mode_duration seconds.
    resumed = resume(make_sink, mariadb_downstream, stream.events, workers=workers, batch_rows=40)
    assert resumed.checkpoint is not None and resumed.checkpoint.commit_ts == stream.events[-1].commit_ts
    assert read_kv(mariadb_downstream, table) == stream.final
    report = diff(mariadb, mariadb_downstream, f"{db}.*")
    assert report.equal, report


def _held_at_commit(
    gate: threading.Event, threads: list[str] | None = None, *, first_only: bool = False
) -> Callable[[str, Mapping[str, Any]], None]:
    """A fault hook holding every transaction (or only the first) at its COMMIT until ``gate`` opens;
    ``threads`` collects the name of each committing thread."""
    commits: list[str] = [] if threads is None else threads

    def hook(name: str, info: Mapping[str, Any]) -> None:
        if name == "commit":
            commits.append(threading.current_thread().name)
            if not first_only or len(commits) == 1:
                assert gate.wait(30)

    return hook


def test_one_worker_applies_while_the_caller_buffers(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """A downstream transaction runs in the applier thread while `write` goes on buffering the next
    rows (the next one waits for it: in order); `flush` returns only when all of it is durable."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=5, txns=120)
    gate = threading.Event()
    threads: list[str] = []
    sink = make_sink(mariadb_downstream, batch_rows=40, fault_hook=_held_at_commit(gate, threads, first_only=True))
    with sink:
        events = iter(stream.events)
        while sink._claimed is None:  # up to the first transaction handed to the applier
            sink.write_event(next(events))
        sink.write([next(events) for _ in range(5)])
        assert sink._buffer_rows > 0  # the next rows buffered while the first transaction waits
        with mariadb_downstream.connect() as conn:
            assert fetch(conn, f"SELECT COUNT(*) FROM {quote_table(db, 'kv')}") == [(0,)]
        assert sink.checkpoint is None  # nothing is durable yet
        gate.set()
        sink.write(events)
        assert sink.flush() == stream.events[-1].commit_ts
        assert sink.checkpoint is not None and sink.checkpoint.commit_ts == stream.events[-1].commit_ts
    assert threads and all(name.startswith("mysql-sink-apply") for name in threads)
    assert read_kv(mariadb_downstream, table) == stream.final


def test_a_caller_faster_than_the_server_waits_for_the_applier(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """The applier holds at most `APPLIER_QUEUE` transactions besides the one running: a caller that
    renders faster than the server applies then waits in `write` instead of holding ever more rows."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=6, txns=200)
    gate = threading.Event()
    commits: list[str] = []
    sink = make_sink(mariadb_downstream, batch_rows=5, fault_hook=_held_at_commit(gate, commits, first_only=True))
    with sink:
        writer = threading.Thread(target=sink.write, args=(stream.events,))
        writer.start()
        try:
            full = APPLIER_QUEUE + 2  # the running one, a full queue, and the one waiting to be queued
            deadline = time.monotonic() + 30
            while (sink._applier is None or sink._applier.submitted < full) and time.monotonic() < deadline:
                time.sleep(0.01)
            writer.join(0.5)
            assert writer.is_alive() and sink._applier is not None and sink._applier.submitted == full
            assert len(commits) == 1
        finally:
            gate.set()
            writer.join(30)
        assert not writer.is_alive()
        assert sink.flush() == stream.events[-1].commit_ts
    assert len(commits) > full and read_kv(mariadb_downstream, table) == stream.final


def test_no_transaction_runs_after_one_failed(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """Transactions queued behind a failed one never run: each would commit a later checkpoint."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=9, txns=150)
    reached: list[str] = []

    def hook(name: str, info: Mapping[str, Any]) -> None:
        reached.append(name)
        if name == "commit" and reached.count("commit") == 2:
            raise CrashError("the second transaction fails at its COMMIT")

    sink = make_sink(mariadb_downstream, batch_rows=20, safe_mode_duration=0, fault_hook=hook)
    with pytest.raises(CrashError):
        sink.write(stream.events)  # many transactions queue behind the failing one
        sink.flush()
    assert reached.count("commit") == 2 and reached.count("committed") == 1
    assert sink.checkpoint is not None and sink.checkpoint.commit_ts < stream.events[-1].commit_ts
    with pytest.raises(SinkError, match="failed earlier"):
        sink.write(stream.events[-1:])  # a failed sink takes nothing until closed
    sink.close()
    resume(make_sink, mariadb_downstream, stream.events, batch_rows=20)
    assert read_kv(mariadb_downstream, table) == stream.final


def test_a_failed_transaction_is_reported_to_the_observer(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """Sinks report through `changefeed.sink.observe` (ops.metrics listens there, not imported by sinks)."""
    from changefeed.sink import observe  # noqa: PLC0415

    setup_kv((mariadb_downstream,), db)
    stream = kv_stream(kv_table(db), seed=2, txns=20)
    seen: list[tuple[str, bool]] = []

    class Recorder:
        def sink_error(self, sink: str, *, retried: bool) -> None:
            seen.append((sink, retried))

        def kafka_delivered(self, seconds: float | None) -> None:
            """Not a Kafka sink here."""

    before = observe.observer()
    observe.set_observer(Recorder())
    try:
        sink = make_sink(mariadb_downstream, fault_hook=crash_at("commit"))
        with pytest.raises(CrashError), sink:
            sink.write(stream.events)
    finally:
        observe.set_observer(before)
    assert seen == [("mysql", False)]


def test_crash_closing_the_connection_mid_transaction(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=3, txns=100)
    # The connection goes away in the middle of a transaction and the process dies with it.
    holder: dict[str, MySQLSink] = {}

    def hook(name: str, info: Mapping[str, Any]) -> None:
        if name == "statement" and info["sent"] == 2 and holder["sink"].stats["transactions"] == 2:
            holder["sink"]._workers[0].conn.close()  # the socket closes: the server rolls back
            raise CrashError("died with the connection")

    sink = make_sink(mariadb_downstream, batch_rows=30, pack_bytes=1, statement_rows=3, fault_hook=hook)
    holder["sink"] = sink
    with pytest.raises(CrashError), sink:
        sink.write(stream.events)
    resume(make_sink, mariadb_downstream, stream.events, batch_rows=30)
    assert read_kv(mariadb_downstream, table) == stream.final


def test_killed_worker_connection_is_retried(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """KILL a worker's connection from another session mid-transaction: reconnect, re-run, no loss."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=11, txns=200)
    killed: list[int] = []
    holder: dict[str, MySQLSink] = {}
    lock = threading.Lock()  # the hook runs in every worker thread

    def hook(name: str, info: Mapping[str, Any]) -> None:
        with lock:
            if name != "statement" or info["sent"] != 1 or len(killed) >= 3:
                return
            tid = holder["sink"].connection_ids()[info["session"]]
            with mariadb_downstream.connect() as admin, admin.cursor() as cur:
                cur.execute(f"KILL CONNECTION {int(tid)}")
            killed.append(tid)

    sink = make_sink(mariadb_downstream, workers=4, batch_rows=60, pack_bytes=1, safe_mode_duration=0, fault_hook=hook)
    holder["sink"] = sink
    with caplog.at_level(logging.WARNING, logger="changefeed.sink.mysql"), sink:
        sink.write(stream.events)
    assert len(killed) == 3
    assert sink.stats["retries"] >= 3
    assert "retrying after transient error" in caplog.text
    assert read_kv(mariadb_downstream, table) == stream.final


def test_unique_key_handover_with_four_workers(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """Row A releases unique value x, then row B takes it: with 4 workers the result is the serial one."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    a0 = (1, "x", 0, None)
    events: list = [RowChange(Op.INSERT, table, 10, new=a0)]
    # Chains of hand-overs inside one batch, in normal mode (INSERT/UPDATE fail if reordered).
    events += [
        RowChange(Op.UPDATE, table, 11, old=a0, new=(1, "y", 0, None)),
        RowChange(Op.INSERT, table, 12, new=(2, "x", 0, None)),
        RowChange(Op.UPDATE, table, 13, old=(2, "x", 0, None), new=(2, "z", 0, None)),
        RowChange(Op.UPDATE, table, 14, old=(1, "y", 0, None), new=(1, "x", 1, None)),
        RowChange(Op.INSERT, table, 15, new=(3, "y", 0, None)),
        RowChange(Op.DELETE, table, 16, old=(2, "z", 0, None)),
        RowChange(Op.INSERT, table, 17, new=(4, "z", 0, None)),
        *[RowChange(Op.INSERT, table, 18, new=(100 + i, None, i, "filler")) for i in range(40)],
        Resolved(19),
    ]
    with make_sink(mariadb_downstream, workers=4, safe_mode_duration=0) as sink:
        sink.write(events)
    got = read_kv(mariadb_downstream, table)
    assert {k: v[1] for k, v in got.items() if k < 100} == {1: "x", 3: "y", 4: "z"}
    # A random stream full of hand-overs (and key changes) equals its serial end state.
    execute(mariadb_downstream, f"TRUNCATE {quote_table(db, 'kv')}")
    stream = kv_stream(table, seed=5, txns=400, start_ts=100)
    with make_sink(mariadb_downstream, changefeed_id="random", workers=4, batch_rows=200,
                   safe_mode_duration=0) as sink:  # fmt: skip
        sink.write(stream.events)
    assert read_kv(mariadb_downstream, table) == stream.final


def test_checkpoint_is_written_with_the_rows(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    position = {"file": "binlog.000002", "pos": 1234, "gtid": "0-1-9"}
    with make_sink(mariadb_downstream, changefeed_id="cp") as sink:
        assert sink.load_checkpoint() is None
        assert sink.safe_mode  # safe mode right after start
        sink.write([RowChange(Op.INSERT, table, 50, new=(1, None, 1, None), position=position)])
        sink.flush()
    with make_sink(mariadb_downstream, changefeed_id="cp", safe_mode_duration=0) as sink:
        cp = sink.load_checkpoint()
        assert cp is not None and cp.commit_ts == 50 and cp.position == position
        assert not sink.safe_mode
        sink.write([Resolved(80, position={"file": "binlog.000002", "pos": 2000})])
    with mariadb_downstream.connect() as conn:
        rows = fetch(conn, f"SELECT changefeed_id, commit_ts FROM `{db}_cp`.changefeed_checkpoint")
    assert rows == [("cp", 80)]


def test_errors_name_the_statement_and_never_the_password(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    secret = "Pa55-w0rd!s3cret"
    execute(
        mariadb_downstream,
        "CREATE USER IF NOT EXISTS 'cfsink'@'127.0.0.1' IDENTIFIED BY '" + secret + "'",
        "GRANT ALL ON *.* TO 'cfsink'@'127.0.0.1'",
    )
    url = f"mysql://cfsink:{secret}@{mariadb_downstream.host}:{mariadb_downstream.port}/"
    caplog.set_level(logging.DEBUG)
    # A real failure (duplicate key in normal mode) names the statement and the commit ts.
    sink = MySQLSink(url, changefeed_id="pw", checkpoint_schema=f"{db}_cp", safe_mode_duration=0)
    row = (1, None, 1, None)
    sink.write([RowChange(Op.INSERT, table, 5, new=row), RowChange(Op.INSERT, table, 6, new=row)])
    with pytest.raises(SinkError) as exc:
        sink.flush()
    message = str(exc.value)
    assert "INSERT INTO" in message and "commit_ts 5..6" in message and "1062" in message
    assert "cfsink:***@" in message
    # A failed sink refuses more events (their checkpoint would claim the lost batch) until restarted.
    with pytest.raises(SinkError, match="failed earlier"):
        sink.write([RowChange(Op.INSERT, table, 7, new=(2, None, 1, None))])
    sink.close()
    assert sink.load_checkpoint() is None
    sink.close()
    # Wrong password / unreachable server: masked URL in the error.
    for bad in (url.replace(secret, secret + "x"), f"mysql://cfsink:{secret}@127.0.0.1:1/"):
        with pytest.raises(SinkError) as exc:
            MySQLSink(bad, checkpoint_schema=f"{db}_cp", max_retries=1, retry_backoff=0.01).open()
        assert secret not in str(exc.value) and "***" in str(exc.value)
    assert secret not in caplog.text
    execute(mariadb_downstream, "DROP USER 'cfsink'@'127.0.0.1'")


@pytest.mark.parametrize("workers", [1, 4])
def test_normal_mode_folds_rows_of_a_primary_key_only_table(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory, workers: int
) -> None:
    """Without other unique keys, normal mode folds each key's changes (INSERT+UPDATE -> INSERT ...)."""
    name = quote_table(db, f"pk_only_{workers}")
    execute(mariadb_downstream, KV_DDL.format(name=name).replace(", UNIQUE KEY uk (u)", ""))
    table = kv_table(db, f"pk_only_{workers}")
    table = type(table)(table.schema, table.table, table.columns, table.indexes[:1])
    stream = kv_stream(table, seed=workers, txns=400, max_rows=6)
    with make_sink(mariadb_downstream, changefeed_id=f"pk{workers}", workers=workers, batch_rows=150,
                   safe_mode_duration=0) as sink:  # fmt: skip
        sink.write(stream.events)
    assert read_kv(mariadb_downstream, table) == stream.final


def test_lost_commit_answer_is_not_applied_twice(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """The COMMIT landed but its answer was lost: the retry finds its checkpoint and re-runs nothing
    (a keyless table would otherwise get every row twice)."""
    execute(mariadb_downstream, f"CREATE TABLE {quote_table(db, 'bag')} (x INT, y VARCHAR(10))")
    table = TableSchema(db, "bag", (Column("x", TypeCode.INT), Column("y", TypeCode.VARCHAR, length=10, **UTF8)))
    events = [RowChange(Op.INSERT, table, 100 + i // 3, new=(i % 4, "same")) for i in range(30)]
    lost = {"n": 0}

    def hook(name: str, info: Mapping[str, Any]) -> None:
        if name == "committed" and lost["n"] < 2:
            lost["n"] += 1
            raise pymysql.err.OperationalError(2013, "Lost connection to server during query (simulated)")

    with make_sink(mariadb_downstream, batch_rows=10, fault_hook=hook) as sink:
        sink.write(events)
    assert lost["n"] == 2 and sink.stats["retries"] == 2
    with mariadb_downstream.connect() as conn:
        assert fetch(conn, f"SELECT COUNT(*) FROM {quote_table(db, 'bag')}") == [(30,)]


def _halves(events: list) -> tuple[list, list]:
    """The stream cut at the transaction boundary nearest its middle."""
    cut = len(events) // 2
    while events[cut].commit_ts == events[cut - 1].commit_ts:
        cut += 1
    return events[:cut], events[cut:]


def test_flush_async_hands_over_and_its_wait_reports_durability(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """`flush_async` returns while the server still applies (the apply job's next batch starts); its
    call waits for that batch and every one before it, and returns the checkpoint they reach."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=11, txns=80)
    first, second = _halves(stream.events)
    gate = threading.Event()
    with make_sink(mariadb_downstream, batch_rows=40, fault_hook=_held_at_commit(gate)) as sink:
        sink.write(first)
        first_batch = sink.flush_async()
        sink.write(second)  # the next batch is taken while the first is still in flight
        second_batch = sink.flush_async()
        assert sink.checkpoint is None and not first_batch.done()  # nothing durable yet
        with mariadb_downstream.connect() as conn:
            assert fetch(conn, f"SELECT COUNT(*) FROM {quote_table(db, 'kv')}") == [(0,)]
        gate.set()
        assert first_batch.wait() == first[-1].commit_ts and first_batch.done()
        assert sink.checkpoint is not None and sink.checkpoint.commit_ts >= first[-1].commit_ts
        assert second_batch.wait() == second[-1].commit_ts
        assert sink.checkpoint.commit_ts == second[-1].commit_ts
        nothing = sink.flush_async()
        assert nothing.done() and nothing.wait() == second[-1].commit_ts  # nothing new: durable already
    assert read_kv(mariadb_downstream, table) == stream.final


def test_flush_async_wait_raises_what_failed_and_refuses_what_a_close_skipped(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """A batch handed over is never reported durable when a transaction of it failed or was skipped."""
    setup_kv((mariadb_downstream,), db)
    table = kv_table(db)
    stream = kv_stream(table, seed=12, txns=80)
    first, second = _halves(stream.events)
    # The second transaction fails at its COMMIT.
    sink = make_sink(mariadb_downstream, batch_rows=20, safe_mode_duration=0, fault_hook=crash_at("commit", after=1))
    sink.write(first)
    batch = sink.flush_async()  # returns: the failure is in the applier thread
    with pytest.raises(CrashError):
        batch.wait()
    assert batch.done()
    with pytest.raises(SinkError, match="failed earlier"):
        sink.write(second)  # a failed sink takes nothing until closed
    sink.close()

    # Closed while transactions wait: the skipped ones are not reported durable.
    gate = threading.Event()
    sink = make_sink(mariadb_downstream, batch_rows=20, safe_mode_duration=0, fault_hook=_held_at_commit(gate))
    sink.write(first)  # from its checkpoint on: the first transaction committed
    batch = sink.flush_async()
    threading.Timer(0.5, gate.set).start()
    sink.close()  # lets the running transaction end, skips the queued ones
    with pytest.raises(SinkError, match="closed before its transactions were applied"):
        batch.wait()
    resume(make_sink, mariadb_downstream, stream.events, batch_rows=20)
    assert read_kv(mariadb_downstream, table) == stream.final
