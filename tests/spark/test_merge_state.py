"""The apply job's merge state on disk: data, not pickle; replay by batch id; damage is a clear error.

No Spark or broker needed: `MergeStage.merge` takes decoded messages as the driver hands them over.
"""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from changefeed.errors import ChangefeedError
from changefeed.files.store import LocalStore
from changefeed.model import Column, DDLEvent, Event, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.jsonl import dumps_event
from changefeed.spark.merge import MergeStage, load_saved, load_state, state_bytes

PACKAGE = Path(__file__).resolve().parents[2] / "changefeed"
TOPIC = "cf-state"
T = TableSchema(
    "db",
    "t",
    (Column("id", TypeCode.BIGINT, nullable=False), Column("v", TypeCode.VARCHAR, "utf8mb4", "utf8mb4_bin", length=20),
     Column("d", TypeCode.DECIMAL, length=10, decimal=2), Column("b", TypeCode.BLOB)),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=7,
)  # fmt: skip


def _row(ts: int, ident: int) -> RowChange:
    return RowChange(Op.INSERT, T, ts, new=(ident, f"v{ident}", Decimal(f"{ident}.50"), bytes([ident, 0, 255])))


def _msg(partition: int, offset: int, *events: Event) -> tuple[int, int, list[Event]]:
    for ev in events:
        ev.position = {"topic": TOPIC, "partition": partition, "offset": offset}
    return partition, offset, list(events)


def _batches() -> list[list[tuple[int, int, list[Event]]]]:
    """Three batches over two partitions: rows wait across batches for the other partition's watermark."""
    ddl = DDLEvent("db", "t", "ALTER TABLE t COMMENT 'x'", 17, 300, table_schema=T)
    return [
        [_msg(0, 0, _row(100, 1)), _msg(0, 1, _row(200, 2), Resolved(200)), _msg(1, 0, _row(150, 3))],
        [_msg(1, 1, ddl), _msg(1, 2, Resolved(180)), _msg(0, 2, ddl)],
        [_msg(0, 3, _row(400, 4), Resolved(500)), _msg(1, 3, _row(200, 2), Resolved(450))],
    ]


def _lines(events: list[Event]) -> list[bytes]:
    return [dumps_event(e) for e in events]


def _stage(tmp_path: Path) -> MergeStage:
    return MergeStage(tmp_path / "merge", TOPIC, [1, 0])


def test_shipped_package_does_not_import_pickle() -> None:
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] in ("pickle", "cPickle", "dill") for n in names), path


def test_state_round_trips_and_a_replayed_batch_releases_the_same(tmp_path: Path) -> None:
    # The reference: one process, every batch committed.
    ref = _stage(tmp_path / "ref")
    expected = []
    for batch_id, batch in enumerate(_batches()):
        expected.append(_lines(ref.merge(batch, batch_id)))
        ref.commit(batch_id)
    assert expected[0] == []  # partition 1 has no watermark yet
    assert [orjson.loads(line)["commit_ts"] for line in expected[1]] == [100, 150, 180]
    assert orjson.loads(expected[1][-1])["position"] == {
        "topic": TOPIC,
        "offsets": {"0": 1, "1": 1},
    }  # rows and the DDL pending there

    # A new process per batch: each restores the file the previous batch saved.
    for batch_id, batch in enumerate(_batches()):
        stage = _stage(tmp_path)
        assert _lines(stage.merge(batch, batch_id)) == expected[batch_id], batch_id
        stage.commit(batch_id)
    files = sorted(p.name for p in (tmp_path / "merge").iterdir())
    assert files == [f"merge-{i:012d}.jsonl" for i in range(3)]
    header = orjson.loads((tmp_path / "merge" / files[0]).read_bytes().splitlines()[0])
    assert header["format"] == "changefeed-merge-state" and header["batch"] == 0 and header["topic"] == TOPIC
    # Only unreleased events are saved: after batch 0 every row waits for partition 1's watermark.
    pending = (tmp_path / "merge" / files[0]).read_bytes().splitlines()[1:]
    assert sorted(orjson.loads(line)["commit_ts"] for line in pending) == [100, 150, 200]

    # Crash after batch 1 was saved but before Spark committed its offsets: batch 1 again, same id.
    stage = _stage(tmp_path)
    assert _lines(stage.merge(_batches()[1], 1)) == expected[1]
    stage.commit(1)
    # Crash before the state was saved (batch 2 ran, failed): the replay starts from batch 1's state.
    stage = _stage(tmp_path)
    stage.merge(_batches()[2], 2)
    assert _lines(stage.merge(_batches()[2], 2)) == expected[2]  # the in-memory copy is not reused
    stage.commit(2)
    assert _lines(_stage(tmp_path).merge([], 3)) == []


