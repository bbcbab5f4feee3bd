"""Code generators for per-table readers: the exec-built fast paths and the signal to leave them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast


class SlowPathError(Exception):
    """A generated fast path met something unusual; the caller's careful path decides (and explains)."""


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
    a None parser keeps the str); otherwise a None parser keeps the value as it is. Names and
    parsers are referred to by index, so message text never becomes source code.
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
    exec(compile(src, f"<reader of {len(names)} columns>", "exec"), env)
    return cast(Callable[[dict[str, Any]], tuple[Any, ...]], env["read"])  # exec-generated above
