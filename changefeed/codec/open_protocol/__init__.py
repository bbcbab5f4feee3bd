"""TiCDC Open Protocol (``protocol=open-protocol``): batched key/value messages of JSON events.

See docs/protocols/open-protocol.md for the format as implemented here.
"""

from .blocks import OpenProtocolBlockDecoder
from .decoder import OpenProtocolDecoder
from .encoder import OpenProtocolEncoder
from .goquote import go_quote, go_unquote

__all__ = ["OpenProtocolBlockDecoder", "OpenProtocolDecoder", "OpenProtocolEncoder", "go_quote", "go_unquote"]
