"""`changefeed run` with a ``delta://`` / ``iceberg://`` sink-uri (capture writing the tables itself), checked by
`changefeed diff --target delta://|iceberg://`, read by DuckDB through the formats' own metadata
(tests/sink/lake/independent.py), and read back in time with `changefeed lake as-of`.

Every column type family and a composite key. The diff must find the lake equal after each run,
and different — naming the row — after an upstream change no run has carried.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from changefeed.cli import main
from changefeed.sink.lake.reader import open_lake, read_version, versions
from changefeed.testing import MariaDBServer
from tests.e2e.shards import run_sql

from .independent import read_delta_independently, read_iceberg_independently

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(400)]

TYPES = (
    "id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, bu BIGINT UNSIGNED, f FLOAT, d DOUBLE, "
    "d1 DECIMAL(12,3), d2 DECIMAL(50,10), dt DATE, dtm DATETIME(3), tsp TIMESTAMP(6) NULL, tm TIME(2), yr YEAR, "
    "ch CHAR(5), vc VARCHAR(30) CHARACTER SET utf8mb4, tx TEXT, bn BINARY(4), vb VARBINARY(10), bl BLOB, js JSON, "
    "en ENUM('a','b','c'), st SET('x','y','z'), bt BIT(10)"
)
ROWS = [
    "(1, -128, 65535, 18446744073709551615, 1.5, -2.25e300, 12345.678, 12345678901234567890123456789.0123456789, "
    "'2024-02-29', '2024-05-06 07:08:09.123', '2024-05-06 07:08:09.123456', '-838:59:59.00', 2024, 'ab', 'héllo ✓', "
    "'long text', X'00010200', X'ff00', X'deadbeef', '{\"a\": [1, 2]}', 'b', 'x,z', b'1000000001')",
    "(2, 0, 0, 0, 0, 0, 0, 0, '1000-01-01', '1000-01-01 00:00:00', '1970-01-02 00:00:00', '00:00:00', 1901, '', '', "
    "'', X'', X'', X'', 'null', 'a', '', b'0')",
    "(3" + ", NULL" * 22 + ")",
]


def _sorted(table: pa.Table) -> list[tuple[object, ...]]:
    return sorted((tuple(row.items()) for row in table.to_pylist()), key=repr)


def _diff(server: MariaDBServer, target: str, schema: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["diff", "--source", server.url, "--target", target, "--tables", f"{schema}.*", "--no-progress"])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("mode", ["upsert", "changelog", "scd2"])
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_run_into_lake_tables_then_diff_and_as_of(
    spark: object,
    mariadb: MariaDBServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    mode: str,
) -> None:
    """Each mode: the diff compares the source with the table as the mode stores it (scd2: the open
    versions; changelog: the changes folded), which every column type must survive exactly."""
    schema = f"lk_{uuid.uuid4().hex[:8]}"
    lake = tmp_path / "lake"
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "lake-{schema}"\nsink-uri = "{fmt}://{lake}?mode={mode}"\n'
        f'[source]\ntype = "mysql"\nurl = "{mariadb.url}"\n[filter]\nrules = ["{schema}.*"]\n'
    )
    run: Callable[[], int] = lambda: main(  # noqa: E731
        ["run", str(config), "--available-now", "--master", "local[2]", "--checkpoint", str(tmp_path / "ck")]
    )
    run_sql(
        mariadb,
        [
            f"CREATE DATABASE `{schema}`",
            f"CREATE TABLE `{schema}`.types ({TYPES})",
            f"CREATE TABLE `{schema}`.pairs (a VARCHAR(8) NOT NULL, b INT NOT NULL, v INT, PRIMARY KEY (a, b))",
            f"INSERT INTO `{schema}`.types VALUES {', '.join(ROWS)}",
            f"INSERT INTO `{schema}`.pairs VALUES ('x', 1, 10), ('x', 2, 20), ('y', 1, NULL)",
        ],
    )
    try:
        assert run() == 0  # the snapshot of both tables
        out = capsys.readouterr().out
        assert f"{fmt} tables in {lake} (mode={mode})" in out
        code, out = _diff(mariadb, f"{fmt}://{lake}", schema, capsys)
        assert code == 0, out
        assert f"{schema}.types: equal (3 rows" in out and f"{schema}.pairs: equal (3 rows" in out
        first = versions(open_lake(f"{fmt}://{lake}"), (schema, "pairs"))[-1].checkpoint_ts

        run_sql(  # through the binlog now: updates (a key too), a delete, an insert
            mariadb,
            [
                f"UPDATE `{schema}`.types SET vc = 'changed', d1 = -1.5, tsp = '2030-01-01 00:00:00' WHERE id = 1",
                f"DELETE FROM `{schema}`.types WHERE id = 2",
                f"UPDATE `{schema}`.pairs SET b = 9 WHERE a = 'x' AND b = 1",
                f"INSERT INTO `{schema}`.pairs VALUES ('z', 5, 50)",
            ],
        )
        assert run() == 0
        capsys.readouterr()
        code, out = _diff(mariadb, f"{fmt}://{lake}", schema, capsys)
        assert code == 0, out
        for table in ("types", "pairs"):  # what an engine reading the format's own metadata sees: the same rows
            read = read_delta_independently if fmt == "delta" else read_iceberg_independently
            stored = read_version(open_lake(f"{fmt}://{lake}"), (schema, table), None)
            assert _sorted(read(lake / schema / table)) == _sorted(stored)

        # The table as of the first run: the key 'x',1 is back, 'x',9 and 'z',5 are not there yet.
        as_of = ["lake", "as-of", "--to", f"{fmt}://{lake}", "--table", f"{schema}.pairs"]
        assert main([*as_of, "--ts", str(first)]) == 0
        rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert sorted((r["a"], r["b"], r["v"]) for r in rows) == [("x", 1, 10), ("x", 2, 20), ("y", 1, None)]
        assert main([*as_of, "--output", str(tmp_path / "now.parquet")]) == 0
        import pyarrow.parquet as pq  # noqa: PLC0415

        now = pq.read_table(tmp_path / "now.parquet").to_pylist()
        assert sorted((r["a"], r["b"]) for r in now) == [("x", 2), ("x", 9), ("y", 1), ("z", 5)]

        run_sql(mariadb, [f"UPDATE `{schema}`.pairs SET v = 99 WHERE a = 'y'"])  # no run carries it
        code, out = _diff(mariadb, f"{fmt}://{lake}", schema, capsys)
        assert code == 1, out
        assert f"{schema}.pairs: DIFFERENT (1 changed" in out and f"{schema}.types: equal" in out
        assert "changed key=('y', 1)" in out
        if fmt == "delta" and mode == "upsert":  # the independent reader agrees on what is there
            assert DeltaTable(str(lake / schema / "pairs")).to_pyarrow_table().num_rows == 4
        assert main(["diff", "--source", mariadb.url, "--target", f"{fmt}://{lake}", "--fix-sql", "x.sql"]) == 2
    finally:
        run_sql(mariadb, [f"DROP DATABASE IF EXISTS `{schema}`"])
