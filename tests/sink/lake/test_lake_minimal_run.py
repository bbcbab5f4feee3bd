"""`changefeed run` from a MariaDB writing MINIMAL row images into ``delta://`` / ``iceberg://`` tables in
mode upsert and scd2 (its open versions).

The writer's session sets ``binlog_row_image=MINIMAL`` (the server's global setting stays FULL, which
the binlog input checks): its UPDATEs log the key and the columns they set, its DELETEs the key. A
seeded random workload (inserts, updates of random column sets, key moves, deletes) runs between
three `changefeed run --available-now` passes; after each, the lake table as DuckDB reads it through
the format's own metadata (tests/sink/lake/independent.py) equals the upstream table as MariaDB's
own client prints it (tests/mariadb_client.py).
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from changefeed.cli import main
from changefeed.sink.lake import common
from changefeed.sink.lake.common import complete_changes, has_presence
from changefeed.testing import MariaDBServer
from tests.mariadb_client import client_rows

from .independent import read_delta_independently, read_iceberg_independently

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(600)]

ITEMS = "id INT PRIMARY KEY, name VARCHAR(20), qty INT NOT NULL, price DECIMAL(8,2), note TEXT, day DATE"
PAIRS = "a VARCHAR(8) NOT NULL, b INT NOT NULL, v INT, w VARCHAR(10), PRIMARY KEY (a, b)"
NAMES = {"items": ["id", "name", "qty", "price", "note", "day"], "pairs": ["a", "b", "v", "w"]}


def _literal(value: Any) -> str:
    return "NULL" if value is None else f"'{value}'" if isinstance(value, str) else str(value)


class Workload:
    """Random changes of the two tables; every statement runs in a MINIMAL-image session."""

    def __init__(self, server: MariaDBServer, schema: str, seed: int) -> None:
        self.server, self.schema, self.rnd = server, schema, random.Random(seed)
        self.items: set[int] = set()
        self.pairs: set[tuple[str, int]] = set()

    def _value(self, column: str) -> Any:
        r = self.rnd
        if r.random() < 0.15 and column != "qty":
            return None
        if column == "name":
            return r.choice(["ant", "bee", "cat", "d\u00f6g", ""]) + str(r.randint(0, 99))
        if column == "price":
            return f"{r.randint(0, 99999) / 100:.2f}"
        if column == "note":
            return "n" * r.randint(0, 40)
        if column == "day":
            return (dt.date(2024, 1, 1) + dt.timedelta(days=r.randint(0, 900))).isoformat()
        if column == "w":
            return r.choice(["x", "y", "zz"])
        return r.randint(-50, 1000)  # qty, v

    def statements(
        self, count: int, kinds: tuple[str, ...] = ("insert", "update", "update", "update", "delete")
    ) -> list[str]:
        out, r, s = [], self.rnd, self.schema
        for _ in range(count):
            table = r.choice(["items", "items", "pairs"])
            live: set[Any] = self.items if table == "items" else self.pairs
            kind = r.choice(kinds) if live else "insert"
            if kind == "insert":
                key = self._new_key(table)
                live.add(key)
                values = (key,) if table == "items" else key
                rest = [self._value(c) for c in NAMES[table][len(values) :]]
                out.append(f"INSERT INTO `{s}`.{table} VALUES ({', '.join(map(_literal, [*values, *rest]))})")
                continue
            key = r.choice(sorted(live))
            where = f"id = {key}" if table == "items" else f"a = '{key[0]}' AND b = {key[1]}"
            if kind == "delete":
                live.discard(key)
                out.append(f"DELETE FROM `{s}`.{table} WHERE {where}")
                continue
            keys = NAMES[table][:1] if table == "items" else NAMES[table][:2]
            others = NAMES[table][len(keys) :]
            chosen = r.sample(others, r.randint(1, len(others)))
            sets = [f"{c} = {_literal(self._value(c))}" for c in chosen]
            if r.random() < 0.15:  # the key moves too
                new = self._new_key(table)
                live.discard(key)
                live.add(new)
                sets += [f"id = {new}"] if table == "items" else [f"a = '{new[0]}'", f"b = {new[1]}"]
            out.append(f"UPDATE `{s}`.{table} SET {', '.join(sets)} WHERE {where}")
        return out

    def _new_key(self, table: str) -> Any:
        while True:
            key: Any = (
                self.rnd.randint(1, 400) if table == "items" else (self.rnd.choice("pqrs"), self.rnd.randint(1, 9))
            )
            if key not in (self.items if table == "items" else self.pairs):
                return key

    def run(self, statements: list[str]) -> None:
        with self.server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
            for i, statement in enumerate(statements):
                cur.execute(statement)
                if i % 7 == 6:  # several statements per transaction, some alone
                    conn.commit()
            conn.commit()


def _text(value: Any) -> str:
    """A lake value as MariaDB's client prints it."""
    if value is None:
        return "NULL"
    if isinstance(value, Decimal | int):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _lake_rows(fmt: str, lake: Path, schema: str, table: str) -> list[list[str]]:
    read = read_delta_independently if fmt == "delta" else read_iceberg_independently
    rows = read(lake / schema / table).to_pylist()
    rows = [r for r in rows if r.get("_cf_valid_to") is None]  # scd2: the open versions
    return sorted([[_text(r[c]) for c in NAMES[table]] for r in rows])


def _upstream(server: MariaDBServer, schema: str, table: str) -> list[list[str]]:
    return sorted(client_rows(server, f"SELECT {', '.join(NAMES[table])} FROM `{schema}`.{table}"))


