"""Every MySQL column type survives model -> sink -> MariaDB -> read back, edge values included."""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from changefeed.model import Column, Index, Op, Resolved, RowChange, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32
from changefeed.sink.mysql import MySQLSink
from changefeed.sink.mysql.sql import quote_table
from changefeed.testing import MariaDBServer

from .helpers import diff, execute, read_model

U8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}
L1 = {"charset": "latin1", "collation": "latin1_swedish_ci"}

# (column DDL, model Column, minimum-ish value, maximum-ish value, a third value)
SPECS: list[tuple[str, Column, Any, Any, Any]] = [
    ("TINYINT", Column("ti", TypeCode.TINYINT), -128, 127, 0),
    ("TINYINT UNSIGNED", Column("tiu", TypeCode.TINYINT, unsigned=True), 0, 255, 1),
    ("SMALLINT", Column("si", TypeCode.SMALLINT), -32768, 32767, -1),
    ("SMALLINT UNSIGNED", Column("siu", TypeCode.SMALLINT, unsigned=True), 0, 65535, 7),
    ("MEDIUMINT", Column("mi", TypeCode.MEDIUMINT), -8388608, 8388607, 0),
    ("MEDIUMINT UNSIGNED", Column("miu", TypeCode.MEDIUMINT, unsigned=True), 0, 16777215, 3),
    ("INT", Column("i", TypeCode.INT), -(2**31), 2**31 - 1, 42),
    ("INT UNSIGNED", Column("iu", TypeCode.INT, unsigned=True), 0, 2**32 - 1, 5),
    ("BIGINT", Column("bi", TypeCode.BIGINT), -(2**63), 2**63 - 1, -7),
    ("BIGINT UNSIGNED", Column("biu", TypeCode.BIGINT, unsigned=True), 0, 2**64 - 1, 2**63),
    ("FLOAT", Column("f", TypeCode.FLOAT), to_float32(-3.4028234663852886e38), to_float32(1.401298464324817e-45),
     to_float32(3.14159)),
    ("DOUBLE", Column("d", TypeCode.DOUBLE), -1.7976931348623157e308, 5e-324, 0.1),
    ("DECIMAL(65,30)", Column("dm", TypeCode.DECIMAL, length=65, decimal=30),
     Decimal("-" + "9" * 35 + "." + "9" * 30), Decimal("9" * 35 + "." + "9" * 30), Decimal("0." + "0" * 29 + "1")),
    ("DECIMAL(10,2)", Column("dm2", TypeCode.DECIMAL, length=10, decimal=2), Decimal("-99999999.99"),
     Decimal("99999999.99"), Decimal("0.00")),
    ("DATE", Column("dt", TypeCode.DATE), "0000-00-00", "9999-12-31", "2021-00-00"),
    ("DATETIME(6)", Column("dtm", TypeCode.DATETIME, decimal=6), "0000-00-00 00:00:00.000000",
     "9999-12-31 23:59:59.999999", "2020-02-30 12:34:56.000001"),
    ("DATETIME", Column("dtm0", TypeCode.DATETIME), "1000-01-01 00:00:00", "2024-02-29 23:59:59",
     "2000-01-01 00:00:00"),
    ("TIMESTAMP(3) NULL", Column("ts", TypeCode.TIMESTAMP, decimal=3), "1970-01-01 00:00:01.000",
     "2038-01-19 03:14:07.999", "0000-00-00 00:00:00.000"),
    ("TIME(6)", Column("tm", TypeCode.TIME, decimal=6), "-838:59:59.000000", "838:59:59.000000",
     "-00:00:01.500000"),
    ("TIME", Column("tm0", TypeCode.TIME), "00:00:00", "23:59:59", "100:00:00"),
    ("YEAR", Column("y", TypeCode.YEAR), 0, 2155, 1901),
    ("CHAR(10)", Column("ch", TypeCode.CHAR, length=10, **U8), "", "0123456789", "é😀"),
    ("VARCHAR(100)", Column("vc", TypeCode.VARCHAR, length=100, **U8), "", "trailing   ", "it's \\ \"q\" \x00\n"),
    ("TINYTEXT", Column("ttx", TypeCode.TINYBLOB, **U8), "", "x" * 255, "\u2028\u2029"),
    ("TEXT", Column("tx", TypeCode.BLOB, **U8), "", "日本語" * 1000, "a\tb"),
    ("MEDIUMTEXT", Column("mtx", TypeCode.MEDIUMBLOB, **U8), "", "m" * 70000, "😀𝄞"),
    ("LONGTEXT", Column("ltx", TypeCode.LONGBLOB, **U8), "", "l" * 100000, "--"),
    ("VARCHAR(20) CHARACTER SET latin1", Column("lat", TypeCode.VARCHAR, length=20, **L1), "", "Ñandú ß", "£"),
    ("BINARY(4)", Column("bn", TypeCode.CHAR, length=4), b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"ab\x00'"),
    ("VARBINARY(300)", Column("vb", TypeCode.VARCHAR, length=300), b"", bytes(range(256)), b"\\'\""),
    ("TINYBLOB", Column("tbl", TypeCode.TINYBLOB), b"", b"\xff" * 255, b"\x00"),
    ("BLOB", Column("bl", TypeCode.BLOB), b"", bytes(range(256)) * 200, b"\x80\x81"),
    ("MEDIUMBLOB", Column("mbl", TypeCode.MEDIUMBLOB), b"", b"\x00" * 70000, b"z"),
    ("LONGBLOB", Column("lbl", TypeCode.LONGBLOB), b"", b"\x01\x02" * 60000, b"\r\n"),
    ("ENUM('a','b','c''d')", Column("e", TypeCode.ENUM, elements=("a", "b", "c'd"), **U8), 0, 3, 1),
    ("SET('x','y','z')", Column("st", TypeCode.SET, elements=("x", "y", "z"), **U8), 0, 7, 5),
    ("BIT(1)", Column("b1", TypeCode.BIT, length=1), 0, 1, 1),
    ("BIT(64)", Column("b64", TypeCode.BIT, length=64), 0, 2**64 - 1, 0x8000000000000001),
    ("JSON", Column("j", TypeCode.JSON), "[]", '{"k": [1, 2.5, "日本", null, true], "e": {}}', '"\\u00e9\\n"'),
    ("GEOMETRY", Column("g", TypeCode.GEOMETRY),
     b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.0, -2.5),
     b"\xe6\x10\x00\x00\x01\x01\x00\x00\x00" + struct.pack("<dd", 1e300, 0.0),
     b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" + struct.pack("<dd", 0.0, 0.0)),
]  # fmt: skip


