"""The replica side of the MySQL/MariaDB replication protocol: register, dump, read the event stream.

PyMySQL does the handshake and authentication; after that we write the two replication commands
ourselves and read the packet stream with our own buffered reader (a read timeout never loses a
partial packet, so the stop flag can be polled while idle).
"""

from __future__ import annotations

import logging
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ...clients.mysql import (
    TLS_OPTIONS,
    Cursor,
    MySQLError,
    MySQLParams,
    OperationalError,
    PyMySQLConnection,
    TLSOptions,
    binary_logs,
    connect,
)
from ...errors import CaptureError, ConfigError
from ...secrets import mask_secrets
from .capture import SourceDisconnectedError
from .constants import CHECKSUM_LEN, HEADER_LEN, EventType
from .files import RawEvent
from .gtid import MySQLGtidSet
from .position import BinlogPosition

log = logging.getLogger(__name__)

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E
BINLOG_DUMP_NON_BLOCK = 0x01
BINLOG_THROUGH_GTID = 0x04  # COM_BINLOG_DUMP_GTID: the packet carries a GTID set
MARIA_SLAVE_CAPABILITY_GTID = 4
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
_MAX_PACKET = 0xFFFFFF
# Errors that reconnecting cannot fix: bad credentials, missing privileges (REPLICATION SLAVE/CLIENT).
_FATAL_ERRORS = frozenset({1044, 1045, 1142, 1227, 1698, 1236})


def _disconnected_or_fatal(what: str, exc: MySQLError) -> CaptureError:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if isinstance(exc, OperationalError) and code not in _FATAL_ERRORS:
        return SourceDisconnectedError(f"{what}: {exc}")
    return CaptureError(f"{what}: {exc}")


def _one_row(cur: Cursor) -> tuple[Any, ...]:
    """The row of a ``SELECT`` of server variables (always exactly one)."""
    row = cur.fetchone()
    assert row is not None
    return row


@dataclass(frozen=True)
class ServerAddress:
    host: str
    port: int = 3306
    user: str = "root"
    password: str = ""
    tls: TLSOptions = TLSOptions()

    @classmethod
    def from_url(cls, url: str) -> ServerAddress:
        """``mysql://USER[:PASS]@HOST[:PORT][?ssl-mode=...&ssl-ca=FILE&ssl-cert=FILE&ssl-key=FILE]``.

        Percent-escapes are allowed in user and password; the only options are the TLS ones
        (`changefeed.clients.mysql.TLSOptions`; dashes or underscores).
        """
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"bad replica URL {mask_secrets(url)!r}: {exc}") from None
        if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
            raise ConfigError(f"expected mysql://USER[:PASS]@HOST:PORT, got {mask_secrets(url)!r}")
        options: dict[str, str] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            name = key.replace("-", "_").lower()
            if name not in TLS_OPTIONS:
                raise ConfigError(
                    f"the replica connection takes no URL option but ssl-mode, ssl-ca, ssl-cert and ssl-key, got "
                    f"{key!r} in {mask_secrets(url)!r}"
                )
            options[name] = value
        try:
            tls = TLSOptions.from_options(options)
        except ConfigError as exc:
            raise ConfigError(f"replica URL {mask_secrets(url)!r}: {exc.message}") from None
        return cls(
            host=parts.hostname,
            port=port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            tls=tls,
        )

    def url(self, *, password: bool = False) -> str:
        """``mysql://USER@HOST:PORT`` with the TLS options; the password only when asked (never log that one)."""
        auth = quote(self.user, safe="") + (":" + quote(self.password, safe="") if password and self.password else "")
        query = self.tls.query()
        return f"mysql://{auth}@{self.host}:{self.port}" + (f"?{query}" if query else "")

    def sql_params(self) -> MySQLParams:
        """The SQL connection to this replica-protocol source (its user, password and TLS options)."""
        return MySQLParams(
            host=self.host, port=self.port, user=self.user, password=self.password, options=self.tls.options()
        )

    def connect_kwargs(self) -> dict[str, Any]:
        """Host, port, user, password and TLS settings as `changefeed.clients.mysql.connect` takes them."""
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password, "tls": self.tls}

    def __str__(self) -> str:  # never shows the password
        return f"{self.user}@{self.host}:{self.port}"


def random_server_id() -> int:
    """A replica server id unlikely to clash (the source kills an older dump with the same id)."""
    return random.randint(1_000_000, 2_000_000_000)


def binlog_dump_gtid_packet(server_id: int, gtid_set: MySQLGtidSet, flags: int = 0) -> bytes:
    """MySQL ``COM_BINLOG_DUMP_GTID``: stream every transaction not in ``gtid_set`` (auto-positioning).

    flags(2) server_id(4) name_size(4) name pos(8) data_size(4) data: the name is empty and the
    position 4, as a MySQL replica sends them with SOURCE_AUTO_POSITION=1 (rpl_replica.cc
    ``request_dump``); ``BINLOG_THROUGH_GTID`` says the GTID set follows. MariaDB has no such
    command (it takes ``@slave_connect_state`` and COM_BINLOG_DUMP).
    """
    data = gtid_set.encode()
    return (
        bytes([COM_BINLOG_DUMP_GTID])
        + struct.pack("<HII", flags | BINLOG_THROUGH_GTID, server_id, 0)
        + struct.pack("<QI", 4, len(data))
        + data
    )


