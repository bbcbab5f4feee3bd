"""TiCDC's protocols: each an `Encoder` and a `Decoder` behind the small interface in `base`."""

from __future__ import annotations

from importlib import import_module

from ..errors import ConfigError
from .base import Decoder, Encoder, Message
from .options import PROTOCOLS, CodecOptions

# protocol -> (module, encoder class, decoder class); imported on first use.
_REGISTRY: dict[str, tuple[str, str, str]] = {
    "open-protocol": ("changefeed.codec.open_protocol", "OpenProtocolEncoder", "OpenProtocolDecoder"),
    "canal-json": ("changefeed.codec.canal_json", "CanalJSONEncoder", "CanalJSONDecoder"),
    "simple": ("changefeed.codec.simple", "SimpleEncoder", "SimpleDecoder"),
    "csv": ("changefeed.codec.csv", "CSVEncoder", "CSVDecoder"),
    "debezium": ("changefeed.codec.debezium", "DebeziumEncoder", "DebeziumDecoder"),
}


def _load(protocol: str, which: int) -> type:
    try:
        entry = _REGISTRY[protocol]
    except KeyError:
        raise ConfigError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}") from None
    cls: type = getattr(import_module(entry[0]), entry[which])
    return cls


def make_encoder(options: CodecOptions) -> Encoder:
    encoder: Encoder = _load(options.protocol, 1)(options)
    return encoder


def make_decoder(options: CodecOptions) -> Decoder:
    decoder: Decoder = _load(options.protocol, 2)(options)
    return decoder


__all__ = ["CodecOptions", "Decoder", "Encoder", "Message", "make_decoder", "make_encoder"]
