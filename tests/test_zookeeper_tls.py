"""Brokers that reach ZooKeeper over TLS (Kafka's zookeeper.ssl.* keys) and create their
znodes with Kafka's secure ACLs (zookeeper.set.acl), against a real ZooKeeper serving
TLS only to clients with a certificate, which become its `x509` identities."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id

from daemon import config as config_mod
from daemon.cluster import zk_client

from .cluster_helpers import Cluster, wait_for
from .daemon_helpers import REPO, Daemon
from .tls_helpers import CertificateAuthority
from .zkserver import ZooKeeperServer

BROKER_DN = "CN=kafka-broker"  # every broker's identity at ZooKeeper (Kafka's rule for set.acl)


def _tls_client(ca: CertificateAuthority, keystore: Path | None, hosts: str, **extra: str):
    props = {"zookeeper.ssl.client.enable": "true",
             "zookeeper.ssl.truststore.location": str(ca.cert_pem), **extra}
    if keystore is not None:
        props["zookeeper.ssl.keystore.location"] = str(keystore)
    settings = config_mod.zookeeper_client_tls(props, "<test>")
    assert settings is not None
    zk = zk_client.new_client(hosts, timeout=10, tls_context=settings.client_context())
    zk.start(15)
    return zk


def test_brokers_over_zookeeper_tls_with_secure_acls(tmp_path: Path) -> None:
    """Two brokers whose only way to ZooKeeper is its TLS port (one's key in a PKCS12
    file, the other's in PEM, one identity) with zookeeper.set.acl: a SCRAM user is
    written first by `logkeeper configs --zookeeper --zk-tls-config-file`; the cluster
    forms, a topic of RF 2 takes acks=all records, the controller's broker is killed
    and the other takes over (it can write the znodes the first created), and every
    record is read back. The znodes carry Kafka's ACLs: the brokers' certificate may
    do everything, anyone may read, but the user's SCRAM credentials only the brokers;
    a client with another certificate can read a topic's znode but not change it. An
    ACL written by `logkeeper acls --zookeeper --zk-tls-config-file` gets them too."""
    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("zookeeper", hosts=("127.0.0.1",))
    broker = ca.issue("kafka-broker", client=True)
    intruder = ca.issue("intruder", client=True)
    p12 = broker.pkcs12(tmp_path / "broker.p12", "store-pw")
    zk_keys = {"zookeeper.ssl.client.enable": "true", "zookeeper.set.acl": "true",
               "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
               "zookeeper.ssl.truststore.location": str(ca.cert_pem),
               "zookeeper.ssl.truststore.type": "PEM"}
    cl = Cluster(tmp_path / "cl", brokers=2, dirs=1, zk_tls=(server.keystore_pem, ca.cert_pem),
                 extra=zk_keys, per_broker={
                     1: {"zookeeper.ssl.keystore.location": str(p12),
                         "zookeeper.ssl.keystore.type": "PKCS12",
                         "zookeeper.ssl.keystore.password": "store-pw"},
                     2: {"zookeeper.ssl.keystore.location": str(broker.keystore_pem)}})
    try:
        tool_tls = tmp_path / "zk-tls.properties"
        tool_tls.write_text("zookeeper.ssl.client.enable=true\n"
                            f"zookeeper.ssl.keystore.location={broker.keystore_pem}\n"
                            f"zookeeper.ssl.truststore.location={ca.cert_pem}\n")
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "configs", "alter", "--user",
                            "app", "--zookeeper", cl.zk.secure_hosts, "--zk-tls-config-file",
                            str(tool_tls), "--add-config", "SCRAM-SHA-512=[password=app-pw]"],
                           cwd=REPO, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        # Without its TLS file the tool cannot reach the TLS port: it says so.
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "configs", "alter", "--user",
                            "app", "--zookeeper", cl.zk.secure_hosts,
                            "--add-config", "SCRAM-SHA-512=[password=other]"],
                           cwd=REPO, capture_output=True, text=True, timeout=90)
        assert r.returncode != 0 and "cannot reach ZooKeeper" in r.stderr, r.stderr
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "acls", "--zookeeper",
                            cl.zk.secure_hosts, "--zk-tls-config-file", str(tool_tls), "--add",
                            "--allow-principal", "User:app", "--operation", "Read",
                            "--topic", "zk-tls"],
                           cwd=REPO, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr

        cl.start()
        topic = "zk-tls"
        admin = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[1].bootstrap})
        spec = ck_admin.NewTopic(topic, 2, replica_assignment=[[1, 2], [2, 1]],
                                 config={"min.insync.replicas": "2"})
        for fut in admin.create_topics([spec], request_timeout=30).values():
            fut.result(30)
        wait_for(lambda: (m := cl.agreed(topic, 2)) and all(
            len(v[3]) == 2 for v in m["partitions"].values()), 30, "both ISRs full")

        acked: list[bytes] = []

        def produce(values: list[bytes], bootstrap: str) -> None:
            p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True})
            for v in values:
                p.produce(topic, v, on_delivery=lambda err, msg: err is None and
                          acked.append(msg.value()))
            assert p.flush(60) == 0

        produce([b"before-%d" % i for i in range(200)], cl.brokers[1].bootstrap)
        controller = cl.metadata(1)["controller"]
        other = 2 if controller == 1 else 1
        cl.brokers[controller].kill()
        wait_for(lambda: cl.metadata(other)["controller"] == other, 30,
                 "the surviving broker to become controller")
        wait_for(lambda: all(v[0] == other for v in cl.metadata(other, [topic])
                             ["partitions"].values()), 30, "leadership to move")
        admin2 = ck_admin.AdminClient({"bootstrap.servers": cl.brokers[other].bootstrap})
        for fut in admin2.incremental_alter_configs([ck_admin.ConfigResource(
                "topic", topic, incremental_configs=[ck_admin.ConfigEntry(
                    "min.insync.replicas", "1",
                    incremental_operation=ck_admin.AlterConfigOpType.SET)])]).values():
            fut.result(30)  # the new controller's broker writes the first one's znode
        produce([b"after-%d" % i for i in range(200)], cl.brokers[other].bootstrap)

        c = ck.Consumer({"bootstrap.servers": cl.brokers[other].bootstrap,
                         "group.id": "zk-tls", "enable.auto.commit": False})
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(acked) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        c.close()
        assert sorted(got) == sorted(acked) and len(acked) == 400

        # The znodes' ACLs, read by the brokers' own identity.
        zk = _tls_client(ca, broker.keystore_pem, cl.zk.secure_hosts)
        try:
            owner = ACL(31, Id("x509", BROKER_DN))
            world_read = ACL(1, Id("world", "anyone"))
            for path in (f"/brokers/ids/{other}", f"/brokers/topics/{topic}",
                         f"/config/topics/{topic}", "/controller", "/cluster/id"):
                assert sorted(zk.get_acls(path)[0]) == sorted([owner, world_read]), path
            assert zk.get_acls("/config/users/app")[0] == [owner]
            assert sorted(zk.get_acls("/kafka-acl/Topic/zk-tls")[0]) == sorted([owner, world_read])
            assert b"SCRAM-SHA-512" in zk.get("/config/users/app")[0]
        finally:
            zk.stop()
            zk.close()
        other_zk = _tls_client(ca, intruder.keystore_pem, cl.zk.secure_hosts)
        try:
            assert other_zk.get(f"/brokers/topics/{topic}")[0]  # world-readable
            with pytest.raises(NoAuthError):
                other_zk.set(f"/brokers/topics/{topic}", b"{}")
            with pytest.raises(NoAuthError):
                other_zk.get("/config/users/app")
            with pytest.raises(NoAuthError):
                other_zk.delete(f"/config/topics/{topic}")
        finally:
            other_zk.stop()
            other_zk.close()
    finally:
        cl.close()


def test_a_zookeeper_certificate_not_trusted_stops_the_start(tmp_path: Path) -> None:
    """A broker whose truststore does not hold the CA of ZooKeeper's certificate does
    not start, and says why; one checking the host name stops too when the certificate
    does not name the host it connected to."""
    ca = CertificateAuthority(tmp_path / "ca")
    other_ca = CertificateAuthority(tmp_path / "other-ca", "another CA")
    server = ca.issue("zookeeper", hosts=("localhost",))  # not 127.0.0.1
    broker = ca.issue("kafka-broker", client=True)
    zk = ZooKeeperServer(tls=(server.keystore_pem, ca.cert_pem))
    zk.start()
    try:
        base = {"zookeeper.connect": zk.secure_hosts, "zookeeper.ssl.client.enable": "true",
                "zookeeper.ssl.keystore.location": str(broker.keystore_pem),
                "zookeeper.session.timeout.ms": 4000}
        for name, extra, expect in (
                ("untrusted", {"zookeeper.ssl.truststore.location": str(other_ca.cert_pem)},
                 "certificate verify failed"),
                ("wrong-host", {"zookeeper.ssl.truststore.location": str(ca.cert_pem)},
                 "IP address mismatch")):
            d = Daemon(tmp_path / name, {**base, **extra}, dirs=1)
            with pytest.raises(RuntimeError) as info:
                d.start(timeout=60)
            d.kill()
            failed = [line for line in d.stderr().splitlines() if "start-up failed" in line]
            assert failed and expect in failed[-1], (str(info.value), d.stderr()[-3000:])
        # Host name checking off (an empty algorithm, Kafka's way): that broker starts.
        d = Daemon(tmp_path / "no-check", {
            **base, "zookeeper.ssl.truststore.location": str(ca.cert_pem),
            "zookeeper.ssl.endpoint.identification.algorithm": ""}, dirs=1)
        d.start(timeout=60)
        d.stop()
    finally:
        zk.close()


def test_zookeeper_tls_settings_that_cannot_work_are_refused(tmp_path: Path) -> None:
    """Each refused when the config loads, naming the key, before anything is bound."""
    ca = CertificateAuthority(tmp_path / "ca")
    client = ca.issue("kafka-broker", client=True)
    base = {"zookeeper.connect": "127.0.0.1:2181"}
    cases = [
        ({"zookeeper.set.acl": "true"}, "zookeeper.set.acl = true needs an identity"),
        ({"zookeeper.ssl.client.enable": "true", "zookeeper.set.acl": "true"},
         "needs zookeeper.ssl.keystore.location"),
        ({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.crl.enable": "true"},
         "zookeeper.ssl.crl.enable = true"),
        ({"zookeeper.ssl.client.enable": "true",
          "zookeeper.ssl.keystore.location": str(tmp_path / "missing.p12")},
         "zookeeper.ssl.keystore.location: cannot read"),
        ({"zookeeper.ssl.client.enable": "true",
          "zookeeper.ssl.keystore.location": str(client.pkcs12(tmp_path / "k.p12", "pw")),
          "zookeeper.ssl.keystore.password": "wrong"},
         "zookeeper.ssl.keystore.password (wrong password?)"),
        ({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.protocol": "TLSv1.1"},
         "zookeeper.ssl.protocol: TLSv1.1 is not served"),
        ({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.cipher.suites": "TLS_NOPE"},
         "zookeeper.ssl.cipher.suites: TLS_NOPE"),
    ]
    for extra, expect in cases:
        with pytest.raises(config_mod.ConfigError) as info:
            config_mod.from_mapping({**base, **extra})
        assert expect in str(info.value), (extra, str(info.value))
    # The defaults, as Kafka's: TLS 1.2 only (zookeeper.ssl.protocol), host names checked.
    got = config_mod.from_mapping({**base, "zookeeper.ssl.client.enable": "true"}).zookeeper_tls
    assert got is not None and got.check_hostname
    assert got.versions == (got.versions[0], got.versions[0]) and got.versions[0].name == "TLSv1_2"
    both = config_mod.from_mapping({**base, "zookeeper.ssl.client.enable": "true",
                                    "zookeeper.ssl.protocol": "TLS"}).zookeeper_tls
    assert both is not None and both.versions[0] < both.versions[1]
    # Keys given without zookeeper.ssl.client.enable: plaintext, and a warning says so.
    plain = config_mod.from_mapping({**base, "zookeeper.ssl.truststore.location": "/x"})
    assert plain.zookeeper_tls is None
    assert any("zookeeper.ssl.client.enable is false" in w for w in plain.warnings)
