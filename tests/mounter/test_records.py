"""Record input: JSONL (hex/base64, detection), Parquet, Arrow batches, and `changefeed mount`."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changefeed.capture.mounter import (
    Catalog,
    Mounter,
    decode_batch,
    detect_encoding,
    read_file,
    record_from_object,
)
from changefeed.cli import main
from changefeed.errors import CaptureError
from changefeed.model import Op, Resolved, RowChange
from changefeed.model.jsonl import EventReader

from . import tidb_encoder as enc

CATALOG = Path(__file__).resolve().parent.parent / "fixtures" / "mounter" / "catalog.json"
T = 440000000000000300
KEY = enc.record_key(122, 7)  # shop.events partition p1
V_NEW = enc.row_v2({2: b"view"})
V_OLD = enc.row_v2({2: b"click"})


def _records() -> list[dict]:
    return [
        {"op": "put", "key": KEY.hex(), "value": V_NEW.hex(), "start_ts": T - 3, "commit_ts": T, "region_id": 4},
        {"op": "put", "key": enc.b64(KEY), "value": enc.b64(V_NEW), "old_value": enc.b64(V_OLD), "commit_ts": T + 1},
        {"op": "delete", "key": enc.b64(KEY), "old_value": enc.b64(V_NEW), "commit_ts": T + 2, "encoding": "base64"},
        {"op": "put", "key": enc.index_key(120, 1, enc.key_int(7)).hex(), "value": "00", "commit_ts": T + 2},
        {"op": "resolved", "ts": T + 3},
    ]


def _check(events: list) -> None:
    assert [type(e).__name__ for e in events] == ["RowChange", "RowChange", "RowChange", "Resolved"]
    ins, upd, dele, res = events
    assert ins.op is Op.INSERT and ins.as_dict() == {"id": 7, "kind": "view"}
    assert (ins.start_ts, ins.commit_ts, ins.partition_id, ins.position) == (T - 3, T, 122, {"region_id": 4})
    assert upd.op is Op.UPDATE and upd.as_dict(old=True) == {"id": 7, "kind": "click"}
    assert dele.op is Op.DELETE and dele.old == (7, "view") and dele.new is None
    assert isinstance(res, Resolved) and res.commit_ts == T + 3


def test_detect_encoding_rule() -> None:
    for key in (enc.record_key(1, 1), enc.record_key(1, 1, keyspace=b"\x00\x00\x01"), b"mDB:1"):
        assert detect_encoding(key.hex()) == "hex"
        assert detect_encoding(enc.b64(key)) == "base64"
    rec = record_from_object({"op": "PUT", "key": KEY.hex().upper(), "value": V_NEW.hex(), "commit_ts": 5})
    assert rec.key == KEY and rec.value == V_NEW


def test_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in _records()) + b"\n\n")
    _check(list(read_file(path, Mounter(Catalog.load(CATALOG)))))


@pytest.mark.parametrize("binary", [True, False])
def test_parquet_file_and_batches(tmp_path: Path, binary: bool) -> None:
    recs = [r for r in _records() if r["op"] != "resolved"]
    if binary:  # raw bytes in binary columns: no encoding involved
        recs = [{k: _raw(r, k) for k in r if k != "encoding"} for r in recs]
    table = pa.table(
        {
            "op": [r["op"] for r in recs] + ["resolved"],
            "key": [r["key"] for r in recs] + [None],
            "value": [r.get("value") for r in recs] + [None],
            "old_value": [r.get("old_value") for r in recs] + [None],
            "start_ts": pa.array([r.get("start_ts", 0) for r in recs] + [0], pa.uint64()),
            "commit_ts": pa.array([r["commit_ts"] for r in recs] + [T + 3], pa.uint64()),
            "region_id": [r.get("region_id") for r in recs] + [None],
        }
    )
    if binary:
        assert pa.types.is_binary(table.schema.field("key").type)
    path = tmp_path / "records.parquet"
    pq.write_table(table, path)
    mounter = Mounter(Catalog.load(CATALOG))
    _check(list(read_file(path, mounter)))
    _check(decode_batch(table.to_batches()[0], mounter))


def _raw(rec: dict, member: str) -> object:
    value = rec[member]
    if member not in ("key", "value", "old_value"):
        return value
    enc = rec.get("encoding") or detect_encoding(rec["key"])
    return bytes.fromhex(value) if enc == "hex" else base64.b64decode(value)


def test_mounter_pickles_for_spark() -> None:
    mounter = Mounter(Catalog.load(CATALOG), "Asia/Shanghai", verify_checksum=True)
    mounter.mount(record_from_object(_records()[0]))
    copy = pickle.loads(pickle.dumps(mounter))
    assert copy.time_zone == "Asia/Shanghai" and copy.verify_checksum
    assert copy.mount(record_from_object(_records()[0])).as_dict() == {"id": 7, "kind": "view"}


def test_jsonl_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [orjson.dumps(_records()[0]), b"", b'{"op": "put", "key": "zz", "commit_ts": 1, "encoding": "hex"}']
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CaptureError, match="key is not valid hex") as info:
        list(read_file(path, Mounter(Catalog.load(CATALOG))))
    assert info.value.where == f"{path}:3"
    bad_value = dict(_records()[0], value="80ff")
    path.write_bytes(orjson.dumps(_records()[4]) + b"\n" + orjson.dumps(bad_value))
    with pytest.raises(CaptureError, match="truncated") as info:
        list(read_file(path, Mounter(Catalog.load(CATALOG))))
    assert info.value.where == f"{path}:2 key={KEY.hex()}"
    for line, match in [(b"[1]", "JSON object"), (b"{", "invalid JSON"), (b'{"op": "merge"}', "op must be")]:
        path.write_bytes(line)
        with pytest.raises(CaptureError, match=match):
            list(read_file(path, Mounter(Catalog.load(CATALOG))))


def test_cli_mount_streams_jsonl_events(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in _records()))
    assert main(["mount", "--catalog", str(CATALOG), "--time-zone", "+08:00", str(path)]) == 0
    out = capsysbinary.readouterr().out.splitlines()
    assert len(out) == 4
    first = json.loads(out[0])
    assert (first["kind"], first["op"], first["schema"], first["table"], first["partition_id"]) == (
        "row",
        "insert",
        "shop",
        "events",
        122,
    )
    events = [EventReader().parse(line) for line in out]
    assert isinstance(events[0], RowChange) and events[0].as_dict() == {"id": 7, "kind": "view"}
    _check(events)


def test_cli_mount_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(orjson.dumps(dict(_records()[0], key=enc.record_key(999, 1).hex())))
    assert main(["mount", "--catalog", str(CATALOG), str(path)]) == 1
    err = capsys.readouterr().err
    assert "physical table 999 is not in the catalog" in err and f"{path}:1 key=" in err
    assert main(["mount", "--catalog", str(CATALOG), "--skip-unknown-tables", str(path)]) == 0
    assert main(["mount", "--catalog", str(CATALOG), "--time-zone", "Mars/Base", str(path)]) == 1
    assert "unknown time zone" in capsys.readouterr().err
