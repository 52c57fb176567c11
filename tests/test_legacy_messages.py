"""Old Kafka's legacy messages (magic 0 and 1) in a log dir logkeeper takes over.

Long-lived Kafka topics still hold segments written before message format v2 (Kafka
0.11): magic 0 and 1 messages, some of them compressed wrappers around several. Kafka
3.x recovers, indexes and serves them as they are, and so must we: recovery once took
each one for corruption and cut the log there, deleting the data. Here they are written
as old brokers wrote them (kafka-python's legacy builder, the wrapper's offset the last
inner one), read back through the log store, and consumed by real clients from a
running daemon, before and after new records.
"""

from __future__ import annotations

import gzip
import os
import random
import struct
import threading
import time
import zlib
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import kafka.errors
import pytest
import xxhash
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import native
from daemon.api import errors, protocol
from daemon.replica import producer
from logstore import CorruptRecordError, Log, LogConfig, records
from logstore.records import LegacyMessage
from tests.cluster_helpers import wait_for
from tests.daemon_helpers import Daemon, RawClient, fetch_request
from tests.test_daemon_fetch import fetch

# (magic, codec, records) per message set entry: uncompressed ones, a gzip wrapper of 3
# (magic 0), a snappy wrapper of 4 (magic 1). 11 records, offsets 0-10.
LAYOUT = ((0, 0, 1), (0, 0, 1), (0, 1, 3), (1, 0, 1), (1, 2, 4), (1, 0, 1))
RECORDS = sum(n for _, _, n in LAYOUT)


def legacy_entry(magic: int, codec: int, first: int, n: int, ts0: int) -> bytes:
    """One message (codec 0, n 1) or one compressed wrapper of n, at offsets first..,
    keys k<offset> and values legacy-m<magic>-<offset>."""
    return legacy_keyed(magic, codec, first, [b"k%d" % (first + j) for j in range(n)],
                        [b"legacy-m%d-%d" % (magic, first + j) for j in range(n)], ts0)


