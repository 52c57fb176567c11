"""A standalone daemon started on a log dir a real Kafka broker wrote (tests/fixtures/kafka):
what Kafka kept outside the dir (its topics' configs, in ZooKeeper) must not cost the
data in it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ca
from kafka import KafkaConsumer, TopicPartition

from logstore import Log
from tests.daemon_helpers import Daemon


def _offsets(d: Daemon, tp: TopicPartition) -> tuple[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=d.bootstrap, request_timeout_ms=10000)
    try:
        return consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def _configs(d: Daemon, topic: str) -> dict[str, str]:
    admin = ca.AdminClient({"bootstrap.servers": d.bootstrap})
    [f] = admin.describe_configs([ca.ConfigResource("topic", topic)]).values()
    return {name: entry.value for name, entry in f.result(30).items()}


def _read_with_librdkafka(d: Daemon, expected: tuple[int, int]) -> None:
    """The dir holds partition 13 of __consumer_offsets alone (a Kafka broker's dirs
    hold its share of a topic): Metadata lists partitions 0 to 13, only 13 with a
    leader, and confluent-kafka reads every record of it (told of one partition, it
    ignored partition 13 and read nothing)."""
    admin = ca.AdminClient({"bootstrap.servers": d.bootstrap})
    meta = admin.list_topics("__consumer_offsets", timeout=30).topics["__consumer_offsets"]
    assert sorted(meta.partitions) == list(range(14))
    assert [i for i, p in sorted(meta.partitions.items()) if p.leader >= 0] == [13]
    consumer = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "fixture-reader",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("__consumer_offsets", 13, expected[0])])
    offsets: list[int] = []
    deadline = time.monotonic() + 60
    while (not offsets or offsets[-1] < expected[1] - 1) and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.5):
            assert m.error() is None, m.error()
            offsets.append(m.offset())
    consumer.close()
    assert len(offsets) == 3093 and offsets == sorted(set(offsets))
    assert offsets[-1] == expected[1] - 1


def test_a_kafka_dirs_committed_offsets_survive_start_up_and_restart(
        kafka_fixtures: Path, tmp_path: Path) -> None:
    """Kafka 3.0.0's __consumer_offsets-13 holds 3,093 commit records and no config of its
    own in the dir. The daemon gives the topic Kafka's creation configs (compact, so time
    retention never applies) instead of the broker's delete policy, whose retention
    removed every record at start-up; and stores them, so a restart keeps them."""
    data = tmp_path / "kafka-3.0.0"
    shutil.copytree(kafka_fixtures / "kafka-3.0.0", data)
    # What Kafka left, read from another copy: from 0 to its log end.
    alone = shutil.copytree(kafka_fixtures / "kafka-3.0.0/__consumer_offsets-13",
                            tmp_path / "alone" / "__consumer_offsets-13")
    lg = Log.open(alone)
    expected = (lg.log_start_offset, lg.log_end_offset)
    lg.close()
    assert expected[0] == 0 and expected[1] >= 3093
    tp = TopicPartition("__consumer_offsets", 13)
    d = Daemon(tmp_path / "broker", {"broker.id": 0, "log.dirs": [str(data)]})
    for restarts in range(2):  # the first start, then a restart
        d.start()
        try:
            assert _offsets(d, tp) == expected
            configs = _configs(d, "__consumer_offsets")
            assert configs["cleanup.policy"] == "compact"
            assert configs["compression.type"] == "producer"
            if restarts == 0:
                _read_with_librdkafka(d, expected)
        finally:
            d.stop()
    assert "__consumer_offsets: found with no stored configs" in d.stderr()
