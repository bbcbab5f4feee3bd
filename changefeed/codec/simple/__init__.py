"""TiCDC's Simple protocol (``protocol=simple``, TiCDC >= v8.0) in its JSON and Avro encodings.

See docs/protocols/simple.md for the format as implemented here.
"""

from ..base import CodecSpec
from .common import SimpleFormatError
from .decoder import DEFAULT_MAX_PENDING_MESSAGES, SimpleDecoder
from .encoder import SimpleEncoder

SPEC = CodecSpec("simple", SimpleEncoder, SimpleDecoder, frozenset({"kafka"}))

__all__ = ["DEFAULT_MAX_PENDING_MESSAGES", "SPEC", "SimpleDecoder", "SimpleEncoder", "SimpleFormatError"]
