"""The changefeed configuration file: TOML in TiCDC's vocabulary, parsed into typed dataclasses.

```toml
changefeed-id = "embedded"
sink-uri = "file:///data/cdc?protocol=canal-json&enable-tidb-extension=true"
time-zone = "UTC"

[source]                 # ours: where the changes come from
type = "binlog-files"    # or type = "mysql" with url = "mysql://USER@HOST:PORT" and password-env or password-file
                         # (TLS: url = "mysql://USER@HOST:PORT?ssl-mode=verify-ca&ssl-ca=/etc/cdc/ca.pem")
path = "/var/lib/mysql"

[filter]
rules = ["shop.*", "!shop.tmp_*"]

[sink]
protocol = "canal-json"
date-separator = "day"

[sink.csv]
include-commit-ts = true
```

Every table and key is checked: an unknown key is an error naming it (a typo must not silently
fall back to a default). Relative paths (``[source] path``, ``file://`` sink URIs without a
leading ``/``, the TLS and password files of URLs) are resolved against the config file's directory,
by one rule (`_config_path`). docs/configuration.md lists the keys.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .clients.kafkauri import KAFKA_SECURITY_PARAMS, KAFKA_WRITE_PARAMS, KafkaURI
from .clients.mysql import TLS_OPTIONS
from .codec import CodecOptions, require_transport
from .codec.csv import CSVFormat
from .dispatch.eventfilter import EventFilter, EventFilterRule
from .dispatch.onlineddl import OnlineDDL
from .dispatch.pipeline import EventPipeline
from .dispatch.route import Router, RouteRule
from .dispatch.router import DispatchRule
from .errors import CaptureError, ConfigError, typed
from .files.store import is_uri
from .model.tablefilter import TableFilter
from .secrets import mask_secrets, resolve_password
from .sink.lake import LAKE_SCHEMES, lake_sink
from .sink.storage.writer import StorageOptions
from .timezones import zone

if TYPE_CHECKING:
    from .capture.binlog.replica import ServerAddress
    from .clients.mysql import MySQLParams
    from .sink.base import Sink
    from .sink.kafka import KafkaSinkConfig
    from .sink.mysql import MySQLSinkConfig

SOURCE_TYPES = ("binlog-files", "mysql", "kv")
_SOURCE_KEYS = {
    "binlog-files": {"type", "path", "start-position"},
    "mysql": {"type", "url", "password-env", "password-file", "start-position"}
    | {"snapshot", "snapshot-chunk-size", "snapshot-on-demand-chunk-size", "snapshot-parallelism", "signal-table"},
    "kv": {"type", "path", "catalog"},
}
#: sink-uri schemes of the MySQL sink (TiCDC's; TiDB speaks the MySQL protocol).
MYSQL_SCHEMES = ("mysql", "tidb")
#: sink-uri query parameters of a ``file://`` storage sink.
FILE_URI_PARAMS = frozenset(
    {
        "protocol",
        "date-separator",
        "enable-partition-separator",
        "file-index-width",
        "file-size",
        "flush-interval",
        "enable-tidb-extension",
    }
)
#: sink-uri query parameters of a ``kafka://`` sink (TiCDC's names; TLS and SASL: `changefeed.clients.kafkauri`).
KAFKA_URI_PARAMS = (
    frozenset(
        {
            "protocol",
            "max-message-bytes",
            "max-batch-size",
            "enable-tidb-extension",
            "debezium-disable-schema",
            "debezium-include-start-ts",
        }
    )
    | KAFKA_WRITE_PARAMS
    | KAFKA_SECURITY_PARAMS
)
_CSV_KEYS = {
    "delimiter": str,
    "quote": str,
    "null": str,
    "include-commit-ts": bool,
    "binary-encoding-method": str,
    "output-old-value": bool,
    "output-field-header": bool,
}


def _check_keys(table: Mapping[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"unknown key {key!r} in {where} (expected one of: {', '.join(sorted(allowed))})")


@dataclass
class SourceConfig:
    """``[source]``: our addition to TiCDC's vocabulary (TiCDC's source is always its TiDB cluster).

    ``binlog-files`` reads ``path``; ``mysql`` reads a live server at ``url`` through the replica
    protocol, its password taken when it is run from the environment variable ``password-env`` or
    the owner-only file ``password-file`` (also as ``?password-env=`` / ``?password-file=`` on the
    URL), else ``MYSQL_PWD``, so the config file holds no secret. ``start-position`` is the binlog
    input's ``startPosition``. ``kv`` mounts TiDB KV change records (``path``: a JSONL/Parquet file or
    directory) with the TiDB table info in ``catalog`` (docs/mounter.md).
    """

    type: str = "binlog-files"
    path: Path = Path()
    url: str = ""
    password_env: str = ""
    password_file: str = ""
    start_position: str = ""
    catalog: Path | None = None
    #: Debezium's ``snapshot.mode`` (docs/snapshot.md): ``initial`` by default when no ``start-position``
    #: is given (a newcomer gets a copy of what the tables hold), ``never`` when one is (DM's
    #: incremental task from a position); "" until parsed.
    snapshot: str = ""
    snapshot_chunk_size: int | None = None
    snapshot_on_demand_chunk_size: int | None = None
    snapshot_parallelism: int | None = None
    #: Where a running changefeed watches for snapshot signals (``changefeed snapshot``, Debezium's
    #: signal table; docs/snapshot.md): None for ``changefeed.changefeed_signal``, "" for none.
    signal_table: str | None = None

    @property
    def is_live(self) -> bool:
        return self.type == "mysql"

    def server(self) -> ServerAddress:
        """The live source's address with its password (read now); never log it, log its str()."""
        from .capture.binlog.replica import ServerAddress  # noqa: PLC0415 - PyMySQL only for live sources

        address = ServerAddress.from_url(self.url)
        password = resolve_password(
            address.password or None, env=self.password_env, file=self.password_file, where="[source]"
        )
        return replace(address, password=password)

    def data_source_options(self, partial_images: bool = False) -> dict[str, str]:
        """The ``changefeed`` data source options of the ``binlog`` input (docs/spark.md).

        ``partial_images``: the sink takes rows without their unchanged columns (a lake sink).

        A live source's password travels as the ``password`` option, not inside ``url``: Spark
        redacts options named like passwords wherever it shows them.
        """
        if self.type == "kv":
            return {"input": "kv", "path": str(self.path), "catalog": str(self.catalog)}
        options = {"input": "binlog"}
        if self.is_live:
            a = self.server()
            options["url"] = a.url()  # with the TLS options, without the password
            if a.password:
                options["password"] = a.password
        else:
            options["path"] = str(self.path)
        if self.start_position:
            options["startPosition"] = self.start_position
        if self.is_live and partial_images:
            options["partialImages"] = "true"
        if self.is_live and self.snapshot_mode != "never":
            options["snapshot"] = self.snapshot_mode
        if self.is_live:  # a snapshot on demand reads chunks whatever the initial mode (`changefeed snapshot`)
            if self.snapshot_chunk_size:
                options["snapshotChunkSize"] = str(self.snapshot_chunk_size)
            if self.snapshot_on_demand_chunk_size:
                options["snapshotOnDemandChunkSize"] = str(self.snapshot_on_demand_chunk_size)
            if self.snapshot_parallelism:
                options["snapshotParallelism"] = str(self.snapshot_parallelism)
        return options

    @property
    def snapshot_mode(self) -> str:
        """``snapshot`` as configured, else its default (``initial`` without a start position; binlog files: never)."""
        if not self.is_live:
            return "never"
        return self.snapshot or ("never" if self.start_position else "initial")


