"""The partitions hosted on this broker and the data path on them (Kafka's ReplicaManager).

`ReplicaManager` keeps the partitions (on the event loop), takes on the logs of a dir
just opened or re-admitted, and runs appends, reads and offset lookups: each call
groups its partitions by log dir and runs one call per dir on that dir's worker
(`LogManager.fan_out`), so the event loop never touches a disk and the dirs work in
parallel. Who leads a partition, and so where its high watermark stands, is asked of
`leadership` (daemon.replica.leadership); standalone, this broker leads them all.

Errors: per-partition outcomes are returned as Kafka error codes (daemon.api.errors);
a bug here surfaces as UNKNOWN_SERVER_ERROR (-1) for the partitions involved and is
logged with its traceback, never as a crash of the daemon.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from logstore import Log, LogMovedError, TopicPartition, names
from logstore.cleaner import ActiveProducers
from logstore.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    batch_attributes,
    batch_producer,
    control_batch,
)

from ..api.errors import (
    FENCED_LEADER_EPOCH,
    INVALID_RECORD,
    INVALID_REQUEST,
    INVALID_TXN_STATE,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_NOT_AVAILABLE,
    OFFSET_OUT_OF_RANGE,
    POLICY_VIOLATION,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_of,
)
from ..storage.dirstate import DirState
from ..storage.log_manager import LogManager
from ..storage.spliced import splice_range
from ..storage.workers import ManagedDir
from . import producer
from .isr import IsrManager
from .leadership import ClusterLeadership, LeaderAndIsr, Standalone
from .partition import AppendResult, Partition, ReadResult
from .producer import Verification
from .quota import ReplicationQuota
from .selector import ReplicaView, select_read_replica

log = logging.getLogger("logkeeper.broker")


class ReplicaManager:
    """The partitions held here, on top of the LogManager. Event loop only."""

    def __init__(self, storage: LogManager, leadership: Standalone | ClusterLeadership,
                 isr: IsrManager | None = None):
        self.storage = storage
        self.leadership = leadership
        # ZooKeeper mode: the leader side of replication (follower state, ISR, high
        # watermark); None standalone, where the high watermark is the log end.
        self.isr = isr
        # The leader's replication throttle (daemon.replica.quota); None: none.
        self.leader_quota: ReplicationQuota | None = None
        # replica.selector.class is Kafka's rack-aware one: consumers that give their
        # rack are sent to an in-sync replica in it (daemon.replica.selector).
        self.rack_aware_reads = False
        self.partitions: dict[TopicPartition, Partition] = {}
        # The same partitions by topic, then index: what Metadata asks one topic at a
        # time (`topic`), changed with `partitions` only by `_hold` and `_let_go`.
        self._by_topic: dict[str, dict[int, Partition]] = {}

    # ---- taking partitions on and letting them go ----

    def load(self, placement: dict[str, Any] | None) -> None:
        """After start-up: the partitions of every opened dir (`adopt` each first), and
        placeholders for those the placement record puts in a dir that is offline."""
        if placement is not None:
            self._add_offline_placeholders(placement)

    async def adopt(self, d: ManagedDir) -> list[tuple[TopicPartition, ManagedDir]]:
        """Take on every log of `d` (just opened or re-admitted); returns the partitions
        that live in another dir too, each with the dir whose copy is left alone (the
        caller says so). Of two copies the one with more records is served: a replica
        move cut short between its copy's rename and the old files' removal leaves the
        old copy as it was at the switch and the new one with everything since."""
        assert d.logdir is not None
        taken = await self.storage.run(d, _take_on, d.logdir.logs, self.leadership)
        clashes = []
        for tp, lg in d.logdir.logs.items():
            other = self.partitions.get(tp)
            if other is not None and other.dir is not d:
                if other.log is None or lg.log_end_offset <= other.log.log_end_offset:
                    clashes.append((tp, d))
                    continue
                other.dir.partitions.discard(tp)
                clashes.append((tp, other.dir))
            hw, producers = taken[tp]
            self._hold(Partition(tp, lg, d, hw, producers=producers))
        d.partitions = set(d.logdir.logs) - {tp for tp, left in clashes if left is d}
        return clashes

    def _add_offline_placeholders(self, record: dict[str, Any]) -> None:
        for path, partitions in record.get("log_dirs", {}).items():
            d = self.storage.by_path(path)
            if d is None:
                log.warning("placement record names %s, which is not in log.dirs: its "
                            "partitions %s are not served", path, ", ".join(partitions))
                continue
            if d.state is not DirState.OFFLINE:
                continue
            for name in partitions:
                tp = names.parse_partition_dir(name)
                if tp is not None and tp not in self.partitions:
                    self._hold(Partition(tp, None, d, -1))
                    d.partitions.add(tp)
            if d.partitions:
                log.warning("log dir %s is offline: its %d partitions are reported offline "
                            "and not re-created elsewhere", d.path, len(d.partitions))

    def add(self, p: Partition) -> None:
        """A partition just created in its dir."""
        p.dir.partitions.add(p.tp)
        self._hold(p)

    def remove(self, p: Partition) -> None:
        """Stop serving `p` (its topic is being deleted): calls already queued on its
        worker see `deleted`, and its fetch long-polls wake."""
        self._let_go(p)
        p.dir.partitions.discard(p.tp)
        p.deleted = True
        p.notify()

    def on_dir_offline(self, d: ManagedDir) -> None:
        """`d` went OFFLINE: the fetches waiting on its partitions answer now."""
        for p in self.partitions.values():
            if p.dir is d:
                p.notify()

    def stop(self) -> None:
        for p in self.partitions.values():
            p.notify()

    # ---- lookups ----

    def _hold(self, p: Partition) -> None:
        """Serve `p` (in place of a partition held under its name)."""
        self.partitions[p.tp] = p
        self._by_topic.setdefault(p.tp.topic, {})[p.tp.partition] = p

    def _let_go(self, p: Partition) -> None:
        del self.partitions[p.tp]
        held = self._by_topic[p.tp.topic]
        del held[p.tp.partition]
        if not held:
            del self._by_topic[p.tp.topic]

    def topics(self) -> dict[str, list[Partition]]:
        """Every topic held here, its partitions in partition order."""
        return {t: self.topic(t) for t in self._by_topic}

    def topic(self, name: str) -> list[Partition]:
        """`name`'s partitions held here, in partition order; [] for none."""
        held = self._by_topic.get(name)
        return [held[i] for i in sorted(held)] if held else []

    # What Metadata lists (the leadership says what; standalone, from the partitions
    # held here).

    def metadata_topic_names(self) -> list[str]:
        return sorted(self.leadership.metadata_topic_names(self._by_topic))

    def metadata_topic(self, name: str) -> list[tuple[int, LeaderAndIsr]] | None:
        """(partition, state) of each partition of `name` in order; None: not known."""
        return self.leadership.metadata_topic(name, self.topic(name))

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self.leadership.topic_id(name, self.topic(name))

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """Every topic's id, for Metadata naming topics by id."""
        ids = {t: self.topic_id(t) for t in self.leadership.metadata_topic_names(
            self._by_topic)}
        return {t: i for t, i in ids.items() if i is not None}

    def partition_count(self, topic: str) -> int:
        """Standalone, a topic's partition count: its highest partition held, plus one
        (a Kafka broker's dirs may hold only some of a topic's partitions); 0 for none."""
        held = self._by_topic.get(topic)
        return max(held) + 1 if held else 0

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, partition))

    def saturated_followers(self) -> dict[TopicPartition, tuple[int, int]]:
        """(leader, leader epoch), as the metadata cache has them, of each partition held
        on a SATURATED dir that another broker leads: they fetch nothing, and follow only
        their leader's log start offset (daemon.replica.fetcher.LogStartFollower)."""
        if not any(d.state is DirState.SATURATED for d in self.storage.dirs):
            return {}
        out = {}
        for tp, p in self.partitions.items():
            if p.log is None or p.deleted or p.dir.state is not DirState.SATURATED:
                continue
            s = self.leadership.state(p)
            if s.leader >= 0 and s.leader != self.leadership.broker_id:
                out[tp] = (s.leader, s.leader_epoch)
        return out

    def offline_count(self) -> int:
        return sum(1 for p in self.partitions.values() if p.offline)

    def leader_count(self) -> int:
        return sum(1 for p in self.partitions.values()
                   if not p.offline and self.leadership.is_leader(p))

    # ---- data path ----

    def append(self, items: list[tuple[Partition, bytes | memoryview]],
               guards: Mapping[TopicPartition, Verification] | None = None
               ) -> asyncio.Future[list[AppendResult]]:
        """Queue the appends on their dirs' workers now (order kept per dir); the future
        gives one AppendResult per item, in the order given, once the high watermarks
        moved and the fetches waiting on those partitions were woken. With `guards`
        (transaction verification is on: daemon.replica.txn_verification), a
        transactional batch opens a transaction only with its partition's guard."""
        # Each batch carries the leader epoch it was accepted under: the one of the last
        # LeaderAndIsr applied here (Kafka's Partition.leaderEpoch, not the metadata
        # cache's, which UpdateMetadata brings later), read now, on the loop, with the
        # leadership check the caller just made. Read on the worker, a LeaderAndIsr
        # applied meanwhile lent the batch its new epoch: one whose leader is another
        # broker, so records written here under it were never that leader's, and the
        # epoch checks could not find them (a follower kept them, or fetched forever
        # across a batch boundary it did not share). Whatever the LeaderAndIsr does to
        # the log is queued on the worker after this append.
        # The log too is the one held now: a replica move (daemon.replica.moves) retires
        # it, and an append queued before the move is then refused, never written into
        # the new dir's log from the old dir's worker.
        stamped = [(p, records, self.leadership.fencing_epoch(p), p.log, None,
                    None if guards is None else guards.get(p.tp, producer.UNVERIFIED))
                   for p, records in items]
        return self._queue_appends(items, stamped)

    def start_verifications(self, items: list[tuple[Partition, int, int, int]]
                            ) -> asyncio.Future[list[Verification | None]]:
        """For each (partition, producer id, first sequence, epoch) of a transactional
        batch about to be verified, on the partition's dir worker (after the appends
        queued before it): the producer's verification there, or None when its
        transaction is open there already."""
        now_ms = int(time.time() * 1000)
        return self.storage.fan_out(items, _dir_of, _start_verifications, now_ms,
                                    on_error=lambda item, err: None)

    def append_markers(self, items: list[tuple[Partition, Marker]]
                       ) -> asyncio.Future[list[AppendResult]]:
        """Append a transaction coordinator's markers (WriteTxnMarkers) as this
        partition's leader, as `append` does: each closes its producer's transaction."""
        stamped = [(p, control_batch(m.producer_id, m.producer_epoch, commit=m.commit,
                                     coordinator_epoch=m.coordinator_epoch),
                    self.leadership.fencing_epoch(p), p.log, m, None) for p, m in items]
        return self._queue_appends([(p, b) for p, b, *_ in stamped], stamped)

    def _queue_appends(self, items: list[tuple[Partition, bytes | memoryview]],
                       stamped: list[tuple[Any, ...]]) -> asyncio.Future[list[AppendResult]]:
        queued = self.storage.fan_out(
            stamped, _dir_of, _append_all, self.leadership,
            on_error=lambda item, err: _failed_append(err, item[0]))

        out: asyncio.Future[list[AppendResult]] = queued.get_loop().create_future()

        def appended(done: asyncio.Future[list[AppendResult]]) -> None:
            # `queued` is nobody else's, so never cancelled: the appends happened, and
            # the high watermarks move even if the request that asked went away.
            results = done.result()
            for (p, _), r in zip(items, results, strict=True):
                if r.error == NONE and r.high_watermark >= 0:
                    p.high_watermark = r.high_watermark
                    p.notify()
                    if self.isr is not None:
                        self.isr.on_append(p)
            if not out.done():
                out.set_result(results)

        queued.add_done_callback(appended)
        return out

    async def read(self, items: list[ReadSpec], max_bytes: int) -> list[ReadResult]:
        """Read each `ReadSpec` (a consumer's up to the high watermark, a follower's up
        to the log end); `max_bytes` bounds each dir's share of the response. A consumer
        reads only partitions led here, and so does a follower: the others answer
        NOT_LEADER_OR_FOLLOWER (6). A follower's read updates what the leader knows of
        it (daemon.replica.isr), which may move the ISR and the high watermark."""
        refused = [self._refusal(spec) for spec in items]
        led = [spec for spec, no in zip(items, refused, strict=True) if no is None]
        if self.leader_quota is not None and self.leader_quota.throttled:
            led = self._throttle(led, self.leader_quota)
        read = await self.storage.fan_out(
            [(spec, spec.partition.log) for spec in led], _read_dir_of, _read_all, max_bytes,
            on_error=lambda item, err: _failed_read(err, item[0].partition)) if led else []
        if self.isr is not None:
            for spec, r in zip(led, read, strict=True):
                if spec.replica_id >= 0 and r.error == NONE and r.diverging_epoch is None \
                        and self._still_in_epoch(spec):
                    self.isr.on_follower_fetch(spec.partition, spec.replica_id, spec.offset,
                                               r.log_end_offset, spec.log_start_offset)
        if len(led) == len(items):
            return list(read)
        results = iter(read)
        return [next(results) if no is None else no for no in refused]

    def _throttle(self, specs: list[ReadSpec], quota: ReplicationQuota) -> list[ReadSpec]:
        """Kafka's shouldLeaderThrottle: a follower's read of a throttled partition gets
        no records while the leader quota is exceeded, unless that follower is in the
        partition's ISR (its offsets, high watermark and divergence are still answered)."""
        out = []
        exceeded: bool | None = None
        for spec in specs:
            if spec.replica_id >= 0 and quota.is_throttled(spec.partition.tp):
                st = self.isr.state(spec.partition.tp) if self.isr is not None else None
                if st is None or spec.replica_id not in st.isr:
                    if exceeded is None:
                        exceeded = quota.is_exceeded()
                    if exceeded:
                        spec = spec._replace(throttled=True)
            out.append(spec)
        return out

    def _refusal(self, spec: ReadSpec) -> ReadResult | None:
        """Why `spec` is not read, or None. The fetch's leader epoch is checked at every
        read, as Kafka does, so a long poll that began at an older epoch answers 74 once
        the leader moved on, and its follower's state is not updated: a follower the
        controller just took out of the ISR (its broker gone) is not added back by a
        fetch from before."""
        p = spec.partition
        if not self.leadership.is_leader(p) and not (
                spec.any_replica and self.leadership.is_follower(p)):
            return ReadResult(NOT_LEADER_OR_FOLLOWER, message=f"{p.tp} is not led here")
        if spec.leader_epoch >= 0:
            ours = self.leadership.fencing_epoch(p)
            if spec.leader_epoch != ours:
                code = FENCED_LEADER_EPOCH if spec.leader_epoch < ours else UNKNOWN_LEADER_EPOCH
                return ReadResult(code, message=f"{p.tp}: fetch at leader epoch "
                                                f"{spec.leader_epoch}, ours is {ours}")
        return None

    def preferred_read_replica(self, p: Partition, client_rack: str, offset: int) -> int | None:
        """KIP-392 (daemon.replica.selector): the in-sync follower in `client_rack` that a
        consumer fetching `p` (led here) at `offset` should read from; None: here."""
        if not self.rack_aware_reads or not client_rack or self.isr is None \
                or not isinstance(self.leadership, ClusterLeadership):
            return None
        st = self.isr.state(p.tp)
        lg = p.log
        if st is None or lg is None:
            return None
        brokers = self.leadership.cache.brokers
        me = self.leadership.broker_id
        now = self.isr.clock()
        followers = []
        for r in st.isr:
            f = st.followers.get(r)
            b = brokers.get(r)
            if r != me and f is not None and b is not None \
                    and f.log_start_offset <= offset <= f.log_end_offset:
                followers.append(ReplicaView(r, b.rack, f.log_end_offset,
                                             (now - f.last_caught_up_time) * 1000))
        own = brokers.get(me)
        leader = ReplicaView(me, own.rack if own is not None else None, lg.log_end_offset, 0)
        return select_read_replica(client_rack, leader, followers)

    def _still_in_epoch(self, spec: ReadSpec) -> bool:
        """A follower's fetch counts for its ISR membership only in the leader epoch it
        was checked in. A LeaderAndIsr applied while the read was on the worker (the
        controller took the follower's broker out of the ISR when it died, at a new
        epoch) makes the answer one from before: counted, the dead broker would be
        added back, and acks=all would wait for it until replica.lag.time.max.ms (Kafka
        checks the epoch and updates the follower under one partition lock)."""
        return spec.leader_epoch < 0 or \
            spec.leader_epoch == self.leadership.fencing_epoch(spec.partition)

    def producers_for_cleaner(self, tp: TopicPartition, lg: Log) -> ActiveProducers:
        """What a clean of `lg` must respect of its partition's producers (called by the
        log cleaner on the log's dir worker, where the producers change). A log this
        broker does not serve as `tp`'s (a move's copy, or not taken on yet) is not
        cleaned: its transactions are not known."""
        p = self.partitions.get(tp)
        if p is None or p.log is not lg or p.deleted:
            return ActiveProducers(lg.log_start_offset)
        return producer.for_cleaner(p.producers, lg)

    async def snapshot_producers(self, *, every: bool = False) -> None:
        """Write producer snapshots (daemon.replica.producer): of every partition
        (`every`: a clean shutdown, so the next start replays nothing), else of those
        with a transaction open or whose snapshot is older than their active segment,
        where the log moved since the last one. A dir's failure is its own (logged)."""
        items = []
        for p in self.partitions.values():
            lg = p.log
            if lg is None or p.offline or p.deleted:
                continue
            if every or p.producers.ongoing or (
                    0 <= p.producers.snapshot_offset < lg.active_segment.base_offset):
                items.append((p, 0, lg))
        if items:
            await self.storage.fan_out(items, _dir_of, _snapshot_all,
                                       on_error=lambda item, err: None)

    async def expire_producers(self, expiration_ms: int) -> None:
        """Forget, in every partition held here, the producers idle for `expiration_ms`
        with no transaction open (producer.id.expiration.ms). A dir's failure is its own."""
        items = [(p, 0, p.log) for p in self.partitions.values()
                 if p.log is not None and not p.offline and not p.deleted and p.producers]
        if items:
            await self.storage.fan_out(items, _dir_of, _expire_producers,
                                       int(time.time() * 1000), expiration_ms,
                                       on_error=lambda item, err: 0)

    async def active_producers(self, items: list[Partition]
                               ) -> list[tuple[int, list[producer.ProducerView]]]:
        """(error, its active producers) per partition: DescribeProducers."""
        return await self.storage.fan_out(
            [(p, 0, p.log) for p in items], _dir_of, _active_producers,
            on_error=lambda item, err: (error_of(err, "describe producers")[0], []))

    async def list_offsets(self, items: list[tuple[Partition, int]], *,
                           read_committed: bool = False, from_client: bool = True
                           ) -> list[tuple[int, int, int, int]]:
        """(error, timestamp, offset, leader epoch) per (partition, timestamp query); a
        read_committed asker's latest offset is the last stable offset, not the high
        watermark. The epoch is Kafka's: the current leader epoch for the latest offset,
        that of the log start for the earliest (the epoch cache's first entry, if it
        starts there), that of the record found by timestamp, else -1.

        A leader elected with records past the high watermark it had heard of as a
        follower does not know its high watermark until its followers fetch those: till
        then a client's (`from_client`) latest offset, or an offset by timestamp at or
        past the high watermark, is OFFSET_NOT_AVAILABLE (78, retriable), as Kafka's
        Partition.fetchOffsetForTimestamp answers, not the stale high watermark."""
        asked = [(p, (ts, self._epoch_start(p) if from_client else -1,
                      self.leadership.state(p).leader_epoch)) for p, ts in items]
        return await self.storage.fan_out(
            _with_logs(asked), _dir_of, _list_offsets, read_committed,
            on_error=lambda item, err: (error_of(err, "list offsets")[0], -1, -1, -1))

    def _epoch_start(self, p: Partition) -> int:
        """Where the leader epoch `p` is led at here began (its log end when it took
        the epoch: Kafka's leaderEpochStartOffsetOpt), or -1."""
        st = self.isr.state(p.tp) if self.isr is not None else None
        return st.epoch_start_offset if st is not None else -1

    async def legacy_list_offsets(self, items: list[tuple[Partition, tuple[int, int]]], *,
                                  from_consumer: bool) -> list[tuple[int, list[int]]]:
        """(error, offsets) per (partition, (timestamp, max offsets)): ListOffsets v0, as
        Kafka 3.x still answers it (Burrow's sarama asks this way)."""
        return await self.storage.fan_out(
            _with_logs(items), _dir_of, _legacy_list_offsets, from_consumer,
            on_error=lambda item, err: (error_of(err, "list offsets")[0], []))

    async def delete_records(self, items: list[tuple[Partition, int]]
                             ) -> list[tuple[int, int, int]]:
        """(error, new log start offset, offset required) per (partition, offset):
        DeleteRecords on a partition led here moves its log start offset up to `offset`
        (-1: the high watermark, the offset required then) and deletes the segments
        wholly below it. Followers follow from the log start offset in their Fetch
        answers, and tell theirs in their Fetch requests: the answer waits until
        `low_watermark` reaches the offset required (daemon.api.partitions)."""
        return await self.storage.fan_out(
            _with_logs(items), _dir_of, _delete_records,
            on_error=lambda item, err: (error_of(err, f"delete records of {item[0].tp}")[0],
                                        -1, -1))

    def low_watermark(self, p: Partition) -> int | None:
        """Kafka's lowWatermarkIfLeader: `p`'s log start offset here, in a cluster the
        least over the replicas on live brokers (daemon.replica.isr); None when `p` is
        not led here (or its log is gone)."""
        if not self.leadership.is_leader(p) or p.log is None or p.deleted:
            return None
        if self.isr is None:
            return p.log.log_start_offset  # standalone: the only replica
        return self.isr.low_watermark(p.tp)

    async def end_offsets_for(self, items: list[tuple[Partition, int]]) -> list[tuple[int, int, int]]:
        """(error, epoch, end offset) per (partition, leader epoch): OffsetForLeaderEpoch."""
        return await self.storage.fan_out(
            _with_logs(items), _dir_of, _end_offsets_for,
            on_error=lambda item, err: (error_of(err, "offset for leader epoch")[0], -1, -1))

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        """A follower's high watermark moved (its fetcher): wake the consumers waiting
        on it (a follower serves Fetch v11+, KIP-392)."""
        p = self.partitions.get(tp)
        if p is not None and p.log is not None:
            p.high_watermark = p.log.high_watermark
            p.notify()

    def follower_logs(self) -> Mapping[TopicPartition, Log]:
        """A live view: partition -> its log, for the fetchers (KeyError when not held)."""
        return _HeldLogs(self.partitions)

    async def run_for(self, tp: TopicPartition, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the worker of `tp`'s dir (the fetchers' log work)."""
        p = self.partitions[tp]
        return await self.storage.run(p.dir, fn, *args)


def _dir_of(item: tuple[Any, ...]) -> ManagedDir:
    return item[0].dir


def _read_dir_of(item: tuple[ReadSpec, Log | None]) -> ManagedDir:
    return item[0].partition.dir


def _with_logs(items: list[tuple[Partition, int]]) -> list[tuple[Partition, int, Log | None]]:
    """Each item with its partition's log as it is now: a worker call acts on the log
    its dir held when it was queued (a replica move retires the old one)."""
    return [(p, x, p.log) for p, x in items]


def _failed_append(err: BaseException, p: Partition) -> AppendResult:
    code, message = error_of(err, f"append to {p.tp}")
    return AppendResult(code, message=message)


def _failed_read(err: BaseException, p: Partition) -> ReadResult:
    code, message = error_of(err, f"read {p.tp}")
    return ReadResult(code, message=message)


# ---- functions that run on a dir's worker ----


def _snapshot_all(items: list[tuple[Partition, int, Log | None]]) -> list[None]:
    for p, _, lg in items:
        if lg is None or lg.retired or lg.log_end_offset == p.producers.snapshot_offset:
            continue
        try:
            p.producers.snapshot_offset = producer.write_snapshot(p.producers, lg)
        except Exception as err:  # noqa: BLE001 - per-partition isolation; logged
            error_of(err, f"producer snapshot of {p.tp}")
    return [None] * len(items)


def _expire_producers(items: list[tuple[Partition, int, Log | None]], now_ms: int,
                      expiration_ms: int) -> list[int]:
    return [p.producers.expire(now_ms, expiration_ms) for p, _, _ in items]


def _active_producers(items: list[tuple[Partition, int, Log | None]]
                      ) -> list[tuple[int, list[producer.ProducerView]]]:
    return [(UNKNOWN_TOPIC_OR_PARTITION, []) if p.deleted else (NONE, producer.describe(p.producers))
            for p, _, _ in items]


def _take_on(logs: dict[TopicPartition, Any], leadership: Standalone
             ) -> dict[TopicPartition, tuple[int, producer.PartitionProducers]]:
    """Set each log's high watermark as its leadership says; returns them with each
    log's producer state, from its latest snapshot and the batches after it, else from
    its tail (daemon.replica.producer.from_log)."""
    out = {}
    for tp, lg in logs.items():
        lg.high_watermark = leadership.high_watermark(lg)
        out[tp] = (lg.high_watermark, producer.from_log(lg))
    return out


class Marker(NamedTuple):
    """A transaction marker to write (WriteTxnMarkers): COMMIT or ABORT of a producer's
    transaction, from the coordinator at `coordinator_epoch`."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