# Both formats and both modes that fill partial rows, in two runs (each is three `changefeed run`s):
# the fill itself is per format and mode in tests/sink/lake/test_lake_minimal.py.
@pytest.mark.parametrize(("fmt", "mode"), [("delta", "upsert"), ("iceberg", "scd2")])
def test_minimal_images_through_run_equal_the_source(
    spark: object, mariadb: MariaDBServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, mode: str
) -> None:
    schema = f"mi_{uuid.uuid4().hex[:8]}"
    lake = tmp_path / "lake"
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "minimal-{schema}"\nsink-uri = "{fmt}://{lake}?mode={mode}"\n'
        f'[source]\ntype = "mysql"\nurl = "{mariadb.url}"\n[filter]\nrules = ["{schema}.*"]\n'
    )
    argv = ["run", str(config), "--available-now", "--master", "local[2]", "--checkpoint", str(tmp_path / "ck")]
    work = Workload(mariadb, schema, seed=17)
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(f"CREATE TABLE `{schema}`.items ({ITEMS})")
        cur.execute(f"CREATE TABLE `{schema}`.pairs ({PAIRS})")
        conn.commit()
    partial: list[int] = []  # per chunk the sink completed: its updates that lacked columns

    def spy(ts: Any, changes: Any, stored: Any, time_zone: str) -> Any:
        if has_presence(changes):
            ops = changes.column("op").to_numpy()
            whole = np.ones(changes.num_rows, bool)
            for i in range(len(ts.columns)):
                whole &= changes.column(f"p{i}").to_numpy(zero_copy_only=False)
            partial.append(int(((ops == 1) & ~whole).sum()))
        return complete_changes(ts, changes, stored, time_zone)

    monkeypatch.setattr(common, "complete_changes", spy)
    try:
        work.run(work.statements(80, ("insert",)))  # the first run takes these as its snapshot
        for passes in (1, 2, 3):
            assert main(argv) == 0
            for table in ("items", "pairs"):
                upstream = _upstream(mariadb, schema, table)
                assert _lake_rows(fmt, lake, schema, table) == upstream, f"pass {passes}: {table}"
            if passes < 3:
                work.run(work.statements(150))  # through the binlog as MINIMAL images from here on
        assert sum(partial) > 100, partial  # the binlog did carry partial images, and the sink completed them
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")


def test_an_insert_leaving_out_a_column_stops_the_run_naming_it(
    spark: object, mariadb: MariaDBServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The binlog input's table shapes carry no column defaults: an INSERT that leaves a column to its default
    is refused (the value MySQL stored is unknown here), naming the table and the column."""
    schema = f"mi_{uuid.uuid4().hex[:8]}"
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "minimal-{schema}"\nsink-uri = "delta://{tmp_path / "lake"}"\n'
        f'[source]\ntype = "mysql"\nurl = "{mariadb.url}"\n[filter]\nrules = ["{schema}.*"]\n'
    )
    argv = ["run", str(config), "--available-now", "--master", "local[2]", "--checkpoint", str(tmp_path / "ck")]
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(f"CREATE TABLE `{schema}`.d (id INT PRIMARY KEY, a INT, b INT NOT NULL DEFAULT 3)")
        conn.commit()
    try:
        assert main(argv) == 0
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
            cur.execute(f"INSERT INTO `{schema}`.d (id, a) VALUES (1, 10)")
            conn.commit()
        capsys.readouterr()
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert f"'{schema}'.'d': an INSERT leaves out column 'b'" in err, err
    finally:
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")


def test_a_server_writing_minimal_images_runs_into_a_lake_and_is_refused_elsewhere(
    spark: object,
    mariadb_factory: Any,
    mariadb_downstream: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """binlog_row_image=MINIMAL server-wide: the preflight and the binlog input let it through into a lake
    sink (a warning), and refuse it into MySQL naming the setting and the sinks that take such rows."""
    server = mariadb_factory(extra_config={"binlog_row_image": "MINIMAL"})
    schema = "mi_server"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{schema}`")
        cur.execute(f"CREATE TABLE `{schema}`.items ({ITEMS})")
        cur.execute(f"CREATE TABLE `{schema}`.pairs ({PAIRS})")
        conn.commit()
    work = Workload(server, schema, seed=5)
    work.run(work.statements(40, ("insert",)))

    def config(name: str, sink: str) -> str:
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'changefeed-id = "{name}"\nsink-uri = "{sink}"\n'
            f'[source]\ntype = "mysql"\nurl = "{server.url}"\n[filter]\nrules = ["{schema}.*"]\n'
        )
        return str(path)

    lake = tmp_path / "lake"
    argv = ["run", config("to-lake", f"delta://{lake}"), "--available-now", "--master", "local[2]"]
    argv += ["--checkpoint", str(tmp_path / "ck")]
    assert main(argv) == 0, capsys.readouterr().err
    work.run(work.statements(80))
    assert main(argv) == 0, capsys.readouterr().err
    for table in ("items", "pairs"):
        assert _lake_rows("delta", lake, schema, table) == _upstream(server, schema, table), table

    capsys.readouterr()
    refused = ["run", config("to-mysql", f"{mariadb_downstream.url}/"), "--available-now", "--master", "local[2]"]
    assert main([*refused, "--checkpoint", str(tmp_path / "ck2")]) != 0
    err = capsys.readouterr().err
    assert "binlog_row_image=MINIMAL" in err and "delta:// or iceberg://" in err, err
