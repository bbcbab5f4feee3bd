"""GTID state text for positions: MariaDB ``domain-server-seq`` lists and MySQL ``uuid:1-5`` sets."""

from __future__ import annotations

import re
import struct
import uuid

from ...errors import ConfigError

_MARIA = re.compile(r"^\d+-\d+-\d+$")
_MYSQL_SID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


def is_mariadb_gtid(text: str) -> bool:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return bool(parts) and all(_MARIA.match(p) for p in parts)


class MariaGtidState:
    """The last GTID per replication domain (what ``@slave_connect_state`` takes)."""

    def __init__(self, text: str = "") -> None:
        self.domains: dict[int, tuple[int, int]] = {}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            if not _MARIA.match(part):
                raise ConfigError(f"bad MariaDB GTID {part!r}: expected domain-server-seq")
            domain, server, seq = (int(x) for x in part.split("-"))
            self.domains[domain] = (server, seq)

    def update(self, domain: int, server: int, seq: int) -> None:
        self.domains[domain] = (server, seq)

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(self.domains.items()))

    def __bool__(self) -> bool:
        return bool(self.domains)


class MySQLGtidSet:
    """A MySQL GTID set: per source uuid, sorted disjoint closed intervals of transaction numbers."""

    def __init__(self, text: str = "") -> None:
        self.sets: dict[str, list[tuple[int, int]]] = {}
        for part in (p.strip() for p in text.replace("\n", "").split(",")):
            if not part:
                continue
            sid, *ranges = part.split(":")
            if not _MYSQL_SID.match(sid) or not ranges:
                raise ConfigError(f"bad MySQL GTID set member {part!r}: expected uuid:N[-M][:N-M]...")
            for r in ranges:
                lo, _, hi = r.partition("-")
                try:
                    self.add_interval(sid, int(lo), int(hi or lo))
                except ValueError:
                    raise ConfigError(f"bad GTID interval {r!r} in {part!r}") from None

    def add_interval(self, sid: str, lo: int, hi: int) -> None:
        sid = sid.lower()
        intervals = sorted([*self.sets.get(sid, []), (lo, hi)])
        merged: list[tuple[int, int]] = []
        for a, b in intervals:
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        self.sets[sid] = merged

    def add(self, sid: str, gno: int) -> None:
        intervals = self.sets.get(sid.lower())
        if intervals and intervals[-1][1] + 1 == gno:  # the common case: the next number
            intervals[-1] = (intervals[-1][0], gno)
        else:
            self.add_interval(sid, gno, gno)

    def encode(self) -> bytes:
        """The binary form ``COM_BINLOG_DUMP_GTID`` carries (MySQL ``Gtid_set::encode``).

        ``n_sids`` (8), then per source uuid in text order: uuid (16), ``n_intervals`` (8) and each
        interval as start (8) and *exclusive* end (8), all little-endian. MySQL 8.4 tagged GTIDs
        use another format and are not supported.
        """
        out = [struct.pack("<Q", len(self.sets))]
        for sid, intervals in sorted(self.sets.items()):
            out.append(uuid.UUID(sid).bytes + struct.pack("<Q", len(intervals)))
            out.extend(struct.pack("<QQ", lo, hi + 1) for lo, hi in intervals)
        return b"".join(out)

    def __str__(self) -> str:
        return ",".join(
            sid + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in iv) for sid, iv in sorted(self.sets.items())
        )

    def __bool__(self) -> bool:
        return bool(self.sets)
