"""SQL text of the snapshot reads: quoted names and key-range predicates over composite keys."""

from __future__ import annotations

from collections.abc import Sequence


def tuple_compare(columns: Sequence[str], params: Sequence[str], op: str) -> str:
    """``(c1, .., cn) op (p1, .., pn)`` for op ``>=`` or ``<``, expanded so the optimizer sees index ranges:
    ``c1 > p1 OR (c1 = p1 AND c2 > p2) OR ... OR (c1 = p1 AND ... AND cn >= pn)``.

    Returns the text; its placeholders take the key's values n(n+1)/2 times, in the order of
    `tuple_params`. The database compares, in the columns' collations.
    """
    if op not in (">=", "<"):
        raise ValueError(op)
    strict = ">" if op == ">=" else "<"
    terms = []
    n = len(columns)
    for i in range(n):
        parts = [f"{columns[j]} = {params[j]}" for j in range(i)]
        parts.append(f"{columns[i]} {op if i == n - 1 else strict} {params[i]}")
        terms.append("(" + " AND ".join(parts) + ")")
    return "(" + " OR ".join(terms) + ")"


def tuple_params(values: Sequence[object]) -> list[object]:
    """The parameters of `tuple_compare` for one key."""
    out: list[object] = []
    for i in range(len(values)):
        out.extend(values[: i + 1])
    return out
