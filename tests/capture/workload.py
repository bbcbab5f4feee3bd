"""One SQL workload and the change events it must produce, for the fixture files and live tests.

Every type family with its edge values, a multi-statement transaction, an UPDATE of the primary
key, DDL mid-stream (add/drop/modify column, rename table) with rows before and after, and a
binlog rotation. ``EXPECTED`` lists, in order, what a capture of ``SCHEMA`` must emit (Resolved
events aside) as ``(kind, table, new, old)`` with the values in the model's representation.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from changefeed.capture.binlog import BinlogPosition
from changefeed.model.gofloat import to_float32
from changefeed.testing import MariaDBServer

SCHEMA = "cf"

ALL_BYTES = bytes(range(256))
POINT_1_2 = b"\x00\x00\x00\x00" + b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.0, 2.0)
DEC65 = "12345678901234567890123456789012345.123456789012345678901234567890"
NEG_DEC65 = "-99999999999999999999999999999999999.999999999999999999999999999999"
LONG_TEXT = "长" * 299 + "😀"  # 300 characters, 900+ bytes: a 2-byte length

# Each step: one SQL statement, or a list run as one transaction.
STEPS: list[str | list[str]] = [
    "SET SESSION time_zone = '+00:00'",
    "SET SESSION sql_mode = ''",
    f"CREATE TABLE {SCHEMA}.ints (id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT,"
    " su SMALLINT UNSIGNED, mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT,"
    " bu BIGINT UNSIGNED, b1 BIT(1), b64 BIT(64), y YEAR, bo BOOL)",
    f"INSERT INTO {SCHEMA}.ints VALUES"
    " (1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, b'0', 0, 1901, 0),"
    " (2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,"
    " 18446744073709551615, b'1', 18446744073709551615, 2155, 1),"
    " (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL)",
    f"CREATE TABLE {SCHEMA}.nums (id INT PRIMARY KEY, f FLOAT, d DOUBLE, d65 DECIMAL(65,30),"
    " d10 DECIMAL(10,0), d52 DECIMAL(5,2) UNSIGNED, d18 DECIMAL(18,9))",
    f"INSERT INTO {SCHEMA}.nums VALUES"
    f" (1, 1.5, 1.7976931348623157e308, '{DEC65}', -9999999999, 999.99, -0.000000001),"
    f" (2, -3.25, -2.2250738585072014e-308, '{NEG_DEC65}', 0, 0, 123456789.123456789),"
    " (3, 0.1, 0.1, 0, 1, 0.5, -1)",
    f"CREATE TABLE {SCHEMA}.times (id INT PRIMARY KEY, d DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6),"
    " t0 TIME, t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4), t5 TIME(5), t6 TIME(6),"
    " ts0 TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL, ts6 TIMESTAMP(6) NULL)",
    f"INSERT INTO {SCHEMA}.times VALUES"
    " (1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00',"
    " '-838:59:59', '-12:34:56.5', '-00:00:01.25', '-838:59:58.999', '-00:00:00.0001', '-01:02:03.12345',"
    " '-837:59:59.999999', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00'),"
    " (2, '9999-12-31', '9999-12-31 23:59:59', '2020-02-29 12:34:56.789', '1000-01-01 00:00:00.000001',"
    " '838:59:59', '00:00:00.1', '23:59:59.99', '12:00:00.001', '00:00:00.9999', '00:00:00.00001',"
    " '838:59:59.000000', '1970-01-01 00:00:01', '2000-01-01 00:00:00.5', '2038-01-19 03:14:07.999999'),"
    " (3, '2024-02-29', NULL, NULL, NULL, '00:00:00', '-00:00:00.1', NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL)",
    f"CREATE TABLE {SCHEMA}.strs (id INT PRIMARY KEY, c CHAR(5), c255 CHAR(255), vc VARCHAR(300), bin BINARY(4),"
    " vb VARBINARY(300), l1 VARCHAR(10) CHARACTER SET latin1, tt TINYTEXT, t TEXT, mt MEDIUMTEXT, lt LONGTEXT,"
    " tb TINYBLOB, b BLOB, mb MEDIUMBLOB, lb LONGBLOB, e ENUM('a','b','c'), s SET('x','y','z'), j JSON,"
    " g GEOMETRY, emoji VARCHAR(10)) DEFAULT CHARSET=utf8mb4",
    (
        f"INSERT INTO {SCHEMA}.strs VALUES (1, 'ab  ', REPEAT('x', 255), '{LONG_TEXT}', 'ab', UNHEX('"
        + ALL_BYTES.hex()
        + "'), 'café€', '', 'text', 'medium', 'long', '', UNHEX('00FF'), 'mb', 'lb', 'c', 'x,z',"
        " '{\"k\": \"v\", \"a\": [1, 2]}', ST_GeomFromText('POINT(1 2)'), '😀🎉')"
    ),
    f"INSERT INTO {SCHEMA}.strs (id, c, bin, vb, e, s, j) VALUES (2, '', UNHEX('00000000'), '', 'a', '', 'null')",
    f"INSERT INTO {SCHEMA}.strs (id) VALUES (3)",
    # A multi-statement transaction, and an UPDATE that changes the primary key.
    [
        f"INSERT INTO {SCHEMA}.ints (id, ti) VALUES (4, 4)",
        f"UPDATE {SCHEMA}.ints SET ti = 5 WHERE id = 4",
        f"DELETE FROM {SCHEMA}.nums WHERE id = 3",
        f"UPDATE {SCHEMA}.strs SET e = 'b', s = 'y' WHERE id = 2",
    ],
    f"UPDATE {SCHEMA}.ints SET id = 10 WHERE id = 3",
    "FLUSH BINARY LOGS",
    # DDL mid-stream, rows before and after each.
    f"ALTER TABLE {SCHEMA}.ints ADD COLUMN extra VARCHAR(10) DEFAULT 'x'",
    f"INSERT INTO {SCHEMA}.ints (id, ti, extra) VALUES (5, 5, 'five')",
    f"ALTER TABLE {SCHEMA}.ints DROP COLUMN extra",
    f"INSERT INTO {SCHEMA}.ints (id, ti) VALUES (6, 6)",
    f"ALTER TABLE {SCHEMA}.ints MODIFY ti SMALLINT",
    f"INSERT INTO {SCHEMA}.ints (id, ti) VALUES (7, 1000)",
    f"RENAME TABLE {SCHEMA}.ints TO {SCHEMA}.ints2",
    f"INSERT INTO {SCHEMA}.ints2 (id, ti) VALUES (8, 8)",
    f"DELETE FROM {SCHEMA}.ints2 WHERE id IN (1, 2)",
]

_INT_COLS = ["id", "ti", "tu", "si", "su", "mi", "mu", "i", "iu", "bi", "bu", "b1", "b64", "y", "bo"]


def _ints(id_: int, ti: Any = None, y: int | None = None, **extra: Any) -> dict[str, Any]:
    row = dict.fromkeys(_INT_COLS)
    row.update(id=id_, ti=ti, y=y, **extra)
    return row


INT_ROWS = [
    dict(zip(_INT_COLS, [1, -128, 0, -32768, 0, -8388608, 0, -(2**31), 0, -(2**63), 0, 0, 0, 1901, 0], strict=True)),
    dict(
        zip(
            _INT_COLS,
            [
                *(2, 127, 255, 32767, 65535, 8388607, 16777215, 2**31 - 1, 2**32 - 1, 2**63 - 1),
                *(2**64 - 1, 1, 2**64 - 1, 2155, 1),
            ],
            strict=True,
        )
    ),
    _ints(3, y=0),
]
NUM_ROWS = [
    {
        "id": 1,
        "f": 1.5,
        "d": 1.7976931348623157e308,
        "d65": Decimal(DEC65),
        "d10": Decimal("-9999999999"),
        "d52": Decimal("999.99"),
        "d18": Decimal("-0.000000001"),
    },
    {
        "id": 2,
        "f": -3.25,
        "d": -2.2250738585072014e-308,
        "d65": Decimal(NEG_DEC65),
        "d10": Decimal("0"),
        "d52": Decimal("0.00"),
        "d18": Decimal("123456789.123456789"),
    },
    {
        "id": 3,
        "f": to_float32(0.1),
        "d": 0.1,
        "d65": Decimal("0E-30"),
        "d10": Decimal("1"),
        "d52": Decimal("0.50"),
        "d18": Decimal("-1.000000000"),
    },
]
TIME_ROWS = [
    {
        "id": 1,
        "d": "0000-00-00",
        "dt0": "0000-00-00 00:00:00",
        "dt3": "0000-00-00 00:00:00.000",
        "dt6": "0000-00-00 00:00:00.000000",
        "t0": "-838:59:59",
        "t1": "-12:34:56.5",
        "t2": "-00:00:01.25",
        "t3": "-838:59:58.999",
        "t4": "-00:00:00.0001",
        "t5": "-01:02:03.12345",
        "t6": "-837:59:59.999999",
        "ts0": "0000-00-00 00:00:00",
        "ts3": "0000-00-00 00:00:00.000",
        "ts6": "0000-00-00 00:00:00.000000",
    },
    {
        "id": 2,
        "d": "9999-12-31",
        "dt0": "9999-12-31 23:59:59",
        "dt3": "2020-02-29 12:34:56.789",
        "dt6": "1000-01-01 00:00:00.000001",
        "t0": "838:59:59",
        "t1": "00:00:00.1",
        "t2": "23:59:59.99",
        "t3": "12:00:00.001",
        "t4": "00:00:00.9999",
        "t5": "00:00:00.00001",
        "t6": "838:59:59.000000",
        "ts0": "1970-01-01 00:00:01",
        "ts3": "2000-01-01 00:00:00.500",
        "ts6": "2038-01-19 03:14:07.999999",
    },
    {
        "id": 3,
        "d": "2024-02-29",
        "dt0": None,
        "dt3": None,
        "dt6": None,
        "t0": "00:00:00",
        "t1": "-00:00:00.1",
        "t2": None,
        "t3": None,
        "t4": None,
        "t5": None,
        "t6": None,
        "ts0": None,
        "ts3": None,
        "ts6": None,
    },
]
_STR_COLS = ["id", "c", "c255", "vc", "bin", "vb", "l1", "tt", "t", "mt", "lt", "tb", "b", "mb", "lb", "e", "s", "j"]
_STR_COLS += ["g", "emoji"]
STR_ROWS = [
    dict(
        zip(
            _STR_COLS,
            [
                *(1, "ab", "x" * 255, LONG_TEXT, b"ab\0\0", ALL_BYTES, "café€", "", "text", "medium", "long", b""),
                *(b"\x00\xff", b"mb", b"lb", 3, 0b101, '{"k": "v", "a": [1, 2]}', POINT_1_2, "😀🎉"),
            ],
            strict=True,
        )
    ),
    {**dict.fromkeys(_STR_COLS), "id": 2, "c": "", "bin": b"\0\0\0\0", "vb": b"", "e": 1, "s": 0, "j": "null"},
    {**dict.fromkeys(_STR_COLS), "id": 3},
]

Expected = tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]
EXPECTED: list[Expected] = [
    ("ddl", "ints", None, None),
    *[("insert", "ints", r, None) for r in INT_ROWS],
    ("ddl", "nums", None, None),
    *[("insert", "nums", r, None) for r in NUM_ROWS],
    ("ddl", "times", None, None),
    *[("insert", "times", r, None) for r in TIME_ROWS],
    ("ddl", "strs", None, None),
    *[("insert", "strs", r, None) for r in STR_ROWS],
    ("insert", "ints", _ints(4, 4), None),
    ("update", "ints", _ints(4, 5), _ints(4, 4)),
    ("delete", "nums", None, NUM_ROWS[2]),
    ("update", "strs", {**STR_ROWS[1], "e": 2, "s": 2}, STR_ROWS[1]),
    ("update", "ints", {**INT_ROWS[2], "id": 10}, INT_ROWS[2]),
    ("ddl", "ints", None, None),
    ("insert", "ints", _ints(5, 5, extra="five"), None),
    ("ddl", "ints", None, None),
    ("insert", "ints", _ints(6, 6), None),
    ("ddl", "ints", None, None),
    ("insert", "ints", _ints(7, 1000), None),
    ("ddl", "ints2", None, None),
    ("insert", "ints2", _ints(8, 8), None),
    ("delete", "ints2", None, INT_ROWS[0]),
    ("delete", "ints2", None, INT_ROWS[1]),
]


def keyed_table(cur: Any, schema: str, rows: int) -> None:
    """Database ``schema`` and its table ``k (id INT PRIMARY KEY, v VARCHAR(8))`` holding ids 0..rows-1
    (value ``v<id>``): the snapshot tests' table of keys to cut into chunks."""
    cur.execute(f"CREATE DATABASE {schema}")
    cur.execute(f"CREATE TABLE {schema}.k (id INT PRIMARY KEY, v VARCHAR(8))")
    cur.executemany(f"INSERT INTO {schema}.k VALUES (%s, %s)", [(i, f"v{i}") for i in range(rows)])


