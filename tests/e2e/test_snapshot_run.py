"""`changefeed run` on a populated MariaDB whose binlog was reset: the snapshot, then the binlog, into MariaDB.

The upstream holds rows its binlog no longer describes (``RESET MASTER``), in a table with an
integer key, one with a composite text key (case-insensitive collation) and one without a key;
a writer inserts, updates (keys too) and deletes in all of them while the run reads its chunks.
``snapshot`` is left at its default (``initial``). The downstream must equal the upstream by
`changefeed diff`, also after the run is SIGKILLed mid-snapshot and restarted. Snapshots on demand
(`changefeed snapshot`) re-sync a damaged downstream while the run goes on, also when the run is
SIGKILLed while their chunks are read.
"""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer
from tests.e2e.exactly_once import Job

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(420)]

ACCOUNTS, TAGS, LOG = 700, 300, 120
TAG_WORDS = ["alpha", "Beta", "gamma", "DELTA", "eps", "zeta", "Eta", "theta"]


def _setup(server: MariaDBServer, schema: str, scale: float = 1.0) -> None:
    rng = random.Random(7)
    accounts, tags, log = int(ACCOUNTS * scale), int(TAGS * scale), int(LOG * scale)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(
            f"CREATE TABLE `{schema}`.accounts (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, "
            "bal DECIMAL(12,2), seen DATETIME(3))"
        )
        cur.execute(
            f"CREATE TABLE `{schema}`.tags (tag VARCHAR(16) COLLATE utf8mb4_unicode_ci NOT NULL, n INT NOT NULL, "
            "v INT, PRIMARY KEY (tag, n))"
        )
        cur.execute(f"CREATE TABLE `{schema}`.log (a INT, b VARCHAR(10))")
        cur.executemany(
            f"INSERT INTO `{schema}`.accounts VALUES (%s, %s, %s, %s)",
            [
                (i, f"n{i}", f"{rng.randint(-9999, 9999)}.{i % 100:02d}", "2024-05-06 07:08:09.123")
                for i in range(accounts)
            ],
        )
        cur.executemany(
            f"INSERT INTO `{schema}`.tags VALUES (%s, %s, %s)",
            [(TAG_WORDS[i % len(TAG_WORDS)], i, i * 3) for i in range(tags)],
        )
        cur.executemany(f"INSERT INTO `{schema}`.log VALUES (%s, %s)", [(i % 17, f"l{i}") for i in range(log)])
        conn.commit()
        cur.execute("RESET MASTER")  # the binlog no longer says how the rows got there
        cur.execute(f"UPDATE `{schema}`.accounts SET bal = bal + 1 WHERE id < 50")
        cur.execute(f"DELETE FROM `{schema}`.tags WHERE n < 10")
        conn.commit()


def _writer(server: MariaDBServer, schema: str, stop: threading.Event, seed: int, scale: float = 1.0) -> Iterator[None]:
    """Random transactions across every table (key updates too) until ``stop``; yields after each.

    ``scale`` as given to `_setup`: the keys touched span the whole table, so every chunk sees changes."""
    rng = random.Random(seed)
    accounts, tags = int(ACCOUNTS * scale), int(TAGS * scale)
    next_id = 100_000
    with server.connect(database=schema) as conn, conn.cursor() as cur:
        while not stop.is_set():
            for _ in range(rng.randint(1, 3)):
                op = rng.random()
                i = rng.randrange(accounts)
                if op < 0.25:
                    next_id += 1
                    cur.execute("INSERT INTO accounts VALUES (%s, %s, %s, NOW(3))", (next_id, "w", rng.randint(0, 99)))
                elif op < 0.45:
                    cur.execute("UPDATE accounts SET bal = bal * 2, name = 'u' WHERE id = %s", (i,))
                elif op < 0.55:  # moves the row to another chunk (keys far apart)
                    next_id += 1
                    cur.execute("UPDATE accounts SET id = %s WHERE id = %s", (next_id, i))
                elif op < 0.62:
                    cur.execute("DELETE FROM accounts WHERE id = %s", (i,))
                elif op < 0.72:
                    word = rng.choice(TAG_WORDS)
                    cur.execute(
                        "INSERT INTO tags VALUES (%s, %s, 1) ON DUPLICATE KEY UPDATE v = v + 1",
                        (word.upper() if rng.random() < 0.5 else word.lower(), rng.randrange(tags + 50)),
                    )
                elif op < 0.8:
                    cur.execute("UPDATE IGNORE tags SET n = n + 1000 WHERE n = %s", (rng.randrange(tags),))
                elif op < 0.85:
                    cur.execute("DELETE FROM tags WHERE n = %s", (rng.randrange(tags),))
                elif op < 0.93:
                    cur.execute("INSERT INTO log VALUES (%s, %s)", (rng.randrange(17), "w"))
                else:
                    cur.execute("DELETE FROM log WHERE a = %s LIMIT 1", (rng.randrange(17),))
            conn.commit()
            yield
            time.sleep(rng.uniform(0.005, 0.03))


