"""TiCDC Open Protocol (``protocol=open-protocol``): batched key/value messages of JSON events.

See docs/protocols/open-protocol.md for the format as implemented here.
"""

from .decoder import OpenProtocolDecoder
from .encoder import OpenProtocolEncoder
from .goquote import go_quote, go_unquote

__all__ = ["OpenProtocolDecoder", "OpenProtocolEncoder", "go_quote", "go_unquote"]
