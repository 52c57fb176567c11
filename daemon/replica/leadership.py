"""Who leads each partition held here, and what that means for its high watermark.

This is the one place the daemon decides leadership; everything else asks it. Two
classes answer the same questions:
- `Standalone` (no `zookeeper.connect`): the broker is a one-broker cluster that leads
  every partition it holds, at the latest leader epoch its log holds (`Standalone.epoch`),
  its replica set and ISR are itself, the high watermark is the log end offset (HW = LEO,
  so acks=all is the same as acks=1), and a partition whose log dir is offline has no
  leader.
- `ClusterLeadership` (ZooKeeper mode): leadership and leader epochs per partition come
  from the controller's LeaderAndIsr requests (`apply`, `forget`); what Metadata tells
  clients (leaders, replicas, ISR, offline replicas, live brokers and their endpoints)
  comes from the metadata cache that UpdateMetadata fills; the controller id from the
  election. A leader's high watermark is moved by daemon.replica.isr (the least log end
  of the ISR) on the event loop, a follower's by its fetcher: the dir workers keep it.

Thread-safety: `high_watermark` runs on a partition's dir worker (it reads the log);
everything else is called on the event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from logstore import Log, TopicPartition

from ..cluster import znodes
from ..cluster.metadata_cache import MetadataCache
from ..wire import views
from .partition import Partition

# What Metadata lists for a broker: (id, host, port, rack).
BrokerRow = tuple[int, str, int, "str | None"]


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership as Metadata reports it; leader -1 when it has none."""

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


class Standalone:
    """This broker leads every partition it holds; the ISR is itself."""

    def __init__(self, broker_id: int, rack: str | None = None):
        self.broker_id = broker_id
        self.rack = rack  # broker.rack, shown in Metadata
        # The highest leader epoch each partition was led at since start-up (`epoch`).
        self._led: dict[TopicPartition, int] = {}

    @property
    def controller_id(self) -> int:
        return self.broker_id

    def live_brokers(self) -> list[int]:
        """The brokers Metadata lists and topics may be placed on."""
        return [self.broker_id]

    def is_leader(self, p: Partition) -> bool:
        """Whether produce and consumer fetch requests for `p` are served here."""
        return True

    def is_follower(self, p: Partition) -> bool:
        """Whether `p` is followed here (standalone: never)."""
        return False

    def epoch(self, p: Partition) -> int:
        """The leader epoch `p` is led at: the latest its log holds (its epoch cache's
        latest; 0 for a log with none), never lower than one it was led at since
        start-up. The one answer for Metadata, ListOffsets, the fencing of Fetch and
        OffsetForLeaderEpoch, the epoch appends are stamped with, and the coordinators'
        internal topics.

        A log Kafka wrote after a leader change holds batches of, say, epoch 5: led at 0,
        every append was refused (ReplicaManager refuses an epoch below the log's latest
        as stale). Not at 6 either, as a Kafka controller bumps the epoch for each new
        leadership: the bump tells one replica's history from another's, and here the one
        replica is the history. At 5, what a Kafka client knows stays valid (its cached
        metadata; the epoch of its position or committed offset, which OffsetForLeaderEpoch
        finds ending at the log end: nothing truncated), and every batch written here
        carries an epoch a controller gave: a Kafka broker given the dir back is elected
        at its ZooKeeper epoch + 1, above them all, where a 6 minted here could be that
        very epoch, for another leader's batches. So taking a log on writes nothing, a new
        log is led at 0, and a replica move keeps its epochs.

        The floor: a log can come back holding less (a re-admitted dir that lost the
        partition, re-created empty; recovery that cut a whole epoch), and a lower epoch
        would strand the clients that saw the higher one: Kafka's clients ignore metadata
        older than the epoch they cached, and fetch at theirs, told UNKNOWN_LEADER_EPOCH,
        forever. Led at the higher one, the next append records it. (A topic deleted and
        created again keeps it too, for the same clients.)

        Event loop; the log's dir worker may be appending (LeaderEpochCache.latest_epoch
        may be read meanwhile)."""
        lg = p.log
        held = lg.epochs.latest_epoch if lg is not None else -1
        led = self._led.get(p.tp, 0)
        if held > led:
            self._led[p.tp] = led = held
        return led

    def state(self, p: Partition) -> LeaderAndIsr:
        me = [self.broker_id]
        if p.offline:
            # As a Kafka controller reports a partition whose only replica is offline:
            # no leader, the replica listed offline.
            return LeaderAndIsr(-1, self.epoch(p), me, me, me)
        return LeaderAndIsr(self.broker_id, self.epoch(p), me, me, [])

    def fencing_epoch(self, p: Partition) -> int:
        """The leader epoch a Fetch or OffsetForLeaderEpoch is checked against, and the
        one appends are stamped with."""
        return self.epoch(p)

    def high_watermark(self, log: Log) -> int:
        """On `log`'s dir worker, after an append or when the log is taken on: the high
        watermark to set. Standalone: the ISR is this broker alone, so HW = LEO."""
        return log.log_end_offset

    def metadata_topic_names(self, local: Iterable[str]) -> Iterable[str]:
        """The topics Metadata may list: those held here (`local`)."""
        return local

    def metadata_topic(self, name: str, local: list[Partition]
                       ) -> list[tuple[int, LeaderAndIsr]] | None:
        """What Metadata lists for topic `name`, whose partitions held here are `local`:
        (partition, state) in partition order, from 0 to the highest partition held;
        None when none is. A partition missing from the log dirs (a Kafka broker's dirs
        hold only its share of a topic) is listed without a leader or replicas: clients
        count partitions by the highest id, and librdkafka ignores a partition past the
        count it was told."""
        if not local:
            return None
        held = {p.tp.partition: self.state(p) for p in local}
        return [(i, held.get(i) or LeaderAndIsr(-1, 0, [], [], []))
                for i in range(max(held) + 1)]

    def topic_id(self, name: str, local: list[Partition]) -> uuid.UUID | None:
        """Topic `name`'s id (KIP-516) as its partitions' `partition.metadata` holds it;
        None without one."""
        text = next((p.log.topic_id for p in local if p.log is not None and p.log.topic_id),
                    None)
        if text is None:
            return None
        try:
            return znodes.topic_id_from_str(text)
        except ValueError:
            return None  # not Kafka's form: shown as no id

    def broker_rows(self, me: tuple[str, int] | None, listener: str) -> list[BrokerRow]:
        """The brokers Metadata lists to a client of `listener`; `me` is this broker's
        advertised address on it (None: that listener is not advertised)."""
        return [] if me is None else [(self.broker_id, me[0], me[1], self.rack)]