def legacy_keyed(magic: int, codec: int, first: int, keys: list[bytes | None],
                 values: list[bytes | None], ts0: int) -> bytes:
    """One message (one key) or one compressed wrapper of `keys`/`values`, at offsets
    first..: inner offsets relative for magic 1, absolute for magic 0, as Kafka wrote
    them; magic 1's timestamps ts0 + offset."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for j, (key, value) in enumerate(zip(keys, values, strict=True)):
        inner = (j if magic == 1 else first + j) if codec else first
        b.append(inner, timestamp=ts0 + first + j if magic else None, key=key, value=value)
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, first + len(keys) - 1)  # outside the CRC, as a broker sets it
    return bytes(out)


def poll_records(c: ck.Consumer, n: int, timeout: float = 30) -> list[tuple[int, bytes, bytes]]:
    """Up to `n` records (offset, key, value) the assigned consumer `c` polls within
    `timeout` seconds."""
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.offset(), m.key(), m.value()))
    return got


def legacy_log(ts0: int) -> tuple[bytes, list[int]]:
    """The whole message set, and the file position of each entry."""
    data, positions, offset = b"", [], 0
    for magic, codec, n in LAYOUT:
        positions.append(len(data))
        data += legacy_entry(magic, codec, offset, n, ts0)
        offset += n
    return data, positions


def write_partition(dir_: Path, data: bytes) -> Path:
    dir_.mkdir(parents=True)
    (dir_ / "00000000000000000000.log").write_bytes(data)
    return dir_


def test_the_scan_takes_legacy_messages_as_batches_only_when_asked() -> None:
    ts0 = int(time.time() * 1000)
    data, positions = legacy_log(ts0)
    res = native.scan_batches(data, legacy=True)
    assert res.status is native.ScanStatus.OK and res.valid_bytes == len(data)
    assert [b.position for b in res] == positions
    assert [b.magic for b in res] == [m for m, _, _ in LAYOUT]
    # A wrapper's offset is its last inner record's: the next one follows it.
    assert [b.last_offset for b in res] == [0, 1, 4, 5, 9, 10]
    assert [b.max_timestamp for b in res][:3] == [-1] * 3
    assert res[3].max_timestamp == ts0 + 5 and res[5].max_timestamp == ts0 + 10
    assert all(b.partition_leader_epoch == -1 and b.producer_id == -1 for b in res)
    # Without `legacy` (a producer's data, verify's report): stopped and named.
    plain = native.scan_batches(data)
    assert plain.status is native.ScanStatus.LEGACY and plain.valid_bytes == 0
    # A flipped value byte fails the message's CRC-32; a cut one is a torn tail.
    bad = bytearray(data)
    bad[positions[3] + 30] ^= 1
    broken = native.scan_batches(bytes(bad), legacy=True)
    assert broken.status is native.ScanStatus.BAD_CRC and broken.valid_bytes == positions[3]
    torn = native.scan_batches(data[:-3], legacy=True)
    assert torn.status is native.ScanStatus.TORN and torn.valid_bytes == positions[5]


def test_recovery_keeps_legacy_messages_and_the_log_reads_and_extends_them(
        tmp_path: Path) -> None:
    ts0 = int(time.time() * 1000) - 60_000
    data, positions = legacy_log(ts0)
    pdir = write_partition(tmp_path / "old-0", data)
    log = Log.open(pdir, LogConfig(index_interval_bytes=64))  # no marker: recovery runs
    try:
        assert log.recovery.recovered and log.recovery.bytes_truncated == 0
        assert log.log_end_offset == RECORDS
        assert log.read(0, 1 << 20) == data
        # From the middle of a compressed wrapper: the wrapper, as Kafka serves it.
        assert log.read(6, 1 << 20) == data[positions[4]:]
        assert log.read(10, 1 << 20) == data[positions[5]:]
        assert log.offset_for_timestamp(ts0 + 10) == (10, ts0 + 10)
        assert log.offset_for_timestamp(ts0 + 3)[0] == 5  # the first magic-1 message
        log.high_watermark = log.log_end_offset
        info = log.append(records.build_batch([records.Record(key=b"n", value=b"new")]))
        assert info.base_offset == RECORDS
        # A producer's legacy data is refused, and nothing is written.
        size = log.size_bytes
        with pytest.raises(CorruptRecordError, match="legacy magic 0"):
            log.append(legacy_entry(0, 0, 0, 1, ts0))
        assert log.size_bytes == size
    finally:
        log.close()
    (pdir / "00000000000000000000.index").unlink()  # rebuilt from the log, legacy and all
    log = Log.open(pdir, LogConfig(index_interval_bytes=64), recover=True)
    try:
        assert log.recovery.bytes_truncated == 0 and log.log_end_offset == RECORDS + 1
        assert log.read(0, 1 << 20)[:len(data)] == data
        assert log.read(6, 1 << 20)[:len(data) - positions[4]] == data[positions[4]:]
    finally:
        log.close()


def wrapper_stamped(entry: bytes, timestamp: int, *, log_append_time: bool = False) -> bytes:
    """A magic-1 wrapper with the timestamp a broker gave it (the inner records' max, or
    the append time), its CRC-32 recomputed."""
    out = bytearray(entry)
    if log_append_time:
        out[17] |= 0x08
    struct.pack_into(">q", out, 18, timestamp)
    struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    return bytes(out)


def test_a_time_lookup_finds_the_record_inside_a_compressed_wrapper(tmp_path: Path) -> None:
    # Kafka's findOffsetByTimestamp looks inside a wrapper: the first inner record at or
    # after the time, not the wrapper's (last) offset, which skips the ones before it.
    ts0 = int(time.time() * 1000) - 60_000
    data = b"".join([legacy_entry(1, 0, 0, 1, ts0),
                     wrapper_stamped(legacy_entry(1, 2, 1, 4, ts0), ts0 + 4),  # 1-4
                     wrapper_stamped(legacy_entry(1, 1, 5, 2, ts0 - 30_000), ts0 + 20,
                                     log_append_time=True)])  # 5-6, stamped ts0 + 20
    pdir = write_partition(tmp_path / "old-0", data)
    log = Log.open(pdir, LogConfig())
    try:
        assert log.offset_for_timestamp(ts0 + 2) == (2, ts0 + 2)
        assert log.offset_for_timestamp(ts0 + 1) == (1, ts0 + 1)
        assert log.offset_for_timestamp(ts0 + 5) == (5, ts0 + 20)
        log.log_start_offset = 3
        assert log.offset_for_timestamp(ts0) == (3, ts0 + 3)
    finally:
        log.close()
    # dump-log --deep shows the stamped wrapper's inner records at its time, as Kafka's
    (stamped,) = records.iter_batches(data[-len(legacy_entry(1, 1, 5, 2, ts0 - 30_000)):],
                                      verify_crc=False)
    assert [(m.offset, m.timestamp) for m in stamped.messages()] == [(5, ts0 + 20), (6, ts0 + 20)]


def test_recovery_cuts_at_a_legacy_message_whose_crc_fails(tmp_path: Path) -> None:
    data, positions = legacy_log(int(time.time() * 1000))
    bad = bytearray(data)
    bad[positions[4] + 30] ^= 1
    log = Log.open(write_partition(tmp_path / "old-0", bytes(bad)))
    try:
        assert log.recovery.bytes_truncated == len(data) - positions[4]
        assert log.log_end_offset == 6
        assert "crc mismatch" in log.recovery.problem
    finally:
        log.close()


def test_a_follower_copies_legacy_messages_as_its_leader_holds_them(tmp_path: Path) -> None:
    data, _ = legacy_log(int(time.time() * 1000))
    log = Log.open(tmp_path / "old-0")
    try:
        info = log.append(data, assign_offsets=False)
        assert (info.base_offset, info.last_offset) == (0, RECORDS - 1)
        assert log.read(0, 1 << 20) == data
        tail = records.build_batch([records.Record(key=b"n", value=b"new")], base_offset=RECORDS)
        log.append(tail, assign_offsets=False)
        assert log.log_end_offset == RECORDS + 1
    finally:
        log.close()
    # Producer state skips them (they have no producer) and still sees the batch after.
    idempotent = records.build_batch([records.Record(key=b"i", value=b"x")], base_offset=RECORDS,
                                     producer_id=7, producer_epoch=0, base_sequence=0)
    state = producer.PartitionProducers()
    producer.record_replicated(state, data + idempotent)
    assert list(state) == [7]


def test_real_clients_consume_a_kafka_partition_of_legacy_messages_then_new_ones(
        tmp_path: Path) -> None:
    ts0 = int(time.time() * 1000) - 60_000
    data, _ = legacy_log(ts0)
    d = Daemon(tmp_path / "broker")
    write_partition(d.log_dirs[0] / "old-0", data)
    expected = [(i, b"k%d" % i, b"legacy-m%d-%d" % (0 if i < 5 else 1, i))
                for i in range(RECORDS)]
    with d:
        p = ck.Producer({"bootstrap.servers": d.bootstrap})
        for i in range(3):
            p.produce("old", key=b"new%d" % i, value=b"v%d" % i, partition=0)
        assert p.flush(30) == 0
        expected += [(RECORDS + i, b"new%d" % i, b"v%d" % i) for i in range(3)]

        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "legacy",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("old", 0, 0)])
        got = poll_records(c, len(expected))
        found = c.offsets_for_times([ck.TopicPartition("old", 0, ts0 + 10)], 10)
        c.close()
        assert got == expected
        assert found[0].offset == 10

        kp = KafkaConsumer(bootstrap_servers=d.bootstrap, consumer_timeout_ms=3000)
        tp = TopicPartition("old", 0)
        kp.assign([tp])
        kp.seek(tp, 0)
        assert [(m.offset, m.key, m.value) for m in kp] == expected
        kp.close()


def test_retention_counts_a_segment_without_timestamps_from_its_file_time(
        tmp_path: Path) -> None:
    """Magic 0 messages carry no timestamp: as in Kafka (LogSegment.largestTimestamp),
    retention.ms counts such a segment's age from its file's modification time, so a
    Kafka partition of them taken over is kept for retention.ms, not deleted at the
    first retention check; one whose file is older than that goes."""
    data = b"".join(legacy_entry(0, 0, i, 1, 0) for i in range(5))
    d = Daemon(tmp_path / "broker", {"log.retention.ms": 3_600_000,
                                     "log.retention.check.interval.ms": 100})
    write_partition(d.log_dirs[0] / "recent-0", data)
    old = write_partition(d.log_dirs[0] / "old-0", data) / "00000000000000000000.log"
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    with d:
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "legacy"})
        deadline = time.monotonic() + 20
        while c.get_watermark_offsets(ck.TopicPartition("old", 0), 10)[0] != 5:
            assert time.monotonic() < deadline, "the old segment was not deleted"
            time.sleep(0.1)
        time.sleep(0.5)  # a few more retention checks
        assert c.get_watermark_offsets(ck.TopicPartition("recent", 0), 10) == (0, 5)
        c.assign([ck.TopicPartition("recent", 0, 0)])
        got = [offset for offset, _, _ in poll_records(c, 5, 20)]
        c.close()
        assert got == [0, 1, 2, 3, 4]


def test_the_cleaner_compacts_legacy_messages_in_their_own_format(tmp_path: Path) -> None:
    """A compacted topic taken over from an old Kafka holds magic 0/1 messages (an old
    cluster's __consumer_offsets, _schemas or connect-configs). Kafka's cleaner compacts
    them and keeps their format; so does logkeeper's (it used to set such a log aside,
    and it grew forever): the latest message of each key stays, as it was or, for a
    compressed wrapper some of whose messages went, rewritten in a wrapper of its magic
    and codec; messages without a key go; a legacy tombstone stays while its segment is
    inside the legacy delete horizon (nothing clean yet: all stay), and goes at a later
    clean once that horizon passes it. What is left reads back whole (CRCs, indexes)."""
    from logstore import LogDir
    from logstore.cleaner import LogDirCleaner
    from logstore.verify import verify_segment

    ts0 = int(time.time() * 1000) - 60_000
    data = b"".join([
        legacy_keyed(0, 0, 0, [b"a"], [b"a0"], ts0),
        legacy_keyed(0, 0, 1, [b"b"], [b"b1"], ts0),
        legacy_keyed(0, 1, 2, [b"a", b"c", b"b"], [b"a2", b"c3", b"b4"], ts0),  # gzip
        legacy_keyed(1, 0, 5, [b"c"], [b"c5"], ts0),
        legacy_keyed(1, 2, 6, [b"a", b"d", b"c", b"e"], [b"a6", b"d7", None, b"e9"], ts0),
        legacy_keyed(1, 0, 10, [None], [b"no key"], ts0),
    ])
    write_partition(tmp_path / "d" / "state-0", data)
    config = LogConfig(compacted=True, min_cleanable_dirty_ratio=0.01, delete_retention_ms=0)
    ld = LogDir.open(tmp_path / "d", config)

    def contents() -> list[tuple[int, bytes | None, bytes | None, int]]:
        """(offset, key, value, magic) of every record left, in order."""
        out = []
        for b in records.iter_batches(log.read(0, 1 << 24)):
            if isinstance(b, records.LegacyMessage):
                out += [(m.offset, m.key, m.value, m.magic) for m in b.messages()]
            else:
                out += [(r.offset, r.key, r.value, 2) for r in b.records()]
        return out

    try:
        (log,) = ld.logs.values()
        for key, value in ((b"e", b"e11"), (b"b", b"b12")):
            log.append(records.build_batch([records.Record(key, value)]))
        log.roll()
        log.high_watermark = log.log_end_offset
        cleaner = LogDirCleaner(ld)
        assert cleaner.run() == 1 and not cleaner.uncleanable
        assert contents() == [(6, b"a", b"a6", 1), (7, b"d", b"d7", 1), (8, b"c", None, 1),
                              (11, b"e", b"e11", 2), (12, b"b", b"b12", 2)]
        [cleaned] = [s for s in log.segments if s.base_offset == 0]
        report = verify_segment(cleaned.log_path)
        assert not report.errors and report.legacy, report.problems
        # A later clean: the legacy tombstone's segment is past the horizon now.
        time.sleep(0.01)
        log.append(records.build_batch([records.Record(b"z", b"z13")]))
        log.roll()
        log.high_watermark = log.log_end_offset
        assert cleaner.run() == 1
        assert contents() == [(6, b"a", b"a6", 1), (7, b"d", b"d7", 1),
                              (11, b"e", b"e11", 2), (12, b"b", b"b12", 2),
                              (13, b"z", b"z13", 2)]
    finally:
        ld.close()


def test_min_compaction_lag_counts_a_segment_without_timestamps_from_its_file_time(
        tmp_path: Path) -> None:
    """min.compaction.lag.ms, as Kafka's cleaner (largestTimestamp): a segment of magic
    0 messages, which carry no timestamps, is as old as its file's modification time;
    it is not cleaned before the lag has passed since, and is once it has."""
    from logstore import LogDir
    from logstore.cleaner import LogDirCleaner

    data = b"".join(legacy_keyed(0, 0, i, [b"k"], [b"v%d" % i], 0) for i in range(4))
    write_partition(tmp_path / "d" / "state-0", data)
    config = LogConfig(compacted=True, min_cleanable_dirty_ratio=0.01,
                       min_compaction_lag_ms=3_600_000)
    ld = LogDir.open(tmp_path / "d", config)
    try:
        (log,) = ld.logs.values()
        log.roll()
        log.append(records.build_batch([records.Record(b"k", b"new")]))
        log.high_watermark = log.log_end_offset
        cleaner = LogDirCleaner(ld)
        assert cleaner.run() == 0  # written just now: inside the lag
        assert log.read(0, 1 << 20)[:len(data)] == data
        old = tmp_path / "d" / "state-0" / "00000000000000000000.log"
        two_hours_ago = time.time() - 7200
        os.utime(old, (two_hours_ago, two_hours_ago))
        assert cleaner.run() == 1
        left = [m.offset for b in records.iter_batches(log.read(0, 1 << 20))
                if isinstance(b, records.LegacyMessage) for m in b.messages()]
        assert left == [3]  # the legacy segment's latest of k (the map ends at its end)
    finally:
        ld.close()


def test_commits_in_legacy_messages_of_consumer_offsets_are_loaded(tmp_path: Path) -> None:
    """Groups' commits from Kafka before 0.11 (offset commit key v1, value v1, in magic
    1 messages, one of them compressed) are a group's committed offsets here too."""
    from daemon.coordinator.records import OffsetCommitKey, OffsetCommitValue

    now = int(time.time() * 1000)

    def commit(partition: int, offset: int) -> tuple[bytes, bytes]:
        key = OffsetCommitKey(group="old-app", topic="orders", partition=partition)
        value = OffsetCommitValue(offset=offset, metadata="", commit_timestamp=now,
                                  expire_timestamp=now + 86_400_000)
        return key.encode(version=1), value.encode(version=1)

    plain = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    plain.append(0, timestamp=now, key=commit(0, 41)[0], value=commit(0, 41)[1])
    wrapper = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for j, (p, off) in enumerate(((1, 7), (0, 42))):  # a later commit of partition 0
        k, v = commit(p, off)
        wrapper.append(j, timestamp=now, key=k, value=v)
    second = bytearray(wrapper.build())
    struct.pack_into(">q", second, 0, 2)
    # A wrapper whose gzip value does not decompress (its CRC is right): skipped, and
    # the partition's other commits still load.
    broken = bytearray(legacy_entry(1, 0, 3, 1, now))
    broken[17] = 1  # attributes: gzip
    struct.pack_into(">I", broken, 12, zlib.crc32(bytes(broken[16:])))
    d = Daemon(tmp_path / "broker", {"offsets.topic.num.partitions": 1,
                                     "offsets.topic.replication.factor": 1})
    write_partition(d.log_dirs[0] / "__consumer_offsets-0",
                    bytes(plain.build()) + bytes(second) + bytes(broken))
    with d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("orders", 2, 1)])["orders"].result(30)
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "old-app"})
        got = c.committed([ck.TopicPartition("orders", 0), ck.TopicPartition("orders", 1)], 30)
        c.close()
        assert [(t.partition, t.offset) for t in got] == [(0, 42), (1, 7)]


