"""A standalone daemon started on a log dir a real Kafka broker wrote (tests/fixtures/kafka):
what Kafka kept outside the dir (its topics' configs, in ZooKeeper) must not cost the
data in it."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ca
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest

from daemon.coordinator.group import partition_for
from daemon.tools.groups import COORDINATOR_NOT_READY
from logstore import Log, checkpoint, names
from logstore.records import iter_batches
from tests.daemon_helpers import Daemon, RawClient


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
    """The dir held partition 13 of __consumer_offsets alone (a Kafka broker's dirs
    hold its share of a topic): Metadata lists Kafka's 50 partitions, each with a
    leader (the others were created at start-up), and confluent-kafka reads every
    record of partition 13 (told of one partition, it ignored partition 13 and read
    nothing)."""
    admin = ca.AdminClient({"bootstrap.servers": d.bootstrap})
    meta = admin.list_topics("__consumer_offsets", timeout=30).topics["__consumer_offsets"]
    assert sorted(meta.partitions) == list(range(50))
    assert all(p.leader >= 0 for p in meta.partitions.values())
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


# ---- a Kafka dir whose partitions had a leader change ----

EPOCH = 5  # the leader epoch Kafka's controller had reached when the dir was taken over


def _restamp(part: Path, epoch: int, from_offset: int) -> int:
    """Give the partition's batches from `from_offset` on the leader epoch `epoch`, as a
    Kafka leader elected at `epoch` wrote them (partitionLeaderEpoch, bytes 12..15 of a
    batch header, is outside its CRC), and its leader-epoch-checkpoint the two epochs.
    Returns the start offset of `epoch`: the first batch restamped."""
    (seg,) = sorted(part.glob("*.log"))
    data = bytearray(seg.read_bytes())
    start = -1
    for b in iter_batches(bytes(data)):
        if b.base_offset >= from_offset:
            struct.pack_into(">i", data, b.position + 12, epoch)
            start = b.base_offset if start < 0 else start
    seg.write_bytes(bytes(data))
    checkpoint.write_leader_epoch_checkpoint(part / names.LEADER_EPOCH_CHECKPOINT,
                                             [(0, 0), (epoch, start)])
    return start


def _leader_epochs(c: RawClient, topics: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the leader epoch Metadata v8 reports, for those with a leader."""
    resp = c.request(MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False), 8)
    return {(t.name, p.partition_index): p.leader_epoch
            for t in resp.topics for p in t.partitions if p.leader_id >= 0}


def _epoch_ends(c: RawClient, current: int, epoch: int) -> tuple[int, int, int]:
    """OffsetForLeaderEpoch of my-first-topic-0 at `current` for `epoch`: (error, epoch, end)."""
    OE = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    resp = c.request(OffsetForLeaderEpochRequest(replica_id=-1, topics=[OE(
        topic="my-first-topic", partitions=[OE.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=current, leader_epoch=epoch)])]), 4)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def _latest(c: RawClient, current: int) -> tuple[int, int, int]:
    """ListOffsets LATEST of my-first-topic-0 at `current`: (error, offset, leader epoch)."""
    LO = ListOffsetsRequest.ListOffsetsTopic
    resp = c.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[LO(
        name="my-first-topic", partitions=[LO.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=current, timestamp=-1)])]), 4)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset, p.leader_epoch


def _produce(d: Daemon, values: list[bytes]) -> list[tuple[str | None, int]]:
    """(error, offset) of each value produced to my-first-topic-0 with acks=all."""
    out: list[tuple[str | None, int]] = []
    p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": "all",
                     "message.timeout.ms": 15000})
    for v in values:
        p.produce("my-first-topic", v, partition=0,
                  on_delivery=lambda err, m: out.append((err and str(err), m.offset())))
    p.flush(30)
    return out


