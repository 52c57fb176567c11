"""The Kafka protocol codec: advertised versions, round trips, and fuzzed request decoding."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest, DescribeLogDirsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from daemon.api import errors, protocol
from logstore import records


def sample_requests() -> list[tuple[object, int]]:
    batch = records.build_batch([records.Record(key=b"k", value=b"v" * 50)] * 3)
    T = ProduceRequest.TopicProduceData
    F = FetchRequest.FetchTopic
    L = ListOffsetsRequest.ListOffsetsTopic
    out: list[tuple[object, int]] = []
    for v in (0, 2, 3, 5, 8):
        out.append((ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
            T(name="orders", partition_data=[T.PartitionProduceData(index=0, records=batch)])]),
            v))
    for v in (0, 3, 4, 7, 11):
        out.append((FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=0, session_id=0, session_epoch=-1, topics=[
            F(topic="orders", partitions=[F.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=5, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""), v))
    # Every field set (a follower's fetch, a read_committed consumer's session), at each
    # version where Fetch's layout changes.
    for v in range(0, 13):
        out.append((FetchRequest(
            replica_id=3 if v % 2 else -1, max_wait_ms=500, min_bytes=7, max_bytes=3 << 20,
            isolation_level=1, session_id=11, session_epoch=4, topics=[
                F(topic="orders", partitions=[
                    F.FetchPartition(partition=p, current_leader_epoch=9, fetch_offset=2**40 + p,
                                     last_fetched_epoch=8, log_start_offset=17,
                                     partition_max_bytes=1 << 19) for p in (0, 5)]),
                F(topic="t\u00e9", partitions=[])],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="old", partitions=[1, 2])]
            if v >= 7 else [], rack_id="rack-b"), v))
    for v in (0, 1, 5):
        out.append((ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            L(name="orders", partitions=[L.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-2)])]), v))
    for v in (0, 1, 8):
        out.append((MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
                                    allow_auto_topic_creation=False), v))
    for v in (0, 3):
        out.append((ApiVersionsRequest(client_software_name="t", client_software_version="1"), v))
    out.append((CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="x", num_partitions=3, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=1000, validate_only=False), 4))
    out.append((DescribeLogDirsRequest(topics=None), 4))
    return out


SAMPLES = sample_requests()


def test_advertises_only_versions_kafka_python_can_decode() -> None:
    for api in protocol.SUPPORTED.values():
        assert 0 <= api.min_version <= api.max_version <= api.request.max_version
        assert api.max_version <= api.response.max_version
    resp = protocol.api_versions_response(3)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert advertised == {a.key: (a.min_version, a.max_version)
                          for a in protocol.SUPPORTED.values()}
    # The APIs the issues name; no topic IDs on the data path (Fetch 13+); Fetch v12
    # (the followers' version) and OffsetForLeaderEpoch for truncation checks; Metadata
    # v12, with topic ids (v10+) and leader epochs librdkafka trusts (v9+, KIP-320).
    assert set(advertised) >= {0, 1, 2, 3, 18, 19, 20, 23, 35}
    assert advertised[0][1] <= 8 and advertised[1][1] == 12 and advertised[3][1] == 12


@pytest.mark.parametrize("body, version", SAMPLES,
                         ids=[f"{type(b).__name__}-v{v}" for b, v in SAMPLES])
def test_request_round_trip(body: object, version: int) -> None:
    frame = protocol.encode_request(body, version, correlation_id=42, client_id="me")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    req = protocol.decode_request(frame[4:])
    assert (req.version, req.correlation_id, req.client_id) == (version, 42, "me")
    if req.api.key == 0:
        # Produce is decoded by hand, its records left in the frame (record_messages):
        # the same fields as kafka-python's decoder finds.
        ref = ProduceRequest.decode(frame[4:], version=version, header=True)
        b = req.body
        assert (b.transactional_id, b.acks, b.timeout_ms) == (
            ref.transactional_id, ref.acks, ref.timeout_ms)
        assert [(t.name, [(p.index, p.records if p.records is None else bytes(p.records))
                          for p in t.partition_data]) for t in b.topic_data] == [
            (t.name, [(p.index, p.records) for p in t.partition_data]) for t in ref.topic_data]
        assert all(isinstance(p.records, memoryview) for t in b.topic_data
                   for p in t.partition_data if p.records is not None)
        return
    if req.api.key == 1:
        # Fetch is decoded by hand (record_messages): kafka-python's decoder finds the
        # same fields, Kafka's defaults where the version lacks one.
        assert _fetch_fields(req.body) == _fetch_fields(
            FetchRequest.decode(frame[4:], version=version, header=True))
        return
    # Re-encoding what was decoded gives the client's bytes back, field for field.
    again = protocol.encode_request(req.body, version, correlation_id=42, client_id="me")
    assert again == frame


def _fetch_fields(body: object) -> tuple[object, ...]:
    """A Fetch request's fields, however it was decoded."""
    b: object = body
    return (b.replica_id, b.max_wait_ms, b.min_bytes, b.max_bytes, b.isolation_level,
            b.session_id, b.session_epoch, b.rack_id or "",
            [(t.topic, [(p.partition, p.current_leader_epoch, p.fetch_offset,
                         p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes)
                        for p in t.partitions]) for t in b.topics],
            [(t.topic, list(t.partitions)) for t in b.forgotten_topics_data or []])