def _start_verifications(items: list[tuple[Partition, int, int, int]], now_ms: int
                         ) -> list[Verification | None]:
    return [producer.start_verification(p.producers, pid, seq, epoch, now_ms)
            for p, pid, seq, epoch in items]


def _append_all(items: list[tuple[Partition, bytes | memoryview, int, Log | None, Marker | None,
                                  Verification | None]],
                leadership: Standalone) -> list[AppendResult]:
    """Append each partition's batches, in order, under the leader epoch each was
    accepted at, to the log held when it was queued; one partition's failure is its own."""
    out = []
    for p, records, leader_epoch, lg, marker, guard in items:
        where = f"append to {p.tp}"
        try:
            if lg is not None and lg.retired:  # moved to another dir since: nothing done
                raise LogMovedError(f"{p.tp} moved to another log dir; ask again")
            if p.deleted:
                out.append(AppendResult(UNKNOWN_TOPIC_OR_PARTITION, message=f"{p.tp} was deleted"))
                continue
            if marker is not None:
                out.append(_append_marker(p, lg, records, marker, leader_epoch, leadership))
                continue
            attributes = batch_attributes(records) or 0
            if attributes & ATTR_CONTROL:
                out.append(AppendResult(INVALID_RECORD, message=(
                    f"{where}: a control batch; only a transaction coordinator writes them")))
                continue
            checked = producer.check(p.producers, records, guard)
            if checked.error:
                out.append(AppendResult(checked.error, message=(
                    f"{where}: the batch is not part of an ongoing transaction (not "
                    "verified with its transaction coordinator, or ended since)"
                    if checked.error == INVALID_TXN_STATE and guard is not None
                    else f"{where}: producer sequence check")))
                continue
            assert lg is not None  # an offline placeholder's dir refuses work
            if checked.duplicate_of is not None:
                # Answered as the first time; acks=all waits for the batch's last offset.
                # Its time is a LogAppendTime only where the log stamps them (a producer
                # snapshot holds the batch's max timestamp, whichever type it was).
                count = (batch_producer(records) or (0, 0, 0, 1))[3]
                stamped = lg.config.timestamp_type == "LogAppendTime"
                out.append(AppendResult(NONE, checked.duplicate_of, lg.log_start_offset,
                                        lg.high_watermark,
                                        end_offset=checked.duplicate_of + count,
                                        log_append_time=checked.append_time if stamped else -1))
                continue
            if 0 <= leader_epoch < lg.epochs.latest_epoch:
                # A LeaderAndIsr started a newer epoch on this log (it is queued here
                # before its leadership is applied on the loop) after this append was
                # stamped: written now, the older epoch would overwrite the newer one in
                # the epoch cache, and the followers' divergence checks would go by it.
                # Nothing is written; the client asks again under the new epoch. (After
                # the duplicate check: a retry of a batch already written is answered as
                # written, never "not written", or the producer resends it anew.)
                out.append(AppendResult(NOT_LEADER_OR_FOLLOWER, message=(
                    f"{p.tp}: leader epoch {leader_epoch} ended (now "
                    f"{lg.epochs.latest_epoch}) while the append waited; ask again")))
                continue
            # The leader's epoch goes into every batch and the epoch cache, as Kafka's
            # leader writes it: followers and clients check truncation against it.
            active_base = lg.active_segment.base_offset
            info = lg.append(records, leader_epoch=leader_epoch)
            lg.high_watermark = leadership.high_watermark(lg)
            producer.snapshot_if_rolled(p.producers, lg, active_base)
            producer.record(p.producers, checked.token, info.base_offset, info.log_append_time,
                            info.max_timestamp)
            if attributes & ATTR_TRANSACTIONAL:
                pid, epoch, _, _ = batch_producer(records) or (-1, -1, -1, 0)
                producer.begin_txn(p.producers, pid, info.base_offset, epoch, info.max_timestamp)
            out.append(AppendResult(NONE, info.base_offset, lg.log_start_offset,
                                    lg.high_watermark, info.record_count, info.size,
                                    end_offset=info.last_offset + 1,
                                    log_append_time=info.log_append_time))
        except Exception as err:  # noqa: BLE001 - per-partition isolation, see error_of
            code, message = error_of(err, where)
            out.append(AppendResult(code, message=message,
                                    record_errors=getattr(err, "record_errors", ())))
    return out


