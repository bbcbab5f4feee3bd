"""Layering rules of the shipped package, checked on the source text (``ast``; nothing is imported).

Every ``import`` counts: at module level, inside functions (lazy imports), under ``if TYPE_CHECKING:``,
and ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name. Relative imports
are resolved to absolute module names; ``from pkg import name`` counts as importing ``pkg.name``
when that is a module of the package, else as importing ``pkg``.

A rule the tree breaks today lists those imports in a ``KNOWN`` set. The set can only shrink: a new
violation fails, and so does a listed one that is gone (remove it from the set when you fix it).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "changefeed"

Edge = tuple[str, str]  # (importing module, imported module)


@cache
def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package ``__init__``), for every module under changefeed/."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module of ``from <level dots><name> import ...`` written in ``module``."""
    if not level:
        assert name is not None
        return name
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 >= len(base):
        raise AssertionError(f"{module}: relative import beyond the top-level package (level {level})")
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _literal_import(node: ast.Call) -> str | None:
    """The name of ``import_module("x")`` / ``importlib.import_module("x")`` / ``__import__("x")``."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
        return first.value
    return None


@cache
def _imports(module: str) -> frozenset[str]:
    """Every absolute module name ``module`` imports, wherever in the file the import is."""
    path, is_package = _modules()[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    known = _modules()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node.level, node.module)
            submodules = {f"{source}.{alias.name}" for alias in node.names} & known.keys()
            out.update(submodules)
            if len(submodules) < len(node.names):  # names defined in ``source`` itself
                out.add(source)
        elif isinstance(node, ast.Call):
            name = _literal_import(node)
            if name is not None:
                out.add(name)
    return frozenset(out)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _edges(importer: Callable[[str], bool], forbidden: Callable[[str, str], bool]) -> set[Edge]:
    """(module, imported) for every module ``importer`` selects and import ``forbidden`` rejects."""
    return {(m, i) for m in _modules() if importer(m) for i in _imports(m) if forbidden(m, i)}


def _show(edges: Iterable[Edge]) -> str:
    return "\n".join(f"  {m} -> {i}" for m, i in sorted(edges))


def _check(rule: str, found: set[Edge], known: frozenset[Edge] = frozenset()) -> None:
    new, fixed = found - known, known - found
    problems = []
    if new:
        problems.append(f"{rule}; these imports break it:\n{_show(new)}")
    if fixed:
        problems.append(
            f"{rule}; these KNOWN violations are gone: remove them from the KNOWN set of the test:\n{_show(fixed)}"
        )
    assert not problems, "\n".join(problems)


def test_the_scan_sees_the_package() -> None:
    # A guard for the rules below: a scan that found nothing would pass them all.
    modules = _modules()
    assert {"changefeed", "changefeed.model.events", "changefeed.spark.jobs", "changefeed.cli.run"} <= modules.keys()
    assert {"changefeed.model.events", "pyarrow"} <= _imports("changefeed.model.rowblock")  # `from .events import`
    assert "changefeed.errors" in _imports("changefeed.spark.datasource.decoded")  # `from ... import errors`


# --------------------------------------------------------------------------------------------- pyspark

KNOWN_PYSPARK: frozenset[Edge] = frozenset()  # none today: keep it so


def test_only_the_spark_package_imports_pyspark() -> None:
    found = _edges(
        lambda m: not _within(m, "changefeed.spark"),
        lambda _, i: _within(i, "pyspark"),
    )
    _check("no module outside changefeed/spark/ imports pyspark", found, KNOWN_PYSPARK)


# ------------------------------------------------------------------------------------------- clients


def test_only_the_mysql_client_module_imports_pymysql() -> None:
    """PyMySQL behind one module (changefeed.clients.mysql): TLS modes and errors in one place."""
    found = _edges(lambda m: m != "changefeed.clients.mysql", lambda _, i: _within(i, "pymysql"))
    _check("no module but changefeed/clients/mysql.py imports pymysql", found)


def test_only_the_kafka_client_module_imports_confluent_kafka() -> None:
    """confluent-kafka behind one module (changefeed.clients.kafka), imported lazily by Kafka paths only."""
    found = _edges(lambda m: m != "changefeed.clients.kafka", lambda _, i: _within(i, "confluent_kafka"))
    _check("no module but changefeed/clients/kafka.py imports confluent_kafka", found)


# ----------------------------------------------------------------------------------------------- model


def test_model_imports_only_errors_and_model() -> None:
    found = _edges(
        lambda m: _within(m, "changefeed.model"),
        lambda _, i: _within(i, PACKAGE) and not (i == "changefeed.errors" or _within(i, "changefeed.model")),
    )
    _check("changefeed/model/ imports from the project only changefeed.errors and changefeed.model", found)


# ----------------------------------------------------------------------------- codec, capture, dispatch

_LAYERS = ("changefeed.codec", "changefeed.capture", "changefeed.dispatch")
_LAYER_MAY_IMPORT = ("changefeed.model", "changefeed.errors", "changefeed.timezones")

# Today's violations: the binlog capture opens its replica connection with the shared MySQL client
# (changefeed.clients.mysql) and masks passwords in its errors with changefeed.secrets. Only shrink this set.
KNOWN_LAYERS: frozenset[Edge] = frozenset(
    {
        ("changefeed.capture.binlog", "changefeed.clients.mysql"),
        ("changefeed.capture.binlog.replica", "changefeed.clients.mysql"),
        ("changefeed.capture.binlog.replica", "changefeed.secrets"),
    }
)


def _layer(module: str) -> str | None:
    return next((layer for layer in _LAYERS if _within(module, layer)), None)


def test_codec_capture_dispatch_import_only_model_errors_timezones_and_themselves() -> None:
    def forbidden(module: str, imported: str) -> bool:
        allowed = (*_LAYER_MAY_IMPORT, _layer(module) or "")
        return _within(imported, PACKAGE) and not any(_within(imported, a) for a in allowed)

    found = _edges(lambda m: _layer(m) is not None, forbidden)
    rule = (
        "changefeed/codec/, capture/ and dispatch/ import from the project only changefeed.model, "
        "changefeed.errors, changefeed.timezones and their own package"
    )
    _check(rule, found, KNOWN_LAYERS)


def test_codec_never_imports_sink_spark_cli_ops() -> None:
    # Part of the rule above, stated on its own: no KNOWN entry may ever allow it.
    outer = ("changefeed.sink", "changefeed.spark", "changefeed.cli", "changefeed.ops")
    found = _edges(
        lambda m: _within(m, "changefeed.codec"),
        lambda _, i: any(_within(i, o) for o in outer),
    )
    _check("changefeed/codec/ imports nothing of changefeed.sink, .spark, .cli or .ops", found)


# ------------------------------------------------------------------------------------- pickle, pytest


def test_shipped_package_does_not_import_pickle() -> None:
    found = _edges(lambda _: True, lambda _, i: _within(i, "pickle") or _within(i, "_pickle"))
    _check("the changefeed package does not import pickle", found)


def test_shipped_package_outside_testing_does_not_import_pytest() -> None:
    found = _edges(
        lambda m: not _within(m, "changefeed.testing"),
        lambda _, i: _within(i, "pytest") or _within(i, "_pytest"),
    )
    _check("the changefeed package does not import pytest outside changefeed/testing/", found)


def test_testing_services_do_not_import_pytest() -> None:
    # Issue 15: changefeed/testing/ (MariaDB, broker, ... services) is usable without pytest.
    found = _edges(
        lambda m: _within(m, "changefeed.testing"),
        lambda _, i: _within(i, "pytest") or _within(i, "_pytest"),
    )
    _check("changefeed/testing/ does not import pytest", found)


# --------------------------------------------------------------------------------------------- cycles


def _top(module: str) -> str | None:
    """The top-level part of the package a module belongs to (``changefeed.sink.kafka.sink`` -> ``sink``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else None


def _cycles() -> set[frozenset[str]]:
    """The top-level parts that import each other, directly or around a loop (strongly connected sets)."""
    graph: dict[str, set[str]] = {}
    for module in _modules():
        a = _top(module)
        if a is None:
            continue
        graph.setdefault(a, set()).update(b for i in _imports(module) if (b := _top(i)) is not None and b != a)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {node: reach(node) for node in graph}
    return {frozenset({a} | {b for b in reached[a] if a in reached[b]}) for a in graph if a in reached[a]}


#: Loops between top-level parts the tree has: none (sinks report to `ops.metrics` through
#: `sink.observe`, which they own); keep it so.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def test_no_cycle_between_top_level_packages() -> None:
    found = _cycles()
    new, fixed = found - KNOWN_CYCLES, KNOWN_CYCLES - found
    assert not new, f"top-level packages import each other around a loop: {[sorted(c) for c in new]}"
    assert not fixed, f"these KNOWN cycles are gone: remove them from KNOWN_CYCLES: {[sorted(c) for c in fixed]}"
