"""Log compaction, as Kafka's log cleaner does it (cleanup.policy=compact).

A compacted log keeps at least the latest record of every key. Its segments below the
first dirty offset (the `cleaner-offset-checkpoint` of its log dir) are clean; those
from there up to the first uncleanable offset (the active segment, the high
watermark, and any segment newer than `min.compaction.lag.ms`) are dirty. A log is
cleaned when its dirty bytes are over `min.cleanable.dirty.ratio` of its cleanable
bytes, the filthiest first (`grab_filthiest`). A clean (`Cleaner.steps`):

1. builds the key map (`OffsetMap`, Kafka's SkimpyOffsetMap: each key's 16-byte MD5
   -> its latest offset, as many keys as `log.cleaner.dedupe.buffer.size` holds at 24
   bytes each times the 0.9 load factor) over the dirty segments, the records decoded
   in C (`native.parse_records`); a full map ends the clean where it stopped;
2. takes the segments below that end in runs whose kept records fit one segment
   (size, index sizes, 31-bit relative offsets; `Cleaner._clean_run`), and copies each
   run into `<base>.log.cleaned` with its indexes, keeping a record when it is the
   latest of its key (or past the map),
   dropping records without a key, and keeping a tombstone (a null value) until its
   batch's delete horizon: the first clean that keeps a tombstone stamps its batch
   with `now + delete.retention.ms` (attribute bit 6, the horizon in baseTimestamp,
   timestamp deltas rewritten so every record keeps its timestamp) and a clean after
   that drops it. Batches keep their base offset, last offset delta, producer fields
   and leader epoch, so offsets removed are gaps that readers step over;
3. swaps each run's cleaned segment in (`Log.replace_segments`: `.cleaned` -> `.swap`,
   old segments deleted, `.swap` -> final, each step one the loader completes after a
   crash), and returns the new first dirty offset for the checkpoint.

A batch whose every record goes is dropped, except the last batch of each run, which
stays as an empty header (records count 0, its offsets and producer fields): so a
cleaned segment ends at the offset the run it replaces ended at, and a crash's `.swap`
says exactly which segments it replaces. Kafka keeps that header for the last batch
of a whole clean (and of each active producer); keeping it per run closes the case
where a crash leaves an old segment beside the swapped one, whose stale values a
later clean would keep once their tombstones expire. Followers accept empty batches,
as Kafka's do.

Old logs' magic 0/1 messages (Kafka dirs taken over) are compacted in their own format
(`Cleaner._filter_legacy`): the same rule per message, a compressed wrapper rewritten
with what it keeps, a tombstone kept by its segment's modification time (Kafka's legacy
delete horizon), since such messages carry no horizon of their own.

Transactions (`_Transactions`, Kafka's rules): a clean never passes the partition's
last stable offset (`ActiveProducers`, from the replica layer), so every transaction
it meets is decided. An aborted transaction's records (the `.txnindex` entries say
which) never enter the key map and are removed whatever their keys; its abort marker
stays in that clean, with its entry in the cleaned segment's `.txnindex` (swapped in
with the segment), and goes in a later one once its delete horizon has passed, as a
tombstone does; a commit marker goes the same way once no batch of its transaction
is left before it. The last entry of each active producer stays (as an empty header
when nothing of it is kept), so its sequence and epoch checks outlive a restart.

The work is a generator, so the daemon can run it on the log dir's worker one bounded
step at a time between appends (docs/architecture.md "Threads and workers"). A step
that finds the log changed under it (retention, truncation, close: `Log.generation`)
gives up; so does closing the generator. Either way its `.cleaned` files are removed.

Errors: every filesystem call runs in the log dir's IoGuard, so ENOSPC while writing a
`.cleaned` file is the SATURATED verdict (never OFFLINE) and raises
`LogDirSaturatedError` after the partial files are removed; `NoRoomToCleanError` says
a clean did not start a run because the disk has less free space than the run's size.
A batch that does not decode raises `CorruptRecordError`: the daemon stops cleaning that
log. Not thread-safe: the log's owner runs every step.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import native
from native import BatchInfo, ScanStatus

from . import names, txnindex
from .config import LogConfig
from .errors import CorruptRecordError, LogStoreError
from .index import OffsetIndex, TimeIndex
from .log import Log
from .names import TopicPartition
from .records import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    Codec,
    LegacyMessage,
    compress,
    control_record,
    decode_legacy,
    decompress,
    legacy_wrapper,
    write_varint,
)
from .segment import LogSegment
from .txnindex import AbortedTxn

if TYPE_CHECKING:
    from .logdir import LogDir

DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_IO_BUFFER_BYTES = 1024 * 1024  # log.cleaner.io.buffer.size (Kafka: 512 KiB x 2)
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
MAP_ENTRY_BYTES = 24  # a 16-byte MD5 and an 8-byte offset, as Kafka counts
STEP_BYTES = 1024 * 1024  # bytes read between two yields: ~30 ms of a worker (benchmarks)
MAX_RELATIVE = 2**31 - 1


class NoRoomToCleanError(LogStoreError):
    """The disk lacks the free space a run's cleaned copy may need: not a disk fault."""


