"""Transactional data in a log dir taken over from Kafka: read_committed consumers skip
the records of aborted transactions, and the cleaner compacts it, as Kafka does.

A Kafka log dir logkeeper takes over may hold a transactional producer's batches
(Kafka Streams with exactly-once, for one), their commit and abort markers, and the
`.txnindex` files listing the aborted transactions.
A read_committed consumer (confluent-kafka's default) learns from each Fetch answer
which transactions in the records were aborted; without that it would deliver them.
The partition here is written as a Kafka broker lays it out: batches, control batches
and the segment's transaction index.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import confluent_kafka as ck
from kafka import KafkaConsumer, TopicPartition

from logstore import Log, LogConfig, LogDir, records, txnindex
from logstore.cleaner import LogDirCleaner
from tests.daemon_helpers import Daemon

ABORTED_PID, COMMITTED_PID = 100, 200


def _batch(base: int, values: list[bytes], *, pid: int = -1, txn: bool = False) -> bytes:
    return records.build_batch([records.Record(b"k", v) for v in values], base_offset=base,
                               producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=0 if pid >= 0 else -1, transactional=txn)


def _marker(base: int, pid: int, commit: bool) -> bytes:
    """A transaction's end: a control batch of one record, key (version 0, type: 0
    abort, 1 commit), value (version 0, coordinator epoch)."""
    rec = records.Record(struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))
    return records.build_batch([rec], base_offset=base, producer_id=pid, producer_epoch=0,
                               transactional=True, control=True)


def kafka_partition(pdir: Path) -> None:
    """Offsets 0-1 plain; 2-3 a transaction later aborted; 4-5 one committed; 6 the abort
    marker, 7 the commit marker; 8-9 plain again. The .txnindex lists the abort."""
    pdir.mkdir(parents=True)
    (pdir / "00000000000000000000.log").write_bytes(
        _batch(0, [b"plain-0", b"plain-1"])
        + _batch(2, [b"aborted-2", b"aborted-3"], pid=ABORTED_PID, txn=True)
        + _batch(4, [b"committed-4", b"committed-5"], pid=COMMITTED_PID, txn=True)
        + _marker(6, ABORTED_PID, commit=False)
        + _marker(7, COMMITTED_PID, commit=True)
        + _batch(8, [b"plain-8", b"plain-9"]))
    (pdir / "00000000000000000000.txnindex").write_bytes(
        txnindex.encode([txnindex.AbortedTxn(ABORTED_PID, 2, 6, 2)]))


COMMITTED = [b"plain-0", b"plain-1", b"committed-4", b"committed-5", b"plain-8", b"plain-9"]
UNCOMMITTED = COMMITTED[:2] + [b"aborted-2", b"aborted-3"] + COMMITTED[2:]


def test_the_log_names_the_aborted_transactions_of_a_read(tmp_path: Path) -> None:
    pdir = tmp_path / "txn-0"
    kafka_partition(pdir)
    log = Log.open(pdir)
    try:
        assert log.log_end_offset == 10 and log.recovery.bytes_truncated == 0
        whole = log.read(0, 1 << 20)
        assert log.aborted_transactions(0, len(whole)) == [(ABORTED_PID, 2)]
        assert log.aborted_transactions(4, len(log.read(4, 1 << 20))) == [(ABORTED_PID, 2)]
        # A read that ends before the transaction begins, or starts past its marker.
        first = log.read(0, 1)
        assert log.aborted_transactions(0, len(first)) == []
        assert log.aborted_transactions(8, len(log.read(8, 1 << 20))) == []
    finally:
        log.close()
    plain = Log.open(tmp_path / "ours-0")  # a log of ours: no index, nothing to say
    try:
        plain.append(_batch(0, [b"x"]))
        assert plain.aborted_transactions(0, 100) == []
    finally:
        plain.close()


def _confluent(bootstrap: str, isolation: str) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{isolation}",
                     "isolation.level": isolation, "enable.auto.commit": False})
    c.assign([ck.TopicPartition("txn", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is not None and not m.error():
            got.append(m.value())
            if m.offset() == 9:
                break
    c.close()
    return got


def test_read_committed_consumers_skip_aborted_transactions_of_a_kafka_log(
        tmp_path: Path) -> None:
    d = Daemon(tmp_path / "broker")
    kafka_partition(d.log_dirs[0] / "txn-0")
    with d:
        assert _confluent(d.bootstrap, "read_committed") == COMMITTED
        assert _confluent(d.bootstrap, "read_uncommitted") == UNCOMMITTED
        for isolation, want in (("read_committed", COMMITTED),
                                ("read_uncommitted", UNCOMMITTED)):
            kp = KafkaConsumer(bootstrap_servers=d.bootstrap, isolation_level=isolation,
                               consumer_timeout_ms=3000)
            tp = TopicPartition("txn", 0)
            kp.assign([tp])
            kp.seek(tp, 0)
            assert [m.value for m in kp] == want, isolation
            kp.close()


def test_the_cleaner_compacts_a_kafka_log_with_transactions_as_kafka_does(
        tmp_path: Path) -> None:
    """Given later values of its key, the cleaner drops the aborted transaction's
    records, keeps both markers (their transactions' batches were met in this clean)
    and the abort's `.txnindex` entry in the cleaned segment."""
    kafka_partition(tmp_path / "d" / "txn-0")
    ld = LogDir.open(tmp_path / "d", LogConfig(compacted=True, segment_bytes=4096,
                                              min_cleanable_dirty_ratio=0.01))
    try:
        log = ld.get_log("txn", 0)
        for i in range(40):
            log.append(records.build_batch([records.Record(b"other-%d" % (i % 3), b"v%d" % i)]))
        log.roll()
        log.high_watermark = log.log_end_offset
        assert LogDirCleaner(ld).run() == 1
        left = [b for seg in log.segments for b in records.iter_batches(seg.read_exact(0, seg.size))]
        values = [r.value for b in left if not b.is_control for r in b.records()]
        assert b"plain-9" in values and not [v for v in values if v.startswith(b"aborted")]
        assert not [v for v in values if v.startswith((b"plain-0", b"committed"))]
        assert [(b.base_offset, b.producer_id) for b in left if b.is_control] == [
            (6, ABORTED_PID), (7, COMMITTED_PID)]
        assert log.aborted_txns(0, log.log_end_offset) == [txnindex.AbortedTxn(ABORTED_PID, 2, 6, 2)]
    finally:
        ld.close()
