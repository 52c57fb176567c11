"""The Log API: append, read, indexes, roll, retention, truncation, recovery."""

from __future__ import annotations

import os
import struct
import sys
from collections import Counter

import pytest
from kafka.record import MemoryRecords

import native
from logstore import (
    CorruptRecordError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    names,
    verify,
)
from logstore.errors import UnsupportedCodecError
from logstore.index import read_index_entries
from logstore.records import Codec, Record, build_batch, iter_batches
from logstore.segments import LogSegments, open_segment

from .logutil import batch, snapshot
from .sick_helpers import open_files_under


@pytest.fixture
def pdir(tmp_path):
    return tmp_path / "orders-0"


def test_append_assigns_offsets_and_reads_back_in_kafka_python(pdir):
    log = Log.open(pdir)
    infos = [log.append(batch(5), leader_epoch=3) for _ in range(4)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(0, 4), (5, 9), (10, 14), (15, 19)]
    assert log.log_end_offset == 20
    data = log.read(7, 1 << 20)
    mr = MemoryRecords(data)
    offsets = []
    while (b := mr.next_batch()) is not None:
        assert b.validate_crc()
        offsets += [r.offset for r in b]
    assert offsets[0] == 5 and offsets[-1] == 19  # whole batches from the one holding 7
    (first,) = [b for b in iter_batches(data)][:1]
    assert first.partition_leader_epoch == 3
    log.close()


def test_read_returns_whole_batches_and_at_least_one(pdir):
    log = Log.open(pdir)
    for _ in range(10):
        log.append(batch(1, size=1000))
    one = log.read(0, 10)  # smaller than a batch: still one whole batch
    assert len(list(iter_batches(one))) == 1
    some = log.read(2, 3500)
    assert [b.base_offset for b in iter_batches(some)] == [2, 3, 4]
    assert log.read(10, 1000) == b""
    assert log.read(0, 1 << 20, max_offset=4) and \
        [b.base_offset for b in iter_batches(log.read(0, 1 << 20, max_offset=4))] == [0, 1, 2, 3]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)
    log.close()


@pytest.mark.parametrize("mutate, error", [
    (lambda b: b[:-1], CorruptRecordError),                             # torn
    (lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], CorruptRecordError),  # crc
    (lambda b: b[:16] + b"\x01" + b[17:], CorruptRecordError),           # legacy magic
    (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], CorruptRecordError),  # length
    (lambda b: b"", CorruptRecordError),
])
def test_bad_batches_change_nothing(pdir, mutate, error):
    log = Log.open(pdir)
    log.append(batch(3))
    log.flush()
    before = snapshot(pdir)
    with pytest.raises(error):
        log.append(mutate(batch(2)))
    assert snapshot(pdir) == before
    assert log.log_end_offset == 3
    log.close()


@pytest.mark.parametrize("max_message_bytes", [1000, 0])
def test_oversized_batch_is_refused(pdir, max_message_bytes):
    """max.message.bytes 0 is valid (Kafka's range is at least 0) and refuses every batch:
    an input error, never an OSError (which would take the log dir offline)."""
    log = Log.open(pdir, LogConfig(max_message_bytes=max_message_bytes))
    before = snapshot(pdir)
    with pytest.raises(RecordTooLargeError) as info:
        log.append(batch(1, size=2000))
    assert info.value.error_code == 10
    assert "over max.message.bytes" in str(info.value)
    assert snapshot(pdir) == before and log.log_end_offset == 0
    log.close()


def test_an_append_over_segment_bytes_is_refused_as_kafka_refuses_it(pdir):
    """Kafka's UnifiedLog.append: a leader's append whose batches, together, are over
    segment.bytes is RECORD_LIST_TOO_LARGE (one batch or several), nothing written; a
    follower's append of the same bytes is taken (Kafka 3.9 refuses it too, failing the
    follower; see Log._refuse_over_segment)."""
    log = Log.open(pdir, LogConfig(segment_bytes=1000))
    before = snapshot(pdir)
    for data in (batch(1, size=1500), batch(1, size=600) + batch(1, size=600)):
        with pytest.raises(RecordBatchTooLargeError) as info:
            log.append(data)
        assert info.value.error_code == 18
        assert str(info.value).endswith(
            f"Message batch size is {len(data)} bytes in append to partition {pdir.name}, "
            "which exceeds the maximum configured segment size of 1000.")
        assert snapshot(pdir) == before and log.log_end_offset == 0
    first = log.append(batch(1, size=600))  # one that fits is written
    assert (first.base_offset, log.log_end_offset) == (0, 1)
    log.close()

    follower = Log.open(pdir.parent / "f-0", LogConfig(segment_bytes=1000))
    leader_written = bytearray(batch(1, size=600) + batch(1, size=600))
    native.assign_offsets(leader_written, 0, 0)
    info = follower.append(leader_written, assign_offsets=False)
    assert (info.base_offset, info.last_offset, follower.log_end_offset) == (0, 1, 2)
    follower.close()


