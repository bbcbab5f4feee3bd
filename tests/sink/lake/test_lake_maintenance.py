"""Lake maintenance (``optimize-every``, ``retain-versions``) on real Delta and Iceberg tables.

Every test reads the tables back with the format's own library (deltalake, pyiceberg's scan) and,
where it says so, with pyarrow.parquet over the data files the current version lists and with
DuckDB over the formats' own metadata (independent.py: what another engine sees after compaction
and retention), and checks exactly-once (resume, replay) and time travel by commit ts across
maintenance commits.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from changefeed.errors import ConfigError
from changefeed.model import ActionType, Column, DDLEvent, TableSchema, TypeCode
from changefeed.sink.lake.common import OPTIMIZE_EVERY, LakeOptions, LakeSink
from changefeed.sink.lake.delta import CHECKPOINT_KEY as DELTA_KEY
from changefeed.sink.lake.delta import MAINTENANCE_KEY as DELTA_MAINTENANCE
from changefeed.sink.lake.delta import DeltaSink, read_delta, readable_from, version_at
from changefeed.sink.lake.iceberg import CHECKPOINT_KEY as ICEBERG_KEY
from changefeed.sink.lake.iceberg import MAINTENANCE_KEY as ICEBERG_MAINTENANCE
from changefeed.sink.lake.iceberg import IcebergSink, snapshot_at
from changefeed.sink.lake.maintenance import ExpiredVersionError

from .helpers import UTF8, T, dele, ins, resolved, ts, upd
from .independent import read_delta_independently, read_iceberg_independently
from .test_delta_modes import SCD2_BATCHES, SCD2_VERSIONS, scd2_versions
from .test_iceberg import catalog

D = Decimal
KINDS = ["delta", "iceberg"]
Rows = list[dict[str, Any]]


def _by_id(rows: Rows) -> Rows:
    return sorted(rows, key=lambda r: (r.get("_cf_commit_ts") or 0, r["id"]))


class Lake:
    """The test table ``shop.orders`` of one format, read with that format's library, not the sink."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root = kind, root
        self.path = root / "shop" / "orders"

    def sink(self, **options: Any) -> LakeSink:
        made = (DeltaSink if self.kind == "delta" else IcebergSink)(self.root, LakeOptions(**options))
        made.open()
        return made

    def iceberg(self) -> Table:
        return catalog(self.root).load_table(("shop", "orders"))

    def rows(self, version: int | None = None) -> Rows:
        """The rows at a Delta version / Iceberg snapshot id (None: the current ones)."""
        if self.kind == "delta":
            return _by_id(read_delta(self.path, version).to_pylist())
        table = self.iceberg()
        scan = table.scan() if version is None else table.scan(snapshot_id=version)
        return _by_id(scan.to_arrow().to_pylist())

    def at(self, commit_ts: int) -> Rows:
        """Time travel by commit ts with the sink's helpers (`version_at`, `snapshot_at`)."""
        if self.kind == "delta":
            version = version_at(self.path, commit_ts)
            assert version is not None
            return self.rows(version)
        snapshot = snapshot_at(self.iceberg(), commit_ts)
        assert snapshot is not None
        return self.rows(snapshot.snapshot_id)

    def files(self, version: int | None = None) -> set[str]:
        """The data files a version reads (absolute paths)."""
        if self.kind == "delta":
            return {u.removeprefix("file://") for u in DeltaTable(str(self.path), version=version).file_uris()}
        table = self.iceberg()
        scan = table.scan() if version is None else table.scan(snapshot_id=version)
        return {task.file.file_path.removeprefix("file://") for task in scan.plan_files()}

    def parquet_rows(self) -> Rows:
        """An independent reader: pyarrow.parquet over the files the current version lists."""
        return _by_id([r for f in sorted(self.files()) for r in pq.read_table(f).to_pylist()])

    def independent_rows(self) -> Rows:
        """DuckDB over the files the table's own metadata lists (Delta log replay, Iceberg manifests)."""
        read = read_delta_independently if self.kind == "delta" else read_iceberg_independently
        return _by_id(read(self.path).to_pylist())

    def on_disk(self) -> set[str]:
        """Every data file under the table's directory."""
        return {str(p) for p in self.path.rglob("*.parquet") if "_delta_log" not in p.parts}

    def count(self) -> int:
        """The table's commit count maintenance goes by: Delta version, Iceberg last sequence number."""
        if self.kind == "delta":
            return DeltaTable(str(self.path)).version()
        return self.iceberg().last_sequence_number

    def checkpoint(self) -> int:
        """The checkpoint ts the table's last commit records (what resume reads)."""
        if self.kind == "delta":
            return DeltaTable(str(self.path)).transaction_version("changefeed") or 0
        snapshot = self.iceberg().current_snapshot()
        assert snapshot is not None and snapshot.summary is not None
        return int(snapshot.summary.additional_properties[ICEBERG_KEY])

    def maintenance(self) -> list[tuple[str, int]]:
        """(what, recorded checkpoint ts) of every maintenance commit, oldest first."""
        if self.kind == "delta":
            history = sorted(DeltaTable(str(self.path)).history(), key=lambda e: e["version"])
            return [(e[DELTA_MAINTENANCE], int(e[DELTA_KEY])) for e in history if DELTA_MAINTENANCE in e]
        found = []
        for s in sorted(self.iceberg().snapshots(), key=lambda s: s.sequence_number or 0):
            props = {} if s.summary is None else s.summary.additional_properties
            if ICEBERG_MAINTENANCE in props:
                found.append((props[ICEBERG_MAINTENANCE], int(props[ICEBERG_KEY])))
        return found

    def handles(self) -> list[int]:
        """Every version time travel can still read: Delta versions, Iceberg snapshot ids of the lineage."""
        if self.kind == "delta":
            return list(range(readable_from(self.path), DeltaTable(str(self.path)).version() + 1))
        table = self.iceberg()
        return [s.snapshot_id for s in table.snapshots()]


