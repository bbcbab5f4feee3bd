"""PySpark's worker daemon, started so that workers import PySpark from the installed package.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip``, py4j's zip and the spark-core jar at the
front of every Python worker's ``sys.path``. Python keeps no bytecode for modules imported from
a zip, so every worker process compiles PySpark again (~0.8 s of CPU), and every task calls
`importlib.invalidate_caches()` (PySpark's ``setup_spark_files``), which re-reads the directory
of every zip and jar on the path: ~150 ms of CPU per task on this machine, more than a 20,000-row
partition costs to encode. When the same PySpark and py4j are installed as packages (pip), this
module removes those archives from the path before anything imports PySpark, then runs PySpark's
own daemon (`pyspark.daemon`) unchanged, after importing what our workers use (`PRELOAD`) so the
forked workers inherit it. Where they are not the installed ones (a cluster's own Spark), nothing
is removed. Spark starts it through ``spark.python.daemon.module``.
"""

from __future__ import annotations

import gc
import importlib
import runpy

from ..sparkpath import drop_shadowing_archives

#: What the workers of our jobs import, imported once in the daemon so that every worker it forks
#: starts with them: ~0.5-1 s of CPU per worker process otherwise (pyarrow imports pandas on first
#: use of some constructors), more than a micro-batch's work. None of them starts a thread.
PRELOAD = ("pandas", "pyarrow.compute", "changefeed.spark.encode", "changefeed.spark.datasource")


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; the ones that fail are left to the workers (and returned)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a worker raises the real error where it uses the module
            failed.append(name)
    return failed


#: The cyclic GC's thresholds in our Python processes (CPython's default is 700, 10, 10). A
#: micro-batch allocates millions of short-lived containers (decoded rows, row blocks, message
#: lists), none of them in cycles; at the default a young collection ran every 700 of them and
#: re-walked the batch's survivors, 40-50% of unpacking a decoded batch (bench/RESULTS.md).
GC_THRESHOLDS = (50_000, 20, 20)


def quiet_gc() -> None:
    """Freeze what this process holds so far out of the cyclic GC's sight and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def main() -> None:
    drop_shadowing_archives()  # where the .pth of scripts/setup is missing (changefeed/sparkpath.py)
    preload()
    quiet_gc()  # the forked workers inherit both: the preloaded modules are never walked again
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
