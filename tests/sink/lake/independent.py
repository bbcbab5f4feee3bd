"""Lake tables read without the libraries that wrote them: DuckDB over the files the table's log names.

The sinks write with delta-rs and pyiceberg, and `changefeed lake as-of` reads with them too. To
check what any other engine would see, these readers follow the formats' own metadata by hand:

* Delta: replay ``_delta_log`` (a checkpoint Parquet if there is one, then the JSON commits
  after it): the files added and not removed later are the table (the Delta protocol's rule);
* Iceberg: the newest ``metadata/*.metadata.json``'s current snapshot -> its manifest list and
  manifests (Avro, read with fastavro) -> the live data files (status != DELETED); a delete file
  would need merge-on-read, which these tables must not have, so it fails the check.

Then DuckDB reads those Parquet files (by column name: files from before an ADD COLUMN lack it).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlsplit

import duckdb
import fastavro
import pyarrow as pa


def read_delta_independently(table_dir: Path) -> pa.Table:
    log = table_dir / "_delta_log"
    live: dict[str, int] = {}
    start = -1
    last = log / "_last_checkpoint"
    if last.exists():
        start = int(json.loads(last.read_text())["version"])
        checkpoint = duckdb.sql(
            f"SELECT add.path AS path FROM read_parquet('{log / f'{start:020d}.checkpoint.parquet'}') "
            "WHERE add IS NOT NULL"
        ).fetchall()
        live = {unquote(p): start for (p,) in checkpoint}
    for commit in sorted(log.glob("*.json")):
        version = int(commit.stem)
        if version <= start:
            continue
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[unquote(action["add"]["path"])] = version
            elif "remove" in action:
                live.pop(unquote(action["remove"]["path"]), None)
            elif "metaData" in action and action["metaData"].get("partitionColumns"):
                raise AssertionError("the sinks write no partitioned tables")
    return _read_parquet([table_dir / p for p in sorted(live)])


def read_iceberg_independently(table_dir: Path) -> pa.Table:
    metadata = max((table_dir / "metadata").glob("*.metadata.json"), key=lambda p: int(p.name.split("-")[0]))
    meta = json.loads(metadata.read_text())
    current = meta.get("current-snapshot-id")
    if current is None or current == -1:
        return pa.table({})
    snapshot = next(s for s in meta["snapshots"] if s["snapshot-id"] == current)
    files: list[Path] = []
    for manifest in _avro(snapshot["manifest-list"]):
        if manifest.get("content", 0) != 0:
            raise AssertionError(f"a delete manifest {manifest['manifest_path']}: the sinks write copy-on-write")
        for entry in _avro(manifest["manifest_path"]):
            if entry["status"] == 2:  # DELETED
                continue
            data = entry["data_file"]
            if data.get("content", 0) != 0:
                raise AssertionError(f"a delete file {data['file_path']}")
            files.append(_local(data["file_path"]))
    return _read_parquet(files)


def _avro(uri: str) -> list[dict]:  # type: ignore[type-arg]
    with _local(uri).open("rb") as f:
        return list(fastavro.reader(f))  # type: ignore[arg-type]


def _local(uri: str) -> Path:
    parts = urlsplit(uri)
    return Path(unquote(parts.path)) if parts.scheme == "file" else Path(uri)


def _read_parquet(files: list[Path]) -> pa.Table:
    if not files:
        return pa.table({})
    listed = ", ".join(f"'{f}'" for f in files)
    return duckdb.sql(f"SELECT * FROM read_parquet([{listed}], union_by_name = true)").to_arrow_table()
