"""The codecs' code generators: straight-line per-table functions built once with ``exec``.

Why generate: a table's columns are known once per `TableSchema`, and a function with every
column's step written out (no loop, no per-value dispatch) reads or renders a row several times
faster than a generic loop. The generic loop stays beside each generator as the careful path.

The one rule: generated source is made of fixed text and integers only. Column names, values,
parsers and renderers reach the generated code through its namespace ``env``, by index (``n0``,
``r3``, ...), never pasted into the source, so no message or schema text ever becomes code.

The one way to build: write the source of one ``def`` and its ``env``, and call `build`, which
compiles it under a readable file name (``<label>``, shown in tracebacks and profiles) and returns
the function. The generators shared or self-contained live here; a generator tied to one codec's
plan (Open Protocol's image reader, `open_protocol.decoder`) stays with it and builds through
`build` too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson

from ..model import ABSENT

_DEF = re.compile(r"def ([a-z_]+)\(")


def build(label: str, source: str, env: dict[str, Any]) -> Callable[..., Any]:
    """The function defined by ``source`` (one ``def``), compiled as ``<label>`` with globals ``env``."""
    head = _DEF.match(source)
    if head is None:
        raise ValueError(f"generated source must start with one def, got {source[:40]!r}")
    exec(compile(source, f"<{label}>", "exec"), env)
    return cast(Callable[..., Any], env[head.group(1)])


class SlowPathError(Exception):
    """A generated fast path met something unusual; the caller's careful path decides (and explains)."""


# ------------------------------------------------------------------ readers


def _null_or_slow(v: object) -> None:
    if v is None:
        return None
    raise SlowPathError


def compile_object_reader(
    names: tuple[str, ...], parsers: tuple[Callable[[Any], Any] | None, ...], *, strings_only: bool
) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """Generate ``{name: value} -> image`` for one table, with each column's parser inlined.

    For the common case only: the object has exactly these columns and every value parses.
    Anything else raises (SlowPathError, KeyError, or the parser's error) and the caller's careful
    loop reports what is wrong. ``strings_only``: every non-null value must be a str (canal-json;
    a None parser keeps the str); otherwise a None parser keeps the value as it is.
    """
    env: dict[str, Any] = {"_Slow": SlowPathError, "_null": _null_or_slow, "_str": str}
    fetch, items = [], []
    for i, (name, parse) in enumerate(zip(names, parsers, strict=True)):
        env[f"n{i}"] = name
        fetch.append(f"    v{i} = row[n{i}]\n")
        if parse is not None:
            env[f"p{i}"] = parse
        if strings_only:
            value = f"p{i}(v{i})" if parse is not None else f"v{i}"
            items.append(f"{value} if type(v{i}) is _str else _null(v{i})")
        else:
            items.append(f"None if v{i} is None else p{i}(v{i})" if parse is not None else f"v{i}")
    src = (
        "def read(row):\n"
        f"    if len(row) != {len(names)}:\n"
        "        raise _Slow\n" + "".join(fetch) + f"    return ({''.join(item + ', ' for item in items)})\n"
    )
    return cast(Callable[[dict[str, Any]], tuple[Any, ...]], build(f"reader of {len(names)} columns", src, env))


def value_lists(width: int, member: str | None = None) -> Callable[[list[Any]], list[list[Any]]]:
    """``images -> [[image.c0, ...], [image.c1, ...], ...]`` (``member``: ``image.cJ.<member>``).

    One list comprehension per column: the interpreter's specialised attribute loads in a
    comprehension take half the time of ``map(attrgetter("cJ.v"), images)`` per value (~0.8 µs a
    10-column row less; the apply driver's decode, bench/RESULTS.md). ``member`` is an identifier
    of our own msgspec structs (``"v"``), never message text.
    """
    if member is not None and not member.isidentifier():
        raise ValueError(f"not an attribute name: {member!r}")
    tail = f".{member}" if member else ""
    columns = ", ".join(f"[i.c{j}{tail} for i in images]" for j in range(width))
    src = f"def values(images):\n    return [{columns}]\n"
    return cast(Callable[[list[Any]], list[list[Any]]], build(f"values of {width} columns", src, {}))


# ------------------------------------------------------------------ renderers