def run_workload(conn: Any, schema: str = SCHEMA) -> None:
    """Run `STEPS` on a PyMySQL connection (autocommit on), with ``cf`` replaced by ``schema``."""
    with conn.cursor() as cur:
        for step in STEPS:
            statements = [step] if isinstance(step, str) else step
            if not isinstance(step, str):
                cur.execute("BEGIN")
            for sql in statements:
                cur.execute(sql.replace(f"{SCHEMA}.", f"`{schema}`."))
            if not isinstance(step, str):
                cur.execute("COMMIT")


def compare(events: list[Any], expected: list[Expected] = EXPECTED) -> None:
    """Assert the captured row and table DDL events match ``expected`` in order (values by column name)."""
    got = [e for e in events if e.kind == "row" or (e.kind == "ddl" and e.table)]  # no schema-level DDL
    summary = [(e.kind, getattr(e, "op", ""), e.table) for e in got]
    assert len(got) == len(expected), f"{len(got)} events for {len(expected)} expected: {summary}"
    for i, (ev, (kind, table, new, old)) in enumerate(zip(got, expected, strict=True)):
        assert ev.table == table, (i, ev.table, table)
        if kind == "ddl":
            assert ev.kind == "ddl", (i, summary[i])
            continue
        assert ev.kind == "row" and ev.op.value == kind, (i, summary[i], kind)
        for image, want in ((ev.as_dict(), new), (ev.as_dict(old=True), old)):
            if want is not None:
                diff = {
                    k: (image.get(k), want.get(k)) for k in image.keys() | want.keys() if image.get(k) != want.get(k)
                }
                assert not diff, f"event {i} ({kind} {table}): column -> (got, want): {diff}"


def master_position(server: MariaDBServer) -> BinlogPosition:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return BinlogPosition(str(file), int(pos))
