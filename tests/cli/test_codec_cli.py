"""`changefeed encode` / `decode`: JSONL events through every protocol and back, streaming."""

from __future__ import annotations

import io
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from changefeed.cli.codec import encode_stream, read_messages
from changefeed.codec import CodecOptions, make_decoder
from changefeed.files.layout import SchemaFile
from changefeed.model import (
    ActionType,
    Column,
    DDLEvent,
    Event,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TypeCode,
)
from changefeed.model.jsonl import EventReader, dumps_event

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
T = TableSchema(
    "test",
    "t1",
    (
        Column("id", TypeCode.INT, nullable=False, length=11),
        Column("val", TypeCode.VARCHAR, length=16, **UTF8),
        Column("amount", TypeCode.DECIMAL, length=10, decimal=2),
        Column("raw", TypeCode.BLOB, charset="binary"),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
    table_id=104,
    version=400000000000000000,
)
EVENTS: list[Event] = [
    DDLEvent(
        "test", "t1", "CREATE TABLE t1 (id INT PRIMARY KEY, val VARCHAR(16))", ActionType.CREATE_TABLE, T.version, T
    ),
    RowChange(Op.INSERT, T, 415508878783938562, new=(1, "aa", Decimal("1.50"), b"\x00\xff")),
    RowChange(Op.INSERT, T, 415508878783938562, new=(2, "测试😀", None, None)),
    RowChange(Op.UPDATE, T, 415508881418485761, new=(2, "bb", Decimal("0.00"), b""), old=(2, "测试😀", None, None)),
    RowChange(Op.DELETE, T, 415508881418485761, old=(1, "aa", Decimal("1.50"), b"\x00\xff")),
    Resolved(415508881418485762),
]
CASES = {
    "open-protocol": [],
    "canal-json": ["--enable-tidb-extension"],
    "simple": [],
    "simple-avro": ["--encoding-format", "avro"],
    # DECIMAL travels as a double: 1.50 comes back as 1.5, equal as a number.
    "debezium": ["--enable-tidb-extension", "--cluster-id", "c1", "--debezium-include-start-ts", "--time-zone", "UTC"],
}


def _run(args: list[str], data: bytes) -> bytes:
    proc = subprocess.run(
        [sys.executable, "-m", "changefeed", *args], input=data, capture_output=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def _comparable(events: list[Event]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for e in events:
        if isinstance(e, RowChange):
            out.append(("row", e.op, e.schema, e.table, e.commit_ts, e.as_dict(), e.as_dict(old=True)))
        elif isinstance(e, DDLEvent):
            out.append(("ddl", e.schema, e.table, e.query, e.commit_ts))
        else:
            out.append(("resolved", e.commit_ts))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_cli_round_trip(name: str) -> None:
    protocol = "simple" if name.startswith("simple") else name
    args = ["--protocol", protocol, *CASES[name]]
    events_in = b"".join(dumps_event(e) for e in EVENTS)
    messages = _run(["encode", *args], events_in)
    lines = [orjson.loads(line) for line in messages.splitlines()]
    assert all(set(m) >= {"key", "value", "partition"} for m in lines)
    events_out = list(EventReader().read(io.BytesIO(_run(["decode", *args], messages))))
    assert _comparable(events_out) == _comparable(EVENTS)


def test_encode_batches_open_protocol_rows() -> None:
    out = io.BytesIO()
    n = encode_stream(EVENTS, CodecOptions(protocol="open-protocol", max_batch_size=16), out)
    # DDL, one batch holding the 4 rows, resolved.
    assert n == 3
    msgs = [m for m, _ in read_messages(io.BytesIO(out.getvalue()).readlines(), "mem")]
    assert msgs[0].key.startswith(b"\x00" * 7 + b"\x01")
    decoded = make_decoder(CodecOptions(protocol="open-protocol")).decode(msgs[1], "mem:2")
    assert [e.op for e in decoded] == [Op.INSERT, Op.INSERT, Op.UPDATE, Op.DELETE]


def test_decode_reports_the_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "msgs.jsonl"
    bad.write_bytes(b'{"key":null,"value":"bm90IGpzb24=","partition":0}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "changefeed", "decode", "--protocol", "canal-json", "--input", str(bad)],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "msgs.jsonl:1" in proc.stderr.decode()


def test_simple_decode_fails_when_schemas_never_arrive() -> None:
    # A DML whose schema no BOOTSTRAP/DDL ever gives is an error at end of input, not a silent drop.
    out = io.BytesIO()
    encode_stream(EVENTS[1:3], CodecOptions(protocol="simple"), out)
    proc = subprocess.run(
        [sys.executable, "-m", "changefeed", "decode", "--protocol", "simple"],
        input=out.getvalue(),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1 and "wait for their table schema" in proc.stderr.decode()


def test_csv_round_trip_with_a_schema_file(tmp_path: Path) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(SchemaFile.from_table(T, T.version).to_json())
    rows = [e for e in EVENTS if isinstance(e, RowChange)]
    args = ["--protocol", "csv", "--include-commit-ts"]
    messages = _run(["encode", *args], b"".join(dumps_event(e) for e in rows))
    out = _run(["decode", *args, "--schema-file", str(schema_file)], messages)
    back = list(EventReader().read(io.BytesIO(out)))

    # CSV without output-old-value carries an UPDATE as its new row only (TiCDC's "U" line).
    def image(e: RowChange) -> dict[str, object]:
        return e.as_dict(old=e.op is Op.DELETE)

    assert [(e.op, e.commit_ts, image(e)) for e in back] == [(e.op, e.commit_ts, image(e)) for e in rows]
    assert image(back[-1]) == {"id": 1, "val": "aa", "amount": Decimal("1.50"), "raw": b"\x00\xff"}
    missing = subprocess.run(
        [sys.executable, "-m", "changefeed", "decode", *args], input=messages, capture_output=True, check=False
    )
    assert missing.returncode == 1 and "--schema-file" in missing.stderr.decode()


def test_cli_debezium_without_schema_and_old_values(tmp_path: Path) -> None:
    """``--debezium-disable-schema`` drops the ``schema`` member of keys and values, ``--no-output-old-value``
    the ``before`` image of UPDATEs (DELETEs keep theirs: it is the row); decode reads them back."""
    import base64  # noqa: PLC0415

    args = ["--protocol", "debezium", "--enable-tidb-extension", "--debezium-disable-schema", "--no-output-old-value"]
    messages = _run(["encode", *args], b"".join(dumps_event(e) for e in EVENTS))
    rows = []
    for line in messages.splitlines():
        m = orjson.loads(line)
        key = orjson.loads(base64.b64decode(m["key"])) if m["key"] else None
        value = orjson.loads(base64.b64decode(m["value"]))
        assert "schema" not in value and (key is None or "schema" not in key), value
        if value.get("payload", {}).get("op") in ("c", "u", "d"):
            rows.append(value["payload"])
    assert [p["op"] for p in rows] == ["c", "c", "u", "d"]
    assert "before" not in rows[2] and rows[2]["after"]["val"] == "bb"
    assert rows[3]["before"]["id"] == 1
    # Without their schema section the messages are typed by the table's schema file, as CSV lines are.
    proc = subprocess.run(
        [sys.executable, "-m", "changefeed", "decode", *args], input=messages, capture_output=True, check=False
    )
    assert proc.returncode == 1 and b"no table schema was given" in proc.stderr
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(SchemaFile.from_table(T, T.version).to_json())
    out = _run(["decode", *args, "--schema-file", str(schema_file)], messages)
    decoded = [e for e in EventReader().read(io.BytesIO(out)) if isinstance(e, RowChange)]
    assert [(e.op, e.as_dict()) for e in decoded] == [
        (Op.INSERT, {"id": 1, "val": "aa", "amount": Decimal("1.5"), "raw": b"\x00\xff"}),
        (Op.INSERT, {"id": 2, "val": "测试😀", "amount": None, "raw": None}),
        (Op.UPDATE, {"id": 2, "val": "bb", "amount": Decimal("0"), "raw": b""}),
        (Op.DELETE, {}),
    ]
    assert decoded[2].old is None and decoded[3].as_dict(old=True)["id"] == 1  # no old value, as asked