def test_index_layout_matches_kafka(pdir):
    cfg = LogConfig(index_interval_bytes=4096, max_index_bytes=1024 * 12)
    log = Log.open(pdir, cfg)
    batches = [log.append(batch(1, size=16 * 1024)) for _ in range(6)]
    seg = log.active_segment
    # Active indexes are preallocated to max_index_bytes (rounded down to the entry size).
    assert os.path.getsize(seg.index_path) == (cfg.max_index_bytes // 8) * 8
    assert os.path.getsize(seg.time_index_path) == cfg.max_index_bytes // 12 * 12
    log.roll()
    entries = read_index_entries(seg.index_path, "offset")
    # Every batch after the first gets an entry: last offset -> batch start position.
    assert entries == [(b.last_offset, b.position) for b in batches[1:]]
    assert os.path.getsize(seg.index_path) == 8 * len(entries)  # trimmed on roll
    assert verify.verify_segment(seg.log_path).problems == []
    log.close()


def test_roll_by_size_and_by_time(pdir):
    log = Log.open(pdir, LogConfig(segment_bytes=3000))
    for _ in range(9):
        log.append(batch(1, size=900))
    assert log.segment_count == 3
    assert sorted(f for f in os.listdir(pdir) if f.endswith(".log")) == [
        names.log_file_name(0), names.log_file_name(3), names.log_file_name(6)]
    log.close()
    tlog = Log.open(pdir.with_name("t-0"), LogConfig(segment_ms=1000))
    tlog.append(batch(1, ts=1_000))
    tlog.append(batch(1, ts=1_900))  # within segment.ms of the first batch
    assert tlog.segment_count == 1
    tlog.append(batch(1, ts=2_500))  # past it: Kafka rolls by record time
    assert tlog.segment_count == 2
    tlog.close()


def test_retention_by_time_and_size(tmp_path):
    now = 1_700_000_000_000
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1500, retention_ms=10_000))
    for i in range(6):
        log.append(batch(1, size=1000, ts=now - 60_000 + i * 10_000))
    assert log.segment_count == 6
    deleted = log.apply_retention(now_ms=now)  # the newest is exactly 10 s old: kept
    assert deleted == 5 and log.log_start_offset == 5
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # Everything expired: the log rolls and even the active segment's bytes go.
    assert log.apply_retention(now_ms=now + 10**9) == 1
    assert log.size_bytes == 0 and log.log_start_offset == log.log_end_offset == 6
    log.close()
    slog = Log.open(tmp_path / "s-0", LogConfig(segment_bytes=1500, retention_bytes=2500,
                                                retention_ms=-1))
    for _ in range(6):
        slog.append(batch(1, size=1000))
    seg_size = slog.segments[0].size
    # Kafka deletes while the log stays at or above retention.bytes.
    assert slog.apply_retention() == 3
    assert 2500 <= slog.size_bytes < 2500 + seg_size and slog.log_start_offset == 3
    slog.close()


def test_a_brokers_retention_deletes_nothing_above_the_high_watermark(tmp_path):
    """Kafka's deletableSegments: on a broker (replicated=True) a segment goes only when
    the high watermark has passed its end, however old; the high watermark never jumps
    over records the followers have not copied."""
    now = 1_700_000_000_000
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1500, retention_ms=10_000))
    for i in range(4):
        log.append(batch(1, size=1000, ts=now - 60_000 + i * 1000))
    assert log.segment_count == 4  # segments at 0, 1, 2, 3: all expired
    log.high_watermark = 2  # the followers have offsets 0 and 1
    assert log.apply_retention(now_ms=now, replicated=True) == 2
    assert log.log_start_offset == 2 and log.high_watermark == 2
    assert log.apply_retention(now_ms=now, replicated=True) == 0
    log.high_watermark = 4  # all copied: even the active segment may go
    assert log.apply_retention(now_ms=now, replicated=True) == 2
    assert log.log_start_offset == log.log_end_offset == log.high_watermark == 4
    log.close()


def test_offset_for_timestamp_uses_time_index(pdir):
    log = Log.open(pdir, LogConfig(segment_bytes=5000, index_interval_bytes=100))
    for i in range(20):
        log.append(build_batch([Record(b"k", b"v" * 500, [], 1000 + 10 * i)]))
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1095) == (10, 1100)
    assert log.offset_for_timestamp(5000) is None
    log.close()


def test_truncate_to(pdir):
    log = Log.open(pdir, LogConfig(segment_bytes=2500))
    for _ in range(10):
        log.append(batch(1, size=1000))
    log.truncate_to(5)
    assert log.log_end_offset == 5
    assert log.append(batch(1)).base_offset == 5
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.close()


def test_log_segments_floor_index_edges(tmp_path):
    segs = LogSegments()
    assert segs.floor_index(5) == 0  # no segments: 0, as for an offset below the first base
    opened = [open_segment(tmp_path, base, LogConfig(), active=base == 30) for base in (10, 20, 30)]
    for seg in opened:
        segs.append(seg)
    assert [segs.floor_index(o) for o in (0, 9, 10, 19, 20, 29, 30, 10**12)] == \
        [0, 0, 0, 0, 1, 1, 2, 2]
    assert segs.active is opened[2] and segs.first is opened[0] and segs[1:] == opened[1:]
    segs.remove_after(1)
    assert segs.to_list() == opened[:2] and segs.floor_index(35) == 1
    segs.remove_first(1)
    assert segs.to_list() == [opened[1]] and segs.floor_index(15) == 0
    assert segs.remove_last() is opened[1] and len(segs) == 0
    for seg in opened:
        seg.close()


SMALL = LogConfig(segment_bytes=4000, index_interval_bytes=500)


def _write_segments(pdir, n=10, cfg=SMALL):
    log = Log.open(pdir, cfg)
    for _ in range(n):
        log.append(batch(2, size=500))
    log.flush()
    segs = [s.log_path for s in log.segments]
    log.close()
    return segs


