"""SQL generation for the MySQL sink, without a server: quoting, values, plans, causality, URLs."""

from __future__ import annotations

from decimal import Decimal

import pymysql.err
import pytest
from pymysql.converters import escape_string

from changefeed.clients.mysql import mask_url, parse_mysql_url
from changefeed.errors import ConfigError
from changefeed.model import ABSENT, ActionType, Column, Index, Op, RowChange, TableSchema, TypeCode
from changefeed.sink.mysql.causality import Causality, row_keys
from changefeed.sink.mysql.errors import ddl_already_done, is_transient
from changefeed.sink.mysql.plan import plan_rows, render_ops
from changefeed.sink.mysql.sql import make_literal, quote_ident, quote_table, table_sql, to_param

UTF8 = {"charset": "utf8mb4", "collation": "utf8mb4_general_ci"}
LIT = make_literal()

T = TableSchema(
    "db",
    "t`x",
    (
        Column("id", TypeCode.INT, nullable=False),
        Column("u", TypeCode.VARCHAR, nullable=True, **UTF8),
        Column("v", TypeCode.DECIMAL, decimal=2),
    ),
    (Index("PRIMARY", ("id",), primary=True), Index("uk", ("u",), unique=True)),
)
NOKEY = TableSchema("db", "n", (Column("a", TypeCode.INT), Column("b", TypeCode.VARCHAR, **UTF8)))
COMPOSITE = TableSchema(
    "db",
    "c",
    (Column("a", TypeCode.INT, nullable=False), Column("b", TypeCode.VARCHAR, nullable=False, **UTF8)),
    (Index("PRIMARY", ("a", "b"), primary=True),),
)


def ins(table: TableSchema, ts: int, *new: object) -> RowChange:
    return RowChange(Op.INSERT, table, ts, new=tuple(new))


def upd(table: TableSchema, ts: int, old: tuple[object, ...], new: tuple[object, ...]) -> RowChange:
    return RowChange(Op.UPDATE, table, ts, new=new, old=old)


def dele(table: TableSchema, ts: int, *old: object) -> RowChange:
    return RowChange(Op.DELETE, table, ts, old=tuple(old))


def sqls(rows: list[RowChange], safe: bool, **kw: int) -> list[str]:
    return [s for s, _ in render_ops(plan_rows(rows, safe), LIT, **kw)]


def test_quoting() -> None:
    assert quote_ident("a`b") == "`a``b`"
    assert quote_table("d`", "t") == "`d```.`t`"
    assert quote_table("", "t") == "`t`"


def test_literals() -> None:
    assert LIT(None) == "NULL"
    assert LIT("it's\\") == "'it\\'s\\\\'"
    assert make_literal(no_backslash_escapes=True)("it's\\") == "'it''s\\'"
    assert LIT(b"\x00'\xff") == "X'0027ff'"
    assert LIT(b"") == "X''"
    assert LIT(1.5) == "1.5e0"
    assert LIT(1e300) == "1e+300"
    assert LIT(Decimal("-0.10")) == "-0.10"
    assert LIT(18446744073709551615) == "18446744073709551615"
    assert LIT(True) == "1"
    with pytest.raises(ValueError):
        LIT(float("nan"))


def test_text_fast_path_escapes_like_pymysql() -> None:
    # column_renderer translates with a table built from escape_string: the same text for every character
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    render = LIT.column_renderer(Column("s", TypeCode.VARCHAR, **UTF8))
    assert render(text) == "'" + escape_string(text) + "'" == LIT(text)


def test_param_conversion() -> None:
    enum = Column("e", TypeCode.ENUM, elements=("a", "b"), **UTF8)
    assert to_param(enum, 2) == "b"
    assert to_param(enum, 0) == ""
    assert to_param(Column("e", TypeCode.ENUM, **UTF8), 2) == 2  # members unknown: the index
    assert to_param(Column("s", TypeCode.SET, elements=("a", "b")), 3) == 3
    assert to_param(Column("b", TypeCode.BIT, length=64), (1 << 64) - 1) == (1 << 64) - 1
    assert to_param(Column("y", TypeCode.YEAR), 0) == 0
    assert to_param(Column("d", TypeCode.DATE), "0000-00-00") == "0000-00-00"
    assert to_param(Column("x", TypeCode.TINYINT), True) == 1
    assert to_param(enum, None) is None