def _consume_and_commit(d: Daemon, group: str, end: int) -> tuple[list[bytes], list[int]]:
    """A member of `group` (subscribed: it joins, is given my-first-topic-0 and starts at
    the group's committed offset, else the earliest) reads up to `end` and commits its
    position; returns the values and the leader epochs of the records it read."""
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe(["my-first-topic"])
    got: list[ck.Message] = []
    deadline = time.monotonic() + 60
    while (not got or got[-1].offset() < end - 1) and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            assert m.error() is None, m.error()
            got.append(m)
    assert got, "nothing consumed"
    [done] = c.commit(message=got[-1], asynchronous=False)
    assert done.error is None and done.offset == end, done
    c.close()
    return [m.value() for m in got], [m.leader_epoch() for m in got]


def _committed_at_0(d: Daemon, group: str) -> int:
    """The group's committed offset of my-first-topic-0 (-1001: none)."""
    c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": group})
    try:
        [tp] = c.committed([ck.TopicPartition("my-first-topic", 0)], timeout=30)
        assert tp.error is None, tp.error
        return tp.offset
    finally:
        c.close()


def test_a_kafka_dir_at_a_later_leader_epoch_takes_produce_and_commits_at_it(
        kafka_fixtures: Path, tmp_path: Path) -> None:
    """A Kafka partition that saw a leader change holds batches of a leader epoch > 0.
    Standalone, the daemon leads it at that epoch: produced records and offset commits
    (into __consumer_offsets-13, itself at that epoch) are taken, Metadata, ListOffsets
    and OffsetForLeaderEpoch give it, and the new batches carry it, across a restart.
    Led at epoch 0, every append was refused (an epoch below the log's latest) and
    producers and committers retried until their timeouts."""
    data = tmp_path / "kafka-3.0.0"
    shutil.copytree(kafka_fixtures / "kafka-3.0.0", data)
    topic_start = _restamp(data / "my-first-topic-0", EPOCH, 5)
    offsets_start = _restamp(data / "__consumer_offsets-13", EPOCH, 1500)
    group = next(g for g in (f"g{i}" for i in range(1000)) if partition_for(g, 50) == 13)
    # Kafka's records are from 2021: the default 7-day retention would delete them.
    d = Daemon(tmp_path / "broker", {"broker.id": 0, "log.dirs": [str(data)],
                                     "log.retention.ms": -1,
                                     "group.initial.rebalance.delay.ms": 0})
    expected = _fixture_values(data / "my-first-topic-0")
    assert len(expected) == 11
    for restart in range(2):
        d.start()
        try:
            c = RawClient(d.port)
            try:
                # The restamped partitions are led at EPOCH; the others (the offsets
                # topic's partitions created at start-up among them) at 0.
                restamped = {("my-first-topic", 0), ("__consumer_offsets", 13)}
                epochs = _leader_epochs(c, ["my-first-topic", "__consumer_offsets"])
                assert restamped <= set(epochs), epochs
                assert {tp: e for tp, e in epochs.items() if e} == dict.fromkeys(restamped, EPOCH)
                # Fenced as a Kafka leader at EPOCH fences; epoch 0 ended where EPOCH began.
                assert _epoch_ends(c, 0, 0)[0] == 74  # FENCED_LEADER_EPOCH
                assert _epoch_ends(c, EPOCH, 0) == (0, 0, topic_start)
                assert _latest(c, EPOCH) == (0, 11 + 3 * restart, EPOCH)
            finally:
                c.close()
            committed = 11 + 3 * restart if restart else -1001  # -1001: none yet
            assert _committed_at_0(d, group) == committed
            new = [b"new-%d-%d" % (restart, i) for i in range(3)]
            acked = _produce(d, new)
            end = 11 + 3 * (restart + 1)
            assert acked == [(None, off) for off in range(end - 3, end)]
            expected += new
            values, epochs = _consume_and_commit(d, group, end)
            assert values == expected[max(committed, 0):]
            assert epochs[-3:] == [EPOCH] * 3
            assert _committed_at_0(d, group) == end
        finally:
            d.stop()
        # The new batches, records and commits, carry the epoch; the checkpoints still
        # start it where Kafka did.
        for part, kafka_end, start in [(data / "my-first-topic-0", 11, topic_start),
                                       (data / "__consumer_offsets-13", 3093, offsets_start)]:
            written = [b for seg in sorted(part.glob("*.log"))
                       for b in iter_batches(seg.read_bytes()) if b.base_offset >= kafka_end]
            assert len(written) >= restart + 1, part
            assert {b.partition_leader_epoch for b in written} == {EPOCH}, part
            assert checkpoint.read_leader_epoch_checkpoint(
                part / names.LEADER_EPOCH_CHECKPOINT) == [(0, 0), (EPOCH, start)], part
    assert "from __consumer_offsets-13 (leader epoch 5," in d.stderr()