def _append_marker(p: Partition, lg: Log | None, batch: bytes | memoryview, marker: Marker,
                   leader_epoch: int, leadership: Standalone) -> AppendResult:
    """Write one transaction marker as the leader (Kafka's appendAsLeader from the
    coordinator): checked against the producer's state, then its transaction closed
    (an abort into the `.txnindex`)."""
    assert lg is not None
    code = producer.check_marker(p.producers, marker.producer_id, marker.producer_epoch,
                                 marker.coordinator_epoch)
    if code:
        return AppendResult(code, message=f"{p.tp}: marker for producer {marker.producer_id} "
                                          f"epoch {marker.producer_epoch} refused")
    if 0 <= leader_epoch < lg.epochs.latest_epoch:
        return AppendResult(NOT_LEADER_OR_FOLLOWER, message=(
            f"{p.tp}: leader epoch {leader_epoch} ended while the marker waited"))
    active_base = lg.active_segment.base_offset
    info = lg.append(batch, leader_epoch=leader_epoch, checked=True)
    lg.high_watermark = leadership.high_watermark(lg)
    producer.snapshot_if_rolled(p.producers, lg, active_base)
    producer.end_txn(p.producers, marker.producer_id, marker.producer_epoch,
                     marker.coordinator_epoch, CONTROL_COMMIT if marker.commit else CONTROL_ABORT,
                     info.base_offset, lg, info.max_timestamp)
    return AppendResult(NONE, info.base_offset, lg.log_start_offset, lg.high_watermark,
                        info.record_count, info.size, end_offset=info.last_offset + 1)


