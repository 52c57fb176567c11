"""daemon.cluster.znodes: paths and JSON against the literal znode examples of docs/formats.md
("ZooKeeper znodes") and docs/cluster.md, and the older variants Kafka wrote."""

from __future__ import annotations

import uuid

import pytest

from daemon.cluster import znodes as z
from logstore import TopicPartition

TOPIC_ID = uuid.UUID("9a8b7c6d-5e4f-4a3b-9c2d-1e0f11223344")
TOPIC_ID_STR = "mot8bV5PSjucLR4PESIzRA"


def test_paths():
    assert z.broker_path(3) == "/brokers/ids/3"
    assert z.topic_path("t") == "/brokers/topics/t"
    assert z.partitions_path("t") == "/brokers/topics/t/partitions"
    assert z.partition_path("t", 0) == "/brokers/topics/t/partitions/0"
    assert z.partition_state_path("t", 12) == "/brokers/topics/t/partitions/12/state"
    assert z.topic_config_path("t") == "/config/topics/t"
    assert z.delete_topic_path("t") == "/admin/delete_topics/t"
    assert (z.CONTROLLER, z.CONTROLLER_EPOCH) == ("/controller", "/controller_epoch")
    assert z.isr_change_path() == "/isr_change_notification/isr_change_"
    assert z.isr_change_path("0000000042") == "/isr_change_notification/isr_change_0000000042"
    assert z.log_dir_event_path() == "/log_dir_event_notification/log_dir_event_"
    assert z.sequence_number("/log_dir_event_notification/log_dir_event_0000000007") == "0000000007"
    assert z.sequence_number("isr_change_0000000042") == "0000000042"
    with pytest.raises(ValueError):
        z.sequence_number("/brokers/ids/1")


def test_topic_id_text():
    assert z.topic_id_to_str(TOPIC_ID) == TOPIC_ID_STR
    assert len(TOPIC_ID_STR) == 22
    assert z.topic_id_from_str(TOPIC_ID_STR) == TOPIC_ID
    for bad in ("short", TOPIC_ID_STR + "A", "!" * 22, "mot8bV5PSjucLR4PESIzRB"):
        with pytest.raises(ValueError):
            z.topic_id_from_str(bad)


# -- /brokers/ids/<id> ------------------------------------------------------------------

def test_broker_v5_as_formats_md():
    reg = z.BrokerRegistration(1, (z.BrokerEndpoint("PLAINTEXT", "h", 9092),), timestamp_ms=1700000000000)
    assert z.encode_broker(reg) == (
        b'{"version":5,"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"],"jmx_port":-1,'
        b'"timestamp":"1700000000000","listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"features":{}}')
    assert z.decode_broker(1, z.encode_broker(reg)) == reg


def test_broker_v5_rack_ipv6_and_two_listeners():
    reg = z.BrokerRegistration(
        2, (z.BrokerEndpoint("INTERNAL", "::1", 9093), z.BrokerEndpoint("PLAINTEXT", "b2.example", 9092)),
        timestamp_ms=5, rack="r2")
    data = z.encode_broker(reg)
    # The top-level host and port are the first endpoint whose security protocol is
    # PLAINTEXT, whatever its listener name (as Kafka's BrokerIdZNode.encode).
    assert data == (
        b'{"version":5,"host":"::1","port":9093,'
        b'"endpoints":["INTERNAL://[::1]:9093","PLAINTEXT://b2.example:9092"],"jmx_port":-1,'
        b'"timestamp":"5","rack":"r2",'
        b'"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","PLAINTEXT":"PLAINTEXT"},"features":{}}')
    back = z.decode_broker(2, data)
    assert back == reg
    assert back.endpoint("INTERNAL").host == "::1"


