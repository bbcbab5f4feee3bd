"""Consuming TiCDC-protocol topics: ordering, dedupe, resolved-ts gating, schema cache."""

from .merge import MergeStats, PartitionMerger, row_identity
from .source import KafkaSource, KafkaSourceConfig, KafkaSourceError

__all__ = ["KafkaSource", "KafkaSourceConfig", "KafkaSourceError", "MergeStats", "PartitionMerger", "row_identity"]
