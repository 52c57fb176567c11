"""Kafka's partition and replica state machines (PartitionStateMachine,
ReplicaStateMachine), docs/controller.md.

A transition is checked against the table of valid previous states first: invalid ones
are logged and skipped, as Kafka does, never raised. What a transition sends is added to
the caller's `RequestBatch`, which the caller sends once its state changes are done.
ZooKeeper writes go through `ControllerZk` (fenced); `ControllerMovedError` propagates to
the event thread, which resigns. A partition whose election fails (no replica can lead,
or its state znode belongs to a newer controller) keeps its state and is logged.

Callers: the controller event thread only.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable

from daemon.cluster import znodes
from logstore import TopicPartition

from . import leader_election as le
from .channel import RequestBatch
from .context import ControllerContext
from .leader_election import LeaderAndIsr
from .zkops import ControllerZk

log = logging.getLogger("logkeeper.controller.state")

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


class PartitionState(enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"


class ReplicaState(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


P, R = PartitionState, ReplicaState

# target -> the states it may be entered from (Kafka's validPreviousStates)
PARTITION_TRANSITIONS: dict[PartitionState, frozenset[PartitionState]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}
REPLICA_TRANSITIONS: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}


def valid_partition_transition(current: PartitionState, target: PartitionState) -> bool:
    return current in PARTITION_TRANSITIONS[target]


def valid_replica_transition(current: ReplicaState, target: ReplicaState) -> bool:
    return current in REPLICA_TRANSITIONS[target]


def unclean_enabled(config: dict[str, str], default: bool) -> bool:
    value = config.get(UNCLEAN_LEADER_ELECTION)
    return default if value is None else value.strip().lower() == "true"


class PartitionStateMachine:
    def __init__(self, ctx: ControllerContext, zk: Callable[[], ControllerZk],
                 default_unclean: bool = False, broker_id: int | None = None):
        self.ctx = ctx
        self._zk = zk
        self.default_unclean = default_unclean  # the static config's
        self.broker_id = broker_id  # the controller's broker: its dynamic config counts
        self.unclean_elections = 0  # leaders elected from outside the ISR, for the metrics

    def state(self, tp: TopicPartition) -> PartitionState:
        return self.ctx.partition_states.get(tp, P.NON_EXISTENT)

    def initialize(self) -> None:
        """At failover: Online if the leader is online, Offline if not, New without
        leadership (Kafka's initializePartitionState)."""
        for tp in self.ctx.partitions():
            lai = self.ctx.leadership.get(tp)
            if lai is None:
                self.ctx.partition_states[tp] = P.NEW
            elif self.ctx.is_replica_online(lai.leader, tp):
                self.ctx.partition_states[tp] = P.ONLINE
            else:
                self.ctx.partition_states[tp] = P.OFFLINE

    def trigger_online_partition_state_change(self, batch: RequestBatch,
                                              topics: Iterable[str] | None = None
                                              ) -> dict[TopicPartition, LeaderAndIsr]:
        """New and Offline partitions (not of topics being deleted) -> Online."""
        wanted = None if topics is None else set(topics)
        tps = [tp for tp in self.ctx.partitions_in_states(P.NEW, P.OFFLINE)
               if not self.ctx.is_topic_queued_for_deletion(tp.topic)
               and (wanted is None or tp.topic in wanted)]
        return self.handle_state_changes(tps, P.ONLINE, batch)

    def handle_state_changes(self, tps: Iterable[TopicPartition], target: PartitionState,
                             batch: RequestBatch) -> dict[TopicPartition, LeaderAndIsr]:
        """Returns the partitions that got a (new) leadership on the way to Online."""
        valid = []
        for tp in tps:
            current = self.state(tp)
            if valid_partition_transition(current, target):
                valid.append(tp)
            else:
                log.error("%s: invalid partition transition %s -> %s", tp, current.value,
                          target.value)
        if target is P.NEW:
            for tp in valid:
                self.ctx.partition_states[tp] = P.NEW
            return {}
        if target in (P.OFFLINE, P.NON_EXISTENT):
            for tp in valid:
                self.ctx.partition_states[tp] = target
            return {}
        new = [tp for tp in valid if self.state(tp) is P.NEW]
        others = [tp for tp in valid if self.state(tp) is not P.NEW]
        elected = self._initialize_leaders(new, batch)
        elected.update(self._elect_leaders(others, batch))
        for tp in elected:
            self.ctx.partition_states[tp] = P.ONLINE
        return elected

    def _initialize_leaders(self, tps: list[TopicPartition], batch: RequestBatch
                            ) -> dict[TopicPartition, LeaderAndIsr]:
        out = {}
        zk = self._zk()
        for tp in tps:
            replicas = self.ctx.replicas(tp)
            lai = le.initial_leader_and_isr(replicas, lambda r, tp=tp: self.ctx.can_lead(r, tp),
                                            self.ctx.epoch)
            if lai is None:
                log.error("%s: no online replica among %s; it stays New", tp, list(replicas))
                continue
            if not zk.create_partition_state(tp, lai):
                log.error("%s: its state znode already exists; it stays New", tp)
                continue
            self.ctx.leadership[tp] = lai
            batch.add_leader_and_isr(self.ctx, lai.isr, tp, lai, is_new=True)
            out[tp] = lai
        return out

    def elect_leaders(self, tps: Iterable[TopicPartition], batch: RequestBatch, *,
                      preferred: bool) -> dict[TopicPartition, LeaderAndIsr]:
        """An election asked for (ElectLeaders, or the controller's own leader
        rebalance): `preferred`, Online partitions whose preferred replica can lead
        again (Kafka's PreferredReplicaPartitionLeaderElectionStrategy); otherwise
        Offline ones, with unclean election allowed whatever the topic says (an
        operator's UNCLEAN election). Returns the elected; the rest could not be."""
        want = P.ONLINE if preferred else P.OFFLINE
        tps = [tp for tp in tps if self.state(tp) is want]
        choose = self._preferred_choice if preferred else self._offline_choice(force_unclean=True)
        elected = self._elect_leaders(tps, batch, choose)
        for tp in elected:
            self.ctx.partition_states[tp] = P.ONLINE
        return elected

    def elect_reassigned_leaders(self, tps: Iterable[TopicPartition], batch: RequestBatch
                                 ) -> dict[TopicPartition, LeaderAndIsr]:
        """A reassignment's end (Kafka's ReassignPartitionLeaderElectionStrategy): the
        leader moves to the first replica of the new assignment that is online and in
        the ISR. Returns the elected; the rest keep their leadership."""
        def choose(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | str:
            replicas = self.ctx.replicas(tp)
            new = le.elect_reassigned_leader(replicas, current,
                                             lambda r: self.ctx.can_lead(r, tp), self.ctx.epoch)
            if new is None:
                return (f"none of the reassigned replicas {list(replicas)} is online and in the "
                        f"ISR {list(current.isr)}")
            return new

        elected = self._elect_leaders(list(tps), batch, choose)
        for tp in elected:
            self.ctx.partition_states[tp] = P.ONLINE
        return elected

    def elect_for_controlled_shutdown(self, tps: Iterable[TopicPartition], batch: RequestBatch
                                      ) -> dict[TopicPartition, LeaderAndIsr]:
        """Kafka's ControlledShutdownPartitionLeaderElectionStrategy, for partitions a
        broker in a controlled shutdown leads: the first assigned replica that is live,
        in the ISR and not shutting down leads; the ISR loses the brokers shutting
        down. Returns the elected; the others stay led where they are."""
        def choose(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | str:
            new = le.elect_controlled_shutdown_leader(
                self.ctx.replicas(tp), current, lambda r: self.ctx.can_lead(r, tp),
                self.ctx.shutting_down, self.ctx.epoch)
            if new is None:
                return (f"no other live in-sync replica (ISR {list(current.isr)}) can take over "
                        "from a broker in a controlled shutdown; it stays led there")
            return new

        # Those without a candidate by the leadership known here are left out before
        # ZooKeeper is read (the controller's summary names them); the rest are elected
        # on their state as ZooKeeper has it.
        movable = [tp for tp in tps if tp in self.ctx.leadership
                   and not isinstance(choose(tp, self.ctx.leadership[tp]), str)]
        return self._elect_leaders(movable, batch, choose)

    def bump_leader_epochs(self, tps: Iterable[TopicPartition], batch: RequestBatch
                           ) -> dict[TopicPartition, LeaderAndIsr]:
        """The same leader and ISR at the next leader epoch (Kafka's updateLeaderEpoch),
        sent to the partition's online replicas: how a reassignment tells them their new
        replica set. Returns the partitions written."""
        return self._elect_leaders(list(tps), batch,
                                   lambda _tp, current: current.with_next_epoch(self.ctx.epoch))

    def _preferred_choice(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | str:
        replicas = self.ctx.replicas(tp)
        new = le.elect_preferred_leader(replicas, current,
                                        lambda r: self.ctx.can_lead(r, tp), self.ctx.epoch)
        if new is None:
            return (f"preferred replica {replicas[0] if replicas else None} cannot lead "
                    f"(leader {current.leader}, ISR {list(current.isr)})")
        return new

    def dynamic_default_unclean(self) -> bool:
        """unclean.leader.election.enable for topics without their own: the controller
        broker's dynamic config, else the cluster-wide dynamic default, else the static
        config (Kafka's controller reads its KafkaConfig, dynamic configs included)."""
        zk = self._zk()
        default = unclean_enabled(zk.broker_config(znodes.DEFAULT_BROKER_ENTITY),
                                  self.default_unclean)
        if self.broker_id is None:
            return default
        return unclean_enabled(zk.broker_config(str(self.broker_id)), default)

    def _offline_choice(self, force_unclean: bool = False
                        ) -> Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | str]:
        unclean: dict[str, bool] = {}
        default: list[bool] = []

        def choose(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | str:
            if tp.topic not in unclean:
                if not default and not force_unclean:
                    default.append(self.dynamic_default_unclean())
                unclean[tp.topic] = force_unclean or unclean_enabled(
                    self._zk().topic_config(tp.topic), default[0])
            new = le.elect_offline_leader(self.ctx.replicas(tp), current,
                                          lambda r: self.ctx.can_lead(r, tp),
                                          unclean[tp.topic], self.ctx.epoch)
            if new is None:
                return (f"no live in-sync replica among ISR {list(current.isr)} (unclean "
                        f"election {'on' if unclean[tp.topic] else 'off'}); it stays offline")
            return new

        return choose

    def _elect_leaders(self, tps: list[TopicPartition], batch: RequestBatch,
                       choose: Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | str]
                       | None = None) -> dict[TopicPartition, LeaderAndIsr]:
        """Election (offline by default), re-reading and retrying the partitions whose
        state moved. `choose` gives the new leadership, or why there is none."""
        choose = choose or self._offline_choice()
        out: dict[TopicPartition, LeaderAndIsr] = {}
        zk = self._zk()
        pending = list(tps)
        before: dict[TopicPartition, LeaderAndIsr] = {}
        while pending:
            updates = {}
            for tp, current in zk.partition_states(pending).items():
                if current.controller_epoch > self.ctx.epoch:
                    log.error("%s: its state was written by controller epoch %d, above ours "
                              "(%d); not electing", tp, current.controller_epoch, self.ctx.epoch)
                    continue
                new = choose(tp, current)
                if isinstance(new, str):
                    self.ctx.leadership[tp] = current
                    log.error("%s: %s", tp, new)
                    continue
                updates[tp] = new
                before[tp] = current
            done, pending_set = zk.update_leader_and_isr(updates)
            for tp, lai in done.items():
                if lai.leader not in before[tp].isr:  # Kafka's UncleanLeaderElectionsPerSec
                    self.unclean_elections += 1
                    log.warning("%s: unclean election: broker %d leads from outside the ISR "
                                "%s; records only the old ISR had are lost", tp, lai.leader,
                                list(before[tp].isr))
                self.ctx.leadership[tp] = lai
                live = [r for r in self.ctx.replicas(tp) if self.ctx.is_replica_online(r, tp)]
                batch.add_leader_and_isr(self.ctx, live, tp, lai, is_new=False)
                out[tp] = lai
                log.info("%s: leader %d at epoch %d, ISR %s", tp, lai.leader, lai.leader_epoch,
                         list(lai.isr))
            pending = sorted(pending_set)
        return out


class ReplicaStateMachine:
    def __init__(self, ctx: ControllerContext, zk: Callable[[], ControllerZk]):
        self.ctx = ctx
        self._zk = zk

    def state(self, tp: TopicPartition, broker: int) -> ReplicaState:
        return self.ctx.replica_states.get((tp, broker), R.NON_EXISTENT)

    def initialize(self) -> None:
        """At failover: replicas on live brokers Online, others DeletionIneligible (so a
        topic being deleted waits for them)."""
        for tp in self.ctx.partitions():
            for b in self.ctx.replicas(tp):
                self.ctx.replica_states[(tp, b)] = (R.ONLINE if self.ctx.is_replica_online(b, tp)
                                                    else R.DELETION_INELIGIBLE)

    def handle_state_changes(self, replicas: Iterable[tuple[TopicPartition, int]],
                             target: ReplicaState, batch: RequestBatch) -> None:
        valid = []
        for tp, b in replicas:
            current = self.state(tp, b)
            if valid_replica_transition(current, target):
                valid.append((tp, b))
            else:
                log.error("replica %d of %s: invalid transition %s -> %s", b, tp, current.value,
                          target.value)
        if target is R.OFFLINE:
            self._to_offline(valid, batch)
            return
        for tp, b in valid:
            current = self.state(tp, b)
            if target is R.ONLINE and current is not R.NEW:
                lai = self.ctx.leadership.get(tp)
                if lai is not None and not self.ctx.is_topic_queued_for_deletion(tp.topic):
                    batch.add_leader_and_isr(self.ctx, [b], tp, lai, is_new=False)
            elif target is R.DELETION_STARTED:
                # A topic being deleted: -2, no epoch check; a replica a reassignment
                # removes: the partition's leader epoch, as Kafka's.
                lai = self.ctx.leadership.get(tp)
                epoch = (le.EPOCH_DURING_DELETE if self.ctx.is_topic_queued_for_deletion(tp.topic)
                         or lai is None else lai.leader_epoch)
                batch.add_stop_replica([b], tp, delete=True, leader_epoch=epoch)
            self.ctx.replica_states[(tp, b)] = target

    def _to_offline(self, replicas: list[tuple[TopicPartition, int]], batch: RequestBatch) -> None:
        """StopReplica(delete=false) to the replica, its removal from the ISR (a new
        leader epoch), LeaderAndIsr to the other replicas and UpdateMetadata to all."""
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp, b in replicas:
            lai = self.ctx.leadership.get(tp)
            epoch = lai.leader_epoch if lai is not None else le.NO_EPOCH
            batch.add_stop_replica([b], tp, delete=False, leader_epoch=epoch)
            by_broker.setdefault(b, []).append(tp)
        for b, tps in by_broker.items():
            with_leadership = [tp for tp in tps if tp in self.ctx.leadership]
            updated = self._remove_from_isr(b, with_leadership)
            for tp in tps:
                if tp in updated:
                    if not self.ctx.is_topic_queued_for_deletion(tp.topic):
                        others = [r for r in self.ctx.replicas(tp) if r != b]
                        batch.add_leader_and_isr(self.ctx, others, tp, updated[tp], is_new=False)
                else:
                    batch.add_update_metadata(self.ctx.live_broker_ids, [tp])
                self.ctx.replica_states[(tp, b)] = R.OFFLINE

    def _remove_from_isr(self, broker: int, tps: list[TopicPartition]
                         ) -> dict[TopicPartition, LeaderAndIsr]:
        """Kafka's removeReplicasFromIsr: partitions whose ISR did not hold `broker` come
        back unchanged (their LeaderAndIsr is sent again); the others are written."""
        out: dict[TopicPartition, LeaderAndIsr] = {}
        zk = self._zk()
        pending = list(tps)
        while pending:
            updates = {}
            for tp, current in zk.partition_states(pending).items():
                if current.controller_epoch > self.ctx.epoch:
                    log.error("%s: state written by controller epoch %d, above ours (%d); not "
                              "removing replica %d from its ISR", tp, current.controller_epoch,
                              self.ctx.epoch, broker)
                    continue
                new = le.remove_replica_from_isr(current, broker, self.ctx.epoch)
                if new is None:
                    self.ctx.leadership[tp] = current
                    out[tp] = current
                else:
                    updates[tp] = new
            done, retry = zk.update_leader_and_isr(updates)
            for tp, lai in done.items():
                self.ctx.leadership[tp] = lai
                out[tp] = lai
                log.info("%s: replica %d out of the ISR: leader %d at epoch %d, ISR %s", tp, broker,
                         lai.leader, lai.leader_epoch, list(lai.isr))
            pending = sorted(retry)
        return out


__all__ = [
    "PARTITION_TRANSITIONS", "REPLICA_TRANSITIONS", "PartitionState", "PartitionStateMachine",
    "ReplicaState", "ReplicaStateMachine", "UNCLEAN_LEADER_ELECTION", "unclean_enabled",
    "valid_partition_transition", "valid_replica_transition",
]
