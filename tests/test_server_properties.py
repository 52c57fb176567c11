"""`logkeeper serve --config server.properties`: Kafka's own config file, served.

A realistic server.properties (the keys and defaults of the file Kafka ships, with
this test's dirs and ports) starts the real daemon; a real client produces and
fetches through the advertised listener, the Kafka keys logkeeper does not use are
named in one warning, and Metadata and the ZooKeeper registration advertise
`advertised.listeners` while the socket is bound as `listeners` says.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import psutil
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.protocol.metadata import MetadataRequest

from daemon.tools.zookeeper import free_port
from tests.daemon_helpers import Daemon, RawClient
from tests.zkserver import ZooKeeperServer

# Kafka's config/server.properties (3.x, ZooKeeper mode), its keys and defaults, plus
# listeners, advertised.listeners and log.cleanup.policy; then logkeeper's own keys.
SERVER_PROPERTIES = """\
############################# Server Basics #############################
broker.id=0

############################# Socket Server Settings #############################
listeners=PLAINTEXT://:{port}
advertised.listeners=PLAINTEXT://{advertised}:{port}
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.cleanup.policy=delete
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000

############################# Zookeeper #############################
{zookeeper}zookeeper.connection.timeout.ms=18000

############################# Group Coordinator Settings #############################
group.initial.rebalance.delay.ms=0

# logkeeper's own
http.listen=127.0.0.1:{http_port}
log.dir.reserve.bytes=1048576
"""

UNUSED = ("num.io.threads, num.network.threads, "
          "num.recovery.threads.per.data.dir, "
          "socket.receive.buffer.bytes, socket.send.buffer.bytes, "
          "zookeeper.connection.timeout.ms")


def properties_daemon(root: Path, *, advertised: str, zookeeper: str | None = None) -> Daemon:
    """A Daemon whose config is a server.properties instead of the helper's TOML."""
    d = Daemon(root)
    path = root / "server.properties"
    path.write_text(SERVER_PROPERTIES.format(
        port=d.port, advertised=advertised, http_port=d.http_port,
        log_dirs=",".join(str(p) for p in d.log_dirs),
        zookeeper="" if zookeeper is None else f"zookeeper.connect={zookeeper}\n"))
    d.config = path
    return d


def metadata_brokers(port: int) -> list[tuple[int, str, int]]:
    c = RawClient(port)
    try:
        resp = c.request(MetadataRequest[1](topics=[]), 1)
    finally:
        c.close()
    return [(b.node_id, b.host, b.port) for b in resp.brokers]


def test_kafkas_server_properties_serves_and_advertises_its_advertised_listener(
        tmp_path: Path) -> None:
    # Bound on every interface; advertised as 127.0.0.2, which only a client that
    # follows Metadata connects to (loopback answers on all of 127/8).
    with properties_daemon(tmp_path, advertised="127.0.0.2").start() as d:
        stderr = d.stderr()
        warnings = [line for line in stderr.splitlines() if "does not use" in line]
        assert len(warnings) == 1, stderr
        assert "WARNING" in warnings[0] and warnings[0].endswith(f"ignored: {UNUSED}")
        assert f"advertised as 127.0.0.2:{d.port}" in stderr
        bound = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        bound.close()  # the listener binds every interface, 127.0.0.1 included
        assert metadata_brokers(d.port) == [(0, "127.0.0.2", d.port)]

        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{d.port}", acks="all")
        try:
            for i in range(100):
                producer.send("orders", key=b"k%d" % i, value=b"v%d" % i)
            producer.flush(timeout=30)
            # The produce went where Metadata said: the daemon has a client on 127.0.0.2.
            local = {c.laddr[:2] for c in psutil.Process(d.proc.pid).net_connections("tcp")
                     if c.status == psutil.CONN_ESTABLISHED}
        finally:
            producer.close()
        assert ("127.0.0.2", d.port) in local, local

        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{d.port}",
                                 enable_auto_commit=False, consumer_timeout_ms=5000)
        try:
            consumer.assign([KTP("orders", 0)])
            consumer.seek_to_beginning()
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 100 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=1000).values():
                    got += [(r.offset, r.key, r.value) for r in records]
        finally:
            consumer.close()
        assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(100)]
        assert d.stop() == 0


def test_an_empty_listener_host_advertises_this_hosts_name(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    d.config.write_text(d.config.read_text().replace(
        "PLAINTEXT://127.0.0.1:", "PLAINTEXT://:"))  # Kafka's default form, every interface
    with d.start():
        assert metadata_brokers(d.port) == [(1, socket.getfqdn(), d.port)]


@pytest.mark.zookeeper
def test_zookeeper_registration_advertises_the_advertised_listener(
        tmp_path: Path, zk: ZooKeeperServer) -> None:
    from kazoo.client import KazooClient

    with properties_daemon(tmp_path, advertised="localhost", zookeeper=zk.hosts).start() as d:
        admin = KazooClient(hosts=zk.hosts)
        admin.start(timeout=15)
        try:
            deadline = time.monotonic() + 20
            while not admin.exists("/brokers/ids/0") and time.monotonic() < deadline:
                time.sleep(0.1)
            doc = json.loads(admin.get("/brokers/ids/0")[0])
        finally:
            admin.stop()
            admin.close()
        assert doc["endpoints"] == [f"PLAINTEXT://localhost:{d.port}"]
        assert (doc["host"], doc["port"]) == ("localhost", d.port)
        assert metadata_brokers(d.port) == [(0, "localhost", d.port)]


# Kafka 4's config/server.properties (KRaft mode, the only mode of Kafka 4: a single
# combined broker,controller node), its keys and defaults with this test's dirs and ports.
KRAFT_SERVER_PROPERTIES = """\
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:{controller_port}

############################# Socket Server Settings #############################
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000

# logkeeper's own
http.listen=127.0.0.1:{http_port}
log.dir.reserve.bytes=1048576
"""


def test_kafka_4s_kraft_server_properties_serves_its_broker_listener(tmp_path: Path) -> None:
    """The file a Kafka 4 user has: node.id is the broker id, the PLAINTEXT listener is
    served and advertised, the CONTROLLER listener is not bound (logkeeper runs no KRaft
    quorum), and start-up says so."""
    d = Daemon(tmp_path)
    controller_port = free_port()
    d.config = tmp_path / "server.properties"
    d.config.write_text(KRAFT_SERVER_PROPERTIES.format(
        port=d.port, controller_port=controller_port, http_port=d.http_port,
        log_dirs=",".join(str(p) for p in d.log_dirs)))
    with d.start():
        stderr = d.stderr()
        assert "process.roles = broker,controller is a KRaft-mode file" in stderr, stderr
        assert "broker 1, standalone; controller listeners (CONTROLLER) are not bound" in stderr
        assert metadata_brokers(d.port) == [(1, "127.0.0.1", d.port)]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", controller_port), timeout=5).close()
        producer = KafkaProducer(bootstrap_servers=d.bootstrap, acks="all")
        try:
            for i in range(10):
                producer.send("quickstart-events", value=b"event-%d" % i)
            producer.flush(timeout=30)
        finally:
            producer.close()
        consumer = KafkaConsumer("quickstart-events", bootstrap_servers=d.bootstrap,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000)
        try:
            got = [m.value for m in consumer]
        finally:
            consumer.close()
        assert got == [b"event-%d" % i for i in range(10)]
        assert d.stop() == 0
