"""Codec options in TiCDC's own words (sink-uri query / ``[sink]`` config keys).

One typed object for every protocol; each codec reads the options that concern it. Names map
one-to-one to TiCDC's keys with ``-`` turned into ``_`` (`from_mapping` accepts either spelling).
"""

from __future__ import annotations

import argparse
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


def _cli(help_text: str, choices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A field's ``--option`` help and choices for `CodecOptions.add_arguments`."""
    return {"help": help_text, "choices": choices}


@dataclass(slots=True)
class CodecOptions:
    protocol: str = field(default="canal-json", metadata=_cli("which TiCDC protocol", PROTOCOLS))
    # Which TiCDC line to imitate byte for byte: "ticdc" (new architecture, default) or "tiflow".
    compat: str = field(default="ticdc", metadata=_cli("which TiCDC line to match", ("ticdc", "tiflow")))
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_batch_size: int = field(default=16, metadata=_cli("open-protocol: rows per Kafka message"))
    enable_tidb_extension: bool = field(default=False, metadata=_cli("canal-json _tidb and TIDB_WATERMARK"))
    only_output_updated_columns: bool = False
    delete_only_output_handle_key_columns: bool = False
    # Open Protocol "p", Debezium "before" on UPDATE ([sink.<protocol>] output-old-value)
    output_old_value: bool = field(default=True, metadata=_cli("open-protocol, debezium"))
    # canal-json: full mysqlType text, implies only-updated-columns
    content_compatible: bool = field(default=False, metadata=_cli("canal-json full mysqlType text"))
    output_row_key: bool = field(default=False, metadata=_cli("canal-json _tidb.rowkey"))
    encoding_format: str = field(default="json", metadata=_cli("simple protocol encoding", ("json", "avro")))
    large_message_handle_option: str = field(
        default="none", metadata=_cli("", ("none", "handle-key-only", "claim-check"))
    )
    large_message_handle_compression: str = field(default="none", metadata=_cli("", ("none", "snappy", "lz4")))
    claim_check_storage_uri: str = ""
    claim_check_raw_value: bool = False
    # TIMESTAMP values are rendered in this zone; Simple's `location`
    time_zone: str = field(default="UTC", metadata=_cli("TIMESTAMP values in this zone"))
    # Debezium: TiCDC's server cluster-id names the source and the schemas; the two switches.
    cluster_id: str = field(default="default", metadata=_cli("debezium: TiCDC's server cluster-id"))
    debezium_disable_schema: bool = field(default=False, metadata=_cli("debezium: no schema sections"))
    debezium_include_start_ts: bool = field(default=False, metadata=_cli("debezium: source.start_ts"))
    # CSV ([sink.csv]) and the storage sink's line terminator.
    delimiter: str = field(default=",", metadata=_cli("csv"))
    quote: str = field(default='"', metadata=_cli("csv; empty for escape mode"))
    null: str = field(default="\\N", metadata=_cli("csv null string"))
    include_commit_ts: bool = field(default=False, metadata=_cli("csv"))
    binary_encoding_method: str = field(default="base64", metadata=_cli("csv", ("base64", "hex")))
    csv_output_old_value: bool = field(default=False, metadata=_cli("csv: the old row of an UPDATE as a D line"))
    output_field_header: bool = field(default=False, metadata=_cli("csv: a header line"))
    terminator: str = field(default="\r\n", metadata=_cli("csv/storage line terminator"))
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

    def to_mapping(self) -> dict[str, str]:
        """The options that differ from the defaults as TiCDC-style strings, `from_mapping`'s inverse
        (what travels as Spark data source options); ``protocol`` always."""
        defaults = CodecOptions()
        out = {"protocol": self.protocol}
        for f in _OPTION_FIELDS:
            value = getattr(self, f.name)
            if f.name == "output_old_value" and self.protocol == "csv":
                continue  # `from_mapping` reads csv's output-old-value as csv_output_old_value (TiCDC's [sink.csv])
            if value != getattr(defaults, f.name):
                out[f.name.replace("_", "-")] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """One ``--option`` per field (``--no-x`` for a switch that is on by default); see `from_args`."""
        for f in _OPTION_FIELDS:
            flag = "--" + f.name.replace("_", "-")
            help_text: str | None = f.metadata.get("help") or None
            choices: tuple[str, ...] | None = f.metadata.get("choices") or None
            if f.name == "protocol":
                parser.add_argument(flag, required=True, choices=choices, help=help_text)
            elif isinstance(f.default, bool):
                if f.default:
                    parser.add_argument(
                        flag.replace("--", "--no-", 1), dest=f.name, action="store_false", help=help_text
                    )
                else:
                    parser.add_argument(flag, action="store_true", help=help_text)
            else:
                kind = int if isinstance(f.default, int) else str
                parser.add_argument(flag, type=kind, default=f.default, choices=choices, help=help_text)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CodecOptions:
        """The options `add_arguments` put on ``args``."""
        return cls(**{f.name: getattr(args, f.name) for f in _OPTION_FIELDS})


#: Every field but the clock, in declaration order: the option list, written once (above).
_OPTION_FIELDS = tuple(f for f in fields(CodecOptions) if f.name != "clock")


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