class ReadSpec(NamedTuple):
    """One partition of a Fetch: where to read, how much, and for whom."""

    partition: Partition
    offset: int
    max_bytes: int
    last_fetched_epoch: int = -1  # Fetch v12: the epoch of the fetcher's last batch
    replica_id: int = -1  # a follower's broker id (it reads to the log end), or -1
    leader_epoch: int = -1  # the fetch's current_leader_epoch (v9+), -1: not checked
    read_committed: bool = False  # a consumer's isolation_level 1 (Fetch v4+)
    throttled: bool = False  # held back by the leader's replication throttle: no records
    # A consumer's Fetch v11+ (Kafka's !fetchOnlyLeader): a follower serves it too, up
    # to its own high watermark (KIP-392).
    any_replica: bool = False
    log_start_offset: int = -1  # a follower's own log start, as its fetch gives it


def _read_all(items: list[tuple[ReadSpec, Log | None]], budget: int) -> list[ReadResult]:
    """Read each spec: a consumer's up to the high watermark, a follower's to the end.

    `budget` bounds the bytes of this dir's share of the response; the first partition
    with data gets at least one whole batch (Kafka's minOneMessage). A fetcher whose last
    fetched epoch ends here below its fetch offset (or is unknown) gets the diverging
    epoch instead of records, as Kafka's Fetch v12 answers, and truncates to it.
    """
    out = []
    total = 0
    for (p, offset, max_bytes, last_fetched_epoch, replica_id, _, read_committed,
         throttled, _any, _start), lg in items:
        try:
            if p.deleted:
                out.append(ReadResult(UNKNOWN_TOPIC_OR_PARTITION))
                continue
            assert lg is not None
            hw = lg.high_watermark
            leo = lg.log_end_offset  # before the read: what a follower's fetch is held to
            limit = min(max_bytes, budget - total)
            if last_fetched_epoch >= 0:
                epoch, end = lg.epochs.end_offset_for(last_fetched_epoch, lg.log_end_offset)
                if epoch < last_fetched_epoch or end < offset:
                    out.append(ReadResult(NONE, b"", hw, lg.log_start_offset,
                                          diverging_epoch=(epoch, end)))
                    continue
            if offset < lg.log_start_offset or offset > lg.log_end_offset:
                out.append(ReadResult(OFFSET_OUT_OF_RANGE, b"", hw, lg.log_start_offset,
                                      f"offset {offset} of {p.tp} is outside "
                                      f"[{lg.log_start_offset}, {lg.log_end_offset}]"))
                continue
            lso = p.producers.last_stable_offset(hw, lg.log_start_offset)
            upto = leo if replica_id >= 0 else lso if read_committed else hw
            if offset >= upto or throttled or (limit <= 0 and total > 0):
                out.append(ReadResult(NONE, b"", hw, lg.log_start_offset, log_end_offset=leo,
                                      last_stable_offset=lso))
                continue
            # The bytes go into pipes here, on the worker, and from there to the socket
            # on the event loop without a copy (daemon.storage.spliced).
            data = lg.read(offset, max(limit, 1), max_offset=upto, via=splice_range)
            total += len(data)
            aborted = lg.aborted_transactions(offset, len(data)) if read_committed else None
            out.append(ReadResult(NONE, data, hw, lg.log_start_offset, log_end_offset=leo,
                                  aborted_transactions=aborted, last_stable_offset=lso))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            code, message = error_of(err, f"read {p.tp} at {offset}")
            out.append(ReadResult(code, message=message))
    return out


