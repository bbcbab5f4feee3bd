"""The file a cluster operator hands to ``spark-submit``: ``spark-submit [OPTIONS] SUBMIT.py run CONFIG.toml``.

Why: ``spark-submit`` runs a Python *file*, not a module (no ``-m``), and its ``--master`` and
``--conf`` settings are already in the JVM it started. This file runs the ``changefeed`` command
line with those: ``--master`` defaults to the submitted ``spark.master`` (the CLI's own default
would be ``local[*]``), and when the submission names the executors' interpreter
(``spark.pyspark.python``, e.g. with ``--archives ENV.tar.gz#environment``) nothing more is
shipped (``--no-ship``). Every other argument is ``changefeed``'s (docs/cli.md, docs/deploy.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["main", "submitted_argv"]

_SHIPPING = ("run", "apply")


def submitted_argv(argv: Sequence[str], conf: dict[str, str]) -> list[str]:
    """``argv`` with ``--master`` and ``--no-ship`` added from the submission's Spark settings where it has none."""
    args = list(argv)
    at = next((i + 1 for i, a in enumerate(args) if a in _SHIPPING), None)
    if at is None:
        return args
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    extra: list[str] = []
    if "--master" not in given and conf.get("spark.master"):
        extra += ["--master", conf["spark.master"]]
    if conf.get("spark.pyspark.python") and not given & {"--py-env", "--no-ship"}:
        extra.append("--no-ship")
    return [*args[:at], *extra, *args[at:]]


def main(argv: Sequence[str] | None = None) -> int:
    from changefeed.cli import main as cli  # noqa: PLC0415
    from changefeed.spark.session import submitted_conf  # noqa: PLC0415

    return cli(submitted_argv(sys.argv[1:] if argv is None else argv, submitted_conf()))


if __name__ == "__main__":
    # Run as a file, this directory is first on sys.path: its modules (run, apply, ...) must not
    # shadow top-level ones.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.exit(main())