def _background(
    server: MariaDBServer, schema: str, seed: int, scale: float = 1.0
) -> tuple[threading.Event, Callable[[], int]]:
    stop = threading.Event()
    count = [0]
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for _ in _writer(server, schema, stop, seed, scale):
                count[0] += 1
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="writer", daemon=True)
    thread.start()

    def finish() -> int:
        stop.set()
        thread.join(30)
        if failures:
            raise failures[0]
        return count[0]

    return stop, finish


def _config(path: Path, cid: str, upstream: MariaDBServer, downstream: MariaDBServer, schema: str) -> Path:
    path.write_text(
        f'changefeed-id = "{cid}"\n'
        f'sink-uri = "{downstream.url}/?worker-count=2"\n'
        f'[source]\ntype = "mysql"\nurl = "{upstream.url}"\nsnapshot-chunk-size = 64\nsnapshot-parallelism = 2\n'
        f'[filter]\nrules = ["{schema}.*"]\n'
    )
    return path


def _diff(upstream: MariaDBServer, downstream: MariaDBServer, schema: str, capsys: pytest.CaptureFixture[str]) -> None:
    diff = ["diff", "--source", upstream.url, "--target", downstream.url, "--tables", f"{schema}.*"]
    code = main(diff)
    out = capsys.readouterr().out
    assert code == 0, out
    for table in ("accounts", "tags", "log"):
        assert table in out


def _cleanup(downstream: MariaDBServer, schema: str, cid: str) -> None:
    with downstream.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        cur.execute(f"DELETE FROM changefeed.changefeed_checkpoint WHERE changefeed_id = '{cid}'")
        conn.commit()


