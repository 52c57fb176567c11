"""SASL listeners (Kafka's SASL_PLAINTEXT and SASL_SSL, mechanisms PLAIN and
SCRAM-SHA-256/512): logins by confluent-kafka, kafka-python, aiokafka and kcat; SCRAM
credentials set and removed through the Kafka protocol (and through ZooKeeper for the
inter-broker user); refusals of bad logins, of requests before a login and of settings
that cannot work; the tools logging in; and a cluster whose brokers log in to each other.
Real daemons and ZooKeeper.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslHandshakeRequest

from daemon import config as config_mod

from .cluster_helpers import (
    INTER_BROKER_USER,
    Cluster,
    peers_reached,
    secure_inter_broker,
    wait_for,
)
from .daemon_helpers import REPO, Daemon, RawClient, aiokafka_read, write_config
from .test_controlled_shutdown import restart_each_under_load
from .test_replication import create
from .tls_helpers import CertificateAuthority
from .zkserver import free_port

KCAT = shutil.which("kcat")
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=90)


def sasl_daemon(tmp_path: Path, **extra: Any) -> tuple[Daemon, int, int, CertificateAuthority]:
    """PLAINTEXT on its port (admin), SASL_PLAINTEXT and SASL_SSL on two more, with PLAIN
    (alice, admin) and SCRAM enabled."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker1")
    d = Daemon(tmp_path / "d", {"num.partitions": 1})
    sp, ss = free_port(), free_port()
    d.values.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{d.port},SASL_PLAINTEXT://127.0.0.1:{sp},"
                     f"SASL_SSL://127.0.0.1:{ss}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.location": str(broker.keystore_pem), **extra})
    d.config = write_config(d.root / "logkeeper.toml", d.values)
    return d, sp, ss, ca


def ck_conf(port: int, mechanism: str, user: str, password: str, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            **more}


def produce(conf: dict[str, Any], topic: str, values: list[bytes], wait: float = 10) -> int:
    """Unsent records after a flush of at most `wait` s (0: all acknowledged)."""
    p = ck.Producer(conf)
    for v in values:
        p.produce(topic, v)
    return p.flush(wait)


def kp_read(port: int, topic: str, mechanism: str, user: str, password: str,
            bootstrap_timeout_ms: int = 30000) -> list[bytes]:
    kc = KafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{port}",
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                       sasl_plain_username=user, sasl_plain_password=password,
                       auto_offset_reset="earliest", consumer_timeout_ms=2000,
                       bootstrap_timeout_ms=bootstrap_timeout_ms)
    try:
        return [m.value for m in kc]
    finally:
        kc.close()


def aio_read(port: int, topic: str, mechanism: str, user: str, password: str,
             n: int) -> list[bytes]:
    return aiokafka_read(topic, n, bootstrap_servers=f"127.0.0.1:{port}",
                         security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                         sasl_plain_username=user, sasl_plain_password=password)