class _HeldLogs(Mapping[TopicPartition, Log]):
    def __init__(self, partitions: dict[TopicPartition, Partition]):
        self._partitions = partitions

    def __getitem__(self, tp: TopicPartition) -> Log:
        lg = self._partitions[tp].log
        if lg is None:
            raise KeyError(tp)  # an offline placeholder has no log
        return lg

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)


def _end_offsets_for(items: list[tuple[Partition, int, Log | None]]) -> list[tuple[int, int, int]]:
    """(error, epoch, end offset) per (partition, epoch), from each log's epoch cache."""
    out = []
    for p, epoch, lg in items:
        try:
            if p.deleted or lg is None:
                out.append((UNKNOWN_TOPIC_OR_PARTITION, -1, -1))
                continue
            if lg.retired:
                raise LogMovedError(f"{p.tp} moved to another log dir; ask again")
            found_epoch, end = lg.epochs.end_offset_for(epoch, lg.log_end_offset)
            out.append((NONE, found_epoch, end))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            out.append((error_of(err, f"offset for leader epoch of {p.tp}")[0], -1, -1))
    return out


def _delete_records(items: list[tuple[Partition, int, Log | None]]
                    ) -> list[tuple[int, int, int]]:
    """(error, new log start offset, offset required) per (partition, offset); Kafka's
    rules: a topic whose cleanup.policy lacks delete answers POLICY_VIOLATION, -1 is the
    high watermark, an offset past it is OFFSET_OUT_OF_RANGE, one below the log start
    changes nothing."""
    out = []
    for p, offset, lg in items:
        try:
            if p.deleted or lg is None:
                out.append((UNKNOWN_TOPIC_OR_PARTITION, -1, -1))
                continue
            if not lg.config.retention_deletes:  # compacted only: its records are the keys'
                out.append((POLICY_VIOLATION, -1, -1))
                continue
            target = lg.high_watermark if offset == -1 else offset
            if target < 0 or target > lg.high_watermark:
                out.append((OFFSET_OUT_OF_RANGE, -1, -1))
                continue
            if target > lg.log_start_offset:
                lg.delete_records(target)
            out.append((NONE, lg.log_start_offset, target))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            out.append((error_of(err, f"delete records of {p.tp}")[0], -1, -1))
    return out


