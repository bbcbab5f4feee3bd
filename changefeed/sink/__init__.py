"""Destinations: a storage directory in TiCDC's layout, Kafka, and MySQL-compatible databases."""