def test_verify_and_dump_log_check_legacy_messages_and_everything_after_them(
        tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from logstore.verify import verify_segment

    from .daemon_helpers import REPO

    data, positions = legacy_log(int(time.time() * 1000))
    pdir = write_partition(tmp_path / "old-0", data)
    log = Log.open(pdir, LogConfig(index_interval_bytes=64))
    log.append(records.build_batch([records.Record(key=b"n", value=b"new")]))
    log.close()
    seg = pdir / "00000000000000000000.log"
    report = verify_segment(seg)
    assert report.ok and report.legacy and report.status is native.ScanStatus.OK
    assert [p.kind for p in report.problems] == ["legacy-format"]
    assert "6 legacy" in report.problems[0].detail
    assert report.batch_count == len(LAYOUT) + 1 and report.offset_gaps == 0
    assert report.valid_bytes == seg.stat().st_size and report.last_offset == RECORDS

    out = subprocess.run([sys.executable, "-m", "daemon.cli", "dump-log", "--deep", "--json",
                          str(seg)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    dumped = [(r["offset"], r["key"]) for b in doc["files"][0]["batches"] for r in b["records"]]
    assert dumped == [(i, f"k{i}") for i in range(RECORDS)] + [(RECORDS, "n")]
    assert [b["magic"] for b in doc["files"][0]["batches"]] == [0, 0, 0, 1, 1, 1, 2]

    # The batch after the legacy messages is checked too: a flipped byte in it is found.
    raw = bytearray(seg.read_bytes())
    raw[-1] ^= 1
    seg.write_bytes(bytes(raw))
    kinds = {p.kind for p in verify_segment(seg).problems}
    assert kinds == {"legacy-format", "bad-crc"}


@pytest.mark.parametrize("api_version, magic, codec", [
    ((0, 9), 0, "gzip"), ((0, 10, 1), 1, "snappy"), ((0, 10, 1), 1, None)])
def test_old_clients_produce_and_consume_through_produce_v0_2_and_fetch_v0_3(
        tmp_path: Path, api_version: tuple[int, ...], magic: int, codec: str | None) -> None:
    """Kafka 3.9 serves Produce v0-2 and Fetch v0-3, which sarama with an old (or its
    1.22 default) Config.Version and kafka-go 0.2 send: their magic 0/1 messages are
    written as magic-2 batches (Kafka's up-conversion) and read back by them as magic 0/1
    messages (its down-conversion), control batches left out. kafka-python told the
    broker is 0.9 (Produce v1, Fetch v1, ListOffsets v0) or 0.10.1 (Produce v2, Fetch v3)
    sends them; new clients read the same records. The broker closed those connections."""
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("old-api", 1, 1)])["old-api"].result(30)
        # A transaction's records and its commit marker first: an old consumer reads the
        # records, never the marker.
        txp = ck.Producer({"bootstrap.servers": d.bootstrap, "transactional.id": "old-api"})
        txp.init_transactions(30)
        txp.begin_transaction()
        txp.produce("old-api", key=b"t", value=b"in-txn", partition=0)
        txp.commit_transaction(30)
        old = KafkaProducer(bootstrap_servers=d.bootstrap, api_version=api_version,
                            compression_type=codec, acks="all")
        sent = [old.send("old-api", key=b"k%d" % i, value=b"v%d" % i, partition=0)
                for i in range(5)]
        offsets = [f.get(30).offset for f in sent]
        old.close()
        assert offsets == [2, 3, 4, 5, 6]  # after the record and its marker
        expected = [(0, b"t", b"in-txn")] + [(o, b"k%d" % i, b"v%d" % i)
                                              for i, o in enumerate(offsets)]

        reader = KafkaConsumer(bootstrap_servers=d.bootstrap, api_version=api_version,
                               consumer_timeout_ms=5000, auto_offset_reset="earliest")
        tp = TopicPartition("old-api", 0)
        reader.assign([tp])
        got = [m for m in reader]
        assert reader.end_offsets([tp])[tp] == 7
        reader.close()
        assert [(m.offset, m.key, m.value) for m in got] == expected
        # magic 1 keeps the producer's timestamps; magic 0 has none
        assert all((m.timestamp is not None and m.timestamp > 0) == (magic == 1) for m in got[1:])

        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "new-reader",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("old-api", 0, 0)])
        new = poll_records(c, len(expected))
        c.close()
        assert new == expected


