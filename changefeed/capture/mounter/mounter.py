"""KV change records -> model events (TiCDC ``cdc/entry/mounter.go``; spec §6.5).

A record is a put or delete of one TiKV key with the new value and, when TiKV's old-value
feature is on, the previous value. Only record keys are mounted; index and meta keys are
skipped. Resolved markers become `Resolved` events.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator
from datetime import tzinfo
from typing import Any, NamedTuple

from ...errors import CaptureError
from ...model.events import Event, Op, Resolved, RowChange
from ...model.types import STRING_TYPES, TypeCode
from ...model.values import ABSENT
from .catalog import Catalog, TableVersion
from .keys import INT_HANDLE_KEY_LEN, common_handle_datums
from .rowcodec import CODEC_VER, MISSING, RowDecoder
from .temporal import resolve_time_zone

log = logging.getLogger(__name__)

OP_PUT = "put"
OP_DELETE = "delete"
OP_RESOLVED = "resolved"

_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
_MASK64 = (1 << 64) - 1
_MALFORMED = (struct.error, IndexError, ValueError, ArithmeticError, OverflowError)


class KVRecord(NamedTuple):
    """One change record: ``op`` put/delete/resolved; raw key and values; ts of the txn."""

    op: str
    key: bytes | None = None
    value: bytes | None = None
    old_value: bytes | None = None
    start_ts: int = 0
    commit_ts: int = 0
    region_id: int | None = None


class _Hot(NamedTuple):
    """The decoder cached for one physical table and the ts range it is valid for."""

    lo: int
    hi: int
    decoder: RowDecoder
    partition_id: int | None


class Mounter:
    """Decodes KV records against a `Catalog` (one per changefeed; not thread-safe).

    ``time_zone`` is the zone TIMESTAMP values are rendered in (TiCDC's changefeed time zone).
    ``skip_unknown_tables`` drops records of tables the catalog does not know instead of
    failing (TiCDC fails: a table it captures must be in its snapshot).
    """

    def __init__(
        self,
        catalog: Catalog,
        time_zone: str | None = "UTC",
        *,
        skip_unknown_tables: bool = False,
        verify_checksum: bool = False,
    ) -> None:
        self.catalog = catalog
        self.time_zone = time_zone
        self.skip_unknown_tables = skip_unknown_tables
        self.verify_checksum = verify_checksum
        self._tz = resolve_time_zone(time_zone)
        self._decoders: dict[int, RowDecoder] = {}  # by id(TableVersion)
        self._hot: dict[int, _Hot] = {}
        self.vector_decoders: dict[int, Any] = {}  # by id(RowDecoder): columnar.VectorDecoder, built there
        self.skipped: dict[str, int] = {"index": 0, "meta": 0, "other": 0, "unknown_table": 0, "empty": 0}

    def __getstate__(self) -> dict[str, Any]:
        # Compiled decoders hold closures; a pickled copy (a Spark executor) recompiles lazily.
        return {
            "catalog": self.catalog,
            "time_zone": self.time_zone,
            "skip_unknown_tables": self.skip_unknown_tables,
            "verify_checksum": self.verify_checksum,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["catalog"],
            state["time_zone"],
            skip_unknown_tables=state["skip_unknown_tables"],
            verify_checksum=state["verify_checksum"],
        )

    # ------------------------------------------------------------ lookup

    def _decoder(self, physical_id: int, commit_ts: int) -> _Hot | None:
        ts = commit_ts - 1  # the snapshot before the txn: a DML sharing a DDL's ts sees the old schema
        version = self.catalog.lookup(physical_id, ts)
        if version is None:
            if self.catalog.knows(physical_id):
                raise CaptureError(f"no schema of physical table {physical_id} at ts {ts} (commit_ts - 1)")
            if self.skip_unknown_tables:
                return None
            raise CaptureError(f"physical table {physical_id} is not in the catalog")
        decoder = self._decoders.get(id(version))
        if decoder is None:
            decoder = RowDecoder(version, self._tz, self.verify_checksum)
            self._decoders[id(version)] = decoder
        lo, hi = self.catalog.validity(physical_id, ts)
        hot = _Hot(lo, hi, decoder, physical_id if version.partitioned else None)
        self._hot[physical_id] = hot
        return hot

    @property
    def tz(self) -> tzinfo | None:
        """The resolved TIMESTAMP zone (None: UTC, no conversion)."""
        return self._tz

    def table_decoder(self, physical_id: int, commit_ts: int) -> _Hot | None:
        """The decoder of ``physical_id`` for a record committed at ``commit_ts`` with the ts range it serves.

        None for a table the catalog does not know when ``skip_unknown_tables``; raises otherwise.
        """
        hot = self._hot.get(physical_id)
        if hot is None or not hot.lo < commit_ts <= hot.hi:
            hot = self._decoder(physical_id, commit_ts)
        return hot

    # ------------------------------------------------------------ records

    def mount(self, record: KVRecord, where: str | None = None) -> Event | None:
        """One record -> an event, or None for skipped keys; errors name ``where`` and the key."""
        try:
            return self._mount(*record)
        except (CaptureError, *_MALFORMED) as exc:
            raise _located(exc, where, record) from None

    def mount_all(self, records: Iterable[tuple[KVRecord, Any]], where: str = "{loc}") -> Iterator[Event]:
        """Mount ``(record, locator)`` pairs in order; ``where`` formats a locator for errors."""
        inner = self._mount
        for record, loc in records:
            try:
                event = inner(*record)
            except (CaptureError, *_MALFORMED) as exc:
                raise _located(exc, where.format(loc=loc), record) from None
            if event is not None:
                yield event

    def mount_columns(
        self,
        ops: list[str],
        keys: list[bytes],
        values: list[bytes | None],
        olds: list[bytes | None],
        start_tss: list[int | None],
        commit_tss: list[int],
        region_ids: list[int | None],
        where: str = "row {loc}",
        first: int = 0,
    ) -> list[Event]:
        """Mount records given column-wise (an Arrow batch as lists): the lean path for Spark."""
        out: list[Event] = []
        append = out.append
        inner = self._mount
        i = first
        try:
            for record in zip(ops, keys, values, olds, start_tss, commit_tss, region_ids, strict=True):
                event = inner(*record)
                if event is not None:
                    append(event)
                i += 1
        except (CaptureError, *_MALFORMED) as exc:
            raise _located(exc, where.format(loc=i), KVRecord(*record)) from None
        return out

    def _mount(
        self,
        op: str,
        key: bytes | None,
        value: bytes | None,
        old: bytes | None,
        start_ts: int | None,
        commit_ts: int,
        region_id: int | None,
    ) -> Event | None:
        if op == OP_RESOLVED:
            return Resolved(commit_ts)
        if not key:
            raise CaptureError("record has no key")
        if key[0] == 0x78:  # 'x' + 3-byte keyspace id (API v2): TiCDC strips it
            key = key[4:]
        if len(key) < 11 or key[0] != 0x74 or key[9:11] != b"_r":  # not t{id}_r...
            kind = "meta" if key[:1] == b"m" else "index" if key[:1] == b"t" and key[9:11] == b"_i" else "other"
            self.skipped[kind] += 1
            return None
        if len(key) < INT_HANDLE_KEY_LEN:
            raise CaptureError(f"record key truncated: {len(key)} bytes")
        u = _U64.unpack_from(key, 1)[0] ^ _SIGN
        physical_id = u - (1 << 64) if u & _SIGN else u
        hot = self._hot.get(physical_id)
        if hot is None or not hot.lo < commit_ts <= hot.hi:  # the version in force at commit_ts - 1
            hot = self._decoder(physical_id, commit_ts)
        if hot is None:
            self.skipped["unknown_table"] += 1
            return None
        decoder = hot.decoder
        table = decoder.table
        int_handle = _int_handle(key, table)
        if op == OP_PUT:
            if not value:
                self.skipped["empty"] += 1
                log.warning("put without a value skipped (key %s)", key.hex())
                return None
            new_row = self._row(decoder, value, key, int_handle)
            old_row = self._row(decoder, old, key, int_handle) if old else None
            kind = Op.UPDATE if old_row is not None else Op.INSERT
        elif op == OP_DELETE:
            new_row = None
            if old:
                old_row = self._row(decoder, old, key, int_handle)
            elif table.pk_is_handle or table.is_common_handle:
                old_row = self._key_only(decoder, key, int_handle)
            else:
                # Old value off and the handle is _tidb_rowid: nothing identifies the row.
                self.skipped["empty"] += 1
                log.warning("delete without old value of %s skipped (key %s)", table.schema.qualified_name, key.hex())
                return None
            kind = Op.DELETE
        else:
            raise CaptureError(f"unknown op {op!r} (expected put, delete or resolved)")
        return RowChange(
            op=kind,
            table_schema=table.schema,
            commit_ts=commit_ts,
            new=new_row,
            old=old_row,
            start_ts=start_ts or 0,
            partition_id=hot.partition_id,
            row_id=int_handle,
            position=None if region_id is None else {"region_id": region_id},
        )

    def _row(self, decoder: RowDecoder, value: bytes, key: bytes, int_handle: int | None) -> tuple[Any, ...]:
        if value[0] == CODEC_VER and decoder.direct:  # the fast path: v2, no common handle
            if int_handle is not None and decoder.handle_unsigned:
                int_handle &= _MASK64
            return decoder.decode_v2(value, key, int_handle)
        row = decoder.decode(value, key)
        if int_handle is not None:
            pos = decoder.handle_position
            if pos is not None:
                # PKIsHandle: the PK column is not in the value; unsigned columns read the bits as uint64.
                row[pos] = int_handle & _MASK64 if decoder.handle_unsigned else int_handle
        elif decoder.table.is_common_handle and any(row[p] is MISSING for p in decoder.table.common_handle_positions):
            self._fill_from_key(decoder, row, key)
        return tuple(row)

    def _key_only(self, decoder: RowDecoder, key: bytes, int_handle: int | None) -> tuple[Any, ...]:
        """A delete without old value: only the handle columns, from the key; the rest ABSENT."""
        table = decoder.table
        row: list[Any] = [ABSENT] * decoder.width
        if int_handle is not None:
            pos = decoder.handle_position
            assert pos is not None  # only pk_is_handle tables get here with an int handle
            row[pos] = int_handle & _MASK64 if decoder.handle_unsigned else int_handle
        else:
            for p in table.common_handle_positions:
                row[p] = MISSING
            self._fill_from_key(decoder, row, key)
        return tuple(row)

    def _fill_from_key(self, decoder: RowDecoder, row: list[Any], key: bytes) -> None:
        table = decoder.table
        datums = common_handle_datums(key[11:])
        positions = table.common_handle_positions
        if len(datums) != len(positions):
            raise CaptureError(
                f"common handle has {len(datums)} datums, the primary key of {table.schema.qualified_name} "
                f"has {len(positions)} columns"
            )
        columns = table.schema.columns
        for p, (flag, raw) in zip(positions, datums, strict=True):
            if row[p] is not MISSING:
                continue
            col = columns[p]
            # Strings in keys are collation sort keys; only binary strings can be read back
            # (TiDB: such columns need "restored data" from the row value).
            if (col.type_code in STRING_TYPES and not col.is_bytes) or col.type_code is TypeCode.JSON:
                raise CaptureError(
                    f"primary key column {col.name!r} of {table.schema.qualified_name} is not in the row value "
                    "and cannot be restored from the key (collation key)"
                )
            row[p] = decoder.key_value(p, flag, raw)


def _located(exc: Exception, where: str | None, record: tuple[Any, ...]) -> CaptureError:
    """The error again, naming the record: its place in the input and its key in hex.

    Python errors from reading past a buffer and the like mean malformed input, not a bug path.
    """
    message = exc.message if isinstance(exc, CaptureError) else f"malformed record: {exc}"
    key = record[1]
    return CaptureError(message, where=f"{where or 'record'} key={key.hex() if key else '-'}")


def _int_handle(key: bytes, table: TableVersion) -> int | None:
    """The int handle of a 19-byte row key, None for a common-handle key; raises when the table disagrees."""
    if len(key) == INT_HANDLE_KEY_LEN:
        u = _U64.unpack_from(key, 11)[0] ^ _SIGN
        if table.is_common_handle:
            raise CaptureError(f"int handle key for common-handle table {table.schema.qualified_name}")
        return u - (1 << 64) if u & _SIGN else u
    if not table.is_common_handle:
        raise CaptureError(
            f"record key of {len(key)} bytes: {table.schema.qualified_name} has int handles (19-byte keys)"
        )
    return None