def test_safe_mode_compacts_to_delete_then_replace() -> None:
    rows = [
        ins(T, 1, 1, "x", Decimal("1.00")),
        upd(T, 2, (1, "x", Decimal("1.00")), (1, "y", Decimal("2.00"))),
        ins(T, 2, 2, "x", None),
        dele(T, 3, 3, "z", None),
        upd(T, 4, (2, "x", None), (5, "x", None)),  # key change: delete 2, replace 5
    ]
    assert sqls(rows, safe=True) == [
        "DELETE FROM `db`.`t``x` WHERE `id` IN (2,3)",
        "REPLACE INTO `db`.`t``x` (`id`,`u`,`v`) VALUES (1,'y',2.00),(5,'x',NULL)",
    ]


def test_normal_mode_keeps_order_and_merges_runs() -> None:
    rows = [
        ins(T, 1, 1, "x", None),
        ins(T, 1, 2, "y", None),
        upd(T, 2, (1, "x", None), (7, "x", Decimal("1.50"))),
        dele(T, 3, 2, "y", None),
        dele(T, 3, 7, "x", None),
        ins(T, 4, 3, "q", None),
    ]
    assert sqls(rows, safe=False) == [
        "INSERT INTO `db`.`t``x` (`id`,`u`,`v`) VALUES (1,'x',NULL),(2,'y',NULL)",
        "UPDATE `db`.`t``x` SET `id`=7,`u`='x',`v`=1.50 WHERE `id`=1",
        "DELETE FROM `db`.`t``x` WHERE `id` IN (2,7)",
        "INSERT INTO `db`.`t``x` (`id`,`u`,`v`) VALUES (3,'q',NULL)",
    ]


def test_normal_mode_compacts_tables_whose_only_unique_key_is_the_handle() -> None:
    plain = TableSchema("db", "p", T.columns, (Index("PRIMARY", ("id",), primary=True),))
    rows = [
        upd(plain, 1, (1, "a", None), (1, "b", Decimal("1.00"))),
        upd(plain, 1, (2, "c", None), (2, None, None)),
        ins(plain, 1, 3, "new", None),
        upd(plain, 2, (1, "b", Decimal("1.00")), (1, "c", Decimal("1.00"))),  # row 1 again: folded
        upd(plain, 3, (2, None, None), (9, None, None)),  # key change: DELETE 2 + INSERT 9
        upd(plain, 3, (3, "new", None), (3, "newer", None)),  # INSERT + UPDATE = INSERT
        ins(plain, 4, 5, "gone", None),
        dele(plain, 5, 5, "gone", None),  # INSERT + DELETE = nothing
        dele(plain, 5, 7, "x", None),
        ins(plain, 6, 7, "back", None),  # DELETE + INSERT = REPLACE
    ]
    assert sqls(rows, safe=False) == [
        "DELETE FROM `db`.`p` WHERE `id` IN (2)",
        "UPDATE `db`.`p` SET `u`=CASE `id` WHEN 1 THEN 'c' END,`v`=CASE `id` WHEN 1 THEN 1.00 END WHERE `id` IN (1)",
        "INSERT INTO `db`.`p` (`id`,`u`,`v`) VALUES (3,'newer',NULL),(9,NULL,NULL)",
        "REPLACE INTO `db`.`p` (`id`,`u`,`v`) VALUES (7,'back',NULL)",
    ]
    # What upstream cannot produce (a second INSERT of a live key) reaches the server in order,
    # and fails there with a duplicate key as row-by-row statements would.
    assert sqls([ins(plain, 1, 1, "a", None), ins(plain, 2, 1, "b", None)], safe=False) == [
        "INSERT INTO `db`.`p` (`id`,`u`,`v`) VALUES (1,'a',NULL),(1,'b',NULL)",
    ]


