"""TLS in front of a plain-text test service: a terminating proxy, and the tansu broker behind one.

tansu 0.6 (the test broker) takes ``--cert``/``--key`` but keeps its listener in plain text, so the
Kafka clients' TLS was tested only up to the librdkafka settings they build. :class:`TLSProxy`
closes that gap: it listens on a free ``127.0.0.1`` port with a server certificate, optionally
requires a client certificate signed by a given CA (mutual TLS), and forwards the decrypted bytes
to a plain-text ``upstream`` address, both ways, one upstream connection per client connection.

:class:`TLSBroker` is a :class:`~changefeed.testing.broker.Broker` behind such a proxy: tansu
advertises the proxy's address in its metadata, so every connection a Kafka client makes after
bootstrapping (the partition leader, the group coordinator) goes through TLS too. Its
``bootstrap_servers`` is the proxy; its :meth:`TLSBroker.admin` (and so ``create_topic``) speaks TLS
with the client certificate.

The proxy runs an asyncio loop in a daemon thread and does TLS with memory BIOs, so a failed
handshake still sends its alert (a client without a certificate hears "certificate required", as
from a real broker). Every failed handshake is recorded in :attr:`TLSProxy.failures`
(``"127.0.0.1:PORT: SSLError: ..."``): a test can tell what the proxy refused and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from changefeed.testing import ServiceError
from changefeed.testing.broker import Broker
from changefeed.testing.ports import HOST, Endpoint
from changefeed.testing.tls import TLSFiles

if TYPE_CHECKING:
    from ..clients.kafka import AdminClient

__all__ = ["TLSBroker", "TLSProxy"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class TLSProxy(Endpoint):
    """A TLS-terminating TCP proxy on ``127.0.0.1`` forwarding to a plain-text ``upstream``.

    ``cert``/``key`` are the server certificate and its key; with ``client_ca`` a client must present
    a certificate signed by that CA (mutual TLS), without it none is asked for. ``upstream`` is
    ``(host, port)`` or a callable giving it (read per connection), and may be set after
    :meth:`start`: a connection that arrives before there is one is closed after its handshake.
    ``port`` ``None`` binds a port the kernel picks (bound at once, so nobody can take it).
    """

    def __init__(
        self,
        *,
        cert: str | Path,
        key: str | Path,
        client_ca: str | Path | None = None,
        upstream: tuple[str, int] | Callable[[], tuple[str, int] | None] | None = None,
        port: int | None = None,
        handshake_timeout: float = 5.0,
        name: str = "tls-proxy",
    ) -> None:
        self.name = name
        self.handshake_timeout = handshake_timeout
        self.upstream = upstream
        #: One line per TLS handshake the proxy refused or that failed, oldest first.
        self.failures: list[str] = []
        #: Client connections that completed the TLS handshake.
        self.accepted = 0
        self._cert, self._key = str(cert), str(key)
        self._client_ca = str(client_ca) if client_ca is not None else None
        self._wanted_port = port
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()

    # --- connection details ---------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, where TLS clients connect."""
        return f"{self.host}:{self.port}"

    @property
    def mutual(self) -> bool:
        """True when a client certificate is required."""
        return self._client_ca is not None

    def ssl_context(self) -> ssl.SSLContext:
        """The server side's TLS settings: the certificate, and the client CA when mutual."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._cert, self._key)
        if self._client_ca is not None:
            ctx.load_verify_locations(cafile=self._client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    # --- lifecycle ------------------------------------------------------------------------------------

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        """Bind the port and serve in a daemon thread; a no-op while running."""
        if self.is_running():
            return self
        self.ssl_context()  # a bad certificate or key fails here, in the caller's thread
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((HOST, self._wanted_port or self._port or 0))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ServiceError(f"{self.name}: cannot listen on {HOST}:{self._wanted_port or 0}: {exc}") from exc
        self._port = int(sock.getsockname()[1])
        loop = self._loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._on_loop_error)
        ready = threading.Event()
        failed: list[BaseException] = []

        async def serve() -> None:
            self._server = await asyncio.start_server(self._client, sock=sock)
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
                loop.run_forever()
            except BaseException as exc:  # pragma: no cover - only a broken event loop
                failed.append(exc)
                ready.set()
            finally:
                # A connection accepted after _close() gathered the tasks would otherwise be left
                # mid-handshake, and its cleanup would run against a closed loop when collected.
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"{self.name}:{self._port}", daemon=True)
        self._thread.start()
        if not ready.wait(10) or failed:
            self.stop()
            raise ServiceError(f"{self.name}: the proxy did not start: {failed[0] if failed else 'timeout'}")
        log.info("%s ready on %s (%s)", self.name, self.address, "mutual TLS" if self.mutual else "TLS, no client cert")
        return self

    def stop(self) -> None:
        """Close the listener and every open connection, and end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            with contextlib.suppress(RuntimeError, TimeoutError):  # the loop closed meanwhile, or is stuck
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=10)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        self._loop = self._thread = self._server = None
        if self._wanted_port is None:
            self._port = None
        log.info("%s stopped", self.name)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the loop's side ------------------------------------------------------------------------------

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        log.debug("%s: %s", self.name, context.get("message"), exc_info=context.get("exception"))

    def _upstream(self) -> tuple[str, int] | None:
        target = self.upstream
        return target() if callable(target) else target

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        who = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            tls = _TLSConnection(self.ssl_context(), reader, writer)
            try:
                await asyncio.wait_for(tls.handshake(), self.handshake_timeout)
            except (OSError, TimeoutError) as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                with self._lock:
                    self.failures.append(f"{who}: {reason}")
                log.debug("%s: TLS handshake with %s failed: %s", self.name, who, reason)
                return
            with self._lock:
                self.accepted += 1
            target = self._upstream()
            if target is None:
                log.debug("%s: no upstream yet, closing %s", self.name, who)
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*target)
            except OSError as exc:
                log.debug("%s: upstream %s:%s refused %s: %s", self.name, target[0], target[1], who, exc)
                return
            await _first_done(tls.copy_to(upstream_writer), tls.copy_from(upstream_reader))
        except asyncio.CancelledError:
            pass
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    w.close()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(w.wait_closed(), 2)
            self._tasks.discard(task)


