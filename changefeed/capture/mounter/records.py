"""Reading KV change records: JSONL lines, Parquet files and Arrow record batches (docs/mounter.md).

Keys and values are base64 or hex text in JSONL (and in string-typed Arrow columns) and raw
bytes in binary Arrow columns. Without an ``encoding`` member the key decides: a key whose text
starts with ``74``, ``78`` or ``6d`` (hex of ``t``, ``x``, ``m``) is hex, anything else base64
(base64 of those bytes starts with ``d``, ``e`` or ``b``); the values use the key's encoding.
"""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import CaptureError
from ...model.events import Event
from . import columnar
from .mounter import OP_DELETE, OP_PUT, OP_RESOLVED, KVRecord, Mounter

ENCODINGS = ("base64", "hex")
_HEX_KEY_STARTS = ("74", "78", "6d", "6D")
_OPS = {"put": OP_PUT, "delete": OP_DELETE, "resolved": OP_RESOLVED, "del": OP_DELETE}


def detect_encoding(key_text: str) -> str:
    """The documented rule: hex when the key text starts with the hex of ``t``/``x``/``m``."""
    return "hex" if key_text[:2] in _HEX_KEY_STARTS else "base64"


def decode_text(text: Any, encoding: str, member: str) -> bytes | None:
    if text is None:
        return None
    if isinstance(text, bytes):
        return text
    if not isinstance(text, str):
        raise CaptureError(f"{member} must be a {encoding} string, got {type(text).__name__}")
    try:
        return bytes.fromhex(text) if encoding == "hex" else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise CaptureError(f"{member} is not valid {encoding}") from None


