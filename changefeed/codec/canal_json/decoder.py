"""Canal-JSON decoder (spec §2.11): TiCDC's output of any release, and official Canal's.

Accepts ``data``/``old`` in either order, the pre-v5.4 forms (``"old":[null]`` on INSERT, DELETE
``old`` equal to ``data``), Canal's full ``mysqlType`` forms and multi-row ``data`` arrays. Table
shapes are rebuilt from ``sqlType`` (column order, BLOB = binary), ``mysqlType`` (types) and
``pkNames`` (primary key = handle key), and shared by every row with the same description.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import CodecError, clip
from ...model import (
    ABSENT,
    Column,
    DDLEvent,
    Event,
    Index,
    Op,
    Resolved,
    RowChange,
    TableSchema,
)
from ...model.events import trusted_row
from ...model.types import STRING_TYPES, JavaSQLType
from ..base import Decoder, Message, checked_tso
from ..claimcheck import reading_store, unwrap_value
from ..codegen import SlowPathError, compile_object_reader
from ..compression import inflater
from ..ddlkind import KIND_ACTION, ddl_action
from ..options import CodecOptions
from .values import ParsedType, parse_mysql_type, value_parser

_MAX_TSO = (1 << 64) - 1
_MAX_ES = _MAX_TSO >> 18
_DML_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
_CACHE_LIMIT = 4096
_VARIANTS_PER_TABLE = 16  # sqlType differs per value (unsigned promotion), so a table has a few
_MAX_COLUMNS = 4096  # TiDB's hard limit on columns per table
_TEXT_CHARSET = ("utf8mb4", "utf8mb4_bin")  # not carried by canal-json; TiDB's default


# ------------------------------------------------------------------ per-table plan


class _RowPlan:
    """How to read one table's ``data``/``old`` objects into model images."""

    __slots__ = ("columns", "fast", "index", "mysql_types", "schema")

    def __init__(self, schema: TableSchema, mysql_types: dict[str, str]) -> None:
        self.schema = schema
        self.columns = tuple((c.name, value_parser(c)) for c in schema.columns)
        self.index = schema.column_index
        self.mysql_types = mysql_types
        self.fast = compile_object_reader(
            tuple(n for n, _ in self.columns), tuple(p for _, p in self.columns), strings_only=True
        )

    def image(self, row: Any, where: str, member: str, i: int) -> tuple[Any, ...]:
        if type(row) is dict:
            try:
                return self.fast(row)
            except (SlowPathError, KeyError, ValueError, TypeError, AttributeError, OverflowError):
                pass
        return self._careful_image(row, where, f"{member}[{i}]")

    def _careful_image(self, row: Any, where: str, label: str) -> tuple[Any, ...]:
        if type(row) is not dict:
            raise CodecError(f"{label} is {_json_type(row)}, expected an object", where=where)
        out: list[Any] = []
        append = out.append
        found = 0
        for name, parse in self.columns:
            v = row.get(name, ABSENT)
            if v is ABSENT:
                append(ABSENT)
                continue
            found += 1
            if v is None:
                append(None)
            elif type(v) is not str:
                raise CodecError(f"{label}: column {name!r} is {_json_type(v)}, expected a string or null", where=where)
            elif parse is None:
                append(v)
            else:
                try:
                    append(parse(v))
                except ValueError as exc:
                    raise CodecError(
                        f"{label}: column {name!r} ({self.mysql_types.get(name, '?')}): {exc}", where=where
                    ) from None
        if found != len(row):
            unknown = next(k for k in row if k not in self.index)
            raise CodecError(f"{label} names column {clip(unknown)}, which mysqlType does not describe", where=where)
        return tuple(out)


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    return _JSON_TYPES.get(type(v), type(v).__name__)


_JSON_TYPES = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


# ------------------------------------------------------------------ the decoder


