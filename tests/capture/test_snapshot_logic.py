"""The snapshot's pure logic: chunk ranges, watermark reconciliation and the hand-over to the binlog.

The property test simulates a table (integer keys, or text keys under a case-insensitive PAD SPACE
collation whose order Python's ``<`` does not share), writes interleaved at random with chunk reads
whose low watermark, SELECT and high watermark happen at random moments (overlapping chunks
included), and checks that the reconciled chunks plus the hand-over-filtered binlog, applied
*strictly* downstream (an insert must not find its key, an update or delete must find exactly its
old row), give the final table: no gap, no double effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changefeed.capture.snapshot.chunks import KeyRange, chunk_filter, key_getter, ranges, reconcile, split
from changefeed.capture.snapshot.handover import Handover, TableCut
from changefeed.capture.snapshot.order import PythonOrder, contains, locate, python_orderable
from changefeed.capture.snapshot.progress import chunks_within
from changefeed.model.events import Op, RowChange
from changefeed.model.schema import Column, Index, TableSchema
from changefeed.model.types import TypeCode


def collated(text: str) -> str:
    """A case-insensitive PAD SPACE collation's weight (utf8mb4_general_ci-like)."""
    return text.casefold().rstrip(" ")


CI = PythonOrder(lambda k: tuple(collated(v) if isinstance(v, str) else v for v in k))
INTS = PythonOrder()


def schema(text_key: bool) -> TableSchema:
    kt = TypeCode.VARCHAR if text_key else TypeCode.INT
    charset = ("utf8mb4", "utf8mb4_general_ci") if text_key else ("binary", "binary")
    return TableSchema(
        "db",
        "t",
        (
            Column("k", kt, charset=charset[0], collation=charset[1], nullable=False),
            Column("v", TypeCode.INT),
        ),
        (Index("PRIMARY", ("k",), primary=True),),
    )


# ----------------------------------------------------------------------------- small cases


