"""Fetch from the closest replica (KIP-392): with `replica.selector.class` set to Kafka's
RackAwareReplicaSelector, a leader sends a consumer that gives its `client.rack` to an
in-sync follower in that rack, which serves it up to its own high watermark; a consumer
in the leader's rack, or without a rack, reads from the leader. When that follower dies,
the consumer goes back to the leader and still reads every acknowledged record exactly
once. Real brokers in racks a, b and c, a real ZooKeeper, confluent-kafka consumers.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from daemon.api.protocol import FetchRequest
from daemon.config import RACK_AWARE_REPLICA_SELECTOR
from tests import faults
from tests.cluster_helpers import Cluster, wait_for
from tests.daemon_helpers import REPO, RawClient

RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC = "near"


def _bytes_out(cl: Cluster, broker: int) -> float:
    """Record bytes the broker sent to consumers for TOPIC (its /metrics)."""
    return _metric(cl, broker, 'kafka_server_brokertopicmetrics_bytesout_total{topic="'
                   + TOPIC + '"}')


def _metric(cl: Cluster, broker: int, series: str) -> float:
    """One series' value in the broker's /metrics (0 when absent)."""
    _, text = cl.brokers[broker].http("/metrics")
    m = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _consume(cl: Cluster, count: int, rack: str | None, group: str,
             timeout: float = 60) -> list[bytes]:
    conf = {"bootstrap.servers": cl.brokers[2].bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000}
    if rack is not None:
        conf["client.rack"] = rack
    c = ck.Consumer(conf)
    c.assign([ck.TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    try:
        _read_until(c, got, count, timeout, lambda: f"{count} records, got {len(got)}")
        got.extend(m.value() for m in c.consume(500, 1.0) if not m.error())
    finally:
        c.close()
    return got


def _rack_c_consumer(cl: Cluster, group: str) -> ck.Consumer:
    """A confluent consumer in rack c, assigned TOPIC-0 from offset 0."""
    c = ck.Consumer({"bootstrap.servers": cl.brokers[2].bootstrap, "group.id": group,
                     "client.rack": "c", "enable.auto.commit": False,
                     "topic.metadata.refresh.interval.ms": 1000})
    c.assign([ck.TopicPartition(TOPIC, 0, 0)])
    return c


def _read_until(c: ck.Consumer, got: list[bytes], count: int, timeout: float, what: Any) -> None:
    """Consume into `got` until it holds `count` values."""
    wait_for(lambda: got.extend(m.value() for m in c.consume(500, 0.5) if not m.error())
             or len(got) >= count, timeout, what)


def _produce(cl: Cluster, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5})
    for v in values:
        p.produce(TOPIC, value=v, partition=0)
    assert p.flush(60) == 0


@pytest.fixture
def cluster(tmp_path: Path):
    with Cluster(tmp_path, dirs=1, extra={"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
                                          "replica.lag.time.max.ms": 4000},
                 per_broker={b: {"broker.rack": r} for b, r in RACKS.items()}) as cl:
        admin = AdminClient({"bootstrap.servers": cl.brokers[1].bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])])[TOPIC].result(30)
        wait_for(lambda: cl.agreed(TOPIC, 1) and _isr(cl, 1) == [1, 2, 3], 30,
                 "the ISR to be 1, 2, 3")
        yield cl


def _isr(cl: Cluster, broker: int) -> list[int]:
    return sorted(cl.metadata(broker, [TOPIC])["partitions"][(TOPIC, 0)][3])


def test_a_consumer_reads_from_the_replica_in_its_rack(cluster: Cluster) -> None:
    cl = cluster
    values = [b"v%05d" % i for i in range(2000)]
    _produce(cl, values)

    # Rack c: the leader (1, rack a) sends it to broker 3, which serves every record.
    assert _consume(cl, len(values), "c", "in-c") == values
    served = {b: _bytes_out(cl, b) for b in RACKS}
    assert served[3] >= sum(len(v) for v in values), served
    assert served[2] == 0, served
    # What followers fetched counts apart (Kafka's ReplicationBytesIn/OutPerSec), and
    # every replica's log gauges show the same log end.
    size = sum(len(v) for v in values)
    assert _metric(cl, 1, "kafka_server_brokertopicmetrics_replicationbytesout_total") >= 2 * size
    for b in (2, 3):
        assert _metric(cl, b, "kafka_server_brokertopicmetrics_replicationbytesin_total") >= size
    # Kafka's RequestMetrics count a Fetch under FetchFollower or FetchConsumer too: the
    # leader served its followers, broker 3 a consumer (Fetch v12 here, both).
    assert _metric(cl, 1, 'kafka_network_requestmetrics_requests_total'
                   '{request="FetchFollower",version="12"}') > 0
    assert _metric(cl, 3, 'kafka_network_requestmetrics_requests_total'
                   '{request="FetchConsumer",version="12"}') > 0
    for b in RACKS:
        assert _metric(cl, b, 'kafka_log_log_logendoffset{partition="0",topic="near"}') == 2000

    # kafka-python follows preferred_read_replica too, here through `logkeeper
    # console-consumer` (kafka-console-consumer.sh) with its client.rack.
    before = _bytes_out(cl, 3)
    proc = subprocess.run([sys.executable, "-m", "daemon.cli", "console-consumer",
                           "--bootstrap-server", cl.brokers[1].bootstrap, "--topic", TOPIC,
                           "--from-beginning", "--max-messages", str(len(values)),
                           "--consumer-property", "client.rack=c"],
                          capture_output=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(b"\n")[:-1] == values
    assert _bytes_out(cl, 3) - before >= size

    # Rack a (the leader's) and no rack at all: the leader serves them.
    for rack, group in (("a", "in-a"), (None, "nowhere")):
        before = {b: _bytes_out(cl, b) for b in RACKS}
        assert _consume(cl, len(values), rack, group) == values
        after = {b: _bytes_out(cl, b) for b in RACKS}
        assert after[1] - before[1] >= sum(len(v) for v in values), (rack, before, after)
        assert after[3] == before[3] and after[2] == before[2], (rack, before, after)


def test_the_protocol_a_leader_and_a_follower_answer(cluster: Cluster) -> None:
    cl = cluster
    _produce(cl, [b"x%03d" % i for i in range(50)])
    wait_for(lambda: _isr(cl, 1) == [1, 2, 3], 30, "the ISR")
    F = FetchRequest.FetchTopic

    def fetch(broker: int, version: int, rack: str = "") -> Any:
        raw = RawClient(cl.brokers[broker].port)
        try:
            return raw.request(FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=0,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id=rack), version).responses[0].partitions[0]
        finally:
            raw.close()

    # The leader names broker 3 to a consumer in rack c, with no records.
    p = fetch(1, 11, "c")
    assert (p.error_code, p.preferred_read_replica, p.high_watermark) == (0, 3, 50)
    assert not p.records
    # To one in its own rack, or without one, it answers the records itself.
    for rack in ("a", ""):
        p = fetch(1, 11, rack)
        assert p.error_code == 0 and p.preferred_read_replica == -1 and p.records
    # A follower serves a consumer's Fetch v11 (its high watermark caught up), but not
    # an older one: before KIP-392 only leaders served consumers.
    p = wait_for(lambda: (lambda r: r if r.high_watermark == 50 else None)(fetch(3, 11, "c")),
                 30, "broker 3's high watermark")
    assert p.error_code == 0 and p.records
    assert fetch(3, 10).error_code == 6  # NOT_LEADER_OR_FOLLOWER


def test_the_consumer_goes_back_to_the_leader_when_its_replica_dies(cluster: Cluster) -> None:
    cl = cluster
    first = [b"a%05d" % i for i in range(1000)]
    _produce(cl, first)
    acked: list[bytes] = list(first)
    stop = threading.Event()

    def keep_producing() -> None:
        p = ck.Producer({"bootstrap.servers": cl.brokers[1].bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            v = b"b%05d" % i
            p.produce(TOPIC, value=v, partition=0,
                      on_delivery=lambda err, m: acked.append(m.value()) if err is None else None)
            p.poll(0)
            i += 1
            time.sleep(0.002)
        p.flush(60)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    c = _rack_c_consumer(cl, "dies")
    got: list[bytes] = []
    try:
        _read_until(c, got, 1000, 60, "the first records")
        assert _bytes_out(cl, 3) > 0  # read from broker 3 so far
        from_leader = _bytes_out(cl, 1)
        cl.brokers[3].kill()
        time.sleep(3)
        stop.set()
        producer.join(60)
        assert not producer.is_alive()
        _read_until(c, got, len(acked), 90,
                    lambda: f"every acknowledged record: {len(got)} of {len(acked)}")
        assert _bytes_out(cl, 1) > from_leader  # the leader serves it now
    finally:
        stop.set()
        c.close()
    # Every acknowledged record, exactly once, in the order written.
    assert len(got) == len(set(got))
    assert set(acked) <= set(got)
    assert [v for v in got if v in set(acked)] == [v for v in got]
    assert got[:1000] == first


def test_the_selector_follows_kafkas_rules() -> None:
    from daemon.replica.selector import ReplicaView, select_read_replica

    leader = ReplicaView(1, "a", 100, 0)
    c2 = ReplicaView(2, "c", 90, 0)
    c3 = ReplicaView(3, "c", 100, 500)
    c4 = ReplicaView(4, "c", 100, 20)
    b5 = ReplicaView(5, "b", 100, 0)
    # The most caught up in the consumer's rack: log end, then caught up most recently.
    assert select_read_replica("c", leader, [c2, c3, c4, b5]) == 4
    assert select_read_replica("c", leader, [c2, c3]) == 3
    # Ties on both go to the highest broker id.
    assert select_read_replica("c", leader, [c4, c4._replace(broker_id=7)]) == 7
    # The leader's own rack, no rack, or a rack without a candidate: the leader.
    assert select_read_replica("a", leader, [c2, ReplicaView(6, "a", 100, 0)]) is None
    assert select_read_replica("", leader, [c2]) is None
    assert select_read_replica("d", leader, [c2, b5]) is None


@pytest.mark.fault
def test_the_consumer_goes_back_to_the_leader_when_its_replicas_disk_dies(
        tmp_path: Path) -> None:
    """Broker 3's replica sits on a disk that dies (EIO, FS_IOC_SHUTDOWN) while a
    consumer in rack c reads from it and producers write: only that dir goes offline,
    broker 3 leaves the ISR, and the consumer reads on from the leader, every
    acknowledged record exactly once and in order.

    The consumer is paused while the disk dies and until broker 3 is out of the ISR:
    fetching all along, librdkafka (2.16) bounces between broker 3's 56 and the leader's
    redirect to broker 3 (the leader cannot know before the controller tells it, Kafka's
    cannot either), and after that "preferred replica lease changing too quickly" it
    can stay on broker 3 for good, whatever the brokers answer next."""
    with faults.loop_ext4(64) as mnt:
        sick, good = mnt / "d", tmp_path / "b3-good"
        with Cluster(tmp_path, dirs=1, log_dirs={3: [sick, good]},
                     extra={"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
                            "log.dir.probe.interval.ms": 100, "log.dir.probe.timeout.ms": 1000},
                     per_broker={b: {"broker.rack": r} for b, r in RACKS.items()}) as cl:
            b3 = cl.brokers[3]
            assert b3.admin("log-dirs/cordon", good)[0] == 200  # the replica goes on `sick`
            admin = AdminClient({"bootstrap.servers": cl.brokers[1].bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])])[
                TOPIC].result(30)
            assert b3.admin("log-dirs/uncordon", good)[0] == 200
            assert list(sick.glob(f"{TOPIC}-0"))
            wait_for(lambda: _isr(cl, 1) == [1, 2, 3], 30, "the ISR to be 1, 2, 3")
            first = [b"a%04d" % i for i in range(500)]
            _produce(cl, first)
            c = _rack_c_consumer(cl, "disk")
            got: list[bytes] = []
            try:
                _read_until(c, got, 500, 60, "the first records")
                assert _bytes_out(cl, 3) > 0 and got == first  # from broker 3's replica
                from_leader = _bytes_out(cl, 1)
                c.pause([ck.TopicPartition(TOPIC, 0)])
                faults.shutdown_fs(mnt)
                wait_for(lambda: b3.log_dir_states()[str(sick)] == "offline", 10, "OFFLINE")
                wait_for(lambda: _isr(cl, 1) == [1, 2], 30, "broker 3 out of the ISR")
                second = [b"b%04d" % i for i in range(500)]
                _produce(cl, second)
                c.resume([ck.TopicPartition(TOPIC, 0)])
                _read_until(c, got, 1000, 60, lambda: f"every record: {len(got)} of 1000")
                got.extend(m.value() for m in c.consume(500, 1.0) if not m.error())
                assert _bytes_out(cl, 1) > from_leader  # the leader serves it now
            finally:
                c.close()
            assert got == first + second
