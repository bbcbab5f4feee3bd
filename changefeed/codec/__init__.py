"""TiCDC's protocols: each an `Encoder` and a `Decoder` behind the small interface in `base`.

Each protocol is a package (``open_protocol/``, ``canal_json/``, ``simple/``, ``debezium/``,
``csv/``) whose ``__init__.py`` declares it with a `CodecSpec` named ``SPEC``. The registry below
maps a protocol name to its package and imports it on first use (a reader of one protocol does
not pay for the others).
"""

from __future__ import annotations

from importlib import import_module

from ..errors import ConfigError
from .base import CodecSpec, Decoder, Encoder, Message, Transport
from .options import PROTOCOLS, CodecOptions

# protocol -> the package declaring it; its SPEC is loaded on first use.
_PACKAGES: dict[str, str] = {
    "open-protocol": "changefeed.codec.open_protocol",
    "canal-json": "changefeed.codec.canal_json",
    "simple": "changefeed.codec.simple",
    "csv": "changefeed.codec.csv",
    "debezium": "changefeed.codec.debezium",
}


def spec(protocol: str) -> CodecSpec:
    """The declaration of ``protocol``; ConfigError when it is not one of ours."""
    try:
        package = _PACKAGES[protocol]
    except KeyError:
        raise ConfigError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}") from None
    declared: CodecSpec = import_module(package).SPEC
    return declared


def specs() -> list[CodecSpec]:
    """Every protocol's declaration, in `PROTOCOLS` order."""
    return [spec(name) for name in PROTOCOLS]


def protocols_for(transport: Transport) -> tuple[str, ...]:
    """The protocols that travel over ``transport``, in `PROTOCOLS` order."""
    return tuple(s.name for s in specs() if s.supports(transport))


def require_transport(protocol: str, transport: Transport, what: str) -> None:
    """The one protocol-vs-transport check: ConfigError ``"<what> <the protocols>, not <protocol>"``
    (``what``: e.g. ``"a kafka:// sink writes"``) unless ``protocol`` declares ``transport``."""
    if protocol not in _PACKAGES or not spec(protocol).supports(transport):
        raise ConfigError(f"{what} {', '.join(protocols_for(transport))}, not {protocol!r}")


def make_encoder(options: CodecOptions) -> Encoder:
    return spec(options.protocol).encoder(options)


def make_decoder(options: CodecOptions) -> Decoder:
    return spec(options.protocol).decoder(options)


__all__ = [
    "CodecOptions",
    "CodecSpec",
    "Decoder",
    "Encoder",
    "Message",
    "make_decoder",
    "make_encoder",
    "protocols_for",
    "require_transport",
    "spec",
    "specs",
]
