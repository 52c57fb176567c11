"""Log compaction (logstore.cleaner): keys and tombstones, gaps served to readers,
crash-safe swaps under kill -9, and a disk that fills while a clean writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from logstore import (
    FailureChannel,
    InvalidRecordError,
    LogConfig,
    LogDir,
    LogDirSaturatedError,
    Verdict,
    names,
    verify,
)
from logstore.cleaner import Cleaner, LogDirCleaner, NoRoomToCleanError, OffsetMap
from logstore.records import ATTR_DELETE_HORIZON, Record, build_batch, iter_batches

from .faults import tmpfs

REPO = Path(__file__).resolve().parents[1]
NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000
CONFIG = LogConfig(compacted=True, segment_bytes=4096, index_interval_bytes=256,
                   min_cleanable_dirty_ratio=0.1)


def produce(log, records: list[tuple[bytes | None, bytes | None]], *, per_batch: int = 4,
            ts: int = NOW) -> None:
    for i in range(0, len(records), per_batch):
        chunk = records[i:i + per_batch]
        log.append(build_batch([Record(k, v, [], ts + i + j) for j, (k, v) in enumerate(chunk)]))


def read_all(log) -> list[Record]:
    """Every record from the log start to its end, read the way a consumer fetches:
    from the next offset wanted, whatever offsets compaction removed."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 16)
        assert data, f"no batch at or after {offset} below the log end {log.log_end_offset}"
        for b in iter_batches(data):
            out += [r for r in b.records() if r.offset >= offset]
            offset = b.last_offset + 1
    return out


def latest(records) -> dict[bytes | None, bytes | None]:
    out = {}
    for r in records:
        out[r.key] = r.value
    return out


def open_dir(root: Path, channel: FailureChannel | None = None) -> LogDir:
    return LogDir.open(root, CONFIG, failure_channel=channel)


def history(n_keys: int = 20, rounds: int = 10) -> list[tuple[bytes, bytes]]:
    return [(f"key-{k}".encode(), f"value-{k}-round-{r}".encode() * 8)
            for r in range(rounds) for k in range(n_keys)]