def test_batched_update_statements() -> None:
    plain = TableSchema("db", "p", T.columns, (Index("PRIMARY", ("id",), primary=True),))
    tsql = table_sql(plain)
    items = [((1, "b", Decimal("1.00")), (1,)), ((2, None, None), (2,)), ((1, "c", None), (1,))]
    assert [s for s, _ in tsql.update_batch(items, (0, 1, 2), LIT)] == [
        "UPDATE `db`.`p` SET `u`=CASE `id` WHEN 1 THEN 'b' WHEN 2 THEN NULL END,"
        "`v`=CASE `id` WHEN 1 THEN 1.00 WHEN 2 THEN NULL END WHERE `id` IN (1,2)",
        "UPDATE `db`.`p` SET `u`=CASE `id` WHEN 1 THEN 'c' END,`v`=CASE `id` WHEN 1 THEN NULL END WHERE `id` IN (1)",
    ]  # a repeated key starts a new statement, so one row's updates stay in order
    comp = [upd(COMPOSITE, 1, (1, "a"), (1, "a")), upd(COMPOSITE, 1, (2, "b"), (2, "b"))]
    assert sqls(comp, safe=False) == []  # only key columns: nothing to set
    wide = TableSchema("db", "w", (*COMPOSITE.columns, Column("v", TypeCode.INT)), COMPOSITE.indexes)
    assert sqls([upd(wide, 1, (1, "a", 0), (1, "a", 5)), upd(wide, 1, (2, "b", 0), (2, "b", 6))], safe=False) == [
        "UPDATE `db`.`w` SET `v`=CASE WHEN (`a`,`b`)=(1,'a') THEN 5 WHEN (`a`,`b`)=(2,'b') THEN 6 END"
        " WHERE (`a`,`b`) IN ((1,'a'),(2,'b'))"
    ]


def test_statements_are_chunked() -> None:
    rows = [ins(T, 1, i, str(i), None) for i in range(5)] + [dele(T, 2, i, str(i), None) for i in range(10, 15)]
    out = sqls(rows, safe=False, max_rows=2)
    assert len(out) == 6
    assert out[2] == "INSERT INTO `db`.`t``x` (`id`,`u`,`v`) VALUES (4,'4',NULL)"
    assert out[-1] == "DELETE FROM `db`.`t``x` WHERE `id` IN (14)"
    assert len(sqls(rows[:5], safe=True, max_bytes=60)) == 5  # byte cap: one row per statement


def test_composite_key_delete_uses_row_constructor() -> None:
    assert sqls([dele(COMPOSITE, 1, 1, "a"), dele(COMPOSITE, 1, 2, "b")], safe=True) == [
        "DELETE FROM `db`.`c` WHERE (`a`,`b`) IN ((1,'a'),(2,'b'))"
    ]


def test_table_without_key_matches_every_column() -> None:
    rows = [ins(NOKEY, 1, 1, None), upd(NOKEY, 2, (1, None), (2, "b")), dele(NOKEY, 3, 2, "b")]
    expected_tail = [
        "UPDATE `db`.`n` SET `a`=2,`b`='b' WHERE `a`<=>1 AND `b`<=>NULL LIMIT 1",
        "DELETE FROM `db`.`n` WHERE `a`<=>2 AND `b`<=>'b' LIMIT 1",
    ]
    assert sqls(rows, safe=False) == ["INSERT INTO `db`.`n` (`a`,`b`) VALUES (1,NULL)", *expected_tail]
    assert sqls(rows, safe=True) == ["REPLACE INTO `db`.`n` (`a`,`b`) VALUES (1,NULL)", *expected_tail]
    with pytest.raises(ValueError, match="old image"):
        plan_rows([RowChange(Op.UPDATE, NOKEY, 1, new=(1, "a"))], safe=False)


def test_partial_images() -> None:
    # MINIMAL binlog images: an update carrying only some columns cannot be a REPLACE...
    alone = [upd(T, 1, (1, ABSENT, ABSENT), (1, ABSENT, Decimal("3.00")))]
    assert sqls(alone, safe=True) == ["UPDATE `db`.`t``x` SET `id`=1,`v`=3.00 WHERE `id`=1"]
    # ...unless the full row was seen earlier in the batch: then it merges into it.
    merged = [ins(T, 1, 1, "x", None), *alone]
    assert sqls(merged, safe=True) == ["REPLACE INTO `db`.`t``x` (`id`,`u`,`v`) VALUES (1,'x',3.00)"]
    # A handle-key-only delete image is enough.
    assert sqls([dele(T, 1, 4, ABSENT, ABSENT)], safe=True) == ["DELETE FROM `db`.`t``x` WHERE `id` IN (4)"]
    with pytest.raises(ValueError, match="handle key"):
        plan_rows([dele(T, 1, ABSENT, "x", None)], safe=True)


