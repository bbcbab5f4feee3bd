"""What the shard-merge tests share: statements run on a test server, and a merged-shards changefeed config."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from changefeed.testing import MariaDBServer


def run_sql(server: MariaDBServer, statements: Iterable[str]) -> None:
    """Each statement in order on one connection, then COMMIT."""
    with server.connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        conn.commit()


def merged_shards_config(
    path: Path,
    cid: str,
    upstream: MariaDBServer,
    downstream: MariaDBServer,
    target: str,
    prefix: str,
    *,
    extract_source: bool = False,
) -> Path:
    """A changefeed (DM's pessimistic shard mode) merging ``<prefix>_*.orders_*`` into ``<target>.orders`` with
    ``c_table`` and ``c_schema`` (and ``c_source``: the changefeed id) columns; the shard schemas' other
    tables go to ``target`` under their own names."""
    source = '\nextract-source = { source-regexp = "(.*)", target-column = "c_source" }' if extract_source else ""
    path.write_text(
        f"""changefeed-id = "{cid}"
sink-uri = "{downstream.url}/"
shard-mode = "pessimistic"

[source]
type = "mysql"
url = "{upstream.url}"

[filter]
rules = ["{prefix}_*.*"]

[[routes]]
schema-pattern = "{prefix}_*"
table-pattern = "orders_*"
target-schema = "{target}"
target-table = "orders"
extract-table = {{ table-regexp = "orders_(.*)", target-column = "c_table" }}
extract-schema = {{ schema-regexp = "{prefix}_(.*)", target-column = "c_schema" }}{source}

[[routes]]
schema-pattern = "{prefix}_*"
target-schema = "{target}"
"""
    )
    return path