@dataclass
class FilterConfig:
    """``[filter] rules``: TiDB table-filter patterns; the last matching pattern decides.

    ``[[filter.event-filters]]``: TiCDC's event filters (docs/routing.md, "Event filters")."""

    rules: list[str] = field(default_factory=lambda: ["*.*"])
    event_filters: list[EventFilterRule] = field(default_factory=list)


@dataclass
class CSVConfig:
    """``[sink.csv]``."""

    delimiter: str = ","
    quote: str = '"'
    null: str = "\\N"
    include_commit_ts: bool = False
    binary_encoding_method: str = "base64"
    output_old_value: bool = False
    output_field_header: bool = False


@dataclass
class DebeziumConfig:
    """``[sink.debezium]`` (TiCDC's names): ``before`` on UPDATE, ``source.start_ts``."""

    output_old_value: bool = True
    include_start_ts: bool = False


_DEBEZIUM_KEYS = {"output-old-value": bool, "include-start-ts": bool}


@dataclass
class SinkConfig:
    """``[sink]``: protocol, storage layout options, ``[sink.csv]``, ``[sink.debezium]``, ``[[sink.dispatchers]]``."""

    protocol: str | None = None
    terminator: str = "\r\n"
    date_separator: str = "day"
    enable_partition_separator: bool = True
    file_index_width: int = 20
    csv: CSVConfig = field(default_factory=CSVConfig)
    debezium: DebeziumConfig = field(default_factory=DebeziumConfig)
    debezium_disable_schema: bool = False
    dispatchers: list[DispatchRule] = field(default_factory=list)


@dataclass
class SinkURI:
    """A parsed ``sink-uri``: scheme, location (a directory for ``file``), query parameters."""

    scheme: str
    location: str
    params: dict[str, str]
    uri: str = ""  # as written (a mysql:// one may hold a password: show it through mask_secrets)

    @property
    def path(self) -> Path:
        return Path(self.location)

    @property
    def is_kafka(self) -> bool:
        return self.scheme == "kafka"

    @property
    def is_mysql(self) -> bool:
        return self.scheme in MYSQL_SCHEMES

    @property
    def is_lake(self) -> bool:
        return self.scheme in LAKE_SCHEMES


