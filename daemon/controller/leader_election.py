"""Pure leader and ISR algorithms of the controller (Kafka's `Election` and the ISR
arithmetic of its state machines), docs/controller.md "Topic creation" and "Brokers".

Nothing here touches ZooKeeper or the network: each function takes the partition's
assignment, its current leadership and a predicate saying whether a replica is online
(its broker is live and the replica is not on an offline dir), and returns the new
leadership or None. The caller writes the result to ZooKeeper at the state's zkVersion.
No function raises for an unelectable partition; None says so.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from daemon.cluster import znodes

NO_LEADER = -1
LEADER_DURING_DELETE = -2  # UpdateMetadata's leader for a topic being deleted
EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch for a topic being deleted
NO_EPOCH = -1

IsOnline = Callable[[int], bool]
T = TypeVar("T")  # a partition, as the caller names it


@dataclass(frozen=True)
class LeaderAndIsr:
    """One partition's leadership as the controller keeps it: the state znode's content
    plus its zkVersion (the partition epoch brokers receive)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int  # of the controller that made the leadership decision
    zk_version: int
    leader_recovery_state: int = znodes.LEADER_RECOVERED

    def new_leader_and_isr(self, leader: int, isr: Sequence[int], controller_epoch: int,
                           recovering: bool = False) -> LeaderAndIsr:
        """Kafka's `newLeaderAndIsr`: a new leader epoch (always +1), the same zkVersion
        (the conditional write's expected version)."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr),
                       controller_epoch=controller_epoch,
                       leader_recovery_state=(znodes.LEADER_RECOVERING if recovering
                                              else znodes.LEADER_RECOVERED))

    def with_next_epoch(self, controller_epoch: int) -> LeaderAndIsr:
        """Kafka's `newEpoch`: leader, ISR and recovery state as they are, the next
        leader epoch."""
        return replace(self, leader_epoch=self.leader_epoch + 1, controller_epoch=controller_epoch)

    def to_znode(self) -> znodes.PartitionState:
        return znodes.PartitionState(self.leader, self.leader_epoch, self.controller_epoch,
                                     self.isr, self.leader_recovery_state)

    @classmethod
    def from_znode(cls, state: znodes.PartitionState, zk_version: int) -> LeaderAndIsr:
        return cls(state.leader, state.leader_epoch, tuple(state.isr), state.controller_epoch,
                   zk_version, state.leader_recovery_state)


def initial_leader_and_isr(assignment: Sequence[int], is_online: IsOnline,
                           controller_epoch: int) -> LeaderAndIsr | None:
    """A new partition (NewPartition -> OnlinePartition): the first online assigned
    replica leads, every online replica is in the ISR, leader epoch 0, zkVersion 0.
    None when no assigned replica is online: the partition stays New."""
    live = [r for r in assignment if is_online(r)]
    if not live:
        return None
    return LeaderAndIsr(live[0], 0, tuple(live), controller_epoch, 0)


def elect_offline_leader(assignment: Sequence[int], current: LeaderAndIsr, is_online: IsOnline,
                         unclean: bool, controller_epoch: int) -> LeaderAndIsr | None:
    """Kafka's OfflinePartitionLeaderElectionStrategy.

    The leader is the first assigned replica that is online and in the ISR; the ISR
    becomes its online members. Failing that, and only with `unclean` (the topic's
    `unclean.leader.election.enable`), the first online assigned replica leads alone
    with leader_recovery_state RECOVERING. None when nobody can lead."""
    live = [r for r in assignment if is_online(r)]
    leader = next((r for r in live if r in current.isr), None)
    if leader is not None:
        isr = [r for r in current.isr if is_online(r)]
        return current.new_leader_and_isr(leader, isr, controller_epoch)
    if unclean and live:
        return current.new_leader_and_isr(live[0], [live[0]], controller_epoch, recovering=True)
    return None


def elect_preferred_leader(assignment: Sequence[int], current: LeaderAndIsr,
                           is_online: IsOnline, controller_epoch: int) -> LeaderAndIsr | None:
    """Kafka's PreferredReplicaPartitionLeaderElectionStrategy: the first assigned
    replica (the preferred one) leads again when it is online and in the ISR; the ISR
    stays as it is. None when it cannot lead, or leads already."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == current.leader or preferred not in current.isr or not is_online(preferred):
        return None
    return current.new_leader_and_isr(preferred, current.isr, controller_epoch)


def elect_controlled_shutdown_leader(assignment: Sequence[int], current: LeaderAndIsr,
                                     is_online: IsOnline, shutting_down: Collection[int],
                                     controller_epoch: int) -> LeaderAndIsr | None:
    """Kafka's ControlledShutdownPartitionLeaderElectionStrategy: the first assigned
    replica that is online, in the ISR and not shutting down leads; the ISR drops the
    brokers shutting down. None when no replica can."""
    isr = [r for r in current.isr if r not in shutting_down]
    leader = next((r for r in assignment if r in isr and is_online(r)), None)
    if leader is None:
        return None
    return current.new_leader_and_isr(leader, isr, controller_epoch)


