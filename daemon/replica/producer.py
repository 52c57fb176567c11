"""Idempotent-producer state: the last batches of each producer, per partition.

Kafka's check for one batch (ProducerStateManager): a lower epoch is fenced
(INVALID_PRODUCER_EPOCH), a batch already appended is answered with its first offset
and not written again, and a sequence that does not follow the last one, or a higher
epoch that does not start at sequence 0, is OUT_OF_ORDER_SEQUENCE_NUMBER. A producer
this partition knows nothing of may start at any sequence (its state may have gone
with retention or a restart). A follower records the batches it replicates the same way
(`record_replicated`), so a new leader after a failover still answers a producer's
retry of a batch the old leader had written as a duplicate; a truncation forgets the
batches cut (`truncate`). The window lives in memory; when a partition is taken on
(start-up, a dir re-admitted) it starts from the partition's latest producer snapshot
(Kafka's `.snapshot`, logstore.producer_snapshot: written at each segment roll, at a
clean shutdown, and every few seconds for partitions with a transaction open or a
snapshot older than the active segment) and the batches after it are replayed
(`from_log`); without one, the batches of the active segment (or of the log's last
`TAIL_BYTES`, if they reach further back). So a broker restarted after a kill -9 still
knows the recent batches it holds: without that, a producer retrying a batch that
broker had written before the kill had it written twice once the broker led again. A
producer whose last batch lies further back is unknown and may start at any sequence,
as in Kafka after its state expired.

Transactions (Kafka's ProducerStateManager, docs/transactions.md): a producer's first
transactional batch opens its transaction at that batch's offset; the transaction
coordinator's marker (a control batch, COMMIT or ABORT) closes it. An abort marker adds
the transaction to the segment's `.txnindex` (`end_txn`), on the leader and on every
follower as it replicates the marker. The last stable offset (LSO), up to which a
read_committed consumer reads, is the high watermark or the first offset of the oldest
transaction still open, or closed by a marker not yet under the high watermark
(`PartitionProducers.last_stable_offset`). A marker is refused from a coordinator older
than the one that wrote the producer's last marker (TRANSACTION_COORDINATOR_FENCED), or
for a producer epoch older than the producer's (INVALID_PRODUCER_EPOCH); a producer's
plain batch while its transaction is open is INVALID_TXN_STATE.

Transaction verification (KIP-890's first part, Kafka's VerificationStateEntry and
VerificationGuard; docs/transactions.md): before the first transactional batch of a
producer's transaction is written here, the leader asks the transaction coordinator
whether the transaction holds this partition (daemon.replica.txn_verification). Asking
starts a `Verification` (`start_verification`); the batch is appended only with that
very object, and only while it is still the producer's (`check`): a marker or a
transactional batch written meanwhile ends it, so a stale answer never opens a
transaction here (a producer's delayed batch after its transaction was aborted would
otherwise hold the last stable offset for ever: a hanging transaction). Once the
transaction is open here, its later batches need no verification. A verification also
refuses a batch whose first sequence is past the lowest one seen while it waited
(OUT_OF_ORDER_SEQUENCE_NUMBER: an earlier batch is still on its way).

Expiration (Kafka's producer.id.expiration.ms): a producer without an open transaction
whose last batch or marker is older than the expiration (by its timestamp, as Kafka
counts it) is forgotten (`PartitionProducers.expire`), so a partition does not keep
every producer instance that ever wrote to it. DescribeProducers shows what is kept
(`describe`).

Runs on the partition's dir worker only (the state is the partition's, see
daemon.replica.partition): not thread-safe.
"""

from __future__ import annotations

import collections
import logging
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from logstore import Log, LogStoreError, producer_snapshot
from logstore.cleaner import ActiveProducers
from logstore.records import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_AT,
    CONTROL_ABORT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    PRODUCER,
    PRODUCER_AT,
    Batch,
    batch_attributes,
    batch_producer,
    control_record,
    iter_batches,
)
from logstore.txnindex import AbortedTxn

from ..api.errors import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TRANSACTION_COORDINATOR_FENCED,
)

_log = logging.getLogger("logkeeper.producers")
WINDOW = 5  # Kafka keeps the metadata of the last 5 batches per producer
TAIL_BYTES = 1 << 20  # how much of a log's end `from_log` reads
_FRAME = struct.Struct(">qi")  # base offset, batch length: every batch's and legacy message's
_ATTRS = struct.Struct(">hi")  # attributes, lastOffsetDelta
_MAX_TIMESTAMP = struct.Struct(">q")