def _ts(value: Any, member: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
        raise CaptureError(f"{member} must be an unsigned 64-bit integer, got {value!r}")
    return value


def _op(raw: Any) -> str:
    op = _OPS.get(raw.lower()) if isinstance(raw, str) else None
    if op is None:
        raise CaptureError(f"op must be put, delete or resolved, got {raw!r}")
    return op


def record_from_object(obj: Any, default_encoding: str | None = None) -> KVRecord:
    """A JSONL object -> `KVRecord` (see the module docstring for the encodings)."""
    if not isinstance(obj, dict):
        raise CaptureError("a record line must be a JSON object")
    op = _op(obj.get("op"))
    if op == OP_RESOLVED:
        return KVRecord(op, commit_ts=_ts(obj.get("ts", obj.get("commit_ts")), "ts"))
    key_text = obj.get("key")
    if not isinstance(key_text, str) or not key_text:
        raise CaptureError("record needs a non-empty 'key' string")
    encoding = obj.get("encoding") or default_encoding or detect_encoding(key_text)
    if encoding not in ENCODINGS:
        raise CaptureError(f"encoding must be base64 or hex, got {encoding!r}")
    region = obj.get("region_id")
    return KVRecord(
        op,
        decode_text(key_text, encoding, "key"),
        decode_text(obj.get("value") or None, encoding, "value"),
        decode_text(obj.get("old_value") or None, encoding, "old_value"),
        _ts(obj.get("start_ts", 0), "start_ts"),
        _ts(obj.get("commit_ts"), "commit_ts"),
        None if region is None else _ts(region, "region_id"),
    )


def jsonl_records(
    stream: IO[bytes], source: str = "<stdin>", default_encoding: str | None = None
) -> Iterator[tuple[KVRecord, int]]:
    """``(record, line number)`` for each non-blank line; bad lines raise naming ``source:line``."""
    for lineno, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CaptureError(f"invalid JSON: {exc}", where=f"{source}:{lineno}") from None
        try:
            yield record_from_object(obj, default_encoding), lineno
        except CaptureError as exc:
            raise CaptureError(exc.message, where=f"{source}:{lineno}") from None


def batch_records(batch: Any, source: str = "batch", first_row: int = 0) -> Iterator[tuple[KVRecord, int]]:
    """``(record, row number)`` for each row of an Arrow record batch or table.

    Columns: ``op`` (string), ``key``/``value``/``old_value`` (binary, or base64/hex strings),
    ``start_ts``, ``commit_ts`` (integers), optional ``region_id``, ``ts`` (resolved markers) and
    ``encoding``. Columns are converted to Python lists once; the loop does no Arrow calls.
    """
    names = set(batch.schema.names)
    n = batch.num_rows
    if "op" not in names:
        raise CaptureError("record batch has no 'op' column")

    def column(name: str) -> tuple[list[Any], bool]:
        if name not in names:
            return [None] * n, True
        arr = batch.column(name)
        is_binary = pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
        return arr.to_pylist(), is_binary

    ops, _ = column("op")
    keys, keys_raw = column("key")
    values, values_raw = column("value")
    olds, olds_raw = column("old_value")
    starts, _ = column("start_ts")
    commits, _ = column("commit_ts")
    regions, _ = column("region_id")
    tss, _ = column("ts")
    encodings, _ = column("encoding")
    all_raw = keys_raw and values_raw and olds_raw
    for i in range(n):
        row = first_row + i
        try:
            op = _OPS.get(ops[i]) or _op(ops[i])
            if op == OP_RESOLVED:
                ts = tss[i] if tss[i] is not None else commits[i]
                yield KVRecord(op, commit_ts=_ts(ts, "ts")), row
                continue
            key, value, old = keys[i], values[i], olds[i]
            if not all_raw:
                if not isinstance(key, str | bytes) or not key:
                    raise CaptureError("record needs a non-empty key")
                enc = encodings[i] or (detect_encoding(key) if isinstance(key, str) else "base64")
                key = decode_text(key, enc, "key")
                value = decode_text(value or None, enc, "value")
                old = decode_text(old or None, enc, "old_value")
            start = starts[i]
            commit = commits[i]
            if commit is None:
                raise CaptureError("record has no commit_ts")
            yield KVRecord(op, key, value or None, old or None, start or 0, commit, regions[i]), row
        except CaptureError as exc:
            raise CaptureError(exc.message, where=f"{source} row {row}") from None


def decode_batch(batch: Any, mounter: Mounter, source: str = "batch", first_row: int = 0) -> list[Event]:
    """Mount every record of an Arrow record batch: the Spark ``kv`` input's entry point.

    A RecordBatch with binary key/value columns takes the vectorised path (`columnar.mount_batch`).
    Other binary-column inputs (a Table) go to `Mounter.mount_columns` as plain lists, and
    text-encoded columns take the general `batch_records` path.
    """
    if columnar.fits(batch):
        return columnar.mount_batch(mounter, batch, source, first_row)
    names = set(batch.schema.names)
    if not {"op", "key", "commit_ts"} <= names or "encoding" in names:
        return list(mounter.mount_all(batch_records(batch, source, first_row), where=source + " row {loc}"))
    n = batch.num_rows

    def column(name: str) -> list[Any]:  # op, key and commit_ts are there (checked above)
        arr = batch.column(name)
        if name in ("key", "value", "old_value") and not (
            pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
        ):
            raise _TextColumnError
        values: list[Any] = arr.to_pylist()
        return values

    def optional(name: str) -> list[Any] | None:
        return column(name) if name in names else None

    try:
        keys, values, olds = column("key"), optional("value"), optional("old_value")
    except _TextColumnError:
        return list(mounter.mount_all(batch_records(batch, source, first_row), where=source + " row {loc}"))
    ops = [op if op in _CANONICAL_OPS else _checked_op(op, source, first_row + i) for i, op in enumerate(column("op"))]
    commits = column("commit_ts")
    tss = optional("ts")
    if tss is not None:  # resolved markers may carry their ts in `ts`
        commits = [c if t is None else t for c, t in zip(commits, tss, strict=True)]
    if None in commits:
        raise CaptureError("record has no commit_ts", where=f"{source} row {first_row + commits.index(None)}")
    none: list[Any] = [None] * n
    return mounter.mount_columns(
        ops,
        keys,
        values if values is not None else none,
        olds if olds is not None else none,
        optional("start_ts") or none,
        commits,
        optional("region_id") or none,
        where=source + " row {loc}",
        first=first_row,
    )


class _TextColumnError(Exception):
    pass


_CANONICAL_OPS = frozenset({OP_PUT, OP_DELETE, OP_RESOLVED})


def _checked_op(raw: Any, source: str, row: int) -> str:
    try:
        return _op(raw)
    except CaptureError as exc:
        raise CaptureError(exc.message, where=f"{source} row {row}") from None


def read_file(path: str | Path, mounter: Mounter, default_encoding: str | None = None) -> Iterator[Event]:
    """Stream the events of a ``.jsonl`` or ``.parquet`` records file (by suffix; ``-`` = stdin)."""
    name = str(path)
    if name.endswith(".parquet"):
        try:
            pf = pq.ParquetFile(name)
        except (OSError, ValueError) as exc:
            raise CaptureError(f"cannot read Parquet: {exc}", where=name) from None
        first = 0
        for batch in pf.iter_batches(batch_size=8192):
            yield from decode_batch(batch, mounter, name, first)
            first += batch.num_rows
        return
    try:
        stream = sys.stdin.buffer if name == "-" else open(name, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise CaptureError(f"cannot open records: {exc.strerror}", where=name) from None
    label = "<stdin>" if name == "-" else name
    try:
        yield from mounter.mount_all(jsonl_records(stream, label, default_encoding), where=label + ":{loc}")
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