def test_in_process_batches_reuse_the_saved_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stage = _stage(tmp_path)
    stage.merge(_batches()[0], 0)
    stage.commit(0)
    monkeypatch.setattr("changefeed.spark.merge.load_saved", None)  # batch 1 must not read the file back
    released = stage.merge(_batches()[1], 1)
    assert [e.commit_ts for e in released] == [100, 150, 180]


def _saved(tmp_path: Path) -> Path:
    stage = _stage(tmp_path)
    stage.merge(_batches()[0], 0)
    stage.commit(0)
    return tmp_path / "merge" / "merge-000000000000.jsonl"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text: b"", "not a changefeed merge state"),
        (lambda text: text[: len(text) // 3], "corrupt"),
        (lambda text: b"\x80\x81garbage\n" + text, "corrupt"),
        (lambda text: text.replace(b'"version":4', b'"version":99'), "version 99"),
        (lambda text: text.replace(b'"seq":', b'"seq":-5,"x":'), "seq must be an integer"),
        (lambda text: text.replace(b'"kind":"row"', b'"kind":"nope"'), "unknown event kind"),
        (lambda text: text.replace(b'"commit_ts":150', b'"commit_ts":"150"'), "commit_ts"),
        (lambda text: text + b'{"kind":"resolved","commit_ts":3}\n', "events for"),
        (lambda text: text.replace(b'"items":[', b'"items":[[1,2,3],'), "events for"),
        (lambda text: text.replace(b'"partitions":[0,1]', b'"partitions":[0,1,2]'), "header names partitions"),
        (lambda text: text.replace(b'"merger":{', b'"merger":[{').replace(b'"items"', b'"items"'), "corrupt"),
    ],
)
def test_damaged_state_file_is_a_clear_error_naming_it(tmp_path: Path, damage, message: str) -> None:
    path = _saved(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ChangefeedError, match=message) as caught:
        _stage(tmp_path).merge(_batches()[1], 1)
    assert str(path) in str(caught.value)


def test_state_of_version_1_is_read(tmp_path: Path) -> None:
    """Version 2 added undecided replays; a version 1 file (none) still loads and goes on the same."""
    path = _saved(tmp_path)
    header, _, rest = path.read_bytes().partition(b"\n")
    doc = orjson.loads(header)
    assert doc["version"] == 4
    doc["version"] = 1
    for part in doc["merger"]["partitions"]:
        assert part.pop("replays") == []
    path.write_bytes(orjson.dumps(doc) + b"\n" + rest)
    _saved(tmp_path / "v2")
    want = _lines(_stage(tmp_path / "v2").merge(_batches()[1], 1))
    assert want and _lines(_stage(tmp_path).merge(_batches()[1], 1)) == want


def _wide_batch(n: int) -> list[tuple[int, int, list[Event]]]:
    """Messages of partition 0 holding ``n`` inserts over two commit ts (two messages each), and one
    update; partition 1 without a watermark, so all of it waits."""
    msgs = []
    for offset in range(4):
        ts = 100 if offset < 2 else 200
        msgs.append(_msg(0, offset, *(_row(ts, offset * n + i) for i in range(n))))
    old, new = _row(200, 1).new, _row(200, 2).new
    msgs.append(_msg(0, 4, RowChange(Op.UPDATE, T, 200, new=new, old=old)))
    return msgs


def test_runs_of_inserts_are_saved_as_inserts_lines_and_read_back_the_same(tmp_path: Path) -> None:
    """A batch ends with up to a resolved interval of rows waiting: INSERTs of one table at one commit
    ts go as one ``inserts`` line (the definition once), each row's position kept."""
    stage = _stage(tmp_path)
    assert stage.merge(_wide_batch(3), 0) == []
    stage.commit(0)
    lines = (tmp_path / "merge" / "merge-000000000000.jsonl").read_bytes().splitlines()[1:]
    kinds = [(obj["kind"], len(obj.get("rows", [1])), obj["commit_ts"]) for obj in map(orjson.loads, lines)]
    assert kinds == [("inserts", 6, 100), ("inserts", 6, 200), ("row", 1, 200)]
    assert [p["offset"] for p in orjson.loads(lines[0])["positions"]] == [0, 0, 0, 1, 1, 1]
    restored = load_state(LocalStore(tmp_path / "merge"), "merge-000000000000.jsonl", TOPIC, [0, 1])
    assert _lines(restored.snapshot()[1]) == _lines(stage._last[1].snapshot()[1])  # type: ignore[index]

    # A new process releases what the one that saved it would have.
    def watermarks() -> list[tuple[int, int, list[Event]]]:
        return [_msg(0, 5, Resolved(300)), _msg(1, 0, Resolved(300))]

    want = _lines(stage.merge(watermarks(), 1))
    got = _lines(_stage(tmp_path).merge(watermarks(), 1))
    assert len(want) == 14 and got == want
    offsets = [orjson.loads(line)["position"]["offset"] for line in got[:13]]
    assert offsets == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]