@dataclass
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    append_time: int = -1  # the LogAppendTime it was written with, else -1

    @property
    def offset_delta(self) -> int:
        """Its last offset minus its first: its sequences span its offsets."""
        return (self.last_seq - self.first_seq) % 2**31

    @property
    def last_offset(self) -> int:
        return self.first_offset + self.offset_delta


@dataclass
class ProducerState:
    epoch: int
    batches: collections.deque[BatchMeta] = field(
        default_factory=lambda: collections.deque(maxlen=WINDOW))
    last_timestamp: int = -1  # its last batch's max timestamp, or last marker's (Kafka's)


class Verification:
    """A wait for the coordinator's word that a producer's transaction holds this
    partition (Kafka's VerificationStateEntry; the object itself is its guard): when it
    began, the lowest first sequence and the epoch seen while it lasted."""

    __slots__ = ("since_ms", "lowest_seq", "epoch")

    def __init__(self, since_ms: int, seq: int, epoch: int):
        self.since_ms = since_ms
        self.lowest_seq = seq
        self.epoch = epoch

    def saw(self, seq: int, epoch: int) -> None:
        """Another batch asked under it (Kafka's maybeUpdateLowestSequenceAndEpoch)."""
        if epoch > self.epoch or (epoch == self.epoch and seq < self.lowest_seq):
            self.epoch, self.lowest_seq = epoch, seq


# The guard of an append nobody verified (Kafka's VerificationGuard.SENTINEL): never a
# partition's, so a transactional batch with it is written only inside a transaction
# already open here.
UNVERIFIED = Verification(-1, -1, -1)


