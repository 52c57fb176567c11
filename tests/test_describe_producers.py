"""The producers a partition keeps, as an operator sees and mends them with Kafka's
tools (kafka-transactions.sh describe-producers / abort, here kafka-python's admin
client, which sends the same requests): DescribeProducers lists each active producer
(epoch, last sequence and timestamp, open transaction's start); a producer idle past
producer.id.expiration.ms is forgotten unless its transaction is open; a hanging
transaction (batches whose coordinator never heard of them, so read_committed
consumers stall at its first offset; written before transaction verification, or with
it off) is found there and aborted by WriteTxnMarkers, after which read_committed
consumers go on."""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka as ck
import kafka.errors as ke
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import AbortTransactionSpec
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest

from logstore.records import Record, build_batch
from tests.daemon_helpers import Daemon, RawClient, running
from tests.sick_helpers import wait_for

EXPIRATION_MS = 3000
SETTINGS = {"producer.id.expiration.ms": EXPIRATION_MS,
            "producer.id.expiration.check.interval.ms": 200,
            "transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1}


def create(d: Daemon, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def producers(admin: KafkaAdminClient, topic: str) -> dict[int, object]:
    tp = TopicPartition(topic, 0)
    return {p.producer_id: p for p in admin.describe_producers([tp])[tp].active_producers}


def test_describe_producers_shows_each_one_until_it_expires(tmp_path: Path) -> None:
    with running(tmp_path, SETTINGS, dirs=1) as d:
        create(d, "t")
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            before = int(time.time() * 1000)
            idem = ck.Producer({"bootstrap.servers": d.bootstrap, "enable.idempotence": True,
                                "linger.ms": 50})
            for i in range(5):
                idem.produce("t", b"idempotent-%d" % i, partition=0)
            idem.flush(30)
            txn = ck.Producer({"bootstrap.servers": d.bootstrap, "transactional.id": "slow",
                               "transaction.timeout.ms": 60000})
            txn.init_transactions(30)
            txn.begin_transaction()
            txn.produce("t", b"in-transaction", partition=0)
            txn.flush(30)
            seen = producers(admin, "t")
            assert len(seen) == 2
            plain, open_ = sorted(seen.values(), key=lambda p: p.current_transaction_start_offset)
            assert (plain.producer_epoch, plain.last_sequence,
                    plain.current_transaction_start_offset) == (0, 4, -1)
            assert before - 1000 <= plain.last_timestamp <= int(time.time() * 1000) + 1000
            assert (open_.producer_epoch, open_.last_sequence,
                    open_.current_transaction_start_offset) == (0, 0, 5)
            # Idle past the expiration: the idempotent producer goes; the one whose
            # transaction is open stays however long it waits.
            wait_for(lambda: set(producers(admin, "t")) == {open_.producer_id}, 30,
                     "the idle producer expired")
            time.sleep(EXPIRATION_MS / 1000)
            assert set(producers(admin, "t")) == {open_.producer_id}
            # The forgotten producer writes on: accepted (its sequence is not checked
            # against what went), and listed again.
            idem.produce("t", b"idempotent-5", partition=0)
            idem.flush(30)
            assert set(producers(admin, "t")) == {open_.producer_id, plain.producer_id}
            txn.commit_transaction(30)
            coordinator_epoch = producers(admin, "t")[open_.producer_id].coordinator_epoch
            assert coordinator_epoch >= 0
            wait_for(lambda: not producers(admin, "t"), 30, "both producers expired")
            # A topic that does not exist, asked of this broker.
            with pytest.raises(ke.UnknownTopicOrPartitionError):
                admin.describe_producers([TopicPartition("nope", 0)], broker_id=1)
            del idem, txn  # closed before the broker stops
        finally:
            admin.close()


def _hanging_batch(c: RawClient, producer_id: int) -> int:
    """A transactional batch no coordinator knows of (a producer that wrote and vanished
    before its AddPartitionsToTxn was recorded, KIP-664's hanging transaction): its
    base offset."""
    T = ProduceRequest.TopicProduceData
    batch = build_batch([Record(None, b"hanging-%d" % i, [], int(time.time() * 1000))
                         for i in range(3)], producer_id=producer_id, producer_epoch=0,
                        base_sequence=0, transactional=True)
    resp = c.request(ProduceRequest(transactional_id="ghost", acks=-1, timeout_ms=10000,
                                    topic_data=[T(name="h", partition_data=[
                                        T.PartitionProduceData(index=0, records=batch)])]), 8)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return part.base_offset


def _last_stable_offset(c: RawClient) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    resp = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
        T(name="h", partitions=[T.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 5)
    return resp.topics[0].partitions[0].offset


def test_a_hanging_transaction_is_found_and_aborted_by_an_operator(tmp_path: Path) -> None:
    # Transaction verification keeps such a batch out (tests/test_txn_verification.py);
    # logs written before it, or by a broker with it off, can still hold one.
    with running(tmp_path, {**SETTINGS, "transaction.partition.verification.enable": False},
                 dirs=1) as d:
        create(d, "h")
        c = RawClient(d.port)
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            first = _hanging_batch(c, 424242)
            p = ck.Producer({"bootstrap.servers": d.bootstrap, "transactional.id": "app"})
            p.init_transactions(30)
            p.begin_transaction()
            for i in range(4):
                p.produce("h", b"committed-%d" % i, partition=0)
            p.commit_transaction(30)
            # read_committed consumers are held at the hanging transaction's first offset.
            assert _last_stable_offset(c) == first
            hanging = producers(admin, "h")[424242]
            assert hanging.current_transaction_start_offset == first
            admin.abort_transaction(AbortTransactionSpec(
                TopicPartition("h", 0), hanging.producer_id, hanging.producer_epoch,
                hanging.coordinator_epoch))
            wait_for(lambda: _last_stable_offset(c) > first, 30, "the LSO moved past it")
            assert producers(admin, "h")[424242].current_transaction_start_offset == -1
            consumer = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "r",
                                    "isolation.level": "read_committed",
                                    "auto.offset.reset": "earliest"})
            consumer.assign([ck.TopicPartition("h", 0, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 4 and time.monotonic() < deadline:
                for m in consumer.consume(10, 0.5):
                    assert m.error() is None, m.error()
                    got.append(m.value())
            consumer.close()
            assert got == [b"committed-%d" % i for i in range(4)]
            del p
        finally:
            admin.close()
            c.close()