def upsert_stream(n: int) -> tuple[list[list[Any]], dict[int, Rows]]:
    """n one-commit batches (insert a key; now and then update the previous one or delete an older
    one, so a MERGE rewrites one small file and the others stay) and the table after each commit ts."""
    state: dict[int, tuple[str, Decimal]] = {}
    batches: list[list[Any]] = []
    states: dict[int, Rows] = {}
    for k in range(1, n + 1):
        batch: list[Any] = [ins(T, k, k, f"n{k}")]
        state[k] = (f"n{k}", D("1.00"))
        if k % 4 == 0 and k - 1 in state:
            old, new = (k - 1, *state[k - 1]), (k - 1, f"u{k}", D(f"{k}.00"))
            batch.append(upd(T, k, old, new))
            state[k - 1] = new[1:]
        if k % 5 == 0 and k - 2 in state:
            batch.append(dele(T, k, (k - 2, *state.pop(k - 2))))
        batch.append(resolved(k))
        batches.append(batch)
        states[ts(k)] = [{"id": i, "note": note, "amount": amount} for i, (note, amount) in sorted(state.items())]
    return batches, states


def feed(sink: LakeSink, batches: list[list[Any]]) -> None:
    for batch in batches:
        sink.write(batch)
        sink.flush()


def test_options_parse_defaults_and_refusals() -> None:
    for scheme in ("delta", "iceberg"):
        default = LakeOptions.from_params(scheme, {})
        assert (default.optimize_every, default.retain_versions) == (OPTIMIZE_EVERY, 0) == (100, 0)
        given = LakeOptions.from_params(scheme, {"optimize-every": "7", "retain-versions": "30", "mode": "scd2"})
        assert (given.optimize_every, given.retain_versions, given.maintenance_every) == (7, 30, 7)
        off = LakeOptions.from_params(scheme, {"optimize-every": "0", "retain-versions": "5"})
        assert off.maintenance_every == 5  # retention alone runs every retain-versions versions
        assert LakeOptions.from_params(scheme, {"optimize-every": "0"}).maintenance_every == 0
        for bad in ("-1", "x", "1.5", "٣"):
            with pytest.raises(ConfigError, match=rf"{scheme}://\.\.\.\?optimize-every= takes a count >= 0"):
                LakeOptions.from_params(scheme, {"optimize-every": bad})
        with pytest.raises(ConfigError, match=r"retain-versions= takes a count"):
            LakeOptions.from_params(scheme, {"retain-versions": "all"})
    with pytest.raises(ConfigError, match="retain-versions must be a count >= 0"):
        LakeOptions(retain_versions=-2)
    with pytest.raises(
        ConfigError, match=r"delta:// takes mode, optimize-every, retain-versions; unknown: catalog-uri"
    ):
        LakeOptions.from_params("delta", {"catalog-uri": "sqlite://"})


