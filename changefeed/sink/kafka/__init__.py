"""Kafka sink: TiCDC's MQ sink behaviour (routing, batching, broadcast, BOOTSTRAP, acknowledged position)."""

from .bootstrap import BootstrapPolicy
from .progress import AckTracker, FlushedPosition
from .sink import KafkaSink, KafkaSinkConfig
from .topics import TopicManager

__all__ = ["AckTracker", "BootstrapPolicy", "FlushedPosition", "KafkaSink", "KafkaSinkConfig", "TopicManager"]