@dataclass
class ChangefeedConfig:
    changefeed_id: str
    sink_uri: SinkURI
    time_zone: str = "UTC"
    source: SourceConfig = field(default_factory=SourceConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    # DM's [[routes]] and TiCDC's routing dispatchers (docs/routing.md); shard-mode: DM's (optimistic or
    # pessimistic, the latter for a MySQL sink fed by a live source)
    routes: list[RouteRule] = field(default_factory=list)
    shard_mode: str = "optimistic"
    #: DM's ``online-ddl``: follow gh-ost / pt-osc migrations upstream (docs/routing.md, "Online DDL").
    online_ddl: bool = False
    #: TiCDC's server ``cluster-id``: the Debezium protocol's source name and schema names.
    cluster_id: str = "default"
    #: ``[apply]``: `changefeed pipeline` applies the sink-uri's topic or directory to ``to`` (docs/deploy.md).
    apply_to: str = ""
    apply_checkpoint: Path | str | None = None  # a directory or a Hadoop URI

    def apply_source(self) -> str:
        """The sink-uri as the apply job's ``--from``: the topic or directory the capture writes."""
        query = urlencode(list(self.sink_uri.params.items()))
        if not (self.sink_uri.is_kafka or self.sink_uri.scheme == "file"):
            raise ConfigError(
                f"[apply] reads what the capture writes: the sink-uri must be kafka:// or file://, "
                f"not {self.sink_uri.scheme}://"
            )
        return f"{self.sink_uri.scheme}://{self.sink_uri.location}" + (f"?{query}" if query else "")

    def router(self) -> EventPipeline | Router | None:
        """What every event goes through before the sink (docs/routing.md): online DDL, event filters,
        the table router of ``[[routes]]`` (extract-source reads the changefeed id); None: nothing."""
        # A storage directory or lake table: the router coordinates a merged table's shard DDL (Router.shard_ddl).
        router = _router(self.routes, self.changefeed_id, self.sink_uri.is_mysql or self.sink_uri.is_kafka)
        if router is not None and self.shard_mode == "pessimistic":
            router.shard_drops = True  # a dropped shard leaves the shard list the lock waits for
        return EventPipeline.of(
            router,
            EventFilter.of(self.filter.event_filters),
            OnlineDDL() if self.online_ddl else None,
        )

    @property
    def protocol(self) -> str:
        return self.sink_uri.params.get("protocol") or self.sink.protocol or "canal-json"

    def kafka_sink_config(self) -> KafkaSinkConfig:
        """The ``kafka://HOST:PORT/TOPIC?...`` sink: codec from URI parameters, dispatchers from ``[sink]``."""
        from .sink.kafka import KafkaSinkConfig  # noqa: PLC0415 - confluent-kafka only when a kafka sink is used

        return KafkaSinkConfig.from_uri(
            self.sink_uri.location, self.sink_uri.params, self.codec_options(), self.sink.dispatchers
        )

    def mysql_sink(self) -> tuple[MySQLParams, MySQLSinkConfig]:
        """The ``mysql://USER[:PASS]@HOST:PORT/?worker-count=N&safe-mode=...`` sink: connection and sink settings.

        TiCDC's sink parameters (worker-count, safe-mode, max-txn-row) become `MySQLSinkConfig`; the
        checkpoint row is keyed by the changefeed id; TIMESTAMP values are written in ``time-zone``.
        """
        from .sink.mysql import MySQLSinkConfig  # noqa: PLC0415

        params, config = MySQLSinkConfig.from_uri(self.sink_uri.uri, self.changefeed_id, self.time_zone)
        return params, replace(config, shard_mode=self.shard_mode)

    def shard_members(self) -> tuple[tuple[str, str, str, str], ...]:
        """Pessimistic shard mode's shard list: (target schema, target table, shard schema, shard table) of
        every upstream table the filter keeps and a route merges, read from the live source's
        information_schema now (DM reads its sources' tables the same way when a task starts)."""
        from .clients.mysql import MySQLError  # noqa: PLC0415

        router = Router(self.routes, self.changefeed_id)
        keep = TableFilter(self.filter.rules)
        params = self.source.server().sql_params()
        try:
            conn = params.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'"
                    )
                    tables = [(str(a), str(b)) for a, b in cur.fetchall()]
            finally:
                conn.close()
        except (MySQLError, OSError) as exc:
            raise CaptureError(
                f'shard-mode = "pessimistic": reading the shard list from the source {params.url} failed: '
                f"{mask_secrets(str(exc))}"
            ) from exc
        out = []
        for schema, table in tables:
            target = router.target(schema, table) if keep.match(schema, table) else None
            if target is not None and target.merge:
                out.append((*target.name, schema, table))
        return tuple(sorted(out))

    def lake_sink(self) -> Callable[[], Sink]:
        """The ``delta://DIR?mode=...`` / ``iceberg://DIR?...`` sink (docs/lakehouse.md): a factory, parameters checked.

        ``flush-interval`` is the job's trigger (as for the other sinks), not a table parameter.
        """
        params = {k: v for k, v in self.sink_uri.params.items() if k != "flush-interval"}
        return lake_sink(self.sink_uri.scheme, self.sink_uri.path, params, self.time_zone)

    def codec_options(self) -> CodecOptions:
        """The codec options (URI parameters, ``[sink]``, ``[sink.csv]``, ``[sink.debezium]``, ``cluster-id``)."""
        csv = self.sink.csv
        tidb = typed(self.sink_uri.params.get("enable-tidb-extension", "false"), bool, "enable-tidb-extension")
        debezium = self.sink.debezium
        return CodecOptions(
            protocol=self.protocol,
            enable_tidb_extension=tidb,
            terminator=self.sink.terminator,
            time_zone=self.time_zone,
            cluster_id=self.cluster_id,
            # [sink.debezium] output-old-value is the Debezium codec's own (TiCDC reads it for no other).
            output_old_value=debezium.output_old_value if self.protocol == "debezium" else True,
            debezium_include_start_ts=debezium.include_start_ts,
            debezium_disable_schema=self.sink.debezium_disable_schema,
            delimiter=csv.delimiter,
            quote=csv.quote,
            null=csv.null,
            include_commit_ts=csv.include_commit_ts,
            binary_encoding_method=csv.binary_encoding_method,
            csv_output_old_value=csv.output_old_value,
            output_field_header=csv.output_field_header,
        )

    def storage_options(self) -> StorageOptions:
        """The storage sink's directory options: sink-uri parameters over ``[sink]``."""
        sink = self.sink
        defaults = StorageOptions(
            date_separator=sink.date_separator,
            enable_partition_separator=sink.enable_partition_separator,
            file_index_width=sink.file_index_width,
        )
        return StorageOptions.from_uri(self.sink_uri.params, defaults)

    @property
    def flush_interval(self) -> str | None:
        """``flush-interval`` from the sink URI (TiCDC's name; our micro-batch trigger interval)."""
        return self.sink_uri.params.get("flush-interval")