def test_broker_older_versions_and_kafka_key_order():
    # What a Kafka 3.x broker actually writes (its encoder builds a hash map: key order
    # differs from docs/formats.md, which readers must not care about).
    kafka = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
             b'"endpoints":["PLAINTEXT://k1:9092"],"jmx_port":-1,"port":9092,"host":"k1","version":5,'
             b'"timestamp":"1690000000000"}')
    assert z.decode_broker(1, kafka).endpoints == (z.BrokerEndpoint("PLAINTEXT", "k1", 9092),)
    v4 = (b'{"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},'
          b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],"rack":"dc1",'
          b'"jmx_port":9999,"host":null,"timestamp":"2233345666","port":-1,"version":4}')
    b4 = z.decode_broker(7, v4)
    assert b4 == z.BrokerRegistration(
        7, (z.BrokerEndpoint("CLIENT", "host1", 9092, "SSL"),
            z.BrokerEndpoint("REPLICATION", "host1", 9093, "PLAINTEXT")),
        timestamp_ms=2233345666, jmx_port=9999, rack="dc1", features={}, version=4)
    v2 = (b'{"version":2,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
          b'"endpoints":["PLAINTEXT://host1:9092","SSL://host1:9093"]}')
    assert z.decode_broker(3, v2).endpoints == (z.BrokerEndpoint("PLAINTEXT", "host1", 9092),
                                                z.BrokerEndpoint("SSL", "host1", 9093, "SSL"))
    v1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert z.decode_broker(4, v1).endpoints == (z.BrokerEndpoint("PLAINTEXT", "localhost", 9092),)


@pytest.mark.parametrize("data, problem", [
    (b"", "no data"),
    (b"{not json", "not JSON"),
    (b"[1]", "JSON object"),
    (b'{"version":0,"jmx_port":-1}', "unsupported broker registration version 0"),
    (b'{"version":5,"endpoints":["PLAINTEXT://h:9092"],"timestamp":"1"}', "missing 'jmx_port'"),
    (b'{"version":5,"jmx_port":-1,"endpoints":["nonsense"],"timestamp":"1"}', "not LISTENER://host:port"),
    (b'{"version":5,"jmx_port":-1,"endpoints":["X://h:1"],"timestamp":"1",'
     b'"listener_security_protocol_map":{}}', "no security protocol for listener 'X'"),
    (b'{"version":5,"jmx_port":-1,"endpoints":[],"timestamp":"soon"}', "not milliseconds"),
])
def test_broker_malformed_names_path(data, problem):
    with pytest.raises(z.ZnodeError, match=problem) as err:
        z.decode_broker(9, data)
    assert str(err.value).startswith("/brokers/ids/9: ")
    assert err.value.path == "/brokers/ids/9"


# -- /controller, /controller_epoch -----------------------------------------------------

def test_controller_v2_as_cluster_md():
    data = z.encode_controller(2, 1700000000000)
    assert data == b'{"version":2,"brokerid":2,"timestamp":"1700000000000","kraftControllerEpoch":-1}'
    assert z.decode_controller(data) == z.ControllerRegistration(2, 1700000000000, -1, 2)


def test_controller_v1():
    assert z.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1500000000000"}') == \
        z.ControllerRegistration(2, 1500000000000, None, 1)


def test_controller_malformed():
    with pytest.raises(z.ZnodeError, match=r"^/controller: missing 'brokerid'"):
        z.decode_controller(b'{"version":2,"timestamp":"1"}')
    with pytest.raises(z.ZnodeError, match="'brokerid' is '2', not an integer"):
        z.decode_controller(b'{"version":2,"brokerid":"2","timestamp":"1"}')


def test_controller_epoch():
    assert z.encode_controller_epoch(5) == b"5"
    assert z.decode_controller_epoch(b"5") == 5
    assert z.decode_controller_epoch(b"0") == 0
    for bad in (b"", b"five", b"5.0"):
        with pytest.raises(z.ZnodeError, match="^/controller_epoch: not an ASCII integer"):
            z.decode_controller_epoch(bad)


