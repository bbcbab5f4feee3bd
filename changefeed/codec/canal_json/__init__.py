"""TiCDC's Canal-JSON protocol (``protocol=canal-json``); see docs/protocols/canal-json.md."""

from ..base import CodecSpec
from .decoder import CanalJSONDecoder
from .encoder import CanalJSONEncoder
from .values import default_mysql_type, full_mysql_type, parse_mysql_type

SPEC = CodecSpec("canal-json", CanalJSONEncoder, CanalJSONDecoder, frozenset({"kafka", "storage"}))

__all__ = [
    "SPEC",
    "CanalJSONDecoder",
    "CanalJSONEncoder",
    "default_mysql_type",
    "full_mysql_type",
    "parse_mysql_type",
]
