"""Runs of inserts applied as LOAD DATA LOCAL INFILE: the same rows, values and errors as INSERT.

Each MariaDB test applies one stream twice, to two servers: with ``load_data="auto"`` (LOAD DATA
for every run of block inserts, ``load_data_min_rows=1``) and with ``load_data="off"`` (the
INSERT path), then reads both back independently of the sink: as model values (`read_model`) and
as the server's own text of every column (`_server_text`), so a value the server stores
differently (a float's sign, a YEAR, an ENUM) shows.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import tempfile
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.clients import mysql as mysql_client
from changefeed.clients.mysql import (
    LocalFileRefusedError,
    check_local_request,
    load_local_infile,
    parse_mysql_url,
)
from changefeed.errors import ConfigError, SinkError
from changefeed.model import Column, Index, Op, Resolved, TableSchema, TypeCode
from changefeed.model.gofloat import to_float32
from changefeed.model.rowblock import RowBlock, Segment, expand_blocks
from changefeed.sink.mysql import MySQLSink, MySQLSinkConfig
from changefeed.sink.mysql import sink as sink_module
from changefeed.sink.mysql.columns import Gather, load_fields
from changefeed.sink.mysql.sink import DEFAULT_SQL_MODE
from changefeed.sink.mysql.sql import TableSQL, make_literal, quote_ident, quote_table
from changefeed.testing import MariaDBServer

from ...strategies import text_values
from .helpers import KV_DDL, execute, fetch, kv_table, read_model
from .test_blocks import _all_types_blocks, _same_tables, _setup, table_rows
from .test_types import SPECS, all_types_table

SinkFactory = Callable[..., MySQLSink]
LOAD = {"load_data": "auto", "load_data_min_rows": 1}
INSERT = {"load_data": "off"}
POS = {"topic": "cdc", "partition": 0}
# kv with its primary key only: in normal mode a second unique key keeps inserts on the row path.
PK_DDL = KV_DDL.replace(", UNIQUE KEY uk (u)", "")


def _server_text(server: MariaDBServer, table: TableSchema) -> list[tuple[Any, ...]]:
    """Every column as the server prints it (hex of its bytes), ordered by id."""
    exprs = ",".join(f"HEX(CAST({quote_ident(c.name)} AS BINARY))" for c in table.columns)
    with server.connect() as conn:
        with conn.cursor() as cur:
            cur.execute("SET time_zone='+00:00'")
        return fetch(conn, f"SELECT {exprs} FROM {quote_table(table.schema, table.table)} ORDER BY id")


def _same(a: MariaDBServer, b: MariaDBServer, table: TableSchema) -> None:
    got, want = read_model(a, table), read_model(b, table)
    assert got == want and got
    assert _server_text(a, table) == _server_text(b, table)


def _block(table: TableSchema, images: list[tuple[Any, ...]], ts: int, offset: int = 1) -> RowBlock:
    rows = table_rows(table, [(Op.INSERT, im, None) for im in images])
    return RowBlock([rows], [Segment(0, len(images), ts, {**POS, "offset": offset}, None)])


def _apply_both(
    make_sink: SinkFactory, load: MariaDBServer, insert: MariaDBServer, events: list[Any], **options: Any
) -> tuple[MySQLSink, MySQLSink]:
    options.setdefault("safe_mode_duration", 0)
    with make_sink(load, **LOAD, **options) as loaded:
        loaded.write(events)
    with make_sink(insert, **INSERT, **options) as inserted:
        inserted.write(events)
    return loaded, inserted


# ------------------------------------------------------------------------------------------- pure


def test_the_guard_sends_only_the_offered_file() -> None:
    ours = b"/tmp/changefeed-load-x/rows.tsv"
    check_local_request(ours, ours)
    for offered, asked in ((None, b"/etc/passwd"), (ours, b"/etc/passwd"), (ours, ours + b"x"), (None, ours)):
        with pytest.raises(LocalFileRefusedError) as exc:
            check_local_request(offered, asked)
        assert exc.value.args[0] == 2068 and "does not offer" in exc.value.args[1]


def test_fields_escape_what_load_data_reads_and_refuse_what_it_cannot_store() -> None:
    text = Column("t", TypeCode.VARCHAR, charset="utf8mb4")
    fields = load_fields(text, pa.array(["a\tb\nc\\d\0e", None, "\\N", ""]))
    assert fields is not None and fields[0].to_pylist() == ["a\\tb\\nc\\\\d\\0e", "\\N", "\\\\N", ""]
    assert load_fields(Column("d", TypeCode.DOUBLE), pa.array([1.0, float("nan")])) is None
    enum = Column("e", TypeCode.ENUM, elements=("a", "b"))
    assert load_fields(enum, pa.array([1, 2], pa.uint64())) is not None
    assert load_fields(enum, pa.array([0], pa.uint64())) is None  # '' in the INSERT: stored with a warning
    assert load_fields(enum, pa.array([3], pa.uint64())) is None
    assert load_fields(Column("v", TypeCode.VECTOR), pa.array(["[1]"])) is None
    binary = load_fields(Column("b", TypeCode.BLOB), pa.array([b"\x00\xff", None, b""]))
    assert binary is not None and binary[0].to_pylist() == ["00ff", "\\N", ""] and binary[1] == "unhex"


def test_statement_quotes_names_and_path_in_both_string_modes() -> None:
    table = TableSchema("d`b", "t'x", (Column("i`d", TypeCode.INT), Column("b", TypeCode.BIT, length=8)), ())
    tsql = TableSQL(table)
    rows = Gather.of([table_rows(table, [(Op.INSERT, (1, 5), None)])])
    for literal in (make_literal(False), make_literal(True)):
        made = tsql.load_data(rows, tsql.writable, True, literal, "/tmp/a'b/rows.tsv")
        assert made is not None
        sql, file = made
        assert sql.startswith(f"LOAD DATA LOCAL INFILE {literal.text('/tmp/a' + chr(39) + 'b/rows.tsv')} REPLACE ")
        assert "INTO TABLE `d``b`.`t'x`" in sql and "(`i``d`,@cf1) SET `b`=CAST(@cf1 AS UNSIGNED)" in sql
        assert bytes(file.data) == b"1\t5\n"


def test_uri_parameter() -> None:
    _, config = MySQLSinkConfig.from_uri("mysql://root@h:3306/?load-data=off", "cf")
    assert config.load_data == "off"
    _, config = MySQLSinkConfig.from_uri("mysql://root@h:3306/", "cf")
    assert config.load_data == "auto"
    with pytest.raises(ConfigError, match="load-data must be one of auto, off"):
        MySQLSinkConfig.from_uri("mysql://root@h:3306/?load-data=yes", "cf")


# ------------------------------------------------------------------------------------- on MariaDB


def _every_type_blocks(db: str, seed: int, nblocks: int, shift: bool = False) -> list[RowBlock]:
    """all_types inserts whose every value has a LOAD DATA field (ENUM index 0 is INSERT-only).

    ``shift``: TIMESTAMP values in range in any zone (the edges of the range are UTC instants:
    in another zone INSERT stores 0 with a warning, which LOAD DATA refuses)."""
    table = all_types_table(db)
    rng = random.Random(seed)
    blocks, key, ts = [], 0, 100
    for b in range(nblocks):
        images = []
        for _ in range(rng.randint(1, 9)):
            key += 1
            values = [rng.choice([s[2], s[3], s[4], None]) for s in SPECS]
            enum = [s[1].type_code is TypeCode.ENUM for s in SPECS]
            values = [2 if e and v == 0 else v for e, v in zip(enum, values, strict=True)]
            if shift:
                values = [
                    "2001-02-03 04:05:06.789" if s[1].type_code is TypeCode.TIMESTAMP and v else v
                    for s, v in zip(SPECS, values, strict=True)
                ]
            images.append((key, *values))
        ts += 1
        blocks.append(_block(table, images, ts, b))
    return blocks


@pytest.mark.parametrize(
    ("safe", "zone", "sql_mode"),
    [(True, "UTC", DEFAULT_SQL_MODE), (False, "UTC", DEFAULT_SQL_MODE), (False, "+05:30", DEFAULT_SQL_MODE),
     (True, "UTC", DEFAULT_SQL_MODE + ",NO_BACKSLASH_ESCAPES")],
)  # fmt: skip
def test_every_type_loads_as_it_inserts(
    mariadb: MariaDBServer,
    mariadb_downstream: MariaDBServer,
    db: str,
    make_sink: SinkFactory,
    safe: bool,
    zone: str,
    sql_mode: str,
) -> None:
    """TIMESTAMP text is read in the session time zone by both paths (``zone``: the changefeed's);
    the statement and the file read the same with NO_BACKSLASH_ESCAPES (hex separators)."""
    _setup((mariadb, mariadb_downstream), db)
    blocks = _every_type_blocks(db, int(safe), 12, shift=zone != "UTC")
    events: list[Any] = [*blocks, Resolved(blocks[-1].commit_ts)]
    loaded, inserted = _apply_both(
        make_sink,
        mariadb_downstream,
        mariadb,
        events,
        safe_mode=safe,
        batch_rows=20,
        time_zone=zone,
        sql_mode=sql_mode,
    )
    total = sum(b.num_rows for b in blocks)
    assert loaded.stats["load_data_rows"] == total and inserted.stats["load_data_rows"] == 0
    assert loaded.checkpoint == inserted.checkpoint
    _same(mariadb_downstream, mariadb, all_types_table(db))


@pytest.mark.parametrize("safe", [True, False])
def test_row_changes_load_as_they_insert(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory, safe: bool
) -> None:
    """The row path's runs of inserts (snapshot rows, row decoders) load from their images."""
    _setup((mariadb, mariadb_downstream), db)
    blocks = _every_type_blocks(db, 3 + int(safe), 12)
    events: list[Any] = list(expand_blocks([*blocks, Resolved(blocks[-1].commit_ts)]))
    loaded, inserted = _apply_both(make_sink, mariadb_downstream, mariadb, events, safe_mode=safe, batch_rows=20)
    assert loaded.stats["load_data_rows"] == sum(b.num_rows for b in blocks)
    assert loaded.stats["columnar_rows"] == 0 and inserted.stats["load_data_rows"] == 0
    _same(mariadb_downstream, mariadb, all_types_table(db))


def test_images_that_do_not_convert_exactly_take_the_insert_path() -> None:
    latin = Column("t", TypeCode.VARCHAR, charset="latin1")
    table = TableSchema("d", "t", (Column("id", TypeCode.INT), latin, Column("n", TypeCode.TINYINT)), ())
    tsql = TableSQL(table)
    literal = make_literal()
    assert tsql.load_data([(1, "é", 1)], tsql.writable, False, literal, "/p") is not None
    assert tsql.load_data([(1, "é".encode(), 1)], tsql.writable, False, literal, "/p") is None  # X'..' unconverted
    assert tsql.load_data([(1, "a", 300)], tsql.writable, False, literal, "/p") is None  # no int8
    assert tsql.load_data([(1, "a", 300)], (0, 1), False, literal, "/p") is not None  # n not written


def test_runs_without_a_load_data_field_take_the_insert_path(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """test_blocks' stream (ENUM index 0 included, kv interleaved): some runs load, the rest insert."""
    _setup((mariadb, mariadb_downstream), db)
    blocks = _all_types_blocks(random.Random(7), db, 12)
    events: list[Any] = [*blocks, Resolved(blocks[-1].commit_ts)]
    loaded, _ = _apply_both(make_sink, mariadb_downstream, mariadb, events, safe_mode=True, batch_rows=7)
    assert 0 < loaded.stats["load_data_rows"] < loaded.stats["rows"]
    _same_tables(mariadb, mariadb_downstream, db, all_types_table(db), kv_table(db))


# Values each column type of a small table may hold: texts and bytes of every kind, floats at the edges.
_SMALL = TableSchema(
    "x",
    "small",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("t", TypeCode.VARCHAR, length=200, charset="utf8mb4", collation="utf8mb4_bin"),
        Column("b", TypeCode.BLOB),
        Column("d", TypeCode.DOUBLE),
        Column("f", TypeCode.FLOAT),
        Column("dm", TypeCode.DECIMAL, length=30, decimal=6),
        Column("y", TypeCode.YEAR),
        Column("j", TypeCode.JSON),
    ),
    (Index("PRIMARY", ("id",), primary=True),),
)
_SMALL_DDL = (
    "CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, t VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, "
    "b BLOB, d DOUBLE, f FLOAT, dm DECIMAL(30,6), y YEAR, j JSON)"
)
_TABLES = itertools.count()
_finite = st.floats(allow_nan=False, allow_infinity=False)
_small_rows = st.lists(
    st.tuples(
        st.none() | text_values.filter(lambda s: len(s) <= 200),
        st.none() | st.binary(max_size=40) | st.just(bytes(range(256))),
        st.none() | _finite | st.sampled_from([-0.0, 5e-324, 1e16, 0.1]),
        st.none() | st.floats(width=32, allow_nan=False, allow_infinity=False).map(to_float32),
        st.none() | st.decimals(min_value=-(10**23) + 1, max_value=10**23 - 1, places=6, allow_nan=False),
        st.none() | st.sampled_from([0, 1901, 2000, 2155]),
        st.none() | st.sampled_from(["[]", '{"a": "\\t\\\\n"}', '"\\u00e9"', "null", "1.5"]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=_small_rows)
def test_values_load_as_they_insert(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory, rows: list[Any]
) -> None:
    table = TableSchema(db, f"small_{next(_TABLES)}", _SMALL.columns, _SMALL.indexes)
    for server in (mariadb, mariadb_downstream):
        execute(server, _SMALL_DDL.format(name=quote_table(db, table.table)))
    images = [(k, *r) for k, r in enumerate(rows)]
    images = [tuple(Decimal(v) if isinstance(v, Decimal) else v for v in im) for im in images]
    events = [_block(table, images, 10), Resolved(10)]
    loaded, _ = _apply_both(make_sink, mariadb_downstream, mariadb, events, changefeed_id=table.table, safe_mode=True)
    assert loaded.stats["load_data_rows"] == len(rows)
    _same(mariadb_downstream, mariadb, table)


def _kv_images(keys: range) -> list[tuple[Any, ...]]:
    return [(k, None, k, f"s{k}\t\\") for k in keys]


def test_duplicate_key_fails_as_the_insert_does_and_rolls_back(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    errors = []
    for server, options in ((mariadb_downstream, LOAD), (mariadb, INSERT)):
        execute(server, PK_DDL.format(name=quote_table(db, "kv")), f"INSERT INTO {quote_table(db, 'kv')} VALUES "
                "(5, NULL, 0, 'before')")  # fmt: skip
        kv = TableSchema(db, "kv", kv_table(db).columns, kv_table(db).indexes[:1])
        events = [_block(kv, _kv_images(range(10)), 50), Resolved(50)]
        sink = make_sink(server, safe_mode_duration=0, **options)
        with pytest.raises(SinkError) as exc:
            sink.write(events)
            sink.flush()
        errors.append(exc.value)
        assert sink.stats["rows"] == 0
        with make_sink(server) as again:
            assert again.load_checkpoint() is None  # the checkpoint did not advance
        assert read_model(server, kv_table(db)) == [(5, None, 0, "before")]  # rolled back
    loaded, inserted = (e.__cause__ for e in errors)
    assert loaded is not None and inserted is not None
    assert loaded.args == inserted.args and loaded.args[0] == 1062 and type(loaded) is type(inserted)
    assert "LOAD DATA LOCAL INFILE" in str(errors[0]) and "INSERT INTO" in str(errors[1])


def test_safe_mode_replaces(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    kv = TableSchema(db, "kv", kv_table(db).columns, kv_table(db).indexes[:1])
    for server in (mariadb, mariadb_downstream):
        execute(server, KV_DDL.format(name=quote_table(db, "kv")), f"INSERT INTO {quote_table(db, 'kv')} VALUES "
                "(1, 'u1', 0, 'old'), (3, NULL, 0, 'old'), (100, NULL, 0, 'kept')")  # fmt: skip
    events = [_block(kv, _kv_images(range(8)), 50), Resolved(50)]
    loaded, _ = _apply_both(make_sink, mariadb_downstream, mariadb, events, safe_mode=True)
    assert loaded.stats["load_data_rows"] == 8
    _same(mariadb_downstream, mariadb, kv_table(db))
    assert len(read_model(mariadb_downstream, kv_table(db))) == 9


def test_a_value_the_server_adjusts_is_an_error(
    mariadb: MariaDBServer, mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """A downstream column narrower than the values: INSERT stores them cut (non-strict sql_mode)
    with a warning; LOAD DATA refuses the warning, the transaction rolls back."""
    kv = TableSchema(db, "kv", kv_table(db).columns, kv_table(db).indexes[:1])
    ddl = PK_DDL.replace("s VARCHAR(64)", "s VARCHAR(2)").format(name=quote_table(db, "kv"))
    execute(mariadb_downstream, ddl)
    sink = make_sink(mariadb_downstream, safe_mode_duration=0, **LOAD)
    with pytest.raises(SinkError, match=r"1265.*Data truncated for column 's'"):
        sink.write([_block(kv, _kv_images(range(4)), 50), Resolved(50)])
        sink.flush()
    assert read_model(mariadb_downstream, kv_table(db)) == []


def test_a_request_for_another_file_is_refused(mariadb_downstream: MariaDBServer, db: str, tmp_path: Any) -> None:
    execute(mariadb_downstream, KV_DDL.format(name=quote_table(db, "kv")))
    ours = tmp_path / "rows.tsv"
    ours.write_bytes(b"1\t\\N\t1\tours\n")
    secret = tmp_path / "secret.tsv"
    secret.write_bytes(b"2\t\\N\t2\tsecret\n")
    os.chmod(tmp_path, 0o700)
    name = quote_table(db, "kv")
    conn = parse_mysql_url(mariadb_downstream.url).connect(local_infile=True, autocommit=True)
    try:
        # The statement names another file than the one offered: the request is refused.
        with pytest.raises(LocalFileRefusedError):
            load_local_infile(conn, f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE {name}", str(ours))
        # Nothing offered at all (a plain statement): refused too; the connection stays usable.
        with pytest.raises(LocalFileRefusedError), conn.cursor() as cur:
            cur.execute(f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE {name}")
        result = load_local_infile(conn, f"LOAD DATA LOCAL INFILE '{ours}' INTO TABLE {name}", str(ours))
        assert (result.records, result.skipped, result.warnings) == (1, 0, 0)
    finally:
        conn.close()
    with mariadb_downstream.connect() as check:
        assert fetch(check, f"SELECT id, s FROM {name}") == [(1, "ours")]


@pytest.mark.parametrize("workers", [1, 2])
def test_no_local_infile_on_the_server_falls_back_to_insert(
    mariadb_factory: Callable[..., MariaDBServer],
    make_sink: SinkFactory,
    db: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
) -> None:
    server = mariadb_factory(name="no-local-infile")
    execute(server, f"CREATE DATABASE `{db}`", PK_DDL.format(name=quote_table(db, "kv")), "SET GLOBAL local_infile=0")
    kv = TableSchema(db, "kv", kv_table(db).columns, kv_table(db).indexes[:1])
    rendered: list[int] = []
    real = TableSQL.load_data
    monkeypatch.setattr(TableSQL, "load_data", lambda self, *a: rendered.append(1) or real(self, *a))
    with (
        caplog.at_level(logging.INFO, "changefeed.sink.mysql.sink"),
        make_sink(server, workers=workers, **LOAD) as sink,
    ):
        sink.write([_block(kv, _kv_images(range(5)), 50), Resolved(50)])
        sink.flush()
        first = len(rendered)
        sink.write([_block(kv, _kv_images(range(5, 10)), 60), Resolved(60)])
    assert sink.stats["load_data_rows"] == 0 and sink.stats["rows"] == 10
    assert len(read_model(server, kv_table(db))) == 10
    assert first <= 1 and len(rendered) == first  # once the session knows, no LOAD DATA is rendered for nothing
    told = [r for r in caplog.records if "local_infile=0" in r.getMessage()]
    assert len(told) == 1, caplog.text


def test_the_rows_are_sent_from_memory_and_never_touch_the_disk(
    mariadb_downstream: MariaDBServer,
    db: str,
    make_sink: SinkFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    kv = TableSchema(db, "kv", kv_table(db).columns, kv_table(db).indexes[:1])
    execute(mariadb_downstream, PK_DDL.format(name=quote_table(db, "kv")))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    seen: list[tuple[str, bytes]] = []
    real = sink_module.load_local_infile

    def spy(conn: Any, sql: str, path: str, data: Any = None) -> Any:
        seen.append((path, bytes(data)))
        return real(conn, sql, path, data)

    monkeypatch.setattr(sink_module, "load_local_infile", spy)
    with make_sink(mariadb_downstream, **LOAD) as sink:
        sink.write([_block(kv, _kv_images(range(5)), 50), Resolved(50)])
        sink.flush()
    assert [(path, data.count(b"\n")) for path, data in seen] == [("changefeed-rows.tsv", 5)]
    assert list(tmp_path.iterdir()) == []  # no file, no directory: not in TMPDIR, not in the working directory
    assert len(read_model(mariadb_downstream, kv_table(db))) == 5


@pytest.mark.parametrize("size", [0, 1, 16 * 1024 - 1, 16 * 1024, 16 * 1024 + 1, 3 * 16 * 1024 + 7])
def test_local_data_goes_as_the_protocols_packets_in_one_write(size: int) -> None:
    """MySQL's LOCAL INFILE transfer: packets of at most 16 KB (3-byte length, sequence id), then an
    empty one; the sequence ids go on from the connection's and wrap at 256."""
    data = bytes(random.Random(size).randrange(256) for _ in range(size))

    class Conn:
        def __init__(self) -> None:
            self.max_allowed_packet = 16 << 20
            self._next_seq_id = 250
            self.writes: list[bytes] = []

        def _write_bytes(self, out: bytes) -> None:
            self.writes.append(out)

    conn = Conn()
    mysql_client._send_local_data(conn, memoryview(data))
    assert len(conn.writes) == 1
    wire, payloads, seq = conn.writes[0], [], 250
    while wire:
        length, got = int.from_bytes(wire[:3], "little"), wire[3]
        assert got == seq and length <= 16 * 1024
        payloads.append(wire[4 : 4 + length])
        wire, seq = wire[4 + length :], (seq + 1) % 256
    assert payloads[-1] == b"" and all(payloads[:-1]) and b"".join(payloads) == data
    assert conn._next_seq_id == seq


def test_a_local_request_from_memory_sends_those_bytes(mariadb_downstream: MariaDBServer, db: str) -> None:
    execute(mariadb_downstream, KV_DDL.format(name=quote_table(db, "kv")))
    name = quote_table(db, "kv")
    rows = b"".join(b"%d\t\\N\t%d\tfrom memory %d\n" % (i, i, i) for i in range(3000))  # ~80 KB: 5 packets
    conn = parse_mysql_url(mariadb_downstream.url).connect(local_infile=True, autocommit=True)
    try:
        result = load_local_infile(conn, f"LOAD DATA LOCAL INFILE 'virtual.tsv' INTO TABLE {name}", "virtual.tsv", rows)
        assert (result.records, result.skipped, result.warnings) == (3000, 0, 0)
        # Rows already there: the server's reply (skipped with warnings, LOCAL's rule) is read as sent.
        again = load_local_infile(conn, f"LOAD DATA LOCAL INFILE 'v.tsv' INTO TABLE {name}", "v.tsv", rows[:200])
        assert (again.records, again.skipped, again.warnings) == (again.records, again.records, again.records)
        assert again.records > 0
        with conn.cursor() as cur:  # the connection is still in step
            cur.execute(f"SELECT COUNT(*), MAX(s) FROM {name}")
            assert cur.fetchone() == (3000, "from memory 999")
    finally:
        conn.close()


def test_a_crash_before_commit_leaves_nothing_and_the_restart_applies_once(
    mariadb_downstream: MariaDBServer, db: str, make_sink: SinkFactory
) -> None:
    """The LOAD DATA is part of the batch's transaction: a crash after it, before COMMIT, rolls it
    back with the checkpoint row; the restart (safe mode: REPLACE) applies the rows once."""
    kv = TableSchema(db, "kv", kv_table(db).columns, kv_table(db).indexes[:1])
    execute(mariadb_downstream, PK_DDL.format(name=quote_table(db, "kv")))
    events = [_block(kv, _kv_images(range(100)), 50), Resolved(50)]

    def crash(point: str, info: Any) -> None:
        if point == "commit":
            raise KeyboardInterrupt("killed before COMMIT")

    sink = make_sink(mariadb_downstream, fault_hook=crash, **LOAD)
    with pytest.raises(KeyboardInterrupt):
        sink.write(events)
        sink.flush()
    assert sink.stats["load_data_rows"] == 0
    sink.close()
    assert read_model(mariadb_downstream, kv_table(db)) == []
    with make_sink(mariadb_downstream, **LOAD) as again:
        assert again.load_checkpoint() is None
        again.write(events)
    assert again.stats["load_data_rows"] == 100 and again.checkpoint is not None
    assert read_model(mariadb_downstream, kv_table(db)) == [(k, None, k, f"s{k}\t\\") for k in range(100)]
