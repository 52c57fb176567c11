"""Kafka's sparse segment indexes: `.index` (offset -> position) and `.timeindex`.

Layout (docs/formats.md): `.index` holds 8-byte entries (int32 offset relative to the
segment base, int32 byte position); `.timeindex` 12-byte entries (int64 timestamp,
int32 relative offset). An active segment's files are preallocated (sparse) to
`max_index_bytes` rounded down to the entry size, as Kafka does, and trimmed to
`entries x entry size` on roll, close and after recovery.

Where an index's entries end is decided in one place, `read_written_entries`: before
the first all-zero entry (docs/formats.md). A live or crashed broker's active segment
still has its preallocated, zero-filled tail, and no real entry is all zeros. Log
loading, `verify` (dump-log, the Spark audit) and dump-log's index listing read it.

Entries are written with pwrite, not through the mapping: on a full disk a store into
a mapped sparse page kills the process with SIGBUS, while pwrite returns ENOSPC,
which the log dir's IoGuard turns into SATURATED. An active segment's lookups read a
read-only mapping; an inactive segment's read the file with pread (a binary search of
a dozen reads at most, the last 4 KiB of candidates in one), and it holds no mapping:
a broker keeps tens of thousands of inactive segments, two mappings each went against
vm.max_map_count (65,530 by default, the limit Kafka's operators raise) and, before
Python 3.13, two descriptors more each.
An index's entry count, last entry and new (pending) entries live in C (`struct
lk_index`, native/index.c), where Kafka's ordering rules and the binary search are
written once: the append path adds entries there without Python, and the classes here
add, search and truncate through the same functions. A full index is IndexFullError,
never an OSError.
An index is not thread-safe: its segment's log serialises access. OSErrors propagate
to the caller (the segment's log runs these calls inside its IoGuard).
"""

from __future__ import annotations

import abc
import errno
import mmap
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any, NamedTuple

import native

from .errors import IndexFullError

