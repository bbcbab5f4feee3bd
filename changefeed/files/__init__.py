"""Files whose names come from data: how a schema or table name becomes a path element (`paths`),
and the storage sink's directory layout, schema files and index files (`layout`).

Why a package of its own: the writers (`changefeed.sink`: the storage and Parquet sinks) and the
readers (`changefeed.consume.storage`) both follow these rules, and neither may import the other's
side of them.
"""
