"""Chunks read as lines (`capture.snapshot.columns`) give the row path's values and the same spilled
bytes, on a real MariaDB, for every type the lines render; and bad lines are errors, not rows."""

from __future__ import annotations

import base64
from datetime import UTC
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

from changefeed.capture.binlog.replica import ServerAddress
from changefeed.capture.snapshot.columns import ChunkColumns, line_sql, parse_joined, parse_lines
from changefeed.capture.snapshot.progress import ReadChunk, events_of_chunk
from changefeed.capture.snapshot.reader import SnapshotReader, replica_window
from changefeed.errors import CaptureError
from changefeed.model import RowChange
from changefeed.model.arrow import images_to_batch
from changefeed.model.schema import Column, TableSchema
from changefeed.model.tso import CommitClock
from changefeed.model.types import TypeCode
from changefeed.spark.changelog import ChangelogRows, changelog_schema, image_struct
from changefeed.testing import MariaDBServer

from .workload import ALL_BYTES, LONG_TEXT, STEPS, run_workload

_LINE_TABLES = ("ints", "nums", "times", "text", "zf", "one")
TRICKY = ["", "N", "a,b", "line\nbreak", "cr\rlf\r\n", "tab\there", '"quoted"', "back\\slash", "\x00nul", "😀🎉", "N,N"]

_TABLES = [
    # Text and binary values a line must carry whatever they hold (no GEOMETRY: read by the row path).
    "CREATE TABLE cf.text (id INT PRIMARY KEY, c CHAR(5), vc VARCHAR(300), l1 VARCHAR(10) CHARACTER SET latin1,"
    " t TEXT, lt LONGTEXT, bin BINARY(4), vb VARBINARY(300), b BLOB, e ENUM('a','b','c'), s SET('x','y','z'),"
    " j JSON, emoji VARCHAR(10)) DEFAULT CHARSET=utf8mb4",
    # ZEROFILL: the server's text has leading zeros the row path's values do not.
    "CREATE TABLE cf.zf (id INT(6) ZEROFILL PRIMARY KEY, d DECIMAL(8,2) ZEROFILL, f FLOAT ZEROFILL, u INT ZEROFILL)",
    "INSERT INTO cf.zf VALUES (1, 12.5, 1.25, 7), (2, 0, 0, 0), (3, NULL, NULL, NULL)",
    # One text column: a line of an empty string is an empty line.
    "CREATE TABLE cf.one (v VARCHAR(10))",
    "INSERT INTO cf.one VALUES ('x'), (''), (NULL), ('')",
]


def _fill(cur: Any, schema: str) -> None:
    rows: list[tuple[Any, ...]] = [
        (
            1,
            "ab  ",
            LONG_TEXT,
            "café",
            "text",
            "long",
            b"ab",
            ALL_BYTES,
            b"\x00\xff",
            "c",
            "x,z",
            '{"k": [1, 2]}',
            "😀",
        ),
        (2, "", "", "", "", "", b"\x00\x00\x00\x00", b"", b"", "a", "", "null", ""),
        (3, *([None] * 12)),
    ]
    for i, text in enumerate(TRICKY):
        rows.append(
            (
                10 + i,
                text[:5],
                text,
                None,
                text,
                text * 3,
                None,
                text.encode(),
                b"N" + text.encode(),
                "b",
                "y",
                None,
                text[:10],
            )
        )
    placeholders = ", ".join(["%s"] * 13)
    cur.executemany(f"INSERT INTO `{schema}`.text VALUES ({placeholders})", rows)


@pytest.fixture
def tables(mariadb: MariaDBServer, fresh_db: str) -> str:
    first_list = next(i for i, s in enumerate(STEPS) if not isinstance(s, str))
    original = STEPS[:]
    try:
        STEPS[:] = [*original[:first_list], *_TABLES]
        with mariadb.connect() as conn:
            run_workload(conn, fresh_db)
            with conn.cursor() as cur:
                _fill(cur, fresh_db)
    finally:
        STEPS[:] = original
    return fresh_db


def _reader(server: MariaDBServer, lines: bool, chunk_size: int = 4) -> SnapshotReader:
    return SnapshotReader(
        server.connect, replica_window(ServerAddress.from_url(server.url)), chunk_size=chunk_size, lines=lines
    )


def _chunks(reader: SnapshotReader, schema: str, table: str) -> tuple[list[Any], list[bytes]]:
    plan = reader.plan(schema, table)
    rows, spilled = [], []
    for i in range(len(plan.ranges)):
        result = reader.read_chunk(plan, i)
        result.commit_ts = 1 << 40  # the moment of the read: pinned, so both readers spill the same bytes
        rows += result.rows if i % 2 else list(result.rows)
        spilled.append(events_of_chunk(reader, plan, result, CommitClock(), i == 0).jsonl)
    return rows, spilled


