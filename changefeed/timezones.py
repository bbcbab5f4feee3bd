"""The time-zone rule of the capture jobs, importable without Spark.

`changefeed.config` checks ``time-zone`` with it when the config file is read, so a name the
Spark source would refuse fails before any job starts, not inside a Spark task.
"""

from __future__ import annotations

from datetime import UTC, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ConfigError, clip


def zone(name: str) -> tzinfo:
    """``UTC`` (also ``Z``, ``+00:00``, empty) or an IANA name such as ``Asia/Shanghai``."""
    if name.upper() in ("UTC", "Z", "+00:00", ""):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {clip(name)} (use UTC or an IANA name like Asia/Shanghai)") from None