def test_split_asks_the_database_for_every_boundary() -> None:
    keys = sorted(["b", "A", "c", "D", "e"], key=collated)  # the database's order, not Python's
    size = 2

    def seek(after: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        start = 0 if after is None else [collated(k) for k in keys].index(collated(after[0]))
        i = start + size
        return (keys[i],) if i < len(keys) else None

    got = split(seek)
    assert got == [KeyRange(None, ("c",)), KeyRange(("c",), ("e",)), KeyRange(("e",), None)]
    assert ranges([]) == [KeyRange(None, None)]


def test_contains_and_locate_use_the_order_not_python() -> None:
    # Python: "B" < "a" < "b"; the collation: "a" < "B" = "b " (PAD SPACE, case-insensitive).
    assert contains(CI, ("a",), ("c",), [("B",), ("b ",), ("C",), ("Z",), ("A",)]) == [True, True, False, False, True]
    assert locate(CI, [("b",), ("d",)], [("A",), ("B",), ("c",), ("D",), ("z",)]) == [0, 1, 1, 2, 2]
    assert locate(INTS, [], [(5,)]) == [0]


def test_python_orderable_types() -> None:
    ts = schema(text_key=False)
    assert python_orderable([ts.columns[0]])
    assert not python_orderable([schema(text_key=True).columns[0]])
    assert not python_orderable([Column("t", TypeCode.TIME)])
    assert python_orderable([Column("b", TypeCode.VARCHAR, charset="binary")])


def test_reconcile_replays_window_events_in_range() -> None:
    ts = schema(text_key=False)
    ins = lambda k, v: RowChange(Op.INSERT, ts, 1, new=(k, v))  # noqa: E731
    upd = lambda k0, v0, k, v: RowChange(Op.UPDATE, ts, 1, old=(k0, v0), new=(k, v))  # noqa: E731
    dele = lambda k, v: RowChange(Op.DELETE, ts, 1, old=(k, v))  # noqa: E731
    rng = KeyRange((10,), (20,))
    selected = [(10, 1), (12, 1), (15, 1)]
    window = [ins(11, 2), ins(25, 2), upd(12, 1, 30, 1), upd(40, 0, 13, 4), dele(15, 1), upd(10, 1, 10, 9)]
    got = reconcile(selected, window, key_getter([0]), chunk_filter(INTS, rng))
    assert sorted(got) == [(10, 9), (11, 2), (13, 4)]


def test_handover_splits_an_update_across_chunks() -> None:
    ts = schema(text_key=False)
    cut = TableCut(("k",), [(10,)], [5, 8], INTS)  # chunk 0 (<10) done at 5, chunk 1 at 8
    handover = Handover({("db", "t"): cut})
    moves = [
        RowChange(Op.UPDATE, ts, 1, old=(1, 0), new=(11, 0), position={"p": 6}),  # chunk 1 already moved it in
        RowChange(Op.UPDATE, ts, 1, old=(12, 0), new=(2, 0), position={"p": 6}),  # chunk 1 already lost 12
        RowChange(Op.INSERT, ts, 1, new=(3, 0), position={"p": 4}),  # chunk 0 holds it
        RowChange(Op.INSERT, ts, 1, new=(13, 0), position={"p": 9}),  # past both
    ]
    got = handover.apply(moves, lambda ch: ch.position["p"])  # type: ignore[index]
    assert [(c.op, c.old, c.new) for c in got] == [
        (Op.DELETE, (1, 0), None),
        (Op.INSERT, None, (2, 0)),
        (Op.INSERT, None, (13, 0)),
    ]
    assert handover.passed(8) and not handover.passed(7)


# ----------------------------------------------------------------------------- the property


@dataclass
class Sim:
    """A table in a database with a binlog; positions are indexes into ``log``."""

    order: PythonOrder
    ts: TableSchema
    table: dict[Any, tuple[Any, int]] = field(default_factory=dict)  # weight -> row (stored key, value)
    log: list[RowChange] = field(default_factory=list)

    def weight(self, key: Any) -> Any:
        return self.order.sort_key((key,))

    def write(self, op: str, key: Any, key2: Any, value: int) -> None:
        w, w2 = self.weight(key), self.weight(key2)
        row = self.table.get(w)
        if op == "insert" and row is None:
            self.table[w] = (key, value)
            self.log.append(RowChange(Op.INSERT, self.ts, 0, new=(key, value)))
        elif op == "update" and row is not None:
            self.table[w] = (row[0], value)
            self.log.append(RowChange(Op.UPDATE, self.ts, 0, old=row, new=(row[0], value)))
        elif op == "move" and row is not None and (w2 == w or w2 not in self.table):
            del self.table[w]
            self.table[w2] = (key2, row[1])
            self.log.append(RowChange(Op.UPDATE, self.ts, 0, old=row, new=(key2, row[1])))
        elif op == "delete" and row is not None:
            del self.table[w]
            self.log.append(RowChange(Op.DELETE, self.ts, 0, old=row))

    def sorted_keys(self) -> list[Any]:
        return [row[0] for _, row in sorted(self.table.items())]

    def select(self, rng: KeyRange) -> list[tuple[Any, int]]:
        rows = [row for row in self.table.values()]
        inside = contains(self.order, rng.lo, rng.hi, [(r[0],) for r in rows])
        return [r for r, ok in zip(rows, inside, strict=True) if ok]


def _apply_strictly(down: dict[Any, tuple[Any, int]], sim: Sim, ch: RowChange) -> None:
    if ch.old is not None:
        w = sim.weight(ch.old[0])
        assert down.get(w) == ch.old, f"{ch.op} finds {down.get(w)} instead of its old row {ch.old}"
        del down[w]
    if ch.new is not None:
        w = sim.weight(ch.new[0])
        assert w not in down, f"{ch.op} of {ch.new} finds the key taken by {down[w]}"
        down[w] = ch.new


text_keys = st.text(alphabet="aAbB cCé", min_size=1, max_size=3).filter(lambda s: s.strip(" ") != "")
writes_of = lambda keys: st.tuples(  # noqa: E731
    st.sampled_from(["insert", "insert", "update", "move", "delete"]), keys, keys, st.integers(0, 9)
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[bool, list[Any], int, list[list[Any]], list[tuple[int, int, int]]]:
    text = draw(st.booleans())
    keys = text_keys if text else st.integers(0, 30)
    initial = draw(st.lists(writes_of(keys), max_size=25))
    size = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 12))
    writes = [draw(st.lists(writes_of(keys), max_size=4)) for _ in range(steps + 1)]
    return text, initial, size, writes, []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_snapshot_plus_binlog_after_handover_is_the_final_table(scenario: Any, data: st.DataObject) -> None:
    text, initial, size, writes, _ = scenario
    sim = Sim(CI if text else INTS, schema(text))
    for w in initial:
        sim.write(*w)
    # Split now: boundaries every `size` keys in the database's order.
    keys = sim.sorted_keys()
    chunks = ranges([(k,) for k in keys[size::size]])
    steps = len(writes) - 1
    # Each chunk: low watermark, SELECT, high watermark at moments low <= select <= high (may overlap).
    plan = []
    for _ in chunks:
        low, select, high = sorted(data.draw(st.lists(st.integers(0, steps), min_size=3, max_size=3)))
        plan.append((low, select, high))
    marks: dict[int, int] = {}  # step -> binlog position there
    selected: dict[int, list[tuple[Any, int]]] = {}
    for step in range(steps + 1):
        marks[step] = len(sim.log)
        for c, (_, select, _) in enumerate(plan):
            if select == step:
                selected[c] = sim.select(chunks[c])
        for w in writes[step]:
            sim.write(*w)
    # Watermarks are positions; a SELECT at a step sees the table at that step's position (MariaDB's
    # consistent snapshot), between its chunk's low and high.
    lows = [marks[low] for low, _, _ in plan]
    highs = [marks[high] for _, _, high in plan]
    snapshot: list[tuple[Any, int]] = []
    for c, rng in enumerate(chunks):
        window = sim.log[lows[c] : highs[c]]
        snapshot += reconcile(selected[c], window, key_getter([0]), chunk_filter(sim.order, rng))
    # Downstream: the snapshot rows, then the binlog from the earliest low watermark through the hand-over.
    down: dict[Any, tuple[Any, int]] = {}
    for row in snapshot:
        _apply_strictly(down, sim, RowChange(Op.INSERT, sim.ts, 0, new=row))
    start = min(lows)
    stream = [
        RowChange(ch.op, ch.table_schema, 0, new=ch.new, old=ch.old, position={"p": start + i})
        for i, ch in enumerate(sim.log[start:])
    ]
    cut = TableCut(("k",), [r.lo for r in chunks[1:] if r.lo is not None], highs, sim.order)
    handover = Handover({("db", "t"): cut})
    for ch in handover.apply(stream, lambda ch: ch.position["p"]):  # type: ignore[index]
        _apply_strictly(down, sim, ch)
    assert down == sim.table


