"""MySQL COM_BINLOG_DUMP_GTID: the GTID set encoding and the packet (unit tests: no MySQL server here)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from changefeed.capture.binlog.gtid import MySQLGtidSet
from changefeed.capture.binlog.position import BinlogPosition
from changefeed.capture.binlog.replica import (
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_THROUGH_GTID,
    COM_BINLOG_DUMP_GTID,
    ReplicaStream,
    ServerAddress,
    binlog_dump_gtid_packet,
)
from changefeed.errors import ConfigError

SID1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
SID2 = "19d69c1e-ae97-4b8c-a1ef-9e12ba966457"


def test_gtid_set_encoding_by_hand() -> None:
    encoded = MySQLGtidSet(f"{SID1}:1-5:7").encode()
    expected = (
        struct.pack("<Q", 1)
        + uuid.UUID(SID1).bytes
        + struct.pack("<Q", 2)
        + struct.pack("<QQ", 1, 6)  # intervals are sent with an exclusive end
        + struct.pack("<QQ", 7, 8)
    )
    assert encoded == expected
    assert MySQLGtidSet("").encode() == b"\0" * 8


@pytest.mark.parametrize(
    "text",
    [
        f"{SID1}:1-5",
        f"{SID1}:1-3:8-10,{SID2}:42-47:80-100:130-140",
        f"{SID2.upper()}:1,{SID1}:1-9223372036854775806",
    ],
)
def test_gtid_set_encoding_matches_python_mysql_replication(text: str) -> None:
    from pymysqlreplication.gtid import GtidSet  # noqa: PLC0415 - the oracle

    ours = MySQLGtidSet(text).encode()
    # MySQL encodes sources in uuid order (Gtid_set::encode walks get_sorted_sidno); the oracle keeps
    # the text's order, so give it the members sorted.
    theirs = GtidSet(",".join(sorted(text.lower().split(",")))).encoded()
    assert ours == theirs


def test_binlog_dump_gtid_packet_layout() -> None:
    gset = MySQLGtidSet(f"{SID1}:1-5")
    packet = binlog_dump_gtid_packet(4242, gset, BINLOG_DUMP_NON_BLOCK)
    assert packet[0] == COM_BINLOG_DUMP_GTID == 0x1E
    flags, server_id, name_len = struct.unpack_from("<HII", packet, 1)
    assert flags == BINLOG_DUMP_NON_BLOCK | BINLOG_THROUGH_GTID
    assert (server_id, name_len) == (4242, 0)
    pos, size = struct.unpack_from("<QI", packet, 11)
    assert pos == 4 and size == len(gset.encode())
    assert packet[23:] == gset.encode() and len(packet) == 23 + size


class _FakeConn:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self._next_seq_id = 3

    def write_packet(self, payload: bytes) -> None:
        self.sent.append(payload)


def test_replica_stream_sends_dump_gtid_to_mysql_only() -> None:
    start = BinlogPosition("", 4, gtid=f"{SID1}:1-5")
    stream = ReplicaStream(ServerAddress("127.0.0.1"), start, server_id=7, blocking=True)
    conn: Any = _FakeConn()
    stream.mariadb = False
    stream._dump(conn, start)
    assert conn.sent == [binlog_dump_gtid_packet(7, MySQLGtidSet(start.gtid), 0)]
    stream.mariadb = True  # MariaDB: COM_BINLOG_DUMP with an empty name after @slave_connect_state
    stream._dump(conn, BinlogPosition("", 4, gtid="0-1-5"))
    assert conn.sent[-1][0] == 0x12 and conn.sent[-1].endswith(struct.pack("<I", 7))
    stream.mariadb = False
    with pytest.raises(ConfigError):
        stream._dump(conn, BinlogPosition("", 4, gtid="0-1-5"))  # a MariaDB GTID for a MySQL server
