"""Spark wiring: the only package that imports pyspark (lazily, inside its functions)."""

from changefeed.spark.session import MARIADB_JDBC_DRIVER, MARIADB_JDBC_JAR, jdbc_url, spark_session

__all__ = ["MARIADB_JDBC_DRIVER", "MARIADB_JDBC_JAR", "jdbc_url", "spark_session"]
