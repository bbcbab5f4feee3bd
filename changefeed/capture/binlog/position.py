"""Where a binlog capture stands, and where it resumes: the savepoint after a complete transaction."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ConfigError


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """A resume point.

    ``file``/``pos`` is the start of the next transaction (just after the last complete one),
    ``gtid`` the GTID state there (MariaDB ``0-1-5`` or a MySQL set; ``""`` if unknown), ``clock``
    the last commit ts handed out (so a resumed capture derives the same timestamps), and
    ``skip`` how many events of the transaction starting at ``pos`` were already emitted: the
    position of an event inside a transaction is the transaction start plus its ordinal, so
    resuming from any emitted event's position neither repeats nor loses an event.
    ``versions`` holds (schema, table, version) of the tables a DDL has changed so far: the
    binlog cannot tell a resumed capture which schema version a table is at.
    """

    file: str
    pos: int = 4
    gtid: str = ""
    clock: int = 0
    skip: int = 0
    versions: tuple[tuple[str, str, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "pos": self.pos, "gtid": self.gtid, "clock": self.clock}
        if self.versions:
            out["versions"] = [list(v) for v in self.versions]
        if self.skip:
            out["skip"] = self.skip
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> BinlogPosition:
        try:
            return cls(
                file=str(obj["file"]),
                pos=int(obj.get("pos", 4)),
                gtid=str(obj.get("gtid", "") or ""),
                clock=int(obj.get("clock", 0)),
                skip=int(obj.get("skip", 0)),
                versions=tuple((str(s), str(t), int(v)) for s, t, v in obj.get("versions") or ()),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"bad binlog position {dict(obj)!r}: {exc}") from None

    @classmethod
    def parse(cls, text: str) -> BinlogPosition:
        """``FILE:POS`` (``binlog.000003:1234``) or ``FILE`` (from its start)."""
        name, sep, pos = text.rpartition(":")
        if not sep:
            return cls(file=text, pos=4)
        try:
            return cls(file=name, pos=int(pos))
        except ValueError:
            raise ConfigError(f"bad binlog position {text!r}: expected FILE:POS") from None

    def with_skip(self, skip: int) -> BinlogPosition:
        return replace(self, skip=skip)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


_SEQ = re.compile(r"^(.*?)(\d+)$")


@functools.lru_cache(maxsize=256)
def file_key(name: str) -> tuple[str, int]:
    """Sort key of a binlog file name: base name and sequence number (``binlog.000012``)."""
    m = _SEQ.match(name.rsplit("/", 1)[-1])
    if not m:
        return (name, 0)
    return (m.group(1), int(m.group(2)))


def reached(file: str, pos: int, until: tuple[str, int]) -> bool:
    """Has (file, pos) reached or passed ``until``?"""
    return (file_key(file), pos) >= (file_key(until[0]), until[1])
