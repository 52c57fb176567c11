"""A partition's log: its segments (`LogSegments`) with one active segment at the end.

The Log owns what happens to a loaded log: append and roll, reads, flush and close,
retention (unless cleanup.policy is compact alone), DeleteRecords and truncation, the
swap of a cleaner's segment (`replace_segments`, logstore.cleaner), the log start
offset, recovery point and high watermark. `Log.open` hands the start-up work to
`logstore.loader` (docs/formats.md "Recovery"): it finishes interrupted deletes and
swaps, rebuilds the indexes from the recovery point on, cuts a torn tail, and drops
every segment after a corrupt batch, reporting how many bytes went (`RecoveryResult`).
`append` validates a whole request's batches (framing, magic 2, CRC-32C, size) before
it writes a byte; invalid input raises `CorruptRecordError`/`RecordTooLargeError` and
leaves the files unchanged; a record without a key for a compacted log raises
`InvalidRecordError` (Kafka's rule).

Concurrency: a Log is not thread-safe. Every call for one log must come from one thread
at a time (the daemon runs them on the log dir's worker). Every filesystem call runs
inside the log dir's IoGuard, so an OSError surfaces as a typed `StorageError` and has
already been reported to the dir's failure channel.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import native

from . import checkpoint, names, producer_snapshot, records, txnindex
from .config import LONG_MAX, LogConfig
from .epochs import LeaderEpochCache
from .errors import (
    CheckpointError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LogStoreError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    Verdict,
)
from .failure import IoGuard, RetiredGuard
from .loader import LogLoader, RecoveryResult
from .records import record_errors
from .segment import LogSegment
from .segments import LogSegments, open_segment

MAX_RELATIVE_OFFSET = 2**31 - 1
_ONLINE = Verdict.NONE  # IoGuard.verdict of a dir that takes appends
_new_tuple = tuple.__new__
T = TypeVar("T")


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    log_append_time: int
    position: int
    size: int


def _read_topic_id(path: Path) -> str | None:
    """The topic id of `path`'s `partition.metadata`; None without one (a partition of a
    Kafka older than 2.8, or made by a standalone logkeeper before it wrote them) or
    with one that does not parse (left as it is: the id is informative here)."""
    try:
        return checkpoint.read_partition_metadata(path / names.PARTITION_METADATA)["topic_id"]
    except (FileNotFoundError, CheckpointError):
        return None


class Log:
    # Segments holding a `.txnindex` (aborted transactions), and their entries once
    # read: class-level empties, so a log without them costs nothing.
    _txn_index_bases: frozenset[int] = frozenset()
    _txn_entries: dict[int, list[txnindex.AbortedTxn]] | None = None
    # The producer snapshots the directory held when the log was opened (the loader's
    # listing): what a partition taken on starts from (daemon.replica.producer).
    snapshot_offsets_at_open: tuple[int, ...] = ()
    # The topic's id as its `partition.metadata` holds it (Kafka's base64 form), when
    # the log has one (KIP-516: Kafka writes it for every partition).
    topic_id: str | None = None

    def __init__(self, partition_dir: Path, config: LogConfig, guard: IoGuard):
        self.dir = partition_dir if isinstance(partition_dir, Path) else Path(partition_dir)
        self.config = config
        self._validates = config.validates_records
        self._leader_work = config.leader_rewrites or self._validates  # read on every append
        self._flush_messages = config.flush_messages  # read on every append
        self.guard = guard
        self.topic_partition = names.parse_partition_dir(self.dir.name)
        self._segments = LogSegments()
        self.log_start_offset = 0
        self.recovery_point = 0
        self._cut_unsynced = False  # truncate_to cut the active segment since the last flush
        self.last_flush_ms = int(time.time() * 1000)
        self._high_watermark = 0
        self.epochs = LeaderEpochCache(self.dir / names.LEADER_EPOCH_CHECKPOINT)
        # The active segment's segment.jitter.ms draw (Kafka's rollJitterMs): it rolls
        # that much before segment.ms, so a fleet's segments do not all roll at once.
        self.roll_jitter_ms = config.random_segment_jitter()
        self._appender = native.Appender(segment_bytes=config.segment_bytes,
                                          segment_ms=self._roll_ms(),
                                          max_batch_size=config.max_message_bytes)
        self.recovery = RecoveryResult(self.topic_partition)
        # Bumped whenever segments are removed or replaced (retention, truncation,
        # DeleteRecords, a cleaner's swap, close): a clean in progress that sees it
        # change gives up (logstore.cleaner).
        self.generation = 0
        # The lowest offset a truncation cut to since the cleaner last looked: a
        # cleaner-offset-checkpoint above it would call new records clean.
        self.truncated_to: int | None = None

    # ---- opening ----

    @classmethod
    def open(
        cls,
        partition_dir: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        guard: IoGuard | None = None,
        recover: bool | None = None,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
    ) -> Log:
        """Open (creating if needed) a partition directory and recover it if needed.

        `recover=None` recovers unless the parent log dir holds a clean-shutdown marker.
        The log dir's checkpoints, when the caller has them, give the recovery point,
        log start offset and high watermark.
        """
        path = Path(partition_dir)
        guard = guard or IoGuard(path.parent)
        log = cls(path, config or LogConfig(), guard)
        path = log.dir  # one Path object for the log, its loader and its segments
        with guard.io("open log", path):
            path.mkdir(parents=False, exist_ok=True)
            loaded = LogLoader(path, log.config, recover=recover, recovery_point=recovery_point,
                               log_start_offset=log_start_offset).load()
            log.topic_id = _read_topic_id(path)
        log._segments = loaded.segments
        log.log_start_offset = loaded.log_start_offset
        log.recovery_point = loaded.recovery_point
        log.epochs = loaded.epochs
        log.recovery = loaded.recovery
        if loaded.txn_index_bases:
            log._txn_index_bases = loaded.txn_index_bases
        if loaded.snapshot_offsets:
            log.snapshot_offsets_at_open = loaded.snapshot_offsets
        log._high_watermark = min(high_watermark if high_watermark is not None
                                  else log.log_end_offset, log.log_end_offset)
        log._high_watermark = max(log._high_watermark, log.log_start_offset)
        return log

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = open_segment(self.dir, base_offset, self.config, active=True)
        self.roll_jitter_ms = self.config.random_segment_jitter()
        self._configure_appender()
        return seg

    def _roll_ms(self) -> int:
        """segment.ms (max.compaction.lag.ms when smaller on a compacted log) less the
        active segment's jitter: the age the appender rolls at."""
        return max(0, self.config.max_segment_ms - self.roll_jitter_ms)

    def _configure_appender(self) -> None:
        config = self.config
        self._appender.configure(segment_bytes=config.segment_bytes, segment_ms=self._roll_ms(),
                                 max_batch_size=config.max_message_bytes)

    # ---- properties ----

    @property
    def topic(self) -> str:
        return self.topic_partition.topic if self.topic_partition else self.dir.name

    @property
    def partition(self) -> int:
        return self.topic_partition.partition if self.topic_partition else 0

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def segments(self) -> list[LogSegment]:
        return self._segments.to_list()

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def log_end_offset(self) -> int:
        return self._segments.active.next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    @property
    def size_bytes(self) -> int:
        return sum(seg.size for seg in self._segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._validates = config.validates_records
        self._leader_work = config.leader_rewrites or self._validates
        self._flush_messages = config.flush_messages
        self._configure_appender()  # the active segment keeps its jitter, as in Kafka

    # ---- append ----

    def append(self, batch_bytes: bytes | bytearray | memoryview, leader_epoch: int = -1, *,
               assign_offsets: bool = True, checked: bool = False) -> AppendInfo:
        """Validate and append one or more whole batches; see the module docstring.

        The common case is one C call (`native.Appender`): validate framing and CRC,
        assign offsets and the leader epoch in the written copy (the caller's bytes are
        neither copied nor changed), write, add the index entries and move the active
        segment's state forward. The call says when the rest needs a new segment
        (segment.bytes, full indexes, segment.ms by the wall clock or the incoming
        timestamps, index room, relative offsets); the roll itself, and the errors, are
        decided here, in `_append_after_roll`. `checked` batches (a transaction marker
        the broker built) skip the leader's record checks and rewrites.
        """
        guard = self.guard
        if guard.verdict is not _ONLINE:
            guard.check_usable("append", writing=True)
        stamped, verify = -1, True
        if assign_offsets and not checked:
            compressed = native.holds_compressed(batch_bytes)
            if self._leader_work or compressed:
                # Checked there (CRCs included) before any rewrite: not verified twice.
                batch_bytes, stamped, verify = self._leader_checks(batch_bytes, compressed)
        if assign_offsets and len(batch_bytes) > self.config.segment_bytes:
            self._refuse_over_segment(batch_bytes)
        seg = self._segments.active
        appender = self._appender
        try:
            try:
                out = appender.append(seg.c_address, batch_bytes, leader_epoch,
                                      assign_offsets, verify, seg._log_path_str)
            except OSError as err:  # the hot path: IoGuard.translate without a context manager
                seg.cut_back_failed_append()
                raise guard.translate(err, "append", seg.log_path) from err
            if out[7]:  # not AppendStatus.OK
                info = self._append_after_roll(out[7], batch_bytes, leader_epoch,
                                               assign_offsets)
            else:
                if out[8] > 1 or (out[9] >= 0 and not self.epochs.holds(out[9], out[0])):
                    # Leader epochs to record: more than one, or one the cache has not
                    # got (every leader's append carries its epoch; almost always the
                    # latest).
                    self._assign_epochs(appender.result)
                info = _new_tuple(AppendInfo, out[:7])
        finally:
            if appender.grown:  # room for this append's many batches, read by now
                appender.shrink()
        if self._flush_messages != LONG_MAX and \
                self.log_end_offset - self.recovery_point >= self._flush_messages:
            self._flush_segments()  # flush.messages: Kafka's UnifiedLog.append
        return info if stamped < 0 else info._replace(log_append_time=stamped)

    def _append_after_roll(self, status: int, data: bytes | bytearray | memoryview,
                           leader_epoch: int, assign_offsets: bool) -> AppendInfo:
        """The rest of an append whose first call refused the data or stopped for a roll:
        refuse, or roll and append the rest, for as long as it takes."""
        appender = self._appender
        r = appender.result
        first_offset = last_offset = position = -1
        records = size = 0
        max_timestamp = -1
        while True:
            if status > native.AppendStatus.ROLL:
                self._refuse(native.AppendStatus(status), data, r.position)
            if r.batches:
                if first_offset < 0:
                    first_offset, position = r.first_offset, r.position
                last_offset = r.last_offset
                records += r.records
                size += r.bytes_written
                max_timestamp = max(max_timestamp, r.append_max_timestamp)
                if r.first_epoch >= 0 or r.epoch_runs > 1:
                    self._assign_epochs(r)
            if status == native.AppendStatus.OK:
                break
            verify = r.batches == 0  # a call that wrote validated the whole buffer
            data = memoryview(data)[r.bytes_written:]
            self._roll_for_append()
            seg = self._segments.active
            try:
                status = seg.append(appender, data, leader_epoch=leader_epoch,
                                    assign_offsets=assign_offsets, verify_crc=verify)
            except OSError as err:
                raise self.guard.translate(err, "append", seg.log_path) from err
        return _new_tuple(AppendInfo, (first_offset, last_offset, records, max_timestamp, -1,
                                       position, size))

    def _assign_epochs(self, r: Any) -> None:
        """The leader epochs of the batches the last C call wrote, into the epoch cache:
        a follower's batches keep their leaders' epochs (one entry per new epoch), a
        leader's all carry its own. A new entry is checkpointed at once, as Kafka does:
        a kill -9 must not lose it."""
        epochs = self.epochs
        if r.epoch_runs == 1:
            changed = epochs.assign(r.first_epoch, r.first_offset)
        else:
            changed = False
            for i in range(r.batches):
                b = self._appender.batch(i)
                changed |= epochs.assign(b.partition_leader_epoch, b.base_offset)
        if changed:
            with self.guard.io("write leader epochs", self.dir):
                epochs.write()

    def _leader_checks(self, data: bytes | bytearray | memoryview, compressed: bool
                       ) -> tuple[bytes | bytearray | memoryview, int, bool]:
        """What Kafka's LogValidator does to a leader's batches before they are written:
        each record checked (`_validate_records`; a compressed batch's records are
        always read, at least their framing, as Kafka's
        validateMessagesAndAssignOffsetsCompressed does, so a payload that does not
        decompress, or holds other than its header's count of records, is refused here
        rather than stored for every consumer to fail on),
        then the batches rewritten as
        compression.type and message.timestamp.type want them. Returns (the batches to
        write, the append time stamped or -1, whether the append must still verify their
        CRCs). Only data whose framing and CRCs check out (one scan) is checked and
        rewritten; anything else goes on as it came, for the append to refuse. That
        includes a batch over max.message.bytes as the producer sent it, as Kafka's
        analyzeAndValidateRecords refuses it before LogValidator: recompression into the
        topic's codec must not let in a batch the limit refuses (the append checks the
        rewritten sizes again, as Kafka does after a recompression)."""
        config = self.config
        if native.scan_batches(data, legacy=True, max_batch_size=max(
                1, config.max_message_bytes)).status is not native.ScanStatus.OK:
            return data, -1, True
        if self._validates:
            self._validate_records(data)  # reads every record, compressed ones too
        elif compressed:
            records.check_compressed_records(data)
        if config.compression_type != "producer":
            data = records.recompress(data, records.CODEC_OF[config.compression_type],
                                      config.compression_level)
        if config.timestamp_type != "LogAppendTime":
            return data, -1, False
        now = int(time.time() * 1000)
        return records.stamp_log_append_time(data, now), now, False

    def _validate_records(self, data: bytes | bytearray | memoryview) -> None:
        """Kafka's LogValidator.validateRecord on a leader's batches, before anything is
        written: a compacted log takes only records with keys (the cleaner could never
        keep one without), and a CreateTime timestamp must lie within
        message.timestamp.before/after.max.ms of now. InvalidRecordError or
        InvalidTimestampError, with Kafka's record errors, refuses the whole append. The
        data's framing and CRCs were checked."""
        config = self.config
        window = config.timestamp_window
        bounds = None
        if window is not None:
            now = int(time.time() * 1000)
            bounds = (now - window[0], now + window[1])
        found = record_errors(data, self.dir.name, keys=config.compacted, bounds=bounds)
        if found is None:
            return
        at, errors, timestamps = found
        where = f"append to {self.dir.name}: the batch at {at}"
        if timestamps:
            raise InvalidTimestampError(
                f"{where}: One or more records have been rejected due to invalid timestamp",
                record_errors=errors)
        raise InvalidRecordError(
            f"{where}: One or more records have been rejected due to {len(errors)} record "
            "errors in total, and only showing the first three errors at most: "
            f"{[why for _, why in errors[:3]]}", record_errors=errors)

    def start_leader_epoch(self, epoch: int) -> int:
        """Become leader at `epoch` (Kafka's makeLeader): the epoch starts at the log end,
        recorded in the epoch cache and its checkpoint. Returns that log end offset."""
        end = self.log_end_offset
        if self.epochs.assign(epoch, end):
            with self.guard.io("write leader epochs", self.dir):
                self.epochs.write()
        return end

    def _refuse(self, status: native.AppendStatus, data: bytes | bytearray | memoryview,
                position: int) -> None:
        """Raise the input error for a refused append (nothing was written)."""
        where = f"append to {self.dir.name}"
        appender = self._appender
        if status is native.AppendStatus.INVALID:
            scan = appender.scan(data)
            raise CorruptRecordError(f"{where}: {scan.detail}", position=scan.error_position,
                                     reason=scan.status.name.lower())
        if status is native.AppendStatus.EMPTY:
            raise CorruptRecordError(f"{where}: no record batch in {len(data)} bytes")
        b = appender.batch(appender.result.error_batch)
        at = b.position - position  # within the request's data
        if status is native.AppendStatus.TOO_LARGE:
            raise RecordTooLargeError(
                f"{where}: batch of {b.size} bytes is over max.message.bytes "
                f"{self.config.max_message_bytes}")
        if status is native.AppendStatus.BAD_COUNT:
            raise CorruptRecordError(
                f"{where}: batch at {at} has {b.records_count} records but "
                f"lastOffsetDelta {b.last_offset_delta}", position=at)
        raise UnexpectedAppendOffsetError(
            f"{where}: batch offset {b.base_offset} below log end {self.log_end_offset}",
            first_offset=b.base_offset, log_end_offset=self.log_end_offset, position=at)

    def _refuse_over_segment(self, data: bytes | bytearray | memoryview) -> None:
        """Kafka's UnifiedLog.append refusing a leader's append that no segment could
        hold, after the leader's checks (the size as it would be written). Not a
        follower's: Kafka 3.9 refuses that too, which fails the follower of a topic whose
        segment.bytes is below replica.fetch.max.bytes (why Kafka 4.0 raised the least
        segment.bytes to 1 MiB): a follower takes what its leader took."""
        raise RecordBatchTooLargeError(
            f"Message batch size is {memoryview(data).nbytes} bytes in append to partition "
            f"{self.dir.name}, which exceeds the maximum configured segment size of "
            f"{self.config.segment_bytes}.")

    def _roll_for_append(self) -> None:
        try:
            self._roll()
        except OSError as err:
            raise self.guard.translate(err, "roll", self.dir) from err

    def roll(self) -> None:
        """Start a new active segment at the log end (no-op when the active one is empty)."""
        with self.guard.io("roll", self.dir):
            if not self.active_segment.is_empty:
                self._roll()

    def _roll(self) -> None:
        new_base = self.log_end_offset
        self.active_segment.become_inactive()
        self._segments.append(self._new_segment(new_base))

    # ---- reads ----

    def _check_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.dir.name} is outside "
                f"[{self.log_start_offset}, {self.log_end_offset}]")

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             via: Callable[[int, int, int, str], T] | None = None) -> bytes | T:
        """Whole batches from the one holding `offset`, up to `max_bytes` (at least one
        batch when any exists), none at or past `max_offset`; empty at the log end.

        The end is found before reading, as Kafka does (offset index, then a batch
        header or two), so the bytes are read once, straight into the result. With
        `via`, the bytes are not read here: `via(fd, position, size, path)` gets the
        segment file's range and its result is returned (the daemon splices the range
        into pipes: daemon.storage.spliced); it runs inside the IoGuard like the read,
        and only when there is something to read (b"" otherwise).
        """
        self._check_offset(offset)
        guard = self.guard
        if guard.verdict is not _ONLINE:
            guard.check_usable("read", writing=False)
        try:  # IoGuard.io without a context manager: a fetch reads on every call
            return self._read(offset, max_bytes, max_offset, via)
        except OSError as err:
            raise guard.translate(err, "read", self.dir) from err

    def _read(self, offset: int, max_bytes: int, max_offset: int | None,
              via: Callable[[int, int, int, str], T] | None) -> bytes | T:
        segments = self._segments
        i = segments.floor_index(offset)
        while i < len(segments):
            seg = segments[i]
            found = seg.read_range(offset, max_bytes, max_offset)
            if found is not None:
                start, end = found
                if end <= start:
                    return b""
                if via is not None:
                    return via(seg.fd, start, end - start, seg._log_path_str)
                return seg.read_exact(start, end - start)
            i += 1
        return b""

    def add_aborted_txn(self, txn: txnindex.AbortedTxn) -> None:
        """Record an aborted transaction in the `.txnindex` of the segment holding its
        abort marker (`txn.last_offset`, just appended), as Kafka's leader and followers
        do when they append the marker."""
        seg = self._segments[self._segments.floor_index(txn.last_offset)]
        path = self.dir / (names.offset_file_stem(seg.base_offset) + names.TXN_INDEX_SUFFIX)
        with self.guard.io("write transaction index", path):
            entries = self._txn_index(seg)  # read before the write: cached after it
            txnindex.append(path, txn)
        entries.append(txn)
        self._txn_index_bases = self._txn_index_bases | {seg.base_offset}

    def rebuild_txn_indexes(self, bases: list[int], aborted: list[txnindex.AbortedTxn]
                            ) -> dict[str, int]:
        """Make the `.txnindex` of each segment at `bases` hold the transactions of
        `aborted` whose abort marker it holds: what a replay of those whole segments
        found (Kafka's segment recovery rebuilds it so). Of the entries it held, those
        whose marker is past the log end (cut by recovery) go, and those the replay did
        not find (a transaction begun before it started) stay. An index that already
        agrees is not written. Returns the file name and entry count of each one
        rewritten."""
        wanted: dict[int, list[txnindex.AbortedTxn]] = {base: [] for base in bases}
        for txn in aborted:
            base = self._segments[self._segments.floor_index(txn.last_offset)].base_offset
            if base in wanted:
                wanted[base].append(txn)
        have = set(self._txn_index_bases)
        rewritten = {}
        for seg in self._segments:
            found = wanted.get(seg.base_offset)
            if found is None:
                continue
            held = self._txn_index(seg)
            markers = {(t.producer_id, t.last_offset) for t in found}
            entries = sorted(found + [t for t in held if t.last_offset < self.log_end_offset
                                      and (t.producer_id, t.last_offset) not in markers],
                             key=lambda t: t.last_offset)
            if entries == held:
                continue
            path = self.dir / (names.offset_file_stem(seg.base_offset) + names.TXN_INDEX_SUFFIX)
            with self.guard.io("write transaction index", path):
                txnindex.rewrite(path, entries)
            self._txn_index(seg)[:] = entries
            rewritten[path.name] = len(entries)
            if entries:
                have.add(seg.base_offset)
            else:
                have.discard(seg.base_offset)
        self._txn_index_bases = frozenset(have)
        return rewritten

    def _cut_txn_indexes(self, offset: int) -> None:
        """After a truncation to `offset`: the entries of markers cut go, and so do the
        cached entries of segments deleted (a new one may take their base offset)."""
        if not self._txn_index_bases:
            return
        self._forget_txn_indexes(self._txn_index_bases - {s.base_offset for s in self._segments})
        bases = set(self._txn_index_bases)
        for seg in self._segments:
            if seg.base_offset not in bases:
                continue
            entries = self._txn_index(seg)
            left = [t for t in entries if t.last_offset < offset]
            if len(left) != len(entries):
                path = self.dir / (names.offset_file_stem(seg.base_offset)
                                   + names.TXN_INDEX_SUFFIX)
                txnindex.rewrite(path, left)
                entries[:] = left
                if not left:
                    bases.discard(seg.base_offset)
        self._txn_index_bases = frozenset(bases)

    def _forget_txn_indexes(self, bases: set[int] | frozenset[int]) -> None:
        """The segments at `bases` went (their `.txnindex` files with them): their
        cached entries go too, since a new segment may take one of their base offsets."""
        if self._txn_entries is not None:
            for base in bases:
                self._txn_entries.pop(base, None)
        self._txn_index_bases = self._txn_index_bases - bases

    def aborted_transactions(self, offset: int, read_bytes: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read_committed
        consumer needs to skip records in what `read(offset, ...)` returned
        (`read_bytes` long), from the `.txnindex` files (Kafka's collectAbortedTxns):
        those whose abort marker is at or past `offset` and whose first offset is below
        the offset after the bytes read. Empty for a log without them."""
        if not self._txn_index_bases or read_bytes <= 0:
            return []
        with self.guard.io("read transaction index", self.dir, writing=False):
            upper = self._offset_after_read(offset, read_bytes)
        return [(t.producer_id, t.first_offset) for t in self.aborted_txns(offset, upper)]

    def aborted_txns(self, start: int, end: int) -> list[txnindex.AbortedTxn]:
        """The aborted transactions with records in [start, end): every `.txnindex`
        entry, from the segment holding `start` on, whose abort marker is at or past
        `start` and whose first offset is below `end` (Kafka's collectAbortedTransactions);
        in marker order."""
        if not self._txn_index_bases:
            return []
        out = []
        with self.guard.io("read transaction index", self.dir, writing=False):
            for seg in self._segments:
                if seg.next_offset <= start or seg.base_offset not in self._txn_index_bases:
                    continue
                out += [t for t in self._txn_index(seg)
                        if t.last_offset >= start and t.first_offset < end]
        return out

    def _offset_after_read(self, offset: int, read_bytes: int) -> int:
        """The first offset past the batches a read of `read_bytes` from `offset` returned."""
        segments = self._segments
        i = segments.floor_index(offset)
        while i < len(segments):
            seg = segments[i]
            first = seg.find_batch(offset)
            if first is not None:
                end = first.position + read_bytes
                after = seg.find_batch(0, start_position=end) if end < seg.size else None
                if after is not None:
                    return after.base_offset
                return segments[i + 1].base_offset if i + 1 < len(segments) \
                    else self.log_end_offset
            i += 1
        return self.log_end_offset

    def _txn_index(self, seg: LogSegment) -> list[txnindex.AbortedTxn]:
        cache = self._txn_entries
        if cache is None:
            cache = self._txn_entries = {}
        entries = cache.get(seg.base_offset)
        if entries is None:
            path = self.dir / (names.offset_file_stem(seg.base_offset) + names.TXN_INDEX_SUFFIX)
            try:
                entries = txnindex.parse(path.read_bytes())
            except FileNotFoundError:
                entries = []
            cache[seg.base_offset] = entries
        return entries

    def tail_offset(self, max_bytes: int) -> int:
        """The first offset of about the last `max_bytes` of the log: that of a batch
        the offset index names (a batch header read), or the log's first."""
        left = max_bytes
        with self.guard.io("read", self.dir, writing=False):
            for seg in reversed(self._segments.to_list()):
                if seg.size > left:
                    found = seg.find_batch(0, start_position=seg.offset_index.position_floor(
                        seg.size - left))
                    return seg.base_offset if found is None else found.base_offset
                left -= seg.size
        return self._segments.first.base_offset

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp`, or None."""
        with self.guard.io("list offsets", self.dir, writing=False):
            for seg in self._segments:
                if seg.is_empty or seg.max_timestamp < timestamp:
                    continue
                found = seg.find_timestamp(timestamp, min_offset=self.log_start_offset)
                if found is not None:
                    return found
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the log's largest timestamp
        (ListOffsets MAX_TIMESTAMP, KIP-734), or None for a log without records."""
        with self.guard.io("list offsets", self.dir, writing=False):
            best = None
            for seg in self._segments:  # the first segment holding the maximum, as Kafka
                if not seg.is_empty and (best is None or seg.max_timestamp > best.max_timestamp):
                    best = seg
            if best is None or best.max_timestamp < 0:
                return None
            return best.find_timestamp(best.max_timestamp, min_offset=self.log_start_offset)

    # ---- durability ----

    def assign_topic_id(self, topic_id: str) -> None:
        """Kafka's UnifiedLog.assignTopicId: write `partition.metadata` naming the topic id
        (base64, as Kafka writes it) for a log that has none; a log that names this id
        already is left alone. The caller checks that a log naming another id is not
        asked (Kafka's INCONSISTENT_TOPIC_ID)."""
        if self.topic_id == topic_id:
            return
        if self.topic_id is not None:
            raise ValueError(f"{self.dir.name} holds topic id {self.topic_id}, not {topic_id}")
        with self.guard.io("write partition.metadata", self.dir, writing=True):
            checkpoint.write_partition_metadata(self.dir / names.PARTITION_METADATA, topic_id)
        self.topic_id = topic_id

    def flush(self) -> None:
        """fdatasync every segment past the recovery point; advance the recovery point.
        A log with nothing past it is not synced again (Kafka's flush up to an offset at
        or below the recovery point does nothing): the periodic checkpoint of a dir of
        idle partitions costs no fdatasync."""
        if self.log_end_offset > self.recovery_point or self._cut_unsynced:
            self._flush_segments()
        with self.guard.io("flush", self.dir, writing=False):
            self.epochs.write()

    def _flush_segments(self) -> None:
        """The segments' part of `flush` (a new leader epoch is checkpointed when it is
        assigned): what flush.messages and flush.ms ask for."""
        end = self.log_end_offset
        with self.guard.io("flush", self.dir, writing=False):
            for seg in self._segments[self._segments.floor_index(self.recovery_point):]:
                seg.flush()
        self.recovery_point = end
        self._cut_unsynced = False
        self.last_flush_ms = int(time.time() * 1000)

    def flush_if_due(self, now_ms: int) -> bool:
        """flush.ms: flush when the last flush is that old and something is unflushed
        (Kafka's LogManager.flushDirtyLogs); whether it flushed."""
        due = self.config.flush_ms
        if due == LONG_MAX or now_ms - self.last_flush_ms < due \
                or self.log_end_offset <= self.recovery_point:
            return False
        self._flush_segments()
        return True

    def close(self) -> None:
        """Trim the active indexes, write the epoch checkpoint, close every file."""
        self.generation += 1
        with self.guard.io("close", self.dir):
            self.epochs.write()
            for seg in self._segments:
                seg.close()

    # ---- a replica move (daemon.replica.moves) ----

    def retire(self, moved_to: str) -> None:
        """This log's replica now lives in `moved_to`: every later call is refused with
        LogMovedError before touching a file (calls queued before the move end there)."""
        if not isinstance(self.guard, RetiredGuard):
            self.guard = RetiredGuard(self.guard, moved_to)

    def unretire(self) -> None:
        """A move that did not complete: this log serves again, as it was."""
        if isinstance(self.guard, RetiredGuard):
            self.guard = self.guard.previous

    @property
    def retired(self) -> bool:
        return isinstance(self.guard, RetiredGuard)

    def close_quietly(self) -> None:
        """Drop every fd without writing (the log dir is offline)."""
        self.generation += 1
        for seg in self._segments:
            seg.close_quietly()

    # ---- retention and truncation ----

    def apply_retention(self, now_ms: int | None = None, *, replicated: bool = False) -> int:
        """Delete the oldest segments past retention.ms or retention.bytes.

        A segment is expired by time when its largest timestamp (its file's modification
        time when no record has one, as Kafka's largestTimestamp) is older than
        retention.ms. When every segment is deletable, the active one goes too and a new
        empty one is created after the deletes (what a saturated disk needs).
        `replicated` (a broker's log, whose high watermark is kept): only segments wholly
        below the high watermark go, as in Kafka's deletableSegments, so retention never
        deletes records the followers have not copied, nor moves the log start (and the
        high watermark with it) past what the ISR holds.
        Returns the number of segments deleted.
        """
        if not self.config.retention_deletes:
            return 0  # cleanup.policy=compact alone: the cleaner keeps it small
        now = int(time.time() * 1000) if now_ms is None else now_ms
        doomed = 0
        excess = (self.size_bytes - self.config.retention_bytes
                  if self.config.retention_bytes >= 0 else -1)
        for i, seg in enumerate(self._segments):
            if seg.is_empty:
                break
            if replicated:
                upper = (self._segments[i + 1].base_offset if i + 1 < len(self._segments)
                         else self.log_end_offset)
                if upper > self._high_watermark:
                    break
            by_time = (self.config.retention_ms >= 0
                       and now - self._largest_timestamp(seg) > self.config.retention_ms)
            by_size = excess >= 0 and excess - seg.size >= 0
            if not (by_time or by_size):
                break
            if by_size:
                excess -= seg.size
            doomed += 1
        if not doomed:
            return 0
        with self.guard.io("delete segments", self.dir, writing=False):
            if doomed == len(self._segments):
                self.generation += 1
                # Delete first, then create the new active segment: on a full disk the
                # space must be won back before a new file can be made.
                end = self.log_end_offset
                self._delete_oldest(doomed - 1)
                last = self._segments.remove_last()
                last.delete()
                self._segments.append(self._new_segment(end))
                self._advance_log_start(end)
                self.recovery_point = max(self.recovery_point, end)
                self._high_watermark = max(self._high_watermark, end)
            else:
                self._delete_oldest(doomed)
        return doomed

    def _largest_timestamp(self, seg: LogSegment) -> int:
        if seg.max_timestamp >= 0:
            return seg.max_timestamp
        with self.guard.io("retention", seg.log_path, writing=False):
            return seg.largest_timestamp()  # the file's mtime: a stat

    # ---- compaction (logstore.cleaner) ----

    def replace_segments(self, old: list[LogSegment]) -> LogSegment:
        """Swap in the cleaned segment whose `.cleaned` files (at old[0]'s base, written
        and synced by the cleaner) replace the consecutive segments `old`, as Kafka's
        replaceSegments does, so a crash at any point leaves a log the loader completes
        (docs/formats.md "Recovery"): the `.cleaned` files are renamed `.swap` (the
        `.log` last: its `.swap` means the clean is whole), the old segments deleted,
        the `.swap` files renamed to their final names. Returns the new segment.
        """
        base = old[0].base_offset
        i = self._segments.floor_index(base)
        if self._segments[i:i + len(old)] != old:
            raise LogStoreError(f"{self.dir.name}: segments from {base} changed under the cleaner")
        self.generation += 1
        stem = names.offset_file_stem(base)
        order = [names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.LOG_SUFFIX]
        with self.guard.io("swap in cleaned segment", self.dir / (stem + names.LOG_SUFFIX)):
            if (self.dir / (stem + names.TXN_INDEX_SUFFIX + names.CLEANED_SUFFIX)).exists():
                order.insert(2, names.TXN_INDEX_SUFFIX)  # the aborted transactions it kept
            for suffix in order:
                os.replace(self.dir / (stem + suffix + names.CLEANED_SUFFIX),
                           self.dir / (stem + suffix + names.SWAP_SUFFIX))
            checkpoint.sync_dir(self.dir)
            for seg in old[1:] + old[:1]:
                seg.delete(snapshot=False)  # producer snapshots are not the segment's
            for suffix in order:
                os.replace(self.dir / (stem + suffix + names.SWAP_SUFFIX), self.dir / (stem + suffix))
            checkpoint.sync_dir(self.dir)
            new = open_segment(self.dir, base, self.config, active=False)
        self._segments.replace(i, len(old), new)
        self._forget_txn_indexes({s.base_offset for s in old})
        if names.TXN_INDEX_SUFFIX in order:
            self._txn_index_bases = self._txn_index_bases | {base}
        return new

    def _delete_oldest(self, count: int) -> None:
        self.generation += 1
        for seg in self._segments[:count]:
            seg.delete()
        if self._txn_index_bases:
            self._forget_txn_indexes({s.base_offset for s in self._segments[:count]})
        self._segments.remove_first(count)
        self._advance_log_start(self._segments.first.base_offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        self._high_watermark = max(self._high_watermark, self.log_start_offset)

    def _advance_log_start(self, offset: int) -> None:
        """Move the log start offset up (never down); epochs wholly below it go."""
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.epochs.truncate_from_start(offset)

    def delete_records(self, before_offset: int) -> None:
        """Advance the log start offset (DeleteRecords); whole segments below it go."""
        self._check_offset(before_offset)
        self._advance_log_start(before_offset)
        count = 0
        for nxt in self._segments[1:]:
            if nxt.base_offset > before_offset:
                break
            count += 1
        if count:
            with self.guard.io("delete segments", self.dir):
                self._delete_oldest(count)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and start it at `offset` (Kafka's truncateFullyAndStartAt): a
        copy of a log whose start is past 0 begins where its first segment does."""
        self.generation += 1
        self.truncated_to = offset if self.truncated_to is None else min(offset, self.truncated_to)
        with self.guard.io("truncate", self.dir, writing=False):
            self._start_at(offset)
            self._cut_txn_indexes(offset)
            producer_snapshot.delete_after(self.dir, -1)
            self.recovery_point = offset
            self._high_watermark = offset
            self.epochs.write()

    def _start_at(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete()
        self._segments.clear()
        self._segments.append(self._new_segment(offset))
        self.log_start_offset = offset
        self.epochs.clear()

    def truncate_to(self, offset: int) -> None:
        """Cut the log so its end is at or below `offset` (a follower's truncation).

        At or past the log end no record goes, but an epoch begun at the log end does: a
        broker that became leader and was replaced before it appended anything keeps
        (epoch, log end) in its cache, and as a follower would otherwise send that epoch
        as its last fetched one forever, told each time to cut where it already ends
        (Kafka's truncateTo drops it too)."""
        if offset >= self.log_end_offset:
            end = self.log_end_offset
            if self.epochs.entries and self.epochs.entries[-1].start_offset >= end:
                self.epochs.truncate_from_end(end)
                with self.guard.io("write leader epochs", self.dir, writing=False):
                    self.epochs.write()
            return
        self.generation += 1
        self.truncated_to = offset if self.truncated_to is None else min(offset, self.truncated_to)
        with self.guard.io("truncate", self.dir, writing=False):
            if offset <= self._segments.first.base_offset:
                self._start_at(offset)  # Kafka's truncateFullyAndStartAt
            else:
                i = self._segments.floor_index(offset)
                for seg in self._segments[i + 1:]:
                    seg.delete()
                self._segments.remove_after(i)
                seg = self._segments[i]
                if not seg.active:
                    seg.become_active()
                seg.truncate_to(offset)
            self._cut_txn_indexes(offset)  # after either cut: deleted segments' go too
            producer_snapshot.delete_after(self.dir, offset)
            end = self.log_end_offset
            self.recovery_point = min(self.recovery_point, end)
            self._cut_unsynced = True  # the next flush syncs the cut segment's new length
            self._high_watermark = min(self._high_watermark, end)
            self.epochs.truncate_from_end(end)
            self.epochs.write()