def test_plain_and_scram_logins_with_every_client(tmp_path: Path) -> None:
    """PLAIN users from the listener's JAAS config, SCRAM users set with `logkeeper
    configs --user`: each client logs in with each and reads what the others wrote; a
    wrong password, a removed credential or a user without one is refused with Kafka's
    reason; SASL_SSL carries the same logins over TLS; the credentials outlive a
    restart."""
    d, sp, ss, ca = sasl_daemon(tmp_path)
    with d:
        assert "with SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512" in d.stderr()
        values = [b"plain-%d" % i for i in range(50)]
        assert produce(ck_conf(sp, "PLAIN", "alice", "alice-secret"), "p", values) == 0
        assert kp_read(sp, "p", "PLAIN", "admin", "admin-secret") == values
        assert aio_read(sp, "p", "PLAIN", "alice", "alice-secret", 50) == values
        errors: list[str] = []
        bad = ck_conf(sp, "PLAIN", "alice", "nope", error_cb=lambda e: errors.append(str(e)))
        assert produce(bad, "p", [b"x"], wait=2) == 1
        assert any("Authentication failed: Invalid username or password" in e for e in errors)

        # SCRAM: credentials set over the PLAINTEXT listener, as an admin would.
        r = cli("configs", "alter", "--user", "bob", "--bootstrap-server", f"127.0.0.1:{d.port}",
                "--add-config", "SCRAM-SHA-256=[iterations=8192,password=bob-256],"
                "SCRAM-SHA-512=[password=bob-512]")
        assert r.returncode == 0, r.stderr
        r = cli("configs", "describe", "--user", "bob", "--bootstrap-server", f"127.0.0.1:{d.port}")
        assert r.stdout.strip() == ("SCRAM credential configs for user-principal 'bob' are "
                                    "SCRAM-SHA-256=iterations=8192, "
                                    "SCRAM-SHA-512=iterations=4096"), r.stdout + r.stderr
        # Every user's, asked as librdkafka asks for all (an empty list).
        admin = ck_admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{d.port}"})
        every = admin.describe_user_scram_credentials().result(30)
        assert sorted(every) == ["bob"]
        assert sorted(i.iterations for i in every["bob"].scram_credential_infos) == [4096, 8192]
        scram = [b"scram-%d" % i for i in range(30)]
        assert produce(ck_conf(sp, "SCRAM-SHA-256", "bob", "bob-256"), "s", scram) == 0
        assert kp_read(sp, "s", "SCRAM-SHA-512", "bob", "bob-512") == scram
        assert aio_read(sp, "s", "SCRAM-SHA-256", "bob", "bob-256", 30) == scram
        with pytest.raises(KafkaError):  # kafka-python gives up bootstrapping
            kp_read(sp, "s", "SCRAM-SHA-256", "bob", "bob-512", 2000)
        assert ("failed to log in with SCRAM-SHA-256 on listener SASL_PLAINTEXT: "
                "Authentication failed during authentication due to invalid credentials "
                "with SASL mechanism SCRAM-SHA-256") in d.stderr()
        with pytest.raises(KafkaError):
            kp_read(sp, "s", "SCRAM-SHA-256", "carol", "whatever", 2000)
        if KCAT:
            out = subprocess.run(
                [KCAT, "-b", f"127.0.0.1:{sp}", "-X", "security.protocol=sasl_plaintext", "-X",
                 "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=bob", "-X",
                 "sasl.password=bob-512", "-C", "-t", "s", "-e", "-f", "%s\n"],
                capture_output=True, timeout=60, check=True)
            assert out.stdout.split() == scram
        # Over TLS: the same logins on SASL_SSL.
        tls = {"security.protocol": "sasl_ssl", "ssl.ca.location": str(ca.cert_pem),
               "bootstrap.servers": f"localhost:{ss}"}
        assert produce({**ck_conf(ss, "SCRAM-SHA-512", "bob", "bob-512"), **tls}, "s",
                       [b"over-tls"]) == 0
        # A removed credential no longer logs in; the other still does.
        r = cli("configs", "alter", "--user", "bob", "--bootstrap-server", f"127.0.0.1:{d.port}",
                "--delete-config", "SCRAM-SHA-512")
        assert r.returncode == 0, r.stderr
        with pytest.raises(KafkaError):
            kp_read(sp, "s", "SCRAM-SHA-512", "bob", "bob-512", 2000)
        assert len(kp_read(sp, "s", "SCRAM-SHA-256", "bob", "bob-256")) == 31
        d.stop()
        d.start()
        assert len(kp_read(sp, "s", "SCRAM-SHA-256", "bob", "bob-256")) == 31


