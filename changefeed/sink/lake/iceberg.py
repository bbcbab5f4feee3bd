"""``iceberg://DIR``: one Iceberg table per source table, namespace = schema (pyiceberg).

How Iceberg differs from the shared lake sink (common.py): tables live in a catalog, by default a SQL
catalog in ``DIR/_catalog.db`` (SQLite) with the data under ``DIR/<schema>/<table>`` (names encoded as
paths as everywhere); ``catalog-uri`` names another SQL catalog (an SQLAlchemy URL) or a REST catalog
(``http(s)://``: its other properties, a token among them, come from pyiceberg's own configuration of
the catalog named ``changefeed``, never from the target URI; the catalog assigns the table locations).
``catalog-namespace=a.b`` puts the schemas' namespaces under ``a.b``. A table's checkpoint ts is a
snapshot summary property of every commit (``changefeed.checkpoint-ts``); upsert is a delete of the
batch's keys and an append of their last images in ONE transaction; scd2 (Iceberg has no row update)
deletes the open versions the batch closes and appends them closed, with the batch's new versions, in
one transaction too. Iceberg evolves columns natively (add, drop, int -> long, float -> double, decimal
precision); other widenings are refused naming the table. The source names are table properties, so
identifiers (``.``-free encoded names) never need decoding.

Maintenance (maintenance.py): pyiceberg has no compaction action, so compaction is done here: the
data files below 3/4 of ``write.target-file-size-bytes`` are read through pyiceberg's scan (schema
evolution applied) and replaced by files of the same rows in ONE ``overwrite`` snapshot carrying
the checkpoint property (pyiceberg cannot write a ``replace`` snapshot: its summary code refuses the
operation). Retention expires the snapshots outside the newest ``retain-versions`` of the current
lineage (branch and tag heads stay), deletes the files only they reached, and sets
``write.metadata.delete-after-commit.enabled`` unless the table says otherwise; `EXPIRED_KEY`
records it, so `snapshot_at` reports a ts older than the kept history as an error.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    RESTError,
    TableAlreadyExistsError,
    ValidationError,
    ValidationException,
)
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, IsNull, Or, Reference
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.update.snapshot import ExpireSnapshots
from pyiceberg.table.upsert_util import create_match_filter
from pyiceberg.typedef import Identifier
from pyiceberg.utils.config import Config
from pyiceberg.utils.properties import property_as_int

from ...files.paths import encode_name
from ...model import TableSchema
from ...secrets import is_secret_key, mask_secrets
from .common import (
    COMMIT_TS,
    DELETE,
    OP,
    VALID_TO,
    WEIGHT,
    Evolution,
    LakeDDLError,
    LakeError,
    LakeOptions,
    LakeSink,
    Name,
    changelog_rows,
    collapse_upsert,
    commit_time,
    keyless_rewrite,
    keyless_weights,
    lake_schema,
    rows_of_keys,
    scd2_rows,
)
from .maintenance import Cadence, ExpiredVersionError, best_effort

log = logging.getLogger(__name__)
#: The catalog's name: pyiceberg's configuration of it (``PYICEBERG_CATALOG__CHANGEFEED__TOKEN``, .pyiceberg.yaml)
#: gives a REST catalog's properties beside ``catalog-uri``.
CATALOG_NAME = "changefeed"
CHECKPOINT_KEY = "changefeed.checkpoint-ts"
SCHEMA_KEY, TABLE_KEY = "changefeed.source-schema", "changefeed.source-table"
#: Summary property of a compaction snapshot. Table properties: the newest checkpoint ts retention
#: expired, and the sequence number the last maintenance run ended at (`Cadence`).
MAINTENANCE_KEY, EXPIRED_KEY = "changefeed.maintenance", "changefeed.expired-through-ts"
MAINTAINED_KEY = "changefeed.maintained-at"
#: Up to this many composite keys, the stored rows of a batch's partial updates are read through a filter.
_MATCH_KEYS = 200
#: Errors a maintenance run logs instead of failing the batch (a concurrent commit, a file gone, a REST
#: catalog refusing it: Lakana's answers 403 to a commit that removes snapshots, keeping expiry its own).
_MAINTENANCE_ERRORS = (CommitFailedException, ValidationError, ValidationException, ValueError, OSError, RESTError)


def _ident(name: str) -> str:
    """A name as one identifier part: the path encoding, and ``.`` (a namespace separator) escaped too."""
    return encode_name(name).replace(".", "@002e")


def _plain(t: pa.DataType) -> pa.DataType:
    """The Arrow type as this sink writes it (Iceberg has no 8/16-bit ints and reads large types)."""
    if pa.types.is_integer(t) and t.bit_width < 32:
        return pa.int32()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):  # changelog's `_cf_absent`
        return pa.list_(_plain(t.value_type))
    return t


class IcebergSink(LakeSink):
    """Iceberg tables in a catalog (a `Sink`)."""

    kind = "iceberg"

    def __init__(self, root: Any, options: LakeOptions | None = None) -> None:
        super().__init__(root, options)
        self.catalog = self._load_catalog()
        self._cadence = Cadence(self.options.maintenance_every)

    @property
    def rest(self) -> bool:
        """Is the catalog a REST catalog (it, not this sink, then decides where tables live)?"""
        return (self.options.catalog_uri or "").startswith(("http://", "https://"))

    def _load_catalog(self) -> Catalog:
        warehouse = self.root.resolve().as_uri()
        uri = self.options.catalog_uri
        if uri is None:
            return SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{self.root.resolve() / '_catalog.db'}", warehouse=warehouse)
        if self.rest:
            return self._rest_catalog(uri)
        return SqlCatalog(CATALOG_NAME, uri=uri, warehouse=warehouse)

    def _rest_catalog(self, uri: str) -> Catalog:
        """A REST catalog at ``uri``, its other properties (``token`` or ``credential``, ``prefix``, ``warehouse``,
        ``header.*``) from pyiceberg's configuration of `CATALOG_NAME`, read now (pyiceberg's own copy is read at
        its import), so a secret stays out of the target URI, which process listings show.

        No ``warehouse`` of ours: in the Iceberg REST protocol it is a name the client asks the server for
        (``GET /v1/config?warehouse=``), not a local directory; DIR keeps only the root checkpoint file.
        """
        properties: dict[str, Any] = dict(Config().get_catalog_config(CATALOG_NAME) or {})
        properties |= {"type": "rest", "uri": uri}
        try:
            return RestCatalog(CATALOG_NAME, **properties)
        except (RESTError, OSError, ValueError) as exc:
            raise _catalog_error(uri, "", exc, properties) from None

    def _props(self, version: int, maintenance: str | None = None) -> dict[str, str]:
        return {CHECKPOINT_KEY: str(version)} | ({} if maintenance is None else {MAINTENANCE_KEY: maintenance})

    def _identifier(self, name: Name) -> Identifier:
        return (*self.options.catalog_namespace, _ident(name[0]), _ident(name[1]))

    def _ensure_namespace(self, namespace: Identifier) -> None:
        """Create ``namespace`` and each missing level above it (the REST protocol creates no parents; a level
        that exists is left alone, so no permission to create ``catalog-namespace`` itself is needed)."""
        for depth in range(1, len(namespace) + 1):
            level = namespace[:depth]
            if depth <= len(self.options.catalog_namespace) and self.catalog.namespace_exists(level):
                continue
            with contextlib.suppress(NamespaceAlreadyExistsError):
                self.catalog.create_namespace(level)

    def _load(self, name: Name) -> Table | None:
        try:  # one request to a REST catalog, where table_exists is a load of its own
            return self.catalog.load_table(self._identifier(name))
        except NoSuchTableError:
            return None

    @staticmethod
    def _version(table: Table) -> int:
        snapshot = table.current_snapshot()
        summary = None if snapshot is None else snapshot.summary
        recorded = None if summary is None else summary.additional_properties.get(CHECKPOINT_KEY)
        # The table property: set at create and by a RENAME TABLE (`_mark`), which commits no snapshot.
        return max(int(recorded or 0), int(table.properties.get(CHECKPOINT_KEY, 0)))

    def _scan(self) -> dict[Name, int]:
        out: dict[Name, int] = {}
        parent = self.options.catalog_namespace
        try:
            if parent and not self.catalog.namespace_exists(parent):
                return out
            for namespace in self.catalog.list_namespaces(parent):
                for identifier in self.catalog.list_tables(namespace):
                    table = self.catalog.load_table(identifier)
                    props = table.properties
                    if SCHEMA_KEY in props and TABLE_KEY in props:  # one of ours
                        out[(props[SCHEMA_KEY], props[TABLE_KEY])] = self._version(table)
        except RESTError as exc:  # a token refused, a server error: the first request of a run
            properties = self.catalog.properties
            raise _catalog_error(self.options.catalog_uri or "", "listing its tables: ", exc, properties) from None
        return out

    def format_schema(self, schema: pa.Schema) -> pa.Schema:
        return pa.schema([pa.field(f.name, _plain(f.type)) for f in schema])

    def _schema(self, name: Name) -> pa.Schema | None:
        table = self._load(name)
        if table is None:
            return None
        return self.format_schema(schema_to_pyarrow(table.schema(), include_field_ids=False))

    def _create(self, name: Name, schema: pa.Schema, version: int) -> None:
        identifier = self._identifier(name)
        # A REST catalog assigns the location (the spec's CreateTableRequest leaves it out; some servers, Lakana's
        # among them, refuse one): its warehouse, its layout. Ours is the encoded DIR/<schema>/<table>.
        location = None if self.rest else self.table_path(name).resolve().as_uri()
        try:
            self._ensure_namespace(identifier[:-1])
            self.catalog.create_table(
                identifier,
                schema,
                location=location,
                properties={SCHEMA_KEY: name[0], TABLE_KEY: name[1], CHECKPOINT_KEY: str(version)},
            )
        except (RESTError, TableAlreadyExistsError) as exc:
            raise LakeError(
                f"iceberg {self.label(name)}: the catalog refused to create {'.'.join(identifier)!r}: {exc}",
                where=f"checkpoint ts {version}",
            ) from None

    def _evolve(self, name: Name, evolution: Evolution, version: int) -> None:
        table = self._load(name)
        assert table is not None
        try:
            if evolution.renamed:  # a commit of its own: union_by_name below matches by the new names
                with table.update_schema() as update:
                    for old, new in evolution.renamed:
                        update.rename_column(old, new)
                table = self._load(name)
                assert table is not None
            with table.update_schema() as update:
                update.union_by_name(evolution.target)  # adds and promotes
                for column in evolution.dropped:
                    update.delete_column(column)
        except (ValidationError, ValueError, TypeError) as exc:
            raise LakeDDLError(
                f"iceberg {self.label(name)}: the change to {evolution.target} at checkpoint ts {version} "
                f"is no Iceberg type promotion: {exc}"
            ) from None

    def _conform(self, table: Table, data: pa.Table) -> pa.Table:
        schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
        return pa.Table.from_arrays([pc.cast(data.column(f.name), f.type) for f in schema], schema=schema)

    def _write(self, name: Name, shape: TableSchema, changes: pa.Table, version: int) -> None:
        table = self._load(name)
        assert table is not None
        props = self._props(version)
        try:
            if self.options.mode == "changelog":
                table.append(self._conform(table, changelog_rows(shape, changes)), snapshot_properties=props)
                return
            if self.options.mode == "scd2":
                self._write_scd2(table, shape, changes, props)
                return
            if not shape.handle_key:
                self._rewrite_keyless(name, table, shape, changes, props)
                return
            source = collapse_upsert(shape, changes)
            keys = [shape.columns[i].name for i in shape.handle_key]
            upserts = source.filter(pc.invert(source.column(DELETE))).drop_columns([DELETE])
            # Only keys the table holds are deleted: pyiceberg binds the delete filter in Python per
            # literal, several times, so a filter over every key of the batch (new ones too) cost more
            # than the rest of the batch (bench/RESULTS.md, "Lake sinks"). The sink is the table's only writer.
            held = _held_keys(table, source.select(keys), keys)
            with table.transaction() as tx, warnings.catch_warnings():
                # the held keys of the batch go, then their last images come back: one catalog commit
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                if held.num_rows:
                    tx.delete(create_match_filter(held, keys), snapshot_properties=props)
                if upserts.num_rows:
                    tx.append(self._conform(table, upserts), snapshot_properties=props)
                if not held.num_rows and not upserts.num_rows:  # nothing stored changes: record the checkpoint
                    tx.set_properties({CHECKPOINT_KEY: str(version)})
        except (CommitFailedException, ValidationError, ValueError) as exc:
            raise LakeError(f"iceberg {self.label(name)}: {exc}", where=f"checkpoint ts {version}") from None

    def _move(self, old: Name, new: Name) -> None:
        src, dst = self._identifier(old), self._identifier(new)
        if self.catalog.table_exists(src):
            if self.catalog.table_exists(dst):
                raise LakeError(f"iceberg {self.label(old)}: cannot rename to {self.label(new)}: it exists")
            self._ensure_namespace(dst[:-1])
            self.catalog.rename_table(src, dst)
        table = self.catalog.load_table(dst)
        if (table.properties.get(SCHEMA_KEY), table.properties.get(TABLE_KEY)) != new:
            with table.transaction() as tx:
                tx.set_properties({SCHEMA_KEY: new[0], TABLE_KEY: new[1]})

    def _mark(self, name: Name, version: int) -> None:
        table = self._load(name)
        if table is not None and self._version(table) < version:
            with table.transaction() as tx:
                tx.set_properties({CHECKPOINT_KEY: str(version)})

    def _rewrite_keyless(
        self, name: Name, table: Table, shape: TableSchema, changes: pa.Table, props: dict[str, str]
    ) -> None:
        """A table without a key (`keyless_weights`): one transaction deletes every copy of the rows the batch
        removes copies of (every column equal, NULLs equal) and appends what stays of them and the added rows."""
        names = [c.name for c in shape.columns]
        weights = keyless_weights(shape, changes)
        gone = weights.filter(pc.less(weights.column(WEIGHT), 0)).select(names)
        match = _rows_match(gone) if gone.num_rows else None
        held = table.scan(row_filter=match).to_arrow().select(names) if match is not None else gone.slice(0, 0)
        back = keyless_rewrite(shape, weights, held)
        if match is None and not back.num_rows:  # the batch's changes cancel out: record the checkpoint all the same
            self._mark(name, int(props[CHECKPOINT_KEY]))
            return
        with table.transaction() as tx, warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            if match is not None:
                tx.delete(match, snapshot_properties=props)
            if back.num_rows:
                tx.append(self._conform(table, back), snapshot_properties=props)

    def _write_scd2(self, table: Table, shape: TableSchema, changes: pa.Table, props: dict[str, str]) -> None:
        versions, closes = scd2_rows(shape, changes)
        keys = [shape.columns[i].name for i in shape.handle_key]
        with table.transaction() as tx:
            if closes.num_rows:
                ends = dict(zip(_key_tuples(closes, keys), closes.column(VALID_TO).to_pylist(), strict=True))
                self._close(
                    table,
                    tx,
                    And(create_match_filter(closes.select(keys), keys), IsNull(term=Reference(VALID_TO))),
                    props,
                    lambda rows: [ends[k] for k in _key_tuples(rows, keys)],
                )
            if versions.num_rows:
                tx.append(self._conform(table, versions), snapshot_properties=props)

    def _close(
        self,
        table: Table,
        tx: Transaction,
        match: BooleanExpression,
        props: dict[str, str],
        ends: Callable[[pa.Table], list[Any]],
    ) -> None:
        """Open versions matching ``match`` rewritten with their ``_cf_valid_to`` (``ends`` of them), in ``tx``."""
        open_rows = table.scan(row_filter=match).to_arrow()
        if not open_rows.num_rows:
            return
        at = open_rows.schema.get_field_index(VALID_TO)
        closed = open_rows.set_column(at, VALID_TO, pa.array(ends(open_rows), open_rows.schema.field(VALID_TO).type))
        tx.delete(match, snapshot_properties=props)
        tx.append(self._conform(table, closed), snapshot_properties=props)

    def _stored(self, name: Name, shape: TableSchema, keys: pa.Table) -> pa.Table:
        """A scan filtered on ``keys`` (up to `_MATCH_KEYS` composite keys; more: a scan of the whole table, as
        pyiceberg binds a filter per literal), narrowed to ``keys`` exactly."""
        table = self._load(name)
        assert table is not None
        names = [c.name for c in shape.columns]
        schema = self.format_schema(lake_schema(shape, "upsert"))
        if table.current_snapshot() is None:
            return schema.empty_table()
        key_names = keys.column_names
        match: BooleanExpression = AlwaysTrue()
        if len(key_names) == 1 or keys.num_rows <= _MATCH_KEYS:
            match = create_match_filter(keys, key_names)
        if self.options.mode == "scd2":  # the open versions
            match = And(match, IsNull(term=Reference(VALID_TO)))
        rows = table.scan(row_filter=match, selected_fields=tuple(names)).to_arrow()
        return rows_of_keys(rows.select(names), keys)

    def _truncate(self, name: Name, version: int, drop: bool) -> None:
        table = self._load(name)
        assert table is not None
        if self.options.mode == "upsert":
            table.delete(AlwaysTrue(), snapshot_properties=self._props(version))
            return
        if self.options.mode == "scd2":  # every open version ends at the TRUNCATE / DROP
            ended = commit_time(pa.array([version], pa.int64()))[0].as_py()
            with table.transaction() as tx:
                self._close(
                    table,
                    tx,
                    IsNull(term=Reference(VALID_TO)),
                    self._props(version),
                    lambda rows: [ended] * rows.num_rows,
                )
            return
        schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
        marker = {f.name: pa.nulls(1, f.type) for f in schema}
        marker[OP] = pa.array(["drop" if drop else "truncate"], schema.field(OP).type)
        marker[COMMIT_TS] = pa.array([version], pa.int64())
        table.append(pa.table(marker, schema=schema), snapshot_properties=self._props(version))

    def _maintain(self, name: Name) -> None:
        table = self._load(name)
        if table is None or table.current_snapshot() is None:
            return
        if not self._cadence.due(name, table.last_sequence_number, partial(_maintained_at, table)):
            return
        with best_effort(self.kind, name, _MAINTENANCE_ERRORS):
            if self.options.optimize_every:
                self._compact(name, table)
            if self.options.retain_versions:
                self._expire(name, table)
        self._cadence.ran(name, table.last_sequence_number)

    def _compact(self, name: Name, table: Table) -> None:
        """The small data files rewritten as few, in one snapshot with the table's checkpoint ts."""
        snapshot = table.current_snapshot()
        assert snapshot is not None
        tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files())
        if any(task.delete_files for task in tasks):
            log.info("iceberg %s: not compacted: it has delete files (not written by this sink)", self.label(name))
            return
        target = property_as_int(
            table.properties,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
            TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
        )
        small = [task for task in tasks if task.file.file_size_in_bytes < (target or 0) * 3 // 4]
        if len(small) < 2:
            return
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(small)
        version = self._version(table)
        props = self._props(version, "compaction")
        with table.transaction() as tx:
            with tx.update_snapshot(snapshot_properties=props).overwrite() as rewrite:
                for task in small:
                    rewrite.delete_data_file(task.file)
                if rows.num_rows:
                    # pyiceberg's own writer (its delete rewrites files so): the table's target size and layout
                    for data_file in _dataframe_to_data_files(tx.table_metadata, rows, table.io, rewrite.commit_uuid):
                        rewrite.append_data_file(data_file)
            tx.set_properties({MAINTAINED_KEY: str(table.last_sequence_number + 1)})  # this snapshot's
        log.info(
            "iceberg %s: compacted %d files (%d rows)",
            self.label(name),
            len(small),
            rows.num_rows,
            extra={
                "sink": self.kind,
                "table": f"{name[0]}.{name[1]}",
                "files_removed": len(small),
                "rows": rows.num_rows,
                "checkpoint_ts": version,
            },
        )

    def _expire(self, name: Name, table: Table) -> None:
        """Expire the snapshots outside the newest ``retain-versions`` of the lineage; delete what only they read."""
        lineage = list(ancestors_of(table.current_snapshot(), table.metadata))  # newest first
        kept = {s.snapshot_id for s in lineage[: self.options.retain_versions]}
        kept |= {ref.snapshot_id for ref in table.metadata.refs.values()}  # branch and tag heads
        expired = [s for s in table.snapshots() if s.snapshot_id not in kept]
        if not expired:
            return
        dead = _reachable(table.io, expired) - _reachable(
            table.io, [s for s in table.snapshots() if s.snapshot_id in kept]
        )
        through = max([_recorded(s) or 0 for s in expired] + [int(table.properties.get(EXPIRED_KEY, 0))])
        props = {EXPIRED_KEY: str(through), MAINTAINED_KEY: str(table.last_sequence_number)}
        if TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED not in table.properties:
            props[TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED] = "true"  # old metadata.json files go too
        with table.transaction() as tx:
            ExpireSnapshots(tx).by_ids([s.snapshot_id for s in expired]).commit()
            tx.set_properties(props)
        location = table.location().rstrip("/") + "/"
        gone = sorted(path for path in dead if path.startswith(location))  # never a file outside the table
        for path in gone:
            table.io.delete(path)
        log.info(
            "iceberg %s: expired %d snapshots (through checkpoint ts %d), deleted %d files",
            self.label(name),
            len(expired),
            through,
            len(gone),
            extra={
                "sink": self.kind,
                "table": f"{name[0]}.{name[1]}",
                "snapshots_expired": len(expired),
                "files_removed": len(gone),
            },
        )


def _catalog_error(uri: str, doing: str, exc: Exception, properties: Mapping[str, Any]) -> LakeError:
    """A REST catalog's failure, its URI's userinfo and the configured secrets (token, credential) masked
    wherever they show, the server's own message included."""
    known = [str(v) for k, v in properties.items() if is_secret_key(k) and v]
    return LakeError(mask_secrets(f"iceberg REST catalog {uri}: {doing}{type(exc).__name__}: {exc}", known))


def _maintained_at(table: Table) -> int:
    """The sequence number the table's last maintenance run ended at (0: never ran)."""
    return int(table.properties.get(MAINTAINED_KEY, 0))


def _recorded(snapshot: Snapshot) -> int | None:
    """The checkpoint ts a snapshot's summary records (None: not a commit of this sink)."""
    recorded = None if snapshot.summary is None else snapshot.summary.additional_properties.get(CHECKPOINT_KEY)
    return None if recorded is None else int(recorded)


def _reachable(io: FileIO, snapshots: list[Snapshot]) -> set[str]:
    """Every file the snapshots read: manifest lists, manifests, and the files live in those manifests."""
    paths: set[str] = set()
    manifests = {}
    for snapshot in snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            manifests[manifest.manifest_path] = manifest
    paths.update(manifests)
    for manifest in manifests.values():
        paths.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True))
    return paths