# ListOffsets' special timestamps (Kafka's ListOffsetsRequest).
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _list_offsets(items: list[tuple[Partition, tuple[int, int, int], Log | None]],
                  read_committed: bool) -> list[tuple[int, int, int, int]]:
    """(error, timestamp, offset, leader epoch) per (partition, (timestamp query, the
    start offset of the leader epoch when a lagging high watermark is to be refused,
    else -1, the current leader epoch))."""
    out: list[tuple[int, int, int, int]] = []
    for p, (ts, epoch_start, leader_epoch), lg in items:
        try:
            if p.deleted:
                out.append((UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1))
                continue
            assert lg is not None
            # What the consumer may read to (Kafka's lastFetchableOffset).
            fetchable = (p.producers.last_stable_offset(lg.high_watermark, lg.log_start_offset)
                         if read_committed else lg.high_watermark)
            lagging = epoch_start > lg.high_watermark
            if ts == LATEST:
                out.append((OFFSET_NOT_AVAILABLE, -1, -1, -1) if lagging
                           else (NONE, -1, fetchable, leader_epoch))
            elif ts in (EARLIEST, EARLIEST_LOCAL):  # no tiered storage: all of it is local
                first = lg.epochs.earliest
                out.append((NONE, -1, lg.log_start_offset,
                            first.epoch if first is not None
                            and first.start_offset <= lg.log_start_offset else -1))
            elif ts == LATEST_TIERED:  # nothing is tiered: Kafka answers -1
                out.append((NONE, -1, -1, -1))
            elif ts < 0 and ts != MAX_TIMESTAMP:
                out.append((INVALID_REQUEST, -1, -1, -1))
            else:
                found = (lg.offset_of_max_timestamp() if ts == MAX_TIMESTAMP
                         else lg.offset_for_timestamp(ts))
                if found is None or found[0] >= fetchable:  # none it may read yet
                    out.append((OFFSET_NOT_AVAILABLE if lagging else NONE, -1, -1, -1))
                else:
                    at = max(found[0], lg.log_start_offset)
                    out.append((NONE, found[1], at, lg.epochs.epoch_for_offset(at)))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            out.append((error_of(err, f"list offsets of {p.tp}")[0], -1, -1, -1))
    return out