@pytest.mark.parametrize("kind", KINDS)
def test_compaction_runs_at_every_nth_commit(tmp_path: Path, kind: str) -> None:
    """changelog appends one file per commit: at the 4th commit the small files become one, in a commit
    recording the same checkpoint ts, and again 4 commits later (the compaction's own commit does not
    count). Rows read back with the library and with pyarrow over the files the table lists."""
    lake = Lake(kind, tmp_path)
    s = lake.sink(mode="changelog", optimize_every=4)
    written: Rows = []
    for k in range(1, 10):
        s.write([ins(T, k, k, f"a{k}"), ins(T, k, 100 + k, f"b{k}"), resolved(k)])
        s.flush()
        for i, note in ((k, f"a{k}"), (100 + k, f"b{k}")):
            written.append({"_cf_op": "insert", "_cf_commit_ts": ts(k), "id": i, "note": note, "amount": D("1.00")})
        got = [{c: r[c] for c in ("_cf_op", "_cf_commit_ts", "id", "note", "amount")} for r in lake.rows()]
        assert got == _by_id(written)
        assert [{c: r[c] for c in got[0]} for r in lake.parquet_rows()] == got
        assert [{c: r[c] for c in got[0]} for r in lake.independent_rows()] == got
        assert lake.checkpoint() == ts(k)
        runs = [t for _, t in lake.maintenance()]
        assert runs == [ts(n) for n in (4, 8) if n <= k], k
        assert len(lake.files()) == (k if k < 4 else 1 + (k - 4) % 4), k
    assert {what for what, _ in lake.maintenance()} == {"optimize" if kind == "delta" else "compaction"}
    assert lake.sink().open() == ts(9)  # resume reads the checkpoint through the compaction commits


@pytest.mark.parametrize("kind", KINDS)
def test_replay_after_compaction_commits_nothing_and_time_travel_holds(tmp_path: Path, kind: str) -> None:
    """upsert with compactions in between: a restart replaying every batch commits nothing, the rows
    stay what was written, and every commit ts still travels to the table as it was then."""
    lake = Lake(kind, tmp_path)
    batches, states = upsert_stream(10)
    s = lake.sink(optimize_every=3)
    feed(s, batches)
    s.close()
    assert len(lake.maintenance()) >= 2
    assert lake.rows() == lake.parquet_rows() == lake.independent_rows() == states[ts(10)]
    count = lake.count()
    again = lake.sink(optimize_every=3)
    assert again.open() == ts(10)
    feed(again, batches)  # the replay: every table skips it
    assert lake.count() == count
    assert lake.rows() == states[ts(10)]
    for k in range(1, 11):
        assert lake.at(ts(k)) == states[ts(k)], k
    more = [upd(T, 11, (10, "n10", D("1.00")), (10, "x", D("1.00"))), resolved(11)]
    feed(again, [more])
    assert {r["id"]: r["note"] for r in lake.rows()}[10] == "x"
    assert lake.checkpoint() == ts(11)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("optimize_every", [0, 4])
