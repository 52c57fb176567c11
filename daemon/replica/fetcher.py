"""A follower's fetcher: one task per leader, replicating that leader's partitions here.

As Kafka's ReplicaFetcherThread (AbstractFetcherThread), each round sends one Fetch with
`replica_id` = this broker for every partition it follows from that leader, at the
follower's log end offset, then per partition: appends the records (offsets and leader
epochs as the leader wrote them), truncates where the leader says the follower's log
diverged (Fetch v12's diverging epoch), and moves the follower's high watermark to
min(leader's HW, own log end).

KIP-461: an error while appending or truncating one partition (a storage error, a bug)
puts that partition in `failed` (FailedPartitionsCount), is logged once, and the fetcher
goes on with every other partition; a failed partition is never retried in a loop. The
mark clears when the partition is added again (a higher leader epoch, becoming a follower
anew) or removed (StopReplica, leadership, its dir failing). Errors the leader answers
(storage error...) and a corrupt fetch are retried after `backoff`; "not leader",
"unknown epoch" and "unknown partition", which a leader answers until it applies the
LeaderAndIsr this follower already has, after 50 ms doubling up to `backoff`; a fenced
epoch equal to ours marks the partition failed until a new epoch. An answer that starts
below our log end (a fetch state behind its own log; Kafka sets the partition aside)
makes the partition fetch from its log end at once.

Replication throttles (daemon.replica.quota): a partition the follower quota throttles
here is left out of the Fetch while that quota is exceeded and the partition has not
caught up with its leader's high watermark (Kafka's shouldFollowerThrottle); its bytes
count against the quota once appended. With every partition held back, the fetcher
waits `backoff` before it looks again.

A partition added while a fetch is in flight does not wait for its answer: that fetch may
be parked at the other partitions' log ends for up to max_wait_ms (Kafka's followers
wait it out), and the partition that just moved here (a failover) would hold back its
new leader's acks=all writes as long. The fetcher gives that request up (a new
connection) and asks again with the new partition.

A replica on a SATURATED log dir fetches nothing (nothing may be appended there), yet
still follows its leader's log start offset (`LogStartFollower`), so that DeleteRecords
and retention at the leader free its dir as they free the leader's.

The log work happens through `FollowerStorage`, which the replica manager implements on
each dir's worker. Runs on the event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.consumer import ListOffsetsRequest

import native
from logstore import CorruptRecordError, Log, LogMovedError, TopicPartition, UnexpectedAppendOffsetError
from logstore.records import iter_batches

from ..api import errors
from ..api.record_messages import FetchBody, FetchRequestPartition, FetchRequestTopic
from ..wire.peer import Peer, PeerError
from . import producer
from .quota import ReplicationQuota

log = logging.getLogger("logkeeper.fetcher")

# A leader that does not know our epoch yet (75), does not lead yet (6) or does not hold
# the partition yet (3, a new topic): retried after FAST_RETRY seconds, doubling up to
# the fetcher's backoff.
_LEADER_NOT_READY = frozenset((errors.UNKNOWN_LEADER_EPOCH, errors.NOT_LEADER_OR_FOLLOWER,
                               errors.UNKNOWN_TOPIC_OR_PARTITION))
FAST_RETRY = 0.05
# Partitions joining a fetcher give up its request in flight once none has joined for
# this long (seconds): see Fetcher._answer.
JOIN_QUIET = 0.01
# ListOffsets' timestamp for the log start offset, and the first version that carries
# the asker's leader epoch (Kafka's ListOffsetsRequest).
EARLIEST = -2
LIST_OFFSETS_VERSION = 4


class FollowerStorage(Protocol):
    """What a fetcher needs of the logs it replicates into (all on the dir workers)."""

    async def fetch_position(self, tp: TopicPartition) -> tuple[int, int]:
        """(log end offset, latest leader epoch) once every append and truncation
        already queued on the partition's dir worker is done: where fetching resumes."""
        ...

    async def last_fetched_epoch(self, tp: TopicPartition) -> int: ...

    async def end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]: ...

    async def append(self, tp: TopicPartition, records: bytes | memoryview,
                     fetch_offset: int) -> int:
        """Append a leader's batches, fetched from `fetch_offset`, as they are; the new
        log end offset. Raises `FetchOffsetMismatch`, writing nothing, when the log does
        not end at `fetch_offset`."""
        ...

    async def follow_log_start(self, tp: TopicPartition, offset: int) -> None:
        """Move the log start offset up to the leader's."""
        ...

    def log_start_offset(self, tp: TopicPartition) -> int:
        """Our log start offset, sent in each Fetch (the leader's DeleteRecords waits for
        it to pass the offset asked); -1 unknown."""
        ...

    async def truncate(self, tp: TopicPartition, offset: int) -> int:
        """Cut the log to end at or below `offset`; the new log end offset."""
        ...

    async def start_at(self, tp: TopicPartition, offset: int) -> int:
        """Empty the log and start it at `offset`; the new log end offset."""
        ...

    def set_high_watermark(self, tp: TopicPartition, hw: int) -> None: ...


