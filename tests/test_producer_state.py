"""The idempotent-producer check a leader runs before appending (daemon.replica.producer),
on batches encoded as clients send them: duplicates are answered with the offset they were
written at, gaps and stale epochs are refused, and a follower's replicated batches and a
truncation keep the same state a new leader then checks against."""

from __future__ import annotations

from pathlib import Path

from daemon.api import errors
from daemon.replica import producer
from logstore import FailureChannel, IoGuard, Log, LogConfig
from logstore.records import build_batch


def batch(pid: int, epoch: int, seq: int, count: int = 2, base_offset: int = 0) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(count)], base_offset=base_offset,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def append(state: dict, records: bytes, offset: int) -> producer.Check:
    got = producer.check(state, records)
    if got.error == errors.NONE and got.duplicate_of is None:
        producer.record(state, got.token, offset)
    return got


def test_a_retried_batch_is_answered_with_its_first_offset_and_not_written_again() -> None:
    state = producer.PartitionProducers()
    assert append(state, batch(7, 0, 0), 100).token is not None
    assert append(state, batch(7, 0, 2), 102).token is not None
    retry = producer.check(state, batch(7, 0, 0))
    assert (retry.error, retry.duplicate_of) == (errors.NONE, 100)
    assert producer.check(state, batch(7, 0, 2)).duplicate_of == 102


def test_a_gap_in_sequences_is_out_of_order_and_records_nothing() -> None:
    state = producer.PartitionProducers()
    append(state, batch(7, 0, 0), 0)
    assert producer.check(state, batch(7, 0, 5)).error == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(state, batch(7, 0, 2), 2).error == errors.NONE


def test_a_lower_epoch_is_fenced_and_a_higher_one_must_start_at_sequence_0() -> None:
    state = producer.PartitionProducers()
    append(state, batch(7, 1, 0), 0)
    assert producer.check(state, batch(7, 0, 2)).error == errors.INVALID_PRODUCER_EPOCH
    assert producer.check(state, batch(7, 2, 2)).error == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(state, batch(7, 2, 0), 2).error == errors.NONE
    assert producer.check(state, batch(7, 1, 2)).error == errors.INVALID_PRODUCER_EPOCH


def test_an_unknown_producer_may_start_at_any_sequence() -> None:
    assert producer.check(producer.PartitionProducers(), batch(9, 0, 4000)).error == errors.NONE


def test_two_producers_with_the_same_sequences_do_not_see_each_others_batches() -> None:
    state = producer.PartitionProducers()
    append(state, batch(7, 0, 0), 0)
    other = producer.check(state, batch(8, 0, 0))
    assert (other.error, other.duplicate_of) == (errors.NONE, None)


def test_a_follower_knows_the_leaders_batches_and_forgets_what_a_truncation_cut() -> None:
    state = producer.PartitionProducers()
    producer.record_replicated(state, batch(7, 0, 0, base_offset=10)
                               + batch(7, 0, 2, base_offset=12))
    assert producer.check(state, batch(7, 0, 2)).duplicate_of == 12
    producer.truncate(state, 12)
    assert producer.check(state, batch(7, 0, 2)).duplicate_of is None
    assert producer.check(state, batch(7, 0, 0)).duplicate_of == 10