def test_recovery_cuts_a_torn_tail(pdir):
    segs = _write_segments(pdir)
    last = segs[-1]
    size = os.path.getsize(last)
    with open(last, "ab") as f:
        f.write(batch(1)[:40])  # a half-written batch, as a crash leaves it
    log = Log.open(pdir)
    assert log.recovery.bytes_truncated == 40
    assert os.path.getsize(last) == size and log.log_end_offset == 20
    assert log.append(batch(1)).base_offset == 20
    log.close()


def test_recovery_drops_everything_after_a_flipped_byte(pdir):
    segs = _write_segments(pdir)
    victim = segs[1]
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    later = sum(os.path.getsize(s) for s in segs[2:])
    log = Log.open(pdir)
    assert log.recovery.segments_deleted == [int(s.stem) for s in segs[2:]]
    assert log.recovery.bytes_truncated > later
    assert log.segment_count == 2
    assert all(not s.exists() for s in segs[2:])
    end = log.log_end_offset
    assert end < 20 and log.append(batch(1)).base_offset == end
    log.close()
    assert verify.verify_segment(victim).problems == []


def test_recovery_rebuilds_missing_and_corrupt_indexes(pdir):
    segs = _write_segments(pdir)
    first_index = segs[0].with_suffix(".index")
    good = first_index.read_bytes()
    assert good
    first_index.unlink()
    second_index = segs[1].with_suffix(".index")
    with open(second_index, "r+b") as f:
        f.write(struct.pack(">ii", 1, 10**6))  # an entry pointing past the log
    # Clean shutdown marker present: no full recovery, only the index checks.
    (pdir.parent / ".kafka_cleanshutdown").touch()
    log = Log.open(pdir, SMALL)
    assert log.recovery.indexes_rebuilt == [int(segs[0].stem), int(segs[1].stem)]
    log.close()
    assert first_index.read_bytes() == good
    for s in segs:
        assert verify.verify_segment(s).problems == []


def test_unclean_reopen_keeps_every_appended_record(pdir):
    log = Log.open(pdir, LogConfig(segment_bytes=3000))
    for _ in range(7):
        log.append(batch(3, size=300))
    # No close: the fds are dropped as a killed process would drop them.
    log.close_quietly()
    again = Log.open(pdir)
    assert again.log_end_offset == 21 and again.recovery.recovered
    data = again.read(0, 1 << 20)
    assert [b.base_offset for b in iter_batches(data)][0] == 0
    again.close()


def _batches_at(ts: int, n: int) -> bytes:
    return b"".join(batch(1, size=10, ts=ts + i) for i in range(n))


@pytest.mark.parametrize("leader_append", [True, False], ids=["leader", "follower"])
def test_a_full_index_rolls_instead_of_failing_the_dir(tmp_path, leader_append):
    """30 batches in one append into 80-byte indexes (10 offset, 6 time entries): Kafka
    rolls; it never calls a full index a disk failure (it once took the dir OFFLINE)."""
    from logstore import FailureChannel, IoGuard
    from logstore.errors import Verdict

    channel = FailureChannel()
    guard = IoGuard(tmp_path, channel)
    cfg = LogConfig(index_interval_bytes=0, max_index_bytes=80)
    lg = Log.open(tmp_path / "t-0", cfg, guard=guard)
    data = bytearray(_batches_at(1_700_000_000_000, 30))
    if not leader_append:  # a follower's fetched batches carry their offsets already
        native.assign_offsets(data, 0, 3)
    info = lg.append(bytes(data), leader_epoch=3, assign_offsets=leader_append)
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 29, 30)
    assert channel.get(timeout=0) is None and guard.verdict is Verdict.NONE
    assert lg.segment_count > 1
    for seg in lg.segments:
        assert seg.offset_index.entries <= seg.offset_index.max_entries
        assert seg.time_index.entries <= seg.time_index.max_entries
    offsets = []
    pos = 0
    while pos < lg.log_end_offset:
        chunk = lg.read(pos, 1 << 20)
        offsets += [b.base_offset for b in native.scan_batches(chunk)]
        pos = offsets[-1] + 1
    assert offsets == list(range(30))
    lg.close()
    reopened = Log.open(tmp_path / "t-0", cfg, guard=guard)
    assert reopened.log_end_offset == 30 and reopened.recovery.bytes_truncated == 0
    assert reopened.offset_for_timestamp(1_700_000_000_000 + 17)[0] == 17
    reopened.close()


def test_a_leader_append_never_changes_the_callers_bytes(pdir):
    """Offsets and the leader epoch go into the written copy (one pwritev); the request's
    own bytes are neither copied nor changed."""
    log = Log.open(pdir)
    log.append(batch(2))
    data = batch(3) + batch(1)
    before = bytes(data)
    info = log.append(data, leader_epoch=7)
    assert data == before
    assert (info.base_offset, info.last_offset, info.record_count) == (2, 5, 4)
    got = list(iter_batches(log.read(2, 1 << 20)))
    assert [(b.base_offset, b.partition_leader_epoch) for b in got] == [(2, 7), (5, 7)]
    log.close()