class CanalJSONDecoder(Decoder):
    """Canal-JSON messages -> model events. ``decode_lines`` reads storage-sink files."""

    protocol = "canal-json"

    def __init__(self, options: CodecOptions | None = None) -> None:
        super().__init__(options)
        opts = self.options
        self._decompress = inflater(opts.large_message_handle_compression, opts.max_message_bytes)
        self._claim_store = reading_store(opts.claim_check_storage_uri, opts.max_message_bytes)
        # (db, table) -> recent (sqlType, mysqlType, pkNames, plan) seen; then the normalised shape
        # -> plan, so that descriptions differing in sqlType promotion share one TableSchema.
        self._by_table: dict[tuple[str, str], list[tuple[Any, Any, Any, _RowPlan]]] = {}
        self._by_shape: dict[Any, _RowPlan] = {}

    # -------------------------------------------------------------- entry points

    def decode(self, message: Message, where: str = "") -> list[Event]:
        value = message.value
        if value is None:
            raise CodecError("canal-json message has no value", where=where)
        if self._decompress is not None:
            self._decompress.new_message()  # the value and its claim-check file share one budget
            value = self._decompressed(bytes(value), where)
        return self._decode_value(value, where, claim_check=True)

    def _decompressed(self, value: bytes, where: str) -> bytes:
        assert self._decompress is not None
        try:
            return self._decompress(value)
        except ValueError as exc:
            raise CodecError(str(exc), where=where) from None

    def decode_lines(self, blob: bytes, where: str = "") -> list[Event]:
        """A storage-sink data file: one message per line (terminator ``\\r\\n`` by default).

        JSON text cannot hold a raw CR or LF, so splitting on them is safe. Storage files are
        never large-message compressed, so lines are parsed as they are.
        """
        terminator = self.options.terminator.encode()
        lines = blob.splitlines() if terminator in (b"\r\n", b"\n", b"\r", b"") else blob.split(terminator)
        events: list[Event] = []
        for n, line in enumerate(lines, 1):
            if line.strip():
                if self._decompress is not None:
                    self._decompress.new_message()  # a line's claim-check file is inflated on its own budget
                events.extend(self._decode_value(line, f"{where}:line {n}" if where else f"line {n}", claim_check=True))
        return events

    # -------------------------------------------------------------- one message

    def _decode_value(self, value: bytes | bytearray | memoryview | str, where: str, claim_check: bool) -> list[Event]:
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise CodecError(f"not a JSON document: {exc}", where=where) from None
        if type(obj) is not dict:
            raise CodecError(f"canal-json message is {_json_type(obj)}, expected an object", where=where)
        is_ddl = obj.get("isDdl", False)
        if type(is_ddl) is not bool:
            raise CodecError(f"isDdl is {_json_type(is_ddl)}, expected a boolean", where=where)
        kind = obj.get("type")
        if type(kind) is not str:
            raise CodecError(f"type is {_json_type(kind)}, expected a string", where=where)
        ext = obj.get("_tidb")
        if ext is not None and type(ext) is not dict:
            raise CodecError(f"_tidb is {_json_type(ext)}, expected an object", where=where)
        if is_ddl:
            return [self._ddl(obj, kind, ext, where)]
        if kind == "TIDB_WATERMARK":
            ts = ext.get("watermarkTs") if ext else None
            if ts is None:
                raise CodecError("TIDB_WATERMARK message without _tidb.watermarkTs", where=where)
            return [Resolved(commit_ts=checked_tso(ts, "_tidb.watermarkTs", where))]
        op = _DML_OPS.get(kind)
        if op is None:
            raise CodecError(f"unknown event type {clip(kind)} in a DML message", where=where)
        if ext:
            location = ext.get("claimCheckLocation")
            if location is not None:
                if not claim_check:
                    raise CodecError("claim-check file holds another claim-check reference", where=where)
                return self._claim_check(location, where)
        return self._rows(obj, op, ext, where)

    def _commit_ts(self, obj: dict[str, Any], ext: dict[str, Any] | None, where: str) -> int:
        if ext is not None and "commitTs" in ext:
            return checked_tso(ext["commitTs"], "_tidb.commitTs", where)
        # Without the extension only the physical milliseconds are known: the order of
        # transactions inside one millisecond is lost (TiCDC's own consumer has the same limit).
        es = obj.get("es")
        if type(es) is not int or not 0 <= es <= _MAX_ES:
            raise CodecError(f"es is {clip(es)}, expected milliseconds since the epoch", where=where)
        return es << 18

    def _ddl(self, obj: dict[str, Any], kind: str, ext: dict[str, Any] | None, where: str) -> DDLEvent:
        sql = obj.get("sql", "")
        if type(sql) is not str:
            raise CodecError(f"sql is {_json_type(sql)}, expected a string", where=where)
        if kind not in KIND_ACTION:
            raise CodecError(f"unknown DDL event type {clip(kind)}", where=where)
        return DDLEvent(
            schema=_str_member(obj, "database", where),
            table=_str_member(obj, "table", where),
            query=sql,
            ddl_type=ddl_action(kind, sql),
            commit_ts=self._commit_ts(obj, ext, where),
        )

    def _rows(self, obj: dict[str, Any], op: Op, ext: dict[str, Any] | None, where: str) -> list[Event]:
        commit_ts = ext.get("commitTs") if ext else None
        if type(commit_ts) is not int or not 0 <= commit_ts <= _MAX_TSO:
            commit_ts = self._commit_ts(obj, ext, where)
        plan = self._plan(obj, where)
        schema = plan.schema
        data = obj.get("data")
        if type(data) is not list or not data:
            raise CodecError(f"{op.name} message has data {_json_type(data)}, expected a non-empty array", where=where)
        old = obj.get("old")
        if old is not None:
            if type(old) is not list:
                raise CodecError(f"old is {_json_type(old)}, expected an array or null", where=where)
            if len(old) != len(data):
                raise CodecError(f"old has {len(old)} rows but data has {len(data)}", where=where)
        events: list[Event] = []
        for i, drow in enumerate(data):
            image = plan.image(drow, where, "data", i)
            if op is Op.INSERT:
                # Pre-v5.4 INSERTs carry "old":[null]; any old content is ignored.
                events.append(trusted_row(Op.INSERT, schema, commit_ts, image))
            elif op is Op.DELETE:
                # data holds the deleted row; pre-v5.4 also repeated it in old (ignored).
                events.append(trusted_row(Op.DELETE, schema, commit_ts, None, image))
            else:
                orow = old[i] if old is not None else None
                pre = None
                if orow is not None:
                    pre = plan.image(orow, where, "old", i)
                    # Canal (and only-output-updated-columns) leave unchanged columns out of old:
                    # their old value is the new one.
                    if ABSENT in pre:
                        pre = tuple(n if o is ABSENT else o for o, n in zip(pre, image, strict=True))
                events.append(trusted_row(Op.UPDATE, schema, commit_ts, image, pre))
        return events

    # -------------------------------------------------------------- table shapes

    def _plan(self, obj: dict[str, Any], where: str) -> _RowPlan:
        db, table = obj.get("database"), obj.get("table")
        sql_type, mysql_type, pk = obj.get("sqlType"), obj.get("mysqlType"), obj.get("pkNames")
        if type(db) is not str or type(table) is not str:
            return self._build_plan(obj, where)  # reports the bad member
        seen = self._by_table.get((db, table))
        if seen is not None:
            # Equal descriptions (dict equality: member order aside) were validated before. A
            # table keeps the column order it was first seen with.
            for known_sql, known_mysql, known_pk, plan in seen:
                if known_mysql == mysql_type and known_sql == sql_type and known_pk == pk:
                    return plan
        plan = self._build_plan(obj, where)
        if seen is None:
            if len(self._by_table) >= _CACHE_LIMIT:
                self._by_table.clear()
            seen = self._by_table[(db, table)] = []
        elif len(seen) >= _VARIANTS_PER_TABLE:
            del seen[0]
        seen.append((sql_type, mysql_type, pk, plan))
        return plan

    def _build_plan(self, obj: dict[str, Any], where: str) -> _RowPlan:
        db = _str_member(obj, "database", where)
        table = _str_member(obj, "table", where)
        mysql_type = obj.get("mysqlType")
        if type(mysql_type) is not dict:
            raise CodecError(f"mysqlType is {_json_type(mysql_type)}, expected an object", where=where)
        sql_type = _sql_type_member(obj, mysql_type, where)
        pk = obj.get("pkNames")
        if pk is not None and (type(pk) is not list or any(type(n) is not str for n in pk)):
            raise CodecError("pkNames must be null or an array of column names", where=where)
        # sqlType follows table column order in TiCDC; mysqlType's order is Go-map random.
        order = list(sql_type) if sql_type else list(mysql_type)
        if len(order) > _MAX_COLUMNS:
            raise CodecError(f"mysqlType describes {len(order)} columns; TiDB allows {_MAX_COLUMNS}", where=where)
        columns = []
        for name in order:
            text = mysql_type[name]
            try:
                parsed = parse_mysql_type(text)
            except ValueError as exc:
                raise CodecError(f"mysqlType of column {name!r}: {exc}", where=where) from None
            binary = parsed.binary or (
                parsed.type_code in STRING_TYPES and sql_type is not None and sql_type[name] == JavaSQLType.BLOB
            )
            columns.append(_column(name, parsed, binary))
        if pk:
            missing = [n for n in pk if n not in mysql_type]
            if missing:
                raise CodecError(f"pkNames names {missing}, which mysqlType does not describe", where=where)
        shape = (db, table, tuple(columns), tuple(pk) if pk else None)
        plan = self._by_shape.get(shape)
        if plan is None:
            try:
                schema = TableSchema(
                    schema=db,
                    table=table,
                    columns=tuple(columns),
                    indexes=(Index("PRIMARY", tuple(pk), primary=True),) if pk else (),
                )
            except ValueError as exc:
                raise CodecError(f"inconsistent table description: {exc}", where=where) from None
            plan = _RowPlan(schema, {n: mysql_type[n] for n in order})
            if len(self._by_shape) >= _CACHE_LIMIT:
                self._by_shape.clear()
            self._by_shape[shape] = plan
        return plan

    # -------------------------------------------------------------- claim check

    def _claim_check(self, location: Any, where: str) -> list[Event]:
        if type(location) is not str or not location:
            raise CodecError("_tidb.claimCheckLocation must be a non-empty string", where=where)
        if self._claim_store is None:
            raise CodecError(
                f"message refers to claim-check file {location!r} but no claim-check-storage-uri is configured",
                where=where,
            )
        # TiCDC reads the file name from the configured storage, whatever the prefix says.
        try:
            path = self._claim_store.path(location)
            data = self._claim_store.read(location)
        except ValueError as exc:
            raise CodecError(str(exc), where=where) from None
        inner_where = f"{where} -> {path}" if where else str(path)
        if not self.options.claim_check_raw_value:
            try:
                data = unwrap_value(data)
            except ValueError as exc:
                raise CodecError(str(exc), where=inner_where) from None
        if self._decompress is not None:
            data = self._decompressed(data, inner_where)
        events = self._decode_value(data, inner_where, claim_check=False)
        if not all(isinstance(e, RowChange) for e in events):
            raise CodecError("claim-check file does not hold a DML message", where=inner_where)
        return events