class FetchOffsetMismatch(Exception):
    """The log no longer ends where its fetch asked from, so the answer does not follow
    on from it (Kafka's follower checks the same before each append: "Offset mismatch").
    Appended anyway, records above the log end would leave a hole in the replica: a
    re-admitted dir whose disk came back without its last writes, read through a log
    object from before it died. Nothing is written; fetching resumes from the log end."""

    def __init__(self, tp: TopicPartition, fetch_offset: int, log_end_offset: int):
        super().__init__(f"{tp}: fetched from {fetch_offset}, but the log ends at "
                         f"{log_end_offset}")
        self.fetch_offset = fetch_offset
        self.log_end_offset = log_end_offset


@dataclass
class FetchState:
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int = -1
    delayed_until: float = 0.0  # loop time before which it is not fetched (backoff)
    lag: int = 0  # offsets behind the leader's high watermark at the last answer
    in_sync: bool = False  # caught up with that high watermark (Kafka's isReplicaInSync)
    errors: int = 0  # consecutive error answers, for the backoff


def whole_batches(records: bytes | memoryview) -> bytes | memoryview:
    """The leading whole batches of a fetched chunk (a leader may cut the last one);
    old Kafka's legacy messages, which a follower copies as they are, count as batches."""
    if not records:
        return b""
    scan = native.scan_batches(records, verify_crc=False, legacy=True)
    return records[:scan.valid_bytes] if scan.valid_bytes < len(records) else records


