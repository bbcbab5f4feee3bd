"""Codec options in TiCDC's own words (sink-uri query / ``[sink]`` config keys).

One typed object for every protocol; each codec reads the options that concern it. Names map
one-to-one to TiCDC's keys with ``-`` turned into ``_`` (`from_mapping` accepts either spelling).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..errors import ConfigError

Protocol = Literal["open-protocol", "canal-json", "simple", "csv", "debezium"]
PROTOCOLS: tuple[str, ...] = ("open-protocol", "canal-json", "simple", "csv", "debezium")
DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class CodecOptions:
    protocol: str = "canal-json"
    # Which TiCDC line to imitate byte for byte: "ticdc" (new architecture, default) or "tiflow".
    compat: str = "ticdc"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_batch_size: int = 16  # Open Protocol rows per Kafka message
    enable_tidb_extension: bool = False  # canal-json `_tidb` and TIDB_WATERMARK
    only_output_updated_columns: bool = False
    delete_only_output_handle_key_columns: bool = False
    output_old_value: bool = True  # Open Protocol "p", Debezium "before" on UPDATE ([sink.<protocol>] output-old-value)
    content_compatible: bool = False  # canal-json: full mysqlType text, implies only-updated-columns
    output_row_key: bool = False  # canal-json `_tidb.rowkey` ([ticdc])
    encoding_format: str = "json"  # simple: json | avro
    large_message_handle_option: str = "none"  # none | handle-key-only | claim-check
    large_message_handle_compression: str = "none"  # none | snappy | lz4
    claim_check_storage_uri: str = ""
    claim_check_raw_value: bool = False
    time_zone: str = "UTC"  # TIMESTAMP values are rendered in this zone; Simple's `location`
    # Debezium: TiCDC's server cluster-id names the source and the schemas; the two switches.
    cluster_id: str = "default"
    debezium_disable_schema: bool = False
    debezium_include_start_ts: bool = False
    # CSV ([sink.csv]) and the storage sink's line terminator.
    delimiter: str = ","
    quote: str = '"'
    null: str = "\\N"
    include_commit_ts: bool = False
    binary_encoding_method: str = "base64"  # base64 | hex
    csv_output_old_value: bool = False
    output_field_header: bool = False
    terminator: str = "\r\n"
    # Simple protocol bootstrap rules (used by the sink, kept here so one config object travels).
    send_bootstrap_interval_in_sec: int = 120
    send_bootstrap_in_msg_count: int = 10000
    send_bootstrap_to_all_partition: bool = True
    # Wall clock for "ts"/"buildTs" members; tests pin it to get reproducible bytes.
    clock: Callable[[], int] = field(default=wall_clock_ms, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {self.protocol!r}; expected one of {', '.join(PROTOCOLS)}")
        if self.compat not in ("ticdc", "tiflow"):
            raise ConfigError(f"compat must be 'ticdc' or 'tiflow', not {self.compat!r}")
        if self.encoding_format not in ("json", "avro"):
            raise ConfigError(f"encoding-format must be json or avro, not {self.encoding_format!r}")
        if self.large_message_handle_option not in ("none", "handle-key-only", "claim-check"):
            raise ConfigError(f"unknown large-message-handle-option {self.large_message_handle_option!r}")
        if self.large_message_handle_compression not in ("none", "snappy", "lz4"):
            raise ConfigError(f"unknown large-message-handle-compression {self.large_message_handle_compression!r}")
        if self.binary_encoding_method not in ("base64", "hex"):
            raise ConfigError(f"binary-encoding-method must be base64 or hex, not {self.binary_encoding_method!r}")
        if self.max_message_bytes <= 0 or self.max_batch_size <= 0:
            raise ConfigError("max-message-bytes and max-batch-size must be positive")
        if self.debezium_include_start_ts and self.protocol != "debezium":
            # TiCDC's Validate: include-start-ts only with protocol debezium.
            raise ConfigError("debezium-include-start-ts needs protocol=debezium")
        if self.content_compatible:
            self.only_output_updated_columns = True

    @property
    def tiflow(self) -> bool:
        return self.compat == "tiflow"

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CodecOptions:
        """Build from TiCDC-style keys (``enable-tidb-extension=true``); strings are coerced."""
        known = {f.name: f for f in fields(cls) if f.name != "clock"}
        kwargs: dict[str, Any] = {}
        for raw_key, raw in values.items():
            key = raw_key.replace("-", "_").lower()
            if key == "output_old_value" and values.get("protocol") == "csv":
                key = "csv_output_old_value"
            if key not in known:
                raise ConfigError(f"unknown codec option {raw_key!r}")
            default = getattr(cls(), key)
            kwargs[key] = _coerce(raw_key, raw, default)
        return cls(**kwargs)


def _coerce(name: str, raw: Any, default: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if isinstance(default, bool):
        if raw.lower() in ("true", "1", "yes", "on"):
            return True
        if raw.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"option {name!r} needs true/false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"option {name!r} needs an integer, got {raw!r}") from None
    return raw