class CleanAbortedError(LogStoreError):
    """The log changed under a clean (retention, truncation, close); nothing was swapped."""


# ---- the key map ----------------------------------------------------------------------


def _md5(data: bytes | memoryview) -> Any:
    """The MD5 of a key longer than 15 bytes (the key map's hash, as Kafka's default)."""
    return hashlib.md5(data, usedforsecurity=False)


class OffsetMap:
    """Key -> latest offset, bounded like Kafka's SkimpyOffsetMap: a key is kept as its
    16-byte MD5 (one shorter than that as itself), and the map takes
    `slots * LOAD_FACTOR` keys, `slots` being the buffer size over 24 bytes. Two long
    keys with one MD5 would make the cleaner drop the older key's latest record: the
    odds are MD5's, as in Kafka."""

    def __init__(self, buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
                 load_factor: float = LOAD_FACTOR):
        self.slots = max(buffer_bytes // MAP_ENTRY_BYTES, 1)
        self.capacity = max(int(self.slots * load_factor), 1)
        self.keys: dict[bytes, int] = {}  # _hash(key) -> offset
        self.latest_offset = -1

    @staticmethod
    def _hash(key: bytes) -> bytes:
        # Keys under 16 bytes stand for themselves: they cannot collide with a digest
        # (16 bytes), nor with each other; longer ones go by their MD5, as in Kafka.
        return key if len(key) < 16 else _md5(key).digest()

    def clear(self) -> None:
        self.keys.clear()
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self.keys)

    @property
    def full(self) -> bool:
        return len(self.keys) >= self.capacity

    @property
    def utilization(self) -> float:
        return len(self.keys) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        self.keys[self._hash(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, or -1 when the map has not seen it."""
        return self.keys.get(self._hash(key), -1)


# ---- records inside a batch -----------------------------------------------------------


# A record as native.parse_records gives it: (offset_delta, timestamp_delta, start,
# ts_at, after_ts, end, key_at, key_len, value_len, 0); positions in the records area.
_OFFSET, _TS, _START, _TS_AT, _AFTER_TS, _END, _KEY_AT, _KEY_LEN, _VALUE_LEN = range(9)


def _records(payload: bytes | memoryview, count: int, where: str) -> list[tuple[int, ...]]:
    """The records of a batch's uncompressed payload (the C decoder, native/records.c)."""
    recs = native.parse_records(payload, count)
    if recs is None:
        raise CorruptRecordError(f"{where}: its records do not decode")
    return recs


def _payload(batch: memoryview, info: BatchInfo, where: str) -> bytes | memoryview:
    codec = info.attributes & ATTR_CODEC_MASK
    if not codec:
        return batch[HEADER_SIZE:]
    try:
        return decompress(Codec(codec), batch[HEADER_SIZE:])
    except ValueError as err:
        raise CorruptRecordError(f"{where}: unknown codec {codec}") from err


# ---- what to clean --------------------------------------------------------------------


@dataclass(frozen=True)
class ActiveProducers:
    """What a clean of a log must respect of its partition's producers, which the
    replica layer knows (daemon.replica.producer) and a log alone does not."""

    last_stable_offset: int  # the clean stays below it: no open transaction is cleaned
    # producer id -> (the last offset of its last data batch, or -1 when its last entry
    # is a marker; its epoch): that batch, or that marker, stays (as an empty header if
    # nothing of it is kept), so its idempotence and fencing outlive a restart.
    last_entries: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def keeps(self, info: BatchInfo) -> bool:
        """Whether `info` is the last entry of an active producer (Kafka's
        lastRecordsOfActiveProducers)."""
        entry = self.last_entries.get(info.producer_id) if info.producer_id >= 0 else None
        if entry is None:
            return False
        if entry[0] >= 0:
            return info.last_offset == entry[0]
        return bool(info.attributes & ATTR_CONTROL) and info.producer_epoch == entry[1]


ProducersOf = Callable[[TopicPartition, Log], ActiveProducers]


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's clean and dirty extents (Kafka's LogToClean)."""

    topic_partition: TopicPartition
    log: Log
    first_dirty: int
    first_uncleanable: int  # a segment's base offset: the clean stops below it
    clean_bytes: int
    cleanable_bytes: int
    reset_checkpoint: bool = False  # the checkpointed offset was outside the log
    overdue: bool = False  # max.compaction.lag.ms passed for a dirty segment
    producers: ActiveProducers | None = None  # None: a log alone (the high watermark bounds)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def due(self) -> bool:
        """Over min.cleanable.dirty.ratio, or overdue by max.compaction.lag.ms."""
        if self.cleanable_bytes <= 0:
            return False
        return self.overdue or self.ratio > self.log.config.min_cleanable_dirty_ratio


def cleanable(tp: TopicPartition, log: Log, checkpointed: int | None, now_ms: int,
              producers: ActiveProducers | None = None) -> LogToClean:
    """Where `log`'s dirty section starts and ends (Kafka's cleanableOffsets): below
    the active segment, the high watermark, the last stable offset and the segments
    newer than min.compaction.lag.ms."""
    segments = log.segments
    start = log.log_start_offset
    first_dirty = start if checkpointed is None else checkpointed
    reset = first_dirty < start or first_dirty > log.log_end_offset
    if reset:
        first_dirty = start
    bound = min(log.active_segment.base_offset, log.high_watermark)
    if producers is not None:
        bound = min(bound, producers.last_stable_offset)
    lag = log.config.min_compaction_lag_ms
    overdue = False
    for seg in segments[:-1]:
        if seg.base_offset < first_dirty and seg.next_offset <= first_dirty:
            continue
        # (a segment without timestamps counts from its file's time, as Kafka's
        # largestTimestamp: old logs' magic 0 messages)
        if lag > 0 and seg.largest_timestamp() > now_ms - lag:
            bound = min(bound, seg.base_offset)
        first_ts = seg.roll_base_timestamp()
        if first_ts >= 0 and now_ms - first_ts > log.config.max_compaction_lag_ms:
            overdue = True
    bound = max(first_dirty, bound)
    # Whole segments only: the one holding `bound` is the first not cleaned.
    first_uncleanable = log.active_segment.base_offset
    if bound < first_uncleanable:
        first_uncleanable = next(s.base_offset for s in reversed(segments)
                                 if s.base_offset <= bound or s is segments[0])
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in segments
                if s.next_offset > first_dirty and s.base_offset < first_uncleanable)
    return LogToClean(tp, log, first_dirty, first_uncleanable, clean, dirty, reset, overdue,
                      producers)


def grab_filthiest(logs: Mapping[TopicPartition, Log], checkpoints: Mapping[TopicPartition, int],
                   now_ms: int, skip: Iterable[TopicPartition] = (),
                   producers_of: ProducersOf | None = None) -> LogToClean | None:
    """The compacted log with the highest dirty ratio among those due, or None."""
    skip = set(skip)
    due = [c for tp, log in logs.items() if log.config.compacted and tp not in skip
           and (c := cleanable(tp, log, checkpoints.get(tp), now_ms,
                               producers_of(tp, log) if producers_of else None)).due]
    return max(due, key=lambda c: c.ratio, default=None)


# ---- transactions ---------------------------------------------------------------------


class _Transactions:
    """The transactions one pass over a log meets, batch by batch in offset order
    (Kafka's CleanedTransactionMetadata). Everything below the last stable offset is
    decided, so a transactional batch is either in an aborted transaction (one of the
    `.txnindex` entries given: its records go, whatever their keys) or a committed one.
    A marker may go once nothing of its transaction is left before it: an abort marker
    stays in the clean that removes its transaction's batches (its entry then goes into
    the cleaned segment's `.txnindex`, `kept`), a commit marker as long as a batch of its
    transaction is met before it. A marker that may go is stamped with a delete
    horizon and removed by the first clean after it, as tombstones are, so a consumer
    that read the transaction's records reaches the marker first."""

    def __init__(self, aborted: Iterable[AbortedTxn]):
        self._pending = sorted(set(aborted), key=lambda t: t.first_offset, reverse=True)
        self._aborted: dict[int, list[Any]] = {}  # producer id -> [its txn, a batch met]
        self._committed: set[int] = set()  # producers whose batches were met, marker not yet
        self.kept: list[AbortedTxn] = []  # the entries of the cleaned segment being written

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[-1].first_offset <= offset:
            txn = pending.pop()
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def aborted(self, info: BatchInfo) -> bool:
        """Whether the data batch `info` belongs to an aborted transaction."""
        self._reach(info.last_offset)
        if not info.attributes & ATTR_TRANSACTIONAL:
            return False
        txn = self._aborted.get(info.producer_id)
        if txn is not None:
            txn[1] = True
            return True
        self._committed.add(info.producer_id)
        return False

    def marker_done(self, info: BatchInfo, kind: int) -> bool:
        """Whether the control batch `info` (a marker of type `kind`) may go."""
        self._reach(info.last_offset)
        if info.records_count == 0:
            return True  # a marker an earlier clean emptied
        pid = info.producer_id
        if kind == CONTROL_ABORT:
            txn = self._aborted.pop(pid, None)
            if txn is not None and txn[1]:
                self.kept.append(txn[0])
                return False
            return True
        if kind == CONTROL_COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False  # a control record of another kind stays


# ---- the clean ------------------------------------------------------------------------


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    map_bytes: int = 0
    segments_cleaned: int = 0
    groups: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


class Cleaner:
    """Cleans one log at a time with its key map (Kafka's Cleaner). Not thread-safe."""

    def __init__(self, offset_map: OffsetMap | None = None, *,
                 io_buffer_bytes: int = DEFAULT_IO_BUFFER_BYTES, step_bytes: int = STEP_BYTES,
                 check_space: bool = True):
        self.map = offset_map or OffsetMap()
        self.io_buffer_bytes = io_buffer_bytes
        self.step_bytes = step_bytes
        self.check_space = check_space
        self.stats = CleanerStats()
        self.legacy_delete_horizon_ms = 0  # set by each clean (steps)

    def clean(self, job: LogToClean, now_ms: int | None = None) -> int:
        """The whole clean in one call; returns the new first dirty offset."""
        gen = self.steps(job, now_ms)
        while True:
            try:
                next(gen)
            except StopIteration as done:
                return done.value

    def steps(self, job: LogToClean, now_ms: int | None = None) -> Generator[None, None, int]:
        """The clean, yielding after every `step_bytes` read; its return value is the new
        first dirty offset. `now_ms` decides the tombstones (default: the clock)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        log = job.log
        self.stats = CleanerStats()
        generation = log.generation
        yield from self._build_map(job, generation)
        end = self.map.latest_offset + 1
        segments = [s for s in log.segments[:-1] if s.base_offset < end]
        txns = _Transactions(log.aborted_txns(segments[0].base_offset, segments[-1].next_offset)
                             if segments else ())
        # Old logs' tombstones (magic 0/1 messages have no delete horizon of their own):
        # kept in a segment modified after delete.retention.ms before the last clean
        # segment was (Kafka's legacyDeleteHorizonMs; none clean yet: all kept).
        clean = [s for s in log.segments if s.base_offset < job.first_dirty]
        self.legacy_delete_horizon_ms = (
            _modified_ms(log, clean[-1]) - log.config.delete_retention_ms if clean else 0)
        i = 0
        while i < len(segments):
            self._check(log, generation)
            count = yield from self._clean_run(log, segments, i, job, txns, now, generation)
            i += count
            generation = log.generation
        return end

    @staticmethod
    def _check(log: Log, generation: int) -> None:
        if log.generation != generation:
            raise CleanAbortedError(f"{log.dir.name} changed during a clean (retention, "
                                    "truncation or close); cleaning again later")

    def _batches(self, log: Log, seg: LogSegment, start: int, generation: int
                 ) -> Generator[None | tuple[memoryview, list[BatchInfo]], None, None]:
        """Chunks of `seg`'s batches from file position `start`; yields None between steps."""
        pos = start
        size = self.io_buffer_bytes
        since_step = 0
        while pos < seg.size:
            self._check(log, generation)
            want = min(size, seg.size - pos)
            with log.guard.io("clean: read", seg.log_path, writing=False):
                data = memoryview(seg.read_exact(pos, want))
            res = native.scan_batches(data, base_position=pos, legacy=True)
            if res.status not in (ScanStatus.OK, ScanStatus.TORN) or (
                    res.status is ScanStatus.TORN and not len(res) and want == seg.size - pos):
                raise CorruptRecordError(f"{seg.log_path}: {res.detail} (cleaner)")
            if not len(res):  # a batch bigger than the buffer: read it whole
                size = int.from_bytes(data[8:12], "big") + 12
                continue
            yield data, list(res)
            pos += res.valid_bytes
            since_step += res.valid_bytes
            if since_step >= self.step_bytes:
                since_step = 0
                yield None

    def _build_map(self, job: LogToClean, generation: int) -> Generator[None, None, None]:
        """Map every key of the dirty section to its latest offset (Kafka's buildOffsetMap)."""
        m = self.map
        m.clear()
        keys, capacity = m.keys, m.capacity
        log = job.log
        start, stop = job.first_dirty, job.first_uncleanable
        dirty = [s for s in log.segments[:-1] if s.next_offset > start and s.base_offset < stop]
        # An aborted transaction's keys never enter the map: its records are not the
        # latest of their keys, whatever their offsets.
        txns = _Transactions(log.aborted_txns(start, stop))
        for i, seg in enumerate(dirty):
            position = seg.offset_index.lookup(start)[1] if seg.base_offset < start else 0
            for chunk in self._batches(log, seg, position, generation):
                if chunk is None:
                    yield
                    continue
                data, infos = chunk
                for info in infos:
                    if info.last_offset < start:
                        continue
                    if info.base_offset >= stop:
                        break
                    if info.magic < 2:  # an old log's message, or compressed wrapper
                        at = info.position - infos[0].position
                        for msg in _legacy_messages(data[at:at + info.size], info):
                            if msg.key is not None and msg.offset >= start:
                                if m.full:
                                    return  # the map ends the clean here
                                m.put(msg.key, msg.offset)
                        self.stats.map_records += 1
                        m.latest_offset = max(m.latest_offset, info.last_offset)
                        self.stats.map_bytes += info.size
                        continue
                    if info.attributes & ATTR_CONTROL:
                        txns.marker_done(info, _marker_kind(data, info, infos[0]))
                        continue
                    if txns.aborted(info):
                        m.latest_offset = max(m.latest_offset, info.last_offset)
                        continue
                    at = info.position - infos[0].position
                    batch = data[at:at + info.size]
                    where = f"{seg.log_path} batch at {info.position}"
                    payload = _payload(batch, info, where)
                    base = info.base_offset
                    # OffsetMap.put, inlined: this loop is the map's hot path.
                    for rec in _records(payload, info.records_count, where):
                        at = rec[_KEY_AT]
                        offset = base + rec[_OFFSET]
                        if at >= 0 and offset >= start:
                            if len(keys) >= capacity:
                                return  # the map ends the clean here
                            key = bytes(payload[at:at + rec[_KEY_LEN]])
                            keys[key if len(key) < 16 else _md5(key).digest()] = offset
                            if offset > m.latest_offset:
                                m.latest_offset = offset
                    self.stats.map_records += info.records_count
                    m.latest_offset = max(m.latest_offset, info.last_offset)
                    self.stats.map_bytes += info.size
            # Gaps at a segment's end belong to it: the next clean starts at the next one.
            nxt = dirty[i + 1].base_offset if i + 1 < len(dirty) else stop
            m.latest_offset = max(m.latest_offset, nxt - 1)

    def _clean_run(self, log: Log, segments: list[LogSegment], first: int, job: LogToClean,
                   txns: _Transactions, now: int, generation: int
                   ) -> Generator[None, None, int]:
        """Copy what survives of segments[first:] into `<base>.*.cleaned` for as long as
        it fits one segment, and swap it in; returns how many segments it replaced.

        A run grows while what it has kept so far plus the next segment, whole, fits
        `segment.bytes` and its indexes, and its offsets stay within 31 bits of its
        base (Kafka's groupSegmentsBySize counts the segments' sizes before cleaning;
        counting what is kept merges more, so fewer, fuller segments come out, and
        segments whose records all went do not each become a segment of one empty
        batch: a consumer would fetch those one by one, and librdkafka takes ten such
        fetches in a row for a message too large).
        """
        config = log.config
        head = segments[first]
        base = head.base_offset
        if self.check_space:
            # A run keeps at most a segment's worth (or its first segment, if bigger).
            need = max(head.size, min(config.segment_bytes,
                                      sum(s.size for s in segments[first:])))
            with log.guard.io("clean: space probe", log.dir, writing=True):
                avail = native.space_probe(str(log.dir)).avail_bytes
            if avail < need:
                raise NoRoomToCleanError(
                    f"{log.dir.name}: cleaning segments from {base} needs up to {need} bytes, "
                    f"{avail} free in {log.guard.log_dir}")
        out = _CleanedSegment(log, base, self.io_buffer_bytes)
        txns.kept = out.aborted_txns
        producers = job.producers
        run: list[LogSegment] = []
        last: BatchInfo | None = None  # the run's last batch, and whether it was kept
        last_kept = False
        try:
            out.open()
            k = first
            while True:
                seg = segments[k]
                run.append(seg)
                legacy_deletes: bool | None = None  # read at its first legacy message
                for chunk in self._batches(log, seg, 0, generation):
                    if chunk is None:
                        # Synced step by step, so the swap's sync (on the dir's worker,
                        # before appends waiting there) has little left to write.
                        out.sync_data()
                        yield
                        continue
                    data, infos = chunk
                    for info in infos:
                        at = info.position - infos[0].position
                        batch = data[at:at + info.size]
                        if info.magic < 2:
                            if legacy_deletes is None:
                                legacy_deletes = (_modified_ms(log, seg)
                                                  > self.legacy_delete_horizon_ms)
                            kept = self._filter_legacy(batch, info, legacy_deletes)
                            last, last_kept = info, kept is not None
                            if kept is not None:
                                out.append(kept)
                            self.stats.bytes_read += info.size
                            continue
                        kept = self._filter(batch, info, txns, now, config.delete_retention_ms,
                                            f"{seg.log_path} batch at {info.position}")
                        if kept is None and producers is not None and producers.keeps(info):
                            kept = _empty_batch(info)  # an active producer's last entry
                        if kept is not None:
                            out.append(kept)
                        last, last_kept = info, kept is not None
                        self.stats.bytes_read += info.size
                self.stats.segments_cleaned += 1
                nxt = segments[k + 1] if k + 1 < len(segments) else None
                if nxt is None or not self._fits(out, nxt, segments, k, base,
                                                 job.first_uncleanable, config):
                    break
                k += 1
            if last is not None and not last_kept:
                out.append(_empty_batch(last))  # the run's end survives (module doc)
            if not out.written:
                return len(run)  # only empty segments: nothing to swap in
            self._check(log, generation)
            out.finish()
            log.replace_segments(run)
            self.stats.groups += 1
            self.stats.bytes_written += out.position
            return len(run)
        finally:
            out.discard()

    @staticmethod
    def _fits(out: _CleanedSegment, nxt: LogSegment, segments: list[LogSegment], k: int,
              base: int, first_uncleanable: int, config: LogConfig) -> bool:
        """Whether `nxt` joins the run: what the run kept so far and `nxt` whole fit one
        segment and its indexes, and the offsets fit 31 bits of the run's base."""
        assert out.offset_index is not None and out.time_index is not None
        last = segments[k + 2].base_offset - 1 if k + 2 < len(segments) else first_uncleanable - 1
        return (out.size + nxt.size <= config.segment_bytes
                and out.offset_index.size_bytes + nxt.offset_index.size_bytes
                <= config.max_index_bytes
                and out.time_index.size_bytes + nxt.time_index.size_bytes
                <= config.max_index_bytes
                and last - base <= MAX_RELATIVE)

    def _filter_legacy(self, batch: memoryview, info: BatchInfo, retain_deletes: bool
                       ) -> memoryview | bytearray | None:
        """An old log's magic 0/1 message as it survives the clean (Kafka's cleaner keeps
        the format it finds): the latest of its key is kept, a tombstone while its
        segment is inside the legacy delete horizon, a message without a key goes; a
        compressed wrapper keeps what survives of its inner messages, rewritten in a
        wrapper of its magic and codec when some went."""
        msg = decode_legacy(batch, info.position)
        inner = _legacy_messages(batch, info)
        latest = self.map.latest_offset
        kept = [m for m in inner
                if m.offset > latest or (m.key is not None and m.offset >= self.map.get(m.key)
                                         and (m.value is not None or retain_deletes))]
        self.stats.records_read += len(inner)
        self.stats.records_kept += len(kept)
        if not kept:
            return None
        if len(kept) == len(inner):
            return batch
        return legacy_wrapper(msg, kept)

    def _filter(self, batch: memoryview, info: BatchInfo, txns: _Transactions, now: int,
                delete_retention_ms: int, where: str) -> memoryview | bytes | None:
        """The batch as it survives the clean: itself, rewritten, or None (all gone)."""
        attrs = info.attributes
        horizon_set = bool(attrs & ATTR_DELETE_HORIZON)
        if attrs & ATTR_CONTROL:
            if not txns.marker_done(info, _marker_kind(batch, info, info)):
                return batch
            if horizon_set:  # stamped by an earlier clean: kept until the horizon
                return batch if now < info.base_timestamp else None
            recs = _records(batch[HEADER_SIZE:], info.records_count, where)
            return _rewritten(batch, info, batch[HEADER_SIZE:], recs, now + delete_retention_ms)
        if txns.aborted(info):
            self.stats.records_read += info.records_count
            return None
        m = self.map
        keep_tombstones = not horizon_set or now < info.base_timestamp
        payload = _payload(batch, info, where)
        recs = _records(payload, info.records_count, where)
        kept = []
        tombstones = False
        base = info.base_offset
        latest = m.latest_offset
        keys = m.keys
        for rec in recs:
            offset = base + rec[_OFFSET]
            tombstone = rec[_VALUE_LEN] < 0
            at = rec[_KEY_AT]
            if offset > latest:
                keep = True
            elif at < 0:
                keep = False  # Kafka's cleaner drops records without a key
            else:
                key = payload[at:at + rec[_KEY_LEN]]  # OffsetMap.get, inlined
                found = keys.get(bytes(key) if len(key) < 16 else _md5(key).digest(), -1)
                keep = offset >= found and (not tombstone or keep_tombstones)
            if keep:
                kept.append(rec)
                tombstones |= tombstone
        self.stats.records_read += len(recs)
        self.stats.records_kept += len(kept)
        if not kept:
            return None
        stamp = tombstones and not horizon_set
        if len(kept) == len(recs) and not stamp:
            return batch
        return _rewritten(batch, info, payload, kept,
                          now + delete_retention_ms if stamp else None)


def _legacy_messages(batch: memoryview, info: BatchInfo) -> list[LegacyMessage]:
    """The messages a magic 0/1 message stands for: itself, or a compressed wrapper's
    inner ones with their absolute offsets. CorruptRecordError when it does not decode."""
    try:
        return decode_legacy(batch, info.position).messages()
    except (struct.error, ValueError) as err:
        raise CorruptRecordError(f"legacy message at {info.position} does not decode: {err}",
                                 position=info.position, reason="legacy") from err


def _modified_ms(log: Log, seg: LogSegment) -> int:
    """When `seg`'s `.log` was last written (Kafka's LogSegment.lastModified)."""
    with log.guard.io("clean: stat", seg.log_path, writing=False):
        return seg.last_modified_ms()


def _marker_kind(data: memoryview, info: BatchInfo, first: BatchInfo) -> int:
    """The type of the marker `info`, a control batch in `data` (whose first batch is
    `first`): CONTROL_ABORT, CONTROL_COMMIT, or -1 for an empty or other control batch."""
    if info.records_count == 0:
        return -1
    return control_record(data, info.position - first.position)[0]


def _rewritten(batch: memoryview, info: BatchInfo, payload: bytes | memoryview,
               kept: list[tuple[int, ...]], horizon: int | None) -> bytearray:
    """`batch` with only the records `kept` (from `payload`, its records uncompressed),
    and stamped with the delete `horizon` (attribute bit 6, the horizon in
    baseTimestamp, each record's timestamp delta rewritten so it keeps its timestamp)
    unless that is None."""
    attrs = info.attributes
    base_ts = info.base_timestamp
    new_base_ts = base_ts if horizon is None else horizon
    body = bytearray()
    for rec in kept:
        if new_base_ts == base_ts:
            body += payload[rec[_START]:rec[_END]]
        else:
            rest = bytearray(payload[rec[_TS_AT] - 1:rec[_TS_AT]])  # attributes
            write_varint(rest, base_ts + rec[_TS] - new_base_ts)
            rest += payload[rec[_AFTER_TS]:rec[_END]]
            write_varint(body, len(rest))
            body += rest
    if attrs & ATTR_LOG_APPEND_TIME:
        max_ts = info.max_timestamp
    else:
        max_ts = max(base_ts + rec[_TS] for rec in kept)
    codec = attrs & ATTR_CODEC_MASK
    data = compress(Codec(codec), bytes(body)) if codec else body
    new_attrs = attrs if horizon is None else attrs | ATTR_DELETE_HORIZON
    out = bytearray(HEADER_SIZE) + data
    HEADER.pack_into(out, 0, info.base_offset, len(out) - 12, info.partition_leader_epoch,
                     2, 0, new_attrs, info.last_offset_delta, new_base_ts, max_ts,
                     info.producer_id, info.producer_epoch, info.base_sequence, len(kept))
    struct.pack_into(">I", out, 17, native.crc32c(memoryview(out)[CRC_START:]))
    return out


def _empty_batch(info: BatchInfo) -> bytearray:
    """The header alone of a batch whose records all went (Kafka's writeEmptyHeader):
    its offsets, producer fields and epoch, both timestamps its max, no records."""
    keep = ATTR_LOG_APPEND_TIME | ATTR_CONTROL | 0x10  # timestamp type, control, transactional
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, info.base_offset, HEADER_SIZE - 12, info.partition_leader_epoch, 2,
                     0, info.attributes & keep, info.last_offset_delta, info.max_timestamp,
                     info.max_timestamp, info.producer_id, info.producer_epoch,
                     info.base_sequence, 0)
    struct.pack_into(">I", out, 17, native.crc32c(memoryview(out)[CRC_START:]))
    return out


