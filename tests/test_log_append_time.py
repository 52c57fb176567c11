"""`message.timestamp.type=LogAppendTime` (a topic's, or the broker's
`log.message.timestamp.type`): the leader stamps each batch with the time it wrote it,
whatever timestamps the producer gave; the Produce answer carries that time, and every
client reads it back as a LogAppendTime timestamp. CreateTime (Kafka's default) keeps the
producers' own. Real clients: confluent-kafka and kafka-python.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.protocol.producer import ProduceRequest

from logstore.records import Record, build_batch
from tests.cluster_helpers import wait_for
from tests.daemon_helpers import Daemon, RawClient, running

OLD = 1_600_000_000_000  # what the producers claim (September 2020)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("append-time"), {
            "auto.create.topics.enable": False}) as d:
        admin = AdminClient({"bootstrap.servers": d.bootstrap})
        for fut in admin.create_topics([
                NewTopic("ingest", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
                NewTopic("events", 1, 1)]).values():
            fut.result(30)
        yield d


def _consume(d: Daemon, topic: str, count: int) -> list[tuple[int, int]]:
    """(timestamp type, timestamp) of each record, as confluent-kafka reads them."""
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": f"{topic}-read"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[tuple[int, int]] = []
    try:
        wait_for(lambda: got.extend(m.timestamp() for m in c.consume(100, 0.5)
                                    if not m.error()) or len(got) >= count, 30, "records")
    finally:
        c.close()
    return got


def test_log_append_time_replaces_the_producers_timestamps(daemon: Daemon) -> None:
    before = int(time.time() * 1000)
    delivered: list[tuple[int, int]] = []
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 5})
    for i in range(10):
        p.produce("ingest", value=b"%d" % i, timestamp=OLD + i,
                  on_delivery=lambda err, m: delivered.append(m.timestamp()))
    assert p.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=daemon.bootstrap, compression_type="gzip")
    meta = kp.send("ingest", value=b"kp", timestamp_ms=OLD).get(30)
    kp.close()
    after = int(time.time() * 1000)

    # The Produce answers carry the append time (librdkafka's delivery report,
    # kafka-python's RecordMetadata).
    assert len(delivered) == 10
    assert all(kind == ck.TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
               for kind, ts in delivered), delivered
    assert before <= meta.timestamp <= after

    got = _consume(daemon, "ingest", 11)
    assert all(kind == ck.TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
               for kind, ts in got), got
    assert got[:10] == delivered
    kc = KafkaConsumer(bootstrap_servers=daemon.bootstrap, consumer_timeout_ms=5000)
    kc.assign([KTP("ingest", 0)])
    kc.seek_to_beginning()
    read = [(m.timestamp_type, m.timestamp) for m in kc]
    # Searching by time finds the records by when they were written, not by OLD.
    assert kc.offsets_for_times({KTP("ingest", 0): OLD + 5})[KTP("ingest", 0)].offset == 0
    assert kc.offsets_for_times({KTP("ingest", 0): after + 60_000})[KTP("ingest", 0)] is None
    kc.close()
    assert read == [(1, ts) for _, ts in got]

    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    res = ConfigResource("topic", "ingest")
    entry = admin.describe_configs([res])[res].result(30)["message.timestamp.type"]
    assert (entry.value, entry.source) == (
        "LogAppendTime", ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_create_time_keeps_the_producers_timestamps(daemon: Daemon) -> None:
    delivered: list[tuple[int, int]] = []
    p = ck.Producer({"bootstrap.servers": daemon.bootstrap})
    for i in range(5):
        p.produce("events", value=b"%d" % i, timestamp=OLD + i,
                  on_delivery=lambda err, m: delivered.append(m.timestamp()))
    assert p.flush(30) == 0
    assert delivered == [(ck.TIMESTAMP_CREATE_TIME, OLD + i) for i in range(5)]
    assert _consume(daemon, "events", 5) == [(ck.TIMESTAMP_CREATE_TIME, OLD + i)
                                             for i in range(5)]


def test_a_retried_idempotent_batch_is_answered_its_first_append_time(daemon: Daemon) -> None:
    """Kafka answers a duplicate with the metadata of the batch already written,
    including its timestamp: the retry gets the first write's append time, also from a
    broker restarted since (which rebuilt its producer state from the log)."""
    batch = build_batch([Record(b"k", b"once", timestamp=OLD)], producer_id=4242,
                        producer_epoch=0, base_sequence=0)
    T = ProduceRequest.TopicProduceData

    def produce() -> tuple[int, int, int]:
        raw = RawClient(daemon.port)
        try:
            p = raw.request(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000,
                                           topic_data=[T(name="ingest", partition_data=[
                                               T.PartitionProduceData(index=0, records=batch)])]),
                            8).responses[0].partition_responses[0]
        finally:
            raw.close()
        return p.error_code, p.base_offset, p.log_append_time_ms

    code, offset, stamped = produce()
    assert code == 0 and stamped > OLD
    time.sleep(0.05)
    assert produce() == (0, offset, stamped)
    daemon.stop()
    daemon.start()
    assert produce() == (0, offset, stamped)