@pytest.mark.parametrize("which", ["crc", "count", "too_large"])
def test_one_bad_batch_in_a_many_batch_append_writes_none_of_them(pdir, which):
    log = Log.open(pdir, LogConfig(max_message_bytes=4000))
    log.append(batch(1))
    good = batch(2)
    bad = bytearray(batch(2))
    if which == "crc":
        bad[-1] ^= 1
    elif which == "count":
        bad[57:61] = struct.pack(">i", 5)  # 5 records but lastOffsetDelta 1, CRC redone
        bad[17:21] = struct.pack(">I", native.crc32c(bytes(bad[21:])))
    else:
        bad = bytearray(batch(1, size=5000))
    files = snapshot(pdir)
    with pytest.raises(RecordTooLargeError if which == "too_large" else CorruptRecordError):
        log.append(good + bytes(bad) + good)
    assert snapshot(pdir) == files and log.log_end_offset == 1
    log.close()


def test_a_follower_batch_below_the_log_end_is_refused(pdir):
    log = Log.open(pdir)
    log.append(batch(3))
    stale = bytearray(batch(1))
    native.assign_offsets(stale, 1, 0)
    with pytest.raises(UnexpectedAppendOffsetError, match="below log end 3") as info:
        log.append(bytes(stale), assign_offsets=False)
    assert (info.value.first_offset, info.value.log_end_offset, info.value.error_code) == (1, 3, 2)
    assert log.log_end_offset == 3
    log.close()


def test_incoming_timestamps_past_segment_ms_roll_the_whole_append(pdir):
    """segment.ms counts from the segment's first timestamp to the append's largest:
    when that is over, all of the append starts a new segment (Kafka's maybeRoll)."""
    log = Log.open(pdir, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=1_700_000_000_000))
    log.append(batch(1, ts=1_700_000_000_500) + batch(1, ts=1_700_000_002_000))
    assert [s.base_offset for s in log.segments] == [0, 1]
    log.close()


def test_segment_jitter_rolls_each_segment_a_random_while_before_segment_ms(pdir):
    """segment.jitter.ms (Kafka's rollJitterMs): each new segment draws a jitter below
    min(segment.jitter.ms, segment.ms) and rolls that much before segment.ms."""
    log = Log.open(pdir, LogConfig(segment_ms=10_000, segment_jitter_ms=8_000))
    base = 1_700_000_000_000  # the active segment's first timestamp
    log.append(batch(1, ts=base))
    jitters = []
    for _ in range(20):
        j = log.roll_jitter_ms
        jitters.append(j)
        assert 0 <= j < 8_000
        first = log.segment_count
        log.append(batch(1, ts=base + 10_000 - j))  # exactly the jittered roll time: kept
        assert log.segment_count == first
        base += 10_000 - j + 1
        log.append(batch(1, ts=base))  # past it: a new segment, with a jitter of its own
        assert log.segment_count == first + 1
    assert len(set(jitters)) > 1  # drawn per segment, not once
    log.close()
    # Without jitter (the default) every segment rolls at segment.ms exactly.
    assert Log.open(pdir, LogConfig(segment_ms=10_000)).roll_jitter_ms == 0


def test_a_reopened_segment_rolls_by_its_first_batchs_timestamp(pdir):
    """The segment.ms base of a segment opened from disk is its first batch's timestamp,
    read from the .log by the append (nothing in memory knows it after a restart)."""
    log = Log.open(pdir, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=1_700_000_000_000))
    log.close()
    log = Log.open(pdir, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=1_700_000_000_900))
    assert log.segment_count == 1
    log.append(batch(1, ts=1_700_000_001_500))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_a_segment_without_timestamps_rolls_by_the_wall_clock(pdir):
    """A first batch without a timestamp (-1): segment.ms counts from the segment's
    creation by the wall clock, as Kafka's rollingBasedTimestamp falls back to."""
    log = Log.open(pdir, LogConfig(segment_ms=60_000))
    log.append(batch(1, ts=-1))
    log.append(batch(1, ts=-1))
    assert log.segment_count == 1
    log.active_segment.c.created_ms -= 61_000  # as if opened a minute ago
    log.append(batch(1, ts=-1))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_a_failed_index_write_leaves_the_segment_as_it_was(tmp_path):
    """An index write that fails in the middle of an append (here its fd is swapped for a
    read-only one): the append raises the dir's storage error, the .log is cut back,
    the index entries it added are dropped, and files and state are as before; with the
    fd back, appends go on from the same log end."""
    from logstore import IoGuard, LogDirOfflineError

    part = tmp_path / "t-0"
    lg = Log.open(part, LogConfig(index_interval_bytes=0), guard=IoGuard(tmp_path))
    lg.append(_batches_at(1_700_000_000_000, 3))
    seg = lg.active_segment
    before = (snapshot(part), lg.log_end_offset, seg.size, seg.offset_index.entries,
              seg.time_index.entries, seg.max_timestamp, seg.bytes_since_index)
    index_fd = seg.time_index._fd
    saved = os.dup(index_fd)
    readonly = os.open(os.devnull, os.O_RDONLY)
    os.dup2(readonly, index_fd)
    try:
        # 400 new time-index entries, several PENDING_BYTES: written in the middle of
        # the call.
        with pytest.raises(LogDirOfflineError, match="append"):
            lg.append(_batches_at(1_700_000_001_000, 400))
    finally:
        os.dup2(saved, index_fd)
        os.close(saved)
        os.close(readonly)
    assert (snapshot(part), lg.log_end_offset, seg.size, seg.offset_index.entries,
            seg.time_index.entries, seg.max_timestamp, seg.bytes_since_index) == before
    info = lg.append(_batches_at(1_700_000_002_000, 400))
    assert (info.base_offset, info.last_offset) == (3, 402)
    lg.close()
    again = Log.open(part, LogConfig(index_interval_bytes=0))
    assert again.log_end_offset == 403 and again.recovery.bytes_truncated == 0
    assert again.offset_for_timestamp(1_700_000_002_000 + 17)[0] == 20
    again.close()


