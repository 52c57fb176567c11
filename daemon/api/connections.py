"""The Kafka listener's connections: read request frames, dispatch, write answers in order.

Requests on one connection are handled one at a time, in order, as Kafka does; many
connections run concurrently. On a SASL listener nothing but ApiVersions and the login
(SaslHandshake, SaslAuthenticate, answered on the spot) is served before a login
succeeds (daemon.api.sasl). A TLS listener accepts its sockets itself and has the loop
do each one's handshake (`connect_accepted_socket`) before the connection is served, so
a failed handshake is logged with OpenSSL's reason; its connections arrive decrypted.
Consecutive Produce requests are pipelined (up to MAX_PIPELINED), each one's appends
queued before the next is read. A frame over `socket.request.max.bytes` is refused
before its body is read, and a frame that does not decode closes only its own
connection (daemon.api.protocol); a handler bug closes only its connection too, and is
logged.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import ssl
import time
from typing import Any

from ..ops.metrics import Metrics
from ..security import tls as tls_settings
from ..security.acls import Authorizer
from ..security.sasl import Credentials
from ..storage.spliced import SplicedRecords
from . import protocol
from .handlers import CLOSE, ConnInfo, Handlers
from .record_messages import FetchAnswer
from .sasl import SASL_APIS, SaslApis

log = logging.getLogger("logkeeper.server")

STOP_GRACE_S = 10.0  # in-flight requests get this long to finish at shutdown
MAX_PIPELINED = 16  # Produce requests in flight per connection
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects to a TLS listener and stalls
_NOTHING = object()  # no request taken ahead from a connection's answer queue


def _answered(fut: asyncio.Future[Any]) -> bool:
    """Done with an answer (not a failure, which closes the connection after the answers
    before it were written)."""
    return fut.done() and not fut.cancelled() and fut.exception() is None


class _SpliceTarget:
    """Where a connection's spliced records go: a duplicate of its socket's fd, which
    the loop can watch for room (asyncio lets nobody but the transport watch the
    transport's own fd); fd -1 when the connection cannot take a splice (not a plain
    socket). The transport is made to empty its buffer on each drain, so a splice never
    overtakes bytes written before it."""

    def __init__(self, writer: _ClientConnection):
        self.fd = -1
        sock = writer.get_extra_info("socket")
        if sock is None or writer.get_extra_info("sslcontext") is not None:
            return
        self.fd = os.dup(sock.fileno())
        writer.transport.set_write_buffer_limits(high=0)

    async def writable(self) -> None:
        loop = asyncio.get_running_loop()
        room: asyncio.Future[None] = loop.create_future()
        loop.add_writer(self.fd, lambda: room.done() or room.set_result(None))
        try:
            await room
        finally:
            loop.remove_writer(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _ClientConnection(asyncio.BufferedProtocol):
    """One client's connection: the listener's protocol, its frames' reader and its
    answers' writer.

    Reading: the socket's bytes are received straight into `protocol.FrameAssembler`'s
    buffers (no stream buffer between: asyncio's StreamReader allocated a 256 KiB bytes
    per receive and copied each frame twice, a quarter of the loop's time under a produce
    load). Complete frames queue up to MAX_QUEUED, then reading pauses until `read_frame`
    takes them. Writing: `write` and `drain` as a StreamWriter's, over the transport's
    own flow control (pause_writing/resume_writing)."""

    MAX_QUEUED = 2 * MAX_PIPELINED

    def __init__(self, connections: Connections, listener: str):
        self.connections = connections
        self.listener = listener  # the listener name it came on
        self.frames = protocol.FrameAssembler(connections.max_frame)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self._ready: collections.deque[bytes | bytearray] = collections.deque()
        self._error: BaseException | None = None  # a bad frame, after the good ones
        self._ended = False  # no more frames: end of stream or connection lost
        self._reader: asyncio.Future[None] | None = None  # read_frame waiting
        self._reading_paused = False
        self._writing_paused = False
        self._drainers: list[asyncio.Future[None]] = []
        self._lost = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- asyncio's side ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        self.connections.on_connection(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._ready.extend(self.frames.received(nbytes))
        if self.frames.error is not None and not self._ended:
            self._error = self.frames.error
            self._ended = True
            self.transport.pause_reading()  # nothing more from this connection
        if len(self._ready) >= self.MAX_QUEUED and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        if not self._ended:
            try:
                self.frames.ended()
            except protocol.ProtocolError as err:
                self._error = err
            self._ended = True
        self._wake_reader()
        # Half-closed: the client sent all it will, and the answers still due are
        # written before the connection task closes the transport (as with a stream).
        # A TLS transport closes anyway (asyncio warns at every such close when asked
        # to keep it open).
        return self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._ended = True
        self._wake_reader()
        self.resume_writing()  # drain() sees the loss

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for fut in self._drainers:
            if not fut.done():
                fut.set_result(None)
        self._drainers.clear()

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    # ---- the connection's task's side ----

    async def read_frame(self) -> bytes | bytearray | None:
        """The next request frame (without its size prefix), None at the end of the
        stream; the frame error found in the stream once the frames before it are read."""
        while not self._ready:
            if self._error is not None:
                raise self._error
            if self._ended:
                return None
            if self._reader is None or self._reader.done():
                self._reader = self._loop.create_future()
            await self._reader
        frame = self._ready.popleft()
        if self._reading_paused and len(self._ready) < self.MAX_QUEUED // 2 and not self._ended:
            self._reading_paused = False
            self.transport.resume_reading()
        return frame

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send `data`; ConnectionResetError once the connection is gone (uvloop's closed
        transport raises RuntimeError: a client that left before its answer is not a
        server error)."""
        if self._lost or self.transport.is_closing():
            raise ConnectionResetError("the connection was lost")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait until the transport's buffer is under its high-water mark; raises
        ConnectionResetError once the connection is lost."""
        if self._lost or self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run, as StreamWriter does
            if self._lost:
                raise ConnectionResetError("the connection was lost")
        if self._writing_paused:
            fut = self._loop.create_future()
            self._drainers.append(fut)
            await fut
            if self._lost:
                raise ConnectionResetError("the connection was lost")

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)


class Connections:
    """The listeners' open connections. Event loop only."""

    def __init__(self, handlers: Handlers, metrics: Metrics, *, max_frame: int,
                 stopping: asyncio.Event):
        self.handlers = handlers
        self.metrics = metrics
        self.max_frame = max_frame
        self.stopping = stopping  # set: read no further requests, accept no connections
        self.servers: list[asyncio.base_events.Server] = []
        # The TLS listeners' own accepting: (listening sockets, the task accepting on them).
        self._tls_acceptors: list[tuple[list[socket.socket], asyncio.Task[None]]] = []
        self._handshakes: set[asyncio.Task[None]] = set()  # TLS handshakes under way
        # SASL logins (daemon.api.sasl); the daemon sets its SASL listeners' own.
        self.sasl = SaslApis({}, Credentials(), _no_store)
        self.tls: dict[str, ssl.SSLContext] = {}  # the TLS listeners' contexts, by name
        # How a client certificate's subject becomes its principal (ssl.principal.mapping.rules).
        self.principal_rules: tuple[tls_settings.PrincipalRule, ...] = ()
        self.authorizer: Authorizer | None = None  # authorizer.class.name set: the ACLs
        # Connection task -> whether it is in the middle of a request.
        # Each connection's serving task -> its requests being handled (the list its
        # `_serve` keeps, updated in place): busy while one of them is not done.
        self._connections: dict[asyncio.Task[None], list[asyncio.Future[Any]]] = {}

    async def listen(self, listener: str, host: str | None, port: int,
                     tls: ssl.SSLContext | None = None) -> tuple[str, int]:
        """Start accepting on host:port for the listener named `listener` (TLS with the
        `tls` context: see `_accept_tls`); returns the bound address. OSError if taken."""
        loop = asyncio.get_running_loop()
        if tls is None:
            server = await loop.create_server(
                lambda: _ClientConnection(self, listener), host, port, reuse_address=True)
            self.servers.append(server)
            return server.sockets[0].getsockname()[:2]
        self.tls[listener] = tls
        socks = await _bind(host, port)
        task = loop.create_task(self._accept_tls(socks, listener))
        self._tls_acceptors.append((socks, task))
        return socks[0].getsockname()[:2]

    def stop_accepting(self) -> None:
        for server in self.servers:
            server.close()
        for socks, task in self._tls_acceptors:
            task.cancel()
            task.add_done_callback(lambda _, socks=socks: [s.close() for s in socks])
        self._tls_acceptors.clear()

    async def _accept_tls(self, socks: list[socket.socket], listener: str) -> None:
        """A TLS listener's accepting: each socket accepted is handed to the loop's TLS
        (`connect_accepted_socket`) with the listener's context as it is then (a rotated
        keystore's, once renewed), whose handshake must finish within
        TLS_HANDSHAKE_TIMEOUT_S before the connection is served. Done this way, not with
        `start_tls` on an accepted plain transport, because an event loop may read from
        a transport as soon as it is made (uvloop does, whatever `connection_made`
        asks), and bytes of the handshake read as Kafka frames are lost to it."""
        loop = asyncio.get_running_loop()

        async def accept(lsock: socket.socket) -> None:
            while True:
                try:
                    sock, addr = await loop.sock_accept(lsock)
                except OSError as err:  # out of fds, say: wait, as asyncio's servers do
                    log.warning("listener %s: accept failed: %s", listener, err)
                    await asyncio.sleep(1.0)
                    continue
                if self.stopping.is_set():
                    sock.close()
                    continue
                hs = loop.create_task(self._tls_handshake(sock, addr, listener, self.tls[listener]))
                self._handshakes.add(hs)
                hs.add_done_callback(self._handshakes.discard)

        try:
            await asyncio.gather(*(accept(s) for s in socks))
        finally:
            for hs in list(self._handshakes):
                hs.cancel()

    async def _tls_handshake(self, sock: socket.socket, addr: Any, listener: str,
                             tls: ssl.SSLContext) -> None:
        """One accepted socket's TLS handshake; a failure is logged with OpenSSL's reason
        (a client that does not speak TLS, trusts another CA, has no certificate where
        one is required) and counted as a failed authentication, as Kafka's
        SslTransportLayer does. On success the connection is served (`on_connection`)."""
        loop = asyncio.get_running_loop()
        peer = f"{addr[0]}:{addr[1]}" if addr else "?"
        try:
            await loop.connect_accepted_socket(
                lambda: _ClientConnection(self, listener), sock, ssl=tls,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError) as err:  # ssl.SSLError: an OSError
            sock.close()
            reason = getattr(err, "reason", None) or str(err) or type(err).__name__
            if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
                reason += ": the client does not speak TLS"
            if getattr(err, "verify_message", None):  # the check its certificate failed
                reason += f" ({err.verify_message})"  # expired, another CA's, ...
            self._failed_login(peer, listener, f"TLS handshake failed: {reason}")

    async def close(self) -> None:
        """Idle connections close now; in-flight requests get STOP_GRACE_S to finish
        (long-polls return at once), then their connections close."""
        for task, inflight in list(self._connections.items()):
            if all(t.done() for t in inflight):
                task.cancel()  # idle: waiting for a request that will not be served
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def on_connection(self, link: _ClientConnection) -> None:
        if self.stopping.is_set():
            link.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve(link))
        self._connections[task] = []
        task.add_done_callback(lambda t: self._connections.pop(t, None))

    async def _serve(self, link: _ClientConnection) -> None:
        """Read requests, dispatch them, and leave writing to `_write_responses`.

        Consecutive Produce requests are pipelined (up to MAX_PIPELINED): each one's
        appends are queued on the workers before the next is read, so order per
        partition is kept. Any other request first waits for everything before it to
        finish, so it observes their effects as with one-at-a-time processing.
        Responses always go out in request order.
        """
        writer = link
        local = writer.get_extra_info("sockname")
        peer = writer.get_extra_info("peername")
        tls = self.tls.get(link.listener)
        principal = "User:ANONYMOUS"
        # On SASL_SSL the login names the principal (Kafka's SaslAuthenticationContext):
        # the certificate's subject is not mapped, and a rule that does not apply to it
        # refuses nothing.
        if tls is not None and link.listener not in self.sasl.listeners:
            shook = self._tls_principal(link, peer)
            if shook is None:
                link.close()
                return
            principal = shook
        conn = ConnInfo(local[0], local[1], f"{peer[0]}:{peer[1]}" if peer else "?",
                        link.listener, principal=principal, authorizer=self.authorizer)
        conn.authenticated = link.listener not in self.sasl.listeners
        me = asyncio.current_task()
        assert me is not None
        loop = me.get_loop()
        outq: asyncio.Queue[tuple[protocol.Request | None, asyncio.Future[Any], float] | None]
        outq = asyncio.Queue(MAX_PIPELINED)
        responder = loop.create_task(self._write_responses(outq, writer, conn))
        pending = self._connections.get(me, [])  # in flight; updated in place
        prev_produce = False
        self.metrics.connections.inc()
        try:
            while not self.stopping.is_set() and not responder.done():
                frame = await link.read_frame()
                if frame is None:
                    break
                started = time.perf_counter()
                if conn.login is not None and conn.login.raw:
                    # After a SaslHandshake v0 the client sends bare SASL tokens.
                    answer = self.sasl.raw_token(conn, bytes(frame))
                    if answer is None:
                        break  # a failed v0 login: closed without an answer, as Kafka's
                    done = loop.create_future()
                    done.set_result(answer)
                    await outq.put((None, done, started))
                    continue
                try:
                    req = protocol.decode_request(frame)
                except protocol.UnsupportedVersion as err:
                    if err.api_key != 18:
                        raise
                    # ApiVersions at a version we do not know: answer so the client can
                    # retry at one we do (KIP-511).
                    done: asyncio.Future[Any] = loop.create_future()
                    done.set_result(protocol.unsupported_api_versions_frame(err.correlation_id))
                    await outq.put((None, done, started))
                    continue
                if conn.session_expires is not None and req.api.key not in SASL_APIS and \
                        self.sasl.expired(conn):
                    log.info("closing %s: its SASL session as %s expired without a new "
                             "login (connections.max.reauth.ms)", conn.peer, conn.principal)
                    break
                if not conn.authenticated or req.api.key in SASL_APIS:
                    if req.api.key not in SASL_APIS and req.api.key != 18:
                        log.warning("closing %s: %s request before its SASL login on "
                                    "listener %s", conn.peer, req.name, conn.listener)
                        break
                    if req.api.key in SASL_APIS:
                        # Answered now, in order: what comes next depends on it.
                        await _finished(pending)
                        done = loop.create_future()
                        done.set_result(self._sasl_answer(req, conn))
                        await outq.put((req, done, started))
                        if conn.close_after:
                            break
                        continue
                if self.authorizer is not None and not self.authorizer.loaded and \
                        req.api.key != 18 and conn.principal not in self.authorizer.super_users:
                    # As Kafka, nothing is served before the authorizer has read the ACLs
                    # (in a cluster, once registered): a refusal now would be final to the
                    # client, so its request waits for them.
                    await self._authorizer_ready()
                produce = req.api.key == 0
                if not (produce and prev_produce):
                    await _finished(pending)
                if conn.muted_until:
                    # A client quota throttled this client (Kafka mutes its channel):
                    # nothing more of it is taken until the throttle time is over.
                    wait = conn.muted_until - loop.time()
                    conn.muted_until = 0.0
                    if wait > 0:
                        await asyncio.sleep(wait)
                if produce:
                    self.handlers.admit_produce(req, conn)
                prev_produce = produce
                # The handler runs up to its first await now: a Produce queues its appends
                # on the workers here, in request order.
                task = loop.create_task(self.handlers.handle(req, conn))
                pending[:] = [t for t in pending if not t.done()] + [task]
                await outq.put((req, task, started))
        except protocol.FrameTooLarge as err:
            self.metrics.bad_frames.labels("too_large").inc()
            log.warning("closing %s: %s", conn.peer, err)
        except (protocol.UnsupportedApi, protocol.UnsupportedVersion) as err:
            # Well-formed, just not served here (Kafka closes the connection too).
            reason = ("unsupported_api" if isinstance(err, protocol.UnsupportedApi)
                      else "unsupported_version")
            self.metrics.bad_frames.labels(reason).inc()
            log.warning("closing %s: %s", conn.peer, err)
        except protocol.ProtocolError as err:
            self.metrics.bad_frames.labels("undecodable").inc()
            log.warning("closing %s: %s", conn.peer, err)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            responder.cancel()
            raise
        finally:
            # Answers already due are still written, then the connection closes.
            if not responder.done():
                try:
                    outq.put_nowait(None)
                except asyncio.QueueFull:
                    await outq.put(None)
                await asyncio.wait([responder], timeout=STOP_GRACE_S)
                responder.cancel()
            self.metrics.connections.dec()
            writer.close()

    async def _authorizer_ready(self) -> None:
        assert self.authorizer is not None
        while not self.authorizer.loaded and not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.authorizer.ready.wait(), 1.0)
            except TimeoutError:
                continue

    def _failed_login(self, peer: str, listener: str, why: object) -> None:
        """A client that did not get through TLS: logged, and counted as a failed
        authentication, as Kafka's SslTransportLayer does."""
        log.info("failed authentication with %s on listener %s (%s)", peer, listener, why)
        self.metrics.logins.labels(listener, "failed").inc()

    def _tls_principal(self, link: _ClientConnection, peer: Any) -> str | None:
        """The principal of a connection whose TLS handshake succeeded: its client
        certificate's subject mapped by ssl.principal.mapping.rules, or User:ANONYMOUS
        without one; None (logged, counted as a failed authentication) when no rule maps
        it."""
        ssl_object = link.transport.get_extra_info("ssl_object")
        try:
            principal = tls_settings.certificate_principal(
                ssl_object.getpeercert(binary_form=True) if ssl_object else None,
                self.principal_rules)
        except (tls_settings.TlsError, ValueError) as err:
            self._failed_login(f"{peer[0]}:{peer[1]}" if peer else "?", link.listener, err)
            return None
        self.metrics.logins.labels(link.listener, "successful").inc()
        return principal

    def _sasl_answer(self, req: protocol.Request, conn: ConnInfo) -> Any:
        """SaslHandshake or SaslAuthenticate, answered on the spot (daemon.api.sasl)."""
        if req.api.key == 17:
            return self.sasl.handshake(req, conn)
        return self.sasl.authenticate(req, conn)

    async def _write_responses(self, outq: asyncio.Queue[Any], writer: _ClientConnection,
                               conn: ConnInfo) -> None:
        """Write the answers in request order. Answers already done when the one before
        them is written (pipelined Produce requests settled together) go out in one
        write: a send per answer was a tenth of the loop's time under a produce load."""
        out = _SpliceTarget(writer)
        held: list[Any] = []  # encoded answers not yet written
        answered: list[tuple[protocol.Request, float]] = []  # their requests, for metrics
        nxt: Any = _NOTHING
        try:
            while True:
                item = await outq.get() if nxt is _NOTHING else nxt
                nxt = _NOTHING
                if item is None:
                    await self._flush(writer, held, answered)
                    return
                req, fut, started = item
                response = await fut
                if req is None or response is CLOSE or isinstance(response, FetchAnswer):
                    await self._flush(writer, held, answered)
                if req is None:  # a ready-made frame
                    writer.write(response)
                    await writer.drain()
                    continue
                if response is CLOSE:
                    log.info("closing %s: an acks=0 produce failed", conn.peer)
                    writer.close()
                    return
                if isinstance(response, FetchAnswer):
                    try:
                        await self._send(writer, protocol.encode_response(req, response), out)
                    finally:
                        response.release()  # whatever was not sent (an error)
                    self.metrics.observe_request(req.name, req.version, req.size,
                                                 time.perf_counter() - started,
                                                 from_follower=_from_follower(req))
                    continue
                if response is not None:
                    held += protocol.encode_response(req, response)
                answered.append((req, started))
                if not outq.empty() and len(answered) < MAX_PIPELINED:
                    nxt = outq.get_nowait()
                    if nxt is not None and _answered(nxt[1]):
                        continue  # its answer goes out with these
                await self._flush(writer, held, answered)
        except (ConnectionError, asyncio.CancelledError):
            writer.close()
        except Exception:  # noqa: BLE001 - a handler bug closes this connection only
            self.metrics.bad_frames.labels("server_error").inc()
            log.exception("closing %s after an unexpected error", conn.peer)
            writer.close()
        finally:
            out.close()

    async def _flush(self, writer: _ClientConnection, held: list[Any],
                     answered: list[tuple[protocol.Request, float]]) -> None:
        """Write the held answers in one write, then count their requests as served."""
        if held:
            writer.write(held[0] if len(held) == 1 else b"".join(held))
            held.clear()
            await writer.drain()
        now = time.perf_counter()
        for req, started in answered:
            self.metrics.observe_request(req.name, req.version, req.size, now - started,
                                         from_follower=_from_follower(req))
        answered.clear()

    async def _send(self, writer: _ClientConnection, parts: list[Any],
                    out: _SpliceTarget) -> None:
        """Write one response's parts in order: bytes through the transport, spliced
        records from their pipes straight into the socket (or, where the connection
        cannot take a splice, copied out of the pipes and written as bytes)."""
        for part in parts:
            if not isinstance(part, SplicedRecords):
                writer.write(part)
                continue
            if out.fd < 0:
                writer.write(part.to_bytes())
                continue
            # The transport's buffer empties first (its high-water mark is 0 here), so
            # the socket sees the bytes in order.
            await writer.drain()
            if writer.transport.get_write_buffer_size() or writer.is_closing():
                raise ConnectionResetError("the connection closed while a response was sent")
            while True:
                try:
                    part.send_to(out.fd)
                    break
                except BlockingIOError:
                    await out.writable()
        await writer.drain()


async def _finished(pending: list[asyncio.Future[Any]]) -> None:
    """Wait until the requests in flight (`pending`) are done, then empty it. Most often
    they are done already (one request at a time): asyncio.wait would still take a turn
    of the event loop for them, a tenth of a small Fetch's time on the loop."""
    unfinished = [t for t in pending if not t.done()]
    if unfinished:
        await asyncio.wait(unfinished)
    pending.clear()


async def _no_store(user: str, config: dict[str, str]) -> None:
    """The SCRAM store of a daemon with no SASL listener (never called: the daemon sets
    its own)."""
    raise RuntimeError("no SASL listener")


async def _bind(host: str | None, port: int) -> list[socket.socket]:
    """Listening sockets on host:port as `loop.create_server` binds them: one per
    address the host resolves to (every interface, IPv4 and IPv6, for None or ""),
    SO_REUSEADDR, IPv6 sockets IPv6-only. OSError when one cannot be bound."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
            s.listen(100)
            s.setblocking(False)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


def _from_follower(req: protocol.Request) -> bool:
    """A Fetch of a follower replica (Kafka's isFromFollower: a replica id >= 0)."""
    return req.api.name == "Fetch" and getattr(req.body, "replica_id", -1) >= 0