def test_retention_keeps_the_newest_versions_and_drops_the_rest(tmp_path: Path, kind: str, optimize_every: int) -> None:
    """retain-versions=3: older versions are gone (files too), the newest stay exact, a commit ts older
    than what is kept is an ExpiredVersionError, and resume/replay still work."""
    lake = Lake(kind, tmp_path)
    batches, states = upsert_stream(16)
    options = {"optimize_every": optimize_every, "retain_versions": 3}
    s = lake.sink(**options)
    feed(s, batches)
    assert lake.rows() == lake.independent_rows() == states[ts(16)]
    # files on disk: exactly those the kept versions read (nothing a dropped version alone needed)
    kept = lake.handles()
    assert lake.on_disk() == set().union(*(lake.files(v) for v in kept))
    every = optimize_every or 3
    # the newest 3 kept at the last run (Delta: and VACUUM's two commits), and less than an interval since
    assert len(kept) <= 3 + (2 if kind == "delta" else 0) + every - 1
    # time travel: a prefix of the commit ts is expired, the rest reads back exactly
    readable: list[int] = []
    for k in range(1, 17):
        try:
            got = lake.at(ts(k))
        except ExpiredVersionError as exc:
            assert not readable, f"ts {k} expired after a readable one"
            assert f"commit ts {ts(k)} is older than the" in str(exc) and "retain-versions" in str(exc)
            continue
        assert got == states[ts(k)], k
        readable.append(k)
    assert readable and readable[0] > 1 and readable[-1] == 16
    # resume and replay after retention
    count = lake.count()
    again = lake.sink(**options)
    assert again.open() == ts(16)
    feed(again, batches)
    assert lake.count() == count and lake.rows() == states[ts(16)]


def test_delta_retention_prunes_the_log_below_a_checkpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Log entries below the newest checkpoint at or before the oldest kept version go: that version
    still loads, older ones do not, and version_at says so instead of returning one."""
    lake = Lake("delta", tmp_path)
    batches, states = upsert_stream(12)
    s = lake.sink(optimize_every=0, retain_versions=4)
    feed(s, batches[:6])
    DeltaTable(str(lake.path)).create_checkpoint()  # delta-rs writes one every 100 commits; here at version 6
    feed(s, batches[6:])
    log_dir = lake.path / "_delta_log"
    versions = sorted(int(p.name[:20]) for p in log_dir.glob("*.json"))
    assert versions[0] == 6 and (log_dir / f"{6:020d}.checkpoint.parquet").exists()
    with pytest.raises(DeltaError):
        DeltaTable(str(lake.path), version=5)
    assert readable_from(lake.path) > 6
    with pytest.raises(ExpiredVersionError, match=rf"commit ts {ts(2)} is older than the versions the table keeps"):
        version_at(lake.path, ts(2))
    assert lake.at(ts(12)) == states[ts(12)]
    assert lake.independent_rows() == states[ts(12)]  # a log replay from the checkpoint another engine does
    assert lake.sink().open() == ts(12)  # the app transaction survives in the checkpoint
    # retain-versions grown past what the log still holds: retention keeps what is left, no failure
    more, more_states = upsert_stream(16)
    grown = lake.count()  # at the next run the oldest version to keep is below the log's checkpoint 6
    with caplog.at_level(logging.WARNING, "changefeed.sink.lake.maintenance"):
        feed(lake.sink(optimize_every=2, retain_versions=grown), more[12:])
    assert "maintenance failed" not in caplog.text
    assert lake.maintenance()[-1][1] == ts(16) and lake.rows() == more_states[ts(16)]
    assert len(lake.files()) == 1 and lake.at(ts(12)) == states[ts(12)]


@pytest.mark.parametrize("kind", KINDS)
def test_zero_turns_maintenance_off(tmp_path: Path, kind: str) -> None:
    lake = Lake(kind, tmp_path)
    s = lake.sink(mode="changelog", optimize_every=0)
    for k in range(1, 7):
        s.write([ins(T, k, k, f"a{k}"), resolved(k)])
        s.flush()
    assert lake.maintenance() == [] and len(lake.files()) == 6 == len(lake.on_disk())


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_maintenance_is_logged_and_tried_again(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lake = Lake(kind, tmp_path)
    cls: Any = DeltaSink if kind == "delta" else IcebergSink
    hook = "_optimize" if kind == "delta" else "_compact"
    real = getattr(cls, hook)
    error = DeltaError("conflicting commit") if kind == "delta" else CommitFailedException("conflicting commit")

    def fail(*args: Any) -> None:
        raise error

    monkeypatch.setattr(cls, hook, fail)
    s = lake.sink(mode="changelog", optimize_every=2)
    with caplog.at_level(logging.WARNING, "changefeed.sink.lake.maintenance"):
        for k in (1, 2):
            s.write([ins(T, k, k, f"a{k}"), resolved(k)])
            assert s.flush() == ts(k)  # the batch stands
    assert "maintenance failed, tried again at the next interval: conflicting commit" in caplog.text
    assert lake.maintenance() == [] and lake.checkpoint() == ts(2)
    monkeypatch.setattr(cls, hook, real)
    for k in (3, 4):
        s.write([ins(T, k, k, f"a{k}"), resolved(k)])
        s.flush()
    assert [t for _, t in lake.maintenance()] == [ts(4)] and len(lake.files()) == 1
    assert [r["id"] for r in lake.rows()] == [1, 2, 3, 4]


@pytest.mark.parametrize("kind", KINDS)
def test_compaction_reads_files_written_before_a_column_rename(tmp_path: Path, kind: str) -> None:
    """Iceberg renames in place (old files keep the old column name, matched by field id): compaction
    reads them through the scan, so the compacted files hold the values under the new name."""
    lake = Lake(kind, tmp_path)
    memo = Column("memo", TypeCode.VARCHAR, length=64, **UTF8)
    renamed = TableSchema("shop", "orders", (T.columns[0], memo, T.columns[2]), T.indexes)
    rename = DDLEvent(
        "shop",
        "orders",
        "ALTER TABLE orders RENAME COLUMN note TO memo",
        ActionType.MODIFY_COLUMN,
        ts(3),
        table_schema=renamed,
    )
    s = lake.sink(optimize_every=6)
    feed(
        s,
        [
            [ins(T, 1, 1, "a"), resolved(1)],
            [ins(T, 2, 2, "b"), resolved(2)],
            [rename, ins(renamed, 4, 3, "c"), resolved(4)],
            [ins(renamed, 5, 4, "d"), resolved(5)],
            [ins(renamed, 6, 5, "e"), resolved(6)],
            [ins(renamed, 7, 6, "f"), resolved(7)],
        ],
    )
    assert lake.maintenance(), "no compaction ran"
    want = [{"id": i, "memo": m, "amount": D("1.00")} for i, m in enumerate("abcdef", 1)]
    assert lake.rows() == want and lake.parquet_rows() == want
    assert all("memo" in pq.read_schema(f).names for f in lake.files())  # the pre-rename files were rewritten
    # time travel to before the rename reads the names of then (Iceberg: the snapshot's schema)
    assert lake.at(ts(2)) == [{"id": i, "note": n, "amount": D("1.00")} for i, n in ((1, "a"), (2, "b"))]


def test_pyarrow_sees_the_compacted_delta_table_as_one_dataset(tmp_path: Path) -> None:
    """After OPTIMIZE the directory holds the old small files until retention; the log's active files are the rows."""
    lake = Lake("delta", tmp_path)
    s = lake.sink(mode="changelog", optimize_every=5)
    for k in range(1, 6):
        s.write([ins(T, k, k, f"a{k}"), resolved(k)])
        s.flush()
    assert len(lake.on_disk()) == 6 and len(lake.files()) == 1
    table = pa.concat_tables(pq.read_table(f) for f in lake.files())
    assert sorted(table.column("id").to_pylist()) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("kind", KINDS)
