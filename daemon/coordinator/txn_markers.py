"""How a transaction coordinator's markers reach the partitions' leaders (Kafka's
TransactionMarkerChannelManager), docs/transactions.md.

`TxnMarkerChannel.write` takes a marker per partition and writes each through its
partition's leader as the metadata cache knows it: this broker's own partitions through
its replica manager (`write_local`, acks=all), every other leader's in one
WriteTxnMarkers (v1) per broker, over the inter-broker listener (TLS and SASL as the
followers' fetches use them). Standalone, every partition is this broker's. The answer
is an error code per partition: a partition whose leader is unknown is
NOT_LEADER_OR_FOLLOWER, one of a topic that is gone UNKNOWN_TOPIC_OR_PARTITION; a
broker that cannot be reached leaves its partitions out. The coordinator asks again for
whatever was not written.

Event loop only.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

from kafka.protocol.producer import WriteTxnMarkersRequest

from logstore import TopicPartition

from ..api import errors, protocol
from ..cluster.metadata_cache import MetadataCache
from ..replica.manager import Marker
from ..wire.peer import Peers

log = logging.getLogger("logkeeper.transactions")

MARKER_TIMEOUT_MS = 30000  # how long a marker waits for its ISR (Kafka: request.timeout.ms)
WRITE_TXN_MARKERS_VERSION = 1


class TxnMarkerChannel:
    def __init__(self, broker_id: int, cache: MetadataCache | None,
                 write_local: Callable[[dict[TopicPartition, Marker]],
                                       Awaitable[dict[TopicPartition, int]]], *,
                 tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None):
        self.broker_id = broker_id
        self.cache = cache
        self.write_local = write_local
        self._peers = Peers(f"logkeeper-txn-markers-{broker_id}",
                            request_timeout=MARKER_TIMEOUT_MS / 1000 + 5,
                            tls_context=tls_context, login=login)

    async def write(self, markers: dict[TopicPartition, Marker]) -> dict[TopicPartition, int]:
        if self.cache is None:
            return await self.write_local(markers)
        by_leader: dict[int, dict[TopicPartition, Marker]] = {}
        codes: dict[TopicPartition, int] = {}
        for tp, m in markers.items():
            meta = self.cache.partition(tp.topic, tp.partition)
            if meta is None:
                codes[tp] = (errors.UNKNOWN_TOPIC_OR_PARTITION
                             if tp.topic not in self.cache.partitions
                             else errors.NOT_LEADER_OR_FOLLOWER)
            elif meta.leader < 0:
                codes[tp] = errors.NOT_LEADER_OR_FOLLOWER
            else:
                by_leader.setdefault(meta.leader, {})[tp] = m
        for leader, part in by_leader.items():
            if leader == self.broker_id:
                codes.update(await self.write_local(part))
                continue
            try:
                codes.update(await self._send(leader, part))
            except (OSError, protocol.ProtocolError) as err:
                log.debug("WriteTxnMarkers to broker %d: %s", leader, err)
        return codes

    async def _send(self, broker_id: int, markers: dict[TopicPartition, Marker]
                    ) -> dict[TopicPartition, int]:
        assert self.cache is not None
        b = self.cache.brokers.get(broker_id)
        if b is None:
            return {}
        peer = await self._peers.to(broker_id, b.host, b.port)
        W = WriteTxnMarkersRequest.WritableTxnMarker
        T = W.WritableTxnMarkerTopic
        grouped: dict[Marker, dict[str, list[int]]] = {}
        for tp, m in markers.items():
            grouped.setdefault(m, {}).setdefault(tp.topic, []).append(tp.partition)
        req = WriteTxnMarkersRequest(markers=[
            W(producer_id=m.producer_id, producer_epoch=m.producer_epoch,
              transaction_result=m.commit, coordinator_epoch=m.coordinator_epoch,
              topics=[T(name=t, partition_indexes=ps) for t, ps in topics.items()])
            for m, topics in grouped.items()])
        resp = await peer.request(req, WRITE_TXN_MARKERS_VERSION)
        return {TopicPartition(t.name, p.partition_index): p.error_code
                for r in resp.markers for t in r.topics for p in t.partitions}

    async def close(self) -> None:
        await self._peers.close()
