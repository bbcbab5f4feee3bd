"""Helpers shared by the mounter tests: catalogs from model schemas, records, one-shot mounting."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from changefeed.capture.mounter import Catalog, KVRecord, Mounter
from changefeed.model import Column, Index, TableSchema, TypeCode
from changefeed.model.events import Event

from . import tidb_encoder as enc

TS = 440000000000000000


def utf8(name: str, tc: TypeCode = TypeCode.VARCHAR, **kw: Any) -> Column:
    return Column(name, tc, charset="utf8mb4", collation="utf8mb4_bin", **kw)


def schema(columns: list[Column], indexes: tuple[Index, ...] = (), name: str = "t") -> TableSchema:
    """A model schema whose column ids are 1..n unless the columns carry their own."""
    cols = [c if c.column_id is not None else _with_id(c, i + 1) for i, c in enumerate(columns)]
    return TableSchema("test", name, tuple(cols), indexes)


def _with_id(c: Column, cid: int) -> Column:
    return replace(c, column_id=cid)


def catalog_for(ts: TableSchema, table_id: int = 104, version: int = 1, **kw: Any) -> Catalog:
    return Catalog.from_json(
        {"tables": [{"schema": ts.schema, "version": version, "table": enc.table_info(ts, table_id, **kw)}]},
        source="test-catalog",
    )


def mount_one(mounter: Mounter, record: KVRecord) -> Event | None:
    return mounter.mount(record, "test")


def put(key: bytes, value: bytes, old: bytes | None = None, commit_ts: int = TS, start_ts: int = TS - 5) -> KVRecord:
    return KVRecord("put", key, value, old, start_ts, commit_ts)


def delete(key: bytes, old: bytes | None = None, commit_ts: int = TS) -> KVRecord:
    return KVRecord("delete", key, None, old, commit_ts - 5, commit_ts)