def test_a_version_2_state_of_row_lines_is_read(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    stage.merge(_wide_batch(2), 0)
    stage.commit(0)
    path = tmp_path / "merge" / "merge-000000000000.jsonl"
    header, _, _ = path.read_bytes().partition(b"\n")
    doc = orjson.loads(header)
    doc["version"] = 2
    rows = _lines(stage._last[1].snapshot()[1])  # type: ignore[index]
    path.write_bytes(orjson.dumps(doc) + b"\n" + b"".join(rows))
    got = load_state(LocalStore(path.parent), path.name, TOPIC, [0, 1])
    assert _lines(got.snapshot()[1]) == rows


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text: text.replace(b'"positions":[', b'"positions":[null,', 1), "'positions' must be 6 objects"),
        (lambda text: text.replace(b'"rows":[[', b'"rows":[[1],[', 1), "lists of 4 values"),
        (lambda text: text.replace(b'"kind":"inserts"', b'"kind":"row"', 1), "corrupt"),
    ],
)
def test_a_damaged_inserts_line_is_a_clear_error_naming_it(tmp_path: Path, damage, message: str) -> None:
    stage = _stage(tmp_path)
    stage.merge(_wide_batch(3), 0)
    stage.commit(0)
    path = tmp_path / "merge" / "merge-000000000000.jsonl"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ChangefeedError, match=message) as caught:
        _stage(tmp_path).merge([], 1)
    assert f"{path}:2" in str(caught.value)


def test_state_of_another_topic_or_partition_count_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    with pytest.raises(ChangefeedError, match="recreated or repartitioned") as caught:
        load_state(LocalStore(path.parent), path.name, "other-topic", [0, 1])
    assert str(path) in str(caught.value)
    with pytest.raises(ChangefeedError, match="recreated or repartitioned"):
        MergeStage(tmp_path / "merge", TOPIC, [0, 1, 2]).merge([], 1)


def test_pickled_state_of_an_older_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "merge").mkdir()
    (tmp_path / "merge" / "merger-000000000004.pkl").write_bytes(b"\x80\x05old")
    with pytest.raises(ChangefeedError, match="pickle form of an older changefeed") as caught:
        _stage(tmp_path).merge([], 5)
    assert str(tmp_path / "merge") in str(caught.value)


def test_released_rows_share_one_schema_object_per_table_version(tmp_path: Path) -> None:
    """Each partition's decoder builds its own TableSchema; the MySQL sink batches rows only while they share one."""
    copy = TableSchema(T.schema, T.table, T.columns, T.indexes, table_id=T.table_id)
    assert copy == T and copy is not T
    first = RowChange(Op.INSERT, copy, 100, new=_row(100, 5).new)
    batch = [_msg(0, 0, _row(100, 1), Resolved(100)), _msg(1, 0, first, Resolved(100))]
    released = _stage(tmp_path).merge(batch, 0)
    rows = [e for e in released if isinstance(e, RowChange)]
    assert len(rows) == 2 and rows[0].table_schema is rows[1].table_schema