def test_nothing_is_served_before_a_login(tmp_path: Path) -> None:
    """On a SASL listener: Metadata before a login closes the connection; ApiVersions is
    answered; a mechanism not enabled is refused with the enabled ones; a v0 handshake
    takes a bare PLAIN token (pre-1.0 clients) and then serves. On a listener without
    SASL a handshake answers ILLEGAL_SASL_STATE."""
    d, sp, _ss, _ca = sasl_daemon(tmp_path)
    with d:
        c = RawClient(sp)
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
        with pytest.raises(ConnectionError):  # closed, unanswered
            c.request(MetadataRequest(topics=None), 1)
        c.close()
        c = RawClient(sp)
        resp = c.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert resp.error_code == 33
        assert sorted(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        c.close()
        # v0: the handshake, then the token bare (size-prefixed, no request header).
        c = RawClient(sp)
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0alice-secret"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.recv_frame() == b""
        assert c.request(MetadataRequest(topics=None), 1).brokers
        c.close()
        c = RawClient(sp)
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0wrong"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.recv_frame() is None  # closed without an answer, as Kafka's v0 does
        c.close()
        plain = RawClient(d.port)
        assert plain.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 34
        assert plain.request(MetadataRequest(topics=None), 1).brokers  # still served
        plain.close()
        assert "failed to log in with PLAIN on listener SASL_PLAINTEXT" in d.stderr()
        assert "before its SASL login" in d.stderr()
        _, metrics = d.http("/metrics")
        text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
        name = "kafka_server_socketservermetrics_authentication_total"
        assert f'{name}{{listener="SASL_PLAINTEXT",result="successful"}} 1.0' in text
        assert f'{name}{{listener="SASL_PLAINTEXT",result="failed"}} 1.0' in text


def test_sasl_settings_that_cannot_work_are_refused() -> None:
    def refused(**keys: Any) -> str:
        values = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", **keys}
        with pytest.raises(config_mod.ConfigError) as err:
            config_mod.from_mapping(values)
        return str(err.value)

    # Kafka's default mechanism is Kerberos, which is not served.
    assert "GSSAPI is not served" in refused()
    assert "PLAIN needs its users" in refused(**{"sasl.enabled.mechanisms": "PLAIN"})
    assert "expected `<LoginModule> required" in refused(**{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": "PlainLoginModule user_a=b"})
    assert "names org.apache.kafka.common.security.scram.ScramLoginModule" in refused(**{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"})
    assert "OAUTHBEARER is not served" in refused(**{"sasl.enabled.mechanisms": "OAUTHBEARER"})
    # In a cluster the brokers must be able to log in to each other.
    zk = {"zookeeper.connect": "127.0.0.1:2181", "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    assert "sasl.mechanism.inter.broker.protocol = GSSAPI is not enabled" in refused(**zk)
    assert 'set username="..." password="..."' in refused(
        **zk, **{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"})
    cfg = config_mod.from_mapping({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093", **zk,
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="broker" password="pw";'})
    assert cfg.inter_broker_login == ("SCRAM-SHA-256", "broker", "pw")
    assert "pw" not in repr(cfg.sasl)


def test_the_tools_log_in(tmp_path: Path) -> None:
    """`--command-config` (admin commands) and the client config files (console and perf
    tools) with security.protocol=SASL_SSL, sasl.mechanism and sasl.jaas.config, as
    Kafka's tools take them; a wrong password is a clear error."""
    d, _sp, ss, ca = sasl_daemon(tmp_path)
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     f"ssl.truststore.location={ca.cert_pem}\nssl.truststore.type=PEM\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                     'required username="alice" password="alice-secret";\n')
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(props.read_text().replace("alice-secret", "guess"))
    at = ["--bootstrap-server", f"localhost:{ss}"]
    with d:
        r = cli("topics", "create", "--topic", "t", "--partitions", "2", *at,
                "--command-config", str(props))
        assert r.returncode == 0, r.stderr
        r = cli("topics", "list", *at, "--command-config", str(wrong))
        assert r.returncode == 2 and "SASL login as alice with PLAIN failed" in r.stderr, r.stderr
        assert "Invalid username or password" in r.stderr
        r = cli("console-producer", "--topic", "t", *at, "--producer.config", str(props),
                stdin="".join(f"l{i}\n" for i in range(10)))
        assert r.returncode == 0, r.stderr
        r = cli("producer-perf-test", "--topic", "t", "--num-records", "200", "--record-size",
                "50", "--throughput", "-1", *at, "--producer.config", str(props))
        assert r.returncode == 0 and "200 records sent" in r.stdout, r.stderr
        r = cli("console-consumer", "--topic", "t", "--from-beginning", "--max-messages", "210",
                *at, "--consumer.config", str(props), "--timeout-ms", "20000")
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 210, r.stderr
        r = cli("get-offsets", "--topic", "t", *at, "--command-config", str(props))
        assert sum(int(line.rsplit(":", 1)[1]) for line in r.stdout.split()) == 210, r.stderr
        # `--config`: the daemon's file, whose inter-broker listener is now its
        # SASL_PLAINTEXT one: the tool goes there, not to the first listener (here a
        # port nobody serves), and logs in as the broker's own JAAS username (admin).
        first, *rest = d.values["listeners"].split(",")
        own = write_config(tmp_path / "sasl-inter.toml", {
            **d.values, "listeners": ",".join([f"PLAINTEXT://127.0.0.1:{free_port()}", *rest]),
            "inter.broker.listener.name": "SASL_PLAINTEXT"})
        r = cli("topics", "list", "--config", str(own))
        assert r.returncode == 0 and "t" in r.stdout.split(), r.stderr


def test_a_cluster_whose_brokers_log_in_to_each_other(tmp_path: Path) -> None:
    """Three brokers whose inter-broker listener is SASL_PLAINTEXT with SCRAM-SHA-512:
    the brokers' user is written to ZooKeeper before any broker runs (`logkeeper configs
    --zookeeper`), and every follower, the controller and each stopping broker log in
    with it. Under idempotent acks=all load each broker in turn stops (a controlled
    shutdown) and starts again; every acknowledged record is read once and the replicas
    are byte-identical. A client logs in on any broker with a SCRAM user added later
    through one of them (the change reaches every broker)."""
    topic, parts = "sasl", 3
    cl = Cluster(tmp_path / "cl", dirs=1)
    secure, _ = secure_inter_broker(cl, "SASL_PLAINTEXT", tmp_path, create_user=False)
    user, password = INTER_BROKER_USER
    r = cli("configs", "alter", "--user", user, "--zookeeper", cl.zk.hosts,
            "--add-config", f"SCRAM-SHA-512=[password={password}]")
    assert r.returncode == 0, r.stderr
    with cl:
        create(cl, topic, parts)
        restart_each_under_load(cl, topic, parts)
        r = cli("configs", "alter", "--user", "app", "--bootstrap-server",
                cl.brokers[1].bootstrap, "--add-config", "SCRAM-SHA-512=[password=app-pw]")
        assert r.returncode == 0, r.stderr
        for b in cl.brokers:
            conf = ck_conf(secure[b], "SCRAM-SHA-512", "app", "app-pw")
            wait_for(lambda conf=conf: produce(conf, topic, [b"late"]) == 0, 30,
                     f"the app user logging in on broker {b}")
        plain = {d.port for d in cl.brokers.values()}
        for b, remote in peers_reached(cl).items():
            assert any(p in secure.values() for p in remote), (b, remote)
            assert not any(p in plain for p in remote), (b, remote)
        # No login failed, but for a broker asked before it had read the credentials.
        failed = [line for d in cl.brokers.values() for line in d.stderr().splitlines()
                  if "failed to log in" in line]
        assert all("has not read the SCRAM credentials" in line for line in failed), failed



def test_a_kafka_server_properties_with_sasl_loads(tmp_path: Path) -> None:
    """Kafka's docs' form of the JAAS keys in server.properties, continued over lines
    with backslashes, loads as it does in Kafka."""
    props = tmp_path / "server.properties"
    props.write_text(
        "broker.id=0\nlog.dirs=" + str(tmp_path / "d") + "\n"
        "listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n"
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="admin" \\\n    password="admin-secret" \\\n'
        '    user_admin="admin-secret" \\\n    user_alice="alice-secret";\n'
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="admin" \\\n    password="admin-secret";\n')
    cfg = config_mod.load(str(props))
    own = cfg.sasl["SASL_PLAINTEXT"]
    assert own.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert dict(own.plain_users) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert dict(own.logins) == {"PLAIN": ("admin", "admin-secret"),
                                "SCRAM-SHA-256": ("admin", "admin-secret")}


def test_logins_expire_and_are_renewed_on_the_connection(tmp_path: Path) -> None:
    """connections.max.reauth.ms (KIP-368): confluent-kafka, told the session lifetime,
    logs in again on its connections while it produces, with no error; once bob's
    SCRAM credential is removed, his next login fails and his producer stops; a client
    that does not log in again (a raw v1 login, then silence past the lifetime) has its
    connection closed at its next request."""
    import time

    from daemon.security.sasl import login_blocking

    from .sick_helpers import metric

    d, sp, _, _ = sasl_daemon(tmp_path, **{"connections.max.reauth.ms": 1500})
    with d:
        r = cli("configs", "alter", "--user", "bob", "--bootstrap-server", f"127.0.0.1:{d.port}",
                "--add-config", "SCRAM-SHA-256=[password=bob-secret]")
        assert r.returncode == 0, r.stderr
        errors: list[str] = []
        p = ck.Producer(ck_conf(sp, "SCRAM-SHA-256", "bob", "bob-secret",
                                error_cb=lambda e: errors.append(str(e))))
        acked: list[bytes] = []
        failed: list[str] = []

        def report(err: Any, msg: Any) -> None:
            (failed.append(str(err)) if err else acked.append(msg.value()))

        logins = metric(d, "kafka_server_socketservermetrics_authentication_total",
                        listener="SASL_PLAINTEXT", result="successful") or 0
        sent, until = 0, time.monotonic() + 5  # a few lifetimes
        while time.monotonic() < until:
            p.produce("reauth", b"r%d" % sent, on_delivery=report)
            sent += 1
            time.sleep(0.05)
            p.poll(0)
        assert p.flush(10) == 0
        assert len(acked) == sent and not failed and not errors, (failed, errors)
        renewed = metric(d, "kafka_server_socketservermetrics_authentication_total",
                         listener="SASL_PLAINTEXT", result="successful")
        assert renewed is not None and renewed >= logins + 3, (logins, renewed)

        r = cli("configs", "alter", "--user", "bob", "--bootstrap-server", f"127.0.0.1:{d.port}",
                "--delete-config", "SCRAM-SHA-256")
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not errors:
            p.produce("reauth", b"late", on_delivery=report)
            p.poll(0.2)
        p.flush(3)
        assert any("uthenticat" in e for e in errors), errors
        assert "failed to log in with SCRAM-SHA-256" in d.stderr()

        c = RawClient(sp, client_id="quiet")
        login_blocking(c.sock, ("PLAIN", "alice", "alice-secret"), client_id="quiet",
                       peer="the broker")
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
        time.sleep(2)
        with pytest.raises(ConnectionError):
            c.request(ApiVersionsRequest(), 0)
        c.close()
        assert "its SASL session as User:alice expired" in d.stderr()

        # A re-authentication is as the same principal, or the connection closes.
        c = RawClient(sp, client_id="switch")
        login_blocking(c.sock, ("PLAIN", "alice", "alice-secret"), client_id="switch",
                       peer="the broker")
        with pytest.raises(Exception, match="Cannot change principals"):
            login_blocking(c.sock, ("PLAIN", "admin", "admin-secret"), client_id="switch",
                           peer="the broker")
        assert c.closed_by_server()
        c.close()


def test_a_brokers_own_connections_log_in_again_before_their_session_ends(
        tmp_path: Path) -> None:
    """A broker's connections to another (a follower's fetches, the transaction markers:
    `Peer`) log in again on the connection before the session the other broker gave
    ends, as Kafka's inter-broker clients do (KIP-368): requests every 0.2 s over several
    lifetimes of connections.max.reauth.ms are all answered, on one connection, and the
    other broker closes none for an expired login."""
    import asyncio
    import time

    from daemon.wire.peer import Peer

    d, sp, _, _ = sasl_daemon(tmp_path, **{"connections.max.reauth.ms": 1500})
    with d:
        async def run() -> tuple[int, set[int], bool]:
            peer = Peer("127.0.0.1", sp, client_id="follower",
                        login=("PLAIN", "alice", "alice-secret"))
            codes = [(await peer.request(ApiVersionsRequest(), 0)).error_code]
            connection = peer._answers
            until = time.monotonic() + 5
            while time.monotonic() < until:
                await asyncio.sleep(0.2)
                codes.append((await peer.request(ApiVersionsRequest(), 0)).error_code)
            same = peer._answers is connection
            await peer.close()
            return len(codes), set(codes), same

        count, codes, same = asyncio.run(run())
        assert count > 20 and codes == {0} and same, (count, codes, same)
        assert "expired without a new login" not in d.stderr()


def test_on_sasl_ssl_the_login_names_the_principal_not_the_certificate(
        tmp_path: Path) -> None:
    """A SASL_SSL listener asking for client certificates, with mapping rules that apply
    to none of this client's: as in Kafka, the SASL login names the principal, so the
    client's PLAIN login gets through and it produces."""
    d, _, ss, ca = sasl_daemon(tmp_path, **{
        "ssl.client.auth": "required", "ssl.principal.mapping.rules": "RULE:^CN=(broker[0-9]+)$/$1/"})
    d.values["ssl.truststore.location"] = str(ca.cert_pem)
    d.config = write_config(d.root / "logkeeper.toml", d.values)
    client = ca.issue("Alice", org="acme", client=True)
    conf = {"bootstrap.servers": f"localhost:{ss}", "security.protocol": "sasl_ssl",
            "ssl.ca.location": str(ca.cert_pem), "ssl.certificate.location": str(client.cert_pem),
            "ssl.key.location": str(client.key_pem), "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-secret"}
    with d:
        assert produce(conf, "mapped", [b"a", b"b"]) == 0
        assert "No rules apply" not in d.stderr()
