"""The changefeed TOML config and the CLI/data source option checks (no JVM needed)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from changefeed.cli.run import default_interval, spark_interval
from changefeed.config import load_config, parse_config, parse_sink_uri
from changefeed.errors import ConfigError
from changefeed.spark.datasource import BinlogInput, KafkaInput, SourceOptions

ROOT = Path(__file__).resolve().parents[2]
GOOD = """
changefeed-id = "cf-1"
sink-uri = "file:///tmp/cdc?protocol=csv&date-separator=none"
time-zone = "Asia/Shanghai"
[source]
type = "binlog-files"
path = "binlogs"
[filter]
rules = ["shop.*", "!shop.tmp*"]
[sink]
terminator = "\\n"
[sink.csv]
include-commit-ts = true
delimiter = "|"
[[sink.dispatchers]]
matcher = ["shop.*"]
partition = "table"
"""


def test_full_config_parses_into_typed_options(tmp_path: Path) -> None:
    cfg = parse_config(GOOD, tmp_path)
    assert cfg.changefeed_id == "cf-1"
    assert cfg.source.path == tmp_path / "binlogs"
    assert cfg.filter.rules == ["shop.*", "!shop.tmp*"]
    assert cfg.sink_uri.path == Path("/tmp/cdc")
    codec = cfg.codec_options()
    assert (codec.protocol, codec.delimiter, codec.include_commit_ts, codec.terminator) == ("csv", "|", True, "\n")
    assert codec.time_zone == "Asia/Shanghai"
    assert cfg.storage_options().date_separator == "none"
    assert cfg.sink.dispatchers[0].partition == "table"


def test_bundled_example_points_at_the_fixtures() -> None:
    cfg = load_config(ROOT / "examples/embedded.toml")
    assert cfg.source.path == ROOT / "tests/fixtures/binlog/full"
    assert cfg.codec_options().enable_tidb_extension
    assert cfg.sink_uri.path == ROOT / "demo-output/storage"


def test_live_example_reads_a_server_into_mysql() -> None:
    cfg = load_config(ROOT / "examples/live-mysql.toml")
    assert (cfg.source.type, cfg.source.url, cfg.source.password_env) == (
        "mysql",
        "mysql://cdc@127.0.0.1:3306",
        "CDC_SOURCE_PASSWORD",
    )
    target, sink = cfg.mysql_sink()
    assert (target.host, target.port, target.user, target.options) == ("127.0.0.1", 3307, "root", {})
    assert sink.workers == 4 and sink.changefeed_id == "live-mysql"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('sink-uri = "file:///x"\nsink-url = 1\n[source]\npath="p"', "unknown key 'sink-url' in the top level"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\nport=1', "unknown key 'port' in [source]"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[sink]\nprotocl="csv"', "unknown key 'protocl' in [sink]"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[sink.csv]\nquotes="x"', "unknown key 'quotes' in [sink.csv]"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[filter]\nrule=["a.*"]', "unknown key 'rule' in [filter]"),
        ('sink-uri = "mysql://root@127.0.0.1:3306/?bogus=1"\n[source]\npath="p"', "unknown MySQL URL option"),
        ('sink-uri = "mysql://root:pw@h/?worker-count=0"\n[source]\npath="p"', "worker-count must be a positive"),
        ('sink-uri = "mysql+ssl://root@h/"\n[source]\npath="p"', "ssl-ca=FILE"),
        ('sink-uri = "file:///x"\n[source]\ntype="mysql"', "[source] url is required"),
        ('sink-uri = "file:///x"\n[source]\ntype="mysql"\nurl="mysql://u@h"\npath="p"', "unknown key 'path'"),
        ('sink-uri = "file:///x"\n[source]\ntype="mysql"\nurl="http://h"', "expected mysql://USER"),
        ('sink-uri = "file:///x"\n[source]\ntype="mysql"\nurl="mysql://h/?charset=x"', "takes no parameters"),
        (
            'sink-uri = "file:///x"\n[source]\ntype="mysql"\nurl="mysql://u:secret@h"\npassword-env="PW"',
            "mysql://u:***@h' holds a password",
        ),
        ('sink-uri = "kafka://127.0.0.1:9092/t?protocol=csv"\n[source]\npath="p"', "a kafka:// sink writes"),
        ('sink-uri = "kafka://127.0.0.1:9092?protocol=canal-json"\n[source]\npath="p"', "kafka://HOST:PORT"),
        (
            'sink-uri = "kafka://h:1/t?partitions=3"\n[source]\npath="p"',
            "unknown kafka sink-uri parameter(s) partitions",
        ),
        ('sink-uri = "kafka://h:1/t?partition-num=x"\n[source]\npath="p"', "partition-num must be an integer"),
        ('sink-uri = "s3://bucket/x"\n[source]\npath="p"', "unsupported sink-uri scheme 's3'"),
        (
            'sink-uri = "file:///x?protocol=open-protocol"\n[source]\npath="p"',
            "a file:// sink writes canal-json, csv, not 'open-protocol'",
        ),
        (  # TiCDC's storage sink has no Debezium protocol either
            'sink-uri = "file:///x?protocol=debezium"\n[source]\npath="p"',
            "a file:// sink writes canal-json, csv, not 'debezium'",
        ),
        ('sink-uri = "file:///x?workers=4"\n[source]\npath="p"', "unknown file sink-uri parameter(s) workers"),
        ('sink-uri = "file:///x?protocol=csv"\n[source]\npath="p"\n[sink]\nprotocol="canal-json"', "give one"),
        ('[source]\npath="p"', "sink-uri is required"),
        ('sink-uri = "file:///x"', "[source] path is required"),
        ('sink-uri = "file:///x"\n[source]\ntype="mysqld"', "[source] type must be one of binlog-files, mysql"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[filter]\nrules=["nodot"]', "must look like schema.table"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[sink.csv]\ninclude-commit-ts="yes"', "true or false"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[sink]\ndate-separator="week"', "date-separator"),
        ('sink-uri = "file:///x"\n[source]\npath="p"\n[[sink.dispatchers]]\npartition="ts"', "matcher"),
        ('changefeed-id = "a b"\nsink-uri = "file:///x"\n[source]\npath="p"', "changefeed-id"),
        ("sink-uri = ", "invalid TOML"),
    ],
)
def test_config_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, Path("/base"), where="cf.toml")
    assert message in str(info.value)
    assert "cf.toml" in str(info.value)


def test_live_source_and_mysql_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (
        'changefeed-id = "live"\ntime-zone = "Asia/Shanghai"\n'
        'sink-uri = "tidb://app:sink%40pw@10.0.0.2:4000/?worker-count=8&safe-mode=true&max-txn-row=64"\n'
        '[source]\ntype = "mysql"\nurl = "mysql://cdc%20user@10.0.0.1:3307"\npassword-env = "CF_PW"\n'
        'start-position = "latest"\n'
    )
    cfg = parse_config(text)
    assert cfg.source.is_live and cfg.sink_uri.is_mysql and not cfg.sink_uri.is_kafka
    target, sink = cfg.mysql_sink()
    assert (target.user, target.password, target.host, target.port, target.options) == (
        "app",
        "sink@pw",
        "10.0.0.2",
        4000,
        {},
    )
    assert (sink.workers, sink.safe_mode, sink.batch_rows, sink.changefeed_id, sink.time_zone) == (
        8,
        True,
        64,
        "live",
        "Asia/Shanghai",
    )
    monkeypatch.delenv("CF_PW", raising=False)
    with pytest.raises(ConfigError, match="password-env names 'CF_PW'"):
        cfg.source.data_source_options()
    monkeypatch.setenv("CF_PW", "p@ss:w/rd")
    # The password travels in its own option (Spark redacts it), never inside the url.
    assert cfg.source.data_source_options() == {
        "input": "binlog",
        "url": "mysql://cdc%20user@10.0.0.1:3307",
        "password": "p@ss:w/rd",
        "startPosition": "latest",
    }
    files = parse_config('sink-uri = "file:///x"\n[source]\npath = "/b"\nstart-position = "binlog.000002:4"\n')
    assert files.source.data_source_options() == {"input": "binlog", "path": "/b", "startPosition": "binlog.000002:4"}


def test_binlog_start_positions() -> None:
    from changefeed.capture.binlog import BinlogPosition  # noqa: PLC0415
    from changefeed.spark.datasource.binlog import parse_start  # noqa: PLC0415

    assert parse_start("LATEST") == "latest" and parse_start(" earliest") == "earliest"
    assert parse_start("binlog.000003:1234") == BinlogPosition("binlog.000003", 1234)
    assert parse_start("gtid:0-1-5,1-2-7") == BinlogPosition("", 4, gtid="0-1-5,1-2-7")
    assert parse_start('{"file": "b.000001", "pos": 9, "clock": 3}') == BinlogPosition("b.000001", 9, clock=3)
    with pytest.raises(ConfigError, match="needs a GTID set"):
        parse_start("gtid:")
    with pytest.raises(ConfigError, match="needs a live source"):
        BinlogInput(SourceOptions.parse({"input": "binlog", "path": str(ROOT), "startposition": "gtid:0-1-5"}))
    with pytest.raises(ConfigError, match=r"a path \(binlog files\) or a url \(a live server\), not both"):
        BinlogInput(SourceOptions.parse({"input": "binlog", "path": "x", "url": "mysql://h"}))
    with pytest.raises(ConfigError, match=r"password is given twice.*\(u@h:3306\)") as info:
        BinlogInput(SourceOptions.parse({"input": "binlog", "url": "mysql://u:Secret1@h", "password": "Secret2"}))
    assert "Secret" not in str(info.value)


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")


def test_relative_file_uri_resolves_against_the_given_base(tmp_path: Path) -> None:
    assert parse_sink_uri("file://out/dir?protocol=csv", tmp_path).path == tmp_path / "out/dir"


@pytest.mark.parametrize(
    ("text", "spark"), [("1s", "1000 milliseconds"), ("500ms", "500 milliseconds"), ("2m", "120000 milliseconds")]
)
def test_trigger_intervals(text: str, spark: str) -> None:
    assert spark_interval(text) == spark


@pytest.mark.parametrize(
    ("scheme", "interval"),
    [("kafka", "300ms"), ("mysql", "300ms"), ("tidb", "300ms"), ("file", "1s"), ("parquet", "1s"), ("delta", "1s")],
)
def test_default_trigger_interval_by_sink(scheme: str, interval: str) -> None:
    # Low lag where a row goes on to another job or a database; fewer, larger files and table commits elsewhere.
    assert default_interval(scheme) == interval


def test_bad_trigger_interval() -> None:
    with pytest.raises(ConfigError, match="bad interval"):
        spark_interval("soon")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"input": "nosuch", "path": "x"}, "option input must be one of"),
        ({"input": "binlog"}, "needs a path"),
        ({"input": "binlog", "path": "x", "protocol": "csv"}, "unknown option(s) for input binlog: protocol"),
        ({"input": "binlog", "path": "x", "maxeventspertrigger": "many"}, "maxEventsPerTrigger"),
        ({"input": "storage", "path": "x", "table": "nodot"}, "schema.table"),
        ({"input": "storage", "path": "x", "timezone": "Mars/Base"}, "unknown time zone"),
    ],
)
def test_data_source_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        SourceOptions.parse(options)
    assert message in str(info.value)


def test_kafka_sink_uri() -> None:
    text = (
        'sink-uri = "kafka://127.0.0.1:9092,127.0.0.1:9093/cdc?protocol=open-protocol&partition-num=3'
        '&max-message-bytes=1048576&max-batch-size=4"\n[source]\npath="/p"\n'
        '[[sink.dispatchers]]\nmatcher = ["cf.*"]\npartition = "table"'
    )
    kafka = parse_config(text).kafka_sink_config()
    assert (kafka.bootstrap_servers, kafka.topic, kafka.partition_num) == ("127.0.0.1:9092,127.0.0.1:9093", "cdc", 3)
    assert (kafka.codec.protocol, kafka.codec.max_message_bytes, kafka.codec.max_batch_size) == (
        "open-protocol",
        1048576,
        4,
    )
    assert len(kafka.rules) == 1


def test_debezium_options_from_the_config_file() -> None:
    """``cluster-id`` (TiCDC's server option), ``[sink.debezium]`` and ``[sink] debezium-disable-schema``
    become the codec options the Kafka sink's encoder is built from (and pickled into executors with);
    sink-uri parameters win over the file, as in TiCDC. tests/spark/test_kafka_debezium.py checks the
    messages `changefeed run` writes with them."""
    uri = "kafka://127.0.0.1:9092/cdc?protocol=debezium&enable-tidb-extension=true"
    head = f'cluster-id = "prod-1"\nsink-uri = "{uri}"\n[source]\npath="/p"\n'
    text = head + "[sink]\ndebezium-disable-schema = true\n"
    text += "[sink.debezium]\noutput-old-value = false\ninclude-start-ts = true\n"
    codec = parse_config(text).kafka_sink_config().codec
    assert (codec.cluster_id, codec.output_old_value, codec.debezium_include_start_ts) == ("prod-1", False, True)
    assert codec.debezium_disable_schema and codec.enable_tidb_extension
    assert pickle.loads(pickle.dumps(codec)) == codec
    # Defaults: TiCDC's cluster "default", old values on, schemas on.
    codec = parse_config(f'sink-uri = "{uri}"\n[source]\npath="/p"\n').kafka_sink_config().codec
    assert (codec.cluster_id, codec.output_old_value, codec.debezium_include_start_ts) == ("default", True, False)
    assert not codec.debezium_disable_schema
    # The URI's debezium-disable-schema overrides [sink]; [sink.debezium] is the Debezium codec's alone.
    text = head.replace("true", "true&debezium-disable-schema=false", 1) + "[sink]\ndebezium-disable-schema = true\n"
    assert not parse_config(text).kafka_sink_config().codec.debezium_disable_schema
    other = 'sink-uri = "kafka://h:1/t?protocol=open-protocol"\n[source]\npath="/p"\n[sink.debezium]\n'
    assert parse_config(other + "output-old-value = false\n").kafka_sink_config().codec.output_old_value
    # The Kafka data source takes them as options (Spark lower-cases the keys).
    options = {"input": "kafka", "bootstrap.servers": "h:1", "topic": "t", "protocol": "debezium"}
    options |= {"Enable-TiDB-Extension": "true", "Cluster-Id": "c", "debezium-disable-schema": "true"}
    codec = KafkaInput(SourceOptions.parse(options)).codec
    assert (codec.protocol, codec.cluster_id, codec.debezium_disable_schema) == ("debezium", "c", True)


_START_TS = "[sink.debezium]\ninclude-start-ts = true\n"


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("[sink.debezium]\nold-value = false\n", "unknown key 'old-value' in \\[sink.debezium\\]"),
        ("[sink.debezium]\noutput-old-value = 3\n", "output-old-value must be true or false"),
        ("[sink]\ndebezium = 1\n", "\\[sink.debezium\\] must be a table"),
    ],
)
def test_debezium_config_errors(tail: str, message: str) -> None:
    text = 'sink-uri = "kafka://h:1/t?protocol=debezium"\n[source]\npath="/p"\n' + tail
    with pytest.raises(ConfigError, match=message):
        parse_config(text)
    with pytest.raises(ConfigError, match="cluster-id must not be empty"):
        parse_config('cluster-id = ""\nsink-uri = "kafka://h:1/t?protocol=debezium"\n[source]\npath="/p"\n')
    # TiCDC's Validate: include-start-ts only with protocol debezium.
    with pytest.raises(ConfigError, match="needs protocol=debezium"):
        parse_config('sink-uri = "kafka://h:1/t?protocol=simple"\n[source]\npath="/p"\n' + _START_TS)


_KAFKA = {"input": "kafka", "bootstrap.servers": "127.0.0.1:1", "topic": "t"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"input": "kafka", "topic": "t"}, "needs options bootstrap.servers"),
        ({**_KAFKA, "protocol": "csv"}, "input kafka reads open-protocol, canal-json, simple, debezium, not .csv."),
        ({**_KAFKA, "protocol": "canal-json"}, "enable-tidb-extension=true"),
        ({**_KAFKA, "protocol": "open-protocol", "table": "a.b"}, "no typed images"),
        ({**_KAFKA, "protocol": "open-protocol", "startingoffset": "earliest"}, "unknown codec option"),
    ],
)
def test_kafka_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KafkaInput(SourceOptions.parse(options))


def test_apply_kafka_source_uri() -> None:
    from changefeed.cli.apply import kafka_source  # noqa: PLC0415

    uri = "kafka://127.0.0.1:9092/cdc?protocol=canal-json&enable-tidb-extension=true&partition-num=3"
    assert kafka_source(uri) == {
        "input": "kafka",
        "bootstrap.servers": "127.0.0.1:9092",
        "topic": "cdc",
        "protocol": "canal-json",
        "enable-tidb-extension": "true",
    }
    with pytest.raises(ConfigError, match="unknown codec option"):
        kafka_source("kafka://h:1/t?protocol=open-protocol&bogus=1")
    with pytest.raises(ConfigError, match="TOPIC"):
        kafka_source("kafka://h:1?protocol=open-protocol")


def test_relative_tls_and_password_files_resolve_against_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like every path in the config file, a relative TLS or password file is relative to the file's directory."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "pw").write_text("s3cret\n")
    (conf / "pw").chmod(0o600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the current directory must not matter
    config = conf / "changefeed.toml"
    config.write_text(
        'sink-uri = "mysql://app@db:3306/?ssl-mode=verify-ca&ssl-ca=certs/ca.pem&password-file=pw"\n'
        '[source]\ntype = "mysql"\nurl = "mysql://cdc@up:3306?ssl-ca=certs/up-ca.pem&ssl-mode=verify-ca"\n'
        'password-file = "pw"\n'
    )
    cfg = load_config(config)
    assert cfg.source.password_file == str(conf / "pw")
    assert cfg.source.server().tls.ca == str(conf / "certs/up-ca.pem")
    assert cfg.source.data_source_options()["password"] == "s3cret"
    target, _ = cfg.mysql_sink()
    assert target.tls.ca == str(conf / "certs/ca.pem") and target.password == "s3cret"
    assert parse_sink_uri(cfg.sink_uri.uri).params["ssl-ca"] == str(conf / "certs/ca.pem")

    kafka = conf / "kafka.toml"
    kafka.write_text(
        'sink-uri = "kafka://b:9092/t?protocol=canal-json&ca=ca.pem&cert=/abs/c.pem&key=certs/../k.pem'
        '&sasl-mechanism=PLAIN&sasl-user=u&sasl-password-file=pw"\n[source]\npath = "/b"\n'
    )
    client = load_config(kafka).kafka_sink_config().client_config
    assert client["ssl.ca.location"] == str(conf / "ca.pem")
    assert client["ssl.certificate.location"] == "/abs/c.pem"  # absolute paths stay as they are
    assert client["ssl.key.location"] == str(conf / "k.pem")  # made absolute as [source] path is: resolved
    assert client["sasl.password"] == "s3cret"
    # On the command line (--sink-uri), relative means the current directory.
    assert parse_sink_uri("kafka://b:9092/t?ca=ca.pem", Path.cwd()).params["ca"] == str(elsewhere / "ca.pem")


def test_lake_sink_uri(tmp_path: Path) -> None:
    """``delta://DIR`` / ``iceberg://DIR`` in the config: a directory relative to the config file, the lake
    parameters checked at load (not in the job), ``flush-interval`` the trigger, as for the other sinks."""
    text = 'sink-uri = "delta://lake?mode=scd2&flush-interval=2s"\n[source]\npath="/p"\n'
    cfg = parse_config(text, tmp_path)
    assert cfg.sink_uri.is_lake and cfg.sink_uri.path == tmp_path / "lake"
    assert cfg.flush_interval == "2s"
    sink = cfg.lake_sink()()
    assert (sink.kind, sink.options.mode, sink.root) == ("delta", "scd2", tmp_path / "lake")
    assert parse_config('sink-uri = "iceberg:///abs/lake?catalog-uri=sqlite:///c.db"\n[source]\npath="/p"\n').sink_uri
    with pytest.raises(ConfigError, match="unknown: bogus"):
        parse_config('sink-uri = "delta://lake?bogus=1"\n[source]\npath="/p"\n', tmp_path)
    with pytest.raises(ConfigError, match="mode must be one of"):
        parse_config('sink-uri = "iceberg://lake?mode=merge"\n[source]\npath="/p"\n', tmp_path)
    with pytest.raises(ConfigError, match="names no directory"):
        parse_sink_uri("delta://")


def test_apply_table_for_the_pipeline(tmp_path: Path) -> None:
    """``[apply]``: the target and an optional checkpoint (relative to the config); the apply reads the
    sink-uri as the capture writes it, so only kafka:// and file:// sink-uris take one."""
    text = (
        'changefeed-id = "p"\nsink-uri = "kafka://127.0.0.1:9092/t?protocol=canal-json&enable-tidb-extension=true"\n'
        '[source]\npath="/p"\n[apply]\nto = "mysql://root@127.0.0.1:3307/"\ncheckpoint = "ck"\n'
    )
    cfg = parse_config(text, tmp_path)
    assert cfg.apply_to == "mysql://root@127.0.0.1:3307/" and cfg.apply_checkpoint == tmp_path / "ck"
    assert cfg.apply_source() == "kafka://127.0.0.1:9092/t?protocol=canal-json&enable-tidb-extension=true"
    files = parse_config(
        'sink-uri = "file://out?protocol=csv"\n[source]\npath="/p"\n[apply]\nto = "parquet://x"\n', tmp_path
    )
    assert files.apply_source() == f"file://{tmp_path / 'out'}?protocol=csv"
    with pytest.raises(ConfigError, match=r"unknown key 'from' in \[apply\]"):
        parse_config(text + 'from = "x"\n', tmp_path)
    with pytest.raises(ConfigError, match=r"\[apply\] to is required"):
        parse_config('sink-uri = "file://out"\n[source]\npath="/p"\n[apply]\n', tmp_path)