def _settle(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


class Fetcher:
    def __init__(self, broker_id: int, leader_id: int, peer: Peer, storage: FollowerStorage, *,
                 max_wait_ms: int = 500, min_bytes: int = 1, max_bytes: int = 10 << 20,
                 partition_max_bytes: int = 1 << 20, backoff: float = 1.0,
                 fetch_version: int = 12, quota: ReplicationQuota | None = None):
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.peer = peer
        self.storage = storage
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.backoff = backoff
        self.fetch_version = fetch_version
        self.quota = quota
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.failed: set[TopicPartition] = set()
        self.rounds = 0
        self._wake = asyncio.Event()
        self._joined = asyncio.Event()  # partitions (re-)added since the fetch in flight
        # The fetch in flight's wake-up: settled by its answer or by a partition joining.
        self._answered_or_joined: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- the partition set (the replica manager calls these) ----

    async def add_partitions(self, epochs: dict[TopicPartition, int]) -> None:
        """Follow these partitions at these leader epochs, from each log's end as its
        dir worker has it: an answer of the previous leader (or of this one at the old
        epoch) may still be being appended there, and a fetch from the log end read
        before that append lands asks again for what the log already holds."""
        for tp, epoch in epochs.items():
            end, last_epoch = await self.storage.fetch_position(tp)
            self.failed.discard(tp)
            self.partitions[tp] = FetchState(epoch, end, last_epoch)
        self._wake.set()
        self._joined.set()
        _settle(self._answered_or_joined)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)
            self.failed.discard(tp)

    # ---- running ----

    def start(self) -> None:
        self._task = asyncio.ensure_future(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.peer.close()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ready = {tp: s for tp, s in self.partitions.items() if s.delayed_until <= now}
            throttled = self._throttled(ready)
            if throttled:
                ready = {tp: s for tp, s in ready.items() if tp not in throttled}
            if not ready:
                self._wake.clear()
                wait = min((s.delayed_until - now for s in self.partitions.values()
                            if s.delayed_until > now), default=None)
                if throttled:
                    wait = min(wait, self.backoff) if wait is not None else self.backoff
                try:
                    async with asyncio.timeout(wait if wait is not None else None):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            try:
                resp = await self._answer(self._request(ready))
            except PeerError as err:
                log.info("fetch from broker %d failed: %s; retrying in %.1f s",
                         self.leader_id, err, self.backoff)
                await asyncio.sleep(self.backoff)
                continue
            if resp is None:
                continue  # abandoned for partitions that joined: ask again with them
            self.rounds += 1
            if resp.error_code:
                log.info("fetch from broker %d: error %d", self.leader_id, resp.error_code)
                await asyncio.sleep(self.backoff)
                continue
            for topic in resp.responses:
                for part in topic.partitions:
                    tp = TopicPartition(topic.topic, part.partition_index)
                    state = self.partitions.get(tp)
                    if state is None or tp not in ready or ready[tp] is not state:
                        continue  # removed or re-added meanwhile: this answer is stale
                    await self._handle(tp, state, part, loop.time())

    def _throttled(self, ready: dict[TopicPartition, FetchState]) -> set[TopicPartition]:
        """The ready partitions the follower quota holds back this round."""
        quota = self.quota
        if quota is None or not quota.throttled:
            return set()
        held = {tp for tp, s in ready.items() if not s.in_sync and quota.is_throttled(tp)}
        return held if held and quota.is_exceeded() else set()

    async def _answer(self, request: FetchBody) -> Any | None:
        """The leader's answer to `request`, or None when partitions joined (or were
        re-added at a new epoch) before it came: the request is abandoned (the peer drops
        its connection) so they are fetched at once. Without that, a fetch parked at the
        log ends of the others (up to max_wait_ms) would hold back a partition that just
        moved to this leader, and with it every acks=all write the new leader takes.
        Partitions join in bursts (a LeaderAndIsr adds them one at a time): the request
        is given up once none has joined for JOIN_QUIET seconds, not at each."""
        self._joined.clear()
        answer = asyncio.ensure_future(self.peer.request(request, self.fetch_version))
        # One future the answer and a joining partition both settle, where a task waiting
        # on the Event and asyncio.wait of the two took a fetch two more turns of the loop.
        either = self._answered_or_joined = answer.get_loop().create_future()
        answer.add_done_callback(lambda _: _settle(either))
        try:
            await either
            while not answer.done() and self._joined.is_set():
                self._joined.clear()
                await asyncio.wait((answer,), timeout=JOIN_QUIET)
            if answer.done():
                return answer.result()
            return None
        finally:
            self._answered_or_joined = None
            if not answer.done():
                answer.cancel()
                await asyncio.gather(answer, return_exceptions=True)

    def _request(self, ready: dict[TopicPartition, FetchState]) -> FetchBody:
        """The Fetch of the `ready` partitions (encoded by hand: record_messages)."""
        by_topic: dict[str, list[FetchRequestPartition]] = {}
        for tp, s in ready.items():
            by_topic.setdefault(tp.topic, []).append(FetchRequestPartition(
                tp.partition, s.leader_epoch, s.fetch_offset, s.last_fetched_epoch,
                self.storage.log_start_offset(tp), self.partition_max_bytes))
        return FetchBody(self.broker_id, self.max_wait_ms, self.min_bytes, self.max_bytes,
                         topics=[FetchRequestTopic(t, ps) for t, ps in by_topic.items()])

    async def _handle(self, tp: TopicPartition, state: FetchState, part: object,
                      now: float) -> None:
        code = part.error_code  # type: ignore[attr-defined]
        if code == errors.FENCED_LEADER_EPOCH:
            # The leader is past our epoch: wait for the LeaderAndIsr that tells us. This
            # is the ordinary course of a leader epoch change (the controller's requests
            # reach the leader first, or this broker is shutting down and left the ISR),
            # so it is told at info, as Kafka's onPartitionFenced does.
            self._fail(tp, state, f"leader {self.leader_id} is past our leader epoch "
                       f"{state.leader_epoch}; awaiting the LeaderAndIsr that names the "
                       f"new one before fetching again", level=logging.INFO)
            return
        leader_start = getattr(part, "log_start_offset", -1)
        # Our log ends below the leader's log start (records deleted there while we were
        # away, or our replica re-created empty): nothing we hold follows on.
        below_start = code == errors.OFFSET_OUT_OF_RANGE and leader_start > state.fetch_offset
        if code and not below_start:
            state.errors += 1
            delay = self.backoff
            if code in _LEADER_NOT_READY:
                # The leader has not applied the LeaderAndIsr we did yet (the controller
                # sends both at once): it will within milliseconds, so try again soon,
                # backing off to the full `backoff` if it does not.
                delay = min(self.backoff, FAST_RETRY * 2 ** (state.errors - 1))
            log.debug("%s: leader %d answered %d; retrying in %.2f s", tp, self.leader_id,
                      code, delay)
            state.delayed_until = now + delay
            return
        state.errors = 0
        try:
            if below_start:
                # Kafka's follower empties its log and starts at the leader's log start.
                state.fetch_offset = await self.storage.start_at(tp, leader_start)
                state.last_fetched_epoch = await self.storage.last_fetched_epoch(tp)
                log.warning("%s: our log ended below leader %d's log start %d: emptied "
                            "it, fetching from there", tp, self.leader_id, leader_start)
                return
            diverging = part.diverging_epoch  # type: ignore[attr-defined]
            if diverging is not None:
                await self._truncate_on_divergence(tp, state, *diverging)
                return
            # A slice of the response frame, appended as it is (no copy).
            records = whole_batches(part.records or b"")  # type: ignore[attr-defined]
            if records:
                state.fetch_offset = await self.storage.append(tp, records, state.fetch_offset)
                state.last_fetched_epoch = await self.storage.last_fetched_epoch(tp)
                if self.quota is not None and self.quota.is_throttled(tp):
                    self.quota.record(len(records))
            leader_hw = part.high_watermark  # type: ignore[attr-defined]
            self.storage.set_high_watermark(tp, min(leader_hw, state.fetch_offset))
            if leader_start > 0:
                # Kafka's maybeIncrementLogStartOffset: DeleteRecords and retention on
                # the leader move the follower's log start too.
                await self.storage.follow_log_start(tp, leader_start)
            state.lag = max(0, leader_hw - state.fetch_offset)
            state.in_sync = state.lag == 0
        except asyncio.CancelledError:
            raise
        except (UnexpectedAppendOffsetError, FetchOffsetMismatch) as err:
            # The fetch state is not where the log ends. Behind it: our log holds
            # records this state did not count (it began before an append still queued
            # on the dir worker), and asking again from the same offset would be
            # refused forever. Ahead of it: appending would leave a hole (see
            # FetchOffsetMismatch). Ask from where the log ends; the last fetched epoch
            # sent with it lets the leader say if those records diverge. Were the log
            # end the offset just fetched (a batch of the leader's straddling it),
            # asking again waits `backoff`, as for corrupt data.
            asked = state.fetch_offset
            try:
                state.fetch_offset, state.last_fetched_epoch = await self.storage.fetch_position(tp)
            except asyncio.CancelledError:
                raise
            except Exception as again:  # noqa: BLE001 - as below: this partition only
                self._fail(tp, state, f"{type(again).__name__}: {again}")
                return
            if isinstance(err, FetchOffsetMismatch):
                log.warning("%s: fetched from %d, but the log ends at %d: fetching from "
                            "there", tp, asked, state.fetch_offset)
            else:
                log.warning("%s: leader %d sent offset %d, below our log end %d: fetching "
                            "from there", tp, self.leader_id, err.first_offset,
                            state.fetch_offset)
            if state.fetch_offset == asked:
                state.delayed_until = now + self.backoff
        except Exception as err:  # noqa: BLE001 - KIP-461: one partition, not the fetcher
            if isinstance(err, LogMovedError):
                # Our replica moved to another log dir while this answer was handled
                # (daemon.replica.moves): nothing was written; fetch again into the new log.
                return
            if isinstance(err, CorruptRecordError):
                log.warning("%s: corrupt data from leader %d: %s; retrying", tp,
                            self.leader_id, err)
                state.delayed_until = now + self.backoff
                return
            self._fail(tp, state, f"{type(err).__name__}: {err}")

    async def _truncate_on_divergence(self, tp: TopicPartition, state: FetchState,
                                      leader_epoch: int, leader_end: int) -> None:
        """Cut our log where it left the leader's: to where the epoch we share ends, on
        the leader's side or ours, whichever is lower (Kafka's getOffsetTruncationState).
        Ours can end lower: a later leader of ours (since gone) started its epoch at a
        log end below the leader's, and our records from there are that epoch's, not the
        leader's; cutting only to the leader's end would keep them, and the next fetch
        would diverge at the same place again, forever."""
        _, local_end = await self.storage.end_offset_for(tp, leader_epoch)
        target = min(leader_end, local_end) if local_end >= 0 else leader_end
        log.info("%s: diverged from leader %d at epoch %d: truncating to %d", tp,
                 self.leader_id, leader_epoch, target)
        state.fetch_offset = await self.storage.truncate(tp, target)
        state.last_fetched_epoch = await self.storage.last_fetched_epoch(tp)

    def _fail(self, tp: TopicPartition, state: FetchState, why: str,
              level: int = logging.WARNING) -> None:
        """Set `tp` aside, unless it was re-added (a new epoch) while `state`'s answer
        was being handled: that failure belongs to the old fetch."""
        if self.partitions.get(tp) is state:
            del self.partitions[tp]
            self.failed.add(tp)
            log.log(level, "%s: fetching from broker %d stopped for this partition only "
                    "(failed partition): %s", tp, self.leader_id, why)


class LogFollowerStorage:
    """`FollowerStorage` over this broker's `Log`s: each call that touches a disk runs on
    the partition's dir worker through `run(tp, fn, *args)` (the per-dir submit, which
    returns an awaitable), so the event loop never does; `logs` maps a partition to its
    log (a dict, or a live view of the replica manager's partitions). `producers(tp)`,
    when given, is the partition's idempotent-producer state, kept as the leader's
    (daemon.replica.producer), on the same worker. `hw_moved(tp)`, when given, is told
    each time a partition's high watermark moves here: the consumers a follower serves
    (KIP-392) wait on it. `replicated(n)`, when given, counts the bytes appended."""

    def __init__(self, logs: Mapping[TopicPartition, Log], run: Callable[..., Awaitable[Any]],
                 producers: Callable[[TopicPartition], dict[int, Any]] | None = None,
                 hw_moved: Callable[[TopicPartition], None] | None = None,
                 replicated: Callable[[int], None] | None = None):
        self.logs = logs
        self.run = run
        self.producers = producers
        self.hw_moved = hw_moved
        self.replicated = replicated

    async def fetch_position(self, tp: TopicPartition) -> tuple[int, int]:
        lg = self.logs[tp]
        return await self.run(tp, lambda: (lg.log_end_offset, lg.epochs.latest_epoch))

    async def last_fetched_epoch(self, tp: TopicPartition) -> int:
        return self.logs[tp].epochs.latest_epoch

    async def end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        lg = self.logs[tp]
        return await self.run(tp, lg.epochs.end_offset_for, epoch, lg.log_end_offset)

    async def append(self, tp: TopicPartition, records: bytes | memoryview,
                     fetch_offset: int) -> int:
        lg = self.logs[tp]

        def append() -> int:
            end = lg.log_end_offset
            if end != fetch_offset:
                raise FetchOffsetMismatch(tp, fetch_offset, end)
            active_base = lg.active_segment.base_offset
            try:
                lg.append(records, assign_offsets=False)
            except UnexpectedAppendOffsetError as err:
                # An empty log started at the leader's log start, which falls inside
                # this batch (DeleteRecords there): the log starts at the batch instead
                # (Kafka does the same), and the log start follows the leader's after.
                if end != lg.log_start_offset or next(iter_batches(
                        records, verify_crc=False)).last_offset < end:
                    raise
                lg.truncate_fully_and_start_at(err.first_offset)
                lg.append(records, assign_offsets=False)
            if self.producers is not None:
                producers = self.producers(tp)
                producer.snapshot_if_rolled(producers, lg, active_base)
                producer.record_replicated(producers, records, lg)
            return lg.log_end_offset

        end = await self.run(tp, append)
        if self.replicated is not None:
            self.replicated(len(records))
        return end

    async def truncate(self, tp: TopicPartition, offset: int) -> int:
        lg = self.logs[tp]

        def truncate() -> int:
            lg.truncate_to(offset)
            if self.producers is not None:
                producer.truncate(self.producers(tp), lg.log_end_offset)
            return lg.log_end_offset

        return await self.run(tp, truncate)

    async def start_at(self, tp: TopicPartition, offset: int) -> int:
        lg = self.logs[tp]

        def start_at() -> int:
            lg.truncate_fully_and_start_at(offset)
            if self.producers is not None:
                self.producers(tp).clear()
            return lg.log_end_offset

        return await self.run(tp, start_at)

    async def follow_log_start(self, tp: TopicPartition, offset: int) -> None:
        """Move the log start up to the leader's (never past our log end)."""
        lg = self.logs[tp]
        target = min(offset, lg.log_end_offset)
        if target > lg.log_start_offset:
            await self.run(tp, lg.delete_records, target)

    def log_start_offset(self, tp: TopicPartition) -> int:
        lg = self.logs.get(tp)  # an int attribute, read on the loop as the log end is
        return lg.log_start_offset if lg is not None else -1

    def set_high_watermark(self, tp: TopicPartition, hw: int) -> None:
        lg = self.logs[tp]
        if hw > lg.high_watermark:
            lg.high_watermark = hw
            if self.hw_moved is not None:
                self.hw_moved(tp)


class LogStartFollower:
    """The replicas on a SATURATED log dir follow their leader's log start offset.

    A follower learns its leader's log start from each Fetch answer and deletes its
    segments below it (Kafka's maybeIncrementLogStartOffset), so DeleteRecords and
    retention at the leader free the followers' disks too. A replica on a full dir
    fetches nothing (nothing may be appended there), and its segments below the leader's
    log start would keep the dir full for good: the space an operator wins back at the
    leader would never come back here. So each round (`follow`, every
    `replica.fetch.backoff.ms`) asks each leader, in one ListOffsets EARLIEST as a replica
    at the leader epoch the metadata cache gives (only the leader at that epoch answers),
    for the log start of the partitions it leads, and moves each replica's log start up to
    it through `FollowerStorage`, as a fetch answer does: the segments wholly below it go.
    A log that ends below it holds nothing the leader still has, and is emptied to start
    there (as a fetch answered OFFSET_OUT_OF_RANGE does). It only deletes: nothing is
    appended to the full dir. A ListOffsets leaves no follower state at the leader, so
    the ISR and the leader epoch do not move; the dir turns ONLINE once the health
    monitor sees the space back, and its replicas fetch again.

    Errors: an unreachable leader, an error it answers, or a failure on the replica's log
    is logged and asked again at the next round. Event loop only.
    """

    def __init__(self, broker_id: int, storage: FollowerStorage,
                 peer_of: Callable[[int], Peer]):
        self.broker_id = broker_id
        self.storage = storage
        self.peer_of = peer_of  # a connection to a leader, made when first asked
        self.peers: dict[int, Peer] = {}
        self.followed: dict[TopicPartition, int] = {}  # the leader's log start last applied

    async def follow(self, replicas: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """One round over `replicas`: partition -> (its leader, that leader's epoch)."""
        asked: dict[int, dict[TopicPartition, int]] = {}
        for tp, (leader, epoch) in replicas.items():
            asked.setdefault(leader, {})[tp] = epoch
        self.followed = {tp: o for tp, o in self.followed.items() if tp in replicas}
        for leader in [b for b in self.peers if b not in asked]:
            await self.peers.pop(leader).close()  # none of its replicas is on a full dir now
        await asyncio.gather(*(self._ask(leader, epochs) for leader, epochs in asked.items()))

    async def _ask(self, leader: int, epochs: dict[TopicPartition, int]) -> None:
        T = ListOffsetsRequest.ListOffsetsTopic
        by_topic: dict[str, list[Any]] = {}
        for tp, epoch in epochs.items():
            by_topic.setdefault(tp.topic, []).append(T.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=epoch, timestamp=EARLIEST))
        peer = self.peers.get(leader)
        if peer is None:
            peer = self.peers[leader] = self.peer_of(leader)
        try:
            resp = await peer.request(ListOffsetsRequest(
                replica_id=self.broker_id, isolation_level=0,
                topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()]),
                LIST_OFFSETS_VERSION)
        except PeerError as err:
            log.info("asking broker %d for its log start offsets failed: %s; asking again "
                     "at the next round", leader, err)
            return
        for topic in resp.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if tp not in epochs:
                    continue
                if part.error_code:
                    log.debug("%s: leader %d answered %d to its log start offset", tp, leader,
                              part.error_code)
                    continue
                try:
                    await self._follow(tp, leader, part.offset)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # noqa: BLE001 - this partition only; asked again
                    log.warning("%s: following leader %d's log start offset %d failed: %s: %s",
                                tp, leader, part.offset, type(err).__name__, err)

    async def _follow(self, tp: TopicPartition, leader: int, leader_start: int) -> None:
        if leader_start <= self.followed.get(tp, 0):
            return  # applied at an earlier round (or 0: nothing lies below it)
        end, _ = await self.storage.fetch_position(tp)
        if leader_start > end:
            await self.storage.start_at(tp, leader_start)
            log.warning("%s: our log ended at %d, below leader %d's log start %d: emptied it "
                        "to start there (its log dir is saturated and fetches nothing)", tp,
                        end, leader, leader_start)
        else:
            await self.storage.follow_log_start(tp, leader_start)
            log.info("%s: following leader %d's log start offset %d (its log dir is "
                     "saturated and fetches nothing)", tp, leader, leader_start)
        self.followed[tp] = leader_start

    async def stop(self) -> None:
        peers, self.peers = list(self.peers.values()), {}
        await asyncio.gather(*(p.close() for p in peers), return_exceptions=True)


