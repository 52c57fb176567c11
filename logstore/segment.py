"""One log segment: its `.log` file and the `.index`/`.timeindex` beside it.

A segment appends whole, already validated batches at its end and indexes them the
way Kafka does (docs/formats.md): an offset-index entry (the batch's last offset -> the
batch's start position) once more than `index_interval_bytes` were appended since the
last entry, and a time-index entry whenever the largest timestamp grows at that point.
A failed append is rolled back (the `.log` cut to where it was, index entries dropped),
so a write that fails halfway leaves no partial batch.

Not thread-safe: the owning Log serialises every call. OSErrors propagate to the Log,
which runs segment calls inside its log dir's IoGuard.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import native
from native import BatchInfo, ScanResult, ScanStatus

from . import flush_stats, names
from .epochs import LeaderEpochCache
from .errors import LogStoreError
from .index import OffsetIndex, TimeIndex
from .records import ATTR_CONTROL, HEADER_SIZE, MAGIC_AT, iter_batches, parse_batch_header
from .scan import FileScan, scan_file


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 max_index_bytes: int, active: bool):
        # The partition dir's Path is the log's own object, and each file's path is a
        # str (its Path made on demand: `log_path`, `index_path`): a broker holds
        # thousands of segments, and a Path with its parts costs ~400 bytes.
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        where = os.fspath(self.dir)
        self._log_path_str = os.path.join(where, names.log_file_name(base_offset))
        index_path = os.path.join(where, names.index_file_name(base_offset))
        time_index_path = os.path.join(where, names.time_index_file_name(base_offset))
        # Path.exists, not os.path.exists: an EIO raises (the disk's fate), not "missing".
        self.indexes_missing = not (Path(index_path).exists()
                                    and Path(time_index_path).exists())
        self.fd = os.open(self._log_path_str, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(self.fd).st_size
            self.offset_index = OffsetIndex(index_path, base_offset, max_index_bytes,
                                            writable=active)
            self.time_index = TimeIndex(time_index_path, base_offset, max_index_bytes,
                                        writable=active)
        except BaseException:
            os.close(self.fd)
            raise
        # The running state an append moves forward, in C (struct lk_segment): size,
        # next offset (-1 until known), bytes since the last index entry, the largest
        # timestamp and its offset, the first batch's timestamp (segment.ms).
        self.c = native.new_segment(self.fd, base_offset, index_interval_bytes,
                                    self.offset_index.c, self.time_index.c,
                                    int(time.time() * 1000))
        self.c_address = native.address_of(self.c)  # what Appender.append takes
        self.c.size = size
        self.active = active
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if size == 0:
            self.c.next_offset = base_offset

    @property
    def log_path(self) -> Path:
        return Path(self._log_path_str)

    @property
    def index_path(self) -> Path:
        return self.offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self.time_index.path

    # ---- state ----

    @property
    def size(self) -> int:
        """Bytes in the .log: whole batches only, except after a crash until recovery."""
        return self.c.size

    @size.setter
    def size(self, value: int) -> None:
        self.c.size = value

    @property
    def bytes_since_index(self) -> int:
        return self.c.bytes_since_index

    @bytes_since_index.setter
    def bytes_since_index(self, value: int) -> None:
        self.c.bytes_since_index = value

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp here, -1 if none."""
        return self.c.max_timestamp

    @max_timestamp.setter
    def max_timestamp(self, value: int) -> None:
        self.c.max_timestamp = value

    def largest_timestamp(self) -> int:
        """What retention.ms counts this segment's age from (Kafka's largestTimestamp):
        its largest timestamp, or, when none of its records has one (old Kafka's magic 0
        messages), the `.log` file's last modification time."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        """When the `.log` was last written (Kafka's LogSegment.lastModified)."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    @property
    def offset_of_max_timestamp(self) -> int:
        return self.c.offset_of_max_timestamp

    @offset_of_max_timestamp.setter
    def offset_of_max_timestamp(self, value: int) -> None:
        self.c.offset_of_max_timestamp = value

    @property
    def next_offset(self) -> int:
        """Offset after this segment's last batch (its base offset when empty)."""
        if self.c.next_offset < 0:
            self._load_tail()
        return self.c.next_offset

    def _load_tail(self) -> None:
        """Find the last batch by scanning from the last index entry to the end."""
        _, start = self.offset_index.last_entry()
        last: list[BatchInfo] = []

        def keep_last(res: ScanResult) -> None:
            last[:] = [res[len(res) - 1]]
            for b in res:
                if b.max_timestamp > self.max_timestamp:
                    self.max_timestamp, self.offset_of_max_timestamp = b.max_timestamp, b.last_offset

        scan_file(self.fd, start=start, end=self.size, verify_crc=False, on_batches=keep_last,
                  path=self._log_path_str, legacy=True)
        self.c.next_offset = last[0].last_offset + 1 if last else self.base_offset

    def roll_base_timestamp(self) -> int:
        """The first batch's max timestamp, from which Kafka's segment.ms counts (the
        cleaner's max.compaction.lag.ms too); -1 when the segment has none. The append
        reads the same field in C for its own roll decision."""
        header = native.pread(self.fd, min(self.size, HEADER_SIZE), 0, path=self._log_path_str)
        if len(header) == HEADER_SIZE and header[MAGIC_AT] == 2:
            return int.from_bytes(header[35:43], "big", signed=True)
        if len(header) >= 26 and header[MAGIC_AT] == 1:  # a legacy message's own timestamp
            return int.from_bytes(header[18:26], "big", signed=True)
        return -1

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # ---- appends ----

    def append(self, appender: native.Appender, data: memoryview | bytes, *,
               leader_epoch: int, assign_offsets: bool, verify_crc: bool = True) -> int:
        """Validate `data` and write the leading batches that fit here, with their index
        entries, in one C call (`native.Appender`). Invalid data writes nothing; the
        appender's `result` says what was written; the status (an AppendStatus value)
        why it stopped. `Log.append` makes the same call inline (the hot path).

        On an OSError the segment is put back as it was before the call (the C call
        restores the indexes and the state; the .log is cut back here) and the error
        re-raised.
        """
        try:
            return appender.append(self.c_address, data, leader_epoch, assign_offsets,
                                   verify_crc, self._log_path_str)[7]
        except OSError:
            self.cut_back_failed_append()
            raise

    def cut_back_failed_append(self) -> None:
        """Cut the .log back to the segment's size after a write that failed halfway."""
        try:
            os.ftruncate(self.fd, self.size)
        except OSError:
            pass  # the caller's error already marks the dir; the loader cuts a torn tail

    def _index_batch(self, last_offset: int, position: int) -> None:
        """Index one batch: an offset entry, and a time entry when the max timestamp grew.

        When either index has no room left the entry is skipped (a sparser index, still
        correct). Recovery uses it: appends never get here with a full index (the C
        append stops at the indexes' room), but a segment rebuilt under a smaller
        `segment.index.bytes` than it was written with can.
        """
        if self.offset_index.is_full or self.time_index.is_full:
            return
        self.offset_index.append(last_offset, position)
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # ---- reads ----

    def read_exact(self, position: int, size: int) -> bytes:
        """Exactly the bytes [position, position + size) (bounds already known)."""
        return native.pread(self.fd, size, position, path=self._log_path_str)

    def batches_end(self, start: int, limit: int) -> int:
        """End of the last whole batch that starts at or after `start` and ends at or
        before `limit`; at least the end of the batch at `start` (Kafka's
        minOneMessage). From the offset index's nearest entry, a header or two is read
        (in C, which remembers where a read that stops there goes on).
        """
        return native.batches_end(self.c, start, limit, path=self._log_path_str)

    def find_batch(self, offset: int, *, start_position: int | None = None) -> BatchInfo | None:
        """The first batch whose last offset >= `offset`, or None past the end.

        Walks batch headers from `start_position`, or else from where the last read
        stopped (when that is `offset`) or the offset index's entry: with an entry every
        index.interval.bytes that is one or two small reads (in C).
        """
        return native.find_batch(self.c, offset, start_position, path=self._log_path_str)

    def read_range(self, offset: int, max_bytes: int,
                   max_offset: int | None = None) -> tuple[int, int] | None:
        """Where a fetch from `offset` reads here: (start, end) of whole batches from the
        one holding it, up to `max_bytes` (at least that batch), none at or past
        `max_offset`; equal when there is nothing to read; None when no batch here holds
        `offset` or a later one. One C call (`find_batch` and `batches_end` in one)."""
        if max_offset is not None and self.c.next_offset < 0:
            self._load_tail()
        return native.read_range(self.c, offset, max_bytes, max_offset,
                                 path=self._log_path_str)

    def find_timestamp(self, timestamp: int, *, min_offset: int) -> tuple[int, int] | None:
        """The first record with timestamp >= `timestamp` and offset >= min_offset."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, start = self.offset_index.lookup(max(ts_offset, min_offset))
        found: list[BatchInfo] = []

        def first_late(res: ScanResult) -> int | None:
            for b in res:
                if b.max_timestamp >= timestamp and b.last_offset >= min_offset:
                    found.append(b)
                    return b.position
            return None

        scan_file(self.fd, start=start, end=self.size, buffer_size=1 << 16, verify_crc=False,
                  on_batches=first_late, path=self._log_path_str, legacy=True)
        if not found:
            return None
        info = found[0]
        if info.magic < 2:  # a legacy message (old Kafka)
            return self._find_legacy_timestamp(info, timestamp, min_offset)
        batch = parse_batch_header(self.read_exact(info.position, info.size))
        try:
            for rec in batch.records():
                if rec.timestamp is not None and rec.timestamp >= timestamp \
                        and rec.offset is not None and rec.offset >= min_offset:
                    return rec.offset, rec.timestamp
        except LogStoreError:
            pass  # a codec we cannot decode: the batch itself is the answer
        return max(info.base_offset, min_offset), info.max_timestamp

    def _find_legacy_timestamp(self, info: BatchInfo, timestamp: int,
                               min_offset: int) -> tuple[int, int]:
        """The first message of the legacy message at `info` with timestamp >= `timestamp`
        and offset >= min_offset: a compressed wrapper's inner ones, as Kafka looks inside
        it (the scan gives the wrapper's offset, its last inner one's)."""
        (msg,) = iter_batches(self.read_exact(info.position, info.size),
                              base_position=info.position, verify_crc=False)
        try:
            inner = msg.messages()
        except LogStoreError:
            inner = []  # a codec we cannot decode: the wrapper itself is the answer
        for m in inner:
            if m.timestamp is not None and m.timestamp >= timestamp and m.offset >= min_offset:
                return m.offset, m.timestamp
        return max(info.base_offset, min_offset), info.max_timestamp

    # ---- maintenance ----

    def recover(self, epochs: LeaderEpochCache | None = None) -> tuple[FileScan, int, bool]:
        """Rebuild indexes from the `.log`, cut at the first invalid batch; each batch
        of a leader epoch newer than `epochs` knows starts that epoch there (Kafka's
        LogSegment.recover: the checkpoint may predate the batches a crash left).

        Returns the scan's verdict, how many bytes were cut, and whether a transaction
        marker (a control batch) is among the batches kept. A batch whose offsets go
        backwards counts as corruption.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        state = {"next": self.base_offset, "valid": 0, "last_indexed": 0, "bad": None,
                 "markers": False}

        def rebuild(res: ScanResult) -> int | None:
            for b in res:
                if b.base_offset < state["next"]:
                    state["bad"] = (f"batch at {b.position}: base offset {b.base_offset} "
                                    f"below the expected {state['next']}")
                    return b.position
                if b.max_timestamp > self.max_timestamp:
                    self.max_timestamp, self.offset_of_max_timestamp = b.max_timestamp, b.last_offset
                if epochs is not None and b.partition_leader_epoch > epochs.latest_epoch:
                    epochs.assign(b.partition_leader_epoch, b.base_offset)
                if b.position - state["last_indexed"] > self.index_interval_bytes:
                    self._index_batch(b.last_offset, b.position)
                    state["last_indexed"] = b.position
                state["next"] = b.last_offset + 1
                if b.magic == 2 and b.attributes & ATTR_CONTROL:
                    state["markers"] = True
            return None

        scan = scan_file(self.fd, end=self.size, on_batches=rebuild, path=self._log_path_str,
                         legacy=True)
        if state["bad"] is not None:
            scan = FileScan(scan.file_size, scan.valid_end, ScanStatus.BAD_COUNT, state["bad"])
        cut = self.size - scan.valid_end
        if cut:
            os.ftruncate(self.fd, scan.valid_end)
            self.size = scan.valid_end
        self.bytes_since_index = self.size - state["last_indexed"]
        self.c.next_offset = state["next"]
        if not self.active:
            self.close_indexes_for_roll()
        self.indexes_missing = False
        return scan, cut, state["markers"]

    def index_sane(self) -> bool:
        """Kafka's cheap load-time check: entries inside the segment and the log."""
        if self.indexes_missing:
            return False
        last_offset, last_pos = self.offset_index.last_entry()
        if self.offset_index.entries and (last_pos >= self.size or last_offset < self.base_offset):
            return False
        _, last_ts_offset = self.time_index.last_entry()
        return last_ts_offset >= self.base_offset

    def truncate_to(self, offset: int) -> int:
        """Cut every batch from the one holding `offset` on; returns bytes cut."""
        batch = self.find_batch(offset, start_position=0 if offset <= self.base_offset else None)
        if batch is None:
            return 0
        position = batch.position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(batch.base_offset)
        cut = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        self.bytes_since_index = 0
        # Offsets a cleaner removed may lie before the batch cut: the end is `offset`
        # then, as Kafka sets it, not the next batch's base.
        self.c.next_offset = max(self.base_offset, min(batch.base_offset, offset))
        return cut

    def close_indexes_for_roll(self) -> None:
        """Force the last time-index entry and trim both indexes (roll and close)."""
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         at_roll=True)
        self.offset_index.trim()
        self.time_index.trim()

    def become_inactive(self) -> None:
        self.close_indexes_for_roll()
        self.offset_index.writable = self.time_index.writable = False
        self.active = False

    def become_active(self) -> None:
        self.active = True
        for idx in (self.offset_index, self.time_index):
            idx.writable = True
            idx._resize(idx.max_entries * idx.entry_size)

    def flush(self) -> None:
        started = time.monotonic()
        try:
            native.fdatasync(self.fd, path=self._log_path_str)
            self.offset_index.sync()
            self.time_index.sync()
        finally:
            flush_stats.observe(time.monotonic() - started)  # Kafka's LogFlushStats

    def close(self) -> None:
        try:
            if self.active:
                self.close_indexes_for_roll()
        finally:
            self.offset_index.close(trim=False)
            self.time_index.close(trim=False)
            os.close(self.fd)

    def close_quietly(self) -> None:
        """Drop fds without writing anything (the disk is gone)."""
        for close in (lambda: self.offset_index.close(trim=False, write=False),
                      lambda: self.time_index.close(trim=False, write=False),
                      lambda: os.close(self.fd)):
            try:
                close()
            except OSError:
                pass

    def delete(self, *, snapshot: bool = True) -> None:
        """Rename the files to `.deleted`, then remove them (Kafka's two steps); with
        `snapshot`, the producer snapshot named after its base offset too (retention)."""
        self.close_quietly()
        paths = [self.log_path, self.index_path, self.time_index_path]
        paths += [self.dir / (names.offset_file_stem(self.base_offset) + s)
                  for s in (names.TXN_INDEX_SUFFIX, names.SNAPSHOT_SUFFIX)[:2 if snapshot else 1]]
        doomed = []
        for path in paths:
            if path.exists():
                target = path.with_name(path.name + names.DELETED_SUFFIX)
                os.replace(path, target)
                doomed.append(target)
        for path in doomed:
            path.unlink()