def test_the_latest_value_of_every_key_survives_at_its_offset(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    produce(log, history())
    log.roll()  # the active segment is never cleaned
    log.high_watermark = log.log_end_offset
    before = read_all(log)
    size_before = log.size_bytes
    assert LogDirCleaner(ld).run(NOW) == 1
    after = read_all(log)
    assert latest(after) == latest(before)
    # Exactly one record per key, each at the offset it had: gaps, not renumbering.
    assert len(after) == 20
    at = {r.offset: r.value for r in before}
    assert all(at[r.offset] == r.value for r in after)
    assert log.size_bytes < size_before / 3
    # What is kept fits one segment: the cleaned segments became one (and the active).
    assert len(log.segments) == 2 and log.segments[0].base_offset == 0
    assert log.log_end_offset == 200 and read_all(log)[-1].offset == 199
    # Reading from an offset that compaction removed gives the next one present.
    data = log.read(5, 1 << 16)
    assert next(iter_batches(data)).last_offset >= 5
    # The checkpoint names where the next clean starts; the indexes agree with the logs.
    cp = (tmp_path / "d" / names.CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert cp[2] == f"state 0 {log.active_segment.base_offset}"
    for seg in log.segments:
        report = verify.verify_segment(seg.log_path)
        assert report.ok, report.problems
    # Found by offset and timestamp after the clean, and again after a reopen.
    assert log.offset_for_timestamp(NOW + 190) is not None
    ld.close()
    ld = open_dir(tmp_path / "d")
    assert latest(read_all(ld.get_log("state", 0))) == latest(before)
    ld.close()


def test_nothing_is_cleaned_under_the_dirty_ratio_or_past_the_high_watermark(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    log.update_config(CONFIG.replace(min_cleanable_dirty_ratio=1.0))
    produce(log, history())
    log.roll()
    log.high_watermark = log.log_end_offset
    assert LogDirCleaner(ld).run(NOW) == 0  # a never-cleaned log's ratio is 1, not over 1
    log.update_config(CONFIG)
    log.high_watermark = 0
    assert LogDirCleaner(ld).run(NOW) == 0
    log.high_watermark = log.log_end_offset
    assert LogDirCleaner(ld).run(NOW) == 1
    ld.close()


def test_a_delete_only_log_is_never_cleaned(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("plain", 0, LogConfig(segment_bytes=4096))
    produce(log, history())
    log.roll()
    log.high_watermark = log.log_end_offset
    assert LogDirCleaner(ld).run(NOW) == 0
    assert len(read_all(log)) == 200
    ld.close()


def test_tombstones_stay_for_delete_retention_then_go(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    produce(log, history(rounds=3))
    produce(log, [(f"key-{k}".encode(), None) for k in range(10)])  # delete half the keys
    log.roll()
    log.high_watermark = log.log_end_offset
    LogDirCleaner(ld).run(NOW)
    kept = read_all(log)
    tombstones = [r for r in kept if r.value is None]
    assert sorted(r.key for r in tombstones) == sorted(f"key-{k}".encode() for k in range(10))
    assert len(kept) == 20
    # Their batches now carry the delete horizon; the records keep their timestamps.
    data = log.read(tombstones[0].offset, 1 << 20)
    stamped = [b for b in iter_batches(data) if b.attributes & ATTR_DELETE_HORIZON]
    assert stamped and all(b.base_timestamp == NOW + DAY for b in stamped)
    assert {r.timestamp for r in tombstones} == {t.timestamp for t in tombstones}
    assert all(NOW <= r.timestamp < NOW + 1000 for r in tombstones)
    # More updates make the log dirty again; a clean within delete.retention.ms keeps
    # the tombstones, one after it removes them.
    produce(log, history(n_keys=20, rounds=1)[10:], ts=NOW + 10_000)
    log.roll()
    log.high_watermark = log.log_end_offset
    LogDirCleaner(ld).run(NOW + DAY - 1)
    assert sum(r.value is None for r in read_all(log)) == 10
    produce(log, history(n_keys=20, rounds=1)[10:], ts=NOW + 20_000)
    log.roll()
    log.high_watermark = log.log_end_offset
    LogDirCleaner(ld).run(NOW + DAY)
    left = read_all(log)
    assert not [r for r in left if r.value is None]
    assert sorted(r.key for r in left) == sorted(f"key-{k}".encode() for k in range(10, 20))
    ld.close()


def test_records_without_keys_are_refused_and_cleaned_away_as_kafka_does(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    produce(log, history(rounds=1))
    # A leader refuses them (Kafka's LogValidator: INVALID_RECORD), writing nothing.
    end = log.log_end_offset
    with pytest.raises(InvalidRecordError, match="without key") as refused:
        log.append(build_batch([Record(b"k", b"v"), Record(None, b"no key")]))
    # Kafka's record errors: the second record of the batch, named.
    assert refused.value.record_errors == [
        (1, "Compacted topic cannot accept message without key in topic partition state-0")]
    assert log.log_end_offset == end
    # A copy of a log that has them (a follower's append) takes them; the cleaner
    # drops them, as Kafka's does.
    for _ in range(4):
        log.append(build_batch([Record(None, b"no key")] * 4, base_offset=log.log_end_offset),
                   assign_offsets=False)
    produce(log, history(rounds=1))
    log.roll()
    log.high_watermark = log.log_end_offset
    LogDirCleaner(ld).run(NOW)
    left = read_all(log)
    assert all(r.key is not None for r in left) and len(left) == 20
    ld.close()


def test_a_follower_copies_a_cleaned_log_with_its_gaps_and_empty_batches(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    produce(log, history())
    # Segments of keys that stay, with an update of one key between them that a later
    # one supersedes: a run ends on that update, kept as an empty batch.
    for part in ("a", "b"):
        produce(log, [(f"{part}-{k}".encode(), bytes(150)) for k in range(20)], per_batch=5)
        log.roll()
        produce(log, [(b"key-0", f"in {part}".encode())])
        log.roll()
    log.high_watermark = log.log_end_offset
    LogDirCleaner(ld).run(NOW)
    copied = [b for seg in log.segments for b in iter_batches(seg.read_exact(0, seg.size))]
    assert any(b.records_count == 0 for b in copied), "a run's last batch, emptied"
    follower = ld.create_log("state", 1)
    for b in copied:
        follower.append(bytes(b.data), b.partition_leader_epoch, assign_offsets=False)
    assert [(r.offset, r.key, r.value) for r in read_all(follower)] == [
        (r.offset, r.key, r.value) for r in read_all(log)]
    assert follower.log_end_offset == log.log_end_offset
    ld.close()


def test_a_full_key_map_cleans_what_it_mapped_and_the_next_clean_the_rest(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    produce(log, history(n_keys=50, rounds=4))
    log.roll()
    log.high_watermark = log.log_end_offset
    before = latest(read_all(log))
    small = Cleaner(OffsetMap(buffer_bytes=24 * 40, load_factor=1.0))
    cleaner = LogDirCleaner(ld, small)
    assert cleaner.run(NOW) >= 2  # one clean per map-full of keys
    assert latest(read_all(log)) == before
    assert len(read_all(log)) < 200
    ld.close()


@pytest.mark.parametrize("codec", [1, 4])  # gzip, zstd
def test_compressed_batches_are_cleaned_and_recompressed(tmp_path: Path, codec: int) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    recs = history(rounds=4)
    for i in range(0, len(recs), 10):
        log.append(build_batch([Record(k, v, [], NOW + i + j) for j, (k, v) in
                                enumerate(recs[i:i + 10])], codec=codec))
    log.roll()
    log.high_watermark = log.log_end_offset
    before = latest(read_all(log))
    LogDirCleaner(ld).run(NOW)
    after = read_all(log)
    assert latest(after) == before and len(after) == 20
    assert all(b.codec == codec for b in iter_batches(log.read(0, 1 << 20)))
    ld.close()


def test_compact_delete_runs_retention_too(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    both = CONFIG.replace(compact_delete=True, retention_ms=1000)
    log = ld.create_log("state", 0, both)
    produce(log, history())
    log.roll()
    log.high_watermark = log.log_end_offset
    assert log.apply_retention(NOW + 10_000) > 0
    compact_only = ld.create_log("other", 0, CONFIG.replace(retention_ms=1000))
    produce(compact_only, history())
    compact_only.roll()
    assert compact_only.apply_retention(NOW + 10_000) == 0
    assert both.cleanup_policy == "compact,delete" and CONFIG.cleanup_policy == "compact"
    assert LogConfig.policy_fields("compact,delete") == {"compacted": True, "compact_delete": True}
    ld.close()


# ---- a crash in the middle of a clean (kill -9 of a real process) ----------------------

CHILD = """
import sys, time
from pathlib import Path
from logstore import LogConfig, LogDir
from logstore.cleaner import Cleaner, LogDirCleaner
from logstore.segment import LogSegment

root, stop = Path(sys.argv[1]), sys.argv[2]
config = LogConfig(compacted=True, segment_bytes=1 << 16, index_interval_bytes=256,
                   min_cleanable_dirty_ratio=0.1)
ld = LogDir.open(root, config)
pdir = root / "state-0"

def hang():
    print("ready", flush=True)
    time.sleep(3600)

if stop == "writing":
    cleaner = LogDirCleaner(ld, Cleaner(io_buffer_bytes=1024, step_bytes=1024))
    while not list(pdir.glob("*.log.cleaned")) or not any(
            p.stat().st_size for p in pdir.glob("*.log.cleaned")):
        cleaner.step(%(now)d)
    hang()
deletes = 0
real_delete = LogSegment.delete
def delete(self, **kw):
    global deletes
    deletes += 1
    if deletes == int(stop):  # 1: swapped, nothing deleted; 2: one old segment gone
        hang()
    real_delete(self, **kw)
LogSegment.delete = delete
LogDirCleaner(ld).run(%(now)d)
print("finished", flush=True)
"""


def crash_cleaning(root: Path, stop: str) -> None:
    """Run a clean of `root` in a child process and kill -9 it at `stop`."""
    child = subprocess.Popen([sys.executable, "-c", CHILD % {"now": NOW}, str(root), stop],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line.strip() == "ready", (line, child.stderr.read() if child.stderr else "")
    finally:
        child.kill()  # SIGKILL: no finally blocks, no close, no unlink of .cleaned
        child.wait(10)


def write_rolled(root: Path) -> list[Record]:
    """A compacted log of several small segments (rolled by hand, so a clean puts
    several into one group), closed uncleanly; returns its records."""
    config = LogConfig(compacted=True, segment_bytes=1 << 16, index_interval_bytes=256,
                       min_cleanable_dirty_ratio=0.1)
    ld = LogDir.open(root, config)
    log = ld.create_log("state", 0)
    recs = history(rounds=10)
    for i in range(0, len(recs), 40):
        produce(log, recs[i:i + 40])
        log.roll()
    log.high_watermark = log.log_end_offset
    ld.flush()
    ld.write_checkpoints()
    before = read_all(log)
    ld.release()  # as a crash leaves it: no clean-shutdown marker
    return before


@pytest.mark.parametrize("stop", ["writing", "1", "2"])
def test_a_crash_mid_clean_leaves_a_log_the_loader_completes(tmp_path: Path, stop: str) -> None:
    """kill -9 while `.cleaned` files are written, just after the swap's renames to
    `.swap`, and after one replaced segment was deleted: the next open removes what
    was not finished or completes the swap, and every key reads its latest value."""
    root = tmp_path / "d"
    before = write_rolled(root)
    crash_cleaning(root, stop)
    pdir = root / "state-0"
    leftovers = sorted(p.name for p in pdir.iterdir()
                       if p.name.endswith((".cleaned", ".swap", ".deleted")))
    assert leftovers, "the crash should have left a clean's files behind"
    ld = open_dir(root)
    log = ld.get_log("state", 0)
    assert not [p for p in pdir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    after = read_all(log)
    assert latest(after) == latest(before)
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets)), "no offset twice, none out of order"
    if stop == "writing":
        assert after == before and not log.recovery.swaps_completed
    else:
        assert log.recovery.swaps_completed == [0] and len(after) < len(before)
    for seg in log.segments:
        assert verify.verify_segment(seg.log_path).ok
    # And the log cleans on from there.
    LogDirCleaner(ld).run(NOW)
    assert latest(read_all(log)) == latest(before) and len(read_all(log)) == 20
    ld.close()


# ---- a disk that fills (a real tmpfs: ENOSPC) ------------------------------------------


def fill(path: Path) -> Path:
    """Write `path` until the file system says ENOSPC."""
    chunk = b"x" * 65536
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as err:
            assert err.errno == 28, err
    return path


def many_keys(root: Path, channel: FailureChannel) -> tuple[LogDir, list[Record]]:
    ld = LogDir.open(root, CONFIG.replace(segment_bytes=1 << 16), failure_channel=channel)
    log = ld.create_log("state", 0)
    produce(log, [(f"key-{k}".encode(), bytes(200)) for r in range(2) for k in range(1500)],
            per_batch=10)
    log.roll()
    log.high_watermark = log.log_end_offset
    return ld, read_all(log)


def failures(channel: FailureChannel) -> list:
    out = []
    while (f := channel.get(timeout=0)) is not None:
        out.append(f)
    return out


def test_a_disk_that_fills_mid_clean_is_saturated_not_offline(tmp_path: Path) -> None:
    with tmpfs("4m") as mnt:
        channel = FailureChannel()
        ld, before = many_keys(mnt / "d", channel)
        log = ld.get_log("state", 0)
        pdir = mnt / "d" / "state-0"
        cleaner = LogDirCleaner(ld, Cleaner(io_buffer_bytes=8192, step_bytes=8192))
        while not list(pdir.glob("*.cleaned")):
            assert cleaner.step(NOW)
        filler = fill(mnt / "filler")
        with pytest.raises(LogDirSaturatedError):
            while cleaner.step(NOW):
                pass
        seen = failures(channel)
        assert seen and {f.verdict for f in seen} == {Verdict.SATURATED}, seen
        assert not list(pdir.glob("*.cleaned")), "the partial clean is removed"
        assert read_all(log) == before and not cleaner.busy
        # While the dir is SATURATED (the daemon sets the guard's verdict) the cleaner
        # does not start: it would need room for new files.
        ld.guard.verdict = Verdict.SATURATED
        with pytest.raises(LogDirSaturatedError):
            cleaner.step(NOW)
        assert not list(pdir.glob("*.cleaned")) and not failures(channel)
        # Space back, the dir ONLINE again: the clean runs to its end.
        filler.unlink()
        ld.guard.verdict = Verdict.NONE
        assert cleaner.run(NOW) == 1
        assert latest(read_all(log)) == latest(before) and len(read_all(log)) == 1500
        ld.close()


def test_a_clean_without_room_for_its_copy_waits_without_a_verdict(tmp_path: Path) -> None:
    with tmpfs("4m") as mnt:
        channel = FailureChannel()
        ld, before = many_keys(mnt / "d", channel)
        filler = fill(mnt / "filler")
        failures(channel)
        with pytest.raises(NoRoomToCleanError):
            LogDirCleaner(ld).step(NOW)
        assert not failures(channel)
        assert not list((mnt / "d" / "state-0").glob("*.cleaned"))
        filler.unlink()
        assert LogDirCleaner(ld).run(NOW) == 1
        assert len(read_all(ld.get_log("state", 0))) == 1500
        ld.close()


def test_the_record_decoder_finds_keys_values_and_deltas() -> None:
    import native

    data = build_batch([Record(b"k1", b"v", [], NOW), Record(None, None, [], NOW + 5),
                        Record(b"key3", b"value3", [("h", b"x")], NOW + 9)])[61:]
    recs = native.parse_records(data, 3)
    assert [(r[0], r[1]) for r in recs] == [(0, 0), (1, 5), (2, 9)]
    assert [data[r[6]:r[6] + r[7]] if r[6] >= 0 else None for r in recs] == [b"k1", None, b"key3"]
    assert [r[8] for r in recs] == [1, -1, 6]
    assert recs[-1][5] == len(data) and recs[1][2] == recs[0][5]
    for cut in (1, 5, len(data) - 1):
        assert native.parse_records(data[:cut], 3) is None
    assert native.parse_records(data, 4) is None


def test_a_follower_truncates_into_a_cleaned_log_and_cleans_what_came_after(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0)
    produce(log, history())
    log.roll()
    log.high_watermark = log.log_end_offset
    LogDirCleaner(ld).run(NOW)
    gone = next(o for o in range(1, 200) if not any(r.offset == o for r in read_all(log)))
    log.truncate_to(gone)  # an offset the cleaner removed: the log ends there
    assert log.log_end_offset == gone
    for i in range(10):  # a new leader's records from there, the same keys again
        log.append(build_batch([Record(f"key-{k}".encode(), f"new-{i}".encode(), [], NOW + i)
                                for k in range(20)], base_offset=log.log_end_offset),
                   assign_offsets=False)
    log.roll()
    log.high_watermark = log.log_end_offset
    expected = latest(read_all(log))
    assert LogDirCleaner(ld).run(NOW) == 1
    assert latest(read_all(log)) == expected and len(read_all(log)) == 20
    ld.close()


def test_a_clean_the_log_changed_under_is_dropped_and_done_again(tmp_path: Path) -> None:
    """compact,delete: retention deletes segments while a clean is between two steps;
    the clean gives up (its .cleaned files removed, nothing swapped) and the next one
    cleans what is left."""
    ld = open_dir(tmp_path / "d")
    config = CONFIG.replace(compact_delete=True, retention_ms=60_000)
    log = ld.create_log("state", 0, config)
    produce(log, history(), ts=NOW)
    produce(log, history(), ts=NOW + 120_000)
    log.roll()
    log.high_watermark = log.log_end_offset
    cleaner = LogDirCleaner(ld, Cleaner(io_buffer_bytes=1024, step_bytes=1024))
    while not list(log.dir.glob("*.cleaned")):
        assert cleaner.step(NOW + 120_000)
    assert log.apply_retention(NOW + 150_000) > 0  # the first history is past retention
    while cleaner.busy:
        cleaner.step(NOW + 120_000)
    assert not list(log.dir.glob("*.cleaned")) and not cleaner.cleaned
    assert cleaner.run(NOW + 120_000) == 1
    left = read_all(log)
    assert len(left) == 20 and all(r.offset >= log.log_start_offset for r in left)
    assert latest(left) == {f"key-{k}".encode(): f"value-{k}-round-9".encode() * 8
                            for k in range(20)}
    ld.close()


def test_max_compaction_lag_cleans_a_log_under_the_dirty_ratio(tmp_path: Path) -> None:
    ld = open_dir(tmp_path / "d")
    log = ld.create_log("state", 0, CONFIG.replace(min_cleanable_dirty_ratio=1.0,
                                                  max_compaction_lag_ms=60_000))
    produce(log, history())
    log.roll()
    log.high_watermark = log.log_end_offset
    assert LogDirCleaner(ld).run(NOW + 30_000) == 0  # under the ratio, not overdue yet
    assert LogDirCleaner(ld).run(NOW + 90_000) == 1  # a dirty segment older than the lag
    assert len(read_all(log)) == 20
    ld.close()