class _CleanedSegment:
    """`<base>.log.cleaned` and its indexes, written as the segment's own appends would
    index them (docs/formats.md "Segment files"), and its `.txnindex.cleaned` when the
    clean kept aborted transactions' markers, then synced (`finish`)."""

    def __init__(self, log: Log, base: int, write_bytes: int):
        self.log = log
        self.write_bytes = write_bytes
        self.base = base
        stem = names.offset_file_stem(base)
        cleaned = names.CLEANED_SUFFIX
        self.paths = [log.dir / (stem + s + cleaned)
                      for s in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX,
                                names.TXN_INDEX_SUFFIX)]
        self.aborted_txns: list[AbortedTxn] = []  # in marker order, as Kafka's index
        self.guard = log.guard
        self.fd = -1
        self.offset_index: OffsetIndex | None = None
        self.time_index: TimeIndex | None = None
        self.position = 0
        self.pending = bytearray()
        self.last_indexed = 0
        self.max_ts = -1
        self.offset_of_max_ts = base
        self.interval = log.config.index_interval_bytes

    @property
    def size(self) -> int:
        """Bytes of batches taken so far (written or buffered)."""
        return self.position + len(self.pending)

    @property
    def written(self) -> bool:
        return self.size > 0

    def open(self) -> None:
        with self.guard.io("clean: create", self.paths[0], writing=True):
            self.fd = os.open(self.paths[0], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            max_index = self.log.config.max_index_bytes
            self.offset_index = OffsetIndex(self.paths[1], self.base, max_index, writable=True)
            self.time_index = TimeIndex(self.paths[2], self.base, max_index, writable=True)

    def append(self, batch: bytes | bytearray | memoryview) -> None:
        info = native.scan_batches(batch, verify_crc=False, max_batches=1, legacy=True)[0]
        pos = self.position + len(self.pending)
        if info.max_timestamp > self.max_ts:
            self.max_ts, self.offset_of_max_ts = info.max_timestamp, info.last_offset
        assert self.offset_index is not None and self.time_index is not None
        if pos - self.last_indexed > self.interval and not (
                self.offset_index.is_full or self.time_index.is_full):
            with self.guard.io("clean: index", self.paths[1], writing=True):
                self.offset_index.append(info.last_offset, pos)
                self.time_index.maybe_append(self.max_ts, self.offset_of_max_ts)
            self.last_indexed = pos
        self.pending += batch
        if len(self.pending) >= self.write_bytes:
            self._write()

    def _write(self) -> None:
        if self.pending:
            with self.guard.io("clean: write", self.paths[0], writing=True):
                native.pwrite_all(self.fd, self.pending, self.position, path=str(self.paths[0]))
            self.position += len(self.pending)
            self.pending.clear()

    def sync_data(self) -> None:
        """Write what is buffered and fdatasync the `.cleaned` log written so far."""
        self._write()
        if self.position:
            with self.guard.io("clean: sync", self.paths[0], writing=True):
                native.fdatasync(self.fd, path=str(self.paths[0]))

    def finish(self) -> None:
        """Write what is buffered, close the indexes as a roll does, sync everything."""
        self._write()
        assert self.offset_index is not None and self.time_index is not None
        with self.guard.io("clean: sync", self.paths[0], writing=True):
            if self.position:
                self.time_index.maybe_append(self.max_ts, self.offset_of_max_ts, at_roll=True)
            self.offset_index.trim()
            self.time_index.trim()
            self.offset_index.sync()
            self.time_index.sync()
            native.fdatasync(self.fd, path=str(self.paths[0]))
        if self.aborted_txns:
            with self.guard.io("clean: transaction index", self.paths[3], writing=True):
                fd = os.open(self.paths[3], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    native.pwrite_all(fd, txnindex.encode(self.aborted_txns), 0,
                                      path=str(self.paths[3]))
                    native.fdatasync(fd, path=str(self.paths[3]))
                finally:
                    os.close(fd)
        self._close()

    def _close(self) -> None:
        for close in (lambda: self.offset_index and self.offset_index.close(trim=False, write=False),
                      lambda: self.time_index and self.time_index.close(trim=False, write=False),
                      lambda: self.fd >= 0 and os.close(self.fd)):
            try:
                close()
            except OSError:
                pass
        self.offset_index = self.time_index = None
        self.fd = -1

    def discard(self) -> None:
        """Close and remove whatever `.cleaned` files are left (after a swap, none)."""
        self._close()
        for path in self.paths:
            try:
                with self.guard.io("clean: remove .cleaned", path):
                    path.unlink(missing_ok=True)
            except LogStoreError:
                pass  # the guard has reported it; the loader removes it at the next start


# ---- a log dir's cleaning -------------------------------------------------------------


class LogDirCleaner:
    """The cleaning of one log dir's compacted logs, one bounded step per `step` call
    (the daemon runs each on the dir's worker, between appends). Keeps the dir's
    `cleaner-offset-checkpoint` (`LogDir.cleaner_offsets`) and the logs it gave up on
    (`uncleanable`: a batch that does not decode). Not thread-safe."""

    def __init__(self, logdir: LogDir, cleaner: Cleaner | None = None,
                 producers_of: ProducersOf | None = None):
        self.logdir = logdir
        self.cleaner = cleaner or Cleaner()
        self.producers_of = producers_of  # None: the logs' high watermarks bound the cleans
        self.uncleanable: dict[TopicPartition, str] = {}
        self.job: LogToClean | None = None
        self._gen: Generator[None, None, int] | None = None
        self.cleaned: list[tuple[TopicPartition, int, CleanerStats]] = []  # the latest last

    @property
    def busy(self) -> bool:
        return self._gen is not None

    def step(self, now_ms: int | None = None) -> bool:
        """Start a clean of the filthiest log that is due, or run the next step of the
        one under way. True while there is work (call again), False when none is due.
        On a dir its guard knows to be SATURATED or OFFLINE the clean under way is
        given up and the guard's error raised, without touching the disk.

        A clean the log changed under is dropped (`CleanAbortedError` is not raised); any
        other error ends the clean (its `.cleaned` files removed) and is raised.
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            # A SATURATED (or OFFLINE) dir cleans nothing: a clean needs room for new
            # files, and the one under way gives its `.cleaned` files' space back.
            self.logdir.guard.check_usable("clean", writing=True)
        except LogStoreError:
            self.abort()
            raise
        if self._gen is None:
            ld = self.logdir
            self._follow_truncations()
            with ld.guard.io("clean: choose a log", ld.path, writing=False):
                job = grab_filthiest(ld.logs, ld.cleaner_offsets, now, skip=self.uncleanable,
                                     producers_of=self.producers_of)
            if job is None:
                return False
            self.job, self._gen = job, self.cleaner.steps(job, now)
        assert self.job is not None and self._gen is not None
        job = self.job
        try:
            next(self._gen)
        except StopIteration as done:
            self._reset()
            self.logdir.cleaner_offsets[job.topic_partition] = done.value
            self.logdir.write_cleaner_checkpoint()
            self.cleaned.append((job.topic_partition, done.value, self.cleaner.stats))
            del self.cleaned[:-100]
        except CleanAbortedError:
            self._reset()
        except CorruptRecordError as err:
            self._reset()
            self.uncleanable[job.topic_partition] = str(err)
            raise
        except BaseException:
            self._reset()
            raise
        return True

    def _reset(self) -> None:
        self.job = self._gen = None

    def _follow_truncations(self) -> None:
        """A log truncated below its checkpointed offset is dirty from there (Kafka's
        maybeTruncateCheckpoint): records appended after the cut were never cleaned."""
        changed = False
        for tp, log in self.logdir.logs.items():
            cut, log.truncated_to = log.truncated_to, None
            if cut is not None and self.logdir.cleaner_offsets.get(tp, -1) > cut:
                self.logdir.cleaner_offsets[tp] = cut
                changed = True
        if changed:
            self.logdir.write_cleaner_checkpoint()

    def abort(self) -> None:
        """Give up the clean under way (its `.cleaned` files are removed)."""
        gen, self._gen, self.job = self._gen, None, None
        if gen is not None:
            gen.close()

    def run(self, now_ms: int | None = None) -> int:
        """Clean until nothing is due; returns the number of cleans completed."""
        before = len(self.cleaned)
        while self.step(now_ms):
            pass
        return len(self.cleaned) - before
