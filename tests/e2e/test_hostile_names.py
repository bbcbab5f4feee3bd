"""Hostile names end to end: a real MariaDB binlog -> `changefeed run` (storage) -> `changefeed apply` (Parquet).

MariaDB accepts ``CREATE DATABASE `../../esc``` and ``CREATE TABLE `../../esc`.`../../../pwn```. The
binlog with them goes through the CLI's capture job and apply job: every file must stay under its
output root, ```a/b`.`c``` and ```a`.`b/c``` must stay apart, and both outputs must read back under
the original names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from changefeed.cli import main
from changefeed.codec import CodecOptions
from changefeed.consume.storage import StorageReader
from changefeed.files.paths import decode_name
from changefeed.model import RowChange
from changefeed.sink.parquet import ROOT_ENTRIES
from changefeed.testing import MariaDBServer

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(300)]

NAMES = [("../../esc", "../../../pwn"), ("a/b", "c"), ("a", "b/c")]
CODEC = CodecOptions(protocol="canal-json", enable_tidb_extension=True)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _expected() -> dict[tuple[str, str], list[tuple[int, str]]]:
    return {(s, t): [(1, f"{s}|{t}"), (2, "second")] for s, t in NAMES}


def _load(server: MariaDBServer) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        for schema, table in NAMES:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {_quote(schema)}")
            name = f"{_quote(schema)}.{_quote(table)}"
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(64))")
            cur.execute(f"INSERT INTO {name} VALUES (1, %s), (2, 'x')", (f"{schema}|{table}",))
            cur.execute(f"UPDATE {name} SET v = 'second' WHERE id = 2")


def _outside(base: Path, roots: list[Path]) -> list[str]:
    """Entries under ``base`` that are neither a root, an ancestor of one, nor inside one."""
    allowed = {p for r in roots for p in (r, *r.parents)}
    return sorted(str(p) for p in base.rglob("*") if p not in allowed and not any(p.is_relative_to(r) for r in roots))


def _parquet_tables(root: Path) -> dict[tuple[str, str], list[tuple[int, str]]]:
    out = {}
    for path in root.glob("*/*/snapshot.parquet"):
        name = (decode_name(path.parent.parent.name, ROOT_ENTRIES), decode_name(path.parent.name))
        out[name] = sorted((r["id"], r["v"]) for r in pq.read_table(path).to_pylist())
    return out


def test_hostile_names_stay_inside_run_and_apply_outputs(
    spark: object, mariadb_factory: Callable[..., MariaDBServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = mariadb_factory()  # private: its binlog holds only this test's statements
    _load(server)
    base = tmp_path / "l1" / "l2" / "l3"  # ../../.. from either root stays inside tmp_path
    storage, parquet = base / "storage", base / "parquet"
    config = tmp_path / "cf.toml"
    config.write_text(
        f'changefeed-id = "hostile"\nsink-uri = "file://{storage}?protocol=canal-json&enable-tidb-extension=true"\n'
        f'[source]\ntype = "binlog-files"\npath = "{server.binlog_dir}"\n'
    )
    monkeypatch.chdir(tmp_path)
    spark_args = ["--available-now", "--master", "local[2]"]
    assert main(["run", str(config), *spark_args, "--skip-preflight"]) == 0

    assert _outside(tmp_path, [storage]) == [str(config)]
    rows = [e for e in StorageReader(storage, CODEC).poll() if isinstance(e, RowChange)]
    final: dict[tuple[str, str], dict[int, str]] = {}
    for row in rows:  # in commit order: the last image per key
        final.setdefault((row.schema, row.table), {})[row.new[0]] = row.new[1]
    assert {k: sorted(v.items()) for k, v in final.items()} == _expected()
    assert (storage / "a@002fb" / "c").is_dir() and (storage / "a" / "b@002fc").is_dir()

    source = f"file://{storage}?protocol=canal-json&enable-tidb-extension=true"
    assert main(["apply", "--from", source, "--to", f"parquet://{parquet}", *spark_args]) == 0
    assert _outside(tmp_path, [storage, parquet]) == [str(config)]
    assert _parquet_tables(parquet) == _expected()
