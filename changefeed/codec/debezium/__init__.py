"""TiCDC's Debezium protocol (``protocol=debezium``, JSON mode): debezium.md, docs/protocols/debezium.md."""

from .decoder import DebeziumDecoder
from .encoder import DebeziumEncoder

__all__ = ["DebeziumDecoder", "DebeziumEncoder"]