def test_index_entries_wait_in_memory_and_are_written_together(tmp_path):
    """An offset index's new entries reach the file in one write per PENDING_BYTES (64
    entries), and lookups see them before and after; entries that do not grow are
    skipped, and after a truncation below what was written the index goes on from
    there."""
    from bisect import bisect_right

    from logstore.index import PENDING_BYTES, OffsetIndex

    per_write = PENDING_BYTES // 8
    idx = OffsetIndex(tmp_path / "0.index", 1000, 1 << 20, writable=True)
    added = [(1000 + 2 * i + 1, 100 * (i + 1)) for i in range(600)]
    for n, (offset, position) in enumerate(added, 1):
        idx.append(offset, position)
        idx.append(offset, position)  # a repeat: skipped
        on_disk = os.pread(idx._fd, 8, (n - 1) * 8) != bytes(8)
        # Each write takes the entries since the last: the 64th, 128th, ... go with theirs.
        assert on_disk == (n % per_write == 0), n
        if n > per_write:  # the ones before the last write are there, the rest wait
            written = n // per_write * per_write
            assert os.pread(idx._fd, 8, (written - 1) * 8) != bytes(8)
            assert os.pread(idx._fd, 8, written * 8) == bytes(8)

    def expect(offset):
        i = bisect_right([o for o, _ in kept], offset) - 1
        return kept[i] if i >= 0 else (1000, 0)

    kept = added
    assert idx.entries == 600 and os.pread(idx._fd, 8, 0) != bytes(8)
    for probe in (999, 1000, 1001, 1002, 2023, 2024, 2025, 2200, 5000):
        assert idx.lookup(probe) == expect(probe), probe
        assert idx.position_floor(probe * 10) == _floor_position(kept, probe * 10)
    idx.truncate_entries(300)
    kept = added[:300]
    assert idx.entries == 300 and idx.last_entry() == kept[-1]
    for probe in (1500, 1599, 1600, 1601, 3000):
        assert idx.lookup(probe) == expect(probe), probe
    idx.append(1601, 100)  # below the last entry now: skipped
    idx.append(5000, 90_000)
    assert idx.last_entry() == (5000, 90_000) and idx.entries == 301
    idx.close()
    assert read_index_entries(tmp_path / "0.index", "offset")[-1] == (4000, 90_000)
    assert len(read_index_entries(tmp_path / "0.index", "offset")) == 301


def test_only_an_active_index_with_entries_holds_a_pending_buffer(tmp_path):
    """An active index allocates its pending buffer at its first entry (an idle
    partition holds none); becoming inactive writes what is pending and frees it; an
    inactive index being rebuilt writes each entry at once. Entries read the same
    throughout, from memory or from the file."""
    from logstore.index import OffsetIndex
    from native import _ffi

    idx = OffsetIndex(tmp_path / "0.index", 0, 1 << 20, writable=True)
    assert idx.writable and idx.c.pending == _ffi.NULL  # idle: no buffer
    idx.append(5, 100)
    idx.append(9, 200)
    assert idx.c.pending != _ffi.NULL and os.pread(idx._fd, 16, 0) == bytes(16)  # waiting
    assert idx.last_entry() == (9, 200) and idx.lookup(6) == (5, 100)
    idx.trim()  # a roll: written and cut to its entries...
    idx.writable = False  # ...then inactive
    assert idx.c.pending == _ffi.NULL
    assert read_index_entries(tmp_path / "0.index", "offset") == [(5, 100), (9, 200)]
    idx.append(12, 300)  # a rebuild: straight to the file
    assert idx.c.pending == _ffi.NULL and idx.c.flushed == idx.entries == 3
    assert os.pread(idx._fd, 8, 16) == struct.pack(">ii", 12, 300)
    assert idx.lookup(20) == (12, 300) and idx.all_entries() == [(5, 100), (9, 200), (12, 300)]
    idx.writable = True
    idx.append(15, 400)
    with pytest.raises(ValueError, match="1 index entries not written yet"):
        native.index_batch(idx.c, False)
    idx.writable = False  # the setter writes them first
    assert os.pread(idx._fd, 8, 24) == struct.pack(">ii", 15, 400)
    idx.close()


