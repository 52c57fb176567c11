"""daemon.wire: the control messages against bytes built here, field by field, with struct.

The expected bytes come from `_W`, a writer that knows nothing of kafka-python: it
follows the field lists and versions of Kafka 3.9's schemas for LeaderAndIsr (4),
StopReplica (5), UpdateMetadata (6) and ControlledShutdown (7). Every version a
ZooKeeper-mode Kafka controller may send is built, decoded by the class a receiver uses,
compared with what was meant, and re-encoded to the same bytes.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from daemon.wire import (
    CONTROL_APIS,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from daemon.wire import views as V

TOPIC_T = uuid.UUID("8c2d6a5e-0f3b-4b7e-9a61-2c1d3e4f5a6b")
TOPIC_U = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")


class _W:
    """A Kafka protocol writer: classic (int16/int32 lengths) or flexible (compact
    lengths as unsigned varint of n+1, and an empty tagged-field section per struct)."""

    def __init__(self, flexible: bool):
        self.flexible = flexible
        self.buf = bytearray()

    def _uvarint(self, n: int) -> None:
        while n >= 0x80:
            self.buf.append((n & 0x7F) | 0x80)
            n >>= 7
        self.buf.append(n)

    def i8(self, v):
        self.buf += struct.pack(">b", v)
        return self

    def boolean(self, v):
        self.buf += b"\x01" if v else b"\x00"
        return self

    def i16(self, v):
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v):
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v):
        self.buf += struct.pack(">q", v)
        return self

    def uuid(self, v):
        self.buf += (v or uuid.UUID(int=0)).bytes
        return self

    def string(self, s):
        if s is None:
            if self.flexible:
                self._uvarint(0)
            else:
                self.i16(-1)
            return self
        raw = s.encode()
        if self.flexible:
            self._uvarint(len(raw) + 1)
        else:
            self.i16(len(raw))
        self.buf += raw
        return self

    def array_len(self, n):
        if self.flexible:
            self._uvarint(n + 1)
        else:
            self.i32(n)
        return self

    def int32s(self, xs):
        self.array_len(len(xs))
        for x in xs:
            self.i32(x)
        return self

    def tags(self, fields=()):
        """End of a struct: the tagged-field section (flexible versions only)."""
        if self.flexible:
            self._uvarint(len(fields))
            for tag, raw in fields:
                self._uvarint(tag)
                self._uvarint(len(raw))
                self.buf += raw
        return self

    def bytes(self):
        return bytes(self.buf)


def _request_header(w: _W, api_key, version, correlation_id, client_id):
    # Header v1 (classic) and v2 (flexible): the client id keeps its int16 length.
    w.i16(api_key).i16(version).i32(correlation_id)
    raw = client_id.encode()
    w.buf += struct.pack(">h", len(raw)) + raw
    w.tags()


# -- LeaderAndIsr -----------------------------------------------------------------------

LAI_PARTITIONS = [
    V.LeaderAndIsrPartition("t", 0, controller_epoch=5, leader=1, leader_epoch=4, isr=(1, 2, 3),
                            partition_epoch=9, replicas=(1, 2, 3), is_new=True, topic_id=TOPIC_T),
    V.LeaderAndIsrPartition("t", 1, controller_epoch=4, leader=2, leader_epoch=1, isr=(2, 3),
                            partition_epoch=3, replicas=(2, 3, 1), adding_replicas=(4,),
                            removing_replicas=(1,), leader_recovery_state=1, topic_id=TOPIC_T),
    V.LeaderAndIsrPartition("u", 7, controller_epoch=5, leader=-1, leader_epoch=12, isr=(3,),
                            partition_epoch=40, replicas=(3, 1), topic_id=TOPIC_U),
]
LAI_LEADERS = [V.LiveLeader(1, "broker1.example", 9092), V.LiveLeader(2, "broker2.example", 19092)]


def _lai_expected(version: int) -> list[V.LeaderAndIsrPartition]:
    """What a receiver should read back at `version`: fields the version lacks default."""
    out = []
    for p in LAI_PARTITIONS:
        out.append(V.LeaderAndIsrPartition(
            p.topic, p.partition, p.controller_epoch, p.leader, p.leader_epoch, p.isr,
            p.partition_epoch, p.replicas,
            adding_replicas=p.adding_replicas if version >= 3 else (),
            removing_replicas=p.removing_replicas if version >= 3 else (),
            is_new=p.is_new if version >= 1 else False,
            leader_recovery_state=p.leader_recovery_state if version >= 6 else 0,
            topic_id=p.topic_id if version >= 5 else None))
    return out


def _lai_bytes(version: int, correlation_id=11, client_id="2") -> bytes:
    w = _W(flexible=version >= 4)
    _request_header(w, 4, version, correlation_id, client_id)
    w.i32(2)  # controller id
    if version >= 7:
        w.boolean(False)  # isKRaftController
    w.i32(5)  # controller epoch
    if version >= 2:
        w.i64(77)  # broker epoch
    if version >= 5:
        w.i8(0)  # type

    def state(p, with_topic):
        if with_topic:
            w.string(p.topic)
        w.i32(p.partition).i32(p.controller_epoch).i32(p.leader).i32(p.leader_epoch)
        w.int32s(p.isr).i32(p.partition_epoch).int32s(p.replicas)
        if version >= 3:
            w.int32s(p.adding_replicas).int32s(p.removing_replicas)
        if version >= 1:
            w.boolean(p.is_new)
        if version >= 6:
            w.i8(p.leader_recovery_state)
        w.tags()

    if version < 2:
        w.array_len(len(LAI_PARTITIONS))
        for p in LAI_PARTITIONS:
            state(p, with_topic=True)
    else:
        topics = {}
        for p in LAI_PARTITIONS:
            topics.setdefault(p.topic, []).append(p)
        w.array_len(len(topics))
        for name, ps in topics.items():
            w.string(name)
            if version >= 5:
                w.uuid(ps[0].topic_id)
            w.array_len(len(ps))
            for p in ps:
                state(p, with_topic=False)
            w.tags()
    w.array_len(len(LAI_LEADERS))
    for b in LAI_LEADERS:
        w.i32(b.broker_id).string(b.host).i32(b.port).tags()
    w.tags()
    return w.bytes()


def _lai_request(version: int):
    return V.leader_and_isr_request(version, controller_id=2, controller_epoch=5, broker_epoch=77,
                                    partitions=LAI_PARTITIONS, live_leaders=LAI_LEADERS)


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_request_bytes_every_version(version):
    expected = _lai_bytes(version)
    req = LeaderAndIsrRequest.decode(expected, version=version, header=True)
    assert req.version == version
    assert (req.header.correlation_id, req.header.client_id) == (11, "2")
    assert (req.controller_id, req.controller_epoch) == (2, 5)
    assert req.broker_epoch == (77 if version >= 2 else -1)
    assert V.leader_and_isr_partitions(req) == _lai_expected(version)
    assert V.leader_and_isr_leaders(req) == LAI_LEADERS
    built = _lai_request(version)
    built.with_header(correlation_id=11, client_id="2")
    assert built.encode(header=True) == expected
    assert req.encode(header=True) == expected


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_request_round_trip_framed(version):
    req = _lai_request(version)
    req.with_header(correlation_id=2**31 - 1, client_id="controller-2")
    frame = req.encode(header=True, framed=True)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    back = LeaderAndIsrRequest.decode(frame, version=version, header=True, framed=True)
    assert back == req
    assert back.header.correlation_id == 2**31 - 1
    assert back.header.client_id == "controller-2"
    assert V.leader_and_isr_partitions(back) == _lai_expected(version)


def test_leader_and_isr_request_v4_flexible_encodings_by_hand():
    """v4, the version our controller sends: compact strings and arrays, tagged fields."""
    p = V.LeaderAndIsrPartition("ab", 3, 5, 1, 2, (1,), 6, (1, 2), is_new=True)
    req = V.leader_and_isr_request(4, controller_id=1, controller_epoch=5, broker_epoch=300,
                                   partitions=[p], live_leaders=[V.LiveLeader(1, "h", 9092)])
    req.with_header(correlation_id=1, client_id="c")
    expected = (
        struct.pack(">hhih", 4, 4, 1, 1) + b"c" + b"\x00"  # header v2: int16 client id, no tags
        + struct.pack(">iiq", 1, 5, 300)
        + b"\x02" + b"\x03ab"  # one topic (compact length 1+1), compact string "ab"
        + b"\x02"  # one partition
        + struct.pack(">iiii", 3, 5, 1, 2) + b"\x02" + struct.pack(">i", 1)
        + struct.pack(">i", 6) + b"\x03" + struct.pack(">ii", 1, 2)
        + b"\x01" + b"\x01"  # adding [], removing [] (compact empty = 1)
        + b"\x01" + b"\x00"  # is_new, partition tags
        + b"\x00"  # topic tags
        + b"\x02" + struct.pack(">i", 1) + b"\x02h" + struct.pack(">i", 9092) + b"\x00"
        + b"\x00"  # request tags
    )
    assert req.encode(header=True) == expected


def test_leader_and_isr_request_v7_kraft_flag_and_type_names():
    req = LeaderAndIsrRequest(version=7, controller_id=3000, is_kraft_controller=True,
                              controller_epoch=1, broker_epoch=5, request_type=2,
                              topic_states=[], live_leaders=[])
    req.with_header(correlation_id=1, client_id="k")
    back = LeaderAndIsrRequest.decode(req.encode(header=True), version=7, header=True)
    assert back.is_kraft_controller is True
    assert back.request_type == 2
    assert LeaderAndIsrRequest.type == "request"  # the class property is not shadowed


def test_leader_and_isr_request_rejects_version_8():
    with pytest.raises(ValueError):
        LeaderAndIsrRequest.decode(_lai_bytes(7), version=8, header=True)


def test_common_struct_classes_are_per_parent():
    # The v0-1 list and the v2+ per-topic list are distinct classes; the v0-1 one has its
    # own name so that LeaderAndIsrRequest.LeaderAndIsrPartitionState is not a trap.
    assert not hasattr(LeaderAndIsrRequest, "LeaderAndIsrPartitionState")
    grouped = LeaderAndIsrRequest.LeaderAndIsrTopicState.LeaderAndIsrPartitionState
    assert grouped is not LeaderAndIsrRequest.LeaderAndIsrUngroupedPartitionState
    grouped(version=2, partition_index=0)  # accepts the grouped versions


@pytest.mark.parametrize("version", range(8))
def test_leader_and_isr_response_every_version(version):
    errors = {("t", 0): 0, ("t", 1): 56, ("u", 7): 11}
    resp = V.leader_and_isr_response(version, errors, topic_ids={"t": TOPIC_T, "u": TOPIC_U})
    resp.with_header(correlation_id=11)
    w = _W(flexible=version >= 4)
    w.i32(11).tags()  # response header v0 / v1
    w.i16(0)
    if version < 5:
        w.array_len(3)
        for (t, p), e in errors.items():
            w.string(t).i32(p).i16(e).tags()
    else:
        w.array_len(2)
        w.uuid(TOPIC_T).array_len(2).i32(0).i16(0).tags().i32(1).i16(56).tags().tags()
        w.uuid(TOPIC_U).array_len(1).i32(7).i16(11).tags().tags()
    w.tags()
    assert resp.encode(header=True) == w.bytes()
    back = LeaderAndIsrResponse.decode(w.bytes(), version=version, header=True)
    assert back.header.correlation_id == 11
    names = {TOPIC_T: "t", TOPIC_U: "u"}
    assert V.leader_and_isr_errors(back, names) == errors


def test_leader_and_isr_response_v5_needs_topic_ids():
    with pytest.raises(ValueError, match="topic id of 'x'"):
        V.leader_and_isr_response(5, {("x", 0): 0}, topic_ids={})


# -- UpdateMetadata ---------------------------------------------------------------------

UM_PARTITIONS = [
    V.MetadataPartition("t", 0, controller_epoch=5, leader=2, leader_epoch=1, isr=(2, 3), zk_version=4,
                        replicas=(1, 2, 3), offline_replicas=(1,), topic_id=TOPIC_T),
    V.MetadataPartition("t", 1, controller_epoch=5, leader=3, leader_epoch=0, isr=(3, 1, 2), zk_version=0,
                        replicas=(3, 1, 2), topic_id=TOPIC_T),
    V.MetadataPartition("gone", 0, controller_epoch=5, leader=-2, leader_epoch=6, isr=(1,), zk_version=8,
                        replicas=(1,), topic_id=TOPIC_U),
]
UM_BROKERS = [
    V.LiveBroker(1, (V.Endpoint("PLAINTEXT", "b1.example", 9092, 0),), rack="r1"),
    V.LiveBroker(2, (V.Endpoint("PLAINTEXT", "b2.example", 9092, 0),
                     V.Endpoint("SSL", "b2.example", 9093, 1)), rack=None),
    V.LiveBroker(3, (V.Endpoint("PLAINTEXT", "b3.example", 9092, 0),), rack="r3"),
]


def _um_expected(version):
    parts = [V.MetadataPartition(p.topic, p.partition, p.controller_epoch, p.leader, p.leader_epoch, p.isr,
                                 p.zk_version, p.replicas,
                                 offline_replicas=p.offline_replicas if version >= 4 else (),
                                 topic_id=p.topic_id if version >= 7 else None)
             for p in UM_PARTITIONS]
    brokers = [V.LiveBroker(b.broker_id, b.endpoints[:1] if version == 0 else b.endpoints,
                            b.rack if version >= 2 else None)
               for b in UM_BROKERS]
    return parts, brokers


def _um_bytes(version, correlation_id=12, client_id="2"):
    w = _W(flexible=version >= 6)
    _request_header(w, 6, version, correlation_id, client_id)
    w.i32(2)
    if version >= 8:
        w.boolean(False)
    w.i32(5)
    if version >= 5:
        w.i64(78)

    def state(p, with_topic):
        if with_topic:
            w.string(p.topic)
        w.i32(p.partition).i32(p.controller_epoch).i32(p.leader).i32(p.leader_epoch)
        w.int32s(p.isr).i32(p.zk_version).int32s(p.replicas)
        if version >= 4:
            w.int32s(p.offline_replicas)
        w.tags()

    if version < 5:
        w.array_len(len(UM_PARTITIONS))
        for p in UM_PARTITIONS:
            state(p, True)
    else:
        topics = {}
        for p in UM_PARTITIONS:
            topics.setdefault(p.topic, []).append(p)
        w.array_len(len(topics))
        for name, ps in topics.items():
            w.string(name)
            if version >= 7:
                w.uuid(ps[0].topic_id)
            w.array_len(len(ps))
            for p in ps:
                state(p, False)
            w.tags()
    w.array_len(len(UM_BROKERS))
    for b in UM_BROKERS:
        w.i32(b.broker_id)
        if version == 0:
            w.string(b.endpoints[0].host).i32(b.endpoints[0].port)
        else:
            w.array_len(len(b.endpoints))
            for e in b.endpoints:
                w.i32(e.port).string(e.host)
                if version >= 3:
                    w.string(e.listener)
                w.i16(e.security_protocol).tags()
        if version >= 2:
            w.string(b.rack)
        w.tags()
    w.tags()  # v8: Type is tagged (tag 0) and left out at its default
    return w.bytes()


def _um_request(version):
    return V.update_metadata_request(version, controller_id=2, controller_epoch=5, broker_epoch=78,
                                     partitions=UM_PARTITIONS, live_brokers=UM_BROKERS)


@pytest.mark.parametrize("version", range(9))
def test_update_metadata_request_bytes_every_version(version):
    expected = _um_bytes(version)
    req = UpdateMetadataRequest.decode(expected, version=version, header=True)
    assert (req.header.correlation_id, req.header.client_id) == (12, "2")
    assert req.broker_epoch == (78 if version >= 5 else -1)
    parts, brokers = _um_expected(version)
    assert V.update_metadata_partitions(req) == parts
    assert V.update_metadata_brokers(req) == brokers
    built = _um_request(version)
    built.with_header(correlation_id=12, client_id="2")
    assert built.encode(header=True) == expected


@pytest.mark.parametrize("version", range(9))
def test_update_metadata_request_round_trip(version):
    req = _um_request(version)
    req.with_header(correlation_id=99, client_id="controller")
    back = UpdateMetadataRequest.decode(req.encode(header=True, framed=True), version=version,
                                        header=True, framed=True)
    assert back == req
    assert back.header.client_id == "controller"


def test_update_metadata_v8_tagged_type():
    req = UpdateMetadataRequest(version=8, controller_id=3000, is_kraft_controller=True,
                                request_type=2, controller_epoch=1, broker_epoch=-1,
                                topic_states=[], live_brokers=[])
    body = req.encode()
    # controller id, kraft flag, epoch, broker epoch, no topics, no brokers, then the
    # tagged section: one field, tag 0, size 1, value 2.
    assert body == struct.pack(">i?iq", 3000, True, 1, -1) + b"\x01\x01" + b"\x01\x00\x01\x02"
    assert UpdateMetadataRequest.decode(body, version=8).request_type == 2
    # Untagged (default) decodes as 0.
    plain = struct.pack(">i?iq", 2, False, 1, -1) + b"\x01\x01\x00"
    assert UpdateMetadataRequest.decode(plain, version=8).request_type == 0


def test_update_metadata_v0_needs_plaintext():
    with pytest.raises(ValueError, match="PLAINTEXT endpoint for broker 9"):
        V.update_metadata_request(0, controller_id=1, controller_epoch=1, broker_epoch=-1, partitions=[],
                                  live_brokers=[V.LiveBroker(9, (V.Endpoint("SSL", "h", 1, 1),))])


@pytest.mark.parametrize("version", range(9))
def test_update_metadata_response(version):
    resp = UpdateMetadataResponse(version=version, error_code=11)
    resp.with_header(correlation_id=12)
    flexible = version >= 6
    expected = struct.pack(">i", 12) + (b"\x00" if flexible else b"") + struct.pack(">h", 11) + (
        b"\x00" if flexible else b"")
    assert resp.encode(header=True) == expected
    assert UpdateMetadataResponse.decode(expected, version=version, header=True).error_code == 11


# -- StopReplica ------------------------------------------------------------------------

SR_DELETE = [V.StopReplicaPartition("t", 0, True, -2), V.StopReplicaPartition("t", 2, True, -2),
             V.StopReplicaPartition("u", 1, True, 3)]
SR_MIXED = [V.StopReplicaPartition("t", 0, False, 4), V.StopReplicaPartition("u", 1, True, -2)]


def _sr_bytes(version, partitions, correlation_id=13, client_id="2"):
    w = _W(flexible=version >= 2)
    _request_header(w, 5, version, correlation_id, client_id)
    w.i32(2)
    if version >= 4:
        w.boolean(False)
    w.i32(5)
    if version >= 1:
        w.i64(79)
    if version <= 2:
        w.boolean(partitions[0].delete)
    topics = {}
    for p in partitions:
        topics.setdefault(p.topic, []).append(p)
    if version == 0:
        w.array_len(len(partitions))
        for p in partitions:
            w.string(p.topic).i32(p.partition)
    elif version <= 2:
        w.array_len(len(topics))
        for name, ps in topics.items():
            w.string(name).int32s([p.partition for p in ps]).tags()
    else:
        w.array_len(len(topics))
        for name, ps in topics.items():
            w.string(name).array_len(len(ps))
            for p in ps:
                w.i32(p.partition).i32(p.leader_epoch).boolean(p.delete).tags()
            w.tags()
    w.tags()
    return w.bytes()


@pytest.mark.parametrize("version", range(5))
def test_stop_replica_request_bytes_every_version(version):
    expected = _sr_bytes(version, SR_DELETE)
    req = StopReplicaRequest.decode(expected, version=version, header=True)
    assert (req.header.correlation_id, req.header.client_id) == (13, "2")
    want = SR_DELETE if version >= 3 else [V.StopReplicaPartition(p.topic, p.partition, True)
                                           for p in SR_DELETE]
    assert V.stop_replica_partitions(req) == want
    built = V.stop_replica_request(version, controller_id=2, controller_epoch=5, broker_epoch=79,
                                   partitions=SR_DELETE)
    built.with_header(correlation_id=13, client_id="2")
    assert built.encode(header=True) == expected


@pytest.mark.parametrize("version", [3, 4])
def test_stop_replica_mixed_delete_flags(version):
    expected = _sr_bytes(version, SR_MIXED)
    req = StopReplicaRequest.decode(expected, version=version, header=True)
    assert V.stop_replica_partitions(req) == SR_MIXED


@pytest.mark.parametrize("version", range(3))
def test_stop_replica_one_flag_before_v3(version):
    with pytest.raises(ValueError, match="one delete flag"):
        V.stop_replica_request(version, controller_id=2, controller_epoch=5, broker_epoch=79,
                               partitions=SR_MIXED)


@pytest.mark.parametrize("version", range(5))
def test_stop_replica_response(version):
    errors = {("t", 0): 0, ("u", 1): 56, ("t", 2): 74}
    resp = V.stop_replica_response(version, errors)
    resp.with_header(correlation_id=13)
    w = _W(flexible=version >= 2)
    w.i32(13).tags().i16(0).array_len(3)
    for (t, p), e in errors.items():
        w.string(t).i32(p).i16(e).tags()
    w.tags()
    assert resp.encode(header=True) == w.bytes()
    back = StopReplicaResponse.decode(w.bytes(), version=version, header=True)
    assert V.stop_replica_errors(back) == errors


# -- ControlledShutdown -----------------------------------------------------------------

def test_controlled_shutdown_v0_header_has_no_client_id():
    req = ControlledShutdownRequest(version=0, broker_id=3)
    req.with_header(correlation_id=21, client_id="ignored")
    expected = struct.pack(">hhii", 7, 0, 21, 3)
    assert req.encode(header=True) == expected
    back = ControlledShutdownRequest.decode(expected, version=0, header=True)
    assert (back.broker_id, back.header.correlation_id, back.header.client_id) == (3, 21, None)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_controlled_shutdown_request(version):
    w = _W(flexible=version >= 3)
    _request_header(w, 7, version, 21, "b3")
    w.i32(3)
    if version >= 2:
        w.i64(4242)
    w.tags()
    req = ControlledShutdownRequest.decode(w.bytes(), version=version, header=True)
    assert req.broker_id == 3
    assert req.broker_epoch == (4242 if version >= 2 else -1)
    assert req.header.client_id == "b3"
    assert req.encode(header=True) == w.bytes()


@pytest.mark.parametrize("version", range(4))
def test_controlled_shutdown_response(version):
    r = ControlledShutdownResponse
    resp = r(version=version, error_code=0, remaining_partitions=[
        r.RemainingPartition(topic_name="t", partition_index=0),
        r.RemainingPartition(topic_name="u", partition_index=3)])
    resp.with_header(correlation_id=21)
    w = _W(flexible=version >= 3)
    w.i32(21).tags().i16(0).array_len(2)
    w.string("t").i32(0).tags().string("u").i32(3).tags().tags()
    assert resp.encode(header=True) == w.bytes()
    assert r.decode(w.bytes(), version=version, header=True) == resp


def test_api_table():
    assert {k: (q.max_version, r.max_version) for k, (q, r) in CONTROL_APIS.items()} == {
        4: (7, 7), 5: (4, 4), 6: (8, 8), 7: (3, 3)}
    assert {k: q.name for k, (q, _) in CONTROL_APIS.items()} == {
        4: "LeaderAndIsrRequest", 5: "StopReplicaRequest", 6: "UpdateMetadataRequest",
        7: "ControlledShutdownRequest"}
