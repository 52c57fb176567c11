"""Kafka's producer-state snapshots (`<offset>.snapshot`): Kafka's own files decode (a
Kafka 2.7 broker's snapshot of three idempotent producers), ours round-trip, a file
that does not check out is never used (the one before it is), and a truncation removes
the snapshots past its cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.replica import producer
from logstore import Log, LogConfig, producer_snapshot
from logstore.errors import CorruptRecordError
from logstore.records import build_batch


def test_kafkas_snapshot_decodes(kafka_fixtures: Path) -> None:
    data = (kafka_fixtures / "kafka-2.7.1" / "myTopic-0" / "00000000000000000038.snapshot"
            ).read_bytes()
    entries = producer_snapshot.decode(data)
    assert [(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.txn_first_offset)
            for e in entries] == [(4001, 0, 11, 11, -1), (4002, 0, 11, 23, -1),
                                  (4003, 0, 13, 37, -1)]
    # Ours encode the same bytes back.
    assert producer_snapshot.encode(entries) == data
    state = producer.from_snapshot(entries)
    assert state[4003].batches[-1].first_offset == 37 - 13


def test_state_round_trips_and_a_bad_file_is_skipped(tmp_path: Path) -> None:
    state = producer.PartitionProducers()
    producer.record(state, (7, 2, 0, 4), 100)
    producer.begin_txn(state, 7, 100)
    state.coordinator_epochs[7] = 3
    producer.begin_txn(state, 9, 120)  # a TxnOffsetCommit's producer: no sequence
    producer_snapshot.write(tmp_path, 130, producer.snapshot_entries(state))
    back = producer.from_snapshot(producer_snapshot.latest(tmp_path, 1000)[1])
    assert back.ongoing == {7: 100, 9: 120} and back.coordinator_epochs == {7: 3}
    assert (back[7].epoch, back[7].batches[-1].first_seq, back[7].batches[-1].last_seq,
            back[7].batches[-1].first_offset) == (2, 0, 4, 100)
    producer_snapshot.write(tmp_path, 140, [])
    producer_snapshot.path(tmp_path, 140).write_bytes(b"\x00\x01garbage-----")
    with pytest.raises(CorruptRecordError):
        producer_snapshot.decode(producer_snapshot.path(tmp_path, 140).read_bytes())
    assert producer_snapshot.latest(tmp_path, 1000)[0] == 130  # the bad one is passed over
    assert producer_snapshot.latest(tmp_path, 129) is None
    producer_snapshot.write(tmp_path, 150, [])
    assert producer_snapshot.offsets(tmp_path) == [140, 150]  # the two latest are kept


def test_a_truncation_removes_the_snapshots_past_its_cut(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", LogConfig())
    for i in range(10):
        lg.append(build_batch([(b"k", b"v%d" % i)]), leader_epoch=0)
    producer_snapshot.write(lg.dir, 4, [])
    producer_snapshot.write(lg.dir, 8, [])
    lg.truncate_to(6)
    assert producer_snapshot.offsets(lg.dir) == [4]
    lg.truncate_fully_and_start_at(20)
    assert producer_snapshot.offsets(lg.dir) == []
    lg.close()


def test_last_timestamps_outlive_a_restart_and_idle_producers_expire() -> None:
    """Each producer's last timestamp goes into the snapshot (Kafka's field), so the
    expiration goes on counting across a restart; an open transaction never expires."""
    now = 1_700_000_000_000
    state = producer.PartitionProducers()
    producer.record(state, (1, 0, 0, 4), 0, timestamp=now - 10_000)
    producer.record(state, (2, 0, 0, 0), 5, timestamp=now - 10_000)
    producer.begin_txn(state, 2, 5, 0, now - 10_000)
    producer.record(state, (3, 0, 0, 0), 6, timestamp=now - 100)
    back = producer.from_snapshot(producer.snapshot_entries(state), now_ms=now)
    assert {pid: s.last_timestamp for pid, s in back.items()} == {
        1: now - 10_000, 2: now - 10_000, 3: now - 100}
    assert back.expire(now, 5_000) == 1  # producer 1; 2's transaction is open
    assert sorted(back) == [2, 3]
    assert [(v.producer_id, v.last_sequence, v.current_txn_start_offset)
            for v in producer.describe(back)] == [(2, 0, 5), (3, 0, -1)]
    # A snapshot without timestamps (older ones of ours) counts from the restart.
    entries = [e._replace(timestamp=-1) for e in producer.snapshot_entries(state)]
    assert producer.from_snapshot(entries, now_ms=now).expire(now + 4_999, 5_000) == 0