def _malloc_in_use() -> int:
    """Bytes glibc malloc has handed out and not had back (mallinfo2: uordblks, plus
    hblkhd for blocks it mmapped), over every arena."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


@pytest.mark.skipif(os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's mallinfo2")
def test_an_append_of_many_batches_leaves_no_memory_sized_for_it_behind(tmp_path):
    """A follower's append can carry thousands of small batches; the log's room for
    their headers is made for that call and given back after it, not kept per partition
    (each log kept ~190 KiB after one such append, ~1.2 MiB after a 1 MiB one)."""
    many = b"".join(batch(1, size=10) for _ in range(2000))
    logs = [Log.open(tmp_path / f"t-{i}") for i in range(40)]
    before = _malloc_in_use()
    for log in logs:
        info = log.append(many, leader_epoch=1)
        assert (info.base_offset, info.last_offset) == (0, 1999)
    grown = _malloc_in_use() - before
    # Two index buffers of 528 bytes a log are expected; 40 logs x 190 KiB are not.
    assert grown < 2 << 20, f"{grown} bytes still held after the appends"
    for log in logs:  # every batch landed, in order, with its offset
        read = list(iter_batches(log.read(0, 1 << 20)))
        assert [b.base_offset for b in read] == list(range(2000))
        assert all(b.partition_leader_epoch == 1 for b in read)
        log.close()


def _floor_position(entries, position):
    """The greatest indexed position <= position (0 when none), as position_floor."""
    found = [p for _, p in entries if p <= position]
    return found[-1] if found else 0


@pytest.mark.parametrize("count", [1, 7, 511, 512, 513, 3000])
def test_an_inactive_index_answers_lookups_without_a_mapping_as_a_mapped_one_does(
        tmp_path, count):
    """An inactive segment's indexes are read with pread (no mapping: vm.max_map_count);
    its lookups answer what the active segment's mapped ones answer, for every key, at
    the sizes around one 4 KiB read of candidates (512 offset entries, 341 time ones)."""
    import bisect

    from logstore.index import OffsetIndex, TimeIndex

    offsets = [(3 * i + 1, 100 * i + 40) for i in range(count)]  # (relative offset, pos)
    times = [(1_000 + 5 * i, 3 * i + 1) for i in range(count)]  # (timestamp, rel offset)
    mapped_o = OffsetIndex(tmp_path / "0.index", 0, 1 << 20, writable=True)
    mapped_t = TimeIndex(tmp_path / "0.timeindex", 0, 1 << 20, writable=True)
    for (rel, pos), (ts, trel) in zip(offsets, times, strict=True):
        mapped_o.append(rel, pos)
        mapped_t.maybe_append(ts, trel)
    mapped_o.flush_pending()
    mapped_t.flush_pending()
    inactive_o = OffsetIndex(tmp_path / "0.index", 0, 1 << 20, writable=False)
    inactive_t = TimeIndex(tmp_path / "0.timeindex", 0, 1 << 20, writable=False)
    assert mapped_o._map is not None and inactive_o._map is None and inactive_t._map is None
    assert inactive_o.entries == inactive_t.entries == count
    for key in range(-1, 3 * count + 3):
        i = bisect.bisect_right([o for o, _ in offsets], key) - 1
        want = offsets[i] if i >= 0 else (0, 0)
        assert inactive_o.lookup(key) == mapped_o.lookup(key) == want
        tkey = 995 + key * 5 // 3
        j = bisect.bisect_right([t for t, _ in times], tkey) - 1
        twant = times[j] if j >= 0 else (-1, 0)
        assert inactive_t.lookup(tkey) == mapped_t.lookup(tkey) == twant
    for pos in (0, 39, 40, 41, 100 * count, 100 * count + 100):
        assert inactive_o.position_floor(pos) == mapped_o.position_floor(pos)
    for idx in (mapped_o, mapped_t, inactive_o, inactive_t):
        idx.close(trim=False)


def test_a_time_index_keeps_its_last_slot_for_the_roll(tmp_path):
    from logstore.errors import IndexFullError
    from logstore.index import TimeIndex

    idx = TimeIndex(tmp_path / "0.timeindex", 10, 36, writable=True)  # 3 slots
    idx.maybe_append(-1, 10)  # no timestamp: never indexed
    idx.maybe_append(100, 11)
    idx.maybe_append(100, 12)  # the timestamp does not grow: skipped
    idx.maybe_append(200, 11)
    assert idx.entries_absolute() == [(100, 11), (200, 11)] and idx.is_full
    with pytest.raises(IndexFullError):
        idx.maybe_append(300, 13)
    idx.maybe_append(300, 13, at_roll=True)
    with pytest.raises(IndexFullError):
        idx.maybe_append(400, 14, at_roll=True)
    assert idx.lookup(250) == (200, 11) and idx.lookup(99) == (-1, 10)
    idx.close()
    assert read_index_entries(tmp_path / "0.timeindex", "time") == [(100, 1), (200, 1), (300, 3)]


def test_reads_match_a_scan_of_the_segments(pdir):
    """Log.read against a reference built from a plain scan of every segment: offsets in
    the middle of batches, byte limits above and below a batch, max_offset inside and at
    the start of a batch, sequential reads (which start where the last one stopped), and
    a truncation and new appends under that remembered place."""
    import random

    rng = random.Random(13)
    log = Log.open(pdir, LogConfig(segment_bytes=6000, index_interval_bytes=700))
    for _ in range(60):
        log.append(batch(rng.randint(1, 5), size=rng.randint(10, 400)))

    def reference(offset, max_bytes, max_offset):
        for seg in log.segments:
            data = seg.read_exact(0, seg.size)
            batches = list(native.scan_batches(data))
            at = [b for b in batches if b.last_offset >= offset]
            if not at:
                continue
            first = at[0]
            if max_offset is not None and first.base_offset >= max_offset:
                return []
            limit = first.position + max(max_bytes, first.size)
            out = [first]
            for b in at[1:]:
                if b.position + b.size > limit or (max_offset is not None
                                                   and b.base_offset >= max_offset):
                    break
                out.append(b)
            return [(b.base_offset, b.last_offset) for b in out]
        return []

    def got(offset, max_bytes, max_offset=None):
        data = log.read(offset, max_bytes, max_offset=max_offset)
        return [(b.base_offset, b.last_offset) for b in native.scan_batches(data)]

    end = log.log_end_offset
    for _ in range(300):
        offset = rng.randint(0, end)
        max_bytes = rng.choice([0, 1, 100, 500, 1500, 5000, 1 << 20])
        max_offset = rng.choice([None, offset, offset + 1, rng.randint(0, end + 3)])
        assert got(offset, max_bytes, max_offset) == reference(offset, max_bytes, max_offset), \
            (offset, max_bytes, max_offset)
    offset, seen = 0, []
    while offset < end:  # a consumer: each read starts where the last one stopped
        part = got(offset, 700)
        assert part == reference(offset, 700, None)
        seen += part
        offset = part[-1][1] + 1
    assert [b for b, _ in seen] == sorted({b for b, _ in seen}) and seen[-1][1] == end - 1
    got(20, 300)  # remembers where a read from 20 would go on
    log.truncate_to(18)
    log.append(batch(7, size=50))
    assert got(18, 1 << 20) == reference(18, 1 << 20, None)
    assert got(21, 300) == reference(21, 300, None)
    log.close()


def test_compression_type_recompresses_a_leaders_batches_only(pdir, tmp_path):
    """compression.type=zstd: a leader's batches in other codecs are written in zstd with
    their records, producer fields and timestamps as sent; a zstd batch and a control
    batch are written as they came; a follower's batches are copied as they are; a
    corrupt batch is refused, not given a new CRC."""
    log = Log.open(pdir, LogConfig(compression_type="zstd"))
    recs = [Record(key=b"k%d" % i, value=b"v" * 200, headers=[("h", b"%d" % i)],
                   timestamp=1_700_000_000_000 + i) for i in range(20)]
    plain = build_batch(recs, producer_id=9, producer_epoch=2, base_sequence=40)
    gz = build_batch(recs[:5], codec=Codec.GZIP)
    zs = build_batch(recs[5:8], codec=Codec.ZSTD)
    control = build_batch([Record(key=b"\0\0\0\0", value=b"\0\0\0\0\0\0")], control=True,
                          transactional=True, producer_id=9, producer_epoch=2)
    info = log.append(plain + gz + zs + control, leader_epoch=4)
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 28, 29)
    got = list(iter_batches(log.read(0, 1 << 20)))
    assert [Codec(b.codec) for b in got] == [Codec.ZSTD, Codec.ZSTD, Codec.ZSTD, Codec.NONE]
    assert all(b.crc_valid() for b in got)
    assert (got[0].producer_id, got[0].producer_epoch, got[0].base_sequence) == (9, 2, 40)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got[0].records()] == \
        [(r.key, r.value, r.headers, r.timestamp) for r in recs]
    assert [r.offset for r in got[1].records()] == list(range(20, 25))
    assert got[2].data[61:] == zs[61:]  # already zstd: its records area as sent
    assert got[3].is_control and got[3].data[61:] == control[61:]

    # A follower copies the leader's batches, whatever its own compression.type.
    (tmp_path / "f").mkdir()
    follower = Log.open(tmp_path / "f" / "orders-0", LogConfig(compression_type="gzip"))
    follower.append(bytes(log.read(0, 1 << 20)), assign_offsets=False)
    assert bytes(follower.read(0, 1 << 20)) == bytes(log.read(0, 1 << 20))

    # uncompressed: a compressed batch is written decompressed.
    log.update_config(log.config.replace(compression_type="uncompressed"))
    log.append(build_batch(recs[:3], codec=Codec.LZ4), leader_epoch=4)
    last = list(iter_batches(log.read(29, 1 << 20)))
    assert [Codec(b.codec) for b in last] == [Codec.NONE] and last[0].records_count == 3

    # A corrupt batch (a flipped byte in its compressed records) is refused, as it
    # would be without a compression.type: nothing is written.
    bad = bytearray(build_batch(recs[:3], codec=Codec.GZIP))
    bad[-5] ^= 0xFF
    end = log.log_end_offset
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad), leader_epoch=4)
    assert log.log_end_offset == end
    # A codec id Kafka does not define (6), CRC and all valid: refused (76), not written.
    odd = bytearray(build_batch(recs[:3]))
    struct.pack_into(">h", odd, 21, 6)
    struct.pack_into(">I", odd, 17, native.crc32c(memoryview(odd)[21:]))
    with pytest.raises(UnsupportedCodecError):
        log.append(bytes(odd), leader_epoch=4)
    assert log.log_end_offset == end
    log.close()
    follower.close()


def test_log_append_time_stamps_a_leaders_batches_with_the_time_written(pdir, tmp_path):
    """message.timestamp.type=LogAppendTime: each batch a leader writes carries the
    LogAppendTime attribute and the append's time as its max timestamp (CRC rewritten,
    records untouched, compressed ones too), which the append returns and the time
    index keeps; a follower copies the leader's batches as they are."""
    import time

    log = Log.open(pdir, LogConfig(timestamp_type="LogAppendTime"))
    old = 1_600_000_000_000
    recs = [Record(key=b"k%d" % i, value=b"v", timestamp=old + i) for i in range(5)]
    before = int(time.time() * 1000)
    info = log.append(build_batch(recs) + build_batch(recs, codec=Codec.GZIP), leader_epoch=1)
    after = int(time.time() * 1000)
    assert before <= info.log_append_time <= after
    got = list(iter_batches(log.read(0, 1 << 20)))
    assert [(b.log_append_time, b.max_timestamp, b.crc_valid()) for b in got] == \
        [(True, info.log_append_time, True)] * 2
    assert [r.timestamp for r in got[1].records()] == [info.log_append_time] * 5
    assert log.offset_for_timestamp(before)[0] == 0
    assert log.offset_for_timestamp(after + 1) is None
    (tmp_path / "f").mkdir()
    follower = Log.open(tmp_path / "f" / "orders-0", LogConfig())
    assert follower.append(bytes(log.read(0, 1 << 20)), assign_offsets=False).log_append_time == -1
    assert bytes(follower.read(0, 1 << 20)) == bytes(log.read(0, 1 << 20))
    # CreateTime (the default): the producers' timestamps, no append time.
    log.update_config(log.config.replace(timestamp_type="CreateTime"))
    info = log.append(build_batch(recs), leader_epoch=1)
    assert info.log_append_time == -1
    assert list(iter_batches(log.read(10, 1 << 20)))[0].max_timestamp == old + 4
    log.close()
    follower.close()