@dataclass(frozen=True)
class LeaderRecord:
    """The last LeaderAndIsr applied for a partition hosted here."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int


class ClusterLeadership:
    """ZooKeeper mode: the controller decides (module docstring). Event loop only, except
    `high_watermark` (dir workers)."""

    def __init__(self, broker_id: int, cache: MetadataCache,
                 controller_id: Callable[[], int] | None = None):
        self.broker_id = broker_id
        self.cache = cache
        self._controller_id = controller_id
        self.records: dict[TopicPartition, LeaderRecord] = {}

    @property
    def controller_id(self) -> int:
        if self._controller_id is not None:
            cid = self._controller_id()
            if cid >= 0:
                return cid
        return self.cache.controller_id

    def live_brokers(self) -> list[int]:
        return sorted(self.cache.brokers) or [self.broker_id]

    # ---- what LeaderAndIsr and StopReplica change ----

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch last applied here; -1 for none (a new or reloaded replica)."""
        rec = self.records.get(tp)
        return rec.leader_epoch if rec is not None else -1

    def apply(self, s: views.LeaderAndIsrPartition) -> None:
        self.records[TopicPartition(s.topic, s.partition)] = LeaderRecord(
            s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas), s.partition_epoch)

    def forget(self, tp: TopicPartition) -> None:
        """Stop leading or following `tp` (StopReplica, its dir failing)."""
        self.records.pop(tp, None)

    # ---- the questions Standalone answers too ----

    def is_leader(self, p: Partition) -> bool:
        """Led here at the last epoch applied. A partition hosted on an offline dir says
        yes too, so that its dir refuses the work with 56 (KAFKA_STORAGE_ERROR): Kafka
        checks a hosted partition's offline state before leadership."""
        if p.offline:
            return True
        rec = self.records.get(p.tp)
        return rec is not None and rec.leader == self.broker_id

    def is_follower(self, p: Partition) -> bool:
        """A replica of `p` led by another broker at the last epoch applied here: it
        serves a consumer's Fetch v11+ up to its own high watermark (KIP-392)."""
        rec = self.records.get(p.tp)
        return rec is not None and rec.leader >= 0 and rec.leader != self.broker_id \
            and self.broker_id in rec.replicas

    def state(self, p: Partition) -> LeaderAndIsr:
        m = self.cache.partition(p.tp.topic, p.tp.partition)
        if m is not None:
            return self._from_cache(m)
        rec = self.records.get(p.tp)
        if rec is None:
            return LeaderAndIsr(-1, -1, [], [], [])
        return LeaderAndIsr(rec.leader, rec.leader_epoch, list(rec.replicas), list(rec.isr), [])

    def fencing_epoch(self, p: Partition) -> int:
        """The leader epoch a Fetch or OffsetForLeaderEpoch is checked against: the one
        the last LeaderAndIsr applied here set (Kafka's Partition.leaderEpoch), not the
        metadata cache's, which the controller's UpdateMetadata brings only after its
        LeaderAndIsr: a fetch from before an epoch change must not pass meanwhile."""
        rec = self.records.get(p.tp)
        return rec.leader_epoch if rec is not None else self.state(p).leader_epoch

    def _from_cache(self, m: views.MetadataPartition) -> LeaderAndIsr:
        leader = m.leader if m.leader in self.cache.brokers else -1
        return LeaderAndIsr(leader, m.leader_epoch, list(m.replicas), list(m.isr),
                            list(m.offline_replicas))

    def high_watermark(self, log: Log) -> int:
        # Moved on the loop (IsrManager for a leader, the fetcher for a follower).
        return log.high_watermark

    # Metadata's answers come from the metadata cache: every broker answers the same
    # (`local`, the partitions held here, is not looked at).

    def metadata_topic_names(self, local: Iterable[str]) -> Iterable[str]:
        return self.cache.partitions.keys()

    def metadata_topic(self, name: str, local: list[Partition]
                       ) -> list[tuple[int, LeaderAndIsr]] | None:
        return [(m.partition, self._from_cache(m)) for m in self.cache.topic(name)] or None

    def topic_id(self, name: str, local: list[Partition]) -> uuid.UUID | None:
        return self.cache.topic_id(name)

    def broker_rows(self, me: tuple[str, int] | None, listener: str) -> list[BrokerRow]:
        if not self.cache.brokers:  # no UpdateMetadata yet: at least this broker
            return [] if me is None else [(self.broker_id, me[0], me[1], None)]
        return [(b.broker_id, b.host, b.port, b.rack)
                for _, b in sorted(self.cache.listener_brokers(listener).items())]