def test_scd2_compacted_after_every_commit_keeps_its_versions(tmp_path: Path, kind: str) -> None:
    """optimize-every=1 (maintenance after each commit) on scd2: the version rows are those of
    test_delta_modes, a restart replaying the batches commits nothing, a TRUNCATE still closes them."""
    lake = Lake(kind, tmp_path)
    feed(lake.sink(mode="scd2", optimize_every=1), SCD2_BATCHES)
    assert scd2_versions(lake.rows()) == scd2_versions(lake.independent_rows()) == SCD2_VERSIONS
    assert len(lake.files()) == 1
    assert kind == "delta" or lake.maintenance()  # delta-rs' MERGE already rewrote its one file: nothing to do
    count = lake.count()
    feed(lake.sink(mode="scd2", optimize_every=1), SCD2_BATCHES)
    assert lake.count() == count
    truncate = DDLEvent("shop", "orders", "TRUNCATE TABLE orders", ActionType.TRUNCATE_TABLE, ts(6), table_schema=T)
    feed(lake.sink(mode="scd2", optimize_every=1), [[truncate, resolved(6)]])
    assert [r for r in lake.rows() if r["_cf_valid_to"] is None] == []
    assert len(lake.rows()) == len(SCD2_VERSIONS) and lake.checkpoint() == ts(6)
