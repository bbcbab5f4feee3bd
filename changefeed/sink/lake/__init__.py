"""Lakehouse targets: Delta Lake (``delta://DIR``) and Apache Iceberg (``iceberg://DIR``) tables.

See docs/lakehouse.md. The formats' libraries are imported only by the module of each format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..base import Sink

#: The URI schemes of the lake targets (``changefeed apply --to`` and ``run``'s sink-uri).
LAKE_SCHEMES = ("delta", "iceberg")


def lake_sink(scheme: str, root: Path, params: Mapping[str, str], time_zone: str) -> Callable[[], Sink]:
    """``delta://DIR?mode=...`` / ``iceberg://DIR?mode=...&catalog-uri=...`` -> a sink factory.

    The parameters are checked here (unknown ones refused, naming them), before any job starts.
    """
    from .common import LakeOptions  # noqa: PLC0415 - pyarrow only where a lake target is used

    options = LakeOptions.from_params(scheme, params, time_zone)
    if scheme == "delta":
        from .delta import DeltaSink  # noqa: PLC0415

        return partial(DeltaSink, root, options)
    from .iceberg import IcebergSink  # noqa: PLC0415

    return partial(IcebergSink, root, options)