class PartitionProducers(dict[int, ProducerState]):
    """A partition's producers: each one's idempotence window (the mapping, by producer
    id), and the partition's transactions."""

    __slots__ = ("ongoing", "unreplicated", "coordinator_epochs", "snapshot_offset",
                 "verifying")

    def __init__(self) -> None:
        super().__init__()
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        # (first offset, marker offset, producer id) of transactions whose marker is at
        # or past the high watermark: unstable until it is replicated.
        self.unreplicated: list[tuple[int, int, int]] = []
        self.coordinator_epochs: dict[int, int] = {}  # producer id -> its last marker's
        self.snapshot_offset = -1  # of the partition's latest producer snapshot, -1: none
        self.verifying: dict[int, Verification] = {}  # producer id -> its verification

    def txn_open(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether `producer_id` has a transaction open here at `producer_epoch` (Kafka's
        UnifiedLog.hasOngoingTransaction): a zombie of an older epoch, whose own
        transaction was aborted when its successor's began, does not write into the
        successor's open one unverified; it is asked about, and fenced."""
        if producer_id not in self.ongoing:
            return False
        state = self.get(producer_id)
        return state is None or state.epoch == producer_epoch

    def clear(self) -> None:
        super().clear()
        self.ongoing.clear()
        self.verifying.clear()
        self.unreplicated.clear()
        self.coordinator_epochs.clear()
        self.snapshot_offset = -1

    def prune(self, high_watermark: int) -> None:
        """Forget the closed transactions whose marker is under the high watermark."""
        if self.unreplicated and self.unreplicated[0][1] < high_watermark:
            self.unreplicated = [t for t in self.unreplicated if t[1] >= high_watermark]

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers without an open transaction whose last entry is
        `expiration_ms` old or older (Kafka's removeExpiredProducers); how many went."""
        gone = [pid for pid, state in self.items() if pid not in self.ongoing
                and now_ms - state.last_timestamp >= expiration_ms]
        for pid in gone:
            del self[pid]
            self.coordinator_epochs.pop(pid, None)
        # A verification nobody appended with (Kafka expires them the same way).
        for pid in [pid for pid, v in self.verifying.items()
                    if now_ms - v.since_ms >= expiration_ms]:
            del self.verifying[pid]
        return len(gone)

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """The high watermark, or the first offset of the oldest transaction a
        read_committed consumer may not read past yet (Kafka's firstUnstableOffset),
        but never below the log start: retention or DeleteRecords may delete the start
        of a transaction still open, and Kafka's maybeIncrementFirstUnstableOffset
        then holds read_committed consumers at the log start."""
        if not self.ongoing and not self.unreplicated:
            return high_watermark  # the common case: no transaction here
        self.prune(high_watermark)
        firsts = [t[0] for t in self.unreplicated]
        if self.ongoing:
            firsts.append(min(self.ongoing.values()))
        if not firsts:
            return high_watermark
        return min(high_watermark, max(min(firsts), log_start_offset))


@dataclass(frozen=True)
class Check:
    """The outcome of `check`: an error, a duplicate's first offset, or what to record."""

    error: int = NONE
    duplicate_of: int | None = None  # first offset of the batch already appended
    append_time: int = -1  # that batch's LogAppendTime, answered again (else -1)
    token: tuple[int, int, int, int] | None = None  # (pid, epoch, first_seq, last_seq)


def check(producers: PartitionProducers, records: bytes,
          guard: Verification | None = None) -> Check:
    """Kafka's idempotent-producer check for the first batch of `records`; with a
    `guard` (transaction verification is on), also that a transactional batch opening
    a transaction here comes with the verification its producer still has."""
    fields = batch_producer(records)
    if fields is None:
        return Check()
    pid, epoch, base_seq, count = fields
    if pid < 0:
        return Check()
    sequenced = base_seq >= 0 and count > 0  # a group coordinator's offsets have none
    transactional = (batch_attributes(records) or 0) & ATTR_TRANSACTIONAL
    if sequenced and pid in producers.ongoing and not transactional:
        return Check(INVALID_TXN_STATE)  # a plain batch inside its own transaction
    last_seq = (base_seq + count - 1) % 2**31
    state = producers.get(pid) if sequenced else None
    if state is not None and epoch == state.epoch:
        for meta in state.batches:  # a retry of a batch written is answered as written
            if meta.first_seq == base_seq and meta.last_seq == last_seq:
                return Check(duplicate_of=meta.first_offset, append_time=meta.append_time)
    verifying = producers.verifying.get(pid)
    if transactional and guard is not None and not producers.txn_open(pid, epoch) \
            and verifying is not guard:
        return Check(INVALID_TXN_STATE)  # not verified, or not since the last marker
    if not sequenced:
        return Check()
    if verifying is not None and base_seq > verifying.lowest_seq:
        return Check(OUT_OF_ORDER_SEQUENCE_NUMBER)  # a batch before it is still coming
    if state is not None:
        if epoch < state.epoch:
            return Check(INVALID_PRODUCER_EPOCH)
        if epoch > state.epoch and base_seq != 0:
            return Check(OUT_OF_ORDER_SEQUENCE_NUMBER)  # a new epoch starts at sequence 0
        if epoch == state.epoch and state.batches:
            expected = (state.batches[-1].last_seq + 1) % 2**31
            if base_seq != expected:
                return Check(OUT_OF_ORDER_SEQUENCE_NUMBER)
    return Check(token=(pid, epoch, base_seq, last_seq))


def start_verification(producers: PartitionProducers, producer_id: int, seq: int,
                       epoch: int, now_ms: int) -> Verification | None:
    """A transactional batch of `producer_id` is about to be verified: its producer's
    verification (started now, or the one under way), or None when its transaction is
    open here already (Kafka's maybeStartTransactionVerification)."""
    if producers.txn_open(producer_id, epoch):
        return None
    v = producers.verifying.get(producer_id)
    if v is None:
        v = producers.verifying[producer_id] = Verification(now_ms, seq, epoch)
    else:
        v.saw(seq, epoch)
    return v


def record(producers: PartitionProducers, token: tuple[int, int, int, int] | None,
           first_offset: int, append_time: int = -1, timestamp: int = -1) -> None:
    """Remember an appended batch that `check` passed with `token` (and the
    LogAppendTime it was stamped with: a retry of it is answered that time, as Kafka's
    duplicate answer carries the batch's timestamp), and its max `timestamp`."""
    if token is None:
        return
    pid, epoch, first_seq, last_seq = token
    state = producers.get(pid)
    if state is None or state.epoch != epoch:
        state = producers[pid] = ProducerState(epoch)
    state.batches.append(BatchMeta(first_seq, last_seq, first_offset, append_time))
    state.last_timestamp = timestamp


def begin_txn(producers: PartitionProducers, producer_id: int, first_offset: int,
              producer_epoch: int = -1, timestamp: int = -1) -> None:
    """A transactional batch of `producer_id` was appended at `first_offset`: it opens
    the producer's transaction here, unless one is open already. A group coordinator's
    TxnOffsetCommit batch has no sequence (`record` took nothing of it): it opens one
    too, and its epoch and timestamp are the producer's here."""
    if producer_id < 0:
        return
    producers.verifying.pop(producer_id, None)  # its transaction is open here now
    producers.ongoing.setdefault(producer_id, first_offset)
    state = producers.get(producer_id)
    if producer_epoch >= 0 and (state is None or producer_epoch > state.epoch):
        state = producers[producer_id] = ProducerState(producer_epoch)
    if state is not None and timestamp > state.last_timestamp:
        state.last_timestamp = timestamp


def check_marker(producers: PartitionProducers, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int) -> int:
    """Whether a coordinator's marker for `producer_id` may be written: an error code."""
    if coordinator_epoch < producers.coordinator_epochs.get(producer_id, -1):
        return TRANSACTION_COORDINATOR_FENCED
    state = producers.get(producer_id)
    if state is not None and producer_epoch < state.epoch:
        return INVALID_PRODUCER_EPOCH
    return NONE


def end_txn(producers: PartitionProducers, producer_id: int, producer_epoch: int,
            coordinator_epoch: int, kind: int, marker_offset: int, log: Log | None,
            timestamp: int = -1) -> AbortedTxn | None:
    """A marker of type `kind` (written at `timestamp`) was appended at `marker_offset`:
    the producer's open transaction ends there. Returns the aborted transaction when it
    was an abort of one with records here; it goes into the `.txnindex` when `log` is
    given (a replay of a log that holds it already passes None)."""
    state = producers.get(producer_id)
    if state is None or producer_epoch > state.epoch:
        # A marker written with a bumped epoch (a transaction aborted on timeout, or a
        # producer fenced): the old epoch's batches are fenced from now on.
        state = producers[producer_id] = ProducerState(producer_epoch)
    state.last_timestamp = max(state.last_timestamp, timestamp)
    producers.verifying.pop(producer_id, None)  # whatever it verified has ended
    if coordinator_epoch >= 0:
        producers.coordinator_epochs[producer_id] = coordinator_epoch
    first = producers.ongoing.pop(producer_id, None)
    if first is None:
        return None  # nothing of it is in this partition (a retried marker, or none written)
    producers.unreplicated.append((first, marker_offset, producer_id))
    if log is not None:
        producers.prune(log.high_watermark)  # a follower nobody reads from keeps it short
    if kind != CONTROL_ABORT:
        return None
    # Kafka's lastStableOffset(completedTxn): the first offset of the oldest other
    # transaction open, else past the marker; every replica computes the same.
    lso = min(producers.ongoing.values(), default=marker_offset + 1)
    txn = AbortedTxn(producer_id, first, marker_offset, lso)
    if log is not None:
        log.add_aborted_txn(txn)
    return txn


def record_replicated(producers: PartitionProducers, records: bytes | memoryview,
                      log: Log | None = None, aborted: list[AbortedTxn] | None = None) -> None:
    """Remember every idempotent batch of `records`, a leader's batches as a follower
    appended them (their offsets are the leader's), and the transactions they open and
    their markers close (an abort into `log`'s `.txnindex` when `log` is given, and onto
    `aborted` when that is given). Framing was checked by the append. Old Kafka's legacy
    messages (magic 0/1) have no producer: they are stepped over."""
    view = memoryview(records)
    pos = 0
    while len(view) - pos >= MAGIC_AT + 1:
        base_offset, batch_length = _FRAME.unpack_from(view, pos)
        if view[pos + MAGIC_AT] == 2 and len(view) - pos >= HEADER_SIZE:
            pid, epoch, base_seq, _ = PRODUCER.unpack_from(view, pos + PRODUCER_AT)
            attrs, last_delta = _ATTRS.unpack_from(view, pos + ATTRIBUTES_AT)
            max_ts = _MAX_TIMESTAMP.unpack_from(view, pos + MAX_TIMESTAMP_AT)[0]
            if attrs & ATTR_CONTROL:
                kind, coordinator_epoch = control_record(view, pos)
                if pid >= 0 and kind >= 0:
                    txn = end_txn(producers, pid, epoch, coordinator_epoch, kind, base_offset,
                                  log, max_ts)
                    if txn is not None and aborted is not None:
                        aborted.append(txn)
            else:
                if pid >= 0 and base_seq >= 0:
                    # Its sequences span its offsets (Kafka's lastSequence), also for a
                    # batch the cleaner emptied (no records, its header kept).
                    record(producers, (pid, epoch, base_seq, (base_seq + last_delta) % 2**31),
                           base_offset, max_ts if attrs & ATTR_LOG_APPEND_TIME else -1, max_ts)
                if attrs & ATTR_TRANSACTIONAL:
                    begin_txn(producers, pid, base_offset, epoch, max_ts)
        pos += LOG_OVERHEAD + batch_length


def from_log(log: Log, tail_bytes: int = TAIL_BYTES) -> PartitionProducers:
    """The producer state of `log` when the partition is taken on (start-up, a dir
    re-admitted): its latest snapshot and the batches after it replayed. Without one
    (a log never rolled since, or from before snapshots), the batches from the active
    segment's start, or from its last `tail_bytes` if they reach further back: every
    roll writes a snapshot (`snapshot_if_rolled`), so a transaction opened before the
    active segment would have been in one.

    The segments with transaction markers that the log's opening rescanned (recovery
    after an unclean stop) may hold abort markers their `.txnindex` lacks (a crash
    between the marker and its entry, a Kafka dir without them): the replay then starts
    at or before the first of them, and each one it covers gets its `.txnindex` rebuilt
    from its markers, as Kafka's segment recovery rebuilds it; read_committed consumers
    would otherwise be given the aborted records."""
    rescanned = log.recovery.txn_indexes_to_rebuild
    upto = min(log.log_end_offset, rescanned[0]) if rescanned else log.log_end_offset
    snap = None
    if log.snapshot_offsets_at_open:  # the loader's listing: no second look at the dir
        with log.guard.io("read producer snapshot", log.dir, writing=False):
            snap = producer_snapshot.latest(log.dir, upto, log.log_start_offset,
                                            known=log.snapshot_offsets_at_open)
    if snap is None:
        producers = PartitionProducers()
        offset = max(min(log.active_segment.base_offset, log.tail_offset(tail_bytes), upto),
                     log.log_start_offset)
    else:
        offset, entries = snap
        producers = from_snapshot(entries)
        producers.snapshot_offset = offset
    rebuilt = [base for base in rescanned if base >= offset]
    aborted: list[AbortedTxn] | None = [] if rebuilt else None
    end = log.log_end_offset
    while offset < end:  # the batches from there on, as a follower appends them
        data = log.read(offset, REPLAY_CHUNK)
        if not data:
            break
        record_replicated(producers, data, aborted=aborted)
        after = offset
        for b in iter_batches(data, verify_crc=False):
            after = max(after, b.next_offset if isinstance(b, Batch) else b.offset + 1)
        if after <= offset:
            break
        offset = after
    if aborted is not None:
        for name, count in log.rebuild_txn_indexes(rebuilt, aborted).items():
            _log.warning("%s: recovery rebuilt %s: %d aborted transactions",
                         log.dir.name, name, count)
    producers.prune(log.high_watermark)
    return producers


REPLAY_CHUNK = 1 << 20


def snapshot_entries(producers: PartitionProducers) -> list[producer_snapshot.Entry]:
    """The state as Kafka's snapshot holds it: per producer its last batch, epoch, last
    timestamp, last coordinator epoch and open transaction's first offset."""
    out = []
    for pid in sorted(set(producers) | set(producers.ongoing) | set(producers.coordinator_epochs)):
        state = producers.get(pid)
        last = state.batches[-1] if state is not None and state.batches else None
        delta = last.offset_delta if last is not None else 0
        out.append(producer_snapshot.Entry(
            pid, state.epoch if state is not None else -1,
            last.last_seq if last is not None else -1,
            last.last_offset if last is not None else -1, delta,
            state.last_timestamp if state is not None else -1,
            producers.coordinator_epochs.get(pid, -1), producers.ongoing.get(pid, -1)))
    return out


def from_snapshot(entries: list[producer_snapshot.Entry], *,
                  now_ms: int | None = None) -> PartitionProducers:
    """The state a snapshot holds. Its timestamp is each producer's last (the time a
    retry of its last batch is answered with, as Kafka answers it; the leader gives it
    only where the log stamps LogAppendTime); a producer without one counts from
    `now_ms` (default: the clock) towards its expiration."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    producers = PartitionProducers()
    for e in entries:
        if e.epoch >= 0:
            state = producers[e.producer_id] = ProducerState(
                e.epoch, last_timestamp=e.timestamp if e.timestamp >= 0 else now)
            if e.last_sequence >= 0 and e.last_offset >= 0:
                state.batches.append(BatchMeta(
                    (e.last_sequence - e.offset_delta) % 2**31, e.last_sequence,
                    e.last_offset - e.offset_delta, e.timestamp))
        if e.coordinator_epoch >= 0:
            producers.coordinator_epochs[e.producer_id] = e.coordinator_epoch
        if e.txn_first_offset >= 0:
            producers.ongoing[e.producer_id] = e.txn_first_offset
    return producers


def write_snapshot(producers: PartitionProducers, log: Log, offset: int | None = None) -> int:
    """Snapshot the state at `offset` (default: `log`'s end), on its dir's worker;
    returns that offset."""
    end = log.log_end_offset if offset is None else offset
    path = producer_snapshot.path(log.dir, end)
    with log.guard.io("write producer snapshot", path):
        producer_snapshot.write(log.dir, end, snapshot_entries(producers))
    return end


def snapshot_if_rolled(producers: PartitionProducers, log: Log, active_base: int) -> None:
    """After an append whose batches are not recorded yet: when it rolled the log (its
    active segment no longer starts at `active_base`), snapshot the state at the new
    segment's base, as Kafka does at each roll, so a restart replays at most the active
    segment. A failed write is the dir guard's to judge; the append stands."""
    base = log.active_segment.base_offset
    if base == active_base:
        return
    try:
        producers.snapshot_offset = write_snapshot(producers, log, base)
    except LogStoreError as err:
        _log.warning("%s: producer snapshot at roll not written: %s", log.dir.name, err)


class ProducerView(NamedTuple):
    """One producer as DescribeProducers shows it (Kafka's ProducerState)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def describe(producers: PartitionProducers) -> list[ProducerView]:
    """The partition's active producers (those with a state or an open transaction),
    by producer id: what a snapshot holds of each."""
    return [ProducerView(e.producer_id, e.epoch, e.last_sequence, e.timestamp,
                         e.coordinator_epoch, e.txn_first_offset)
            for e in snapshot_entries(producers)
            if e.producer_id in producers or e.producer_id in producers.ongoing]


class _LastEntries(Mapping[int, tuple[int, int]]):
    """Producer id -> (its last batch's last offset, or -1 when a marker with a new
    epoch came after it; its epoch): a live view of the producers, nothing copied
    (the cleaner looks at every compacted log, and reads this of the one it cleans)."""

    def __init__(self, producers: PartitionProducers):
        self._producers = producers

    def __getitem__(self, pid: int) -> tuple[int, int]:
        state = self._producers[pid]
        return (state.batches[-1].last_offset if state.batches else -1, state.epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(self._producers)

    def __len__(self) -> int:
        return len(self._producers)


def for_cleaner(producers: PartitionProducers, log: Log) -> ActiveProducers:
    """What the log cleaner must respect: the last stable offset, and each producer's
    last entry."""
    return ActiveProducers(producers.last_stable_offset(log.high_watermark,
                                                        log.log_start_offset),
                           _LastEntries(producers))


def truncate(producers: PartitionProducers, offset: int) -> None:
    """Forget the batches at or past `offset` (the log was cut there): a transaction
    opened there was never in the log, one whose marker was cut is open again."""
    producers.ongoing = {pid: first for pid, first in producers.ongoing.items()
                         if first < offset}
    for first, marker, pid in producers.unreplicated:
        if marker >= offset and first < offset:
            producers.ongoing[pid] = first
    producers.unreplicated = [t for t in producers.unreplicated if t[1] < offset]
    if producers.snapshot_offset > offset:
        producers.snapshot_offset = -1  # the log removed it
    for pid in list(producers):
        state = producers[pid]
        kept = [m for m in state.batches if m.first_offset < offset]
        if len(kept) != len(state.batches):
            state.batches.clear()
            state.batches.extend(kept)
        if not state.batches:
            del producers[pid]