def test_a_fetch_v12_reads_the_cluster_id_and_skips_tags_it_does_not_know() -> None:
    """Fetch v12 is flexible: tagged fields in the header, in each partition and topic,
    and at the end (ClusterId is tag 0 there). Unknown tags are skipped, as Kafka skips
    them; the fields around them still read."""
    from daemon.api.record_messages import decode_fetch_request

    def uv(n: int) -> bytes:
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    unknown = uv(1) + uv(9) + uv(3) + b"xyz"  # one tagged field, tag 9, 3 bytes
    header = struct.pack(">hhih", 1, 12, 77, 2) + b"me" + unknown
    body = (struct.pack(">iiiibii", -1, 250, 1, 1 << 20, 0, 0, -1)
            + uv(2) + uv(4) + b"abc" + uv(2)
            + struct.pack(">iiqiqi", 4, 6, 123, 5, 0, 65536) + unknown
            + unknown  # the topic's tags
            + uv(1)  # no forgotten topics
            + uv(3) + b"r1"  # rack id
            + uv(2) + uv(0) + uv(5) + uv(5) + b"kfka" + uv(7) + uv(0))  # ClusterId, tag 7
    req = protocol.decode_request(header + body)
    assert (req.correlation_id, req.client_id) == (77, "me")
    b = req.body
    assert (b.max_wait_ms, b.max_bytes, b.rack_id, b.cluster_id) == (250, 1 << 20, "r1", "kfka")
    assert [(t.topic, [tuple(p) for p in t.partitions]) for t in b.topics] == [
        ("abc", [(4, 6, 123, 5, 0, 65536)])]
    # Cut short anywhere: a clear error naming the request, never a half-read body.
    for end in range(len(body)):
        with pytest.raises(protocol.ProtocolError, match="Fetch v12 request .* does not decode"):
            protocol.decode_request(header + body[:end])
    # A header's tags read as the body's would misplace every field after them.
    assert decode_fetch_request(header + body, len(header) - len(unknown), 12) == b


@pytest.mark.parametrize("version", range(0, 13))
def test_a_followers_fetch_is_encoded_as_kafka_python_encodes_it(version: int) -> None:
    """A follower's Fetch (record_messages.FetchBody, encoded by hand) is byte for byte
    what kafka-python's encoder writes for the same fields, and decodes back to them."""
    from daemon.api.record_messages import (
        FetchBody,
        FetchRequestPartition,
        FetchRequestTopic,
        ForgottenTopic,
    )

    body = FetchBody(3, 500, 1, 10 << 20, 0, 0, -1, topics=[
        FetchRequestTopic("orders", [FetchRequestPartition(p, 9, 2**40 + p, 8, 17, 1 << 20)
                                     for p in (0, 5)]),
        FetchRequestTopic("t\u00e9", [])],
        forgotten_topics_data=[ForgottenTopic("old", [1, 2])] if version >= 7 else [],
        rack_id="rack-b" if version >= 11 else "")
    F = FetchRequest.FetchTopic
    ref = FetchRequest(
        replica_id=3, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[
            F(topic=t.topic, partitions=[F.FetchPartition(
                partition=p.partition, current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                log_start_offset=p.log_start_offset, partition_max_bytes=p.partition_max_bytes)
                for p in t.partitions]) for t in body.topics],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=f.topic, partitions=f.partitions)
                               for f in body.forgotten_topics_data], rack_id=body.rack_id)
    frame = protocol.encode_request(body, version, 42, client_id="replica-3")
    assert frame == protocol.encode_request(ref, version, 42, client_id="replica-3")
    req = protocol.decode_request(frame[4:])
    assert (req.version, req.correlation_id, req.client_id) == (version, 42, "replica-3")
    assert _fetch_fields(req.body) == _fetch_fields(FetchRequest.decode(
        frame[4:], version=version, header=True))
    if version >= 12:  # the cluster id, a tagged field, goes and comes back
        body.cluster_id = "kfka"
        assert protocol.decode_request(protocol.encode_request(body, 12, 1)[4:]).body == body