# -- /brokers/topics/<t> ----------------------------------------------------------------

def test_topic_v3_as_cluster_md():
    a = z.TopicAssignment({0: (1, 2, 3)}, TOPIC_ID)
    data = z.encode_topic(a)
    assert data == (b'{"version":3,"partitions":{"0":[1,2,3]},"adding_replicas":{},"removing_replicas":{},'
                    b'"topic_id":"' + TOPIC_ID_STR.encode() + b'"}')
    assert z.decode_topic("t", data) == a


def test_topic_reassignment_and_no_id():
    a = z.TopicAssignment({1: (2, 3, 4), 0: (1, 2)}, None, adding_replicas={1: (4,), 0: ()},
                          removing_replicas={1: (1,)})
    data = z.encode_topic(a)
    assert data == (b'{"version":3,"partitions":{"0":[1,2],"1":[2,3,4]},"adding_replicas":{"1":[4]},'
                    b'"removing_replicas":{"1":[1]}}')
    back = z.decode_topic("t", data)
    assert back.partitions == {0: (1, 2), 1: (2, 3, 4)}
    assert (back.topic_id, back.adding_replicas, back.removing_replicas) == (None, {1: (4,)}, {1: (1,)})


def test_topic_older_versions():
    # Kafka <2.4 wrote version 1 with partitions only; 2.8+ adds topic_id, in hash-map key order.
    assert z.decode_topic("t", b'{"version":1,"partitions":{"1":[2,1],"0":[1,2]}}') == \
        z.TopicAssignment({0: (1, 2), 1: (2, 1)})
    kafka = (b'{"removing_replicas":{},"partitions":{"0":[1]},"topic_id":"' + TOPIC_ID_STR.encode()
             + b'","adding_replicas":{},"version":3}')
    assert z.decode_topic("t", kafka) == z.TopicAssignment({0: (1,)}, TOPIC_ID)


@pytest.mark.parametrize("data, problem", [
    (b'{"version":3,"partitions":{"x":[1]}}', "partition 'x' is not a number"),
    (b'{"version":3,"partitions":{"0":[1,"2"]}}', r"partitions\[0\] is \[1, '2'\], not a list of integers"),
    (b'{"version":3,"partitions":{"0":[1]},"topic_id":"abc"}', "not 22 base64url"),
    (b'{"version":4,"partitions":{}}', "unsupported topic version 4"),
])
def test_topic_malformed(data, problem):
    with pytest.raises(z.ZnodeError, match=problem) as err:
        z.decode_topic("orders", data)
    assert err.value.path == "/brokers/topics/orders"


# -- partition state --------------------------------------------------------------------

def test_partition_state_as_cluster_md_and_formats_md():
    s = z.PartitionState(leader=2, leader_epoch=1, controller_epoch=5, isr=(2, 3))
    assert z.encode_partition_state(s) == \
        b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":5,"isr":[2,3]}'
    assert z.decode_partition_state("t", 0, z.encode_partition_state(s)) == s
    f = z.PartitionState(leader=1, leader_epoch=4, controller_epoch=2, isr=(1, 2))
    assert z.encode_partition_state(f) == \
        b'{"version":1,"leader":1,"leader_epoch":4,"controller_epoch":2,"isr":[1,2]}'


def test_partition_state_recovering():
    s = z.PartitionState(3, 7, 5, (3,), z.LEADER_RECOVERING)
    data = z.encode_partition_state(s)
    assert data == (b'{"version":1,"leader":3,"leader_epoch":7,"controller_epoch":5,"isr":[3],'
                    b'"leader_recovery_state":1}')
    assert z.decode_partition_state("t", 0, data) == s


def test_partition_state_kafka_order_and_no_leader():
    kafka = b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":3,"isr":[1]}'
    assert z.decode_partition_state("t", 0, kafka) == z.PartitionState(-1, 3, 1, (1,))


