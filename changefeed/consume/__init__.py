"""The read side: a storage directory (`storage`), a Kafka topic (`kafka`: the consumer factory and
offset ranges; `source.KafkaSource`), and the cross-partition merge (`merge`: ordering, dedupe,
resolved-ts gating)."""

from .merge import MergeStats, PartitionMerger, row_identity
from .source import KafkaSource, KafkaSourceConfig, KafkaSourceError

__all__ = ["KafkaSource", "KafkaSourceConfig", "KafkaSourceError", "MergeStats", "PartitionMerger", "row_identity"]
