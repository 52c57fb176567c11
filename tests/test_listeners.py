"""Several named listeners (Kafka's `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `inter.broker.listener.name`): the set-up of nearly
every Kafka in Docker or Kubernetes, where clients inside a network reach a broker by one
name and clients outside by another. Each client is told the brokers' endpoints of the
listener it connected to; the brokers replicate over the inter-broker listener. A real
daemon, a real three-broker cluster with ZooKeeper, confluent-kafka clients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kazoo.client import KazooClient

from tests.cluster_helpers import Cluster, wait_for
from tests.daemon_helpers import Daemon, RawClient, write_config
from tests.zkserver import free_port

LISTENER_NOT_FOUND = 72
MAP = "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,HIDDEN:PLAINTEXT"


def two_listeners(d: Daemon, external: int, *, hidden: int | None = None) -> None:
    """`d` listens as INTERNAL on its port (127.0.0.1) and EXTERNAL on `external`,
    advertised to outside clients as localhost (as a Docker host publishes a port);
    HIDDEN, when given, is bound but not advertised."""
    listeners = f"INTERNAL://127.0.0.1:{d.port},EXTERNAL://127.0.0.1:{external}"
    if hidden is not None:
        listeners += f",HIDDEN://127.0.0.1:{hidden}"
    d.values.update({
        "listeners": listeners,
        "advertised.listeners": f"INTERNAL://127.0.0.1:{d.port},EXTERNAL://localhost:{external}",
        "listener.security.protocol.map": MAP,
        "inter.broker.listener.name": "INTERNAL"})
    d.config = write_config(d.root / "logkeeper.toml", d.values)


def metadata(port: int, topics: list[str] | None = None) -> Any:
    c = RawClient(port)
    try:
        return c.request(MetadataRequest(
            topics=None if topics is None else
            [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False), 8)
    finally:
        c.close()


def brokers(port: int) -> list[tuple[int, str, int]]:
    return sorted((b.node_id, b.host, b.port) for b in metadata(port).brokers)


def coordinator(port: int, group: str) -> tuple[int, str, int]:
    c = RawClient(port)
    try:
        r = c.request(FindCoordinatorRequest(key=group, key_type=0), 2)
    finally:
        c.close()
    assert r.error_code == 0, r
    return r.node_id, r.host, r.port


def produce_and_consume(bootstrap: str, topic: str, n: int, group: str,
                        consumer_bootstrap: str | None = None) -> list[bytes]:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v%d" % i)
    assert p.flush(60) == 0
    c = ck.Consumer({"bootstrap.servers": consumer_bootstrap or bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_for(lambda: got.extend(m.value() for m in c.consume(200, 0.5) if not m.error())
                 or len(got) >= n, 60, f"{n} records of {topic}")
    finally:
        c.close()
    return got


def test_each_client_is_told_its_own_listeners_endpoints(tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"num.partitions": 2})
    external, hidden = free_port(), free_port()
    two_listeners(d, external, hidden=hidden)
    with d:
        me = 1
        assert brokers(d.port) == [(me, "127.0.0.1", d.port)]
        assert brokers(external) == [(me, "localhost", external)]
        assert brokers(hidden) == []  # bound, not advertised: no broker to name (Kafka's)
        # A producer outside reaches the broker only by its advertised name; a group
        # inside finds its coordinator on its own listener.
        got = produce_and_consume(f"localhost:{external}", "orders", 200, "inside",
                                  consumer_bootstrap=f"127.0.0.1:{d.port}")
        assert sorted(got) == sorted(b"v%d" % i for i in range(200))
        assert coordinator(d.port, "inside") == (me, "127.0.0.1", d.port)
        assert coordinator(external, "inside") == (me, "localhost", external)
        # On the listener no one advertises, the partitions' leader cannot be named.
        parts = metadata(hidden, ["orders"]).topics[0].partitions
        assert [(p.error_code, p.leader_id) for p in parts] == [(LISTENER_NOT_FOUND, -1)] * 2
        stderr = d.stderr()
        assert (f"INTERNAL 127.0.0.1:{d.port} (advertised as 127.0.0.1:{d.port}), EXTERNAL "
                f"127.0.0.1:{external} (advertised as localhost:{external}), HIDDEN "
                f"127.0.0.1:{hidden} (not advertised)") in stderr


def test_a_cluster_replicates_on_the_inter_broker_listener_and_serves_both(
        tmp_path: Path) -> None:
    cl = Cluster(tmp_path, dirs=1)
    external = {b: free_port() for b in cl.brokers}
    for b, d in cl.brokers.items():
        two_listeners(d, external[b])
    with cl:
        # The registration names both endpoints, as Kafka's does.
        zk = KazooClient(hosts=cl.zk.hosts)
        zk.start(15)
        try:
            reg = json.loads(zk.get("/brokers/ids/2")[0])
        finally:
            zk.stop()
            zk.close()
        port2 = cl.brokers[2].port
        assert reg["endpoints"] == [f"INTERNAL://127.0.0.1:{port2}",
                                    f"EXTERNAL://localhost:{external[2]}"]
        assert reg["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT",
                                                         "EXTERNAL": "PLAINTEXT"}
        assert (reg["host"], reg["port"]) == ("127.0.0.1", port2)
        # Every broker tells each client the endpoints of the listener it came in on.
        for b in cl.brokers:
            assert brokers(cl.brokers[b].port) == [
                (x, "127.0.0.1", cl.brokers[x].port) for x in sorted(cl.brokers)]
            assert brokers(external[b]) == [(x, "localhost", external[x]) for x in sorted(cl.brokers)]
        outside = ",".join(f"localhost:{external[b]}" for b in cl.brokers)
        admin = ck_admin.AdminClient({"bootstrap.servers": outside})
        for fut in admin.create_topics([ck_admin.NewTopic("t", 3, 3, config={
                "min.insync.replicas": "2"})]).values():
            fut.result(30)
        # acks=all from outside: acknowledged once the followers, fetching over the
        # INTERNAL listener, have each record.
        got = produce_and_consume(outside, "t", 300, "outside")
        assert sorted(got) == sorted(b"v%d" % i for i in range(300))
        node, host, port = coordinator(external[1], "outside")
        assert (host, port) == ("localhost", external[node])
        assert coordinator(cl.brokers[1].port, "outside") == (node, "127.0.0.1",
                                                               cl.brokers[node].port)
