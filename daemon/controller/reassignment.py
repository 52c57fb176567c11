"""Partition reassignment (KIP-455: Kafka's KafkaController.onPartitionReassignment in
ZooKeeper mode), docs/controller.md "Reassignment".

AlterPartitionReassignments gives a partition a new replica list (or none: cancel the
one in progress). With the original replicas ORS and the target TRS, the partition's
replicas become RS = TRS + ORS, adding AR = RS - ORS and removing RR = RS - TRS, written
to `/brokers/topics/<t>` (its `adding_replicas` and `removing_replicas`) before any
broker hears of them, so a controller that takes over carries on from there.

Until every replica of TRS is in the ISR: the leader epoch goes up and every replica of
RS gets LeaderAndIsr with RS, AR and RR (the added ones with is_new: they are created on
a good dir), so the leader lets the added replicas fetch and takes them into the ISR
once caught up; that ISR change (its `/isr_change_notification`) brings the partition
back here. Then: the assignment becomes TRS; if the leader is not in TRS (or not
online) the first replica of TRS online and in the ISR leads, else the leader epoch goes
up again; the removed replicas go Offline (out of the ISR) and are deleted
(StopReplica delete=true at the partition's leader epoch); `/brokers/topics/<t>` holds
TRS alone; every broker gets UpdateMetadata. A replica AR or RR drops on a new request
(a cancel, or another target) is stopped and deleted at once.

A reassignment is resumed when the controller takes over and when a broker of its target
starts (a LeaderAndIsr to a broker that was down is lost). A topic with a partition
being reassigned is not deleted until its reassignments end (one that cannot end, its
target broker gone for good, holds the deletion until it is cancelled: a cancel is taken
for a topic queued for deletion, where Kafka refuses it and the deletion waits forever);
a topic queued for deletion is not reassigned anew (3, as Kafka).

Callers: the controller event thread only. Errors per partition: 3 unknown partition or
a topic being deleted, 39 a bad replica list (empty, a broker twice, a negative id, an
added broker that is not live), 38 a change of replication factor when the request does
not allow one, 85 a cancel with nothing in progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from daemon.api import errors
from daemon.cluster import znodes
from logstore import TopicPartition

from .channel import RequestBatch
from .context import ReplicaAssignment
from .state_machines import ReplicaState as R
from .zkops import ControllerMovedError

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger("logkeeper.controller.reassignment")

Result = tuple[int, str | None]


class PartitionReassignments:
    def __init__(self, controller: Controller):
        self.c = controller
        self.ctx = controller.ctx

    # -- the API ------------------------------------------------------------------------

    def alter(self, wanted: Mapping[TopicPartition, tuple[int, ...] | None], *,
              allow_replication_factor_change: bool = True) -> dict[TopicPartition, Result]:
        """Kafka's processApiPartitionReassignment: start, change or cancel (None)
        each partition's reassignment; {partition: (error code, message)}. The request
        takes precedence over what `/admin/reassign_partitions` asked for them."""
        if set(wanted) & self.ctx.reassigning_from_znode:
            self._remove_from_znode(lambda tp, _replicas: tp in wanted)
        return self._alter(wanted, allow_replication_factor_change)

    def _alter(self, wanted: Mapping[TopicPartition, tuple[int, ...] | None],
               allow_replication_factor_change: bool = True) -> dict[TopicPartition, Result]:
        results: dict[TopicPartition, Result] = {}
        for tp, target in wanted.items():
            refused = self._refused(tp, target, allow_replication_factor_change)
            if refused is not None:
                results[tp] = refused
                continue
            current = self.ctx.full_assignment(tp)
            if target is None and not current.is_being_reassigned:
                results[tp] = (errors.NO_REASSIGNMENT_IN_PROGRESS, "no reassignment of the partition "
                               "is in progress")
                continue
            new = current.reassign_to(current.origin if target is None else target)
            log.info("%s: reassignment %s: replicas %s, adding %s, removing %s", tp,
                     "cancelled" if target is None else f"to {list(target)}",
                     list(new.replicas), list(new.adding), list(new.removing))
            try:
                self._on_partition_reassignment(tp, new)
            except ControllerMovedError:
                raise
            except Exception as err:  # noqa: BLE001 - this partition's answer, as Kafka's
                log.error("%s: reassignment failed", tp, exc_info=err)
                results[tp] = (errors.UNKNOWN_SERVER_ERROR, f"{type(err).__name__}: {err}")
                continue
            results[tp] = (errors.NONE, None)
        return results

    def ongoing(self, tps: Iterable[TopicPartition] | None = None
                ) -> dict[TopicPartition, ReplicaAssignment]:
        """The reassignments in progress (of `tps`, or all)."""
        being = self.ctx.being_reassigned
        wanted = sorted(being) if tps is None else [tp for tp in tps if tp in being]
        return {tp: being[tp] for tp in wanted}

    def _refused(self, tp: TopicPartition, target: tuple[int, ...] | None,
                 allow_rf_change: bool) -> Result | None:
        """Kafka's validateReplicas then shouldSkipReassignment (in that order: a bad
        list for an unknown partition is 39, a cancel of one 85)."""
        if target is None:
            return None  # a cancel, even of a topic queued for deletion: it lets that go on
        if not target:
            return (errors.INVALID_REPLICA_ASSIGNMENT,
                    "Empty replica list specified in partition reassignment.")
        if len(set(target)) != len(target):
            return (errors.INVALID_REPLICA_ASSIGNMENT, "Duplicate replica ids in partition reassignment "
                    f"replica list: {list(target)}")
        if any(b < 0 for b in target):
            return errors.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {list(target)}"
        current = self.ctx.full_assignment(tp)
        adding = current.reassign_to(target).adding
        if not set(adding) <= set(self.ctx.live_brokers):
            return (errors.INVALID_REPLICA_ASSIGNMENT, "Replica assignment has brokers that are not alive. "
                    f"Replica list: {list(adding)}, live broker list: {self.ctx.live_broker_ids}")
        if not self.ctx.replicas(tp):
            return errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        if self.ctx.is_topic_queued_for_deletion(tp.topic):
            return (errors.UNKNOWN_TOPIC_OR_PARTITION,
                    "The partition does not exist (its topic is being deleted).")
        if not allow_rf_change and len(target) != len(current.origin):
            return (errors.INVALID_REPLICATION_FACTOR, "The replication factor is changed from "
                    f"{len(current.origin)} to {len(target)}")
        return None

    # -- resuming -----------------------------------------------------------------------

    def resume(self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]
               = lambda _tp, _ra: True) -> None:
        """Kafka's maybeResumeReassignments: at failover (all), when brokers start (those
        whose target includes one), each from the assignment ZooKeeper holds."""
        for tp, assignment in list(self.ctx.being_reassigned.items()):
            if not should_resume(tp, assignment):
                continue
            log.info("%s: resuming its reassignment to %s", tp, list(assignment.target))
            try:
                self._on_partition_reassignment(tp, assignment)
            except ControllerMovedError:
                raise
            except Exception:  # noqa: BLE001 - one partition's trouble, not the controller's
                log.exception("%s: resuming its reassignment failed", tp)

    def at_failover(self) -> None:
        """Kafka's initializePartitionReassignments: what `/admin/reassign_partitions`
        asks first, then every other reassignment the topic znodes hold."""
        started = self.from_znode()
        self.resume(lambda tp, _ra: tp not in started)

    def on_brokers_started(self, brokers: Iterable[int]) -> None:
        started = set(brokers)
        self.resume(lambda _tp, ra: bool(started & set(ra.target)))

    def on_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        """Kafka's processPartitionReassignmentIsrChange: a partition whose target is in
        its ISR now completes. An error is this partition's, logged: it is looked at
        again at the next change of its state, or the next failover."""
        for tp in tps:
            assignment = self.ctx.being_reassigned.get(tp)
            try:
                if assignment is not None and self._is_complete(tp, assignment):
                    log.info("%s: the target replicas %s have caught up with the leader", tp,
                             list(assignment.target))
                    self._on_partition_reassignment(tp, assignment)
            except ControllerMovedError:
                raise
            except Exception:  # noqa: BLE001 - one partition's trouble, not the controller's
                log.exception("%s: completing its reassignment failed", tp)

    def on_state_change(self, tp: TopicPartition) -> None:
        """The partition's state znode changed: watch it again while it is being
        reassigned, and see whether that completes it. (Leaders announce ISR changes
        under /isr_change_notification too; the watch does not depend on that
        notice, which a leader that dies within its batching delay never writes.)"""
        if tp in self.ctx.being_reassigned:
            self._watch_state(tp)
            self.on_isr_change([tp])

    def _watch_state(self, tp: TopicPartition) -> None:
        self.c.zk.get(znodes.partition_state_path(tp.topic, tp.partition),
                      watch=self.c.reassignment_state_watch(tp))

    # -- replicas left behind ------------------------------------------------------------

    def delete_strays(self, brokers: Iterable[int]) -> None:
        """A replica a reassignment removed while its broker was down (or its dir
        offline, or paused past its session) got no StopReplica, or answered 56 to it,
        or was created afterwards by a LeaderAndIsr the broker still had to read: it
        stays on that disk. The partitions a broker lists at
        `/logkeeper/brokers/<id>/log_dirs` (watched: read at failover, when the broker
        starts or writes a log-dir event, and whenever it writes there) that it is no
        replica of, of topics that exist and are not being deleted, are deleted
        (StopReplica delete=true at the partition's leader epoch), as Kafka's KRaft
        brokers delete their stray logs. A broker that lists nothing (not a logkeeper
        broker) is left as it is."""
        batch = RequestBatch()
        for b in brokers:
            got = self.c.zk.get(znodes.logkeeper_log_dirs_path(b),
                                watch=self.c.broker_log_dirs_watch(b))
            if got is None:
                continue
            try:
                hosted = znodes.decode_hosted_partitions(b, got[0])
            except znodes.ZnodeError as err:
                log.warning("broker %d's stray replicas not looked for: %s", b, err)
                continue
            for topic, partition in sorted(hosted):
                tp = TopicPartition(topic, partition)
                replicas = self.ctx.replicas(tp)
                if not replicas or b in replicas or self.ctx.is_topic_queued_for_deletion(topic):
                    continue
                lai = self.ctx.leadership.get(tp)
                log.info("%s: broker %d holds a replica it is not assigned (replicas %s): "
                         "deleting it", tp, b, list(replicas))
                batch.add_stop_replica([b], tp, delete=True,
                                       leader_epoch=lai.leader_epoch if lai is not None else -1)
        self.c.send(batch)

    # -- /admin/reassign_partitions -----------------------------------------------------

    def from_znode(self) -> set[TopicPartition]:
        """Kafka's processZkPartitionReassignment, for tools that write
        `/admin/reassign_partitions` (kafka-reassign-partitions.sh before Kafka 3, older
        Cruise Control and CMAK): each partition whose target is not already the one in
        progress starts as through the API (the same checks, so a broker that is not
        live is refused where Kafka's znode path takes it); refused partitions leave
        the znode, as does each one whose reassignment completes, and the znode goes
        when empty. Watched again every time. Returns the partitions started."""
        got = self.c.zk.get(znodes.REASSIGN_PARTITIONS, watch=self.c.reassign_partitions_watch)
        if got is None:
            self.ctx.reassigning_from_znode.clear()
            return set()
        try:
            asked = znodes.decode_reassign_partitions(got[0])
        except znodes.ZnodeError as err:
            log.error("%s; deleting it", err)
            self.c.zk.delete(znodes.REASSIGN_PARTITIONS)
            return set()
        wanted: dict[TopicPartition, tuple[int, ...] | None] = {}
        for (topic, partition), target in asked.items():
            tp = TopicPartition(topic, partition)
            running = self.ctx.being_reassigned.get(tp)
            if running is None or running.target != target:
                wanted[tp] = target
        results = self._alter(wanted)
        refused = {tp: r for tp, r in results.items() if r[0]}
        if refused:
            log.warning("%s: refused %s", znodes.REASSIGN_PARTITIONS,
                        {str(tp): f"{code}: {message}" for tp, (code, message) in refused.items()})
        self.ctx.reassigning_from_znode = {
            TopicPartition(*k) for k in asked} & set(self.ctx.being_reassigned)
        self._remove_from_znode(lambda tp, _replicas: tp not in self.ctx.reassigning_from_znode)
        return {tp for tp in results if tp not in refused}

    def _remove_from_znode(self, remove: Callable[[TopicPartition, tuple[int, ...]], bool]) -> None:
        """Kafka's maybeRemoveFromZkReassignment."""
        got = self.c.zk.get(znodes.REASSIGN_PARTITIONS)
        if got is None:
            self.ctx.reassigning_from_znode.clear()
            return
        data, stat = got
        try:
            asked = znodes.decode_reassign_partitions(data)
        except znodes.ZnodeError:
            asked = {}
        keep = {k: r for k, r in asked.items() if not remove(TopicPartition(*k), r)}
        if asked and keep == asked:
            return
        if keep:
            self.c.zk.set_data(znodes.REASSIGN_PARTITIONS, znodes.encode_reassign_partitions(keep),
                               stat.version)
        else:
            self.c.zk.delete(znodes.REASSIGN_PARTITIONS)
        self.ctx.reassigning_from_znode &= {TopicPartition(*k) for k in keep}

    # -- the steps ----------------------------------------------------------------------

    def _on_partition_reassignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self._update_current(tp, assignment)
        if assignment.is_being_reassigned:
            self._watch_state(tp)
        if not self._is_complete(tp, assignment):
            # A2, A3: every replica learns RS; the added ones start following.
            batch = RequestBatch()
            bumped = self.c.partition_sm.bump_leader_epochs([tp], batch)
            if tp in bumped:
                batch.add_leader_and_isr(self.ctx, assignment.adding, tp, bumped[tp], is_new=True)
            else:
                log.error("%s: could not write the next leader epoch of its reassignment", tp)
            self.c.replica_sm.handle_state_changes(
                [(tp, b) for b in assignment.adding
                 if self.c.replica_sm.state(tp, b) is R.NON_EXISTENT], R.NEW, batch)
            self.c.send(batch)
            return
        # B1-B8
        batch = RequestBatch()
        self.c.replica_sm.handle_state_changes(
            [(tp, b) for b in assignment.adding if self.c.replica_sm.state(tp, b) is R.NEW],
            R.ONLINE, batch)
        self.c.send(batch)
        completed = ReplicaAssignment(assignment.target)
        self.ctx.set_full_assignment(tp, completed)
        if not self._move_leader_if_required(tp):
            # No replica of the target can lead right now: the old replicas stay (the
            # leader among them), and the next change of the partition's state tries again.
            self.ctx.set_full_assignment(tp, assignment)
            log.error("%s: no replica of the target %s can lead; its reassignment waits", tp,
                      list(assignment.target))
            return
        self._stop_removed_replicas(tp, assignment.removing)
        self._write(tp, completed)
        if tp in self.ctx.reassigning_from_znode:
            self._remove_from_znode(lambda t, replicas: t == tp and replicas == completed.replicas)
        batch = RequestBatch()
        batch.add_update_metadata(self.ctx.live_broker_ids, [tp])
        self.c.send(batch)
        log.info("%s: reassignment completed: replicas %s", tp, list(completed.replicas))
        self.c.deletion.resume_for_topics([tp.topic])

    def _update_current(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Kafka's updateCurrentReassignment: ZooKeeper first, then memory; replicas the
        new assignment no longer has (added by the one it replaces) are removed."""
        current = self.ctx.full_assignment(tp)
        if current == assignment:
            return
        self._write(tp, assignment)
        self.ctx.set_full_assignment(tp, assignment)
        unneeded = [b for b in current.replicas if b not in assignment.replicas]
        if unneeded:
            self._stop_removed_replicas(tp, unneeded)
            lai = self.ctx.leadership.get(tp)
            if lai is not None and lai.leader not in assignment.replicas:
                # It led (an added replica made leader meanwhile) and is gone: the first
                # replica left online and in the ISR leads, rather than none until the end.
                batch = RequestBatch()
                self.c.partition_sm.elect_reassigned_leaders([tp], batch)
                self.c.send(batch)

    def _is_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        if not assignment.is_being_reassigned:
            return True
        state = self.c.zk.partition_states([tp]).get(tp)
        if state is None:
            return False
        self.ctx.leadership[tp] = state
        return set(assignment.target) <= set(state.isr)

    def _move_leader_if_required(self, tp: TopicPartition) -> bool:
        """B3: a leader outside the new replicas, or not online, is replaced; otherwise
        its epoch goes up so every replica hears the new replica set. False when no
        replica of the new set leads afterwards."""
        lai = self.ctx.leadership.get(tp)
        if lai is None:
            log.error("%s: no leadership known at the end of its reassignment", tp)
            return False
        batch = RequestBatch()
        if lai.leader in self.ctx.replicas(tp) and self.ctx.can_lead(lai.leader, tp):
            self.c.partition_sm.bump_leader_epochs([tp], batch)
            led = True
        else:
            led = tp in self.c.partition_sm.elect_reassigned_leaders([tp], batch)
        self.c.send(batch)
        return led

    def _stop_removed_replicas(self, tp: TopicPartition, removed: Iterable[int]) -> None:
        """B4, B5: out of the ISR, stopped and deleted."""
        replicas = [(tp, b) for b in removed]
        if not replicas:
            return
        batch = RequestBatch()
        self.c.replica_sm.handle_state_changes(replicas, R.OFFLINE, batch)
        self.c.replica_sm.handle_state_changes(replicas, R.DELETION_STARTED, batch)
        self.c.replica_sm.handle_state_changes(replicas, R.DELETION_SUCCESSFUL, batch)
        self.c.replica_sm.handle_state_changes(replicas, R.NON_EXISTENT, batch)
        self.c.send(batch)
        for r in replicas:
            self.ctx.replica_states.pop(r, None)

    def _write(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """The partition's replicas, adding and removing in `/brokers/topics/<t>`."""
        got = self.c.zk.topic_assignment(tp.topic)
        if got is None:
            raise RuntimeError(f"{tp}: /brokers/topics/{tp.topic} is gone")
        topic, version = got

        def with_partition(m: Mapping[int, tuple[int, ...]], value: tuple[int, ...]
                           ) -> dict[int, tuple[int, ...]]:
            out = {p: r for p, r in m.items() if p != tp.partition}
            if value:
                out[tp.partition] = value
            return out

        updated = replace(topic,
                          partitions={**topic.partitions, tp.partition: assignment.replicas},
                          adding_replicas=with_partition(topic.adding_replicas, assignment.adding),
                          removing_replicas=with_partition(topic.removing_replicas, assignment.removing))
        self.c.zk.set_data(znodes.topic_path(tp.topic), znodes.encode_topic(updated), version)
