"""Lakehouse sinks (Delta, Iceberg) on real tables in tmp_path."""