@pytest.mark.parametrize("codec, low, high", [("gzip", 1, 9), ("zstd", 1, 19), ("lz4", 1, 12)])
def test_compression_level_sets_how_hard_the_leader_compresses(tmp_path, codec, low, high):
    """compression.<codec>.level: the same records recompressed at a higher level take
    fewer bytes, and read back the same."""
    text = b" ".join(b"record %d of a compressible log, %s" % (i, b"ab" * (i % 7))
                     for i in range(2000))
    recs = [Record(key=b"k%d" % i, value=text[i * 40:(i + 1) * 40 + 200]) for i in range(300)]
    sizes, read = {}, {}
    for level in (low, high):
        (tmp_path / str(level)).mkdir()
        log = Log.open(tmp_path / str(level) / "t-0", LogConfig(
            compression_type=codec, **{f"compression_{codec}_level": level}))
        info = log.append(build_batch(recs), leader_epoch=0)
        [b] = iter_batches(log.read(0, 1 << 20))
        sizes[level], read[level] = info.size, [(r.key, r.value) for r in b.records()]
        log.close()
    assert sizes[high] < sizes[low], sizes
    assert read[low] == read[high] == [(r.key, r.value) for r in recs]


def _index_mappings(pdir) -> Counter[str]:
    """This process's mappings of files under pdir, by file name."""
    with open("/proc/self/maps") as maps:
        return Counter(os.path.basename(line.split(maxsplit=5)[5].strip())
                       for line in maps
                       if len(line.split(maxsplit=5)) == 6 and str(pdir) in line)


