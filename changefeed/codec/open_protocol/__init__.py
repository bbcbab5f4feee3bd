"""TiCDC Open Protocol (``protocol=open-protocol``): batched key/value messages of JSON events.

See docs/protocols/open-protocol.md for the format as implemented here.
"""

from ..base import CodecSpec
from .blocks import OpenProtocolBlockDecoder
from .decoder import OpenProtocolDecoder
from .encoder import OpenProtocolEncoder

SPEC = CodecSpec("open-protocol", OpenProtocolEncoder, OpenProtocolDecoder, frozenset({"kafka"}))

__all__ = ["SPEC", "OpenProtocolBlockDecoder", "OpenProtocolDecoder", "OpenProtocolEncoder"]