class ReplicaStream:
    """Raw events from one replication connection, starting at a savepoint.

    ``blocking=False`` asks the server to end the stream when it has sent everything it has
    (``BINLOG_DUMP_NON_BLOCK``); otherwise it streams forever, with heartbeats while idle.
    Connection loss raises `SourceDisconnectedError` for the capture to reconnect from its savepoint.
    """

    def __init__(
        self,
        address: ServerAddress,
        start: BinlogPosition,
        *,
        server_id: int,
        blocking: bool = True,
        heartbeat: float = 1.0,
        connect_timeout: float = 10.0,
        stop: threading.Event | None = None,
        require_full_metadata: bool = True,
    ) -> None:
        self.address = address
        self.start = start
        self.server_id = server_id
        self.blocking = blocking
        self.heartbeat = heartbeat
        self.connect_timeout = connect_timeout
        self.stop = stop or threading.Event()
        self.require_full_metadata = require_full_metadata
        self.collations: dict[int, tuple[str, str]] | None = None
        self.mariadb = False
        self.checksum = False
        self._conn: PyMySQLConnection | None = None
        self._buf = bytearray()
        self._off = 0
        self._last_data = 0.0

    # ------------------------------------------------------------------ setup

    def _connect(self) -> PyMySQLConnection:
        try:
            return connect(
                **self.address.connect_kwargs(),
                connect_timeout=self.connect_timeout,
                charset="utf8mb4",
                autocommit=True,
            )
        except MySQLError as exc:
            raise _disconnected_or_fatal(f"cannot connect to {self.address}", exc) from None

    def _prepare(self, conn: PyMySQLConnection) -> BinlogPosition:
        """Check the server's settings, announce what we understand, pick the start file."""
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION(), @@global.binlog_checksum, @@global.binlog_format")
            version, checksum, fmt = _one_row(cur)
            self.mariadb = "mariadb" in str(version).lower()
            if str(fmt).upper() != "ROW":
                raise CaptureError(f"{self.address} has binlog_format={fmt}; capture needs ROW")
            try:
                cur.execute("SELECT @@global.binlog_row_metadata")
                metadata = str(_one_row(cur)[0]).upper()
            except MySQLError:
                metadata = "NONE"  # MySQL < 8.0.1 / MariaDB < 10.5
            if metadata != "FULL" and self.require_full_metadata:
                raise CaptureError(
                    f"{self.address} has binlog_row_metadata={metadata}; capture needs FULL (column names)"
                    " or the schema tracker"
                )
            self.checksum = str(checksum).upper() == "CRC32"
            # The source sends checksums only to replicas that say they can verify them.
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @master_heartbeat_period = %s", (int(self.heartbeat * 1e9),))
            if self.mariadb:
                # MariaDB sends its GTID/annotate events only to replicas announcing the capability.
                cur.execute("SET @mariadb_slave_capability = %s", (MARIA_SLAVE_CAPABILITY_GTID,))
                cur.execute(
                    "SELECT id, character_set_name, full_collation_name"
                    " FROM information_schema.collation_character_set_applicability WHERE id IS NOT NULL"
                )
            else:
                cur.execute("SELECT id, character_set_name, collation_name FROM information_schema.collations")
            self.collations = {int(i): (str(cs), str(name)) for i, cs, name in cur.fetchall()}
            start = self.start
            if not start.file:
                if start.gtid and not self.mariadb:
                    pass  # MySQL: COM_BINLOG_DUMP_GTID with the set, in _dump
                elif start.gtid:
                    cur.execute("SET @slave_connect_state = %s", (start.gtid,))
                    cur.execute("SET @slave_gtid_strict_mode = 1")
                    cur.execute("SET @slave_gtid_ignore_duplicates = 0")
                else:
                    logs = binary_logs(cur)
                    if not logs:
                        raise CaptureError(f"{self.address} has no binary logs (is log_bin on?)")
                    start = BinlogPosition(logs[0][0], 4, start.gtid, start.clock)
        return start

    def _command(self, conn: PyMySQLConnection, payload: bytes) -> None:
        # A command is one packet with sequence id 0: 3-byte length, 1-byte sequence, payload.
        conn._next_seq_id = 0
        conn.write_packet(payload)

    def _register(self, conn: PyMySQLConnection) -> None:
        # COM_REGISTER_SLAVE: server_id(4) hostname user password (1-byte length each) port(2) rank(4) master_id(4)
        host = socket.gethostname().encode()[:60]
        payload = (
            bytes([COM_REGISTER_SLAVE])
            + self.server_id.to_bytes(4, "little")
            + bytes([len(host)])
            + host
            + b"\0\0"
            + (0).to_bytes(2, "little")
            + (0).to_bytes(4, "little")
            + (0).to_bytes(4, "little")
        )
        self._command(conn, payload)
        conn._read_packet()  # OK, or raises the server's error

    def _dump(self, conn: PyMySQLConnection, start: BinlogPosition) -> None:
        # COM_BINLOG_DUMP: pos(4) flags(2) server_id(4) filename; MariaDB GTID mode sends an empty name.
        flags = 0 if self.blocking else BINLOG_DUMP_NON_BLOCK
        if not start.file and start.gtid and not self.mariadb:
            self._command(conn, binlog_dump_gtid_packet(self.server_id, MySQLGtidSet(start.gtid), flags))
            return
        name = start.file.encode() if start.file else b""
        pos = start.pos if start.file else 4
        payload = (
            bytes([COM_BINLOG_DUMP])
            + min(pos, 0xFFFFFFFF).to_bytes(4, "little")
            + flags.to_bytes(2, "little")
            + self.server_id.to_bytes(4, "little")
            + name
        )
        self._command(conn, payload)

    # ------------------------------------------------------------------ stream

    def __iter__(self) -> Iterator[RawEvent | None]:
        conn = self._connect()
        self._conn = conn
        try:
            start = self._prepare(conn)
            self._register(conn)
            self._dump(conn, start)
        except MySQLError as exc:
            raise _disconnected_or_fatal(f"replication setup on {self.address} failed", exc) from None
        log.info(
            "binlog dump started server=%s start=%s gtid=%s server_id=%d mariadb=%s",
            self.address,
            start,
            start.gtid or "-",
            self.server_id,
            self.mariadb,
        )
        sock = conn._sock
        assert sock is not None
        sock.settimeout(0.25)
        self._buf = bytearray()
        self._off = 0
        self._last_data = time.monotonic()
        file, pos = start.file, start.pos
        while True:
            payload = self._packet(sock)
            if payload is None:
                yield None  # idle: let the caller check its stop flag
                if self.stop.is_set():
                    return
                continue
            first = payload[0]
            if first == 0xFE and len(payload) < 9:
                if not self.blocking:  # EOF: a non-blocking dump reached the end
                    return
                # A blocking dump ends only when the source goes away (a shutdown ends it with EOF).
                raise SourceDisconnectedError(f"{self.address} ended the binlog dump", where=f"{file}:{pos}")
            if first == 0xFF:
                code = int.from_bytes(payload[1:3], "little")
                message = payload[9:].decode("utf-8", "replace") if payload[3:4] == b"#" else payload[3:].decode()
                if code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
                    raise CaptureError(f"source error {code}: {message}", where=f"{file}:{pos}")
                raise SourceDisconnectedError(f"source error {code}: {message}", where=f"{file}:{pos}")
            data = bytes(payload[1:])
            if len(data) < HEADER_LEN:
                raise CaptureError(f"short event packet of {len(data)} bytes", where=f"{file}:{pos}")
            etype = data[4]
            log_pos = int.from_bytes(data[13:17], "little")
            if etype == EventType.ROTATE:
                end = len(data) - (CHECKSUM_LEN if self.checksum else 0)
                file = data[HEADER_LEN + 8 : end].decode("utf-8")
                start_pos = pos
                pos = int.from_bytes(data[HEADER_LEN : HEADER_LEN + 8], "little")
                yield RawEvent(file, start_pos if log_pos else pos, data)
                continue
            event_start = log_pos - len(data) if log_pos else pos
            if etype in (EventType.HEARTBEAT, EventType.HEARTBEAT_V2):
                yield None
                continue
            yield RawEvent(file, event_start, data)
            if log_pos:
                pos = log_pos

    def _packet(self, sock: socket.socket) -> bytearray | None:
        """One payload (joining 16 MB continuation packets), or None after an idle read timeout."""
        payload = bytearray()
        while True:
            header = self._take(sock, 4, idle_ok=not payload)
            if header is None:
                return None
            length = int.from_bytes(header[:3], "little")
            payload += self._take(sock, length, idle_ok=False) or b""
            if length < _MAX_PACKET:
                return payload

    def _take(self, sock: socket.socket, n: int, idle_ok: bool) -> bytes | None:
        """``n`` bytes from the socket; None on a read timeout between packets (when ``idle_ok``).

        Heartbeats arrive every ``heartbeat`` seconds on an idle stream, so silence for three
        periods means the connection is dead even if the socket has not noticed.
        """
        buf = self._buf
        dead_after = max(3 * self.heartbeat, 5.0)
        while len(buf) - self._off < n:
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                if time.monotonic() - self._last_data > dead_after:
                    raise SourceDisconnectedError(
                        f"no data or heartbeat from {self.address} for {dead_after:.0f} s"
                    ) from None
                if idle_ok and len(buf) == self._off:
                    return None
                continue
            except OSError as exc:
                raise SourceDisconnectedError(f"connection to {self.address} lost: {exc}") from None
            if not chunk:
                raise SourceDisconnectedError(f"{self.address} closed the replication connection")
            self._last_data = time.monotonic()
            if self._off:
                del buf[: self._off]
                self._off = 0
            buf += chunk
        out = bytes(buf[self._off : self._off + n])
        self._off += n
        return out

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn._force_close()
            except Exception:
                log.debug("closing the replication connection failed", exc_info=True)