@pytest.mark.parametrize("reopen", [False, True])
def test_each_segment_holds_one_descriptor_per_file(pdir, reopen):
    # A broker's descriptor and mapping limits go by the segments it holds: each keeps
    # its .log, .index and .timeindex open; only the active segment's indexes are mapped
    # (an inactive one's are read with pread: vm.max_map_count is 65,530 by default), and
    # a mapping keeps no descriptor of its own where Python can map without one (3.13's
    # mmap trackfd). Before 3.13 a mapping dups its file's descriptor.
    log = Log.open(pdir, LogConfig(segment_bytes=64 << 10))
    for _ in range(40):  # 8 KiB batches: an index entry each, a roll every 8
        log.append(batch(8, size=1000))
    if reopen:  # inactive segments loaded from disk, not rolled here
        log.close()
        log = Log.open(pdir, LogConfig(segment_bytes=64 << 10))
    segments = len(log.segments)
    assert segments >= 4
    active = log.segments[-1]
    fds = Counter(os.path.basename(f) for f in open_files_under(os.getpid(), pdir))
    assert {n.rsplit(".", 1)[1] for n in fds} == {"log", "index", "timeindex"}
    dup = 0 if sys.version_info >= (3, 13) else 1
    assert sum(n.endswith(".log") for n in fds) == segments
    assert all(count == 1 for n, count in fds.items() if n.endswith(".log"))
    active_indexes = {active.offset_index.path.name, active.time_index.path.name}
    assert all(count == 1 + (dup if n in active_indexes else 0)
               for n, count in fds.items() if not n.endswith(".log"))
    assert set(_index_mappings(pdir)) == active_indexes
    # Lookups answer from every segment, mapped or read with pread, as a walk does.
    every, at = [], 0
    while at < log.log_end_offset:  # a read stays within one segment
        every += list(iter_batches(log.read(at, 1 << 30)))
        at = every[-1].last_offset + 1
    for offset in (0, 1, 100, 296, 300, log.log_end_offset - 1):
        want = next(b.base_offset for b in every if b.base_offset <= offset <= b.last_offset)
        assert [b.base_offset for b in iter_batches(log.read(offset, 1))] == [want]
    log.close()
    assert open_files_under(os.getpid(), pdir) == []


def test_flush_syncs_only_what_changed_since_the_last_one(pdir):
    """A flush syncs the segments past the recovery point: an idle log's periodic
    checkpoint costs no fdatasync (Kafka's flush up to the recovery point does nothing),
    while new records, and a truncation that cut the active segment, are synced at the
    next one (the recovery point alone would not show the cut)."""
    from logstore import flush_stats

    def flushes() -> int:
        return sum(flush_stats.snapshot()[0])

    log = Log.open(pdir, LogConfig())
    for _ in range(3):
        log.append(batch(1))
    seen = []
    for step in ("appended", "idle", "cut", "idle again"):
        if step == "cut":
            log.truncate_to(2)
        before = flushes()
        log.flush()
        seen.append((step, flushes() - before, log.recovery_point))
    log.close()
    assert seen == [("appended", 1, 3), ("idle", 0, 3), ("cut", 1, 2), ("idle again", 0, 2)]