__all__ = ["IndexFullError", "OffsetIndex", "TimeIndex", "read_index_entries", "read_index_file",
           "read_written_entries"]

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
_NONZERO = re.compile(rb"[^\x00]")
_READ_CHUNK = 1 << 16  # bytes read at a time
_ZEROS = bytes(_READ_CHUNK)
PENDING_BYTES = native.INDEX_PENDING_BYTES  # new entries kept before one pwrite writes them
# A mapping keeps no descriptor of its own where Python allows (3.13's trackfd): the
# index holds its file open already, and each mapping's dup was two more fds an active
# segment (five, not three: 1,000 partitions held 5,000 descriptors).
_NO_DUP: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class _Index(abc.ABC):
    entry: struct.Struct

    def __init__(self, path: str | os.PathLike[str], base_offset: int, max_index_bytes: int, *,
                 writable: bool):
        self._path_str = os.fspath(path)  # a str, not a Path: see LogSegment
        self.base_offset = base_offset
        self.entry_size = self.entry.size
        self.max_entries = max(max_index_bytes // self.entry_size, 1)
        # Read-write even when inactive: a rebuild after recovery rewrites any index.
        self._fd = os.open(self._path_str, os.O_RDWR | os.O_CREAT, 0o644)
        self._map: mmap.mmap | None = None
        self._map_handle: Any = None
        try:
            length = os.fstat(self._fd).st_size
            # The entry count, the last entry and the new entries live in C
            # (native/index.c), which the append path adds to: an active segment's new
            # entries wait in memory and reach the file in one pwrite (every
            # PENDING_BYTES, and on flush, trim and close), not one syscall each; reads
            # see them through `native.index_pending`. Entries lost in a crash are
            # rebuilt by recovery, which starts at or below the recovery point, and a
            # flush of the log writes them before that moves. See `writable` for which
            # indexes hold such a buffer.
            self.c: Any = native.new_index(self._fd, self.entry_size, base_offset,
                                           self.max_entries, self._count_valid(length))
            self.writable = writable
            if writable:
                self._resize(self.max_entries * self.entry_size)
            else:
                self._remap(length)
        except BaseException:
            self._close_map()
            os.close(self._fd)
            raise

    @property
    def path(self) -> Path:
        return Path(self._path_str)

    @property
    def writable(self) -> bool:
        """An active segment's index: preallocated, new entries written together."""
        return bool(self.c.batched)

    @writable.setter
    def writable(self, on: bool) -> None:
        # Only an active index batches its new entries, in a 512-byte buffer C allocates
        # at its first entry: neither an idle partition nor a broker's thousands of
        # inactive segments hold one; entries a rebuild adds to those are written at once.
        # Only an active index is mapped (the module docstring).
        if not on:
            self.flush_pending()
            self._close_map()
        native.index_batch(self.c, on)

    # -- file and mapping --

    def _remap(self, length: int) -> None:
        self._close_map()
        self._length = length
        if length > 0 and self.writable:
            self._map = mmap.mmap(self._fd, length, prot=mmap.PROT_READ, **_NO_DUP)
            # C's searches read through it too; released before it closes.
            self._map_handle = native.index_map(self.c, self._map)

    def _close_map(self) -> None:
        if self._map is not None:
            if self._map_handle is not None:
                native.index_unmap(self.c, self._map_handle)
                self._map_handle = None
            self._map.close()
            self._map = None

    def _resize(self, length: int) -> None:
        self._close_map()
        os.ftruncate(self._fd, length)
        self._remap(length)

    def _count_valid(self, length: int) -> int:
        """Entries in the file: the written ones (`read_written_entries`), well ordered.

        A trimmed index has exactly floor(length / entry size) entries; a preallocated
        one (an active segment's, after an unclean shutdown or from Kafka) ends at its
        first all-zero entry.
        """
        if length < self.entry_size:
            return 0
        written = read_written_entries(self._fd, self.entry_size)
        return self._valid_prefix(written.data, written.count)

    @abc.abstractmethod
    def _valid_prefix(self, data: bytes, n: int) -> int:
        """How many of the first `n` entries in `data` are real (each kind's rule)."""

    @property
    def entries(self) -> int:
        return self.c.entries

    @entries.setter
    def entries(self, n: int) -> None:
        native.index_truncate(self.c, n)

    def _last_raw(self) -> tuple[int, int]:
        """The last entry's stored fields (C keeps them: appends ask every time)."""
        c = self.c
        if c.last_known:
            return c.last_a, c.last_b
        return self._read_entry(c.entries - 1)

    def _read_entry(self, i: int) -> tuple[int, int]:
        flushed = self.c.flushed
        if i >= flushed:
            return self.entry.unpack_from(native.index_pending(self.c),
                                          (i - flushed) * self.entry_size)
        pos = i * self.entry_size
        if self._map is not None and pos + self.entry_size <= self._length:
            return self.entry.unpack_from(self._map, pos)
        # An inactive index being rebuilt grows past its (trimmed) mapping.
        return self.entry.unpack(os.pread(self._fd, self.entry_size, pos))

    def flush_pending(self) -> None:
        """Write the entries still in memory, in one pwrite (an OSError propagates)."""
        native.index_flush(self.c, path=self._path_str)

    @property
    def room(self) -> int:
        """Entries an append may still add."""
        return self.max_entries - self.entries

    @property
    def is_full(self) -> bool:
        return self.room <= 0

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    def trim(self) -> None:
        """Cut the file to its entries (roll, close, after recovery)."""
        self.flush_pending()
        if self._length != self.size_bytes:
            self._resize(self.size_bytes)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.entries = 0
        self._resize(self.max_entries * self.entry_size if self.writable else 0)

    def truncate_entries(self, n: int) -> None:
        self.entries = min(self.entries, n)

    def sync(self) -> None:
        self.flush_pending()
        os.fsync(self._fd)

    def close(self, *, trim: bool = True, write: bool = True) -> None:
        """Close the file; `write=False` drops what is still in memory (a dead disk)."""
        try:
            if write:
                self.flush_pending()
            if trim and self.writable:
                self.trim()
        finally:
            self._close_map()
            os.close(self._fd)

    def all_entries(self) -> list[tuple[int, int]]:
        return [self._read_entry(i) for i in range(self.entries)]

    def _search(self, key: int, field: int) -> int:
        """Index of the greatest entry whose `field` <= key, or -1 (a binary search in C)."""
        return native.index_search(self.c, field, key, path=self._path_str)


class OffsetIndex(_Index):
    entry = OFFSET_ENTRY

    def _valid_prefix(self, data: bytes, n: int) -> int:
        # Kafka never indexes position 0 (the first batch of a segment).
        last_rel, last_pos = -1, 0
        for i in range(n):
            rel, pos = OFFSET_ENTRY.unpack_from(data, i * 8)
            if rel <= last_rel or pos <= last_pos or rel < 0:
                return i
            last_rel, last_pos = rel, pos
        return n

    def append(self, offset: int, position: int) -> None:
        """Add an entry unless it breaks the order (Kafka keeps entries strictly
        increasing; a repeat is skipped); IndexFullError when there is no slot."""
        if native.index_add(self.c, offset, position, path=self._path_str) == native.INDEX_FULL:
            raise IndexFullError(f"{self.path}: index full at {self.entries} entries")

    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base, 0)."""
        if not self.c.entries:
            return self.base_offset, 0
        rel, pos = self._last_raw()
        return self.base_offset + rel, pos

    def lookup(self, offset: int) -> tuple[int, int]:
        """Greatest entry with offset <= target as (offset, position); (base, 0) if none."""
        i = self._search(offset - self.base_offset, 0)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._read_entry(i)
        return self.base_offset + rel, pos

    def position_floor(self, position: int) -> int:
        """Greatest indexed batch position <= `position` (0, the first batch, if none)."""
        i = self._search(position, 1)
        return 0 if i < 0 else self._read_entry(i)[1]

    def truncate_to_position(self, position: int) -> None:
        """Forget entries pointing at or past `position` (the log was cut there)."""
        n = self.entries
        while n and self._read_entry(n - 1)[1] >= position:
            n -= 1
        self.truncate_entries(n)

    def entries_absolute(self) -> list[tuple[int, int]]:
        return [(self.base_offset + rel, pos) for rel, pos in self.all_entries()]


class TimeIndex(_Index):
    entry = TIME_ENTRY

    def _valid_prefix(self, data: bytes, n: int) -> int:
        last_ts, last_rel = -(2**63), -1
        for i in range(n):
            ts, rel = TIME_ENTRY.unpack_from(data, i * 12)
            if ts <= last_ts or rel < last_rel or rel < 0:
                return i
            last_ts, last_rel = ts, rel
        return n

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base)."""
        if not self.c.entries:
            return -1, self.base_offset
        ts, rel = self._last_raw()
        return ts, self.base_offset + rel

    @property
    def room(self) -> int:
        # As Kafka's TimeIndex: the last slot is kept for the entry forced at roll or close.
        return self.max_entries - 1 - self.entries

    def maybe_append(self, timestamp: int, offset: int, *, at_roll: bool = False) -> None:
        """Append only when the timestamp grows past the last entry (Kafka's rule).

        `at_roll` may take the slot kept back for the roll's (or close's) final entry.
        A timestamp below 0 is never indexed; IndexFullError when there is no slot.
        """
        if native.index_add(self.c, timestamp, offset, reserve_last=not at_roll,
                            path=self._path_str) == native.INDEX_FULL:
            raise IndexFullError(f"{self.path}: time index full at {self.entries} entries")

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Greatest entry with timestamp <= target as (timestamp, offset); (-1, base) if none."""
        i = self._search(timestamp, 0)
        if i < 0:
            return -1, self.base_offset
        ts, rel = self._read_entry(i)
        return ts, self.base_offset + rel

    def truncate_to_offset(self, offset: int) -> None:
        """Forget entries at or past `offset`."""
        n = self.entries
        while n and self.base_offset + self._read_entry(n - 1)[1] >= offset:
            n -= 1
        self.truncate_entries(n)

    def entries_absolute(self) -> list[tuple[int, int]]:
        return [(ts, self.base_offset + rel) for ts, rel in self.all_entries()]


class WrittenEntries(NamedTuple):
    """An index file's written entries (see `read_written_entries`)."""

    data: bytes  # the written entries' bytes: count x entry size
    count: int  # entries before the first all-zero entry
    slots: int  # floor(file length / entry size)
    stray: int | None  # first entry past `count` that is not all zeros, if any