def test_unknown_api_and_unserved_version_are_refused() -> None:
    header = struct.pack(">hhih", 99, 0, 1, -1)
    with pytest.raises(protocol.ProtocolError, match="not served"):
        protocol.decode_request(header)
    frame = protocol.encode_request(ProduceRequest(
        transactional_id=None, acks=1, timeout_ms=1, topic_data=[]), 9, 3)
    with pytest.raises(protocol.UnsupportedVersion) as info:
        protocol.decode_request(frame[4:])
    assert (info.value.api_key, info.value.version, info.value.correlation_id) == (0, 9, 3)


def test_unserved_api_versions_version_gets_a_v0_answer_listing_ours() -> None:
    frame = protocol.unsupported_api_versions_frame(correlation_id=9)
    resp = ApiVersionsResponse.decode(frame[4:], version=0, header=True)
    assert resp.header.correlation_id == 9
    assert resp.error_code == errors.UNSUPPORTED_VERSION
    assert {k.api_key for k in resp.api_keys} == set(protocol.SUPPORTED)


def _feed(assembler: protocol.FrameAssembler, data: bytes, chunk: int) -> list[bytes]:
    """Receive `data` in pieces of at most `chunk` bytes, as a socket would."""
    frames: list[bytes] = []
    pos = 0
    while pos < len(data):
        buf = assembler.buffer()
        n = min(len(buf), chunk, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        frames += [bytes(f) for f in assembler.received(n)]
        if assembler.error is not None:
            raise assembler.error
    return frames


def _read(data: bytes, limit: int) -> bytes | None:
    """The first frame of a stream that then ends, or None for an empty one."""
    assembler = protocol.FrameAssembler(limit)
    frames = _feed(assembler, data, 1 << 20)
    if frames:
        return frames[0]
    assembler.ended()
    return None


def test_frame_over_the_limit_is_refused_from_its_size_alone() -> None:
    # Only the 4-byte prefix exists: the refusal cannot depend on reading the body.
    with pytest.raises(protocol.FrameTooLarge) as info:
        _read(struct.pack(">i", 1001), 1000)
    assert info.value.size == 1001
    assert _read(struct.pack(">i", 12) + b"x" * 12, 1000) == b"x" * 12
    assert _read(b"", 1000) is None
    for bad in (struct.pack(">i", -1), struct.pack(">i", 3) + b"abc", b"\x00\x00",
                struct.pack(">i", 100) + b"short"):
        with pytest.raises(protocol.ProtocolError):
            _read(bad, 1000)


def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut() -> None:
    """Frames of every size (under the scratch buffer, over it, over the in-place
    threshold), back to back, received in pieces of 1 byte to 300 KiB: each comes out
    once, whole, in order; the large ones are the buffers they were received into."""
    rng = random.Random(7)
    sizes = [10, 11, 4000, protocol.FrameAssembler.SMALL, protocol.FrameAssembler.SMALL + 1,
             70_000, 10, 300_000, 12, 65_536, 65_532, 9_999] * 3
    bodies = [bytes(rng.getrandbits(8) for _ in range(16)) * (n // 16) + b"z" * (n % 16)
              for n in sizes]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    for chunk in (1, 3, 4, 5, 4096, 65_536, 100_000, 300_000):
        assembler = protocol.FrameAssembler(1 << 20)
        assert _feed(assembler, stream, chunk) == bodies, chunk
        assembler.ended()  # ended between frames: fine
    assembler = protocol.FrameAssembler(1 << 20)
    big = struct.pack(">i", 70_000) + b"b" * 70_000
    frames = _feed(assembler, big[:50_000], 50_000)
    buf = assembler.buffer()
    assert frames == [] and len(buf) == 20_004  # the rest goes into the frame itself
    buf[:20_004] = big[50_000:]
    (frame,) = assembler.received(20_004)
    assert isinstance(frame, bytearray) and frame == big[4:]
    # A bad size prefix after good frames in the same receive: the good ones are handed
    # out, nothing after the bad prefix is taken, and the stream's end reports it.
    assembler = protocol.FrameAssembler(1000)
    good = struct.pack(">i", 12) + b"g" * 12
    data = good + good + struct.pack(">i", 1001) + good
    buf = assembler.buffer()
    buf[:len(data)] = data
    assert assembler.received(len(data)) == [b"g" * 12] * 2
    assert isinstance(assembler.error, protocol.FrameTooLarge)
    assert assembler.received(0) == []
    with pytest.raises(protocol.FrameTooLarge):
        assembler.ended()


# ---- fuzzing: no input may raise anything but ProtocolError ----

def _decode_or_protocol_error(frame: bytes) -> None:
    try:
        protocol.decode_request(frame)
    except protocol.ProtocolError:
        pass


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api=st.sampled_from(sorted(protocol.SUPPORTED)), data=st.data())
def test_fuzz_random_bodies_after_a_valid_header(api: int, data: st.DataObject) -> None:
    a = protocol.SUPPORTED[api]
    version = data.draw(st.integers(a.min_version, a.max_version))
    header = struct.pack(">hhih", api, version, 7, 1) + b"c"
    body = data.draw(st.binary(max_size=300))
    _decode_or_protocol_error(header + body)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sample=st.sampled_from(SAMPLES), data=st.data())
