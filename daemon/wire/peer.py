"""An asyncio connection from this broker to another one (a follower to its leader).

`Peer` frames requests with `daemon.api.protocol.encode_request`, sends one at a time
(Kafka's inter-broker clients keep one request in flight per connection, which keeps
answers in order), checks that each answer carries the correlation id it waits for, and
decodes it with the request's response class at the request's version (a Fetch
response with `daemon.api.record_messages.decode_fetch`, its records left in the frame).
Answers are received by `protocol.FrameAssembler` straight into their own buffers: a
fetch answer's megabyte is copied once, by the kernel, and its coroutine wakes once.

A request whose caller is cancelled (a follower abandoning a long poll, see
daemon.replica.fetcher) closes the connection: its answer may still arrive, and must
not be read as the next request's.

A caller that sends a request newer brokers added (`request(..., negotiate=True)`) has
the other broker's ApiVersions asked first, once per connection, as Kafka's
NetworkClient does: a version it does not serve raises `VersionNotServed` and nothing is
sent (a broker of an older release, mid rolling upgrade, would close the connection on
it). The connection stays open for the requests it does serve.

On a SASL listener the login is renewed on the connection before the session the other
broker gave ends (connections.max.reauth.ms, KIP-368), as Kafka's inter-broker clients
renew theirs: that broker would otherwise close the connection under a follower's fetch.

Errors: a connection that cannot be made or breaks raises `PeerError` (an OSError
subclass: the caller backs off and tries again, as Kafka's fetchers do after
`replica.fetch.backoff.ms`); an answer that does not decode, or carries another
correlation id, closes the connection and raises `PeerError` too. A request that gets
no answer within `request_timeout` does the same. Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import ssl
import struct
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest

from daemon.api import protocol, record_messages
from daemon.security import sasl

from .frames import MIN_RESPONSE

_CORRELATION = struct.Struct(">i")
FETCH = 1


class PeerError(OSError):
    """The other broker could not be reached, or answered something unusable."""


class VersionNotServed(PeerError):
    """The other broker does not serve this request at this version (its ApiVersions
    says so): nothing was sent, and the connection stays open."""

    def __init__(self, peer: Peer, name: str, version: int, served: tuple[int, int] | None):
        self.served = served
        what = (f"serves {name} {served[0]}-{served[1]}" if served is not None
                else f"does not serve {name}")
        super().__init__(f"{peer} {what}, not v{version}")


class _Answers(asyncio.BufferedProtocol):
    """A peer connection's answer frames, as they complete, and its writes' flow control."""

    def __init__(self, max_frame: int):
        self.frames = protocol.FrameAssembler(max_frame, min_bytes=MIN_RESPONSE, kind="answer",
                                              limit_name="the answer limit")
        self.transport: asyncio.Transport | None = None
        self._ready: collections.deque[bytes | bytearray] = collections.deque()
        self._ended: BaseException | None = None  # why no more answers will come
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._ready.extend(self.frames.received(nbytes))
        if self.frames.error is not None:
            self._end(self.frames.error)
            assert self.transport is not None
            self.transport.close()  # nothing after a bad size prefix is read
        self._wake()

    def eof_received(self) -> bool:
        try:
            self.frames.ended()
            self._end(ConnectionResetError("the other broker closed the connection"))
        except protocol.ProtocolError as err:
            self._end(err)
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionResetError("the connection closed"))
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _end(self, err: BaseException) -> None:
        if self._ended is None:
            self._ended = err

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def drain(self) -> None:
        if self._writable is not None:
            await self._writable
        if self._ended is not None and not self._ready:
            raise self._ended

    async def next_frame(self) -> bytes | bytearray:
        """The next answer frame (without its size prefix); raises why the connection
        ended once the answers before that are taken."""
        while not self._ready:
            if self._ended is not None:
                raise self._ended
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._ready.popleft()


class Peer:
    def __init__(self, host: str, port: int, *, client_id: str = "logkeeper-replica",
                 request_timeout: float = 30.0, max_frame: int = 100 << 20,
                 tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None):
        self.host, self.port = host, port
        self.tls_context = tls_context  # TLS to an SSL listener
        self.login = login  # SASL (mechanism, username, password) to a SASL listener
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_frame = max_frame
        self._answers: _Answers | None = None
        # The connection's ApiVersions answer, {api key: (min, max)}: asked on first need.
        self._served: dict[int, tuple[int, int]] | None = None
        # When the SASL login is renewed on the connection (connections.max.reauth.ms of
        # the other broker, KIP-368), by the event loop's clock; None: never.
        self._relogin_at: float | None = None
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return (self._answers is not None and self._answers.transport is not None
                and not self._answers.transport.is_closing())

    def __repr__(self) -> str:
        return f"Peer({self.host}:{self.port})"

    async def request(self, body: Any, version: int, *, negotiate: bool = False) -> Any:
        """Send `body` (a kafka-python request object, or a follower's
        record_messages.FetchBody: each has its API_KEY and name) at `version`; its
        response. With `negotiate`, only if the other broker serves that version
        (VersionNotServed)."""
        async with self._lock:
            try:
                async with asyncio.timeout(self.request_timeout):
                    return await self._round_trip(body, version, negotiate)
            except VersionNotServed:
                raise
            except TimeoutError as err:
                await self.close()
                raise PeerError(f"{self}: no answer to {body.name} v{version} "
                                f"within {self.request_timeout:g} s") from err
            except (OSError, protocol.ProtocolError) as err:
                await self.close()
                if isinstance(err, PeerError):
                    raise
                raise PeerError(f"{self}: {body.name} v{version} failed: "
                                f"{err}") from err
            except asyncio.CancelledError:
                # The caller gave up on this answer: it may still come, and the next
                # request on this connection would read it as its own. A new connection.
                self._drop()
                raise

    async def _round_trip(self, body: Any, version: int, negotiate: bool) -> Any:
        if not self.connected:
            self._drop()
            loop = asyncio.get_running_loop()
            try:
                _, self._answers = await loop.create_connection(
                    lambda: _Answers(self.max_frame), self.host, self.port,
                    ssl=self.tls_context,
                    server_hostname=self.host if self.tls_context is not None else None)
            except OSError as err:
                raise PeerError(f"{self}: cannot connect: {err.strerror or err}") from err
            if self.login is not None:
                await self._log_in()
        elif self._relogin_at is not None and \
                asyncio.get_running_loop().time() >= self._relogin_at:
            await self._log_in()  # on the same connection, before its session ends
        if negotiate:
            if self._served is None:
                answer = await self._exchange(ApiVersionsRequest(), 0)
                if answer.error_code:
                    raise PeerError(f"{self}: ApiVersions answered error {answer.error_code}")
                self._served = {k.api_key: (k.min_version, k.max_version)
                                for k in answer.api_keys}
            served = self._served.get(body.API_KEY)
            if served is None or not served[0] <= version <= served[1]:
                raise VersionNotServed(self, body.name, version, served)
        return await self._exchange(body, version)

    async def _log_in(self) -> None:
        assert self.login is not None
        try:
            lifetime = await sasl.login_async(self._exchange, self.login)
        except sasl.AuthenticationFailed as err:
            raise PeerError(f"{self}: SASL login as {self.login[1]} with "
                            f"{self.login[0]} failed: {err}") from err
        self._relogin_at = sasl.relogin_at(asyncio.get_running_loop().time(), lifetime)

    async def _exchange(self, body: Any, version: int) -> Any:
        """One request and its answer on the open connection."""
        answers = self._answers
        assert answers is not None and answers.transport is not None
        correlation_id = next(self._ids) & 0x7FFFFFFF
        answers.transport.write(protocol.encode_request(body, version, correlation_id,
                                                        client_id=self.client_id))
        await answers.drain()
        frame = await answers.next_frame()
        (got,) = _CORRELATION.unpack_from(frame)
        if got != correlation_id:
            raise PeerError(f"{self}: answer for correlation id {got}, expected {correlation_id}")
        if body.API_KEY == FETCH:
            # A follower's fetch: its records stay slices of the frame, not copies.
            return record_messages.decode_fetch(frame, version)
        response_cls = _response_class(body)  # kafka-python's decoders take bytes
        return protocol.decode_response(response_cls, bytes(frame), version)

    def _drop(self) -> None:
        """Close the connection without waiting for it to close."""
        answers, self._answers = self._answers, None
        self._served = None  # a new connection may reach an upgraded broker
        self._relogin_at = None
        if answers is not None and answers.transport is not None:
            answers.transport.close()

    async def close(self) -> None:
        self._drop()
        await asyncio.sleep(0)  # let the transport's close run


class Peers:
    """One `Peer` per other broker, made on first use and made again when the broker's
    endpoint changed (a restart on another port): an inter-broker channel's
    connections (transaction markers, transaction verification)."""

    def __init__(self, client_id: str, *, request_timeout: float,
                 tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None):
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.tls_context = tls_context
        self.login = login
        self._peers: dict[int, Peer] = {}

    async def to(self, broker_id: int, host: str, port: int) -> Peer:
        peer = self._peers.get(broker_id)
        if peer is None or (peer.host, peer.port) != (host, port):
            if peer is not None:
                await peer.close()
            peer = self._peers[broker_id] = Peer(
                host, port, client_id=self.client_id, tls_context=self.tls_context,
                login=self.login, request_timeout=self.request_timeout)
        return peer

    async def close(self) -> None:
        for peer in self._peers.values():
            await peer.close()
        self._peers.clear()


def _response_class(body: Any) -> Any:
    """The response class paired with a request object (kafka-python's and ours)."""
    api = protocol.SUPPORTED.get(body.API_KEY)
    if api is not None and isinstance(body, api.request):
        return api.response
    from daemon.wire.messages import CONTROL_APIS  # late: only the controller's tests need it

    pair = CONTROL_APIS.get(body.API_KEY)
    if pair is None:
        raise PeerError(f"no response class known for API key {body.API_KEY}")
    return pair[1]