def compile_dict_renderer(
    label: str,
    names: tuple[str, ...],
    renderers: tuple[Callable[[Any], Any] | None, ...],
    positions: tuple[int, ...] | None,
) -> Callable[[tuple[Any, ...]], bytes]:
    """Generate ``image -> orjson bytes of {name: value}`` for one table (Canal-JSON's data objects).

    A None renderer keeps the model value as it is; otherwise NULL stays None and other values go
    through the renderer. ``positions``: which image members, in order (None: all of them).
    """
    env: dict[str, Any] = {"_dumps": orjson.dumps}
    members = []
    for i, (name, r) in enumerate(zip(names, renderers, strict=True)):
        env[f"n{i}"] = name
        if r is None:
            expr = f"v{i}"
        else:
            env[f"r{i}"] = r
            expr = f"(None if v{i} is None else r{i}(v{i}))"
        members.append(f"n{i}: {expr}")
    if positions is None:
        unpack = f"    ({''.join(f'v{i}, ' for i in range(len(names)))}) = image\n"
    else:
        unpack = "".join(f"    v{i} = image[{p}]\n" for i, p in enumerate(positions))
    src = f"def render(image):\n{unpack}    return _dumps({{{', '.join(members)}}})\n"
    return cast(Callable[[tuple[Any, ...]], bytes], build(f"{label} renderer {len(names)} columns", src, env))


def compile_joined_renderer(
    label: str,
    heads: tuple[bytes, ...],
    renders: tuple[Callable[[Any], bytes], ...],
    nulls: tuple[bytes, ...],
    positions: tuple[int, ...],
) -> Callable[[tuple[Any, ...]], bytes]:
    """Generate ``image -> b"{" head0 value0 "," head1 value1 ... "}"`` (Debezium's objects).

    ``heads[i]`` is the member's ``"name":`` bytes, ``nulls[i]`` the bytes of its NULL,
    ``renders[i]`` renders any other value; ``positions[i]`` is its place in the image.
    """
    env: dict[str, Any] = {"_join": b"".join}
    parts = []
    for i, pos in enumerate(positions):
        env[f"h{i}"] = (b"{" if i == 0 else b",") + heads[i]
        env[f"r{i}"] = renders[i]
        env[f"z{i}"] = nulls[i]
        parts.append(f"h{i}, z{i} if (v := image[{pos}]) is None else r{i}(v)")
    env["_close"] = b"}" if parts else b"{}"
    body = "".join(p + ", " for p in parts)
    src = f"def render(image):\n    return _join(({body}_close,))\n"
    return cast(Callable[[tuple[Any, ...]], bytes], build(f"{label} renderer {len(positions)} columns", src, env))


PlanColumn = tuple[int, str, Callable[[Any], str]]
"""(position in the image, the text before the value, renderer): one column of `compile_text_renderer`."""


def compile_text_renderer(
    cols: Sequence[PlanColumn], width: int, generic: Callable[[Sequence[PlanColumn], Sequence[Any]], str]
) -> Callable[[Sequence[Any]], str]:
    """Generate ``image -> "prefix0 value0}, prefix1 value1}, ..."`` for full images (Open Protocol).

    One f-string: one allocation, not one per ``+``. NULL renders ``null``; an image holding ABSENT
    takes ``generic(cols, image)`` instead.
    """
    if not cols:
        return lambda image: ""
    env: dict[str, Any] = {"ABSENT": ABSENT, "_generic": generic, "_cols": tuple(cols)}
    terms = []
    for k, (i, prefix, render) in enumerate(cols):
        env[f"S{k}"] = ("}," if k else "") + prefix
        env[f"R{k}"] = render
        terms.append(f"{{S{k}}}{{'null' if v{i} is None else R{k}(v{i})}}")
    absent = " or ".join(f"v{i} is ABSENT" for i, _, _ in cols)
    src = (
        "def render(image):\n"
        f"    {', '.join(f'v{i}' for i in range(width))}, = image\n"
        f"    if {absent}:\n"
        "        return _generic(_cols, image)\n"
        f'    return f"{"".join(terms)}}}}}"\n'
    )
    return cast(Callable[[Sequence[Any]], str], build(f"image of {len(cols)} columns", src, env))