@pytest.mark.mariadb
def test_lines_give_the_row_paths_values_and_bytes(mariadb: MariaDBServer, tables: str) -> None:
    lines, rows = _reader(mariadb, True), _reader(mariadb, False)
    for table in _LINE_TABLES:
        plan = lines.plan(tables, table)
        assert line_sql(plan.schema) is not None, table
        got_rows, got_bytes = _chunks(lines, tables, table)
        want_rows, want_bytes = _chunks(rows, tables, table)
        assert got_rows == want_rows, table
        assert list(map(repr, got_rows)) == list(map(repr, want_rows)), table  # the types too
        assert got_bytes == want_bytes, table
    assert len(_chunks(lines, tables, "text")[0]) == 3 + len(TRICKY)


def _line_chunks(reader: SnapshotReader, schema: str, table: str) -> list[ReadChunk]:
    plan = reader.plan(schema, table)
    out = []
    for i in range(len(plan.ranges)):
        chunk = events_of_chunk(reader, plan, reader.read_chunk(plan, i), CommitClock(), i == 0)
        assert isinstance(chunk.selected, ChunkColumns), (table, i)
        out.append(chunk)
    return out


@pytest.mark.mariadb
def test_columns_give_the_model_arrow_columns_of_their_rows(mariadb: MariaDBServer, tables: str) -> None:
    reader = _reader(mariadb, True)
    for table in _LINE_TABLES:
        for chunk in _line_chunks(reader, tables, table):
            assert isinstance(chunk.selected, ChunkColumns)
            got = pa.RecordBatch.from_arrays(
                chunk.selected.model_arrays(), names=[c.name for c in chunk.schema.columns]
            )
            want = images_to_batch(chunk.schema, chunk.selected.rows())
            assert got.schema == want.schema, table
            assert got.to_pylist() == want.to_pylist(), table
            assert got.equals(want), table


@pytest.mark.mariadb
@pytest.mark.parametrize("typed", [False, True], ids=["json", "typed"])
def test_a_chunks_spark_batches_are_what_pyspark_makes_of_its_tuples(
    mariadb: MariaDBServer, tables: str, typed: bool
) -> None:
    """The Spark batch read hands PySpark the record batch PySpark itself builds from the chunk's
    changelog tuples (`records_to_arrow_batches`, its converter), typed or JSON images."""
    reader = _reader(mariadb, True)
    for table in _LINE_TABLES:
        chunks = _line_chunks(reader, tables, table)
        schema = chunks[0].schema
        changelog = ChangelogRows(table=(tables, table), typed=schema) if typed else ChangelogRows()
        spark_schema = changelog_schema(image_struct(schema) if typed else None)
        for chunk in chunks:
            assert isinstance(chunk.selected, ChunkColumns)
            got = changelog.inserts_batch(chunk.schema, chunk.commit_ts, chunk.selected.model_arrays())
            inserts = [ev for ev in chunk.events if isinstance(ev, RowChange)]
            tuples = [changelog.row(ev) for ev in inserts]
            want = list(records_to_arrow_batches(iter(tuples), len(tuples) + 1, spark_schema, None))  # type: ignore[arg-type]
            assert got is not None and len(want) == 1, table
            assert got.schema == want[0].schema, table
            assert got.to_pylist() == want[0].to_pylist(), table
            assert got.equals(want[0]), table
            assert changelog.batch(tuples).equals(want[0]), table
    assert ChangelogRows(rules=["other.*"]).inserts_batch(schema, 1, chunks[0].selected.model_arrays()) is None


@pytest.mark.mariadb
def test_a_line_longer_than_max_allowed_packet_reads_by_rows(mariadb: MariaDBServer, fresh_db: str) -> None:
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.w (id INT PRIMARY KEY, v TEXT)")
        cur.execute(f"INSERT INTO `{fresh_db}`.w VALUES (1, 'short'), (2, REPEAT('w', 3000)), (3, NULL)")
        cur.execute("SELECT @@GLOBAL.max_allowed_packet")
        row = cur.fetchone()
        assert row is not None
        before = row[0]
        cur.execute("SET GLOBAL max_allowed_packet = 4096")  # the hex of the 3000-byte text is 6000 bytes
    try:
        got = _chunks(_reader(mariadb, True, 10), fresh_db, "w")
        want = _chunks(_reader(mariadb, False, 10), fresh_db, "w")
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL max_allowed_packet = {int(before)}")
    assert got == want
    assert [r[0] for r in got[0]] == [1, 2, 3] and got[0][1][1] == "w" * 3000


