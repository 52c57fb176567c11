"""TLS listeners (Kafka's SSL security protocol and its ssl.* keys): clients over TLS,
client certificates, the keystore and truststore forms operators have (PEM, PKCS12),
per-listener keys, refusals of what cannot work, and a cluster whose brokers replicate,
elect and shut down over an SSL inter-broker listener. Real daemons and ZooKeeper,
certificates made by a test CA, confluent-kafka, kafka-python, aiokafka and kcat.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from aiokafka.helpers import create_ssl_context
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.admin import DescribeConfigsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from daemon import config as config_mod
from logstore import Log, LogConfig

from .cluster_helpers import Cluster, peers_reached, secure_inter_broker, wait_for
from .daemon_helpers import REPO, Daemon, RawClient, aiokafka_read, write_config
from .test_controlled_shutdown import restart_each_under_load
from .test_replication import consume_all, create
from .tls_helpers import CertificateAuthority
from .zkserver import free_port

KCAT = shutil.which("kcat")


def with_ssl_listener(d: Daemon, ssl_port: int, **ssl_keys: Any) -> None:
    """`d` serves PLAINTEXT on its port (the helpers' way in) and SSL on `ssl_port`."""
    d.values.update({"listeners": f"PLAINTEXT://127.0.0.1:{d.port},SSL://127.0.0.1:{ssl_port}",
                     **{k.replace("_", "."): v for k, v in ssl_keys.items()}})
    d.config = write_config(d.root / "logkeeper.toml", d.values)


def peer_certificate(port: int, ca: Path, *, client: tuple[Path, Path] | None = None) -> dict:
    """The certificate the listener at `port` presents (checked against `ca`)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        return s.getpeercert()


def common_name(cert: dict) -> str:
    return next(v for rdn in cert["subject"] for k, v in rdn if k == "commonName")


def test_an_ssl_listener_serves_every_client(tmp_path: Path) -> None:
    """A PEM keystore; confluent-kafka produces over TLS, and confluent-kafka,
    kafka-python, aiokafka and kcat read it all back over TLS. Fetches large enough to be
    spliced on a plain listener are copied through TLS, byte for byte what the log holds.
    A client speaking plain Kafka to the SSL port gets nothing."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker1")
    d = Daemon(tmp_path / "d", {"num.partitions": 1})
    ssl_port = free_port()
    with_ssl_listener(d, ssl_port, ssl_keystore_type="PEM",
                      ssl_keystore_location=str(broker.keystore_pem))
    with d:
        assert f"SSL 127.0.0.1:{ssl_port}" in d.stderr()
        assert "with TLS as CN=broker1, client certificates none" in d.stderr()
        tls_conf = {"bootstrap.servers": f"localhost:{ssl_port}", "security.protocol": "ssl",
                    "ssl.ca.location": str(ca.cert_pem)}
        p = ck.Producer({**tls_conf, "linger.ms": 20, "batch.size": 256 << 10})
        values = [bytes([i % 251]) * 3000 + b"#%d" % i for i in range(3000)]  # ~9 MB
        for v in values:
            p.produce("secure", v)
        assert p.flush(60) == 0
        c = ck.Consumer({**tls_conf, "group.id": "g", "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 16 << 20})
        c.subscribe(["secure"])
        got: list[bytes] = []
        try:
            wait_for(lambda: got.extend(m.value() for m in c.consume(1000, 0.5)
                                        if not m.error()) or len(got) >= len(values),
                     60, "confluent-kafka reading over TLS")
        finally:
            c.close()
        assert got == values
        kc = KafkaConsumer("secure", bootstrap_servers=f"localhost:{ssl_port}",
                           security_protocol="SSL", ssl_cafile=str(ca.cert_pem),
                           auto_offset_reset="earliest", consumer_timeout_ms=5000,
                           fetch_max_bytes=16 << 20, max_partition_fetch_bytes=16 << 20)
        assert [m.value for m in kc] == values
        kc.close()

        assert aiokafka_read("secure", len(values), bootstrap_servers=f"localhost:{ssl_port}",
                             security_protocol="SSL",
                             ssl_context=create_ssl_context(cafile=str(ca.cert_pem))) == values
        # What TLS carried is what the log holds: the segment's bytes as a plain fetch
        # (spliced) and a TLS one (copied) return them.
        seg = next(d.log_dirs[i] / "secure-0" for i in range(3) if (d.log_dirs[i] / "secure-0").exists())
        log = Log.open(seg, LogConfig())
        try:
            on_disk = log.read(0, 1 << 20)
        finally:
            log.close()
        assert raw_fetch_first_batches(d.port, None) == raw_fetch_first_batches(
            ssl_port, ca.cert_pem) == bytes(on_disk)
        # Plain Kafka at the SSL port: the handshake never completes, no answer; the
        # broker logs why and counts a failed authentication, as Kafka does.
        with socket.create_connection(("127.0.0.1", ssl_port), timeout=5) as s:
            s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
            s.settimeout(5)
            assert s.recv(100)[:1] in (b"", b"\x15")  # closed, or a TLS alert
        wait_for(lambda: "on listener SSL (TLS handshake failed: WRONG_VERSION_NUMBER: the "
                         "client does not speak TLS)" in d.stderr(), 10, "the failure logged")
        _, metrics = d.http("/metrics")
        text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
        assert ('kafka_server_socketservermetrics_authentication_total{listener="SSL",'
                'result="failed"} 1.0') in text
        # Clients came and went over TLS: no warning for each close (a TLS transport
        # cannot stay half-open), no error for a client gone before its answer.
        assert "eof_received() has no effect" not in d.stderr()
        assert "after an unexpected error" not in d.stderr()
        if KCAT:
            out = subprocess.run(
                [KCAT, "-b", f"localhost:{ssl_port}", "-X", "security.protocol=ssl", "-X",
                 f"ssl.ca.location={ca.cert_pem}", "-C", "-t", "secure", "-o", "-3", "-e",
                 "-f", "%o\n"], capture_output=True, timeout=60, check=True)
            assert out.stdout.split() == [b"2997", b"2998", b"2999"]
        # TLS is only on its listener: the PLAINTEXT one still answers plain Kafka.
        assert RawClient(d.port).request(ApiVersionsRequest(), 0).error_code == 0


def raw_fetch_first_batches(port: int, ca: Path | None) -> bytes:
    """Fetch v11 of secure-0 from offset 0 (at most 1 MiB): the records' bytes."""
    F = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                       isolation_level=0, session_id=0, session_epoch=-1, topics=[F(
                           topic="secure", partitions=[F.FetchPartition(
                               partition=0, current_leader_epoch=-1, fetch_offset=0,
                               log_start_offset=-1, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    c = RawClient(port, tls=ssl.create_default_context(cafile=str(ca)) if ca else None)
    try:
        return bytes(c.request(req, 11).responses[0].partitions[0].records)
    finally:
        c.close()


def tls_refused(port: int, ctx: ssl.SSLContext) -> bool:
    """Whether a client with `ctx` is refused: its handshake fails, or the connection
    closes before an ApiVersions answer."""
    try:
        c = RawClient(port, tls=ctx)
    except (ssl.SSLError, OSError):
        return True
    try:
        return c.request(ApiVersionsRequest(), 0) is None
    except (ssl.SSLError, OSError, AssertionError, EOFError):
        return True
    finally:
        c.close()


def test_client_certificates_are_checked_when_required(tmp_path: Path) -> None:
    """ssl.client.auth=required with a PKCS12 keystore and a PEM truststore: a client
    with a certificate the truststore's CA signed is served (confluent-kafka and
    kafka-python); one with none, or with one from another CA, is refused at the
    handshake."""
    ca, other = CertificateAuthority(tmp_path / "ca"), CertificateAuthority(tmp_path / "other", "rogue CA")
    broker = ca.issue("broker1")
    good, rogue = ca.issue("app", client=True), other.issue("app", client=True)
    d = Daemon(tmp_path / "d", {"num.partitions": 1})
    ssl_port = free_port()
    with_ssl_listener(d, ssl_port, ssl_keystore_type="PKCS12",
                      ssl_keystore_location=str(broker.pkcs12(tmp_path / "broker.p12", "s3cret")),
                      ssl_keystore_password="s3cret", ssl_truststore_type="PEM",
                      ssl_truststore_location=str(ca.cert_pem), ssl_client_auth="required")
    with d:
        assert "client certificates required" in d.stderr()
        anonymous = ssl.create_default_context(cafile=str(ca.cert_pem))
        assert tls_refused(ssl_port, anonymous)
        wait_for(lambda: "TLS handshake failed: PEER_DID_NOT_RETURN_A_CERTIFICATE" in
                 d.stderr(), 10, "the missing client certificate logged")
        foreign = ssl.create_default_context(cafile=str(ca.cert_pem))
        foreign.load_cert_chain(str(rogue.cert_pem), str(rogue.key_pem))
        assert tls_refused(ssl_port, foreign)
        # Which check the certificate failed, as Kafka's log says (PKIX path building).
        wait_for(lambda: "CERTIFICATE_VERIFY_FAILED (self-signed certificate in "
                 "certificate chain)" in d.stderr(), 10, "the foreign certificate's failure logged")
        trusted = ssl.create_default_context(cafile=str(ca.cert_pem))
        trusted.load_cert_chain(str(good.cert_pem), str(good.key_pem))
        assert not tls_refused(ssl_port, trusted)

        conf = {"bootstrap.servers": f"localhost:{ssl_port}", "security.protocol": "ssl",
                "ssl.ca.location": str(ca.cert_pem),
                "ssl.certificate.location": str(good.cert_pem),
                "ssl.key.location": str(good.key_pem)}
        p = ck.Producer(conf)
        for i in range(50):
            p.produce("mtls", b"v%d" % i)
        assert p.flush(30) == 0
        kp = KafkaProducer(bootstrap_servers=f"localhost:{ssl_port}", security_protocol="SSL",
                           ssl_cafile=str(ca.cert_pem), ssl_certfile=str(good.cert_pem),
                           ssl_keyfile=str(good.key_pem))
        for i in range(50, 100):
            kp.send("mtls", b"v%d" % i)
        kp.flush(30)
        kp.close()
        c = ck.Consumer({**conf, "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["mtls"])
        got: list[bytes] = []
        try:
            wait_for(lambda: got.extend(m.value() for m in c.consume(100, 0.5)
                                        if not m.error()) or len(got) >= 100, 30, "100 records")
        finally:
            c.close()
        assert got == [b"v%d" % i for i in range(100)]
        # Without a certificate, confluent-kafka never gets metadata.
        bare = ck.Producer({k: v for k, v in conf.items()
                            if k not in ("ssl.certificate.location", "ssl.key.location")})
        bare.produce("mtls", b"never")
        assert bare.flush(3) == 1


def test_each_listener_can_have_its_own_keystore(tmp_path: Path) -> None:
    """listener.name.<listener>.ssl.* over the broker-wide ssl.* keys: two SSL listeners,
    each presenting its own certificate; the PLAINTEXT one stays plain."""
    ca = CertificateAuthority(tmp_path / "ca")
    inside, outside = ca.issue("inside.example"), ca.issue("outside.example")
    d = Daemon(tmp_path / "d")
    a, b = free_port(), free_port()
    d.values.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{d.port},INSIDE://127.0.0.1:{a},"
                     f"OUTSIDE://127.0.0.1:{b}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INSIDE:SSL,OUTSIDE:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(inside.keystore_pem),
        "listener.name.outside.ssl.keystore.location":
            str(outside.pkcs12(tmp_path / "outside.p12", "pw")),
        "listener.name.outside.ssl.keystore.password": "pw"})
    d.config = write_config(d.root / "logkeeper.toml", d.values)
    with d:
        assert common_name(peer_certificate(a, ca.cert_pem)) == "inside.example"
        assert common_name(peer_certificate(b, ca.cert_pem)) == "outside.example"
        p = ck.Producer({"bootstrap.servers": f"localhost:{b}", "security.protocol": "ssl",
                         "ssl.ca.location": str(ca.cert_pem)})
        p.produce("both", b"x")
        assert p.flush(30) == 0


def test_describe_configs_never_shows_a_password(tmp_path: Path) -> None:
    """Kafka's PASSWORD keys come back with no value and is_sensitive set, in the entry
    and its synonyms; the keystore's location is shown."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker1")
    d = Daemon(tmp_path / "d")
    with_ssl_listener(d, free_port(), ssl_keystore_location=str(broker.pkcs12(
        tmp_path / "b.p12", "hunter2")), ssl_keystore_password="hunter2")
    with d:
        R = DescribeConfigsRequest.DescribeConfigsResource
        resp = RawClient(d.port).request(DescribeConfigsRequest(
            resources=[R(resource_type=4, resource_name="1", configuration_keys=None)],
            include_synonyms=True, include_documentation=False), 4)
        entries = {e.name: e for e in resp.results[0].configs}
        password = entries["ssl.keystore.password"]
        assert (password.value, password.is_sensitive) == (None, True)
        assert password.synonyms and all(s.value is None for s in password.synonyms)
        assert entries["ssl.keystore.location"].value.endswith("b.p12")
        assert entries["ssl.keystore.location"].is_sensitive is False
        assert b"hunter2" not in repr(resp).encode()


def refusal(tmp_path: Path, **keys: Any) -> str:
    """The ConfigError a config with an SSL listener and `keys` gets."""
    values = {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
              **{k.replace("__", "-").replace("_", "."): v for k, v in keys.items()}}
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.from_mapping(values)
    return str(err.value)


def test_tls_settings_that_cannot_work_are_refused(tmp_path: Path) -> None:
    """Each mistake an operator makes with a keystore or truststore stops the load with
    the key at fault and what to do; a good config still loads."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker1")
    p12 = broker.pkcs12(tmp_path / "b.p12", "right")
    jks = tmp_path / "b.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + b"\x00" * 64)  # a JKS header
    encrypted = tmp_path / "enc.pem"
    from cryptography.hazmat.primitives import serialization

    encrypted.write_bytes(broker.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"keypw")) + broker.cert_pem.read_bytes())
    mismatched = tmp_path / "mismatch.pem"
    mismatched.write_bytes(ca.issue("other").key_pem.read_bytes() + broker.cert_pem.read_bytes())

    assert "needs this broker's key and certificate" in refusal(tmp_path)
    msg = refusal(tmp_path, ssl_keystore_location=str(jks))
    assert "Java KeyStore (JKS)" in msg and "keytool -importkeystore" in msg
    msg = refusal(tmp_path, ssl_keystore_location=str(p12), ssl_keystore_password="wrong")
    assert "cannot be opened with ssl.keystore.password (wrong password?)" in msg
    assert "(not set)" in refusal(tmp_path, ssl_keystore_location=str(p12))
    assert "encrypted: set ssl.key.password" in refusal(
        tmp_path, ssl_keystore_location=str(encrypted))
    assert "does not belong to the first certificate" in refusal(
        tmp_path, ssl_keystore_location=str(mismatched))
    assert "cannot read" in refusal(tmp_path, ssl_keystore_location=str(tmp_path / "missing"))
    assert "ssl.keystore.type=PKCS12, but" in refusal(
        tmp_path, ssl_keystore_location=str(broker.keystore_pem), ssl_keystore_type="PKCS12")
    assert "TLSv1.1 is not served" in refusal(
        tmp_path, ssl_keystore_location=str(broker.keystore_pem),
        ssl_enabled_protocols="TLSv1.1,TLSv1.2")
    assert "holds no certificate to trust" in refusal(
        tmp_path, ssl_keystore_location=str(broker.keystore_pem),
        ssl_truststore_location=str(broker.key_pem))
    # A listener's own key is named as such.
    msg = refusal(tmp_path, ssl_keystore_location=str(broker.keystore_pem),
                  **{"listener.name.ssl.ssl.keystore.location": str(jks)})
    assert "listener SSL (SSL)" in msg and "keytool" in msg
    with pytest.raises(config_mod.ConfigError, match="no Kafka key a listener can have"):
        config_mod.from_mapping({"listener.name.ssl.ssl.keystor.location": "x"})
    with pytest.raises(config_mod.ConfigError, match=r"listener SASL_SSL \(SASL_SSL\): "
                                                     "ssl.keystore.location"):
        config_mod.from_mapping({"listeners": "SASL_SSL://127.0.0.1:9093"})
    # Right, in each form: it loads, and the key material is read.
    for keys in ({"ssl.keystore.location": str(broker.keystore_pem)},
                 {"ssl.keystore.location": str(p12), "ssl.keystore.password": "right"},
                 {"ssl.keystore.location": str(encrypted), "ssl.key.password": "keypw"},
                 {"ssl.keystore.type": "PEM", "ssl.keystore.key": broker.key_pem.read_text(),
                  "ssl.keystore.certificate.chain": broker.cert_pem.read_text(),
                  "ssl.truststore.certificates": ca.cert_pem.read_text()}):
        cfg = config_mod.from_mapping(
            {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", **keys})
        assert cfg.tls["SSL"].subject == "CN=broker1"
        assert "PRIVATE KEY" not in repr(cfg.tls["SSL"])  # the key never shows
        cfg.tls["SSL"].server_context()
        cfg.tls["SSL"].client_context()


def handshake(port: int, ca: Path, *, ciphers: str | None = None,
              highest: ssl.TLSVersion | None = None) -> tuple[str, str]:
    """(TLS version, OpenSSL suite name) a client offering `ciphers` (OpenSSL's names,
    TLS 1.2) up to `highest` agrees with the listener at `port`; ssl.SSLError if none."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    if highest is not None:
        ctx.maximum_version = highest
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        version, cipher = s.version(), s.cipher()
        assert version is not None and cipher is not None
        return version, cipher[0]


def test_ssl_cipher_suites_decide_what_a_listener_negotiates(tmp_path: Path) -> None:
    """ssl.cipher.suites by Kafka's (standard) names: a listener given two TLS 1.2 suites
    negotiates one of them and nothing else, not TLS 1.3 (as under Java, a version none of
    whose suites is listed is not served), and real clients still produce and read over
    it; the brokers' own client side offers the same. A list OpenSSL cannot serve as
    written is refused when the config loads, naming the key."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker1")
    chosen = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    d = Daemon(tmp_path / "d", {"num.partitions": 1})
    ssl_port = free_port()
    with_ssl_listener(d, ssl_port, ssl_keystore_location=str(broker.keystore_pem),
                      ssl_cipher_suites=chosen)
    with d:
        # A client offering everything (TLS 1.3 first) gets TLS 1.2 and a listed suite.
        version, suite = handshake(ssl_port, ca.cert_pem)
        assert version == "TLSv1.2"
        assert suite in ("ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305")
        assert handshake(ssl_port, ca.cert_pem, ciphers="ECDHE-ECDSA-CHACHA20-POLY1305") == (
            "TLSv1.2", "ECDHE-ECDSA-CHACHA20-POLY1305")
        # One offering only suites not listed (strong ones, at that) is refused.
        with pytest.raises(ssl.SSLError):
            handshake(ssl_port, ca.cert_pem, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256",
                      highest=ssl.TLSVersion.TLSv1_2)
        tls_conf = {"bootstrap.servers": f"localhost:{ssl_port}", "security.protocol": "ssl",
                    "ssl.ca.location": str(ca.cert_pem)}
        p = ck.Producer(tls_conf)
        for i in range(20):
            p.produce("suites", b"v%d" % i)
        assert p.flush(30) == 0
        kc = KafkaConsumer("suites", bootstrap_servers=f"localhost:{ssl_port}",
                           security_protocol="SSL", ssl_cafile=str(ca.cert_pem),
                           auto_offset_reset="earliest", consumer_timeout_ms=5000)
        assert [m.value for m in kc] == [b"v%d" % i for i in range(20)]
        kc.close()

    # The side a broker connects to other brokers with offers the same suites.
    cfg = config_mod.from_mapping({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        "ssl.keystore.location": str(broker.keystore_pem), "ssl.cipher.suites": chosen})
    client = cfg.tls["SSL"].client_context()
    assert client.maximum_version == ssl.TLSVersion.TLSv1_2
    assert {c["name"] for c in client.get_ciphers() if c["protocol"] == "TLSv1.2"} == {
        "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"}
    # TLS 1.3's suites, all three listed (OpenSSL's set): TLS 1.3 only.
    only13 = config_mod.from_mapping({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        "ssl.keystore.location": str(broker.keystore_pem),
        "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,"
                             "TLS_CHACHA20_POLY1305_SHA256"}).tls["SSL"]
    assert only13.versions == (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)

    keystore = str(broker.keystore_pem)
    msg = refusal(tmp_path, ssl_keystore_location=keystore,
                  ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,ECDHE-RSA-AES128-SHA")
    assert "ssl.cipher.suites: ECDHE-RSA-AES128-SHA: no cipher suite" in msg
    assert "listener SSL (SSL)" in msg
    msg = refusal(tmp_path, ssl_keystore_location=keystore,
                  ssl_cipher_suites="TLS_AES_256_GCM_SHA384")
    assert "serves TLS 1.3 with all of OpenSSL's" in msg and "list all of them or none" in msg
    assert "lists no suite of the TLS versions" in refusal(
        tmp_path, ssl_keystore_location=keystore, ssl_enabled_protocols="TLSv1.3",
        ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
    # A listener's own list is named as such.
    msg = refusal(tmp_path, ssl_keystore_location=keystore,
                  **{"listener.name.ssl.ssl.cipher.suites": "TLS_NOT_A_SUITE"})
    assert "listener SSL (SSL): ssl.cipher.suites: TLS_NOT_A_SUITE: no cipher suite" in msg
    # Java's renegotiation signal in a list copied from a JVM's is no suite: passed over.
    cfg = config_mod.from_mapping({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        "ssl.keystore.location": keystore, "ssl.cipher.suites":
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_EMPTY_RENEGOTIATION_INFO_SCSV"})
    assert cfg.tls["SSL"].ciphers == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_serve_stops_before_binding_on_a_bad_keystore(tmp_path: Path) -> None:
    """`logkeeper serve` with a wrong keystore password: exit 2 and the reason, with no
    port bound and no log dir touched."""
    ca = CertificateAuthority(tmp_path / "ca")
    p12 = ca.issue("broker1").pkcs12(tmp_path / "b.p12", "right")
    port, ssl_port = free_port(), free_port()
    cfg = write_config(tmp_path / "bad.toml", {
        "log.dirs": [str(tmp_path / "disk0")],
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
        "ssl.keystore.location": str(p12), "ssl.keystore.password": "wrong"})
    import sys

    out = subprocess.run([sys.executable, "-m", "daemon.cli", "serve", "--config", str(cfg)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "ssl.keystore.location" in out.stderr and "wrong password?" in out.stderr
    assert not (tmp_path / "disk0").exists()


def test_a_cluster_replicates_elects_and_shuts_down_over_tls(tmp_path: Path) -> None:
    """Three brokers whose inter-broker listener is SSL with client certificates
    required: each broker's followers fetch, and the controller sends its requests, over
    TLS with the broker's own certificate (checked against the CA, host names included).
    Under idempotent acks=all load each broker in turn is stopped (a controlled shutdown,
    asked over TLS) and started again; every acknowledged record is read back once, and
    the replicas are byte-identical. Clients on the SSL listener are served too."""
    topic, parts = "tls", 3
    cl = Cluster(tmp_path / "cl", dirs=1)
    secure, ca = secure_inter_broker(cl, "SSL", tmp_path)
    with cl:
        create(cl, topic, parts)
        restart_each_under_load(cl, topic, parts)
        # An application with a certificate reads the same records on the SSL listener.
        app = ca.issue("app", client=True)
        c = ck.Consumer({"bootstrap.servers": f"localhost:{secure[2]}",
                         "security.protocol": "ssl", "ssl.ca.location": str(ca.cert_pem),
                         "ssl.certificate.location": str(app.cert_pem),
                         "ssl.key.location": str(app.key_pem), "group.id": "tls-app",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
        c.subscribe([topic])
        ends: set[int] = set()
        n = 0
        try:
            def read() -> bool:
                nonlocal n
                for m in c.consume(500, 0.5):
                    if m.error() is None:
                        n += 1
                    elif m.error().code() == ck.KafkaError._PARTITION_EOF:
                        ends.add(m.partition())
                return len(ends) == parts
            wait_for(read, 60, "every partition read to its end over TLS")
        finally:
            c.close()
        # As many as a plain reader finds (resent records included: the acked ones were
        # checked above).
        assert n == sum(len(v) for v in consume_all(cl, topic, parts).values())
        # The brokers' own connections to each other all go to the SSL listener.
        plain = {d.port for d in cl.brokers.values()}
        for b, remote in peers_reached(cl).items():
            assert any(p in secure.values() for p in remote), (b, remote)
            assert not any(p in plain for p in remote), (b, remote)


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=90)


def test_the_tools_reach_an_ssl_listener(tmp_path: Path) -> None:
    """Kafka's way for its tools: `--command-config` (admin commands) or the client config
    file (console and perf tools) with security.protocol=SSL and Kafka's ssl.* client
    keys, a PKCS12 truststore and keystore among them, to a listener that requires
    client certificates; and `--config`, the daemon's own file, whose first listener is
    SSL. Without them the tools say they cannot reach the broker."""
    ca = CertificateAuthority(tmp_path / "ca")
    broker, admin = ca.issue("broker1"), ca.issue("admin", client=True)
    d = Daemon(tmp_path / "d")
    ssl_port = free_port()
    d.values.update({
        "listeners": f"SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{d.port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(broker.keystore_pem),
        "ssl.truststore.location": str(ca.cert_pem), "ssl.client.auth": "required"})
    d.config = write_config(d.root / "logkeeper.toml", d.values)
    props = tmp_path / "client.properties"
    trust = tmp_path / "trust.p12"
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    trust.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca.cert], BestAvailableEncryption(b"tpw")))
    props.write_text("security.protocol=SSL\n"
                     f"ssl.truststore.location={trust}\nssl.truststore.type=PKCS12\n"
                     "ssl.truststore.password=tpw\n"
                     f"ssl.keystore.location={admin.pkcs12(tmp_path / 'admin.p12', 'apw')}\n"
                     "ssl.keystore.type=PKCS12\nssl.keystore.password=apw\n")
    at = ["--bootstrap-server", f"localhost:{ssl_port}"]
    with d:
        r = cli("topics", "create", "--topic", "sec", "--partitions", "2", *at,
                "--command-config", str(props))
        assert r.returncode == 0, r.stderr
        r = cli("topics", "list", *at)  # plain Kafka at the SSL port
        assert r.returncode == 2 and f"localhost:{ssl_port}" in r.stderr, r.stderr
        # The daemon's own file: its first listener, SSL, with its keystore and truststore.
        r = cli("topics", "describe", "--topic", "sec", "--config", str(d.config))
        assert r.returncode == 0 and "PartitionCount: 2" in r.stdout, r.stderr
        r = cli("console-producer", "--topic", "sec", *at, "--producer.config", str(props),
                stdin="".join(f"line{i}\n" for i in range(20)))
        assert r.returncode == 0, r.stderr
        r = cli("producer-perf-test", "--topic", "sec", "--num-records", "500",
                "--record-size", "100", "--throughput", "-1", *at, "--producer.config",
                str(props))
        assert r.returncode == 0 and "500 records sent" in r.stdout, r.stderr
        r = cli("console-consumer", "--topic", "sec", "--from-beginning", "--max-messages",
                "520", *at, "--consumer.config", str(props), "--timeout-ms", "20000")
        assert r.returncode == 0, r.stderr
        got = r.stdout.splitlines()
        assert len(got) == 520 and sorted(v for v in got if v.startswith("line")) == sorted(
            f"line{i}" for i in range(20))
        r = cli("get-offsets", "--topic", "sec", *at, "--command-config", str(props))
        assert r.returncode == 0, r.stderr
        assert sum(int(line.rsplit(":", 1)[1]) for line in r.stdout.split()) == 520


def serial(cert: dict) -> int:
    return int(cert["serialNumber"], 16)


def test_a_keystore_is_rotated_without_a_restart(tmp_path: Path) -> None:
    """A certificate rotation as Kafka's operators do it: the keystore file replaced,
    then `configs alter --broker N --add-config
    listener.name.ssl.ssl.keystore.location=<path>` (the same path, or a new one). Each
    later TLS connection gets the new certificate while one made before keeps working;
    the change outlives a restart. A keystore of another subject or other alternative
    names, a password key, the cluster-wide default entity and a listener without TLS
    are refused, nothing changed."""
    ca = CertificateAuthority(tmp_path / "ca")
    first = ca.issue("broker1")
    first_serial = first.cert.serial_number
    d = Daemon(tmp_path / "d")
    ssl_port = free_port()
    with_ssl_listener(d, ssl_port, ssl_keystore_location=str(first.keystore_pem))

    def alter(*keys: str) -> subprocess.CompletedProcess[str]:
        return cli("configs", "alter", "--bootstrap-server", d.bootstrap, "--broker", "1",
                   "--add-config", ",".join(keys))

    with d:
        assert serial(peer_certificate(ssl_port, ca.cert_pem)) == first_serial
        held = RawClient(ssl_port, tls=ssl.create_default_context(cafile=str(ca.cert_pem)))
        try:
            second = ca.issue("broker1")  # written over the same files
            r = alter(f"listener.name.ssl.ssl.keystore.location={second.keystore_pem}")
            assert r.returncode == 0, r.stderr
            assert serial(peer_certificate(ssl_port, ca.cert_pem)) == second.cert.serial_number
            assert held.request(ApiVersionsRequest(), 0).error_code == 0  # still served
        finally:
            held.close()
        assert "listener SSL: TLS renewed, serving CN=broker1" in d.stderr()

        # Elsewhere, under a new name.
        second_ca = CertificateAuthority(tmp_path / "ca2", "second CA")
        third = second_ca.issue("broker1")
        moved = tmp_path / "rotated.pem"
        shutil.copy(third.keystore_pem, moved)
        ca2 = second_ca.cert_pem
        r = alter(f"listener.name.ssl.ssl.keystore.location={moved}")
        assert r.returncode == 0, r.stderr
        assert serial(peer_certificate(ssl_port, ca2)) == third.cert.serial_number
        shown = cli("configs", "describe", "--bootstrap-server", d.bootstrap, "--broker", "1")
        assert f"listener.name.ssl.ssl.keystore.location={moved}" in shown.stdout

        other = ca.issue("someone-else")
        elsewhere = CertificateAuthority(tmp_path / "ca3").issue("broker1", hosts=("b1.example",))
        for keys, said in (
                ([f"listener.name.ssl.ssl.keystore.location={other.keystore_pem}"],
                 "Keystore DistinguishedName does not match"),
                ([f"listener.name.ssl.ssl.keystore.location={elsewhere.keystore_pem}"],
                 "Keystore SubjectAltName does not match"),
                (["listener.name.ssl.ssl.keystore.location=/nonexistent.pem"], "nonexistent"),
                (["listener.name.ssl.ssl.keystore.password=x"], "is a password"),
                (["listener.name.plaintext.ssl.keystore.location=/x.pem"],
                 "PLAINTEXT is no SSL or SASL_SSL listener")):
            r = alter(*keys)
            assert r.returncode == 1 and said in r.stderr, (keys, r.stderr)
        r = cli("configs", "alter", "--bootstrap-server", d.bootstrap, "--broker-defaults",
                "--add-config", f"listener.name.ssl.ssl.keystore.location={moved}")
        assert r.returncode == 1 and "broker id must be specified" in r.stderr, r.stderr
        assert serial(peer_certificate(ssl_port, ca2)) == third.cert.serial_number

        d.stop()
        d.start()
        assert serial(peer_certificate(ssl_port, ca2)) == third.cert.serial_number
