"""ACLs (`authorizer.class.name = kafka.security.authorizer.AclAuthorizer`): Kafka's rules
decided by the authorizer (prefixed and wildcard patterns, DENY over ALLOW, implied
Describe, hosts, super users, allow.everyone.if.no.acl.found); ACLs set and removed with
kafka-python's and confluent-kafka's admin clients and `logkeeper acls`; what SASL
users, certificate holders and anonymous clients may then do with confluent-kafka,
kafka-python and kcat; ACLs kept across a restart, and in a cluster in ZooKeeper
where Kafka keeps them. Real daemons, clients and ZooKeeper.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as CkResourceType
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    NewTopic,
    ResourcePattern,
    ResourceType,
)
from kafka.errors import TopicAuthorizationFailedError

from daemon.security.acls import (
    AclError,
    AclFilter,
    Authorizer,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    validate,
)
from daemon.security.acls import ResourceType as RT

from .cluster_helpers import INTER_BROKER_USER, Cluster, secure_inter_broker, wait_for
from .daemon_helpers import REPO, Daemon, running, write_config
from .sick_helpers import metric
from .test_replication import create, full_isr
from .tls_helpers import CertificateAuthority
from .zkserver import free_port

KCAT = shutil.which("kcat")
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
             "carol": "carol-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")


# ---- the rules, on the authorizer alone ----

def _acl(rtype: RT, name: str, principal: str, op: Operation,
         permission: Permission = Permission.ALLOW, pattern: PatternType = PatternType.LITERAL,
         host: str = "*") -> tuple[Resource, Entry]:
    return Resource(rtype, name, pattern), Entry(principal, host, op, permission)


def test_the_authorizer_decides_as_kafkas() -> None:
    a = Authorizer(super_users=["User:admin"])
    a.load([
        _acl(RT.TOPIC, "orders", "User:alice", Operation.WRITE),
        _acl(RT.TOPIC, "ord", "User:bob", Operation.READ, pattern=PatternType.PREFIXED),
        _acl(RT.TOPIC, "orders", "User:bob", Operation.READ, Permission.DENY, host="10.0.0.9"),
        _acl(RT.TOPIC, "*", "User:*", Operation.DESCRIBE_CONFIGS),
        _acl(RT.GROUP, "g", "User:alice", Operation.ALL),
        _acl(RT.CLUSTER, "kafka-cluster", "User:carol", Operation.ALTER_CONFIGS),
    ])

    def may(principal: str, op: Operation, rtype: RT, name: str, host: str = "127.0.0.1") -> bool:
        return a.authorize(principal, host, op, rtype, name)

    assert may("User:alice", Operation.WRITE, RT.TOPIC, "orders")
    assert not may("User:alice", Operation.READ, RT.TOPIC, "orders")
    # Write implies Describe; a prefixed Read covers every name it begins.
    assert may("User:alice", Operation.DESCRIBE, RT.TOPIC, "orders")
    assert may("User:bob", Operation.READ, RT.TOPIC, "orders-eu")
    assert not may("User:bob", Operation.READ, RT.TOPIC, "or")
    # A DENY wins, from its host only.
    assert not may("User:bob", Operation.READ, RT.TOPIC, "orders", host="10.0.0.9")
    assert may("User:bob", Operation.READ, RT.TOPIC, "orders", host="10.0.0.8")
    # The wildcard resource and principal; DescribeConfigs is not Describe.
    assert may("User:zed", Operation.DESCRIBE_CONFIGS, RT.TOPIC, "anything")
    assert not may("User:zed", Operation.DESCRIBE, RT.TOPIC, "anything")
    # All covers every operation; AlterConfigs implies DescribeConfigs.
    assert may("User:alice", Operation.DELETE, RT.GROUP, "g")
    assert may("User:carol", Operation.DESCRIBE_CONFIGS, RT.CLUSTER, "kafka-cluster")
    assert not may("User:carol", Operation.ALTER, RT.CLUSTER, "kafka-cluster")
    # A super user may do anything; nobody else may touch a resource no ACL names.
    assert may("User:admin", Operation.DELETE, RT.TOPIC, "unnamed")
    assert not may("User:alice", Operation.READ, RT.GROUP, "other")
    assert a.authorize_any("User:alice", "h", Operation.WRITE, RT.TOPIC)
    assert not a.authorize_any("User:bob", "h", Operation.WRITE, RT.TOPIC)
    assert a.authorized_operations("User:alice", "h", RT.TOPIC, "orders") == {
        Operation.WRITE, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS}

    # allow.everyone.if.no.acl.found opens only resources no ACL names (of anyone).
    open_ = Authorizer(allow_if_no_acl=True)
    open_.load([_acl(RT.TOPIC, "orders", "User:alice", Operation.READ)])
    assert open_.authorize("User:zed", "h", Operation.WRITE, RT.TOPIC, "free")
    assert not open_.authorize("User:zed", "h", Operation.READ, RT.TOPIC, "orders")
    # Before its ACLs are read, the authorizer allows only super users.
    assert not Authorizer(allow_if_no_acl=True).authorize("User:z", "h", Operation.READ,
                                                          RT.TOPIC, "t")

    # Filters (DescribeAcls, DeleteAcls): MATCH finds every pattern that applies.
    found = a.bindings(AclFilter(RT.TOPIC, "orders", PatternType.MATCH))
    assert {(r.name, r.pattern) for r, _ in found} == {
        ("orders", PatternType.LITERAL), ("ord", PatternType.PREFIXED), ("*", PatternType.LITERAL)}
    assert len(a.bindings(AclFilter(principal="User:bob"))) == 2
    assert a.bindings(AclFilter(RT.TOPIC, "orders", PatternType.LITERAL,
                                permission=Permission.DENY))[0][1].host == "10.0.0.9"

    for resource, entry, why in [
        (Resource(RT.CLUSTER, "c"), Entry("User:a", "*", Operation.ALTER, Permission.ALLOW),
         "The only valid name for the CLUSTER resource is kafka-cluster"),
        (Resource(RT.TOPIC, "t"), Entry("alice", "*", Operation.READ, Permission.ALLOW),
         "Invalid principal"),
        (Resource(RT.TOPIC, "t"), Entry("User:a", "*", Operation.CLUSTER_ACTION, Permission.ALLOW),
         "Operation ClusterAction does not apply to a Topic"),
        (Resource(RT.TOPIC, "t", PatternType.MATCH),
         Entry("User:a", "*", Operation.READ, Permission.ALLOW), "Invalid ACL creation"),
        (Resource(RT.TOPIC, ""), Entry("User:a", "*", Operation.READ, Permission.ALLOW),
         "Invalid empty resource name"),
    ]:
        with pytest.raises(AclError, match=why):
            validate(resource, entry)


def test_the_authorizers_lookups_find_what_a_scan_finds() -> None:
    """The index the authorizer decides from (a dict per type and pattern, the prefix
    lengths in use), kept up to date one resource at a time, finds for each resource
    exactly the patterns a scan of every ACL finds, over random changes."""
    import random

    rng = random.Random(7)
    a = Authorizer()
    a.load([])
    names = ["a", "ab", "abc", "b", "*", "abcd", "x"]
    for _ in range(3000):
        resource = Resource(rng.choice([RT.TOPIC, RT.GROUP]), rng.choice(names),
                            rng.choice([PatternType.LITERAL, PatternType.PREFIXED]))
        a.replace(resource, {Entry(rng.choice(["User:a", "User:*"]), "*",
                                   rng.choice([Operation.READ, Operation.ALL]),
                                   rng.choice([Permission.ALLOW, Permission.DENY]))
                             for _ in range(rng.randrange(0, 3))})
        rtype, name = rng.choice([RT.TOPIC, RT.GROUP]), rng.choice(["abcde", "ab", "x", "q"])
        scanned = sorted(sorted(e) for r, e in a.acls.items() if r.covers(rtype, name))
        assert sorted(sorted(e) for e in a._covering(rtype, name)) == scanned


# ---- a standalone broker, SASL users ----

def acl_daemon(tmp_path: Path, **extra: Any) -> tuple[Daemon, int]:
    """SASL_PLAINTEXT (PLAIN: admin, a super user, alice, bob, carol) and PLAINTEXT
    (anonymous), with Kafka's AclAuthorizer."""
    d = Daemon(tmp_path / "d", {"num.partitions": 1})
    sp = free_port()
    d.values.update({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sp},PLAINTEXT://127.0.0.1:{d.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:admin", **extra})
    d.config = write_config(d.root / "logkeeper.toml", d.values)
    return d, sp


_ADMIN_CLIENTS: list[KafkaAdminClient] = []


@pytest.fixture(autouse=True)
def _close_admin_clients() -> Iterator[None]:
    """kafka-python's clients each run an IO thread until closed: one left open keeps
    reconnecting to a stopped daemon for the rest of the suite."""
    yield
    while _ADMIN_CLIENTS:
        _ADMIN_CLIENTS.pop().close()


def kp_admin(port: int, user: str) -> KafkaAdminClient:
    """A kafka-python admin client logged in as `user`, closed when the test ends."""
    client = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}",
                              security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                              sasl_plain_username=user, sasl_plain_password=PASSWORDS[user])
    _ADMIN_CLIENTS.append(client)
    return client


