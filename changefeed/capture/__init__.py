"""Sources of change events: MySQL/MariaDB binlogs (``binlog``) and TiDB KV records (``mounter``).

A source turns its input into the canonical model (`changefeed.model`) and nothing else: it knows
no codec, sink or Spark.
"""
