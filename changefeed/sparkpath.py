"""Spark's Python processes import PySpark from the installed package, not from pyspark.zip.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip at the front of the
``PYTHONPATH`` of every Python process it starts (task workers, and on the driver the planners of a
Python data source: ``pyspark.sql.worker.plan_data_source_read``, the streaming source runner, run
by PySpark's own daemon, not `changefeed.spark.pyworker`). Python keeps no bytecode for modules
imported from a zip, so each such process compiles PySpark again: ~0.4 s of CPU (0.97 s against
0.56 s to import a planner and our data source), twice in a streaming job's first micro-batch.
Where the same PySpark and py4j are installed as packages (pip), those archives only shadow them.

`drop_shadowing_archives` removes them from ``sys.path``; scripts/setup installs a ``.pth`` file
running it at every start of the virtualenv's interpreter (`PTH_LINE`), before anything imports
PySpark. It costs a scan of ``sys.path`` for ``.zip``/``.jar`` entries where there are none.
Nothing else is imported here: this runs in every Python process of the environment.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

#: The line of the ``.pth`` file scripts/setup writes into site-packages (one line, as ``site`` reads
#: it; a changefeed that is gone, e.g. while pip uninstalls it, is no error at every start).
PTH_LINE = (
    'import sys; exec("try:\\n    import changefeed.sparkpath as m\\nexcept ImportError:\\n    pass\\n'
    'else:\\n    m.drop_shadowing_archives()", {})\n'
)


def _installed(package: str, path: list[str]) -> str | None:
    """The directory ``package`` is imported from when only plain directories are searched."""
    spec = PathFinder.find_spec(package, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.realpath(next(iter(spec.submodule_search_locations))))


def archives_to_drop(path: list[str]) -> list[str]:
    """The zip/jar entries of ``path`` that only shadow the installed pyspark and py4j packages."""
    plain = [p for p in path if not os.path.isfile(p)]
    home = _installed("pyspark", plain)
    if home is None or _installed("py4j", plain) is None:
        return []
    spark_home = os.path.join(home, "pyspark")
    inside = spark_home + os.sep
    # Only archives shipped inside the installed pyspark package (its python/lib zips and jars/).
    return [p for p in path if os.path.isfile(p) and os.path.realpath(p).startswith(inside)]


def drop_shadowing_archives() -> None:
    """Remove `archives_to_drop` from ``sys.path`` (never raises: this runs at interpreter start)."""
    try:
        if any(p.endswith((".zip", ".jar")) for p in sys.path):
            drop = set(archives_to_drop(sys.path))
            if drop:
                sys.path[:] = [p for p in sys.path if p not in drop]
    except Exception:  # a broken path is PySpark's to report, not the interpreter start's
        pass