def test_message_bytes_are_bounded_across_batches(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    assert stage.max_pending_bytes == 512 << 20  # without a decoder: the floor
    stage.max_pending_bytes = 1000
    first = [(*_msg(0, 0, _row(100, 1), Resolved(100)), 400), (*_msg(0, 1, _row(200, 2)), 400)]
    stage.merge(first, 1)  # partition 1 has no resolved ts yet: both messages' rows wait
    stage.commit(1)
    with pytest.raises(ChangefeedError, match=r"kafka merge buffer: 1200 bytes of 3 messages.*partition 1 is at"):
        stage.merge([(*_msg(0, 2, _row(300, 3)), 400)], 2)  # the held bytes came back with the saved state
    # The replayed batch with a smaller message fits (rows are released after the whole batch is fed).
    released = stage.merge([(*_msg(1, 0, Resolved(250)), 50), (*_msg(0, 2, _row(300, 3)), 100)], 2)
    assert [e.new[0] for e in released if isinstance(e, RowChange)] == [1]  # the global resolved ts is 100
    assert stage._last is not None and stage._last[1].held_bytes == 500  # offsets 1 and 2 still wait


def _with_ends(tmp_path: Path, ends: object, batch: int = 0) -> Path:
    """Batch ``batch``'s state as a job reading its ranges on the driver saves it, with ``ends``."""
    stage = _stage(tmp_path)
    stage.merge(_batches()[0], batch)
    assert stage._last is not None
    data = state_bytes(stage._last[1], batch_id=batch, topic=TOPIC, partitions=[0, 1], ends={0: 2, 1: 1})
    path = tmp_path / "merge" / MergeStage._file(batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.replace(b'"ends":{"0":2,"1":1}', b'"ends":' + orjson.dumps(ends)))
    return path


def test_ends_round_trip_and_a_state_without_them_names_none(tmp_path: Path) -> None:
    path = _with_ends(tmp_path, {"0": 2, "1": 1})
    merger, ends = load_saved(LocalStore(path.parent), path.name, TOPIC, [0, 1])
    assert ends == {0: 2, 1: 1} and sorted(merger.partitions) == [0, 1]
    plain = _saved(tmp_path / "plain")
    assert load_saved(LocalStore(plain.parent), plain.name, TOPIC, [0, 1])[1] is None


@pytest.mark.parametrize(
    ("ends", "message"),
    [
        ([2, 1], "ends must be an object"),
        ({"0": 2, "7": 1}, "ends names partition '7'"),
        ({"0": -1}, "ends of partition 0 must be an offset"),
        ({"0": "2"}, "ends of partition 0 must be an offset"),
        ({"0": True}, "ends of partition 0 must be an offset"),
    ],
)
def test_damaged_ends_are_a_clear_error_naming_the_file(tmp_path: Path, ends: object, message: str) -> None:
    path = _with_ends(tmp_path, ends)
    with pytest.raises(ChangefeedError, match=message) as caught:
        _stage(tmp_path).merge(_batches()[1], 1)
    assert str(path) in str(caught.value)


def test_a_gap_after_a_driver_read_state_is_refused_where_it_cannot_be_read_again(tmp_path: Path) -> None:
    """Batches after a state with ``ends`` may have been handed to the sink without their state saved
    (`MergeStage.durable_later`); only the driver's ranges can read them again."""
    _with_ends(tmp_path, {"0": 2, "1": 1})
    assert _stage(tmp_path).merge(_batches()[1], 1) is not None  # the next batch: nothing in between
    with pytest.raises(ChangefeedError, match=r"spark\.changefeed\.apply\.decode=driver") as caught:
        _stage(tmp_path).merge(_batches()[2], 2)
    assert caught.value.where == str(tmp_path / "merge")


def _offset_log(tmp_path: Path, *batches: object) -> LocalStore:
    """A Spark offset log: batch i's file as Spark writes it, the source's offset the input's form."""
    log = LocalStore(tmp_path / "offsets")
    for batch, offset in enumerate(batches):
        text = offset if isinstance(offset, str) else orjson.dumps(offset).decode()
        log.write(str(batch), f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1}}\n{text}'.encode())
    return log


def test_a_batchs_ranges_are_taken_from_sparks_offset_log(tmp_path: Path) -> None:
    """What `KafkaInput.partitions` names for ``output=ranges`` (every partition, from the last batch's
    offsets to this one's), without a Spark job; None where the log does not tell."""
    log = _offset_log(
        tmp_path,
        {"topic": TOPIC, "offsets": {"0": 5, "1": 0}},
        {"topic": TOPIC, "offsets": {"0": 9, "1": 0}},
        {"topic": "other", "offsets": {"0": 9, "1": 3}},
        {"topic": TOPIC, "offsets": {"0": 9}},
        {"topic": TOPIC, "offsets": {"0": -1, "1": 3}},
        "-",
        {"topic": TOPIC, "offsets": {"0": 9, "1": 4}},
        {"topic": TOPIC, "offsets": {"0": 8, "1": 4}},
    )
    stage = MergeStage(tmp_path / "merge", TOPIC, [1, 0], offset_log=log)
    ranges = stage._logged(1)
    assert ranges is not None and ranges.to_pylist() == [
        {"partition": 0, "start": 5, "end": 9},
        {"partition": 1, "start": 0, "end": 0},
    ]
    assert ranges.schema.names == ["partition", "start", "end"]
    assert stage._logged(0) is None  # the first batch's start is the source's initial offset: not logged
    for batch in (2, 3, 4, 5, 6):  # another topic, a partition missing, a negative offset, no source offset
        assert stage._logged(batch) is None
    assert stage._logged(9) is None  # not planned (yet)
    with pytest.raises(ChangefeedError, match="offset log goes back from batch 6 to 7"):
        stage._logged(7)
    log.write("8", b"\xff garbage")
    with pytest.raises(ChangefeedError, match="unreadable Spark offset log") as caught:
        stage._logged(8)
    assert caught.value.where == f"{log.where}/8"