def test_partition_state_malformed():
    with pytest.raises(z.ZnodeError, match=r"^/brokers/topics/t/partitions/3/state: missing 'leader_epoch'"):
        z.decode_partition_state("t", 3, b'{"version":1,"leader":1,"controller_epoch":1,"isr":[1]}')
    with pytest.raises(z.ZnodeError, match="unknown leader_recovery_state 2"):
        z.decode_partition_state("t", 3, b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,'
                                          b'"isr":[1],"leader_recovery_state":2}')
    with pytest.raises(z.ZnodeError, match="'isr' is None"):
        z.decode_partition_state("t", 3, b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1}')


# -- /config/topics, /admin/delete_topics -----------------------------------------------

def test_topic_config_as_formats_md():
    data = z.encode_topic_config({"min.insync.replicas": "2"})
    assert data == b'{"version":1,"config":{"min.insync.replicas":"2"}}'
    assert z.decode_topic_config("t", data) == {"min.insync.replicas": "2"}
    assert z.decode_topic_config("t", b'{"version":1,"config":{}}') == {}
    assert z.decode_topic_config("t", b"") == {}
    with pytest.raises(ValueError, match="must be strings"):
        z.encode_topic_config({"min.insync.replicas": 2})
    with pytest.raises(z.ZnodeError, match=r"^/config/topics/t: config 'retention.ms' is 5, not a string"):
        z.decode_topic_config("t", b'{"version":1,"config":{"retention.ms":5}}')


def test_delete_topic_has_no_data():
    assert z.DELETE_TOPIC_DATA == b""


# -- notifications ----------------------------------------------------------------------

def test_isr_change_as_cluster_md():
    data = z.encode_isr_change([("t", 0)])
    assert data == b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'
    path = z.isr_change_path("0000000001")
    assert z.decode_isr_change(path, data) == frozenset({TopicPartition("t", 0)})
    two = z.encode_isr_change([("t", 0), ("u", 3)])
    assert z.decode_isr_change(path, two) == {TopicPartition("t", 0), TopicPartition("u", 3)}
    with pytest.raises(z.ZnodeError, match="^/isr_change_notification/isr_change_0000000001: missing 'top"):
        z.decode_isr_change(path, b'{"version":1,"partitions":[{"partition":0}]}')


def test_log_dir_event_as_formats_md():
    data = z.encode_log_dir_event(1)
    assert data == b'{"version":1,"broker":1,"event":1}'
    path = z.log_dir_event_path("0000000003")
    assert z.decode_log_dir_event(path, data) == z.LogDirEvent(1, 1)
    with pytest.raises(z.ZnodeError, match="^/log_dir_event_notification/log_dir_event_0000000003: missing"):
        z.decode_log_dir_event(path, b'{"version":1,"event":1}')


def test_non_ascii_is_raw_utf8():
    # Jackson (Kafka's encoder) writes non-ASCII as UTF-8, not \\u escapes.
    assert z.encode_topic_config({"x": "é"}) == '{"version":1,"config":{"x":"é"}}'.encode()


def test_reassign_partitions_as_kafkas_tools_write_it():
    data = (b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3]},'
            b'{"topic":"orders","partition":1,"replicas":[3,1]}]}')
    got = z.decode_reassign_partitions(data)
    assert got == {("orders", 0): (2, 3), ("orders", 1): (3, 1)}
    assert z.encode_reassign_partitions(got) == data
    for bad, problem in ((b'{"version":2,"partitions":[]}', "unsupported reassignment version"),
                         (b'{"version":1}', "'partitions' is not a list"),
                         (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":"1,2"}]}',
                          "replicas is '1,2', not a list of integers"),
                         (b'{"version":1,"partitions":[{"partition":0,"replicas":[1]}]}', "missing 'topic'")):
        with pytest.raises(z.ZnodeError, match=problem):
            z.decode_reassign_partitions(bad)
