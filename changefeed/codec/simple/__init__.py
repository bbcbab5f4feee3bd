"""TiCDC's Simple protocol (``protocol=simple``, TiCDC >= v8.0) in its JSON and Avro encodings.

See docs/protocols/simple.md for the format as implemented here.
"""

from .codec import DEFAULT_MAX_PENDING_MESSAGES, SimpleDecoder, SimpleEncoder
from .common import SimpleFormatError

__all__ = ["DEFAULT_MAX_PENDING_MESSAGES", "SimpleDecoder", "SimpleEncoder", "SimpleFormatError"]
