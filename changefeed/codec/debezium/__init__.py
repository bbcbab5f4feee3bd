"""TiCDC's Debezium protocol (``protocol=debezium``, JSON mode): debezium.md, docs/protocols/debezium.md."""

from ..base import CodecSpec
from .decoder import DebeziumDecoder
from .encoder import DebeziumEncoder

SPEC = CodecSpec("debezium", DebeziumEncoder, DebeziumDecoder, frozenset({"kafka"}))

__all__ = ["SPEC", "DebeziumDecoder", "DebeziumEncoder"]
