"""The catalog: TiDB table-info JSON, flag mapping, versions at commit_ts - 1, defaults, partitions."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from changefeed.capture.mounter import Catalog, Mounter
from changefeed.errors import CaptureError
from changefeed.model import ABSENT, ColumnFlag, Op, TypeCode

from . import tidb_encoder as enc
from .util import delete, put

CATALOG = Path(__file__).resolve().parent.parent / "fixtures" / "mounter" / "catalog.json"
V1, V2 = 440000000000000100, 440000000000000200
LATER = V2 + 10


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load(CATALOG)


def test_table_info_maps_types_and_flags(catalog: Catalog) -> None:
    orders = catalog.lookup(110, V1).schema
    assert (orders.schema, orders.table, orders.table_id, orders.version) == ("shop", "orders", 110, V1)
    names = [c.name for c in orders.columns]
    assert names == ["id", "customer", "amount", "created", "payload"]  # virtual double_amount excluded
    id_, customer, amount, created, payload = orders.columns
    assert id_.unsigned and not id_.nullable and id_.column_id == 1
    assert id_.key_flags & ColumnFlag.PRIMARY_KEY and id_.key_flags & ColumnFlag.HANDLE_KEY
    assert customer.charset == "utf8mb4" and customer.length == 32 and customer.key_flags & ColumnFlag.MULTIPLE_KEY
    assert (amount.type_code, amount.length, amount.decimal, amount.default) == (TypeCode.DECIMAL, 10, 2, "0.00")
    assert created.type_code is TypeCode.TIMESTAMP and created.decimal == 3 and created.binary
    assert payload.is_bytes  # BLOB with charset binary
    assert [(i.name, i.columns, i.primary) for i in orders.indexes] == [
        ("PRIMARY", ("id",), True),
        ("idx_customer", ("customer",), False),
    ]
    v2 = catalog.lookup(110, V2).schema
    flags = v2.column("flags")
    assert flags.unsigned and flags.zerofill
    assert v2.column("status").elements == ("new", "paid", "sent")
    assert v2.column("note").collation == "utf8mb4_general_ci"
    assert "adding" not in v2.column_index  # write-reorganization state: not in the snapshot


def test_plain_string_names_and_columns_alias(catalog: Catalog) -> None:
    logs = catalog.lookup(140, 0).schema
    assert (logs.schema, logs.table) == ("ops", "logs")
    assert [c.name for c in logs.columns] == ["line", "code"]
    assert logs.column("code").unsigned and logs.handle_key == ()


def test_version_at_commit_ts_minus_one(catalog: Catalog) -> None:
    m = Mounter(catalog)
    key = enc.record_key(110, 5)
    value = enc.row_v2({2: b"ann", 3: bytes([10, 2]) + enc.decimal_bin(Decimal("9.99"), 10, 2)})
    at_ddl = m.mount(put(key, value, commit_ts=V2))  # same ts as the DDL: the old schema
    after = m.mount(put(key, value, commit_ts=V2 + 1))
    assert at_ddl.table_schema.version == V1 and len(at_ddl.new) == 5
    assert after.table_schema.version == V2 and len(after.new) == 10
    # back in time again (the hot cache must not stick)
    assert m.mount(put(key, value, commit_ts=V1 + 50)).table_schema.version == V1


def test_missing_columns_take_origin_default_null_or_zero(catalog: Catalog) -> None:
    m = Mounter(catalog, time_zone="Asia/Shanghai")
    value = enc.row_v2({2: b"ann"})  # written before ADD COLUMN, read with the new schema
    row = m.mount(put(enc.record_key(110, 5), value, commit_ts=V2 + 1)).as_dict()
    assert row == {
        "id": 5,
        "customer": "ann",
        "amount": Decimal("0.00"),  # origin default
        "created": "2024-01-01 00:00:00.000",  # TIMESTAMP origin default is UTC -> +08:00
        "payload": None,  # nullable, no default
        "note": None,
        "status": 2,  # ENUM origin default by member name
        "flags": 0,  # NOT NULL without default: zero value
        "shipped": "2020-01-01 08:00:00",
        "bits": 0x0102,
    }


def test_virtual_and_non_public_column_ids_are_skipped(catalog: Catalog) -> None:
    m = Mounter(catalog)
    value = enc.row_v2({2: b"x", 5: b"\x00\x01", 12: enc.compact_int(1)})
    row = m.mount(put(enc.record_key(110, 5), value, commit_ts=V2 + 1)).as_dict()
    assert row["customer"] == "x" and "double_amount" not in row


def test_partitioned_table(catalog: Catalog) -> None:
    m = Mounter(catalog)
    ev = m.mount(put(enc.record_key(122, 150), enc.row_v2({2: b"click"}), commit_ts=LATER))
    assert (ev.table_id, ev.partition_id, ev.physical_table_id, ev.row_id) == (120, 122, 122, 150)
    assert ev.table_schema.partitioned and ev.as_dict() == {"id": 150, "kind": "click"}
    with pytest.raises(CaptureError, match="physical table 120 is not in the catalog"):
        m.mount(put(enc.record_key(120, 1), enc.row_v2({2: b"x"}), commit_ts=LATER))


def test_common_handle_table(catalog: Catalog) -> None:
    m = Mounter(catalog)
    key = enc.record_key(130, enc.key_bytes(b"k1") + enc.key_int(3))
    ev = m.mount(put(key, enc.row_v2({1: b"k1", 2: enc.compact_int(3), 3: b"v"}), commit_ts=LATER))
    assert ev.as_dict() == {"k": "k1", "n": 3, "v": "v"} and ev.row_id is None
    assert ev.table_schema.handle_key == (0, 1)
    gone = m.mount(delete(key, enc.row_v2({1: b"k1", 2: enc.compact_int(3), 3: None}), commit_ts=LATER))
    assert gone.op is Op.DELETE and gone.old == ("k1", 3, None)


def test_delete_without_old_value_for_rowid_table_is_skipped(catalog: Catalog) -> None:
    m = Mounter(catalog)
    assert m.mount(delete(enc.record_key(140, 9))) is None
    assert m.skipped["empty"] == 1
    pk = m.mount(delete(enc.record_key(110, 9), commit_ts=LATER))
    assert pk.old[0] == 9 and all(v is ABSENT for v in pk.old[1:])


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda c: c["tables"][0]["table"].pop("cols"), "no 'cols'/'columns'"),
        (lambda c: c["tables"][0]["table"]["cols"][1]["type"].update(Tp=99), "unsupported type code"),
        (lambda c: c["tables"][0].update(version=-1), "non-negative"),
        (lambda c: c["tables"][0].pop("table"), "needs a 'table'"),
        (lambda c: c["tables"][1].update(version=V1, table=c["tables"][0]["table"]), "two versions"),
        (lambda c: c["tables"][0]["table"]["cols"][1].update(id=1), "repeats"),
        (lambda c: c["tables"][0]["table"].update(is_common_handle=True), "cannot be both"),
    ],
)
def test_bad_catalogs(tmp_path: Path, mutate, match: str) -> None:
    obj = json.loads(CATALOG.read_text(encoding="utf-8"))
    mutate(obj)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(CaptureError, match=match) as info:
        Catalog.load(path)
    assert str(path) in (info.value.where or "")


def test_bad_origin_default_names_the_column(tmp_path: Path) -> None:
    obj = json.loads(CATALOG.read_text(encoding="utf-8"))
    obj["tables"][1]["table"]["cols"][7]["origin_default"] = "lost"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(obj))
    m = Mounter(Catalog.load(path))
    with pytest.raises(CaptureError, match=r"'status' of shop\.orders: bad origin default 'lost'"):
        m.mount(put(enc.record_key(110, 1), enc.row_v2({2: b"x"}), commit_ts=V2 + 1))


def test_catalog_not_json(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{")
    with pytest.raises(CaptureError, match="not JSON"):
        Catalog.load(path)


def test_indexes_from_column_flags_without_index_info() -> None:
    info = {
        "id": 7,
        "name": "flags_only",
        "pk_is_handle": True,
        "columns": [
            {"id": 1, "name": "id", "type": {"Tp": 8, "Flag": 1 | 2}},
            {"id": 2, "name": "email", "type": {"Tp": 15, "Flag": 1 | 4, "Charset": "utf8mb4"}},
            {"id": 3, "name": "city", "type": {"Tp": 15, "Flag": 8, "Charset": "utf8mb4"}},
            {"id": 4, "name": "raw", "type": {"Tp": 254, "Flag": 128, "Flen": 4}},
        ],
    }
    ts = Catalog.from_json([{"schema": "s", "table": info}]).lookup(7, 0).schema
    assert [(i.name, i.columns, i.primary, i.unique) for i in ts.indexes] == [
        ("PRIMARY", ("id",), True, True),
        ("uk_email", ("email",), False, True),
        ("idx_city", ("city",), False, False),
    ]
    assert ts.column("email").key_flags & ColumnFlag.UNIQUE_KEY
    assert ts.column("raw").is_bytes and ts.column("raw").length == 4  # BinaryFlag, no charset: BINARY(4)