def _legacy_list_offsets(items: list[tuple[Partition, tuple[int, int], Log | None]],
                         from_consumer: bool) -> list[tuple[int, list[int]]]:
    """(error, offsets) per (partition, (timestamp, max offsets)): Kafka's
    legacyFetchOffsetsBefore. Each segment stands for its base offset (at least the log
    start) at its file's modification time, and a non-empty active segment adds the log
    end offset at now; the answer is the offsets at or before the timestamp (LATEST:
    all, EARLIEST: the first), newest first, at most `max offsets` of them. A consumer's
    answer stops at the high watermark, which comes first when an offset was past it."""
    out: list[tuple[int, list[int]]] = []
    for p, (ts, max_offsets), lg in items:
        try:
            if p.deleted:
                out.append((UNKNOWN_TOPIC_OR_PARTITION, []))
                continue
            assert lg is not None
            start = lg.log_start_offset
            points = [(max(seg.base_offset, start), seg.last_modified_ms())
                      for seg in lg.segments]
            if lg.active_segment.size > 0:
                points.append((lg.log_end_offset, int(time.time() * 1000)))
            if ts == LATEST:
                at = len(points) - 1
            elif ts == EARLIEST:
                at = 0
            else:
                at = len(points) - 1
                while at >= 0 and points[at][1] > ts:
                    at -= 1
            offsets = sorted((off for off, _ in points[max(at + 1 - max_offsets, 0):at + 1]),
                             reverse=True)
            if from_consumer and any(off > lg.high_watermark for off in offsets):
                hw = lg.high_watermark
                offsets = [hw] + [off for off in offsets if off <= hw]
            out.append((NONE, offsets))
        except Exception as err:  # noqa: BLE001 - per-partition isolation
            out.append((error_of(err, f"list offsets of {p.tp}")[0], []))
    return out
