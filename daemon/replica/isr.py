"""The leader's side of replication (Kafka's Partition and Replica, ZooKeeper mode).

For each partition led here the leader keeps a `LeaderState`: the ISR the controller
(or our own last write) committed, one `FollowerState` per other replica, the leader
epoch and where it started, the partition epoch (the state znode's zkVersion) and
the topic's `min.insync.replicas`. `IsrManager` moves it, on the event loop:

- **A follower's fetch** at offset f, when the leader's log end was L before the read,
  updates that follower's state (docs/cluster.md, "Replication"):
  f >= L -> caught up now; else f >= the L of its previous fetch -> caught up as of that
  fetch; then its log end is f. A follower not in the ISR whose log end reached both the
  high watermark and the start of the leader's current epoch (KAFKA-7128), and whose
  broker is alive, is proposed for the ISR (expand).
- **Every `replica.lag.time.max.ms` / 2** the ISR members that are not caught up (log end
  below the leader's and not caught up within the lag) are proposed out of it (shrink),
  unless the leader's own dir is OFFLINE: then it is the one behind, and waits for the
  controller to move leadership.
- **An ISR change** is a conditional setData of the partition's state znode at the
  partition epoch, keeping leader, leader epoch and controller epoch; on success the
  partition is queued for an `isr_change_notification` (the controller then tells every
  broker). On BADVERSION the state is re-read: the same content means our write went
  through; anything else leaves the change pending until the controller's next
  LeaderAndIsr. While a change is in flight the "maximal" ISR (old ISR plus the member
  being added) bounds the high watermark; the committed ISR answers acks=all.
- **The high watermark** is recomputed after an append, a follower fetch, an ISR change
  and on becoming leader: the least log end of the leader and of every replica in the
  maximal ISR, moved only forward, and not at all while the ISR is smaller than
  min(min.insync.replicas, replica count) (Kafka 3.7+, our "durability first").

**The low watermark** (Kafka's lowWatermarkIfLeader) is the least log start offset of
the leader and of every replica on a live broker, each follower's as its last fetch
gave it: DeleteRecords answers once it reaches the offset asked (daemon.api.partitions).

Each move of the high watermark, of the ISR, of leadership or of a follower's log start
wakes the partition's waiters: consumers long-polling at the old high watermark, and
acks=all produces and DeleteRecords in the purgatory (daemon.replica.partition.delayed).

Thread-safety: event loop only. The logs are read for their end offset (an int
attribute; a dir worker may be appending meanwhile, which only makes it larger) and
their high watermark is set here (the dir workers only read it in cluster mode).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from logstore import TopicPartition

from ..cluster import znodes
from .partition import Partition

log = logging.getLogger("logkeeper.isr")


@dataclass
class FollowerState:
    """What the leader knows of one follower replica (Kafka's Replica)."""

    log_end_offset: int = -1  # unknown until it fetches
    log_start_offset: int = -1  # as its last fetch said (Fetch v5+); -1: unknown
    last_fetch_leader_log_end: int = -1
    last_fetch_time: float = 0.0
    last_caught_up_time: float = 0.0

    def on_fetch(self, fetch_offset: int, leader_log_end: int, now: float) -> None:
        if fetch_offset >= leader_log_end:
            self.last_caught_up_time = max(self.last_caught_up_time, now)
        elif fetch_offset >= self.last_fetch_leader_log_end:
            self.last_caught_up_time = max(self.last_caught_up_time, self.last_fetch_time)
        self.last_fetch_leader_log_end = max(leader_log_end, self.last_fetch_leader_log_end)
        self.last_fetch_time = now
        self.log_end_offset = fetch_offset

    def caught_up(self, leader_log_end: int, now: float, lag: float) -> bool:
        return self.log_end_offset == leader_log_end or now - self.last_caught_up_time <= lag


@dataclass
class LeaderState:
    """A partition led here at one leader epoch."""

    partition: Partition
    leader_epoch: int
    epoch_start_offset: int  # the leader's log end when it took this epoch
    controller_epoch: int  # of the controller that made the leadership decision
    partition_epoch: int  # the state znode's zkVersion our next ISR write expects
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    min_isr: int
    followers: dict[int, FollowerState] = field(default_factory=dict)
    adding: tuple[int, ...] = ()  # replicas a reassignment adds: not yet owed to the ISR
    removing: tuple[int, ...] = ()  # and those it removes
    pending_isr: tuple[int, ...] | None = None  # a write in flight, or refused
    isr_shrinks: int = 0
    isr_expands: int = 0

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark waits for: while an expansion is in flight, the new
        member too; while a shrink is, the old ISR (Kafka's PendingExpand/PendingShrink)."""
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    @property
    def under_replicated(self) -> bool:
        """Kafka's isUnderReplicated: while a reassignment adds replicas, the ISR is
        measured against the original ones."""
        return len(self.isr) < len(self.replicas) - len(self.adding)

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.min_isr

    @property
    def at_min_isr(self) -> bool:
        """Kafka's isAtMinIsr: one more replica out of the ISR and acks=all stops."""
        return len(self.isr) == self.min_isr


class IsrManager:
    """The leader-side replication of every partition led here (module docstring).

    `write_state(tp, state, version)` is the conditional ZooKeeper write: the new
    zkVersion, or None on BADVERSION (it runs off the loop and raises on ZooKeeper
    trouble); `read_state(tp)` re-reads (state, zkVersion) or None; `announce(tp)`
    queues an isr_change notification; `alive(broker_id)` says whether the metadata
    cache lists that broker.
    """

    def __init__(self, broker_id: int, *,
                 write_state: Callable[[TopicPartition, znodes.PartitionState, int],
                                       Awaitable[int | None]],
                 read_state: Callable[[TopicPartition],
                                      Awaitable[tuple[znodes.PartitionState, int] | None]],
                 announce: Callable[[TopicPartition], None],
                 alive: Callable[[int], bool],
                 lag_time_ms: int = 30000,
                 clock: Callable[[], float] = time.monotonic):
        self.broker_id = broker_id
        self.write_state = write_state
        self.read_state = read_state
        self.announce = announce
        self.alive = alive
        self.lag = lag_time_ms / 1000
        self.clock = clock
        self.leaders: dict[TopicPartition, LeaderState] = {}
        self.isr_shrinks = 0  # counters for IsrShrinksPerSec / IsrExpandsPerSec
        self.isr_expands = 0
        self._writes: set[asyncio.Task[None]] = set()

    # ---- becoming leader, and stopping ----

    def become_leader(self, p: Partition, *, leader_epoch: int, controller_epoch: int,
                      partition_epoch: int, isr: Iterable[int], replicas: Iterable[int],
                      min_isr: int, log_end_offset: int, adding: Iterable[int] = (),
                      removing: Iterable[int] = ()) -> None:
        """Lead `p` at `leader_epoch` (a LeaderAndIsr naming this broker leader). Kafka's
        makeLeader: ISR followers count as caught up now; a broker that led before keeps
        what it knew of each follower's log end, one that did not knows nothing yet. The
        high watermark does not jump to the log end."""
        now = self.clock()
        isr_t, replicas_t = tuple(isr), tuple(replicas)
        before = self.leaders.get(p.tp)
        followers = {}
        for r in replicas_t:
            if r == self.broker_id:
                continue
            old = before.followers.get(r) if before is not None else None
            f = FollowerState()
            if old is not None:
                f.log_end_offset = old.log_end_offset
                f.log_start_offset = old.log_start_offset
                f.last_fetch_leader_log_end = old.last_fetch_leader_log_end
            if r in isr_t:
                f.last_caught_up_time = now
                if old is not None:
                    f.last_fetch_time = now
            followers[r] = f
        self.leaders[p.tp] = LeaderState(p, leader_epoch, log_end_offset, controller_epoch,
                                         partition_epoch, isr_t, replicas_t, max(min_isr, 1),
                                         followers, tuple(adding), tuple(removing))
        self._advance_high_watermark(p)
        p.notify()

    def resign(self, tp: TopicPartition) -> None:
        """No longer leader of `tp` (a follower now, stopped, or its dir failed)."""
        st = self.leaders.pop(tp, None)
        if st is not None:
            st.partition.notify()

    def set_min_isr(self, tp: TopicPartition, min_isr: int) -> None:
        """The topic's min.insync.replicas changed (daemon.replica.topic_config): the
        high watermark may move now, and waiting acks=all produces look again."""
        st = self.leaders.get(tp)
        if st is None or st.min_isr == max(min_isr, 1):
            return
        st.min_isr = max(min_isr, 1)
        self._advance_high_watermark(st.partition)
        st.partition.notify()

    # ---- what the produce and fetch paths ask and tell ----

    def state(self, tp: TopicPartition) -> LeaderState | None:
        return self.leaders.get(tp)

    def on_append(self, p: Partition) -> None:
        """The leader appended to `p`: the high watermark may move (a one-replica ISR)."""
        self._advance_high_watermark(p)

    def on_follower_fetch(self, p: Partition, replica_id: int, fetch_offset: int,
                          leader_log_end: int, log_start_offset: int = -1) -> None:
        """A follower fetched `p` at `fetch_offset`; `leader_log_end` is our log end
        offset as the read found it (before it); `log_start_offset` the follower's own,
        as its fetch gave it."""
        st = self.leaders.get(p.tp)
        if st is None:
            return
        f = st.followers.get(replica_id)
        if f is None:
            return  # not a replica of this partition: served, not tracked
        f.on_fetch(fetch_offset, leader_log_end, self.clock())
        moved_start = log_start_offset > f.log_start_offset
        f.log_start_offset = log_start_offset
        self._maybe_expand(p, st, replica_id, f)
        if not self._advance_high_watermark(p) and moved_start:
            p.notify()  # a DeleteRecords waiting on the low watermark looks again

    def low_watermark(self, tp: TopicPartition) -> int | None:
        """Kafka's Partition.lowWatermarkIfLeader: the least log start offset of the
        leader and of every other replica whose broker is alive, in the ISR or not (a
        replica not heard from since this broker became leader counts as -1); None when
        `tp` is not led here. DeleteRecords answers once it reaches the offset asked."""
        st = self.leaders.get(tp)
        lg = st.partition.log if st is not None else None
        if st is None or lg is None:
            return None
        low = lg.log_start_offset
        for r, f in st.followers.items():
            if f.log_start_offset < low and self.alive(r):
                low = f.log_start_offset
        return low

    # ---- the high watermark ----

    def _advance_high_watermark(self, p: Partition) -> bool:
        st = self.leaders.get(p.tp)
        lg = p.log
        if st is None or lg is None:
            return False
        if len(st.isr) < min(st.min_isr, len(st.replicas)):
            return False  # durability first: nothing is committed below min.insync
        leo = lg.log_end_offset
        now = self.clock()
        hw = leo
        for r, f in st.followers.items():
            if r in st.maximal_isr or (f.caught_up(leo, now, self.lag) and self.alive(r)
                                       and f.log_end_offset >= 0):
                hw = min(hw, f.log_end_offset)
        if hw <= lg.high_watermark:
            return False
        lg.high_watermark = hw
        p.high_watermark = lg.high_watermark
        p.notify()
        return True

    # ---- ISR changes ----

    def _maybe_expand(self, p: Partition, st: LeaderState, replica_id: int,
                      f: FollowerState) -> None:
        lg = p.log
        if (replica_id in st.isr or st.pending_isr is not None or lg is None
                or not self.alive(replica_id)):
            return
        if f.log_end_offset >= lg.high_watermark and f.log_end_offset >= st.epoch_start_offset:
            new = tuple(sorted((*st.isr, replica_id)))
            log.info("%s: replica %d caught up (log end %d, high watermark %d): expanding the "
                     "ISR %s -> %s", p.tp, replica_id, f.log_end_offset, lg.high_watermark,
                     list(st.isr), list(new))
            self._propose(p, st, new, expand=True)

    def shrink_out_of_sync(self) -> None:
        """Propose each led partition's ISR without its members that fell behind by
        more than `replica.lag.time.max.ms` (run every half of it)."""
        now = self.clock()
        for tp, st in list(self.leaders.items()):
            p = st.partition
            if p.offline or st.pending_isr is not None:
                # Offline: its followers lag because this leader's disk died, not theirs.
                # Shrunk to the leader alone, the partition would have nobody to elect
                # once the controller hears of the dir (Kafka never shrinks an offline
                # partition: it is out of ReplicaManager's online partitions).
                continue
            leo = p.log.log_end_offset
            out = [r for r in st.isr if r != self.broker_id and r in st.followers
                   and not st.followers[r].caught_up(leo, now, self.lag)]
            if not out:
                continue
            new = tuple(r for r in st.isr if r not in out)
            log.warning("%s: replicas %s are out of sync (no catch-up within %.0f ms; leader "
                        "log end %d, theirs %s): shrinking the ISR %s -> %s", tp, out,
                        self.lag * 1000, leo, [st.followers[r].log_end_offset for r in out],
                        list(st.isr), list(new))
            self._propose(p, st, new, expand=False)

    def _propose(self, p: Partition, st: LeaderState, new_isr: tuple[int, ...], *,
                 expand: bool) -> None:
        st.pending_isr = new_isr
        task = asyncio.ensure_future(self._write_isr(p, st, new_isr, expand))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write_isr(self, p: Partition, st: LeaderState, new_isr: tuple[int, ...],
                         expand: bool) -> None:
        state = znodes.PartitionState(self.broker_id, st.leader_epoch, st.controller_epoch,
                                      new_isr)
        try:
            version = await self.write_state(p.tp, state, st.partition_epoch)
            if version is None:
                version = await self._after_bad_version(p.tp, state)
        except Exception as err:  # noqa: BLE001 - ZooKeeper away: retried at the next check
            log.warning("%s: writing ISR %s failed (%s: %s); will try again", p.tp,
                        list(new_isr), type(err).__name__, err)
            if self.leaders.get(p.tp) is st:
                st.pending_isr = None
            return
        if self.leaders.get(p.tp) is not st:
            if version is not None:
                # Written all the same: the controller still hears of it (a reassignment
                # waits for this ISR), though the controller's word stands here.
                self.announce(p.tp)
            return  # leadership changed meanwhile: the controller's word stands
        if version is None:
            log.info("%s: the partition state moved under our ISR write; waiting for the "
                     "controller's LeaderAndIsr", p.tp)
            return  # stays pending (Kafka)
        st.isr = new_isr
        st.partition_epoch = version
        st.pending_isr = None
        if expand:
            st.isr_expands += 1
            self.isr_expands += 1
        else:
            st.isr_shrinks += 1
            self.isr_shrinks += 1
        log.info("%s: ISR is now %s (partition epoch %d)", p.tp, list(new_isr), version)
        self.announce(p.tp)
        self._advance_high_watermark(p)
        p.notify()  # acks=all waiters re-check against the new ISR

    async def _after_bad_version(self, tp: TopicPartition,
                                 wanted: znodes.PartitionState) -> int | None:
        got = await self.read_state(tp)
        if got is None:
            return None
        current, version = got
        if (current.leader, current.leader_epoch, tuple(current.isr)) == (
                wanted.leader, wanted.leader_epoch, tuple(wanted.isr)):
            return version  # our earlier write had gone through
        return None

    async def stop(self) -> None:
        tasks = list(self._writes)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- what metrics read ----

    def under_replicated(self) -> int:
        return sum(1 for st in self.leaders.values() if st.under_replicated)

    def reassigning(self) -> int:
        """Kafka's ReassigningPartitions: partitions led here being reassigned."""
        return sum(1 for st in self.leaders.values() if st.adding or st.removing)

    def under_min_isr(self) -> int:
        return sum(1 for st in self.leaders.values() if st.under_min_isr)

    def at_min_isr(self) -> int:
        return sum(1 for st in self.leaders.values() if st.at_min_isr)
