"""Fetch from the closest replica (KIP-392): which replica a leader sends a consumer to.

With `replica.selector.class` set to Kafka's RackAwareReplicaSelector, a leader asked by
a consumer that gives its rack (Fetch v11+ `rack_id`, librdkafka's and the Java
client's `client.rack`) answers, instead of records, the id of an in-sync replica in
that rack (the Fetch answer's `preferred_read_replica`); the consumer then fetches from
that broker, which serves it up to its own high watermark. Kafka's rules
(ReplicaManager.findPreferredReadReplica, RackAwareReplicaSelector.select):
- only followers in the ISR whose log holds the fetch offset (log start <= offset <=
  log end, as the leader last heard from them) and whose broker is live are candidates;
- a consumer without a rack, or in the leader's rack, or in a rack without a
  candidate, reads from the leader (no preferred replica is answered);
- among several candidates in its rack, the most caught up: the highest log end, then
  the one caught up most recently, then the highest broker id.

Pure functions over what the leader knows; the replica manager gathers it on the event
loop (daemon.replica.manager.ReplicaManager.preferred_read_replica).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class ReplicaView(NamedTuple):
    """One replica as the selector sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    since_caught_up_ms: float  # 0 for the leader


def select_read_replica(client_rack: str, leader: ReplicaView,
                        followers: Iterable[ReplicaView]) -> int | None:
    """The broker a consumer in `client_rack` should fetch from, or None for the leader.
    `followers` are the candidates already filtered as the module docstring says."""
    if not client_rack or leader.rack == client_rack:
        return None
    same_rack = [f for f in followers if f.rack == client_rack]
    if not same_rack:
        return None
    best = max(same_rack, key=lambda f: (f.log_end_offset, -f.since_caught_up_ms, f.broker_id))
    return best.broker_id