OLD_RDKAFKA = {"api.version.request": False}  # librdkafka told the broker's version instead


def old_fetch(d: Daemon, topic: str, offset: int, version: int) -> tuple[int, list[LegacyMessage]]:
    """(error code, the messages) of a raw Fetch `version` (0-3) of `topic`-0 at `offset`."""
    c = RawClient(d.port)
    try:
        part = fetch(c, topic, 0, offset, version=version)
    finally:
        c.close()
    got = list(records.iter_batches(part.records)) if part.records else []
    assert all(isinstance(m, LegacyMessage) for m in got)
    return part.error_code, got  # type: ignore[return-value]


def test_old_clients_write_and_read_lz4_in_magic_0_messages(tmp_path: Path) -> None:
    """Kafka's LZ4 frames in magic 0 messages carry the frame header checksum Kafka 0.8
    got wrong (over the frame's magic number too), and librdkafka told the broker is 0.9
    (broker.version.fallback) and kafka-python at api_version 0.9 write them so. Kafka
    skips that checksum for magic 0; logkeeper refused each such Produce with
    CORRUPT_MESSAGE, which librdkafka retries until message.timeout.ms: the producer hung
    and its records were never written."""
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("lz4-v0", 1, 1)])["lz4-v0"].result(30)
        rk = ck.Producer({"bootstrap.servers": d.bootstrap, **OLD_RDKAFKA,
                          "broker.version.fallback": "0.9.0", "compression.codec": "lz4",
                          "linger.ms": 50, "message.timeout.ms": 20000})
        failed: list[object] = []
        for i in range(4):
            rk.produce("lz4-v0", key=b"rk%d" % i, value=b"librdkafka-%d-" % i + b"x" * 300,
                       partition=0, on_delivery=lambda err, _m: failed.append(err) if err else 0)
        assert rk.flush(30) == 0 and not failed
        kp = KafkaProducer(bootstrap_servers=d.bootstrap, api_version=(0, 9),
                           compression_type="lz4", linger_ms=50)
        sent = [kp.send("lz4-v0", key=b"kp%d" % i, value=b"kafka-python-%d-" % i + b"y" * 300,
                        partition=0) for i in range(4)]
        assert [f.get(30).offset for f in sent] == [4, 5, 6, 7]
        kp.close()
        expected = [(i, b"rk%d" % i, b"librdkafka-%d-" % i + b"x" * 300) for i in range(4)] + [
            (4 + i, b"kp%d" % i, b"kafka-python-%d-" % i + b"y" * 300) for i in range(4)]

        old = KafkaConsumer(bootstrap_servers=d.bootstrap, api_version=(0, 9),
                            consumer_timeout_ms=5000)
        tp = TopicPartition("lz4-v0", 0)
        old.assign([tp])
        old.seek(tp, 0)
        assert [(m.offset, m.key, m.value) for m in old] == expected
        old.close()
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "lz4-v0",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("lz4-v0", 0, 0)])
        assert poll_records(c, len(expected)) == expected
        c.close()