def test_a_restarted_broker_knows_the_producers_of_its_logs_tail(tmp_path: Path) -> None:
    """A broker killed and restarted rebuilds producer state from the batches at its
    logs' end (Kafka replays the tail without a snapshot): a producer's retry of a batch
    written before the kill is a duplicate, not a second copy. Over several segments, and
    only as far back as the tail it reads."""
    root = tmp_path / "dir"
    root.mkdir()
    guard = IoGuard(root, FailureChannel())
    lg = Log.open(root / "t-0", LogConfig(segment_bytes=2000), guard=guard)
    early = lg.append(batch(9, 0, 0), leader_epoch=0).base_offset
    offsets = {}
    for seq in range(0, 200, 2):  # 100 batches of 2 records over many segments
        offsets[seq] = lg.append(batch(7, 0, seq), leader_epoch=0).base_offset
    lg.append(batch(8, 3, 50), leader_epoch=0)
    lg.close()
    lg = Log.open(root / "t-0", LogConfig(segment_bytes=2000), guard=guard)
    assert lg.segment_count >= 5
    state = producer.from_log(lg)
    assert producer.check(state, batch(7, 0, 198)).duplicate_of == offsets[198]
    assert producer.check(state, batch(7, 0, 190)).duplicate_of == offsets[190]
    assert producer.check(state, batch(7, 0, 202)).error == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producer.check(state, batch(8, 2, 52)).error == errors.INVALID_PRODUCER_EPOCH
    assert producer.check(state, batch(9, 0, 0)).duplicate_of == early
    near = producer.from_log(lg, tail_bytes=500)  # the last segment: no batch of pid 9
    assert 9 not in near and near[8].epoch == 3
    lg.close()


