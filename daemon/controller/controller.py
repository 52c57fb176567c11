"""The controller (Kafka's KafkaController in ZooKeeper mode), docs/controller.md.

Every daemon with `zookeeper.connect` runs one `Controller`; the election decides which
one acts. The active controller loads the cluster from ZooKeeper, watches brokers,
topics, deletions, log-dir events and ISR changes, runs the partition and replica state
machines and topic deletion, and tells brokers through the channel: LeaderAndIsr,
UpdateMetadata and StopReplica. All of it runs on one event thread (`events`): kazoo
watches, the session listener, broker responses and the API layer only enqueue.

The API layer calls `create_topics` and `delete_topics` (from any thread); each returns
a `concurrent.futures.Future`. On a broker that is not the controller the future at once
holds NOT_CONTROLLER (41) for every topic. The future of a creation is done once the
controller has written the znodes and elected the new partitions' leaders; that of a
deletion once the topic is marked (`/admin/delete_topics/<t>`), since its deletion may
stay queued until a broker returns. The API layer applies its own `timeout_ms` (and
answers REQUEST_TIMED_OUT, 7) and waits for its metadata cache, as Kafka does.

Errors: a fenced write that fails (`ControllerMovedError`) makes the controller resign;
any other error while processing an event is logged and moves the controller (resign,
free `/controller`, elect again), as Kafka's triggerControllerMove. Nothing here raises
into the caller's thread except bad arguments.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from kafka import errors as kerr
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType

from daemon.cluster import znodes
from daemon.replica.topic_config import ConfigValueError, validate_topic_configs
from daemon.wire import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest, views
from logstore import TopicPartition
from logstore.names import InvalidTopicError, collision, creation_refused, validate_topic

from . import events as ev
from .channel import ChannelManager, RequestBatch
from .context import BrokerInfo, ControllerContext, ReplicaAssignment
from .deletion import TopicDeletionManager
from .election import ControllerElection
from .leader_election import preferred_elections_due, replica_assignment
from .reassignment import PartitionReassignments
from .state_machines import PartitionState as P
from .state_machines import PartitionStateMachine, ReplicaStateMachine
from .state_machines import ReplicaState as R
from .zkops import ControllerMovedError, ControllerZk, ZkWriteError

log = logging.getLogger("logkeeper.controller")

# kazoo's ways of saying the ZooKeeper session is gone or not answering (most carry no
# text: `_why` names them).
ZOOKEEPER_AWAY = (SessionExpiredError, ConnectionLoss, ConnectionClosedError,
                  OperationTimeoutError, KazooTimeoutError)

NONE = kerr.NoError.errno
STORAGE_ERROR = kerr.KafkaStorageError.errno
NOT_CONTROLLER = kerr.NotControllerError.errno
BROKER_NOT_AVAILABLE = kerr.BrokerNotAvailableError.errno
STALE_BROKER_EPOCH = kerr.StaleBrokerEpochError.errno
TOPIC_ALREADY_EXISTS = kerr.TopicAlreadyExistsError.errno
INVALID_REPLICATION_FACTOR = kerr.InvalidReplicationFactorError.errno
INVALID_REPLICA_ASSIGNMENT = kerr.InvalidReplicationAssignmentError.errno
INVALID_PARTITIONS = kerr.InvalidPartitionsError.errno
INVALID_CONFIG = kerr.InvalidConfigurationError.errno
INVALID_REQUEST = kerr.InvalidRequestError.errno
INVALID_TOPIC = kerr.InvalidTopicError.errno
UNKNOWN_TOPIC = kerr.UnknownTopicOrPartitionError.errno
TOPIC_DELETION_DISABLED = kerr.TopicDeletionDisabledError.errno
ELECTION_NOT_NEEDED = kerr.ElectionNotNeededError.errno
PREFERRED_LEADER_NOT_AVAILABLE = kerr.PreferredLeaderNotAvailableError.errno
ELIGIBLE_LEADERS_NOT_AVAILABLE = kerr.EligibleLeadersNotAvailableError.errno
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


@dataclass(frozen=True)
class TopicSpec:
    """One topic of a CreateTopics request. -1 means the broker default; `assignments`
    (partition -> brokers) replaces both counts."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicResult:
    error_code: int = NONE
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


class _TopicError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class _Parked:
    future: Future
    results: dict[str, Any]
    waiting: set[str]


def _answer(future: Future, result: Any) -> None:
    """Hand a caller its result, unless it stopped waiting: the API layer cancels the
    future of a CreateTopics or DeleteTopics whose timeout_ms ran out, while the work
    goes on here (a creation waiting for its leaders, a request behind a busy queue)."""
    if not future.done():
        future.set_result(result)