def _fixture_values(part: Path) -> list[bytes | None]:
    """The values of the records Kafka wrote to the partition, read from its segments."""
    return [r.value for seg in sorted(part.glob("*.log"))
            for b in iter_batches(seg.read_bytes()) for r in b.records()]


# What Kafka 3.0.0's __consumer_offsets-13 holds for the group (read with Kafka's
# kafka-dump-log --offsets-decoder semantics: the last record of each key wins).
MY_FIRST_APP = {("my-first-topic", 0): 11, ("my-first-topic", 1): 12,
                ("my-first-topic", 2): 7, ("my-sec-topic", 0): 0}


def _committed(d: Daemon, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets through confluent's admin client, asked again while
    the coordinator is not ready (just after a start), as Kafka's admin client and our
    groups tool do; librdkafka hands those errors back."""
    admin = ca.AdminClient({"bootstrap.servers": d.bootstrap})
    deadline = time.monotonic() + 30
    while True:
        res = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)],
                                                request_timeout=20)
        try:
            return {(tp.topic, tp.partition): tp.offset
                    for tp in res[group].result(30).topic_partitions}
        except ck.KafkaException as e:
            if e.args[0].code() not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_a_kafka_dirs_share_of_the_offsets_topic_is_completed_and_every_group_has_a_coordinator(
        kafka_fixtures: Path, tmp_path: Path) -> None:
    """Kafka 3.0.0's dir holds __consumer_offsets-13 alone. Kafka placed its groups by
    hash % 50 (offsets.topic.num.partitions), not by the 14 partitions the highest one
    held suggests: with % 14 my-first-app mapped to the leaderless partition 9 and got
    COORDINATOR_NOT_AVAILABLE for ever, and so did most new groups. The daemon counts
    the topic as Kafka made it and creates the 49 missing partitions (compacted, as
    Kafka creates them): my-first-app's commits are read from partition 13, a new group
    (partition 26) commits and fetches, and a restart keeps both and creates nothing."""
    data = tmp_path / "kafka-3.0.0"
    shutil.copytree(kafka_fixtures / "kafka-3.0.0", data)
    d = Daemon(tmp_path / "broker", {"broker.id": 0, "log.dirs": [str(data)],
                                     "group.initial.rebalance.delay.ms": 0})
    with d:
        assert _committed(d, "my-first-app") == MY_FIRST_APP
        c = ck.Consumer({"bootstrap.servers": d.bootstrap, "group.id": "brand-new-group",
                         "enable.auto.commit": False})
        c.commit(offsets=[ck.TopicPartition("my-first-topic", 0, 5)], asynchronous=False)
        c.close()
        assert _committed(d, "brand-new-group") == {("my-first-topic", 0): 5}
        assert _configs(d, "__consumer_offsets")["cleanup.policy"] == "compact"
        made = sorted(p.name for p in data.glob("__consumer_offsets-*"))
        assert made == sorted(f"__consumer_offsets-{i}" for i in range(50))
        assert [p.name for p in data.glob("__transaction_state-*")] == []
        d.stop()
        d.start()
        assert _committed(d, "my-first-app") == MY_FIRST_APP
        assert _committed(d, "brand-new-group") == {("my-first-topic", 0): 5}
        assert sorted(p.name for p in data.glob("__consumer_offsets-*")) == made
    said = d.stderr()
    assert said.count("created its 49 missing partitions 0-12, 14-49") == 1, said[-3000:]
