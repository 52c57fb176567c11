"""An asyncio connection from this broker to another one (a follower to its leader).

`Peer` frames requests with `daemon.api.protocol.encode_request`, sends one at a time
(Kafka's inter-broker clients keep one request in flight per connection, which keeps
answers in order), checks that each answer carries the correlation id it waits for, and
decodes it with the request's response class at the request's version (a Fetch
response with `daemon.api.record_messages.decode_fetch`, its records left in the frame).

A request whose caller is cancelled (a follower abandoning a long poll, see
daemon.replica.fetcher) closes the connection: its answer may still arrive, and must
not be read as the next request's.

Errors: a connection that cannot be made or breaks raises `PeerError` (an OSError
subclass: the caller backs off and tries again, as Kafka's fetchers do after
`replica.fetch.backoff.ms`); an answer that does not decode, or carries another
correlation id, closes the connection and raises `PeerError` too. A request that gets
no answer within `request_timeout` does the same. Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from daemon.api import protocol, record_messages

from .frames import MIN_RESPONSE, SIZE

_CORRELATION = struct.Struct(">i")
FETCH = 1
# Bytes the stream buffers before it stops reading the socket. asyncio's default (64
# KiB) paused the transport every 128 KiB of a fetch answer, so a 1 MiB answer crossed
# in a ping-pong of pause, resume and wake-ups between the two brokers.
STREAM_LIMIT = 16 << 20


class PeerError(OSError):
    """The other broker could not be reached, or answered something unusable."""


class Peer:
    def __init__(self, host: str, port: int, *, client_id: str = "logkeeper-replica",
                 request_timeout: float = 30.0, max_frame: int = 100 << 20):
        self.host, self.port = host, port
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_frame = max_frame
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    def __repr__(self) -> str:
        return f"Peer({self.host}:{self.port})"

    async def request(self, body: Any, version: int) -> Any:
        """Send `body` (a kafka-python request object) at `version`; its response."""
        async with self._lock:
            try:
                async with asyncio.timeout(self.request_timeout):
                    return await self._round_trip(body, version)
            except TimeoutError as err:
                await self.close()
                raise PeerError(f"{self}: no answer to {type(body).__name__} v{version} "
                                f"within {self.request_timeout:g} s") from err
            except (OSError, asyncio.IncompleteReadError, protocol.ProtocolError) as err:
                await self.close()
                if isinstance(err, PeerError):
                    raise
                raise PeerError(f"{self}: {type(body).__name__} v{version} failed: "
                                f"{err}") from err
            except asyncio.CancelledError:
                # The caller gave up on this answer: it may still come, and the next
                # request on this connection would read it as its own. A new connection.
                self._drop()
                raise

    async def _round_trip(self, body: Any, version: int) -> Any:
        if not self.connected:
            try:
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, limit=STREAM_LIMIT)
            except OSError as err:
                raise PeerError(f"{self}: cannot connect: {err.strerror or err}") from err
        assert self._reader is not None and self._writer is not None
        correlation_id = next(self._ids) & 0x7FFFFFFF
        self._writer.write(protocol.encode_request(body, version, correlation_id,
                                                   client_id=self.client_id))
        await self._writer.drain()
        (size,) = SIZE.unpack(await self._reader.readexactly(SIZE.size))
        if not MIN_RESPONSE <= size <= self.max_frame:
            raise PeerError(f"{self}: answer frame of {size} bytes")
        frame = await self._reader.readexactly(size)
        (got,) = _CORRELATION.unpack_from(frame)
        if got != correlation_id:
            raise PeerError(f"{self}: answer for correlation id {got}, expected {correlation_id}")
        if body.API_KEY == FETCH:
            # A follower's fetch: its records stay slices of the frame, not copies.
            return record_messages.decode_fetch(frame, version)
        response_cls = _response_class(body)
        return protocol.decode_response(response_cls, frame, version)

    def _drop(self) -> Any:
        """Close the connection without waiting for it to close; its writer, if any."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
        return writer

    async def close(self) -> None:
        writer = self._drop()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:
                pass  # already broken: nothing to flush


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
