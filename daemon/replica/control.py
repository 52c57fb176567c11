"""A broker's side of the controller's requests: LeaderAndIsr, StopReplica and
UpdateMetadata (Kafka's ReplicaManager.becomeLeaderOrFollower / stopReplicas and
MetadataCache.updateMetadata), docs/cluster.md "Control messages".

Request level, for all three: a broker epoch (the czxid of our registration) above -1
and below our own answers 77 STALE_BROKER_EPOCH; a controller epoch below the newest one
seen answers 11 STALE_CONTROLLER_EPOCH; nothing of such a request is applied.

LeaderAndIsr, per partition:
- hosted on an OFFLINE or SATURATED dir (or placed on an offline dir by the placement
  record) -> 56, and the partition's leadership is forgotten;
- a leader epoch above the one applied here -> 3 if this broker is not a replica, else
  become leader or follower (0); equal or lower -> 11. Becoming leader starts the epoch
  at the log end (epoch cache), reads the topic's `min.insync.replicas` and hands the
  partition to the ISR manager (daemon.replica.isr); becoming follower starts fetching;
- not hosted: `is_new=false` while any dir is OFFLINE -> 56 and nothing is created
  (KIP-112: a lost replica is never re-created on another dir behind the controller's
  back); otherwise the log is created on an ONLINE, uncordoned dir (no such dir, or a
  failed creation -> 56).
StopReplica, per partition: hosted on an OFFLINE dir -> 56 (and on a SATURATED dir
without delete: stop serving, 56); a leader epoch (-1 and -2 mean "no check") below the
applied one -> 74; otherwise stop leading, delete the log when asked, 0; not hosted -> 0.

Thread-safety: event loop only; one request at a time (a lock), as Kafka's replica
state change lock. Storage work runs on the dirs' workers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from logstore import LogConfig, StorageError, TopicPartition

from ..api import errors
from ..cluster import znodes
from ..cluster.metadata_cache import MetadataCache
from ..storage.dirstate import DirState
from ..storage.log_manager import LogManager
from ..wire import UpdateMetadataResponse, views
from .fetcher import ReplicaFetchers
from .isr import IsrManager
from .leadership import ClusterLeadership
from .manager import ReplicaManager
from .partition import Partition, on_log

log = logging.getLogger("logkeeper.control")

STALE_BROKER_EPOCH = errors.STALE_BROKER_EPOCH
STALE_CONTROLLER_EPOCH = errors.STALE_CONTROLLER_EPOCH
FENCED_LEADER_EPOCH = errors.FENCED_LEADER_EPOCH
_ZERO_UUID = uuid.UUID(int=0)


class ControlRequests:
    def __init__(self, replicas: ReplicaManager, leadership: ClusterLeadership,
                 cache: MetadataCache, broker_epoch: Callable[[], int], *,
                 on_change: Callable[[], None] = lambda: None,
                 fetchers: ReplicaFetchers | None = None,
                 isr: IsrManager | None = None,
                 min_isr_of: Callable[[str], Awaitable[int]] | None = None,
                 log_config_of: Callable[[str], Awaitable[LogConfig]] | None = None,
                 on_leadership: Callable[[], None] = lambda: None,
                 on_deleted: Callable[[list[TopicPartition]], object] | None = None,
                 announce_dir: Callable[[str], None] | None = None):
        self.replicas = replicas
        self.storage: LogManager = replicas.storage
        self.leadership = leadership
        self.cache = cache
        self.broker_epoch = broker_epoch
        self.on_change = on_change  # partitions added or removed (metrics)
        self.fetchers = fetchers  # a follower's replication from its leaders
        self.isr = isr  # a leader's follower state, ISR and high watermark
        self.min_isr_of = min_isr_of  # a topic's min.insync.replicas
        # A topic's LogConfig, read again from `/config/topics/<t>` (its new logs get it).
        self.log_config_of = log_config_of
        self.on_leadership = on_leadership  # what this broker leads may have changed
        # Partitions UpdateMetadata announced deleted (leader -2): the group coordinator
        # drops its groups' offsets of them (it writes the tombstones in the background).
        self.on_deleted = on_deleted
        # Posts a log_dir_event for a dir (daemon.cluster.link): the controller asks
        # again about every replica of this broker, and brings back the ones answered 0.
        self.announce_dir = announce_dir
        # Readmitted replicas that refused to lead (56): the leader epoch of the leader
        # elected elsewhere they were announced ready to follow under (-1: none yet).
        self._refused_to_lead: dict[TopicPartition, int] = {}
        self.controller_epoch = -1  # the newest controller epoch seen
        # In a controlled shutdown: a partition whose leadership moved away is not
        # followed, so this broker does not fetch its way back into the ISR (and hold up
        # acks=all) in the moments before it stops.
        self.shutting_down = False
        self._lock = asyncio.Lock()

    # ---- request level ----

    def _check(self, what: str, controller_id: int, controller_epoch: int,
               broker_epoch: int) -> int:
        mine = self.broker_epoch()
        if broker_epoch != -1 and mine != -1 and broker_epoch < mine:
            log.warning("%s from controller %d carries broker epoch %d, below ours (%d): "
                        "answered 77", what, controller_id, broker_epoch, mine)
            return STALE_BROKER_EPOCH
        if controller_epoch < self.controller_epoch:
            log.warning("%s from controller %d at epoch %d, after epoch %d: answered 11 "
                        "(a controller that lost its place)", what, controller_id,
                        controller_epoch, self.controller_epoch)
            return STALE_CONTROLLER_EPOCH
        self.controller_epoch = controller_epoch
        return errors.NONE

    # ---- LeaderAndIsr ----

    async def leader_and_isr(self, req: Any, version: int) -> Any:
        states = views.leader_and_isr_partitions(req)
        topic_ids = {s.topic: s.topic_id or _ZERO_UUID for s in states}
        broker_epoch = req.broker_epoch if version >= 2 else -1
        async with self._lock:
            code = self._check("LeaderAndIsr", req.controller_id, req.controller_epoch,
                               broker_epoch)
            if code:
                return views.leader_and_isr_response(version, {}, topic_ids, error_code=code)
            out: dict[tuple[str, int], int] = {}
            changed = False
            for s in states:
                code, created = await self._become(s)
                changed |= created
                out[(s.topic, s.partition)] = code
        if changed:
            await self.storage.write_placement()
            self.on_change()
        self.on_leadership()
        led = sorted(f"{t}-{p}" for (t, p), c in out.items() if c == 0)
        if led:
            log.info("LeaderAndIsr (controller %d, epoch %d) applied for %s", req.controller_id,
                     req.controller_epoch, ", ".join(led))
        return views.leader_and_isr_response(version, out, topic_ids)

    async def _assign_topic_id(self, p: Partition, topic_id: str) -> int:
        """Write the topic id into a log that has none (`partition.metadata`, as Kafka's
        broker does on the first LeaderAndIsr naming it): 0, or the error of a dir that
        could not write it (asked again at the next UpdateMetadata)."""
        try:
            await on_log(self.storage.run, p, _assign_topic_id, topic_id)
        except (StorageError, OSError) as err:
            code, msg = errors.error_of(err, f"write {p.tp}'s topic id")
            log.warning("%s (error %d)", msg, code)
            return code
        log.info("%s now names topic id %s (partition.metadata)", p.tp, topic_id)
        return errors.NONE

    async def _become(self, s: views.LeaderAndIsrPartition) -> tuple[int, bool]:
        """(error code, whether a log was created) for one partition state."""
        tp = TopicPartition(s.topic, s.partition)
        me = self.leadership.broker_id
        p = self.replicas.partitions.get(tp)
        if p is not None and _unusable(p):
            self._forget(tp)
            return errors.KAFKA_STORAGE_ERROR, False
        # The topic id (LeaderAndIsr v5+), checked before the epoch as Kafka's
        # ReplicaManager does: a log naming another id belongs to a topic of the same name
        # that was deleted (its replica here left behind), answered INCONSISTENT_TOPIC_ID.
        topic_id = znodes.topic_id_to_str(s.topic_id) if s.topic_id is not None else None
        held_id = p.log.topic_id if p is not None and p.log is not None else None
        if topic_id is not None and held_id is not None and held_id != topic_id:
            log.error("LeaderAndIsr for %s names topic id %s, but its log here holds %s: "
                      "answered 103", tp, topic_id, held_id)
            return errors.INCONSISTENT_TOPIC_ID, False
        current_epoch = self.leadership.leader_epoch(tp)
        if s.leader_epoch <= current_epoch:
            if s.leader_epoch == current_epoch and topic_id is not None \
                    and held_id is None and p is not None:
                # Kafka's controller gives topic ids to logs without one at the same epoch.
                code = await self._assign_topic_id(p, topic_id)
                return code, False
            return STALE_CONTROLLER_EPOCH, False
        if me not in s.replicas:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, False
        created = False
        if p is None:
            if not s.is_new and any(d.state is DirState.OFFLINE for d in self.storage.dirs):
                log.warning("LeaderAndIsr for %s, which this broker does not hold, with "
                            "is_new=false while a log dir is offline: answered 56, not "
                            "created (KIP-112)", tp)
                return errors.KAFKA_STORAGE_ERROR, False
            try:
                cfg = await self.log_config_of(tp.topic) if self.log_config_of else None
                [d] = await self.storage.place_partitions([tp])
                lg = await self.storage.run(d, functools.partial(
                    d.logdir.create_log, topic_id=topic_id),  # type: ignore[union-attr]
                    tp.topic, tp.partition, cfg)
            except (StorageError, OSError) as err:
                log.warning("cannot create %s for the controller: %s; answered 56", tp, err)
                return errors.KAFKA_STORAGE_ERROR, False
            p = Partition(tp, lg, d, 0)
            self.replicas.add(p)
            created = True
        elif topic_id is not None and held_id is None:
            code = await self._assign_topic_id(p, topic_id)
            if code:
                return code, False
        leads = s.leader == me
        if leads and p.lost_records and not _better_elsewhere(p, s, me):
            p.lost_records = False  # it holds the most there is: it leads (Kafka's would too)
        if leads and p.lost_records:
            # Its dir was readmitted (a replaced disk, or one whose fault could drop
            # writes): the ISR it is in is the one of before, whose records it may no
            # longer have. Leading would have the other replicas truncate them away;
            # answered 56, the partition waits for a replica that has them (or an
            # operator's unclean election), as for an offline one.
            log.warning("LeaderAndIsr makes this broker leader of %s, whose replica came "
                        "back with its readmitted dir and may lack records it took: "
                        "answered 56 until it has followed a leader", tp)
            self._forget(tp)
            self._refused_to_lead.setdefault(tp, -1)
            return errors.KAFKA_STORAGE_ERROR, created
        if leads and self.fetchers is not None:
            # The fetcher lets go first (Kafka's makeLeaders): an answer of the old leader
            # handled while the epoch below starts would land after its start offset.
            self.fetchers.unfollow([tp])
        if leads and self.isr is not None:
            try:
                min_isr = await self.min_isr_of(tp.topic) if self.min_isr_of else 1
                assert p.log is not None
                start = await on_log(self.storage.run, p, _start_leader_epoch, s.leader_epoch)
            except (StorageError, OSError) as err:
                code, msg = errors.error_of(err, f"become leader of {tp}")
                log.warning("LeaderAndIsr: cannot lead %s: %s; answered %d", tp, msg, code)
                self._forget(tp)
                return code, created
        self.leadership.apply(s)
        p.notify()  # a fetch waiting on a partition that is no longer led answers now
        if self.isr is not None:
            if leads:
                self.isr.become_leader(p, leader_epoch=s.leader_epoch,
                                       controller_epoch=s.controller_epoch,
                                       partition_epoch=s.partition_epoch, isr=s.isr,
                                       replicas=s.replicas, min_isr=min_isr,
                                       log_end_offset=start, adding=s.adding_replicas,
                                       removing=s.removing_replicas)
            else:
                self.isr.resign(tp)
        if self.fetchers is not None:
            if s.leader >= 0 and not leads and self.shutting_down:
                self.fetchers.unfollow([tp])
            elif s.leader >= 0 and not leads:
                try:
                    await self.fetchers.follow(tp, s.leader, s.leader_epoch)
                    p.lost_records = False  # it takes its leader's records from here on
                except (StorageError, OSError) as err:  # its dir failed under the hop
                    code, msg = errors.error_of(err, f"follow {tp}")
                    log.warning("LeaderAndIsr: cannot follow %s: %s; answered %d", tp, msg, code)
                    self._forget(tp)
                    return code, created
            elif s.leader < 0:  # no leader to fetch from (a leader let go above)
                self.fetchers.unfollow([tp])
        return errors.NONE, created

    def dir_offline(self, d: Any) -> None:
        """`d` went OFFLINE: its partitions are neither led nor followed here any more,
        as Kafka's handleLogDirFailure marks them Offline and stops their fetchers. A
        readmit brings their logs back but not these roles: the controller's
        LeaderAndIsr after it decides again, and the replicas, recovered from a disk
        that may have dropped writes it had taken, must follow before they lead
        (`Partition.lost_records`)."""
        tps = [tp for tp, p in self.replicas.partitions.items() if p.dir is d]
        if not tps:
            return
        if self.fetchers is not None:
            self.fetchers.unfollow(tps)
        for tp in tps:
            self._forget(tp)
        self.on_leadership()

    def _forget(self, tp: TopicPartition) -> None:
        """Neither lead nor follow `tp` any more (its leadership is unknown here)."""
        self.leadership.forget(tp)
        if self.isr is not None:
            self.isr.resign(tp)

    # ---- StopReplica ----

    async def stop_replica(self, req: Any, version: int) -> Any:
        broker_epoch = req.broker_epoch if version >= 1 else -1
        async with self._lock:
            code = self._check("StopReplica", req.controller_id, req.controller_epoch,
                               broker_epoch)
            if code:
                return views.stop_replica_response(version, {}, error_code=code)
            out: dict[tuple[str, int], int] = {}
            deleted = False
            for s in views.stop_replica_partitions(req):
                code, gone = await self._stop(s)
                deleted |= gone
                out[(s.topic, s.partition)] = code
        if deleted:
            await self.storage.write_placement()
            self.on_change()
        self.on_leadership()
        return views.stop_replica_response(version, out)

    async def _stop(self, s: views.StopReplicaPartition) -> tuple[int, bool]:
        tp = TopicPartition(s.topic, s.partition)
        p = self.replicas.partitions.get(tp)
        if p is None:
            self._forget(tp)
            return errors.NONE, False
        if p.offline:
            self._forget(tp)
            return errors.KAFKA_STORAGE_ERROR, False
        if s.leader_epoch >= 0 and s.leader_epoch < self.leadership.leader_epoch(tp):
            return FENCED_LEADER_EPOCH, False
        self._forget(tp)
        if self.fetchers is not None:
            self.fetchers.unfollow([tp])
        p.notify()
        if not s.delete:
            # A saturated replica stops serving but is reported as the dir's state says.
            return (errors.KAFKA_STORAGE_ERROR if _unusable(p) else errors.NONE), False
        self.replicas.remove(p)
        try:
            await self.storage.run(p.dir, p.dir.logdir.delete_log, tp.topic, tp.partition)  # type: ignore[union-attr]
        except (StorageError, OSError) as err:
            code, msg = errors.error_of(err, f"delete {tp}")
            log.warning("StopReplica: deleting %s failed: %s", tp, msg)
            return code, True
        log.info("StopReplica: deleted %s from %s", tp, p.dir.path)
        return errors.NONE, True

    # ---- UpdateMetadata ----

    async def update_metadata(self, req: Any, version: int) -> Any:
        broker_epoch = req.broker_epoch if version >= 5 else -1
        code = self._check("UpdateMetadata", req.controller_id, req.controller_epoch,
                           broker_epoch)
        if not code:
            states = views.update_metadata_partitions(req)
            deleted = self.cache.update(req.controller_id, views.update_metadata_brokers(req),
                                        states)
            if deleted and self.on_deleted is not None:
                self.on_deleted([TopicPartition(t, p) for t, p in deleted])
            if self._refused_to_lead:
                self._announce_ready_to_follow(states)
            await self._name_topic_ids(states)
        return UpdateMetadataResponse(version=version, error_code=code)

    async def _name_topic_ids(self, states: list[views.MetadataPartition]) -> None:
        """The topic ids UpdateMetadata v7 names, written into the logs here that have
        none (`partition.metadata`): our controller's LeaderAndIsr is v4, without ids
        (docs/cluster.md), so this is where a replica learns its topic's id; a log made
        before topic ids gets it too. A log naming another id is left alone (a v5+
        LeaderAndIsr answers it INCONSISTENT_TOPIC_ID)."""
        for m in states:
            if m.topic_id is None:
                continue
            p = self.replicas.partitions.get(TopicPartition(m.topic, m.partition))
            if p is None or p.log is None or p.log.topic_id is not None or _unusable(p):
                continue
            await self._assign_topic_id(p, znodes.topic_id_to_str(m.topic_id))

    def _announce_ready_to_follow(self, states: list[views.MetadataPartition]) -> None:
        """A replica that came back with a readmitted dir refused to lead (56), so the
        controller holds it offline; once another replica leads (another ISR member,
        one back that holds the records, or an operator's unclean election) it can
        follow and catch up. Kafka's replica would stay offline until its broker
        restarts; this one posts a log_dir_event for its dir, once per leader epoch,
        and the controller's LeaderAndIsr makes it a follower."""
        me = self.leadership.broker_id
        dirs: set[str] = set()
        for m in states:
            tp = TopicPartition(m.topic, m.partition)
            announced = self._refused_to_lead.get(tp)
            if announced is None:
                continue
            p = self.replicas.partitions.get(tp)
            if p is None or not p.lost_records or me not in m.replicas:
                del self._refused_to_lead[tp]
                continue
            if m.leader >= 0 and m.leader != me and m.leader_epoch > announced \
                    and not _unusable(p):
                self._refused_to_lead[tp] = m.leader_epoch
                dirs.add(str(p.dir.path))
        for path in sorted(dirs):
            log.info("log dir %s: a readmitted replica has a leader elsewhere now: "
                     "asking the controller to make it a follower", path)
            if self.announce_dir is not None:
                self.announce_dir(path)


def _better_elsewhere(p: Partition, s: views.LeaderAndIsrPartition, me: int) -> bool:
    """Whether another replica may hold records this readmitted one lacks: another
    member of the ISR (it holds every acknowledged record), or, this one being empty
    (a replaced disk), any other replica."""
    others = [r for r in s.replicas if r != me]
    if any(r != me for r in s.isr):
        return True
    lg = p.log
    return bool(others) and (lg is None or lg.log_end_offset <= lg.log_start_offset)


def _unusable(p: Partition) -> bool:
    """Offline, or on a full dir: the controller must move leadership off it."""
    return p.offline or p.dir.state is DirState.SATURATED


def _assign_topic_id(_logdir: Any, lg: Any, topic_id: str) -> None:
    lg.assign_topic_id(topic_id)


def _start_leader_epoch(_logdir: Any, lg: Any, epoch: int) -> int:
    return lg.start_leader_epoch(epoch)

