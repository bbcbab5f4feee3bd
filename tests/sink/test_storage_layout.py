"""Storage-sink layout against TiCDC's own tests (fixtures/storage/storage_layout.json)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from changefeed.files.layout import (
    LayoutError,
    SchemaFile,
    data_dir,
    data_file_name,
    date_dir,
    index_file_name,
    metadata_json,
    table_col,
)
from changefeed.model import Column, Index, TableSchema, TypeCode

CASES = {
    c["id"]: c
    for c in json.loads((Path(__file__).parents[1] / "fixtures/storage/storage_layout.json").read_text())["cases"]
}
UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_bin"}

TABLE1 = TableSchema(
    "schema1",
    "table1",
    (
        Column("Id", TypeCode.INT, nullable=False, default=10),
        Column("LastName", TypeCode.VARCHAR, length=128, nullable=False, default="Default LastName", **UTF8),
        Column("FirstName", TypeCode.VARCHAR, length=64, default="Default FirstName", **UTF8),
        Column("Birthday", TypeCode.DATETIME, default=12345678),
    ),
    (Index("PRIMARY", ("Id",), primary=True),),
)


def test_database_level_schema_file() -> None:
    case = CASES["storage-schema-path-db-level"]["expected"]
    sf = SchemaFile("schema1", "", 100)
    assert sf.checksum == case["checksum"]
    assert sf.path() == case["path"]


def test_table_level_schema_file_bytes_checksum_and_paths() -> None:
    case = CASES["storage-schema-path-table-level"]["expected"]
    sf = SchemaFile.from_table(TABLE1, 100)
    assert sf.to_json() == case["schema_file_text"]
    assert sf.checksum == case["checksum"]
    assert sf.path() == case["path"]
    assert sf.path(table_id=12345) == case["path_use_table_id_as_path_12345"]


def test_schema_file_parses_back_to_the_table() -> None:
    sf = SchemaFile.from_table(TABLE1, 100)
    again = SchemaFile.parse(sf.to_json())
    assert again.checksum == sf.checksum
    ts = again.to_table_schema()
    assert [c.name for c in ts.columns] == ["Id", "LastName", "FirstName", "Birthday"]
    assert ts.primary_key == (0,) and not ts.column("LastName").nullable and ts.column("LastName").length == 128
    with pytest.raises(LayoutError, match="bad schema file"):
        SchemaFile.parse("{}", where="x/meta/schema_1_0000000000.json")


TABLECOL_COLUMNS = {
    "TIME decimal 5": Column("", TypeCode.TIME, decimal=5),
    "INT UNSIGNED flen 5": Column("", TypeCode.INT, unsigned=True, length=5),
    "FLOAT flen 12 decimal 3": Column("", TypeCode.FLOAT, length=12, decimal=3),
    "FLOAT default": Column("", TypeCode.FLOAT),
    "DOUBLE flen 7 decimal 3": Column("", TypeCode.DOUBLE, length=7, decimal=3),
    "BIGINT default": Column("", TypeCode.BIGINT),
    "VARCHAR(128)": Column("", TypeCode.VARCHAR, length=128, **UTF8),
    "VAR_STRING(64)": Column("", TypeCode.VAR_STRING, length=64, **UTF8),
    "BLOB flen 100 charset binary": Column("", TypeCode.BLOB, length=100, charset="binary"),
    "TEXT flen 100": Column("", TypeCode.BLOB, length=100, **UTF8),
    "ENUM": Column("", TypeCode.ENUM, **UTF8),
    "TIMESTAMP decimal 2": Column("", TypeCode.TIMESTAMP, decimal=2),
    "DATETIME default": Column("", TypeCode.DATETIME),
    "YEAR flen 4": Column("", TypeCode.YEAR, length=4),
}


@pytest.mark.parametrize("row", CASES["storage-tablecol-json"]["expected"]["rows"], ids=lambda r: r["column"])
def test_table_col_json(row: dict[str, str]) -> None:
    expected = json.loads(row["json"])
    if row["column"].startswith("INT primary key"):
        # TiCDC's test column has the PriKey flag but not NotNull, so no ColumnNullable member.
        col = TableSchema("s", "t", (Column("", TypeCode.INT),), (Index("PRIMARY", ("",), primary=True),)).columns[0]
    else:
        col = TABLECOL_COLUMNS[row["column"]]
    assert table_col(col) == expected


def test_paths_follow_the_examples() -> None:
    assert (
        data_dir("test", "test1", 439972354120482843, 55, "2023-03-09") == "test/test1/439972354120482843/55/2023-03-09"
    )
    assert data_file_name(1, ".csv", width=6) == "CDC000001.csv"
    assert data_file_name(1, ".csv") == "CDC00000000000000000001.csv"
    assert data_file_name(1, ".csv", width=3) == "CDC00000000000000000001.csv"  # out of range -> 20
    assert (
        data_dir("", "", 439972354120482843, None, "2023-03-09", table_id=12345)
        == "12345/439972354120482843/2023-03-09"
    )
    assert index_file_name() == "meta/CDC.index"
    assert data_file_name(1, ".csv", width=6, dispatcher="d1") == "CDC_d1_000001.csv"
    when = dt.datetime(2023, 3, 9, 10, 0)
    assert [date_dir(when, s) for s in ("none", "year", "month", "day")] == ["", "2023", "2023-03", "2023-03-09"]
    assert metadata_json(42) == b'{"checkpoint-ts":42}'
    with pytest.raises(LayoutError):
        date_dir(when, "week")