def txn_batch(pid: int, epoch: int, seq: int, count: int = 2) -> bytes:
    return build_batch([(None, b"t%d" % i) for i in range(count)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=True)


def test_a_transactions_first_batch_is_written_only_with_its_partitions_verification() -> None:
    """Transaction verification (KIP-890): the first batch of a transaction needs the
    very verification its partition started for it; once the transaction is open its
    later batches need none; a marker ends a verification, so an answer that comes
    after it (the ABA case) opens nothing."""
    state = producer.PartitionProducers()
    unverified = producer.check(state, txn_batch(7, 0, 0), producer.UNVERIFIED)
    assert unverified.error == errors.INVALID_TXN_STATE
    # Verification off (no guard): written as it comes.
    assert producer.check(state, txn_batch(7, 0, 0)).error == errors.NONE
    v = producer.start_verification(state, 7, 0, 0, now_ms=1000)
    assert v is not None and producer.start_verification(state, 7, 0, 0, now_ms=1001) is v
    other = producer.Verification(1000, 0, 0)  # another wait's guard, not this one's
    assert producer.check(state, txn_batch(7, 0, 0), other).error == errors.INVALID_TXN_STATE
    got = producer.check(state, txn_batch(7, 0, 0), v)
    assert got.error == errors.NONE
    producer.record(state, got.token, 0)
    producer.begin_txn(state, 7, 0, 0)
    assert 7 not in state.verifying
    # Open here now: nothing more to verify, the next batch goes with no guard of its own.
    assert producer.start_verification(state, 7, 2, 0, now_ms=1002) is None
    assert producer.check(state, txn_batch(7, 0, 2), producer.UNVERIFIED).error == errors.NONE
    # A verification started, then the abort marker: its answer no longer opens anything.
    state.ongoing.pop(7)  # (as if the batches were cut) a new transaction on the way
    stale = producer.start_verification(state, 7, 2, 0, now_ms=1003)
    producer.end_txn(state, 7, 0, 3, 0, 4, None)
    assert producer.check(state, txn_batch(7, 0, 2), stale).error == errors.INVALID_TXN_STATE


def test_a_zombie_of_an_older_epoch_is_verified_even_while_its_successor_has_a_transaction_open(
        ) -> None:
    """Producer 7 at epoch 0 was fenced by a new instance (epoch 2), whose transaction is
    open here. The zombie's next batch is not inside that transaction: it is verified
    (its coordinator then fences it, INVALID_PRODUCER_EPOCH) rather than waved through
    as the open transaction's, and nothing lets it in without a verification. Asked
    unverified, it used to be refused INVALID_TXN_STATE or not by whether the
    successor's commit marker came first (an abortable error instead of a fatal one)."""
    state = producer.PartitionProducers()
    got = producer.check(state, txn_batch(7, 2, 0))
    producer.record(state, got.token, 0)
    producer.begin_txn(state, 7, 0, 2)
    assert producer.start_verification(state, 7, 2, 2, now_ms=0) is None  # its own: open
    zombie = producer.start_verification(state, 7, 1, 0, now_ms=0)
    assert zombie is not None and zombie.epoch == 0
    assert producer.check(state, txn_batch(7, 0, 1), producer.UNVERIFIED).error == \
        errors.INVALID_TXN_STATE
    # Verification off: the epoch check alone fences it.
    assert producer.check(state, txn_batch(7, 0, 1)).error == errors.INVALID_PRODUCER_EPOCH


def test_a_verification_refuses_a_batch_past_the_lowest_sequence_it_saw() -> None:
    """Two batches of a new transaction asked at once: the later one cannot be written
    first (OUT_OF_ORDER_SEQUENCE_NUMBER, retried by the producer), the earlier one can."""
    state = producer.PartitionProducers()
    v = producer.start_verification(state, 7, 2, 0, now_ms=0)
    assert producer.start_verification(state, 7, 0, 0, now_ms=0) is v
    assert (v.lowest_seq, v.epoch) == (0, 0)
    assert producer.check(state, txn_batch(7, 0, 2), v).error == \
        errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producer.check(state, txn_batch(7, 0, 0), v).error == errors.NONE
    # A higher epoch starts over from its own first sequence.
    v.saw(4, 1)
    assert (v.lowest_seq, v.epoch) == (4, 1)


def test_a_verification_nobody_appended_with_expires_with_the_producers() -> None:
    state = producer.PartitionProducers()
    producer.start_verification(state, 7, 0, 0, now_ms=1000)
    state.expire(now_ms=1500, expiration_ms=1000)
    assert 7 in state.verifying
    state.expire(now_ms=2000, expiration_ms=1000)
    assert 7 not in state.verifying


def test_recovery_rebuilds_the_txnindex_of_the_segments_it_rescanned(tmp_path: Path) -> None:
    """A segment rescanned by recovery gets its `.txnindex` from its abort markers: the
    entry a crash lost is written again, the one of a marker recovery cut goes, and the
    one of a transaction begun before the replay could see it (in a segment not
    rescanned, no snapshot) stays as it was. A segment not rescanned is left alone."""
    from logstore import txnindex
    from logstore.records import control_batch
    from logstore.txnindex import AbortedTxn

    root = tmp_path / "dir"
    root.mkdir()
    guard = IoGuard(root, FailureChannel())
    lg = Log.open(root / "t-0", LogConfig(), guard=guard)
    lg.append(txn_batch(7, 0, 0), leader_epoch=0)  # 0-1, its abort in the next segment
    lg.roll()
    second = lg.log_end_offset
    lg.append(control_batch(7, 0, commit=False, coordinator_epoch=1), leader_epoch=0)  # 2
    lg.append(txn_batch(8, 0, 0), leader_epoch=0)  # 3-4
    lg.append(control_batch(8, 0, commit=False, coordinator_epoch=1), leader_epoch=0)  # 5
    lg.append(txn_batch(9, 0, 0), leader_epoch=0)  # 6-7
    lg.append(control_batch(9, 0, commit=True, coordinator_epoch=1), leader_epoch=0)  # 8
    lg.close()
    index = root / "t-0" / "00000000000000000002.txnindex"
    kept, cut = AbortedTxn(7, 0, 2, 3), AbortedTxn(10, 20, 30, 31)
    index.write_bytes(txnindex.encode([kept, cut]))  # pid 8's entry lost, pid 10's marker cut
    lg = Log.open(root / "t-0", LogConfig(), guard=guard, recover=True, recovery_point=second)
    assert lg.recovery.txn_indexes_to_rebuild == [second]
    producer.from_log(lg, tail_bytes=1)  # the replay starts at the rescanned segment
    assert txnindex.parse(index.read_bytes()) == [kept, AbortedTxn(8, 3, 5, 6)]
    assert lg.aborted_txns(0, lg.log_end_offset) == [kept, AbortedTxn(8, 3, 5, 6)]
    assert not (root / "t-0" / "00000000000000000000.txnindex").exists()
    lg.close()
