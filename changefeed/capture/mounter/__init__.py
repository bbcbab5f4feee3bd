"""TiDB's mounter: TiKV record keys + row values (v2/v1) + table schemas -> row change events.

Entry points: `Catalog.load` (table versions), `Mounter` (records -> events), `read_file`
(JSONL/Parquet records files) and `decode_batch` (Arrow record batches, for Spark).
"""

from .catalog import Catalog, CatalogEntry, TableVersion, parse_table_info
from .keys import KeyKind, RecordKey, classify_key, decode_record_key, strip_keyspace
from .mounter import KVRecord, Mounter
from .records import batch_records, decode_batch, detect_encoding, jsonl_records, read_file, record_from_object
from .rowcodec import RowDecoder

__all__ = [
    "Catalog",
    "CatalogEntry",
    "KVRecord",
    "KeyKind",
    "Mounter",
    "RecordKey",
    "RowDecoder",
    "TableVersion",
    "batch_records",
    "classify_key",
    "decode_batch",
    "decode_record_key",
    "detect_encoding",
    "jsonl_records",
    "parse_table_info",
    "read_file",
    "record_from_object",
    "strip_keyspace",
]