class _TLSConnection:
    """The server side of one TLS connection over a plain stream, with memory BIOs.

    Unlike asyncio's own TLS transport, a failed handshake still sends its alert (e.g. TLS 1.3's
    ``certificate_required``) before the connection closes, as a real broker does, so the client
    can say why. Both directions run in the one event loop thread: the SSL object is never used
    concurrently.
    """

    def __init__(self, ctx: ssl.SSLContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._ssl = ctx.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._reader, self._writer = reader, writer

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            self._writer.write(data)
            await self._writer.drain()

    async def _receive(self) -> bool:
        """Feed the next bytes from the client into the SSL object; False at end of stream."""
        data = await self._reader.read(_CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def handshake(self) -> None:
        while True:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._receive():
                    raise ConnectionResetError("the client closed the connection during the handshake") from None
                continue
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    await self._flush()  # the alert, so the client learns why
                raise
            await self._flush()
            return

    async def copy_to(self, upstream: asyncio.StreamWriter) -> None:
        """Decrypt what the client sends and write it to ``upstream``, until either side ends."""
        with contextlib.suppress(OSError):
            while True:  # the handshake's last read may already hold application data: decrypt first
                while True:
                    try:
                        data = self._ssl.read(_CHUNK)
                    except ssl.SSLWantReadError:
                        break
                    except ssl.SSLZeroReturnError:  # close_notify
                        return
                    if not data:
                        return
                    upstream.write(data)
                await upstream.drain()
                await self._flush()  # TLS 1.3 post-handshake messages (key updates)
                if not await self._receive():
                    return

    async def copy_from(self, upstream: asyncio.StreamReader) -> None:
        """Encrypt what ``upstream`` sends and write it to the client, until either side ends."""
        with contextlib.suppress(OSError):
            while data := await upstream.read(_CHUNK):
                self._ssl.write(data)
                await self._flush()


async def _first_done(*coroutines: Coroutine[Any, Any, None]) -> None:
    """Run all until one ends (Kafka has no half-closed connections), then cancel the rest."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class TLSBroker(Broker):
    """A memory-storage tansu broker reachable only through a :class:`TLSProxy` (mutual TLS by default).

    tansu listens in plain text on ``port`` (tests may reach it there); it advertises the proxy, so
    all clients' connections after bootstrap go through TLS as well. ``tls`` gives the proxy's
    certificate (``cert``/``key``) and the CA client certificates must be signed by (``ca``);
    ``require_client_cert=False`` asks for none. :meth:`client_config` is the librdkafka settings of
    a client that trusts ``tls.ca`` and presents ``tls.client_cert``.
    """

    def __init__(self, tls: TLSFiles, *, require_client_cert: bool = True, name: str = "tansu-tls", **kwargs: Any):
        if "storage_engine" in kwargs or "advertised_listener" in kwargs:
            raise TypeError("TLSBroker uses memory storage and advertises its proxy")
        super().__init__(name=name, **kwargs)
        self.tls = tls
        self.proxy = TLSProxy(
            cert=tls.cert,
            key=tls.key,
            client_ca=tls.ca if require_client_cert else None,
            upstream=self._plain_address,
            name=f"{name}-proxy",
        )

    def _plain_address(self) -> tuple[str, int] | None:
        return (self.host, self._port) if self._port is not None else None

    @property
    def bootstrap_servers(self) -> str:
        """The proxy's ``127.0.0.1:PORT``: TLS only."""
        return self.proxy.address

    @property
    def plain_servers(self) -> str:
        """tansu's own plain-text listener (a client bootstrapping there is sent on to the proxy)."""
        return f"{self.host}:{self.port}"

    def client_config(self, *, client_cert: bool = True) -> dict[str, str]:
        """librdkafka's TLS settings for this broker: its CA, and the client certificate unless told not to."""
        conf = {"security.protocol": "SSL", "ssl.ca.location": str(self.tls.ca)}
        if client_cert:
            conf["ssl.certificate.location"] = str(self.tls.client_cert)
            conf["ssl.key.location"] = str(self.tls.client_key)
        return conf

    def admin(self, **conf: Any) -> AdminClient:
        """An AdminClient speaking TLS to the proxy (``create_topic`` and the readiness probe use it)."""
        return super().admin(**{**self.client_config(), **conf})

    def info(self) -> dict[str, Any]:
        return {**super().info(), "plain_servers": self.plain_servers, "tls": True}

    def start(self) -> Self:
        self.proxy.start()  # first: tansu advertises its port
        try:
            return super().start()
        except BaseException:
            self.proxy.stop()
            raise

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.proxy.stop()

    def _argv(self) -> list[str]:
        self.advertised_listener = self.proxy.address
        return super()._argv()
