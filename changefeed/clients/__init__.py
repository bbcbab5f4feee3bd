"""The edge to the outside services: the only importers of PyMySQL and confluent-kafka.

`mysql`: connections (TLS modes, error classes), ``mysql://`` URLs (`MySQLParams`) and the binlog
status queries every MySQL-side component asks. `kafka`: the confluent-kafka classes, imported
lazily by Kafka paths only (importing a sink or the config loads no librdkafka). `kafkauri`: the
``kafka://`` URI and its TLS/SASL settings as librdkafka takes them.
"""