@pytest.mark.parametrize("version, codec, timestamp_type", [
    (1, "gzip", "CreateTime"), (1, "lz4", "CreateTime"), (3, "snappy", "CreateTime"),
    (3, "lz4", "LogAppendTime")])
def test_fetch_v0_3_sends_a_compressed_batch_as_a_wrapper_in_its_codec(
        tmp_path: Path, version: int, codec: str, timestamp_type: str) -> None:
    """Kafka's down-conversion (RecordsUtil.downConvert) writes a compressed batch as one
    compressed magic 0/1 wrapper in the batch's codec, all its records inside (the client
    steps over those before its fetch offset): inner offsets absolute under magic 0,
    relative to the first under magic 1, the wrapper's the last record's, its timestamp the
    largest (LogAppendTime: the broker's, on every message), a magic 0 LZ4 frame with Kafka
    0.8's header checksum. logkeeper sent every record as an uncompressed message, so old
    consumers fetched several times the bytes. Old clients read from the middle of it."""
    magic = 1 if version >= 2 else 0
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("wrapped", 1, 1, config={
            "message.timestamp.type": timestamp_type})])["wrapped"].result(30)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "compression.codec": codec,
                         "linger.ms": 100})
        ts0 = int(time.time() * 1000) - 5000
        p.produce("wrapped", value=b"first", partition=0, timestamp=ts0 - 1)
        assert p.flush(30) == 0
        for i in range(1, 6):  # one batch, offsets 1-5
            p.produce("wrapped", key=b"k%d" % i, value=b"value-%d-" % i + b"z" * 200,
                      partition=0, timestamp=ts0 + i, headers=[("h", b"dropped")])
        assert p.flush(30) == 0
        expected = [(i, b"k%d" % i, b"value-%d-" % i + b"z" * 200) for i in range(1, 6)]

        error, got = old_fetch(d, "wrapped", 3, version)
        assert error == 0 and len(got) == 1
        wrapper = got[0]
        assert (wrapper.magic, wrapper.codec, wrapper.offset) == (
            magic, records.CODEC_OF[codec], 5)
        payload = bytearray(wrapper.value or b"")
        if codec == "lz4" and magic == 0:  # Kafka 0.8's checksum, over the magic number too
            assert payload[6] == (xxhash.xxh32(bytes(payload[:6])).intdigest() >> 8) & 0xFF
            payload[6] = (xxhash.xxh32(bytes(payload[4:6])).intdigest() >> 8) & 0xFF
        inner = list(records.iter_batches(
            records.decompress(records.Codec(wrapper.codec), payload), verify_crc=False))
        # relative to the first under magic 1, absolute under magic 0
        assert [m.offset for m in inner] == ([0, 1, 2, 3, 4] if magic else [1, 2, 3, 4, 5])
        assert [(m.offset, m.key, m.value) for m in wrapper.messages()] == expected
        if magic == 1:
            appended = timestamp_type == "LogAppendTime"
            assert bool(wrapper.attributes & records.ATTR_LOG_APPEND_TIME) == appended
            stamps = {m.timestamp for m in wrapper.messages()}
            if appended:
                assert stamps == {wrapper.timestamp} and wrapper.timestamp > ts0 + 5
                assert all(m.attributes & records.ATTR_LOG_APPEND_TIME for m in inner)
            else:
                assert stamps == {ts0 + i for i in range(1, 6)}
                assert wrapper.timestamp == ts0 + 5

        old = KafkaConsumer(bootstrap_servers=d.bootstrap, consumer_timeout_ms=5000,
                            api_version=(0, 9) if version < 2 else (0, 10, 1))
        tp = TopicPartition("wrapped", 0)
        old.assign([tp])
        old.seek(tp, 3)
        assert [(m.offset, m.key, m.value) for m in old] == expected[2:]
        old.close()
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, **OLD_RDKAFKA,
                         "broker.version.fallback": "0.9.0" if version < 2 else "0.10.0",
                         "group.id": "wrapped", "enable.auto.commit": False})
        c.assign([ck.TopicPartition("wrapped", 0, 4)])
        assert poll_records(c, 2) == expected[3:]
        c.close()


