"""TiCDC's Canal-JSON protocol (``protocol=canal-json``); see docs/protocols/canal-json.md."""

from .decoder import CanalJSONDecoder
from .encoder import CanalJSONEncoder
from .mysqltype import default_mysql_type, full_mysql_type, parse_mysql_type

__all__ = ["CanalJSONDecoder", "CanalJSONEncoder", "default_mysql_type", "full_mysql_type", "parse_mysql_type"]