def parse_sink_uri(uri: str, base_dir: Path | None = None) -> SinkURI:
    """``file://DIR?...``, ``kafka://HOST:PORT/TOPIC?...``, ``mysql://``, ``tidb://``, ``delta://DIR``,
    ``iceberg://DIR``; others are refused."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "kafka":
        return _kafka_uri(KafkaURI.parse(uri), base_dir)
    params: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in params:
            raise ConfigError(f"sink-uri parameter {key!r} given twice")
        params[key] = value
    if scheme in MYSQL_SCHEMES:
        if not parts.hostname:
            raise ConfigError(
                f"a mysql sink-uri is mysql://USER[:PASS]@HOST:PORT/?worker-count=N, got {mask_secrets(uri)!r}"
            )
        anchored = _anchored(params, _MYSQL_FILE_PARAMS, base_dir)
        if anchored != params:  # the sink parses the URI again (mysql_sink): the paths go into its text
            uri = urlunsplit(parts._replace(query=urlencode(list(anchored.items()))))
        return SinkURI(scheme, parts.netloc + parts.path, anchored, uri)
    if scheme in LAKE_SCHEMES:  # a local directory of tables, as for file://
        location = parts.netloc + parts.path
        if not location:
            raise ConfigError(f"sink-uri {uri!r} names no directory")
        return SinkURI(scheme, str(_config_path(location, base_dir)), params, uri)
    if scheme in ("mysql+ssl", "tidb+ssl"):
        raise ConfigError(f"write {scheme[:-4]}://...?ssl-ca=FILE&ssl-cert=FILE&ssl-key=FILE for TLS, not {scheme}://")
    if scheme in ("kafka+ssl", "pulsar"):
        raise ConfigError(f"the {scheme} sink is not wired into `changefeed run` yet; use file:// or kafka://")
    if scheme != "file":
        raise ConfigError(
            f"unsupported sink-uri scheme {scheme or '(none)'!r} in {uri!r}; "
            "expected file://DIR, kafka://, mysql://, delta://DIR or iceberg://DIR"
        )
    location = parts.netloc + parts.path
    if not location:
        raise ConfigError(f"sink-uri {uri!r} names no directory")
    path = _config_path(location, base_dir)
    unknown = set(params) - FILE_URI_PARAMS
    if unknown:
        raise ConfigError(
            f"unknown file sink-uri parameter(s) {', '.join(sorted(unknown))} "
            f"(expected: {', '.join(sorted(FILE_URI_PARAMS))})"
        )
    if params.get("protocol") is not None:
        require_transport(params["protocol"], "storage", "a file:// sink writes")
    return SinkURI(scheme, str(path), params)


#: URI parameters that name files: a relative one is relative to the config file's directory (the
#: current directory for a URI given on the command line), as every path in the config file is.
_MYSQL_FILE_PARAMS = frozenset({"ssl-ca", "ssl-cert", "ssl-key", "password-file"})
_KAFKA_FILE_PARAMS = frozenset({"ca", "cert", "key", "sasl-password-file"})


def _config_path(value: str, base: Path | None) -> Path:
    """The one rule for a path in the config file: a relative one is relative to the file's directory
    ``base`` (None: the current directory, for a URI given on the command line), made absolute and
    normalised (`Path.resolve`); an absolute one stays as written."""
    path = Path(value)
    return path if path.is_absolute() else ((base or Path.cwd()) / path).resolve()


def _anchored(params: Mapping[str, str], names: frozenset[str], base: Path | None) -> dict[str, str]:
    """``params`` with the file paths among ``names`` made absolute against ``base`` (`_config_path`)."""
    out = dict(params)
    for key, value in params.items():
        if key.replace("_", "-").lower() in names and value:
            out[key] = str(_config_path(value, base))
    return out


def _kafka_uri(kafka: KafkaURI, base_dir: Path | None) -> SinkURI:
    """The sink's reading of a `KafkaURI`: its parameters (file paths anchored), its protocols."""
    params = _anchored(kafka.params, _KAFKA_FILE_PARAMS, base_dir)
    unknown = set(params) - KAFKA_URI_PARAMS
    if unknown:
        raise ConfigError(
            f"unknown kafka sink-uri parameter(s) {', '.join(sorted(unknown))} "
            f"(expected: {', '.join(sorted(KAFKA_URI_PARAMS))})"
        )
    if params.get("protocol") is not None:
        require_transport(params["protocol"], "kafka", "a kafka:// sink writes")
    return SinkURI("kafka", f"{kafka.servers}/{kafka.topic}", params)