class ReplicaFetchers:
    """Kafka's ReplicaFetcherManager: one `Fetcher` per leader this broker follows, and
    the `LogStartFollower` of the replicas on SATURATED dirs.

    `follow` and `unfollow` come from the controller's requests (LeaderAndIsr: become a
    follower, or the leader; StopReplica), on the event loop. A leader's address comes
    from `endpoint(broker_id)` (the metadata cache); a leader not known yet is retried
    each `backoff` until an UpdateMetadata names it.
    """

    def __init__(self, broker_id: int, storage: FollowerStorage,
                 endpoint: Callable[[int], tuple[str, int] | None], *, backoff: float = 1.0,
                 quota: ReplicationQuota | None = None,
                 tls_context: ssl.SSLContext | None = None,
                 login: tuple[str, str, str] | None = None, **fetch: int):
        self.broker_id = broker_id
        self.tls_context = tls_context  # the inter-broker listener is SSL (or SASL_SSL)
        self.login = login  # ... or SASL: this broker's (mechanism, username, password)
        self.quota = quota  # the follower's replication throttle
        self.storage = storage
        self.endpoint = endpoint
        self.backoff = backoff
        # Each Fetcher's max_wait_ms, min_bytes, max_bytes and partition_max_bytes (the
        # broker's replica.fetch.* settings); Fetcher's defaults are Kafka's.
        self.fetch = fetch
        self.fetchers: dict[int, Fetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self.log_starts = LogStartFollower(broker_id, storage,
                                           lambda leader_id: _LazyPeer(self, leader_id))

    @property
    def failed(self) -> set[TopicPartition]:
        return set().union(*(f.failed for f in self.fetchers.values()))

    def lags(self) -> list[tuple[TopicPartition, int]]:
        """Each followed partition's lag behind its leader's high watermark (offsets)."""
        return [(tp, s.lag) for f in self.fetchers.values() for tp, s in f.partitions.items()]

    async def follow(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> None:
        """Fetch `tp` from `leader_id` at `leader_epoch` (clears a KIP-461 mark)."""
        self.unfollow([tp])
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = Fetcher(self.broker_id, leader_id, _LazyPeer(self, leader_id),
                              self.storage, backoff=self.backoff, quota=self.quota,
                              **self.fetch)
            self.fetchers[leader_id] = fetcher
            fetcher.start()
        await fetcher.add_partitions({tp: leader_epoch})
        self._leader_of[tp] = leader_id

    def unfollow(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            leader = self._leader_of.pop(tp, None)
            fetcher = self.fetchers.get(leader) if leader is not None else None
            if fetcher is not None:
                fetcher.remove_partitions([tp])

    async def follow_log_starts(self, replicas: Mapping[TopicPartition, tuple[int, int]]
                                ) -> None:
        """One round of `LogStartFollower` over the replicas on SATURATED dirs (partition
        -> (leader, leader epoch)); run every `backoff`."""
        await self.log_starts.follow(replicas)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.stop() for f in fetchers), self.log_starts.stop(),
                             return_exceptions=True)


class _LazyPeer(Peer):
    """A `Peer` that looks its leader's address up at each (re)connect, so a leader that
    moved (a restart on another port, a new advertised address) is found again."""

    def __init__(self, owner: ReplicaFetchers, leader_id: int):
        super().__init__("", 0, client_id=f"logkeeper-replica-{owner.broker_id}",
                         tls_context=owner.tls_context, login=owner.login)
        self._owner = owner
        self._leader_id = leader_id

    async def request(self, body: Any, version: int) -> Any:
        if not self.connected:
            where = self._owner.endpoint(self._leader_id)
            if where is None:
                raise PeerError(f"broker {self._leader_id}'s address is not known yet")
            self.host, self.port = where
        return await super().request(body, version)