def test_old_fetch_versions_read_up_to_a_zstd_batch_and_are_refused_it(tmp_path: Path) -> None:
    """The old formats have no zstd: Kafka's down-conversion sends an old consumer the
    records before a zstd batch a new producer wrote, and answers its fetch at that batch
    UNSUPPORTED_COMPRESSION_TYPE (76, RecordsUtil.downConvert's refusal), so the consumer
    fails instead of reading what its own codecs could never have read. logkeeper
    decompressed the zstd batch and served its records. New clients read them all."""
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("mixed", 1, 1)])["mixed"].result(30)
        for codec in ("none", "zstd", "none"):  # batches at offsets 0-2, 3-5, 6-8
            p = ck.Producer({"bootstrap.servers": d.bootstrap, "compression.codec": codec,
                             "linger.ms": 50})
            for _ in range(3):
                p.produce("mixed", value=b"%s-" % codec.encode() + b"v" * 100, partition=0)
            assert p.flush(30) == 0
        for version in range(4):
            error, got = old_fetch(d, "mixed", 0, version)
            assert error == 0
            assert [m.offset for m in got] == [0, 1, 2]
            error, got = old_fetch(d, "mixed", 4, version)
            assert (error, got) == (errors.UNSUPPORTED_COMPRESSION_TYPE, [])

        old = KafkaConsumer(bootstrap_servers=d.bootstrap, api_version=(0, 10, 1))
        tp = TopicPartition("mixed", 0)
        old.assign([tp])
        old.seek(tp, 0)
        seen: list[int] = []
        deadline = time.monotonic() + 30
        with pytest.raises(kafka.errors.UnsupportedCompressionTypeError):
            while time.monotonic() < deadline:
                for batch in old.poll(500).values():
                    seen += [m.offset for m in batch]
        old.close()
        assert seen == [0, 1, 2]
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "mixed",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("mixed", 0, 0)])
        assert [o for o, _, _ in poll_records(c, 9)] == list(range(9))
        c.close()


