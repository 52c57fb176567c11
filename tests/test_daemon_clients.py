"""Real Kafka clients against `logkeeper serve`: 100,000 records each way, nothing lost.

kafka-python (KafkaProducer, KafkaConsumer with assign(), KafkaAdminClient) and
confluent-kafka (Producer with acks=all, Consumer with assign() and explicit offsets)
produce and consume over six partitions spread on all three log dirs. Every record is
checked: count, per-partition order and offsets, keys, values and headers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient, NewTopic

from tests.daemon_helpers import Daemon, running

N = 100_000
PARTITIONS = 6


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("clients"),
                 {"auto.create.topics.enable": False, "log.segment.bytes": 4 << 20}) as d:
        yield d


def record(i: int) -> tuple[int, bytes, bytes, list[tuple[str, bytes]]]:
    """Record i of a run: its partition, key, value and headers."""
    part = i % PARTITIONS
    seq = i // PARTITIONS
    value = b"value-%08d-" % i + bytes([i % 251]) * (i % 97)
    return part, b"key-%d" % i, value, [("seq", b"%d" % seq), ("src", b"test")]


def create_topic(d: Daemon, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
    try:
        result = admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        assert all(t["error_code"] == 0 for t in result["topics"]), result
        # spread over every log dir: the dirs share one filesystem, so the tie-break
        # (fewest partitions) puts two on each
        per_dir = Counter()
        for broker in admin.describe_log_dirs():
            for ld in broker["log_dirs"]:
                for t in ld["topics"]:
                    if t["name"] == topic:
                        per_dir[ld["log_dir"]] += len(t["partitions"])
        assert sorted(per_dir.values()) == [2, 2, 2], per_dir
        assert set(per_dir) == {str(p) for p in d.log_dirs}
    finally:
        admin.close()


def check_consumed(got: dict[int, list[tuple[int, bytes | None, bytes | None, list]]]) -> None:
    assert sum(len(v) for v in got.values()) == N
    for part, items in got.items():
        offsets = [o for o, *_ in items]
        assert offsets == list(range(len(items))), f"partition {part}: gaps or duplicates"
        for seq, (_, key, value, headers) in enumerate(items):
            i = seq * PARTITIONS + part
            _, k, v, h = record(i)
            assert (key, value) == (k, v), f"partition {part} offset {seq}"
            assert [(hk, bytes(hv)) for hk, hv in headers] == h


def test_kafka_python_produce_and_consume_100k(daemon: Daemon) -> None:
    topic = "kp-orders"
    create_topic(daemon, topic)
    producer = KafkaProducer(bootstrap_servers=daemon.bootstrap, linger_ms=20,
                             batch_size=64 * 1024, max_in_flight_requests_per_connection=5)
    futures = []
    for i in range(N):
        part, key, value, headers = record(i)
        futures.append(producer.send(topic, key=key, value=value, headers=headers,
                                     partition=part))
    producer.flush(timeout=120)
    metas = [f.get(timeout=60) for f in futures]
    producer.close()
    per_part = Counter(m.partition for m in metas)
    assert per_part == {p: N // PARTITIONS + (1 if p < N % PARTITIONS else 0)
                        for p in range(PARTITIONS)}

    consumer = KafkaConsumer(bootstrap_servers=daemon.bootstrap, enable_auto_commit=False,
                             group_id=None, fetch_max_bytes=8 << 20,
                             max_partition_fetch_bytes=1 << 20)
    consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    count = 0
    while count < N and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=1000, max_records=20000).items():
            for m in msgs:
                got[tp.partition].append((m.offset, m.key, m.value, m.headers))
                count += 1
    consumer.close()
    check_consumed(got)


def test_confluent_kafka_produce_acks_all_and_consume_100k(daemon: Daemon) -> None:
    topic = "ck-orders"
    create_topic(daemon, topic)
    producer = ck.Producer({"bootstrap.servers": daemon.bootstrap, "acks": "all",
                            "linger.ms": 10, "batch.size": 64 * 1024,
                            "compression.type": "none"})
    acked: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: ck.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset()))

    for i in range(N):
        part, key, value, headers = record(i)
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers,
                                 partition=part, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]
    assert len(acked) == N and len(set(acked)) == N

    consumer = ck.Consumer({"bootstrap.servers": daemon.bootstrap, "group.id": "unused",
                            "enable.auto.commit": False, "fetch.max.bytes": 8 << 20})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    count = 0
    while count < N and time.monotonic() < deadline:
        for m in consumer.consume(20000, 1.0):
            assert m.error() is None, m.error()
            got[m.partition()].append((m.offset(), m.key(), m.value(), m.headers() or []))
            count += 1
    # An explicit offset in the middle starts there.
    consumer.assign([ck.TopicPartition(topic, 2, 1234)])
    first = None
    deadline = time.monotonic() + 30
    while first is None and time.monotonic() < deadline:
        msgs = consumer.consume(1, 1.0)
        first = msgs[0] if msgs else None
    low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 2), timeout=10)
    consumer.close()
    check_consumed(got)
    assert first is not None and (first.partition(), first.offset()) == (2, 1234)
    assert first.value() == record(1234 * PARTITIONS + 2)[2]
    assert (low, high) == (0, len(got[2]))


def test_admin_client_creates_describes_and_deletes_topics(daemon: Daemon) -> None:
    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        admin.create_topics([NewTopic("adm-a", 3, 1), NewTopic("adm-b", 1, 1)])
        assert {"adm-a", "adm-b"} <= set(admin.list_topics())
        dirs = admin.describe_log_dirs()
        assert [b["broker"] for b in dirs] == [1]
        assert {ld["log_dir"] for ld in dirs[0]["log_dirs"]} == {str(p) for p in
                                                                 daemon.log_dirs}
        on_disk = {p.name for d in daemon.log_dirs for p in d.iterdir() if p.is_dir()}
        assert {"adm-a-0", "adm-a-1", "adm-a-2", "adm-b-0"} <= on_disk
        # an existing name and an impossible replication factor are refused
        from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("adm-b", 1, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("adm-c", 1, 3)])
        admin.delete_topics(["adm-a", "adm-b"])
        assert not {"adm-a", "adm-b"} & set(admin.list_topics())
        on_disk = {p.name for d in daemon.log_dirs for p in d.iterdir() if p.is_dir()}
        assert not any(n.startswith("adm-") for n in on_disk), on_disk
    finally:
        admin.close()


@pytest.mark.parametrize("api_version, create_version", [((0, 10, 1), 0), ((0, 10, 2), 1)])
def test_old_clients_create_and_delete_topics_with_the_first_versions(
        daemon: Daemon, api_version: tuple[int, ...], create_version: int) -> None:
    """Kafka 3.9 serves CreateTopics and DeleteTopics from v0: kafka-python told the
    broker is 0.10.1 sends v0 of both (0.10.2: CreateTopics v1), as sarama's admin does
    with an old Config.Version and kafka-go 0.2's Conn.CreateTopics. The broker closed
    those connections; now they are answered, refusals included."""
    from kafka.errors import TopicAlreadyExistsError
    name = f"old-admin-v{create_version}"
    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap, api_version=api_version)
    try:
        from kafka.protocol.admin import CreateTopicsRequest
        assert admin._client.api_version(CreateTopicsRequest, max_version=4) == create_version
        result = admin.create_topics([NewTopic(name, 2, 1)])
        assert [t["error_code"] for t in result["topics"]] == [0]
        assert name in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(name, 2, 1)])
        result = admin.delete_topics([name])
        assert [t["error_code"] for t in result["topics"]] == [0]
        assert name not in admin.list_topics()
    finally:
        admin.close()


def test_log_dirs_are_listed_by_the_daemon(daemon: Daemon) -> None:
    for d in daemon.log_dirs:
        assert (Path(d) / "meta.properties").exists()
        assert "broker.id=1" in (Path(d) / "meta.properties").read_text()


def test_acl_requests_are_told_there_is_no_authorizer(daemon: Daemon) -> None:
    """Without `authorizer.class.name` (tests/test_acls.py has one), as a Kafka broker
    without an authorizer: the ACL APIs answer SECURITY_DISABLED (54), not "the broker
    is too old for ACLs" (what librdkafka said while they were not served), and store
    nothing."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import SecurityDisabledError

    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        read_t = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                     ResourcePattern(KResourceType.TOPIC, "t"))
        created = admin.create_acls([read_t])
        assert created == {"succeeded": [], "failed": [SecurityDisabledError]}
        with pytest.raises(SecurityDisabledError, match="No Authorizer"):
            admin.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                          ResourcePatternFilter(KResourceType.TOPIC, None,
                                                                ACLResourcePatternType.ANY)))
    finally:
        admin.close()

    a = AdminClient({"bootstrap.servers": daemon.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    for fut in (*a.create_acls([binding]).values(), *a.delete_acls([everything]).values()):
        with pytest.raises(ck.KafkaException) as raised:
            fut.result(30)
        assert raised.value.args[0].code() == ck.KafkaError.SECURITY_DISABLED
    assert a.describe_acls(everything).result(30) == []  # nothing was stored