def parse_config(text: str, base_dir: Path | None = None, where: str = "<config>") -> ChangefeedConfig:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", where=where) from None
    try:
        return _build(doc, base_dir or Path.cwd())
    except ConfigError as exc:
        raise ConfigError(exc.message, where=exc.where or where) from None


def load_config(path: str | Path) -> ChangefeedConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", where=str(path)) from None
    return parse_config(text, path.parent.resolve(), str(path))


def _build(doc: dict[str, Any], base: Path) -> ChangefeedConfig:
    _check_keys(
        doc,
        {
            "changefeed-id",
            "sink-uri",
            "time-zone",
            "cluster-id",
            "source",
            "filter",
            "sink",
            "routes",
            "shard-mode",
            "online-ddl",
            "apply",
        },
        "the top level",
    )
    cid = typed(doc.get("changefeed-id", "default"), str, "changefeed-id")
    if not cid or not all(c.isalnum() or c in "-_" for c in cid):
        raise ConfigError(f"changefeed-id must be letters, digits, - and _, got {cid!r}")
    if "sink-uri" not in doc:
        raise ConfigError("sink-uri is required (for example file:///data/cdc?protocol=canal-json)")
    uri = parse_sink_uri(typed(doc["sink-uri"], str, "sink-uri"), base)
    time_zone = typed(doc.get("time-zone", "UTC"), str, "time-zone")
    zone(time_zone)  # the capture job's rule, checked now rather than inside a Spark task

    source = _source(_table(doc, "source"), base)

    flt = _table(doc, "filter")
    _check_keys(flt, {"rules", "event-filters", "expression-filters"}, "[filter]")
    rules = flt.get("rules", ["*.*"])
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ConfigError("[filter] rules must be a list of strings like ['db.*']")
    TableFilter(rules)  # validates the patterns
    event_rules, online_ddl = _event_rules(doc)

    sink, routes = _sink(_table(doc, "sink"), doc.get("routes", []))
    shard_mode = _shard_mode(doc, source, uri)

    if uri.params.get("protocol") and sink.protocol and uri.params["protocol"] != sink.protocol:
        raise ConfigError(
            f"sink-uri says protocol={uri.params['protocol']} but [sink] protocol = {sink.protocol!r}; give one"
        )
    cluster_id = typed(doc.get("cluster-id", "default"), str, "cluster-id")
    if not cluster_id:
        raise ConfigError("cluster-id must not be empty (TiCDC's default is 'default')")
    config = ChangefeedConfig(
        cid,
        uri,
        time_zone,
        source,
        FilterConfig(list(rules), event_rules),
        sink,
        routes=routes,
        shard_mode=shard_mode,
        online_ddl=online_ddl,
        cluster_id=cluster_id,
    )
    if "apply" in doc:
        _apply(config, _table(doc, "apply"), base)
    _check_sink(config)
    return config


