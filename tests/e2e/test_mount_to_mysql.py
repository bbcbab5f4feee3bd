"""End to end: TiDB KV records -> `changefeed mount` -> a protocol -> decode -> MySQL apply.

The KV records are made by the test-only TiDB row encoder; the downstream rows must equal the
values the records were built from.
"""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from changefeed.cli import main
from changefeed.cli.codec import encode_stream, read_messages
from changefeed.codec import CodecOptions, make_decoder
from changefeed.model import Column, Index, RowChange, TypeCode
from changefeed.model.gofloat import to_float32
from changefeed.model.jsonl import EventReader
from changefeed.sink.mysql import MySQLSink
from changefeed.testing.mariadb import MariaDBServer
from tests.mounter import tidb_encoder as enc
from tests.mounter.util import TS, schema, utf8

pytestmark = pytest.mark.mariadb

TABLE = schema(
    [
        Column("id", TypeCode.BIGINT, nullable=False),
        utf8("name", length=32),
        Column("amount", TypeCode.DECIMAL, length=10, decimal=2),
        Column("ratio", TypeCode.FLOAT),
        Column("born", TypeCode.DATETIME, decimal=3),
        Column("blob", TypeCode.BLOB, charset="binary"),
        utf8("kind", TypeCode.ENUM, elements=("a", "b", "c")),
    ],
    (Index("PRIMARY", ("id",), primary=True),),
    name="people",
)
DDL = (
    "CREATE TABLE `people` (id BIGINT PRIMARY KEY, name VARCHAR(32), amount DECIMAL(10,2), ratio FLOAT,"
    " born DATETIME(3), `blob` BLOB, kind ENUM('a','b','c'))"
)
ROWS = [
    (1, "Ada", Decimal("12.50"), to_float32(0.25), "2024-05-01 10:00:00.123", b"\x00\x01", 2),
    (2, "测试😀", None, None, "0000-00-00 00:00:00.000", None, 1),
    (3, "C", Decimal("-0.01"), to_float32(1.5), "1999-12-31 23:59:59.999", b"", 3),
]


def _records() -> list[bytes]:
    lines = []
    for i, row in enumerate(ROWS):
        value = enc.encode_image(TABLE, row, "v2", skip=(0,))
        lines.append(
            orjson.dumps(
                {"op": "put", "key": enc.record_key(104, row[0]).hex(), "value": value.hex(), "commit_ts": TS + i}
            )
        )
    # Update row 3 and delete row 2.
    new3 = (3, "C2", Decimal("9.99"), to_float32(1.5), "1999-12-31 23:59:59.999", b"x", 1)
    lines.append(
        orjson.dumps(
            {
                "op": "put",
                "key": enc.record_key(104, 3).hex(),
                "value": enc.encode_image(TABLE, new3, "v2", skip=(0,)).hex(),
                "old_value": enc.encode_image(TABLE, ROWS[2], "v1", skip=(0,)).hex(),
                "commit_ts": TS + 10,
            }
        )
    )
    lines.append(
        orjson.dumps(
            {
                "op": "delete",
                "key": enc.record_key(104, 2).hex(),
                "old_value": enc.encode_image(TABLE, ROWS[1], "v2", skip=(0,)).hex(),
                "commit_ts": TS + 11,
            }
        )
    )
    lines.append(orjson.dumps({"op": "resolved", "ts": TS + 12}))
    return lines


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_mount_encode_decode_apply(
    protocol: str,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    mariadb_downstream: MariaDBServer,
) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_bytes(
        orjson.dumps({"tables": [{"schema": "test", "version": 1, "table": enc.table_info(TABLE, 104)}]})
    )
    records = tmp_path / "records.jsonl"
    records.write_bytes(b"\n".join(_records()))
    assert main(["mount", "--catalog", str(catalog), str(records)]) == 0
    events = list(EventReader("mount").read(io.BytesIO(capsysbinary.readouterr().out)))
    assert len(events) == 6

    options = CodecOptions(protocol=protocol, enable_tidb_extension=True)
    messages = io.BytesIO()
    encode_stream(events, options, messages)
    decoder = make_decoder(options)
    decoded = [
        e for msg, where in read_messages(messages.getvalue().splitlines(), "mem") for e in decoder.decode(msg, where)
    ]

    db = f"mount_{protocol.replace('-', '_')}"
    with mariadb_downstream.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        cur.execute(DDL)
    renamed = list(decoded)
    for e in renamed:
        if isinstance(e, RowChange):  # apply into this test's database
            e.table_schema = e.table_schema.renamed(db, "people")
    with MySQLSink(mariadb_downstream.url + "/", changefeed_id=f"mount-{protocol}") as sink:
        sink.write(renamed)
        sink.flush()
    with mariadb_downstream.connect(database=db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, amount, ratio, CAST(born AS CHAR), `blob`, kind + 0 FROM people ORDER BY id")
        got = cur.fetchall()
    assert got == (
        (1, "Ada", Decimal("12.50"), 0.25, "2024-05-01 10:00:00.123", b"\x00\x01", 2),
        (3, "C2", Decimal("9.99"), 1.5, "1999-12-31 23:59:59.999", b"x", 1),
    )