def snapshot_at(table: Table, commit_ts: int) -> Snapshot | None:
    """The newest snapshot of the table's current lineage whose recorded checkpoint ts is <= ``commit_ts``
    (time travel by commit ts: read it with ``table.scan(snapshot_id=...)``).

    None: the table has no snapshot that old (it began later). `ExpiredVersionError`: retention
    (``retain-versions``) expired the snapshots that old.
    """
    lineage = list(ancestors_of(table.current_snapshot(), table.metadata))  # newest first
    recorded = [(s, _recorded(s)) for s in lineage]
    found = next((s for s, ts in recorded if ts is not None and ts <= commit_ts), None)
    expired = table.properties.get(EXPIRED_KEY)
    if found is None and expired is not None:
        oldest = next((ts for _, ts in reversed(recorded) if ts is not None), None)
        raise ExpiredVersionError(
            f"iceberg {'.'.join(table.name())}: commit ts {commit_ts} is older than the snapshots the table keeps "
            f"(expired through checkpoint ts {expired}; the oldest kept records {oldest}; see retain-versions)"
        )
    return found


def _held_keys(table: Table, keys: pa.Table, names: list[str]) -> pa.Table:
    """The distinct ``keys`` the table's current snapshot holds (a scan of the key columns only)."""
    if table.current_snapshot() is None:
        return keys.slice(0, 0)
    stored = table.scan(selected_fields=tuple(names)).to_arrow()
    if not stored.num_rows:
        return keys.slice(0, 0)
    distinct = keys.group_by(names, use_threads=False).aggregate([]).select(names)
    stored = stored.select(names).cast(distinct.schema)
    return distinct.join(stored, names, join_type="left semi", use_threads=False)


def _rows_match(rows: pa.Table) -> BooleanExpression:
    """An Iceberg filter matching exactly ``rows`` (every column equal, NULL matching NULL)."""

    def equal(column: str, value: Any) -> BooleanExpression:
        return IsNull(term=Reference(column)) if value is None else EqualTo(term=Reference(column), value=value)

    def both(a: BooleanExpression, b: BooleanExpression) -> BooleanExpression:
        return And(a, b)

    terms = [functools.reduce(both, [equal(k, v) for k, v in row.items()]) for row in rows.to_pylist()]
    return terms[0] if len(terms) == 1 else Or(*terms)


def _key_tuples(rows: pa.Table, keys: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(rows.column(k).to_pylist() for k in keys), strict=True))


__all__ = ["CHECKPOINT_KEY", "EXPIRED_KEY", "MAINTENANCE_KEY", "ExpiredVersionError", "IcebergSink", "snapshot_at"]