def test_message_downconversion_disabled_refuses_old_fetch_versions(tmp_path: Path) -> None:
    """message.downconversion.enable=false (the topic's, or the broker's
    log.message.downconversion.enable) has Kafka answer a consumer's Fetch v0-3, which
    needs magic 0/1 messages made, UNSUPPORTED_VERSION (35) for the topic's partitions
    (KafkaApis' maybeConvertFetchedData); Fetch v4 and later, and followers, read on.
    logkeeper took and described the setting but down-converted anyway, so an operator
    could not keep old consumers from costing the broker a conversion of every read."""
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        for f in admin.create_topics([
                ck_admin.NewTopic("no-down", 1, 1,
                                  config={"message.downconversion.enable": "false"}),
                ck_admin.NewTopic("down", 1, 1)]).values():
            f.result(30)
        p = ck.Producer({"bootstrap.servers": d.bootstrap})
        for topic in ("no-down", "down"):
            p.produce(topic, key=b"k", value=b"v", partition=0)
        assert p.flush(30) == 0
        for version in range(4):
            assert old_fetch(d, "no-down", 0, version) == (errors.UNSUPPORTED_VERSION, [])
            error, got = old_fetch(d, "down", 0, version)
            assert error == 0 and [m.value for m in got] == [b"v"]
        old = KafkaConsumer(bootstrap_servers=d.bootstrap, api_version=(0, 10, 1))
        old.assign([TopicPartition("no-down", 0)])
        old.seek(TopicPartition("no-down", 0), 0)
        deadline = time.monotonic() + 30
        with pytest.raises(kafka.errors.UnsupportedVersionError):
            while time.monotonic() < deadline:
                assert not old.poll(500)
        old.close()
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "no-down",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("no-down", 0, 0)])
        assert poll_records(c, 1) == [(0, b"k", b"v")]
        c.close()
        # The broker's default, changed at run time, applies to topics without their own.
        admin.incremental_alter_configs([ck_admin.ConfigResource(
            ck_admin.ResourceType.BROKER, "1", incremental_configs=[ck_admin.ConfigEntry(
                "log.message.downconversion.enable", "false",
                incremental_operation=ck_admin.AlterConfigOpType.SET)])])[
            ck_admin.ConfigResource(ck_admin.ResourceType.BROKER, "1")].result(30)
        wait_for(lambda: old_fetch(d, "down", 0, 3) == (errors.UNSUPPORTED_VERSION, []), 30,
                 "the broker's log.message.downconversion.enable=false to refuse Fetch v3")


