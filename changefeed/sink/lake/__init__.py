"""Lakehouse targets: Delta Lake (``delta://DIR``) and Apache Iceberg (``iceberg://DIR``) tables.

See docs/lakehouse.md. The formats' libraries are imported only by the module of each format.
"""