def test_handover_keyless_table_cuts_at_its_read() -> None:
    ts = TableSchema("db", "n", (Column("v", TypeCode.INT),))
    handover = Handover({("db", "n"): TableCut((), [], [5], INTS)})
    evs = [RowChange(Op.INSERT, ts, 1, new=(i,), position={"p": i}) for i in range(3, 8)]
    assert [c.new for c in handover.apply(evs, lambda ch: ch.position["p"])] == [(5,), (6,), (7,)]  # type: ignore[index]


@pytest.mark.parametrize("n", [0, 1, 7])
def test_split_single_and_empty(n: int) -> None:
    keys = list(range(n))

    def seek(after: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        i = (0 if after is None else keys.index(after[0])) + 3
        return (keys[i],) if i < len(keys) else None

    got = split(seek)
    assert len(got) == max(1, (n + 2) // 3)
    assert got[0].lo is None and got[-1].hi is None


def test_read_ahead_takes_as_many_chunks_as_a_batch_would() -> None:
    class Chunk:
        def __init__(self, rows: int, size: int) -> None:
            self.rows, self.jsonl = rows, b"x" * size

    four: Any = [Chunk(8192, 1000)] * 4
    assert chunks_within(four, 100_000, None) == 13
    assert chunks_within(four, 100_000, 8000) == 8  # the bytes bound first
    assert chunks_within(four, 1000, 1000) == 4  # never fewer than this batch's
    assert chunks_within(four, None, None) == 4