def _shard_mode(doc: dict[str, Any], source: SourceConfig, uri: SinkURI) -> str:
    """DM's ``shard-mode``: ``optimistic`` (default) or ``pessimistic``, which needs a MySQL sink (it holds
    rows downstream, with the checkpoint) and a live source (its shard list is read from the server)."""
    mode = typed(doc.get("shard-mode", "optimistic"), str, "shard-mode")
    if mode not in ("optimistic", "pessimistic"):
        raise ConfigError(f"shard-mode must be optimistic or pessimistic (DM's modes), got {mode!r}")
    if mode == "pessimistic" and not uri.is_mysql:
        raise ConfigError(
            'shard-mode = "pessimistic" holds rows in the downstream database until every shard ran a DDL: '
            f"it needs a mysql:// sink, not {uri.scheme}:// (Kafka carries each shard's DDL to its consumer)"
        )
    if mode == "pessimistic" and not source.is_live:
        raise ConfigError(
            'shard-mode = "pessimistic" waits for every shard of a merged table, listed from the source '
            f'server\'s information_schema: it needs a live source ([source] type = "mysql"), not {source.type!r} '
            "(binlog files have no server to list the shards); use the optimistic mode with them"
        )
    return mode


def _sink(sink_doc: dict[str, Any], routes_doc: Any) -> tuple[SinkConfig, list[RouteRule]]:
    """``[sink]`` (with ``[sink.csv]``, ``[sink.debezium]``, ``[[sink.dispatchers]]``) and the routes: ``[[routes]]``
    plus the dispatchers that carry ``target-schema``/``target-table`` (TiCDC's routing)."""
    _check_keys(
        sink_doc,
        {
            "protocol",
            "terminator",
            "date-separator",
            "enable-partition-separator",
            "file-index-width",
            "csv",
            "debezium",
            "debezium-disable-schema",
            "dispatchers",
        },
        "[sink]",
    )
    sink = SinkConfig(
        protocol=typed(sink_doc["protocol"], str, "[sink] protocol") if "protocol" in sink_doc else None,
        terminator=typed(sink_doc.get("terminator", "\r\n"), str, "[sink] terminator"),
        date_separator=typed(sink_doc.get("date-separator", "day"), str, "[sink] date-separator"),
        enable_partition_separator=typed(
            sink_doc.get("enable-partition-separator", True), bool, "[sink] enable-partition-separator"
        ),
        file_index_width=typed(sink_doc.get("file-index-width", 20), int, "[sink] file-index-width"),
        debezium_disable_schema=typed(
            sink_doc.get("debezium-disable-schema", False), bool, "[sink] debezium-disable-schema"
        ),
    )
    debezium_doc = sink_doc.get("debezium", {})
    if not isinstance(debezium_doc, dict):
        raise ConfigError("[sink.debezium] must be a table")
    _check_keys(debezium_doc, set(_DEBEZIUM_KEYS), "[sink.debezium]")
    sink.debezium = DebeziumConfig(
        **{k.replace("-", "_"): typed(v, _DEBEZIUM_KEYS[k], f"[sink.debezium] {k}") for k, v in debezium_doc.items()}
    )
    csv_doc = sink_doc.get("csv", {})
    if not isinstance(csv_doc, dict):
        raise ConfigError("[sink.csv] must be a table")
    _check_keys(csv_doc, set(_CSV_KEYS), "[sink.csv]")
    sink.csv = CSVConfig(**{k.replace("-", "_"): typed(v, _CSV_KEYS[k], f"[sink.csv] {k}") for k, v in csv_doc.items()})
    dispatchers = sink_doc.get("dispatchers", [])
    if not isinstance(dispatchers, list) or not all(isinstance(d, dict) for d in dispatchers):
        raise ConfigError("[[sink.dispatchers]] must be an array of tables")
    routes = _routes(routes_doc)
    sink.dispatchers = []
    for d in dispatchers:  # TiCDC: a dispatcher with target-schema/target-table routes its tables
        route = _routing_dispatcher(d)
        if route is not None:
            routes.append(route)
        if route is None or set(d) - {"matcher", *_TARGET_KEYS}:
            sink.dispatchers.append(DispatchRule.from_mapping({k: v for k, v in d.items() if k not in _TARGET_KEYS}))
    return sink, routes


def _apply(config: ChangefeedConfig, apply: dict[str, Any], base: Path) -> None:
    """``[apply]``: where ``changefeed pipeline`` applies the sink's stream (to, checkpoint)."""
    _check_keys(apply, {"to", "checkpoint"}, "[apply]")
    config.apply_to = typed(apply.get("to", ""), str, "[apply] to")
    if not config.apply_to:
        raise ConfigError("[apply] to is required: mysql://..., delta://DIR, iceberg://DIR or parquet://DIR")
    if "checkpoint" in apply:
        value = typed(apply["checkpoint"], str, "[apply] checkpoint")
        config.apply_checkpoint = value if is_uri(value) else _config_path(value, base)
    config.apply_source()  # the sink-uri must be something the apply job reads


def _check_sink(config: ChangefeedConfig) -> None:
    """The sink-uri's parameters checked now, by scheme, not inside the job."""
    uri = config.sink_uri
    if uri.is_mysql:
        config.mysql_sink()
        return
    if uri.is_lake:
        config.lake_sink()
        return
    if uri.is_kafka:
        require_transport(config.protocol, "kafka", "a kafka:// sink writes")
        config.kafka_sink_config()
        return
    require_transport(config.protocol, "storage", "a file:// sink writes")
    options = config.codec_options()
    if options.protocol == "csv":
        CSVFormat(options)  # delimiter, quote and terminator checked now, not inside the job
    config.storage_options()


