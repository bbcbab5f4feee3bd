"""`DDLCatalog.to_compact`/`from_compact`: what a Spark binlog range carries of the keys, losslessly."""

from __future__ import annotations

import orjson

from changefeed.model.ddlschema import DDLCatalog


def _catalog() -> DDLCatalog:
    catalog = DDLCatalog()
    catalog.apply(
        "CREATE TABLE t (id INT PRIMARY KEY, u VARCHAR(8) NOT NULL, d DECIMAL(12,3), UNIQUE KEY uu (u), KEY kd (d))",
        "db",
    )
    catalog.apply("CREATE TABLE n (a INT NOT NULL, b INT, UNIQUE (a))", "db")
    catalog.apply("ALTER TABLE n ADD PRIMARY KEY (b)", "db")  # PRIMARY added last: index-id order kept
    return catalog


def test_compact_form_round_trips_through_json() -> None:
    catalog = _catalog()
    again = DDLCatalog.from_compact(orjson.loads(orjson.dumps(catalog.to_compact())))
    for name in (("db", "t"), ("db", "n")):
        assert again.table(*name) == catalog.table(*name)
    # Later DDL works on the copy as on the original (index ids continue after the carried ones).
    for c in (catalog, again):
        c.apply("ALTER TABLE n ADD UNIQUE KEY (b)", "db")
    assert again.table("db", "n") == catalog.table("db", "n")
    assert len(again) == 2 and again.generation > 0


def test_compact_subset_and_copy_are_independent() -> None:
    catalog = _catalog()
    subset = DDLCatalog.from_compact(catalog.to_compact([("DB", "T"), ("db", "missing")]))
    assert len(subset) == 1 and subset.table("db", "t") == catalog.table("db", "t")  # names match case-insensitively
    copy = catalog.copy()
    catalog.apply("DROP TABLE t", "db")
    assert catalog.table("db", "t") is None and copy.table("db", "t") is not None
    assert DDLCatalog.from_compact([]).generation == 0
