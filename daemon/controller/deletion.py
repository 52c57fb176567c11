"""Topic deletion (Kafka's TopicDeletionManager), docs/controller.md
"Topic deletion".

A topic named in `/admin/delete_topics` is queued. Deletion of a queued topic starts
when none of its replicas is in ReplicaDeletionStarted and the topic is not marked
ineligible: UpdateMetadata with leader -2 to every live broker, its partitions Offline
then NonExistent, and each replica on a **live** broker, including replicas the broker
reported on offline or saturated dirs, goes OfflineReplica then ReplicaDeletionStarted:
one StopReplica(delete=true, leader epoch -2). Replicas on brokers that are not live go
straight to ReplicaDeletionIneligible and mark the topic ineligible.

An answer of 0 makes the replica ReplicaDeletionSuccessful; anything else (56 from an
OFFLINE dir, a request-level error) ReplicaDeletionIneligible, and the topic ineligible.
A replica found offline some other way fails its deletion only when its broker is gone:
a live broker's replica is decided by its own StopReplica's answer, since a 56 to an
earlier LeaderAndIsr (a log-dir probe) can arrive after that StopReplica was sent, and a
saturated dir answers 56 to the one and 0 to the other.
When every replica has succeeded, the controller deletes `/brokers/topics/<t>`
(recursively), `/config/topics/<t>` and `/admin/delete_topics/<t>`, each fenced, and
forgets the topic.

A topic with a partition being reassigned waits until its reassignments end
(daemon.controller.reassignment resumes it then). An ineligible topic waits. It is
retried when a broker holding one of its replicas starts (onBrokerStartup, as Kafka)
and, our extension, when that broker writes a log-dir event: the retried StopReplica is
the probe, and a dir back online answers 0.

Callers: the controller event thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from daemon.cluster import znodes
from logstore import TopicPartition

from .channel import RequestBatch
from .state_machines import PartitionState as P
from .state_machines import ReplicaState as R

if TYPE_CHECKING:
    from .controller import Controller

log = logging.getLogger("logkeeper.controller.deletion")


class TopicDeletionManager:
    def __init__(self, controller: Controller, on_deleted: Callable[[str], None]):
        self.c = controller
        self.ctx = controller.ctx
        self.on_deleted = on_deleted

    def init(self, queued: Iterable[str], ineligible: Iterable[str]) -> None:
        self.ctx.topics_to_be_deleted = set(queued)
        self.ctx.topics_with_deletion_started = set()
        self.ctx.topics_ineligible_for_deletion = set(ineligible) & self.ctx.topics_to_be_deleted

    def enqueue(self, topics: Iterable[str]) -> None:
        self.ctx.topics_to_be_deleted.update(topics)
        self.resume()

    def resume_for_topics(self, topics: Iterable[str]) -> None:
        """Clear the ineligible mark of these queued topics and try again."""
        queued = set(topics) & self.ctx.topics_to_be_deleted
        if queued:
            self.ctx.topics_ineligible_for_deletion -= queued
            self.resume()

    def fail_replica_deletion(self, replicas: Iterable[tuple[TopicPartition, int]]) -> None:
        replicas = [r for r in replicas if self.ctx.is_topic_queued_for_deletion(r[0].topic)]
        if not replicas:
            return
        batch = RequestBatch()
        self.c.replica_sm.handle_state_changes(replicas, R.DELETION_INELIGIBLE, batch)
        self.c.send(batch)
        self.ctx.topics_ineligible_for_deletion.update(tp.topic for tp, _ in replicas)
        self.resume()

    def replicas_went_offline(self, replicas: Iterable[tuple[TopicPartition, int]]) -> None:
        """Replicas found offline: their broker went away, or it answered 56 to a
        LeaderAndIsr. Only a gone broker's replicas fail here (see the module's text); a
        deleted replica stays deleted."""
        self.fail_replica_deletion([
            r for r in replicas if r[1] not in self.ctx.live_brokers
            and self.c.replica_sm.state(*r) is not R.DELETION_SUCCESSFUL])

    def complete_replica_deletion(self, replicas: Iterable[tuple[TopicPartition, int]]) -> None:
        replicas = [r for r in replicas if self.ctx.is_topic_queued_for_deletion(r[0].topic)]
        if replicas:
            batch = RequestBatch()
            self.c.replica_sm.handle_state_changes(replicas, R.DELETION_SUCCESSFUL, batch)
            self.c.send(batch)
            self.resume()

    def resume(self) -> None:
        """Kafka's resumeDeletions: complete, wait, retry or start each queued topic."""
        retry, start = [], []
        for topic in sorted(self.ctx.topics_to_be_deleted):
            replicas = self.ctx.replicas_for_topic(topic)
            states = [self.c.replica_sm.state(tp, b) for tp, b in replicas]
            if all(s is R.DELETION_SUCCESSFUL for s in states):
                self._complete(topic)
                continue
            if any(s is R.DELETION_STARTED for s in states):
                continue
            if any(s is R.DELETION_INELIGIBLE for s in states):
                retry.append(topic)
            if (topic not in self.ctx.topics_ineligible_for_deletion
                    and not self.ctx.is_topic_being_reassigned(topic)):
                start.append(topic)
        for topic in retry:  # Ineligible -> Offline: ready to be started again
            if topic not in self.ctx.topics_ineligible_for_deletion:
                batch = RequestBatch()
                self.c.replica_sm.handle_state_changes(
                    self.ctx.replicas_in_state(topic, R.DELETION_INELIGIBLE), R.OFFLINE, batch)
                self.c.send(batch)
        if start:
            self._on_topic_deletion(start)

    def _on_topic_deletion(self, topics: list[str]) -> None:
        log.info("deletion of %s started", ", ".join(topics))
        self.ctx.topics_with_deletion_started.update(topics)
        partitions = self.ctx.partitions(topics)
        batch = RequestBatch()
        batch.add_update_metadata(self.ctx.live_broker_ids, partitions)  # leader -2: drop it
        self.c.send(batch)
        # A retried deletion (a replica was ineligible) finds its partitions gone already.
        partitions = [tp for tp in partitions
                      if self.c.partition_sm.state(tp) is not P.NON_EXISTENT]
        batch = RequestBatch()
        self.c.partition_sm.handle_state_changes(partitions, P.OFFLINE, batch)
        self.c.partition_sm.handle_state_changes(partitions, P.NON_EXISTENT, batch)
        self.c.send(batch)
        for topic in topics:
            self._delete_replicas(topic)

    def _delete_replicas(self, topic: str) -> None:
        replicas = [r for r in self.ctx.replicas_for_topic(topic)
                    if self.c.replica_sm.state(*r) is not R.DELETION_SUCCESSFUL]
        # Every replica on a live broker gets StopReplica(delete=true), even
        # one the broker reported on an offline or saturated dir.
        alive = [r for r in replicas if r[1] in self.ctx.live_brokers]
        dead = [r for r in replicas if r[1] not in self.ctx.live_brokers]
        batch = RequestBatch()
        if dead:
            for r in dead:  # straight to Ineligible, whatever state they were in
                self.ctx.replica_states[r] = R.DELETION_INELIGIBLE
            self.ctx.topics_ineligible_for_deletion.add(topic)
            log.info("deletion of %s waits for replicas on brokers %s that are not live", topic,
                     sorted({b for _, b in dead}))
        self.c.replica_sm.handle_state_changes(alive, R.OFFLINE, batch)
        self.c.replica_sm.handle_state_changes(alive, R.DELETION_STARTED, batch)
        self.c.send(batch)

    def _complete(self, topic: str) -> None:
        batch = RequestBatch()
        replicas = self.ctx.replicas_in_state(topic, R.DELETION_SUCCESSFUL)
        self.c.replica_sm.handle_state_changes(replicas, R.NON_EXISTENT, batch)
        zk = self.c.zk
        zk.delete_recursive(znodes.topic_path(topic))
        zk.delete(znodes.topic_config_path(topic))
        zk.delete(znodes.delete_topic_path(topic))
        self.ctx.topics_to_be_deleted.discard(topic)
        self.ctx.topics_with_deletion_started.discard(topic)
        self.ctx.topics_ineligible_for_deletion.discard(topic)
        self.ctx.remove_topic(topic)
        log.info("deletion of %s completed", topic)
        self.on_deleted(topic)