def test_other_clients_are_answered_while_an_old_consumers_fetch_is_down_converted(
        tmp_path: Path) -> None:
    """Down-converting a Fetch v0-3's records costs a tenth of a second or more per
    megabyte of compressed batches; an old consumer's fetch of a dozen partitions (kafka-
    python at api_version 0.10.1 asks a megabyte of each) took seconds of it, during which
    logkeeper, converting on its event loop, answered no one: not other consumers, not
    producers, not followers. Kafka converts in the network thread that sends the answer
    and its other threads go on serving. The conversion now runs off the event loop: a
    Metadata request sent meanwhile is answered in a fraction of the fetch's time."""
    partitions = 12
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("bulk", partitions, 1)])["bulk"].result(30)
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "compression.codec": "gzip",
                         "linger.ms": 100, "batch.size": 1 << 20})
        noise = random.Random(5).randbytes(1 << 16)
        for i in range(partitions * 4000):  # about a megabyte of gzip per partition
            at = (i * 61) % (len(noise) - 200)
            p.produce("bulk", value=noise[at:at + 200], partition=i % partitions)
            if i % 2000 == 0:
                p.poll(0)
        assert p.flush(60) == 0

        request = fetch_request("bulk", range(partitions))
        old = RawClient(d.port, timeout=120)
        probe = RawClient(d.port, timeout=120)
        answer: list[bytes | None] = []
        try:
            fetching = threading.Thread(target=lambda: answer.append(old.recv_frame()))
            started = time.monotonic()
            old.send_raw(protocol.encode_request(request, 3, 1, "old-consumer"))
            fetching.start()
            waits = []
            while fetching.is_alive():
                sent = time.monotonic()
                probe.request(MetadataRequest[1](topics=[]), 1)
                waits.append(time.monotonic() - sent)
            took = time.monotonic() - started
            fetching.join()
        finally:
            old.close()
            probe.close()
        assert answer and answer[0]
        parts = protocol.decode_response(FetchResponse, answer[0], 3).responses[0].partitions
        assert sum(len(m.messages()) for pt in parts for m in records.iter_batches(pt.records)
                   if isinstance(m, LegacyMessage)) == partitions * 4000
        assert max(waits) < took / 2, (
            f"a Metadata request waited {max(waits):.2f}s of the fetch's {took:.2f}s")


def test_a_produce_v0_2_whose_compressed_messages_fail_their_crc_is_refused(
        tmp_path: Path) -> None:
    """Kafka's LogValidator checks the CRC-32 of each message inside an old client's
    compressed wrapper (ensureValid) and refuses the Produce with CORRUPT_MESSAGE;
    logkeeper checked the wrapper's only, and wrote the damaged records as they came."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=int(time.time() * 1000), key=b"k%d" % i, value=b"good%d" % i)
    body = bytearray(builder.build())
    body[-1] ^= 0xFF  # the last message's last value byte, under its CRC
    value = gzip.compress(bytes(body))
    wrapper = bytearray(struct.pack(">qiIbbqi", 2, 0, 0, 1, records.Codec.GZIP,
                                    int(time.time() * 1000), -1))
    wrapper += struct.pack(">i", len(value)) + value
    struct.pack_into(">iI", wrapper, 8, len(wrapper) - 12, zlib.crc32(wrapper[16:]))
    with Daemon(tmp_path / "broker") as d:
        admin = ck_admin.AdminClient({"bootstrap.servers": d.bootstrap})
        admin.create_topics([ck_admin.NewTopic("crc", 1, 1)])["crc"].result(30)
        c = RawClient(d.port)
        try:
            P = ProduceRequest.TopicProduceData
            answer = c.request(ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[P(
                name="crc", partition_data=[P.PartitionProduceData(
                    index=0, records=bytes(wrapper))])]), 2)
            assert answer.responses[0].partition_responses[0].error_code == \
                errors.CORRUPT_MESSAGE
            assert fetch(c, "crc", 0, 0).high_watermark == 0
        finally:
            c.close()
