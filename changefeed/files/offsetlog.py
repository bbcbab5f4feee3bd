"""Spark's streaming offset log, read: what each micro-batch of a query planned.

Spark writes ``<checkpoint>/offsets/<batch id>`` before the batch runs (its write-ahead log): a
version line (``v1``), the batch's metadata JSON, then one line per source, its offset as the
source serialized it (``-``: none). `changefeed status` reports the last batch from it, and the
apply job's Kafka merge takes a batch's ranges from it (changefeed/spark/merge.py).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ChangefeedError
from .store import StateStore


def read_offsets(log: StateStore, batch: int) -> tuple[dict[str, Any], list[Any]] | None:
    """Batch ``batch``'s metadata and its sources' offsets (JSON, or the line's text where it is not
    JSON; None for ``-``); None when the log holds no such batch. A damaged file is a
    `ChangefeedError` naming it (the checkpoint may be anyone's)."""
    path = f"{log.where}/{batch}"
    try:
        raw = log.read(str(batch))
        if raw is None:
            return None
        lines = raw.decode("utf-8").splitlines()
        if len(lines) < 2 or not lines[0].startswith("v"):
            raise ValueError("expected a version line and a metadata line")
        meta = json.loads(lines[1])
        if not isinstance(meta, dict):
            raise ValueError("the metadata line is not a JSON object")
        offsets = [None if line.strip() == "-" else _json_or_text(line) for line in lines[2:]]
    except ChangefeedError as exc:
        raise ChangefeedError(f"unreadable Spark offset log: {exc.message}", where=path) from None
    except ValueError as exc:  # UnicodeDecodeError and json's errors too
        raise ChangefeedError(f"unreadable Spark offset log: {exc}", where=path) from None
    return meta, offsets


def _json_or_text(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return line
