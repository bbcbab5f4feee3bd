"""Sources of change events: MySQL/MariaDB binlogs (``binlog``); TiDB's KV mounter later.

A source turns its input into the canonical model (`changefeed.model`) and nothing else: it knows
no codec, sink or Spark.
"""
