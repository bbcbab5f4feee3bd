"""Snapshots of the rows a table already holds, handed over to the binlog without a gap or a double effect.

The DBLog / Flink CDC algorithm (docs/snapshot.md): `chunks` (key ranges the database computes,
watermark reconciliation), `order` (the database's key order), `handover` (which binlog changes a
chunk already holds), `reader` (chunks and keyless tables read from a live server), `stream` (the
whole hand-over as one event stream).
"""

from __future__ import annotations

from .chunks import KeyRange, reconcile, split
from .handover import Handover, TableCut
from .reader import DEFAULT_CHUNK_SIZE, ChunkResult, SnapshotReader, TablePlan, replica_window
from .stream import snapshot_then_binlog

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "ChunkResult",
    "Handover",
    "KeyRange",
    "SnapshotReader",
    "TableCut",
    "TablePlan",
    "reconcile",
    "replica_window",
    "snapshot_then_binlog",
    "split",
]
