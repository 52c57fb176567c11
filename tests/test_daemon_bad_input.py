"""Bad input changes nothing and hurts no other client.

Each case goes through a raw socket, and through a real client where a client can send
it; afterwards the log dirs are byte-for-byte what they were, and a connection opened
before the bad input still gets correct answers.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidTopicError, MessageSizeTooLargeError
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from daemon.api import protocol
from logstore import records
from tests.daemon_helpers import Daemon, RawClient, running, snapshot
from tests.sick_helpers import create_topic

MAX_MESSAGE = 100_000
MAX_FRAME = 1 << 20
TOPIC = "good"
BAD_NAMES = ["a/b", "..", ".", "x" * 250, "has space", "caf\u00e9", "../escape", "a\\b", ""]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("bad"), {
        "message.max.bytes": MAX_MESSAGE, "socket.request.max.bytes": MAX_FRAME,
        "auto.create.topics.enable": True, "num.partitions": 3})
    d.start()
    try:
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "acks": "all"})
        for i in range(300):
            p.produce(TOPIC, key=b"%d" % i, value=b"v" * 200, partition=i % 3)
        assert p.flush(30) == 0
        # Restart cleanly so no later periodic flush or checkpoint changes a byte.
        assert d.stop() == 0
        d.start()
        yield d
    finally:
        d.kill()


@pytest.fixture
def unchanged(daemon: Daemon) -> Iterator[RawClient]:
    """A connection opened before the bad input; after it: same files, same answers."""
    before = snapshot(daemon.log_dirs)
    bystander = RawClient(daemon.port)
    data_before = fetch_all(bystander)
    yield bystander
    assert daemon.proc is not None and daemon.proc.poll() is None, "daemon died"
    assert fetch_all(bystander) == data_before, "the bystander connection was hurt"
    assert snapshot(daemon.log_dirs) == before
    assert daemon.healthy()
    bystander.close()


def fetch_all(client: RawClient) -> list[bytes]:
    F = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=MAX_FRAME,
                       isolation_level=0, session_id=0, session_epoch=-1, topics=[F(
                           topic=TOPIC, partitions=[F.FetchPartition(
                               partition=p, current_leader_epoch=-1, fetch_offset=0,
                               log_start_offset=-1, partition_max_bytes=MAX_FRAME)
                               for p in range(3)])], forgotten_topics_data=[], rack_id="")
    resp = client.request(req, 11)
    parts = resp.responses[0].partitions
    assert all(p.error_code == 0 for p in parts)
    return [bytes(p.records) for p in parts]


def produce(client: RawClient, topic: str, records_bytes: bytes, acks: int = 1,
            partition: int = 0) -> tuple[int, int]:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=partition,
                                                             records=records_bytes)])])
    resp = client.request(req, 8)
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def good_batch(n: int = 3, size: int = 100) -> bytearray:
    return bytearray(records.build_batch(
        [records.Record(key=b"k", value=b"x" * size, headers=[("h", b"1")])] * n))


def corruptions() -> dict[str, bytes]:
    b = good_batch()
    out = {}
    crc = bytearray(b)
    crc[-1] ^= 0xFF  # a record byte: covered by the CRC
    out["bad crc"] = bytes(crc)
    out["torn batch"] = bytes(b[:-10])
    short = bytearray(b)
    struct.pack_into(">i", short, 8, 20)  # batchLength below the 49-byte minimum
    out["batchLength too small"] = bytes(short)
    long_ = bytearray(b)
    struct.pack_into(">i", long_, 8, len(b) + 100)
    out["batchLength past the end"] = bytes(long_)
    magic = bytearray(b)
    magic[16] = 1
    out["legacy magic 1"] = bytes(magic)
    out["garbage"] = bytes(random.Random(5).randbytes(300))
    two = bytearray(b + b)
    two[-1] ^= 1  # the second batch is bad: the first must not be appended either
    out["second batch bad"] = bytes(two)
    return out


@pytest.mark.parametrize("name", list(corruptions()))
def test_corrupt_batch_is_corrupt_message_and_appends_nothing(
        daemon: Daemon, unchanged: RawClient, name: str) -> None:
    c = RawClient(daemon.port)
    try:
        for acks in (1, -1):
            assert produce(c, TOPIC, corruptions()[name], acks) == (2, -1)  # CORRUPT_MESSAGE
    finally:
        c.close()


def test_corrupt_batch_with_acks_0_closes_that_connection(daemon: Daemon,
                                                          unchanged: RawClient) -> None:
    c = RawClient(daemon.port)
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(
            index=0, records=corruptions()["bad crc"])])])
    from daemon.api import protocol

    c.send_raw(protocol.encode_request(req, 8, 1))
    assert c.closed_by_server()  # Kafka's way to tell an acks=0 producer
    c.close()


def test_oversized_batch_is_message_too_large(daemon: Daemon, unchanged: RawClient) -> None:
    c = RawClient(daemon.port)
    try:
        assert produce(c, TOPIC, bytes(good_batch(1, MAX_MESSAGE))) == (10, -1)
    finally:
        c.close()


def test_oversized_record_through_clients_is_refused(daemon: Daemon,
                                                     unchanged: RawClient) -> None:
    big = b"x" * (MAX_MESSAGE + 1000)
    kp = KafkaProducer(bootstrap_servers=daemon.bootstrap, max_request_size=10 << 20,
                       acks=1, retries=0, enable_idempotence=False)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            kp.send(TOPIC, big, partition=0).get(timeout=30)
    finally:
        kp.close()
    errors: list[ck.KafkaError] = []
    cp = ck.Producer({"bootstrap.servers": daemon.bootstrap, "message.max.bytes": 10 << 20,
                      "acks": "all", "retries": 0})
    cp.produce(TOPIC, big, partition=0,
               on_delivery=lambda err, msg: errors.append(err))
    cp.flush(30)
    assert len(errors) == 1 and errors[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE


def test_illegal_topic_names_raw(daemon: Daemon, unchanged: RawClient) -> None:
    c = RawClient(daemon.port)
    try:
        for name in BAD_NAMES:
            assert produce(c, name, bytes(good_batch()))[0] == 17, name
        C = CreateTopicsRequest.CreatableTopic
        resp = c.request(CreateTopicsRequest(topics=[
            C(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
            for n in BAD_NAMES], timeout_ms=5000, validate_only=False), 4)
        assert [(t.name, t.error_code) for t in resp.topics] == [(n, 17) for n in BAD_NAMES]
        # Metadata with auto-creation on: an illegal name is reported, never created.
        meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n)
                                                 for n in BAD_NAMES],
                                         allow_auto_topic_creation=True), 8)
        assert [(t.name, t.error_code) for t in meta.topics] == [(n, 17) for n in BAD_NAMES]
    finally:
        c.close()


def test_illegal_topic_names_through_admin_clients(daemon: Daemon,
                                                   unchanged: RawClient) -> None:
    admin = KafkaAdminClient(bootstrap_servers=daemon.bootstrap)
    try:
        for name in ("a/b", "..", "x" * 250):
            with pytest.raises(InvalidTopicError):
                admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    cadmin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    futures = cadmin.create_topics([CkNewTopic("../escape", 1, 1), CkNewTopic("a/b", 1, 1)])
    for fut in futures.values():
        with pytest.raises(ck.KafkaException) as info:
            fut.result(timeout=30)
        assert info.value.args[0].code() == ck.KafkaError.TOPIC_EXCEPTION


def test_auto_creating_a_colliding_name_fails_the_producer_at_once(tmp_path: Path) -> None:
    """`a_b` collides with an existing `a.b` (their metric names would): auto-creation is
    refused with Kafka's INVALID_TOPIC_EXCEPTION (17), which clients do not retry, so a
    producer fails at once instead of retrying LEADER_NOT_AVAILABLE until its timeout.
    Nothing is created."""
    with running(tmp_path, {"auto.create.topics.enable": True}) as d:
        create_topic(d, "a.b", 1)
        c = RawClient(d.port)
        try:
            meta = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                name="a_b")], allow_auto_topic_creation=True), 8)
            assert [(t.name, t.error_code) for t in meta.topics] == [("a_b", 17)]
        finally:
            c.close()
        failed: list[ck.KafkaError] = []
        p = ck.Producer({"bootstrap.servers": d.bootstrap, "message.timeout.ms": 120_000})
        p.produce("a_b", b"v", on_delivery=lambda err, _msg: failed.append(err))
        assert p.flush(30) == 0, "the producer kept retrying"
        assert [e.code() for e in failed] == [ck.KafkaError.TOPIC_EXCEPTION]
        assert not list(tmp_path.glob("*/a_b-*"))
        assert d.stderr().count("auto-creating a_b") <= 3


def test_frame_over_socket_request_max_bytes_is_refused_before_its_body(
        daemon: Daemon, unchanged: RawClient) -> None:
    c = RawClient(daemon.port)
    c.send_raw(struct.pack(">i", MAX_FRAME + 1))  # and no body at all
    assert c.closed_by_server()
    c.close()
    c = RawClient(daemon.port)
    c.send_raw(struct.pack(">i", 2**31 - 1) + b"\0" * 64)
    assert c.closed_by_server()
    c.close()


def test_garbage_frames_close_only_their_connection(daemon: Daemon,
                                                    unchanged: RawClient) -> None:
    rng = random.Random(1234)
    def framed(body: bytes) -> bytes:
        return struct.pack(">i", len(body)) + body

    frames = [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 3) + b"abc",  # shorter than any request header
        framed(struct.pack(">hhih", 999, 0, 1, -1)),  # unknown API key
        framed(struct.pack(">hhih", 0, 99, 1, -1)),  # Produce at a version not served
        framed(struct.pack(">hhih", 3, 8, 1, 2) + b"c" + b"\xff" * 40),  # garbage body
    ]
    for _ in range(40):
        frames.append(framed(struct.pack(
            ">hhih", rng.choice([0, 1, 2, 3, 19, 20, 35]), rng.randrange(0, 12),
            rng.randrange(2**31), rng.randrange(-1, 20)) + rng.randbytes(rng.randrange(200))))
    closed = 0
    for frame in frames:
        c = RawClient(daemon.port, timeout=10)
        c.send_raw(frame)
        # Either the server answers an error (a frame that happens to decode) or it
        # closes this connection; it never hangs or takes the others down.
        c.sock.settimeout(10)
        try:
            answer = c.recv_frame()
        except TimeoutError:
            pytest.fail(f"no answer and no close for frame {frame[:30]!r}")
        closed += answer is None
        c.close()
        # The bystander is unaffected after every single one.
        assert unchanged.request(ApiVersionsRequest(), 0).error_code == 0
    assert closed >= 5


def test_requests_sent_before_a_half_close_are_all_answered(tmp_path: Path) -> None:
    """A client that sends its requests (the first split mid-frame across writes, one
    over the listener's in-place threshold) and then shuts its sending side still gets
    every answer, in order, before the broker closes; a frame the close cut short is not
    answered and appends nothing."""
    topic = "half-closed"
    with Daemon(tmp_path) as d:
        create_topic(d, topic, 1)
        T = ProduceRequest.TopicProduceData
        requests = [protocol.encode_request(ApiVersionsRequest(), 0, 1)] + [
            protocol.encode_request(ProduceRequest(
                transactional_id=None, acks=1, timeout_ms=10000, topic_data=[T(
                    name=topic, partition_data=[T.PartitionProduceData(
                        index=0, records=bytes(good_batch(n, size)))])]), 8, 2 + i)
            for i, (n, size) in enumerate([(2, 10), (1, 40_000)])]
        stream = b"".join(requests)
        c = RawClient(d.port)
        try:
            c.send_raw(stream[:7])
            time.sleep(0.05)
            c.send_raw(stream[7:])
            c.send_raw(struct.pack(">i", 500) + b"\0" * 20)  # cut short by the close
            c.sock.shutdown(socket.SHUT_WR)
            c.sock.settimeout(10)
            answers = [c.recv_frame() for _ in range(3)]
            assert all(a is not None for a in answers)
            assert [struct.unpack_from(">i", a)[0] for a in answers] == [1, 2, 3]
            produced = [ProduceResponse.decode(a, version=8, header=True) for a in answers[1:]]
            offsets = [r.responses[0].partition_responses[0].base_offset for r in produced]
            assert all(r.responses[0].partition_responses[0].error_code == 0 for r in produced)
            assert c.recv_frame() is None  # then the broker closes
        finally:
            c.close()
        c = RawClient(d.port)
        try:  # nothing of the cut frame was appended: the log ends after the big batch
            assert produce(c, topic, bytes(good_batch(1)))[1] == offsets[1] + 1
        finally:
            c.close()


def test_api_versions_at_an_unknown_version_gets_the_supported_list(
        daemon: Daemon, unchanged: RawClient) -> None:
    c = RawClient(daemon.port)
    try:
        body = struct.pack(">hhih", 18, 9, 77, -1)
        c.send_raw(struct.pack(">i", len(body)) + body)
        frame = c.recv_frame()
        assert frame is not None
        from kafka.protocol.metadata import ApiVersionsResponse

        resp = ApiVersionsResponse.decode(frame, version=0, header=True)
        assert resp.header.correlation_id == 77 and resp.error_code == 35
        assert c.request(ApiVersionsRequest(), 0).error_code == 0  # still open
    finally:
        c.close()


def test_unserved_apis_and_versions_are_counted_as_such(daemon: Daemon,
                                                         unchanged: RawClient) -> None:
    """An API key or version we do not serve is a well-formed request, not garbage:
    rejected_frames counts it under its own reason (all went under "undecodable")."""
    from tests.sick_helpers import metric

    name = "logkeeper_protocol_rejected_frames_total"

    def counts() -> tuple[float, float, float]:
        return tuple(metric(daemon, name, reason=r) or 0.0
                     for r in ("unsupported_api", "unsupported_version", "undecodable"))

    before = counts()
    for header in (struct.pack(">hhih", 999, 0, 5, -1),  # no such API key
                   struct.pack(">hhih", 0, 99, 6, -1)):  # Produce at a version not served
        c = RawClient(daemon.port, timeout=10)
        c.send_raw(struct.pack(">i", len(header)) + header)
        assert c.recv_frame() is None  # closed, as Kafka does
        c.close()
    after = counts()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 1, 0)
    assert unchanged.request(ApiVersionsRequest(), 0).error_code == 0