class Controller:
    """Start with `start()`, stop with `stop()`. `client`: a KazooClient the caller owns
    (started or not); without it one is made from `hosts` and owned here."""

    def __init__(self, broker_id: int, *, client: KazooClient | None = None, hosts: str | None = None,
                 session_timeout: float = 10.0, listener: str = "PLAINTEXT",
                 default_num_partitions: int = 1, default_replication_factor: int = 1,
                 unclean_leader_election: bool = False, delete_topic_enable: bool = True,
                 leader_imbalance_percentage: int = 10,
                 socket_timeout: float = 30.0, rng: random.Random | None = None,
                 tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None):
        if client is None and hosts is None:
            raise ValueError("a Controller needs a KazooClient or ZooKeeper hosts")
        self.broker_id = broker_id
        self._own_client = client is None
        self.client = client or KazooClient(hosts=hosts, timeout=session_timeout)
        self.session_timeout = session_timeout
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.delete_topic_enable = delete_topic_enable
        self.leader_imbalance_percentage = leader_imbalance_percentage
        self.rng = rng or random.Random()
        self.ctx = ControllerContext()
        self.zk = ControllerZk(self.client, -1, request_timeout=session_timeout, deadline=session_timeout)
        self.election = ControllerElection(self.client, broker_id, request_timeout=session_timeout)
        self.channel = ChannelManager(broker_id, self._on_response, listener=listener,
                                      socket_timeout=socket_timeout, tls_context=tls_context,
                                      login=login)
        self.partition_sm = PartitionStateMachine(self.ctx, lambda: self.zk, unclean_leader_election,
                                                  broker_id)
        self.replica_sm = ReplicaStateMachine(self.ctx, lambda: self.zk)
        self.deletion = TopicDeletionManager(self, self._on_topic_deleted)
        self.reassignments = PartitionReassignments(self)
        self.events = ev.ControllerEventManager(self._process, self._on_error,
                                                name=f"controller-{broker_id}-event-thread")
        self.active_id = -1
        self._creations: list[_Parked] = []
        self._watches: dict[str, dict[ev.ControllerEvent, Any]] = {}  # by topic or broker
        self._session_down = False
        self._closed = threading.Event()
        # Metric hooks, plain values for the ops layer (Kafka's names in comments).
        self.active_controller_count = 0  # ActiveControllerCount
        self.offline_partitions_count = 0  # OfflinePartitionsCount
        self.global_topic_count = 0  # GlobalTopicCount
        self.global_partition_count = 0  # GlobalPartitionCount
        self.preferred_replica_imbalance_count = 0  # PreferredReplicaImbalanceCount
        self.topics_to_delete_count = 0  # TopicsToDeleteCount
        self.controller_epoch = 0  # the epoch of the controller we last knew
        self.elections_won = 0
        self.resignations = 0

    # -- lifecycle and API --------------------------------------------------------------

    def start(self) -> None:
        if self._own_client:
            self.client.start(timeout=self.session_timeout)
        self.client.add_listener(self._on_session_state)
        self.events.start()
        self.events.put(ev.Startup())

    def stop(self) -> None:
        """Stop the event thread and the senders; free `/controller` if we hold it."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.client.remove_listener(self._on_session_state)
        self.events.close()
        was_active = self.is_active
        self._on_resignation()
        if was_active:
            try:
                self.election.release()
            except Exception as err:  # noqa: BLE001 - best effort: the session's end frees it too
                log.warning("controller %d: could not free /controller: %s", self.broker_id, err)
        if self._own_client:
            self.client.stop()
            self.client.close()

    @property
    def is_active(self) -> bool:
        return self.active_id == self.broker_id

    def create_topics(self, topics: Iterable[TopicSpec], validate_only: bool = False) -> Future:
        """Future of {name: TopicResult}."""
        return self._put(ev.CreateTopics(tuple(topics), validate_only)).future

    def delete_topics(self, topics: Iterable[str]) -> Future:
        """Future of {name: error code}, set once the topics are marked for deletion
        (`/admin/delete_topics/<t>`), not when they are gone: a deletion can stay queued
        until a broker or a dir returns (docs/controller.md "Topic deletion")."""
        return self._put(ev.DeleteTopics(tuple(topics))).future

    def create_partitions(self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None,
                          validate_only: bool = False) -> Future:
        """Future of (error code, message): grow `topic` to `count` partitions by
        writing the longer assignment to `/brokers/topics/<t>` (Kafka's
        AdminZkClient.addPartitions); the partition watch then brings them online."""
        return self.call(lambda: self._create_partitions(topic, count, assignments, validate_only))

    def elect_leaders(self, election_type: int,
                      tps: Iterable[TopicPartition] | None) -> Future:
        """Future of {partition: (error code, message, new leader epoch or -1)}:
        ElectLeaders (Kafka's processReplicaLeaderElection). PREFERRED (0) moves
        leadership back to each partition's preferred replica, UNCLEAN (1) elects a
        leader for leaderless partitions even from outside the ISR. `tps` None: every
        partition (the answer then leaves out those that needed no election, as
        Kafka's does)."""
        wanted = None if tps is None else tuple(tps)
        return self.call(lambda: self._elect_leaders(election_type, wanted))

    def alter_partition_reassignments(self, wanted: Mapping[TopicPartition, Sequence[int] | None],
                                      allow_replication_factor_change: bool = True) -> Future:
        """Future of {partition: (error code, message)}: AlterPartitionReassignments
        (daemon.controller.reassignment); a replica list None cancels the partition's
        reassignment. Answered once each has started (or completed), not finished."""
        asked = {tp: None if r is None else tuple(r) for tp, r in wanted.items()}

        def run() -> dict[TopicPartition, tuple[int, str | None]]:
            if not self.is_active:
                return {tp: (NOT_CONTROLLER, "this broker is not the controller") for tp in asked}
            return self.reassignments.alter(
                asked, allow_replication_factor_change=allow_replication_factor_change)
        return self.call(run)

    def list_partition_reassignments(self, tps: Iterable[TopicPartition] | None = None) -> Future:
        """Future of {partition: ReplicaAssignment} in progress, or None when this broker
        is not the controller."""
        wanted = None if tps is None else tuple(tps)
        return self.call(lambda: self.reassignments.ongoing(wanted) if self.is_active else None)

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future:
        """Future of (error code, partitions it still leads): Kafka's
        doControlledShutdown for a broker about to stop (docs/controller.md)."""
        return self.call(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    def rebalance_leaders(self) -> Future:
        """Future of the partitions whose preferred replica was made leader again: the
        auto leader rebalance (auto.leader.rebalance.enable), run every
        leader.imbalance.check.interval.seconds by the daemon. Not active: nothing."""
        return self.call(self._rebalance_leaders)

    def unclean_leader_election_enabled(self, topic: str | None = None) -> Future:
        """unclean.leader.election.enable was set true on `topic` (None: for every broker,
        or on the controller's broker): its leaderless partitions get a leader now, as
        Kafka's TopicUncleanLeaderElectionEnable and UncleanLeaderElectionEnable events
        do, not at the next broker change. Not active: nothing."""
        def run() -> None:
            if not self.is_active:
                return
            batch = RequestBatch()
            self.partition_sm.trigger_online_partition_state_change(
                batch, None if topic is None else [topic])
            self.send(batch)
        return self.call(run)

    def call(self, fn) -> Future:
        """Run `fn()` on the event thread (a consistent view of the context)."""
        return self._put(ev.Call(fn)).future

    def _put(self, event: ev.ControllerEvent) -> Any:
        if self._closed.is_set():
            fut = getattr(event, "future", None)
            if fut is not None:
                fut.cancel()
            return event
        return self.events.put(event)

    # -- kazoo callbacks: enqueue only --------------------------------------------------

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_down = True
            self._put(ev.Expire())
        elif state == KazooState.SUSPENDED:
            self._session_down = True
            log.warning("controller %d: ZooKeeper connection suspended", self.broker_id)
        elif state == KazooState.CONNECTED and self._session_down:
            self._session_down = False
            self._put(ev.Reelect())

    def _controller_watch(self, event: Any) -> None:
        self._put(ev.Reelect() if event.type == EventType.DELETED else ev.ControllerChange())

    def _broker_watch(self, _event: Any) -> None:
        self._put(ev.BrokerChange())

    def _topics_watch(self, _event: Any) -> None:
        self._put(ev.TopicChange())

    def _delete_watch(self, _event: Any) -> None:
        self._put(ev.TopicDeletion())

    def _log_dir_watch(self, _event: Any) -> None:
        self._put(ev.LogDirEventNotification())

    def _isr_watch(self, _event: Any) -> None:
        self._put(ev.IsrChangeNotification())

    def reassign_partitions_watch(self, _event: Any) -> None:
        self._put(ev.ZkPartitionReassignment())

    def broker_log_dirs_watch(self, broker_id: int) -> Any:
        """The data watch on a logkeeper broker's `/logkeeper/brokers/<id>/log_dirs`."""
        return self._watch_putting(f"broker {broker_id}", ev.BrokerLogDirsChange(broker_id))

    def reassignment_state_watch(self, tp: TopicPartition) -> Any:
        """The data watch on a reassigning partition's state znode."""
        return self._watch_putting(tp.topic, ev.PartitionReassignmentIsrChange(tp))

    def _topic_watch(self, topic: str) -> Any:
        return self._watch_putting(topic, ev.PartitionModifications(topic))

    def _watch_putting(self, owner: str, event: ev.ControllerEvent) -> Any:
        """A kazoo watch on one of `owner`'s znodes (a topic's, or "broker <id>") that
        enqueues `event`: one callable per event, so kazoo keeps one watch however
        often it is armed."""
        mine = self._watches.setdefault(owner, {})
        w = mine.get(event)
        if w is None:
            def w(_zk_event: Any, event: ev.ControllerEvent = event) -> None:
                self._put(event)
            mine[event] = w
        return w

    def _forget_watches(self, topic: str) -> None:
        self._watches.pop(topic, None)

    def _on_response(self, broker_id: int, request: Any, response: Any) -> None:
        # On a sender thread.
        if isinstance(request, LeaderAndIsrRequest):
            self._put(ev.LeaderAndIsrResponseReceived(broker_id, request.broker_epoch, response))
        elif isinstance(request, StopReplicaRequest):
            self._put(ev.StopReplicaResponseReceived(broker_id, request.broker_epoch, request, response))
        elif isinstance(request, UpdateMetadataRequest) and response.error_code:
            log.error("controller: UpdateMetadata to broker %d answered error %d", broker_id,
                      response.error_code)

    # -- the event thread ---------------------------------------------------------------

    def _process(self, event: ev.ControllerEvent) -> None:
        match event:
            case ev.Startup():
                self._elect()
            case ev.Expire():
                self.active_id = -1
                self._on_resignation()
            case ev.Reelect():
                self._maybe_resign()
                self._elect()
            case ev.ControllerChange():
                self._maybe_resign()
            case ev.Call(fn=fn, future=fut):
                try:
                    result = fn()
                except Exception as err:  # noqa: BLE001 - handed to the caller
                    if not fut.done():
                        fut.set_exception(err)
                    if isinstance(err, ControllerMovedError):
                        raise  # and we resign
                else:
                    _answer(fut, result)
            case ev.CreateTopics():
                self._process_create_topics(event)
            case ev.DeleteTopics():
                self._process_delete_topics(event)
            case _ if not self.is_active:
                return  # Kafka: events for the active controller only
            case ev.BrokerChange():
                self._process_broker_change()
            case ev.TopicChange():
                self._process_topic_change()
            case ev.PartitionModifications(topic=topic):
                self._process_partition_modifications(topic)
            case ev.TopicDeletion():
                self._process_topic_deletion()
            case ev.LogDirEventNotification():
                self._process_log_dir_events()
            case ev.IsrChangeNotification():
                self._process_isr_changes()
            case ev.PartitionReassignmentIsrChange(tp=tp):
                self.reassignments.on_state_change(tp)
            case ev.ZkPartitionReassignment():
                self.reassignments.from_znode()
            case ev.BrokerLogDirsChange(broker_id=b):
                if b in self.ctx.live_brokers:
                    self.reassignments.delete_strays([b])
            case ev.LeaderAndIsrResponseReceived():
                self._process_leader_and_isr_response(event)
            case ev.StopReplicaResponseReceived():
                self._process_stop_replica_response(event)
        self._update_metrics()

    def _on_error(self, event: ev.ControllerEvent, err: BaseException) -> None:
        if isinstance(err, ControllerMovedError):
            log.info("controller %d: moved while processing %s (%s); resigning", self.broker_id,
                     event.name, err)
        elif isinstance(err, ZOOKEEPER_AWAY):
            # Not a bug to trace: the session went (a pause, a partition) or ZooKeeper
            # did not answer in time; the session listener re-elects once it is back.
            log.warning("controller %d: ZooKeeper lost while processing %s (%s); resigning",
                        self.broker_id, event.name, _why(err))
        else:
            log.error("controller %d: %s failed; moving the controller", self.broker_id, event.name,
                      exc_info=err)
        fut = getattr(event, "future", None)
        if fut is not None and not fut.done():
            if isinstance(event, ev.CreateTopics):
                _answer(fut, {t.name: TopicResult(NOT_CONTROLLER, str(err)) for t in event.topics})
            elif isinstance(event, ev.DeleteTopics):
                _answer(fut, {t: NOT_CONTROLLER for t in event.topics})
            else:
                fut.set_exception(err)
        was_active = self.is_active
        self.active_id = -1
        if was_active:
            self._on_resignation()
        try:
            # Free /controller if it still names us: an election follows (its watch
            # fires a Reelect here too), and the winner gets a higher epoch.
            self.election.release()
            self.active_id = self.election.active_controller_id(watch=self._controller_watch)
        except Exception as err2:  # noqa: BLE001 - ZooKeeper away: the session listener re-elects
            log.warning("controller %d: cannot read /controller after resigning: %s",
                        self.broker_id, _why(err2))
        self._update_metrics()

    def _preferred_replica(self, tp: TopicPartition) -> int:
        moving = self.ctx.being_reassigned.get(tp)
        replicas = moving.target if moving is not None else self.ctx.replicas(tp)
        return replicas[0] if replicas else -1

    def _update_metrics(self) -> None:
        """Kafka's KafkaController gauges: the active controller's view, 0 elsewhere."""
        active = self.is_active
        self.active_controller_count = 1 if active else 0
        ctx = self.ctx
        self.offline_partitions_count = sum(
            1 for tp, s in ctx.partition_states.items()
            if s is P.OFFLINE and not ctx.is_topic_queued_for_deletion(tp.topic)
        ) if active else 0
        self.global_topic_count = len(ctx.all_topics) if active else 0
        self.global_partition_count = sum(len(ps) for ps in ctx.assignments.values()) \
            if active else 0
        # Partitions whose leader is not their preferred replica (the first of the
        # target replicas while being reassigned), topics being deleted aside.
        self.preferred_replica_imbalance_count = sum(
            1 for tp, lai in ctx.leadership.items()
            if not ctx.is_topic_queued_for_deletion(tp.topic)
            and lai.leader != self._preferred_replica(tp)
        ) if active else 0
        self.topics_to_delete_count = len(ctx.topics_to_be_deleted) if active else 0

    def send(self, batch: RequestBatch) -> None:
        if not batch.is_empty():
            self.channel.send_batch(batch, self.ctx)

    def _send_update_metadata(self, brokers: Iterable[int], tps: Iterable[TopicPartition]) -> None:
        batch = RequestBatch()
        batch.add_update_metadata(brokers, tps)
        self.send(batch)

    # -- election and failover ----------------------------------------------------------

    def _read_active(self) -> int:
        """The broker `/controller` names. A node naming this session while we do not
        serve as controller is what a resignation leaves when ZooKeeper was away and its
        release failed: it is released now, so an election follows (otherwise the
        cluster waits for a controller that does nothing)."""
        current = self.election.active_controller_id(watch=self._controller_watch)
        if current == self.broker_id and not self.is_active:
            log.warning("controller %d: /controller still names us after a resignation; "
                        "releasing it for an election", self.broker_id)
            self.election.release()
            current = self.election.active_controller_id(watch=self._controller_watch)
        return current

    def _elect(self) -> None:
        self.active_id = self._read_active()
        if self.active_id != -1:
            return
        elected = self.election.try_elect()
        if elected is None:
            self.active_id = self.election.active_controller_id(watch=self._controller_watch)
            return
        self.active_id = self.broker_id
        self.elections_won += 1
        self.ctx.epoch = self.controller_epoch = elected.epoch
        self.ctx.epoch_zk_version = elected.epoch_zk_version
        self.zk = ControllerZk(self.client, elected.epoch_zk_version,
                               request_timeout=self.session_timeout, deadline=self.session_timeout)
        self._on_failover()

    def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_id = self._read_active()
        if was_active and not self.is_active:
            self._on_resignation()

    def _on_failover(self) -> None:
        """docs/controller.md "Failover", in Kafka's order."""
        log.info("controller %d: taking over at epoch %d", self.broker_id, self.ctx.epoch)
        zk = self.zk
        for path in znodes.PERSISTENT_PATHS:
            zk._call(self.client.ensure_path_async, path)
        zk.children(znodes.BROKER_IDS, watch=self._broker_watch)
        zk.children(znodes.TOPICS, watch=self._topics_watch)
        zk.children(znodes.DELETE_TOPICS, watch=self._delete_watch)
        zk.delete_notifications(znodes.LOG_DIR_EVENT_NOTIFICATION,
                                zk.children(znodes.LOG_DIR_EVENT_NOTIFICATION, watch=self._log_dir_watch))
        zk.delete_notifications(znodes.ISR_CHANGE_NOTIFICATION,
                                zk.children(znodes.ISR_CHANGE_NOTIFICATION, watch=self._isr_watch))
        self._initialize_context()

        queued = set(zk.children(znodes.DELETE_TOPICS, watch=self._delete_watch))
        for t in sorted(queued - self.ctx.all_topics):
            zk.delete(znodes.delete_topic_path(t))
        queued &= self.ctx.all_topics
        if not self.delete_topic_enable:
            for t in sorted(queued):
                zk.delete(znodes.delete_topic_path(t))
            queued = set()
        ineligible = {t for t in queued
                      if any(b not in self.ctx.live_brokers for _, b in self.ctx.replicas_for_topic(t))}
        self.deletion.init(queued, ineligible)

        self._send_update_metadata(self.ctx.live_broker_ids, [])
        self.replica_sm.initialize()
        all_replicas = self.ctx.replicas_for_partitions(self.ctx.partitions())
        batch = RequestBatch()
        self.replica_sm.handle_state_changes(
            [r for r in all_replicas if self.ctx.is_replica_online(r[1], r[0])], R.ONLINE, batch)
        self.replica_sm.handle_state_changes(
            [r for r in all_replicas if not self.ctx.is_replica_online(r[1], r[0])], R.OFFLINE, batch)
        self.send(batch)
        self.partition_sm.initialize()
        batch = RequestBatch()
        self.partition_sm.trigger_online_partition_state_change(batch)
        self.send(batch)
        self.reassignments.at_failover()
        self.reassignments.delete_strays(self.ctx.live_broker_ids)
        self.deletion.resume()
        self._update_metrics()

    def _initialize_context(self) -> None:
        for b, (reg, epoch) in self.zk.brokers(watch=self._broker_watch).items():
            info = BrokerInfo(b, epoch, reg)
            self.ctx.live_brokers[b] = info
            self.channel.add_broker(info)
        for topic in self.zk.children(znodes.TOPICS, watch=self._topics_watch):
            self._load_topic(topic)
        self.ctx.leadership.update(self.zk.partition_states(self.ctx.partitions()))

    def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment (watching it), write a topic id if it has none;
        returns its partitions the context did not know."""
        got = self.zk.topic_assignment(topic, watch=self._topic_watch(topic))
        if got is None:
            return []
        assignment, version = got
        if assignment.topic_id is None:
            assignment = replace(assignment, topic_id=uuid.uuid4())
            self.zk.set_data(znodes.topic_path(topic), znodes.encode_topic(assignment), version)
        known = self.ctx.assignments.get(topic, {})
        added = [TopicPartition(topic, p) for p in sorted(assignment.partitions) if p not in known]
        self.ctx.set_assignment(topic, {p: tuple(r) for p, r in assignment.partitions.items()},
                                assignment.topic_id)
        for p, replicas in assignment.partitions.items():
            self.ctx.set_full_assignment(TopicPartition(topic, p), ReplicaAssignment(
                tuple(replicas), tuple(assignment.adding_replicas.get(p, ())),
                tuple(assignment.removing_replicas.get(p, ()))))
        return added

    def _on_resignation(self) -> None:
        if self.ctx.epoch_zk_version != -1:
            self.resignations += 1
            log.info("controller %d: resigning (epoch %d)", self.broker_id, self.ctx.epoch)
        self.channel.shutdown()
        epoch = self.ctx.epoch
        self.ctx.__init__()
        self.ctx.epoch = epoch
        self.zk = ControllerZk(self.client, -1, request_timeout=self.session_timeout,
                               deadline=self.session_timeout)
        for parked in self._creations:
            _answer(parked.future, {**parked.results, **{
                t: TopicResult(NOT_CONTROLLER, "the controller moved") for t in parked.waiting}})
        self._creations = []
        self._update_metrics()

    # -- brokers --------------------------------------------------------------------------

    def _process_broker_change(self) -> None:
        current = {b: BrokerInfo(b, epoch, reg)
                   for b, (reg, epoch) in self.zk.brokers(watch=self._broker_watch).items()}
        live = self.ctx.live_brokers
        new = sorted(set(current) - set(live))
        dead = sorted(set(live) - set(current))
        bounced = sorted(b for b in set(current) & set(live) if current[b].epoch > live[b].epoch)
        log.info("controller: brokers new %s, dead %s, bounced %s", new, dead, bounced)
        for b in bounced + dead:
            self.channel.remove_broker(b)
            self.ctx.shutting_down.discard(b)  # its controlled shutdown is over
        for b in new + bounced:
            self.channel.add_broker(current[b])
        if new:
            live.update({b: current[b] for b in new})
            self._on_broker_startup(new)
        if bounced:
            for b in bounced:
                del live[b]
            self._on_broker_failure(bounced)
            live.update({b: current[b] for b in bounced})
            self._on_broker_startup(bounced)
        if dead:
            for b in dead:
                del live[b]
            self._on_broker_failure(dead)

    def _controlled_shutdown(self, broker_id: int, broker_epoch: int
                             ) -> tuple[int, list[TopicPartition]]:
        """Kafka's doControlledShutdown: leadership of the partitions the broker leads
        moves to another live in-sync replica, and it leaves the ISR of those it follows
        (StopReplica, without deleting, stops its fetching), so it can stop without a
        leaderless moment. Partitions of one replica, or being deleted, stay; those no
        other replica could take are answered as remaining (the broker asks again)."""
        if not self.is_active:
            return NOT_CONTROLLER, []
        info = self.ctx.live_brokers.get(broker_id)
        if info is None:
            return BROKER_NOT_AVAILABLE, []
        if broker_epoch != -1 and broker_epoch < info.epoch:
            log.info("controller: controlled shutdown of broker %d at epoch %d, before its "
                     "current %d: answered 77", broker_id, broker_epoch, info.epoch)
            return STALE_BROKER_EPOCH, []
        self.ctx.shutting_down.add(broker_id)
        acted_on = [tp for tp, _ in self.ctx.replicas_on_brokers([broker_id])
                    if len(self.ctx.replicas(tp)) > 1 and tp in self.ctx.leadership
                    and not self.ctx.is_topic_queued_for_deletion(tp.topic)]
        led = [tp for tp in acted_on if self.ctx.leadership[tp].leader == broker_id]
        followed = [tp for tp in acted_on if self.ctx.leadership[tp].leader != broker_id]
        batch = RequestBatch()
        moved = self.partition_sm.elect_for_controlled_shutdown(led, batch)
        self.send(batch)
        batch = RequestBatch()
        self.replica_sm.handle_state_changes([(tp, broker_id) for tp in followed], R.OFFLINE,
                                             batch)
        self.send(batch)
        remaining = sorted(tp for tp in acted_on
                           if self.ctx.leadership[tp].leader == broker_id)
        log.info("controller: controlled shutdown of broker %d: leadership of %d partitions "
                 "moved, it left the ISR of %d, %d still led there%s", broker_id, len(moved),
                 len(followed), len(remaining),
                 f" ({', '.join(f'{tp.topic}-{tp.partition}' for tp in remaining)})"
                 if remaining else "")
        return NONE, remaining

    def _on_broker_startup(self, brokers: list[int]) -> None:
        """docs/controller.md "Brokers"."""
        for b in brokers:
            self.ctx.replicas_on_offline_dirs.pop(b, None)
        existing = [b for b in self.ctx.live_broker_ids if b not in brokers]
        self._send_update_metadata(existing, [])
        self._send_update_metadata(brokers, [tp for tp in self.ctx.leadership
                                             if not self.ctx.is_topic_queued_for_deletion(tp.topic)])
        replicas = self.ctx.replicas_on_brokers(brokers)
        batch = RequestBatch()
        self.replica_sm.handle_state_changes(
            [r for r in replicas if not self.ctx.is_topic_queued_for_deletion(r[0].topic)], R.ONLINE, batch)
        self.send(batch)
        batch = RequestBatch()
        self.partition_sm.trigger_online_partition_state_change(batch)
        self.send(batch)
        self.reassignments.on_brokers_started(brokers)
        self.reassignments.delete_strays(brokers)
        self.deletion.resume_for_topics({tp.topic for tp, _ in replicas})

    def _on_broker_failure(self, brokers: list[int]) -> None:
        for b in brokers:
            self.ctx.replicas_on_offline_dirs.pop(b, None)
        self._on_replicas_become_offline(self.ctx.replicas_on_brokers(brokers))

    def _on_replicas_become_offline(self, replicas: list[tuple[TopicPartition, int]]) -> None:
        """Kafka's onReplicasBecomeOffline: elect where the leader went, shrink ISRs."""
        for_deletion = [r for r in replicas if self.ctx.is_topic_queued_for_deletion(r[0].topic)]
        others = [r for r in replicas if not self.ctx.is_topic_queued_for_deletion(r[0].topic)]
        offline_leader = self.ctx.partitions_with_offline_leader()
        batch = RequestBatch()
        self.partition_sm.handle_state_changes(offline_leader, P.OFFLINE, batch)
        elected = self.partition_sm.trigger_online_partition_state_change(batch)
        self.send(batch)
        batch = RequestBatch()
        self.replica_sm.handle_state_changes(others, R.OFFLINE, batch)
        self.send(batch)
        if for_deletion:
            self.deletion.replicas_went_offline(for_deletion)
        if not offline_leader and not elected:
            self._send_update_metadata(self.ctx.live_broker_ids, [])

    # -- topics ---------------------------------------------------------------------------

    def _process_topic_change(self) -> None:
        topics = set(self.zk.children(znodes.TOPICS, watch=self._topics_watch))
        for t in sorted(self.ctx.all_topics - topics):
            self.ctx.remove_topic(t)
            self._forget_watches(t)
        added: list[TopicPartition] = []
        for t in sorted(topics - self.ctx.all_topics):
            added += self._load_topic(t)
        if added:
            self._on_new_partition_creation(added)
        self._finish_creations()

    def _process_partition_modifications(self, topic: str) -> None:
        if topic not in self.ctx.all_topics or self.ctx.is_topic_queued_for_deletion(topic):
            return
        added = self._load_topic(topic)
        if added:
            log.info("controller: new partitions %s", [str(tp) for tp in added])
            self._on_new_partition_creation(added)

    def _on_new_partition_creation(self, tps: list[TopicPartition]) -> None:
        """docs/controller.md "Topic creation": New, then Online."""
        replicas = self.ctx.replicas_for_partitions(tps)
        batch = RequestBatch()
        self.partition_sm.handle_state_changes(tps, P.NEW, batch)
        self.replica_sm.handle_state_changes(replicas, R.NEW, batch)
        self.partition_sm.handle_state_changes(tps, P.ONLINE, batch)
        self.replica_sm.handle_state_changes(replicas, R.ONLINE, batch)
        self.send(batch)

    def _elect_leaders(self, election_type: int, wanted: tuple[TopicPartition, ...] | None
                       ) -> dict[TopicPartition, tuple[int, str | None, int]]:
        if wanted is not None and not self.is_active:
            return {tp: (NOT_CONTROLLER, "this broker is not the controller", -1)
                    for tp in wanted}
        if not self.is_active:
            return {}
        results: dict[TopicPartition, tuple[int, str | None, int]] = {}
        known = set(self.ctx.partitions())
        candidates = []
        for tp in (self.ctx.partitions() if wanted is None else wanted):
            if tp not in known:
                results[tp] = (UNKNOWN_TOPIC, "The partition does not exist.", -1)
            elif self.ctx.is_topic_queued_for_deletion(tp.topic):
                results[tp] = (INVALID_TOPIC, "The topic is being deleted", -1)
            else:
                lai = self.ctx.leadership.get(tp)
                leader = lai.leader if lai is not None else -1
                replicas = self.ctx.replicas(tp)
                needed = (leader != replicas[0] if election_type == PREFERRED
                          else leader == -1 or leader not in self.ctx.live_brokers)
                if needed:
                    candidates.append(tp)
                else:
                    results[tp] = (ELECTION_NOT_NEEDED, "Leader election not needed for topic "
                                   "partition.", -1)
        if candidates:
            batch = RequestBatch()
            elected = self.partition_sm.elect_leaders(
                candidates, batch, preferred=election_type == PREFERRED)
            self.send(batch)
            self._update_metrics()
            code = (PREFERRED_LEADER_NOT_AVAILABLE if election_type == PREFERRED
                    else ELIGIBLE_LEADERS_NOT_AVAILABLE)
            strategy = ("PreferredReplicaPartitionLeaderElectionStrategy"
                        if election_type == PREFERRED else "OfflinePartitionLeaderElectionStrategy")
            for tp in candidates:
                results[tp] = ((NONE, None, elected[tp].leader_epoch) if tp in elected else
                               (code, f"Failed to elect leader for partition {tp} under "
                                      f"strategy {strategy}", -1))
            log.info("controller: %s election for %d partitions: %d elected",
                     "preferred" if election_type == PREFERRED else "unclean",
                     len(candidates), len(elected))
        return results

    def _rebalance_leaders(self) -> list[TopicPartition]:
        """Kafka's checkAndTriggerAutoLeaderRebalance (leader_election.preferred_elections_due)."""
        if not self.is_active:
            return []
        movable = {tp: self.ctx.replicas(tp) for tp in self.ctx.partitions()
                   if not self.ctx.is_topic_queued_for_deletion(tp.topic)}
        leaders = {tp: lai.leader for tp, lai in self.ctx.leadership.items() if tp in movable}

        def can_lead(tp: TopicPartition, broker: int) -> bool:
            lai = self.ctx.leadership.get(tp)
            return (lai is not None and broker in lai.isr
                    and self.ctx.can_lead(broker, tp))

        due = preferred_elections_due(movable, leaders, can_lead, self.leader_imbalance_percentage)
        if not due:
            return []
        log.info("controller: leader imbalance above %d%%: moving %d partitions back to their "
                 "preferred replicas", self.leader_imbalance_percentage, len(due))
        batch = RequestBatch()
        elected = self.partition_sm.elect_leaders(due, batch, preferred=True)
        self.send(batch)
        return sorted(elected)

    def _process_create_topics(self, event: ev.CreateTopics) -> None:
        if not self.is_active:
            _answer(event.future, {t.name: TopicResult(NOT_CONTROLLER, "this broker is not the controller")
                                     for t in event.topics})
            return
        results: dict[str, TopicResult] = {}
        waiting = set()
        seen: set[str] = set()
        for spec in event.topics:
            try:
                if spec.name in seen:
                    raise _TopicError(INVALID_REQUEST, f"{spec.name} appears twice in the request")
                seen.add(spec.name)
                results[spec.name] = self._create_topic(spec, event.validate_only)
                if not event.validate_only:
                    waiting.add(spec.name)
            except _TopicError as err:
                results[spec.name] = TopicResult(err.code, str(err))
        if not waiting:
            _answer(event.future, results)
            return
        self._creations.append(_Parked(event.future, results, waiting))
        self.events.put(ev.TopicChange())  # the watch fires too; this one makes sure

    def _create_topic(self, spec: TopicSpec, validate_only: bool) -> TopicResult:
        """docs/controller.md "Topic creation": validate, assign, write `/config/topics/<t>` then
        `/brokers/topics/<t>`."""
        name = spec.name
        try:
            validate_topic(name)
        except InvalidTopicError as err:
            raise _TopicError(INVALID_TOPIC, str(err)) from err
        if refused := creation_refused(name):
            raise _TopicError(INVALID_REQUEST, refused)
        # Kafka's AdminZkClient.validateTopicCreate: a topic queued for deletion (perhaps
        # until a broker returns) is named as such, before the plain "exists".
        if (self.ctx.is_topic_queued_for_deletion(name)
                or self.zk.get(znodes.delete_topic_path(name)) is not None):
            raise _TopicError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' is marked for deletion.")
        if name in self.ctx.all_topics or self.zk.get(znodes.topic_path(name)) is not None:
            raise _TopicError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if collide := collision(name, self.ctx.all_topics):
            raise _TopicError(INVALID_TOPIC, f"Topic '{name}' collides with existing topics: "
                              f"{collide}")
        brokers = self.ctx.live_broker_ids
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                raise _TopicError(INVALID_REQUEST, f"{name}: both assignments and a partition count "
                                  "or replication factor")
            assignment = {p: tuple(r) for p, r in spec.assignments.items()}
            if sorted(assignment) != list(range(len(assignment))):
                raise _TopicError(INVALID_REPLICA_ASSIGNMENT, f"{name}: partitions must be 0..n-1")
            sizes = {len(r) for r in assignment.values()}
            if len(sizes) != 1 or 0 in sizes or any(len(set(r)) != len(r) for r in assignment.values()):
                raise _TopicError(INVALID_REPLICA_ASSIGNMENT, f"{name}: every partition needs the same "
                                  "number of distinct replicas")
            unknown = sorted({b for r in assignment.values() for b in r} - set(brokers))
            if unknown:
                raise _TopicError(INVALID_REPLICA_ASSIGNMENT, f"{name}: unknown brokers {unknown}")
        else:
            partitions = self.default_num_partitions if spec.num_partitions == -1 else spec.num_partitions
            rf = self.default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
            if partitions <= 0:
                raise _TopicError(INVALID_PARTITIONS, f"{name}: number of partitions must be larger "
                                  "than 0")
            if rf <= 0:
                raise _TopicError(INVALID_REPLICATION_FACTOR, f"{name}: replication factor must be "
                                  "larger than 0")
            if rf > len(brokers):
                raise _TopicError(INVALID_REPLICATION_FACTOR, f"Replication factor: {rf} larger than "
                                  f"available brokers: {len(brokers)}.")
            n = len(brokers)
            assignment = replica_assignment(self._racks(brokers), partitions, rf,
                                            self.rng.randrange(n), self.rng.randrange(n))
        configs = self._validate_configs(name, dict(spec.configs))
        rf = len(next(iter(assignment.values())))
        result = TopicResult(NONE, None, len(assignment), rf, configs)
        if validate_only:
            return result
        topic_id = uuid.uuid4()
        config_path = znodes.topic_config_path(name)
        data = znodes.encode_topic_config(configs)
        if self.zk.get(config_path) is None:
            self.zk.create(config_path, data)
        else:
            self.zk.set_data(config_path, data)
        try:
            self.zk.create(znodes.topic_path(name),
                           znodes.encode_topic(znodes.TopicAssignment(assignment, topic_id)))
        except ZkWriteError as err:
            if isinstance(err.cause, NodeExistsError):
                raise _TopicError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from err
            raise
        log.info("controller: created topic %s (%s) with assignment %s", name,
                 znodes.topic_id_to_str(topic_id), assignment)
        return result

    @staticmethod
    def _validate_configs(name: str, configs: dict[str, str]) -> dict[str, str]:
        """Kafka's LogConfig.validate, through daemon.replica.topic_config's one table."""
        try:
            return validate_topic_configs(configs)
        except ConfigValueError as err:
            raise _TopicError(INVALID_CONFIG, f"{name}: {err}") from err

    def _create_partitions(self, topic: str, count: int,
                           assignments: Sequence[Sequence[int]] | None,
                           validate_only: bool) -> tuple[int, str | None]:
        """On the event thread; docs/cluster.md "Deleting records and adding partitions"."""
        if not self.is_active:
            return NOT_CONTROLLER, "this broker is not the controller"
        if topic not in self.ctx.all_topics:
            return UNKNOWN_TOPIC, f"The topic '{topic}' does not exist."
        if self.ctx.is_topic_queued_for_deletion(topic):
            return INVALID_TOPIC, f"The topic '{topic}' is queued for deletion."
        existing = dict(self.ctx.assignments.get(topic, {}))
        current = len(existing)
        if count < current:
            return INVALID_PARTITIONS, (f"Topic currently has {current} partitions, which is "
                                        f"higher than the requested {count}.")
        if count == current:
            return INVALID_PARTITIONS, f"Topic already has {current} partitions."
        rf = len(existing[0]) if existing else 1
        brokers = self.ctx.live_broker_ids
        if assignments is not None:
            new = {current + i: tuple(r) for i, r in enumerate(assignments)}
            if len(new) != count - current:
                return INVALID_REPLICA_ASSIGNMENT, (
                    f"Increasing the number of partitions by {count - current} but "
                    f"{len(new)} assignments provided.")
            bad = sorted(p for p, r in new.items() if len(r) != rf or len(set(r)) != len(r))
            if bad:
                return INVALID_REPLICA_ASSIGNMENT, (
                    f"Inconsistent replication factor between partitions, partition 0 has "
                    f"{rf} while partitions {bad} have other replication factors or repeat "
                    "a broker.")
            unknown = sorted({b for r in new.values() for b in r} - set(brokers))
            if unknown:
                return INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) in replica assignment: {unknown}"
        else:
            if rf > len(brokers):
                return INVALID_REPLICATION_FACTOR, (f"Replication factor: {rf} larger than "
                                                    f"available brokers: {len(brokers)}.")
            ids = sorted(brokers)
            first = existing.get(0, (ids[0],))[0]
            start = ids.index(first) if first in ids else self.rng.randrange(len(ids))
            whole = replica_assignment(self._racks(brokers), count, rf, start,
                                       self.rng.randrange(len(ids)))
            new = {p: r for p, r in whole.items() if p >= current}
        if validate_only:
            return NONE, None
        got = self.zk.topic_assignment(topic)
        if got is None:
            return UNKNOWN_TOPIC, f"The topic '{topic}' does not exist."
        assignment, version = got
        updated = replace(assignment, partitions={**assignment.partitions, **new})
        self.zk.set_data(znodes.topic_path(topic), znodes.encode_topic(updated), version)
        log.info("controller: topic %s grows to %d partitions, new %s", topic, count, new)
        self.events.put(ev.PartitionModifications(topic))  # the watch fires too
        return NONE, None

    def _finish_creations(self) -> None:
        still = []
        for parked in self._creations:
            parked.waiting -= self.ctx.all_topics
            if parked.waiting:
                still.append(parked)
            else:
                _answer(parked.future, parked.results)
        self._creations = still

    def _racks(self, brokers: Iterable[int]) -> dict[int, str | None]:
        """Each live broker's broker.rack, from its registration (None: it has none)."""
        return {b: self.ctx.live_brokers[b].registration.rack for b in brokers}

    # -- deletion -------------------------------------------------------------------------

    def _process_delete_topics(self, event: ev.DeleteTopics) -> None:
        if not self.is_active:
            _answer(event.future, {t: NOT_CONTROLLER for t in event.topics})
            return
        if not self.delete_topic_enable:
            _answer(event.future, {t: TOPIC_DELETION_DISABLED for t in event.topics})
            return
        # Answered once the topics are marked, as Kafka's AdminZkClient.deleteTopic: the
        # API layer then waits for its metadata cache to drop them (DelayedDeleteTopics),
        # while the deletion may stay queued here until a broker or a dir returns.
        results: dict[str, int] = {}
        marked = False
        for name in event.topics:
            if name not in self.ctx.all_topics:
                results[name] = UNKNOWN_TOPIC
                continue
            self.zk.create(znodes.delete_topic_path(name), znodes.DELETE_TOPIC_DATA, exist_ok=True)
            results[name] = NONE
            marked = True
        _answer(event.future, results)
        if marked:
            self.events.put(ev.TopicDeletion())

    def _process_topic_deletion(self) -> None:
        names = set(self.zk.children(znodes.DELETE_TOPICS, watch=self._delete_watch))
        for t in sorted(names - self.ctx.all_topics):
            self.zk.delete(znodes.delete_topic_path(t))
            self._on_topic_deleted(t)
        names &= self.ctx.all_topics
        if not self.delete_topic_enable:
            for t in sorted(names):
                self.zk.delete(znodes.delete_topic_path(t))
            return
        new = names - self.ctx.topics_to_be_deleted
        if new:
            self.deletion.enqueue(new)

    def _on_topic_deleted(self, topic: str) -> None:
        self._forget_watches(topic)

    def _process_stop_replica_response(self, event: ev.StopReplicaResponseReceived) -> None:
        b = event.broker_id
        info = self.ctx.live_brokers.get(b)
        if info is None or info.epoch != event.broker_epoch:
            return  # an answer from a broker incarnation that is gone
        sent = [p for p in views.stop_replica_partitions(event.request)
                if p.delete and self.ctx.is_topic_queued_for_deletion(p.topic)]
        if event.response.error_code:
            errors = {(p.topic, p.partition): event.response.error_code for p in sent}
        else:
            errors = views.stop_replica_errors(event.response)
        started = [(TopicPartition(p.topic, p.partition), b) for p in sent
                   if self.replica_sm.state(TopicPartition(p.topic, p.partition), b) is R.DELETION_STARTED]
        ok = [r for r in started if errors.get((r[0].topic, r[0].partition), NONE) == NONE]
        failed = [r for r in started if errors.get((r[0].topic, r[0].partition), NONE) != NONE]
        if failed:
            log.info("controller: replica deletion failed on broker %d for %s", b,
                     [f"{tp}: {errors[(tp.topic, tp.partition)]}" for tp, _ in failed])
        self.deletion.complete_replica_deletion(ok)
        self.deletion.fail_replica_deletion(failed)

    # -- log dirs and ISR changes ---------------------------------------------------------

    def _process_log_dir_events(self) -> None:
        """docs/controller.md "Log-dir events": probe every replica of the brokers named; the
        notifications are deleted whatever happens (Kafka's finally)."""
        parent = znodes.LOG_DIR_EVENT_NOTIFICATION
        names = [n for n in self.zk.children(parent, watch=self._log_dir_watch)
                 if n.startswith(znodes.LOG_DIR_EVENT_PREFIX)]
        try:
            brokers = set()
            for n in names:
                got = self.zk.get(f"{parent}/{n}")
                if got is None:
                    continue
                try:
                    brokers.add(znodes.decode_log_dir_event(f"{parent}/{n}", got[0]).broker_id)
                except znodes.ZnodeError as err:
                    log.error("controller: ignoring %s", err)
            self._on_broker_log_dir_failure(sorted(b for b in brokers if b in self.ctx.live_brokers))
        finally:
            self.zk.delete_notifications(parent, names)

    def _on_broker_log_dir_failure(self, brokers: list[int]) -> None:
        if not brokers:
            return
        log.info("controller: log dir events from brokers %s", brokers)
        replicas = self.ctx.replicas_on_brokers(brokers)
        batch = RequestBatch()
        self.replica_sm.handle_state_changes(
            [r for r in replicas if not self.ctx.is_topic_queued_for_deletion(r[0].topic)], R.ONLINE, batch)
        self.send(batch)
        self.reassignments.delete_strays(brokers)  # a dir back may hold some
        # docs/controller.md "Topic deletion": a queued deletion waiting on these brokers is tried again.
        self.deletion.resume_for_topics({tp.topic for tp, _ in replicas})

    def _process_leader_and_isr_response(self, event: ev.LeaderAndIsrResponseReceived) -> None:
        """docs/controller.md "Log-dir events": 56 -> offline, 0 -> online, other codes ignored."""
        b = event.broker_id
        info = self.ctx.live_brokers.get(b)
        if info is None or info.epoch != event.broker_epoch:
            return
        if event.response.error_code:
            log.error("controller: LeaderAndIsr to broker %d answered error %d", b,
                      event.response.error_code)
            return
        errors = views.leader_and_isr_errors(event.response)
        offline = {TopicPartition(*k) for k, e in errors.items() if e == STORAGE_ERROR}
        online = {TopicPartition(*k) for k, e in errors.items() if e == NONE}
        previous = self.ctx.replicas_on_offline_dirs.get(b, set())
        current = (previous - online) | offline
        self.ctx.replicas_on_offline_dirs[b] = current
        new_offline = sorted(tp for tp in current - previous if self.ctx.replicas(tp))
        back_online = sorted(tp for tp in previous - current if self.ctx.replicas(tp))
        if new_offline:
            log.info("controller: broker %d reports offline replicas %s", b, [str(tp) for tp in new_offline])
            self._on_replicas_become_offline([(tp, b) for tp in new_offline])
        if back_online:
            # A dir that came back (our extension: Kafka needs a restart): partitions
            # left leaderless get a leader.
            log.info("controller: broker %d replicas online again %s", b, [str(tp) for tp in back_online])
            batch = RequestBatch()
            batch.add_update_metadata(self.ctx.live_broker_ids, back_online)
            self.partition_sm.handle_state_changes(
                [tp for tp in self.ctx.partitions_with_offline_leader()], P.OFFLINE, batch)
            self.partition_sm.trigger_online_partition_state_change(batch)
            self.send(batch)

    def _process_isr_changes(self) -> None:
        parent = znodes.ISR_CHANGE_NOTIFICATION
        names = [n for n in self.zk.children(parent, watch=self._isr_watch)
                 if n.startswith(znodes.ISR_CHANGE_PREFIX)]
        try:
            tps: set[TopicPartition] = set()
            for n in names:
                got = self.zk.get(f"{parent}/{n}")
                if got is None:
                    continue
                try:
                    tps |= {TopicPartition(*tp) for tp in znodes.decode_isr_change(f"{parent}/{n}", got[0])}
                except znodes.ZnodeError as err:
                    log.error("controller: ignoring %s", err)
            tps = {tp for tp in tps if self.ctx.replicas(tp)}
            if tps:
                self.ctx.leadership.update(self.zk.partition_states(tps))
                self._send_update_metadata(self.ctx.live_broker_ids, sorted(tps))
                self.reassignments.on_isr_change(sorted(tps))
        finally:
            self.zk.delete_notifications(parent, names)


def _why(err: BaseException) -> str:
    """An exception as a log says it: its type, and its text when it has one."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