def test_generated_columns_are_not_written() -> None:
    table = TableSchema(
        "db",
        "g",
        (Column("id", TypeCode.INT, nullable=False), Column("twice", TypeCode.INT, generated=True)),
        (Index("PRIMARY", ("id",), primary=True),),
    )
    assert sqls([ins(table, 1, 1, 2)], safe=True) == ["REPLACE INTO `db`.`g` (`id`) VALUES (1)"]


def test_mysql_json_comparison_casts() -> None:
    table = TableSchema("db", "j", (Column("j", TypeCode.JSON),))
    out = [s for s, _ in render_ops(plan_rows([dele(table, 1, '{"a": 1}')], safe=True, mysql_json=True), LIT)]
    assert out == ["DELETE FROM `db`.`j` WHERE `j`<=>CAST('{\\\"a\\\": 1}' AS JSON) LIMIT 1"]
    assert table_sql(table) is table_sql(table)


def test_causality_keys_and_routing() -> None:
    a_takes_y = upd(T, 1, (1, "x", None), (1, "y", None))
    b_takes_x = ins(T, 2, 2, "X", None)  # 'X' == 'x' under a _ci collation
    c = ins(T, 3, 3, "q", None)
    assert set(row_keys(a_takes_y)) & set(row_keys(b_takes_x))
    assert not set(row_keys(a_takes_y)) & set(row_keys(c))
    assert len(row_keys(ins(T, 1, 9, None, None))) == 1  # NULL unique values never conflict
    causality = Causality(4)
    wa = causality.route(row_keys(a_takes_y))
    assert causality.route(row_keys(b_takes_x)) == wa
    # A row touching keys held by two different workers cannot be placed in this round.
    causality2 = Causality(2)
    r1, r2 = ins(T, 1, 1, "a", None), ins(T, 1, 2, "b", None)
    w1 = causality2.route(row_keys(r1))
    w2 = causality2.route(row_keys(r2))
    bridge = upd(T, 2, (1, "a", None), (1, "b", None))
    if w1 != w2:
        assert causality2.route(row_keys(bridge)) is None
        causality2.reset()
        assert causality2.route(row_keys(bridge)) is not None
    # Keyless tables: identical rows conflict, different rows do not.
    assert row_keys(ins(NOKEY, 1, 1, "a")) == row_keys(dele(NOKEY, 2, 1, "a"))


def test_url_parsing_and_masking() -> None:
    p = parse_mysql_url("mysql://us%40er:p%40ss:w@db.example:3307/app?connect_timeout=5")
    assert (p.host, p.port, p.user, p.password, p.database) == ("db.example", 3307, "us@er", "p@ss:w", "app")
    assert p.options == {"connect_timeout": 5}
    assert "p@ss" not in repr(p) and "p@ss" not in str(p) and "p%40ss" not in p.url
    assert p.url == "mysql://us@er:***@db.example:3307/app"
    assert parse_mysql_url("mysql://127.0.0.1").port == 3306
    text = "cannot reach mysql://root:s3cret@h:1/x and mariadb://u:p@ss@h2 or mysql://root@h3:4"
    masked = mask_url(text)
    assert "s3cret" not in masked and "p@ss" not in masked
    assert "mysql://root:***@h:1/x" in masked and "mysql://root@h3:4" in masked
    with pytest.raises(ConfigError, match=r"\*\*\*"):
        parse_mysql_url("postgres://u:hidden@h")
    with pytest.raises(ConfigError) as exc:
        parse_mysql_url("mysql://u:hidden@h/?bogus=1")
    assert "hidden" not in str(exc.value)


def test_error_classification() -> None:
    assert is_transient(pymysql.err.OperationalError(2013, "Lost connection"))
    assert is_transient(pymysql.err.OperationalError(1213, "Deadlock"))
    assert is_transient(pymysql.err.InterfaceError(0, ""))
    assert not is_transient(pymysql.err.IntegrityError(1062, "Duplicate entry"))
    assert ddl_already_done(1050, ActionType.CREATE_TABLE)
    assert ddl_already_done(1060, ActionType.ADD_COLUMN)
    assert ddl_already_done(1051, ActionType.DROP_TABLE)
    assert ddl_already_done(1146, ActionType.DROP_TABLE)
    assert ddl_already_done(1146, ActionType.ADD_COLUMN) is None  # ALTER of a missing table is real
    assert ddl_already_done(1064, ActionType.CREATE_TABLE) is None
