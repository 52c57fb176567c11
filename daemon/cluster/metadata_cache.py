"""What this broker knows of the cluster from the controller's UpdateMetadata requests
(Kafka's ZkMetadataCache): live brokers with their endpoints, and every partition's
leader, leader epoch, replicas, ISR and offline replicas. It answers Metadata requests in
cluster mode, so every broker tells clients the same thing.

`brokers` holds each live broker's endpoint on `listener`, the inter-broker listener
(followers and the request paths between brokers use it); `listener_brokers(name)` the
endpoints on another listener, for a client that came in on that one (Kafka answers
each client with the endpoints of its own listener, and leaves out brokers without one).

`update` replaces the live-broker list and merges the partition states; a partition
announced with leader -2 (LeaderDuringDelete) is dropped, with its topic once it has no
partition left, and returned as deleted whether it was known here or not (Kafka's
ZkMetadataCache: a broker that started during the deletion still hears of it).
Thread-safety: event loop only (UpdateMetadata is handled there, and so are the
Metadata requests that read it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.wire import views

LEADER_DURING_DELETE = -2


@dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataCache:
    def __init__(self, listener: str = "PLAINTEXT"):
        self.listener = listener
        self.brokers: dict[int, BrokerEndpoint] = {}
        self._by_listener: dict[str, dict[int, BrokerEndpoint]] = {}
        self.partitions: dict[str, dict[int, views.MetadataPartition]] = {}
        self.controller_id = -1
        self.updates = 0

    def update(self, controller_id: int, brokers: Iterable[views.LiveBroker],
               partitions: Iterable[views.MetadataPartition]) -> list[tuple[str, int]]:
        """Apply one UpdateMetadata; returns the partitions it announces deleted."""
        self.controller_id = controller_id
        live = {}
        by_listener: dict[str, dict[int, BrokerEndpoint]] = {}
        for b in brokers:
            for e in b.endpoints:
                by_listener.setdefault(e.listener, {})[b.broker_id] = BrokerEndpoint(
                    b.broker_id, e.host, e.port, b.rack)
            ep = next((e for e in b.endpoints if e.listener == self.listener), None)
            if ep is None and b.endpoints:
                ep = b.endpoints[0]
            if ep is not None:
                live[b.broker_id] = BrokerEndpoint(b.broker_id, ep.host, ep.port, b.rack)
        self.brokers = live
        self._by_listener = by_listener
        removed = []
        for p in partitions:
            if p.leader == LEADER_DURING_DELETE:
                removed.append((p.topic, p.partition))
                parts = self.partitions.get(p.topic)
                if parts is not None and parts.pop(p.partition, None) is not None and not parts:
                    del self.partitions[p.topic]
                continue
            self.partitions.setdefault(p.topic, {})[p.partition] = p
        self.updates += 1
        return removed

    def listener_brokers(self, listener: str) -> dict[int, BrokerEndpoint]:
        """The live brokers' endpoints on `listener`, by broker id; brokers without one
        are left out."""
        if listener == self.listener:
            return self.brokers
        return self._by_listener.get(listener, {})

    def topics(self) -> dict[str, list[views.MetadataPartition]]:
        return {t: self.topic(t) for t in self.partitions}

    def topic(self, name: str) -> list[views.MetadataPartition]:
        """`name`'s partitions in partition order; [] for a topic not known."""
        ps = self.partitions.get(name)
        return [ps[i] for i in sorted(ps)] if ps else []

    def topic_id(self, name: str) -> uuid.UUID | None:
        """`name`'s id (KIP-516) as UpdateMetadata v7+ gave it (partition 0's)."""
        ps = self.partitions.get(name)
        return ps[min(ps)].topic_id if ps else None

    def partition(self, topic: str, partition: int) -> views.MetadataPartition | None:
        return self.partitions.get(topic, {}).get(partition)

    def has_leaders(self, topic: str) -> bool:
        """Whether `topic` is known and each of its partitions has a live leader."""
        parts = self.partitions.get(topic)
        return bool(parts) and all(p.leader in self.brokers for p in parts.values())