def ck_conf(port: int, user: str, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user],
            **more}


def ck_produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[str]:
    """Each record's delivery error ('' when acknowledged)."""
    p = ck.Producer(conf)
    out: list[str] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: out.append(err.name() if err else ""))
    p.flush(20)
    return out


def ck_consume(conf: dict[str, Any], topic: str, n: int, timeout: float = 20) -> tuple[
        list[bytes], str]:
    """(values read, the first error's name) from `topic` in group conf['group.id']."""
    c = ck.Consumer({"auto.offset.reset": "earliest", **conf})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                return got, m.error().name()
            got.append(m.value())
        return got, ""
    finally:
        c.close()


def acls_cli(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli", "acls", "--config", str(d.config),
                           *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_acls_decide_what_each_user_may_do(tmp_path: Path) -> None:
    """Set with kafka-python's admin client and `logkeeper acls` (which logs in as the
    broker's own super user): alice may write `orders` (and so be an idempotent
    producer) but not `other`; bob reads every `ord*` topic in group g1 only; a DENY
    from 127.0.0.1 stops him until it is removed; nobody else sees the topics, an
    anonymous PLAINTEXT client included; alice may neither create topics nor ACLs
    until granted; the ACLs outlive a restart. Each refusal is Kafka's error."""
    d, sp = acl_daemon(tmp_path)
    with d:
        admin = kp_admin(sp, "admin")
        admin.create_topics([NewTopic("orders", 1, 1), NewTopic("other", 1, 1)])
        made = admin.create_acls([
            ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, "orders"))])
        assert made["failed"] == [] and len(made["succeeded"]) == 1
        r = acls_cli(d, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "ord",
                     "--resource-pattern-type", "prefixed", "--group", "g1")
        assert r.returncode == 0, r.stderr
        assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, " \
               "patternType=PREFIXED)`" in r.stdout
        assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in r.stdout

        values = [b"order-%d" % i for i in range(40)]
        assert ck_produce(ck_conf(sp, "alice", **{"enable.idempotence": True}), "orders",
                          values) == [""] * 40
        assert ck_produce(ck_conf(sp, "alice"), "other", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]
        assert ck_produce(ck_conf(sp, "carol"), "orders", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]

        assert ck_consume(ck_conf(sp, "bob", **{"group.id": "g1"}), "orders", 40) == (values, "")
        _, err = ck_consume(ck_conf(sp, "bob", **{"group.id": "g2"}), "orders", 1)
        assert err == "GROUP_AUTHORIZATION_FAILED"
        _, err = ck_consume(ck_conf(sp, "alice", **{"group.id": "g1"}), "orders", 1)
        assert err == "GROUP_AUTHORIZATION_FAILED"  # her Write gives no group Read

        # Who sees which topics: Describe (implied by Write or Read) decides.
        assert set(kp_admin(sp, "alice").list_topics()) == {"orders"}
        assert set(kp_admin(sp, "bob").list_topics()) == {"orders"}
        assert set(kp_admin(sp, "carol").list_topics()) == set()
        anonymous = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        assert set(anonymous.list_topics()) == set()
        anonymous.close()
        ops = kp_admin(sp, "alice").describe_topics(["orders"])[0]["authorized_operations"]
        assert set(ops) == {"WRITE", "DESCRIBE"}

        # DENY over ALLOW, from the host it names.
        ck_admin = AdminClient(ck_conf(sp, "admin"))
        deny = AclBinding(CkResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                          "User:bob", "127.0.0.1", AclOperation.READ, AclPermissionType.DENY)
        for f in ck_admin.create_acls([deny]).values():
            f.result(10)
        _, err = ck_consume(ck_conf(sp, "bob", **{"group.id": "g1"}), "orders", 1)
        assert err == "TOPIC_AUTHORIZATION_FAILED"
        listed = ck_admin.describe_acls(AclBindingFilter(
            CkResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None,
            AclOperation.ANY, AclPermissionType.ANY)).result(10)
        assert {(b.name, b.principal, b.permission_type) for b in listed} == {
            ("orders", "User:alice", AclPermissionType.ALLOW),
            ("ord", "User:bob", AclPermissionType.ALLOW),
            ("orders", "User:bob", AclPermissionType.DENY)}
        r = acls_cli(d, "--remove", "--deny-principal", "User:bob", "--deny-host", "127.0.0.1",
                     "--operation", "Read", "--topic", "orders")
        assert r.returncode == 0, r.stderr
        assert "Removing ACLs" in r.stdout

        # Only a principal with Alter on the cluster changes ACLs; Create to create topics.
        alice = kp_admin(sp, "alice")
        refused = alice.create_acls([ACL("User:alice", "*", ACLOperation.ALL,
                                         ACLPermissionType.ALLOW,
                                         ResourcePattern(ResourceType.TOPIC, "*"))])
        assert refused["succeeded"] == [] and \
            refused["failed"][0].__name__ == "ClusterAuthorizationFailedError"
        with pytest.raises(TopicAuthorizationFailedError):
            alice.create_topics([NewTopic("mine", 1, 1)])
        assert acls_cli(d, "--add", "--allow-principal", "User:alice", "--operation", "Create",
                        "--cluster").returncode == 0
        alice.create_topics([NewTopic("mine", 1, 1)])
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "acls", "--bootstrap-server",
                            d.bootstrap, "--list"], cwd=REPO, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1 and "ClusterAuthorizationFailed" in r.stderr  # anonymous

        # The authorizer's metrics: the ACLs held (alice Write and Create, bob's three),
        # and the decisions, denials among them.
        assert metric(d, "kafka_security_authorizer_acls_total_count") == 5
        assert metric(d, "kafka_security_authorizer_authorization_total",
                      result="denied") >= 8
        assert metric(d, "kafka_security_authorizer_authorization_total",
                      result="allowed") > 40

        d.stop()
        d.start()
        # The group ACL is prefixed too: g1-again is bob's.
        assert ck_consume(ck_conf(sp, "bob", **{"group.id": "g1-again"}), "orders",
                          40) == (values, "")
        assert ck_produce(ck_conf(sp, "alice"), "other", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]
        listed = acls_cli(d, "--list", "--principal", "User:alice").stdout
        assert "operation=WRITE" in listed and "operation=CREATE" in listed
        if KCAT:
            out = subprocess.run(
                [KCAT, "-C", "-b", f"127.0.0.1:{sp}", "-t", "orders", "-e", "-q",
                 "-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanisms=PLAIN",
                 "-X", "sasl.username=carol", "-X", "sasl.password=carol-secret"],
                capture_output=True, text=True, timeout=60)
            assert out.returncode != 0 and "authoriz" in (out.stderr + out.stdout).lower()
        assert ("Principal = User:carol is Denied operation = DESCRIBE from host = 127.0.0.1 "
                "on resource = Topic:orders") in d.stderr()


def test_everyone_allowed_where_no_acl_names_the_resource(tmp_path: Path) -> None:
    """allow.everyone.if.no.acl.found=true: a topic no ACL names is open to every
    client, anonymous ones included; one with an ACL is closed to all but its grantees."""
    d, sp = acl_daemon(tmp_path, **{"allow.everyone.if.no.acl.found": True})
    with d:
        assert ck_produce({"bootstrap.servers": d.bootstrap}, "free", [b"a", b"b"]) == ["", ""]
        kp_admin(sp, "admin").create_acls([ACL(
            "User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.TOPIC, "closed"))])
        kp_admin(sp, "admin").create_topics([NewTopic("closed", 1, 1)])
        assert ck_produce(ck_conf(sp, "bob"), "closed", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]
        kc = KafkaConsumer("free", bootstrap_servers=d.bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=3000)
        try:
            assert [m.value for m in kc] == [b"a", b"b"]
        finally:
            kc.close()


# ---- certificates as principals ----

def test_certificate_subjects_are_principals(tmp_path: Path) -> None:
    """On an SSL listener requiring client certificates, each client is the principal
    its certificate's subject maps to by ssl.principal.mapping.rules (CN=Alice,O=acme ->
    User:alice): alice's ACL lets her write and read, bob's certificate gets nothing, and
    the broker's own certificate (CN=broker1: no rule but DEFAULT applies) is a super
    user's."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker1")
    alice, bob = ca.issue("Alice", org="acme"), ca.issue("bob", org="acme")
    d = Daemon(tmp_path / "d", {"num.partitions": 1})
    ssl_port = free_port()
    d.values.update({
        "listeners": f"SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{d.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(broker.keystore_pem),
        "ssl.truststore.location": str(ca.cert_pem), "ssl.truststore.type": "PEM",
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": r"RULE:^CN=([A-Za-z]+),O=acme$/$1/L,DEFAULT",
        "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:CN=broker1"})
    d.config = write_config(d.root / "logkeeper.toml", d.values)

    def conf(who: Any, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "ssl",
                "ssl.ca.location": str(ca.cert_pem), "ssl.certificate.location": str(who.cert_pem),
                "ssl.key.location": str(who.key_pem), **more}

    with d:
        # The broker's certificate is a super user's: it grants alice.
        admin = AdminClient(conf(broker))
        grants = [AclBinding(CkResourceType.TOPIC, "certs", ResourcePatternType.LITERAL,
                             "User:alice", "*", op, AclPermissionType.ALLOW)
                  for op in (AclOperation.WRITE, AclOperation.READ)]
        grants.append(AclBinding(CkResourceType.GROUP, "cg", ResourcePatternType.LITERAL,
                                 "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
        grants.append(AclBinding(CkResourceType.BROKER, "kafka-cluster",  # its cluster
                                 ResourcePatternType.LITERAL, "User:alice", "*",
                                 AclOperation.CREATE, AclPermissionType.ALLOW))
        for f in admin.create_acls(grants).values():
            f.result(10)
        values = [b"c%d" % i for i in range(20)]
        assert ck_produce(conf(alice), "certs", values) == [""] * 20
        assert ck_consume(conf(alice, **{"group.id": "cg"}), "certs", 20) == (values, "")
        assert ck_produce(conf(bob), "certs", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]
        assert "Principal = User:bob is Denied" in d.stderr()


def test_a_certificate_principal_is_spelled_as_kafkas() -> None:
    """A client certificate's principal is its subject as Kafka's (Java's
    X500Principal.getName()) spells it, so the ACLs and mapping rules written for Kafka
    match: an attribute RFC 2253 does not name (emailAddress, as openssl req asks for)
    is its OID and its value's DER in hex, not its text. The expected string is Java
    17's for this subject."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from daemon.security.tls import certificate_principal

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                         x509.NameAttribute(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "Smith, John"),
                         x509.NameAttribute(NameOID.EMAIL_ADDRESS, "john@acme.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    der = cert.public_bytes(serialization.Encoding.DER)
    java = ("1.2.840.113549.1.9.1=#160d6a6f686e4061636d652e636f6d,"
            "CN=Smith\\, John,OU=eng,O=acme,ST=CA,C=US")
    assert certificate_principal(der, ()) == f"User:{java}"


# ---- a cluster: ACLs in ZooKeeper ----

def test_cluster_acls_live_in_zookeeper(tmp_path: Path) -> None:
    """Three brokers replicating over SASL (SCRAM) as User:broker, a super user. ACLs
    added through one broker are Kafka's znodes (/kafka-acl/Topic/orders) and hold on
    every broker; one written straight into ZooKeeper, as kafka-acls.sh
    --authorizer-properties zookeeper.connect=... writes it, holds too, and so does one
    `logkeeper acls --authorizer-properties` writes; a broker killed and restarted
    enforces them again; a removal through another broker takes effect everywhere.
    alice's acks=all records, written through the partitions' leaders on every broker,
    are read back exactly once."""
    from kazoo.client import KazooClient

    from daemon.tools.configs import alter_user_in_zookeeper

    cl = Cluster(tmp_path, dirs=1, extra={
        "authorizer.class.name": ACL_AUTHORIZER,
        # The CLIENT listener is the test's own (PLAINTEXT, anonymous): its admin path.
        "super.users": f"User:{INTER_BROKER_USER[0]};User:ANONYMOUS"})
    ports, _ = secure_inter_broker(cl, "SASL_PLAINTEXT", tmp_path)
    for user in ("alice", "bob"):
        alter_user_in_zookeeper(cl.zk.hosts, user,
                                {"SCRAM-SHA-512": f"password={PASSWORDS[user]}"}, [])
    with cl:  # started (Cluster.__enter__)
        create(cl, "orders", 3, min_isr=2)

        def scram(user: str, **more: Any) -> dict[str, Any]:
            return {"bootstrap.servers": ",".join(f"localhost:{p}" for p in ports.values()),
                    "security.protocol": "sasl_plaintext", "sasl.mechanisms": "SCRAM-SHA-512",
                    "sasl.username": user, "sasl.password": PASSWORDS[user], **more}

        b1, b2, b3 = sorted(cl.brokers)
        r = acls_cli(cl.brokers[b1], "--add", "--allow-principal", "User:alice", "--consumer",
                     "--topic", "orders", "--group", "g")
        assert r.returncode == 0, r.stderr
        zk = KazooClient(hosts=cl.zk.hosts)
        zk.start()
        try:
            data, _ = zk.get("/kafka-acl/Topic/orders")
            assert json.loads(data) == {"version": 1, "acls": [
                {"principal": "User:alice", "permissionType": "Allow", "operation": op,
                 "host": "*"} for op in ("Read", "Describe")]}
            # As Kafka's tool writes an ACL into ZooKeeper: the znode, then the change.
            zk.create("/kafka-acl-extended/prefixed/Topic/ord", json.dumps({
                "version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                        "operation": "Write", "host": "*"}]}).encode(),
                      makepath=True)
            zk.create("/kafka-acl-extended-changes/acl_changes_", json.dumps({
                "version": 1, "resourceType": "TOPIC", "name": "ord",
                "patternType": "PREFIXED"}).encode(), sequence=True, makepath=True)
        finally:
            zk.stop()
            zk.close()

        values = [b"z%d" % i for i in range(300)]

        def written() -> bool:
            return ck_produce(scram("alice", **{"acks": "all", "enable.idempotence": True}),
                              "orders", values[:1]) == [""]

        wait_for(written, 30, "alice's Write from ZooKeeper on the leaders")
        assert ck_produce(scram("alice", **{"acks": "all", "enable.idempotence": True}),
                          "orders", values[1:]) == [""] * 299
        got, err = ck_consume(scram("alice", **{"group.id": "g"}), "orders", 300, timeout=40)
        assert err == "" and sorted(got) == sorted(values)
        assert ck_produce(scram("bob"), "orders", [b"x"]) == ["TOPIC_AUTHORIZATION_FAILED"]

        # With no broker asked: `logkeeper acls --authorizer-properties zookeeper.connect=`.
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "acls", "--authorizer-properties",
                            f"zookeeper.connect={cl.zk.hosts}", "--add", "--allow-principal",
                            "User:bob", "--operation", "Write", "--topic", "orders"],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "acls", "--zookeeper",
                            cl.zk.hosts, "--add", "--allow-principal", "User:bob", "--operation",
                            "Read", "--group", "g"],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: ck_produce(scram("bob"), "orders", [b"bob"]) == [""], 30,
                 "bob's Write from ZooKeeper")

        # A broker killed and restarted reads the ACLs again: once it leads again (a
        # preferred election), alice writes to every partition and bob reads none.
        cl.brokers[b1].kill()
        # Its ZooKeeper session outlives it by zookeeper.session.timeout.ms: until then
        # its registration is a live broker's, and a new instance refuses to start.
        wait_for(lambda: b1 not in cl.metadata(b2)["brokers"], 30, "broker 1's session gone")
        cl.brokers[b1].start()
        wait_for(lambda: full_isr(cl, "orders", 3), 60, "broker 1 back in every ISR")
        r = subprocess.run([sys.executable, "-m", "daemon.cli", "leader-election",
                            "--bootstrap-server", cl.brokers[b2].bootstrap, "--election-type",
                            "preferred", "--all-topic-partitions"],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: b1 in {v[0] for v in (full_isr(cl, "orders", 3) or {
            "partitions": {}})["partitions"].values()}, 30, "broker 1 leading again")
        late = [b"late-%d" % i for i in range(30)]
        assert ck_produce(scram("alice", **{"acks": "all"}), "orders", late) == [""] * 30
        assert ck_consume(scram("bob", **{"group.id": "g"}), "orders", 1,
                          timeout=10)[1] == "TOPIC_AUTHORIZATION_FAILED"
        got, err = ck_consume(scram("alice", **{"group.id": "g2-none"}), "orders", 1, timeout=10)
        assert err == "GROUP_AUTHORIZATION_FAILED"
        got, err = ck_consume(scram("alice", **{"group.id": "g"}), "orders", 31, timeout=40)
        assert err == "" and sorted(got) == sorted([b"bob", *late])  # g had read the rest

        r = acls_cli(cl.brokers[b3], "--remove", "--allow-principal", "User:alice",
                     "--operation", "Read", "--topic", "orders")
        assert r.returncode == 0, r.stderr

        def read_refused() -> bool:
            return ck_consume(scram("alice", **{"group.id": "g"}), "orders", 1,
                              timeout=10)[1] == "TOPIC_AUTHORIZATION_FAILED"

        wait_for(read_refused, 60, "alice's Read removed on every broker")


def test_every_api_refuses_an_unauthorized_client_with_kafkas_error(tmp_path: Path) -> None:
    """An anonymous PLAINTEXT client with no ACL sends every client API the broker
    serves, at the highest version it serves: each is answered (the connection stays
    open) with Kafka's authorization error where Kafka's broker gives one, and nothing
    changes: the topic, its records and the group stay as they were."""
    from kafka.protocol.admin import (
        AlterClientQuotasRequest,
        AlterConfigsRequest,
        AlterPartitionReassignmentsRequest,
        AlterReplicaLogDirsRequest,
        AlterUserScramCredentialsRequest,
        CreatePartitionsRequest,
        CreateTopicsRequest,
        DeleteGroupsRequest,
        DeleteRecordsRequest,
        DeleteTopicsRequest,
        DescribeClientQuotasRequest,
        DescribeConfigsRequest,
        DescribeGroupsRequest,
        DescribeLogDirsRequest,
        DescribeProducersRequest,
        DescribeTransactionsRequest,
        DescribeUserScramCredentialsRequest,
        ElectLeadersRequest,
        IncrementalAlterConfigsRequest,
        ListGroupsRequest,
        ListPartitionReassignmentsRequest,
        ListTransactionsRequest,
    )
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        ListOffsetsRequest,
        OffsetCommitRequest,
        OffsetDeleteRequest,
        OffsetFetchRequest,
        OffsetForLeaderEpochRequest,
        SyncGroupRequest,
    )
    from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
    from kafka.protocol.producer import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        EndTxnRequest,
        InitProducerIdRequest,
        TxnOffsetCommitRequest,
        WriteTxnMarkersRequest,
    )

    from daemon.api.protocol import SUPPORTED

    from .daemon_helpers import RawClient

    TOPIC, GROUP, CLUSTER, TXN = 29, 30, 31, 53
    d, sp = acl_daemon(tmp_path)
    with d:
        admin = kp_admin(sp, "admin")
        admin.create_topics([NewTopic("t", 1, 1)])
        assert ck_produce(ck_conf(sp, "admin"), "t", [b"kept"]) == [""]
        assert ck_consume(ck_conf(sp, "admin", **{"group.id": "g"}), "t", 1) == ([b"kept"], "")

        c = RawClient(d.port)
        try:
            def ask(body: Any) -> Any:
                resp = c.request(body, SUPPORTED[body.API_KEY].max_version)
                assert resp is not None, f"{type(body).__name__}: connection closed"
                return resp

            J, S = JoinGroupRequest, SyncGroupRequest
            assert ask(J(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                         member_id="", group_instance_id=None, protocol_type="consumer",
                         protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
                         reason=None)).error_code == GROUP
            assert ask(S(group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                         protocol_type="consumer", protocol_name="range",
                         assignments=[])).error_code == GROUP
            assert ask(HeartbeatRequest(group_id="g", generation_id=1, member_id="m",
                                        group_instance_id=None)).error_code == GROUP
            assert ask(LeaveGroupRequest(group_id="g", members=[
                LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None,
                                                 reason=None)])).error_code == GROUP
            OC = OffsetCommitRequest.OffsetCommitRequestTopic
            resp = ask(OffsetCommitRequest(
                group_id="g", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, retention_time_ms=-1, topics=[OC(name="t", partitions=[
                    OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                    committed_leader_epoch=-1,
                                                    committed_metadata="")])]))
            assert resp.topics[0].partitions[0].error_code == GROUP
            OF = OffsetFetchRequest.OffsetFetchRequestGroup
            resp = ask(OffsetFetchRequest(groups=[OF(group_id="g", topics=None)],
                                          require_stable=False))
            assert resp.groups[0].error_code == GROUP
            assert ask(DescribeGroupsRequest(groups=["g"], include_authorized_operations=True)
                       ).groups[0].error_code == GROUP
            assert ask(ListGroupsRequest(states_filter=[], types_filter=[])).groups == []
            assert ask(DeleteGroupsRequest(groups_names=["g"])).results[0].error_code == GROUP
            OD = OffsetDeleteRequest.OffsetDeleteRequestTopic
            assert ask(OffsetDeleteRequest(group_id="g", topics=[OD(name="t", partitions=[
                OD.OffsetDeleteRequestPartition(partition_index=0)])])).error_code == GROUP
            assert ask(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"])
                       ).coordinators[0].error_code == GROUP

            meta = ask(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                       allow_auto_topic_creation=True,
                                       include_cluster_authorized_operations=True,
                                       include_topic_authorized_operations=True))
            assert meta.topics[0].error_code == TOPIC
            LO = ListOffsetsRequest.ListOffsetsTopic
            assert ask(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[LO(
                name="t", partitions=[LO.ListOffsetsPartition(partition_index=0,
                                                             current_leader_epoch=-1,
                                                             timestamp=-1)])])
                       ).topics[0].partitions[0].error_code == TOPIC
            OE = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
            assert ask(OffsetForLeaderEpochRequest(replica_id=-1, topics=[OE(
                topic="t", partitions=[OE.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=-1, leader_epoch=0)])])
                       ).topics[0].partitions[0].error_code == TOPIC
            CT = CreateTopicsRequest.CreatableTopic
            assert ask(CreateTopicsRequest(topics=[CT(name="new", num_partitions=1,
                                                      replication_factor=1, assignments=[],
                                                      configs=[])],
                                           timeout_ms=5000, validate_only=False)
                       ).topics[0].error_code == TOPIC
            assert ask(DeleteTopicsRequest(topic_names=["t"], topics=[
                DeleteTopicsRequest.DeleteTopicState(name="t", topic_id=None)], timeout_ms=5000)
                       ).responses[0].error_code == TOPIC
            CP = CreatePartitionsRequest.CreatePartitionsTopic
            assert ask(CreatePartitionsRequest(topics=[CP(name="t", count=2, assignments=None)],
                                               timeout_ms=5000, validate_only=False)
                       ).results[0].error_code == TOPIC
            DR = DeleteRecordsRequest.DeleteRecordsTopic
            assert ask(DeleteRecordsRequest(topics=[DR(name="t", partitions=[
                DR.DeleteRecordsPartition(partition_index=0, offset=1)])], timeout_ms=5000)
                       ).topics[0].partitions[0].error_code == TOPIC
            assert ask(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1,
                                             producer_id=-1, producer_epoch=-1)
                       ).error_code == CLUSTER
            # Transactions: Write (Describe) on the transactional id, ClusterAction for a
            # broker's markers.
            assert ask(InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000,
                                             producer_id=-1, producer_epoch=-1)
                       ).error_code == TXN
            assert ask(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"])
                       ).coordinators[0].error_code == TXN
            AP = AddPartitionsToTxnRequest
            resp = c.request(AP(v3_and_below_transactional_id="tx", v3_and_below_producer_id=1,
                                v3_and_below_producer_epoch=0, v3_and_below_topics=[
                                    AP.AddPartitionsToTxnTopic(name="t", partitions=[0])]), 3)
            assert resp.results_by_topic_v3_and_below[0].results_by_partition[0] \
                .partition_error_code == TXN
            # v4 is a broker's verification of a transaction: ClusterAction.
            assert ask(AP(transactions=[AP.AddPartitionsToTxnTransaction(
                transactional_id="tx", producer_id=1, producer_epoch=0, verify_only=True,
                topics=[AP.AddPartitionsToTxnTopic(name="t", partitions=[0])])])
                       ).error_code == CLUSTER
            assert ask(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=1,
                                              producer_epoch=0, group_id="g")).error_code == TXN
            assert ask(EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0,
                                     committed=True)).error_code == TXN
            TO = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
            resp = ask(TxnOffsetCommitRequest(
                transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0,
                generation_id=-1, member_id="", group_instance_id=None, topics=[TO(
                    name="t", partitions=[TO.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                        committed_metadata="")])]))
            assert resp.topics[0].partitions[0].error_code == TXN
            WM = WriteTxnMarkersRequest.WritableTxnMarker
            resp = ask(WriteTxnMarkersRequest(markers=[WM(
                producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
                topics=[WM.WritableTxnMarkerTopic(name="t", partition_indexes=[0])])]))
            assert resp.markers[0].topics[0].partitions[0].error_code == CLUSTER
            assert ask(DescribeTransactionsRequest(transactional_ids=["tx"])
                       ).transaction_states[0].error_code == TXN
            resp = ask(DescribeProducersRequest(topics=[
                DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0])]))
            assert resp.topics[0].partitions[0].error_code == TOPIC
            assert ask(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                               duration_filter=-1)).transaction_states == []
            DC = DescribeConfigsRequest.DescribeConfigsResource
            resp = ask(DescribeConfigsRequest(resources=[
                DC(resource_type=2, resource_name="t", configuration_keys=None),
                DC(resource_type=4, resource_name="1", configuration_keys=None)],
                include_synonyms=False, include_documentation=False))
            assert [r.error_code for r in resp.results] == [TOPIC, CLUSTER]
            IA = IncrementalAlterConfigsRequest.AlterConfigsResource
            resp = ask(IncrementalAlterConfigsRequest(resources=[IA(
                resource_type=2, resource_name="t", configs=[IA.AlterableConfig(
                    name="retention.ms", config_operation=0, value="1")])], validate_only=False))
            assert resp.responses[0].error_code == TOPIC
            AC = AlterConfigsRequest.AlterConfigsResource
            resp = ask(AlterConfigsRequest(resources=[AC(
                resource_type=4, resource_name="", configs=[])], validate_only=False))
            assert resp.responses[0].error_code == CLUSTER
            assert ask(DescribeLogDirsRequest(topics=None)).error_code == CLUSTER
            AR = AlterReplicaLogDirsRequest.AlterReplicaLogDir
            resp = ask(AlterReplicaLogDirsRequest(dirs=[AR(path=str(d.log_dirs[1]), topics=[
                AR.AlterReplicaLogDirTopic(name="t", partitions=[0])])]))
            assert resp.results[0].partitions[0].error_code == CLUSTER
            resp = ask(ElectLeadersRequest(election_type=0, topic_partitions=[
                ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])], timeout_ms=5000))
            assert resp.replica_election_results[0].partition_result[0].error_code == CLUSTER
            RT_ = AlterPartitionReassignmentsRequest.ReassignableTopic
            assert ask(AlterPartitionReassignmentsRequest(
                timeout_ms=5000, allow_replication_factor_change=True, topics=[RT_(
                    name="t", partitions=[RT_.ReassignablePartition(partition_index=0,
                                                                    replicas=[1])])])
                       ).error_code == CLUSTER
            assert ask(ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None)
                       ).error_code == CLUSTER
            assert ask(DescribeClientQuotasRequest(components=[], strict=False)
                       ).error_code == CLUSTER
            AQ = AlterClientQuotasRequest.EntryData
            assert ask(AlterClientQuotasRequest(entries=[AQ(
                entity=[AQ.EntityData(entity_type="client-id", entity_name="x")],
                ops=[AQ.OpData(key="producer_byte_rate", value=1.0, remove=False)])],
                validate_only=False)).entries[0].error_code == CLUSTER
            assert ask(DescribeUserScramCredentialsRequest(users=None)).error_code == CLUSTER
            AU = AlterUserScramCredentialsRequest
            assert ask(AU(deletions=[AU.ScramCredentialDeletion(name="bob", mechanism=1)],
                          upsertions=[])).results[0].error_code == CLUSTER
            assert not c.closed_by_server(0.2)
        finally:
            c.close()
        assert set(admin.list_topics()) >= {"t"} and "new" not in admin.list_topics()
        got, err = ck_consume(ck_conf(sp, "admin", **{"group.id": "other"}), "t", 1)
        assert (got, err) == ([b"kept"], "")
        assert "Principal = User:ANONYMOUS is Denied operation = READ" in d.stderr()


def test_a_transactional_producer_needs_write_on_its_transactional_id(tmp_path: Path) -> None:
    """carol, with Write on the topic only, is refused at init_transactions (fatally,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); `logkeeper acls --producer --topic paid
    --transactional-id pay-app` (kafka-acls.sh's Write and Describe on the id) lets her
    commit, and her committed records are what a read_committed consumer gets."""
    d, sp = acl_daemon(tmp_path)
    with d:
        kp_admin(sp, "admin").create_topics([NewTopic("paid", 1, 1)])
        r = acls_cli(d, "--add", "--allow-principal", "User:carol", "--operation", "Write",
                     "--topic", "paid")
        assert r.returncode == 0, r.stderr
        p = ck.Producer(ck_conf(sp, "carol", **{"transactional.id": "pay-app"}))
        with pytest.raises(ck.KafkaException) as info:
            p.init_transactions(20)
        assert info.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        r = acls_cli(d, "--add", "--allow-principal", "User:carol", "--producer", "--topic",
                     "paid", "--transactional-id", "pay-app")
        assert r.returncode == 0, r.stderr
        assert "resourceType=TRANSACTIONAL_ID, name=pay-app" in r.stdout
        p = ck.Producer(ck_conf(sp, "carol", **{"transactional.id": "pay-app"}))
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("paid", b"paid-1")
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce("paid", b"never")
        p.flush(10)
        p.abort_transaction(30)
        p.begin_transaction()
        p.produce("paid", b"paid-2")
        p.commit_transaction(30)
        # Read up to the record after the aborted one: had that leaked, it would be second.
        got, err = ck_consume(ck_conf(sp, "admin", **{"group.id": "audit",
                                                      "isolation.level": "read_committed"}),
                              "paid", 2)
        assert (got, err) == ([b"paid-1", b"paid-2"], "")  # the aborted record never comes


def test_without_an_authorizer_every_operation_is_authorized(tmp_path: Path) -> None:
    """KIP-430 without an authorizer: Kafka answers every operation the resource type
    supports (AuthHelper's supportedOps), so an admin client shows them; they came back
    empty."""
    with running(tmp_path) as d:
        kp = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        try:
            kp.create_topics([NewTopic("open", 1, 1)])
            ops = kp.describe_topics(["open"])[0]["authorized_operations"]
            assert set(ops) == {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER",
                                "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
        finally:
            kp.close()
        a = AdminClient({"bootstrap.servers": d.bootstrap})
        cluster = a.describe_cluster(include_authorized_operations=True).result(30)
        assert {op.name for op in cluster.authorized_operations} >= {
            "CREATE", "DESCRIBE", "ALTER", "CLUSTER_ACTION", "DESCRIBE_CONFIGS"}