def _column(name: str, parsed: ParsedType, binary: bool) -> Column:
    tc = parsed.type_code
    charset: tuple[str, str] = ("binary", "binary") if binary else _TEXT_CHARSET
    return Column(
        name=name,
        type_code=tc,
        charset=charset[0],
        collation=charset[1],
        length=parsed.length,
        decimal=parsed.decimal,
        unsigned=parsed.unsigned,
        zerofill=parsed.zerofill,
        elements=parsed.elements,
    )


def _sql_type_member(obj: dict[str, Any], mysql_type: dict[str, Any], where: str) -> dict[str, int] | None:
    """The ``sqlType`` object (null allowed): a number per column that ``mysqlType`` describes."""
    sql_type = obj.get("sqlType")
    if sql_type is None:
        return None
    if type(sql_type) is not dict:
        raise CodecError(f"sqlType is {_json_type(sql_type)}, expected an object or null", where=where)
    for name, code in sql_type.items():
        if type(code) is not int:
            raise CodecError(f"sqlType of {name!r} is {_json_type(code)}, expected a number", where=where)
    if sql_type.keys() != mysql_type.keys():
        diff = sorted(sql_type.keys() ^ mysql_type.keys())
        raise CodecError(f"sqlType and mysqlType describe different columns: {diff}", where=where)
    return sql_type


def _str_member(obj: dict[str, Any], member: str, where: str) -> str:
    v = obj.get(member, "")
    if v is None:
        return ""
    if type(v) is not str:
        raise CodecError(f"{member} is {_json_type(v)}, expected a string", where=where)
    return v