_TARGET_KEYS = ("target-schema", "target-table")


def _routing_dispatcher(d: Mapping[str, Any]) -> RouteRule | None:
    """The route of a ``[[sink.dispatchers]]`` entry with ``target-schema``/``target-table`` (TiCDC), else None."""
    targets = [d.get("target-schema", ""), d.get("target-table", "")]
    if not any(targets):
        return None
    if not all(isinstance(v, str) for v in targets):
        raise ConfigError("[[sink.dispatchers]] target-schema and target-table must be strings")
    rule = DispatchRule.from_mapping({k: v for k, v in d.items() if k not in _TARGET_KEYS})  # checks the matcher
    return RouteRule.from_dispatcher(rule.matcher, targets[0], targets[1])


def load_routes(path: str | Path) -> list[RouteRule]:
    """Only the routing rules of a config file (``[[routes]]``, routing ``[[sink.dispatchers]]``), for
    the commands that take no whole changefeed (``capture --routes``, ``apply --routes``)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", where=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", where=str(path)) from None
    try:
        routes = _routes(doc.get("routes", []))
        dispatchers = _table(doc, "sink").get("dispatchers", [])
        if not isinstance(dispatchers, list) or not all(isinstance(d, dict) for d in dispatchers):
            raise ConfigError("[[sink.dispatchers]] must be an array of tables")
        routes += [r for r in map(_routing_dispatcher, dispatchers) if r is not None]
    except ConfigError as exc:
        raise ConfigError(exc.message, where=exc.where or str(path)) from None
    return routes


def load_pipeline(path: str | Path, source: str, shard_ddl: bool = True) -> EventPipeline | Router | None:
    """What the commands that take no whole changefeed (``capture --routes``, ``apply --routes``) apply
    to every event, from a config file: ``[[routes]]`` and routing dispatchers, ``[[filter.event-filters]]``
    and ``online-ddl`` (docs/routing.md). ``source`` names the source for extract-source; ``shard_ddl``:
    whether the sink takes a merged table's shard DDL (`Router.shard_ddl`)."""
    path = Path(path)
    routes = load_routes(path)
    doc = tomllib.loads(path.read_text())  # read and parsed fine by load_routes just now
    try:
        rules, online_ddl = _event_rules(doc)
    except ConfigError as exc:
        raise ConfigError(exc.message, where=exc.where or str(path)) from None
    return EventPipeline.of(
        _router(routes, source, shard_ddl), EventFilter.of(rules), OnlineDDL() if online_ddl else None
    )


def _router(routes: Sequence[RouteRule], source: str, shard_ddl: bool) -> Router | None:
    """`Router.of`, its shard DDL decisions reported to the metrics and ``changefeed status``."""
    router = Router.of(routes, source, shard_ddl)
    if router is not None:
        router.report = report_shard_ddl
    return router


def report_shard_ddl(target: str, shard: str, query: str, outcome: str, commit_ts: int) -> None:
    """A router's shard DDL decision (storage and lake sinks) to the metrics and ``changefeed status``,
    as the MySQL sink reports its own (`sink.observe`)."""
    from .sink.observe import observer  # noqa: PLC0415 - the observer registered by the job's ops.metrics

    observer().shard_ddl(target, shard, query, outcome, commit_ts)


def _routes(value: Any) -> list[RouteRule]:
    """``[[routes]]``: DM's table routing rules, checked now (patterns, regexps, keys)."""
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise ConfigError("[[routes]] must be an array of tables")
    return [RouteRule.from_mapping(r, f"[[routes]] #{i + 1}") for i, r in enumerate(value)]


def _event_rules(doc: dict[str, Any]) -> tuple[list[EventFilterRule], bool]:
    """``[[filter.event-filters]]`` (TiCDC's) and ``online-ddl`` (DM's) of a config document."""
    event_filters = _table(doc, "filter").get("event-filters", [])
    if not isinstance(event_filters, list) or not all(isinstance(r, dict) for r in event_filters):
        raise ConfigError("[[filter.event-filters]] must be an array of tables")
    rules = [EventFilterRule.from_mapping(r, f"[[filter.event-filters]] #{i + 1}") for i, r in enumerate(event_filters)]
    expression_filters = _table(doc, "filter").get("expression-filters", [])
    if not isinstance(expression_filters, list) or not all(isinstance(r, dict) for r in expression_filters):
        raise ConfigError("[[filter.expression-filters]] must be an array of tables")
    rules += [  # DM's expression-filter, the same thing under other names
        EventFilterRule.from_dm_expression(r, f"[[filter.expression-filters]] #{i + 1}")
        for i, r in enumerate(expression_filters)
    ]
    return rules, typed(doc.get("online-ddl", False), bool, "online-ddl")


