"""What the active controller knows of the cluster (Kafka's ControllerContext).

Loaded from ZooKeeper at failover and kept up to date by the event handlers: live
brokers with their epochs (the czxid of `/brokers/ids/<id>`) and registrations, every
topic's assignment and topic id, the partitions being reassigned with their adding and
removing replicas, each partition's leadership with its zkVersion, the partition and
replica states of the state machines, the replicas brokers reported on offline dirs
(rebuilt from 56 answers; it starts empty), and the deletion queue.

Only the controller event thread touches a context; nothing here is thread-safe and
nothing here does I/O. Lookups of unknown partitions return empty values, never raise.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemon.cluster import znodes
from logstore import TopicPartition

from .leader_election import LeaderAndIsr


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas as `/brokers/topics/<t>` holds them (Kafka's
    ReplicaAssignment): during a reassignment `replicas` is the full set RS (the
    target's replicas first, then the original ones), `adding` the replicas the target
    adds (AR), `removing` those it drops (RR)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: tuple[int, ...]) -> ReplicaAssignment:
        """The assignment while moving from the original replicas to `target`; to the
        original replicas themselves, one that is not being reassigned (a cancel)."""
        origin = self.origin
        full = tuple(dict.fromkeys((*target, *origin)))
        return ReplicaAssignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in target))


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    epoch: int  # czxid of /brokers/ids/<id>: a new registration is a new epoch
    registration: znodes.BrokerRegistration

    def endpoint(self, listener: str) -> znodes.BrokerEndpoint | None:
        return self.registration.endpoint(listener) or next(iter(self.registration.endpoints), None)


class ControllerContext:
    def __init__(self) -> None:
        self.epoch = 0
        self.epoch_zk_version = -1
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.being_reassigned: dict[TopicPartition, ReplicaAssignment] = {}
        self.reassigning_from_znode: set[TopicPartition] = set()  # /admin/reassign_partitions
        self.leadership: dict[TopicPartition, LeaderAndIsr] = {}
        self.partition_states: dict[TopicPartition, Any] = {}  # state_machines.PartitionState
        self.replica_states: dict[tuple[TopicPartition, int], Any] = {}  # ...ReplicaState
        self.replicas_on_offline_dirs: dict[int, set[TopicPartition]] = {}
        # Brokers in a controlled shutdown (Kafka's shuttingDownBrokerIds): still live,
        # still sent requests, but never elected leader.
        self.shutting_down: set[int] = set()
        self.topics_to_be_deleted: set[str] = set()
        self.topics_with_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()

    # -- brokers ------------------------------------------------------------------------

    @property
    def live_broker_ids(self) -> list[int]:
        return sorted(self.live_brokers)

    def is_replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        return (broker_id in self.live_brokers
                and tp not in self.replicas_on_offline_dirs.get(broker_id, ()))

    def can_lead(self, broker_id: int, tp: TopicPartition) -> bool:
        """Online, and not in a controlled shutdown (Kafka's isReplicaOnline without
        the shutting-down brokers): what every leader election asks of a candidate."""
        return broker_id not in self.shutting_down and self.is_replica_online(broker_id, tp)

    # -- topics and partitions ----------------------------------------------------------

    def set_assignment(self, topic: str, partitions: dict[int, tuple[int, ...]],
                       topic_id: uuid.UUID | None) -> None:
        self.all_topics.add(topic)
        self.assignments.setdefault(topic, {}).update(partitions)
        if topic_id is not None:
            self.topic_ids[topic] = topic_id

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.being_reassigned.get(tp) or ReplicaAssignment(self.replicas(tp))

    def set_full_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp.topic, {})[tp.partition] = assignment.replicas
        if assignment.is_being_reassigned:
            self.being_reassigned[tp] = assignment
        else:
            self.being_reassigned.pop(tp, None)

    def is_topic_being_reassigned(self, topic: str) -> bool:
        return any(tp.topic == topic for tp in self.being_reassigned)

    def partitions(self, topics: Iterable[str] | None = None) -> list[TopicPartition]:
        names = sorted(self.assignments) if topics is None else sorted(set(topics))
        return [TopicPartition(t, p) for t in names for p in sorted(self.assignments.get(t, {}))]

    def replicas_on_brokers(self, brokers: Iterable[int]) -> list[tuple[TopicPartition, int]]:
        wanted = set(brokers)
        return [(tp, b) for tp in self.partitions() for b in self.replicas(tp) if b in wanted]

    def replicas_for_topic(self, topic: str) -> list[tuple[TopicPartition, int]]:
        return [(tp, b) for tp in self.partitions([topic]) for b in self.replicas(tp)]

    def replicas_for_partitions(self, tps: Iterable[TopicPartition]) -> list[tuple[TopicPartition, int]]:
        return [(tp, b) for tp in tps for b in self.replicas(tp)]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        """Partitions with leadership whose leader is not online, topics being deleted aside."""
        return [tp for tp, lai in sorted(self.leadership.items())
                if tp.topic not in self.topics_to_be_deleted
                and not self.is_replica_online(lai.leader, tp)]

    def partitions_in_states(self, *states: Any) -> list[TopicPartition]:
        return [tp for tp in self.partitions() if self.partition_states.get(tp) in states]

    def replicas_in_state(self, topic: str, state: Any) -> list[tuple[TopicPartition, int]]:
        return [r for r in self.replicas_for_topic(topic) if self.replica_states.get(r) == state]

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions([topic]):
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.being_reassigned.pop(tp, None)
            for b in self.replicas(tp):
                self.replica_states.pop((tp, b), None)
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.all_topics.discard(topic)
        for offline in self.replicas_on_offline_dirs.values():
            offline.difference_update({tp for tp in offline if tp.topic == topic})

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted
