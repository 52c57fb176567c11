"""The native verify walk (native/verify.c) against verify's own batch-by-batch look:
the same report, problem for problem and in the same order, for clean segments, for
every kind of disagreement between a log and its indexes, for bad batches, and for real
Kafka segments; and the speed it is there for, on a log of small batches (as a ratio in
benchmarks/bench_log.py, not here)."""

from __future__ import annotations

import struct
from array import array
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import native
from logstore import names, verify
from logstore.records import Record, build_batch
from spark_audit.findings import FINGERPRINT, FINGERPRINT_FIELDS

from .kafka_dirs import follower_indexes

BASE = 1000
TS = 1_700_000_000_000


def write_segment(directory: Path, batches: list[tuple[int, int]], *, index_every: int = 1,
                  time_every: int = 3, value: int = 40) -> tuple[Path, list[tuple[int, int, int]]]:
    """A segment of batches given as (base offset, records), each record `value` bytes,
    with an offset index entry for every index_every-th batch and a time index entry for
    every time_every-th, as Kafka writes them (last offset -> position; max timestamp,
    last offset). Returns the .log and each batch's (position, last offset, max ts)."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / names.log_file_name(BASE)
    data = bytearray()
    where = []
    for i, (base, count) in enumerate(batches):
        ts = TS + 10 * i
        batch = build_batch([Record(b"k%d" % j, bytes([j % 251]) * value, [], ts + j)
                             for j in range(count)], base_offset=base)
        where.append((len(data), base + count - 1, ts + count - 1))
        data += batch
    log.write_bytes(bytes(data))
    index = b"".join(struct.pack(">ii", last - BASE, pos)
                     for k, (pos, last, _) in enumerate(where) if k % index_every == 0)
    log.with_suffix(names.INDEX_SUFFIX).write_bytes(index)
    times = b"".join(struct.pack(">qi", ts, last - BASE)
                     for k, (_, last, ts) in enumerate(where) if k % time_every == 0)
    log.with_suffix(names.TIME_INDEX_SUFFIX).write_bytes(times)
    return log, where


def contiguous(n: int, records: int = 3, start: int = BASE) -> list[tuple[int, int]]:
    return [(start + records * i, records) for i in range(n)]


def reports(log: Path, buffer_size: int = 4096) -> tuple[verify.SegmentReport, ...]:
    """The report with the native walk and without it (asserted equal), and the
    native one's chunks as on_batches saw them."""
    chunks: list[int] = []
    fast = verify.verify_segment(log, buffer_size=buffer_size,
                                 on_batches=lambda res: chunks.append(len(res)))
    slow = verify.verify_segment(log, buffer_size=buffer_size, native_walk=False)
    assert fast == slow
    assert sum(chunks) == fast.batch_count
    return fast, slow


def patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def test_clean_segment_has_no_problems_and_the_same_counts(tmp_path: Path) -> None:
    log, where = write_segment(tmp_path, contiguous(300))
    fast, _ = reports(log)
    assert fast.problems == []
    assert (fast.batch_count, fast.record_count, fast.first_offset, fast.last_offset) == (
        300, 900, BASE, BASE + 899)
    assert fast.max_timestamp == where[-1][2]
    assert fast.index_entries == 300 and fast.time_index_entries == 100


def test_gaps_are_counted_and_a_sparse_index_matches(tmp_path: Path) -> None:
    batches = [(BASE + 10 * i, 3) for i in range(120)]  # 7 offsets missing before each
    log, _ = write_segment(tmp_path, batches, index_every=5, time_every=7)
    fast, _ = reports(log)
    assert fast.problems == [] and fast.offset_gaps == 119


@pytest.mark.parametrize("entry", [0, 1, 57, 299])
def test_an_index_entry_at_the_wrong_position(tmp_path: Path, entry: int) -> None:
    log, where = write_segment(tmp_path, contiguous(300))
    patch(log.with_suffix(names.INDEX_SUFFIX), 8 * entry + 4,
          struct.pack(">i", where[entry][0] + 1))
    fast, _ = reports(log)
    assert [p.kind for p in fast.problems] == ["index-mismatch"]
    assert fast.problems[0].offset == where[entry][1]


def test_an_index_entry_inside_its_batch_is_sound_one_past_the_last_offset_is_not(
        tmp_path: Path) -> None:
    log, where = write_segment(tmp_path, contiguous(200), index_every=4)
    # Entry 10 (batch 40) names an offset inside its batch: a lookup from there finds it.
    patch(log.with_suffix(names.INDEX_SUFFIX), 8 * 10, struct.pack(">i", where[40][1] - 1 - BASE))
    fast, _ = reports(log)
    assert fast.problems == []
    # Entry 49 names an offset past the segment's last, at batch 196.
    patch(log.with_suffix(names.INDEX_SUFFIX), 8 * 49,
          struct.pack(">ii", where[199][1] + 5 - BASE, where[196][0]))
    fast, _ = reports(log)
    assert [(p.kind, p.offset, p.position) for p in fast.problems] == [
        ("index-mismatch", where[199][1] + 5, where[196][0])]
    assert "past the segment's last offset" in fast.problems[0].detail


def kafka_segment(directory: Path, stamps: list[int], records: int = 3) -> Path:
    """A segment of batches of `records` records, batch i's max timestamp TS + stamps[i]."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / names.log_file_name(BASE)
    data = bytearray()
    for i, stamp in enumerate(stamps):
        data += build_batch([Record(b"k", b"v" * 40, [], TS + stamp - j)
                             for j in range(records)][::-1], base_offset=BASE + records * i)
    log.write_bytes(bytes(data))
    return log


@pytest.mark.parametrize("chunk", [2, 3, 7])
def test_a_kafka_followers_indexes_are_sound(tmp_path: Path, chunk: int) -> None:
    """A Kafka follower's entries map a chunk's last offset to its first batch (a lookup
    from there scans forward to it); its time entries name the last offset of the batch
    with the max timestamp so far, which need not be the chunk's last (nor a late one)."""
    stamps = [10 * i + (500 if i % 5 == 1 else 0) for i in range(120)]
    log = kafka_segment(tmp_path, stamps)
    offsets, times = follower_indexes(log, chunk, interval=0, rolled=True)
    assert len(offsets) == -(-120 // chunk) - 1
    assert any(o not in (BASE + 3 * i + 2 for i in range(0, 120, chunk))
               for _, o in times)  # a time entry inside a chunk
    fast, _ = reports(log)
    assert fast.problems == [] and fast.batch_count == 120
    assert fast.index_entries == len(offsets) and fast.time_index_entries == len(times)


@pytest.mark.parametrize(("moved", "error"), [
    ("to the batch after the one holding its offset", True),
    ("inside its batch", True),
    ("to an earlier batch, after the entry before it", False),
])
def test_a_follower_index_entry_moved(tmp_path: Path, moved: str, error: bool) -> None:
    """An entry of a follower's index moved where a lookup of its offset would skip
    records or land inside a batch is an error; one moved to an earlier batch start
    (still after the entry before it) is as loose, and as sound, as a follower's own."""
    log = kafka_segment(tmp_path, [10 * i for i in range(60)])
    offsets, _ = follower_indexes(log, 4, interval=0)
    positions: list[int] = []
    verify.verify_segment(log, check_indexes=False,
                          on_batch=lambda b: positions.append(b.position))
    k = 5  # chunk 6: batches 24-27, offsets BASE+72..BASE+83; entry 4 is at batch 20
    assert offsets[k] == (BASE + 83, positions[24])
    offset, position = {
        "to the batch after the one holding its offset": (BASE + 74, positions[25]),
        "inside its batch": (BASE + 83, positions[24] + 7),
        "to an earlier batch, after the entry before it": (BASE + 83, positions[22]),
    }[moved]
    patch(log.with_suffix(names.INDEX_SUFFIX), 8 * k, struct.pack(">ii", offset - BASE, position))
    fast, _ = reports(log)
    expected = [("index-mismatch", offset, position)] if error else []
    assert [(p.kind, p.offset, p.position) for p in fast.problems] == expected


def test_index_positions_out_of_order_are_reported(tmp_path: Path) -> None:
    log, where = write_segment(tmp_path, contiguous(100))
    index = log.with_suffix(names.INDEX_SUFFIX)
    patch(index, 8 * 30 + 4, struct.pack(">i", where[31][0]))
    patch(index, 8 * 31 + 4, struct.pack(">i", where[30][0]))
    fast, _ = reports(log)
    # Entry 30 would skip its batch; entry 31, at batch 30, is sound once that one is out.
    assert [(p.kind, p.offset) for p in fast.problems] == [("index-mismatch", where[30][1])]
    # Entry 40 at batch 35: sound for a lookup, but its position goes back.
    patch(index, 8 * 40 + 4, struct.pack(">i", where[35][0]))
    fast, _ = reports(log)
    assert [(p.kind, p.offset) for p in fast.problems] == [
        ("index-mismatch", where[30][1]), ("index-mismatch", where[40][1])]
    assert "not past the position of the entry before it" in fast.problems[1].detail


@pytest.mark.parametrize("entry", [0, 20, 99])
def test_a_time_index_entry_with_the_wrong_timestamp(tmp_path: Path, entry: int) -> None:
    log, where = write_segment(tmp_path, contiguous(300))
    patch(log.with_suffix(names.TIME_INDEX_SUFFIX), 12 * entry,
          struct.pack(">q", where[3 * entry][2] + 1))
    fast, _ = reports(log)
    kinds = [p.kind for p in fast.problems]
    assert "timeindex-mismatch" in kinds


def test_a_time_index_entry_in_a_gap_no_batch_holds(tmp_path: Path) -> None:
    batches = [(BASE + 10 * i, 3) for i in range(60)]
    log, where = write_segment(tmp_path, batches, time_every=6)
    # Entry 4 (batch 24) moves to an offset in the gap after batch 24, same timestamp.
    patch(log.with_suffix(names.TIME_INDEX_SUFFIX), 12 * 4 + 8,
          struct.pack(">i", where[24][1] + 2 - BASE))
    fast, _ = reports(log)
    assert [p.kind for p in fast.problems] == ["timeindex-mismatch"]


def test_overlapping_offsets(tmp_path: Path) -> None:
    batches = contiguous(50) + [(BASE + 140, 3)] + contiguous(50, start=BASE + 150)
    log, _ = write_segment(tmp_path, batches)
    fast, _ = reports(log)
    # The index written beside it goes back in offsets there too.
    assert [p.kind for p in fast.problems] == ["index-offset-order", "offset-overlap"]


def test_a_batch_replayed_over_offsets_the_walk_matched(tmp_path: Path) -> None:
    """Batch 40's offsets again after batch 49: the overlap is the finding, not the index
    entry the walk already matched at batch 40 (the replay ends at its offset too)."""
    batches = contiguous(50) + [(BASE + 120, 3)] + contiguous(10, start=BASE + 150)
    log, _ = write_segment(tmp_path, batches)
    fast, _ = reports(log)
    assert [p.kind for p in fast.problems] == ["index-offset-order", "offset-overlap"]


@pytest.mark.parametrize("victim", [0, 1, 33, 299])
def test_a_bad_batch_and_the_walk_after_it(tmp_path: Path, victim: int) -> None:
    log, where = write_segment(tmp_path, contiguous(300))
    patch(log, where[victim][0] + 70, b"\xff")  # inside the records: the CRC fails
    fast, _ = reports(log)
    assert fast.problems[0].kind == "bad-crc"
    assert fast.status is native.ScanStatus.BAD_CRC
    assert fast.batch_count == 299


def test_a_torn_tail(tmp_path: Path) -> None:
    log, where = write_segment(tmp_path, contiguous(100))
    with open(log, "r+b") as f:
        f.truncate(where[-1][0] + 30)
    fast, _ = reports(log)
    assert fast.status is native.ScanStatus.TORN and fast.batch_count == 99


def test_real_kafka_segments_read_the_same(kafka_fixtures: Path) -> None:
    logs = sorted(kafka_fixtures.rglob("*.log"))
    assert logs
    for log in logs:
        fast, _ = reports(log, buffer_size=1 << 12)
        assert fast.batch_count > 0


def test_on_batches_hands_over_every_valid_batch_with_its_fingerprint(tmp_path: Path) -> None:
    log, where = write_segment(tmp_path, contiguous(80))
    seen = bytearray()
    verify.verify_segment(log, buffer_size=2048, on_batches=lambda r: seen.extend(r.fingerprints()))
    got = list(struct.iter_unpack(">4q", seen))
    assert [(g[0], g[2]) for g in got] == [(pos, last) for pos, last, _ in where]
    assert [g[1] for g in got] == [base for base, _ in contiguous(80)]
    assert all(0 <= g[3] < 2**32 for g in got)
    # What the audit's fingerprint rows are read back as.
    assert FINGERPRINT.size == native.FINGERPRINT_SIZE
    assert FINGERPRINT_FIELDS == ("position", "base_offset", "last_offset", "crc")


def test_walk_refuses_arrays_of_another_type_or_length() -> None:
    q = array("q", [1, 2])
    with pytest.raises(ValueError, match="int64"):
        native.VerifyWalk(array("i", [1, 2]), q, array("q"), array("q"))
    with pytest.raises(ValueError, match="differ in length"):
        native.VerifyWalk(q, array("q", [1]), array("q"), array("q"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.integers(1, 4), min_size=1, max_size=60),
       mutations=st.lists(st.tuples(st.sampled_from(["log", "index", "timeindex"]),
                                    st.integers(0, 1 << 20), st.integers(0, 255)),
                          max_size=4),
       index_every=st.integers(1, 4), time_every=st.integers(1, 5),
       follower=st.integers(0, 4), buffer_size=st.sampled_from([256, 1024, 1 << 16]))
def test_property_any_damage_reads_the_same_both_ways(tmp_path_factory, steps, mutations,
                                                      index_every, time_every, follower,
                                                      buffer_size) -> None:
    # Gaps of 0..3 offsets between batches of 1..4 records (indexed per batch, or as a
    # follower indexes chunks of `follower` batches), then bytes overwritten anywhere in
    # the log or its indexes.
    batches, offset = [], BASE
    for k in steps:
        batches.append((offset, k))
        offset += k + (k % 3 == 0) * 2
    log, _ = write_segment(tmp_path_factory.mktemp("seg"), batches, index_every=index_every,
                           time_every=time_every, value=8)
    if follower:
        follower_indexes(log, follower, interval=0)
        assert reports(log, buffer_size)[0].problems == []
    for which, at, byte in mutations:
        target = log if which == "log" else log.with_suffix(
            names.INDEX_SUFFIX if which == "index" else names.TIME_INDEX_SUFFIX)
        size = target.stat().st_size
        if size:
            patch(target, at % size, bytes([byte]))
    reports(log, buffer_size)


def test_offset_index_decode_says_when_entries_are_as_kafka_writes_them() -> None:
    entries = struct.pack(">iiii", 3, 0, 9, 4096)
    offsets, positions, in_order = native.decode_offset_index(entries, 100, 8192)
    assert (list(offsets), list(positions), in_order) == ([103, 109], [0, 4096], True)
    for bad in (struct.pack(">iiii", 9, 0, 3, 4096),    # offsets going back
                struct.pack(">iiii", -1, 0, 3, 4096),   # below the base
                struct.pack(">iiii", 3, 0, 9, 8192)):   # a position past the log
        assert native.decode_offset_index(bad, 100, 8192)[2] is False
    with pytest.raises(ValueError, match="8-byte entries"):
        native.decode_offset_index(entries[:-1], 100, 8192)
    assert native.ascending(array("q", [1, 2, 5])) and not native.ascending(array("q", [1, 1]))
    with pytest.raises(ValueError, match="int64"):
        native.ascending(array("i", [1]))
