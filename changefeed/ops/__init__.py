"""Running changefeed day to day: preflight checks, structured logs, status and metrics.

Each submodule is imported on its own (``changefeed.ops.metrics`` needs prometheus-client,
``changefeed.ops.preflight`` PyMySQL and confluent-kafka), so nothing here is imported eagerly.
"""