def read_written_entries(fd: int, entry_size: int) -> WrittenEntries:
    """The entries of an index file that were written: those before the first all-zero one.

    Kafka preallocates an active segment's indexes (zero-filled, usually sparse) and
    trims them only on roll, clean close and recovery, so a live or crashed broker's
    active segment ends in zero entries. No written entry is all zeros: an offset-index
    entry never names position 0 (a segment's first batch is not indexed) and a
    time-index entry (0, base) needs a record stamped 0 in the first batch, which is
    then found by scanning from the start anyway. Kafka's DumpLogSegments stops at the
    first entry with relative offset 0 after entry 0; stopping at an all-zero one,
    entry 0 included (an empty log, or one under index.interval.bytes, has none),
    reads the same files the same way.

    `stray` is the first non-zero entry after that point: not preallocated space but a
    zeroed hole among real entries, which a verifier reports. The zero tail is skipped
    where the file system knows it is a hole (SEEK_DATA), so a 10 MiB preallocated
    index costs a read of its written entries, not of 10 MiB. OSErrors propagate.
    """
    slots = os.fstat(fd).st_size // entry_size
    limit = slots * entry_size
    zero = bytes(entry_size)
    chunks: list[bytes] = []
    pos = 0
    while pos < limit:
        chunk = os.pread(fd, min(_READ_CHUNK, limit - pos), pos)
        chunk = chunk[:len(chunk) - len(chunk) % entry_size]
        if not chunk:  # the file shrank under us
            limit = pos
            break
        end = _first_zero_entry(chunk, zero)
        chunks.append(chunk if end is None else chunk[:end])
        pos += len(chunks[-1])
        if end is not None:
            break
    count = pos // entry_size
    nonzero = _first_nonzero(fd, pos, limit)
    return WrittenEntries(b"".join(chunks), count, slots,
                          None if nonzero is None else nonzero // entry_size)


def _first_zero_entry(data: bytes, zero: bytes) -> int | None:
    """Byte position of the first all-zero entry in `data` (entry-aligned), or None."""
    start = 0
    while (hit := data.find(zero, start)) >= 0:
        if hit % len(zero) == 0:
            return hit
        start = hit - hit % len(zero) + len(zero)  # an unaligned run of zeros: go on
    return None


def _first_nonzero(fd: int, start: int, limit: int) -> int | None:
    """File position of the first non-zero byte in [start, limit), or None; holes are
    skipped without reading them."""
    pos = start
    while pos < limit:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
            data_end = min(os.lseek(fd, pos, os.SEEK_HOLE), limit)
        except OSError as err:
            if err.errno == errno.ENXIO:  # nothing but a hole from pos to the end
                return None
            if err.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            data_end = limit  # no hole support here: read it all
        while pos < data_end:
            chunk = os.pread(fd, min(_READ_CHUNK, data_end - pos), pos)
            if not chunk:
                return None
            # A compare with zeros is a memcmp: ~10x faster than counting the zero bytes
            # (a dense 10 MiB tail, copied without holes, costs ~1 ms, not ~10).
            if chunk != (_ZEROS if len(chunk) == _READ_CHUNK else _ZEROS[:len(chunk)]):
                found = _NONZERO.search(chunk)
                assert found is not None
                return pos + found.start()
            pos += len(chunk)
    return None


class IndexFile(NamedTuple):
    """An index file as a verifier reads it (`read_index_file`)."""

    data: bytes  # the written entries, as stored (relative offsets)
    entry: struct.Struct  # OFFSET_ENTRY or TIME_ENTRY
    slots: int  # floor(file length / entry size)
    stray: tuple[int, tuple[int, int]] | None  # (number, fields) of an entry past the end

    @property
    def count(self) -> int:
        """How many entries are written."""
        return len(self.data) // self.entry.size

    @property
    def entries(self) -> list[tuple[int, int]]:
        """The written entries, decoded (a new list each time)."""
        return list(self.entry.iter_unpack(self.data))


def read_index_file(path: str | os.PathLike[str], kind: str) -> IndexFile:
    """An index file's written entries (see `read_written_entries`), unordered: for
    verification, which checks the order itself."""
    entry = OFFSET_ENTRY if kind == "offset" else TIME_ENTRY
    fd = os.open(path, os.O_RDONLY)
    try:
        written = read_written_entries(fd, entry.size)
        stray = None
        if written.stray is not None:
            stray = (written.stray,
                     entry.unpack(os.pread(fd, entry.size, written.stray * entry.size)))
    finally:
        os.close(fd)
    return IndexFile(written.data, entry, written.slots, stray)


def read_index_entries(path: str | os.PathLike[str], kind: str) -> list[tuple[int, int]]:
    """The written entries of an index file as stored (relative), up to a zero-filled tail."""
    return read_index_file(path, kind).entries