def _source(src: dict[str, Any], base: Path) -> SourceConfig:
    kind = typed(src.get("type", "binlog-files"), str, "[source] type")
    if kind not in SOURCE_TYPES:
        raise ConfigError(f"[source] type must be one of {', '.join(SOURCE_TYPES)}, got {kind!r}")
    _check_keys(src, _SOURCE_KEYS[kind], f"[source] of type {kind}")
    source = SourceConfig(
        type=kind, start_position=typed(src.get("start-position", ""), str, "[source] start-position")
    )
    if kind == "mysql":
        if "url" not in src:
            raise ConfigError('[source] url is required for type "mysql": mysql://USER@HOST:PORT')
        url = typed(src["url"], str, "[source] url")
        source.url, options = _source_url_options(url, base)
        for key in ("password-env", "password-file"):
            value = typed(src.get(key, ""), str, f"[source] {key}")
            if value and options.get(key):
                raise ConfigError(f"[source] {key} is given twice: as a key and in url {mask_secrets(url)!r}")
            if value and key == "password-file":
                value = str(_config_path(value, base))
            setattr(source, key.replace("-", "_"), value or options.get(key, ""))
        from .capture.binlog.replica import ServerAddress  # noqa: PLC0415

        address = ServerAddress.from_url(source.url)  # checks the URL now
        named = [k for k in ("password-env", "password-file") if getattr(source, k.replace("-", "_"))]
        if named and address.password:
            raise ConfigError(f"[source] url {mask_secrets(url)!r} holds a password and {named[0]} names another")
        if len(named) > 1:
            raise ConfigError("[source] password-env and password-file both name a password; give one")
        _snapshot_keys(src, source)
        return source
    if "path" not in src:
        what = "the KV change records (file or directory)" if kind == "kv" else "the directory of binlog files"
        raise ConfigError(f"[source] path is required: {what}")
    source.path = _config_path(typed(src["path"], str, "[source] path"), base)
    if kind == "kv":
        if "catalog" not in src:
            raise ConfigError('[source] catalog is required for type "kv": the TiDB table info file')
        source.catalog = _config_path(typed(src["catalog"], str, "[source] catalog"), base)
    return source


SNAPSHOT_MODES = ("initial", "never", "initial-only", "when-needed")


def _snapshot_keys(src: dict[str, Any], source: SourceConfig) -> None:
    """``snapshot``, ``snapshot-chunk-size``, ``snapshot-on-demand-chunk-size``, ``snapshot-parallelism``,
    ``signal-table`` of a live source (docs/snapshot.md)."""
    mode = typed(src.get("snapshot", ""), str, "[source] snapshot").strip().lower()
    if mode and mode not in SNAPSHOT_MODES:
        raise ConfigError(f"[source] snapshot must be one of {', '.join(SNAPSHOT_MODES)}, got {mode!r}")
    if mode in ("initial", "initial-only") and source.start_position:
        raise ConfigError(
            f"[source] snapshot = {mode!r} starts the binlog where the snapshot read the tables: drop start-position, "
            'or use snapshot = "when-needed" (snapshot only if start-position is purged)'
        )
    source.snapshot = mode
    if "signal-table" in src:
        from .capture.snapshot.signal import parse_signal_table  # noqa: PLC0415 - PyMySQL only for live sources

        table = typed(src["signal-table"], str, "[source] signal-table").strip()
        if table:
            parse_signal_table(table)
        source.signal_table = table
    for key in ("snapshot-chunk-size", "snapshot-on-demand-chunk-size", "snapshot-parallelism"):
        if key in src:
            value = typed(src[key], int, f"[source] {key}")
            if value < 1:
                raise ConfigError(f"[source] {key} must be a positive integer, got {value}")
            setattr(source, key.replace("-", "_"), value)


_SOURCE_TLS_PARAMS = tuple(name.replace("_", "-") for name in TLS_OPTIONS)  # clients.mysql.TLS_OPTIONS


def _source_url_options(url: str, base: Path) -> tuple[str, dict[str, str]]:
    """The source URL with only its TLS options left in the query, and the query's password options
    (file paths in both made absolute against the config file's directory)."""
    parts = urlsplit(url)
    options: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        name = key.replace("_", "-").lower()
        if name in _SOURCE_TLS_PARAMS:
            kept.append((name, value))
        elif name in ("password-env", "password-file"):
            options[name] = value
        else:
            raise ConfigError(
                f"[source] url {mask_secrets(url)!r}: the replica connection takes no parameters but "
                f"password-env, password-file, {', '.join(_SOURCE_TLS_PARAMS)}, got {key!r}"
            )
    kept = list(_anchored(dict(kept), _MYSQL_FILE_PARAMS, base).items())
    return urlunsplit(parts._replace(query=urlencode(kept))), _anchored(options, _MYSQL_FILE_PARAMS, base)


def _table(doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table")
    return value


#: TiCDC mysql sink-uri parameters we map onto MySQLSinkConfig; the rest are connection options.
