"""A follower's connection to its leader (daemon.wire.peer): answers come whole, however
the stream is cut, and every broken answer is a PeerError that costs only the
connection, never the next request's answer.

The large answer comes from a real daemon. The broken ones come from a scripted leader
on a real loopback socket: a real broker never sends a frame over the limit, a wrong
correlation id or half a frame, so a script is the only way to send them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from daemon.api import protocol
from daemon.wire.peer import Peer, PeerError
from tests.daemon_helpers import Daemon
from tests.sick_helpers import create_topic
from tests.test_fetcher import TOPIC, leader_bytes, produce

# What the scripted leader does with one request: gets the request's correlation id and
# the connection's writer, and writes (or not) whatever it likes.
Script = Callable[[int, asyncio.StreamWriter], Awaitable[None]]


def _api_versions_answer(correlation_id: int) -> bytes:
    req = protocol.Request(protocol.SUPPORTED[18], 0, correlation_id, "test", None, 0)
    return b"".join(protocol.encode_response(req, protocol.api_versions_response(0)))


async def _leader(scripts: list[Script]) -> tuple[asyncio.Server, int]:
    """A server answering the n-th request on any connection with scripts[n]."""
    turn = iter(scripts)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                _, _, correlation_id = struct.unpack_from(">hhi", frame)
                await next(turn)(correlation_id, writer)
        except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _answer_whole(correlation_id: int, writer: asyncio.StreamWriter) -> None:
    writer.write(_api_versions_answer(correlation_id))


async def _answer_a_byte_at_a_time(correlation_id: int, writer: asyncio.StreamWriter) -> None:
    for b in _api_versions_answer(correlation_id):
        writer.write(bytes([b]))
        await writer.drain()
        await asyncio.sleep(0)


async def _answer_over_the_limit(correlation_id: int, writer: asyncio.StreamWriter) -> None:
    writer.write(struct.pack(">ii", 10_000, correlation_id) + b"x" * 100)


async def _answer_half_and_close(correlation_id: int, writer: asyncio.StreamWriter) -> None:
    writer.write(_api_versions_answer(correlation_id)[:9])
    await writer.drain()
    writer.close()


async def _answer_another_id(correlation_id: int, writer: asyncio.StreamWriter) -> None:
    writer.write(_api_versions_answer(correlation_id + 1000))


async def _answer_late(correlation_id: int, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(0.3)
    writer.write(_api_versions_answer(correlation_id))


def _run(scripts: list[Script], body: Callable[[Peer], Awaitable[None]]) -> None:
    async def main() -> None:
        server, port = await _leader(scripts)
        peer = Peer("127.0.0.1", port, request_timeout=5.0, max_frame=1000)
        try:
            await body(peer)
        finally:
            await peer.close()
            server.close()
    asyncio.run(main())


def _versions(answer: object) -> set[int]:
    return {k.api_key for k in answer.api_keys}  # type: ignore[attr-defined]


def test_an_answer_cut_into_single_bytes_comes_whole() -> None:
    async def body(peer: Peer) -> None:
        first = await peer.request(ApiVersionsRequest(), 0)
        second = await peer.request(ApiVersionsRequest(), 0)
        assert _versions(first) == _versions(second) == set(protocol.SUPPORTED)
    _run([_answer_a_byte_at_a_time, _answer_whole], body)


@pytest.mark.parametrize("script, said", [
    (_answer_over_the_limit, "answer frame of 10000 bytes is over the answer limit 1000"),
    (_answer_half_and_close, "connection closed after 5 of"),
    (_answer_another_id, "expected"),
])
def test_a_broken_answer_is_a_peer_error_and_the_next_request_gets_its_own_answer(
        script: Script, said: str) -> None:
    async def body(peer: Peer) -> None:
        with pytest.raises(PeerError, match=said):
            await peer.request(ApiVersionsRequest(), 0)
        assert not peer.connected
        # A new connection, and the answer read is this request's, not a leftover.
        assert _versions(await peer.request(ApiVersionsRequest(), 0)) == set(protocol.SUPPORTED)
    _run([script, _answer_whole], body)


def test_an_abandoned_request_never_hands_its_answer_to_the_next_one() -> None:
    async def body(peer: Peer) -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await peer.request(ApiVersionsRequest(), 0)
        await asyncio.sleep(0.4)  # its answer has come by now, on the dropped connection
        assert _versions(await peer.request(ApiVersionsRequest(), 0)) == set(protocol.SUPPORTED)
    _run([_answer_late, _answer_whole], body)


def test_a_fetch_answer_of_a_megabyte_is_the_leaders_bytes(tmp_path: Path) -> None:
    with Daemon(tmp_path / "leader", {"log.segment.bytes": 64 << 20}) as d:
        create_topic(d, TOPIC, 1)
        produce(d, 400, 1, size=3000)
        on_disk = leader_bytes(d, 0)
        assert len(on_disk) > 1 << 20

        async def main() -> bytes:
            peer = Peer("127.0.0.1", d.port)
            F = FetchRequest.FetchTopic
            try:
                answer = await peer.request(FetchRequest(
                    replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, topics=[F(
                        topic=TOPIC, partitions=[F.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0,
                            last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=4 << 20)])],
                    forgotten_topics_data=[], rack_id=""), 12)
            finally:
                await peer.close()
            (topic,) = answer.responses
            (part,) = topic.partitions
            assert part.error_code == 0
            return bytes(part.records)
        assert asyncio.run(main()) == on_disk


def test_a_version_the_broker_does_not_serve_is_not_sent(tmp_path: Path) -> None:
    """A negotiated request at a version the other broker's ApiVersions does not list
    (AddPartitionsToTxn v5, KIP-890's second part, not served here) is refused before it
    is sent, which would close the connection: the same connection still serves what the
    broker does, and ApiVersions is asked once per connection."""
    from kafka.protocol.producer import AddPartitionsToTxnRequest

    from daemon.wire.peer import VersionNotServed

    with Daemon(tmp_path / "broker") as d:
        async def main() -> None:
            peer = Peer("127.0.0.1", d.port)
            try:
                with pytest.raises(VersionNotServed) as refused:
                    await peer.request(AddPartitionsToTxnRequest(transactions=[]), 5,
                                       negotiate=True)
                assert refused.value.served == (0, 4)
                assert "AddPartitionsToTxnRequest 0-4, not v5" in str(refused.value)
                connection = peer._answers
                assert peer.connected
                answer = await peer.request(AddPartitionsToTxnRequest(transactions=[]), 4,
                                            negotiate=True)
                assert answer.error_code == 0 and answer.results_by_transaction == []
                assert peer._answers is connection  # no new connection was needed
            finally:
                await peer.close()
        asyncio.run(main())
        _, metrics = d.http("/metrics")
        assert 'kafka_network_requestmetrics_requests_total{request="ApiVersions"' in metrics
        served = [line for line in metrics.splitlines() if line.startswith(
            'kafka_network_requestmetrics_requests_total{request="ApiVersions"')]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in served) == 1.0, served