def test_fuzz_mutated_valid_requests(sample: tuple[object, int], data: st.DataObject) -> None:
    body, version = sample
    frame = bytearray(protocol.encode_request(body, version, 1)[4:])
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "bigint"]))
        pos = data.draw(st.integers(0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "truncate":
            del frame[pos:]
        elif kind == "insert":
            frame[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif len(frame) >= pos + 4:
            # lengths and counts set to extremes: the decoder must not allocate for them
            frame[pos:pos + 4] = data.draw(st.sampled_from(
                [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00"]))
    _decode_or_protocol_error(bytes(frame))


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=0, max_size=200))
def test_fuzz_arbitrary_bytes(frame: bytes) -> None:
    _decode_or_protocol_error(frame)


@pytest.mark.parametrize("version", range(0, 13))
def test_fetch_response_encoder_writes_kafka_pythons_bytes_and_reads_them_back(version: int) -> None:
    """The one Fetch response encoder (hand-written so records are never copied) gives
    exactly the bytes kafka-python's generated encoder gives, at every version served,
    with records inline and as a separate part; the followers' decoder reads them back
    with the records as slices of the frame."""
    from kafka.protocol.consumer import FetchResponse

    from daemon.api.record_messages import FetchAnswer, FetchPartition, decode_fetch

    R = FetchResponse.FetchableTopicResponse
    P = R.PartitionData
    big = bytes(range(256)) * 64  # over the inline limit: a part of its own
    diverging = (3, 7) if version >= 12 else None
    parts = [P(partition_index=0, error_code=0, high_watermark=5, last_stable_offset=5,
               log_start_offset=1, aborted_transactions=None, preferred_read_replica=-1,
               records=b"abc"),
             P(partition_index=3, error_code=6, high_watermark=-1, last_stable_offset=-1,
               log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
               records=big)]
    if diverging:
        parts[0].diverging_epoch = P.EpochEndOffset(epoch=3, end_offset=7)
    ref = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        R(topic="t\u00e9", partitions=parts), R(topic="x", partitions=[])])
    want = protocol.encode_response(protocol.Request(
        protocol.SUPPORTED[1], version, 9, None, None, 0), ref)
    answer = FetchAnswer(topics=[("t\u00e9", [FetchPartition(0, 0, 5, 5, 1, b"abc", diverging),
                                              FetchPartition(3, 6, records=big)]), ("x", [])])
    got = protocol.encode_response(protocol.Request(
        protocol.SUPPORTED[1], version, 9, None, None, 0), answer)
    assert any(part is big for part in got)  # not copied into the framing
    assert b"".join(map(bytes, got)) == bytes(want[0])
    if version < 4:
        return  # an old consumer's version: no follower reads it
    back = decode_fetch(bytes(want[0])[4:], version)
    p0, p3 = back.responses[0].partitions
    assert back.responses[0].topic == "t\u00e9" and back.responses[1].partitions == []
    assert (p0.partition_index, p0.high_watermark, p0.log_start_offset, bytes(p0.records),
            p0.diverging_epoch) == (0, 5, 1 if version >= 5 else -1, b"abc", diverging)
    assert (p3.error_code, bytes(p3.records)) == (6, big)
    assert isinstance(p3.records, memoryview)


@pytest.mark.parametrize("version", range(0, 9))
def test_produce_response_encoder_writes_kafka_pythons_bytes(version: int) -> None:
    """The hand-written Produce answer gives exactly the bytes kafka-python's generated
    encoder gives at every version served, error messages (v8) included, and kafka-python
    reads back what a producer needs from it."""
    from kafka.protocol.producer import ProduceResponse

    from daemon.api.record_messages import ProduceAnswer, ProducedPartition

    R = ProduceResponse.TopicProduceResponse
    P = R.PartitionProduceResponse
    ref = ProduceResponse(throttle_time_ms=0, responses=[
        R(name="t\u00e9", partition_responses=[
            P(index=0, error_code=0, base_offset=41, log_append_time_ms=-1,
              log_start_offset=7, record_errors=[], error_message=None),
            P(index=2, error_code=56, base_offset=-1, log_append_time_ms=-1,
              log_start_offset=-1, record_errors=[], error_message="log dir /d\u00e9 offline")]),
        R(name="x", partition_responses=[])])
    request = protocol.Request(protocol.SUPPORTED[0], version, 12, None, None, 0)
    want = protocol.encode_response(request, ref)
    answer = ProduceAnswer([("t\u00e9", [ProducedPartition(0, 0, 41, 7),
                                         ProducedPartition(2, 56, -1, -1,
                                                           "log dir /d\u00e9 offline")]),
                            ("x", [])])
    got = protocol.encode_response(request, answer)
    assert b"".join(map(bytes, got)) == bytes(want[0])
    back = ProduceResponse.decode(bytes(got[0])[4:], version=version, header=True)
    first, second = back.responses[0].partition_responses
    assert (first.index, first.error_code, first.base_offset) == (0, 0, 41)
    assert (second.index, second.error_code) == (2, 56)
    if version >= 8:
        assert second.error_message == "log dir /d\u00e9 offline"


def _metadata_pair(version: int) -> tuple[object, object]:
    """One Metadata answer as kafka-python's objects and as ours (metadata_messages):
    a rack and none, a cluster id, an offline replica, a leader epoch, topic ids and
    none, an internal topic, a topic in error, and authorized operations asked (with
    bit 31) and not."""
    import uuid

    from kafka.protocol.metadata import MetadataResponse

    from daemon.api.metadata_messages import (
        BrokerMetadata,
        MetadataAnswer,
        PartitionMetadata,
        TopicMetadata,
    )

    tid = uuid.UUID("6f1f0e2a-9d6c-4b44-8a3e-0c5b1d2e3f40")
    R = MetadataResponse.MetadataResponseTopic
    P = R.MetadataResponsePartition
    B = MetadataResponse.MetadataResponseBroker
    ops = {3, 4, 31} if version >= 8 else None
    extra = {"authorized_operations": ops} if ops else {}
    cluster = {"authorized_operations": {2, 7}} if 8 <= version <= 10 else {}
    ref = MetadataResponse(
        throttle_time_ms=0,
        brokers=[B(node_id=1, host="h\u00f4te-1", port=9092, rack="r\u00e9"),
                 B(node_id=2, host="10.0.0.2", port=19092, rack=None)],
        cluster_id="c-\u00e9" if version >= 2 else None, controller_id=2,
        topics=[R(error_code=0, name="t\u00e9", topic_id=tid, is_internal=False, partitions=[
                    P(error_code=0, partition_index=0, leader_id=1, leader_epoch=7,
                      replica_nodes=[1, 2], isr_nodes=[1], offline_replicas=[2]),
                    P(error_code=5, partition_index=1, leader_id=-1, leader_epoch=3,
                      replica_nodes=[2], isr_nodes=[], offline_replicas=[])], **extra),
                R(error_code=0, name="__consumer_offsets", topic_id=None, is_internal=True,
                  partitions=[P(error_code=0, partition_index=0, leader_id=2,
                                leader_epoch=0, replica_nodes=[2, 1], isr_nodes=[2, 1],
                                offline_replicas=[])]),
                R(error_code=3, name="gone", topic_id=None, is_internal=False, partitions=[])],
        **cluster)
    ours = MetadataAnswer(
        [BrokerMetadata(1, "h\u00f4te-1", 9092, "r\u00e9"), BrokerMetadata(2, "10.0.0.2", 19092)],
        [TopicMetadata(0, "t\u00e9", [PartitionMetadata(0, 0, 1, 7, [1, 2], [1], [2]),
                                      PartitionMetadata(5, 1, -1, 3, [2], [], [])],
                       topic_id=tid, authorized_operations=ops),
         TopicMetadata(0, "__consumer_offsets", [PartitionMetadata(0, 0, 2, 0, [2, 1], [2, 1],
                                                                   [])], is_internal=True),
         TopicMetadata(3, "gone")],
        "c-\u00e9" if version >= 2 else None, 2,
        cluster_authorized_operations={2, 7} if 8 <= version <= 10 else None)
    return ref, ours


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_answer_encoder_writes_kafka_pythons_bytes(version: int) -> None:
    """The hand-written Metadata answer gives exactly the bytes kafka-python's encoder
    gives at every version served, and kafka-python reads back what a client needs."""
    from kafka.protocol.metadata import MetadataResponse

    ref, ours = _metadata_pair(version)
    request = protocol.Request(protocol.SUPPORTED[3], version, 77, None, None, 0)
    want = bytes(protocol.encode_response(request, ref)[0])
    got = protocol.encode_response(request, ours)
    assert len(got) == 1 and bytes(got[0]) == want
    back = MetadataResponse.decode(want[4:], version=version, header=True)
    assert [b.node_id for b in back.brokers] == [1, 2]
    first = back.topics[0]
    assert (first.name, [p.leader_id for p in first.partitions]) == ("t\u00e9", [1, -1])
    assert [p.isr_nodes for p in first.partitions] == [[1], []]


def test_metadata_answer_names_a_topic_null_only_where_the_version_can() -> None:
    """v12 writes a topic asked by id that may not be described with a null name; an
    older version (never asked by id: refused before) writes it as an empty string."""
    from kafka.protocol.metadata import MetadataResponse

    from daemon.api.metadata_messages import MetadataAnswer, TopicMetadata

    R = MetadataResponse.MetadataResponseTopic
    for version, name in ((12, None), (11, "")):
        ref = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None,
                               controller_id=-1, topics=[R(
                                   error_code=29, name=name, topic_id=None,
                                   is_internal=False, partitions=[])])
        request = protocol.Request(protocol.SUPPORTED[3], version, 5, None, None, 0)
        got = protocol.encode_response(request, MetadataAnswer([], [TopicMetadata(29, None)]))
        assert bytes(got[0]) == bytes(protocol.encode_response(request, ref)[0])


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_answer_is_kafka_pythons_bytes_for_each_correlation_id(version: int
                                                                             ) -> None:
    """ApiVersions' answer is encoded once per version and framed for each request: the
    bytes are kafka-python's for the same answer, whatever the correlation id."""
    for correlation_id in (0, 1, 2**31 - 1):
        request = protocol.Request(protocol.SUPPORTED[18], version, correlation_id, None,
                                   None, 0)
        want = bytes(protocol.encode_response(request, protocol.api_versions_response(version))[0])
        got = protocol.encode_response(request, protocol.ApiVersionsAnswer(version))
        assert len(got) == 1 and bytes(got[0]) == want
        back = ApiVersionsResponse.decode(want[4:], version=version, header=True)
        assert back.header.correlation_id == correlation_id
        assert {k.api_key for k in back.api_keys} == set(protocol.SUPPORTED)


@pytest.mark.parametrize("version", [8, 9, 12])
def test_metadata_answer_with_a_replica_set_of_130_brokers(version: int) -> None:
    """Arrays of 127 and more take a two-byte compact count (v9+): the answer is still
    kafka-python's bytes."""
    from kafka.protocol.metadata import MetadataResponse

    from daemon.api.metadata_messages import MetadataAnswer, PartitionMetadata, TopicMetadata

    R = MetadataResponse.MetadataResponseTopic
    P = R.MetadataResponsePartition
    many = list(range(130))
    ref = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1,
                           topics=[R(error_code=0, name="wide", topic_id=None,
                                     is_internal=False, partitions=[
                                         P(error_code=0, partition_index=0, leader_id=1,
                                           leader_epoch=2, replica_nodes=many,
                                           isr_nodes=many[:127], offline_replicas=[5])])])
    ours = MetadataAnswer([], [TopicMetadata(0, "wide", [PartitionMetadata(
        0, 0, 1, 2, many, many[:127], [5])])], None, 1)
    request = protocol.Request(protocol.SUPPORTED[3], version, 3, None, None, 0)
    assert bytes(protocol.encode_response(request, ours)[0]) == \
        bytes(protocol.encode_response(request, ref)[0])