def test_snapshot_then_binlog_into_mariadb_equals_upstream(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = mariadb_factory()
    schema, cid = f"snap_{uuid.uuid4().hex[:8]}", f"snap-{uuid.uuid4().hex[:6]}"
    _setup(upstream, schema)
    config = _config(tmp_path / "cf.toml", cid, upstream, mariadb_downstream, schema)
    argv = ["run", str(config), "--available-now", "--master", "local[2]", "--checkpoint", str(tmp_path / "ck")]
    try:
        _, finish = _background(upstream, schema, seed=11)
        try:
            assert main([*argv, "--max-events", "150"]) == 0  # the snapshot in ~8 batches, then the binlog so far
        finally:
            writes = finish()
        first = capsys.readouterr().out
        print(first)
        assert writes > 20, "the writer must have run during the snapshot"
        assert f"changefeed {cid}:" in first
        assert "position binlog." in first, "availableNow runs until the binlog has passed the snapshot"
        assert not list((tmp_path / "ck" / "changefeed-snapshot").glob("*.jsonl.tmp"))
        assert main(argv) == 0  # resumes after the snapshot: the rest of the binlog
        capsys.readouterr()
        _diff(upstream, mariadb_downstream, schema, capsys)
    finally:
        _cleanup(mariadb_downstream, schema, cid)


#: Kills of the snapshot run: each costs a JVM start, and three of them must land mid-snapshot.
SNAPSHOT_KILLS = 4


def test_snapshot_killed_mid_way_resumes_without_gap_or_double(
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SIGKILL four times at random points (while Spark starts, while chunks are read and spilled, mid-batch,
    after the hand-over) under a writer; each restart resumes at the next chunk (a killed batch is re-emitted
    from its spill at the same commit ts, which the sink drops) and the downstream ends equal."""
    upstream = mariadb_factory()
    schema, cid = f"snapk_{uuid.uuid4().hex[:8]}", f"snapk-{uuid.uuid4().hex[:6]}"
    _setup(upstream, schema, scale=2.0)  # ~35 chunks of 64 rows (2 a micro-batch: ~18 batches), then the writer's
    config = _config(tmp_path / "cf.toml", cid, upstream, mariadb_downstream, schema)
    spark_args = ["--master", "local[2]", "--trigger-interval", "200ms", "--max-events", "64"]
    job = Job("run", ["run", str(config), "--checkpoint", str(tmp_path / "ck"), *spark_args], tmp_path)
    ck = tmp_path / "ck"
    rng = random.Random(29)
    mid_snapshot = 0
    try:
        _, finish = _background(upstream, schema, seed=23)
        try:
            for _ in range(SNAPSHOT_KILLS):  # each kill costs a JVM start: ~5-8 s (x4 on a loaded machine)
                job.start()
                deadline = time.monotonic() + 180
                if rng.random() < 0.3:  # before its first micro-batch: Spark starting, offsets, chunk reads
                    time.sleep(rng.uniform(1.0, 4.0))
                else:  # soon after its first or second micro-batch: counted in batches, not seconds, so a
                    # fast machine cannot finish the snapshot within the first kills (CI once did, at 1.5 s)
                    after = rng.randint(1, 2)
                    while job.batches() < after:
                        job.check_alive()
                        assert time.monotonic() < deadline, job.tail()
                        time.sleep(0.02)
                    time.sleep(rng.uniform(0.0, 0.4))
                job.check_alive()
                job.kill()
                mid_snapshot += _snapshot_pending(ck)
            assert mid_snapshot >= 3, "most kills must land before the snapshot's last chunk"
            job.start()
            deadline = time.monotonic() + 240
            while _snapshot_pending(ck) or job.batches() < 2:
                job.check_alive()
                assert time.monotonic() < deadline, job.tail()
                time.sleep(0.2)
        finally:
            finish()
        with upstream.connect(database=schema) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO accounts VALUES (-1, 'marker', 0, NULL)")
            conn.commit()
        deadline = time.monotonic() + 120
        while not _has_marker(mariadb_downstream, schema):
            job.check_alive()
            assert time.monotonic() < deadline, job.tail()
            time.sleep(0.3)
        job.interrupt()
        job.finish()
        logs = [(tmp_path / f"run-{i}.log").read_text(errors="replace") for i in range(1, SNAPSHOT_KILLS + 2)]
        assert sum('position={"snapshot"' in log for log in logs) >= 3, "the kills fell between emitted chunks"
        assert "position=binlog." in logs[-1]
        _diff(upstream, mariadb_downstream, schema, capsys)
    finally:
        job.stop()
        _cleanup(mariadb_downstream, schema, cid)


def _last_offset(checkpoint: Path) -> dict[str, Any] | None:
    """The last source offset Spark logged in ``checkpoint`` (None before the first)."""
    import orjson  # noqa: PLC0415

    offsets = checkpoint / "offsets"
    logged = sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()) if offsets.is_dir() else []
    if not logged:
        return None
    offset: dict[str, Any] = orjson.loads((offsets / str(logged[-1])).read_text().splitlines()[-1])
    return offset


def _snapshot_pending(checkpoint: Path) -> bool:
    """Whether the last offset Spark logged still has chunks to read (or none was logged yet)."""
    last = _last_offset(checkpoint)
    if last is None:
        return True
    snapshot = last.get("snapshot")
    if snapshot is None:
        return False
    if snapshot.get("pending"):
        return True
    return int(snapshot["next"][0]) < len(snapshot["tables"])


def _has_marker(server: MariaDBServer, schema: str, value: int = -1) -> bool:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = 'accounts'",
            (schema,),
        )
        if not cur.fetchone()[0]:
            return False
        cur.execute(f"SELECT COUNT(*) FROM `{schema}`.accounts WHERE id = %s", (value,))
        return bool(cur.fetchone()[0])


def _insert_marker(upstream: MariaDBServer, schema: str, value: int) -> None:
    """A marker row upstream: everything written before it is downstream once it is."""
    with upstream.connect(database=schema) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO accounts VALUES (%s, 'marker', 0, NULL)", (value,))
        conn.commit()


def _await_marker(job: Job, downstream: MariaDBServer, schema: str, value: int, timeout: float = 90) -> None:
    """Wait for the marker downstream while the streaming job stays up."""
    deadline = time.monotonic() + timeout
    while not _has_marker(downstream, schema, value):
        job.check_alive()
        assert time.monotonic() < deadline, job.tail()
        time.sleep(0.3)


def _await_snapshot_logged(job: Job, checkpoint: Path, timeout: float = 120) -> None:
    """Wait until the offset Spark logged last is past the initial snapshot's chunks (the binlog's turn)."""
    deadline = time.monotonic() + timeout
    while _snapshot_pending(checkpoint):
        job.check_alive()
        assert time.monotonic() < deadline, job.tail()
        time.sleep(0.2)


def test_initial_only_copies_the_tables_and_exits(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``snapshot = "initial-only"``: `changefeed run` (no --available-now) copies the tables and ends by itself;
    a change made afterwards is not streamed, also not by a second run on the same checkpoint."""
    upstream = mariadb_factory()
    schema, cid = f"snapo_{uuid.uuid4().hex[:8]}", f"snapo-{uuid.uuid4().hex[:6]}"
    _setup(upstream, schema, scale=0.2)
    config = _config(tmp_path / "cf.toml", cid, upstream, mariadb_downstream, schema)
    config.write_text(config.read_text().replace("[source]\n", '[source]\nsnapshot = "initial-only"\n'))
    argv = ["run", str(config), "--master", "local[2]", "--checkpoint", str(tmp_path / "ck")]
    try:
        assert main(argv) == 0
        capsys.readouterr()
        _diff(upstream, mariadb_downstream, schema, capsys)
        with upstream.connect(database=schema) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO accounts VALUES (-1, 'marker', 0, NULL)")
            conn.commit()
        assert main(argv) == 0  # the snapshot is done: nothing more to read
        capsys.readouterr()
        assert not _has_marker(mariadb_downstream, schema)
    finally:
        _cleanup(mariadb_downstream, schema, cid)


def _incremental_pending(checkpoint: Path) -> bool:
    """Whether the last offset Spark logged holds a snapshot on demand with chunks left to read."""
    progress = (_last_offset(checkpoint) or {}).get("incremental")
    return progress is not None and int(progress["next"][0]) < len(progress["tables"])


def test_snapshot_on_demand_resyncs_damaged_tables_while_the_run_goes_on(
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`changefeed snapshot --tables` on a running changefeed: the downstream lost and changed rows (an accident
    there), a writer keeps changing the source; the signal's snapshot puts the tables right without a stop."""
    upstream = mariadb_factory()
    schema, cid = f"snapd_{uuid.uuid4().hex[:8]}", f"snapd-{uuid.uuid4().hex[:6]}"
    _setup(upstream, schema, scale=0.3)
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "{cid}"\n'
        f'sink-uri = "{mariadb_downstream.url}/?safe-mode=true"\n'  # chunk rows over rows the downstream holds
        f'[source]\ntype = "mysql"\nurl = "{upstream.url}"\nsnapshot-chunk-size = 50\n'
        f'[filter]\nrules = ["{schema}.*"]\n'
    )
    ck = tmp_path / "ck"
    spark_args = ["--master", "local[2]", "--trigger-interval", "300ms"]
    job = Job("run", ["run", str(config), "--checkpoint", str(ck), *spark_args], tmp_path)

    marker = partial(_insert_marker, upstream, schema)
    arrived = partial(_await_marker, job, mariadb_downstream, schema)

    try:
        job.start()
        _await_snapshot_logged(job, ck)  # a marker inserted before the first chunk's read would arrive with it
        marker(-1)
        arrived(-1)  # the initial snapshot and its hand-over are done
        _, finish = _background(upstream, schema, seed=31)
        try:
            with mariadb_downstream.connect(database=schema) as conn, conn.cursor() as cur:
                cur.execute("DELETE FROM accounts WHERE id % 4 = 0")  # the accident
                cur.execute("UPDATE accounts SET name = 'damaged' WHERE id % 4 = 1")
                cur.execute("DELETE FROM tags WHERE n % 3 = 0")
                conn.commit()
            assert main(["snapshot", str(config), "--tables", f"{schema}.accounts,{schema}.tags"]) == 0
            assert "signal " in capsys.readouterr().out
            time.sleep(2.0)  # the writer goes on while the chunks are read
        finally:
            writes = finish()
        assert writes > 10
        deadline = time.monotonic() + 120
        offsets = ck / "offsets"
        while _incremental_pending(ck) or not any('"incremental"' in f.read_text() for f in offsets.iterdir()):
            job.check_alive()
            assert time.monotonic() < deadline, job.tail()
            time.sleep(0.3)
        marker(-2)
        arrived(-2)
        job.interrupt()
        job.finish()
        _diff(upstream, mariadb_downstream, schema, capsys)
    finally:
        job.stop()
        _cleanup(mariadb_downstream, schema, cid)


#: A progress line of a batch whose last event is a snapshot chunk's `Resolved`: the table and chunk it emitted.
_CHUNK_LINE = re.compile(r' batch=\d+ .* position=\{"snapshot":\{"table":\["([^"]+)","([^"]+)"\],"chunk":(\d+)\}\}')


def _chunks_logged(log: Path, since: int = 0) -> list[tuple[str, str, int]]:
    """The snapshot chunks a run's log says it emitted, in order, from byte ``since`` on."""
    text = log.read_bytes()[since:].decode(errors="replace")
    return [(m[1], m[2], int(m[3])) for m in _CHUNK_LINE.finditer(text)]


def _last_incremental(checkpoint: Path) -> dict[str, Any]:
    """The snapshot on demand of the newest offset Spark logged that holds one."""
    import orjson  # noqa: PLC0415

    offsets = checkpoint / "offsets"
    for n in sorted((int(p.name) for p in offsets.iterdir() if p.name.isdigit()), reverse=True):
        offset = orjson.loads((offsets / str(n)).read_text().splitlines()[-1])
        if "incremental" in offset:
            progress: dict[str, Any] = offset["incremental"]
            return progress
    raise AssertionError("no offset holds a snapshot on demand")


def _in_flight(checkpoint: Path) -> bool:
    """Whether Spark logged an offset whose batch it has not committed (a restart runs that batch again)."""

    def last(name: str) -> int:
        folder = checkpoint / name
        return max((int(p.name) for p in folder.iterdir() if p.name.isdigit()), default=-1) if folder.is_dir() else -1

    return last("offsets") > last("commits")


def test_snapshot_on_demand_killed_mid_way_resyncs_without_gap(
    mariadb_factory: Callable[..., MariaDBServer],
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`changefeed snapshot` on a running changefeed over a damaged downstream, and `changefeed run` SIGKILLed
    four times while the snapshot's chunks are read (one a micro-batch), each restart from the same checkpoint.

    A writer inserts, updates (keys too) and deletes across the whole tables throughout. Each kill comes after
    the run logged its 1st-3rd chunk batch: the 1st and 3rd once the next batch's offset is logged and before
    Spark commits it (the chunk read and spilled, the batch running), the 2nd and 4th 0-0.4 s after the line
    (committing, planning, reading a chunk or running). The offset Spark logged last must then still hold
    chunks to read; the next run must begin with the killed batch's chunk (re-emitted from the spill) or with
    the next one, not from the first; every chunk must have been emitted by some run; the downstream ends equal.
    """
    upstream = mariadb_factory()
    schema, cid = f"snapdk_{uuid.uuid4().hex[:8]}", f"snapdk-{uuid.uuid4().hex[:6]}"
    scale = 3.0  # 2,100 accounts and 900 tags: 42 + 18 chunks of 50 rows, one a micro-batch (~0.3 s each)
    _setup(upstream, schema, scale=scale)
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "{cid}"\n'
        f'sink-uri = "{mariadb_downstream.url}/?safe-mode=true"\n'  # chunk rows over rows the downstream holds
        f'[source]\ntype = "mysql"\nurl = "{upstream.url}"\nsnapshot-chunk-size = 50\n'
        f'[filter]\nrules = ["{schema}.*"]\n'
    )
    ck = tmp_path / "ck"
    spark_args = ["--master", "local[2]", "--trigger-interval", "200ms"]
    job = Job("run", ["run", str(config), "--checkpoint", str(ck), *spark_args], tmp_path)
    rng = random.Random(41)

    marker = partial(_insert_marker, upstream, schema)
    arrived = partial(_await_marker, job, mariadb_downstream, schema)

    kills: list[tuple[int, list[int], bool]] = []  # (run, the logged offset's next chunk, batch in flight) per kill
    try:
        job.start()
        _await_snapshot_logged(job, ck)  # a marker inserted before the first chunk's read would arrive with it
        marker(-1)
        arrived(-1)  # the initial snapshot and its hand-over are done
        _, finish = _background(upstream, schema, seed=43, scale=scale)
        try:
            with mariadb_downstream.connect(database=schema) as conn, conn.cursor() as cur:
                cur.execute("DELETE FROM accounts WHERE id % 4 = 0")  # the accident
                cur.execute("UPDATE accounts SET name = 'damaged', bal = NULL WHERE id % 4 = 1")
                cur.execute("DELETE FROM tags WHERE n % 3 = 0")
                cur.execute("UPDATE tags SET v = -1 WHERE n % 3 = 1")
                conn.commit()
            since = since_signal = job.log.stat().st_size  # run 1's initial snapshot logged chunk lines too
            assert main(["snapshot", str(config), "--tables", f"{schema}.accounts,{schema}.tags"]) == 0
            assert "signal " in capsys.readouterr().out
            for k in range(4):
                if k:
                    job.start()
                    since = 0
                wanted = rng.randint(1, 3)
                deadline = time.monotonic() + 180
                while len(_chunks_logged(job.log, since)) < wanted:
                    job.check_alive()
                    assert time.monotonic() < deadline, job.tail()
                    time.sleep(0.02)
                if k % 2 == 0:  # mid-batch: its offset logged (the chunk read and spilled), not committed yet
                    while not _in_flight(ck):
                        job.check_alive()
                        assert time.monotonic() < deadline, job.tail()
                        time.sleep(0.01)
                else:  # anywhere: committing, planning the next batch, reading its chunk, running it
                    time.sleep(rng.uniform(0.0, 0.4))
                job.kill()
                assert _incremental_pending(ck), f"kill {k + 1} came after the snapshot's last chunk"
                assert k % 2 or _in_flight(ck), f"kill {k + 1} did not land mid-batch"
                kills.append((job.runs, list(_last_incremental(ck)["next"]), _in_flight(ck)))
            job.start()
            deadline = time.monotonic() + 240
            while _incremental_pending(ck):
                job.check_alive()
                assert time.monotonic() < deadline, job.tail()
                time.sleep(0.3)
        finally:
            writes = finish()
        assert writes > 50, "the writer must have run throughout"
        marker(-2)
        arrived(-2)
        job.interrupt()
        job.finish()

        done = _last_incremental(ck)
        tables = [(t["name"][0], t["name"][1], len(t["bounds"]) + 1) for t in done["tables"]]
        assert [t[1] for t in tables] == ["accounts", "tags"]
        assert done["next"] == [len(tables), 0]
        first = {(s, t): sum(n for *_, n in tables[:i]) for i, (s, t, _) in enumerate(tables)}
        index = {(s, t, c): first[s, t] + c for s, t, n in tables for c in range(n)}  # snapshot order

        logged = [[index[c] for c in _chunks_logged(tmp_path / "run-1.log", since_signal)]]
        logged += [[index[c] for c in _chunks_logged(tmp_path / f"run-{r}.log")] for r in range(2, job.runs + 1)]
        detail = f"chunks emitted per run {logged}; (run, next chunk, batch in flight) at each kill {kills}"
        assert len(index) >= 50, detail
        assert set().union(*logged) == set(index.values()), f"a chunk was never emitted: {detail}"
        for (run, (ti, ci), in_flight), resumed in zip(kills, logged[1:], strict=True):
            at_kill = first[schema, tables[ti][1]] + ci  # the next chunk of the offset logged last
            assert logged[run - 1], f"run {run} was killed before it emitted a chunk: {detail}"
            assert max(logged[run - 1]) < len(index) - 1, f"run {run} emitted the last chunk: {detail}"
            # A batch logged but not committed is run again (its chunk re-emitted from the spill, at the same
            # commit ts, which the sink drops); else the restart reads the next chunk. Never from the start.
            expected = at_kill - 1 if in_flight else at_kill
            assert resumed and resumed[0] == expected, f"run {run + 1} did not begin at chunk {expected}: {detail}"
        assert logged[-1] and max(logged[-1]) == len(index) - 1, f"the last run did not finish it: {detail}"
        _diff(upstream, mariadb_downstream, schema, capsys)
    finally:
        job.stop()
        _cleanup(mariadb_downstream, schema, cid)