def all_types_table(schema: str) -> TableSchema:
    cols = (Column("id", TypeCode.INT, nullable=False), *(spec[1] for spec in SPECS))
    return TableSchema(schema, "all_types", cols, (Index("PRIMARY", ("id",), primary=True),))


def create_all_types(server: MariaDBServer, schema: str) -> None:
    cols = ", ".join(f"`{spec[1].name}` {spec[0]}" for spec in SPECS)
    execute(
        server,
        f"CREATE TABLE {quote_table(schema, 'all_types')} (id INT NOT NULL PRIMARY KEY, {cols}) "
        "DEFAULT CHARSET=utf8mb4",
    )


def test_every_type_survives_the_trip(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: Callable[..., MySQLSink]
) -> None:
    table = all_types_table(db)
    width = len(SPECS)
    rows = [
        (1, *(s[2] for s in SPECS)),
        (2, *(s[3] for s in SPECS)),
        (3, *(s[4] for s in SPECS)),
        (4, *([None] * width)),
    ]
    # Row 5 goes through insert, key-preserving update, key-changing update: the update paths too.
    events = [RowChange(Op.INSERT, table, 10 + i, new=r) for i, r in enumerate(rows)]
    events.append(RowChange(Op.INSERT, table, 20, new=(5, *rows[1][1:])))
    events.append(RowChange(Op.UPDATE, table, 21, old=(5, *rows[1][1:]), new=(5, *rows[2][1:])))
    events.append(RowChange(Op.UPDATE, table, 22, old=(5, *rows[2][1:]), new=(6, *rows[0][1:])))
    events.append(RowChange(Op.DELETE, table, 23, old=(3, *rows[2][1:])))
    events.append(Resolved(30))
    expected = [rows[0], rows[1], rows[3], (6, *rows[0][1:])]
    for server, options in (
        (mariadb, {"safe_mode": True}),  # REPLACE / DELETE ... IN
        (mariadb_downstream, {"safe_mode_duration": 0, "workers": 2}),  # INSERT / UPDATE / DELETE
    ):
        create_all_types(server, db)
        with make_sink(server, **options) as sink:
            sink.write(events)
        got = read_model(server, table)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            mismatched = {c.name: (gv, ev) for c, gv, ev in zip(table.columns, g, e, strict=True) if gv != ev}
            assert not mismatched, f"row {e[0]} on {server.name}: {mismatched}"
    # Both servers now hold the same rows: the diff tool agrees over every type.
    report = diff(mariadb, mariadb_downstream, f"{db}.*", chunk_size=2)
    assert report.equal, report