def elect_reassigned_leader(target: Sequence[int], current: LeaderAndIsr, is_online: IsOnline,
                            controller_epoch: int) -> LeaderAndIsr | None:
    """Kafka's ReassignPartitionLeaderElectionStrategy: the first replica of the
    reassignment's target that is online and in the ISR leads; the ISR stays as it is.
    None when none of them can."""
    leader = next((r for r in target if is_online(r) and r in current.isr), None)
    if leader is None:
        return None
    return current.new_leader_and_isr(leader, current.isr, controller_epoch)


def preferred_elections_due(assignments: Mapping[T, Sequence[int]],
                            leaders: Mapping[T, int], can_lead: Callable[[T, int], bool],
                            imbalance_percentage: int) -> list[T]:
    """Kafka's checkAndTriggerAutoLeaderRebalance: for each broker, the share of the
    partitions it is preferred for that another broker leads; above
    `imbalance_percentage` (leader.imbalance.per.broker.percentage), those of them whose
    preferred replica `can_lead` (online and in the ISR) are due an election.
    `assignments` holds the partitions that may move (none of a topic being deleted)."""
    by_preferred: dict[int, list[T]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(tp)
    due: list[T] = []
    for broker, tps in sorted(by_preferred.items()):
        elsewhere = [tp for tp in tps if tp in leaders and leaders[tp] != broker]
        if len(elsewhere) / len(tps) > imbalance_percentage / 100:
            due += [tp for tp in elsewhere if can_lead(tp, broker)]
    return sorted(due)


def remove_replica_from_isr(current: LeaderAndIsr, replica: int,
                            controller_epoch: int) -> LeaderAndIsr | None:
    """OfflineReplica's ISR removal. None when `replica` is not in the ISR (nothing to
    write). An ISR of one member is kept as it is, never emptied; if the removed replica
    led, the leader becomes -1. The leader epoch always moves up by one."""
    if replica not in current.isr:
        return None
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    leader = NO_LEADER if current.leader == replica else current.leader
    return current.new_leader_and_isr(leader, isr, controller_epoch)


def round_robin_assignment(brokers: Sequence[int], partitions: int, replication_factor: int,
                           start: int, shift: int) -> dict[int, tuple[int, ...]]:
    """Rack-unaware replica assignment (Kafka's AdminUtils.assignReplicasToBrokers
    without racks): partition p's first replica is brokers[(start + p) % n]; the others
    follow at a shift that grows by one every n partitions, so followers spread too.
    `start` and `shift` are the random starting points (0 <= both < n); the caller checks
    1 <= replication_factor <= n. (The rack-aware walk with each broker its own rack.)"""
    ids = sorted(brokers)
    return _assign(ids, {b: b for b in ids}, partitions, replication_factor, start, shift)


def _assign(ids: list[int], rack_of: Mapping[int, object], partitions: int,
            replication_factor: int, start: int, shift: int) -> dict[int, tuple[int, ...]]:
    """Kafka's assignment walk over `ids` (AdminUtils): partition p's first replica is
    ids[(start + p) % n]; each further one the next broker at the partition's shift
    (growing by one every n partitions) on a rack that holds no replica of it yet, until
    every rack holds one, then one that holds none."""
    n = len(ids)
    if not 1 <= replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    n_racks = len(set(rack_of.values()))
    out: dict[int, tuple[int, ...]] = {}
    next_shift = shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (start + p) % n
        replicas = [ids[first]]
        used_racks, used = {rack_of[ids[first]]}, {ids[first]}
        k = 0
        while len(replicas) < replication_factor:
            # Kafka's replicaIndex: never lands on the first replica again.
            broker = ids[(first + 1 + (next_shift * n_racks + k) % (n - 1)) % n]
            k += 1
            if ((rack_of[broker] not in used_racks or len(used_racks) == n_racks)
                    and (broker not in used or len(used) == n)):
                replicas.append(broker)
                used_racks.add(rack_of[broker])
                used.add(broker)
        out[p] = tuple(replicas)
    return out


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers in rack-alternating order (Kafka's getRackAlternatedBrokerList): the
    racks sorted, each one's brokers sorted, one broker of each rack in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    while len(out) < len(racks):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def rack_aware_assignment(racks: Mapping[int, str], partitions: int, replication_factor: int,
                          start: int, shift: int) -> dict[int, tuple[int, ...]]:
    """Rack-aware replica assignment (Kafka's AdminUtils.assignReplicasToBrokersRackAware):
    the walk over the rack-alternated broker list, so a partition's replicas are on
    min(replication factor, racks) racks, and leaders and followers spread over the
    brokers evenly."""
    return _assign(rack_alternated(racks), racks, partitions, replication_factor, start, shift)


def replica_assignment(racks: Mapping[int, str | None], partitions: int,
                       replication_factor: int, start: int, shift: int
                       ) -> dict[int, tuple[int, ...]]:
    """Kafka's assignment for a new topic or new partitions over these brokers (id ->
    broker.rack): rack-aware when every broker has a rack, else the round robin (Kafka's
    RackAwareMode.Safe)."""
    if racks and all(r is not None for r in racks.values()):
        return rack_aware_assignment({b: str(r) for b, r in racks.items()}, partitions,
                                     replication_factor, start, shift)
    return round_robin_assignment(sorted(racks), partitions, replication_factor, start, shift)