@pytest.mark.mariadb
def test_a_chunk_too_long_as_one_value_reads_line_by_line(mariadb: MariaDBServer, fresh_db: str) -> None:
    """Each chunk is read as one joined value while it fits the packet; a table whose chunk does not
    is read line by line (the same rows), and so are its later chunks, without trying again."""
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{fresh_db}`.w (id INT PRIMARY KEY, v VARCHAR(200))")
        cur.executemany(f"INSERT INTO `{fresh_db}`.w VALUES (%s, %s)", [(i, "v" * 150) for i in range(60)])
        cur.execute("SELECT @@GLOBAL.max_allowed_packet")
        row = cur.fetchone()
        assert row is not None
        before = row[0]
        cur.execute("SET GLOBAL max_allowed_packet = 4096")  # a 20-row chunk joins to ~6 KB; a line is ~305 bytes
    try:
        reader = _reader(mariadb, True, 20)
        plan = reader.plan(fresh_db, "w")
        statements: list[str] = []
        connect = reader.connect

        def counting() -> Any:
            conn = connect()
            execute = conn.query

            def query(sql: str, *args: Any, **kw: Any) -> Any:
                statements.append(sql if isinstance(sql, str) else sql.decode())
                return execute(sql, *args, **kw)

            conn.query = query
            return conn

        reader.connect = counting  # type: ignore[method-assign]
        results = [reader.read_chunk(plan, i) for i in range(len(plan.ranges))]
        want = _chunks(_reader(mariadb, False, 20), fresh_db, "w")[0]
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL max_allowed_packet = {int(before)}")
    assert all(isinstance(r.selected, ChunkColumns) for r in results)
    assert [row for r in results for row in r.rows] == want and len(want) == 60
    assert not plan.joined
    assert sum("GROUP_CONCAT" in q for q in statements) == 1  # the first chunk only


@pytest.mark.mariadb
def test_small_chunks_are_read_as_one_value(mariadb: MariaDBServer, tables: str) -> None:
    reader = _reader(mariadb, True)
    for table in _LINE_TABLES:
        plan = reader.plan(tables, table)
        for i in range(len(plan.ranges)):
            assert isinstance(reader.read_chunk(plan, i).selected, ChunkColumns)
        assert plan.joined, table


# ----------------------------------------------------------------------------- hostile lines

_TABLE = TableSchema(
    "s",
    "t",
    (
        Column("id", TypeCode.BIGINT),
        Column("v", TypeCode.VARCHAR, charset="utf8mb4", collation="utf8mb4_bin"),
        Column("b", TypeCode.BLOB, charset="binary", collation="binary"),
    ),
)


def _parse(*lines: bytes | None) -> ChunkColumns | None:
    return parse_lines(_TABLE, list(lines), UTC, "chunk 7")


def test_lines_parse_to_values() -> None:
    cols = _parse(b"1,6162,YWI=", b"2,,", b"3,N,N", b"-4,C3A9,")
    assert cols is not None
    assert cols.rows() == [(1, "ab", b"ab"), (2, "", b""), (3, None, None), (-4, "é", b"")]
    assert cols.json_rows() == [(1, "ab", "YWI="), (2, "", ""), (3, None, None), (-4, "é", "")]


def test_a_null_line_means_read_by_rows() -> None:
    assert _parse(b"1,61,", None) is None


@pytest.mark.parametrize(
    ("line", "what"),
    [
        (b"1,6Z,", "not hex"),
        (b"1,616,", "not hex"),
        (b"1,FF,", "not utf8mb4"),
        (b"1,61", "does not parse"),
        (b"1,61,,", "does not parse"),
        (b"x,61,", "does not parse"),
    ],
)
def test_a_bad_line_is_an_error_naming_the_table_and_chunk(line: bytes, what: str) -> None:
    with pytest.raises(CaptureError, match=what) as info:
        _parse(b"1,61,", line)
    assert "s.t" in str(info.value) and "chunk 7" in str(info.value)


@pytest.mark.parametrize(
    ("joined", "count", "what"),
    [
        (b"1,61,\n2,62,", 3, "2 rows"),
        (b"1,61,\n2,62,\n3,63,", 2, "3 rows"),
        (b"1,61,", 0, "no rows"),
        (None, 2, "no snapshot lines"),
        (b"1,61,\n\n", 3, "does not parse"),
    ],
)
def test_joined_lines_that_do_not_match_their_count_are_errors(joined: bytes | None, count: int, what: str) -> None:
    with pytest.raises(CaptureError, match=what) as info:
        parse_joined(_TABLE, joined, count, UTC, "chunk 7")
    assert "s.t" in str(info.value) and "chunk 7" in str(info.value)


def test_joined_lines_parse_as_the_lines_do() -> None:
    lines = [b"1,6162,YWI=", b"2,,", b"3,N,N", b"-4,C3A9,"]
    cols = parse_joined(_TABLE, b"\n".join(lines), 4, UTC, "chunk 7")
    want = _parse(*lines)
    assert want is not None and cols.rows() == want.rows()
    assert parse_joined(_TABLE, None, 0, UTC, "chunk 7").rows() == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.none() | st.text(), st.none() | st.binary())))
def test_lines_round_trip_any_text_and_bytes(rows: list[tuple[int, str | None, bytes | None]]) -> None:
    lines = [
        b",".join(
            [
                str(i).encode(),
                b"N" if v is None else v.encode("utf-8", "surrogatepass").hex().encode(),
                b"N" if b is None else base64.b64encode(b),
            ]
        )
        for i, v, b in rows
    ]
    if any(v is not None and any(0xD800 <= ord(ch) <= 0xDFFF for ch in v) for _, v, _ in rows):
        with pytest.raises(CaptureError):
            parse_lines(_TABLE, lines, UTC, "x")
        return
    cols = parse_lines(_TABLE, lines, UTC, "x")
    assert cols is not None and cols.rows() == rows
