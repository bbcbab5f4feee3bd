"""SimpleEncoder: model events -> Simple protocol messages in either encoding (spec §3).

One event per message with a nil key. The encoder adds TiCDC's large-message handling
(handle-key-only, claim-check) and optional compression.
"""

from __future__ import annotations

from ...errors import CodecError, MessageTooLargeError
from ...model import DDLEvent, Resolved, RowChange, TableSchema
from ..base import Encoder, Message
from ..claimcheck import ClaimCheckStore, wrap_value
from ..compression import compression_codec
from ..options import CodecOptions
from .avro import AvroFormat
from .message import JSONFormat


def _describe(row: RowChange) -> str:
    ts = row.table_schema
    keys = ", ".join(f"{ts.columns[i].name}={v!r}" for i, v in zip(ts.handle_key, row.handle_key_values(), strict=True))
    return f"{row.op} row of {ts.qualified_name} at commitTs {row.commit_ts}" + (f" ({keys})" if keys else "")


class SimpleEncoder(Encoder):
    """Model events -> Simple protocol messages (JSON or Avro per ``encoding_format``)."""

    protocol = "simple"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        self._fmt = AvroFormat(self.options) if self.options.encoding_format == "avro" else JSONFormat(self.options)
        codec = compression_codec(self.options.large_message_handle_compression)
        self._compress = codec[0] if codec else None
        self._claim_check: ClaimCheckStore | None = None
        if self.options.large_message_handle_option == "claim-check":
            self._claim_check = ClaimCheckStore(self.options.claim_check_storage_uri)
        self._out: list[Message] = []

    def _finish(self, value: bytes) -> bytes:
        return self._compress(value) if self._compress is not None else value

    def append_row(self, row: RowChange) -> None:
        self._out.append(self.encode_row(row))

    def build(self) -> list[Message]:
        out, self._out = self._out, []
        return out

    def encode_row(self, row: RowChange) -> Message:
        """One DML message, reduced per ``large-message-handle-option`` when it is too big (§3.4)."""
        try:
            value = self._finish(self._fmt.dml(row, False, "", self.options.clock()))
        except (TypeError, ValueError, OverflowError, ArithmeticError) as exc:
            raise CodecError(f"simple protocol: cannot encode {_describe(row)}: {exc}") from None
        msg = Message(key=None, value=value, rows=1, commit_ts=row.commit_ts)
        limit = self.options.max_message_bytes
        if msg.size <= limit:
            return msg
        option = self.options.large_message_handle_option
        what = f"{_describe(row)}: message of {msg.size} bytes exceeds max-message-bytes {limit}"
        if option == "none":
            raise MessageTooLargeError(what)
        if not row.table_schema.handle_key:
            raise MessageTooLargeError(f"{what}, and the table has no handle key for {option}")
        location = self._write_claim_check(value, row) if self._claim_check is not None else ""
        # TiCDC re-marshals with only the handle-key columns; a claim-check message carries both
        # handleKeyOnly and claimCheckLocation.
        msg.value = self._finish(self._fmt.dml(row, True, location, self.options.clock()))
        if msg.size > limit:
            raise MessageTooLargeError(f"{what}; even the handle-key-only form has {msg.size} bytes")
        return msg

    def _write_claim_check(self, value: bytes, row: RowChange) -> str:
        """Store the full value as ``<uuid>.json``, wrapped ``{"key":null,"value":b64}`` or raw."""
        assert self._claim_check is not None
        name = self._claim_check.new_name()
        data = value if self.options.claim_check_raw_value else wrap_value(value)
        try:
            return self._claim_check.write(name, data)
        except OSError as exc:
            raise CodecError(f"simple protocol: {_describe(row)}: cannot write claim-check {name}: {exc}") from None

    def encode_ddl(self, ddl: DDLEvent) -> Message:
        value = self._finish(self._fmt.ddl(ddl, self.options.clock()))
        return self._check(Message(key=None, value=value, commit_ts=ddl.commit_ts), f"DDL {ddl.query!r}")

    def encode_resolved(self, resolved: Resolved) -> Message:
        value = self._finish(self._fmt.watermark(resolved.commit_ts, self.options.clock()))
        return Message(key=None, value=value, commit_ts=resolved.commit_ts)

    def encode_bootstrap(self, table: TableSchema) -> Message:
        """BOOTSTRAP for ``table`` (commitTs 0). The sink decides when (interval/count) and where."""
        value = self._finish(self._fmt.bootstrap(table, self.options.clock()))
        return self._check(Message(key=None, value=value), f"BOOTSTRAP of {table.qualified_name}")

    def _check(self, msg: Message, what: str) -> Message:
        if msg.size > self.options.max_message_bytes:
            raise MessageTooLargeError(
                f"{what}: message of {msg.size} bytes exceeds max-message-bytes {self.options.max_message_bytes}"
            )
        return msg
